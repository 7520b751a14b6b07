#pragma once

// Internal: the simulated CUDA driver. A CPU implementation of the driver entry points cai
// calls (device/driver/api.h), with the driver's documented semantics and return codes:
// devices and primary contexts, device/pinned/managed memory, pointer attributes, streams
// (the legacy and per-thread default streams with their real semantics), events and
// interprocess events, asynchronous copies and memsets, stream-ordered memory, IPC memory
// handles between real processes, modules and kernel launches (cai's kernels, looked up by
// entry name and run by the CPU grid runner on the bodies the GPU runs). A race detector checks
// every access at enqueue time. docs/simulator.md lists the entry points and where the
// simulator differs from a real driver.
//
// Streams are FIFO queues whose ready operations a pool of host threads runs, one at a time
// per stream. Each entry point is a member with the driver's signature; the tables handed to
// load_driver() call them through per-instance trampolines (driver.cpp), which also count the
// calls, inject errors and turn exceptions into return codes.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "cai/core/strided.h"
#include "driver/api.h"
#include "shared_memory.h"
#include "sim/abi_table.h"
#include "sim/client_entries.h"
#include "sim/device_heap.h"
#include "sim/driver_names.h"
#include "sim/race_detector.h"

namespace cai::device::sim {

class SimDriver {
 public:
  /// `devices` simulated devices (1 to 64).
  explicit SimDriver(int devices);
  /// Waits for all enqueued work, then joins the pool.
  ~SimDriver();
  SimDriver(const SimDriver&) = delete;
  SimDriver& operator=(const SimDriver&) = delete;

  /// The function this instance exports as `name` (as dlsym finds it in the exported
  /// library), for load_driver().
  void* symbol(const char* name) const;

#define CAI_DETAIL_MEMBER(name, version, params) CUresult name params;
#define CAI_DETAIL_SIM_MEMBER(name, params) CUresult name params;
  CAI_DRIVER_ENTRIES(CAI_DETAIL_MEMBER)
  CAI_SIM_ENTRIES(CAI_DETAIL_SIM_MEMBER)
  CAI_SIM_CLIENT_ENTRIES(CAI_DETAIL_MEMBER)
#undef CAI_DETAIL_MEMBER
#undef CAI_DETAIL_SIM_MEMBER
  /// The ABIs whose signature differs from the member of their name (abi_table.h, abi.cpp).
#define CAI_DETAIL_IGNORE(...)
#define CAI_DETAIL_ADAPTER(name, version, symbol, params) CUresult symbol params;
  CAI_SIM_ABI_TABLE(CAI_DETAIL_IGNORE, CAI_DETAIL_ADAPTER, CAI_DETAIL_IGNORE)
#undef CAI_DETAIL_IGNORE
#undef CAI_DETAIL_ADAPTER

  /// caiSimGetErrorDetail: the calling thread's last error detail (of any instance).
  static CUresult error_detail(const char** detail);

  /// Called when a host thread exits: its per-thread default streams are released.
  void on_thread_exit(std::uint64_t thread_id);

  /// Counts a call of entry `index` (driver entries, then the simulator's) and returns the
  /// error injected for it, if any (the trampolines call it first).
  CUresult enter(std::size_t index) noexcept;
  /// CUDA_ERROR_INVALID_CONTEXT when the calling thread has no current context (the
  /// trampolines ask it for every entry that needs one).
  CUresult require_context(std::size_t index);
  /// Whether calls are timed (caiSimTimeCalls), and the time of one call of entry `index`.
  bool timing() const noexcept {
    return timing_.load(std::memory_order_relaxed);
  }
  void add_time(std::size_t index, std::uint64_t ns) noexcept {
    times_[index].fetch_add(ns, std::memory_order_relaxed);
  }

  /// The slot of this instance in the trampoline tables.
  int slot() const noexcept {
    return slot_;
  }

