#pragma once

// Internal: argument checks, strided-layout arithmetic and CPU reference kernels shared by
// both backends. Everything here is host code without CUDA; the CUDA backend uses the checks
// and extents, the simulator uses all of it.

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "cai/device/backend.h"

namespace cai::device::detail {

/// Throws Error(value_error) for handle 0, which the CAI forbids (ambiguous between None, the
/// legacy and the per-thread default stream). `where` is the entry point, e.g. "copy_async()".
void check_stream_handle(StreamHandle s, std::string_view where);

/// Most dimensions a kernel accepts (CUDA-side arrays rarely exceed 8; NumPy allows 64).
inline constexpr std::size_t kMaxDims = 64;

/// Throws Error(value_error) when a dimension is negative or there are more than kMaxDims,
/// Error(overflow) when the element count does not fit in int64. Returns the element count.
std::int64_t check_shape(std::string_view where, std::span<const std::int64_t> shape);

/// Byte offsets, relative to the base pointer, of the bytes a strided layout may touch:
/// [lo, hi). Empty (lo == hi == 0) when the layout has no elements.
struct ByteExtent {
  std::int64_t lo = 0;
  std::int64_t hi = 0;
  bool empty() const { return hi <= lo; }
  std::int64_t size() const { return hi - lo; }
};

/// The extent of `shape` elements of `itemsize` bytes at byte `strides`. Throws
/// Error(overflow) when an offset does not fit in int64. Does not validate the shape.
ByteExtent byte_extent(std::span<const std::int64_t> shape, std::span<const std::int64_t> strides,
                       std::size_t itemsize);

/// An absolute address range [lo, hi); empty when lo == hi.
struct AddressRange {
  std::uint64_t lo = 0;
  std::uint64_t hi = 0;
  bool empty() const { return hi <= lo; }
  std::uint64_t size() const { return hi - lo; }
};

/// Validates one operand of a strided kernel against the launch shape: as many strides as
/// dimensions, a non-null pointer unless the shape is empty, and an address range that neither
/// wraps below 0 nor above 2^64. Returns that range (empty for an empty shape). `name` is the
/// operand's name in messages ("dst", "a").
AddressRange check_operand(std::string_view where, std::string_view name, const Operand& op,
                           std::span<const std::int64_t> shape, std::size_t itemsize);

/// Validates a contiguous range (ptr, bytes): non-null unless bytes is 0, no wrap-around.
AddressRange check_range(std::string_view where, std::string_view name, std::uint64_t ptr,
                         std::size_t bytes);

/// Throws Error(value_error) for itemsize 0.
void check_itemsize(std::string_view where, std::size_t itemsize);

/// Throws Error(value_error) for a value outside ElementType.
void check_element_type(std::string_view where, ElementType type);

/// Calls f(lo, hi) for each contiguous byte run [lo, hi) (absolute addresses) that a strided
/// layout covers, in no particular order; runs may repeat or overlap when the layout does.
/// Dimensions are reordered by |stride| and merged while each step does not leave a gap, so
/// a C- or F-contiguous (or reversed) layout is one run and an even/odd split gives runs that
/// do not intersect. When more than `max_runs` runs would result, calls f once with the whole
/// extent instead and returns false (a conservative answer); returns true when exact.
template <class F>
bool for_each_run(std::uint64_t ptr, std::span<const std::int64_t> shape,
                  std::span<const std::int64_t> strides, std::size_t itemsize, std::size_t max_runs,
                  F&& f);

/// Iterates an N-d index space in C order, calling f(offsets) with, for each of the K
/// operands, the byte offset sum(index_i * strides_k[i]). Shape and strides must be validated.
template <std::size_t K, class F>
void for_each_element(std::span<const std::int64_t> shape,
                      const std::array<std::span<const std::int64_t>, K>& strides, F&& f);

// CPU reference kernels over validated operands, host-addressable pointers. Used by the
// simulator and by tests as the expected result.

/// Strided copy; behaves as if the source were read completely before the destination is
/// written when the two ranges overlap.
void host_copy_strided(Operand dst, Operand src, std::span<const std::int64_t> shape,
                       std::size_t itemsize);
void host_fill(Operand dst, std::span<const std::int64_t> shape, std::size_t itemsize,
               const void* value);
/// out = a + b: integers wrap around, b8 is logical or, f16 rounds to nearest even.
void host_add(Operand out, Operand a, Operand b, std::span<const std::int64_t> shape,
              ElementType type);

/// IEEE binary16 conversions (round to nearest even), exposed for tests.
float half_to_float(std::uint16_t h);
std::uint16_t float_to_half(float f);

/// "0x7f12..." for messages.
std::string hex(std::uint64_t v);

/// "b8", "f16", ...
std::string_view element_type_name(ElementType type);

// ---------------------------------------------------------------------------------------------
// Template definitions.

namespace internal {
// Sorts dims by |stride| ascending and flips negative strides, adjusting the base; drops
// dims of size 1. Returns the number of dims kept. Shape is assumed non-empty (no zero dim).
std::size_t normalize_dims(std::uint64_t& base, std::span<const std::int64_t> shape,
                           std::span<const std::int64_t> strides, std::int64_t* out_shape,
                           std::int64_t* out_strides);
}  // namespace internal

template <class F>
bool for_each_run(std::uint64_t ptr, std::span<const std::int64_t> shape,
                  std::span<const std::int64_t> strides, std::size_t itemsize, std::size_t max_runs,
                  F&& f) {
  for (std::int64_t n : shape) {
    if (n == 0) return true;
  }
  if (shape.size() > kMaxDims) {
    ByteExtent e = byte_extent(shape, strides, itemsize);
    f(ptr + static_cast<std::uint64_t>(e.lo), ptr + static_cast<std::uint64_t>(e.hi));
    return false;
  }
  std::array<std::int64_t, kMaxDims> sh{}, st{};
  std::uint64_t base = ptr;
  std::size_t nd = internal::normalize_dims(base, shape, strides, sh.data(), st.data());
  // Merge from the smallest stride while each copy of the run touches or overlaps the last.
  std::uint64_t run = itemsize;
  std::size_t inner = 0;
  while (inner < nd && static_cast<std::uint64_t>(st[inner]) <= run) {
    run += static_cast<std::uint64_t>(sh[inner] - 1) * static_cast<std::uint64_t>(st[inner]);
    ++inner;
  }
  // Outer dims enumerate the runs.
  std::uint64_t count = 1;
  for (std::size_t d = inner; d < nd; ++d) {
    count *= static_cast<std::uint64_t>(sh[d]);
    if (count > max_runs) {
      ByteExtent e = byte_extent(shape, strides, itemsize);
      f(ptr + static_cast<std::uint64_t>(e.lo), ptr + static_cast<std::uint64_t>(e.hi));
      return false;
    }
  }
  std::array<std::int64_t, kMaxDims> idx{};
  std::uint64_t off = 0;
  while (true) {
    f(base + off, base + off + run);
    std::size_t d = inner;
    for (; d < nd; ++d) {
      if (++idx[d] < sh[d]) {
        off += static_cast<std::uint64_t>(st[d]);
        break;
      }
      off -= static_cast<std::uint64_t>(sh[d] - 1) * static_cast<std::uint64_t>(st[d]);
      idx[d] = 0;
    }
    if (d == nd) return true;
  }
}

template <std::size_t K, class F>
void for_each_element(std::span<const std::int64_t> shape,
                      const std::array<std::span<const std::int64_t>, K>& strides, F&& f) {
  const std::size_t nd = shape.size();
  for (std::int64_t n : shape) {
    if (n == 0) return;
  }
  std::array<std::int64_t, K> off{};
  if (nd == 0) {
    f(off);
    return;
  }
  // Odometer over the outer dims, a tight loop over the innermost one.
  std::array<std::int64_t, kMaxDims> idx{};
  const std::size_t last = nd - 1;
  const std::int64_t n_inner = shape[last];
  while (true) {
    std::array<std::int64_t, K> o = off;
    for (std::int64_t i = 0; i < n_inner; ++i) {
      f(o);
      for (std::size_t k = 0; k < K; ++k) o[k] += strides[k][last];
    }
    std::size_t d = last;
    while (true) {
      if (d == 0) return;
      --d;
      if (++idx[d] < shape[d]) {
        for (std::size_t k = 0; k < K; ++k) off[k] += strides[k][d];
        break;
      }
      for (std::size_t k = 0; k < K; ++k) off[k] -= (shape[d] - 1) * strides[k][d];
      idx[d] = 0;
    }
  }
}

}  // namespace cai::device::detail
