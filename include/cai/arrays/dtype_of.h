#pragma once

// C++ element type -> cai::DType, for the typed views. Users teach it their own types by
// specialising cai::DTypeTraits:
//
//   template <> struct cai::DTypeTraits<Pixel> {
//     static cai::DType get() { return cai::DType::from_descr(...); }
//   };

#include <complex>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "cai/core/dlpack.h"
#include "cai/core/dtype.h"

#if __has_include(<cuda/std/complex>)
#include <cuda/std/complex>
#define CAI_HAS_CUDA_STD_COMPLEX 1
#else
#define CAI_HAS_CUDA_STD_COMPLEX 0
#endif
#if __has_include(<cuda_fp16.h>)
#include <cuda_fp16.h>
#define CAI_HAS_CUDA_FP16 1
#else
#define CAI_HAS_CUDA_FP16 0
#endif
#if __has_include(<cuda_bf16.h>)
#include <cuda_bf16.h>
#define CAI_HAS_CUDA_BF16 1
#else
#define CAI_HAS_CUDA_BF16 0
#endif

namespace cai {

/// Specialise with `static DType get()` to give T a DType. Left undefined on purpose.
template <class T>
struct DTypeTraits;

namespace detail {

// Going through DLPack gives native byte order and the usual '|' for one-byte types.
template <std::uint8_t Code, std::size_t Bytes>
struct DLPackDTypeTraits {
  static DType get() {
    return DType::from_dlpack(DLDataType{Code, static_cast<std::uint8_t>(Bytes * 8), 1});
  }
};

// Characters are text, not numbers: an int8_t/uint8_t says what is meant.
template <class T>
inline constexpr bool is_character_v =
    std::is_same_v<T, char> || std::is_same_v<T, wchar_t> || std::is_same_v<T, char8_t> ||
    std::is_same_v<T, char16_t> || std::is_same_v<T, char32_t>;

}  // namespace detail

template <>
struct DTypeTraits<bool> : detail::DLPackDTypeTraits<kDLBool, 1> {
  static_assert(sizeof(bool) == 1, "cai assumes a one-byte bool, as NumPy and DLPack do.");
};

/// Every integer type by signedness and size, so int64_t, long and long long all work.
template <class T>
requires(std::is_integral_v<T> && !std::is_same_v<T, bool> &&
         !detail::is_character_v<T>) struct DTypeTraits<T>
    : detail::DLPackDTypeTraits<std::is_signed_v<T> ? kDLInt : kDLUInt, sizeof(T)> {
};

template <>
struct DTypeTraits<float> : detail::DLPackDTypeTraits<kDLFloat, sizeof(float)> {};
template <>
struct DTypeTraits<double> : detail::DLPackDTypeTraits<kDLFloat, sizeof(double)> {};
template <>
struct DTypeTraits<std::complex<float>>
    : detail::DLPackDTypeTraits<kDLComplex, sizeof(std::complex<float>)> {};
template <>
struct DTypeTraits<std::complex<double>>
    : detail::DLPackDTypeTraits<kDLComplex, sizeof(std::complex<double>)> {};

#if CAI_HAS_CUDA_STD_COMPLEX
template <>
struct DTypeTraits<cuda::std::complex<float>>
    : detail::DLPackDTypeTraits<kDLComplex, sizeof(cuda::std::complex<float>)> {};
template <>
struct DTypeTraits<cuda::std::complex<double>>
    : detail::DLPackDTypeTraits<kDLComplex, sizeof(cuda::std::complex<double>)> {};
#endif

#if CAI_HAS_CUDA_FP16
template <>
struct DTypeTraits<__half> : detail::DLPackDTypeTraits<kDLFloat, 2> {};  // '<f2'
#endif

#if CAI_HAS_CUDA_BF16
template <>
struct DTypeTraits<__nv_bfloat16> : detail::DLPackDTypeTraits<kDLBfloat, 2> {};
#endif

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
