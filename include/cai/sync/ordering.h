#pragma once

// The CAI v3 synchronization rules, in one place (docs/core-interface.md, "Synchronization").
//
// Every piece of memory that cai hands out or imports has a SyncState: the stream after which
// all work queued on that memory is complete (the CAI `stream` of the data), or none.
// Work on another stream is ordered with events, never by blocking the host:
//   before: the work stream waits for an event recorded on the data's stream (consumer rule);
//   after:  the data's stream waits for an event recorded after the work (so later producer
//           work cannot overtake it), which also keeps the producer rule: synchronizing on the
//           exported stream alone is enough.
// Data with no stream adopts the work stream, so that re-exporting it names a stream to wait on.
//
// Two kinds of producer stream need more than a handle:
//   - handle 2 is the per-thread default stream of the thread that named it: another thread's
//     2 is another stream, which this thread cannot name. It is reached through the legacy
//     default stream (1), which is ordered with every blocking stream of its device, the
//     per-thread default streams included;
//   - a foreign stream (any other handle an import names) is the producer's, which may destroy
//     it after the import (CuPy exports its current stream, which the array does not keep
//     alive): at import, one query asks whether work is queued on it; if so, an event is
//     recorded on it and stands for it from then on (if not, nothing is pending). Work on
//     another stream waits for that event; after the work, the legacy default stream (not the
//     producer's) waits for it, which orders the producer's later work when its stream is
//     blocking. The data adopts the work stream.

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "cai/device/backend.h"

namespace cai::sync {

using device::EventHandle;
using device::StreamHandle;

/// The calling host thread, as a number never reused: what tells one thread's per-thread
/// default stream from another's.
std::uint64_t thread_tag() noexcept;

/// A stream handle and what keeps the stream alive (null for streams cai does not own: the
/// default streams, or a producer's stream that the producer keeps alive).
struct StreamRef {
  StreamHandle handle = 0;
  std::shared_ptr<const void> owner;
  /// For handle 2: the thread whose per-thread default stream it is (0 for other handles).
  std::uint64_t thread = 0;

  StreamRef() = default;
  StreamRef(StreamHandle h, std::shared_ptr<const void> o = nullptr)  // NOLINT: a handle is one
      : handle(h),
        owner(std::move(o)),
        thread(h == device::kPerThreadDefaultStream ? thread_tag() : 0) {}

  /// Whether both name one stream (handle 2 of two threads are two streams).
  bool same_stream(const StreamRef& other) const noexcept {
    return handle == other.handle && thread == other.thread;
  }
  /// The stream without its owner (what an order compares and remembers).
  struct Key {
    StreamHandle handle = 0;
    std::uint64_t thread = 0;
    bool operator==(const Key&) const = default;
  };
  Key key() const noexcept { return {handle, thread}; }
  /// Whether it is another thread's per-thread default stream, which this thread cannot name.
  bool other_thread() const noexcept {
    return handle == device::kPerThreadDefaultStream && thread != thread_tag();
  }
};

/// An event recorded on a producer's stream at import, standing for the work queued there
/// then; destroyed (recycled) with its last owner.
class ImportEvent {
 public:
  ImportEvent(device::Backend& backend, StreamHandle producer);
  ~ImportEvent();
  ImportEvent(const ImportEvent&) = delete;
  ImportEvent& operator=(const ImportEvent&) = delete;

  EventHandle event() const noexcept { return event_; }
  /// The producer's handle: work on it needs no wait (the producer's own stream, if alive).
  StreamHandle producer() const noexcept { return producer_; }

