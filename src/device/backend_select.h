#pragma once

// Internal: how backend() chooses, exposed so that tests can try every CAI_BACKEND value
// without touching the process-wide backend.

#include <memory>
#include <string_view>

#include "cai/device/backend.h"

namespace cai::device::detail {

/// A new backend for CAI_BACKEND = `env_value` ("" = unset): "sim" over a new simulated driver
/// (with CAI_SIM_DEVICES devices), "cuda" over libcuda.so.1 (throws Error(device_error) saying
/// why when it cannot be used), unset libcuda.so.1 when it loads with a device, else the
/// simulator. Any other value throws Error(value_error) naming it and the accepted ones.
std::unique_ptr<Backend> select_backend(std::string_view env_value);

}  // namespace cai::device::detail
