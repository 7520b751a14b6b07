#pragma once

// Counting the simulated driver's calls in tests (cai.sim's driver_calls, in C++).

#include <gtest/gtest.h>

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

/// Every call but the context check that precedes each event record (cuCtxGetCurrent, a
/// thread-local read in the driver), which is checked to be at most one per record.
inline std::uint64_t total(const Calls& calls) {
  std::uint64_t n = 0;
  for (const auto& [name, c] : calls) n += c;
  const std::uint64_t checks = count(calls, "cuCtxGetCurrent");
  EXPECT_LE(checks, count(calls, "cuEventRecord")) << "a context check without an event record";
  return n - checks;
}

/// The driver calls `step` makes.
template <class F>
Calls calls_of(device::Backend& b, F&& step) {
  device::sim::reset_driver_calls(b);
  step();
  return device::sim::driver_calls(b);
}

}  // namespace cai::test
