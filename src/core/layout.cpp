#include "cai/core/layout.h"

#include <algorithm>
#include <array>
#include <bit>
#include <limits>
#include <string>
#include <utility>

#include "cai/core/error.h"

namespace cai {

namespace {

using std::to_string;

// Element count over the non-zero dims (what NumPy overflow-checks), and whether a dim is 0.
bool count_nonzero(std::span<const std::int64_t> shape, std::int64_t& count, bool& has_zero) {
  count = 1;
  has_zero = false;
  for (std::int64_t d : shape) {
    if (d == 0) {
      has_zero = true;
    } else if (__builtin_mul_overflow(count, d, &count)) {
      return false;
    }
  }
  return true;
}

[[noreturn]] void throw_overflow(const char* what, std::int64_t a, char op, std::int64_t b) {
  throw_error(Errc::overflow, std::string(what) + ": " + to_string(a) + " " + op + " " +
                                  to_string(b) + " overflows int64");
}

std::int64_t checked_mul(std::int64_t a, std::int64_t b, const char* what) {
  std::int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) throw_overflow(what, a, '*', b);
  return r;
}

std::int64_t checked_add(std::int64_t a, std::int64_t b, const char* what) {
  std::int64_t r;
  if (__builtin_add_overflow(a, b, &r)) throw_overflow(what, a, '+', b);
  return r;
}

// Normalizes a possibly negative axis; returns -1 when out of range.
int normalize_axis(int axis, int ndim) noexcept {
  if (axis < 0) axis += ndim;
  return axis >= 0 && axis < ndim ? axis : -1;
}

std::string axis_range_text(int ndim) {
  if (ndim == 0) return "a 0-dimensional array has no axes";
  return "allowed: " + to_string(-ndim) + " <= axis < " + to_string(ndim);
}

}  // namespace

Layout::Layout(Dims shape, Dims byte_strides, std::int64_t itemsize)
    : shape_(std::move(shape)), strides_(std::move(byte_strides)), itemsize_(itemsize) {
  const std::size_t n = shape_.size();
  if (n != strides_.size())
    throw_error(Errc::value_error, "Layout: shape ", shape_, " has ", n, " dimensions but strides ",
                strides_, " has ", strides_.size());
  if (n > static_cast<std::size_t>(max_ndim))
    throw_error(Errc::value_error, "Layout: ", n, " dimensions, at most ", max_ndim,
                " are supported");
  // One pass: the first negative size, the count over the non-zero sizes (what NumPy
  // overflow-checks) and the extent; the failures are then reported in that order.
  std::size_t negative_axis = n;
  bool has_zero = false, count_overflows = false, extent_overflows = false;
  std::int64_t count = 1;
  Extent extent{0, itemsize_};
  for (std::size_t i = 0; i < n; ++i) {
    const std::int64_t d = shape_[i];
    if (d <= 0) {
      if (d < 0 && negative_axis == n) negative_axis = i;
      has_zero = has_zero || d == 0;
      continue;
    }
    count_overflows = __builtin_mul_overflow(count, d, &count) || count_overflows;
    extent_overflows = !extend_extent(extent, strides_[i], d) || extent_overflows;
  }
  if (negative_axis != n)
    throw_error(Errc::value_error, "Layout: shape ", shape_, " has a negative size at axis ",
                negative_axis);
  if (itemsize_ < 0)
    throw_error(Errc::value_error, "Layout: item size ", itemsize_, " is negative");
  std::int64_t bytes;
  if (count_overflows || __builtin_mul_overflow(count, itemsize_, &bytes))
    throw_error(Errc::overflow, "Layout: the byte size of shape ", shape_, " with item size ",
                itemsize_, " overflows int64");
  if (has_zero) {
    size_ = 0;  // and extent_ stays {0, 0}
    return;
  }
  if (extent_overflows)
    throw_error(Errc::overflow, "Layout: the byte extent of shape ", shape_, " with strides ",
                strides_, " and item size ", itemsize_, " overflows int64");
  size_ = count;
  extent_ = extent;
}

Layout::Layout(Dims shape, Dims byte_strides, std::int64_t itemsize, Extent extent,
               Checked) noexcept
    : shape_(std::move(shape)),
      strides_(std::move(byte_strides)),
      itemsize_(itemsize),
      extent_(extent) {
  for (const std::int64_t n : shape_) size_ *= n;  // cannot overflow: checked by the caller
}

Dims Layout::c_strides(std::span<const std::int64_t> shape, std::int64_t itemsize) {
  Dims strides(shape.size());
  std::int64_t step = itemsize;
  for (std::size_t i = shape.size(); i-- > 0;) {
    strides[i] = step;
    if (shape[i] != 0) step = checked_mul(step, shape[i], "c_strides()");
  }
  return strides;
}

Dims Layout::f_strides(std::span<const std::int64_t> shape, std::int64_t itemsize) {
  Dims strides(shape.size());
  std::int64_t step = itemsize;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    strides[i] = step;
    if (shape[i] != 0) step = checked_mul(step, shape[i], "f_strides()");
  }
  return strides;
}

