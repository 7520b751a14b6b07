#pragma once

// Internal: how backend() chooses, exposed so that tests can try every CAI_BACKEND value
// without touching the process-wide backend.

#include <memory>
#include <string_view>

#include "cai/device/backend.h"

namespace cai::device::detail {

/// A new backend for CAI_BACKEND = `env_value` ("" = unset): "sim" the simulator (with
/// CAI_SIM_DEVICES devices), "cuda" the CUDA driver backend (throws Error(device_error) when
/// it cannot be used), unset CUDA when probe_cuda() says so, else the simulator. Any other
/// value throws Error(value_error) naming it and the accepted ones.
std::unique_ptr<Backend> select_backend(std::string_view env_value);

}  // namespace cai::device::detail
