#pragma once

// Internal: the state of the one backend over a driver table (device/driver/api.h) and what
// its source files share: driver errors, devices and contexts, the memory ranges it knows,
// stream scopes. The backend's entry points are split by section: context.cpp (devices,
// contexts, choosing the driver), memory.cpp (allocation, pointer attributes, the memory
// check), operations.cpp (copies, fill, elementwise, staging), launch.cpp (modules and kernel
// launches), streams.cpp (streams, events, host functions), ipc.cpp (peer copies, IPC).

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "backend/ranges.h"
#include "cai/core/strided.h"
#include "cai/device/backend.h"
#include "driver/api.h"

namespace cai::device::detail {

namespace cu = ::cai::device::cu;

/// A backend over `driver` (throws Error(device_error) with driver->error when it is not ok).
std::unique_ptr<Backend> make_backend(std::shared_ptr<const cu::Driver> driver);

/// The kernels' PTX embedded at build time (NUL-terminated); empty when built without nvcc.
std::string_view cuda_kernels_ptx();

/// Whether the library was built with the kernels' PTX (nvcc found at configure time). Without
/// it the backend loads a manifest of the entry names, which only the simulated driver runs;
/// a real driver refuses it, and fill, add and strided copies then say so.
bool cuda_kernels_built();

/// The entry names in the PTX, in load order (kernels/launch.h).
std::span<const std::string_view> cuda_kernel_names();

/// The counters behind Backend::call_counts (relaxed: counts, not order).
struct Counter {
  std::atomic<std::uint64_t> n{0};
  void bump() noexcept { n.fetch_add(1, std::memory_order_relaxed); }
};

struct Module {
  std::vector<cu::CUfunction> fn;  ///< by kernel index
};

struct BackendState;

/// A free the backend has checked: what the memory is, and the backend's own record of it.
/// `ipc_close`: memory of another process to unmap (cuIpcCloseMemHandle), not to free.
struct CheckedFree {
  std::uint64_t ptr = 0;
  PointerInfo info;
  std::optional<Ranges::Entry> own;
  bool ipc_close = false;
  /// Reads as freed until done (false for a mapping this process opened more than once).
  bool marked = true;
};

/// The thread behind Backend::free_deferred: frees in call order, started on first use. Memory
/// queued here is freed already for everything else: the backend reads it as unregistered.
class FreeQueue {
 public:
  ~FreeQueue() { stop(); }
  void push(BackendState& st, CheckedFree f);
  /// Whether the allocation at base is queued or being freed.
  bool freeing(std::uint64_t base);
  /// The memory at base is in use again (an IPC mapping opened anew while its last close is
  /// queued: the driver counts the opens, so the close leaves it mapped).
  void unmark(std::uint64_t base);
  /// Waits until every queued free is done; false when none was queued.
  bool flush();
  /// Frees what is queued, then ends the thread (idempotent).
  void stop();

 private:
  void run(BackendState& st);
  std::mutex mu_;
  std::condition_variable work_, done_;
  std::deque<CheckedFree> queue_;
  std::unordered_map<std::uint64_t, int> freeing_;  // allocation starts queued or being freed
  std::atomic<std::size_t> in_flight_{0};           // queued or being freed
  std::uint64_t running_ = 0;                       // the allocation being freed now, or 0
  bool running_marked_ = false;                     // whether it still counts in freeing_
  bool stop_ = false;
  std::thread thread_;
};

struct BackendState {
  explicit BackendState(std::shared_ptr<const cu::Driver> d);
  /// Ends the free thread first, while the contexts its frees use are still here.
  ~BackendState() { frees.stop(); }

  std::shared_ptr<const cu::Driver> driver;
  const cu::DriverApi& api;
  const cu::SimApi* sim;  ///< the simulated driver's own entries, or null

  struct {
    Counter event_record, stream_wait_event, event_create, pointer_query, stream_synchronize;
  } counts;

  // Errors.
  std::string describe(cu::CUresult r) const;
  /// Throws the error of a failed driver call: Error(device_error) "CUDA backend: <function>
  /// failed: <NAME> (<text>)<detail>", with what the simulated driver adds; Error(race) for
  /// the simulator's race reports.
  [[noreturn]] void fail(cu::CUresult r, std::string_view function,
                         std::string_view detail = {}) const;
  void check(cu::CUresult r, std::string_view function) const {
    if (r != cu::CUDA_SUCCESS) fail(r, function);
  }

  // Devices and contexts.
  cu::CUdevice device_of(int ordinal, std::string_view where) const;
  int ordinal_of(cu::CUdevice dev) const;
  /// The primary context of a device, retained on first use and kept for the backend's life.
  cu::CUcontext primary_context(int ordinal);
  /// The calling thread's current context, making device 0's primary context current first
  /// when the thread has none (what the runtime API does on first use).
  cu::CUcontext current_context();
  /// The ordinal of the current context's device.
  int current_ordinal();
  /// call() for an entry that needs a current context: on CUDA_ERROR_INVALID_CONTEXT (a thread
  /// without one) it makes one current (current_context()) and calls again, so that the hot
  /// paths pay nothing on the threads that have one.
  template <class F>
  cu::CUresult with_context(F&& call) {
    cu::CUresult r = call();
    if (r == cu::CUDA_ERROR_INVALID_CONTEXT) {
      current_context();
      r = call();
    }
    return r;
  }
  /// The context a stream belongs to; the current one for the legacy and per-thread streams.
  cu::CUcontext stream_context(cu::CUstream s);
  /// The ordinal of the device a context runs on.
  int context_device(cu::CUcontext ctx);

