#pragma once

// Internal: the backend's argument checks, written once for every entry point that takes the
// argument. Layout arithmetic is the core's (cai/core/strided.h); whether memory belongs to the
// driver is the backend's memory check (src/device/backend/memory.cpp).

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "cai/core/format.h"
#include "cai/core/strided.h"
#include "cai/device/backend.h"
#include "kernels/launch.h"

namespace cai::device::detail {

/// Throws Error(value_error) for handle 0, which the CAI forbids (ambiguous between None, the
/// legacy and the per-thread default stream). `where` is the entry point, e.g. "copy_async()".
void check_stream_handle(StreamHandle s, std::string_view where);

/// A contiguous range (ptr, bytes): non-null unless bytes is 0 (Error(value_error)), no
/// wrap-around (Error(overflow)). Returns it (empty for 0 bytes).
ByteRange check_range(std::string_view where, std::string_view name, std::uint64_t ptr,
                      std::size_t bytes);

/// One operand: a non-null pointer unless it has no bytes (Error(value_error)), and bytes that
/// neither wrap below 0 nor above 2^64 (Error(overflow)). Returns its byte range (empty when
/// it has no bytes). `name` is the operand's name in messages ("dst", "a").
ByteRange check_operand(std::string_view where, std::string_view name, const Operand& op);

/// Operands of one operation: `b` must have the shape and item size of `a`
/// (Error(value_error) naming both).
void check_same_layout_size(std::string_view where, std::string_view a_name, const Operand& a,
                            std::string_view b_name, const Operand& b);

/// Whether the operation is defined on the element type (its functor has an overload).
bool supported(ElementwiseOp op, ElementType type);

/// Validates an elementwise operation: known op and type (Error(value_error)), the operand
/// count, one shape, item size element_size(type), a supported pair (Error(not_implemented)),
/// each input either the output's elements or disjoint from it (Error(value_error)), and each
/// operand as check_operand. Returns the operands' byte ranges.
std::array<ByteRange, CAI_KERNEL_MAX_OPERANDS> check_elementwise(std::string_view where,
                                                                 ElementwiseOp op, ElementType type,
                                                                 std::span<const Operand> operands);

using cai::detail::hex;
/// "[0x7f12...+64)" for messages.
inline std::string range_text(const ByteRange& r) {
  return cai::detail::range_text(r.lo, r.size());
}

}  // namespace cai::device::detail
