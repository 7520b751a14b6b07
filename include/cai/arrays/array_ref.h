#pragma once

// Layer 4: ArrayRef<T, N>, a typed strided view for hot loops on the host and in kernels.
// It holds a pointer, N extents and N strides in ELEMENTS (the tile-array convention of
// docs/dlpack.md, "cai.Array"), owns nothing, knows nothing of devices or streams, and is trivially
// copyable so that it goes to a __global__ function by value. as_array_ref() makes one from a
// View after checking that T matches what the View holds. With CCCL on the include path
// (the CUDA toolkit's include/cccl), to_mdspan() gives the standard cuda::std::mdspan.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <type_traits>
#include <utility>

#include "cai/arrays/dtype_of.h"
#include "cai/arrays/host_device.h"
#include "cai/arrays/view.h"
#include "cai/core/error.h"

#if __has_include(<cuda/std/mdspan>)
#include <cuda/std/mdspan>
#define CAI_HAS_CUDA_STD_MDSPAN 1
#else
#define CAI_HAS_CUDA_STD_MDSPAN 0
#endif

namespace cai {

namespace detail {

// N extents or strides; one unused slot for N == 0, where a zero-length array is ill-formed.
template <int N>
using ExtentArray = std::int64_t[N > 0 ? N : 1];

// Host-only error paths, out of the templates so that every ArrayRef shares one copy.
[[noreturn]] inline void throw_array_ref_slice_error(int axis, int ndim, std::int64_t start,
                                                     std::int64_t stop, std::int64_t n) {
  const std::string where = "ArrayRef::slice(): axis " + std::to_string(axis);
  if (axis < -ndim || axis >= ndim) {
    throw_error(Errc::index_error, where + " is out of range for " + std::to_string(ndim) +
                                       " dimensions (" + std::to_string(-ndim) + " <= axis < " +
                                       std::to_string(ndim) + ")");
  }
  const char* rule = (start < 0 || start >= n) ? "0 <= start < N" : "start <= stop <= N";
  throw_error(Errc::index_error, where + ", start " + std::to_string(start) + ", stop " +
                                     std::to_string(stop) + ", N " + std::to_string(n) +
                                     ": requires " + rule);
}

}  // namespace detail

/// A typed, non-owning view of N-dimensional strided data: element (i0, ..., iN-1) lives at
/// data() + sum(ik * stride(k)). Use ArrayRef<const T, N> for read-only data. Copying it copies
/// the view, never the elements; const-ness of the ArrayRef does not make the elements const.
template <class T, int N>
class ArrayRef {
  static_assert(N >= 0, "ArrayRef<T, N>: N is the number of dimensions and cannot be negative.");
  static_assert(std::is_object_v<T> && !std::is_array_v<T>,
                "ArrayRef<T, N>: T must be an element type, not a reference, void, a function "
                "or an array; add a dimension instead of using an array type.");

 public:
  using element_type = T;
  using value_type = std::remove_cv_t<T>;
  using index_type = std::int64_t;
  using Extents = detail::ExtentArray<N>;

  static constexpr int ndim = N;

  /// An empty view: null data, every extent 0 (a 0-d one still has size() 1; do not read it).
  ArrayRef() = default;
  ArrayRef(const ArrayRef&) = default;
  ArrayRef(ArrayRef&&) = default;
  ArrayRef& operator=(const ArrayRef&) = default;
  ArrayRef& operator=(ArrayRef&&) = default;
  ~ArrayRef() = default;

  /// Extents and strides in elements; strides may be negative or 0. No checks: the caller
  /// vouches that every index in range reaches valid memory.
  CAI_HOST_DEVICE constexpr ArrayRef(T* data, const Extents& shape, const Extents& strides) noexcept
      requires(N > 0)
      : data_(data) {
    for (int k = 0; k < N; ++k) {
      shape_[k] = shape[k];
      strides_[k] = strides[k];
    }
  }

  /// A 0-d view of one element.
  CAI_HOST_DEVICE constexpr explicit ArrayRef(T* data) noexcept requires(N == 0) : data_(data) {}

  /// Read-only view of the same elements.
  template <class U>
  requires(std::is_same_v<const U, T> && !std::is_same_v<U, T>) CAI_HOST_DEVICE
      constexpr ArrayRef(const ArrayRef<U, N>& other) noexcept
      : data_(other.data()) {
    for (int k = 0; k < N; ++k) {
      shape_[k] = other.shape(k);
      strides_[k] = other.stride(k);
    }
  }

