#pragma once

// Internal: the CPU simulator backend. Device memory is host memory, streams are FIFO queues
// whose ready operations a pool of host threads runs (one at a time per stream), and a race
// detector checks every access at enqueue time.
// Tests construct private instances with make_sim_backend().

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cai/core/strided.h"
#include "cai/device/backend.h"
#include "cai/device/simulator.h"
#include "device/shared_memory.h"
#include "device/sim/race_detector.h"
#include "device/sim/shared_heap.h"

namespace cai::device::detail {

class SimBackend final : public Backend {
 public:
  /// `devices` simulated devices (1 to 64).
  explicit SimBackend(int devices = 1);
  /// Waits for all enqueued work, then joins the pool.
  ~SimBackend() override;
  SimBackend(const SimBackend&) = delete;
  SimBackend& operator=(const SimBackend&) = delete;

  std::string_view name() const override { return "simulator"; }

  int device_count() override;
  DeviceProperties properties(int device) override;
  int current_device() override;
  void set_current_device(int device) override;

  std::uint64_t alloc(MemoryKind kind, std::size_t bytes) override;
  void free(std::uint64_t ptr) override;
  PointerInfo pointer_info(std::uint64_t ptr) override;

  void memset_async(std::uint64_t dst, int byte, std::size_t bytes, StreamHandle s) override;
  void copy_async(std::uint64_t dst, std::uint64_t src, std::size_t bytes, StreamHandle s) override;
  void copy_strided_async(const Operand& dst, const Operand& src, StreamHandle s) override;
  void fill_async(const Operand& dst, const void* value, StreamHandle s) override;
  void elementwise_async(ElementwiseOp op, ElementType type, std::span<const Operand> operands,
                         StreamHandle s) override;
  std::uint64_t alloc_async(std::size_t bytes, StreamHandle s) override;
  void free_async(std::uint64_t ptr, StreamHandle s) override;

  StreamHandle stream_create(bool non_blocking) override;
  void stream_destroy(StreamHandle s) override;
  void stream_synchronize(StreamHandle s) override;
  bool stream_query(StreamHandle s) override;

  EventHandle event_create(bool timing) override;
  void event_destroy(EventHandle e) override;
  void event_record(EventHandle e, StreamHandle s) override;
  void stream_wait_event(StreamHandle s, EventHandle e) override;
  void event_synchronize(EventHandle e) override;
  bool event_query(EventHandle e) override;
  float event_elapsed_ms(EventHandle start, EventHandle end) override;

  void synchronize() override;
  SimBackend* as_simulator() noexcept override { return this; }

  int stream_device(StreamHandle s) override;
  void copy_peer_async(std::uint64_t dst, int dst_device, std::uint64_t src, int src_device,
                       std::size_t bytes, StreamHandle s) override;
  IpcMemoryHandle ipc_export_memory(std::uint64_t base) override;
  std::uint64_t ipc_open_memory(const IpcMemoryHandle& handle) override;
  void ipc_close_memory(std::uint64_t base) override;
  EventHandle ipc_event_create() override;
  IpcEventHandle ipc_export_event(EventHandle e) override;
  EventHandle ipc_open_event(const IpcEventHandle& handle) override;

  // Simulator-only controls, exposed publicly through cai/device/simulator.h.
  void delay(StreamHandle s, double seconds);
  void host_access(const sim::Access& access, std::string_view what = "host_access");
  void enqueue_task(StreamHandle s, std::span<const sim::Access> accesses, std::function<void()> fn,
                    std::string_view name = "task");
  void set_race_detection(bool on);
  bool race_detection();
  void forget(std::uint64_t ptr, std::size_t bytes);
  /// Number of intervals in the race detector's history (tests check that it stays bounded).
  std::size_t race_history_size();
  /// Number of vector-clock slots in use or retired: the length of every clock (tests check
  /// that it stays bounded when streams come and go).
  std::size_t clock_slots();

