// The simulated driver: its exported symbols, the trampolines that reach an instance, and the
// entry points of initialisation, errors, devices and contexts.

#include <pthread.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <thread>
#include <utility>

#include "cai/core/error.h"
#include "sim/entry_points.h"
#include "sim/sim_driver.h"
#include "sim/sim_internal.h"

namespace cai::device::sim {

namespace {

// ---------------------------------------------------------------------------------------------
// Instance slots: a fixed number of instances may live at once (tests make private ones); each
// slot has its own trampolines (entry_points.h).

template <int... S>
constexpr std::array<const std::array<void*, abi_row_count>& (*)(), sizeof...(S)> slot_functions(
    std::integer_sequence<int, S...>) {
  return {&abi_functions<&slot_instance<S>>...};
}
const auto g_slot_functions = slot_functions(std::make_integer_sequence<int, kSimSlots>{});

// ---------------------------------------------------------------------------------------------
// Error names and texts, as the driver gives them.

struct ErrorText {
  CUresult code;
  const char* name;
  const char* text;
};
constexpr ErrorText kErrors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_DEINITIALIZED, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {CUDA_ERROR_STUB_LIBRARY, "CUDA_ERROR_STUB_LIBRARY", "CUDA driver is a stub library"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_MAP_FAILED, "CUDA_ERROR_MAP_FAILED", "mapping of buffer object failed"},
    {CUDA_ERROR_ALREADY_MAPPED, "CUDA_ERROR_ALREADY_MAPPED", "resource already mapped"},
    {CUDA_ERROR_NOT_MAPPED, "CUDA_ERROR_NOT_MAPPED", "resource not mapped"},
    {CUDA_ERROR_INVALID_PTX, "CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"},
    {CUDA_ERROR_UNSUPPORTED_PTX_VERSION, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
     "the provided PTX was compiled with an unsupported toolchain."},
    {CUDA_ERROR_OPERATING_SYSTEM, "CUDA_ERROR_OPERATING_SYSTEM",
     "OS call failed or operation "
     "not supported on this OS"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_ILLEGAL_STATE, "CUDA_ERROR_ILLEGAL_STATE",
     "the operation cannot be performed "
     "in the present state"},
    {kErrorPeerAccessUnsupported, "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED",
     "peer access is not supported between these two devices"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS",
     "an illegal memory access was "
     "encountered"},
    {CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
     "too many resources requested for launch"},
    {kErrorPeerAccessAlreadyEnabled, "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED",
     "peer access is already enabled"},
    {kErrorPeerAccessNotEnabled, "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED",
     "peer access has not been enabled"},
    {CUDA_ERROR_CONTEXT_IS_DESTROYED, "CUDA_ERROR_CONTEXT_IS_DESTROYED", "context is destroyed"},
    {CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
     "part or all of the requested memory range is already mapped"},
    {CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED",
     "pointer does not correspond to a registered memory region"},
    {CUDA_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {CUDA_ERROR_NOT_PERMITTED, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

const ErrorText* find_error(CUresult r) {
  for (const ErrorText& e : kErrors)
    if (e.code == r) return &e;
  return nullptr;
}

// Live instances, told when a host thread exits. Leaked so that thread exits during static
// destruction still find it. A forked child starts with an empty list: the parent's instances
// are copies whose threads do not exist there, and whose locks a parent thread may have held
// at the fork (a thread of the child that exits would wait on them for ever).
struct LiveInstances {
  std::mutex mu;
  std::vector<SimDriver*> list;
};
std::atomic<LiveInstances*> g_live{nullptr};
LiveInstances& live() {
  static const bool registered = [] {
    g_live.store(new LiveInstances);
    ::pthread_atfork(nullptr, nullptr, [] { g_live.store(new LiveInstances); });
    return true;
  }();
  (void)registered;
  return *g_live.load();
}

std::atomic<std::uint64_t> g_next_instance{1};

}  // namespace

// ---------------------------------------------------------------------------------------------
// Shared with the other files of the simulator.

std::atomic<SimDriver*> g_sim_instances[kSimSlots];
thread_local std::string t_error_detail;
std::atomic<std::uint64_t> g_next_thread{1};

HostThread::~HostThread() {
  LiveInstances& l = live();
  std::lock_guard g(l.mu);
  for (SimDriver* d : l.list) d->on_thread_exit(id);
}

std::uint64_t this_thread_id() {
  thread_local HostThread t;
  return t.id;
}

void set_error_detail(std::string detail) {
  t_error_detail = std::move(detail);
}

CUresult fail(CUresult r, std::string detail) {
  t_error_detail = std::move(detail);
  return r;
}

// ---------------------------------------------------------------------------------------------
// Construction and teardown.

SimDriver::SimDriver(int devices)
    : devices_(static_cast<int>(visible_devices(devices).size())),
      instance_(g_next_instance.fetch_add(1)),
      calls_(new std::atomic<std::uint64_t>[k_entry_count]),
      times_(new std::atomic<std::uint64_t>[k_entry_count]) {
  if (devices < 1 || devices > kMaxDevices) {
    throw_error(Errc::value_error, "simulator: " + std::to_string(devices) +
                                       " devices requested, expected 1 to " +
                                       std::to_string(kMaxDevices));
  }
  for (std::size_t i = 0; i < k_entry_count; ++i) calls_[i] = times_[i] = 0;
  physical_ = visible_devices(devices);
  device_state_.resize(static_cast<std::size_t>(devices_));
  host_ = {0, std::make_shared<const std::string>("the host")};
  for (int d = 0; d < devices_; ++d) {
    std::string label = "legacy default stream";
    if (devices_ > 1) label += " of device " + std::to_string(d);
    auto s = new_stream_locked(1, std::move(label), d, false);
    s->legacy = true;
    device_state_[static_cast<std::size_t>(d)].legacy = std::move(s);
  }
  for (int i = 0; i < kSimSlots; ++i) {
    SimDriver* expected = nullptr;
    if (g_sim_instances[i].compare_exchange_strong(expected, this)) {
      slot_ = i;
      break;
    }
  }
  if (slot_ < 0) {
    throw_error(Errc::device_error,
                "simulator: more than " + std::to_string(kSimSlots) + " simulated drivers at once");
  }
  LiveInstances& l = live();
  std::lock_guard g(l.mu);
  l.list.push_back(this);
}

SimDriver::~SimDriver() {
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
  g_sim_instances[slot_].store(nullptr, std::memory_order_release);
  for (auto& [base, a] : memory_) {
    if (a.kind == Kind::pinned || a.kind == Kind::managed) free_host_block(a.host);
    if (a.kind == Kind::opened) unreserve_addresses(base, (a.size + 4095) / 4096 * 4096);
  }
}

std::shared_ptr<const Driver> make_sim_driver(int devices) {
  auto sim = std::make_shared<SimDriver>(devices);
  auto d = std::make_shared<Driver>(
      load_driver([&sim](const char* name) { return sim->symbol(name); }, "simulator"));
  d->keep = sim;
  return d;
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
// Symbols, calls and injected errors.

void* SimDriver::symbol(const char* name) const {
  const std::size_t row = find_symbol(name);
  return row == abi_row_count ? nullptr : g_slot_functions[static_cast<std::size_t>(slot_)]()[row];
}

CUresult SimDriver::enter(std::size_t index) noexcept {
  calls_[index].fetch_add(1, std::memory_order_relaxed);
  if (!initialized_ && index > k_cuDriverGetVersion &&
      (index < driver_entry_count || index >= sim_entries_end)) {
    return fail(CUDA_ERROR_NOT_INITIALIZED, "cuInit has not been called");
  }
  if (!any_injection_.load(std::memory_order_relaxed)) return CUDA_SUCCESS;
  std::lock_guard g(inject_mu_);
  auto it = injections_.find(index);
  if (it == injections_.end()) return CUDA_SUCCESS;
  Injection& inj = it->second;
  if (inj.skip > 0) {
    --inj.skip;
    return CUDA_SUCCESS;
  }
  const CUresult r = inj.result;
  if (--inj.times == 0) injections_.erase(it);
  if (injections_.empty()) any_injection_ = false;
  return fail(r, std::string("injected by caiSimInjectError(\"") + entry_names[index] + "\")");
}

CUresult SimDriver::caiSimInjectError(const char* entry, CUresult result, unsigned int skip,
                                      unsigned int times) {
  if (entry == nullptr || times == 0) return fail(CUDA_ERROR_INVALID_VALUE, "no entry or times 0");
  std::size_t index = k_entry_count;
  for (std::size_t i = 0; i < k_entry_count; ++i)
    if (std::strcmp(entry, entry_names[i]) == 0) index = i;
  if (index == k_entry_count)
    return fail(CUDA_ERROR_INVALID_VALUE, std::string("no entry point named ") + entry);
  std::lock_guard g(inject_mu_);
  injections_[index] = Injection{result, skip, times};
  any_injection_ = true;
  return CUDA_SUCCESS;
}

namespace {
// One counter per entry point into the caller's array of `count` (fewer when it is shorter).
CUresult copy_counters(const std::atomic<std::uint64_t>* from, std::size_t entries,
                       unsigned long long* out, std::size_t count) {
  if (out == nullptr && count != 0) return CUDA_ERROR_INVALID_VALUE;
  for (std::size_t i = 0; i < count && i < entries; ++i)
    out[i] = from[i].load(std::memory_order_relaxed);
  return CUDA_SUCCESS;
}
}  // namespace

CUresult SimDriver::caiSimGetCallCounts(unsigned long long* counts, std::size_t count) {
  return copy_counters(calls_.get(), k_entry_count, counts, count);
}

CUresult SimDriver::caiSimResetCallCounts() {
  for (std::size_t i = 0; i < k_entry_count; ++i) {
    calls_[i].store(0, std::memory_order_relaxed);
    times_[i].store(0, std::memory_order_relaxed);
  }
  return CUDA_SUCCESS;
}

CUresult SimDriver::caiSimTimeCalls(int on) {
  timing_.store(on != 0, std::memory_order_relaxed);
  return CUDA_SUCCESS;
}

CUresult SimDriver::caiSimGetCallTimes(unsigned long long* ns, std::size_t count) {
  return copy_counters(times_.get(), k_entry_count, ns, count);
}

CUresult SimDriver::caiSimGetErrorDetail(const char** detail) {
  return error_detail(detail);
}

CUresult SimDriver::error_detail(const char** detail) {
  if (detail == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *detail = t_error_detail.empty() ? nullptr : t_error_detail.c_str();
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------------------------------------
// Initialisation and errors.

CUresult SimDriver::cuGetErrorName(CUresult error, const char** text) {
  if (text == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const ErrorText* e = find_error(error);
  *text = e ? e->name : nullptr;
  return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult SimDriver::cuGetErrorString(CUresult error, const char** text) {
  if (text == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const ErrorText* e = find_error(error);
  *text = e ? e->text : nullptr;
  return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult SimDriver::cuInit(unsigned int flags) {
  if (flags != 0) return fail(CUDA_ERROR_INVALID_VALUE, "cuInit: flags must be 0");
  if (devices_ == 0)
    return fail(CUDA_ERROR_NO_DEVICE, "CUDA_VISIBLE_DEVICES leaves no simulated device");
  initialized_ = true;
  return CUDA_SUCCESS;
}

CUresult SimDriver::cuDriverGetVersion(int* version) {
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *version = kSimDriverVersion;
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------------------------------------
// Devices.

CUresult SimDriver::cuDeviceGetCount(int* count) {
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *count = devices_;  // those CUDA_VISIBLE_DEVICES leaves
  return CUDA_SUCCESS;
}

CUresult SimDriver::cuDeviceGet(CUdevice* device, int ordinal) {
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (ordinal < 0 || ordinal >= devices_)
    return fail(CUDA_ERROR_INVALID_DEVICE,
                "device " + std::to_string(ordinal) + " out of range; the simulator has " +
                    std::to_string(devices_) +
                    " device(s) (CAI_SIM_DEVICES, then CUDA_VISIBLE_DEVICES)");
  *device = ordinal;
  return CUDA_SUCCESS;
}

#define CAI_SIM_CHECK_DEVICE(dev)          \
  if ((dev) < 0 || (dev) >= devices_)      \
    return fail(CUDA_ERROR_INVALID_DEVICE, \
                "device " + std::to_string(dev) + " is not a device of the simulator");

CUresult SimDriver::cuDeviceGetName(char* name, int length, CUdevice device) {
  CAI_SIM_CHECK_DEVICE(device)
  if (name == nullptr || length <= 0) return CUDA_ERROR_INVALID_VALUE;
  std::snprintf(name, static_cast<std::size_t>(length), "%s", kSimDeviceName);
  return CUDA_SUCCESS;
}

CUresult SimDriver::cuDeviceGetAttribute(int* value, CUdevice_attribute attribute,
                                         CUdevice device) {
  CAI_SIM_CHECK_DEVICE(device)
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (attribute == CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM) {
    std::lock_guard lk(mu_);
    *value = host_pointer_for_registered_[static_cast<std::size_t>(device)];
    return CUDA_SUCCESS;
  }
  if (device_attribute(attribute, physical_[static_cast<std::size_t>(device)], *value))
    return CUDA_SUCCESS;
  return fail(
      CUDA_ERROR_INVALID_VALUE,
      "device attribute " + std::to_string(static_cast<int>(attribute)) + " is not simulated");
}

CUresult SimDriver::caiSimSetDeviceAttribute(int value, CUdevice_attribute attribute,
                                             CUdevice device) {
  CAI_SIM_CHECK_DEVICE(device)
  if (attribute != CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM ||
      (value != 0 && value != 1))
    return fail(CUDA_ERROR_NOT_SUPPORTED,
                "caiSimSetDeviceAttribute: only CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM (91), to "
                "0 or 1");
  std::lock_guard lk(mu_);
  // Registered memory has its device address from the registration: no change under it.
  for (const auto& [base, a] : memory_) {
    if (a.kind == Kind::registered)
      return fail(CUDA_ERROR_NOT_PERMITTED,
                  "caiSimSetDeviceAttribute: host memory is registered (" + hex(base) +
                      "); change CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM before registering");
  }
  host_pointer_for_registered_[static_cast<std::size_t>(device)] = value;
  return CUDA_SUCCESS;
}

CUresult SimDriver::cuDeviceTotalMem(std::size_t* bytes, CUdevice device) {
  CAI_SIM_CHECK_DEVICE(device)
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *bytes = kDeviceMemory;  // address space; pages are taken from host memory when written
  return CUDA_SUCCESS;
}

CUresult SimDriver::cuDeviceGetUuid(CUuuid* uuid, CUdevice device) {
  CAI_SIM_CHECK_DEVICE(device)
  if (uuid == nullptr) return CUDA_ERROR_INVALID_VALUE;
  // The same in every process, so that an IPC handle finds its device by uuid.
  const char tag[] = "cai-sim-device";
  std::memcpy(uuid->bytes, tag, 14);
  const int physical = physical_[static_cast<std::size_t>(device)];
  uuid->bytes[14] = static_cast<char>(physical >> 8);
  uuid->bytes[15] = static_cast<char>(physical & 0xff);
  return CUDA_SUCCESS;
}

CUresult SimDriver::cuDevicePrimaryCtxRetain(CUcontext* context, CUdevice device) {
  CAI_SIM_CHECK_DEVICE(device)
  if (context == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lk(mu_);
  ++device_state_[static_cast<std::size_t>(device)].primary_refs;
  *context = context_handle(instance_, device);
  return CUDA_SUCCESS;
}

#undef CAI_SIM_CHECK_DEVICE

// ---------------------------------------------------------------------------------------------
// Contexts: one primary context per device; each host thread has a stack of current ones.

int SimDriver::current_locked() {
  auto it = contexts_.find(this_thread_id());
  if (it == contexts_.end() || it->second.empty()) return -1;
  return context_device_locked(reinterpret_cast<CUcontext>(it->second.back()));
}

CUresult SimDriver::need_context_locked(int& device) {
  device = current_locked();
  if (device < 0)
    return fail(CUDA_ERROR_INVALID_CONTEXT,
                "no current context on this thread (cuCtxSetCurrent or cuCtxPushCurrent first)");
  return CUDA_SUCCESS;
}

CUresult SimDriver::require_context(std::size_t index) {
  std::lock_guard lk(mu_);
  if (current_locked() >= 0) return CUDA_SUCCESS;
  return fail(CUDA_ERROR_INVALID_CONTEXT,
              std::string(entry_names[index]) +
                  " needs a current context; this thread has none (cuCtxSetCurrent or "
                  "cuCtxPushCurrent first)");
}

CUresult SimDriver::cuCtxGetCurrent(CUcontext* context) {
  if (context == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lk(mu_);
  auto it = contexts_.find(this_thread_id());
  *context = it == contexts_.end() || it->second.empty()
                 ? nullptr
                 : reinterpret_cast<CUcontext>(it->second.back());
  return CUDA_SUCCESS;
}

CUresult SimDriver::cuCtxSetCurrent(CUcontext context) {
  std::lock_guard lk(mu_);
  auto& stack = contexts_[this_thread_id()];
  if (context == nullptr) {
    // As the driver: popping the top, or nothing when the stack is empty.
    if (!stack.empty()) stack.pop_back();
    return CUDA_SUCCESS;
  }
  if (context_device_locked(context) < 0)
    return fail(CUDA_ERROR_INVALID_CONTEXT, "not a context of the simulator");
  if (stack.empty()) {
    stack.push_back(handle_value(context));
  } else {
    stack.back() = handle_value(context);
  }
  return CUDA_SUCCESS;
}

CUresult SimDriver::cuCtxPushCurrent(CUcontext context) {
  std::lock_guard lk(mu_);
  if (context_device_locked(context) < 0)
    return fail(CUDA_ERROR_INVALID_CONTEXT, context == nullptr
                                                ? "cuCtxPushCurrent(NULL): no context to push"
                                                : "not a context of the simulator");
  contexts_[this_thread_id()].push_back(handle_value(context));
  return CUDA_SUCCESS;
}

CUresult SimDriver::cuCtxPopCurrent(CUcontext* context) {
  std::lock_guard lk(mu_);
  auto& stack = contexts_[this_thread_id()];
  if (stack.empty()) return fail(CUDA_ERROR_INVALID_CONTEXT, "the context stack is empty");
  if (context != nullptr) *context = reinterpret_cast<CUcontext>(stack.back());
  stack.pop_back();
  return CUDA_SUCCESS;
}

CUresult SimDriver::cuCtxGetDevice(CUdevice* device) {
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lk(mu_);
  int d = 0;
  if (CUresult r = need_context_locked(d)) return r;
  *device = d;
  return CUDA_SUCCESS;
}

CUresult SimDriver::cuCtxSynchronize() {
  std::unique_lock lk(mu_);
  int device = 0;
  if (CUresult r = need_context_locked(device)) return r;
  std::vector<std::pair<std::shared_ptr<Stream>, std::uint64_t>> targets;
  VectorClock clock = device_state_[static_cast<std::size_t>(device)].retired_all;
  for (const auto& s : all_streams_) {
    if (s->device != device) continue;
    targets.emplace_back(s, s->enqueued);
    join(clock, s->clock);
  }
  for (auto& [s, seq] : targets) wait_locked(lk, *s, seq);
  join(host_clock_, clock);
  for (auto& [s, seq] : targets)
    if (CUresult r = sticky_locked(*s, seq)) return r;
  return CUDA_SUCCESS;
}

void SimDriver::on_thread_exit(std::uint64_t thread_id) {
  std::lock_guard lk(mu_);
  for (auto it = per_thread_.begin(); it != per_thread_.end();) {
    if (it->first.first != thread_id) {
      ++it;
      continue;
    }
    release_locked(it->second);  // never waits: a thread exit must not wait for stream work
    it = per_thread_.erase(it);
  }
  contexts_.erase(thread_id);
}

CUresult SimDriver::caiSimGetStats(CaiSimStats* stats) {
  if (stats == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lk(mu_);
  stats->race_history = races_.segment_count();
  stats->clock_slots = slot_count_;
  stats->streams = all_streams_.size();
  stats->ipc_mappings = static_cast<std::size_t>(std::count_if(
      memory_.begin(), memory_.end(), [](const auto& m) { return m.second.kind == Kind::opened; }));
  return CUDA_SUCCESS;
}

}  // namespace cai::device::sim
