#pragma once

// Helpers shared by the device tests (GoogleTest only: scripts/sanitize.sh builds the thread
// test by hand without GoogleMock; the error matchers are in ../cai_matchers.h).

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "backend/backend.h"
#include "cai/core/layout.h"
#include "cai/device/backend.h"
#include "cai/device/simulator.h"
#include "sim/sim_driver.h"

namespace cai::device::detail {

/// A backend over a new private simulated driver with `devices` devices (the process-wide
/// backend uses the one simulated driver of the process, libcuda.so.1; tests that need a fresh
/// one, or several, make their own).
inline std::unique_ptr<Backend> make_sim_backend(int devices = 1) {
  return make_backend(sim::make_sim_driver(devices));
}

}  // namespace cai::device::detail

namespace cai::device::test {

inline bool contains(std::string_view text, std::string_view part) {
  return text.find(part) != std::string_view::npos;
}

inline std::string hex(std::uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

inline std::uint64_t addr(const void* p) {
  return static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(p));
}

/// An operand of `shape` elements of `itemsize` bytes at byte `strides` from ptr.
inline Operand operand(std::uint64_t ptr, Dims shape, Dims strides, std::int64_t itemsize,
                       bool host = false) {
  return {ptr, Layout(std::move(shape), std::move(strides), itemsize), host};
}
/// A C-contiguous operand.
inline Operand dense(std::uint64_t ptr, Dims shape, std::int64_t itemsize, bool host = false) {
  return {ptr, Layout::c_contiguous(shape, itemsize), host};
}
/// The caller's host buffer of a host copy.
inline Operand host_buffer(const void* p, Dims shape, std::int64_t itemsize) {
  return dense(addr(p), std::move(shape), itemsize, true);
}

/// The backend over a private simulated driver, with the simulator's controls as methods.
class Simulator : public Backend {
 public:
  explicit Simulator(int devices = 1)
      : Backend(std::make_unique<detail::BackendState>(sim::make_sim_driver(devices))) {}

  void delay(StreamHandle s, double seconds) { sim::delay(*this, s, seconds); }
  void host_access(const sim::Access& a, std::string_view what = "host_access") {
    sim::host_access(*this, a, what);
  }
  void host_access(std::uint64_t ptr, std::size_t bytes, bool write) {
    sim::host_access(*this, sim::Access::contiguous(ptr, bytes, write));
  }
  /// fn takes the accesses' host addresses, or nothing.
  void enqueue_task(StreamHandle s, std::span<const sim::Access> accesses, sim::Task fn,
                    std::string_view name = "task") {
    sim::enqueue_task(*this, s, accesses, std::move(fn), name);
  }
  void enqueue_task(StreamHandle s, std::span<const sim::Access> accesses, std::function<void()> fn,
                    std::string_view name = "task") {
    sim::Task task;
    if (fn) task = [fn = std::move(fn)](std::span<const std::uint64_t>) { fn(); };
    sim::enqueue_task(*this, s, accesses, std::move(task), name);
  }
  void set_race_detection(bool on) { sim::set_race_detection(*this, on); }
  bool race_detection() { return sim::race_detection(*this); }
  void forget(std::uint64_t ptr, std::size_t bytes) { sim::forget(*this, ptr, bytes); }
  std::size_t race_history_size() { return sim::stats(*this).race_history; }
  std::size_t clock_slots() { return sim::stats(*this).clock_slots; }
  /// Where the host reaches simulated memory (device memory has a private alias).
  template <class T = char>
  T* host(std::uint64_t ptr) {
    return static_cast<T*>(sim::host_address(*this, ptr));
  }
};

inline std::unique_ptr<Simulator> make_simulator(int devices = 1) {
  return std::make_unique<Simulator>(devices);
}

}  // namespace cai::device::test