 private:
  using TimePoint = std::chrono::steady_clock::time_point;
  struct Stream;
  struct Dep {
    std::shared_ptr<Stream> stream;
    std::uint64_t seq = 0;  ///< ready when stream->completed >= seq
  };
  struct Stamp {
    std::optional<TimePoint> time;  ///< host clock when the stream reached the record
  };
  struct Op {
    std::string name;
    std::uint64_t seq = 0;
    std::vector<Dep> deps;
    double delay = 0;
    std::function<void()> fn;
    std::shared_ptr<Stamp> stamp;
  };
  static constexpr RaceDetector::Actor kNoSlot = ~RaceDetector::Actor{0};
  struct Stream {
    std::uint64_t handle = 0;  ///< as the caller sees it (1 and 2 for the default streams)
    std::shared_ptr<const std::string> label;
    int device = 0;
    bool non_blocking = false;
    bool legacy = false;
    int priority = 0;                    ///< cuStreamCreateWithPriority, clamped to the range
    RaceDetector::Actor slot = kNoSlot;  ///< its vector-clock slot, taken at its first access
    VectorClock clock;
    std::deque<Op> queue;
    std::uint64_t enqueued = 0, completed = 0;
    std::optional<std::string> error;  ///< first failure not yet reported
    std::uint64_t error_seq = 0;
    bool destroyed = false;
    bool running = false;               ///< a pool thread runs its front operation
    bool pending = false;               ///< in ready_ or sleeping_
    std::optional<TimePoint> start_at;  ///< when the front operation's delay ends
    /// Streams whose front operation waits for this stream to complete operation `seq`.
    std::multimap<std::uint64_t, std::weak_ptr<Stream>> waiters;
  };
  struct EventRecord {
    std::shared_ptr<Stream> stream;
    std::uint64_t seq = 0;
    VectorClock clock;
    std::shared_ptr<Stamp> stamp;
  };
  /// The part of an interprocess event that lives in shared memory: records are numbered; a
  /// stream that reaches record n stores n in `completed` and wakes the waiters.
  struct alignas(64) SharedEventSlot {
    std::atomic<std::uint64_t> recorded;
    std::atomic<std::uint64_t> completed;
    std::atomic<std::uint32_t> wake;   ///< futex word, bumped at each completion
    std::atomic<std::uint64_t> token;  ///< nonzero while exported; the handle must match it
  };
  struct SharedEvent {
    std::shared_ptr<SharedMapping> table;  ///< keeps the slot mapped
    SharedEventSlot* slot = nullptr;
    std::uint32_t index = 0;
    ProcessId owner;      ///< the process that created the event
    bool opened = false;  ///< opened from another process (cuIpcOpenEventHandle)
  };
  struct Event {
    unsigned flags = 0;
    int device = 0;
    std::shared_ptr<EventRecord> record;  ///< null until recorded (locally)
    std::shared_ptr<SharedEvent> shared;  ///< interprocess events only
  };
  enum class Kind {
    device,      ///< cuMemAlloc: device heap, IPC capable
    pool,        ///< cuMemAllocAsync: device heap, no context, not IPC capable
    chunk,       ///< caiSimMemAllocChunked: device heap, one chunk of a mapping
    opened,      ///< cuIpcOpenMemHandle: another process's memory
    pinned,      ///< cuMemAllocHost
    registered,  ///< cuMemHostRegister
    mapped,      ///< the device address of registered memory (cuMemHostGetDevicePointer) where
                 ///< a device cannot use its host pointer
    managed,     ///< cuMemAllocManaged
  };
  struct Allocation {
    std::uint64_t size = 0;
    Kind kind = Kind::device;
    int device = 0;
    std::byte* host = nullptr;               ///< where the CPU reaches it
    std::uint64_t chunk_group = 0;           ///< chunks: the reservation's start (first chunk)
    std::uint64_t reservation = 0;           ///< chunks: the reservation's size
    std::shared_ptr<SharedMapping> mapping;  ///< opened memory: the other process's segment
    std::uint64_t opened_refs = 0;           ///< opened memory: cuIpcOpenMemHandle count
    std::uint32_t export_slot = ~0u;         ///< the export-table slot when shared
    unsigned host_flags = 0;   ///< pinned, registered, mapped: cuMemHostAlloc's/Register's flags
    std::uint64_t mapped = 0;  ///< registered memory: its `mapped` entry's address, or 0
  };
  struct DeviceState {
    std::shared_ptr<Stream> legacy;
    VectorClock retired_blocking;  ///< clocks of destroyed blocking streams
    VectorClock retired_all;       ///< clocks of all destroyed streams
    std::unique_ptr<DeviceHeap> heap;
    int primary_refs = 0;           ///< cuDevicePrimaryCtxRetain minus Release
    unsigned primary_flags = 0;     ///< cuDevicePrimaryCtxSetFlags
    int pool_reuse[3] = {1, 1, 1};  ///< the default pool's three reuse attributes
    std::uint64_t pool_release_threshold = 0;
    std::uint64_t pool_used = 0;       ///< bytes of stream-ordered allocations
    std::uint64_t pool_used_high = 0;  ///< and their high watermark
  };
  struct Module {
    std::set<std::string, std::less<>> entries;  ///< entry names the image declares
  };
  struct Function {
    std::uint64_t module = 0;
    int kernel = 0;  ///< kernels::kernel_index
  };
  /// A range one enqueued operation reads or writes, in device addresses, with where the CPU
  /// reaches its element 0.
  struct Touch {
    std::vector<AccessRun> runs;
    std::int64_t host_delta = 0;
  };

