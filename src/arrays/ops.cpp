#include "cai/arrays/ops.h"

#include <algorithm>
#include <array>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "cai/arrays/devices.h"
#include "cai/core/error.h"

namespace cai {
namespace {

using device::ElementType;
using device::Operand;

void require_no_mask(const View& v, const char* entry, const char* name) {
  if (v.mask())
    throw_error(Errc::not_implemented, std::string(entry) + ": " + name +
                                           " is a masked array; cai's operations do not "
                                           "implement masks (read .mask and handle it yourself)");
}

void require_same_shape(const View& a, const View& b, const char* entry, const char* an,
                        const char* bn) {
  if (!same_shape(a.shape(), b.shape()))
    throw_error(Errc::value_error, std::string(entry) + ": " + an + " has shape " +
                                       format_dims(a.shape()) + " but " + bn + " has shape " +
                                       format_dims(b.shape()) + "; the shapes must be equal");
}

void require_same_dtype(const View& a, const View& b, const char* entry, const char* an,
                        const char* bn) {
  if (!(a.dtype() == b.dtype()))
    throw_error(Errc::type_error, std::string(entry) + ": " + an + " has dtype " +
                                      a.dtype().display_name() + " but " + bn + " has dtype " +
                                      b.dtype().display_name() + "; the dtypes must be equal");
}

Operand operand(const View& v) {
  return {v.ptr(), v.layout()};
}

// True when b partly overlaps a, whose byte range is ra: some bytes in common without being
// a's elements exactly (an elementwise operation may write its input in place only element for
// element).
bool partly_overlaps(const View& a, const std::optional<ByteRange>& ra, const View& b) {
  const auto rb = b.layout().byte_range(b.ptr());
  if (ra && rb && !may_share_memory(*ra, *rb)) return false;
  return !same_elements(a.ptr(), a.strides(), b.ptr(), b.strides(), a.shape());
}

// Device memory for one stream's work, freed stream-ordered when the last View of it goes:
// the allocator's (cai/arrays/allocator.h) when one is set, else the driver's stream-ordered
// pool (Backend::alloc_async).
class StreamBuffer {
 public:
  StreamBuffer(std::size_t bytes, sync::StreamRef stream) : stream_(std::move(stream)) {
    if (get_allocator()) {
      // Used on stream_ only: given back on it, with nothing to order.
      buffer_.emplace(device::MemoryKind::device, bytes, stream_);
      ptr_ = buffer_->ptr();
    } else {
      ptr_ = device::backend().alloc_async(bytes, stream_.handle);
    }
  }
  ~StreamBuffer() {
    if (buffer_ || device::exiting()) return;  // leaked at exit: the streams may be gone
    try {
      device::backend().free_async(ptr_, stream_.handle);
    } catch (...) {
      // A destructor must not throw; a failed free leaks the buffer.
    }
  }
  StreamBuffer(const StreamBuffer&) = delete;
  StreamBuffer& operator=(const StreamBuffer&) = delete;
  std::uint64_t ptr() const noexcept { return ptr_; }

 private:
  std::uint64_t ptr_ = 0;
  sync::StreamRef stream_;  // keeps the stream alive until the free is enqueued
  std::optional<DeviceBuffer> buffer_;
};

// A C-contiguous temporary used only on `stream`: no host synchronization to free it.
View stream_temporary(const View& like, const sync::StreamRef& stream) {
  Layout layout = Layout::c_contiguous(like.shape(), like.dtype().itemsize());
  auto buffer = std::make_shared<StreamBuffer>(static_cast<std::size_t>(layout.nbytes()), stream);
  const std::uint64_t ptr = buffer->ptr();
  return View(ptr, like.dtype(), std::move(layout), false,
              std::make_shared<sync::SyncState>(stream), std::move(buffer));
}

// The operands of one operation, each made in place from its View (one layout copy each).
class Operands {
 public:
  Operands() = default;
  ~Operands() {
    for (std::size_t k = 0; k < n_; ++k) at(k).~Operand();
  }
  Operands(const Operands&) = delete;
  Operands& operator=(const Operands&) = delete;
  void push(const View& v) {
    new (&storage_[n_ * sizeof(Operand)]) Operand{v.ptr(), v.layout()};
    ++n_;
  }
  std::span<const Operand> span() const noexcept { return {&at(0), n_}; }

