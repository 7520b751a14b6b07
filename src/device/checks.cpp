#include "device/checks.h"

#include <algorithm>
#include <bit>
#include <complex>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "cai/core/error.h"
#include "cai/core/interface.h"

namespace cai::device::detail {

namespace {

std::int64_t mul_or_throw(std::string_view where, std::int64_t a, std::int64_t b) {
  std::int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) {
    throw_error(Errc::overflow, std::string(where) + ": byte offset overflows int64");
  }
  return r;
}

std::int64_t add_or_throw(std::string_view where, std::int64_t a, std::int64_t b) {
  std::int64_t r;
  if (__builtin_add_overflow(a, b, &r)) {
    throw_error(Errc::overflow, std::string(where) + ": byte offset overflows int64");
  }
  return r;
}

bool is_c_contiguous(std::span<const std::int64_t> shape, std::span<const std::int64_t> strides,
                     std::size_t itemsize) {
  std::int64_t expected = static_cast<std::int64_t>(itemsize);
  for (std::size_t d = shape.size(); d-- > 0;) {
    if (shape[d] != 1 && strides[d] != expected) return false;
    expected *= shape[d];
  }
  return true;
}

char* host_ptr(std::uint64_t p) {
  return reinterpret_cast<char*>(static_cast<std::uintptr_t>(p));
}

template <class T, class Op>
void add_loop(Operand out, Operand a, Operand b, std::span<const std::int64_t> shape, Op op) {
  char* po = host_ptr(out.ptr);
  const char* pa = host_ptr(a.ptr);
  const char* pb = host_ptr(b.ptr);
  for_each_element<3>(shape, {out.strides, a.strides, b.strides},
                      [&](const std::array<std::int64_t, 3>& o) {
                        T x, y;
                        std::memcpy(&x, pa + o[1], sizeof(T));
                        std::memcpy(&y, pb + o[2], sizeof(T));
                        T r = op(x, y);
                        std::memcpy(po + o[0], &r, sizeof(T));
                      });
}

// Wrap-around addition without signed-overflow UB.
template <class T>
void add_int(Operand out, Operand a, Operand b, std::span<const std::int64_t> shape) {
  using U = std::make_unsigned_t<T>;
  add_loop<T>(out, a, b, shape, [](T x, T y) {
    return static_cast<T>(static_cast<U>(static_cast<U>(x) + static_cast<U>(y)));
  });
}

}  // namespace

std::string hex(std::uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

void check_stream_handle(StreamHandle s, std::string_view where) {
  if (s == 0) {
    throw_error(Errc::value_error, stream_zero_message(std::string(where) + ": stream"));
  }
}

std::int64_t check_shape(std::string_view where, std::span<const std::int64_t> shape) {
  if (shape.size() > kMaxDims) {
    throw_error(Errc::value_error, std::string(where) + ": " + std::to_string(shape.size()) +
                                       " dimensions, at most " + std::to_string(kMaxDims) +
                                       " supported");
  }
  std::int64_t count = 1;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] < 0) {
      throw_error(Errc::value_error, std::string(where) + ": shape[" + std::to_string(d) + "] is " +
                                         std::to_string(shape[d]) + ", expected a size >= 0");
    }
  }
  for (std::int64_t n : shape) {
    if (n == 0) return 0;
  }
  for (std::int64_t n : shape) {
    if (__builtin_mul_overflow(count, n, &count)) {
      throw_error(Errc::overflow, std::string(where) + ": element count overflows int64");
    }
  }
  return count;
}

