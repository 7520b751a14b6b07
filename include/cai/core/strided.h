#pragma once

// Strided-layout arithmetic, the one place for it: extents, contiguity, overlap, dimension
// normalisation and merging, contiguous byte runs and element iteration. Plain functions over
// (shape, byte strides, item size), so that Layout (layout.h), the backend, the simulated
// driver and the operations share one implementation (src/core/strided.cpp, templates below).
// docs/core-layout.md.

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "cai/core/dims.h"

namespace cai {

using Shape = std::span<const std::int64_t>;
using Strides = std::span<const std::int64_t>;  ///< in bytes

/// Bytes a strided layout touches, relative to its base pointer: [lo, hi). lo < 0 with negative
/// strides; {0, 0} when the layout has no elements.
struct Extent {
  std::int64_t lo = 0;
  std::int64_t hi = 0;
  bool empty() const noexcept { return hi <= lo; }
  friend bool operator==(const Extent&, const Extent&) = default;
};

/// An absolute address range [lo, hi); empty when hi <= lo.
struct ByteRange {
  std::uint64_t lo = 0;
  std::uint64_t hi = 0;
  bool empty() const noexcept { return hi <= lo; }
  std::uint64_t size() const noexcept { return empty() ? 0 : hi - lo; }
  bool intersects(const ByteRange& o) const noexcept {
    return !empty() && !o.empty() && lo < o.hi && o.lo < hi;
  }
  bool contains(const ByteRange& o) const noexcept { return lo <= o.lo && o.hi <= hi; }
  friend bool operator==(const ByteRange&, const ByteRange&) = default;
};

/// Whether two shapes are equal: a loop, where std::ranges::equal calls memcmp (shapes are
/// compared on every operation, and have a few dims).
inline bool same_shape(Shape a, Shape b) noexcept {
  if (a.size() != b.size()) return false;
  for (std::size_t d = 0; d < a.size(); ++d)
    if (a[d] != b[d]) return false;
  return true;
}

/// The extent, or nullopt if an offset overflows int64 (or the ranks differ). No other checks.
std::optional<Extent> checked_extent(Shape shape, Strides strides, std::int64_t itemsize) noexcept;

/// One axis of that extent: widens `e` by `size` (>= 1) elements `stride` bytes apart; false
/// when an offset overflows int64 (`e` is then meaningless). checked_extent is this over every
/// axis, starting from {0, itemsize}, for a layout with no zero dimension.
inline bool extend_extent(Extent& e, std::int64_t stride, std::int64_t size) noexcept {
  std::int64_t reach;
  if (__builtin_mul_overflow(stride, size - 1, &reach)) return false;
  std::int64_t& end = reach < 0 ? e.lo : e.hi;
  return !__builtin_add_overflow(end, reach, &end);
}

/// The absolute bytes of extent `e` at `ptr`; nullopt when they wrap the address space.
std::optional<ByteRange> byte_range(std::uint64_t ptr, Extent e) noexcept;
/// The absolute bytes of the layout at `ptr`, or nullopt when they wrap around the address
/// space (or the extent overflows). Empty for a layout without elements.
std::optional<ByteRange> byte_range(std::uint64_t ptr, Shape shape, Strides strides,
                                    std::int64_t itemsize) noexcept;

/// NumPy's flags: dims of size 1 are ignored; zero-size and 0-d layouts are both.
bool is_c_contiguous(Shape shape, Strides strides, std::int64_t itemsize) noexcept;
bool is_f_contiguous(Shape shape, Strides strides, std::int64_t itemsize) noexcept;

/// Conservative self-overlap: false only when no two different indices can map to overlapping
/// bytes. Requires a valid layout (extent fits int64).
bool may_overlap(Shape shape, Strides strides, std::int64_t itemsize) noexcept;

/// Whether two operands of one shape address the same bytes at every index (same pointer, same
/// stride on every dim of size > 1): an elementwise operation may then read and write in place.
bool same_elements(std::uint64_t ptr_a, Strides a, std::uint64_t ptr_b, Strides b,
                   Shape shape) noexcept;

/// Whether two operands' byte ranges may intersect (conservative: extents, not elements).
inline bool may_share_memory(const ByteRange& a, const ByteRange& b) noexcept {
  return a.intersects(b);
}

/// A layout reduced for iteration over its bytes: dims of size 1 dropped, negative strides
/// flipped (the base moves to the lowest element, by `offset` bytes), sorted by stride
/// ascending. It covers the same bytes as the original. Requires ndim <= max_ndim.
struct NormalizedDims {
  int ndim = 0;
  bool empty = false;       ///< a dim of size 0: no elements
  std::int64_t offset = 0;  ///< bytes added to the base pointer (<= 0)
  std::array<std::int64_t, max_ndim> shape{};
  std::array<std::int64_t, max_ndim> strides{};  ///< >= 0, ascending
};
NormalizedDims normalize_dims(Shape shape, Strides strides) noexcept;

/// True when every byte of the extent belongs to an element (no gaps), e.g. a C- or
/// F-contiguous or reversed layout.
bool is_dense(Shape shape, Strides strides, std::int64_t itemsize) noexcept;

/// K operands of one shape with dims of size 1 dropped and each dim merged into the one
/// outside it while every operand steps over it contiguously; C order kept. A C-contiguous
/// array becomes one dim. Fewer dims, fewer divisions per element in a kernel.
template <std::size_t K>
struct MergedDims {
  int ndim = 0;
  // Only the first ndim entries are set: zeroing all max_ndim of them (2 KiB for three
  // operands) cost more than the merge itself.
  std::array<std::int64_t, max_ndim> shape;
  std::array<std::array<std::int64_t, max_ndim>, K> strides;
  Shape shape_span() const noexcept { return {shape.data(), static_cast<std::size_t>(ndim)}; }
  Strides strides_span(std::size_t k) const noexcept {
    return {strides[k].data(), static_cast<std::size_t>(ndim)};
  }
};
/// Requires shape.size() <= max_ndim and as many strides per operand as dims.
template <std::size_t K>
MergedDims<K> merge_dims(Shape shape, const std::array<Strides, K>& strides) noexcept;

/// Calls f(lo, hi) for each contiguous byte run [lo, hi) (absolute addresses) of the layout at
/// ptr, in no particular order; runs may repeat or overlap when the layout does. Dimensions are
/// normalised and merged from the smallest stride while each step leaves no gap, so a
/// contiguous or reversed layout is one run and an even/odd split gives disjoint runs. When more
/// than `max_runs` runs would result, calls f once with the whole extent and returns false (a
/// conservative answer); true when exact. Requires a valid layout.
template <class F>
bool for_each_run(std::uint64_t ptr, Shape shape, Strides strides, std::int64_t itemsize,
                  std::uint64_t max_runs, F&& f);

/// Iterates the index space in C order, calling f(offsets) with, for each of the K operands,
/// the byte offset sum(index_i * strides_k[i]). Requires rank <= max_ndim.
template <std::size_t K, class F>
void for_each_element(Shape shape, const std::array<Strides, K>& strides, F&& f);

// ---------------------------------------------------------------------------------------------
// Template definitions.

template <std::size_t K>
MergedDims<K> merge_dims(Shape shape, const std::array<Strides, K>& strides) noexcept {
  MergedDims<K> out;
  std::size_t nd = 0;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool merge = nd > 0;
    for (std::size_t k = 0; k < K && merge; ++k) {
      std::int64_t step = 0;
      merge =
          !__builtin_mul_overflow(strides[k][d], shape[d], &step) && out.strides[k][nd - 1] == step;
    }
    if (merge) {
      out.shape[nd - 1] *= shape[d];
      for (std::size_t k = 0; k < K; ++k) out.strides[k][nd - 1] = strides[k][d];
      continue;
    }
    out.shape[nd] = shape[d];
    for (std::size_t k = 0; k < K; ++k) out.strides[k][nd] = strides[k][d];
    ++nd;
  }
  out.ndim = static_cast<int>(nd);
  return out;
}

