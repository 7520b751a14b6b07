#pragma once

// C++ element type -> DLPack data type, at compile time and header-only: the one table of
// built-in element types. dtype_of.h builds cai::DType from it for the C++ library; the
// nanobind layer (cai/nanobind/), which links no cai library, sends it through the C API.
//
// Teach it your own type by specialising cai::DLPackType:
//
//   template <> struct cai::DLPackType<MyHalf> {
//     static constexpr DLDataType value{kDLFloat, 16, 1};
//   };

#include <complex>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "cai/core/dlpack.h"

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

/// Specialise with `static constexpr DLDataType value` to give T a DLPack type. Left
/// undefined on purpose.
template <class T>
struct DLPackType;

namespace detail {

template <std::uint8_t Code, std::size_t Bytes>
struct DLPackTypeOfSize {
  static constexpr DLDataType value{Code, static_cast<std::uint8_t>(Bytes * 8), 1};
};

// Characters are text, not numbers: an int8_t/uint8_t says what is meant.
template <class T>
inline constexpr bool is_character_v =
    std::is_same_v<T, char> || std::is_same_v<T, wchar_t> || std::is_same_v<T, char8_t> ||
    std::is_same_v<T, char16_t> || std::is_same_v<T, char32_t>;

}  // namespace detail

template <>
struct DLPackType<bool> : detail::DLPackTypeOfSize<kDLBool, 1> {
  static_assert(sizeof(bool) == 1, "cai assumes a one-byte bool, as NumPy and DLPack do.");
};

/// Every integer type by signedness and size, so int64_t, long and long long all work.
template <class T>
requires(std::is_integral_v<T> && !std::is_same_v<T, bool> &&
         !detail::is_character_v<T>) struct DLPackType<T>
    : detail::DLPackTypeOfSize<std::is_signed_v<T> ? kDLInt : kDLUInt, sizeof(T)> {
};

template <>
struct DLPackType<float> : detail::DLPackTypeOfSize<kDLFloat, sizeof(float)> {};
template <>
struct DLPackType<double> : detail::DLPackTypeOfSize<kDLFloat, sizeof(double)> {};
template <>
struct DLPackType<std::complex<float>>
    : detail::DLPackTypeOfSize<kDLComplex, sizeof(std::complex<float>)> {};
template <>
struct DLPackType<std::complex<double>>
    : detail::DLPackTypeOfSize<kDLComplex, sizeof(std::complex<double>)> {};

#if CAI_HAS_CUDA_STD_COMPLEX
template <>
struct DLPackType<cuda::std::complex<float>>
    : detail::DLPackTypeOfSize<kDLComplex, sizeof(cuda::std::complex<float>)> {};
template <>
struct DLPackType<cuda::std::complex<double>>
    : detail::DLPackTypeOfSize<kDLComplex, sizeof(cuda::std::complex<double>)> {};
#endif

#if CAI_HAS_CUDA_FP16
template <>
struct DLPackType<__half> : detail::DLPackTypeOfSize<kDLFloat, 2> {};  // '<f2'
#endif

#if CAI_HAS_CUDA_BF16
template <>
struct DLPackType<__nv_bfloat16> : detail::DLPackTypeOfSize<kDLBfloat, 2> {};
#endif

/// True when T (const and volatile ignored) has a DLPack type.
template <class T>
concept HasDLPackType = requires {
  { DLPackType<std::remove_cv_t<T>>::value } -> std::convertible_to<DLDataType>;
};

/// The DLPack type of T.
template <class T>
constexpr DLDataType dlpack_type_of() noexcept {
  static_assert(HasDLPackType<T>,
                "cai::dlpack_type_of<T>(): T has no DLPack type. Specialise cai::DLPackType<T> "
                "with `static constexpr DLDataType value{code, bits, lanes}`.");
  if constexpr (HasDLPackType<T>) {
    return DLPackType<std::remove_cv_t<T>>::value;
  } else {
    return DLDataType{};
  }
}

}  // namespace cai
