// The CUDA backend's kernels. Compiled to PTX only (nvcc --ptx) and embedded in the library;
// the driver JIT-compiles the PTX for whatever GPU it finds. The entry points are generated
// from the tables (cai/device/operations.h, CAI_DATA_KERNELS in launch.h): one grid-stride
// loop per family calls the per-element functors of elementwise.h, the same ones the CPU runs.
// extern "C" keeps the entry names stable for cuModuleGetFunction.

#include "device/kernels/elementwise.h"
#include "device/kernels/launch.h"

namespace {

using cai::device::kernels::KernelParams;
namespace k = cai::device::kernels;

__device__ __forceinline__ int64_t first_index() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ int64_t grid_stride() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

// The addresses of element `e` (C order) in each of the K operands.
template <int K>
__device__ __forceinline__ void element_pointers(const KernelParams& p, int64_t e,
                                                 char* (&ptr)[K]) {
  int64_t off[K];
  for (int k = 0; k < K; ++k) off[k] = 0;
  for (int d = p.ndim - 1; d >= 0; --d) {
    const int64_t n = p.shape[d];
    const int64_t i = e % n;
    e /= n;
    for (int k = 0; k < K; ++k) off[k] += i * p.strides[k][d];
  }
  for (int k = 0; k < K; ++k)
    ptr[k] = reinterpret_cast<char*>(p.ptr[k] + static_cast<uint64_t>(off[k]));
}

// Family 1, data movement: items of `words` W-byte words.
template <class Kernel, int K, int W>
__device__ void data_kernel(const KernelParams& p) {
  const char* value = reinterpret_cast<const char*>(p.value);
  for (int64_t e = first_index(); e < p.total; e += grid_stride()) {
    char* ptr[K];
    element_pointers<K>(p, e, ptr);
    Kernel::template item<W>(ptr, value, p.words);
  }
}

// Family 2, elementwise operations on element values: out = Op(inputs...).
template <class Op, class T, int N>
__device__ void elementwise_kernel(const KernelParams& p) {
  if constexpr (k::supports<Op, T, N>) {
    for (int64_t e = first_index(); e < p.total; e += grid_stride()) {
      char* ptr[N + 1];
      element_pointers<N + 1>(p, e, ptr);
      k::apply_element<Op, T, N>(ptr[0], ptr + 1);
    }
  }
  // Unsupported pairs keep an (empty) entry so that every name exists; the host refuses them.
}

}  // namespace

// The operand count of each data-movement kernel and the input count of each operation, by
// name, for the entries below.
namespace {
#define CAI_DATA_OPERANDS(ctx, kernel, operands) constexpr int operands_##kernel = operands;
CAI_DATA_KERNELS(CAI_DATA_OPERANDS, _)
#define CAI_OP_INPUTS(ctx, op, inputs, summary) constexpr int inputs_##op = inputs;
CAI_ELEMENTWISE_OPS(CAI_OP_INPUTS, _)
}  // namespace

#define CAI_BOUNDS __launch_bounds__(cai::device::kernels::kBlockSize)

extern "C" {

// cai_copy_1 ... cai_fill_16
#define CAI_DATA_ENTRY(kernel, bytes, log2)                           \
  __global__ void CAI_BOUNDS cai_##kernel##_##bytes(KernelParams p) { \
    data_kernel<k::data::kernel, operands_##kernel, bytes>(p);        \
  }
#define CAI_DATA_ENTRIES(ctx, kernel, operands) CAI_WORD_WIDTHS(CAI_DATA_ENTRY, kernel)
CAI_DATA_KERNELS(CAI_DATA_ENTRIES, _)

// cai_add_b8 ... cai_add_c128
#define CAI_ELEMENTWISE_ENTRY(op, type, kind, value)             \
  __global__ void CAI_BOUNDS cai_##op##_##type(KernelParams p) { \
    elementwise_kernel<k::ops::op, value, inputs_##op>(p);       \
  }
#define CAI_ELEMENTWISE_ENTRIES(ctx, op, inputs, summary) \
  CAI_ELEMENT_TYPES(CAI_ELEMENTWISE_ENTRY, op)
CAI_ELEMENTWISE_OPS(CAI_ELEMENTWISE_ENTRIES, _)

}  // extern "C"