 private:
  device::Backend& backend_;
  EventHandle event_ = 0;
  int device_ = 0;
  StreamHandle producer_ = 0;
};

/// How an import keeps the producer's stream (the CAI `stream` key): the default streams by
/// name (free: nothing destroys them); any other stream by an event recorded on it now, since
/// the producer may destroy it after the import, unless one query says its work is complete
/// (then nothing is pending and nothing is kept). The query is the cheaper driver call; a
/// busy stream pays it and the record.
enum class ImportOrder { complete, by_name, by_event };
ImportOrder import_order(device::Backend& backend, StreamHandle producer);

/// Host-known completion, without asking the driver: every enqueue that touches memory takes
/// a mark from one process-wide clock (mark_work), and the host raises "complete up to" marks
/// when it waits (synchronize_device, SyncState::synchronize, host_waited). An export then
/// names no stream when nothing is pending (CAI v3 allows `stream: None` for that).
std::uint64_t work_clock() noexcept;
/// cai.synchronize(): waits for the current device; with one device, every mark taken before
/// the call is complete after it.
void synchronize_device(device::Backend& backend);

namespace detail {
/// The lock of a SyncState: its holders copy a few fields (or, rarely, make one driver call),
/// and an operation takes it about five times. A std::mutex pair costs about 85 instructions
/// in glibc (a library call each way); this is one atomic exchange and one store. Waiters
/// spin briefly, then yield.
class SpinLock {
 public:
  void lock() noexcept {
    for (int spins = 0; flag_.exchange(true, std::memory_order_acquire); ++spins) {
      while (flag_.load(std::memory_order_relaxed)) {
        if (spins++ > 64) std::this_thread::yield();
      }
    }
  }
  void unlock() noexcept { flag_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> flag_{false};
};
}  // namespace detail

/// The stream of one piece of memory, shared by an array and all of its views. It is in one
/// of four states (`Where`), changed under its lock; StreamOrder reads it with snapshot() and
/// changes it only through after_work() and adopt().
class SyncState {
 public:
  /// No stream: nothing was ever queued (new memory from a plain allocation).
  struct NoStream {};
  /// Work is on `stream` (maybe still pending). With several devices, `device` is the device
  /// whose default stream a default handle (1, 2) names (memory every device reaches, managed
  /// or mapped, may be used on any); -1: the current one.
  struct OnStream {
    StreamRef stream;
    int device = -1;
  };
  /// A foreign producer's stream, behind an event recorded on it at import.
  struct BehindEvent {
    std::shared_ptr<ImportEvent> event;
  };
  /// Imported with nothing pending: the producer named no stream (`producer` 0) or its stream
  /// was idle. Its later work is on a stream cai cannot name or trust: the first work here,
  /// unless on `producer` itself, makes the legacy default stream wait for it.
  struct ImportedIdle {
    StreamHandle producer = 0;
  };
  using Where = std::variant<NoStream, OnStream, BehindEvent, ImportedIdle>;

  /// Memory with no stream: nothing is pending.
  SyncState() = default;
  /// Memory whose work is on `stream`, maybe still pending (an IPC import, wrapped memory).
  explicit SyncState(std::optional<StreamRef> stream) {
    if (stream) {
      where_ = OnStream{std::move(*stream)};
      mark_work();
    }
  }
  /// New memory whose operations default to `stream`; no work is queued on it yet.
  static std::shared_ptr<SyncState> idle(StreamRef stream) {
    auto state = std::make_shared<SyncState>();
    state->where_ = OnStream{std::move(stream)};
    return state;
  }

  /// The state of memory imported with the producer's stream `producer` (the CAI `stream`
  /// key), kept as import_order() says. Nothing blocks.
  static std::shared_ptr<SyncState> imported(device::Backend& backend, StreamHandle producer);
  /// The same, with import_order(backend, producer) already asked.
  static std::shared_ptr<SyncState> imported(device::Backend& backend, StreamHandle producer,
                                             ImportOrder how);
  /// The same for a state that exists already (its previous stream is forgotten).
  void set_imported(device::Backend& backend, StreamHandle producer);
  /// The state of memory imported with the CAI v3 rules with nothing pending (ImportedIdle):
  /// the producer named no stream (None; `producer` 0), or its stream `producer` was idle
  /// (ImportOrder::complete).
  static std::shared_ptr<SyncState> imported_without_stream(StreamHandle producer = 0);

