#pragma once

// The device layer: one interface over memory, streams, events and pointer attributes,
// implemented by the CUDA driver API (loaded at run time) and by a CPU simulator.

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "cai/core/layout.h"
#include "cai/device/operations.h"

namespace cai::device {

namespace detail {
class SimBackend;
}

/// A stream as the CUDA Array Interface writes it: 1 is the legacy default stream, 2 the
/// per-thread default stream, any other value a CUstream. 0 is never a valid handle here.
using StreamHandle = std::uint64_t;
inline constexpr StreamHandle kLegacyDefaultStream = 1;
inline constexpr StreamHandle kPerThreadDefaultStream = 2;

/// A stream in messages and traces: "legacy default stream (1)", "per-thread default stream
/// (2)" or "stream 0x...".
std::string stream_text(StreamHandle s);

/// An event created by a Backend (a CUevent, or a simulator event).
using EventHandle = std::uint64_t;

enum class MemoryKind : int {
  unregistered = 0,  ///< memory the backend does not know (pageable host memory, foreign)
  device = 1,        ///< device memory
  pinned_host = 2,   ///< page-locked host memory, device accessible
  managed = 3,       ///< unified (managed) memory
};

/// What the backend knows of any pointer, interior pointers included.
struct PointerInfo {
  MemoryKind kind = MemoryKind::unregistered;
  int device = -1;                 ///< device ordinal, -1 when not device memory
  std::uint64_t context = 0;       ///< CUcontext (or the simulator's context id)
  bool host_accessible = false;    ///< may be dereferenced on the host
  bool device_accessible = false;  ///< may be dereferenced in a kernel
  std::uint64_t alloc_base = 0;    ///< start of the allocation containing the pointer
  std::uint64_t alloc_size = 0;    ///< size in bytes of that allocation
};

struct DeviceProperties {
  std::string name;
  int ordinal = 0;
  /// Identifies the physical device across processes, whatever their device numbering
  /// (CUDA_VISIBLE_DEVICES): cuDeviceGetUuid, or a fixed value per simulated device.
  std::array<std::uint8_t, 16> uuid{};
  int compute_major = 0, compute_minor = 0;
  std::uint64_t total_memory = 0;
  int multiprocessors = 0;
};

/// An allocation or an event shared with another process of the same machine: opaque bytes,
/// a CUipcMemHandle / CUipcEventHandle, or the simulator's equivalent (docs/scale-out.md).
struct IpcMemoryHandle {
  std::array<std::uint8_t, 64> bytes{};
};
struct IpcEventHandle {
  std::array<std::uint8_t, 64> bytes{};
};

/// One strided operand of an operation: where its element at index (0, ..., 0) is and its
/// layout (shape, byte strides of any sign, item size). The operands of one operation have one
/// shape.
struct Operand {
  std::uint64_t ptr = 0;
  Layout layout;
  /// false (array data): device-accessible memory of the backend, inside one live allocation;
  /// anything else is refused with Error(device_error) before any work. true: the caller's
  /// host buffer of a host copy, which may also be pageable host memory (then unchecked).
  bool host = false;
};

/// How often a backend made the calls a GPU charges for (each a driver call of about a
/// microsecond) since the last reset: what tests and benchmarks use to prove what a path costs,
/// e.g. that an import records no event, waits for nothing and asks about no pointer.
struct CallCounts {
  std::uint64_t event_record = 0;
  std::uint64_t stream_wait_event = 0;
  std::uint64_t event_create = 0;
  /// Pointers the backend could not answer about from what it already knew (a
  /// cuPointerGetAttributes on CUDA; every pointer_info call on the simulator).
  std::uint64_t pointer_query = 0;
  std::uint64_t stream_synchronize = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;

  CallCounts call_counts() const noexcept;
  void reset_call_counts() noexcept;

  /// "cuda" or "simulator".
  virtual std::string_view name() const = 0;

  // Devices and contexts.
  virtual int device_count() = 0;
  virtual DeviceProperties properties(int device) = 0;
  virtual int current_device() = 0;
  virtual void set_current_device(int device) = 0;

  // Memory. alloc(…, 0) returns 0 and free(0) does nothing.
  virtual std::uint64_t alloc(MemoryKind kind, std::size_t bytes) = 0;
  virtual void free(std::uint64_t ptr) = 0;
  virtual PointerInfo pointer_info(std::uint64_t ptr) = 0;

  // Stream-ordered operations.
  virtual void memset_async(std::uint64_t dst, int byte, std::size_t bytes, StreamHandle s) = 0;
  /// Plain copy between any two memory kinds (host pointers included).
  virtual void copy_async(std::uint64_t dst, std::uint64_t src, std::size_t bytes,
                          StreamHandle s) = 0;
  /// dst = src element by element (equal shapes and item sizes, any strides); the result is as
  /// if src were read completely before dst is written, also when they overlap.
  virtual void copy_strided_async(const Operand& dst, const Operand& src, StreamHandle s) = 0;
  /// Writes the `dst.layout.itemsize()` bytes at `value` to every element of dst.
  virtual void fill_async(const Operand& dst, const void* value, StreamHandle s) = 0;
  /// operands[0] = op(operands[1], ...) elementwise on `type` (cai/device/operations.h): as
  /// many operands as 1 + the operation's inputs, one shape, item size element_size(type).
  /// An input either is the output (same elements) or shares no bytes with it.
  virtual void elementwise_async(ElementwiseOp op, ElementType type,
                                 std::span<const Operand> operands, StreamHandle s) = 0;

