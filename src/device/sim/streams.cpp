// The simulated driver's streams and events: FIFO queues run by a pool of host threads, the
// legacy and per-thread default streams, events (local and interprocess), host functions,
// delays, and the race detector's ordering.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>

#include "cai/core/error.h"
#include "sim/sim_driver.h"
#include "sim/sim_internal.h"

namespace cai::device::sim {

// ---------------------------------------------------------------------------------------------
// Bookkeeping (mu_ held).

std::shared_ptr<SimDriver::Stream> SimDriver::new_stream_locked(std::uint64_t handle,
                                                                std::string label, int device,
                                                                bool non_blocking) {
  auto s = std::make_shared<Stream>();
  s->handle = handle;
  s->device = device;
  s->non_blocking = non_blocking;
  s->label = std::make_shared<const std::string>(std::move(label));
  all_streams_.push_back(s);
  return s;
}

CUresult SimDriver::resolve_locked(CUstream h, std::shared_ptr<Stream>& out) {
  const std::uint64_t v = handle_value(h);
  if (v <= 2) {
    int device = 0;
    if (CUresult r = need_context_locked(device)) return r;
    if (v != 2) {  // NULL and CU_STREAM_LEGACY: the context's legacy default stream
      out = device_state_[static_cast<std::size_t>(device)].legacy;
      return CUDA_SUCCESS;
    }
    const std::uint64_t id = this_thread_id();
    auto& slot = per_thread_[{id, device}];
    if (!slot) {
      std::string label = "per-thread default stream of host thread " + std::to_string(id);
      if (devices_ > 1) label += " on device " + std::to_string(device);
      slot = new_stream_locked(2, std::move(label), device, false);
    }
    out = slot;
    return CUDA_SUCCESS;
  }
  auto it = streams_.find(v);
  if (it == streams_.end()) {
    return fail(CUDA_ERROR_INVALID_HANDLE,
                "stream " + hex(v) +
                    ": not a stream of the simulator (never created, or destroyed); undefined on "
                    "a real driver: a stream handle must be live (it may crash or use another "
                    "stream)");
  }
  out = it->second;
  return CUDA_SUCCESS;
}

SimDriver::Event* SimDriver::event_locked(CUevent e) {
  auto it = events_.find(handle_value(e));
  if (it == events_.end()) {
    fail(CUDA_ERROR_INVALID_HANDLE,
         "event " + hex(handle_value(e)) +
             ": not an event of the simulator (never created, or destroyed); undefined on a "
             "real driver: an event handle must be live (it may crash or use another event)");
    return nullptr;
  }
  return &it->second;
}

void SimDriver::enqueue_locked(const std::shared_ptr<Stream>& s, Op op,
                               std::span<const AccessRun> runs, const VectorClock* extra_clock,
                               const Dep* extra_dep) {
  // Work out the new clock and the real dependencies without changing anything, so that a
  // race leaves the state as it was.
  VectorClock clock = s->clock;
  join(clock, host_clock_);  // host program order -> op
  if (extra_clock) join(clock, *extra_clock);
  std::vector<Dep> deps;
  DeviceState& ds = device_state_[static_cast<std::size_t>(s->device)];
  if (s->legacy) {
    // The legacy stream waits for all prior work on blocking streams of its context.
    join(clock, ds.retired_blocking);
    for (const auto& b : all_streams_) {
      if (b == s || b->device != s->device || b->non_blocking) continue;
      join(clock, b->clock);
      if (b->completed < b->enqueued) deps.push_back({b, b->enqueued});
    }
  } else if (!s->non_blocking) {
    // Blocking streams (the per-thread default ones too) wait for prior legacy-stream work.
    join(clock, ds.legacy->clock);
    if (ds.legacy->completed < ds.legacy->enqueued) {
      deps.push_back({ds.legacy, ds.legacy->enqueued});
    }
  }
  if (extra_dep && extra_dep->stream != s) deps.push_back(*extra_dep);
  RaceDetector::Actor slot = s->slot;
  if (!runs.empty()) {
    if (slot == kNoSlot) slot = free_slot_locked(clock);
    if (clock.size() <= slot) clock.resize(slot + 1, 0);
    ++clock[slot];
    if (race_detection_) races_.check_and_record(runs, {slot, s->label}, clock, op.name);
    if (s->slot == kNoSlot) {  // the slot is taken only once the access is accepted
      if (slot == slot_count_) ++slot_count_;
      std::erase_if(retired_slots_, [&](const RetiredSlot& r) { return r.slot == slot; });
      s->slot = slot;
    }
  }

  s->clock = std::move(clock);
  op.seq = ++s->enqueued;
  op.deps = std::move(deps);
  s->queue.push_back(std::move(op));
  if (s->queue.size() == 1) schedule_locked(s);  // a new front operation
}

void SimDriver::retire_locked(Stream& s) {
  DeviceState& ds = device_state_[static_cast<std::size_t>(s.device)];
  join(ds.retired_all, s.clock);
  if (!s.non_blocking) join(ds.retired_blocking, s.clock);
  if (s.slot != kNoSlot) {
    retired_slots_.push_back({s.slot, s.clock[s.slot]});
    s.slot = kNoSlot;  // never used again: a destroyed stream takes no new work
  }
}

RaceDetector::Actor SimDriver::free_slot_locked(const VectorClock& clock) const {
  // The most recently retired first: with short-lived streams, that is the one the new stream
  // most likely waited for.
  for (auto it = retired_slots_.rbegin(); it != retired_slots_.rend(); ++it) {
    if (it->slot < clock.size() && clock[it->slot] >= it->epoch) return it->slot;
  }
  return slot_count_;
}

CUresult SimDriver::sticky_locked(Stream& s, std::uint64_t upto) {
  if (!s.error || s.error_seq > upto) return CUDA_SUCCESS;
  std::string msg = std::move(*s.error);
  s.error.reset();
  return fail(CUDA_ERROR_LAUNCH_FAILED, std::move(msg));
}

void SimDriver::release_locked(const std::shared_ptr<Stream>& s) {
  // As in CUDA: enqueued work still runs; the stream goes once drained.
  s->destroyed = true;
  retire_locked(*s);
  if (s->queue.empty() && !s->running) std::erase(all_streams_, s);
}

void SimDriver::wait_locked(std::unique_lock<std::mutex>& lk, const Stream& s, std::uint64_t seq) {
  cv_.wait(lk, [&] { return s.completed >= seq; });
}

void SimDriver::drain_locked(std::unique_lock<std::mutex>& lk) {
  std::vector<std::pair<std::shared_ptr<Stream>, std::uint64_t>> pending;
  for (const auto& s : all_streams_) {
    if (s->completed < s->enqueued) pending.emplace_back(s, s->enqueued);
  }
  for (auto& [s, seq] : pending) wait_locked(lk, *s, seq);
}

// ---------------------------------------------------------------------------------------------
// The pool of host threads that runs the streams.

void SimDriver::schedule_locked(const std::shared_ptr<Stream>& s) {
  if (s->running || s->pending || s->queue.empty()) return;
  Op& op = s->queue.front();
  for (const Dep& d : op.deps) {
    if (d.stream->completed < d.seq) {
      d.stream->waiters.emplace(d.seq, s);  // scheduled again when d reaches d.seq
      return;
    }
  }
  s->pending = true;
  if (op.delay > 0) {
    const TimePoint now = std::chrono::steady_clock::now();
    if (!s->start_at) {
      s->start_at = now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                              std::chrono::duration<double>(op.delay));
    }
    if (now < *s->start_at) {
      sleeping_.emplace(*s->start_at, s);
      wake_pool_locked(/*all=*/true);  // the idle threads' deadline may be earlier now
      return;
    }
  }
  ready_.push_back(s);
  wake_pool_locked(/*all=*/false);
}

