#pragma once

// Internal: every ABI of the entry points the simulated driver implements, as libcuda.so.1
// exports them and cuGetProcAddress resolves them (the driver's cuda.h maps each name to its
// newest symbol; cudaTypedefs.h declares PFN_<name>_v<version> for each ABI). The one place
// that says which symbol is which version: the exported library (sim/exports.cpp), the
// lookup of every instance (sim/entry_points.h) and tests/cpp/device/test_driver_abi.cpp
// (each row against the toolkit's PFN type) read it.
//
//   X(name, version, symbol)          entry `name` at the ABI of CUDA `version` is `symbol`,
//                                     implemented by SimDriver::name
//   A(name, version, symbol, params)  an ABI whose signature differs from SimDriver::name's:
//                                     implemented by the adapter SimDriver::symbol
//   P(name, version, kind, symbol, member)
//                                     the per-thread default stream variant (kind ptsz or
//                                     ptds), implemented by SimDriver::member with a NULL
//                                     stream argument read as CU_STREAM_PER_THREAD
//
// Every entry of CAI_DRIVER_ENTRIES and CAI_SIM_CLIENT_ENTRIES needs an X row at its list
// version (checked at compile time in entry_points.h). An ABI older than the one implemented
// whose signature differs (cuMemAlloc at 2000: 32-bit sizes) has no row: asked for it,
// cuGetProcAddress answers CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT.

#include "driver/abi.h"

