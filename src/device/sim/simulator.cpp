#include "cai/device/simulator.h"

#include <string>

#include "cai/core/error.h"
#include "device/sim/sim_backend.h"

namespace cai::device::sim {

namespace {

detail::SimBackend& simulator(const char* where) {
  auto* sim = backend().as_simulator();
  if (sim == nullptr) {
    throw_error(Errc::device_error,
                std::string("cai::device::sim::") + where + "(): the active backend is \"" +
                    std::string(backend().name()) + "\", not the simulator; set CAI_BACKEND=sim");
  }
  return *sim;
}

}  // namespace

bool active() {
  try {
    return backend().as_simulator() != nullptr;
  } catch (...) {
    return false;
  }
}

void delay(StreamHandle s, double seconds) {
  simulator("delay").delay(s, seconds);
}

void host_access(std::uint64_t ptr, std::size_t bytes, bool write) {
  simulator("host_access").host_access(Access::contiguous(ptr, bytes, write));
}

void host_access(const Access& access, std::string_view what) {
  simulator("host_access").host_access(access, what);
}

void enqueue_task(StreamHandle s, std::span<const Access> accesses, std::function<void()> fn,
                  std::string_view name) {
  simulator("enqueue_task").enqueue_task(s, accesses, std::move(fn), name);
}

void set_race_detection(bool on) {
  simulator("set_race_detection").set_race_detection(on);
}

bool race_detection() {
  return simulator("race_detection").race_detection();
}

void forget(std::uint64_t ptr, std::size_t bytes) {
  simulator("forget").forget(ptr, bytes);
}

}  // namespace cai::device::sim
