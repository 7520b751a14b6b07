#pragma once

// The cases of the kernel tests, for any executor: the CPU grid runner over the bodies the GPU
// runs (test_kernel_grid.cpp) and the CUDA backend on a GPU (test_cuda_loader.cpp). Each case
// fills host buffers with random bytes, runs the reference (the CPU executor, cpu.cpp) on one
// copy and the executor on another, and compares every byte, the gaps between elements too.
// Layouts C, F, transposed, reversed, stepped and padded; 0-d-like 1x1 and empty shapes; odd
// sizes; pointers misaligned by 1 to 8 bytes; item sizes 1 to 24; every element type.

#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "cai/device/backend.h"
#include "kernels/cpu.h"
#include "kernels/elementwise.h"

namespace cai::device::kernels::test {

/// A host buffer of random bytes, 16-byte aligned.
struct Buffer {
  std::vector<Word16> words;
  Buffer(std::size_t bytes, unsigned seed) : words(bytes / 16 + 2) {
    std::mt19937 gen(seed);
    auto* b = reinterpret_cast<unsigned char*>(words.data());
    for (std::size_t i = 0; i < size(); ++i) b[i] = static_cast<unsigned char>(gen());
  }
  std::uint64_t base() const { return reinterpret_cast<std::uintptr_t>(words.data()); }
  std::size_t size() const { return words.size() * sizeof(Word16); }
  std::uint64_t at(std::int64_t offset) const {
    return base() + static_cast<std::uint64_t>(offset);
  }
  bool operator==(const Buffer& o) const {
    return std::memcmp(words.data(), o.words.data(), size()) == 0;
  }
};

/// A 2-D layout kind over (n0, n1) items of s bytes: its strides, and where item [0, 0] is.
struct Kind2 {
  Dims strides;
  std::int64_t start;
};
inline Kind2 kind2(const std::string& name, std::int64_t n0, std::int64_t n1, std::int64_t s) {
  if (name == "C") return {{n1 * s, s}, 0};
  if (name == "F") return {{s, n0 * s}, 0};
  if (name == "reversed") return {{-n1 * s, -s}, std::max<std::int64_t>(0, (n0 * n1 - 1) * s)};
  if (name == "stepped") return {{2 * n1 * s, 2 * s}, 0};  // every 2nd column
  return {{(n1 + 3) * s, s}, 0};                           // "padded" rows
}
/// Bytes enough for every kind and offset.
constexpr std::int64_t footprint(std::int64_t n0, std::int64_t n1, std::int64_t s) {
  return 2 * (n0 + 1) * (n1 + 3) * s + 64;
}
inline Operand operand2(const Buffer& b, std::int64_t offset, const std::string& kind,
                        std::int64_t n0, std::int64_t n1, std::int64_t s) {
  const Kind2 k = kind2(kind, n0, n1, s);
  return {b.at(offset + k.start), Layout(Dims{n0, n1}, k.strides, s), false};
}

/// Does an operation on operands that point into host buffers (`buffers`: all of them, so
/// that an executor on a device can move them there and back).
struct Executor {
  virtual ~Executor() = default;
  virtual void copy(const Operand& dst, const Operand& src, std::span<Buffer* const> buffers) = 0;
  virtual void fill(const Operand& dst, const void* value, std::span<Buffer* const> buffers) = 0;
  virtual void add(ElementType type, std::span<const Operand> operands,
                   std::span<Buffer* const> buffers) = 0;
};

inline void copy_cases(Executor& ex) {
  const std::pair<std::int64_t, std::int64_t> shapes[] = {{33, 65}, {64, 64}, {1, 1},   {31, 1},
                                                          {1, 40},  {0, 5},   {17, 200}};
  for (auto [n0, n1] : shapes)
    for (std::int64_t s : {1, 2, 4, 8, 12, 16})
      for (std::int64_t off : {0, 1, 4, 8})
        for (const char* d : {"C", "F", "stepped", "padded"})
          for (const char* r : {"C", "F", "reversed", "stepped"}) {
            const auto bytes = static_cast<std::size_t>(footprint(n0, n1, s));
            Buffer src(bytes, 1), want(bytes, 2), got = want;
            cpu_copy(operand2(want, off, d, n0, n1, s), operand2(src, off, r, n0, n1, s));
            if (n0 * n1 > 0) {
              Buffer* buffers[] = {&got, &src};
              ex.copy(operand2(got, off, d, n0, n1, s), operand2(src, off, r, n0, n1, s), buffers);
            }
            ASSERT_TRUE(got == want) << n0 << "x" << n1 << " itemsize " << s << " offset " << off
                                     << ": " << d << " <- " << r;
          }
}

inline void fill_cases(Executor& ex) {
  for (std::int64_t n : {1, 7, 64, 1001})
    for (std::int64_t s : {1, 2, 3, 4, 8, 12, 16, 24})
      for (std::int64_t off : {0, 1, 2, 4, 8})
        for (const char* k : {"C", "stepped", "padded", "reversed"}) {
          const std::int64_t n0 = 3;
          const auto bytes = static_cast<std::size_t>(footprint(n0, n, s));
          Buffer want(bytes, 3), got = want;
          std::vector<unsigned char> value(static_cast<std::size_t>(s));
          for (std::size_t i = 0; i < value.size(); ++i)
            value[i] = static_cast<unsigned char>(0xa0 + i);
          cpu_fill(operand2(want, off, k, n0, n, s), value.data());
          Buffer* buffers[] = {&got};
          ex.fill(operand2(got, off, k, n0, n, s), value.data(), buffers);
          ASSERT_TRUE(got == want)
              << n0 << "x" << n << " itemsize " << s << " offset " << off << " " << k;
        }
}

/// add on every element type: dense (aligned: the vector path; misaligned by one element),
/// 2-D with b transposed, 2-D with a stepped output.
inline void add_cases(Executor& ex, ElementType type) {
  const auto s = static_cast<std::int64_t>(element_size(type));
  for (std::int64_t n : {1, 7, 64, 1001})
    for (std::int64_t off : {std::int64_t{0}, s})
      for (const char* layout : {"dense", "2-D, b transposed", "2-D, stepped out"}) {
        const std::int64_t n0 = layout[0] == 'd' ? 1 : 3;
        const auto bytes = static_cast<std::size_t>(footprint(n0, n, s));
        Buffer a(bytes, 4), b(bytes, 5), want(bytes, 6), got = want;
        const char* bk = layout[5] == 'b' ? "F" : "C";
        const char* ok = layout[5] == 's' ? "stepped" : "C";
        auto ops = [&](const Buffer& out) {
          return std::array<Operand, 3>{operand2(out, off, ok, n0, n, s),
                                        operand2(a, off, "C", n0, n, s),
                                        operand2(b, off, bk, n0, n, s)};
        };
        cpu_elementwise(ElementwiseOp::add, type, ops(want));
        Buffer* buffers[] = {&got, &a, &b};
        ex.add(type, ops(got), buffers);
        ASSERT_TRUE(got == want) << info(type).name << " n " << n << " offset " << off << " "
                                 << layout;
      }
}

}  // namespace cai::device::kernels::test
