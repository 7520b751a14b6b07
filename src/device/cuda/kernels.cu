// The CUDA backend's kernels. Compiled to PTX only (nvcc --ptx) and embedded in the library;
// the driver JIT-compiles the PTX for whatever GPU it finds. extern "C" keeps the entry names
// stable for cuModuleGetFunction.

#include <cuda_fp16.h>

#include "kernel_params.h"

namespace {

using cai::device::cuda_kernels::AddParams;
using cai::device::cuda_kernels::CopyParams;
using cai::device::cuda_kernels::FillParams;

// Word type of each width; uint4 is a 16-byte aligned vector.
template <int W>
struct Word;
template <>
struct Word<1> {
  using type = unsigned char;
};
template <>
struct Word<2> {
  using type = unsigned short;
};
template <>
struct Word<4> {
  using type = unsigned int;
};
template <>
struct Word<8> {
  using type = unsigned long long;
};
template <>
struct Word<16> {
  using type = uint4;
};

__device__ __forceinline__ int64_t first_index() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ int64_t grid_stride() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

// Byte offsets of element `e` (C order) in up to three strided layouts.
template <int K>
__device__ __forceinline__ void offsets(int64_t e, int ndim, const int64_t* shape,
                                        const int64_t* const (&strides)[K], int64_t (&off)[K]) {
  for (int k = 0; k < K; ++k) off[k] = 0;
  for (int d = ndim - 1; d >= 0; --d) {
    const int64_t n = shape[d];
    const int64_t i = e % n;
    e /= n;
    for (int k = 0; k < K; ++k) off[k] += i * strides[k][d];
  }
}

template <int W>
__device__ void copy_strided(const CopyParams& p) {
  using T = typename Word<W>::type;
  const int64_t* const strides[2] = {p.dst_strides, p.src_strides};
  for (int64_t e = first_index(); e < p.total; e += grid_stride()) {
    int64_t off[2];
    offsets<2>(e, p.ndim, p.shape, strides, off);
    T* dst = reinterpret_cast<T*>(p.dst + static_cast<uint64_t>(off[0]));
    const T* src = reinterpret_cast<const T*>(p.src + static_cast<uint64_t>(off[1]));
    for (int w = 0; w < p.words; ++w) dst[w] = src[w];
  }
}

template <int W>
__device__ void fill(const FillParams& p) {
  using T = typename Word<W>::type;
  const int64_t* const strides[1] = {p.dst_strides};
  const T* value = reinterpret_cast<const T*>(p.pattern);
  for (int64_t e = first_index(); e < p.total; e += grid_stride()) {
    int64_t off[1];
    offsets<1>(e, p.ndim, p.shape, strides, off);
    T* dst = reinterpret_cast<T*>(p.dst + static_cast<uint64_t>(off[0]));
    for (int w = 0; w < p.words; ++w) dst[w] = value[w];
  }
}

template <class T, class Op>
__device__ void add(const AddParams& p, Op op) {
  const int64_t* const strides[3] = {p.out_strides, p.a_strides, p.b_strides};
  for (int64_t e = first_index(); e < p.total; e += grid_stride()) {
    int64_t off[3];
    offsets<3>(e, p.ndim, p.shape, strides, off);
    const T x = *reinterpret_cast<const T*>(p.a + static_cast<uint64_t>(off[1]));
    const T y = *reinterpret_cast<const T*>(p.b + static_cast<uint64_t>(off[2]));
    *reinterpret_cast<T*>(p.out + static_cast<uint64_t>(off[0])) = op(x, y);
  }
}

// Integers wrap around: add in the unsigned type (no signed-overflow UB).
template <class T, class U>
struct WrapAdd {
  __device__ T operator()(T x, T y) const {
    return static_cast<T>(static_cast<U>(static_cast<U>(x) + static_cast<U>(y)));
  }
};

// bool + bool is logical or, as in NumPy; any non-zero byte reads as true.
struct OrAdd {
  __device__ unsigned char operator()(unsigned char x, unsigned char y) const {
    return (x != 0 || y != 0) ? 1 : 0;
  }
};

struct PlainAdd {
  template <class T>
  __device__ T operator()(T x, T y) const {
    return x + y;
  }
};

struct HalfAdd {
  __device__ __half operator()(__half x, __half y) const { return __hadd(x, y); }
};

// Complex values are loaded as their parts: c128 is only 8-byte aligned in NumPy.
template <class R>
struct Complex {
  R re, im;
};

struct ComplexAdd {
  template <class R>
  __device__ Complex<R> operator()(Complex<R> x, Complex<R> y) const {
    return {x.re + y.re, x.im + y.im};
  }
};

}  // namespace

