#pragma once

// Internal: the CUDA driver-API backend (libcuda.so.1 opened with dlopen on first use).

#include <memory>
#include <span>
#include <string_view>

#include "cai/device/backend.h"

namespace cai::device::detail {

/// Throws Error(device_error) saying what is missing (driver, device) and how to use the
/// simulator instead (CAI_BACKEND=sim).
std::unique_ptr<Backend> make_cuda_backend();

/// Whether make_cuda_backend() would succeed; never throws; the driver is probed once.
bool probe_cuda();

/// The kernels' PTX embedded at build time (NUL-terminated); empty when built without nvcc.
std::string_view cuda_kernels_ptx();

/// Whether the library was built with the kernels (nvcc found at configure time); without them
/// fill, add and strided copies on the CUDA backend throw not_implemented.
bool cuda_kernels_built();

/// The entry names in the PTX, in load order: the strided copies and fills by word width
/// (1, 2, 4, 8, 16 bytes), then add by ElementType.
std::span<const std::string_view> cuda_kernel_names();

}  // namespace cai::device::detail
