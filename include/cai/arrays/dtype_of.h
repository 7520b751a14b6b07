#pragma once

// C++ element type -> cai::DType, for as_array_ref() and the C++ library. Types with a DLPack
// type (cai/arrays/dlpack_type.h: bool, integers, floats, complex, __half, __nv_bfloat16) have
// one already; teach it others (structured types, say) by specialising cai::DTypeTraits:
//
//   template <> struct cai::DTypeTraits<Pixel> {
//     static cai::DType get() { return cai::DType::from_descr(...); }
//   };

#include <concepts>
#include <type_traits>

#include "cai/arrays/dlpack_type.h"
#include "cai/core/dtype.h"

namespace cai {

/// Specialise with `static DType get()` to give T a DType.
template <class T>
struct DTypeTraits;

/// Every type with a DLPack type; going through DLPack gives native byte order and the usual
/// '|' for one-byte types.
template <class T>
requires HasDLPackType<T>
struct DTypeTraits<T> {
  static DType get() { return DType::from_dlpack(dlpack_type_of<T>()); }
};

/// True when dtype_of<T>() compiles; const and volatile are ignored.
template <class T>
concept HasDType = requires {
  { DTypeTraits<std::remove_cv_t<T>>::get() } -> std::convertible_to<DType>;
};

/// The DType of T, built once.
template <class T>
const DType& dtype_of() {
  static_assert(HasDType<T>,
                "cai::dtype_of<T>(): T has no DType. Specialise cai::DTypeTraits<T> with "
                "`static cai::DType get()`, for example returning "
                "cai::DType::from_typestr(\"<f4\") or cai::DType::from_descr(...).");
  if constexpr (HasDType<T>) {
    static const DType type = DTypeTraits<std::remove_cv_t<T>>::get();
    return type;
  } else {
    static const DType none;
    return none;
  }
}

}  // namespace cai
