#include "cai/core/strided.h"

#include <algorithm>
#include <utility>

namespace cai {

namespace {

bool has_zero(Shape shape) noexcept {
  return std::find(shape.begin(), shape.end(), 0) != shape.end();
}

// Contiguity in the order given by `next` (C: last dim first; F: first dim first).
template <class Order>
bool is_contiguous(Shape shape, Strides strides, std::int64_t itemsize, Order order) noexcept {
  if (shape.size() != strides.size()) return false;
  if (has_zero(shape)) return true;
  std::int64_t expected = itemsize;
  bool overflowed = false;
  for (std::size_t k = 0; k < shape.size(); ++k) {
    const std::size_t d = order(k);
    if (shape[d] == 1) continue;
    if (overflowed || strides[d] != expected) return false;
    overflowed = __builtin_mul_overflow(expected, shape[d], &expected);
  }
  return true;
}

}  // namespace

std::optional<Extent> checked_extent(Shape shape, Strides strides, std::int64_t itemsize) noexcept {
  if (shape.size() != strides.size()) return std::nullopt;
  if (has_zero(shape)) return Extent{0, 0};
  Extent e{0, itemsize};
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (!extend_extent(e, strides[i], shape[i])) return std::nullopt;
  }
  return e;
}

std::optional<ByteRange> byte_range(std::uint64_t ptr, Shape shape, Strides strides,
                                    std::int64_t itemsize) noexcept {
  const std::optional<Extent> e = checked_extent(shape, strides, itemsize);
  if (!e) return std::nullopt;
  return byte_range(ptr, *e);
}

std::optional<ByteRange> byte_range(std::uint64_t ptr, Extent e) noexcept {
  if (e.empty()) return ByteRange{};
  // ptr + lo >= 0 and ptr + hi <= 2^64, in unsigned arithmetic (lo <= 0 < hi here).
  const std::uint64_t below = 0 - static_cast<std::uint64_t>(e.lo);
  const auto above = static_cast<std::uint64_t>(e.hi);
  if (ptr < below || ptr + above < ptr) return std::nullopt;
  return ByteRange{ptr - below, ptr + above};
}

bool is_c_contiguous(Shape shape, Strides strides, std::int64_t itemsize) noexcept {
  const std::size_t n = shape.size();
  return is_contiguous(shape, strides, itemsize, [n](std::size_t k) { return n - 1 - k; });
}

bool is_f_contiguous(Shape shape, Strides strides, std::int64_t itemsize) noexcept {
  return is_contiguous(shape, strides, itemsize, [](std::size_t k) { return k; });
}

bool may_overlap(Shape shape, Strides strides, std::int64_t itemsize) noexcept {
  if (has_zero(shape)) return false;
  // Sorted by |stride|, each dim must step past everything the smaller ones reach.
  // Unsigned: |INT64_MIN| and a span from lo < 0 to hi > 0 both fit in uint64.
  std::array<std::pair<std::uint64_t, std::uint64_t>, max_ndim> dims;  // (|stride|, size)
  std::size_t n = 0;
  for (std::size_t i = 0; i < shape.size() && n < dims.size(); ++i) {
    if (shape[i] > 1) {
      const auto s = static_cast<std::uint64_t>(strides[i]);
      dims[n++] = {strides[i] < 0 ? 0 - s : s, static_cast<std::uint64_t>(shape[i])};
    }
  }
  std::sort(dims.begin(), dims.begin() + n);
  auto reach = static_cast<std::uint64_t>(itemsize);  // bytes spanned by the inner block
  for (std::size_t i = 0; i < n; ++i) {
    const auto [stride, size] = dims[i];
    if (stride < reach) return true;
    reach += stride * (size - 1);  // at most hi - lo of the extent
  }
  return false;
}

bool same_elements(std::uint64_t ptr_a, Strides a, std::uint64_t ptr_b, Strides b,
                   Shape shape) noexcept {
  if (ptr_a != ptr_b || a.size() != shape.size() || b.size() != shape.size()) return false;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] != 1 && a[d] != b[d]) return false;
  }
  return true;
}

NormalizedDims normalize_dims(Shape shape, Strides strides) noexcept {
  NormalizedDims out;
  if (has_zero(shape)) {
    out.empty = true;
    return out;
  }
  std::size_t nd = 0;
  for (std::size_t d = 0; d < shape.size() && nd < out.shape.size(); ++d) {
    if (shape[d] == 1) continue;
    std::int64_t s = strides[d];
    if (s < 0) {
      // Walk the dim backwards: same bytes, positive stride. (Negated in unsigned arithmetic:
      // INT64_MIN stays negative instead of overflowing; no valid pointer has such a range.)
      out.offset += (shape[d] - 1) * s;
      s = static_cast<std::int64_t>(0 - static_cast<std::uint64_t>(s));
    }
    out.shape[nd] = shape[d];
    out.strides[nd] = s;
    ++nd;
  }
  // Insertion sort by stride: nd is small.
  for (std::size_t i = 1; i < nd; ++i) {
    for (std::size_t j = i; j > 0 && out.strides[j - 1] > out.strides[j]; --j) {
      std::swap(out.strides[j - 1], out.strides[j]);
      std::swap(out.shape[j - 1], out.shape[j]);
    }
  }
  out.ndim = static_cast<int>(nd);
  return out;
}

bool is_dense(Shape shape, Strides strides, std::int64_t itemsize) noexcept {
  return for_each_run(0, shape, strides, itemsize, 1, [](std::uint64_t, std::uint64_t) {});
}

}  // namespace cai
