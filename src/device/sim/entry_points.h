#pragma once

// Internal to the simulated driver: how a C caller reaches a SimDriver instance. Every ABI row
// of CAI_SIM_ABI_TABLE and every caiSim* entry is a C function, a trampoline that finds its
// instance through a getter (a slot of the private instances tests make, or the process's one
// in the exported library), counts the call, applies injected errors and turns exceptions into
// return codes. cuGetProcAddress finds rows by name and version (resolve_abi).

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <new>
#include <string>
#include <string_view>

#include "cai/core/error.h"
#include "sim/abi_table.h"
#include "sim/sim_driver.h"

namespace cai::device::sim {

/// Entry indices: the driver's, the simulator's, the clients' (caiSimGetCallCounts' order).
enum EntryIndex : std::size_t {
#define CAI_DETAIL_INDEX(name, ...) k_##name,
  CAI_DRIVER_ENTRIES(CAI_DETAIL_INDEX) CAI_SIM_ENTRIES(CAI_DETAIL_INDEX)
      CAI_SIM_CLIENT_ENTRIES(CAI_DETAIL_INDEX)
#undef CAI_DETAIL_INDEX
          k_entry_count
};
#define CAI_DETAIL_NAME(name, ...) #name,
inline constexpr const char* entry_names[] = {CAI_DRIVER_ENTRIES(CAI_DETAIL_NAME) CAI_SIM_ENTRIES(
    CAI_DETAIL_NAME) CAI_SIM_CLIENT_ENTRIES(CAI_DETAIL_NAME)};
#undef CAI_DETAIL_NAME
static_assert(std::size(entry_names) == k_entry_count);
/// The simulator's own entries are [driver_entry_count, sim_entries_end).
inline constexpr std::size_t sim_entries_end = driver_entry_count + sim_entry_count;

// Whether an entry needs a current context: the driver documents CUDA_ERROR_INVALID_CONTEXT for
// every entry but these (initialisation, errors, devices, primary contexts and the context
// stack; cuCtxPopCurrent fails by itself on an empty stack). Of the simulator's own entries,
// those that queue work on a stream or allocate need one, as cuLaunchHostFunc and cuMemAlloc do.
// The client entries check for themselves where the driver documents it.
constexpr bool needs_context(std::size_t index) {
  switch (index) {
    case k_cuGetErrorName:
    case k_cuGetErrorString:
    case k_cuInit:
    case k_cuDriverGetVersion:
    case k_cuDeviceGet:
    case k_cuDeviceGetCount:
    case k_cuDeviceGetName:
    case k_cuDeviceGetAttribute:
    case k_cuDeviceTotalMem:
    case k_cuDeviceGetUuid:
    case k_cuDevicePrimaryCtxRetain:
    case k_cuCtxGetCurrent:
    case k_cuCtxSetCurrent:
    case k_cuCtxPushCurrent:
    case k_cuCtxPopCurrent:
      return false;
    case k_caiSimDelay:
    case k_caiSimLaunchHostTask:
    case k_caiSimMemAllocChunked:
    case k_caiSimMemFreeChunked:
      return true;
    default:
      return index < driver_entry_count;
  }
}

/// One exported function: entry `name` at the ABI of CUDA `version` (0: any), exported as
/// `symbol`; `per_thread`: the per-thread default stream variant.
struct AbiRow {
  const char* name;
  int version;
  bool per_thread;
  const char* symbol;
};
// clang-format off
#define CAI_DETAIL_ROW_X(name, version, symbol) {#name, version, false, #symbol},
#define CAI_DETAIL_ROW_A(name, version, symbol, params) {#name, version, false, #symbol},
#define CAI_DETAIL_ROW_P(name, version, kind, symbol, member) {#name, version, true, #symbol},
#define CAI_DETAIL_ROW_SIM(name, params) {#name, 0, false, #name},
/// The rows: the ABI table, the simulator's entries, then cuGetProcAddress itself.
inline constexpr AbiRow abi_rows[] = {
    CAI_SIM_ABI_TABLE(CAI_DETAIL_ROW_X, CAI_DETAIL_ROW_A, CAI_DETAIL_ROW_P)
    CAI_SIM_ENTRIES(CAI_DETAIL_ROW_SIM)
    {"cuGetProcAddress", 11030, false, "cuGetProcAddress"},
    {"cuGetProcAddress", 12000, false, "cuGetProcAddress_v2"}};
#undef CAI_DETAIL_ROW_X
#undef CAI_DETAIL_ROW_A
#undef CAI_DETAIL_ROW_P
#undef CAI_DETAIL_ROW_SIM
// clang-format on
inline constexpr std::size_t abi_row_count = std::size(abi_rows);

consteval bool has_abi_row(std::string_view name, int version) {
  for (const AbiRow& r : abi_rows)
    if (!r.per_thread && name == r.name && version == r.version) return true;
  return false;
}
#define CAI_DETAIL_CHECK_ROW(name, version, params) \
  static_assert(has_abi_row(#name, version), #name  \
                " has no row at "                   \
                "its version in CAI_SIM_ABI_TABLE");
CAI_DRIVER_ENTRIES(CAI_DETAIL_CHECK_ROW)
CAI_SIM_CLIENT_ENTRIES(CAI_DETAIL_CHECK_ROW)
#undef CAI_DETAIL_CHECK_ROW

/// cuGetProcAddress's answer for (symbol, version, flags), as the driver documents it: the
/// row of the highest ABI at or below `version` (the per-thread variant first under
/// CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM), or CUDA_ERROR_NOT_FOUND with the status
/// saying why. `row` is set on success. Never touches an instance.
CUresult resolve_abi(const char* symbol, int version, cuuint64_t flags,
                     CUdriverProcAddressQueryResult* found, std::size_t& row) noexcept;
/// The row exported under `symbol`, or abi_row_count.
std::size_t find_symbol(std::string_view symbol) noexcept;

// ---------------------------------------------------------------------------------------------
// Trampolines.

using InstanceGetter = SimDriver* (*)();

/// Instances that tests make privately, by slot (driver.cpp).
inline constexpr int kSimSlots = 16;
extern std::atomic<SimDriver*> g_sim_instances[kSimSlots];
template <int S>
SimDriver* slot_instance() {
  return g_sim_instances[S].load(std::memory_order_acquire);
}

/// The calling thread's last error detail (caiSimGetErrorDetail).
extern thread_local std::string t_error_detail;

inline CUresult code_of(Errc e) {
  switch (e) {
    case Errc::race:
      return kSimRaceResult;
    case Errc::not_implemented:
      return CUDA_ERROR_NOT_SUPPORTED;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

/// A per-thread variant reads a NULL stream as CU_STREAM_PER_THREAD; other arguments pass.
template <class T>
T per_thread_arg(T a) noexcept {
  return a;
}
inline CUstream per_thread_arg(CUstream s) noexcept {
  return s == nullptr ? stream_per_thread() : s;
}

template <class T>
struct FunctionOf;
template <class... A>
struct FunctionOf<CUresult (SimDriver::*)(A...)> {
  using type = CUresult(A...);
};
/// The C function type of member M.
template <auto M>
using FunctionOfMember = typename FunctionOf<decltype(M)>::type;

template <class T, T M>
struct Trampoline;
template <class... A, CUresult (SimDriver::*M)(A...)>
struct Trampoline<CUresult (SimDriver::*)(A...), M> {
  template <InstanceGetter Get, std::size_t Index, bool PerThread, bool Adapter>
  static CUresult call(A... a) noexcept {
    // The detail needs no instance: it also says why making the instance failed. Asking for
    // an error's name or text keeps the detail of the call that failed.
    if constexpr (Index == k_caiSimGetErrorDetail) return SimDriver::error_detail(a...);
    if constexpr (Index != k_cuGetErrorName && Index != k_cuGetErrorString) t_error_detail.clear();
    try {
      SimDriver* d = Get();
      if (d == nullptr) return CUDA_ERROR_DEINITIALIZED;
      if (const CUresult r = d->enter(Index); r != CUDA_SUCCESS) return r;
      // An adapter takes its context as an argument: the member it calls checks it.
      if constexpr (!Adapter && needs_context(Index)) {
        if (const CUresult r = d->require_context(Index); r != CUDA_SUCCESS) return r;
      }
      auto run = [&] {
        if constexpr (PerThread)
          return (d->*M)(per_thread_arg(a)...);
        else
          return (d->*M)(a...);
      };
      if (d->timing()) {  // the driver's own time, for benchmarks (caiSimTimeCalls)
        const auto start = std::chrono::steady_clock::now();
        const CUresult r = run();
        d->add_time(
            Index, static_cast<std::uint64_t>(
                       std::chrono::nanoseconds(std::chrono::steady_clock::now() - start).count()));
        return r;
      }
      return run();
    } catch (const Error& e) {
      t_error_detail = e.what();
      // A foreign client shows only the code: the detector's message goes to stderr too.
      if (e.code() == Errc::race) std::fprintf(stderr, "cai simulated driver: %s\n", e.what());
      return code_of(e.code());
    } catch (const std::bad_alloc&) {
      t_error_detail = "out of host memory";
      return CUDA_ERROR_OUT_OF_MEMORY;
    } catch (const std::exception& e) {
      t_error_detail = e.what();
      return CUDA_ERROR_UNKNOWN;
    }
  }
};
/// The trampoline of member M for entry Index, reaching the instance Get returns.
template <auto M, InstanceGetter Get, std::size_t Index, bool PerThread = false,
          bool Adapter = false>
inline constexpr FunctionOfMember<M>* trampoline =
    &Trampoline<decltype(M), M>::template call<Get, Index, PerThread, Adapter>;

/// cuGetProcAddress_v2 over the instance Get returns (not counted: it is how entries are found).
template <InstanceGetter Get>
CUresult get_proc_address(const char* symbol, void** fn, int version, cuuint64_t flags,
                          CUdriverProcAddressQueryResult* found) noexcept;

/// cuGetProcAddress (CUDA 11.3's ABI, without the status).
template <InstanceGetter Get>
CUresult get_proc_address_v1(const char* symbol, void** fn, int version,
                             cuuint64_t flags) noexcept {
  return get_proc_address<Get>(symbol, fn, version, flags, nullptr);
}

/// The functions of the rows (abi_rows' order) for the instance Get returns.
template <InstanceGetter Get>
const std::array<void*, abi_row_count>& abi_functions() {
  using D = SimDriver;
  // clang-format off
#define CAI_DETAIL_FN_X(name, version, symbol) \
  reinterpret_cast<void*>(trampoline<&D::name, Get, k_##name>),
#define CAI_DETAIL_FN_A(name, version, symbol, params) \
  reinterpret_cast<void*>(trampoline<&D::symbol, Get, k_##name, false, true>),
#define CAI_DETAIL_FN_P(name, version, kind, symbol, member) \
  reinterpret_cast<void*>(trampoline<&D::member, Get, k_##name, true>),
#define CAI_DETAIL_FN_SIM(name, params) reinterpret_cast<void*>(trampoline<&D::name, Get, k_##name>),
  static const std::array<void*, abi_row_count> functions{
      CAI_SIM_ABI_TABLE(CAI_DETAIL_FN_X, CAI_DETAIL_FN_A, CAI_DETAIL_FN_P)
      CAI_SIM_ENTRIES(CAI_DETAIL_FN_SIM)
      reinterpret_cast<void*>(&get_proc_address_v1<Get>),
      reinterpret_cast<void*>(&get_proc_address<Get>)};
#undef CAI_DETAIL_FN_X
#undef CAI_DETAIL_FN_A
#undef CAI_DETAIL_FN_P
#undef CAI_DETAIL_FN_SIM
  // clang-format on
  return functions;
}

template <InstanceGetter Get>
CUresult get_proc_address(const char* symbol, void** fn, int version, cuuint64_t flags,
                          CUdriverProcAddressQueryResult* found) noexcept {
  if (fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *fn = nullptr;
  std::size_t row = 0;
  const CUresult r = resolve_abi(symbol, version, flags, found, row);
  if (r == CUDA_SUCCESS) *fn = abi_functions<Get>()[row];
  return r;
}

}  // namespace cai::device::sim
