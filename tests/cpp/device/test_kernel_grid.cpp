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

#include "grid_runner.h"
#include "kernel_cases.h"
#include "kernels/cpu.h"
#include "kernels/plan.h"
#include "test_sim_util.h"

namespace cai::device::kernels {
namespace {

using cai::device::test::addr;
using test::run_on_cpu;

// The grid runner as the executor of the shared cases.
struct GridExecutor final : test::Executor {
  void copy(const Operand& dst, const Operand& src, std::span<test::Buffer* const>) override {
    run_on_cpu(plan_copy("copy", dst.ptr, src.ptr, merge_operands<2>({&dst, &src}),
                         dst.layout.itemsize()));
  }
  void fill(const Operand& dst, const void* value, std::span<test::Buffer* const>) override {
    run_on_cpu(plan_fill("fill", dst.ptr, merge_operands<1>({&dst}), dst.layout.itemsize(), value));
  }
  void add(ElementType type, std::span<const Operand> o, std::span<test::Buffer* const>) override {
    run_on_cpu(plan_elementwise<3>("add", ElementwiseOp::add, type, {o[0].ptr, o[1].ptr, o[2].ptr},
                                   merge_operands<3>({&o[0], &o[1], &o[2]})));
  }
};

TEST(kernel_grid, copy_every_layout_size_and_alignment) {
  GridExecutor ex;
  test::copy_cases(ex);
}

TEST(kernel_grid, fill_every_layout_size_and_alignment) {
  GridExecutor ex;
  test::fill_cases(ex);
}

TEST(kernel_grid, add_every_type_and_layout) {
  GridExecutor ex;
  for (int t = 0; t < element_type_count; ++t) test::add_cases(ex, static_cast<ElementType>(t));
}

TEST(kernel_grid, copy_plans) {
  test::Buffer a(64 * 64 * 4 + 64, 1), b(64 * 64 * 4 + 64, 2);
  auto plan = [&](const char* d, const char* r, std::int64_t off = 0) {
    const Operand x = test::operand2(a, off, d, 64, 64, 4);
    const Operand y = test::operand2(b, off, r, 64, 64, 4);
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

TEST(kernel_grid, fill_plans_wide_words) {
  test::Buffer b(4096 + 64, 1);
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

TEST(kernel_grid, add_plans) {
  // Dense and 16-byte aligned: the vector path; otherwise one element per thread.
  test::Buffer b(4096, 1);
  auto variant = [&](std::int64_t off, ElementType type, std::int64_t size) {
    const Operand o{b.at(off), Layout::c_contiguous(Dims{100}, size), false};
    return plan_elementwise<3>("add", ElementwiseOp::add, type, {o.ptr, o.ptr, o.ptr},
                               merge_operands<3>({&o, &o, &o}))
        .variant;
  };
  EXPECT_EQ(variant(0, ElementType::f32, 4), Variant::contiguous);
  EXPECT_EQ(variant(4, ElementType::f32, 4), Variant::strided32);
  EXPECT_EQ(variant(16, ElementType::c128, 16), Variant::contiguous);
  EXPECT_EQ(variant(8, ElementType::c128, 16), Variant::strided32);
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