 private:
  static constexpr std::size_t kMax = 1 + device::max_elementwise_inputs;
  Operand& at(std::size_t k) noexcept {
    return *std::launder(reinterpret_cast<Operand*>(&storage_[k * sizeof(Operand)]));
  }
  const Operand& at(std::size_t k) const noexcept {
    return *std::launder(reinterpret_cast<const Operand*>(&storage_[k * sizeof(Operand)]));
  }
  alignas(Operand) unsigned char storage_[kMax * sizeof(Operand)];
  std::size_t n_ = 0;
};

// An out that partly overlaps an input: computed into a stream-ordered temporary, then copied
// (as NumPy does). Out of line: the common call pays nothing for it.
[[gnu::noinline]] void elementwise_staged(device::ElementwiseOp op, ElementType type,
                                          const View& out, std::span<const View* const> inputs,
                                          const sync::StreamRef& stream) {
  auto& backend = device::backend();
  const View temporary = stream_temporary(out, stream);
  Operands operands;
  operands.push(temporary);
  for (const View* in : inputs) operands.push(*in);
  backend.elementwise_async(op, type, operands.span(), stream.handle);
  backend.copy_strided_async(operand(out), operand(temporary), stream.handle);
}

}  // namespace

device::ElementType element_type(const DType& dtype, const char* entry) {
  if (dtype.is_native() && !dtype.is_structured()) {
    const auto n = static_cast<std::size_t>(dtype.itemsize());
#define CAI_DTYPE_CASE(ctx, name, dtype_kind, dtype_extended, value)                      \
  if (dtype.extended() == Extended::dtype_extended && dtype.kind() == Kind::dtype_kind && \
      n == sizeof(value))                                                                 \
    return ElementType::name;
    CAI_ELEMENT_TYPES(CAI_DTYPE_CASE, _)
#undef CAI_DTYPE_CASE
  }
  std::string why = dtype.is_native() ? "" : " (big-endian data must be byte-swapped first)";
  throw_error(Errc::not_implemented, std::string(entry) + ": dtype " + dtype.display_name() +
                                         " is not supported; expected a native bool, integer, "
                                         "float16/32/64, complex64/128, bfloat16 or float8 "
                                         "format" +
                                         why);
}

void copy(const View& dst, const View& src, const sync::StreamRef& stream) {
  constexpr const char* entry = "copy()";
  dst.require_writable(entry, "dst");
  require_no_mask(dst, entry, "dst");
  require_no_mask(src, entry, "src");
  require_same_shape(dst, src, entry, "dst", "src");
  require_same_dtype(dst, src, entry, "dst", "src");
  if (dst.layout().nbytes() == 0) return;
  if (copy_between_devices(dst, src, stream)) return;
  const OperationDevice on(entry, {{"dst", &dst}, {"src", &src}}, stream);
  auto& backend = device::backend();
  sync::StreamOrder order(backend, stream);
  order.add(*dst.sync());
  order.add(*src.sync());
  // The backend reads the whole source before writing when the two overlap (as NumPy does).
  backend.copy_strided_async(operand(dst), operand(src), stream.handle);
  order.finish();
}

void fill(const View& dst, const void* value, const sync::StreamRef& stream) {
  constexpr const char* entry = "fill()";
  dst.require_writable(entry, "dst");
  require_no_mask(dst, entry, "dst");
  if (dst.layout().nbytes() == 0) return;
  const OperationDevice on(entry, {{"dst", &dst}}, stream);
  auto& backend = device::backend();
  sync::StreamOrder order(backend, stream);
  order.add(*dst.sync());
  backend.fill_async(operand(dst), value, stream.handle);
  order.finish();
}

const char* elementwise_entry(device::ElementwiseOp op) noexcept {
  // "add()", ...: made once.
  static const auto entries = [] {
    std::array<std::string, device::elementwise_op_count> e;
    for (int i = 0; i < device::elementwise_op_count; ++i)
      e[i] = std::string(device::info(static_cast<device::ElementwiseOp>(i)).name) + "()";
    return e;
  }();
  return entries[static_cast<int>(op)].c_str();
}

void elementwise(device::ElementwiseOp op, const View& out, std::span<const View* const> inputs,
                 const sync::StreamRef& stream) {
  if (!device::is_valid(op)) {
    throw_error(Errc::value_error,
                "elementwise(): unknown operation " + std::to_string(static_cast<int>(op)));
  }
  const device::ElementwiseOpInfo& info = device::info(op);
  const char* entry = elementwise_entry(op);
  if (inputs.size() != static_cast<std::size_t>(info.inputs)) {
    throw_error(Errc::value_error, std::string(entry) + ": takes " + std::to_string(info.inputs) +
                                       " inputs, got " + std::to_string(inputs.size()));
  }
  out.require_writable(entry, "out");
  require_no_mask(out, entry, "out");
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    // The operand names are literals: NUL-terminated.
    const char* name = device::elementwise_operand_name(k + 1).data();
    require_no_mask(*inputs[k], entry, name);
    require_same_shape(out, *inputs[k], entry, "out", name);
    require_same_dtype(out, *inputs[k], entry, "out", name);
  }
  const ElementType type = element_type(out.dtype(), entry);
  if (out.size() == 0) return;
  std::array<NamedView, 1 + device::max_elementwise_inputs> named;
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    named[k] = {device::elementwise_operand_name(k + 1).data(), inputs[k]};
  }
  named[inputs.size()] = {"out", &out};
  const OperationDevice on(entry, std::span(named.data(), inputs.size() + 1), stream);
  auto& backend = device::backend();
  sync::StreamOrder order(backend, stream);
  order.add(*out.sync());
  for (const View* in : inputs) order.add(*in->sync());
  const std::optional<ByteRange> out_range = out.layout().byte_range(out.ptr());
  if (std::ranges::any_of(inputs,
                          [&](const View* in) { return partly_overlaps(out, out_range, *in); })) {
    elementwise_staged(op, type, out, inputs, stream);
  } else {
    Operands operands;
    operands.push(out);
    for (const View* in : inputs) operands.push(*in);
    backend.elementwise_async(op, type, operands.span(), stream.handle);
  }
  order.finish();
}

