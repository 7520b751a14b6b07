#pragma once

// Internal: the CPU executor of the operations, over host-addressable memory. The simulator
// runs it on its stream workers; the tests use it as the reference for the CUDA backend. It
// applies the same per-element functors as the kernels (elementwise.h); operands must have been
// validated (checks.h).

#include <span>

#include "cai/device/backend.h"

namespace cai::device::kernels {

/// dst = src; as if src were read completely before dst is written when they overlap.
void cpu_copy(const Operand& dst, const Operand& src);
/// Every element of dst = the item at `value` (which may lie inside dst).
void cpu_fill(const Operand& dst, const void* value);
/// operands[0] = op(operands[1], ...) on `type`; a supported pair (checks.h supported()).
void cpu_elementwise(ElementwiseOp op, ElementType type, std::span<const Operand> operands);

}  // namespace cai::device::kernels
