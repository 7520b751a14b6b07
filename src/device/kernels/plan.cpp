#include "kernels/plan.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "cai/core/error.h"
#include "kernels/bodies.h"

namespace cai::device::kernels {

namespace {

constexpr std::uint64_t k32 = std::uint64_t{1} << 32;

// The argument of a launch over the merged dims: pointers, shape, strides, item count.
template <std::size_t K>
// Sets the plan's parameters in place, those a kernel reads: the dims past ndim and the fill
// value of other kernels are left unset (the struct is 576 bytes, and zeroing it and copying
// it cost more than the rest of the plan).
void set_params(std::string_view where, const std::array<std::uint64_t, K>& ptrs,
                const MergedDims<K>& dims, KernelParams& p) {
  static_assert(K <= CAI_KERNEL_MAX_OPERANDS);
  if (dims.ndim > CAI_CUDA_MAX_RANK) {
    throw_error(Errc::not_implemented,
                std::string(where) + ": " + std::to_string(dims.ndim) +
                    " dimensions remain after merging contiguous ones; the CUDA kernels take at "
                    "most " +
                    std::to_string(CAI_CUDA_MAX_RANK));
  }
  p.total = 1;
  p.ndim = dims.ndim;
  p.words = 1;
  p.reserved = 0;
  for (std::uint64_t& ptr : p.ptr) ptr = 0;
  for (int d = 0; d < dims.ndim; ++d) {
    p.shape[d] = dims.shape[static_cast<std::size_t>(d)];
    p.total *= p.shape[d];
  }
  for (std::size_t k = 0; k < K; ++k) {
    p.ptr[k] = ptrs[k];
    for (int d = 0; d < dims.ndim; ++d)
      p.strides[k][d] = dims.strides[k][static_cast<std::size_t>(d)];
  }
}

// Blocks for `units` threads' worth of work (one unit per thread).
std::uint32_t blocks_for(std::string_view where, std::uint64_t units, std::uint64_t per_block) {
  const std::uint64_t blocks = (units + per_block - 1) / per_block;
  if (blocks > static_cast<std::uint64_t>(std::numeric_limits<std::int32_t>::max())) {
    throw_error(Errc::not_implemented, std::string(where) + ": " + std::to_string(units) +
                                           " items are more than one launch covers");
  }
  return static_cast<std::uint32_t>(std::max<std::uint64_t>(blocks, 1));
}

// Every operand dense in one dim (or a single item): stride == item size.
template <std::size_t K>
bool dense_1d(const MergedDims<K>& dims, std::int64_t itemsize) {
  if (dims.ndim == 0) return true;
  if (dims.ndim > 1) return false;
  for (std::size_t k = 0; k < K; ++k) {
    if (dims.strides[k][0] != itemsize) return false;
  }
  return true;
}

// One item per thread over the merged dims, 32-bit index arithmetic when the count allows.
void plan_strided(std::string_view where, LaunchPlan& plan) {
  const auto total = static_cast<std::uint64_t>(plan.params.total);
  plan.variant = total < k32 ? Variant::strided32 : Variant::strided64;
  plan.grid = blocks_for(where, total, kBlockSize);
}

// The widest word (16 bytes at most) dividing every pointer and the byte count.
template <std::size_t K>
std::uint64_t word_bytes(const std::array<std::uint64_t, K>& ptrs, std::uint64_t bytes) {
  std::uint64_t bits = bytes | 16;
  for (std::uint64_t p : ptrs) bits |= p;
  return bits & (~bits + 1);
}

// The merged dim in which an operand steps fastest (its smallest |stride|).
int fastest_dim(const MergedDims<2>& dims, std::size_t k) {
  return std::llabs(dims.strides[k][1]) < std::llabs(dims.strides[k][0]) ? 1 : 0;
}

}  // namespace

LaunchPlan plan_copy(std::string_view where, std::uint64_t dst, std::uint64_t src,
                     const MergedDims<2>& dims, std::int64_t itemsize) {
  const std::array<std::uint64_t, 2> ptrs{dst, src};
  LaunchPlan plan;
  set_params(where, ptrs, dims, plan.params);
  KernelParams& p = plan.params;
  const auto items = static_cast<std::uint64_t>(p.total);
  const std::uint64_t bytes = items * static_cast<std::uint64_t>(itemsize);
  if (dense_1d(dims, itemsize) && bytes / word_bytes(ptrs, bytes) < k32) {
    // Both dense: the bytes as words of the widest width the addresses and the size allow.
    const std::uint64_t w = word_bytes(ptrs, bytes);
    p.ndim = 0;
    p.total = static_cast<std::int64_t>(bytes / w);
    plan.variant = Variant::contiguous;
    plan.grid = blocks_for(where, bytes / w, kBlockSize);
    plan.index = kernel_index(DataKernel::copy, std::countr_zero(w), Variant::contiguous);
    return plan;
  }
  const int log2 = word_width_log2<2>(itemsize, ptrs, dims);
  const std::int64_t words = itemsize >> log2;
  if (words > std::numeric_limits<std::int32_t>::max()) {
    throw_error(Errc::not_implemented, std::string(where) + ": itemsize " +
                                           std::to_string(itemsize) +
                                           " is too large for the copy kernel");
  }
  p.words = static_cast<std::int32_t>(words);
  if (dims.ndim == 2 && words == 1 && items < k32 && fastest_dim(dims, 0) != fastest_dim(dims, 1) &&
      dims.shape[0] >= kTile / 2 && dims.shape[1] >= kTile / 2) {
    // A transpose: tiled, dim 0 the destination's fastest (plan of bodies.h's tile_copy).
    if (fastest_dim(dims, 0) == 1) {
      std::swap(p.shape[0], p.shape[1]);
      for (auto& s : p.strides) std::swap(s[0], s[1]);
    }
    const std::uint64_t tiles = ((static_cast<std::uint64_t>(p.shape[0]) + kTile - 1) / kTile) *
                                ((static_cast<std::uint64_t>(p.shape[1]) + kTile - 1) / kTile);
    plan.variant = Variant::tile;
    plan.grid = blocks_for(where, tiles, 1);
    plan.block_x = kTile;
    plan.block_y = kTileRows;
  } else {
    plan_strided(where, plan);
  }
  plan.index = kernel_index(DataKernel::copy, log2, plan.variant);
  return plan;
}

LaunchPlan plan_fill(std::string_view where, std::uint64_t dst, const MergedDims<1>& dims,
                     std::int64_t itemsize, const void* value) {
  const auto size = static_cast<std::size_t>(itemsize);
  if (size > CAI_KERNEL_VALUE_BYTES) {
    throw_error(Errc::not_implemented, std::string(where) + ": itemsize " + std::to_string(size) +
                                           " exceeds the CUDA fill kernel's " +
                                           std::to_string(CAI_KERNEL_VALUE_BYTES) + " bytes");
  }
  const std::array<std::uint64_t, 1> ptrs{dst};
  LaunchPlan plan;
  set_params(where, ptrs, dims, plan.params);
  KernelParams& p = plan.params;
  const std::uint64_t bytes = static_cast<std::uint64_t>(p.total) * size;
  // Dense: words of the widest width that the address and the size allow and that tiles the
  // item (a divisor or a multiple of it), the value repeated to a whole word.
  std::uint64_t w = word_bytes(ptrs, bytes);
  while (size % w != 0 && w % size != 0) w /= 2;
  if (dense_1d(dims, itemsize) && bytes / w < k32) {
    const std::size_t period = std::max<std::size_t>(w, size);
    for (std::size_t at = 0; at < period; at += size) std::memcpy(p.value + at, value, size);
    p.ndim = 0;
    p.total = static_cast<std::int64_t>(bytes / w);
    p.words = static_cast<std::int32_t>(period / w);
    plan.variant = Variant::contiguous;
    plan.grid = blocks_for(where, bytes / w, kBlockSize);
    plan.index = kernel_index(DataKernel::fill, std::countr_zero(w), Variant::contiguous);
    return plan;
  }
  std::memcpy(p.value, value, size);
  const int log2 = word_width_log2<1>(itemsize, ptrs, dims);
  p.words = static_cast<std::int32_t>(itemsize >> log2);
  plan_strided(where, plan);
  plan.index = kernel_index(DataKernel::fill, log2, plan.variant);
  return plan;
}

template <std::size_t K>
LaunchPlan plan_elementwise(std::string_view where, ElementwiseOp op, ElementType type,
                            const std::array<std::uint64_t, K>& ptrs, const MergedDims<K>& dims) {
  LaunchPlan plan;
  set_params(where, ptrs, dims, plan.params);
  const auto size = static_cast<std::int64_t>(element_size(type));
  bool aligned = true;
  for (std::uint64_t ptr : ptrs) aligned = aligned && ptr % 16 == 0;
  if (dense_1d(dims, size) && aligned) {
    // vector_lanes elements per thread (bodies.h), by element type.
#define CAI_DETAIL_LANES(ctx, name, kind, extended, value) vector_lanes<value>,
    constexpr int lanes_of[] = {CAI_ELEMENT_TYPES(CAI_DETAIL_LANES, _)};
#undef CAI_DETAIL_LANES
    const auto lanes = static_cast<std::uint64_t>(lanes_of[static_cast<int>(type)]);
    plan.variant = Variant::contiguous;
    plan.grid = blocks_for(
        where, (static_cast<std::uint64_t>(plan.params.total) + lanes - 1) / lanes, kBlockSize);
  } else {
    plan_strided(where, plan);
  }
  plan.index = kernel_index(op, type, plan.variant);
  return plan;
}

template LaunchPlan plan_elementwise<2>(std::string_view, ElementwiseOp, ElementType,
                                        const std::array<std::uint64_t, 2>&, const MergedDims<2>&);
template LaunchPlan plan_elementwise<3>(std::string_view, ElementwiseOp, ElementType,
                                        const std::array<std::uint64_t, 3>&, const MergedDims<3>&);

}  // namespace cai::device::kernels
