#include "kernels/cpu.h"

#include <cstring>
#include <vector>

#include "cai/core/error.h"
#include "kernels/elementwise.h"
#include "kernels/launch.h"
#include "kernels/plan.h"

namespace cai::device::kernels {

namespace {

char* host_ptr(std::uint64_t p) {
  return reinterpret_cast<char*>(static_cast<std::uintptr_t>(p));
}

// The CPU form of a kernel launch: every element of the merged index space, in C order.
template <std::size_t K, class Body>
void for_each_item(const std::array<const Operand*, K>& ops, const MergedDims<K>& dims,
                   Body&& body) {
  std::array<Strides, K> strides;
  std::array<char*, K> base;
  for (std::size_t k = 0; k < K; ++k) {
    strides[k] = dims.strides_span(k);
    base[k] = host_ptr(ops[k]->ptr);
  }
  for_each_element<K>(dims.shape_span(), strides, [&](const std::array<std::int64_t, K>& off) {
    char* p[K];
    for (std::size_t k = 0; k < K; ++k) p[k] = base[k] + off[k];
    body(p);
  });
}

// A data-movement kernel (data::copy, data::fill) at the widest aligned word.
template <class Kernel, std::size_t K>
void run_data(const std::array<const Operand*, K>& ops, const char* value) {
  const MergedDims<K> dims = merge_operands<K>(ops);
  std::array<std::uint64_t, K> ptrs;
  for (std::size_t k = 0; k < K; ++k) ptrs[k] = ops[k]->ptr;
  const std::int64_t itemsize = ops[0]->layout.itemsize();
  const int log2 = word_width_log2<K>(itemsize, ptrs, dims);
  const int words = static_cast<int>(itemsize >> log2);
  auto run = [&]<int W>() {
    for_each_item<K>(ops, dims, [&](char* const* p) { Kernel::template item<W>(p, value, words); });
  };
  switch (log2) {
#define CAI_WIDTH_CASE(ctx, bytes, log2) \
  case log2:                             \
    return run.template operator()<bytes>();
    CAI_WORD_WIDTHS(CAI_WIDTH_CASE, _)
#undef CAI_WIDTH_CASE
  }
}

template <class Op, class T, int N>
void run_elementwise(std::span<const Operand> operands) {
  if constexpr (supports<Op, T, N>) {
    constexpr auto K = static_cast<std::size_t>(N + 1);
    std::array<const Operand*, K> ops;
    for (std::size_t k = 0; k < K; ++k) ops[k] = &operands[k];
    for_each_item<K>(ops, merge_operands<K>(ops),
                     [](char* const* p) { apply_element<Op, T, N>(p[0], p + 1); });
  } else {
    throw_error(Errc::not_implemented, "cpu_elementwise(): unsupported operation and type");
  }
}

}  // namespace

void cpu_copy(const Operand& dst, const Operand& src) {
  const Layout& dl = dst.layout;
  const Layout& sl = src.layout;
  if (dl.nbytes() == 0) return;
  if (same_elements(dst.ptr, dl.strides(), src.ptr, sl.strides(), dl.shape())) return;
  const ByteRange dr = *dl.byte_range(dst.ptr);
  const ByteRange sr = *sl.byte_range(src.ptr);
  if (same_elements(0, dl.strides(), 0, sl.strides(), dl.shape()) && dl.is_dense()) {
    // The same bytes at the same offsets without gaps (e.g. both C-contiguous): one move.
    std::memmove(host_ptr(dr.lo), host_ptr(sr.lo), dr.size());
    return;
  }
  if (dr.intersects(sr)) {
    // Gather the source first, so that the result does not depend on the visiting order.
    std::vector<Word16> tmp((static_cast<std::size_t>(sl.nbytes()) + sizeof(Word16) - 1) /
                            sizeof(Word16));
    const Operand t{reinterpret_cast<std::uintptr_t>(tmp.data()),
                    Layout::c_contiguous(sl.shape(), sl.itemsize()), true};
    run_data<data::copy, 2>({&t, &src}, nullptr);
    run_data<data::copy, 2>({&dst, &t}, nullptr);
    return;
  }
  run_data<data::copy, 2>({&dst, &src}, nullptr);
}

void cpu_fill(const Operand& dst, const void* value) {
  if (dst.layout.nbytes() == 0) return;
  // A copy (aligned for the widest word), in case value points into the destination.
  std::vector<Word16> v((static_cast<std::size_t>(dst.layout.itemsize()) + sizeof(Word16) - 1) /
                        sizeof(Word16));
  std::memcpy(v.data(), value, static_cast<std::size_t>(dst.layout.itemsize()));
  run_data<data::fill, 1>({&dst}, reinterpret_cast<const char*>(v.data()));
}

void cpu_elementwise(ElementwiseOp op, ElementType type, std::span<const Operand> operands) {
  if (operands.empty() || operands[0].layout.size() == 0) return;
  switch (kernel_index(op, type, Variant::strided64)) {  // one case per (op, type)
#define CAI_TYPE_CASE(op, type, kind, extended, value)                         \
  case kernel_index(ElementwiseOp::op, ElementType::type, Variant::strided64): \
    return run_elementwise<ops::op, value, info(ElementwiseOp::op).inputs>(operands);
#define CAI_OP_CASES(ctx, op, inputs, summary) CAI_ELEMENT_TYPES(CAI_TYPE_CASE, op)
    CAI_ELEMENTWISE_OPS(CAI_OP_CASES, _)
#undef CAI_TYPE_CASE
#undef CAI_OP_CASES
    default:
      throw_error(Errc::value_error, "cpu_elementwise(): unknown operation or element type");
  }
}

}  // namespace cai::device::kernels
