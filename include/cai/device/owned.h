#pragma once

// Scopes over the Backend: a stream or an event destroyed with its last owner, a current
// device restored at the end of a scope.

#include <memory>

#include "cai/device/backend.h"

namespace cai::device {

/// A stream cai created (destroyed on destruction) or merely names (the default streams, or a
/// foreign handle: never destroyed).
class OwnedStream {
 public:
  OwnedStream(StreamHandle handle, bool owned) : handle_(handle), owned_(owned) {}
  ~OwnedStream() {
    if (owned_) {
      try {
        backend().stream_destroy(handle_);
      } catch (...) {
        // A destructor must not throw; a failed destroy leaks one stream.
      }
    }
  }
  OwnedStream(const OwnedStream&) = delete;
  OwnedStream& operator=(const OwnedStream&) = delete;

  static std::shared_ptr<OwnedStream> create(bool non_blocking) {
    return std::make_shared<OwnedStream>(backend().stream_create(non_blocking), true);
  }

  StreamHandle handle() const { return handle_; }
  bool owned() const { return owned_; }

 private:
  StreamHandle handle_;
  bool owned_;
};

class OwnedEvent {
 public:
  explicit OwnedEvent(bool timing) : handle_(backend().event_create(timing)), timing_(timing) {}
  ~OwnedEvent() {
    try {
      backend().event_destroy(handle_);
    } catch (...) {
    }
  }
  OwnedEvent(const OwnedEvent&) = delete;
  OwnedEvent& operator=(const OwnedEvent&) = delete;

  EventHandle handle() const { return handle_; }
  bool timing() const { return timing_; }

 private:
  EventHandle handle_;
  bool timing_;
};

/// Makes `device` the calling thread's current device for a scope, then restores the previous
/// one. Does nothing when device < 0 or when it is already current.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) : DeviceGuard(backend(), device) {}
  DeviceGuard(Backend& b, int device) : backend_(b) {
    if (device < 0) return;
    const int current = b.current_device();
    if (current == device) return;
    b.set_current_device(device);
    previous_ = current;
  }
  ~DeviceGuard() {
    if (previous_ < 0) return;
    try {
      backend_.set_current_device(previous_);
    } catch (...) {
      // The device existed a moment ago; nothing sensible to do in a destructor.
    }
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  Backend& backend_;
  int previous_ = -1;
};

}  // namespace cai::device
