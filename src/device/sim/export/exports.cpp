// libcuda.so.1, the simulated driver as a shared library: one process-wide SimDriver, exported
// under the driver's own symbols (every row of CAI_SIM_ABI_TABLE and the caiSim* entries) and
// through cuGetProcAddress / cuGetProcAddress_v2. The version script (libcuda.map) exports only
// these; everything else (cai_core, the kernel bodies) is linked in and stays local.
//
// Each symbol is a GNU indirect function whose resolver returns the entry's trampoline: one
// declaration per row, whatever its signature, and no extra jump at run time.

#include <cstdlib>
#include <type_traits>

#include "sim/entry_points.h"

namespace cai::device::sim {
namespace {

// The process's simulated driver, made on first use with CAI_SIM_DEVICES devices and never
// destroyed (as the process-wide backend: exit neither waits for its streams nor races with
// threads still calling it). A bad CAI_SIM_DEVICES fails the call, and the next call retries.
SimDriver* process_driver() {
  static SimDriver* const driver = new SimDriver(sim_devices_from_env());
  return driver;
}

}  // namespace
}  // namespace cai::device::sim

namespace sim = cai::device::sim;
using sim::SimDriver;

// clang-format off
#define CAI_DETAIL_EXPORT(symbol, member, index, per_thread, adapter)                          \
  extern "C" {                                                                                 \
  static sim::FunctionOfMember<member>* cai_sim_resolve_##symbol() {                          \
    return sim::trampoline<member, &sim::process_driver, index, per_thread, adapter>;          \
  }                                                                                            \
  }                                                                                            \
  extern "C" __attribute__((visibility("default"))) sim::FunctionOfMember<member> symbol       \
      __attribute__((ifunc("cai_sim_resolve_" #symbol)));
#define CAI_DETAIL_EXPORT_X(name, version, symbol) \
  CAI_DETAIL_EXPORT(symbol, &SimDriver::name, sim::k_##name, false, false)
#define CAI_DETAIL_EXPORT_A(name, version, symbol, params) \
  CAI_DETAIL_EXPORT(symbol, &SimDriver::symbol, sim::k_##name, false, true)
#define CAI_DETAIL_EXPORT_P(name, version, kind, symbol, member) \
  CAI_DETAIL_EXPORT(symbol, &SimDriver::member, sim::k_##name, true, false)
#define CAI_DETAIL_EXPORT_SIM(name, params) \
  CAI_DETAIL_EXPORT(name, &SimDriver::name, sim::k_##name, false, false)
// clang-format on

CAI_SIM_ABI_TABLE(CAI_DETAIL_EXPORT_X, CAI_DETAIL_EXPORT_A, CAI_DETAIL_EXPORT_P)
CAI_SIM_ENTRIES(CAI_DETAIL_EXPORT_SIM)

// cuGetProcAddress itself, by the same means.
extern "C" {
static decltype(&sim::get_proc_address<&sim::process_driver>)
cai_sim_resolve_cuGetProcAddress_v2() {
  return &sim::get_proc_address<&sim::process_driver>;
}
static decltype(&sim::get_proc_address_v1<&sim::process_driver>)
cai_sim_resolve_cuGetProcAddress() {
  return &sim::get_proc_address_v1<&sim::process_driver>;
}
}
extern "C" __attribute__((visibility("default")))
std::remove_pointer_t<decltype(&sim::get_proc_address<&sim::process_driver>)>
    cuGetProcAddress_v2 __attribute__((ifunc("cai_sim_resolve_cuGetProcAddress_v2")));
extern "C" __attribute__((visibility("default")))
std::remove_pointer_t<decltype(&sim::get_proc_address_v1<&sim::process_driver>)>
    cuGetProcAddress __attribute__((ifunc("cai_sim_resolve_cuGetProcAddress")));