void add(const View& out, const View& a, const View& b, const sync::StreamRef& stream) {
  const View* inputs[] = {&a, &b};
  elementwise(device::ElementwiseOp::add, out, inputs, stream);
}

namespace {
// Blocks until `stream` is idle; then the host knows v's work done if it was on that stream.
void wait_on_host(device::Backend& backend, const View& v, device::StreamHandle stream) {
  const std::uint64_t clock = sync::work_clock();
  backend.stream_synchronize(stream);
  v.sync()->host_waited(stream, clock);
}

// dst = the caller's host memory at `from`; returns once copied when `blocking`.
void upload(const View& dst, const Operand& from, const sync::StreamRef& stream,
            bool blocking = true) {
  if (dst.layout().nbytes() == 0) return;
  const OperationDevice on("copy_to_device()", {{"the destination", &dst}}, stream);
  auto& backend = device::backend();
  sync::StreamOrder order(backend, stream);
  order.add(*dst.sync());
  backend.copy_strided_async(operand(dst), from, stream.handle);
  order.finish();
  if (blocking) wait_on_host(backend, dst, stream.handle);
}
}  // namespace

void copy_from_host(const View& dst, const void* host, const sync::StreamRef& stream,
                    bool blocking) {
  dst.require_writable("copy_to_device()", "the destination");
  upload(dst,
         {reinterpret_cast<std::uint64_t>(host),
          Layout::c_contiguous(dst.shape(), dst.dtype().itemsize()), true},
         stream, blocking);
}

void copy_from_host(const View& dst, const View& host, const sync::StreamRef& stream) {
  constexpr const char* entry = "copy_to_device()";
  dst.require_writable(entry, "the destination");
  require_same_shape(dst, host, entry, "the destination", "the host array");
  require_same_dtype(dst, host, entry, "the destination", "the host array");
  upload(dst, {host.ptr(), host.layout(), true}, stream);
}

void copy_to_host(void* host, const View& src, const sync::StreamRef& stream, bool blocking) {
  if (src.layout().nbytes() == 0) return;
  const OperationDevice on("copy_to_host()", {{"the source", &src}}, stream);
  auto& backend = device::backend();
  sync::StreamOrder order(backend, stream);
  order.add(*src.sync());
  const Operand to{reinterpret_cast<std::uint64_t>(host),
                   Layout::c_contiguous(src.shape(), src.dtype().itemsize()), true};
  backend.copy_strided_async(to, operand(src), stream.handle);
  order.finish();
  if (blocking) wait_on_host(backend, src, stream.handle);
}

}  // namespace cai
