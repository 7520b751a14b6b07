#pragma once

// Helpers shared by the device tests (GoogleTest only: scripts/sanitize.sh builds the thread
// test by hand without GoogleMock; the error matchers are in ../cai_matchers.h).

#include <gtest/gtest.h>

#include <cstdint>
#include <string_view>

#include "cai/core/layout.h"
#include "cai/device/backend.h"

namespace cai::device::test {

inline bool contains(std::string_view text, std::string_view part) {
  return text.find(part) != std::string_view::npos;
}

inline std::uint64_t addr(const void* p) {
  return static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(p));
}

/// An operand of `shape` elements of `itemsize` bytes at byte `strides` from ptr.
inline Operand operand(std::uint64_t ptr, Dims shape, Dims strides, std::int64_t itemsize,
                       bool host = false) {
  return {ptr, Layout(std::move(shape), std::move(strides), itemsize), host};
}
/// A C-contiguous operand.
inline Operand dense(std::uint64_t ptr, Dims shape, std::int64_t itemsize, bool host = false) {
  return {ptr, Layout::c_contiguous(shape, itemsize), host};
}
/// The caller's host buffer of a host copy.
inline Operand host_buffer(const void* p, Dims shape, std::int64_t itemsize) {
  return dense(addr(p), std::move(shape), itemsize, true);
}

}  // namespace cai::device::test
