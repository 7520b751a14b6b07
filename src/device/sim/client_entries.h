#pragma once

// Internal: the entry points the simulated driver implements for other driver-API clients
// (numba-cuda, cuda.core through cuda-bindings) beyond those cai itself calls
// (CAI_DRIVER_ENTRIES in device/driver/api.h). Same shape: X(name, version, parameters), with
// `name` the driver's unversioned name and `version` the CUDA version whose ABI the member
// implements (the driver's PFN_<name>_v<version>). SimDriver declares a member for each; the
// exported library (sim/exports.cpp) exports and resolves them with the driver's entries; each
// needs its rows in CAI_SIM_ABI_TABLE (sim/abi_table.h), which a static_assert checks.

#include "device/driver/abi.h"

// clang-format off
#define CAI_SIM_CLIENT_ENTRIES(X)
// clang-format on
