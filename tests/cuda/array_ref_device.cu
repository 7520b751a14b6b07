// Compile-only check: ArrayRef, its slice and its mdspan conversion build in device code with
// nvcc. Built as an object library; nothing is launched.

#include <cuda/std/mdspan>

#include "cai/arrays/array_ref.h"
#include "cai/arrays/as_array_ref.h"

static_assert(CAI_HAS_CUDA_STD_MDSPAN, "nvcc should see <cuda/std/mdspan>");
static_assert(std::is_trivially_copyable_v<cai::ArrayRef<float, 2>>);

namespace {

__device__ float sum_row(cai::ArrayRef<const float, 2> a, std::int64_t i) {
  float s = 0;
  for (std::int64_t j = 0; j < a.shape(1); ++j) s += a(i, j);
  return s;
}

}  // namespace

// out[i] = sum of row i of a[:, 1:] + the same through the standard mdspan.
__global__ void cai_array_ref_row_sums(cai::ArrayRef<const float, 2> a,
                                       cai::ArrayRef<float, 1> out) {
  const std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (i >= out.shape(0)) return;
  const cai::ArrayRef<const float, 2> tail = a.slice(-1, 1, a.shape(1));
  auto md = cai::to_mdspan(tail);
  float t = 0;
  for (std::int64_t j = 0; j < md.extent(1); ++j) t += md(i, j);
  out[i] = sum_row(tail, i) + t;
}

// Elementwise over any rank through a flat view, the mdspan round trip and a 0-d view.
__global__ void cai_array_ref_axpy(float alpha, cai::ArrayRef<const float, 1> x,
                                   cai::ArrayRef<float, 1> y, cai::ArrayRef<float, 0> last) {
  const std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  cai::ArrayRef<float, 1> yy = cai::as_array_ref(cai::to_mdspan(y));
  if (i < y.size()) yy(i) = alpha * x[i] + y(i);
  if (i == 0) last() = static_cast<float>(y.size());
}

// Host side of a .cu file: the View conversion and a launch expression compile with nvcc.
void cai_array_ref_launch(const cai::View& a, const cai::View& out, cudaStream_t stream) {
  auto in = cai::as_array_ref<const float, 2>(a);
  auto res = cai::as_array_ref<float, 1>(out);
  const auto blocks = static_cast<unsigned>((res.shape(0) + 127) / 128);
  cai_array_ref_row_sums<<<blocks, 128, 0, stream>>>(in, res);
}