template <class F>
bool for_each_run(std::uint64_t ptr, Shape shape, Strides strides, std::int64_t itemsize,
                  std::uint64_t max_runs, F&& f) {
  const NormalizedDims n = normalize_dims(shape, strides);
  if (n.empty) return true;
  const std::uint64_t base = ptr + static_cast<std::uint64_t>(n.offset);
  const auto nd = static_cast<std::size_t>(n.ndim);
  // Merge from the smallest stride while each copy of the run touches or overlaps the last.
  auto run = static_cast<std::uint64_t>(itemsize);
  std::size_t inner = 0;
  while (inner < nd && static_cast<std::uint64_t>(n.strides[inner]) <= run) {
    run += static_cast<std::uint64_t>(n.shape[inner] - 1) *
           static_cast<std::uint64_t>(n.strides[inner]);
    ++inner;
  }
  // Outer dims enumerate the runs.
  std::uint64_t count = 1;
  for (std::size_t d = inner; d < nd; ++d) {
    count *= static_cast<std::uint64_t>(n.shape[d]);
    if (count > max_runs) {
      const Extent e = *checked_extent(shape, strides, itemsize);
      f(ptr + static_cast<std::uint64_t>(e.lo), ptr + static_cast<std::uint64_t>(e.hi));
      return false;
    }
  }
  std::array<std::int64_t, max_ndim> idx{};
  std::uint64_t off = 0;
  while (true) {
    f(base + off, base + off + run);
    std::size_t d = inner;
    for (; d < nd; ++d) {
      if (++idx[d] < n.shape[d]) {
        off += static_cast<std::uint64_t>(n.strides[d]);
        break;
      }
      off -= static_cast<std::uint64_t>(n.shape[d] - 1) * static_cast<std::uint64_t>(n.strides[d]);
      idx[d] = 0;
    }
    if (d == nd) return true;
  }
}

template <std::size_t K, class F>
void for_each_element(Shape shape, const std::array<Strides, K>& strides, F&& f) {
  const std::size_t nd = shape.size();
  for (std::int64_t n : shape) {
    if (n == 0) return;
  }
  std::array<std::int64_t, K> off{};
  if (nd == 0) {
    f(off);
    return;
  }
  // Odometer over the outer dims, a tight loop over the innermost one.
  std::array<std::int64_t, max_ndim> idx{};
  const std::size_t last = nd - 1;
  const std::int64_t n_inner = shape[last];
  while (true) {
    std::array<std::int64_t, K> o = off;
    for (std::int64_t i = 0; i < n_inner; ++i) {
      f(o);
      for (std::size_t k = 0; k < K; ++k) o[k] += strides[k][last];
    }
    std::size_t d = last;
    while (true) {
      if (d == 0) return;
      --d;
      if (++idx[d] < shape[d]) {
        for (std::size_t k = 0; k < K; ++k) off[k] += strides[k][d];
        break;
      }
      for (std::size_t k = 0; k < K; ++k) off[k] -= (shape[d] - 1) * strides[k][d];
      idx[d] = 0;
    }
  }
}

}  // namespace cai