void SimDriver::wake_pool_locked(bool all) {
  if (idle_ > claimed_) {
    ++claimed_;
    if (all) {
      pool_cv_.notify_all();
    } else {
      pool_cv_.notify_one();
    }
    return;
  }
  // Threads between two operations look at ready_ before they wait: enough of them, no new
  // thread. Otherwise start one, even though some may be inside long operations: a running
  // operation may block (a host function waiting for another stream), so work never waits for
  // a busy thread.
  const std::size_t between = pool_.size() - static_cast<std::size_t>(busy_ + idle_);
  if (between >= ready_.size() + (all ? 1 : 0)) return;
  pool_.emplace_back(&SimDriver::run_pool, this);
}

void SimDriver::run_pool() {
  std::unique_lock lk(mu_);
  for (;;) {
    // Delays that have run out make their streams ready.
    const TimePoint now = std::chrono::steady_clock::now();
    while (!sleeping_.empty() && sleeping_.begin()->first <= now) {
      std::shared_ptr<Stream> s = std::move(sleeping_.begin()->second);
      sleeping_.erase(sleeping_.begin());
      s->pending = false;
      schedule_locked(s);
    }
    if (!ready_.empty()) {
      std::shared_ptr<Stream> s = std::move(ready_.front());
      ready_.pop_front();
      s->pending = false;
      s->running = true;
      s->start_at.reset();
      Op op = std::move(s->queue.front());
      s->queue.pop_front();
      ++busy_;
      lk.unlock();
      // Run without the lock: other streams and the host go on meanwhile.
      std::optional<std::string> failure;
      if (op.fn) {
        try {
          op.fn();
        } catch (const std::exception& e) {
          failure = e.what();
        } catch (...) {
          failure = "unknown exception";
        }
      }
      const TimePoint done = std::chrono::steady_clock::now();
      lk.lock();
      --busy_;
      complete_locked(s, op, failure, done);
      continue;
    }
    if (pool_stopping_) return;
    // No predicate: any wake-up (work, a new earlier delay, spurious) re-examines everything.
    ++idle_;
    if (sleeping_.empty()) {
      pool_cv_.wait(lk);
    } else {
      // A copy: wait_until reads the deadline again after waking, when the entry may be gone.
      const TimePoint deadline = sleeping_.begin()->first;
      pool_cv_.wait_until(lk, deadline);
    }
    --idle_;
    if (claimed_ > 0) --claimed_;
  }
}

