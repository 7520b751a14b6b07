#pragma once

// Internal: what every operation does to one element, written once for both executors: the
// CUDA kernels (kernels.cu, compiled by nvcc to PTX) and the CPU (cpu.cpp: the simulator and
// the tests' reference). Functors over element values for the elementwise operations of
// cai/device/operations.h, the float16 conversions, and the word-by-word item bodies of the
// data-movement kernels (copy, fill). No loops over elements here: each executor walks the
// index space its own way and calls these per element.

#include <concepts>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "cai/core/host_device.h"
#include "cai/device/operations.h"

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#endif
#if !defined(__CUDA_ARCH__)
#include <bit>
#include <cstring>
#endif

namespace cai::device::kernels {

using values::BFloat16;
using values::Bool;
using values::Complex;
using values::Float8;
using values::Float8Special;
using values::Half;

// ---------------------------------------------------------------------------------------------
// Loads and stores at byte addresses. The device dereferences (addresses are aligned: the host
// checks before launching); the host copies, which compiles to one move and avoids aliasing UB.

template <class T>
CAI_HOST_DEVICE inline T load(const char* p) {
#if defined(__CUDA_ARCH__)
  return *reinterpret_cast<const T*>(p);
#else
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
#endif
}

template <class T>
CAI_HOST_DEVICE inline void store(char* p, T v) {
#if defined(__CUDA_ARCH__)
  *reinterpret_cast<T*>(p) = v;
#else
  std::memcpy(p, &v, sizeof(T));
#endif
}

// ---------------------------------------------------------------------------------------------
// IEEE binary16 <-> float, rounding to nearest even: the hardware conversion on the device, the
// same conversion in software on the host.

CAI_HOST_DEVICE inline float to_float(Half h) {
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(h.bits));
#else
  const std::uint32_t sign = static_cast<std::uint32_t>(h.bits & 0x8000u) << 16;
  const std::uint32_t exp = (h.bits >> 10) & 0x1fu;
  const std::uint32_t mant = h.bits & 0x3ffu;
  if (exp == 0) {
    // Zero or subnormal: mant * 2^-24, exact in float.
    const float v = static_cast<float>(mant) * 0x1p-24f;
    return sign ? -v : v;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
#endif
}

CAI_HOST_DEVICE inline Half to_half(float f) {
#if defined(__CUDA_ARCH__)
  return Half{__half_as_ushort(__float2half_rn(f))};
#else
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t exp = (x >> 23) & 0xffu;
  std::uint32_t mant = x & 0x7fffffu;
  auto half = [](std::uint32_t bits) { return Half{static_cast<std::uint16_t>(bits)}; };
  if (exp == 0xff) {
    // Inf stays inf; NaN stays a (quiet) NaN.
    return half(sign | 0x7c00u | (mant ? 0x200u | (mant >> 13) : 0u));
  }
  const int e = static_cast<int>(exp) - 127 + 15;
  if (e >= 31) return half(sign | 0x7c00u);
  if (e <= 0) {
    if (e < -10) return half(sign);
    mant |= 0x800000u;
    const int shift = 14 - e;
    std::uint32_t hm = mant >> shift;
    const std::uint32_t rem = mant & ((1u << shift) - 1u);
    const std::uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (hm & 1u))) ++hm;
    return half(sign | hm);
  }
  std::uint32_t h = sign | (static_cast<std::uint32_t>(e) << 10) | (mant >> 13);
  const std::uint32_t rem = mant & 0x1fffu;
  // A carry out of the mantissa correctly bumps the exponent (up to inf).
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return half(h);
#endif
}

// ---------------------------------------------------------------------------------------------
// bfloat16 and the 8-bit floats <-> float, rounding to nearest even (the conversions of
// ml_dtypes, which also turn a value past the largest finite one into inf, or into NaN where
// the format has no inf). Integer arithmetic on the float's bits: the same code on both sides.

CAI_HOST_DEVICE inline std::uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  return std::bit_cast<std::uint32_t>(f);
#endif
}

CAI_HOST_DEVICE inline float bits_float(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  return std::bit_cast<float>(u);
#endif
}

CAI_HOST_DEVICE inline float to_float(BFloat16 h) {
  return bits_float(static_cast<std::uint32_t>(h.bits) << 16);
}

CAI_HOST_DEVICE inline BFloat16 to_bfloat16(float f) {
  const std::uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) {
    return BFloat16{static_cast<std::uint16_t>((x >> 16) | 0x40u)};  // a quiet NaN
  }
  // A carry out of the mantissa correctly bumps the exponent (up to inf).
  return BFloat16{static_cast<std::uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16)};
}