Layout Layout::c_contiguous(std::span<const std::int64_t> shape, std::int64_t itemsize) {
  return Layout(Dims(shape), c_strides(shape, itemsize), itemsize);
}

Layout Layout::f_contiguous(std::span<const std::int64_t> shape, std::int64_t itemsize) {
  return Layout(Dims(shape), f_strides(shape, itemsize), itemsize);
}

std::optional<std::int64_t> Layout::checked_nbytes(std::span<const std::int64_t> shape,
                                                   std::int64_t itemsize) noexcept {
  std::int64_t count;
  bool has_zero;
  std::int64_t bytes;
  if (!count_nonzero(shape, count, has_zero) || __builtin_mul_overflow(count, itemsize, &bytes)) {
    return std::nullopt;
  }
  return has_zero ? 0 : bytes;
}

bool Layout::try_element_strides(std::int64_t* out) const noexcept {
  if (itemsize_ == 0) return false;
  // Item sizes are mostly powers of two: a shift then, not a division per axis.
  const bool pow2 = (itemsize_ & (itemsize_ - 1)) == 0;
  const int shift = std::countr_zero(static_cast<std::uint64_t>(itemsize_));
  std::int64_t row_major = 1;  // the C-contiguous element stride of axis i (zero dims count 1)
  for (std::size_t i = strides_.size(); i-- > 0;) {
    const bool divisible =
        pow2 ? (strides_[i] & (itemsize_ - 1)) == 0 : strides_[i] % itemsize_ == 0;
    if (divisible) {
      out[i] = pow2 ? strides_[i] >> shift : strides_[i] / itemsize_;
    } else if (size_ == 0 || shape_[i] <= 1) {
      out[i] = row_major;  // no address depends on this stride
    } else {
      return false;
    }
    // Cannot overflow: size() * itemsize fits int64 and zero dims count as one.
    row_major *= shape_[i] > 0 ? shape_[i] : 1;
  }
  return true;
}

Dims Layout::element_strides() const {
  Dims out(strides_.size());
  if (try_element_strides(out.data())) return out;
  if (itemsize_ == 0) {
    throw_error(Errc::value_error, "strides: element strides are undefined for an item size of 0");
  }
  std::size_t axis = 0;
  while (strides_[axis] % itemsize_ == 0 || size_ == 0 || shape_[axis] <= 1) ++axis;
  throw_error(Errc::value_error,
              "strides: axis " + to_string(axis) + " has a byte stride of " +
                  to_string(strides_[axis]) + ", which is not a multiple of the item size " +
                  to_string(itemsize_) +
                  " (an axis of extent above 1 in a non-empty array needs one: element strides "
                  "count whole items)");
}

Layout::Sliced Layout::slice(int axis, std::int64_t start, std::int64_t stop) const {
  const int ax = normalize_axis(axis, ndim());
  if (ax < 0) {
    throw_error(Errc::index_error, "slice(): axis " + to_string(axis) + " is out of range (" +
                                       axis_range_text(ndim()) + ")");
  }
  const std::int64_t n = shape_[ax];
  auto fail = [&](const char* rule) {
    std::string axis_text = to_string(axis);
    if (axis != ax) axis_text += " (= " + to_string(ax) + ")";
    throw_error(Errc::index_error, "slice(): axis " + axis_text + ", start " + to_string(start) +
                                       ", stop " + to_string(stop) + ", N " + to_string(n) +
                                       ": requires " + rule);
  };
  if (start < 0 || start >= n) fail("0 <= start < N");
  if (stop < start || stop > n) fail("start <= stop <= N");
  Dims shape = shape_;
  shape[ax] = stop - start;
  const std::int64_t offset = checked_mul(start, strides_[ax], "slice(): offset");
  return {Layout(std::move(shape), strides_, itemsize_), offset};
}

namespace {

struct ResolvedSlice {
  std::int64_t start, step, count;
};

// Python's PySlice_Unpack + PySlice_AdjustIndices on an axis of n elements, then NumPy's rule
// that an empty slice keeps the stride and the base.
ResolvedSlice resolve_slice(const IndexItem& item, std::int64_t n) {
  constexpr std::int64_t max = std::numeric_limits<std::int64_t>::max();
  constexpr std::int64_t min = std::numeric_limits<std::int64_t>::min();
  std::int64_t step = item.step.value_or(1);
  if (step == 0) throw_error(Errc::value_error, "index(): slice step cannot be zero");
  if (step < -max) step = -max;
  std::int64_t start = item.start.value_or(step < 0 ? max : 0);
  std::int64_t stop = item.stop.value_or(step < 0 ? min : max);
  auto adjust = [&](std::int64_t& v) {
    if (v < 0) {
      v += n;
      if (v < 0) v = step < 0 ? -1 : 0;
    } else if (v >= n) {
      v = step < 0 ? n - 1 : n;
    }
  };
  adjust(start);
  adjust(stop);
  std::int64_t count = 0;
  if (step < 0) {
    if (stop < start) count = (start - stop - 1) / (-step) + 1;
  } else if (start < stop) {
    count = (stop - start - 1) / step + 1;
  }
  if (count == 0) return {0, 1, 0};
  return {start, step, count};
}

}  // namespace