  static bool host_kind(Kind k) {
    return k == Kind::pinned || k == Kind::registered || k == Kind::mapped || k == Kind::managed;
  }

  // All *_locked functions run with mu_ held.
  CUresult attributes_locked(unsigned int count, const CUpointer_attribute* attributes,
                             void* const* data, CUdeviceptr ptr);
  /// The "undefined on a real driver" error when ptr is in memory freed by cuMemFreeAsync
  /// (queried, copied, set, launched on or exported).
  CUresult freed_async_locked(CUdeviceptr ptr, const char* entry) const;
  /// The calling thread's current context (its device), or -1.
  int current_locked();
  CUresult need_context_locked(int& device);
  CUresult resolve_locked(CUstream s, std::shared_ptr<Stream>& out);
  /// A stream's property for a cu*Get* entry: INVALID_VALUE for a null `out`, the handle
  /// resolved as every entry resolves it, then `*out = read(stream)`, under the lock.
  template <class T, class Read>
  CUresult read_stream(CUstream h, T* out, Read read) {
    if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
    std::lock_guard lk(mu_);
    std::shared_ptr<Stream> s;
    if (CUresult r = resolve_locked(h, s)) return r;
    *out = read(*s);
    return CUDA_SUCCESS;
  }
  std::shared_ptr<Stream> new_stream_locked(std::uint64_t handle, std::string label, int device,
                                            bool non_blocking);
  Event* event_locked(CUevent e);
  /// The allocation holding [lo, hi) (null when none: then `partial` says whether one holds
  /// some of it).
  const Allocation* find_locked(std::uint64_t lo, std::uint64_t hi, std::uint64_t* base = nullptr,
                                bool* partial = nullptr) const;
  /// The first chunk of the consecutive chunks of one mapping that hold [lo, hi), or null.
  const Allocation* chunks_locked(std::uint64_t lo, std::uint64_t hi, std::uint64_t& base) const;
  /// The CPU address of [lo, hi) for an operation of `device`'s streams (-1: a copy, which
  /// needs no mapping): device memory of that device, host memory (pinned, registered with
  /// DEVICEMAP, managed, or `pageable_ok` host memory outside every allocation); `write`: not
  /// memory registered READ_ONLY. Fails with CUDA_ERROR_ILLEGAL_ADDRESS (kernels) or
  /// INVALID_VALUE; the message names `what` (followed by "<part> <index>" when part is given).
  /// `to_host` (if given) gets what moves [lo, hi) to the addresses the race detector keeps:
  /// nonzero for the device address of registered memory, whose history is at its host address.
  CUresult reach_locked(std::uint64_t lo, std::uint64_t hi, int device, bool pageable_ok,
                        bool write, CUresult error, const char* what, std::int64_t& delta,
                        const char* part = nullptr, std::size_t index = 0,
                        std::int64_t* to_host = nullptr);
  /// Enqueues op on s with the legacy-stream ordering; checks and records `runs` first and
  /// changes nothing when they race (throws Error(race)).
  void enqueue_locked(const std::shared_ptr<Stream>& s, Op op, std::span<const AccessRun> runs,
                      const VectorClock* extra_clock = nullptr, const Dep* extra_dep = nullptr);
  /// An access by the host, now (throws Error(race) and changes nothing when it races).
  void host_access_locked(std::span<const AccessRun> runs, std::string_view name);
  void retire_locked(Stream& s);
  RaceDetector::Actor free_slot_locked(const VectorClock& clock) const;
  CUresult sticky_locked(Stream& s, std::uint64_t upto);
  void release_locked(const std::shared_ptr<Stream>& s);
  void wait_locked(std::unique_lock<std::mutex>& lk, const Stream& s, std::uint64_t seq);
  /// cuStreamSynchronize under the lock: waits for the work enqueued on h so far, orders the
  /// host after it and returns the stream's sticky error.
  CUresult stream_synchronize_locked(std::unique_lock<std::mutex>& lk, CUstream h);
  /// Waits for all work queued so far on every stream.
  void drain_locked(std::unique_lock<std::mutex>& lk);
  void schedule_locked(const std::shared_ptr<Stream>& s);
  void wake_pool_locked(bool all);
  void run_pool();
  void complete_locked(const std::shared_ptr<Stream>& s, const Op& op,
                       const std::optional<std::string>& failure, TimePoint now);
  DeviceHeap& heap_locked(int device);
  std::uint64_t add_allocation_locked(std::uint64_t base, Allocation a);
  /// Host memory (pinned or managed) of the current context's device, at one address for the
  /// host and the device: its address, or 0 with the error in `r`.
  std::uint64_t host_allocation_locked(std::size_t bytes, Kind kind, CUresult& r);
  void give_back_locked(std::uint64_t base, const Allocation& a);
  void unexport_locked(const Allocation& a);
  void wait_shared_locked(const std::shared_ptr<Stream>& s, const std::shared_ptr<SharedEvent>& ev);
  /// A copy with pageable memory as the driver documents it: to device memory it returns once
  /// the bytes are staged; otherwise it waits for the stream (the work is done on return).
  CUresult copy_locked(std::unique_lock<std::mutex>& lk, CUdeviceptr dst, CUdeviceptr src,
                       std::size_t bytes, CUstream stream, const char* name,
                       std::optional<int> dst_device, std::optional<int> src_device);
  SharedMapping& export_table_locked();
  // Client entries (client*.cpp).
  /// The device of a context of this instance (primary or cuCtxCreate'd), or -1.
  int context_device_locked(CUcontext c) const;
  /// A synchronous copy or memset: enqueued on the legacy default stream; waits when `wait`.
  CUresult sync_locked(std::unique_lock<std::mutex>& lk, bool wait);
  /// A memset of `count` elements of `size` bytes of `pattern` (cuMemsetD8/16/32 and Async).
  CUresult memset_locked(CUdeviceptr dst, unsigned pattern, std::size_t size, std::size_t count,
                         CUstream stream, const char* name, bool* host_target = nullptr);
  /// Whether ptr is in device memory (not host memory of any kind).
  bool device_memory_locked(std::uint64_t ptr) const;
  /// The device of one of this instance's default pools, or -1.
  int pool_device(CUmemoryPool pool) const;
  /// cuMemPoolGet/SetAttribute: `use` on the state of the device whose default pool is `pool`,
  /// under the lock; fails first (naming `entry`) for another pool or a null value.
  template <class Use>
  CUresult pool_attribute(CUmemoryPool pool, const void* value, const char* entry, Use use);
  /// Frees every resource of `device`'s primary context (its last release, or a reset).
  void reset_device_locked(std::unique_lock<std::mutex>& lk, int device);

