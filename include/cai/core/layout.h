#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "cai/core/dims.h"
#include "cai/core/strided.h"

namespace cai {

struct Interface;
struct InterfaceFields;
struct TypestrOptions;

/// One item of a NumPy basic index: an integer, a slice, `None` (newaxis) or `...`.
struct IndexItem {
  enum class Kind : std::uint8_t { integer, slice, newaxis, ellipsis };

  Kind kind = Kind::ellipsis;
  std::int64_t value = 0;                         ///< the integer; negative counts from the end
  std::optional<std::int64_t> start, stop, step;  ///< the slice; nullopt is Python's None

  static IndexItem at(std::int64_t i) { return {Kind::integer, i, {}, {}, {}}; }
  static IndexItem range(std::optional<std::int64_t> start, std::optional<std::int64_t> stop,
                         std::optional<std::int64_t> step = std::nullopt) {
    return {Kind::slice, 0, start, stop, step};
  }
  static IndexItem all() { return range(std::nullopt, std::nullopt); }
  static IndexItem newaxis() { return {Kind::newaxis, 0, {}, {}, {}}; }
  static IndexItem ellipsis() { return {Kind::ellipsis, 0, {}, {}, {}}; }
};

/// Shape, byte strides and item size of a strided array; no pointer, no type. The arithmetic
/// lives in strided.h; Layout adds the validated invariant and the indexing rules.
///
/// Invariant, checked on construction: ndim <= max_ndim, shape >= 0, itemsize >= 0, and
/// both the element count times the item size (over the non-zero dims, as NumPy checks it)
/// and the byte extent fit in int64. So size(), nbytes() and extent() never overflow.
class Layout {
 public:
  using Extent = cai::Extent;
  struct Sliced;

  /// A 0-d layout of item size 0.
  Layout() = default;
  /// Throws Errc::value_error on a broken rule and Errc::overflow on overflow.
  Layout(Dims shape, Dims byte_strides, std::int64_t itemsize);

  static Layout c_contiguous(std::span<const std::int64_t> shape, std::int64_t itemsize);
  static Layout f_contiguous(std::span<const std::int64_t> shape, std::int64_t itemsize);
  /// Row-major byte strides of a dense array; a zero dim counts as one (as PyTorch does).
  static Dims c_strides(std::span<const std::int64_t> shape, std::int64_t itemsize);
  static Dims f_strides(std::span<const std::int64_t> shape, std::int64_t itemsize);

  /// The byte extent of such a layout, or nullopt if it overflows int64. No other checks.
  static std::optional<Extent> checked_extent(std::span<const std::int64_t> shape,
                                              std::span<const std::int64_t> byte_strides,
                                              std::int64_t itemsize) noexcept {
    return cai::checked_extent(shape, byte_strides, itemsize);
  }
  /// Element count times item size, or nullopt if it overflows; dims of size 0 are skipped
  /// for the overflow check (as NumPy does), then make the result 0.
  static std::optional<std::int64_t> checked_nbytes(std::span<const std::int64_t> shape,
                                                    std::int64_t itemsize) noexcept;

  int ndim() const noexcept { return static_cast<int>(shape_.size()); }
  std::span<const std::int64_t> shape() const noexcept { return shape_; }
  std::span<const std::int64_t> strides() const noexcept { return strides_; }  ///< bytes
  std::int64_t itemsize() const noexcept { return itemsize_; }
  std::int64_t size() const noexcept { return size_; }  ///< element count
  std::int64_t nbytes() const noexcept { return size_ * itemsize_; }

  /// NumPy's flags: dims of size 1 are ignored; zero-size and 0-d layouts are both.
  bool is_c_contiguous() const noexcept {
    return cai::is_c_contiguous(shape_, strides_, itemsize_);
  }
  bool is_f_contiguous() const noexcept {
    return cai::is_f_contiguous(shape_, strides_, itemsize_);
  }
  /// F-contiguous but not C-contiguous: the order that NumPy's order='A' and a copy keep.
  bool is_f_only() const noexcept { return is_f_contiguous() && !is_c_contiguous(); }

