#pragma once

// Internal: the by-value arguments of the kernels in kernels.cu. Read by nvcc (device side)
// and by g++ (host side), so plain C types only; the static_asserts pin the layout both
// compilers must agree on.

#include <stdint.h>

/// Most dimensions a kernel takes after merging; the launch throws not_implemented beyond.
#define CAI_CUDA_MAX_RANK 16
/// Largest fill value (itemsize) passed inside the kernel arguments.
#define CAI_CUDA_MAX_FILL_BYTES 256

namespace cai::device::cuda_kernels {

/// dst[i] = src[i] over `total` elements of `words` machine words each (the word width is the
/// kernel's: cai_copy_strided_{1,2,4,8,16}).
struct CopyParams {
  uint64_t dst;
  uint64_t src;
  int64_t total;  ///< product of shape
  int32_t ndim;
  int32_t words;  ///< words per element
  int64_t shape[CAI_CUDA_MAX_RANK];
  int64_t dst_strides[CAI_CUDA_MAX_RANK];  ///< bytes
  int64_t src_strides[CAI_CUDA_MAX_RANK];  ///< bytes
};

/// dst[i] = pattern over `total` elements; cai_fill_{1,2,4,8,16} by word width.
struct FillParams {
  uint64_t dst;
  int64_t total;
  int32_t ndim;
  int32_t words;
  int64_t shape[CAI_CUDA_MAX_RANK];
  int64_t dst_strides[CAI_CUDA_MAX_RANK];
  alignas(16) uint8_t pattern[CAI_CUDA_MAX_FILL_BYTES];  ///< one element, `words` words
};

/// out[i] = a[i] + b[i]; cai_add_<type> by ElementType.
struct AddParams {
  uint64_t out;
  uint64_t a;
  uint64_t b;
  int64_t total;
  int32_t ndim;
  int32_t pad;
  int64_t shape[CAI_CUDA_MAX_RANK];
  int64_t out_strides[CAI_CUDA_MAX_RANK];
  int64_t a_strides[CAI_CUDA_MAX_RANK];
  int64_t b_strides[CAI_CUDA_MAX_RANK];
};

// Same layout under nvcc and g++; well under the 4 KiB kernel-argument limit.
static_assert(sizeof(CopyParams) == 32 + 3 * 8 * CAI_CUDA_MAX_RANK, "CopyParams layout");
static_assert(sizeof(FillParams) == 32 + 2 * 8 * CAI_CUDA_MAX_RANK + CAI_CUDA_MAX_FILL_BYTES,
              "FillParams layout");
static_assert(sizeof(AddParams) == 40 + 4 * 8 * CAI_CUDA_MAX_RANK, "AddParams layout");

/// Threads per block of every kernel.
inline constexpr int kBlockSize = 256;

}  // namespace cai::device::cuda_kernels
