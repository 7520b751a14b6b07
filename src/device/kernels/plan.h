#pragma once

// Internal, host only: how an operation is laid out for an executor (the CUDA launch or the
// CPU loop), the same for both: the operands' dims merged (cai/core/strided.h) and the word
// width of the data-movement kernels.

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>

#include "cai/core/strided.h"
#include "cai/device/backend.h"

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

}  // namespace cai::device::kernels