void SimDriver::complete_locked(const std::shared_ptr<Stream>& s, const Op& op,
                                const std::optional<std::string>& failure, TimePoint now) {
  if (op.stamp) op.stamp->time = now;
  s->completed = op.seq;
  s->running = false;
  if (failure && !s->error) {
    s->error = op.name + " on " + *s->label + " failed: " + *failure;
    s->error_seq = op.seq;
  }
  // The streams whose next operation waited for this one.
  while (!s->waiters.empty() && s->waiters.begin()->first <= s->completed) {
    std::shared_ptr<Stream> w = s->waiters.begin()->second.lock();
    s->waiters.erase(s->waiters.begin());
    if (w) schedule_locked(w);
  }
  if (s->destroyed && s->queue.empty()) {
    std::erase(all_streams_, s);
  } else {
    schedule_locked(s);
  }
  cv_.notify_all();  // host threads waiting in wait_locked, a destructor counting streams
}

// ---------------------------------------------------------------------------------------------
// Streams.

CUresult SimDriver::cuStreamCreate(CUstream* stream, unsigned int flags) {
  if (stream == nullptr || (flags & ~unsigned{CU_STREAM_NON_BLOCKING}) != 0)
    return fail(CUDA_ERROR_INVALID_VALUE,
                "cuStreamCreate: flags must be CU_STREAM_DEFAULT or "
                "CU_STREAM_NON_BLOCKING");
  std::lock_guard lk(mu_);
  int device = 0;
  if (CUresult r = need_context_locked(device)) return r;
  const bool non_blocking = (flags & CU_STREAM_NON_BLOCKING) != 0;
  const std::uint64_t h = kStreamBase + ++next_handle_;
  std::string label = "stream " + hex(h);
  if (non_blocking) label += " (non-blocking)";
  if (devices_ > 1) label += " of device " + std::to_string(device);
  streams_[h] = new_stream_locked(h, std::move(label), device, non_blocking);
  *stream = reinterpret_cast<CUstream>(static_cast<std::uintptr_t>(h));
  return CUDA_SUCCESS;
}

CUresult SimDriver::cuStreamDestroy(CUstream h) {
  const std::uint64_t v = handle_value(h);
  if (v <= 2) return fail(CUDA_ERROR_INVALID_HANDLE, "a default stream cannot be destroyed");
  std::lock_guard lk(mu_);
  std::shared_ptr<Stream> s;
  if (CUresult r = resolve_locked(h, s)) return r;
  streams_.erase(v);
  release_locked(s);
  return CUDA_SUCCESS;
}

