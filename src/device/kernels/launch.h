#pragma once

// Internal: how the host launches the kernels of kernels.cu. The argument struct, the kernel
// families and their entry names, generated from the tables (cai/device/operations.h and
// CAI_DATA_KERNELS below), so that the entry points nvcc compiles and the names the host looks
// up cannot disagree. Read by nvcc (device side) and g++ (host side): plain types only; the
// static_asserts pin the layout both compilers must agree on.

#include <stdint.h>

#include <string_view>

#include "cai/device/operations.h"

/// Most dimensions a kernel takes after merge_dims (cai/core/strided.h), a fixed size so that
/// the shape travels by value; at most cai::max_ndim (checked in
/// src/device/backend/operations.cpp). A launch with more merged dims throws not_implemented.
#define CAI_CUDA_MAX_RANK 16
/// Operand slots: out plus the most inputs of an elementwise operation.
#define CAI_KERNEL_MAX_OPERANDS 3
/// Largest fill value (item size) carried in the arguments.
#define CAI_KERNEL_VALUE_BYTES 256

/// The data-movement kernels, one per word width: X(ctx, name, operands). Functor
/// `kernels::data::name` (elementwise.h); entries cai_<name>_<W>.
#define CAI_DATA_KERNELS(X, ctx) \
  X(ctx, copy, 2)                \
  X(ctx, fill, 1)
/// How an entry walks its operands, for every kernel and operation: X(a, b, variant), where a
/// and b are passed through (the row of the outer table). One entry per variant, so that each
/// kernel is compiled without the branches of the others (plan.h picks one per launch):
///   strided32  one item per thread, merged dims, 32-bit index arithmetic (< 2^32 items);
///   strided64  the same with 64-bit index arithmetic;
///   contiguous every operand dense in one dim: no index arithmetic, 16-byte accesses where the
///              pointers allow (elementwise: 16 bytes of elements per thread; data: one word);
///   tile       a 2-D copy whose operands step fastest along different dims (a transpose):
///              through a 32x32 shared-memory tile, so that reads and writes both coalesce.
///              Copy only: the other entries of this variant are empty.
#define CAI_KERNEL_VARIANTS(X, a, b) \
  X(a, b, strided32)                 \
  X(a, b, strided64)                 \
  X(a, b, contiguous)                \
  X(a, b, tile)
/// The word widths of the data-movement kernels: X(ctx, bytes, log2 bytes).
#define CAI_WORD_WIDTHS(X, ctx) \
  X(ctx, 1, 0)                  \
  X(ctx, 2, 1)                  \
  X(ctx, 4, 2)                  \
  X(ctx, 8, 3)                  \
  X(ctx, 16, 4)

