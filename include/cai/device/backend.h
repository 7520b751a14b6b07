#pragma once

// The device layer: memory, streams, events and pointer attributes over the CUDA driver API,
// whose entry points come from libcuda.so.1 (opened at run time) or from cai's simulated
// driver.

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "cai/core/layout.h"
#include "cai/device/operations.h"

namespace cai::device {

/// A stream as the CUDA Array Interface writes it: 1 is the legacy default stream, 2 the
/// per-thread default stream, any other value a CUstream. 0 is never a valid handle here.
using StreamHandle = std::uint64_t;
inline constexpr StreamHandle kLegacyDefaultStream = 1;
inline constexpr StreamHandle kPerThreadDefaultStream = 2;
/// Whether `s` is a default stream (1 or 2): a stream nothing destroys.
constexpr bool is_default_stream(StreamHandle s) noexcept {
  return s == kLegacyDefaultStream || s == kPerThreadDefaultStream;
}

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

namespace detail {
struct BackendState;
class BackendAccess;  // src/device: the state behind the interface
}  // namespace detail

/// The device layer's one backend: the CUDA driver API, called through the driver's table of
/// entry points, which comes from libcuda.so.1 or from cai's simulated driver (a CPU
/// implementation of the same entry points with a race detector, docs/simulator.md). Nothing
/// above the table differs between the two. Thread-safe.
class Backend {
 public:
  /// A backend over a loaded driver (make_backend() in src/device/backend/backend.h).
  explicit Backend(std::unique_ptr<detail::BackendState> state);
  ~Backend();
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  CallCounts call_counts() const noexcept;
  void reset_call_counts() noexcept;

  /// "cuda" (libcuda.so.1) or "simulator" (the simulated driver).
  std::string_view name() const noexcept;
  /// Whether the driver is cai's simulator (which adds the controls of cai/device/simulator.h).
  bool simulated() const noexcept;

  // Devices and contexts.
  int device_count();
  DeviceProperties properties(int device);
  int current_device();
  void set_current_device(int device);
  /// The current device's free and total memory in bytes (cuMemGetInfo).
  std::pair<std::size_t, std::size_t> memory_info();

  // Memory. alloc(…, 0) returns 0 and free(0) does nothing.
  std::uint64_t alloc(MemoryKind kind, std::size_t bytes);
  void free(std::uint64_t ptr);
  /// free() without blocking the caller. The driver's cuMemFree waits for the work of every
  /// stream of the device, not only the work that used the memory, so a thread of the backend
  /// frees instead, in call order. ptr is checked here (the errors of free()); a failed free
  /// on that thread leaks the allocation. An alloc() that finds no memory waits for these
  /// frees and tries once more.
  void free_deferred(std::uint64_t ptr);
  /// Waits until every free_deferred() called so far has freed its memory.
  void flush_frees();
  PointerInfo pointer_info(std::uint64_t ptr);
  /// Page-locks host memory the caller owns (cuMemHostRegister) until host_unregister, mapped
  /// for kernels; `read_only` memory (e.g. mapped read-only) is registered READ_ONLY, and the
  /// device may then only read it.
  void host_register(std::uint64_t ptr, std::size_t bytes, bool read_only = false);
  void host_unregister(std::uint64_t ptr);
  /// Throws Error(device_error) unless [r.lo, r.hi) is memory a kernel running on `device`
  /// can dereference at those addresses, inside one live allocation (the rule every operation
  /// applies to array data; extension kernels get it through the C API): page-locked memory that
  /// the device reaches only at cuMemHostGetDevicePointer's address is refused. `where`/`name`
  /// start the message.
  PointerInfo check_kernel_memory(std::string_view where, std::string_view name, std::uint64_t lo,
                                  std::uint64_t hi, int device);

  // Stream-ordered operations.
  void memset_async(std::uint64_t dst, int byte, std::size_t bytes, StreamHandle s);
  /// Plain copy between any two memory kinds (host pointers included).
  void copy_async(std::uint64_t dst, std::uint64_t src, std::size_t bytes, StreamHandle s);
  /// dst = src element by element (equal shapes and item sizes, any strides); the result is as
  /// if src were read completely before dst is written, also when they overlap.
  void copy_strided_async(const Operand& dst, const Operand& src, StreamHandle s);
  /// Writes the `dst.layout.itemsize()` bytes at `value` to every element of dst.
  void fill_async(const Operand& dst, const void* value, StreamHandle s);
  /// operands[0] = op(operands[1], ...) elementwise on `type` (cai/device/operations.h): as
  /// many operands as 1 + the operation's inputs, one shape, item size element_size(type).
  /// An input either is the output (same elements) or shares no bytes with it. Operands that
  /// are not naturally aligned for `type` are staged, as are those the kernel cannot reach.
  void elementwise_async(ElementwiseOp op, ElementType type, std::span<const Operand> operands,
                         StreamHandle s);
  /// Runs fn on a host thread once the work enqueued on s so far is done, without blocking
  /// the caller (cuLaunchHostFunc); later work on s waits for it. fn must not call the backend.
  void launch_host_func(StreamHandle s, std::function<void()> fn);

