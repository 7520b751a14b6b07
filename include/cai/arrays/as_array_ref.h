#pragma once

// Layer 4: View -> ArrayRef<T, N>, checked by the one typed-view check (cai/arrays/
// typed_view.h). Kept apart from array_ref.h so that the typed view itself stays free of
// Views, streams and backends.

#include <cstdint>
#include <type_traits>

#include "cai/arrays/array_ref.h"
#include "cai/arrays/dtype_of.h"
#include "cai/arrays/typed_view.h"
#include "cai/arrays/view.h"
#include "cai/core/dims.h"
#include "cai/core/error.h"

namespace cai {

namespace detail {

template <class T>
TypedViewSpec typed_view_spec(int ndim) {
  TypedViewSpec spec;
  spec.dtype = dtype_of<T>();
  spec.item_size = sizeof(T);
  spec.alignment = alignof(T);
  spec.ndim = ndim;
  spec.writable = !std::is_const_v<T>;
  return spec;
}

// Throws Error(value_error) "<entry>: ..." unless `v` fits `spec`; writes the element strides.
inline void require_typed_view(const View& v, const TypedViewSpec& spec, const char* entry,
                               std::int64_t* element_strides) {
  const TypedViewMismatch m = check_typed_view(v, spec, element_strides);
  if (m != TypedViewMismatch::none)
    throw_error(Errc::value_error, typed_view_message(v, spec, m, entry));
}

}  // namespace detail

/// Checks that `v` holds T in N dimensions and returns the typed view of it: Error(value_error)
/// with a message starting "as_array_ref(): " when the dtype is not dtype_of<T>(), the rank is
/// not N, T is not const and the array is read-only, the array has a mask, the pointer is not
/// aligned for T (non-empty arrays), or the strides break the typed-view rule.
template <class T, int N>
ArrayRef<T, N> as_array_ref(const View& v) {
  static const TypedViewSpec spec = detail::typed_view_spec<T>(N);
  detail::ExtentArray<N> shape{}, strides{};
  detail::require_typed_view(v, spec, "as_array_ref()", strides);
  auto* data = reinterpret_cast<T*>(static_cast<std::uintptr_t>(v.ptr()));
  if constexpr (N == 0) {
    return ArrayRef<T, 0>(data);
  } else {
    for (int k = 0; k < N; ++k) shape[k] = v.shape()[k];
    return ArrayRef<T, N>(data, shape, strides);
  }
}

/// Any-rank helper for elementwise work: a 1-d view of the size() elements of a C-contiguous
/// array of any rank, in row-major order. The checks of as_array_ref() but the rank, plus
/// C-contiguity.
template <class T>
ArrayRef<T, 1> as_flat_array_ref(const View& v) {
  static const TypedViewSpec spec = [] {
    TypedViewSpec s = detail::typed_view_spec<T>(-1);
    s.c_contiguous = true;
    return s;
  }();
  detail::require_typed_view(v, spec, "as_flat_array_ref()", nullptr);
  auto* data = reinterpret_cast<T*>(static_cast<std::uintptr_t>(v.ptr()));
  return ArrayRef<T, 1>(data, {v.size()}, {1});
}

}  // namespace cai
