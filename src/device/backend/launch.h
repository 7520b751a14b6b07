#pragma once

// Internal: one kernel launch as planned (device/kernels/plan.h), in the stream's context.

#include "backend/backend.h"
#include "kernels/plan.h"

namespace cai::device::detail {

void launch(const StreamScope& on, const kernels::LaunchPlan& plan);

}  // namespace cai::device::detail