  /// A dense row-major view (the last index varies fastest).
  CAI_HOST_DEVICE static constexpr ArrayRef c_contiguous(T* data, const Extents& shape) noexcept
      requires(N > 0) {
    Extents strides{};
    index_type step = 1;
    for (int k = N - 1; k >= 0; --k) {
      strides[k] = step;
      step *= shape[k] > 0 ? shape[k] : 1;
    }
    return ArrayRef(data, shape, strides);
  }

  /// Element (i0, ..., iN-1). No negative indices; bounds are asserted (CAI_ASSERT).
  template <class... I>
  CAI_HOST_DEVICE constexpr T& operator()(I... index) const noexcept {
    static_assert(sizeof...(I) == N,
                  "ArrayRef::operator() takes exactly N indices, one per dimension.");
    static_assert((std::is_integral_v<I> && ...),
                  "ArrayRef::operator() takes integer indices; convert other types explicitly.");
    if constexpr (sizeof...(I) == N && (std::is_integral_v<I> && ...)) {
      return data_[offset(std::make_index_sequence<N>{}, static_cast<index_type>(index)...)];
    } else {
      return *data_;
    }
  }

  /// Element i of a 1-d view.
  template <class I>
  CAI_HOST_DEVICE constexpr T& operator[](I index) const noexcept {
    static_assert(N == 1,
                  "ArrayRef::operator[] is for 1-d views; with N dimensions use "
                  "operator()(i0, ..., iN-1), one index per dimension.");
    if constexpr (N == 1) {
      return (*this)(index);
    } else {
      return *data_;
    }
  }

  CAI_HOST_DEVICE constexpr T* data() const noexcept { return data_; }

  /// Extent of `axis` (0 <= axis < N).
  CAI_HOST_DEVICE constexpr index_type shape(int axis) const noexcept {
    CAI_ASSERT(0 <= axis && axis < N, "ArrayRef: axis out of range");
    return shape_[axis];
  }

  /// Stride of `axis` in elements (0 <= axis < N).
  CAI_HOST_DEVICE constexpr index_type stride(int axis) const noexcept {
    CAI_ASSERT(0 <= axis && axis < N, "ArrayRef: axis out of range");
    return strides_[axis];
  }

  /// Number of elements: the product of the extents (1 for N == 0).
  CAI_HOST_DEVICE constexpr index_type size() const noexcept {
    index_type n = 1;
    for (int k = 0; k < N; ++k) n *= shape_[k];
    return n;
  }

  CAI_HOST_DEVICE constexpr bool empty() const noexcept { return size() == 0; }

  /// [start, stop) along `axis`, sharing memory, with the tile-array rules: a negative axis
  /// counts from the last; requires 0 <= start < N and start <= stop <= N where N is the
  /// extent. Host code gets Error(index_error); device code asserts (CAI_ASSERT).
  CAI_HOST_DEVICE constexpr ArrayRef slice(int axis, index_type start, index_type stop) const {
    static_assert(N > 0, "ArrayRef::slice needs an axis to slice; a 0-d ArrayRef has none.");
    const int ax = axis < 0 ? axis + N : axis;
    const bool axis_ok = 0 <= ax && ax < N;
    const bool range_ok =
        axis_ok && 0 <= start && start < shape_[ax] && start <= stop && stop <= shape_[ax];
#if defined(__CUDA_ARCH__)
    CAI_ASSERT(axis_ok, "ArrayRef: slice axis out of range");
    CAI_ASSERT(range_ok, "ArrayRef: slice requires 0 <= start < N and start <= stop <= N");
#else
    if (!range_ok) {
      detail::throw_array_ref_slice_error(axis, N, start, stop, axis_ok ? shape_[ax] : 0);
    }
#endif
    ArrayRef out = *this;
    // No arithmetic on the null pointer of an empty view (undefined behaviour).
    if (data_ != nullptr) out.data_ = data_ + start * strides_[ax];
    out.shape_[ax] = stop - start;
    return out;
  }

 private:
  template <std::size_t... K, class... I>
  CAI_HOST_DEVICE constexpr index_type offset(std::index_sequence<K...>,
                                              I... index) const noexcept {
    return (index_type{0} + ... + term(static_cast<int>(K), index));
  }

  CAI_HOST_DEVICE constexpr index_type term(int axis, index_type i) const noexcept {
    CAI_ASSERT(0 <= i && i < shape_[axis], "ArrayRef: index out of bounds");
    return i * strides_[axis];
  }

