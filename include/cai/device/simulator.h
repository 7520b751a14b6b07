#pragma once

// Controls that only the CPU simulator backend has (CAI_BACKEND=sim): slow a stream down,
// declare host accesses, enqueue host tasks with declared accesses, switch the race detector.
// Every function throws Error(device_error) when the active backend is not the simulator.
// See docs/simulator.md for the model.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string_view>

#include "cai/device/backend.h"

namespace cai::device::sim {

/// A range of memory an operation reads or writes: `shape` elements of `itemsize` bytes at
/// byte `strides` from `ptr` (strides may be negative or zero). With an empty shape (and no
/// strides) it is the `itemsize` bytes at `ptr`; see contiguous().
struct Access {
  std::uint64_t ptr = 0;
  std::span<const std::int64_t> shape;
  std::span<const std::int64_t> strides;
  std::size_t itemsize = 0;
  bool write = false;

  /// The `bytes` bytes at `ptr` (nothing when bytes is 0).
  static Access contiguous(std::uint64_t ptr, std::size_t bytes, bool write) {
    return Access{ptr, {}, {}, bytes, write};
  }
};

/// True when the process-wide backend() is the simulator (never throws).
bool active();

/// Enqueues a pause of `seconds` on stream s: later work on s (and work that waits on it)
/// starts that much later, while the host returns at once.
void delay(StreamHandle s, double seconds);

/// Declares that the calling host thread reads or writes memory now. Throws Error(race) when
/// stream work not ordered before the host (by a synchronize or a completed query) conflicts,
/// and Error(device_error) for device memory, which the host cannot touch.
void host_access(std::uint64_t ptr, std::size_t bytes, bool write);
void host_access(const Access& access, std::string_view what = "host_access");

/// Enqueues fn on stream s as an operation that performs `accesses`; the race detector checks
/// them like those of a built-in operation. An exception thrown by fn is reported by the next
/// synchronize of s (or of an event recorded after it, or of the device) as device_error.
void enqueue_task(StreamHandle s, std::span<const Access> accesses, std::function<void()> fn,
                  std::string_view name = "task");

/// Switches the race detector on (the default) or off; both forget the recorded history.
void set_race_detection(bool on);
bool race_detection();

/// Forgets the recorded accesses of [ptr, ptr + bytes): call it when host memory that stream
/// work has touched is released (device memory is forgotten by free()).
void forget(std::uint64_t ptr, std::size_t bytes);

}  // namespace cai::device::sim
