#pragma once

// Internal: the entry points the simulated driver implements for other driver-API clients
// (numba-cuda, cuda.core through cuda-bindings) beyond those cai itself calls
// (CAI_DRIVER_ENTRIES in device/driver/api.h). Same shape: X(name, version, parameters), with
// `name` the driver's unversioned name and `version` the CUDA version whose ABI the member
// implements (the driver's PFN_<name>_v<version>). SimDriver declares a member for each; the
// exported library (sim/exports.cpp) exports and resolves them with the driver's entries; each
// needs its rows in CAI_SIM_ABI_TABLE (sim/abi_table.h), which a static_assert checks.
// The members are in sim/client*.cpp; docs/simulator.md lists their semantics.

#include <cstddef>
#include <iterator>

#include "driver/abi.h"

struct CUctxCreateParams_st;

namespace cai::device::cu {

/// The driver's values of the types only these entries use (cuda.h's names).
using CUctxCreateParams = CUctxCreateParams_st;
enum CUstreamCaptureStatus : int {
  CU_STREAM_CAPTURE_STATUS_NONE = 0,
  CU_STREAM_CAPTURE_STATUS_ACTIVE = 1,
  CU_STREAM_CAPTURE_STATUS_INVALIDATED = 2,
};
enum CUmemPool_attribute : int {
  CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES = 1,
  CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC = 2,
  CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES = 3,
  CU_MEMPOOL_ATTR_RELEASE_THRESHOLD = 4,
  CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT = 5,
  CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH = 6,
  CU_MEMPOOL_ATTR_USED_MEM_CURRENT = 7,
  CU_MEMPOOL_ATTR_USED_MEM_HIGH = 8,
};
/// cuMemHostAlloc's flags (macros in cuda.h).
inline constexpr unsigned kMemHostAllocPortable = 0x01;
inline constexpr unsigned kMemHostAllocDeviceMap = 0x02;
inline constexpr unsigned kMemHostAllocWriteCombined = 0x04;
/// Context flags (CUctx_flags): the scheduling mask and all the flags.
inline constexpr unsigned kCtxSchedMask = 0x07;
inline constexpr unsigned kCtxFlagsMask = 0xff;
/// Error codes only these entries return.
inline constexpr CUresult kErrorPeerAccessUnsupported = static_cast<CUresult>(217);
inline constexpr CUresult kErrorPeerAccessAlreadyEnabled = static_cast<CUresult>(704);
inline constexpr CUresult kErrorPeerAccessNotEnabled = static_cast<CUresult>(705);

}  // namespace cai::device::cu

