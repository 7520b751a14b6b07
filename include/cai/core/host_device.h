#pragma once

// The one place that decides how code shared by host and device is annotated, so that the
// same headers build with g++/clang++ alone and with nvcc (or clang in CUDA mode). In core so
// that every layer (the device layer's element functors, the arrays layer's typed views) can
// use it.

#if defined(__CUDACC__)
#define CAI_HOST_DEVICE __host__ __device__
#else
#define CAI_HOST_DEVICE
#endif
