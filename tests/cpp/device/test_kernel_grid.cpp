// The CUDA kernels' bodies (src/device/kernels/bodies.h) run on the CPU over the grid that
// plan.h plans for the GPU (grid_runner.h), against the CPU executor (cpu.cpp) as the
// reference: every variant, layouts C/F/transposed/reversed/stepped/padded, 0-d and empty,
// odd sizes, misaligned pointers, every element type, and index spaces past 2^31 and 2^32
// elements (only some blocks run there, over memory that is reserved, not filled).

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "device/kernels/cpu.h"
#include "device/kernels/plan.h"
#include "grid_runner.h"
#include "test_sim_util.h"

namespace cai::device::kernels {
namespace {

using cai::device::test::addr;
using test::run_on_cpu;

// A host buffer of random bytes, 16-byte aligned.
struct Buffer {
  std::vector<Word16> words;
  explicit Buffer(std::size_t bytes, unsigned seed) : words(bytes / 16 + 2) {
    std::mt19937 gen(seed);
    auto* b = reinterpret_cast<unsigned char*>(words.data());
    for (std::size_t i = 0; i < words.size() * 16; ++i) b[i] = static_cast<unsigned char>(gen());
  }
  std::uint64_t at(std::int64_t offset) const { return addr(words.data()) + offset; }
  bool operator==(const Buffer& o) const {
    return std::memcmp(words.data(), o.words.data(), words.size() * 16) == 0;
  }
};

// A 2-D layout kind over (n0, n1) items of s bytes: its strides and where item [0, 0] is.
struct Kind2 {
  std::string name;
  Dims strides;
  std::int64_t start;
};
Kind2 kind2(const std::string& name, std::int64_t n0, std::int64_t n1, std::int64_t s) {
  if (name == "C") return {name, {n1 * s, s}, 0};
  if (name == "F") return {name, {s, n0 * s}, 0};
  if (name == "reversed") {  // both axes, as a[::-1, ::-1] of a C array
    return {name, {-n1 * s, -s}, std::max<std::int64_t>(0, (n0 * n1 - 1) * s)};
  }
  if (name == "stepped") return {name, {2 * n1 * s, 2 * s}, 0};  // every 2nd column
  return {name, {(n1 + 3) * s, s}, 0};                           // "padded" rows
}
constexpr std::int64_t footprint(std::int64_t n0, std::int64_t n1, std::int64_t s) {
  return 2 * (n0 + 1) * (n1 + 3) * s + 64;  // enough for every kind and offset
}

Operand operand2(const Buffer& b, std::int64_t offset, const Kind2& k, std::int64_t n0,
                 std::int64_t n1, std::int64_t s) {
  return {b.at(offset + k.start), Layout(Dims{n0, n1}, k.strides, s), false};
}

const std::vector<std::pair<std::int64_t, std::int64_t>> kShapes = {
    {33, 65}, {64, 64}, {1, 1}, {31, 1}, {1, 40}, {0, 5}, {17, 200}};

TEST(kernel_grid, copy_every_layout_size_and_alignment) {
  for (auto [n0, n1] : kShapes)
    for (std::int64_t s : {1, 2, 4, 8, 12, 16})
      for (std::int64_t off : {0, 1, 4, 8})
        for (const char* d : {"C", "F", "stepped", "padded"})
          for (const char* r : {"C", "F", "reversed", "stepped"}) {
            const std::int64_t bytes = footprint(n0, n1, s);
            Buffer src(static_cast<std::size_t>(bytes), 1),
                want(static_cast<std::size_t>(bytes), 2), got = want;
            const Kind2 dk = kind2(d, n0, n1, s), sk = kind2(r, n0, n1, s);
            const Operand so = operand2(src, off, sk, n0, n1, s);
            cpu_copy(operand2(want, off, dk, n0, n1, s), so);
            const Operand go = operand2(got, off, dk, n0, n1, s);
            if (n0 * n1 > 0) {
              run_on_cpu(plan_copy("copy", go.ptr, so.ptr, merge_operands<2>({&go, &so}), s));
            }
            ASSERT_TRUE(got == want) << n0 << "x" << n1 << " itemsize " << s << " offset " << off
                                     << ": " << d << " <- " << r;
          }
}

TEST(kernel_grid, copy_plans) {
  Buffer a(64 * 64 * 4 + 64, 1), b(64 * 64 * 4 + 64, 2);
  auto plan = [&](const char* d, const char* r, std::int64_t off = 0) {
    const Operand x = operand2(a, off, kind2(d, 64, 64, 4), 64, 64, 4);
    const Operand y = operand2(b, off, kind2(r, 64, 64, 4), 64, 64, 4);
    return plan_copy("copy", x.ptr, y.ptr, merge_operands<2>({&x, &y}), 4);
  };
  // A transpose goes through the shared-memory tile, 32x8 threads per 32x32 tile.
  const LaunchPlan t = plan("C", "F");
  EXPECT_EQ(t.variant, Variant::tile);
  EXPECT_EQ(t.grid, 4u);
  EXPECT_EQ(t.block_x * t.block_y, static_cast<std::uint32_t>(kBlockSize));
  EXPECT_EQ(kernel_names[static_cast<std::size_t>(t.index)], "cai_copy_4_tile");
  EXPECT_EQ(plan("F", "C").variant, Variant::tile);
  // Dense on both sides: 16-byte words when the pointers allow, narrower when not.
  EXPECT_EQ(kernel_names[static_cast<std::size_t>(plan("C", "C").index)], "cai_copy_16_contiguous");
  EXPECT_EQ(kernel_names[static_cast<std::size_t>(plan("C", "C", 4).index)],
            "cai_copy_4_contiguous");
  // The rest: one item per thread, 32-bit index arithmetic.
  EXPECT_EQ(kernel_names[static_cast<std::size_t>(plan("C", "stepped").index)],
            "cai_copy_4_strided32");
  EXPECT_EQ(plan("C", "reversed").variant, Variant::strided32);
}

TEST(kernel_grid, fill_every_layout_size_and_alignment) {
  for (std::int64_t n : {1, 7, 64, 1001})
    for (std::int64_t s : {1, 2, 3, 4, 8, 12, 16, 24})
      for (std::int64_t off : {0, 1, 2, 4, 8})
        for (const char* k : {"C", "stepped", "padded", "reversed"}) {
          const std::int64_t n0 = 3, bytes = footprint(n0, n, s);
          Buffer want(static_cast<std::size_t>(bytes), 3), got = want;
          std::vector<unsigned char> value(static_cast<std::size_t>(s));
          for (std::size_t i = 0; i < value.size(); ++i)
            value[i] = static_cast<unsigned char>(0xa0 + i);
          const Kind2 kk = kind2(k, n0, n, s);
          cpu_fill(operand2(want, off, kk, n0, n, s), value.data());
          const Operand go = operand2(got, off, kk, n0, n, s);
          run_on_cpu(plan_fill("fill", go.ptr, merge_operands<1>({&go}), s, value.data()));
          ASSERT_TRUE(got == want)
              << n0 << "x" << n << " itemsize " << s << " offset " << off << " " << k;
        }
}

TEST(kernel_grid, fill_plans_wide_words) {
  Buffer b(4096 + 64, 1);
  const float one = 1.0f;
  auto name = [&](std::int64_t off, std::int64_t n) {
    const Operand o{b.at(off), Layout::c_contiguous(Dims{n}, 4), false};
    const LaunchPlan p = plan_fill("fill", o.ptr, merge_operands<1>({&o}), 4, &one);
    return std::string(kernel_names[static_cast<std::size_t>(p.index)]);
  };
  EXPECT_EQ(name(0, 1000), "cai_fill_16_contiguous");  // the value repeated 4 times a word
  EXPECT_EQ(name(8, 1000), "cai_fill_8_contiguous");
  EXPECT_EQ(name(0, 1001), "cai_fill_4_contiguous");
}

template <class T>
void check_add(ElementType type) {
  for (std::int64_t n : {1, 7, 64, 1001})
    for (std::int64_t off : {std::int64_t{0}, static_cast<std::int64_t>(sizeof(T))})
      for (const char* layout : {"dense", "2-D, b transposed", "2-D, stepped out"}) {
        const auto s = static_cast<std::int64_t>(sizeof(T));
        const std::int64_t n0 = layout[0] == 'd' ? 1 : 3, bytes = footprint(n0, n, s);
        Buffer a(static_cast<std::size_t>(bytes), 4), bb(static_cast<std::size_t>(bytes), 5),
            want(static_cast<std::size_t>(bytes), 6), got = want;
        const Kind2 ck = kind2("C", n0, n, s);
        const Kind2 bk = layout[5] == 'b' ? kind2("F", n0, n, s) : ck;
        const Kind2 ok = layout[5] == 's' ? kind2("stepped", n0, n, s) : ck;
        auto ops = [&](const Buffer& out) {
          return std::array<Operand, 3>{operand2(out, off, ok, n0, n, s),
                                        operand2(a, off, ck, n0, n, s),
                                        operand2(bb, off, bk, n0, n, s)};
        };
        cpu_elementwise(ElementwiseOp::add, type, ops(want));
        const auto g = ops(got);
        const LaunchPlan plan =
            plan_elementwise<3>("add", ElementwiseOp::add, type, {g[0].ptr, g[1].ptr, g[2].ptr},
                                merge_operands<3>({&g[0], &g[1], &g[2]}));
        if (layout[0] == 'd') {
          EXPECT_EQ(plan.variant, off % 16 == 0 ? Variant::contiguous : Variant::strided32)
              << info(type).name;
        }
        run_on_cpu(plan);
        ASSERT_TRUE(got == want) << info(type).name << " n " << n << " offset " << off << " "
                                 << layout;
      }
}

TEST(kernel_grid, add_every_type_and_layout) {
#define CAI_TEST_TYPE(ctx, name, kind, value) check_add<value>(ElementType::name);
  CAI_ELEMENT_TYPES(CAI_TEST_TYPE, _)
#undef CAI_TEST_TYPE
}

TEST(kernel_grid, index_width_follows_the_extent) {
  // Planning touches no memory: a stepped fill of 2^32 - 1 and of 2^32 items.
  auto variant = [](std::int64_t n0, std::int64_t n1) {
    const Operand o{0x10000, Layout(Dims{n0, n1}, Dims{2 * n1, 1}, 1), false};
    const char v = 7;
    return plan_fill("fill", o.ptr, merge_operands<1>({&o}), 1, &v).variant;
  };
  EXPECT_EQ(variant(65535, 65537), Variant::strided32);  // 2^32 - 1 items
  EXPECT_EQ(variant(65536, 65536), Variant::strided64);  // 2^32 items
}

// A stepped fill of n0 x n1 bytes (rows `pitch` apart) over reserved memory, running only the
// first block, the last one, and the ones holding item `probe`; checks every item those blocks
// cover and the byte after each row they end.
void check_huge_fill(std::int64_t n0, std::int64_t n1, std::int64_t pitch, std::uint64_t probe,
                     Variant expected) {
  const auto bytes = static_cast<std::size_t>(n0 * pitch);
  void* mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  const auto base = addr(mem);
  const Operand o{base, Layout(Dims{n0, n1}, Dims{pitch, 1}, 1), false};
  const unsigned char v = 0x5a;
  const LaunchPlan plan = plan_fill("fill", o.ptr, merge_operands<1>({&o}), 1, &v);
  EXPECT_EQ(plan.variant, expected);
  const auto probe_block = static_cast<std::uint32_t>(probe / kBlockSize);
  const std::vector<std::uint32_t> blocks{0, probe_block - 1, probe_block, plan.grid - 1};
  run_on_cpu(plan, blocks);
  const auto* p = static_cast<const unsigned char*>(mem);
  const auto total = static_cast<std::uint64_t>(n0 * n1);
  for (std::uint32_t b : blocks) {
    for (std::uint64_t e = std::uint64_t{b} * kBlockSize;
         e < std::min<std::uint64_t>(total, (std::uint64_t{b} + 1) * kBlockSize); ++e) {
      const std::uint64_t at = e / n1 * pitch + e % n1;
      ASSERT_EQ(p[at], v) << "item " << e;
      if (e % n1 == static_cast<std::uint64_t>(n1 - 1)) ASSERT_EQ(p[at + 1], 0) << "after " << e;
    }
  }
  munmap(mem, bytes);
}

TEST(kernel_grid, past_two_to_the_31_items) {
  const std::int64_t n1 = (std::int64_t{1} << 30) + 500;
  check_huge_fill(2, n1, n1 + 524, std::uint64_t{1} << 31, Variant::strided32);
}

TEST(kernel_grid, past_two_to_the_32_items) {
  const std::int64_t n1 = std::int64_t{1} << 30;
  check_huge_fill(5, n1, n1 + 64, std::uint64_t{1} << 32, Variant::strided64);
}

}  // namespace
}  // namespace cai::device::kernels