  // Stream-ordered memory, for temporaries of one stream.
  /// Device memory for work enqueued on s from now on (0 for 0 bytes).
  std::uint64_t alloc_async(std::size_t bytes, StreamHandle s);
  /// Frees memory from alloc_async once the work enqueued on s so far has completed, without
  /// blocking the host; work enqueued later (on any stream) must not use it.
  void free_async(std::uint64_t ptr, StreamHandle s);

  // Streams. stream_create returns a new handle (never 0, 1 or 2).
  StreamHandle stream_create(bool non_blocking);
  void stream_destroy(StreamHandle s);
  void stream_synchronize(StreamHandle s);
  /// true when all work enqueued so far has completed.
  bool stream_query(StreamHandle s);

  // Events.
  EventHandle event_create(bool timing);
  void event_destroy(EventHandle e);
  void event_record(EventHandle e, StreamHandle s);
  void stream_wait_event(StreamHandle s, EventHandle e);
  void event_synchronize(EventHandle e);
  bool event_query(EventHandle e);
  float event_elapsed_ms(EventHandle start, EventHandle end);

  /// Waits for all work on the current device, then for the frees free_deferred() queued.
  void synchronize();

  // Several devices and several processes (docs/scale-out.md).
  /// The device a stream belongs to; the default streams (1, 2) name the current device's.
  int stream_device(StreamHandle s);
  /// Copies bytes from device memory of src_device to device memory of dst_device, ordered on
  /// s (cuMemcpyPeerAsync): no peer access needs to be enabled.
  void copy_peer_async(std::uint64_t dst, int dst_device, std::uint64_t src, int src_device,
                       std::size_t bytes, StreamHandle s);
  /// A handle another process opens to map the device allocation starting at `base`.
  IpcMemoryHandle ipc_export_memory(std::uint64_t base);
  /// Maps an allocation of another process on the current device; returns its start here
  /// (another address than in the exporter). Released by ipc_close_memory, never by free.
  std::uint64_t ipc_open_memory(const IpcMemoryHandle& handle);
  /// Unmaps what ipc_open_memory returned, after the work already queued on it, without
  /// blocking the caller (on the thread of free_deferred; flush_frees waits for it).
  void ipc_close_memory(std::uint64_t base);
  /// An event on the current device that other processes can wait on (no timing).
  EventHandle ipc_event_create();
  /// The handle of an event made by ipc_event_create; its records are seen by the importers.
  IpcEventHandle ipc_export_event(EventHandle e);
  /// Opens another process's event; destroyed with event_destroy.
  EventHandle ipc_open_event(const IpcEventHandle& handle);

 private:
  friend class detail::BackendAccess;
  std::unique_ptr<detail::BackendState> state_;
};

/// The process-wide backend: its driver chosen once, on first use, from CAI_BACKEND ("sim" the
/// simulated driver, "cuda" libcuda.so.1, unset = libcuda.so.1 when it has a device, else the
/// simulator). Extension modules link no cai library and reach cai._cai's through its C API
/// (include/cai/capi.h). In a process forked after the backend was made, throws
/// Error(device_error): a driver's state does not survive fork (use the spawn start method).
Backend& backend();

/// Marks the process as exiting (the Python package does it from an atexit hook): from then on
/// cai leaks device memory and events instead of freeing them, since a free waits for the work
/// queued on the memory and exit must not wait for (possibly slow) streams.
void set_exiting() noexcept;
bool exiting() noexcept;

/// True when libcuda.so.1 with at least one device can be loaded (never throws).
bool cuda_available();

/// What cai knows about CUDA here, for `python -m cai info`. Loads the driver (once per
/// process) but never chooses the backend; never throws.
struct CudaInfo {
  int api_version = 0;         ///< the driver ABI cai requests (cuGetProcAddress), e.g. 12000
  bool kernels = false;        ///< cai's kernels were compiled to PTX (nvcc found at build time)
  bool driver_loaded = false;  ///< libcuda.so.1 loaded and initialised with a device
  int driver_version = 0;      ///< cuDriverGetVersion (e.g. 12040); 0 when unknown
  int devices = 0;             ///< CUDA devices the driver reports
  std::string error;           ///< why the driver cannot be used, when it cannot
};
CudaInfo cuda_info();

}  // namespace cai::device