// clang-format off
#define CAI_SIM_ABI_TABLE(X, A, P)                                                              \
  X(cuGetErrorName, 6000, cuGetErrorName)                                                       \
  X(cuGetErrorString, 6000, cuGetErrorString)                                                   \
  X(cuInit, 2000, cuInit)                                                                       \
  X(cuDriverGetVersion, 2020, cuDriverGetVersion)                                               \
  X(cuDeviceGet, 2000, cuDeviceGet)                                                             \
  X(cuDeviceGetCount, 2000, cuDeviceGetCount)                                                   \
  X(cuDeviceGetName, 2000, cuDeviceGetName)                                                     \
  X(cuDeviceGetAttribute, 2000, cuDeviceGetAttribute)                                           \
  X(cuDeviceTotalMem, 3020, cuDeviceTotalMem_v2)                                                \
  X(cuDeviceGetUuid, 9020, cuDeviceGetUuid)                                                     \
  X(cuDeviceGetUuid, 11040, cuDeviceGetUuid_v2)                                                 \
  X(cuDevicePrimaryCtxRetain, 7000, cuDevicePrimaryCtxRetain)                                   \
  X(cuCtxGetCurrent, 4000, cuCtxGetCurrent)                                                     \
  X(cuCtxSetCurrent, 4000, cuCtxSetCurrent)                                                     \
  X(cuCtxPushCurrent, 4000, cuCtxPushCurrent_v2)                                                \
  X(cuCtxPopCurrent, 4000, cuCtxPopCurrent_v2)                                                  \
  X(cuCtxGetDevice, 2000, cuCtxGetDevice)                                                       \
  A(cuCtxGetDevice, 13000, cuCtxGetDevice_v2, (CUdevice* device, CUcontext context))           \
  X(cuCtxSynchronize, 2000, cuCtxSynchronize)                                                   \
  A(cuCtxSynchronize, 13000, cuCtxSynchronize_v2, (CUcontext context))                         \
  X(cuMemAlloc, 3020, cuMemAlloc_v2)                                                            \
  X(cuMemAllocHost, 3020, cuMemAllocHost_v2)                                                    \
  X(cuMemAllocManaged, 6000, cuMemAllocManaged)                                                 \
  X(cuMemFree, 3020, cuMemFree_v2)                                                              \
  X(cuMemFreeHost, 2000, cuMemFreeHost)                                                         \
  X(cuMemHostRegister, 6050, cuMemHostRegister_v2)                                              \
  X(cuMemHostUnregister, 4000, cuMemHostUnregister)                                             \
  X(cuMemAllocAsync, 11020, cuMemAllocAsync)                                                    \
  P(cuMemAllocAsync, 11020, ptsz, cuMemAllocAsync_ptsz, cuMemAllocAsync)                        \
  X(cuMemFreeAsync, 11020, cuMemFreeAsync)                                                      \
  P(cuMemFreeAsync, 11020, ptsz, cuMemFreeAsync_ptsz, cuMemFreeAsync)                           \
  X(cuPointerGetAttribute, 4000, cuPointerGetAttribute)                                         \
  X(cuPointerGetAttributes, 7000, cuPointerGetAttributes)                                       \
  X(cuMemGetAddressRange, 3020, cuMemGetAddressRange_v2)                                        \
  X(cuMemsetD8Async, 3020, cuMemsetD8Async)                                                     \
  P(cuMemsetD8Async, 7000, ptsz, cuMemsetD8Async_ptsz, cuMemsetD8Async)                         \
  X(cuMemcpyAsync, 4000, cuMemcpyAsync)                                                         \
  P(cuMemcpyAsync, 7000, ptsz, cuMemcpyAsync_ptsz, cuMemcpyAsync)                               \
  X(cuMemcpyPeerAsync, 4000, cuMemcpyPeerAsync)                                                 \
  P(cuMemcpyPeerAsync, 7000, ptsz, cuMemcpyPeerAsync_ptsz, cuMemcpyPeerAsync)                   \
  X(cuStreamCreate, 2000, cuStreamCreate)                                                       \
  X(cuStreamDestroy, 4000, cuStreamDestroy_v2)                                                  \
  X(cuStreamSynchronize, 2000, cuStreamSynchronize)                                             \
  P(cuStreamSynchronize, 7000, ptsz, cuStreamSynchronize_ptsz, cuStreamSynchronize)             \
  X(cuStreamQuery, 2000, cuStreamQuery)                                                         \
  P(cuStreamQuery, 7000, ptsz, cuStreamQuery_ptsz, cuStreamQuery)                               \
  X(cuStreamGetCtx, 9020, cuStreamGetCtx)                                                       \
  P(cuStreamGetCtx, 9020, ptsz, cuStreamGetCtx_ptsz, cuStreamGetCtx)                            \
  A(cuStreamGetCtx, 12050, cuStreamGetCtx_v2,                                                   \
    (CUstream stream, CUcontext* context, CUgreenCtx* green_context))                           \
  P(cuStreamGetCtx, 12050, ptsz, cuStreamGetCtx_v2_ptsz, cuStreamGetCtx_v2)                     \
  X(cuStreamWaitEvent, 3020, cuStreamWaitEvent)                                                 \
  P(cuStreamWaitEvent, 7000, ptsz, cuStreamWaitEvent_ptsz, cuStreamWaitEvent)                   \
  X(cuLaunchHostFunc, 10000, cuLaunchHostFunc)                                                  \
  P(cuLaunchHostFunc, 10000, ptsz, cuLaunchHostFunc_ptsz, cuLaunchHostFunc)                     \
  X(cuEventCreate, 2000, cuEventCreate)                                                         \
  X(cuEventDestroy, 4000, cuEventDestroy_v2)                                                    \
  X(cuEventRecord, 2000, cuEventRecord)                                                         \
  P(cuEventRecord, 7000, ptsz, cuEventRecord_ptsz, cuEventRecord)                               \
  X(cuEventSynchronize, 2000, cuEventSynchronize)                                               \
  X(cuEventQuery, 2000, cuEventQuery)                                                           \
  X(cuEventElapsedTime, 2000, cuEventElapsedTime)                                               \
  X(cuEventElapsedTime, 12080, cuEventElapsedTime_v2)                                           \
  X(cuModuleLoadData, 2000, cuModuleLoadData)                                                   \
  X(cuModuleUnload, 2000, cuModuleUnload)                                                       \
  X(cuModuleGetFunction, 2000, cuModuleGetFunction)                                             \
  X(cuLaunchKernel, 4000, cuLaunchKernel)                                                       \
  P(cuLaunchKernel, 7000, ptsz, cuLaunchKernel_ptsz, cuLaunchKernel)                            \
  X(cuIpcGetMemHandle, 4010, cuIpcGetMemHandle)                                                 \
  X(cuIpcOpenMemHandle, 11000, cuIpcOpenMemHandle_v2)                                           \
  X(cuIpcCloseMemHandle, 4010, cuIpcCloseMemHandle)                                             \
  X(cuIpcGetEventHandle, 4010, cuIpcGetEventHandle)                                             \
  X(cuIpcOpenEventHandle, 4010, cuIpcOpenEventHandle)                                           \
  /* CAI_SIM_CLIENT_ENTRIES */                                                                  \
  X(cuMemGetInfo, 3020, cuMemGetInfo_v2)                                                      \
  X(cuDeviceGetPCIBusId, 4010, cuDeviceGetPCIBusId)                                           \
  X(cuDeviceCanAccessPeer, 4000, cuDeviceCanAccessPeer)                                       \
  X(cuDevicePrimaryCtxRelease, 11000, cuDevicePrimaryCtxRelease_v2)                           \
  X(cuDevicePrimaryCtxReset, 11000, cuDevicePrimaryCtxReset_v2)                               \
  X(cuDevicePrimaryCtxGetState, 7000, cuDevicePrimaryCtxGetState)                             \
  X(cuDevicePrimaryCtxSetFlags, 11000, cuDevicePrimaryCtxSetFlags_v2)                         \
  X(cuCtxCreate, 12050, cuCtxCreate_v4)                                                       \
  X(cuCtxDestroy, 4000, cuCtxDestroy_v2)                                                      \
  X(cuCtxGetFlags, 7000, cuCtxGetFlags)                                                       \
  X(cuCtxGetStreamPriorityRange, 5050, cuCtxGetStreamPriorityRange)                           \
  X(cuCtxEnablePeerAccess, 4000, cuCtxEnablePeerAccess)                                       \
  X(cuCtxDisablePeerAccess, 4000, cuCtxDisablePeerAccess)                                     \
  X(cuStreamCreateWithPriority, 5050, cuStreamCreateWithPriority)                             \
  X(cuStreamGetPriority, 5050, cuStreamGetPriority)                                           \
  P(cuStreamGetPriority, 7000, ptsz, cuStreamGetPriority_ptsz, cuStreamGetPriority)           \
  X(cuStreamGetFlags, 5050, cuStreamGetFlags)                                                 \
  P(cuStreamGetFlags, 7000, ptsz, cuStreamGetFlags_ptsz, cuStreamGetFlags)                    \
  X(cuStreamIsCapturing, 10000, cuStreamIsCapturing)                                          \
  P(cuStreamIsCapturing, 10000, ptsz, cuStreamIsCapturing_ptsz, cuStreamIsCapturing)          \
  X(cuMemHostAlloc, 2020, cuMemHostAlloc)                                                     \
  X(cuMemHostGetDevicePointer, 3020, cuMemHostGetDevicePointer_v2)                            \
  X(cuMemHostGetFlags, 2030, cuMemHostGetFlags)                                               \
  X(cuMemcpy, 4000, cuMemcpy)                                                                 \
  X(cuMemcpyHtoD, 3020, cuMemcpyHtoD_v2)                                                      \
  X(cuMemcpyDtoH, 3020, cuMemcpyDtoH_v2)                                                      \
  X(cuMemcpyDtoD, 3020, cuMemcpyDtoD_v2)                                                      \
  X(cuMemcpyHtoDAsync, 3020, cuMemcpyHtoDAsync_v2)                                            \
  P(cuMemcpyHtoDAsync, 7000, ptsz, cuMemcpyHtoDAsync_v2_ptsz, cuMemcpyHtoDAsync)              \
  X(cuMemcpyDtoHAsync, 3020, cuMemcpyDtoHAsync_v2)                                            \
  P(cuMemcpyDtoHAsync, 7000, ptsz, cuMemcpyDtoHAsync_v2_ptsz, cuMemcpyDtoHAsync)              \
  X(cuMemcpyDtoDAsync, 3020, cuMemcpyDtoDAsync_v2)                                            \
  P(cuMemcpyDtoDAsync, 7000, ptsz, cuMemcpyDtoDAsync_v2_ptsz, cuMemcpyDtoDAsync)              \
  X(cuMemsetD8, 3020, cuMemsetD8_v2)                                                          \
  X(cuMemsetD16, 3020, cuMemsetD16_v2)                                                        \
  X(cuMemsetD32, 3020, cuMemsetD32_v2)                                                        \
  X(cuMemsetD16Async, 3020, cuMemsetD16Async)                                                 \
  P(cuMemsetD16Async, 7000, ptsz, cuMemsetD16Async_ptsz, cuMemsetD16Async)                    \
  X(cuMemsetD32Async, 3020, cuMemsetD32Async)                                                 \
  P(cuMemsetD32Async, 7000, ptsz, cuMemsetD32Async_ptsz, cuMemsetD32Async)                    \
  X(cuDeviceGetMemPool, 11020, cuDeviceGetMemPool)                                            \
  X(cuDeviceGetDefaultMemPool, 11020, cuDeviceGetDefaultMemPool)                              \
  X(cuMemAllocFromPoolAsync, 11020, cuMemAllocFromPoolAsync)                                  \
  P(cuMemAllocFromPoolAsync, 11020, ptsz, cuMemAllocFromPoolAsync_ptsz, cuMemAllocFromPoolAsync)\
  X(cuMemPoolGetAttribute, 11020, cuMemPoolGetAttribute)                                      \
  X(cuMemPoolSetAttribute, 11020, cuMemPoolSetAttribute)                                      \
  X(cuMemPoolTrimTo, 11020, cuMemPoolTrimTo)                                                  \
  X(cuProfilerStart, 4000, cuProfilerStart)                                                   \
  X(cuProfilerStop, 4000, cuProfilerStop)
// clang-format on