#define CAI_BOUNDS __launch_bounds__(cai::device::cuda_kernels::kBlockSize)

extern "C" {

__global__ void CAI_BOUNDS cai_copy_strided_1(CopyParams p) {
  copy_strided<1>(p);
}
__global__ void CAI_BOUNDS cai_copy_strided_2(CopyParams p) {
  copy_strided<2>(p);
}
__global__ void CAI_BOUNDS cai_copy_strided_4(CopyParams p) {
  copy_strided<4>(p);
}
__global__ void CAI_BOUNDS cai_copy_strided_8(CopyParams p) {
  copy_strided<8>(p);
}
__global__ void CAI_BOUNDS cai_copy_strided_16(CopyParams p) {
  copy_strided<16>(p);
}

__global__ void CAI_BOUNDS cai_fill_1(FillParams p) {
  fill<1>(p);
}
__global__ void CAI_BOUNDS cai_fill_2(FillParams p) {
  fill<2>(p);
}
__global__ void CAI_BOUNDS cai_fill_4(FillParams p) {
  fill<4>(p);
}
__global__ void CAI_BOUNDS cai_fill_8(FillParams p) {
  fill<8>(p);
}
__global__ void CAI_BOUNDS cai_fill_16(FillParams p) {
  fill<16>(p);
}

__global__ void CAI_BOUNDS cai_add_b8(AddParams p) {
  add<unsigned char>(p, OrAdd{});
}
__global__ void CAI_BOUNDS cai_add_i8(AddParams p) {
  add<signed char>(p, WrapAdd<signed char, unsigned char>{});
}
__global__ void CAI_BOUNDS cai_add_i16(AddParams p) {
  add<short>(p, WrapAdd<short, unsigned short>{});
}
__global__ void CAI_BOUNDS cai_add_i32(AddParams p) {
  add<int>(p, WrapAdd<int, unsigned int>{});
}
__global__ void CAI_BOUNDS cai_add_i64(AddParams p) {
  add<long long>(p, WrapAdd<long long, unsigned long long>{});
}
__global__ void CAI_BOUNDS cai_add_u8(AddParams p) {
  add<unsigned char>(p, WrapAdd<unsigned char, unsigned char>{});
}
__global__ void CAI_BOUNDS cai_add_u16(AddParams p) {
  add<unsigned short>(p, WrapAdd<unsigned short, unsigned short>{});
}
__global__ void CAI_BOUNDS cai_add_u32(AddParams p) {
  add<unsigned int>(p, WrapAdd<unsigned int, unsigned int>{});
}
__global__ void CAI_BOUNDS cai_add_u64(AddParams p) {
  add<unsigned long long>(p, WrapAdd<unsigned long long, unsigned long long>{});
}
__global__ void CAI_BOUNDS cai_add_f16(AddParams p) {
  add<__half>(p, HalfAdd{});
}
__global__ void CAI_BOUNDS cai_add_f32(AddParams p) {
  add<float>(p, PlainAdd{});
}
__global__ void CAI_BOUNDS cai_add_f64(AddParams p) {
  add<double>(p, PlainAdd{});
}
__global__ void CAI_BOUNDS cai_add_c64(AddParams p) {
  add<Complex<float>>(p, ComplexAdd{});
}
__global__ void CAI_BOUNDS cai_add_c128(AddParams p) {
  add<Complex<double>>(p, ComplexAdd{});
}

}  // extern "C"
