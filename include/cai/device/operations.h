#pragma once

// The one table of the device layer's element types and elementwise operations. It drives the
// ElementType and ElementwiseOp enums below, the CUDA kernels' entry points and the host's
// lookup of them, the simulator's execution, the arrays layer's dtype dispatch and the Python
// functions of cai.ops. Plain C++ that nvcc compiles too. Adding an operation: a row in
// CAI_ELEMENTWISE_OPS, its functor in src/device/kernels/elementwise.h, its line in
// docs/cuda-backend.md ("Operations and element types").

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string_view>

namespace cai::device {

/// Storage of the element types that have no C++ arithmetic type of their own. What they mean
/// (bool add is logical or, float16 rounds to nearest even) is the operations' business.
namespace values {
/// NumPy's bool: one byte, any non-zero value is true.
struct Bool {
  std::uint8_t value;
};
/// IEEE 754 binary16.
struct Half {
  std::uint16_t bits;
};
/// bfloat16: the upper half of an IEEE binary32.
struct BFloat16 {
  std::uint16_t bits;
};
/// How an 8-bit float format spends its special encodings (the formats of ml_dtypes).
enum class Float8Special : std::uint8_t {
  ieee,  ///< exponent all ones: inf (mantissa 0) and NaN (float8_e5m2, _e4m3, _e3m4)
  fn,    ///< finite: NaN is exponent and mantissa all ones (float8_e4m3fn)
  fnuz,  ///< finite, no negative zero: NaN is the sign bit alone, 0x80 (the *fnuz formats)
  e8m0,  ///< unsigned powers of two, no zero: NaN is 0xff (float8_e8m0fnu)
};
/// An 8-bit float: E exponent bits with bias Bias, M mantissa bits.
template <int E, int M, int Bias, Float8Special S>
struct Float8 {
  std::uint8_t bits;
  static constexpr int exponent_bits = E, mantissa_bits = M, bias = Bias;
  static constexpr Float8Special special = S;
};
// Named so that the table's rows are single macro arguments.
using F8E3M4 = Float8<3, 4, 3, Float8Special::ieee>;
using F8E4M3 = Float8<4, 3, 7, Float8Special::ieee>;
using F8E4M3B11FNUZ = Float8<4, 3, 11, Float8Special::fnuz>;
using F8E4M3FN = Float8<4, 3, 7, Float8Special::fn>;
using F8E4M3FNUZ = Float8<4, 3, 8, Float8Special::fnuz>;
using F8E5M2 = Float8<5, 2, 15, Float8Special::ieee>;
using F8E5M2FNUZ = Float8<5, 2, 16, Float8Special::fnuz>;
using F8E8M0FNU = Float8<8, 0, 127, Float8Special::e8m0>;
/// A complex number as two parts (NumPy aligns complex128 to 8 bytes only, so it is never
/// loaded as one 16-byte word).
template <class R>
struct Complex {
  R re, im;
};
}  // namespace values

/// The element types: X(ctx, name, kind, extended, value type). `kind` and `extended` are the
/// cai::Kind and cai::Extended of the DType that maps to it (with item size sizeof(value
/// type)); `ctx` is passed through to X so that the table can be expanded inside another
/// (operation x type). The order is ElementType's.
#define CAI_ELEMENT_TYPES(X, ctx)                                                      \
  X(ctx, b8, boolean, none, ::cai::device::values::Bool)                               \
  X(ctx, i8, signed_int, none, std::int8_t)                                            \
  X(ctx, i16, signed_int, none, std::int16_t)                                          \
  X(ctx, i32, signed_int, none, std::int32_t)                                          \
  X(ctx, i64, signed_int, none, std::int64_t)                                          \
  X(ctx, u8, unsigned_int, none, std::uint8_t)                                         \
  X(ctx, u16, unsigned_int, none, std::uint16_t)                                       \
  X(ctx, u32, unsigned_int, none, std::uint32_t)                                       \
  X(ctx, u64, unsigned_int, none, std::uint64_t)                                       \
  X(ctx, f16, floating, none, ::cai::device::values::Half)                             \
  X(ctx, f32, floating, none, float)                                                   \
  X(ctx, f64, floating, none, double)                                                  \
  X(ctx, c64, complex, none, ::cai::device::values::Complex<float>)                    \
  X(ctx, c128, complex, none, ::cai::device::values::Complex<double>)                  \
  X(ctx, bf16, raw, bfloat16, ::cai::device::values::BFloat16)                         \
  X(ctx, f8e3m4, raw, float8_e3m4, ::cai::device::values::F8E3M4)                      \
  X(ctx, f8e4m3, raw, float8_e4m3, ::cai::device::values::F8E4M3)                      \
  X(ctx, f8e4m3b11fnuz, raw, float8_e4m3b11fnuz, ::cai::device::values::F8E4M3B11FNUZ) \
  X(ctx, f8e4m3fn, raw, float8_e4m3fn, ::cai::device::values::F8E4M3FN)                \
  X(ctx, f8e4m3fnuz, raw, float8_e4m3fnuz, ::cai::device::values::F8E4M3FNUZ)          \
  X(ctx, f8e5m2, raw, float8_e5m2, ::cai::device::values::F8E5M2)                      \
  X(ctx, f8e5m2fnuz, raw, float8_e5m2fnuz, ::cai::device::values::F8E5M2FNUZ)          \
  X(ctx, f8e8m0fnu, raw, float8_e8m0fnu, ::cai::device::values::F8E8M0FNU)

/// The elementwise operations: X(ctx, name, inputs, summary). Each computes
/// out = name(in_1, ..., in_inputs) element by element on one ElementType with the functor
/// `kernels::ops::name` (src/device/kernels/elementwise.h), which also says which element
/// types it supports. Operands, all of one shape: `out` (written) first, then the inputs
/// (read) `a`, `b`, ... An input may be `out` itself (same elements); the arrays layer stages a
/// partial overlap.
#define CAI_ELEMENTWISE_OPS(X, ctx)                                                       \
  X(ctx, add, 2,                                                                          \
    "out = a + b elementwise: integers wrap around, bool + bool is logical or, float16, " \
    "bfloat16 and the float8 formats are added in float32 and rounded once to nearest even")

#define CAI_DETAIL_ENUM_NAME(ctx, name, ...) name,
#define CAI_DETAIL_COUNT(ctx, ...) +1

enum class ElementType : int { CAI_ELEMENT_TYPES(CAI_DETAIL_ENUM_NAME, _) };
enum class ElementwiseOp : int { CAI_ELEMENTWISE_OPS(CAI_DETAIL_ENUM_NAME, _) };

inline constexpr int element_type_count = 0 CAI_ELEMENT_TYPES(CAI_DETAIL_COUNT, _);
inline constexpr int elementwise_op_count = 0 CAI_ELEMENTWISE_OPS(CAI_DETAIL_COUNT, _);

/// Most inputs an elementwise operation takes (the kernels' operand slots are this plus out).
inline constexpr int max_elementwise_inputs = 2;

/// Facts about one element type, from the table.
struct ElementTypeInfo {
  std::string_view name;  ///< "b8", "f16", ...
  std::size_t size;       ///< bytes
};

/// Facts about one elementwise operation, from the table.
struct ElementwiseOpInfo {
  std::string_view name;     ///< "add"; also the Python name in cai.ops
  int inputs;                ///< operands after `out`
  std::string_view summary;  ///< one line for docs and docstrings
};

#define CAI_DETAIL_TYPE_INFO(ctx, name, kind, extended, type) ElementTypeInfo{#name, sizeof(type)},
#define CAI_DETAIL_OP_INFO(ctx, name, inputs, summary) ElementwiseOpInfo{#name, inputs, summary},
inline constexpr ElementTypeInfo element_types[] = {CAI_ELEMENT_TYPES(CAI_DETAIL_TYPE_INFO, _)};
inline constexpr ElementwiseOpInfo elementwise_ops[] = {CAI_ELEMENTWISE_OPS(CAI_DETAIL_OP_INFO, _)};
#undef CAI_DETAIL_TYPE_INFO
#undef CAI_DETAIL_OP_INFO
#undef CAI_DETAIL_ENUM_NAME
#undef CAI_DETAIL_COUNT

/// Whether the value is one of the enumerators (a cast from an int may not be).
constexpr bool is_valid(ElementType t) noexcept {
  return static_cast<int>(t) >= 0 && static_cast<int>(t) < element_type_count;
}
constexpr bool is_valid(ElementwiseOp op) noexcept {
  return static_cast<int>(op) >= 0 && static_cast<int>(op) < elementwise_op_count;
}

/// Table row of a valid enumerator.
constexpr const ElementTypeInfo& info(ElementType t) noexcept {
  return element_types[static_cast<int>(t)];
}
constexpr const ElementwiseOpInfo& info(ElementwiseOp op) noexcept {
  return elementwise_ops[static_cast<int>(op)];
}

namespace detail {
// At namespace scope: a local array would be built on the stack at every call.
inline constexpr std::string_view elementwise_operand_names[] = {"out", "a", "b", "c"};
static_assert(std::size(elementwise_operand_names) > max_elementwise_inputs);
}  // namespace detail

/// The name of operand k of an elementwise operation in messages and in Python: "out" (k = 0),
/// then the inputs "a", "b", ...
constexpr std::string_view elementwise_operand_name(std::size_t k) noexcept {
  return k < std::size(detail::elementwise_operand_names) ? detail::elementwise_operand_names[k]
                                                          : "?";
}

/// Bytes of one element; 0 for an invalid value.
constexpr std::size_t element_size(ElementType t) noexcept {
  return is_valid(t) ? info(t).size : 0;
}

static_assert(
    [] {
      for (const ElementwiseOpInfo& op : elementwise_ops) {
        if (op.inputs < 1 || op.inputs > max_elementwise_inputs) return false;
      }
      return true;
    }(),
    "an elementwise operation takes 1 to max_elementwise_inputs inputs; raise the limit (and "
    "the kernels' operand slots follow)");
static_assert(sizeof(values::Bool) == 1 && sizeof(values::Half) == 2 &&
                  sizeof(values::BFloat16) == 2 && sizeof(values::F8E4M3FN) == 1 &&
                  sizeof(values::Complex<double>) == 16,
              "element value types must have NumPy's item sizes");

}  // namespace cai::device
