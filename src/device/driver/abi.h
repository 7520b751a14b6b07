#pragma once

// Internal: the part of the CUDA driver's C ABI that cai calls, declared here from the driver
// API's documented types and values, so that the backend compiles without the CUDA toolkit
// (libcuda.so.1 is opened at run time, as projects that dlopen the driver do). Only what cai
// uses is declared. tests/cpp/device/test_driver_abi.cpp checks every value, size and entry
// point signature against the toolkit's cuda.h wherever one is installed.
//
// Names are the driver's own, inside cai::device::cu; those that cuda.h defines as macros
// (CU_STREAM_LEGACY, CU_STREAM_PER_THREAD, CU_IPC_HANDLE_SIZE) get other names so that this
// header and cuda.h can meet in one translation unit.

#include <cstddef>
#include <cstdint>

// The opaque handle types at global scope, as cuda.h declares them, so that a handle of this
// header and one of cuda.h are the same type.
struct CUctx_st;
struct CUmod_st;
struct CUfunc_st;
struct CUstream_st;
struct CUevent_st;
struct CUmemPoolHandle_st;
struct CUgreenCtx_st;

namespace cai::device::cu {

/// Every entry point's return code (the driver's values; the simulated driver returns no other).
enum CUresult : int {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_INVALID_VALUE = 1,
  CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ERROR_NOT_INITIALIZED = 3,
  CUDA_ERROR_DEINITIALIZED = 4,
  CUDA_ERROR_STUB_LIBRARY = 34,
  CUDA_ERROR_NO_DEVICE = 100,
  CUDA_ERROR_INVALID_DEVICE = 101,
  CUDA_ERROR_INVALID_IMAGE = 200,
  CUDA_ERROR_INVALID_CONTEXT = 201,
  CUDA_ERROR_MAP_FAILED = 205,
  CUDA_ERROR_ALREADY_MAPPED = 208,
  CUDA_ERROR_NOT_MAPPED = 211,
  CUDA_ERROR_INVALID_PTX = 218,
  CUDA_ERROR_UNSUPPORTED_PTX_VERSION = 222,
  CUDA_ERROR_OPERATING_SYSTEM = 304,
  CUDA_ERROR_INVALID_HANDLE = 400,
  CUDA_ERROR_ILLEGAL_STATE = 401,
  CUDA_ERROR_NOT_FOUND = 500,
  CUDA_ERROR_NOT_READY = 600,
  CUDA_ERROR_ILLEGAL_ADDRESS = 700,
  CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES = 701,
  CUDA_ERROR_CONTEXT_IS_DESTROYED = 709,
  CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED = 712,
  CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED = 713,
  CUDA_ERROR_LAUNCH_FAILED = 719,
  CUDA_ERROR_NOT_PERMITTED = 800,
  CUDA_ERROR_NOT_SUPPORTED = 801,
  CUDA_ERROR_UNKNOWN = 999,
};

using CUdevice = int;
using CUdeviceptr = unsigned long long;
using cuuint64_t = std::uint64_t;
using CUcontext = CUctx_st*;
using CUmodule = CUmod_st*;
using CUfunction = CUfunc_st*;
using CUstream = CUstream_st*;
using CUevent = CUevent_st*;
using CUmemoryPool = CUmemPoolHandle_st*;
using CUgreenCtx = CUgreenCtx_st*;
using CUhostFn = void (*)(void* user_data);

struct CUuuid {
  char bytes[16];
};

inline constexpr std::size_t kIpcHandleSize = 64;  ///< CU_IPC_HANDLE_SIZE
struct CUipcMemHandle {
  char reserved[kIpcHandleSize];
};
struct CUipcEventHandle {
  char reserved[kIpcHandleSize];
};

/// CU_STREAM_LEGACY and CU_STREAM_PER_THREAD: the default streams as explicit handles (the CAI
/// writes them as 1 and 2 for the same reason).
inline CUstream stream_legacy() noexcept {
  return reinterpret_cast<CUstream>(std::uintptr_t{1});
}
inline CUstream stream_per_thread() noexcept {
  return reinterpret_cast<CUstream>(std::uintptr_t{2});
}

enum CUdevice_attribute : int {
  CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
  CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY = 19,
  CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING = 41,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
  CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY = 83,
  CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM = 91,
  CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED = 113,
  CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED = 115,
};

enum CUpointer_attribute : int {
  CU_POINTER_ATTRIBUTE_CONTEXT = 1,
  CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2,
  CU_POINTER_ATTRIBUTE_DEVICE_POINTER = 3,
  CU_POINTER_ATTRIBUTE_HOST_POINTER = 4,
  CU_POINTER_ATTRIBUTE_IS_MANAGED = 8,
  CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9,
  CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE = 10,
  CU_POINTER_ATTRIBUTE_RANGE_START_ADDR = 11,
  CU_POINTER_ATTRIBUTE_RANGE_SIZE = 12,
  CU_POINTER_ATTRIBUTE_MAPPED = 13,
  CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE = 17,
  CU_POINTER_ATTRIBUTE_MAPPING_SIZE = 18,
  CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR = 19,
};

enum CUmemorytype : int {
  CU_MEMORYTYPE_HOST = 1,
  CU_MEMORYTYPE_DEVICE = 2,
  CU_MEMORYTYPE_ARRAY = 3,
  CU_MEMORYTYPE_UNIFIED = 4,
};

enum CUstream_flags : int { CU_STREAM_DEFAULT = 0, CU_STREAM_NON_BLOCKING = 1 };
enum CUevent_flags : int {
  CU_EVENT_DEFAULT = 0,
  CU_EVENT_BLOCKING_SYNC = 1,
  CU_EVENT_DISABLE_TIMING = 2,
  CU_EVENT_INTERPROCESS = 4,
};
enum CUmemAttach_flags : int { CU_MEM_ATTACH_GLOBAL = 1, CU_MEM_ATTACH_HOST = 2 };
enum CUipcMem_flags : int { CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 1 };
/// cuMemHostRegister's flags (macros in cuda.h).
inline constexpr unsigned kMemHostRegisterPortable = 1;
inline constexpr unsigned kMemHostRegisterDeviceMap = 2;
inline constexpr unsigned kMemHostRegisterReadOnly = 8;

enum CUdriverProcAddress_flags : int {
  CU_GET_PROC_ADDRESS_DEFAULT = 0,
  CU_GET_PROC_ADDRESS_LEGACY_STREAM = 1,
  CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM = 2,
};
enum CUdriverProcAddressQueryResult : int {
  CU_GET_PROC_ADDRESS_SUCCESS = 0,
  CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND = 1,
  CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT = 2,
};

/// cuGetProcAddress_v2 (CUDA 12.0), through which every other entry point is found.
using GetProcAddressFn = CUresult (*)(const char* symbol, void** fn, int version, cuuint64_t flags,
                                      CUdriverProcAddressQueryResult* found);

static_assert(sizeof(CUresult) == 4 && sizeof(CUdeviceptr) == 8 && sizeof(CUuuid) == 16);
static_assert(sizeof(CUipcMemHandle) == 64 && sizeof(CUipcEventHandle) == 64);

}  // namespace cai::device::cu