ByteExtent byte_extent(std::span<const std::int64_t> shape, std::span<const std::int64_t> strides,
                       std::size_t itemsize) {
  constexpr std::string_view where = "byte_extent()";
  for (std::int64_t n : shape) {
    if (n <= 0) return {};
  }
  if (itemsize > static_cast<std::size_t>(std::numeric_limits<std::int64_t>::max())) {
    throw_error(Errc::overflow, "byte_extent(): itemsize overflows int64");
  }
  ByteExtent e{0, 0};
  for (std::size_t d = 0; d < shape.size(); ++d) {
    std::int64_t span = mul_or_throw(where, shape[d] - 1, strides[d]);
    if (span > 0) {
      e.hi = add_or_throw(where, e.hi, span);
    } else {
      e.lo = add_or_throw(where, e.lo, span);
    }
  }
  e.hi = add_or_throw(where, e.hi, static_cast<std::int64_t>(itemsize));
  // hi - lo must also fit, so that size() is safe.
  std::int64_t size;
  if (__builtin_sub_overflow(e.hi, e.lo, &size)) {
    throw_error(Errc::overflow, "byte_extent(): extent overflows int64");
  }
  return e;
}

void check_itemsize(std::string_view where, std::size_t itemsize) {
  if (itemsize == 0) throw_error(Errc::value_error, std::string(where) + ": itemsize is 0");
}

void check_element_type(std::string_view where, ElementType type) {
  if (static_cast<int>(type) < 0 || static_cast<int>(type) > static_cast<int>(ElementType::c128)) {
    throw_error(Errc::value_error, std::string(where) + ": unknown element type " +
                                       std::to_string(static_cast<int>(type)));
  }
}

AddressRange check_range(std::string_view where, std::string_view name, std::uint64_t ptr,
                         std::size_t bytes) {
  if (bytes == 0) return {};
  if (ptr == 0) {
    throw_error(Errc::value_error, std::string(where) + ": " + std::string(name) +
                                       " is a null pointer for " + std::to_string(bytes) +
                                       " bytes");
  }
  std::uint64_t hi;
  if (__builtin_add_overflow(ptr, static_cast<std::uint64_t>(bytes), &hi)) {
    throw_error(Errc::overflow, std::string(where) + ": " + std::string(name) + " range " +
                                    hex(ptr) + "+" + std::to_string(bytes) +
                                    " wraps around the address space");
  }
  return {ptr, hi};
}

AddressRange check_operand(std::string_view where, std::string_view name, const Operand& op,
                           std::span<const std::int64_t> shape, std::size_t itemsize) {
  if (op.strides.size() != shape.size()) {
    throw_error(Errc::value_error, std::string(where) + ": " + std::string(name) + " has " +
                                       std::to_string(op.strides.size()) + " strides for a " +
                                       std::to_string(shape.size()) + "-d shape");
  }
  ByteExtent e = byte_extent(shape, op.strides, itemsize);
  if (e.empty()) return {};
  if (op.ptr == 0) {
    throw_error(Errc::value_error,
                std::string(where) + ": " + std::string(name) + " is a null pointer");
  }
  // ptr + lo >= 0 and ptr + hi <= 2^64 in unsigned arithmetic.
  const auto neg_lo = static_cast<std::uint64_t>(-e.lo);  // lo <= 0 and > INT64_MIN here
  const auto hi = static_cast<std::uint64_t>(e.hi);
  if (op.ptr < neg_lo || op.ptr + hi < op.ptr) {
    throw_error(Errc::overflow, std::string(where) + ": " + std::string(name) + " at " +
                                    hex(op.ptr) + " with byte extent [" + std::to_string(e.lo) +
                                    ", " + std::to_string(e.hi) +
                                    ") wraps around the address space");
  }
  return {op.ptr - neg_lo, op.ptr + hi};
}

namespace internal {

std::size_t normalize_dims(std::uint64_t& base, std::span<const std::int64_t> shape,
                           std::span<const std::int64_t> strides, std::int64_t* out_shape,
                           std::int64_t* out_strides) {
  std::size_t nd = 0;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    std::int64_t s = strides[d];
    if (s < 0) {
      // Walk the dim backwards: same bytes, positive stride.
      base -= static_cast<std::uint64_t>(shape[d] - 1) * static_cast<std::uint64_t>(-s);
      s = -s;
    }
    out_shape[nd] = shape[d];
    out_strides[nd] = s;
    ++nd;
  }
  // Insertion sort by stride: nd is small.
  for (std::size_t i = 1; i < nd; ++i) {
    for (std::size_t j = i; j > 0 && out_strides[j - 1] > out_strides[j]; --j) {
      std::swap(out_strides[j - 1], out_strides[j]);
      std::swap(out_shape[j - 1], out_shape[j]);
    }
  }
  return nd;
}

}  // namespace internal

