// The backend's driver, devices and contexts, its errors, and the process-wide choice of
// driver (backend()).

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "backend/backend.h"
#include "backend_select.h"
#include "cai/core/error.h"
#include "cai/core/format.h"
#include "cai/core/interface.h"

namespace cai::device {

namespace detail {

using namespace cu;

// ---------------------------------------------------------------------------------------------
// Errors.

BackendState::BackendState(std::shared_ptr<const Driver> d)
    : driver(std::move(d)),
      api(driver->api),
      sim(driver->simulated ? &driver->sim : nullptr),
      ranges([] {
        const char* env = std::getenv("CAI_CUDA_POINTER_CACHE");
        return env != nullptr && std::string_view(env) == "0" ? std::size_t{0} : std::size_t{1024};
      }()),
      primary_(driver->devices.size(), nullptr),
      pools_(driver->devices.size(), -1),
      host_pointer_ok_(driver->devices.size(), -1) {}

std::string BackendState::describe(CUresult r) const {
  return cu::describe(api, r);
}

void BackendState::fail(CUresult r, std::string_view function, std::string_view detail) const {
  std::string more;
  if (sim != nullptr) {
    const char* text = nullptr;
    if (sim->caiSimGetErrorDetail(&text) == CUDA_SUCCESS && text != nullptr) more = text;
  }
  if (r == kSimRaceResult && more.starts_with(kSimRaceDetailPrefix)) throw_error(Errc::race, more);
  std::string msg = "CUDA backend: " + std::string(function) + " failed: " + describe(r);
  msg += detail;
  if (!more.empty()) msg += ": " + more;
  throw_error(Errc::device_error, std::move(msg));
}

// ---------------------------------------------------------------------------------------------
// Devices and contexts.

CUdevice BackendState::device_of(int ordinal, std::string_view where) const {
  const std::vector<CUdevice>& devs = driver->devices;
  if (ordinal < 0 || static_cast<std::size_t>(ordinal) >= devs.size()) {
    std::string msg(where);
    msg += ": device " + std::to_string(ordinal) + " out of range (" + std::to_string(devs.size()) +
           (sim ? " simulated devices: CAI_SIM_DEVICES)" : " CUDA devices)");
    throw_error(Errc::index_error, std::move(msg));
  }
  return devs[static_cast<std::size_t>(ordinal)];
}

int BackendState::ordinal_of(CUdevice dev) const {
  const std::vector<CUdevice>& devs = driver->devices;
  for (std::size_t i = 0; i < devs.size(); ++i) {
    if (devs[i] == dev) return static_cast<int>(i);
  }
  return -1;
}

CUcontext BackendState::primary_context(int ordinal) {
  const CUdevice dev = device_of(ordinal, "primary_context()");
  std::lock_guard lock(context_mu_);
  CUcontext& ctx = primary_[static_cast<std::size_t>(ordinal)];
  if (ctx == nullptr) CAI_DRIVER(*this, cuDevicePrimaryCtxRetain, &ctx, dev);
  return ctx;
}

CUcontext BackendState::current_context() {
  CUcontext ctx = nullptr;
  CAI_DRIVER(*this, cuCtxGetCurrent, &ctx);
  if (ctx != nullptr) return ctx;
  ctx = primary_context(0);
  CAI_DRIVER(*this, cuCtxSetCurrent, ctx);
  return ctx;
}

int BackendState::current_ordinal() {
  current_context();
  CUdevice dev = 0;
  CAI_DRIVER(*this, cuCtxGetDevice, &dev);
  return ordinal_of(dev);
}

CUcontext BackendState::stream_context(CUstream s) {
  const auto v = reinterpret_cast<std::uintptr_t>(s);
  if (v <= 2) return current_context();  // NULL, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD
  CUcontext ctx = nullptr;
  check(with_context([&] { return api.cuStreamGetCtx(s, &ctx); }), "cuStreamGetCtx");
  return ctx;
}

int BackendState::context_device(CUcontext ctx) {
  // Asked inside the context (no cache: a destroyed context's address can be reused).
  ScopedContext scope(*this, ctx);
  CUdevice dev = 0;
  CAI_DRIVER(*this, cuCtxGetDevice, &dev);
  return ordinal_of(dev);
}

ScopedContext::ScopedContext(BackendState& st, CUcontext ctx) : st_(st) {
  if (ctx == nullptr) return;
  CUcontext cur = nullptr;
  CAI_DRIVER(st, cuCtxGetCurrent, &cur);
  if (cur == ctx) return;
  CAI_DRIVER(st, cuCtxPushCurrent, ctx);
  pushed_ = true;
}

ScopedContext::~ScopedContext() {
  if (!pushed_) return;
  CUcontext popped = nullptr;
  // Nothing useful can be done about a failure here; the context stack is the driver's.
  (void)st_.api.cuCtxPopCurrent(&popped);
}

StreamScope::StreamScope(BackendState& s, CUstream strm)
    : st(s), stream(strm), context(s.stream_context(strm)), scope(s, context) {
  CUdevice dev = 0;
  CAI_DRIVER(st, cuCtxGetDevice, &dev);
  device = st.ordinal_of(dev);
}

CUstream to_stream(StreamHandle s, std::string_view where) {
  if (s == 0) {
    throw_error(Errc::value_error, stream_zero_message(std::string(where) + ": stream"));
  }
  return reinterpret_cast<CUstream>(static_cast<std::uintptr_t>(s));
}

CUevent to_event(EventHandle e, std::string_view where) {
  if (e == 0) {
    throw_error(Errc::value_error, std::string(where) + ": event handle 0 is not an event");
  }
  return reinterpret_cast<CUevent>(static_cast<std::uintptr_t>(e));
}

bool kernel_can_access(const PointerInfo& p, int device) {
  switch (p.kind) {
    case MemoryKind::managed:
    case MemoryKind::pinned_host:
      return true;
    case MemoryKind::device:
      return p.device == device;
    case MemoryKind::unregistered:
      return false;
  }
  return false;
}

// ---------------------------------------------------------------------------------------------
// Making backends.

std::unique_ptr<Backend> make_backend(std::shared_ptr<const Driver> driver) {
  if (!driver->ok) throw_error(Errc::device_error, driver->error);
  return std::make_unique<Backend>(std::make_unique<BackendState>(std::move(driver)));
}

std::unique_ptr<Backend> select_backend(std::string_view env_value) {
  // The simulated driver is a library like NVIDIA's (cu::sim_driver): one per process, shared
  // with every other driver-API client that finds it.
  if (env_value == "sim") return make_backend(cu::sim_driver());
  if (env_value == "cuda") return make_backend(libcuda());
  if (env_value.empty()) {
    const std::shared_ptr<const Driver> cuda = libcuda();
    return make_backend(cuda->ok ? cuda : cu::sim_driver());
  }
  throw_error(Errc::value_error, "CAI_BACKEND=" + std::string(env_value) +
                                     ": unknown backend; expected \"sim\" (the simulated "
                                     "driver), \"cuda\" (the CUDA driver) or unset (the CUDA "
                                     "driver when it has a device, else the simulator)");
}

}  // namespace detail

// ---------------------------------------------------------------------------------------------
// The Backend's own members.

using detail::BackendState;

Backend::Backend(std::unique_ptr<BackendState> state) : state_(std::move(state)) {}
Backend::~Backend() = default;

std::string_view Backend::name() const noexcept {
  return state_->sim ? "simulator" : "cuda";
}

bool Backend::simulated() const noexcept {
  return state_->sim != nullptr;
}

CallCounts Backend::call_counts() const noexcept {
  auto get = [](const detail::Counter& c) { return c.n.load(std::memory_order_relaxed); };
  const auto& c = state_->counts;
  return {get(c.event_record), get(c.stream_wait_event), get(c.event_create), get(c.pointer_query),
          get(c.stream_synchronize)};
}

void Backend::reset_call_counts() noexcept {
  auto& c = state_->counts;
  for (detail::Counter* k : {&c.event_record, &c.stream_wait_event, &c.event_create,
                             &c.pointer_query, &c.stream_synchronize}) {
    k->n.store(0, std::memory_order_relaxed);
  }
}

int Backend::device_count() {
  return static_cast<int>(state_->driver->devices.size());
}

DeviceProperties Backend::properties(int device) {
  BackendState& st = *state_;
  const cu::CUdevice dev = st.device_of(device, "properties()");
  DeviceProperties p;
  p.ordinal = device;
  char name[256] = {};
  CAI_DRIVER(st, cuDeviceGetName, name, static_cast<int>(sizeof name) - 1, dev);
  p.name = name;
  CAI_DRIVER(st, cuDeviceGetAttribute, &p.compute_major,
             cu::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
  CAI_DRIVER(st, cuDeviceGetAttribute, &p.compute_minor,
             cu::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
  CAI_DRIVER(st, cuDeviceGetAttribute, &p.multiprocessors,
             cu::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
  std::size_t total = 0;
  CAI_DRIVER(st, cuDeviceTotalMem, &total, dev);
  p.total_memory = total;
  cu::CUuuid uuid{};
  CAI_DRIVER(st, cuDeviceGetUuid, &uuid, dev);
  static_assert(sizeof uuid.bytes == sizeof p.uuid);
  std::memcpy(p.uuid.data(), uuid.bytes, sizeof uuid.bytes);
  return p;
}

std::pair<std::size_t, std::size_t> Backend::memory_info() {
  BackendState& st = *state_;
  st.current_context();
  std::size_t free = 0, total = 0;
  CAI_DRIVER(st, cuMemGetInfo, &free, &total);
  return {free, total};
}

int Backend::current_device() {
  return state_->current_ordinal();
}

void Backend::set_current_device(int device) {
  BackendState& st = *state_;
  CAI_DRIVER(st, cuCtxSetCurrent, st.primary_context(device));
}

// ---------------------------------------------------------------------------------------------
// The process-wide backend.

namespace {
std::atomic<bool> g_exiting{false};
// Which driver this process initialised (the backend's, or libcuda.so.1's cuInit run by
// cuda_available() and cuda_info()), or null. A child forked after it gets g_forked_from: a
// driver's state (its threads, locks, contexts) does not survive fork.
std::atomic<const char*> g_initialised{nullptr};
std::atomic<int> g_forked_from{0};

void after_fork_in_child() {
  if (g_initialised.load(std::memory_order_relaxed) != nullptr && g_forked_from.load() == 0)
    g_forked_from.store(static_cast<int>(::getppid()));
}

// From now on a forked child refuses backend(): `what` was initialised.
void arm_fork_check(const char* what) {
  static const bool registered = [] {
    ::pthread_atfork(nullptr, nullptr, &after_fork_in_child);
    return true;
  }();
  (void)registered;
  const char* none = nullptr;
  g_initialised.compare_exchange_strong(none, what);
}

// libcuda.so.1, with the fork check armed once its cuInit ran.
std::shared_ptr<const cu::Driver> initialised_libcuda() {
  std::shared_ptr<const cu::Driver> d = cu::libcuda();
  if (d->initialised) arm_fork_check("CUDA driver");
  return d;
}
}  // namespace

std::string stream_text(StreamHandle s) {
  if (s == kLegacyDefaultStream) return "legacy default stream (1)";
  if (s == kPerThreadDefaultStream) return "per-thread default stream (2)";
  return "stream " + cai::detail::hex(s);
}

void set_exiting() noexcept {
  g_exiting.store(true, std::memory_order_relaxed);
}
bool exiting() noexcept {
  return g_exiting.load(std::memory_order_relaxed);
}

Backend& backend() {
  // Leaked on purpose: no destructor runs at exit, so exit never waits for stream work or
  // races with threads that still use the backend. If the choice throws, the next call retries.
  // Checked first: a child must not make a backend over the parent's driver either.
  if (const int parent = g_forked_from.load(std::memory_order_relaxed); parent != 0) [[unlikely]] {
    throw_error(Errc::device_error,
                "cai: this process was forked from process " + std::to_string(parent) +
                    " after cai had initialised the " + std::string(g_initialised.load()) +
                    "; a driver's state does not survive fork (as CUDA and PyTorch, cai cannot "
                    "be used in the child). Start processes with the 'spawn' method "
                    "(multiprocessing.get_context('spawn'); cai.multiprocessing does by default)");
  }
  static Backend* const chosen = [] {
    const char* env = std::getenv("CAI_BACKEND");
    Backend* b = detail::select_backend(env ? env : "").release();
    arm_fork_check(b->simulated() ? "simulated driver" : "CUDA driver");
    return b;
  }();
  return *chosen;
}

bool cuda_available() {
  try {
    const std::shared_ptr<const cu::Driver> d = initialised_libcuda();
    return d->ok && !d->simulated;  // the process's libcuda.so.1 may be cai's simulated one
  } catch (...) {
    return false;
  }
}

CudaInfo cuda_info() {
  CudaInfo info;
  info.api_version = cu::kDriverApiVersion;
  info.kernels = detail::cuda_kernels_built();
  const std::shared_ptr<const cu::Driver> d = initialised_libcuda();
  if (d->simulated) {  // NVIDIA's driver is not this process's libcuda.so.1
    info.error = "the process's libcuda.so.1 is cai's simulated driver";
    return info;
  }
  info.driver_loaded = d->ok;
  info.driver_version = d->version;
  info.devices = static_cast<int>(d->devices.size());
  info.error = d->error;
  return info;
}

}  // namespace cai::device
