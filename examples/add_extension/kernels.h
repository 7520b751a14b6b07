#pragma once

#include <cstdint>

#include <cai/arrays/array_ref.h>

// Launches out = a + b on `stream` (a CAI stream handle: 1 legacy, 2 per-thread, or a CUstream).
void launch_add(cai::ArrayRef<const float, 1> a, cai::ArrayRef<const float, 1> b,
                cai::ArrayRef<float, 1> out, std::uint64_t stream);
void launch_add(cai::ArrayRef<const double, 1> a, cai::ArrayRef<const double, 1> b,
                cai::ArrayRef<double, 1> out, std::uint64_t stream);
