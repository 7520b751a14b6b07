#pragma once

// Internal to the extension: what `python -m cai info` reports about the backend, the CUDA
// driver and the devices (python/cai/_info.py formats it).

#include "common.h"

namespace cai::python {

void bind_info(nb::module_& m);

}  // namespace cai::python
