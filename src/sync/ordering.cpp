#include "cai/sync/ordering.h"

#include <algorithm>
#include <atomic>
#include <vector>

namespace cai::sync {

using device::EventHandle;

namespace {

std::atomic<TraceFn> g_trace{nullptr};

// One event per thread and device, re-recorded for every ordering: a stream wait captures the
// event's most recent record at the time of the call, so reuse is safe and saves a create.
// The event is recorded on `stream`, so it must be of the stream's device (asked only when
// there are several devices).
EventHandle scratch_event(device::Backend& backend, StreamHandle stream) {
  struct Cache {
    device::Backend* backend = nullptr;
    std::vector<device::EventHandle> by_device;
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
  const int dev = backend.device_count() > 1 ? backend.stream_device(stream) : 0;
  if (static_cast<std::size_t>(dev) >= cache.by_device.size())
    cache.by_device.resize(static_cast<std::size_t>(dev) + 1, 0);
  auto& ev = cache.by_device[static_cast<std::size_t>(dev)];
  if (ev == 0) {
    // Made on the stream's device, which may not be the current one.
    const int current = dev == 0 && backend.device_count() == 1 ? 0 : backend.current_device();
    if (current != dev) backend.set_current_device(dev);
    try {
      ev = backend.event_create(/*timing=*/false);
    } catch (...) {
      if (current != dev) backend.set_current_device(current);
      throw;
    }
    if (current != dev) backend.set_current_device(current);
  }
  return ev;
}

void trace_wait(StreamHandle waiter, StreamHandle producer) {
  if (TraceFn trace = g_trace.load(std::memory_order_relaxed))
    trace(device::stream_text(waiter) + " waits for an event recorded on " +
          device::stream_text(producer));
}

}  // namespace

void set_trace(TraceFn fn) {
  g_trace.store(fn, std::memory_order_relaxed);
}

void wait_for(device::Backend& backend, StreamHandle producer, StreamHandle waiter) {
  if (producer == waiter) return;
  const EventHandle ev = scratch_event(backend, producer);
  backend.event_record(ev, producer);
  backend.stream_wait_event(waiter, ev);
  trace_wait(waiter, producer);
}

void StreamOrder::add(SyncState& state) {
  if (std::find(states_.begin(), states_.end(), &state) != states_.end()) return;
  const auto producer = state.handle();
  if (producer) {
    // Several arrays often share one stream: wait for it once.
    const bool seen = std::any_of(states_.begin(), states_.end(),
                                  [&](SyncState* s) { return s->handle() == producer; });
    if (!seen) wait_for(backend_, *producer, work_.handle);
  }
  states_.push_back(&state);
}

void StreamOrder::finish() {
  std::vector<StreamHandle> done;
  EventHandle ev = 0;
  for (SyncState* state : states_) {
    const auto producer = state->handle();
    if (!producer) {
      state->set_stream(work_);
      continue;
    }
    if (*producer == work_.handle || std::find(done.begin(), done.end(), *producer) != done.end())
      continue;
    if (ev == 0) {
      ev = scratch_event(backend_, work_.handle);
      backend_.event_record(ev, work_.handle);
    }
    backend_.stream_wait_event(*producer, ev);
    trace_wait(*producer, work_.handle);
    done.push_back(*producer);
  }
  states_.clear();
}

}  // namespace cai::sync
