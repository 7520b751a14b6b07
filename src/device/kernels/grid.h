#pragma once

// Internal: the CPU form of a launch of one of cai's kernels: the entry's body (bodies.h, the
// code the GPU runs) over the launch's grid, a block at a time, the threads of a block in
// order, a tiled body's phase 0 for every thread of the block before its phase 1 (the
// barrier). The simulated driver runs cuLaunchKernel with it; the tests run chosen blocks of
// index spaces too large to fill.

#include <bit>
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/bodies.h"

namespace cai::device::kernels {

template <class Body, int W>
void run_blocks(const KernelParams& params, std::uint32_t grid, std::uint32_t block_x,
                std::uint32_t block_y, std::span<const std::uint32_t> blocks) {
  std::vector<word_t<W>> shared(static_cast<std::size_t>(kTile * (kTile + 1)));
  auto block = [&](std::uint32_t b) {
    for (std::uint32_t ty = 0; ty < block_y; ++ty)
      for (std::uint32_t tx = 0; tx < block_x; ++tx)
        Body::template run<0>(params, Coord{b, tx, ty}, shared.data());
    if constexpr (Body::tiled) {
      for (std::uint32_t ty = 0; ty < block_y; ++ty)
        for (std::uint32_t tx = 0; tx < block_x; ++tx)
          Body::template run<1>(params, Coord{b, tx, ty}, shared.data());
    }
  };
  if (blocks.empty()) {
    for (std::uint32_t b = 0; b < grid; ++b) block(b);
  } else {
    for (std::uint32_t b : blocks) block(b);
  }
}

/// Runs entry `index` (kernel_index) over a 1-D grid of blocks of block_x x block_y threads:
/// every block, or only `blocks`. Returns false for an index that names no entry.
inline bool run_grid(int index, const KernelParams& params, std::uint32_t grid,
                     std::uint32_t block_x, std::uint32_t block_y,
                     std::span<const std::uint32_t> blocks = {}) {
  switch (index) {
#define CAI_DETAIL_DATA_CASE(kernel, bytes, variant)                                          \
  case kernel_index(DataKernel::kernel, std::countr_zero(unsigned{bytes}), Variant::variant): \
    run_blocks<CAI_DATA_BODY(kernel, bytes, variant), bytes>(params, grid, block_x, block_y,  \
                                                             blocks);                         \
    return true;
#define CAI_DETAIL_DATA_WIDTH(kernel, bytes, log2) \
  CAI_KERNEL_VARIANTS(CAI_DETAIL_DATA_CASE, kernel, bytes)
#define CAI_DETAIL_DATA(ctx, kernel, operands) CAI_WORD_WIDTHS(CAI_DETAIL_DATA_WIDTH, kernel)
    CAI_DATA_KERNELS(CAI_DETAIL_DATA, _)
#define CAI_DETAIL_OP_CASE(op, type, variant)                                              \
  case kernel_index(ElementwiseOp::op, ElementType::type, Variant::variant):               \
    run_blocks<CAI_ELEMENTWISE_BODY(op, type, variant), 1>(params, grid, block_x, block_y, \
                                                           blocks);                        \
    return true;
#define CAI_DETAIL_OP_TYPE(op, type, kind, extended, value) \
  CAI_KERNEL_VARIANTS(CAI_DETAIL_OP_CASE, op, type)
#define CAI_DETAIL_OP(ctx, op, inputs, summary) CAI_ELEMENT_TYPES(CAI_DETAIL_OP_TYPE, op)
    CAI_ELEMENTWISE_OPS(CAI_DETAIL_OP, _)
#undef CAI_DETAIL_DATA_CASE
#undef CAI_DETAIL_DATA_WIDTH
#undef CAI_DETAIL_DATA
#undef CAI_DETAIL_OP_CASE
#undef CAI_DETAIL_OP_TYPE
#undef CAI_DETAIL_OP
    default:
      return false;
  }
}

/// What an entry is, decoded from its index (the inverse of kernel_index).
struct EntryInfo {
  bool data = false;  ///< a data-movement kernel (else an elementwise operation)
  DataKernel kernel{};
  int width = 1;  ///< data movement: bytes per word
  ElementwiseOp op{};
  ElementType type{};
  Variant variant{};
  int operands = 0;  ///< operand 0 is written, the others read
};

inline EntryInfo entry_info(int index) noexcept {
  EntryInfo e;
  e.variant = static_cast<Variant>(index % variant_count);
  const int row = index / variant_count;
  const int data_rows = data_kernel_count * word_width_count;
  if (row < data_rows) {
    e.data = true;
    e.kernel = static_cast<DataKernel>(row / word_width_count);
    e.width = 1 << (row % word_width_count);
    e.operands = e.kernel == DataKernel::copy ? operands_copy : operands_fill;
  } else {
    e.op = static_cast<ElementwiseOp>((row - data_rows) / element_type_count);
    e.type = static_cast<ElementType>((row - data_rows) % element_type_count);
    e.operands = 1 + info(e.op).inputs;
  }
  return e;
}

}  // namespace cai::device::kernels
