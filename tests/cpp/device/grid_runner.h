#pragma once

// The CPU form of a CUDA launch, for the tests: the entry's body (bodies.h, the code the GPU
// runs) over the planned grid (plan.h), a block at a time, the threads of a block in order, a
// tiled body's phase 0 for every thread of the block before its phase 1 (the barrier). Runs
// every block, or the chosen ones (to check the far end of an index space too large to fill).

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "kernels/bodies.h"
#include "kernels/plan.h"

namespace cai::device::kernels::test {

template <class Body, int W>
void run_blocks(const LaunchPlan& plan, const std::vector<std::uint32_t>& blocks) {
  std::vector<word_t<W>> shared(static_cast<std::size_t>(kTile * (kTile + 1)));
  auto block = [&](std::uint32_t b) {
    for (std::uint32_t ty = 0; ty < plan.block_y; ++ty)
      for (std::uint32_t tx = 0; tx < plan.block_x; ++tx)
        Body::template run<0>(plan.params, Coord{b, tx, ty}, shared.data());
    if constexpr (Body::tiled) {
      for (std::uint32_t ty = 0; ty < plan.block_y; ++ty)
        for (std::uint32_t tx = 0; tx < plan.block_x; ++tx)
          Body::template run<1>(plan.params, Coord{b, tx, ty}, shared.data());
    }
  };
  if (blocks.empty()) {
    for (std::uint32_t b = 0; b < plan.grid; ++b) block(b);
  } else {
    for (std::uint32_t b : blocks) block(b);
  }
}

/// Runs the planned launch on the CPU; `blocks` empty: the whole grid.
inline void run_on_cpu(const LaunchPlan& plan, const std::vector<std::uint32_t>& blocks = {}) {
  switch (plan.index) {
#define CAI_TEST_DATA_CASE(kernel, bytes, variant)                                            \
  case kernel_index(DataKernel::kernel, std::countr_zero(unsigned{bytes}), Variant::variant): \
    return run_blocks<CAI_DATA_BODY(kernel, bytes, variant), bytes>(plan, blocks);
#define CAI_TEST_DATA_WIDTH(kernel, bytes, log2) \
  CAI_KERNEL_VARIANTS(CAI_TEST_DATA_CASE, kernel, bytes)
#define CAI_TEST_DATA(ctx, kernel, operands) CAI_WORD_WIDTHS(CAI_TEST_DATA_WIDTH, kernel)
    CAI_DATA_KERNELS(CAI_TEST_DATA, _)
#define CAI_TEST_OP_CASE(op, type, variant)                                  \
  case kernel_index(ElementwiseOp::op, ElementType::type, Variant::variant): \
    return run_blocks<CAI_ELEMENTWISE_BODY(op, type, variant), 1>(plan, blocks);
#define CAI_TEST_OP_TYPE(op, type, kind, extended, value) \
  CAI_KERNEL_VARIANTS(CAI_TEST_OP_CASE, op, type)
#define CAI_TEST_OP(ctx, op, inputs, summary) CAI_ELEMENT_TYPES(CAI_TEST_OP_TYPE, op)
    CAI_ELEMENTWISE_OPS(CAI_TEST_OP, _)
#undef CAI_TEST_DATA_CASE
#undef CAI_TEST_DATA_WIDTH
#undef CAI_TEST_DATA
#undef CAI_TEST_OP_CASE
#undef CAI_TEST_OP_TYPE
#undef CAI_TEST_OP
    default:
      FAIL() << "no entry " << plan.index;
  }
}

}  // namespace cai::device::kernels::test
