// Layout::reshape and Layout::with_itemsize: new shapes over the same bytes, never a copy.
// The rules are in docs/core-layout.md ("Reshape" and "Item size").

#include <algorithm>
#include <array>
#include <optional>
#include <string>

#include "cai/core/error.h"
#include "cai/core/layout.h"

namespace cai {

namespace {

using std::to_string;

// The requested shape with its -1 replaced, or Errc::value_error (sizes differ, two -1, a
// negative size, or a -1 that cannot be inferred).
Dims resolve_shape(std::span<const std::int64_t> requested, std::int64_t size) {
  Dims shape(requested);
  int unknown = -1;
  std::int64_t known = 1;
  bool overflow = false;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (unknown >= 0)
        throw_error(Errc::value_error, "reshape(): shape " + format_dims(requested) +
                                           " has more than one -1 (only one size can be "
                                           "inferred)");
      unknown = static_cast<int>(i);
    } else if (shape[i] < 0) {
      throw_error(Errc::value_error, "reshape(): shape " + format_dims(requested) +
                                         " has a negative size at axis " + to_string(i));
    } else if (!overflow && __builtin_mul_overflow(known, shape[i], &known)) {
      overflow = true;  // cannot equal the size, which fits int64
    }
  }
  const auto mismatch = [&] {
    throw_error(Errc::value_error, "reshape(): cannot reshape an array of size " + to_string(size) +
                                       " into shape " + format_dims(requested));
  };
  if (overflow) mismatch();
  if (unknown >= 0) {
    if (known == 0 || size % known != 0) mismatch();
    shape[unknown] = size / known;
  } else if (known != size) {
    mismatch();
  }
  return shape;
}

struct Blocked {
  int axis = 0;  ///< the first of two old axes whose strides do not chain
};

// C-order reshape of a non-empty layout: the new byte strides, or the old axes (indices into
// old_shape) that cannot be merged. Size-1 axes are skipped on both sides: they never step.
std::optional<Dims> c_order_strides(std::span<const std::int64_t> old_shape,
                                    std::span<const std::int64_t> old_strides,
                                    std::span<const std::int64_t> new_shape, std::int64_t itemsize,
                                    Blocked& blocked) {
  std::array<int, max_ndim> old_axes{};
  int m = 0;
  for (int i = 0; i < static_cast<int>(old_shape.size()); ++i)
    if (old_shape[i] != 1) old_axes[m++] = i;
  std::array<int, max_ndim> new_axes{};
  int n = 0;
  for (int j = 0; j < static_cast<int>(new_shape.size()); ++j)
    if (new_shape[j] != 1) new_axes[n++] = j;

  Dims strides(new_shape.size(), 0);
  int i = 0, j = 0;
  while (i < m && j < n) {
    // The smallest run of old axes and of new axes that hold the same number of elements.
    const int i0 = i, j0 = j;
    std::int64_t old_count = old_shape[old_axes[i++]];
    std::int64_t new_count = new_shape[new_axes[j++]];
    while (old_count != new_count) {
      if (old_count < new_count)
        old_count *= old_shape[old_axes[i++]];
      else
        new_count *= new_shape[new_axes[j++]];
    }
    // Those old axes must form one strided run: each steps over a whole inner axis.
    for (int k = i0; k + 1 < i; ++k) {
      const int a = old_axes[k], b = old_axes[k + 1];
      if (old_strides[a] != old_strides[b] * old_shape[b]) {
        blocked.axis = a;
        return std::nullopt;
      }
    }
    // The new axes of the run split it, innermost taking the run's innermost stride.
    std::int64_t stride = old_strides[old_axes[i - 1]];
    for (int k = j - 1; k >= j0; --k) {
      strides[new_axes[k]] = stride;
      stride *= new_shape[new_axes[k]];
    }
  }
  // Size-1 axes: the stride a C-contiguous layout would give them (any value is valid).
  for (int k = static_cast<int>(new_shape.size()) - 1; k >= 0; --k)
    if (new_shape[k] == 1)
      strides[k] =
          k + 1 < static_cast<int>(new_shape.size()) ? strides[k + 1] * new_shape[k + 1] : itemsize;
  return strides;
}