  /// Called when a host thread exits: its per-thread default streams are released.
  void on_thread_exit(std::uint64_t thread_id);

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
    StreamHandle handle = 0;  ///< as the user sees it (1 and 2 for default streams)
    std::shared_ptr<const std::string> label;
    int device = 0;
    bool non_blocking = false;
    bool legacy = false;
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
  /// The part of an interprocess event that lives in shared memory: records are numbered;
  /// a stream that reaches record n stores n in `completed` and wakes the waiters.
  struct alignas(64) SharedEventSlot {
    std::atomic<std::uint64_t> recorded;
    std::atomic<std::uint64_t> completed;
    std::atomic<std::uint32_t> wake;  ///< futex word, bumped at each completion
  };
  struct SharedEvent {
    std::shared_ptr<SharedMapping> table;  ///< keeps the slot mapped
    SharedEventSlot* slot = nullptr;
    std::uint32_t index = 0;
    ProcessId owner;      ///< the process that created the event
    bool opened = false;  ///< opened from another process (ipc_open_event)
  };
  struct Event {
    bool timing = false;
    int device = 0;
    std::shared_ptr<EventRecord> record;  ///< null until recorded (locally)
    std::shared_ptr<SharedEvent> shared;  ///< interprocess events only
  };
  struct Allocation {
    std::uint64_t size = 0;
    MemoryKind kind = MemoryKind::device;
    int device = 0;
    std::shared_ptr<SharedMapping> ipc;  ///< set for memory opened from another process
  };
  struct DeviceState {
    std::shared_ptr<Stream> legacy;
    VectorClock retired_blocking;  ///< clocks of destroyed blocking streams
    VectorClock retired_all;       ///< clocks of all destroyed streams
  };
  /// A range an operation touches, checked against the allocations before enqueueing: inside
  /// one allocation, or (when `host`) outside every allocation (pageable host memory).
  struct MemoryCheck {
    const char* operand = "";
    ByteRange range;
    bool host = false;
  };

  // All *_locked functions run with mu_ held.
  int& device_locked();  ///< the calling thread's current device
  std::shared_ptr<Stream> resolve_locked(StreamHandle s, const char* where);
  std::shared_ptr<Stream> new_stream_locked(StreamHandle handle, std::string label, int device,
                                            bool non_blocking);
  Event& event_locked(EventHandle e, const char* where);
  void check_memory_locked(const MemoryCheck& c, const char* where);
  /// Enqueues op on s with the legacy-stream ordering; checks and records `runs` first and
  /// changes nothing when they race.
  void enqueue_locked(const std::shared_ptr<Stream>& s, Op op, std::span<const AccessRun> runs,
                      const VectorClock* extra_clock = nullptr, const Dep* extra_dep = nullptr);
  void retire_locked(Stream& s);
  /// A vector-clock slot for a stream whose first access has `clock`: a retired slot whose
  /// accesses that clock is ordered after, else slot_count_ (a new one).
  RaceDetector::Actor free_slot_locked(const VectorClock& clock) const;
  void throw_sticky_locked(Stream& s, std::uint64_t upto, const char* where);
  /// Destroys s: no new work; it leaves all_streams_ once its queue has drained.
  void release_locked(const std::shared_ptr<Stream>& s);
  void wait_locked(std::unique_lock<std::mutex>& lk, const Stream& s, std::uint64_t seq);