namespace cai::device::kernels {

/// The one argument of every kernel, by value.
struct KernelParams {
  uint64_t ptr[CAI_KERNEL_MAX_OPERANDS];  ///< operand 0 is written, the others read
  int64_t total;                          ///< items (contiguous data movement: words)
  int32_t ndim;
  /// Data movement: W-byte words per item; contiguous fill: words in the value's pattern.
  int32_t words;
  int64_t reserved;  ///< zero: the padding before `value`, made explicit
  int64_t shape[CAI_CUDA_MAX_RANK];
  int64_t strides[CAI_KERNEL_MAX_OPERANDS][CAI_CUDA_MAX_RANK];  ///< bytes
  alignas(16) uint8_t value[CAI_KERNEL_VALUE_BYTES];            ///< fill: one item
};

// Same layout under nvcc and g++; well under the 4 KiB kernel-argument limit.
static_assert(sizeof(KernelParams) == 48 + 8 * CAI_CUDA_MAX_RANK * (1 + CAI_KERNEL_MAX_OPERANDS) +
                                          CAI_KERNEL_VALUE_BYTES,
              "KernelParams layout");
static_assert(CAI_KERNEL_MAX_OPERANDS == 1 + max_elementwise_inputs,
              "one operand slot for out and one per input");

/// Threads per block of every kernel: kBlockSize x 1, or kTile x kTileRows for the tile.
inline constexpr int kBlockSize = 256;
inline constexpr int kTile = 32;
inline constexpr int kTileRows = kBlockSize / kTile;

#define CAI_DETAIL_ENUM_NAME(ctx, name, ...) name,
#define CAI_DETAIL_COUNT(ctx, ...) +1
#define CAI_DETAIL_VARIANT_NAME(a, b, variant) variant,
#define CAI_DETAIL_VARIANT_COUNT(a, b, variant) +1
enum class DataKernel : int { CAI_DATA_KERNELS(CAI_DETAIL_ENUM_NAME, _) };
enum class Variant : int { CAI_KERNEL_VARIANTS(CAI_DETAIL_VARIANT_NAME, _, _) };
inline constexpr int data_kernel_count = 0 CAI_DATA_KERNELS(CAI_DETAIL_COUNT, _);
inline constexpr int word_width_count = 0 CAI_WORD_WIDTHS(CAI_DETAIL_COUNT, _);
inline constexpr int variant_count = 0 CAI_KERNEL_VARIANTS(CAI_DETAIL_VARIANT_COUNT, _, _);
#undef CAI_DETAIL_ENUM_NAME
#undef CAI_DETAIL_COUNT
#undef CAI_DETAIL_VARIANT_NAME
#undef CAI_DETAIL_VARIANT_COUNT

/// Entries in load order: the data-movement kernels by word width, then the elementwise
/// operations by element type; each in every variant.
inline constexpr int kernel_count =
    (data_kernel_count * word_width_count + elementwise_op_count * element_type_count) *
    variant_count;

/// Index of cai_<kernel>_<W>_<variant> for W = 2^log2_width.
constexpr int kernel_index(DataKernel k, int log2_width, Variant v) noexcept {
  return (static_cast<int>(k) * word_width_count + log2_width) * variant_count +
         static_cast<int>(v);
}
/// Index of cai_<op>_<type>_<variant>.
constexpr int kernel_index(ElementwiseOp op, ElementType t, Variant v) noexcept {
  return (data_kernel_count * word_width_count + static_cast<int>(op) * element_type_count +
          static_cast<int>(t)) *
             variant_count +
         static_cast<int>(v);
}

#define CAI_DETAIL_NAME(a, b, variant) "cai_" #a "_" #b "_" #variant,
#define CAI_DETAIL_WIDTH_NAMES(kernel, bytes, log2) \
  CAI_KERNEL_VARIANTS(CAI_DETAIL_NAME, kernel, bytes)
#define CAI_DETAIL_DATA_NAMES(ctx, kernel, operands) CAI_WORD_WIDTHS(CAI_DETAIL_WIDTH_NAMES, kernel)
#define CAI_DETAIL_TYPE_NAMES(op, type, kind, extended, value) \
  CAI_KERNEL_VARIANTS(CAI_DETAIL_NAME, op, type)
#define CAI_DETAIL_OP_NAMES(ctx, op, inputs, summary) CAI_ELEMENT_TYPES(CAI_DETAIL_TYPE_NAMES, op)
/// The entry names, indexed by kernel_index().
inline constexpr std::string_view kernel_names[] = {
    CAI_DATA_KERNELS(CAI_DETAIL_DATA_NAMES, _) CAI_ELEMENTWISE_OPS(CAI_DETAIL_OP_NAMES, _)};
#undef CAI_DETAIL_NAME
#undef CAI_DETAIL_WIDTH_NAMES
#undef CAI_DETAIL_DATA_NAMES
#undef CAI_DETAIL_TYPE_NAMES
#undef CAI_DETAIL_OP_NAMES
static_assert(sizeof(kernel_names) / sizeof(kernel_names[0]) == kernel_count);

}  // namespace cai::device::kernels
