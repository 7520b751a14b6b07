#pragma once

// Controls that only cai's simulated driver has (CAI_BACKEND=sim): slow a stream down, declare
// host accesses, enqueue host tasks with declared accesses, switch the race detector, count
// driver calls, inject driver errors. Each function acts on the process-wide backend, or on
// the one given, and throws Error(device_error) when its driver is not the simulator. See
// docs/simulator.md for the model.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
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

/// A host task: called on a simulator thread with host[i] the address at which the CPU reaches
/// accesses[i].ptr (device memory is not readable at its device address, as on a GPU). A
/// task that throws makes the next synchronize of its stream report the message.
using Task = std::function<void(std::span<const std::uint64_t> host)>;

/// What the simulated driver keeps (tests check that it stays bounded).
struct Stats {
  std::size_t race_history = 0;  ///< intervals in the race detector's history
  std::size_t clock_slots = 0;   ///< vector-clock slots in use or retired
  std::size_t streams = 0;       ///< streams alive or draining
  std::size_t ipc_mappings = 0;  ///< allocations of other processes mapped here
};

/// True when the process-wide backend() runs on the simulated driver (never throws).
bool active();

/// The path of cai's simulated driver, the shared library libcuda.so.1 that other driver-API
/// clients (numba-cuda, cuda.core) find through LD_LIBRARY_PATH=<its folder>: CAI_SIM_DRIVER,
/// else the one installed with cai. Throws Error(device_error) naming the places tried when
/// there is none. docs/simulator.md, "As libcuda.so.1".
std::string driver_path();

/// Enqueues a pause of `seconds` on stream s: later work on s (and work that waits on it)
/// starts that much later, while the host returns at once.
void delay(StreamHandle s, double seconds);
void delay(Backend& b, StreamHandle s, double seconds);

/// Declares that the calling host thread reads or writes memory now. Throws Error(race) when
/// stream work not ordered before the host (by a synchronize or a completed query) conflicts,
/// and Error(device_error) for device memory, which the host cannot touch.
void host_access(std::uint64_t ptr, std::size_t bytes, bool write);
void host_access(const Access& access, std::string_view what = "host_access");
void host_access(Backend& b, const Access& access, std::string_view what = "host_access");

/// Enqueues fn on stream s as an operation that performs `accesses`; the race detector checks
/// them like those of a kernel.
void enqueue_task(StreamHandle s, std::span<const Access> accesses, Task fn,
                  std::string_view name = "task");
void enqueue_task(Backend& b, StreamHandle s, std::span<const Access> accesses, Task fn,
                  std::string_view name = "task");

/// Switches the race detector on (the default) or off; both forget the recorded history.
void set_race_detection(bool on);
void set_race_detection(Backend& b, bool on);
bool race_detection();
bool race_detection(Backend& b);

/// Forgets the recorded accesses of [ptr, ptr + bytes): call it when host memory that stream
/// work has touched is released (device memory is forgotten by free()).
void forget(std::uint64_t ptr, std::size_t bytes);
void forget(Backend& b, std::uint64_t ptr, std::size_t bytes);

Stats stats(Backend& b);

/// How often each driver entry point was called since the last reset (by entry name; not the
/// simulator's own entries), and the reset.
std::map<std::string, std::uint64_t> driver_calls(Backend& b);
void reset_driver_calls(Backend& b);
/// With timing on, the nanoseconds spent inside each driver entry point since the last reset
/// (the monotonic clock; two reads per call while on): what the driver
/// itself costs, apart from the layers above it (bench/interop.py).
void time_driver_calls(Backend& b, bool on);
std::map<std::string, std::uint64_t> driver_call_ns(Backend& b);

/// The next `times` calls of driver entry `entry` (after `skip` more succeed) fail with the
/// driver error `code` (a CUresult value), as a real driver may: for tests of error paths.
void inject_error(Backend& b, std::string_view entry, int code, unsigned skip = 0,
                  unsigned times = 1);

/// Device memory on the current device: one virtual-memory reservation mapped as `chunks`
/// consecutive chunks of `chunk_bytes` (a multiple of 256), as virtual memory pools map it
/// (PyTorch's expandable segments). The range attributes report the whole reservation; the
/// mapping attributes each chunk. free_chunked of the start frees it all; of another chunk's
/// start, unmaps that chunk only (a hole in the reservation).
std::uint64_t alloc_chunked(Backend& b, std::size_t chunk_bytes, unsigned chunks);
void free_chunked(Backend& b, std::uint64_t ptr);

/// Where the CPU reaches the simulated memory at `ptr` (device memory has a private alias).
void* host_address(Backend& b, std::uint64_t ptr);

}  // namespace cai::device::sim
