// The simulated driver's ABI versions: how cuGetProcAddress picks a row of CAI_SIM_ABI_TABLE,
// and the adapters for the ABIs whose signature changed.

#include <cstring>
#include <string_view>

#include "sim/entry_points.h"
#include "sim/sim_internal.h"

namespace cai::device::sim {

std::size_t find_symbol(std::string_view symbol) noexcept {
  for (std::size_t i = 0; i < abi_row_count; ++i)
    if (symbol == abi_rows[i].symbol) return i;
  return abi_row_count;
}

namespace {

/// The row of `name` with the highest version at or below `version` among the per-thread rows
/// or the others; abi_row_count when none. `named` is set when `name` has such rows at all.
std::size_t best_row(std::string_view name, int version, bool per_thread, bool& named) {
  std::size_t best = abi_row_count;
  for (std::size_t i = 0; i < abi_row_count; ++i) {
    const AbiRow& r = abi_rows[i];
    if (r.per_thread != per_thread || name != r.name) continue;
    named = true;
    if (r.version <= version && (best == abi_row_count || r.version > abi_rows[best].version))
      best = i;
  }
  return best;
}

}  // namespace

CUresult resolve_abi(const char* symbol, int version, cuuint64_t flags,
                     CUdriverProcAddressQueryResult* found, std::size_t& row) noexcept {
  auto status = [found](CUdriverProcAddressQueryResult s) {
    if (found != nullptr) *found = s;
  };
  constexpr cuuint64_t known =
      CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  // "If the specified CUDA version is greater than the driver version, the API will return
  // CUDA_ERROR_INVALID_VALUE."
  if (symbol == nullptr || (flags & ~known) != 0 || version > kSimDriverVersion)
    return fail(CUDA_ERROR_INVALID_VALUE,
                version > kSimDriverVersion
                    ? "cuGetProcAddress: CUDA version " + std::to_string(version) +
                          " is newer than the driver's (" + std::to_string(kSimDriverVersion) + ")"
                    : std::string("cuGetProcAddress: no symbol, or unknown flags"));
  bool named = false;
  // The per-thread variant when asked for and one exists, else the legacy one (documented).
  row = abi_row_count;
  if ((flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0)
    row = best_row(symbol, version, true, named);
  if (row == abi_row_count) row = best_row(symbol, version, false, named);
  if (row != abi_row_count) {
    status(CU_GET_PROC_ADDRESS_SUCCESS);
    return CUDA_SUCCESS;
  }
  status(named ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  return CUDA_ERROR_NOT_FOUND;
}

// ---------------------------------------------------------------------------------------------
// Adapters: the newer ABIs of an entry, on the member that implements the older one. A context
// argument is made current for the call (pushed and popped on this thread's stack).

namespace {

template <class F>
CUresult in_context(SimDriver& d, CUcontext context, F f) {
  if (context == nullptr) return f();
  if (const CUresult r = d.cuCtxPushCurrent(context); r != CUDA_SUCCESS) return r;
  const CUresult r = f();
  CUcontext popped = nullptr;
  (void)d.cuCtxPopCurrent(&popped);
  return r;
}

}  // namespace

CUresult SimDriver::cuCtxGetDevice_v2(CUdevice* device, CUcontext context) {
  return in_context(*this, context, [&] { return cuCtxGetDevice(device); });
}

CUresult SimDriver::cuCtxSynchronize_v2(CUcontext context) {
  return in_context(*this, context, [&] { return cuCtxSynchronize(); });
}

CUresult SimDriver::cuStreamGetCtx_v2(CUstream stream, CUcontext* context,
                                      CUgreenCtx* green_context) {
  if (context == nullptr || green_context == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const CUresult r = cuStreamGetCtx(stream, context);
  if (r == CUDA_SUCCESS) *green_context = nullptr;  // the simulator has no green contexts
  return r;
}

}  // namespace cai::device::sim