// clang-format off
#define CAI_SIM_CLIENT_ENTRIES(X)                                                               \
  X(cuDeviceGetPCIBusId, 4010, (char* bus_id, int length, CUdevice device))                     \
  X(cuDeviceCanAccessPeer, 4000, (int* can_access, CUdevice device, CUdevice peer))             \
  X(cuDevicePrimaryCtxRelease, 11000, (CUdevice device))                                        \
  X(cuDevicePrimaryCtxReset, 11000, (CUdevice device))                                          \
  X(cuDevicePrimaryCtxGetState, 7000, (CUdevice device, unsigned int* flags, int* active))     \
  X(cuDevicePrimaryCtxSetFlags, 11000, (CUdevice device, unsigned int flags))                  \
  X(cuCtxCreate, 12050, (CUcontext* context, CUctxCreateParams* params, unsigned int flags,    \
                         CUdevice device))                                                      \
  X(cuCtxDestroy, 4000, (CUcontext context))                                                    \
  X(cuCtxGetFlags, 7000, (unsigned int* flags))                                                 \
  X(cuCtxGetStreamPriorityRange, 5050, (int* least, int* greatest))                            \
  X(cuCtxEnablePeerAccess, 4000, (CUcontext peer, unsigned int flags))                         \
  X(cuCtxDisablePeerAccess, 4000, (CUcontext peer))                                             \
  X(cuStreamCreateWithPriority, 5050, (CUstream* stream, unsigned int flags, int priority))    \
  X(cuStreamGetPriority, 5050, (CUstream stream, int* priority))                               \
  X(cuStreamGetFlags, 5050, (CUstream stream, unsigned int* flags))                            \
  X(cuStreamIsCapturing, 10000, (CUstream stream, CUstreamCaptureStatus* status))              \
  X(cuMemHostAlloc, 2020, (void** ptr, std::size_t bytes, unsigned int flags))                 \
  X(cuMemHostGetFlags, 2030, (unsigned int* flags, void* ptr))                                 \
  X(cuMemcpy, 4000, (CUdeviceptr dst, CUdeviceptr src, std::size_t bytes))                     \
  X(cuMemcpyHtoD, 3020, (CUdeviceptr dst, const void* src, std::size_t bytes))                 \
  X(cuMemcpyDtoH, 3020, (void* dst, CUdeviceptr src, std::size_t bytes))                       \
  X(cuMemcpyDtoD, 3020, (CUdeviceptr dst, CUdeviceptr src, std::size_t bytes))                 \
  X(cuMemcpyHtoDAsync, 3020, (CUdeviceptr dst, const void* src, std::size_t bytes,             \
                              CUstream stream))                                                 \
  X(cuMemcpyDtoHAsync, 3020, (void* dst, CUdeviceptr src, std::size_t bytes, CUstream stream)) \
  X(cuMemcpyDtoDAsync, 3020, (CUdeviceptr dst, CUdeviceptr src, std::size_t bytes,             \
                              CUstream stream))                                                 \
  X(cuMemsetD8, 3020, (CUdeviceptr dst, unsigned char value, std::size_t count))               \
  X(cuMemsetD16, 3020, (CUdeviceptr dst, unsigned short value, std::size_t count))             \
  X(cuMemsetD32, 3020, (CUdeviceptr dst, unsigned int value, std::size_t count))               \
  X(cuMemsetD16Async, 3020, (CUdeviceptr dst, unsigned short value, std::size_t count,         \
                             CUstream stream))                                                  \
  X(cuMemsetD32Async, 3020, (CUdeviceptr dst, unsigned int value, std::size_t count,           \
                             CUstream stream))                                                  \
  X(cuDeviceGetMemPool, 11020, (CUmemoryPool* pool, CUdevice device))                          \
  X(cuDeviceGetDefaultMemPool, 11020, (CUmemoryPool* pool, CUdevice device))                   \
  X(cuMemAllocFromPoolAsync, 11020, (CUdeviceptr* ptr, std::size_t bytes, CUmemoryPool pool,   \
                                     CUstream stream))                                          \
  X(cuMemPoolGetAttribute, 11020, (CUmemoryPool pool, CUmemPool_attribute attribute,           \
                                   void* value))                                                \
  X(cuMemPoolSetAttribute, 11020, (CUmemoryPool pool, CUmemPool_attribute attribute,           \
                                   void* value))                                                \
  X(cuMemPoolTrimTo, 11020, (CUmemoryPool pool, std::size_t keep_bytes))                       \
  X(cuProfilerStart, 4000, ())                                                                  \
  X(cuProfilerStop, 4000, ())
// clang-format on

namespace cai::device::cu {

#define CAI_DETAIL_CLIENT_FIELD(name, version, params) CUresult(*name) params = nullptr;
/// The client entries as a table of trampolines (the simulator's symbol lookup fills it).
struct ClientApi {
  CAI_SIM_CLIENT_ENTRIES(CAI_DETAIL_CLIENT_FIELD)
};
#undef CAI_DETAIL_CLIENT_FIELD

#define CAI_DETAIL_CLIENT_NAME(name, ...) #name,
inline constexpr const char* client_entry_names[] = {
    CAI_SIM_CLIENT_ENTRIES(CAI_DETAIL_CLIENT_NAME)};
#undef CAI_DETAIL_CLIENT_NAME
inline constexpr std::size_t client_entry_count = std::size(client_entry_names);

}  // namespace cai::device::cu