  const int devices_;
  const std::uint64_t instance_;
  int slot_ = -1;
  std::mutex mu_;
  std::condition_variable cv_;  // host waiters: a completion, a stream drained
  std::vector<std::thread> pool_;
  std::condition_variable pool_cv_;
  std::deque<std::shared_ptr<Stream>> ready_;
  std::multimap<TimePoint, std::shared_ptr<Stream>> sleeping_;
  int idle_ = 0, busy_ = 0, claimed_ = 0;
  bool pool_stopping_ = false;
  RaceDetector races_;
  bool race_detection_ = true;
  /// CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM by ordinal (1; tests set 0
  /// through caiSimSetDeviceAttribute). Memory registered with DEVICEMAP while any device says
  /// 0 gets a device address of its own (a `mapped` entry), as the driver documents.
  std::vector<int> host_pointer_for_registered_ = std::vector<int>(64, 1);
  std::map<std::uint64_t, Allocation> memory_;  // by start address
  /// Memory freed by cuMemFreeAsync (start -> size) until its addresses are given out again:
  /// its pointer attributes are undefined on a real driver.
  std::map<std::uint64_t, std::uint64_t> freed_async_;
  std::map<std::uint64_t, std::shared_ptr<Stream>> streams_;  // created streams, by handle
  std::vector<std::shared_ptr<Stream>> all_streams_;          // every live or draining stream
  std::map<std::pair<std::uint64_t, int>, std::shared_ptr<Stream>> per_thread_;
  std::map<std::uint64_t, Event> events_;
  std::map<std::uint64_t, Module> modules_;
  std::map<std::uint64_t, Function> functions_;
  RaceDetector::Who host_;
  VectorClock host_clock_;
  struct RetiredSlot {
    RaceDetector::Actor slot = 0;
    std::uint64_t epoch = 0;
  };
  std::vector<RetiredSlot> retired_slots_;
  RaceDetector::Actor slot_count_ = 1;                            // slot 0 is the host
  std::map<std::uint64_t, std::vector<std::uint64_t>> contexts_;  // by host thread: the context
                                                                  // stack (handle values)
  std::map<std::uint64_t, std::pair<int, unsigned>> created_contexts_;  // cuCtxCreate: handle ->
                                                                        // device, flags
  std::uint64_t next_context_ = 0;
  std::vector<int> physical_;  // device ordinal -> simulated device (CUDA_VISIBLE_DEVICES)
  std::vector<DeviceState> device_state_;
  std::uint64_t next_handle_ = 0;
  std::shared_ptr<SharedMapping> event_table_;
  std::vector<std::uint32_t> free_event_slots_;
  std::uint32_t next_event_slot_ = 0;
  std::shared_ptr<SharedMapping> export_table_;
  /// Memory opened from other processes: (pid, start time, table descriptor, slot, token) ->
  /// its address here. Every field of the handle is in the key: a handle that differs from an
  /// opened one in any field is checked in full, never taken for it.
  std::map<std::tuple<std::int32_t, std::uint64_t, std::int32_t, std::uint32_t, std::uint64_t>,
           std::uint64_t>
      opened_;
  std::vector<std::uint32_t> free_export_slots_;
  std::uint32_t next_export_slot_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> initialized_{false};
  // Calls and injected errors, by entry index (driver entries, then the simulator's).
  std::unique_ptr<std::atomic<std::uint64_t>[]> calls_;
  std::unique_ptr<std::atomic<std::uint64_t>[]> times_;  // ns inside each entry, when timing_
  std::atomic<bool> timing_{false};
  struct Injection {
    CUresult result = CUDA_SUCCESS;
    unsigned skip = 0, times = 0;
  };
  std::mutex inject_mu_;
  std::map<std::size_t, Injection> injections_;
  std::atomic<bool> any_injection_{false};
};

/// A simulated driver with `devices` devices, loaded through load_driver() as libcuda.so.1 is.
std::shared_ptr<const cu::Driver> make_sim_driver(int devices);

/// Reads CAI_SIM_DEVICES (unset: 1). Throws Error(value_error) naming a bad value.
int sim_devices_from_env();

/// The message of the last failed call on this thread (driver.cpp sets it).
void set_error_detail(std::string detail);

}  // namespace cai::device::sim
