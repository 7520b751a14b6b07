#include "cai/sync/ordering.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <utility>
#include <vector>

#include "cai/device/owned.h"

namespace cai::sync {

using device::kLegacyDefaultStream;

namespace {

std::atomic<TraceFn> g_trace{nullptr};
std::atomic<std::uint64_t> g_next_thread{1};
// The work clock: one tick per enqueue that touches memory (SyncState::mark_work), and the
// tick up to which a device-wide synchronize made every piece of work complete.
std::atomic<std::uint64_t> g_work_clock{0};
std::atomic<std::uint64_t> g_device_complete{0};

int device_of_stream(device::Backend& backend, StreamHandle s) {
  return backend.device_count() > 1 ? backend.stream_device(s) : 0;
}

// A new event on `device`, which may not be the current one.
EventHandle event_on(device::Backend& backend, int device) {
  const device::DeviceGuard on(backend, backend.device_count() > 1 ? device : -1);
  return backend.event_create(/*timing=*/false);
}

// One event per thread and device, re-recorded for every ordering: a stream wait captures the
// event's most recent record at the time of the call, so reuse is safe and saves a create.
EventHandle scratch_event(device::Backend& backend, int device) {
  struct Cache {
    device::Backend* backend = nullptr;
    std::vector<EventHandle> by_device;
    void release() noexcept {
      // Not at process exit: the driver may already be gone then.
      if (backend && !device::exiting()) {
        for (auto ev : by_device) {
          try {
            if (ev) backend->event_destroy(ev);
          } catch (...) {
          }
        }
      }
      by_device.clear();
    }
    ~Cache() { release(); }
  };
  thread_local Cache cache;
  if (cache.backend != &backend) {
    cache.release();
    cache.backend = &backend;
  }
  if (static_cast<std::size_t>(device) >= cache.by_device.size())
    cache.by_device.resize(static_cast<std::size_t>(device) + 1, 0);
  auto& ev = cache.by_device[static_cast<std::size_t>(device)];
  if (ev == 0) ev = event_on(backend, device);
  return ev;
}

// Events of import states, recycled: an import with a foreign stream costs an event record,
// not an event creation.
struct EventPool {
  std::mutex mutex;
  std::map<std::pair<device::Backend*, int>, std::vector<EventHandle>> free;
};
EventPool& pool() {
  static auto* p = new EventPool;  // leaked: import states may go in late destructors
  return *p;
}

void trace_wait(StreamHandle waiter, const std::string& what) {
  if (TraceFn trace = g_trace.load(std::memory_order_relaxed))
    trace(device::stream_text(waiter) + " waits for " + what);
}
void trace_wait(StreamHandle waiter, StreamHandle producer) {
  if (g_trace.load(std::memory_order_relaxed))
    trace_wait(waiter, "an event recorded on " + device::stream_text(producer));
}

// The stream this thread records on to capture the work queued on `producer`.
StreamHandle reachable(const StreamRef& producer) {
  return producer.other_thread() ? kLegacyDefaultStream : producer.handle;
}

}  // namespace

std::uint64_t thread_tag() noexcept {
  thread_local const std::uint64_t tag = g_next_thread.fetch_add(1, std::memory_order_relaxed);
  return tag;
}

void set_trace(TraceFn fn) {
  g_trace.store(fn, std::memory_order_relaxed);
}

std::uint64_t work_clock() noexcept {
  return g_work_clock.load();
}

void synchronize_device(device::Backend& backend) {
  const std::uint64_t clock = work_clock();
  backend.synchronize();
  // It waited for the current device only: with several, other devices may still be busy.
  if (backend.device_count() != 1) return;
  std::uint64_t done = g_device_complete.load();
  while (done < clock && !g_device_complete.compare_exchange_weak(done, clock)) {
  }
}

// ---------------------------------------------------------------------------------------------
// Waits.

void wait_for(device::Backend& backend, const StreamRef& producer, const StreamRef& waiter) {
  if (producer.same_stream(waiter)) return;
  const StreamHandle from = reachable(producer);
  // The legacy stream waits for every blocking stream by itself.
  if (from == waiter.handle && from == kLegacyDefaultStream) return;
  const EventHandle ev = scratch_event(backend, device_of_stream(backend, from));
  backend.event_record(ev, from);
  backend.stream_wait_event(waiter.handle, ev);
  trace_wait(waiter.handle, from);
}

void wait_for(device::Backend& backend, const StreamRef& producer, int producer_device,
              const StreamRef& waiter, int waiter_device) {
  if (producer_device == waiter_device) {
    const device::DeviceGuard on(backend, producer_device);
    wait_for(backend, producer, waiter);
    return;
  }
  const StreamHandle from = reachable(producer);
  EventHandle ev = 0;
  {
    const device::DeviceGuard on(backend, producer_device);
    ev = scratch_event(backend, producer_device);
    backend.event_record(ev, from);
  }
  const device::DeviceGuard on(backend, waiter_device);
  backend.stream_wait_event(waiter.handle, ev);
  trace_wait(waiter.handle, from);
}

void wait_for_event(device::Backend& backend, StreamHandle waiter, EventHandle event) {
  backend.stream_wait_event(waiter, event);
  trace_wait(waiter, "an event recorded by its producer");
}

// ---------------------------------------------------------------------------------------------
// Import events.

ImportEvent::ImportEvent(device::Backend& backend, StreamHandle producer)
    : backend_(backend), device_(device_of_stream(backend, producer)), producer_(producer) {
  {
    EventPool& p = pool();
    std::lock_guard lock(p.mutex);
    auto& free = p.free[{&backend, device_}];
    if (!free.empty()) {
      event_ = free.back();
      free.pop_back();
    }
  }
  if (event_ == 0) event_ = event_on(backend, device_);
  try {
    backend.event_record(event_, producer);
  } catch (...) {
    std::lock_guard lock(pool().mutex);
    pool().free[{&backend, device_}].push_back(event_);
    throw;
  }
}

ImportEvent::~ImportEvent() {
  if (device::exiting()) return;  // the driver may be gone: leaked, as every event at exit
  EventPool& p = pool();
  std::lock_guard lock(p.mutex);
  p.free[{&backend_, device_}].push_back(event_);
}

// ---------------------------------------------------------------------------------------------
// SyncState.

ImportOrder import_order(device::Backend& backend, StreamHandle producer) {
  if (device::is_default_stream(producer)) return ImportOrder::by_name;
  return backend.stream_query(producer) ? ImportOrder::complete : ImportOrder::by_event;
}

std::shared_ptr<SyncState> SyncState::imported(device::Backend& backend, StreamHandle producer) {
  return imported(backend, producer, import_order(backend, producer));
}

std::shared_ptr<SyncState> SyncState::imported(device::Backend& backend, StreamHandle producer,
                                               ImportOrder how) {
  auto state = std::make_shared<SyncState>();
  state->set_imported(backend, producer, how);
  return state;
}

void SyncState::set_imported(device::Backend& backend, StreamHandle producer) {
  set_imported(backend, producer, import_order(backend, producer));
}

void SyncState::set_imported(device::Backend& backend, StreamHandle producer, ImportOrder how) {
  if (how == ImportOrder::by_name) {
    set_stream(StreamRef(producer));
    return;
  }
  auto ev =
      how == ImportOrder::by_event ? std::make_shared<ImportEvent>(backend, producer) : nullptr;
  std::lock_guard lock(mutex_);
  if (ev) {
    where_ = BehindEvent{std::move(ev)};  // the event knows the producer
    mark_work();                          // the producer's work
  } else {
    where_ = ImportedIdle{producer};
    work_.store(0);  // complete: the query ordered the host after it
  }
}

std::shared_ptr<SyncState> SyncState::imported_without_stream(StreamHandle producer) {
  auto state = std::make_shared<SyncState>();
  state->where_ = ImportedIdle{producer};
  return state;
}

void SyncState::set_stream(std::optional<StreamRef> s) {
  std::lock_guard lock(mutex_);
  if (s) {
    where_ = OnStream{std::move(*s)};
    mark_work();
  } else {
    where_ = NoStream{};
  }
}

SyncState::Snapshot SyncState::snapshot() const {
  Snapshot out;
  std::lock_guard lock(mutex_);
  if (const auto* on = std::get_if<OnStream>(&where_)) {
    out.stream = on->stream;
    out.device = on->device;
  } else if (const auto* behind = std::get_if<BehindEvent>(&where_)) {
    out.event = behind->event;
  }
  return out;
}

SyncState::Snapshot SyncState::snapshot_for_order() const {
  Snapshot out;
  std::lock_guard lock(mutex_);
  if (const auto* on = std::get_if<OnStream>(&where_)) {
    out.stream.emplace();
    out.stream->handle = on->stream.handle;
    out.stream->thread = on->stream.thread;
    out.device = on->device;
  } else if (const auto* behind = std::get_if<BehindEvent>(&where_)) {
    out.event = behind->event;
  }
  return out;
}

SyncState::AfterWork SyncState::move_after_work(const StreamRef& work, int work_device) {
  AfterWork after;
  if (auto* on = std::get_if<OnStream>(&where_)) {
    const bool other_device = work_device >= 0 && on->device >= 0 && on->device != work_device;
    if (!other_device) {
      if (on->stream.same_stream(work)) {
        on->device = work_device;
      } else {
        after.kept = on->stream.key();
      }
      return after;
    }
    // A default stream of another device: the data adopts the work stream, which the order
    // made wait for it.
  } else if (const auto* behind = std::get_if<BehindEvent>(&where_)) {
    after.foreign = behind->event->producer();
  } else if (const auto* idle = std::get_if<ImportedIdle>(&where_)) {
    after.foreign = idle->producer;
  }
  // No stream, or one cai cannot trust to be alive: the data adopts the work stream.
  where_ = OnStream{work, work_device};
  return after;
}

void SyncState::adopt(const StreamRef& work, int work_device) noexcept {
  std::lock_guard lock(mutex_);
  mark_work();
  where_ = OnStream{work, work_device};
}

bool SyncState::pending() const noexcept {
  const std::uint64_t w = work_.load();
  return w != 0 && w > g_device_complete.load();
}

void SyncState::mark_work() noexcept {
  work_.store(g_work_clock.fetch_add(1) + 1);
}

void SyncState::complete_through(std::uint64_t clock) noexcept {
  // Work marked later (by another thread meanwhile) stays pending.
  std::uint64_t w = work_.load();
  while (w != 0 && w <= clock && !work_.compare_exchange_weak(w, 0)) {
  }
}

void SyncState::host_waited(StreamHandle waited, std::uint64_t clock) noexcept {
  {
    std::lock_guard lock(mutex_);
    const auto* on = std::get_if<OnStream>(&where_);
    if (!on || !on->stream.same_stream(StreamRef(waited))) return;
  }
  complete_through(clock);
}

void SyncState::order_before(device::Backend& backend, const StreamRef& waiter, int state_device,
                             int waiter_device) const {
  if (!pending()) return;  // the host waited for all of it
  const auto [s, device, ev] = snapshot();
  if (s && device >= 0 && state_device < 0) {
    // A default stream of a known device: the waiter's device may be another.
    state_device = device;
    waiter_device = backend.stream_device(waiter.handle);
  }
  if (ev) {
    if (ev->producer() == waiter.handle) return;
    const device::DeviceGuard on(backend, waiter_device);
    wait_for_event(backend, waiter.handle, ev->event());
  } else if (s && state_device >= 0 && waiter_device >= 0) {
    wait_for(backend, *s, state_device, waiter, waiter_device);
  } else if (s) {
    wait_for(backend, *s, waiter);
  }
}

std::optional<StreamHandle> SyncState::export_handle(device::Backend& backend) {
  if (!pending()) return std::nullopt;  // the host waited for all of it: nothing to order
  std::lock_guard lock(mutex_);
  if (const auto* behind = std::get_if<BehindEvent>(&where_)) {
    // The producer's stream may be gone: the legacy stream, after the import's event.
    wait_for_event(backend, kLegacyDefaultStream, behind->event->event());
    where_ = OnStream{StreamRef(kLegacyDefaultStream)};
  }
  auto* on = std::get_if<OnStream>(&where_);
  if (!on) return std::nullopt;
  if (on->stream.other_thread()) {
    // Another thread's per-thread default stream: an event record on the legacy stream is
    // work there, ordered after it, so that synchronizing the legacy stream covers it.
    backend.event_record(scratch_event(backend, device_of_stream(backend, kLegacyDefaultStream)),
                         kLegacyDefaultStream);
    on->stream = StreamRef(kLegacyDefaultStream);
  } else if (on->device >= 0 && on->device != backend.current_device()) {
    // A default stream of another device: the consumer names this device's, ordered after it.
    const StreamRef here(kLegacyDefaultStream);
    wait_for(backend, on->stream, on->device, here, backend.current_device());
    *on = OnStream{here, backend.current_device()};
  }
  return on->stream.handle;
}

void SyncState::synchronize(device::Backend& backend) {
  if (!pending()) return;
  const std::uint64_t clock = work_clock();
  const auto [s, device, ev] = snapshot();
  const device::DeviceGuard on(backend, device);  // a default stream of that device
  if (ev) {
    backend.event_synchronize(ev->event());
  } else if (s && s->other_thread()) {
    const EventHandle e = scratch_event(backend, device_of_stream(backend, kLegacyDefaultStream));
    backend.event_record(e, kLegacyDefaultStream);
    backend.event_synchronize(e);
  } else if (s) {
    backend.stream_synchronize(s->handle);
  }
  complete_through(clock);
}

bool SyncState::busy(device::Backend& backend) const {
  if (!pending()) return false;
  const auto [s, device, ev] = snapshot();
  if (ev) return !backend.event_query(ev->event());
  if (!s) return false;
  if (s->other_thread()) return true;  // another thread's stream: assume work
  const device::DeviceGuard on(backend, device);
  return !backend.stream_query(s->handle);
}

// ---------------------------------------------------------------------------------------------
// StreamOrder.

StreamOrder::StreamOrder(device::Backend& backend, StreamRef work)
    : backend_(backend), work_(std::move(work)) {
  // Default handles name a stream of the current device; with one device nothing is asked.
  if (device::is_default_stream(work_.handle) && backend_.device_count() > 1)
    work_device_ = backend_.current_device();
}

void StreamOrder::add(SyncState& state) {
  if (states_.any_of([&](SyncState* s) { return s == &state; })) return;
  // The producer's stream by handle and thread only: its owner is the state's to keep.
  const auto [producer, device, ev] = state.snapshot_for_order();
  // The state's device, when it is another than the work's.
  const int other_device = work_device_ >= 0 && device >= 0 && device != work_device_ ? device : -1;
  if (ev) {
    // Work on the producer's own stream needs no wait (the stream is alive: it is used).
    if (ev->producer() != work_.handle) wait_for_event(backend_, work_.handle, ev->event());
  } else if (producer && other_device >= 0) {
    // The same handle on another device is another stream (memory every device reaches).
    wait_for(backend_, *producer, other_device, work_, work_device_);
  } else if (producer && !producer->same_stream(work_)) {
    // Several arrays often share one stream: wait for it once.
    const StreamRef::Key k = producer->key();
    const bool seen = waited_.any_of([&](const StreamRef::Key& s) { return s == k; });
    if (!seen) {
      wait_for(backend_, *producer, work_);
      waited_.push_back(k);
    }
  }
  states_.push_back(&state);
}

void StreamOrder::finish() {
  detail::SmallVector<StreamRef::Key, 4> done;
  EventHandle ev = 0;
  // The work stream's event, recorded once for every wait of this order.
  const auto work_event = [&] {
    if (ev == 0) {
      ev = scratch_event(backend_, device_of_stream(backend_, work_.handle));
      backend_.event_record(ev, work_.handle);
    }
    return ev;
  };
  bool legacy_waited = false;
  std::size_t i = 0;
  try {
    for (; i < states_.size(); ++i) {
      states_[i]->after_work(work_, work_device_, [&](const SyncState::AfterWork& after) {
        if (after.foreign && *after.foreign != work_.handle && !legacy_waited &&
            work_.handle != kLegacyDefaultStream) {
          // A producer's stream cai cannot trust to be alive gets no wait, and data imported
          // with nothing pending names none (or one that was idle): the legacy stream waits,
          // which orders the producer's later work after this work when its stream is blocking
          // (docs/architecture.md, "Foreign streams").
          backend_.stream_wait_event(kLegacyDefaultStream, work_event());
          trace_wait(kLegacyDefaultStream, work_.handle);
          legacy_waited = true;
        }
        if (!after.kept || done.any_of([&](const StreamRef::Key& s) { return s == *after.kept; }))
          return;
        StreamRef producer;
        producer.handle = after.kept->handle;
        producer.thread = after.kept->thread;
        const StreamHandle target = reachable(producer);
        if (target == kLegacyDefaultStream && work_.handle == kLegacyDefaultStream) return;
        backend_.stream_wait_event(target, work_event());
        trace_wait(target, work_.handle);
        done.push_back(*after.kept);
      });
    }
  } catch (...) {
    // The work is enqueued whatever failed here. add() ordered it after all the data's
    // earlier work, so the data not yet ordered adopts the work stream: later work on the
    // data waits for it (never races), and the error reaches the caller.
    for (; i < states_.size(); ++i) states_[i]->adopt(work_, work_device_);
    states_.clear();
    waited_.clear();
    throw;
  }
  states_.clear();
  waited_.clear();
}

}  // namespace cai::sync
