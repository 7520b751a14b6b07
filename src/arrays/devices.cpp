#include "cai/arrays/devices.h"

#include <algorithm>
#include <array>
#include <string>

#include "cai/arrays/ops.h"
#include "cai/core/error.h"
#include "cai/device/owned.h"

namespace cai {

namespace {

bool several_devices() {
  return device::backend().device_count() > 1;
}

// The device of a view in device memory (not pinned or managed), else -1.
int device_memory_of(const View& v) {
  if (v.ptr() == 0) return -1;
  const device::PointerInfo info = device::backend().pointer_info(v.ptr());
  return info.kind == device::MemoryKind::device ? info.device : -1;
}

}  // namespace

std::string uuid_text(const std::array<std::uint8_t, 16>& uuid) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string s;
  for (std::size_t i = 0; i < uuid.size(); ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) s += '-';
    s += digits[uuid[i] >> 4];
    s += digits[uuid[i] & 15];
  }
  return s;
}

int device_of(const View& v) {
  if (v.ptr() == 0) return -1;
  const device::PointerInfo info = device::backend().pointer_info(v.ptr());
  return info.kind == device::MemoryKind::unregistered ? -1 : info.device;
}

OperationDevice::OperationDevice(const char* entry, std::initializer_list<NamedView> operands,
                                 const sync::StreamRef& stream)
    : OperationDevice(entry, std::span<const NamedView>(operands.begin(), operands.size()),
                      stream) {}

OperationDevice::OperationDevice(const char* entry, std::span<const NamedView> operands,
                                 const sync::StreamRef& stream) {
  if (!several_devices()) return;
  int device = -1;
  const char* first = nullptr;
  for (const NamedView& op : operands) {
    const int d = device_memory_of(*op.view);
    if (d < 0) continue;
    if (device < 0) {
      device = d;
      first = op.name;
    } else if (d != device) {
      throw_error(Errc::value_error,
                  std::string(entry) + ": " + first + " is on device " + std::to_string(device) +
                      " but " + op.name + " is on device " + std::to_string(d) +
                      "; an operation runs on one device (move one array first with "
                      "cai.ops.copy, which copies between devices)");
    }
  }
  if (!device::is_default_stream(stream.handle)) {
    const int sd = device::backend().stream_device(stream.handle);
    if (device < 0) {
      device = sd;
    } else if (sd != device) {
      throw_error(Errc::value_error,
                  std::string(entry) + ": " + device::stream_text(stream.handle) +
                      " belongs to device " + std::to_string(sd) + " but " + first +
                      " is on device " + std::to_string(device) + "; pass a stream of device " +
                      std::to_string(device) + " (or 0 for its default stream)");
    }
  }
  if (device >= 0) guard_.emplace(device);
  device_ = device;
}

int OperationDevice::device() const {
  return device_ >= 0 ? device_ : device::backend().current_device();
}

KernelOperands::KernelOperands(const char* entry, std::span<const NamedView> operands,
                               const sync::StreamRef& stream)
    : device_(entry, operands, stream) {
  auto& backend = device::backend();
  const int device = device_.device();
  for (const NamedView& op : operands) {
    const View& v = *op.view;
    if (v.layout().nbytes() == 0) continue;
    const std::optional<ByteRange> r = v.layout().byte_range(v.ptr());
    if (!r) throw_error(Errc::overflow, std::string(entry) + ": " + op.name + " wraps around");
    backend.check_kernel_memory(entry, op.name, r->lo, r->hi, device);
  }
}

void require_stream_of_current_device(const char* entry, const sync::StreamRef& stream) {
  if (!several_devices() || device::is_default_stream(stream.handle)) return;
  auto& backend = device::backend();
  const int sd = backend.stream_device(stream.handle);
  const int current = backend.current_device();
  if (sd == current) return;
  throw_error(Errc::value_error,
              std::string(entry) + ": " + device::stream_text(stream.handle) +
                  " belongs to device " + std::to_string(sd) +
                  " but the new array is allocated on device " + std::to_string(current) +
                  " (the current device); pass a stream of device " + std::to_string(current) +
                  " (or 0 for its default stream), or allocate inside `with cai.Device(" +
                  std::to_string(sd) + "):`");
}

bool copy_between_devices(const View& dst, const View& src, const sync::StreamRef& stream) {
  constexpr const char* entry = "copy()";
  if (dst.size() == 0 || !several_devices()) return false;
  const int dd = device_memory_of(dst), sd = device_memory_of(src);
  if (dd < 0 || sd < 0 || dd == sd) return false;
  auto& backend = device::backend();
  if (!device::is_default_stream(stream.handle)) {
    const int wd = backend.stream_device(stream.handle);
    if (wd != dd) {
      throw_error(Errc::value_error,
                  std::string(entry) + ": " + device::stream_text(stream.handle) +
                      " belongs to device " + std::to_string(wd) + " but a copy from device " +
                      std::to_string(sd) + " runs on the destination's device " +
                      std::to_string(dd) + "; pass a stream of device " + std::to_string(dd) +
                      " (or 0 for its default stream)");
    }
  }
  const DeviceGuard on(dd);
  const device::StreamHandle work = stream.handle;
  // Before: the copy waits for the work queued on either array (each on its own device).
  src.sync()->order_before(backend, stream, sd, dd);
  dst.sync()->order_before(backend, stream, dd, dd);

  const Layout::Extent ext = src.layout().extent();
  const auto bytes = static_cast<std::size_t>(ext.hi - ext.lo);
  const std::uint64_t src_lo = src.ptr() + static_cast<std::uint64_t>(ext.lo);
  const bool dense =
      std::ranges::equal(dst.strides(), src.strides()) && ext.hi - ext.lo == src.layout().nbytes();
  if (dense) {
    // Same layout without gaps: the bytes move as they are.
    backend.copy_peer_async(dst.ptr() + static_cast<std::uint64_t>(ext.lo), dd, src_lo, sd, bytes,
                            work);
  } else {
    // The source's bytes come over whole, then land in dst's layout on dst's device.
    const View staging_bytes = View::allocate(
        DType::from_typestr("|u1"), std::array<std::int64_t, 1>{ext.hi - ext.lo}, false, stream);
    backend.copy_peer_async(staging_bytes.ptr(), dd, src_lo, sd, bytes, work);
    const View staged(staging_bytes.ptr() - static_cast<std::uint64_t>(ext.lo), src.dtype(),
                      src.layout(), true, staging_bytes.sync(), staging_bytes.owner());
    copy(dst, staged, stream);
    // No stream-ordered free: wait before the staging buffer goes (as for overlapping copies).
    backend.stream_synchronize(work);
  }

  // After: later work on either array waits for the copy.
  const std::pair<const View*, int> sides[] = {{&src, sd}, {&dst, dd}};
  for (const auto& [view, device] : sides) {
    const auto s = view->sync()->stream();
    if (!s) {
      // Give it a stream of its own device, ordered after the copy.
      const sync::StreamRef adopted =
          device == dd ? stream : sync::StreamRef(device::kLegacyDefaultStream);
      sync::wait_for(backend, stream, dd, adopted, device);
      view->sync()->set_stream(adopted);
    } else {
      sync::wait_for(backend, stream, dd, *s, device);
      view->sync()->mark_work();
    }
  }
  return true;
}

}  // namespace cai