template <int E, int M, int Bias, Float8Special S>
CAI_HOST_DEVICE inline float to_float(Float8<E, M, Bias, S> v) {
  constexpr bool has_sign = S != Float8Special::e8m0;
  const std::uint32_t sign = has_sign ? static_cast<std::uint32_t>(v.bits & 0x80u) << 24 : 0u;
  const std::uint32_t exp = (v.bits >> M) & ((1u << E) - 1u);
  const std::uint32_t mant = v.bits & ((1u << M) - 1u);
  const float nan = bits_float(0x7fc00000u);
  if constexpr (S == Float8Special::e8m0) {
    if (v.bits == 0xffu) return nan;
    // 2^(exp - 127); exp 0 is the float subnormal 2^-127.
    return exp == 0 ? bits_float(0x00400000u) : bits_float(exp << 23);
  } else {
    if constexpr (S == Float8Special::fnuz) {
      if (v.bits == 0x80u) return nan;
    } else if constexpr (S == Float8Special::fn) {
      if ((v.bits & 0x7fu) == 0x7fu) return bits_float(sign | 0x7fc00000u);
    } else {
      if (exp == (1u << E) - 1u) return bits_float(sign | 0x7f800000u | (mant << (23 - M)));
    }
    if (exp == 0) {
      // Zero or subnormal: mant * 2^(1 - Bias - M), exact in float.
      const float magnitude = static_cast<float>(mant) *
                              bits_float(static_cast<std::uint32_t>(127 + 1 - Bias - M) << 23);
      return sign ? -magnitude : magnitude;
    }
    return bits_float(sign | ((exp + 127u - Bias) << 23) | (mant << (23 - M)));
  }
}

template <class F8>
CAI_HOST_DEVICE inline F8 to_float8(float f) {
  constexpr int E = F8::exponent_bits, M = F8::mantissa_bits, Bias = F8::bias;
  constexpr Float8Special S = F8::special;
  auto make = [](std::uint32_t bits) { return F8{static_cast<std::uint8_t>(bits)}; };
  // The NaN and what a value past the largest finite one becomes.
  constexpr std::uint32_t nan = S == Float8Special::fnuz   ? 0x80u
                                : S == Float8Special::e8m0 ? 0xffu
                                : S == Float8Special::fn
                                    ? 0x7fu
                                    : (((1u << E) - 1u) << M) | (1u << (M - 1));
  constexpr std::uint32_t overflow = S == Float8Special::ieee ? ((1u << E) - 1u) << M : nan;
  // The largest finite encoding, without sign.
  constexpr std::uint32_t max_finite = S == Float8Special::ieee   ? (((1u << E) - 1u) << M) - 1u
                                       : S == Float8Special::fn   ? 0x7eu
                                       : S == Float8Special::fnuz ? 0x7fu
                                                                  : 0xfeu;
  const std::uint32_t x = float_bits(f);
  const std::uint32_t abs = x & 0x7fffffffu;
  const bool negative = (x >> 31) != 0;
  if (abs > 0x7f800000u) {
    return make(S == Float8Special::fn || S == Float8Special::ieee ? nan | (negative ? 0x80u : 0u)
                                                                   : nan);
  }
  std::uint32_t sign = negative ? 0x80u : 0u;
  if constexpr (S == Float8Special::e8m0) {
    if (negative && abs != 0) return make(nan);
    sign = 0;
  }
  if (abs == 0x7f800000u) return make(sign | overflow);
  // The value as m * 2^(e - 23), m with its leading one at bit 23 (below for float subnormals).
  if (abs == 0) {
    // No negative zero in fnuz; no zero at all in e8m0 (NaN, as ml_dtypes gives).
    return make(S == Float8Special::fnuz ? 0u : S == Float8Special::e8m0 ? nan : sign);
  }
  const int float_exp = static_cast<int>(abs >> 23);
  std::uint32_t m = float_exp == 0 ? (abs & 0x7fffffu) : ((abs & 0x7fffffu) | 0x800000u);
  int e = float_exp == 0 ? -126 : float_exp - 127;
  while ((m & 0x800000u) == 0) {  // a float subnormal, normalized
    m <<= 1;
    --e;
  }
  // The format's smallest normal exponent (e8m0: exponent field 0 is 2^-127, no subnormals).
  constexpr int min_exp = S == Float8Special::e8m0 ? -Bias : 1 - Bias;
  // Bits of m dropped: those below the format's last mantissa bit at this exponent. The result
  // is q, in units of the last place, with the exponent field above the mantissa (a carry
  // from rounding moves into the exponent, as it should).
  const int shift = (23 - M) + (e < min_exp ? min_exp - e : 0);
  std::uint32_t q;
  if (shift > 25) {
    q = 0;  // below half of the smallest step
  } else {
    q = m >> shift;
    const std::uint32_t rem = m & ((1u << shift) - 1u);
    const std::uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) ++q;
  }
  std::uint32_t bits;
  if (e < min_exp) {
    bits = q;  // subnormal (q may round up to the smallest normal, 1 << M)
  } else {
    bits = (static_cast<std::uint32_t>(e - min_exp + (S == Float8Special::e8m0 ? 0 : 1)) << M) +
           (q - (1u << M));
  }
  if constexpr (S == Float8Special::e8m0) {
    if (e < min_exp) return make(0);  // no zero: the smallest power, 2^-127
  }
  if (bits > max_finite) return make(sign | overflow);
  if constexpr (S == Float8Special::fnuz) {
    if (bits == 0) return make(0);  // no negative zero
  }
  return make(sign | bits);
}