CUresult SimDriver::stream_synchronize_locked(std::unique_lock<std::mutex>& lk, CUstream h) {
  std::shared_ptr<Stream> s;
  if (CUresult r = resolve_locked(h, s)) return r;
  const std::uint64_t target = s->enqueued;
  const VectorClock clock = s->clock;
  wait_locked(lk, *s, target);
  join(host_clock_, clock);
  return sticky_locked(*s, target);
}

CUresult SimDriver::cuStreamSynchronize(CUstream h) {
  std::unique_lock lk(mu_);
  return stream_synchronize_locked(lk, h);
}

CUresult SimDriver::cuStreamQuery(CUstream h) {
  std::lock_guard lk(mu_);
  std::shared_ptr<Stream> s;
  if (CUresult r = resolve_locked(h, s)) return r;
  if (s->completed < s->enqueued) return CUDA_ERROR_NOT_READY;
  // A query that says "done" orders the host after the work, like a synchronize.
  join(host_clock_, s->clock);
  return CUDA_SUCCESS;
}

CUresult SimDriver::cuStreamGetCtx(CUstream h, CUcontext* context) {
  return read_stream(h, context,
                     [&](const Stream& s) { return context_handle(instance_, s.device); });
}

// The driver calls a host function from its own thread, through C frames: an exception that
// escapes it is std::terminate there. The simulator ends the process too, saying why, instead
// of reporting it at the next synchronize as it does for its own tasks.
namespace {
void run_host_function(CUhostFn fn, void* user_data) noexcept {
  // A copy: the exception, and its what(), end with the catch block.
  std::string what = "an exception that is not a std::exception";
  try {
    fn(user_data);
    return;
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
  }
  std::fprintf(stderr,
               "cai simulator: an exception escaped a host function (cuLaunchHostFunc): %s; "
               "undefined on a real driver: the driver's thread ends the process "
               "(std::terminate)\n",
               what.c_str());
  std::fflush(stderr);
  std::terminate();
}
}  // namespace

CUresult SimDriver::cuLaunchHostFunc(CUstream h, CUhostFn fn, void* user_data) {
  if (fn == nullptr) return fail(CUDA_ERROR_INVALID_VALUE, "cuLaunchHostFunc: fn is NULL");
  std::lock_guard lk(mu_);
  std::shared_ptr<Stream> s;
  if (CUresult r = resolve_locked(h, s)) return r;
  Op op;
  op.name = "host function";
  op.fn = [fn, user_data] { run_host_function(fn, user_data); };
  enqueue_locked(s, std::move(op), {});
  return CUDA_SUCCESS;
}

