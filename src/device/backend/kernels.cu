// The CUDA backend's kernels. Compiled to PTX only (nvcc --ptx) and embedded in the library;
// the driver JIT-compiles the PTX for whatever GPU it finds. Each entry point wraps a body of
// bodies.h (the code the CPU grid runner also runs) and is generated from the tables
// (cai/device/operations.h; CAI_DATA_KERNELS, CAI_WORD_WIDTHS and CAI_KERNEL_VARIANTS in
// launch.h). extern "C" keeps the entry names stable for cuModuleGetFunction.

#include "kernels/bodies.h"

namespace {

namespace k = cai::device::kernels;
using k::KernelParams;

// One thread of an entry: a tiled body runs its two phases around a barrier, with the block's
// tile in shared memory.
template <class Body, int W>
__device__ __forceinline__ void run_entry(const KernelParams& p) {
  const k::Coord c{blockIdx.x, threadIdx.x, threadIdx.y};
  if constexpr (Body::tiled) {
    __shared__ k::word_t<W> tile[k::kTile][k::kTile + 1];
    Body::template run<0>(p, c, tile);
    __syncthreads();
    Body::template run<1>(p, c, tile);
  } else {
    Body::template run<0>(p, c, nullptr);
  }
}

}  // namespace

#define CAI_BOUNDS __launch_bounds__(cai::device::kernels::kBlockSize)

extern "C" {

// cai_copy_1_strided32 ... cai_fill_16_tile
#define CAI_DATA_ENTRY(kernel, bytes, variant)                                    \
  __global__ void CAI_BOUNDS cai_##kernel##_##bytes##_##variant(KernelParams p) { \
    run_entry<CAI_DATA_BODY(kernel, bytes, variant), bytes>(p);                   \
  }
#define CAI_DATA_WIDTH_ENTRIES(kernel, bytes, log2) \
  CAI_KERNEL_VARIANTS(CAI_DATA_ENTRY, kernel, bytes)
#define CAI_DATA_ENTRIES(ctx, kernel, operands) CAI_WORD_WIDTHS(CAI_DATA_WIDTH_ENTRIES, kernel)
CAI_DATA_KERNELS(CAI_DATA_ENTRIES, _)

// cai_add_b8_strided32 ... cai_add_c128_tile
#define CAI_ELEMENTWISE_ENTRY(op, type, variant)                             \
  __global__ void CAI_BOUNDS cai_##op##_##type##_##variant(KernelParams p) { \
    run_entry<CAI_ELEMENTWISE_BODY(op, type, variant), 1>(p);                \
  }
#define CAI_ELEMENTWISE_TYPE_ENTRIES(op, type, kind, extended, value) \
  CAI_KERNEL_VARIANTS(CAI_ELEMENTWISE_ENTRY, op, type)
#define CAI_ELEMENTWISE_ENTRIES(ctx, op, inputs, summary) \
  CAI_ELEMENT_TYPES(CAI_ELEMENTWISE_TYPE_ENTRIES, op)
CAI_ELEMENTWISE_OPS(CAI_ELEMENTWISE_ENTRIES, _)

}  // extern "C"