  // Stream-ordered memory, for temporaries of one stream.
  /// Device memory for work enqueued on s from now on (0 for 0 bytes).
  virtual std::uint64_t alloc_async(std::size_t bytes, StreamHandle s) = 0;
  /// Frees memory from alloc_async once the work enqueued on s so far has completed, without
  /// blocking the host; work enqueued later (on any stream) must not use it.
  virtual void free_async(std::uint64_t ptr, StreamHandle s) = 0;

  // Streams. stream_create returns a new handle (never 0, 1 or 2).
  virtual StreamHandle stream_create(bool non_blocking) = 0;
  virtual void stream_destroy(StreamHandle s) = 0;
  virtual void stream_synchronize(StreamHandle s) = 0;
  /// true when all work enqueued so far has completed.
  virtual bool stream_query(StreamHandle s) = 0;

  // Events.
  virtual EventHandle event_create(bool timing) = 0;
  virtual void event_destroy(EventHandle e) = 0;
  virtual void event_record(EventHandle e, StreamHandle s) = 0;
  virtual void stream_wait_event(StreamHandle s, EventHandle e) = 0;
  virtual void event_synchronize(EventHandle e) = 0;
  virtual bool event_query(EventHandle e) = 0;
  virtual float event_elapsed_ms(EventHandle start, EventHandle end) = 0;

  /// Waits for all work on the current device.
  virtual void synchronize() = 0;

  // Several devices and several processes (docs/scale-out.md).
  /// The device a stream belongs to; the default streams (1, 2) name the current device's.
  virtual int stream_device(StreamHandle s) = 0;
  /// Copies bytes from device memory of src_device to device memory of dst_device, ordered on
  /// s (cuMemcpyPeerAsync): no peer access needs to be enabled.
  virtual void copy_peer_async(std::uint64_t dst, int dst_device, std::uint64_t src, int src_device,
                               std::size_t bytes, StreamHandle s) = 0;
  /// A handle another process opens to map the device allocation starting at `base`.
  virtual IpcMemoryHandle ipc_export_memory(std::uint64_t base) = 0;
  /// Maps an allocation of another process on the current device; returns its start here
  /// (another address than in the exporter). Released by ipc_close_memory, never by free.
  virtual std::uint64_t ipc_open_memory(const IpcMemoryHandle& handle) = 0;
  /// Unmaps what ipc_open_memory returned, after the work already queued on it.
  virtual void ipc_close_memory(std::uint64_t base) = 0;
  /// An event on the current device that other processes can wait on (no timing).
  virtual EventHandle ipc_event_create() = 0;
  /// The handle of an event made by ipc_event_create; its records are seen by the importers.
  virtual IpcEventHandle ipc_export_event(EventHandle e) = 0;
  /// Opens another process's event; destroyed with event_destroy.
  virtual EventHandle ipc_open_event(const IpcEventHandle& handle) = 0;

  /// The simulator behind this interface, or null (virtual: cheaper than a dynamic_cast).
  virtual detail::SimBackend* as_simulator() noexcept { return nullptr; }

 protected:
  /// Counted by the implementations where they make the call (relaxed: counts, not order).
  struct Counter {
    std::atomic<std::uint64_t> n{0};
    void bump() noexcept { n.fetch_add(1, std::memory_order_relaxed); }
  };
  struct Counters {
    Counter event_record, stream_wait_event, event_create, pointer_query, stream_synchronize;
  } counts_;
};

/// The process-wide backend: chosen once, on first use, from CAI_BACKEND ("sim", "cuda" or
/// unset = CUDA when a driver and a device are present, else the simulator). Extension modules
/// link no cai library and reach cai._cai's through its C API (include/cai/capi.h).
Backend& backend();

/// Marks the process as exiting (the Python package does it from an atexit hook): from then on
/// cai leaks device memory and events instead of freeing them, since a free waits for the work
/// queued on the memory and exit must not wait for (possibly slow) streams.
void set_exiting() noexcept;
bool exiting() noexcept;

/// True when a CUDA driver with at least one device can be loaded (never throws).
bool cuda_available();

/// What cai knows about CUDA here, for `python -m cai info`. Loads the driver (once per
/// process) but never chooses the backend; never throws.
struct CudaInfo {
  int headers_version = 0;     ///< CUDA_VERSION of the headers cai was built with; 0: none
  bool kernels = false;        ///< cai's kernels were compiled (nvcc found at build time)
  bool driver_loaded = false;  ///< libcuda.so.1 loaded and initialised with a device
  int driver_version = 0;      ///< cuDriverGetVersion (e.g. 12040); 0 when unknown
  int devices = 0;             ///< CUDA devices the driver reports
  std::string error;           ///< why the driver cannot be used, when it cannot
};
CudaInfo cuda_info();

}  // namespace cai::device
