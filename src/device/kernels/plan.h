#pragma once

// Internal, host only: how an operation is laid out for an executor, the same for the CUDA
// launch and the CPU loop: the operands' dims merged (cai/core/strided.h) and the word width of
// the data-movement kernels; and, for the kernels, the plan of one launch: which entry
// (variant), its grid and its argument (plan.cpp; the rules are in docs/cuda-backend.md,
// "Kernels").

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "cai/core/strided.h"
#include "cai/device/backend.h"
#include "kernels/launch.h"

namespace cai::device::kernels {

/// The operands' merged dims (all operands have one shape).
template <std::size_t K>
MergedDims<K> merge_operands(const std::array<const Operand*, K>& ops) noexcept {
  std::array<Strides, K> strides;
  for (std::size_t k = 0; k < K; ++k) strides[k] = ops[k]->layout.strides();
  return merge_dims<K>(ops[0]->layout.shape(), strides);
}

/// log2 of the widest word (16, 8, 4, 2 or 1 bytes) that divides the item size, every pointer
/// and every merged stride, so that every word access is aligned.
template <std::size_t K>
int word_width_log2(std::int64_t itemsize, const std::array<std::uint64_t, K>& ptrs,
                    const MergedDims<K>& dims) noexcept {
  auto bits = static_cast<std::uint64_t>(itemsize) | 16;
  for (std::uint64_t p : ptrs) bits |= p;
  for (std::size_t k = 0; k < K; ++k) {
    for (int d = 0; d < dims.ndim; ++d) {
      bits |= static_cast<std::uint64_t>(dims.strides[k][static_cast<std::size_t>(d)]);
    }
  }
  return std::countr_zero(bits);  // the lowest set bit, at most 4 (16 bytes)
}

/// One kernel launch: the entry (kernel_index), its 1-D grid of blocks of block_x x block_y
/// threads, and its argument.
struct LaunchPlan {
  int index = 0;
  Variant variant = Variant::strided64;
  std::uint32_t grid = 0;
  std::uint32_t block_x = kBlockSize;
  std::uint32_t block_y = 1;
  KernelParams params;  // set by the planners: the fields a kernel reads, not all 576 bytes
};

/// dst = src over the merged dims of both (operands {dst, src}, item size `itemsize`).
LaunchPlan plan_copy(std::string_view where, std::uint64_t dst, std::uint64_t src,
                     const MergedDims<2>& dims, std::int64_t itemsize);
/// Every item of dst = the `itemsize` bytes at `value`.
LaunchPlan plan_fill(std::string_view where, std::uint64_t dst, const MergedDims<1>& dims,
                     std::int64_t itemsize, const void* value);
/// operands[0] = op(operands[1], ...) on `type`, K = 1 + the operation's inputs.
template <std::size_t K>
LaunchPlan plan_elementwise(std::string_view where, ElementwiseOp op, ElementType type,
                            const std::array<std::uint64_t, K>& ptrs, const MergedDims<K>& dims);

}  // namespace cai::device::kernels
