#pragma once

// Internal: the CUDA driver-API backend (libcuda.so.1 opened with dlopen on first use).

#include <memory>

#include "cai/device/backend.h"

namespace cai::device::detail {

/// Throws Error(device_error) saying what is missing (driver, device) and how to use the
/// simulator instead (CAI_BACKEND=sim).
std::unique_ptr<Backend> make_cuda_backend();

/// Whether make_cuda_backend() would succeed; never throws; the driver is probed once.
bool probe_cuda();

}  // namespace cai::device::detail