CUresult SimDriver::caiSimDelay(CUstream h, double seconds) {
  // At most an hour: a longer pause is a unit mistake, not a test (and 1e20 s would overflow
  // the clock and pause for nothing).
  if (!(seconds >= 0) || !(seconds <= 3600)) {
    return fail(CUDA_ERROR_INVALID_VALUE,
                "delay(): seconds must be in [0, 3600], got " + std::to_string(seconds));
  }
  std::lock_guard lk(mu_);
  std::shared_ptr<Stream> s;
  if (CUresult r = resolve_locked(h, s)) return r;
  Op op;
  op.name = "delay";
  op.delay = seconds;
  enqueue_locked(s, std::move(op), {});
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------------------------------------
// Events.

CUresult SimDriver::cuEventCreate(CUevent* event, unsigned int flags) {
  constexpr unsigned known =
      CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
  if (event == nullptr || (flags & ~known) != 0)
    return fail(CUDA_ERROR_INVALID_VALUE, "cuEventCreate: unknown flags " + std::to_string(flags));
  if ((flags & CU_EVENT_INTERPROCESS) && !(flags & CU_EVENT_DISABLE_TIMING))
    return fail(CUDA_ERROR_INVALID_VALUE,
                "cuEventCreate: CU_EVENT_INTERPROCESS needs CU_EVENT_DISABLE_TIMING");
  std::lock_guard lk(mu_);
  int device = 0;
  if (CUresult r = need_context_locked(device)) return r;
  std::shared_ptr<SharedEvent> shared;
  if (flags & CU_EVENT_INTERPROCESS) {
    if (!event_table_)
      event_table_ = SharedMapping::create(kEventSlots * sizeof(SharedEventSlot), "cai-sim-events");
    std::uint32_t index = 0;
    if (!free_event_slots_.empty()) {
      index = free_event_slots_.back();
      free_event_slots_.pop_back();
    } else if (next_event_slot_ < kEventSlots) {
      index = next_event_slot_++;
    } else {
      return fail(CUDA_ERROR_OUT_OF_MEMORY, "all " + std::to_string(kEventSlots) +
                                                " interprocess events of the simulator are in "
                                                "use");
    }
    shared = std::make_shared<SharedEvent>();
    shared->table = event_table_;
    // The segment is zero-filled: zero counters are a valid, never-recorded slot.
    shared->slot = reinterpret_cast<SharedEventSlot*>(event_table_->data()) + index;
    shared->index = index;
    shared->owner = ProcessId::self();
  }
  const std::uint64_t e = kEventBase + ++next_handle_;
  Event& ev = events_[e];
  ev.flags = flags;
  ev.device = device;
  ev.shared = std::move(shared);
  *event = reinterpret_cast<CUevent>(static_cast<std::uintptr_t>(e));
  return CUDA_SUCCESS;
}

CUresult SimDriver::cuEventDestroy(CUevent e) {
  std::lock_guard lk(mu_);
  Event* ev = event_locked(e);
  if (ev == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (ev->shared && !ev->shared->opened) {
    // Handles already given out stop opening; the counters only grow, so an importer still
    // waiting on the old event at worst waits for a later record.
    ev->shared->slot->token.store(0);
    free_event_slots_.push_back(ev->shared->index);
  }
  events_.erase(handle_value(e));
  return CUDA_SUCCESS;
}

CUresult SimDriver::cuEventRecord(CUevent e, CUstream h) {
  std::lock_guard lk(mu_);
  Event* ev = event_locked(e);
  if (ev == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  std::shared_ptr<Stream> s;
  if (CUresult r = resolve_locked(h, s)) return r;
  if (ev->shared && ev->shared->opened)
    return fail(CUDA_ERROR_INVALID_HANDLE,
                "an event opened from another process cannot be recorded here");
  if (s->device != ev->device) {
    return fail(CUDA_ERROR_INVALID_HANDLE, "event " + hex(handle_value(e)) + " belongs to device " +
                                               std::to_string(ev->device) + " but " + *s->label +
                                               " to device " + std::to_string(s->device) +
                                               "; record an event of the stream's device");
  }
  auto rec = std::make_shared<EventRecord>();
  rec->stamp = std::make_shared<Stamp>();
  Op op;
  op.name = "event record";
  op.stamp = rec->stamp;
  if (ev->shared) {
    // Other processes wait for record number `target` to be reached.
    const std::uint64_t target = ev->shared->slot->recorded.fetch_add(1) + 1;
    op.fn = [shared = ev->shared, target] {
      SharedEventSlot& slot = *shared->slot;
      std::uint64_t done = slot.completed.load();
      while (done < target && !slot.completed.compare_exchange_weak(done, target)) {
      }
      slot.wake.fetch_add(1);
      shared_wake_all(slot.wake);
    };
  }
  enqueue_locked(s, std::move(op), {});
  rec->stream = s;
  rec->seq = s->enqueued;
  rec->clock = s->clock;
  ev->record = std::move(rec);
  return CUDA_SUCCESS;
}

CUresult SimDriver::cuStreamWaitEvent(CUstream h, CUevent e, unsigned int flags) {
  if (flags != 0) return fail(CUDA_ERROR_INVALID_VALUE, "cuStreamWaitEvent: flags must be 0");
  std::lock_guard lk(mu_);
  Event* ev = event_locked(e);
  if (ev == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  std::shared_ptr<Stream> s;
  if (CUresult r = resolve_locked(h, s)) return r;
  if (ev->shared && ev->shared->opened) {
    wait_shared_locked(s, ev->shared);
    return CUDA_SUCCESS;
  }
  if (!ev->record) return CUDA_SUCCESS;  // as CUDA: a never-recorded event is complete
  const std::shared_ptr<EventRecord> rec = ev->record;
  const Dep dep{rec->stream, rec->seq};
  Op op;
  op.name = "event wait";
  enqueue_locked(s, std::move(op), {}, &rec->clock, &dep);
  return CUDA_SUCCESS;
}

void SimDriver::wait_shared_locked(const std::shared_ptr<Stream>& s,
                                   const std::shared_ptr<SharedEvent>& ev) {
  // As cuStreamWaitEvent: the wait is for the most recent record at the time of the call.
  const std::uint64_t target = ev->slot->recorded.load();
  if (ev->slot->completed.load() >= target) return;
  Op op;
  op.name = "interprocess event wait";
  op.fn = [this, ev, target] {
    SharedEventSlot& slot = *ev->slot;
    for (;;) {
      const std::uint32_t w = slot.wake.load();
      if (slot.completed.load() >= target) return;
      shared_wait(slot.wake, w, std::chrono::milliseconds(100));
      if (slot.completed.load() >= target) return;
      if (stopping_) throw std::runtime_error("the simulator was destroyed during the wait");
      if (!ev->owner.alive()) {
        throw std::runtime_error("process " + std::to_string(ev->owner.pid) +
                                 ", which records the interprocess event, exited before the "
                                 "event completed");
      }
    }
  };
  enqueue_locked(s, std::move(op), {});
}

CUresult SimDriver::cuEventSynchronize(CUevent e) {
  std::unique_lock lk(mu_);
  Event* ev = event_locked(e);
  if (ev == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (ev->shared && ev->shared->opened) {
    // Another process's event: wait without the lock.
    const std::shared_ptr<SharedEvent> shared = ev->shared;
    const std::uint64_t target = shared->slot->recorded.load();
    lk.unlock();
    while (shared->slot->completed.load() < target) {
      const std::uint32_t w = shared->slot->wake.load();
      if (shared->slot->completed.load() >= target) break;
      shared_wait(shared->slot->wake, w, std::chrono::milliseconds(100));
      if (shared->slot->completed.load() < target && !shared->owner.alive()) {
        return fail(CUDA_ERROR_LAUNCH_FAILED,
                    "process " + std::to_string(shared->owner.pid) +
                        ", which records the interprocess event, exited before the event "
                        "completed");
      }
    }
    return CUDA_SUCCESS;
  }
  const std::shared_ptr<EventRecord> rec = ev->record;
  if (!rec) return CUDA_SUCCESS;
  wait_locked(lk, *rec->stream, rec->seq);
  join(host_clock_, rec->clock);
  return sticky_locked(*rec->stream, rec->seq);
}

CUresult SimDriver::cuEventQuery(CUevent e) {
  std::lock_guard lk(mu_);
  Event* ev = event_locked(e);
  if (ev == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (ev->shared && ev->shared->opened) {
    return ev->shared->slot->completed.load() >= ev->shared->slot->recorded.load()
               ? CUDA_SUCCESS
               : CUDA_ERROR_NOT_READY;
  }
  const std::shared_ptr<EventRecord> rec = ev->record;
  if (!rec) return CUDA_SUCCESS;
  if (rec->stream->completed < rec->seq) return CUDA_ERROR_NOT_READY;
  join(host_clock_, rec->clock);
  return CUDA_SUCCESS;
}

CUresult SimDriver::cuEventElapsedTime(float* ms, CUevent start, CUevent end) {
  if (ms == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lk(mu_);
  TimePoint t[2];
  const CUevent handles[2] = {start, end};
  for (int i = 0; i < 2; ++i) {
    const Event* ev = event_locked(handles[i]);
    if (ev == nullptr) return CUDA_ERROR_INVALID_HANDLE;
    const std::string name = "event " + hex(handle_value(handles[i]));
    if (ev->flags & CU_EVENT_DISABLE_TIMING)
      return fail(CUDA_ERROR_INVALID_HANDLE, name + " was created without timing");
    if (!ev->record) return fail(CUDA_ERROR_INVALID_HANDLE, name + " has not been recorded");
    if (!ev->record->stamp->time)
      return fail(CUDA_ERROR_NOT_READY, name + " has not completed yet (synchronize it first)");
    t[i] = *ev->record->stamp->time;
  }
  *ms = std::chrono::duration<float, std::milli>(t[1] - t[0]).count();
  return CUDA_SUCCESS;
}

}  // namespace cai::device::sim
