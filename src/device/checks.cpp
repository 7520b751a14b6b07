#include "checks.h"

#include <cstdio>
#include <string>

#include "cai/core/error.h"
#include "cai/core/interface.h"
#include "kernels/elementwise.h"

namespace cai::device::detail {

namespace {

std::string text(std::string_view where, std::string_view name) {
  std::string s(where);
  s += ": ";
  s += name;
  return s;
}

// supported() for every (operation, element type), from the functors.
#define CAI_SUPPORTED_TYPE(op, type, kind, extended, value) \
  kernels::supports<kernels::ops::op, value, info(ElementwiseOp::op).inputs>,
#define CAI_SUPPORTED_OP(ctx, op, inputs, summary) {CAI_ELEMENT_TYPES(CAI_SUPPORTED_TYPE, op)},
constexpr bool kSupported[elementwise_op_count][element_type_count] = {
    CAI_ELEMENTWISE_OPS(CAI_SUPPORTED_OP, _)};
#undef CAI_SUPPORTED_TYPE
#undef CAI_SUPPORTED_OP

}  // namespace

void check_stream_handle(StreamHandle s, std::string_view where) {
  if (s == 0) {
    throw_error(Errc::value_error, stream_zero_message(std::string(where) + ": stream"));
  }
}

ByteRange check_range(std::string_view where, std::string_view name, std::uint64_t ptr,
                      std::size_t bytes) {
  if (bytes == 0) return {};
  if (ptr == 0) {
    throw_error(Errc::value_error,
                text(where, name) + " is a null pointer for " + std::to_string(bytes) + " bytes");
  }
  std::uint64_t hi;
  if (__builtin_add_overflow(ptr, static_cast<std::uint64_t>(bytes), &hi)) {
    throw_error(Errc::overflow, text(where, name) + " range " + hex(ptr) + "+" +
                                    std::to_string(bytes) + " wraps around the address space");
  }
  return {ptr, hi};
}

ByteRange check_operand(std::string_view where, std::string_view name, const Operand& op) {
  const Layout& l = op.layout;
  if (l.nbytes() == 0) return {};
  if (op.ptr == 0) throw_error(Errc::value_error, text(where, name) + " is a null pointer");
  const std::optional<ByteRange> r = l.byte_range(op.ptr);
  if (!r) {
    const Extent e = l.extent();
    throw_error(Errc::overflow, text(where, name) + " at " + hex(op.ptr) + " with byte extent [" +
                                    std::to_string(e.lo) + ", " + std::to_string(e.hi) +
                                    ") wraps around the address space");
  }
  return *r;
}

void check_same_layout_size(std::string_view where, std::string_view a_name, const Operand& a,
                            std::string_view b_name, const Operand& b) {
  if (!same_shape(a.layout.shape(), b.layout.shape())) {
    throw_error(Errc::value_error, text(where, b_name) + " has shape " +
                                       format_dims(b.layout.shape()) + " but " +
                                       std::string(a_name) + " has shape " +
                                       format_dims(a.layout.shape()) + "; they must be equal");
  }
  if (a.layout.itemsize() != b.layout.itemsize()) {
    throw_error(Errc::value_error,
                text(where, b_name) + " has item size " + std::to_string(b.layout.itemsize()) +
                    " but " + std::string(a_name) + " has " + std::to_string(a.layout.itemsize()) +
                    "; they must be equal");
  }
}

bool supported(ElementwiseOp op, ElementType type) {
  return is_valid(op) && is_valid(type) && kSupported[static_cast<int>(op)][static_cast<int>(type)];
}

std::array<ByteRange, CAI_KERNEL_MAX_OPERANDS> check_elementwise(
    std::string_view where, ElementwiseOp op, ElementType type, std::span<const Operand> operands) {
  if (!is_valid(op)) {
    throw_error(Errc::value_error, std::string(where) + ": unknown elementwise operation " +
                                       std::to_string(static_cast<int>(op)));
  }
  if (!is_valid(type)) {
    throw_error(Errc::value_error, std::string(where) + ": unknown element type " +
                                       std::to_string(static_cast<int>(type)));
  }
  const ElementwiseOpInfo& o = info(op);
  const auto count = static_cast<std::size_t>(1 + o.inputs);
  if (operands.size() != count) {
    throw_error(Errc::value_error, std::string(where) + ": " + std::string(o.name) + " takes " +
                                       std::to_string(count) + " operands (out and " +
                                       std::to_string(o.inputs) + " inputs), got " +
                                       std::to_string(operands.size()));
  }
  if (!supported(op, type)) {
    throw_error(Errc::not_implemented, std::string(where) + ": " + std::string(o.name) +
                                           " is not defined on element type " +
                                           std::string(info(type).name));
  }
  const auto size = static_cast<std::int64_t>(element_size(type));
  for (std::size_t k = 0; k < count; ++k) {
    if (operands[k].layout.itemsize() != size) {
      throw_error(Errc::value_error, text(where, elementwise_operand_name(k)) + " has item size " +
                                         std::to_string(operands[k].layout.itemsize()) + ", " +
                                         std::string(info(type).name) + " needs " +
                                         std::to_string(size));
    }
    if (k > 0)
      check_same_layout_size(where, elementwise_operand_name(0), operands[0],
                             elementwise_operand_name(k), operands[k]);
  }
  std::array<ByteRange, CAI_KERNEL_MAX_OPERANDS> ranges{};
  for (std::size_t k = 0; k < count; ++k)
    ranges[k] = check_operand(where, elementwise_operand_name(k), operands[k]);
  const Operand& out = operands[0];
  for (std::size_t k = 1; k < count; ++k) {
    const Operand& in = operands[k];
    if (ranges[0].intersects(ranges[k]) &&
        !same_elements(out.ptr, out.layout.strides(), in.ptr, in.layout.strides(),
                       out.layout.shape())) {
      throw_error(Errc::value_error,
                  text(where, elementwise_operand_name(k)) + " " + range_text(ranges[k]) +
                      " partly overlaps out " + range_text(ranges[0]) +
                      "; the result would depend on the order of the elements (an input may be "
                      "out itself, element for element, or share no bytes with it; "
                      "cai::elementwise stages the others)");
    }
  }
  return ranges;
}

}  // namespace cai::device::detail