void host_copy_strided(Operand dst, Operand src, std::span<const std::int64_t> shape,
                       std::size_t itemsize) {
  ByteExtent de = byte_extent(shape, dst.strides, itemsize);
  ByteExtent se = byte_extent(shape, src.strides, itemsize);
  if (de.empty()) return;
  char* pd = host_ptr(dst.ptr);
  const char* ps = host_ptr(src.ptr);
  if (is_c_contiguous(shape, dst.strides, itemsize) &&
      is_c_contiguous(shape, src.strides, itemsize)) {
    std::memmove(pd, ps, static_cast<std::size_t>(de.size()));
    return;
  }
  const std::uint64_t d_lo = dst.ptr + static_cast<std::uint64_t>(de.lo);
  const std::uint64_t d_hi = dst.ptr + static_cast<std::uint64_t>(de.hi);
  const std::uint64_t s_lo = src.ptr + static_cast<std::uint64_t>(se.lo);
  const std::uint64_t s_hi = src.ptr + static_cast<std::uint64_t>(se.hi);
  if (d_lo < s_hi && s_lo < d_hi) {
    // Overlap: gather the source first so the result does not depend on the visiting order.
    std::int64_t count = 1;
    for (std::int64_t n : shape) count *= n;
    std::vector<char> tmp(static_cast<std::size_t>(count) * itemsize);
    char* t = tmp.data();
    for_each_element<1>(shape, {src.strides}, [&](const std::array<std::int64_t, 1>& o) {
      std::memcpy(t, ps + o[0], itemsize);
      t += itemsize;
    });
    t = tmp.data();
    for_each_element<1>(shape, {dst.strides}, [&](const std::array<std::int64_t, 1>& o) {
      std::memcpy(pd + o[0], t, itemsize);
      t += itemsize;
    });
    return;
  }
  // A fixed-size element copy for the common item sizes: a run-time-sized memcpy is a libc
  // call per element (4x slower on reversed layouts).
  auto copy_elements = [&](auto word) {
    using Word = decltype(word);
    for_each_element<2>(shape, {dst.strides, src.strides},
                        [&](const std::array<std::int64_t, 2>& o) {
                          Word w;
                          std::memcpy(&w, ps + o[1], sizeof(Word));
                          std::memcpy(pd + o[0], &w, sizeof(Word));
                        });
  };
  switch (itemsize) {
    case 1:
      return copy_elements(std::uint8_t{});
    case 2:
      return copy_elements(std::uint16_t{});
    case 4:
      return copy_elements(std::uint32_t{});
    case 8:
      return copy_elements(std::uint64_t{});
    default:
      for_each_element<2>(shape, {dst.strides, src.strides},
                          [&](const std::array<std::int64_t, 2>& o) {
                            std::memcpy(pd + o[0], ps + o[1], itemsize);
                          });
  }
}

void host_fill(Operand dst, std::span<const std::int64_t> shape, std::size_t itemsize,
               const void* value) {
  if (byte_extent(shape, dst.strides, itemsize).empty()) return;
  char* pd = host_ptr(dst.ptr);
  // A copy, in case value points into the destination.
  std::vector<char> v(static_cast<const char*>(value), static_cast<const char*>(value) + itemsize);
  for_each_element<1>(shape, {dst.strides}, [&](const std::array<std::int64_t, 1>& o) {
    std::memcpy(pd + o[0], v.data(), itemsize);
  });
}