  // Memory (memory.cpp).
  /// What the backend knows of ptr: from its ranges, else one cuPointerGetAttributes.
  PointerInfo pointer_info(std::uint64_t ptr);
  /// The driver's answer about ptr, asked now.
  Ranges::Entry query_pointer(std::uint64_t ptr);
  /// Checks the bytes r of an operand before any work: array data must be memory of the
  /// driver (device, pinned_host or managed) within one live allocation (or the mapped parts
  /// of one virtual-memory reservation); `host` operands may also be pageable host memory, reported
  /// as unregistered also when they lie partly in page-locked memory (copy those with copy_pieces).
  /// `device` is the device of the work (-1: any), for which a remembered foreign range is asked
  /// again when it names another device. Returns what the memory is.
  PointerInfo check_memory(std::string_view where, std::string_view name, const ByteRange& r,
                           bool host, int device);
  /// check_memory of the operands of one operation (`rs`, named by elementwise_operand_name),
  /// their remembered ranges read under one lock; the answers go to `out`.
  void check_operands(std::string_view where, std::span<const ByteRange> rs, int device,
                      std::span<PointerInfo> out);
  /// Error(device_error) unless every byte of r, inside `reservation`, is mapped.
  void check_mapped(std::string_view where, std::string_view name, const ByteRange& r,
                    const ByteRange& reservation);
  /// Remembers an allocation of the current context as made (no driver query).
  void remember(std::uint64_t ptr, std::size_t bytes, MemoryKind kind, bool pooled);
  /// Backend::free's checks (Error(value_error) when free() would refuse ptr), and what the
  /// free needs to know.
  CheckedFree check_free(std::uint64_t ptr);
  /// Backend::free after check_free: the driver call, then the record forgotten.
  void free_checked(const CheckedFree& f);

  /// Where kernels and memsets of `device` reach `ptr`, of memory `info` whose operand starts at
  /// `lo`: page-locked host memory is reached at cuMemHostGetDevicePointer's address unless the
  /// device can use host pointers of registered memory (then, and for other memory: ptr).
  std::uint64_t kernel_address(const PointerInfo& info, std::uint64_t ptr, std::uint64_t lo,
                               int device);

  /// Opens of other processes' memory (ipc_open_memory) not yet closed, by base.
  std::mutex ipc_mu;
  std::unordered_map<std::uint64_t, int> ipc_opened;
  bool memory_pools_supported(int device);

  // Kernels (launch.cpp).
  /// The kernels loaded in `ctx` (loaded on first use; never unloaded while the state lives).
  const Module& module_for(cu::CUcontext ctx);

  Ranges ranges;
  FreeQueue frees;

 private:
  std::mutex context_mu_;
  std::vector<cu::CUcontext> primary_;
  std::vector<signed char> pools_;  // by device: -1 unknown, 0 or 1
  // By device: CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM, -1 until asked.
  std::vector<signed char> host_pointer_ok_;
  std::mutex module_mu_;
  std::unordered_map<cu::CUcontext, std::unique_ptr<Module>> modules_;
  // Tells this state from a later one at the same address (module_for's per-thread cache).
  const std::uint64_t serial_ = next_serial();
  static std::uint64_t next_serial() noexcept {
    static std::atomic<std::uint64_t> n{0};
    return ++n;
  }
};

/// Calls a driver entry point of `st` and throws its error, naming it.
#define CAI_DRIVER(st, entry, ...) (st).check((st).api.entry(__VA_ARGS__), #entry)

/// Makes a context current for a scope when it is not already, then restores the previous.
/// A null context (memory of a stream-ordered pool or a virtual-memory mapping has none)
/// changes nothing.
class ScopedContext {
 public:
  ScopedContext(BackendState& st, cu::CUcontext ctx);
  ~ScopedContext();
  ScopedContext(const ScopedContext&) = delete;
  ScopedContext& operator=(const ScopedContext&) = delete;

 private:
  BackendState& st_;
  bool pushed_ = false;
};

/// The context of a stream, current for the scope, and its device.
struct StreamScope {
  StreamScope(BackendState& st, cu::CUstream s);
  BackendState& st;
  cu::CUstream stream;
  cu::CUcontext context;
  ScopedContext scope;
  int device = 0;
};

/// A stream handle as the driver takes it (1 and 2 are CU_STREAM_LEGACY and
/// CU_STREAM_PER_THREAD themselves); throws Error(value_error) for 0.
cu::CUstream to_stream(StreamHandle s, std::string_view where);
cu::CUevent to_event(EventHandle e, std::string_view where);

/// Whether a kernel on `device` may dereference the memory. Device memory of another device
/// is left to cuMemcpyAsync (staging): peer access may not be enabled.
bool kernel_can_access(const PointerInfo& p, int device);

/// The backend's state, for the device layer's own files and its tests only.
class BackendAccess {
 public:
  static BackendState& state(Backend& b) noexcept { return *b.state_; }
};
inline BackendState& state_of(Backend& b) noexcept {
  return BackendAccess::state(b);
}

}  // namespace cai::device::detail