  /// The stream cai may enqueue work on after the data's pending work: none for data that
  /// never had work queued, or whose producer's stream stands behind an import event.
  std::optional<StreamRef> stream() const {
    std::lock_guard lock(mutex_);
    if (const auto* on = std::get_if<OnStream>(&where_)) return on->stream;
    return std::nullopt;
  }
  /// The stream's handle alone (no owner copied), or none.
  std::optional<StreamHandle> stream_handle() const {
    std::lock_guard lock(mutex_);
    if (const auto* on = std::get_if<OnStream>(&where_)) return on->stream.handle;
    return std::nullopt;
  }
  /// The import event standing for the producer's stream, if any.
  std::shared_ptr<const ImportEvent> event() const {
    std::lock_guard lock(mutex_);
    if (const auto* behind = std::get_if<BehindEvent>(&where_)) return behind->event;
    return nullptr;
  }
  /// Whether any work is pending as far as cai knows (a stream or an import event).
  bool has_work() const {
    std::lock_guard lock(mutex_);
    return std::holds_alternative<OnStream>(where_) || std::holds_alternative<BehindEvent>(where_);
  }
  /// The data's work is on `s` now (after work was enqueued there).
  void set_stream(std::optional<StreamRef> s);

  /// What a wait for the data needs, read under the lock: the data's stream (with what keeps
  /// it alive) and its device, or the import event.
  struct Snapshot {
    std::optional<StreamRef> stream;
    int device = -1;
    std::shared_ptr<ImportEvent> event;
  };
  Snapshot snapshot() const;
  /// The same without the stream's owner, for a StreamOrder, whose caller keeps the state (and
  /// so its stream) alive until finish(): no reference count touched per operand.
  Snapshot snapshot_for_order() const;

  /// After work on `work` (of `work_device`, -1: the current one) touching the data was
  /// enqueued: marks the work, and, under the lock, the data adopts `work` unless it keeps a
  /// stream of its own; then calls `order(after)` with what the order must still do for it,
  /// still under the lock, so that no other work on the data comes between.
  struct AfterWork {
    /// The producer's stream cai cannot name or trust (an import event's, ImportedIdle's).
    std::optional<StreamHandle> foreign;
    /// The data's own stream, kept: it must wait for the work (not when it is `work`).
    std::optional<StreamRef::Key> kept;
  };
  template <class Order>
  void after_work(const StreamRef& work, int work_device, Order&& order) {
    std::lock_guard lock(mutex_);
    mark_work();
    order(move_after_work(work, work_device));
  }
  /// After work on `work` was enqueued and could not be ordered otherwise: the data adopts it.
  void adopt(const StreamRef& work, int work_device) noexcept;

  /// Whether work may still be pending: some was queued (or imported) since the host last
  /// waited for it. No driver call; false answers are exact, true ones conservative.
  bool pending() const noexcept;
  /// After work touching the memory was enqueued.
  void mark_work() noexcept;
  /// After the host waited for `waited` (stream_synchronize), which was read as `clock`
  /// (work_clock()) before the wait: the work then queued on that stream is complete.
  void host_waited(StreamHandle waited, std::uint64_t clock) noexcept;

  /// The stream to export (the CAI `stream` key, DLPack's producer stream): a stream this
  /// thread can name and that is alive. A foreign stream behind an import event, or another
  /// thread's per-thread default stream, is replaced by the legacy default stream (1) ordered
  /// after it (one wait or one event record, once). None when no work is pending.
  std::optional<StreamHandle> export_handle(device::Backend& backend);
  /// Makes `waiter` wait for the pending work (the "before" of StreamOrder for one state, e.g.
  /// a consumer's stream given to __dlpack__). With devices >= 0, the state's work is on
  /// `state_device` and the waiter on `waiter_device` (either current as needed).
  void order_before(device::Backend& backend, const StreamRef& waiter, int state_device = -1,
                    int waiter_device = -1) const;
  /// Blocks the host until the pending work is done (then nothing is pending).
  void synchronize(device::Backend& backend);
  /// Whether pending work may still run (never blocks).
  bool busy(device::Backend& backend) const;

