#include "device/sim/sim_backend.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>

#include "cai/core/error.h"
#include "device/checks.h"
#include "device/kernels/cpu.h"

namespace cai::device::detail {

namespace {

// Handles are recognisable in messages and never collide between streams and events.
constexpr std::uint64_t kStreamBase = 0x5100000000;
constexpr std::uint64_t kEventBase = 0xe100000000;
constexpr std::uint64_t kContextBase = 0xc000000000;
constexpr std::size_t kAlignment = 256;
constexpr int kMaxDevices = 64;
// Address space reserved for each simulated device's memory (pages are taken when written).
constexpr std::size_t kDeviceMemory = std::size_t{16} << 30;
constexpr std::uint32_t kEventSlots = 4096;
// Interprocess handles: a magic number, a version, then the fields (docs/scale-out.md).
constexpr std::uint32_t kMemoryHandleMagic = 0x4d494143;  // "CAIM"
constexpr std::uint32_t kEventHandleMagic = 0x45494143;   // "CAIE"
constexpr std::uint32_t kHandleVersion = 1;

void* host_ptr(std::uint64_t p) {
  return reinterpret_cast<void*>(static_cast<std::uintptr_t>(p));
}

// Live instances, told when a host thread exits. Leaked so that thread exits during static
// destruction still find it.
struct LiveInstances {
  std::mutex mu;
  std::vector<SimBackend*> list;
};
LiveInstances& live() {
  static auto* l = new LiveInstances;
  return *l;
}

std::atomic<std::uint64_t> g_next_thread{1};
std::atomic<std::uint64_t> g_next_instance{1};

// Host threads get ids that are never reused (std::thread::id values are).
struct HostThread {
  std::uint64_t id = g_next_thread.fetch_add(1);
  HostThread() = default;
  HostThread(const HostThread&) = delete;
  HostThread& operator=(const HostThread&) = delete;
  ~HostThread() {
    LiveInstances& l = live();
    std::lock_guard g(l.mu);
    for (SimBackend* b : l.list) b->on_thread_exit(id);
  }
};

std::uint64_t this_thread_id() {
  thread_local HostThread t;
  return t.id;
}

// Appends the runs of one validated operand.
void append_operand(std::vector<AccessRun>& runs, const Operand& op, bool write) {
  if (op.layout.nbytes() == 0) return;
  append_runs(runs, op.ptr, op.layout.shape(), op.layout.strides(), op.layout.itemsize(), write);
}

void expand_access(std::vector<AccessRun>& runs, const char* where, const sim::Access& a) {
  if (a.shape.empty() && a.strides.empty()) {
    ByteRange r = check_range(where, "access", a.ptr, a.itemsize);
    if (!r.empty()) runs.push_back({r.lo, r.hi, a.write});
    return;
  }
  // Layout validates the shape, strides and item size (and that the extent fits int64).
  const Operand op{a.ptr,
                   Layout(Dims(a.shape), Dims(a.strides), static_cast<std::int64_t>(a.itemsize))};
  check_operand(where, "access", op);
  append_operand(runs, op, a.write);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Construction and teardown.

SimBackend::SimBackend(int devices) : devices_(devices), instance_(g_next_instance.fetch_add(1)) {
  if (devices < 1 || devices > kMaxDevices) {
    throw_error(Errc::value_error, "simulator: " + std::to_string(devices) +
                                       " devices requested, expected 1 to " +
                                       std::to_string(kMaxDevices));
  }
  device_state_.resize(static_cast<std::size_t>(devices));
  host_ = {0, std::make_shared<const std::string>("the host")};
  for (int d = 0; d < devices; ++d) {
    std::string label = "legacy default stream";
    if (devices > 1) label += " of device " + std::to_string(d);
    auto s = new_stream_locked(kLegacyDefaultStream, std::move(label), d, false);
    s->legacy = true;
    device_state_[static_cast<std::size_t>(d)].legacy = std::move(s);
  }
  LiveInstances& l = live();
  std::lock_guard g(l.mu);
  l.list.push_back(this);
}

SimBackend::~SimBackend() {
  {
    LiveInstances& l = live();
    std::lock_guard g(l.mu);
    std::erase(l.list, this);
  }
  std::vector<std::thread> pool;
  {
    std::unique_lock lk(mu_);
    for (auto& s : all_streams_) s->destroyed = true;  // each leaves once drained
    std::erase_if(all_streams_, [](const auto& s) { return s->queue.empty() && !s->running; });
    stopping_ = true;  // interprocess waits give up, so that the streams drain
    cv_.wait(lk, [&] { return all_streams_.empty(); });
    pool_stopping_ = true;
    pool_cv_.notify_all();
    pool.swap(pool_);
  }
  for (std::thread& t : pool) t.join();
  for (auto& [base, a] : memory_) {
    // Device memory and mappings of other processes go with heaps_ and the mappings.
    if (a.kind != MemoryKind::device) {
      ::operator delete (host_ptr(base), std::align_val_t{kAlignment});
    }
  }
}

std::unique_ptr<SimBackend> make_sim_backend(int devices) {
  return std::make_unique<SimBackend>(devices);
}

int sim_devices_from_env() {
  const char* v = std::getenv("CAI_SIM_DEVICES");
  if (v == nullptr || *v == '\0') return 1;
  char* end = nullptr;
  long n = std::strtol(v, &end, 10);
  if (*end != '\0' || n < 1 || n > kMaxDevices) {
    throw_error(Errc::value_error, std::string("CAI_SIM_DEVICES=") + v +
                                       ": expected an integer from 1 to " +
                                       std::to_string(kMaxDevices));
  }
  return static_cast<int>(n);
}

// ---------------------------------------------------------------------------------------------
// Bookkeeping helpers (mu_ held).

int& SimBackend::device_locked() {
  return current_device_[this_thread_id()];
}

std::shared_ptr<SimBackend::Stream> SimBackend::new_stream_locked(StreamHandle handle,
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

std::shared_ptr<SimBackend::Stream> SimBackend::resolve_locked(StreamHandle s, const char* where) {
  check_stream_handle(s, where);
  if (s == kLegacyDefaultStream) {
    return device_state_[static_cast<std::size_t>(device_locked())].legacy;
  }
  if (s == kPerThreadDefaultStream) {
    const std::uint64_t id = this_thread_id();
    const int device = device_locked();
    auto& slot = per_thread_[{id, device}];
    if (!slot) {
      std::string label = "per-thread default stream of host thread " + std::to_string(id);
      if (devices_ > 1) label += " on device " + std::to_string(device);
      slot = new_stream_locked(kPerThreadDefaultStream, std::move(label), device, false);
    }
    return slot;
  }
  auto it = streams_.find(s);
  if (it == streams_.end()) {
    throw_error(Errc::device_error, std::string(where) + ": stream " + hex(s) +
                                        ": not a stream of the simulator (never created, or "
                                        "destroyed)");
  }
  return it->second;
}

SimBackend::Event& SimBackend::event_locked(EventHandle e, const char* where) {
  auto it = events_.find(e);
  if (it == events_.end()) {
    throw_error(Errc::device_error, std::string(where) + ": event " + hex(e) +
                                        ": not an event of the simulator (never created, or "
                                        "destroyed)");
  }
  return it->second;
}

void SimBackend::check_memory_locked(const MemoryCheck& c, const char* where) {
  if (c.range.empty()) return;
  const std::string what = std::string(where) + ": " + c.operand + " " + range_text(c.range);
  auto it = memory_.upper_bound(c.range.lo);
  if (it != memory_.begin()) {
    const auto a = std::prev(it);
    const ByteRange alloc{a->first, a->first + a->second.size};
    if (c.range.lo < alloc.hi) {
      if (!alloc.contains(c.range)) {
        throw_error(Errc::device_error,
                    what + " runs past the end of its allocation " + range_text(alloc));
      }
      return;
    }
  }
  if (it != memory_.end() && it->first < c.range.hi) {
    throw_error(Errc::device_error, what + " starts outside the allocation " +
                                        range_text({it->first, it->first + it->second.size}) +
                                        " but runs into it");
  }
  if (!c.host) {
    throw_error(Errc::device_error,
                what +
                    " is not in any allocation of the simulator (a foreign or freed pointer, "
                    "or pageable host memory); array data must be device, pinned_host or "
                    "managed memory of the backend");
  }
}

void SimBackend::enqueue_locked(const std::shared_ptr<Stream>& s, Op op,
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
    // The legacy stream waits for all prior work on blocking streams.
    join(clock, ds.retired_blocking);
    for (const auto& b : all_streams_) {
      if (b == s || b->device != s->device || b->non_blocking) continue;
      join(clock, b->clock);
      if (b->completed < b->enqueued) deps.push_back({b, b->enqueued});
    }
  } else if (!s->non_blocking) {
    // Blocking streams wait for prior legacy-stream work.
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

void SimBackend::retire_locked(Stream& s) {
  DeviceState& ds = device_state_[static_cast<std::size_t>(s.device)];
  join(ds.retired_all, s.clock);
  if (!s.non_blocking) join(ds.retired_blocking, s.clock);
  if (s.slot != kNoSlot) {
    retired_slots_.push_back({s.slot, s.clock[s.slot]});
    s.slot = kNoSlot;  // never used again: a destroyed stream takes no new work
  }
}

RaceDetector::Actor SimBackend::free_slot_locked(const VectorClock& clock) const {
  // The most recently retired first: with short-lived streams, that is the one the new stream
  // most likely waited for.
  for (auto it = retired_slots_.rbegin(); it != retired_slots_.rend(); ++it) {
    if (it->slot < clock.size() && clock[it->slot] >= it->epoch) return it->slot;
  }
  return slot_count_;
}

void SimBackend::throw_sticky_locked(Stream& s, std::uint64_t upto, const char* where) {
  if (!s.error || s.error_seq > upto) return;
  std::string msg = std::string(where) + ": " + *s.error;
  s.error.reset();
  throw_error(Errc::device_error, std::move(msg));
}

void SimBackend::release_locked(const std::shared_ptr<Stream>& s) {
  // As in CUDA: enqueued work still runs; the stream goes once drained.
  s->destroyed = true;
  retire_locked(*s);
  if (s->queue.empty() && !s->running) std::erase(all_streams_, s);
}

void SimBackend::wait_locked(std::unique_lock<std::mutex>& lk, const Stream& s, std::uint64_t seq) {
  cv_.wait(lk, [&] { return s.completed >= seq; });
}

void SimBackend::schedule_locked(const std::shared_ptr<Stream>& s) {
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

void SimBackend::wake_pool_locked(bool all) {
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
  // task may block (waiting for another stream), so work never waits for a busy thread.
  const std::size_t between = pool_.size() - static_cast<std::size_t>(busy_ + idle_);
  if (between >= ready_.size() + (all ? 1 : 0)) return;
  pool_.emplace_back(&SimBackend::run_pool, this);
}

void SimBackend::run_pool() {
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

void SimBackend::complete_locked(const std::shared_ptr<Stream>& s, const Op& op,
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

void SimBackend::submit(StreamHandle h, const std::string& name, std::vector<AccessRun> runs,
                        std::function<void()> fn, std::span<const MemoryCheck> checks,
                        double delay) {
  const std::string where = name + "()";
  check_stream_handle(h, where);
  runs = normalize_runs(std::move(runs));
  std::lock_guard lk(mu_);
  auto s = resolve_locked(h, where.c_str());
  for (const MemoryCheck& c : checks) check_memory_locked(c, where.c_str());
  Op op;
  op.name = name;
  op.fn = std::move(fn);
  op.delay = delay;
  enqueue_locked(s, std::move(op), runs);
}

// ---------------------------------------------------------------------------------------------
// Devices.

int SimBackend::device_count() {
  return devices_;
}

DeviceProperties SimBackend::properties(int device) {
  if (device < 0 || device >= devices_) {
    throw_error(Errc::value_error, "properties(): device " + std::to_string(device) +
                                       " out of range; the simulator has " +
                                       std::to_string(devices_) + " device(s) (CAI_SIM_DEVICES)");
  }
  DeviceProperties p;
  p.name = "cai simulator";
  p.ordinal = device;
  p.compute_major = 9;
  p.compute_minor = 0;
  p.total_memory = kDeviceMemory;  // address space; pages are taken from host memory when written
  // The same in every process, so that an IPC handle finds its device by uuid.
  const char tag[] = "cai-sim-device";
  std::copy(tag, tag + 14, p.uuid.begin());
  p.uuid[14] = static_cast<std::uint8_t>(device >> 8);
  p.uuid[15] = static_cast<std::uint8_t>(device & 0xff);
  p.multiprocessors = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return p;
}

int SimBackend::current_device() {
  std::lock_guard lk(mu_);
  return device_locked();
}

void SimBackend::set_current_device(int device) {
  if (device < 0 || device >= devices_) {
    throw_error(Errc::value_error, "set_current_device(): device " + std::to_string(device) +
                                       " out of range; the simulator has " +
                                       std::to_string(devices_) + " device(s) (CAI_SIM_DEVICES)");
  }
  std::lock_guard lk(mu_);
  device_locked() = device;
}

// ---------------------------------------------------------------------------------------------
// Memory.

std::uint64_t SimBackend::alloc(MemoryKind kind, std::size_t bytes) {
  if (kind != MemoryKind::device && kind != MemoryKind::pinned_host &&
      kind != MemoryKind::managed) {
    throw_error(Errc::value_error, "alloc(): kind must be device, pinned_host or managed");
  }
  if (bytes == 0) return 0;
  if (bytes > (std::size_t{1} << 48)) {
    throw_error(Errc::device_error,
                "alloc(): out of memory allocating " + std::to_string(bytes) + " bytes");
  }
  std::lock_guard lk(mu_);
  std::uint64_t base = 0;
  if (kind == MemoryKind::device) {
    // Device memory is shared memory that another process can map (ipc_open_memory).
    base = heap_locked(device_locked()).allocate(bytes);
  } else {
    const std::size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
    void* p = ::operator new (rounded, std::align_val_t{kAlignment}, std::nothrow);
    base = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(p));
  }
  if (base == 0) {
    throw_error(Errc::device_error,
                "alloc(): out of memory allocating " + std::to_string(bytes) + " bytes");
  }
  memory_[base] = Allocation{bytes, kind, device_locked(), nullptr};
  races_.forget(base, base + bytes);  // in case stale history of host memory was here
  return base;
}

void SimBackend::free(std::uint64_t ptr) {
  if (ptr == 0) return;
  std::unique_lock lk(mu_);
  auto it = memory_.find(ptr);
  if (it == memory_.end()) {
    std::string msg = "free(): " + hex(ptr) + ": not the start of an allocation of the simulator";
    auto a = memory_.upper_bound(ptr);
    if (a != memory_.begin() && ptr < std::prev(a)->first + std::prev(a)->second.size) {
      msg += " (it is inside the allocation at " + hex(std::prev(a)->first) + "; free that)";
    }
    throw_error(Errc::device_error, std::move(msg));
  }
  if (it->second.ipc) {
    throw_error(Errc::device_error, "free(): " + hex(ptr) +
                                        " was opened from another process; release it with "
                                        "ipc_close_memory()");
  }
  retire_memory_locked(lk, it);
}

void SimBackend::retire_memory_locked(std::unique_lock<std::mutex>& lk,
                                      std::map<std::uint64_t, Allocation>::iterator it) {
  const std::uint64_t base = it->first;
  const Allocation a = it->second;
  memory_.erase(it);
  // As cuMemFree: work already enqueued may still use the memory, so let it finish first.
  std::vector<std::pair<std::shared_ptr<Stream>, std::uint64_t>> pending;
  for (const auto& s : all_streams_) {
    if (s->completed < s->enqueued) pending.emplace_back(s, s->enqueued);
  }
  for (auto& [s, seq] : pending) wait_locked(lk, *s, seq);
  release_memory_locked(base, a);
}

void SimBackend::release_memory_locked(std::uint64_t base, const Allocation& a) {
  races_.forget(base, base + a.size);
  give_back_locked(base, a);
}

void SimBackend::give_back_locked(std::uint64_t base, const Allocation& a) {
  if (a.ipc) return;  // unmapped when the last reference to the mapping goes
  if (a.kind == MemoryKind::device) {
    heap_locked(a.device).release(base, a.size);
  } else {
    ::operator delete (host_ptr(base), std::align_val_t{kAlignment});
  }
}

SharedHeap& SimBackend::heap_locked(int device) {
  if (heaps_.empty()) heaps_.resize(static_cast<std::size_t>(devices_));
  auto& heap = heaps_[static_cast<std::size_t>(device)];
  if (!heap) heap = std::make_unique<SharedHeap>(kDeviceMemory);
  return *heap;
}

PointerInfo SimBackend::pointer_info(std::uint64_t ptr) {
  counts_.pointer_query.bump();
  PointerInfo info;
  std::lock_guard lk(mu_);
  auto it = memory_.upper_bound(ptr);
  if (it == memory_.begin()) return info;
  --it;
  if (ptr >= it->first + it->second.size) return info;
  const Allocation& a = it->second;
  info.kind = a.kind;
  info.device = a.device;
  info.context = kContextBase + instance_ * 256 + static_cast<std::uint64_t>(a.device);
  info.host_accessible = a.kind != MemoryKind::device;
  info.device_accessible = true;
  info.alloc_base = it->first;
  info.alloc_size = a.size;
  return info;
}

// ---------------------------------------------------------------------------------------------
// Stream-ordered operations.

void SimBackend::memset_async(std::uint64_t dst, int byte, std::size_t bytes, StreamHandle s) {
  const ByteRange r = check_range("memset_async()", "dst", dst, bytes);
  std::vector<AccessRun> runs;
  if (!r.empty()) runs.push_back({r.lo, r.hi, true});
  const MemoryCheck checks[] = {{"dst", r, false}};
  submit(
      s, "memset_async", std::move(runs),
      [dst, byte, bytes] {
        if (bytes > 0) std::memset(host_ptr(dst), byte, bytes);
      },
      checks);
}

void SimBackend::copy_async(std::uint64_t dst, std::uint64_t src, std::size_t bytes,
                            StreamHandle s) {
  const ByteRange d = check_range("copy_async()", "dst", dst, bytes);
  const ByteRange r = check_range("copy_async()", "src", src, bytes);
  std::vector<AccessRun> runs;
  if (bytes > 0) {
    runs.push_back({r.lo, r.hi, false});
    runs.push_back({d.lo, d.hi, true});
  }
  const MemoryCheck checks[] = {{"dst", d, true}, {"src", r, true}};
  submit(
      s, "copy_async", std::move(runs),
      [dst, src, bytes] {
        if (bytes > 0) std::memmove(host_ptr(dst), host_ptr(src), bytes);
      },
      checks);
}

void SimBackend::copy_strided_async(const Operand& dst, const Operand& src, StreamHandle s) {
  const char* where = "copy_strided_async()";
  check_same_layout_size(where, "dst", dst, "src", src);
  const ByteRange d = check_operand(where, "dst", dst);
  const ByteRange r = check_operand(where, "src", src);
  std::vector<AccessRun> runs;
  append_operand(runs, src, false);
  append_operand(runs, dst, true);
  const MemoryCheck checks[] = {{"dst", d, dst.host}, {"src", r, src.host}};
  submit(
      s, "copy_strided_async", std::move(runs), [dst, src] { kernels::cpu_copy(dst, src); },
      checks);
}

void SimBackend::fill_async(const Operand& dst, const void* value, StreamHandle s) {
  const char* where = "fill_async()";
  const ByteRange d = check_operand(where, "dst", dst);
  const auto itemsize = static_cast<std::size_t>(dst.layout.itemsize());
  if (!d.empty() && value == nullptr) {
    throw_error(Errc::value_error, "fill_async(): value is a null pointer");
  }
  std::vector<AccessRun> runs;
  append_operand(runs, dst, true);
  const MemoryCheck checks[] = {{"dst", d, false}};
  std::vector<char> v;
  if (!d.empty())
    v.assign(static_cast<const char*>(value), static_cast<const char*>(value) + itemsize);
  submit(
      s, "fill_async", std::move(runs),
      [dst, v = std::move(v)] {
        if (!v.empty()) kernels::cpu_fill(dst, v.data());
      },
      checks);
}

void SimBackend::elementwise_async(ElementwiseOp op, ElementType type,
                                   std::span<const Operand> operands, StreamHandle s) {
  const std::string name = std::string(is_valid(op) ? info(op).name : "elementwise") + "_async";
  const std::string where = name + "()";
  const auto ranges = check_elementwise(where, op, type, operands);
  std::vector<AccessRun> runs;
  std::vector<MemoryCheck> checks;
  for (std::size_t k = 0; k < operands.size(); ++k) {
    append_operand(runs, operands[k], k == 0);
    checks.push_back({elementwise_operand_name(k).data(), ranges[k], false});
  }
  submit(
      s, name, std::move(runs),
      [op, type, ops = std::vector<Operand>(operands.begin(), operands.end())] {
        kernels::cpu_elementwise(op, type, ops);
      },
      checks);
}

std::uint64_t SimBackend::alloc_async(std::size_t bytes, StreamHandle s) {
  {
    std::lock_guard lk(mu_);
    resolve_locked(s, "alloc_async()");
  }
  return alloc(MemoryKind::device, bytes);
}

void SimBackend::free_async(std::uint64_t ptr, StreamHandle h) {
  if (ptr == 0) return;
  const char* where = "free_async()";
  check_stream_handle(h, where);
  std::lock_guard lk(mu_);
  auto s = resolve_locked(h, where);
  auto it = memory_.find(ptr);
  if (it == memory_.end()) {
    throw_error(Errc::device_error, std::string(where) + ": " + hex(ptr) +
                                        ": not the start of an allocation of the simulator");
  }
  if (it->second.ipc) {
    throw_error(Errc::device_error, std::string(where) + ": " + hex(ptr) +
                                        " was opened from another process; release it with "
                                        "ipc_close_memory()");
  }
  const Allocation a = it->second;
  // The free writes the whole allocation: work of another stream not ordered before it races.
  const AccessRun runs[] = {{ptr, ptr + a.size, true}};
  Op op;
  op.name = "free_async";
  op.fn = [this, ptr, a] {
    std::lock_guard g(mu_);
    give_back_locked(ptr, a);
  };
  enqueue_locked(s, std::move(op), runs);
  // From now on the memory is gone for every new operation.
  memory_.erase(it);
  races_.forget(ptr, ptr + a.size);
}

// ---------------------------------------------------------------------------------------------
// Streams.

StreamHandle SimBackend::stream_create(bool non_blocking) {
  std::lock_guard lk(mu_);
  const StreamHandle h = kStreamBase + ++next_stream_;
  std::string label = "stream " + hex(h);
  if (non_blocking) label += " (non-blocking)";
  streams_[h] = new_stream_locked(h, std::move(label), device_locked(), non_blocking);
  return h;
}

void SimBackend::stream_destroy(StreamHandle h) {
  if (h == kLegacyDefaultStream || h == kPerThreadDefaultStream) {
    throw_error(Errc::device_error, "stream_destroy(): stream " + std::to_string(h) +
                                        " is a default stream and cannot be destroyed");
  }
  std::lock_guard lk(mu_);
  auto s = resolve_locked(h, "stream_destroy()");
  streams_.erase(h);
  release_locked(s);
}

void SimBackend::stream_synchronize(StreamHandle h) {
  counts_.stream_synchronize.bump();
  std::unique_lock lk(mu_);
  auto s = resolve_locked(h, "stream_synchronize()");
  const std::uint64_t target = s->enqueued;
  const VectorClock clock = s->clock;
  wait_locked(lk, *s, target);
  join(host_clock_, clock);
  throw_sticky_locked(*s, target, "stream_synchronize()");
}

bool SimBackend::stream_query(StreamHandle h) {
  std::lock_guard lk(mu_);
  auto s = resolve_locked(h, "stream_query()");
  if (s->completed < s->enqueued) return false;
  // A query that says "done" orders the host after the work, like a synchronize.
  join(host_clock_, s->clock);
  return true;
}

void SimBackend::synchronize() {
  std::unique_lock lk(mu_);
  const int device = device_locked();
  std::vector<std::pair<std::shared_ptr<Stream>, std::uint64_t>> targets;
  VectorClock clock = device_state_[static_cast<std::size_t>(device)].retired_all;
  for (const auto& s : all_streams_) {
    if (s->device != device) continue;
    targets.emplace_back(s, s->enqueued);
    join(clock, s->clock);
  }
  for (auto& [s, seq] : targets) wait_locked(lk, *s, seq);
  join(host_clock_, clock);
  for (auto& [s, seq] : targets) throw_sticky_locked(*s, seq, "synchronize()");
}

// ---------------------------------------------------------------------------------------------
// Events.

EventHandle SimBackend::event_create(bool timing) {
  counts_.event_create.bump();
  std::lock_guard lk(mu_);
  const EventHandle e = kEventBase + ++next_event_;
  Event& ev = events_[e];
  ev.timing = timing;
  ev.device = device_locked();
  return e;
}

void SimBackend::event_destroy(EventHandle e) {
  std::lock_guard lk(mu_);
  Event& ev = event_locked(e, "event_destroy()");
  // The slot is reused; its counters only grow, so an importer still waiting on the old
  // event at worst waits for a later record.
  if (ev.shared && !ev.shared->opened) free_event_slots_.push_back(ev.shared->index);
  events_.erase(e);
}

void SimBackend::event_record(EventHandle e, StreamHandle h) {
  counts_.event_record.bump();
  check_stream_handle(h, "event_record()");
  std::lock_guard lk(mu_);
  Event& ev = event_locked(e, "event_record()");
  auto s = resolve_locked(h, "event_record()");
  if (s->device != ev.device) {
    throw_error(Errc::device_error, "event_record(): event " + hex(e) + " belongs to device " +
                                        std::to_string(ev.device) + " but " + *s->label +
                                        " to device " + std::to_string(s->device) +
                                        "; record an event of the stream's device");
  }
  auto rec = std::make_shared<EventRecord>();
  rec->stamp = std::make_shared<Stamp>();
  Op op;
  op.name = "event_record";
  op.stamp = rec->stamp;
  if (ev.shared) {
    // Other processes wait for record number `target` to be reached.
    const std::uint64_t target = ev.shared->slot->recorded.fetch_add(1) + 1;
    op.fn = [shared = ev.shared, target] {
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
  ev.record = std::move(rec);
}

void SimBackend::stream_wait_event(StreamHandle h, EventHandle e) {
  counts_.stream_wait_event.bump();
  check_stream_handle(h, "stream_wait_event()");
  std::lock_guard lk(mu_);
  Event& ev = event_locked(e, "stream_wait_event()");
  auto s = resolve_locked(h, "stream_wait_event()");
  if (ev.shared && ev.shared->opened) {
    wait_shared_locked(s, ev.shared);
    return;
  }
  if (!ev.record) return;  // as CUDA: waiting on a never-recorded event is a no-op
  const std::shared_ptr<EventRecord> rec = ev.record;
  const Dep dep{rec->stream, rec->seq};
  Op op;
  op.name = "stream_wait_event";
  enqueue_locked(s, std::move(op), {}, &rec->clock, &dep);
}

void SimBackend::event_synchronize(EventHandle e) {
  std::unique_lock lk(mu_);
  const Event& ev = event_locked(e, "event_synchronize()");
  if (ev.shared && ev.shared->opened) {
    // Another process's event: wait in a private stream-less way, without the lock.
    const std::shared_ptr<SharedEvent> shared = ev.shared;
    const std::uint64_t target = shared->slot->recorded.load();
    lk.unlock();
    while (shared->slot->completed.load() < target) {
      const std::uint32_t w = shared->slot->wake.load();
      if (shared->slot->completed.load() >= target) break;
      shared_wait(shared->slot->wake, w, std::chrono::milliseconds(100));
      if (shared->slot->completed.load() < target && !shared->owner.alive()) {
        throw_error(Errc::device_error,
                    "event_synchronize(): process " + std::to_string(shared->owner.pid) +
                        ", which records the interprocess event, exited before the event "
                        "completed");
      }
    }
    return;
  }
  const std::shared_ptr<EventRecord> rec = ev.record;
  if (!rec) return;
  wait_locked(lk, *rec->stream, rec->seq);
  join(host_clock_, rec->clock);
  throw_sticky_locked(*rec->stream, rec->seq, "event_synchronize()");
}

bool SimBackend::event_query(EventHandle e) {
  std::lock_guard lk(mu_);
  const Event& ev = event_locked(e, "event_query()");
  if (ev.shared && ev.shared->opened) {
    return ev.shared->slot->completed.load() >= ev.shared->slot->recorded.load();
  }
  const std::shared_ptr<EventRecord> rec = ev.record;
  if (!rec) return true;
  if (rec->stream->completed < rec->seq) return false;
  join(host_clock_, rec->clock);
  return true;
}

float SimBackend::event_elapsed_ms(EventHandle start, EventHandle end) {
  std::lock_guard lk(mu_);
  const char* where = "event_elapsed_ms()";
  TimePoint t[2];
  const EventHandle handles[2] = {start, end};
  for (int i = 0; i < 2; ++i) {
    const Event& ev = event_locked(handles[i], where);
    const std::string name = std::string(where) + ": event " + hex(handles[i]);
    if (!ev.timing) throw_error(Errc::device_error, name + " was created without timing");
    if (!ev.record) throw_error(Errc::device_error, name + " has not been recorded");
    if (!ev.record->stamp->time) {
      throw_error(Errc::device_error, name + " has not completed yet (synchronize it first)");
    }
    t[i] = *ev.record->stamp->time;
  }
  return std::chrono::duration<float, std::milli>(t[1] - t[0]).count();
}

// ---------------------------------------------------------------------------------------------
// Simulator-only controls.

void SimBackend::delay(StreamHandle s, double seconds) {
  // At most an hour: a longer pause is a unit mistake, not a test (and 1e20 s would overflow
  // the clock and pause for nothing).
  if (!(seconds >= 0) || !(seconds <= 3600)) {
    throw_error(Errc::value_error,
                "delay(): seconds must be in [0, 3600], got " + std::to_string(seconds));
  }
  submit(s, "delay", {}, {}, {}, seconds);
}

void SimBackend::host_access(const sim::Access& access, std::string_view what) {
  const std::string where = std::string(what) + "()";
  std::vector<AccessRun> runs;
  expand_access(runs, where.c_str(), access);
  if (runs.empty()) return;
  runs = normalize_runs(std::move(runs));
  std::lock_guard lk(mu_);
  for (const AccessRun& r : runs) {
    auto it = memory_.upper_bound(r.lo);
    if (it == memory_.begin()) continue;
    --it;
    if (it->second.kind == MemoryKind::device && r.lo < it->first + it->second.size) {
      throw_error(Errc::device_error, where + ": " + range_text(ByteRange{r.lo, r.hi}) +
                                          " is device memory, which the host cannot access; "
                                          "copy it to host memory first");
    }
  }
  VectorClock clock = host_clock_;
  if (clock.size() <= host_.actor) clock.resize(host_.actor + 1, 0);
  ++clock[host_.actor];
  if (race_detection_) races_.check_and_record(runs, host_, clock, what);
  host_clock_ = std::move(clock);
}

void SimBackend::enqueue_task(StreamHandle s, std::span<const sim::Access> accesses,
                              std::function<void()> fn, std::string_view name) {
  const std::string where = std::string(name) + "()";
  if (!fn) throw_error(Errc::value_error, where + ": the task is empty");
  std::vector<AccessRun> runs;
  for (const sim::Access& a : accesses) expand_access(runs, where.c_str(), a);
  submit(s, std::string(name), std::move(runs), std::move(fn), {});
}

void SimBackend::set_race_detection(bool on) {
  std::lock_guard lk(mu_);
  if (on == race_detection_) return;  // switching on again must not lose the history
  race_detection_ = on;
  if (!on) races_.clear();  // nothing is recorded while off: free the history
}

bool SimBackend::race_detection() {
  std::lock_guard lk(mu_);
  return race_detection_;
}

void SimBackend::forget(std::uint64_t ptr, std::size_t bytes) {
  ByteRange r = check_range("forget()", "range", ptr, bytes);
  std::lock_guard lk(mu_);
  races_.forget(r.lo, r.hi);
}

std::size_t SimBackend::race_history_size() {
  std::lock_guard lk(mu_);
  return races_.segment_count();
}

std::size_t SimBackend::clock_slots() {
  std::lock_guard lk(mu_);
  return slot_count_;
}

void SimBackend::on_thread_exit(std::uint64_t thread_id) {
  std::lock_guard lk(mu_);
  for (auto it = per_thread_.begin(); it != per_thread_.end();) {
    if (it->first.first != thread_id) {
      ++it;
      continue;
    }
    release_locked(it->second);  // never waits: a thread exit must not wait for stream work
    it = per_thread_.erase(it);
  }
  current_device_.erase(thread_id);
}

// ---------------------------------------------------------------------------------------------
// Several devices and several processes.

namespace {

// The simulator's interprocess handles, inside the 64 opaque bytes.
struct MemoryHandleBits {
  std::uint32_t magic = kMemoryHandleMagic;
  std::uint32_t version = kHandleVersion;
  std::int32_t pid = 0;
  std::int32_t fd = -1;  ///< the exporter's descriptor of the device's shared segment
  std::uint64_t start_time = 0;
  std::uint64_t offset = 0;  ///< of the allocation in the segment
  std::uint64_t size = 0;
};
struct EventHandleBits {
  std::uint32_t magic = kEventHandleMagic;
  std::uint32_t version = kHandleVersion;
  std::int32_t pid = 0;
  std::int32_t fd = -1;  ///< the exporter's descriptor of its event table
  std::uint64_t start_time = 0;
  std::uint32_t slot = 0;
};
static_assert(sizeof(MemoryHandleBits) <= sizeof(IpcMemoryHandle::bytes));
static_assert(sizeof(EventHandleBits) <= sizeof(IpcEventHandle::bytes));
static_assert(std::atomic<std::uint64_t>::is_always_lock_free, "shared between processes");

template <class Bits, class Handle>
Handle to_handle(const Bits& bits) {
  Handle h;
  std::memcpy(h.bytes.data(), &bits, sizeof bits);
  return h;
}

template <class Bits, class Handle>
Bits from_handle(const Handle& h, std::uint32_t magic, const char* where, const char* what) {
  Bits bits;
  std::memcpy(&bits, h.bytes.data(), sizeof bits);
  if (bits.magic != magic) {
    throw_error(Errc::device_error, std::string(where) + ": not a simulator " + what +
                                        " handle (made by another backend, or corrupt)");
  }
  if (bits.version != kHandleVersion) {
    throw_error(Errc::device_error, std::string(where) + ": simulator " + what +
                                        " handle version " + std::to_string(bits.version) +
                                        ", this cai reads version " +
                                        std::to_string(kHandleVersion));
  }
  if (bits.pid == ProcessId::self().pid && bits.start_time == ProcessId::self().start_time) {
    throw_error(Errc::device_error, std::string(where) + ": the " + what +
                                        " was exported by this process; use it directly");
  }
  return bits;
}

}  // namespace

int SimBackend::stream_device(StreamHandle h) {
  std::lock_guard lk(mu_);
  return resolve_locked(h, "stream_device()")->device;
}

void SimBackend::copy_peer_async(std::uint64_t dst, int dst_device, std::uint64_t src,
                                 int src_device, std::size_t bytes, StreamHandle s) {
  const char* where = "copy_peer_async()";
  for (int d : {dst_device, src_device}) {
    if (d < 0 || d >= devices_) {
      throw_error(Errc::value_error, std::string(where) + ": device " + std::to_string(d) +
                                         " out of range; the simulator has " +
                                         std::to_string(devices_) + " device(s)");
    }
  }
  const ByteRange d = check_range(where, "dst", dst, bytes);
  const ByteRange r = check_range(where, "src", src, bytes);
  if (bytes == 0) return;
  {
    // Each side must be memory of the device it is said to be on, as for cuMemcpyPeerAsync.
    std::lock_guard lk(mu_);
    const std::pair<const char*, std::pair<std::uint64_t, int>> sides[] = {
        {"dst", {dst, dst_device}}, {"src", {src, src_device}}};
    for (const auto& [name, side] : sides) {
      auto it = memory_.upper_bound(side.first);
      if (it == memory_.begin()) continue;  // not simulator memory: the memory check says so
      --it;
      const Allocation& a = it->second;
      if (side.first < it->first + a.size && a.kind == MemoryKind::device &&
          a.device != side.second) {
        throw_error(Errc::device_error, std::string(where) + ": " + name + " at " +
                                            hex(side.first) + " is memory of device " +
                                            std::to_string(a.device) + ", not of device " +
                                            std::to_string(side.second));
      }
    }
  }
  std::vector<AccessRun> runs{{r.lo, r.hi, false}, {d.lo, d.hi, true}};
  const MemoryCheck checks[] = {{"dst", d, false}, {"src", r, false}};
  submit(
      s, "copy_peer_async", std::move(runs),
      [dst, src, bytes] { std::memmove(host_ptr(dst), host_ptr(src), bytes); }, checks);
}

IpcMemoryHandle SimBackend::ipc_export_memory(std::uint64_t base) {
  const char* where = "ipc_export_memory()";
  std::lock_guard lk(mu_);
  auto it = memory_.find(base);
  if (it == memory_.end()) {
    throw_error(Errc::device_error, std::string(where) + ": " + hex(base) +
                                        " is not the start of an allocation of the simulator");
  }
  const Allocation& a = it->second;
  if (a.ipc) {
    throw_error(Errc::device_error, std::string(where) + ": " + hex(base) +
                                        " was opened from another process; only its exporter "
                                        "can share it");
  }
  if (a.kind != MemoryKind::device) {
    throw_error(Errc::device_error, std::string(where) + ": " + hex(base) +
                                        " is not device memory; only device memory can be "
                                        "shared with another process");
  }
  SharedHeap& heap = heap_locked(a.device);
  MemoryHandleBits bits;
  bits.pid = ProcessId::self().pid;
  bits.start_time = ProcessId::self().start_time;
  bits.fd = heap.fd();
  bits.offset = heap.offset_of(base);
  bits.size = a.size;
  return to_handle<MemoryHandleBits, IpcMemoryHandle>(bits);
}

std::uint64_t SimBackend::ipc_open_memory(const IpcMemoryHandle& handle) {
  const char* where = "ipc_open_memory()";
  const auto bits =
      from_handle<MemoryHandleBits, IpcMemoryHandle>(handle, kMemoryHandleMagic, where, "memory");
  auto mapping = SharedMapping::open(ProcessId{bits.pid, bits.start_time}, bits.fd, bits.offset,
                                     bits.size, where);
  const auto base = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(mapping->data()));
  std::lock_guard lk(mu_);
  memory_[base] = Allocation{bits.size, MemoryKind::device, device_locked(), std::move(mapping)};
  races_.forget(base, base + bits.size);
  return base;
}

void SimBackend::ipc_close_memory(std::uint64_t base) {
  std::unique_lock lk(mu_);
  auto it = memory_.find(base);
  if (it == memory_.end() || !it->second.ipc) {
    throw_error(Errc::device_error, "ipc_close_memory(): " + hex(base) +
                                        " is not memory opened with ipc_open_memory()");
  }
  retire_memory_locked(lk, it);
}

EventHandle SimBackend::ipc_event_create() {
  const EventHandle e = event_create(false);
  std::lock_guard lk(mu_);
  if (!event_table_) {
    event_table_ = SharedMapping::create(kEventSlots * sizeof(SharedEventSlot), "cai-sim-events");
  }
  std::uint32_t index = 0;
  if (!free_event_slots_.empty()) {
    index = free_event_slots_.back();
    free_event_slots_.pop_back();
  } else if (next_event_slot_ < kEventSlots) {
    index = next_event_slot_++;
  } else {
    events_.erase(e);
    throw_error(Errc::device_error, "ipc_event_create(): all " + std::to_string(kEventSlots) +
                                        " interprocess events of the simulator are in use");
  }
  auto shared = std::make_shared<SharedEvent>();
  shared->table = event_table_;
  // The segment is zero-filled: zero counters are a valid, never-recorded slot.
  shared->slot = reinterpret_cast<SharedEventSlot*>(event_table_->data()) + index;
  shared->index = index;
  shared->owner = ProcessId::self();
  events_[e].shared = std::move(shared);
  return e;
}

IpcEventHandle SimBackend::ipc_export_event(EventHandle e) {
  std::lock_guard lk(mu_);
  const Event& ev = event_locked(e, "ipc_export_event()");
  if (!ev.shared || ev.shared->opened) {
    throw_error(Errc::device_error, "ipc_export_event(): event " + hex(e) +
                                        " was not made by ipc_event_create() in this process");
  }
  EventHandleBits bits;
  bits.pid = ProcessId::self().pid;
  bits.start_time = ProcessId::self().start_time;
  bits.fd = event_table_->fd();
  bits.slot = ev.shared->index;
  return to_handle<EventHandleBits, IpcEventHandle>(bits);
}

EventHandle SimBackend::ipc_open_event(const IpcEventHandle& handle) {
  const char* where = "ipc_open_event()";
  const auto bits =
      from_handle<EventHandleBits, IpcEventHandle>(handle, kEventHandleMagic, where, "event");
  if (bits.slot >= kEventSlots) {
    throw_error(Errc::device_error, std::string(where) + ": event slot " +
                                        std::to_string(bits.slot) +
                                        " out of range; corrupt handle");
  }
  auto shared = std::make_shared<SharedEvent>();
  shared->table =
      SharedMapping::open(ProcessId{bits.pid, bits.start_time}, bits.fd,
                          bits.slot * sizeof(SharedEventSlot), sizeof(SharedEventSlot), where);
  shared->slot = reinterpret_cast<SharedEventSlot*>(shared->table->data());
  shared->index = bits.slot;
  shared->owner = ProcessId{bits.pid, bits.start_time};
  shared->opened = true;
  const EventHandle e = event_create(false);
  std::lock_guard lk(mu_);
  events_[e].shared = std::move(shared);
  return e;
}

void SimBackend::wait_shared_locked(const std::shared_ptr<Stream>& s,
                                    const std::shared_ptr<SharedEvent>& ev) {
  // As cuStreamWaitEvent: the wait is for the most recent record at the time of the call.
  const std::uint64_t target = ev->slot->recorded.load();
  if (ev->slot->completed.load() >= target) return;
  Op op;
  op.name = "stream_wait_event";
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

}  // namespace cai::device::detail