// The reshape in either order: F order is C order over the axes reversed.
std::optional<Dims> reshape_strides(std::span<const std::int64_t> shape,
                                    std::span<const std::int64_t> strides,
                                    std::span<const std::int64_t> new_shape, std::int64_t itemsize,
                                    bool fortran_order, Blocked& blocked) {
  if (!fortran_order) return c_order_strides(shape, strides, new_shape, itemsize, blocked);
  Dims rs(shape), rt(strides), rn(new_shape);
  std::reverse(rs.begin(), rs.end());
  std::reverse(rt.begin(), rt.end());
  std::reverse(rn.begin(), rn.end());
  auto out = c_order_strides(rs, rt, rn, itemsize, blocked);
  if (!out) {
    // Back to the caller's axis numbers: the pair (a, next) reversed is (next', a').
    blocked.axis = static_cast<int>(shape.size()) - 1 - blocked.axis;
    return std::nullopt;
  }
  std::reverse(out->begin(), out->end());
  return out;
}

}  // namespace

Layout Layout::reshape(std::span<const std::int64_t> requested, bool fortran_order) const {
  Dims shape = resolve_shape(requested, size_);
  if (size_ == 0) {
    // No element is ever addressed: any strides describe the empty array.
    return fortran_order ? f_contiguous(shape, itemsize_) : c_contiguous(shape, itemsize_);
  }
  Blocked blocked;
  if (auto strides = reshape_strides(shape_, strides_, shape, itemsize_, fortran_order, blocked))
    return Layout(std::move(shape), std::move(*strides), itemsize_);

  // Name the two axes and say what would work instead.
  const int a = blocked.axis;
  int b = a;  // the next axis of size > 1 in reading order
  if (fortran_order) {
    do --b;
    while (b > 0 && shape_[b] == 1);
  } else {
    do ++b;
    while (b + 1 < ndim() && shape_[b] == 1);
  }
  const int outer = a, inner = b;
  std::string msg = "reshape(): an array of shape " + format_dims(shape_) + " and strides " +
                    format_dims(strides_) + " cannot be reshaped to " + format_dims(shape) +
                    " in " + (fortran_order ? "F" : "C") + " order without a copy: axis " +
                    to_string(outer) + " (stride " + to_string(strides_[outer]) +
                    ") does not step over axis " + to_string(inner) + " (" +
                    to_string(shape_[inner]) + " x stride " + to_string(strides_[inner]) +
                    "), so their elements are not one strided run";
  Blocked ignored;
  if (reshape_strides(shape_, strides_, shape, itemsize_, !fortran_order, ignored))
    msg += std::string("; order='") + (fortran_order ? "C" : "F") + "' would be a view";
  msg += ". cai's reshape never copies: copy first (a.copy().reshape(...))";
  throw_error(Errc::not_implemented, msg);
}

Layout Layout::with_itemsize(std::int64_t itemsize) const {
  if (itemsize == itemsize_) return *this;
  const std::string what =
      "view(): changing the item size from " + to_string(itemsize_) + " to " + to_string(itemsize);
  if (itemsize <= 0 || itemsize_ == 0)
    throw_error(Errc::value_error, what +
                                       " is not possible (an item size of 0 has no elements "
                                       "to reinterpret)");
  if (ndim() == 0)
    throw_error(Errc::value_error,
                what + " needs an axis to resize; a 0-d array keeps its item size");
  const int last = ndim() - 1;
  if (shape_[last] != 1 && strides_[last] != itemsize_)
    throw_error(Errc::value_error, what + " needs the last axis to be contiguous (stride " +
                                       to_string(itemsize_) + "), but its stride is " +
                                       to_string(strides_[last]));
  const std::int64_t bytes = shape_[last] * itemsize_;
  if (bytes % itemsize != 0)
    throw_error(Errc::value_error, what + ": the last axis holds " + to_string(bytes) +
                                       " bytes, not a multiple of " + to_string(itemsize));
  Dims shape(shape_), strides(strides_);
  shape[last] = bytes / itemsize;
  strides[last] = itemsize;
  return Layout(std::move(shape), std::move(strides), itemsize);
}

}  // namespace cai