Layout::Sliced Layout::index(std::span<const IndexItem> items) const {
  int consumed = 0;
  bool has_ellipsis = false;
  for (const IndexItem& item : items) {
    if (item.kind == IndexItem::Kind::integer || item.kind == IndexItem::Kind::slice) {
      ++consumed;
    } else if (item.kind == IndexItem::Kind::ellipsis) {
      if (has_ellipsis) {
        throw_error(Errc::index_error, "index(): an index can only have a single ellipsis ('...')");
      }
      has_ellipsis = true;
    }
  }
  if (consumed > ndim()) {
    throw_error(Errc::index_error, "index(): too many indices: the array is " + to_string(ndim()) +
                                       "-dimensional, but " + to_string(consumed) +
                                       " were indexed");
  }

  Dims shape, strides;
  std::int64_t offset = 0;
  int src = 0;
  auto keep = [&](int count) {
    for (int k = 0; k < count; ++k, ++src) {
      shape.push_back(shape_[src]);
      strides.push_back(strides_[src]);
    }
  };
  for (const IndexItem& item : items) {
    switch (item.kind) {
      case IndexItem::Kind::integer: {
        const std::int64_t n = shape_[src];
        std::int64_t i = item.value < 0 ? item.value + n : item.value;
        if (i < 0 || i >= n) {
          throw_error(Errc::index_error, "index(): index " + to_string(item.value) +
                                             " is out of bounds for axis " + to_string(src) +
                                             " with size " + to_string(n));
        }
        offset = checked_add(offset, checked_mul(i, strides_[src], "index(): offset"),
                             "index(): offset");
        ++src;
        break;
      }
      case IndexItem::Kind::slice: {
        const auto [start, step, count] = resolve_slice(item, shape_[src]);
        std::int64_t stride;
        if (__builtin_mul_overflow(strides_[src], step, &stride)) {
          // A stride used at most once is never read; keep the parent's.
          if (count > 1) checked_mul(strides_[src], step, "index(): stride * step");
          stride = strides_[src];
        }
        offset = checked_add(offset, checked_mul(start, strides_[src], "index(): offset"),
                             "index(): offset");
        shape.push_back(count);
        strides.push_back(stride);
        ++src;
        break;
      }
      case IndexItem::Kind::newaxis:
        shape.push_back(1);
        strides.push_back(0);
        break;
      case IndexItem::Kind::ellipsis:
        keep(ndim() - consumed);
        break;
    }
  }
  keep(ndim() - src);
  if (shape.size() > static_cast<std::size_t>(max_ndim)) {
    throw_error(Errc::index_error, "index(): the result would have " + to_string(shape.size()) +
                                       " dimensions, at most " + to_string(max_ndim) +
                                       " are supported");
  }
  return {Layout(std::move(shape), std::move(strides), itemsize_), offset};
}

Layout Layout::broadcast_to(std::span<const std::int64_t> shape, std::string_view subject) const {
  if (shape_.size() > shape.size())
    throw_error(Errc::value_error, std::string(subject) + ": cannot broadcast a " +
                                       to_string(shape_.size()) + "-d value to a " +
                                       to_string(shape.size()) + "-d array");
  Dims strides(shape.size(), 0);
  const std::size_t lead = shape.size() - shape_.size();
  for (std::size_t i = 0; i < shape_.size(); ++i) {
    const std::int64_t n = shape_[i], m = shape[lead + i];
    if (n == m)
      strides[lead + i] = strides_[i];
    else if (n != 1)
      throw_error(Errc::value_error, std::string(subject) + ": cannot broadcast axis " +
                                         to_string(i) + " of size " + to_string(n) + " to size " +
                                         to_string(m));
  }
  return Layout(Dims(shape), std::move(strides), itemsize_);
}

Layout Layout::transpose() const {
  Layout out = *this;
  std::reverse(out.shape_.begin(), out.shape_.end());
  std::reverse(out.strides_.begin(), out.strides_.end());
  return out;
}

Layout Layout::permute(std::span<const int> axes) const {
  if (axes.size() != shape_.size()) {
    throw_error(Errc::value_error, "permute(): " + to_string(axes.size()) +
                                       " axes given for an array of " + to_string(ndim()) +
                                       " dimensions");
  }
  std::array<bool, max_ndim> seen{};
  Layout out = *this;
  for (std::size_t i = 0; i < axes.size(); ++i) {
    const int ax = normalize_axis(axes[i], ndim());
    if (ax < 0) {
      throw_error(Errc::index_error, "permute(): axis " + to_string(axes[i]) +
                                         " is out of range (" + axis_range_text(ndim()) + ")");
    }
    if (seen[ax]) {
      throw_error(Errc::value_error, "permute(): axis " + to_string(ax) + " is repeated");
    }
    seen[ax] = true;
    out.shape_[i] = shape_[ax];
    out.strides_[i] = strides_[ax];
  }
  return out;
}

}  // namespace cai
