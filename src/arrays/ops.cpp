#include "cai/arrays/ops.h"

#include <algorithm>
#include <string>

#include "cai/arrays/devices.h"
#include "cai/core/error.h"

namespace cai {
namespace {

using device::ElementType;
using device::Operand;

std::string shape_str(std::span<const std::int64_t> shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  if (shape.size() == 1) s += ",";
  return s + ")";
}

void require_no_mask(const View& v, const char* entry, const char* name) {
  if (v.mask())
    throw_error(Errc::not_implemented, std::string(entry) + ": " + name +
                                           " is a masked array; cai's operations do not "
                                           "implement masks (read .mask and handle it yourself)");
}

void require_same_shape(const View& a, const View& b, const char* entry, const char* an,
                        const char* bn) {
  if (!std::equal(a.shape().begin(), a.shape().end(), b.shape().begin(), b.shape().end()))
    throw_error(Errc::value_error, std::string(entry) + ": " + an + " has shape " +
                                       shape_str(a.shape()) + " but " + bn + " has shape " +
                                       shape_str(b.shape()) + "; the shapes must be equal");
}

void require_same_dtype(const View& a, const View& b, const char* entry, const char* an,
                        const char* bn) {
  if (!(a.dtype() == b.dtype()))
    throw_error(Errc::type_error, std::string(entry) + ": " + an + " has dtype " + a.dtype().str() +
                                      " but " + bn + " has dtype " + b.dtype().str() +
                                      "; the dtypes must be equal");
}

Operand operand(const View& v) {
  return {v.ptr(), v.strides()};
}

// True when the bytes of a and b may intersect (their extents overlap).
bool may_share_memory(const View& a, const View& b) {
  if (a.size() == 0 || b.size() == 0) return false;
  const auto ea = a.layout().extent(), eb = b.layout().extent();
  const auto lo_a = a.ptr() + static_cast<std::uint64_t>(ea.lo);
  const auto hi_a = a.ptr() + static_cast<std::uint64_t>(ea.hi);
  const auto lo_b = b.ptr() + static_cast<std::uint64_t>(eb.lo);
  const auto hi_b = b.ptr() + static_cast<std::uint64_t>(eb.hi);
  return lo_a < hi_b && lo_b < hi_a;
}

}  // namespace

device::ElementType element_type(const DType& dtype, const char* entry) {
  if (dtype.extended() == Extended::none && dtype.is_native() && !dtype.is_structured()) {
    const auto n = dtype.itemsize();
    switch (dtype.kind()) {
      case Kind::boolean:
        if (n == 1) return ElementType::b8;
        break;
      case Kind::signed_int:
        if (n == 1) return ElementType::i8;
        if (n == 2) return ElementType::i16;
        if (n == 4) return ElementType::i32;
        if (n == 8) return ElementType::i64;
        break;
      case Kind::unsigned_int:
        if (n == 1) return ElementType::u8;
        if (n == 2) return ElementType::u16;
        if (n == 4) return ElementType::u32;
        if (n == 8) return ElementType::u64;
        break;
      case Kind::floating:
        if (n == 2) return ElementType::f16;
        if (n == 4) return ElementType::f32;
        if (n == 8) return ElementType::f64;
        break;
      case Kind::complex:
        if (n == 8) return ElementType::c64;
        if (n == 16) return ElementType::c128;
        break;
      default:
        break;
    }
  }
  std::string why = dtype.is_native() ? "" : " (big-endian data must be byte-swapped first)";
  throw_error(Errc::not_implemented, std::string(entry) + ": dtype " + dtype.str() +
                                         " is not supported; expected a native bool, integer, "
                                         "float16/32/64 or complex64/128" +
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
  const auto itemsize = static_cast<std::size_t>(dst.dtype().itemsize());
  sync::StreamOrder order(backend, stream);
  order.add(*dst.sync());
  order.add(*src.sync());
  if (may_share_memory(dst, src) &&
      !(dst.ptr() == src.ptr() && std::ranges::equal(dst.strides(), src.strides()))) {
    // Stage through a temporary so that an overlapping copy reads every source element
    // before any is overwritten, as NumPy's assignment does.
    View tmp = View::allocate(src.dtype(), src.shape(), false, stream);
    backend.copy_strided_async(operand(tmp), operand(src), src.shape(), itemsize, stream.handle);
    backend.copy_strided_async(operand(dst), operand(tmp), src.shape(), itemsize, stream.handle);
    // The backend has no stream-ordered free, so wait before tmp is freed. Only overlapping
    // copies (a[1:] = a[:-1]) take this path.
    backend.stream_synchronize(stream.handle);
  } else {
    backend.copy_strided_async(operand(dst), operand(src), dst.shape(), itemsize, stream.handle);
  }
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
  backend.fill_async(operand(dst), dst.shape(), static_cast<std::size_t>(dst.dtype().itemsize()),
                     value, stream.handle);
  order.finish();
}

void add(const View& out, const View& a, const View& b, const sync::StreamRef& stream) {
  constexpr const char* entry = "add()";
  out.require_writable(entry, "out");
  require_no_mask(a, entry, "a");
  require_no_mask(b, entry, "b");
  require_no_mask(out, entry, "out");
  require_same_shape(out, a, entry, "out", "a");
  require_same_shape(out, b, entry, "out", "b");
  require_same_dtype(out, a, entry, "out", "a");
  require_same_dtype(out, b, entry, "out", "b");
  const ElementType type = element_type(out.dtype(), entry);
  if (out.size() == 0) return;
  const OperationDevice on(entry, {{"a", &a}, {"b", &b}, {"out", &out}}, stream);
  auto& backend = device::backend();
  sync::StreamOrder order(backend, stream);
  order.add(*out.sync());
  order.add(*a.sync());
  order.add(*b.sync());
  backend.add_async(operand(out), operand(a), operand(b), out.shape(), type, stream.handle);
  order.finish();
}

void copy_from_host(const View& dst, const void* host, const sync::StreamRef& stream) {
  constexpr const char* entry = "copy_to_device()";
  dst.require_writable(entry, "the destination");
  if (dst.layout().nbytes() == 0) return;
  const OperationDevice on(entry, {{"the destination", &dst}}, stream);
  auto& backend = device::backend();
  const auto itemsize = dst.dtype().itemsize();
  const Dims host_strides = Layout::c_strides(dst.shape(), itemsize);
  sync::StreamOrder order(backend, stream);
  order.add(*dst.sync());
  backend.copy_strided_async(operand(dst),
                             Operand{reinterpret_cast<std::uint64_t>(host), host_strides},
                             dst.shape(), static_cast<std::size_t>(itemsize), stream.handle);
  order.finish();
  // The host buffer belongs to the caller, who may free it on return.
  backend.stream_synchronize(stream.handle);
}

void copy_to_host(void* host, const View& src, const sync::StreamRef& stream) {
  if (src.layout().nbytes() == 0) return;
  const OperationDevice on("copy_to_host()", {{"the source", &src}}, stream);
  auto& backend = device::backend();
  const auto itemsize = src.dtype().itemsize();
  const Dims host_strides = Layout::c_strides(src.shape(), itemsize);
  sync::StreamOrder order(backend, stream);
  order.add(*src.sync());
  backend.copy_strided_async(Operand{reinterpret_cast<std::uint64_t>(host), host_strides},
                             operand(src), src.shape(), static_cast<std::size_t>(itemsize),
                             stream.handle);
  order.finish();
  backend.stream_synchronize(stream.handle);
}

}  // namespace cai
