#pragma once

// Stream-ordered operations on Views: each orders itself after the streams of its operands
// and orders those streams after itself (CAI v3), then enqueues on `stream`. The elementwise
// operations and their element types come from the table in cai/device/operations.h.

#include <cstddef>
#include <span>

#include "cai/arrays/view.h"

namespace cai {

/// dst[...] = src[...]; same shape and dtype, any strides; overlapping memory is handled.
void copy(const View& dst, const View& src, const sync::StreamRef& stream);
/// Every element of dst = the `dtype.itemsize()` bytes at `value`.
void fill(const View& dst, const void* value, const sync::StreamRef& stream);
/// The name the messages of operation `op` start with ("add()", ...); op must be valid.
const char* elementwise_entry(device::ElementwiseOp op) noexcept;
/// out = op(inputs...) elementwise; same shape and dtype (one the operation supports), any
/// strides. An out that partly overlaps an input is computed into a temporary first, so the
/// result never depends on the order of the elements (it is NumPy's).
void elementwise(device::ElementwiseOp op, const View& out, std::span<const View* const> inputs,
                 const sync::StreamRef& stream);
/// out = a + b elementwise (ElementwiseOp::add).
void add(const View& out, const View& a, const View& b, const sync::StreamRef& stream);
/// Host memory <-> device: a contiguous host buffer of dst.layout().nbytes() bytes in C order.
/// `blocking`: return once the copy is done. Otherwise the copy is queued and the call returns
/// at once when the host buffer is page-locked (pinned, mapped or registered); with pageable
/// memory the driver finishes the copy before returning anyway (cuMemcpyAsync's documented
/// behaviour), so the caller may reuse the buffer.
void copy_from_host(const View& dst, const void* host, const sync::StreamRef& stream,
                    bool blocking = true);
void copy_to_host(void* host, const View& src, const sync::StreamRef& stream, bool blocking = true);
/// dst = a strided host array (a View of pageable or pinned host memory, any strides, same
/// shape and dtype); returns once copied. Other Views must be device memory: copy() refuses
/// host memory (Error(device_error)).
void copy_from_host(const View& dst, const View& host, const sync::StreamRef& stream);

/// The element type of a dtype (its kind and item size, native byte order), or
/// Error(not_implemented) naming the entry point.
device::ElementType element_type(const DType& dtype, const char* entry);

}  // namespace cai
