#pragma once

// Internal: one kernel launch as planned (device/kernels/plan.h), in the stream's context.

#include "device/backend/backend.h"
#include "device/kernels/plan.h"

namespace cai::device::detail {

void launch(const StreamScope& on, const kernels::LaunchPlan& plan);

}  // namespace cai::device::detail