  /// Puts s in ready_ (or sleeping_, for a delay) when its front operation can run, else
  /// registers it with the stream it waits for. Starts a pool thread when none is idle.
  void schedule_locked(const std::shared_ptr<Stream>& s);
  /// Wakes an idle pool thread (all of them when `all`), or starts one when none is free.
  void wake_pool_locked(bool all);
  /// A pool thread: runs ready operations and wakes delayed streams, until the destructor.
  void run_pool();
  /// Records the completion of op on s and schedules what it unblocks.
  void complete_locked(const std::shared_ptr<Stream>& s, const Op& op,
                       const std::optional<std::string>& failure, TimePoint now);
  /// The device heap of `device` (made on first use).
  SharedHeap& heap_locked(int device);
  /// Removes an allocation, waits for the work queued so far (it may use the memory), then
  /// gives the memory back (or unmaps another process's).
  void retire_memory_locked(std::unique_lock<std::mutex>& lk,
                            std::map<std::uint64_t, Allocation>::iterator it);
  void release_memory_locked(std::uint64_t base, const Allocation& a);
  /// Gives the memory of an allocation already removed from memory_ back to its heap (or the
  /// host); nothing for another process's mapping.
  void give_back_locked(std::uint64_t base, const Allocation& a);
  /// Enqueues on s a wait until the shared event reaches its current record (interprocess).
  void wait_shared_locked(const std::shared_ptr<Stream>& s, const std::shared_ptr<SharedEvent>& ev);
  /// Validates the stream and memory, then enqueues an operation performing `runs`.
  void submit(StreamHandle s, const std::string& name, std::vector<AccessRun> runs,
              std::function<void()> fn, std::span<const MemoryCheck> checks, double delay = 0);

  const int devices_;
  const std::uint64_t instance_;
  std::mutex mu_;
  std::condition_variable cv_;  // host waiters: a completion, a stream drained
  // The pool: threads are added when work is ready and none is idle, and stay (idle) after.
  std::vector<std::thread> pool_;
  std::condition_variable pool_cv_;  // idle pool threads: work claimed for them, a delay, stop
  std::deque<std::shared_ptr<Stream>> ready_;
  std::multimap<TimePoint, std::shared_ptr<Stream>> sleeping_;  // delayed front operations
  int idle_ = 0;                                                // pool threads waiting on pool_cv_
  int busy_ = 0;                                                // pool threads running an operation
  int claimed_ = 0;                                             // of those, woken for ready work
  bool pool_stopping_ = false;  // the destructor has drained every stream
  RaceDetector races_;
  bool race_detection_ = true;
  std::map<std::uint64_t, Allocation> memory_;
  std::map<StreamHandle, std::shared_ptr<Stream>> streams_;  // created streams, by handle
  std::vector<std::shared_ptr<Stream>> all_streams_;         // every live or draining stream
  std::map<std::pair<std::uint64_t, int>, std::shared_ptr<Stream>> per_thread_;
  std::map<EventHandle, Event> events_;
  // The host is one actor (slot 0): host-side synchronization between threads (mutexes,
  // joins) is invisible here, so a synchronize by any thread orders the whole host.
  RaceDetector::Who host_;
  VectorClock host_clock_;
  // Slots of destroyed streams, with the epoch of their last access. A slot goes to a new
  // stream only when that stream is ordered after all those accesses, so the accesses made
  // with one slot stay one chain in happens-before order and the clocks stay exact; the state
  // then does not grow with the number of streams ever created.
  struct RetiredSlot {
    RaceDetector::Actor slot = 0;
    std::uint64_t epoch = 0;
  };
  std::vector<RetiredSlot> retired_slots_;
  RaceDetector::Actor slot_count_ = 1;           // slot 0 is the host
  std::map<std::uint64_t, int> current_device_;  // by host thread id; absent = 0
  std::vector<DeviceState> device_state_;
  std::uint64_t next_stream_ = 0, next_event_ = 0;
  std::vector<std::unique_ptr<SharedHeap>> heaps_;  // device memory, by device
  std::shared_ptr<SharedMapping> event_table_;      // slots of this process's shared events
  std::vector<std::uint32_t> free_event_slots_;
  std::uint32_t next_event_slot_ = 0;
  std::atomic<bool> stopping_{false};  // the destructor runs: interprocess waits give up
};

/// A private simulator (tests); the process-wide one comes from backend().
std::unique_ptr<SimBackend> make_sim_backend(int devices = 1);

/// Reads CAI_SIM_DEVICES (unset: 1). Throws Error(value_error) naming a bad value.
int sim_devices_from_env();

}  // namespace cai::device::detail
