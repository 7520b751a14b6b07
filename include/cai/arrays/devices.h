#pragma once

// Layer 4: arrays on several devices (docs/scale-out.md). Device memory belongs to one device;
// an operation runs on the device of its operands, made current for its duration, so that the
// default stream handles 1 and 2 name that device's streams; a copy may cross devices.
// With a single device none of this costs more than one virtual call.

#include <array>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>

#include "cai/arrays/view.h"
#include "cai/device/owned.h"

namespace cai {

/// The device whose memory holds `v`: the allocation's device (pinned and managed memory
/// report the device they were allocated on); -1 for a zero-size array or foreign memory.
int device_of(const View& v);

/// A device uuid as text, 8-4-4-4-12 hex digits (as nvidia-smi writes it, without "GPU-").
std::string uuid_text(const std::array<std::uint8_t, 16>& uuid);

/// The current device for a scope (cai/device/owned.h).
using DeviceGuard = device::DeviceGuard;

/// An operand of an operation and its name in messages ("dst", "a").
struct NamedView {
  const char* name;
  const View* view;
};

/// The device an operation runs on, current for the scope: the one device of its operands in
/// device memory. Throws Error(value_error) naming both devices when they are on different
/// devices, or when `stream` (a created stream) belongs to another device than theirs.
class OperationDevice {
 public:
  OperationDevice(const char* entry, std::initializer_list<NamedView> operands,
                  const sync::StreamRef& stream);
  OperationDevice(const char* entry, std::span<const NamedView> operands,
                  const sync::StreamRef& stream);

  /// The device the operation runs on (the current one when nothing says otherwise).
  int device() const;

 private:
  int device_ = -1;
  std::optional<DeviceGuard> guard_;
};

/// The operands of a kernel that dereferences them itself (an extension module's kernel):
/// the operation's device, current for the scope (OperationDevice), and each operand checked
/// to be memory a kernel on that device can reach, inside one live allocation
/// (device::Backend::check_kernel_memory): the rule cai's own operations apply, which cannot
/// stage here. Throws Error(device_error) naming the operand before any work.
class KernelOperands {
 public:
  KernelOperands(const char* entry, std::span<const NamedView> operands,
                 const sync::StreamRef& stream);

 private:
  OperationDevice device_;
};

/// For an entry point that allocates a new array on the current device with `stream` as the
/// array's stream: throws Error(value_error) naming `entry` and both devices when `stream` (a
/// created stream) belongs to another device, since every later operation on the array would
/// refuse that pair (OperationDevice).
void require_stream_of_current_device(const char* entry, const sync::StreamRef& stream);

/// dst[...] = src[...] when dst and src are in device memory of different devices: a peer copy
/// (cuMemcpyPeerAsync) on `stream`, which must belong to dst's device (the default streams
/// name it), ordered after and before the work queued on either array. Returns false, doing
/// nothing, when they are on one device. Shapes and dtypes are the caller's to check.
bool copy_between_devices(const View& dst, const View& src, const sync::StreamRef& stream);

}  // namespace cai
