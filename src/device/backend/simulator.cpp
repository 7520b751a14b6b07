// cai/device/simulator.h: the simulated driver's own entry points, called through the same
// driver table as every other entry point.

#include "cai/device/simulator.h"

#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "cai/core/error.h"

namespace cai::device::sim {

namespace {

using namespace cu;

// `context`: the call may name a default stream, which is the current context's.
detail::BackendState& simulated(Backend& b, const char* where, bool context = false) {
  detail::BackendState& st = detail::state_of(b);
  if (st.sim == nullptr) {
    throw_error(Errc::device_error, std::string("cai::device::sim::") + where +
                                        "(): the driver is \"" + std::string(b.name()) +
                                        "\", not the simulator; set CAI_BACKEND=sim");
  }
  if (context) st.current_context();
  return st;
}

// The simulator's own entries are cai's API: a refused argument is a ValueError with the
// driver's reason, anything else an error of the driver call.
void sim_check(const detail::BackendState& st, CUresult r, const char* entry) {
  if (r == CUDA_SUCCESS) return;
  if (r == CUDA_ERROR_INVALID_VALUE) {
    const char* detail = nullptr;
    if (st.sim->caiSimGetErrorDetail(&detail) == CUDA_SUCCESS && detail != nullptr)
      throw_error(Errc::value_error, detail);
  }
  st.fail(r, entry);
}

#define CAI_SIM(st, entry, ...) sim_check((st), (st).sim->entry(__VA_ARGS__), #entry)

CaiSimAccess to_driver(const Access& a) {
  return CaiSimAccess{a.ptr,          static_cast<int>(a.shape.size()),
                      a.shape.data(), a.strides.data(),
                      a.itemsize,     a.write ? 1 : 0};
}

}  // namespace

bool active() {
  try {
    return backend().simulated();
  } catch (...) {
    return false;
  }
}

std::string driver_path() {
  std::string tried;
  std::string path = cu::sim_driver_path(&tried);
  if (path.empty()) {
    throw_error(Errc::device_error, "cai's simulated driver (libcuda.so.1) not found (tried " +
                                        tried + "); set CAI_SIM_DRIVER to its path");
  }
  return path;
}

void delay(Backend& b, StreamHandle s, double seconds) {
  auto& st = simulated(b, "delay", true);
  CAI_SIM(st, caiSimDelay, detail::to_stream(s, "delay()"), seconds);
}
void delay(StreamHandle s, double seconds) {
  delay(backend(), s, seconds);
}

void host_access(Backend& b, const Access& access, std::string_view what) {
  auto& st = simulated(b, "host_access", true);
  if (access.shape.size() != access.strides.size())
    throw_error(Errc::value_error, std::string(what) + "(): shape and strides differ in length");
  const CaiSimAccess a = to_driver(access);
  CAI_SIM(st, caiSimHostAccess, &a, std::string(what).c_str());
}
void host_access(const Access& access, std::string_view what) {
  host_access(backend(), access, what);
}
void host_access(std::uint64_t ptr, std::size_t bytes, bool write) {
  host_access(backend(), Access::contiguous(ptr, bytes, write));
}

void enqueue_task(Backend& b, StreamHandle s, std::span<const Access> accesses, Task fn,
                  std::string_view name) {
  auto& st = simulated(b, "enqueue_task", true);
  const std::string label(name);
  if (!fn) throw_error(Errc::value_error, label + "(): the task is empty");
  std::vector<CaiSimAccess> list;
  list.reserve(accesses.size());
  for (const Access& a : accesses) {
    if (a.shape.size() != a.strides.size())
      throw_error(Errc::value_error, label + "(): shape and strides differ in length");
    list.push_back(to_driver(a));
  }
  struct Context {
    Task fn;
    std::size_t count;
    std::string error;
  };
  auto owned = std::make_unique<Context>(Context{std::move(fn), list.size(), {}});
  const CaiSimTaskFn run = [](void* user, const std::uint64_t* host) -> const char* {
    auto* c = static_cast<Context*>(user);
    try {
      c->fn(std::span<const std::uint64_t>(host, c->count));
      return nullptr;
    } catch (const std::exception& e) {
      c->error = e.what();
    } catch (...) {
      c->error = "unknown exception";
    }
    return c->error.c_str();
  };
  const auto release = [](void* user) { delete static_cast<Context*>(user); };
  CAI_SIM(st, caiSimLaunchHostTask, detail::to_stream(s, label + "()"), list.data(), list.size(),
          run, release, owned.get(), label.c_str());
  owned.release();  // the driver calls release after the task
}
void enqueue_task(StreamHandle s, std::span<const Access> accesses, Task fn,
                  std::string_view name) {
  enqueue_task(backend(), s, accesses, std::move(fn), name);
}

void set_race_detection(Backend& b, bool on) {
  auto& st = simulated(b, "set_race_detection");
  CAI_SIM(st, caiSimSetRaceDetection, on ? 1 : 0);
}
void set_race_detection(bool on) {
  set_race_detection(backend(), on);
}

bool race_detection(Backend& b) {
  auto& st = simulated(b, "race_detection");
  int on = 0;
  CAI_SIM(st, caiSimGetRaceDetection, &on);
  return on != 0;
}
bool race_detection() {
  return race_detection(backend());
}

void forget(Backend& b, std::uint64_t ptr, std::size_t bytes) {
  auto& st = simulated(b, "forget");
  CAI_SIM(st, caiSimForget, ptr, bytes);
}
void forget(std::uint64_t ptr, std::size_t bytes) {
  forget(backend(), ptr, bytes);
}

Stats stats(Backend& b) {
  auto& st = simulated(b, "stats");
  CaiSimStats s{};
  CAI_SIM(st, caiSimGetStats, &s);
  return Stats{s.race_history, s.clock_slots, s.streams, s.ipc_mappings};
}

namespace {
// One number per driver entry point (caiSimGetCallCounts, caiSimGetCallTimes), by name.
template <class Read>
std::map<std::string, std::uint64_t> per_entry(Backend& b, const char* what, Read read) {
  auto& st = simulated(b, what);
  std::vector<unsigned long long> values(driver_entry_count);
  read(st, values);
  std::map<std::string, std::uint64_t> out;
  for (std::size_t i = 0; i < driver_entry_count; ++i) out[driver_entry_names[i]] = values[i];
  return out;
}
}  // namespace

std::map<std::string, std::uint64_t> driver_calls(Backend& b) {
  return per_entry(b, "driver_calls", [](auto& st, auto& counts) {
    CAI_SIM(st, caiSimGetCallCounts, counts.data(), counts.size());
  });
}

void reset_driver_calls(Backend& b) {
  auto& st = simulated(b, "reset_driver_calls");
  CAI_SIM(st, caiSimResetCallCounts);
}

void time_driver_calls(Backend& b, bool on) {
  auto& st = simulated(b, "time_driver_calls");
  CAI_SIM(st, caiSimTimeCalls, on ? 1 : 0);
}

std::map<std::string, std::uint64_t> driver_call_ns(Backend& b) {
  return per_entry(b, "driver_call_ns", [](auto& st, auto& ns) {
    CAI_SIM(st, caiSimGetCallTimes, ns.data(), ns.size());
  });
}

void inject_error(Backend& b, std::string_view entry, int code, unsigned skip, unsigned times) {
  auto& st = simulated(b, "inject_error");
  CAI_SIM(st, caiSimInjectError, std::string(entry).c_str(), static_cast<CUresult>(code), skip,
          times);
}

std::uint64_t alloc_chunked(Backend& b, std::size_t chunk_bytes, unsigned chunks) {
  auto& st = simulated(b, "alloc_chunked");
  st.current_context();
  CUdeviceptr p = 0;
  CAI_SIM(st, caiSimMemAllocChunked, &p, chunk_bytes, chunks);
  return p;
}

void free_chunked(Backend& b, std::uint64_t ptr) {
  auto& st = simulated(b, "free_chunked", true);
  st.ranges.forget(ptr, 1);
  CAI_SIM(st, caiSimMemFreeChunked, ptr);
}

void* host_address(Backend& b, std::uint64_t ptr) {
  auto& st = simulated(b, "host_address");
  void* host = nullptr;
  CAI_SIM(st, caiSimHostAddress, &host, ptr);
  return host;
}

}  // namespace cai::device::sim
