#pragma once

// Internal: the CPU simulator backend. Device memory is host memory, streams are FIFO queues
// run by one worker thread each, and a race detector checks every access at enqueue time.
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
  /// Waits for all enqueued work, then joins the workers.
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
  void copy_strided_async(Operand dst, Operand src, std::span<const std::int64_t> shape,
                          std::size_t itemsize, StreamHandle s) override;
  void fill_async(Operand dst, std::span<const std::int64_t> shape, std::size_t itemsize,
                  const void* value, StreamHandle s) override;
  void add_async(Operand out, Operand a, Operand b, std::span<const std::int64_t> shape,
                 ElementType type, StreamHandle s) override;

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
  struct Stream {
    StreamHandle handle = 0;  ///< as the user sees it (1 and 2 for default streams)
    std::string label;
    int device = 0;
    bool non_blocking = false;
    bool legacy = false;
    RaceDetector::Actor actor = 0;
    VectorClock clock;
    std::deque<Op> queue;
    std::uint64_t enqueued = 0, completed = 0;
    std::optional<std::string> error;  ///< first failure not yet reported
    std::uint64_t error_seq = 0;
    bool destroyed = false;
    std::thread worker;
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
  /// A range an operation touches, checked against the allocations before enqueueing.
  struct MemoryCheck {
    const char* operand = "";
    std::uint64_t lo = 0, hi = 0;
    bool kernel = false;  ///< must be simulator memory (device, pinned or managed)
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
  void throw_sticky_locked(Stream& s, std::uint64_t upto, const char* where);
  /// Destroys s: no new work; its worker drains the queue, then detaches itself.
  void release_locked(const std::shared_ptr<Stream>& s);
  void wait_locked(std::unique_lock<std::mutex>& lk, const Stream& s, std::uint64_t seq);

  void run_worker(std::shared_ptr<Stream> s);
  /// The device heap of `device` (made on first use).
  SharedHeap& heap_locked(int device);
  /// Removes an allocation, waits for the work queued so far (it may use the memory), then
  /// gives the memory back (or unmaps another process's).
  void retire_memory_locked(std::unique_lock<std::mutex>& lk,
                            std::map<std::uint64_t, Allocation>::iterator it);
  void release_memory_locked(std::uint64_t base, const Allocation& a);
  /// Enqueues on s a wait until the shared event reaches its current record (interprocess).
  void wait_shared_locked(const std::shared_ptr<Stream>& s, const std::shared_ptr<SharedEvent>& ev);
  /// Validates the stream and memory, then enqueues an operation performing `runs`.
  void submit(StreamHandle s, const std::string& name, std::vector<AccessRun> runs,
              std::function<void()> fn, std::span<const MemoryCheck> checks, double delay = 0);

  const int devices_;
  const std::uint64_t instance_;
  std::mutex mu_;
  std::condition_variable cv_;  // any progress: a push, a completion, an exit
  RaceDetector races_;
  bool race_detection_ = true;
  std::map<std::uint64_t, Allocation> memory_;
  std::map<StreamHandle, std::shared_ptr<Stream>> streams_;  // created streams, by handle
  std::vector<std::shared_ptr<Stream>> all_streams_;         // every live or draining stream
  std::map<std::pair<std::uint64_t, int>, std::shared_ptr<Stream>> per_thread_;
  std::map<EventHandle, Event> events_;
  // The host is one actor: host-side synchronization between threads (mutexes, joins) is
  // invisible here, so a synchronize by any thread orders the whole host.
  RaceDetector::Actor host_actor_ = 0;
  VectorClock host_clock_;
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
