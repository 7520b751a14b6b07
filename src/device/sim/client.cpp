// The entry points other driver-API clients call (client_entries.h).

#include <algorithm>
#include <mutex>

#include "device/sim/sim_driver.h"
#include "device/sim/sim_internal.h"

namespace cai::device::detail {

CUresult SimDriver::cuMemGetInfo(std::size_t* free_bytes, std::size_t* total_bytes) {
  if (free_bytes == nullptr || total_bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lk(mu_);
  int device = 0;
  if (CUresult r = need_context_locked(device)) return r;
  std::uint64_t used = 0;
  for (const auto& [base, a] : memory_) {
    const bool on_device = a.kind == Kind::device || a.kind == Kind::pool || a.kind == Kind::chunk;
    if (on_device && a.device == device) used += a.size;
  }
  *total_bytes = kDeviceMemory;
  *free_bytes = kDeviceMemory - std::min<std::uint64_t>(used, kDeviceMemory);
  return CUDA_SUCCESS;
}

}  // namespace cai::device::detail
