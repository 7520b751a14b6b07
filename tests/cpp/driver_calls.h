#pragma once

// Counting the simulated driver's calls in tests (cai.sim's driver_calls, in C++).

#include <cstdint>
#include <map>
#include <string>

#include "cai/device/backend.h"
#include "cai/device/simulator.h"

namespace cai::test {

using Calls = std::map<std::string, std::uint64_t>;

inline std::uint64_t count(const Calls& calls, const std::string& name) {
  const auto it = calls.find(name);
  return it == calls.end() ? 0 : it->second;
}

/// The driver calls `step` makes.
template <class F>
Calls calls_of(device::Backend& b, F&& step) {
  device::sim::reset_driver_calls(b);
  step();
  return device::sim::driver_calls(b);
}

}  // namespace cai::test