void host_add(Operand out, Operand a, Operand b, std::span<const std::int64_t> shape,
              ElementType type) {
  switch (type) {
    case ElementType::b8:
      return add_loop<std::uint8_t>(out, a, b, shape, [](std::uint8_t x, std::uint8_t y) {
        return static_cast<std::uint8_t>((x != 0) || (y != 0));
      });
    case ElementType::i8:
      return add_int<std::int8_t>(out, a, b, shape);
    case ElementType::i16:
      return add_int<std::int16_t>(out, a, b, shape);
    case ElementType::i32:
      return add_int<std::int32_t>(out, a, b, shape);
    case ElementType::i64:
      return add_int<std::int64_t>(out, a, b, shape);
    case ElementType::u8:
      return add_int<std::uint8_t>(out, a, b, shape);
    case ElementType::u16:
      return add_int<std::uint16_t>(out, a, b, shape);
    case ElementType::u32:
      return add_int<std::uint32_t>(out, a, b, shape);
    case ElementType::u64:
      return add_int<std::uint64_t>(out, a, b, shape);
    case ElementType::f16:
      // A float sum of two halves is close enough that rounding it to half is exact-rounded:
      // when float rounds, the bits below half precision cannot form a tie.
      return add_loop<std::uint16_t>(out, a, b, shape, [](std::uint16_t x, std::uint16_t y) {
        return float_to_half(half_to_float(x) + half_to_float(y));
      });
    case ElementType::f32:
      return add_loop<float>(out, a, b, shape, [](float x, float y) { return x + y; });
    case ElementType::f64:
      return add_loop<double>(out, a, b, shape, [](double x, double y) { return x + y; });
    case ElementType::c64:
      return add_loop<std::complex<float>>(
          out, a, b, shape, [](std::complex<float> x, std::complex<float> y) { return x + y; });
    case ElementType::c128:
      return add_loop<std::complex<double>>(
          out, a, b, shape, [](std::complex<double> x, std::complex<double> y) { return x + y; });
  }
  check_element_type("host_add()", type);
}

float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  const std::uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    // Zero or subnormal: mant * 2^-24, exact in float.
    float v = static_cast<float>(mant) * 0x1p-24f;
    return sign ? -v : v;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
}

std::uint16_t float_to_half(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t exp = (x >> 23) & 0xffu;
  std::uint32_t mant = x & 0x7fffffu;
  if (exp == 0xff) {
    // Inf stays inf; NaN stays a (quiet) NaN.
    return static_cast<std::uint16_t>(sign | 0x7c00u | (mant ? 0x200u | (mant >> 13) : 0u));
  }
  const int e = static_cast<int>(exp) - 127 + 15;
  if (e >= 31) return static_cast<std::uint16_t>(sign | 0x7c00u);
  if (e <= 0) {
    if (e < -10) return static_cast<std::uint16_t>(sign);
    mant |= 0x800000u;
    const int shift = 14 - e;
    std::uint32_t hm = mant >> shift;
    const std::uint32_t rem = mant & ((1u << shift) - 1u);
    const std::uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (hm & 1u))) ++hm;
    return static_cast<std::uint16_t>(sign | hm);
  }
  std::uint32_t h = sign | (static_cast<std::uint32_t>(e) << 10) | (mant >> 13);
  const std::uint32_t rem = mant & 0x1fffu;
  // A carry out of the mantissa correctly bumps the exponent (up to inf).
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return static_cast<std::uint16_t>(h);
}

std::string_view element_type_name(ElementType type) {
  switch (type) {
    case ElementType::b8:
      return "b8";
    case ElementType::i8:
      return "i8";
    case ElementType::i16:
      return "i16";
    case ElementType::i32:
      return "i32";
    case ElementType::i64:
      return "i64";
    case ElementType::u8:
      return "u8";
    case ElementType::u16:
      return "u16";
    case ElementType::u32:
      return "u32";
    case ElementType::u64:
      return "u64";
    case ElementType::f16:
      return "f16";
    case ElementType::f32:
      return "f32";
    case ElementType::f64:
      return "f64";
    case ElementType::c64:
      return "c64";
    case ElementType::c128:
      return "c128";
  }
  return "unknown";
}

}  // namespace cai::device::detail
