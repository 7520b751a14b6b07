#pragma once

// Stream-ordered operations on Views: each orders itself after the streams of its operands
// and orders those streams after itself (CAI v3), then enqueues on `stream`.

#include <cstddef>

#include "cai/arrays/view.h"

namespace cai {

/// dst[...] = src[...]; same shape and dtype, any strides; overlapping memory is handled.
void copy(const View& dst, const View& src, const sync::StreamRef& stream);
/// Every element of dst = the `dtype.itemsize()` bytes at `value`.
void fill(const View& dst, const void* value, const sync::StreamRef& stream);
/// out = a + b elementwise; same shape and dtype (numbers and bool), any strides.
void add(const View& out, const View& a, const View& b, const sync::StreamRef& stream);
/// Host memory <-> device: a contiguous host buffer of dst.layout().nbytes() bytes in C order.
void copy_from_host(const View& dst, const void* host, const sync::StreamRef& stream);
void copy_to_host(void* host, const View& src, const sync::StreamRef& stream);

/// The kernel element type of a dtype, or Error(not_implemented) naming the entry point.
device::ElementType element_type(const DType& dtype, const char* entry);

}  // namespace cai