// ---------------------------------------------------------------------------------------------
// The elementwise operations: one functor per row of CAI_ELEMENTWISE_OPS, named as the row.
// `apply` takes and returns element values; an element type it has no overload for is not
// supported by the operation (the host refuses it before launching).

namespace ops {

struct add {
  // Integers wrap around: the sum is formed in the unsigned type (no signed-overflow UB).
  template <class T>
  requires std::is_integral_v<T> CAI_HOST_DEVICE static T apply(T a, T b) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  }
  CAI_HOST_DEVICE static float apply(float a, float b) { return a + b; }
  CAI_HOST_DEVICE static double apply(double a, double b) { return a + b; }
  // bool + bool is logical or, as in NumPy.
  CAI_HOST_DEVICE static Bool apply(Bool a, Bool b) {
    return Bool{static_cast<std::uint8_t>(a.value != 0 || b.value != 0)};
  }
  // The float sum of two halves rounded once to half is the correctly rounded half sum: when
  // the float sum is inexact, the bits below half precision cannot form a tie.
  CAI_HOST_DEVICE static Half apply(Half a, Half b) { return to_half(to_float(a) + to_float(b)); }
  // The same argument holds for bfloat16 and the 8-bit floats (float has 24 bits, more than
  // twice theirs plus two).
  CAI_HOST_DEVICE static BFloat16 apply(BFloat16 a, BFloat16 b) {
    return to_bfloat16(to_float(a) + to_float(b));
  }
  template <int E, int M, int Bias, Float8Special S>
  CAI_HOST_DEVICE static Float8<E, M, Bias, S> apply(Float8<E, M, Bias, S> a,
                                                     Float8<E, M, Bias, S> b) {
    return to_float8<Float8<E, M, Bias, S>>(to_float(a) + to_float(b));
  }
  template <class R>
  CAI_HOST_DEVICE static Complex<R> apply(Complex<R> a, Complex<R> b) {
    return {a.re + b.re, a.im + b.im};
  }
};

}  // namespace ops

namespace detail {
template <class Op, class T, class Seq>
struct supports;
template <class Op, class T, std::size_t... I>
struct supports<Op, T, std::index_sequence<I...>> {
  static constexpr bool value = requires(T x) {
    { Op::apply(((void)I, x)...) } -> std::same_as<T>;
  };
};
}  // namespace detail

/// Whether operation Op with N inputs is defined on element values of type T.
template <class Op, class T, int N>
inline constexpr bool supports =
    detail::supports<Op, T, std::make_index_sequence<static_cast<std::size_t>(N)>>::value;

namespace detail {
template <class Op, class T, std::size_t... I>
CAI_HOST_DEVICE inline void apply_element(char* out, const char* const* in,
                                          std::index_sequence<I...>) {
  store<T>(out, Op::apply(load<T>(in[I])...));
}
}  // namespace detail

/// One element of an elementwise operation: out = Op(in[0], ..., in[N-1]) at byte addresses.
template <class Op, class T, int N>
CAI_HOST_DEVICE inline void apply_element(char* out, const char* const* in) {
  detail::apply_element<Op, T>(out, in, std::make_index_sequence<static_cast<std::size_t>(N)>{});
}

// ---------------------------------------------------------------------------------------------
// Data movement: items of any size moved as `words` words of W bytes (the executor picks the
// widest W that divides the item size, every pointer and every stride, so each access is
// aligned). One functor per row of CAI_DATA_KERNELS (launch.h), with
// item<W>(operand pointers, the fill value, words).

/// 16 bytes, 16-byte aligned: one vector access on the device.
struct alignas(16) Word16 {
  std::uint64_t lo, hi;
};

/// The unsigned word of W bytes (W = 1, 2, 4, 8, 16).
template <int W>
using word_t = std::conditional_t<
    W == 1, std::uint8_t,
    std::conditional_t<W == 2, std::uint16_t,
                       std::conditional_t<W == 4, std::uint32_t,
                                          std::conditional_t<W == 8, std::uint64_t, Word16>>>>;

namespace data {

/// dst = src; operands {dst, src}.
struct copy {
  template <int W>
  CAI_HOST_DEVICE static void item(char* const* p, const char* /*value*/, int words) {
    using T = word_t<W>;
    for (int w = 0; w < words; ++w) store<T>(p[0] + w * W, load<T>(p[1] + w * W));
  }
};

/// dst = value (one item); operands {dst}.
struct fill {
  template <int W>
  CAI_HOST_DEVICE static void item(char* const* p, const char* value, int words) {
    using T = word_t<W>;
    for (int w = 0; w < words; ++w) store<T>(p[0] + w * W, load<T>(value + w * W));
  }
};

}  // namespace data

}  // namespace cai::device::kernels