  /// Bytes touched; {0, 0} for a zero-size layout, lo < 0 with negative strides.
  Extent extent() const noexcept { return extent_; }
  /// The absolute bytes of this layout at `ptr`; nullopt when they wrap the address space.
  std::optional<ByteRange> byte_range(std::uint64_t ptr) const noexcept {
    return cai::byte_range(ptr, extent_);
  }
  /// Every byte of the extent belongs to an element (no gaps).
  bool is_dense() const noexcept { return cai::is_dense(shape_, strides_, itemsize_); }

  /// Strides in elements (DLPack, tile arrays, typed views) by the typed-view rule of
  /// docs/cpp-typed-view.md: a byte stride divisible by the item size gives the quotient; an
  /// axis on which no address depends (extent <= 1, or an empty array) gets the row-major
  /// element stride when its byte stride is not divisible; any other non-divisible stride,
  /// and an item size of 0, is Errc::value_error naming the axis.
  Dims element_strides() const;
  /// The same rule without allocating or throwing: writes ndim() values to `out` and returns
  /// true, or returns false where element_strides() would throw.
  bool try_element_strides(std::int64_t* out) const noexcept;

  /// Tile-array slice: [start, stop) along `axis` (negative counts from the last), requiring
  /// 0 <= start < N and start <= stop <= N. Throws Errc::index_error.
  Sliced slice(int axis, std::int64_t start, std::int64_t stop) const;

  /// NumPy basic indexing, with NumPy's strides and offsets (an empty slice keeps the stride
  /// and adds no offset).
  Sliced index(std::span<const IndexItem> items) const;

  /// NumPy's broadcasting to `shape`: trailing axes align; an axis of size 1 and a new leading
  /// axis repeat with stride 0. Errc::value_error "<subject>: cannot broadcast ...".
  Layout broadcast_to(std::span<const std::int64_t> shape, std::string_view subject) const;

  Layout transpose() const;
  /// `axes[i]` is the source axis of result axis i; negative counts from the last.
  Layout permute(std::span<const int> axes) const;

  /// NumPy's reshape, as a view only (docs/core-layout.md, "Reshape"): `shape` may hold one -1,
  /// inferred from the size; elements are read in C order, or F order with `fortran_order`.
  /// Errc::value_error when the sizes differ; Errc::not_implemented, naming the axes, when
  /// these strides cannot give the new shape without a copy.
  Layout reshape(std::span<const std::int64_t> shape, bool fortran_order = false) const;
  /// The same bytes read with another item size (ndarray.view(dtype)): the last axis must be
  /// contiguous and its byte length a multiple of `itemsize`; it is resized. Errc::value_error.
  Layout with_itemsize(std::int64_t itemsize) const;

  /// Conservative: false only when no two different indices can map to overlapping bytes.
  bool may_overlap() const noexcept { return cai::may_overlap(shape_, strides_, itemsize_); }

  friend bool operator==(const Layout&, const Layout&) = default;

 private:
  // validate_interface checks every part of the invariant itself (with the CAI's messages):
  // its layouts skip the second check.
  friend Interface validate_interface(const InterfaceFields&, TypestrOptions);
  struct Checked {};
  Layout(Dims shape, Dims byte_strides, std::int64_t itemsize, Extent extent, Checked) noexcept;

  Dims shape_;
  Dims strides_;
  std::int64_t itemsize_ = 0;
  std::int64_t size_ = 1;
  Extent extent_;  // computed once: operations ask for byte ranges on every call
};

/// A view's layout and the bytes to add to the parent's base pointer.
struct Layout::Sliced {
  Layout layout;
  std::int64_t offset = 0;
};

}  // namespace cai
