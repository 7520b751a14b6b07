// src/device/driver/abi.h declares the part of the driver ABI that cai calls, so that the
// backend builds without the toolkit. This file checks each declaration against the toolkit's
// own cuda.h and cudaTypedefs.h: built only where they are found (tests/cpp/CMakeLists.txt),
// and most checks are static_asserts, so a wrong value or signature fails the build.

#include <cuda.h>
#include <cudaProfilerTypedefs.h>
#include <cudaTypedefs.h>
#include <gtest/gtest.h>

#include <concepts>
#include <type_traits>

#include "driver/api.h"
#include "sim/sim_driver.h"

namespace {

namespace cu = cai::device::cu;

// What the C ABI sees of a type: enums and integers by size (cuda.h's enums and cai's have
// different names but must be passed alike), complete structs by size and alignment, pointers
// and functions element by element. The opaque handles are the same global structs in both.
template <std::size_t Size, std::size_t Align>
struct Blob {};
template <std::size_t Size>
struct Int {};

template <class T>
concept Complete = requires {
  sizeof(T);
};

template <class T>
struct Abi {
  using type = T;
};
template <class T>
requires(std::is_enum_v<T> || std::is_integral_v<T>) struct Abi<T> {
  using type = Int<sizeof(T)>;
};
template <class T>
requires(std::is_class_v<T>&& Complete<T>) struct Abi<T> {
  using type = Blob<sizeof(T), alignof(T)>;
};
template <class T>
struct Abi<T*> {
  using type = typename Abi<T>::type*;
};
template <class T>
struct Abi<const T> {
  using type = const typename Abi<T>::type;
};
template <class R, class... A>
struct Abi<R (*)(A...)> {
  using type = typename Abi<R>::type (*)(typename Abi<A>::type...);
};
template <class A, class B>
inline constexpr bool same_abi = std::is_same_v<typename Abi<A>::type, typename Abi<B>::type>;

// Every entry point against the driver's PFN type of the version cuGetProcAddress resolves.
#define CAI_CHECK_ENTRY(name, version, params)                                    \
  static_assert(same_abi<decltype(cu::DriverApi::name), PFN_##name##_v##version>, \
                #name " differs from PFN_" #name "_v" #version " in cudaTypedefs.h");
CAI_DRIVER_ENTRIES(CAI_CHECK_ENTRY)
#undef CAI_CHECK_ENTRY
static_assert(same_abi<cu::GetProcAddressFn, PFN_cuGetProcAddress_v12000>);

// Every row of the simulated driver's ABI table (what libcuda.so.1 exports under each version)
// against the PFN type of its version; per-thread rows against the _ptsz / _ptds one.
template <class T>
struct Function;
template <class... A>
struct Function<cu::CUresult (cai::device::sim::SimDriver::*)(A...)> {
  using type = cu::CUresult (*)(A...);
};
template <auto M>
using FunctionOf = typename Function<decltype(M)>::type;
using cai::device::sim::SimDriver;
#define CAI_CHECK_ROW(name, version, symbol)                                     \
  static_assert(same_abi<FunctionOf<&SimDriver::name>, PFN_##name##_v##version>, \
                #symbol " differs from PFN_" #name "_v" #version);
#define CAI_CHECK_ADAPTER(name, version, symbol, params)                           \
  static_assert(same_abi<FunctionOf<&SimDriver::symbol>, PFN_##name##_v##version>, \
                #symbol " differs from PFN_" #name "_v" #version);
#define CAI_CHECK_PER_THREAD(name, version, kind, symbol, member)                           \
  static_assert(same_abi<FunctionOf<&SimDriver::member>, PFN_##name##_v##version##_##kind>, \
                #symbol " differs from PFN_" #name "_v" #version "_" #kind);
CAI_SIM_ABI_TABLE(CAI_CHECK_ROW, CAI_CHECK_ADAPTER, CAI_CHECK_PER_THREAD)
#undef CAI_CHECK_ROW
#undef CAI_CHECK_ADAPTER
#undef CAI_CHECK_PER_THREAD
static_assert(cu::kDriverApiVersion >= 12000, "cuGetProcAddress_v2 is CUDA 12.0's");

// The handle types are cuda.h's own.
static_assert(std::is_same_v<cu::CUcontext, ::CUcontext> &&
              std::is_same_v<cu::CUstream, ::CUstream>);
static_assert(std::is_same_v<cu::CUevent, ::CUevent> && std::is_same_v<cu::CUmodule, ::CUmodule>);
static_assert(std::is_same_v<cu::CUfunction, ::CUfunction>);
static_assert(std::is_same_v<cu::CUmemoryPool, ::CUmemoryPool>);
static_assert(std::is_same_v<cu::CUgreenCtx, ::CUgreenCtx>);
static_assert(std::is_same_v<cu::CUhostFn, ::CUhostFn>);
static_assert(std::is_same_v<cu::CUdeviceptr, ::CUdeviceptr> &&
              std::is_same_v<cu::CUdevice, ::CUdevice>);
static_assert(sizeof(cu::CUuuid) == sizeof(::CUuuid));
static_assert(sizeof(cu::CUipcMemHandle) == sizeof(::CUipcMemHandle));
static_assert(sizeof(cu::CUipcEventHandle) == sizeof(::CUipcEventHandle));
static_assert(cu::kIpcHandleSize == CU_IPC_HANDLE_SIZE);

// Every value abi.h declares.
#define CAI_SAME(name) \
  static_assert(static_cast<long long>(cu::name) == static_cast<long long>(::name), #name);
CAI_SAME(CUDA_SUCCESS)
CAI_SAME(CUDA_ERROR_INVALID_VALUE)
CAI_SAME(CUDA_ERROR_OUT_OF_MEMORY)
CAI_SAME(CUDA_ERROR_NOT_INITIALIZED)
CAI_SAME(CUDA_ERROR_DEINITIALIZED)
CAI_SAME(CUDA_ERROR_STUB_LIBRARY)
CAI_SAME(CUDA_ERROR_NO_DEVICE)
CAI_SAME(CUDA_ERROR_INVALID_DEVICE)
CAI_SAME(CUDA_ERROR_INVALID_IMAGE)
CAI_SAME(CUDA_ERROR_INVALID_CONTEXT)
CAI_SAME(CUDA_ERROR_MAP_FAILED)
CAI_SAME(CUDA_ERROR_ALREADY_MAPPED)
CAI_SAME(CUDA_ERROR_NOT_MAPPED)
CAI_SAME(CUDA_ERROR_INVALID_PTX)
CAI_SAME(CUDA_ERROR_UNSUPPORTED_PTX_VERSION)
CAI_SAME(CUDA_ERROR_OPERATING_SYSTEM)
CAI_SAME(CUDA_ERROR_INVALID_HANDLE)
CAI_SAME(CUDA_ERROR_ILLEGAL_STATE)
CAI_SAME(CUDA_ERROR_NOT_FOUND)
CAI_SAME(CUDA_ERROR_NOT_READY)
CAI_SAME(CUDA_ERROR_ILLEGAL_ADDRESS)
CAI_SAME(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES)
CAI_SAME(CUDA_ERROR_CONTEXT_IS_DESTROYED)
CAI_SAME(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED)
CAI_SAME(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED)
CAI_SAME(CUDA_ERROR_LAUNCH_FAILED)
CAI_SAME(CUDA_ERROR_NOT_PERMITTED)
CAI_SAME(CUDA_ERROR_NOT_SUPPORTED)
CAI_SAME(CUDA_ERROR_UNKNOWN)
CAI_SAME(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
CAI_SAME(CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY)
CAI_SAME(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING)
CAI_SAME(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
CAI_SAME(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
CAI_SAME(CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY)
CAI_SAME(CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM)
CAI_SAME(CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED)
CAI_SAME(CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED)
CAI_SAME(CU_POINTER_ATTRIBUTE_CONTEXT)
CAI_SAME(CU_POINTER_ATTRIBUTE_MEMORY_TYPE)
CAI_SAME(CU_POINTER_ATTRIBUTE_DEVICE_POINTER)
CAI_SAME(CU_POINTER_ATTRIBUTE_HOST_POINTER)
CAI_SAME(CU_POINTER_ATTRIBUTE_IS_MANAGED)
CAI_SAME(CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL)
CAI_SAME(CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE)
CAI_SAME(CU_POINTER_ATTRIBUTE_RANGE_START_ADDR)
CAI_SAME(CU_POINTER_ATTRIBUTE_RANGE_SIZE)
CAI_SAME(CU_POINTER_ATTRIBUTE_MAPPED)
CAI_SAME(CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE)
CAI_SAME(CU_POINTER_ATTRIBUTE_MAPPING_SIZE)
CAI_SAME(CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR)
CAI_SAME(CU_MEMORYTYPE_HOST)
CAI_SAME(CU_MEMORYTYPE_DEVICE)
CAI_SAME(CU_MEMORYTYPE_ARRAY)
CAI_SAME(CU_MEMORYTYPE_UNIFIED)
CAI_SAME(CU_STREAM_DEFAULT)
CAI_SAME(CU_STREAM_NON_BLOCKING)
CAI_SAME(CU_EVENT_DEFAULT)
CAI_SAME(CU_EVENT_BLOCKING_SYNC)
CAI_SAME(CU_EVENT_DISABLE_TIMING)
CAI_SAME(CU_EVENT_INTERPROCESS)
CAI_SAME(CU_MEM_ATTACH_GLOBAL)
CAI_SAME(CU_MEM_ATTACH_HOST)
CAI_SAME(CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)
CAI_SAME(CU_GET_PROC_ADDRESS_DEFAULT)
CAI_SAME(CU_GET_PROC_ADDRESS_LEGACY_STREAM)
CAI_SAME(CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)
CAI_SAME(CU_GET_PROC_ADDRESS_SUCCESS)
CAI_SAME(CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND)
CAI_SAME(CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT)
#undef CAI_SAME
static_assert(cu::kMemHostRegisterPortable == CU_MEMHOSTREGISTER_PORTABLE);
static_assert(cu::kMemHostRegisterDeviceMap == CU_MEMHOSTREGISTER_DEVICEMAP);
static_assert(cu::kMemHostRegisterReadOnly == CU_MEMHOSTREGISTER_READ_ONLY);

// The simulator reports a race with a code of the driver's enum.
static_assert(cu::kSimRaceResult == ::CUDA_ERROR_ILLEGAL_STATE);

// The two default-stream handles are macros in cuda.h (casts, not constant expressions).
TEST(DriverAbi, DefaultStreamHandlesAreTheDrivers) {
  EXPECT_EQ(cu::stream_legacy(), CU_STREAM_LEGACY);
  EXPECT_EQ(cu::stream_per_thread(), CU_STREAM_PER_THREAD);
}

TEST(DriverAbi, EveryEntryIsCheckedAgainstTheToolkit) {
  // The static_asserts above ran for each of these; the count guards against an empty list.
  EXPECT_GE(cu::driver_entry_count, 50u);
  EXPECT_GE(CUDA_VERSION, cu::kDriverApiVersion);
}

}  // namespace