  T* data_ = nullptr;
  Extents shape_ = {};
  Extents strides_ = {};
};

// What lets an ArrayRef be a kernel argument; it does not depend on T or N.
static_assert(std::is_trivially_copyable_v<ArrayRef<float, 2>>);
static_assert(std::is_trivially_copyable_v<ArrayRef<const double, 0>>);

namespace detail {

// The checks of as_array_ref, once for all T and N; writes N element strides. Host only.
inline void check_array_ref(const View& v, const char* entry, const DType& type,
                            std::size_t item_size, std::size_t alignment, int ndim, bool writable,
                            std::int64_t* element_strides) {
  // Messages are built only on failure: this runs on every call of a bound function.
  auto fail = [entry](const std::string& what) {
    throw_error(Errc::value_error, std::string(entry) + ": " + what);
  };
  if (!(v.dtype() == type)) {
    fail("dtype mismatch: the element type needs '" + type.str() + "', the array holds '" +
         v.dtype().str() + "'");
  }
  if (type.itemsize() != static_cast<std::int64_t>(item_size)) {
    fail("cai::DTypeTraits gives dtype '" + type.str() + "' of itemsize " +
         std::to_string(type.itemsize()) + ", but the element type has sizeof " +
         std::to_string(item_size) + "; fix the DTypeTraits specialisation");
  }
  if (ndim >= 0 && v.ndim() != ndim) {
    fail("rank mismatch: expected " + std::to_string(ndim) + " dimensions, the array has " +
         std::to_string(v.ndim()) + " (shape " + format_dims(v.shape()) + ")");
  }
  if (writable && v.readonly()) {
    fail("the array is read-only; take an ArrayRef<const T, N> to read it");
  }
  if (v.mask()) {
    fail(
        "the array has a mask, which an ArrayRef cannot carry; read the mask separately and "
        "convert a copy of the View without it");
  }
  const bool empty = v.size() == 0;
  if (!empty && v.ptr() % alignment != 0) {
    char address[2 + 16 + 1];
    std::snprintf(address, sizeof address, "0x%llx", static_cast<unsigned long long>(v.ptr()));
    fail(std::string("the data pointer ") + address + " is not aligned to " +
         std::to_string(alignment) + " bytes, the alignment of the element type");
  }
  if (element_strides == nullptr) return;
  const auto size = static_cast<std::int64_t>(item_size);
  for (int k = 0; k < v.ndim(); ++k) {
    const std::int64_t s = v.strides()[k];
    if (s % size == 0) {
      element_strides[k] = s / size;
    } else if (empty || v.shape()[k] == 1) {
      element_strides[k] = 0;  // no address depends on it
    } else {
      fail("the stride of axis " + std::to_string(k) + " is " + std::to_string(s) +
           " bytes, not a multiple of the item size " + std::to_string(size));
    }
  }
}

}  // namespace detail

/// Checks that `v` holds T in N dimensions and returns the typed view of it. Throws
/// Error(value_error), the message starting "as_array_ref(): ", when the dtype is not
/// dtype_of<T>(), the rank is not N, T is not const and the array is read-only, the array has a
/// mask, the pointer is not aligned for T (non-empty arrays), or a byte stride is not a
/// multiple of sizeof(T) (axes of extent 1 and empty arrays excepted: their strides become 0).
template <class T, int N>
ArrayRef<T, N> as_array_ref(const View& v) {
  static_assert(std::is_trivially_copyable_v<ArrayRef<T, N>>);
  const DType& type = dtype_of<T>();
  detail::ExtentArray<N> shape{}, strides{};
  detail::check_array_ref(v, "as_array_ref()", type, sizeof(T), alignof(T), N, !std::is_const_v<T>,
                          strides);
  auto* data = reinterpret_cast<T*>(static_cast<std::uintptr_t>(v.ptr()));
  if constexpr (N == 0) {
    return ArrayRef<T, 0>(data);
  } else {
    for (int k = 0; k < N; ++k) shape[k] = v.shape()[k];
    return ArrayRef<T, N>(data, shape, strides);
  }
}

/// Any-rank helper for elementwise work: a 1-d view of the size() elements of a C-contiguous
/// array of any rank, in row-major order. Same checks as as_array_ref() but for the rank; a
/// non-C-contiguous array is Error(value_error).
template <class T>
ArrayRef<T, 1> as_flat_array_ref(const View& v) {
  detail::check_array_ref(v, "as_flat_array_ref()", dtype_of<T>(), sizeof(T), alignof(T), -1,
                          !std::is_const_v<T>, nullptr);
  if (!v.layout().is_c_contiguous()) {
    throw_error(Errc::value_error, "as_flat_array_ref(): the array is not C-contiguous (shape " +
                                       format_dims(v.shape()) + ", strides " +
                                       format_dims(v.strides()) + ")");
  }
  auto* data = reinterpret_cast<T*>(static_cast<std::uintptr_t>(v.ptr()));
  return ArrayRef<T, 1>(data, {v.size()}, {1});
}

#if CAI_HAS_CUDA_STD_MDSPAN

/// The standard view an ArrayRef<T, N> converts to.
template <class T, int N>
using MdspanOf =
    cuda::std::mdspan<T, cuda::std::dextents<std::int64_t, static_cast<std::size_t>(N)>,
                      cuda::std::layout_stride>;

namespace detail {

[[noreturn]] inline void throw_to_mdspan_error(int axis, std::int64_t stride) {
  if (axis >= 0) {
    throw_error(Errc::value_error,
                "to_mdspan(): axis " + std::to_string(axis) + " has stride " +
                    std::to_string(stride) +
                    "; cuda::std::layout_stride needs positive strides (copy the array, or "
                    "index the ArrayRef directly)");
  }
  throw_error(Errc::value_error,
              "to_mdspan(): two indices reach the same element; cuda::std::layout_stride needs "
              "a unique mapping (copy the array, or index the ArrayRef directly)");
}

}  // namespace detail

/// The same elements as a cuda::std::mdspan with layout_stride. That layout needs positive
/// strides and no two indices on one element: strides of axes of extent 1 (and of every axis
/// of an empty view) reach no other element, so they are replaced by positive ones; anything
/// else (a negative stride, a broadcast 0, overlap) is Error(value_error) on the host and an
/// assertion on the device.
template <class T, int N>
CAI_HOST_DEVICE constexpr MdspanOf<T, N> to_mdspan(const ArrayRef<T, N>& a) {
  using Mdspan = MdspanOf<T, N>;
  using Extents = typename Mdspan::extents_type;
  constexpr auto rank = static_cast<std::size_t>(N);
  cuda::std::array<std::int64_t, rank> shape{}, strides{};
  // Axes that matter (extent > 1) sorted by stride; a unique mapping needs each stride to
  // step over the whole span of the axes before it.
  int order[N > 0 ? N : 1] = {};
  int count = 0;
  int bad_axis = -2;  // -2: fine; -1: overlap; k >= 0: axis k has a non-positive stride
  const bool empty = a.empty();
  for (int k = 0; k < N; ++k) {
    shape[k] = a.shape(k);
    strides[k] = a.stride(k);
    if (empty || a.shape(k) == 1) {
      strides[k] = 1;
      continue;
    }
    if (a.stride(k) <= 0) {
      if (bad_axis == -2) bad_axis = k;
      continue;
    }
    int j = count++;
    for (; j > 0 && a.stride(order[j - 1]) > a.stride(k); --j) {
      order[j] = order[j - 1];
    }
    order[j] = k;
  }
  if (empty) {
    std::int64_t step = 1;  // a positive row-major set
    for (int k = N - 1; k >= 0; --k) {
      strides[k] = step;
      step *= a.shape(k) > 0 ? a.shape(k) : 1;
    }
  }
  for (int j = 1; j < count && bad_axis == -2; ++j) {
    const int prev = order[j - 1], next = order[j];
    // stride(prev) * shape(prev) <= stride(next), without overflow.
    if (a.shape(prev) > a.stride(next) / a.stride(prev)) bad_axis = -1;
  }
#if defined(__CUDA_ARCH__)
  CAI_ASSERT(bad_axis == -2,
             "ArrayRef: to_mdspan needs positive strides that reach each element once");
#else
  if (bad_axis != -2)
    detail::throw_to_mdspan_error(bad_axis, bad_axis >= 0 ? a.stride(bad_axis) : 0);
#endif
  return Mdspan(a.data(), typename Mdspan::mapping_type(Extents(shape), strides));
}

/// An ArrayRef of the elements of a strided mdspan (layout_right, layout_left, layout_stride).
template <class T, class E, class L>
CAI_HOST_DEVICE constexpr ArrayRef<T, static_cast<int>(E::rank())> as_array_ref(
    const cuda::std::mdspan<T, E, L, cuda::std::default_accessor<T>>& m) {
  constexpr int n = static_cast<int>(E::rank());
  static_assert(L::template mapping<E>::is_always_strided(),
                "as_array_ref(mdspan): the layout must be strided (layout_right, layout_left "
                "or layout_stride).");
  if constexpr (n == 0) {
    return ArrayRef<T, 0>(m.data_handle());
  } else {
    detail::ExtentArray<n> shape{}, strides{};
    for (int k = 0; k < n; ++k) {
      shape[k] = static_cast<std::int64_t>(m.extent(static_cast<std::size_t>(k)));
      strides[k] = static_cast<std::int64_t>(m.stride(static_cast<std::size_t>(k)));
    }
    return ArrayRef<T, n>(m.data_handle(), shape, strides);
  }
}

#endif  // CAI_HAS_CUDA_STD_MDSPAN

}  // namespace cai