 private:
  void set_imported(device::Backend& backend, StreamHandle producer, ImportOrder how);
  AfterWork move_after_work(const StreamRef& work, int work_device);
  void complete_through(std::uint64_t clock) noexcept;

  mutable detail::SpinLock mutex_;
  Where where_;
  std::atomic<std::uint64_t> work_{0};  // the mark of the last work; 0: none since the host waited
};

namespace detail {
/// Up to N values in place, more on the heap: an order touches a few arrays, and allocating
/// per operation would cost more than the ordering.
template <class T, std::size_t N>
class SmallVector {
 public:
  void push_back(T v) {
    if (n_ < N)
      inline_[n_] = std::move(v);
    else
      heap_.push_back(std::move(v));
    ++n_;
  }
  std::size_t size() const noexcept { return n_; }
  T& operator[](std::size_t i) noexcept { return i < N ? inline_[i] : heap_[i - N]; }
  const T& operator[](std::size_t i) const noexcept { return i < N ? inline_[i] : heap_[i - N]; }
  template <class F>
  bool any_of(F&& f) const {
    for (std::size_t i = 0; i < n_; ++i)
      if (f((*this)[i])) return true;
    return false;
  }
  void clear() noexcept {
    n_ = 0;
    heap_.clear();
  }

 private:
  std::array<T, N> inline_{};
  std::size_t n_ = 0;
  std::vector<T> heap_;
};
}  // namespace detail

/// Orders one piece of stream work against the data it touches.
/// Usage: StreamOrder order(backend, work); order.add(a_state); order.add(b_state);
///        ... enqueue the work on work.handle ...; order.finish();
/// Each distinct data stream costs one event record and one wait before, and one wait after
/// (the work stream's event is recorded once); data behind an import event one wait before
/// and one wait of the legacy stream after (once per order).
/// Data already on the work stream costs nothing. The caller keeps the states alive until
/// finish().
class StreamOrder {
 public:
  StreamOrder(device::Backend& backend, StreamRef work);
  StreamOrder(const StreamOrder&) = delete;
  StreamOrder& operator=(const StreamOrder&) = delete;

  /// Makes the work stream wait for the data's pending work now, and remembers the data for
  /// finish().
  void add(SyncState& state);
  /// After the work is enqueued: makes each data stream wait for it; data without a stream
  /// (or behind an import event) adopts the work stream.
  void finish();

 private:
  device::Backend& backend_;
  StreamRef work_;
  int work_device_ = -1;  // with several devices, the device of a default work stream
  detail::SmallVector<SyncState*, 8> states_;
  detail::SmallVector<StreamRef::Key, 4> waited_;  // producer streams waited for
};

/// Makes `waiter` wait for all work queued so far on `producer` (record + wait, no host block).
/// Does nothing when they are the same stream. Another thread's per-thread default stream is
/// reached through the legacy default stream.
void wait_for(device::Backend& backend, const StreamRef& producer, const StreamRef& waiter);
/// The same across devices: each handle names a stream of its device (the default streams
/// that device's); the event is made on and recorded in the producer's device.
void wait_for(device::Backend& backend, const StreamRef& producer, int producer_device,
              const StreamRef& waiter, int waiter_device);
/// Makes `waiter` wait for an event recorded elsewhere (another process's, an import's).
void wait_for_event(device::Backend& backend, StreamHandle waiter, EventHandle event);

/// A hook that sees every wait that cai enqueues (for `python -m cai demo` and debugging).
using TraceFn = void (*)(const std::string& line);
void set_trace(TraceFn fn);

}  // namespace cai::sync
