#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "cai/core/error.h"
#include "device/backend_select.h"
#include "device/cuda/cuda_backend.h"
#include "device/sim/sim_backend.h"

namespace cai::device {

namespace detail {

std::unique_ptr<Backend> select_backend(std::string_view env_value) {
  if (env_value == "sim") return make_sim_backend(sim_devices_from_env());
  if (env_value == "cuda") return make_cuda_backend();
  if (env_value.empty()) {
    if (probe_cuda()) return make_cuda_backend();
    return make_sim_backend(sim_devices_from_env());
  }
  throw_error(Errc::value_error, "CAI_BACKEND=" + std::string(env_value) +
                                     ": unknown backend; expected \"sim\" (the CPU simulator), "
                                     "\"cuda\" (the CUDA driver) or unset (CUDA when a driver "
                                     "and a device are present, else the simulator)");
}

}  // namespace detail

namespace {
std::atomic<bool> g_exiting{false};
}  // namespace

CallCounts Backend::call_counts() const noexcept {
  auto get = [](const Counter& c) { return c.n.load(std::memory_order_relaxed); };
  return {get(counts_.event_record), get(counts_.stream_wait_event), get(counts_.event_create),
          get(counts_.pointer_query), get(counts_.stream_synchronize)};
}

void Backend::reset_call_counts() noexcept {
  for (Counter* c : {&counts_.event_record, &counts_.stream_wait_event, &counts_.event_create,
                     &counts_.pointer_query, &counts_.stream_synchronize}) {
    c->n.store(0, std::memory_order_relaxed);
  }
}

std::string stream_text(StreamHandle s) {
  if (s == kLegacyDefaultStream) return "legacy default stream (1)";
  if (s == kPerThreadDefaultStream) return "per-thread default stream (2)";
  char buf[40];
  std::snprintf(buf, sizeof buf, "stream 0x%llx", static_cast<unsigned long long>(s));
  return buf;
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
  static Backend* const chosen = [] {
    const char* env = std::getenv("CAI_BACKEND");
    return detail::select_backend(env ? env : "").release();
  }();
  return *chosen;
}

bool cuda_available() {
  try {
    return detail::probe_cuda();
  } catch (...) {
    return false;
  }
}

}  // namespace cai::device
