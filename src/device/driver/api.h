#pragma once

// Internal: the table of driver entry points that the device layer calls, the floor of the
// layer. One list gives the fields, their types and their names (as operations.h does for the
// operations): CAI_DRIVER_ENTRIES for the CUDA driver API, CAI_SIM_ENTRIES for what only the
// simulated driver has (delays, declared host accesses and tasks, the race detector, call
// counts, error injection). The table is filled by load_driver() from libcuda.so.1 or from the
// simulator (src/device/sim), through the same loader; nothing above it knows which.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <iterator>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "driver/abi.h"

namespace cai::device::cu {

/// One access of a simulated task or of the host: `ndim` dims of `shape` elements of `itemsize`
/// bytes at byte `strides` from `ptr` (ndim 0: the `itemsize` bytes at ptr).
struct CaiSimAccess {
  CUdeviceptr ptr;
  int ndim;
  const std::int64_t* shape;
  const std::int64_t* strides;
  std::size_t itemsize;
  int write;
};

/// A simulated host task: runs on the stream with `host[i]` the host address of accesses[i].ptr
/// (device memory is reached at a private alias, as a GPU reaches it at its device address).
/// Returns null, or a message that the next synchronize reports. Once the launch is accepted,
/// the task runs once and `release(user)` follows it (a refused launch calls neither).
using CaiSimTaskFn = const char* (*)(void* user, const std::uint64_t* host);

/// What the simulated driver keeps, for tests that prove it stays bounded.
struct CaiSimStats {
  std::size_t race_history;  ///< intervals in the race detector's history
  std::size_t clock_slots;   ///< vector-clock slots in use or retired
  std::size_t streams;       ///< streams alive or draining
  std::size_t ipc_mappings;  ///< memory of other processes mapped here
};

}  // namespace cai::device::cu

/// The driver entry points: X(name, version, parameters). `version` is the CUDA version whose
/// ABI cuGetProcAddress resolves at kDriverApiVersion (the driver's PFN_<name>_v<version>).
// clang-format off
#define CAI_DRIVER_ENTRIES(X)                                                                   \
  X(cuGetErrorName, 6000, (CUresult error, const char** text))                                  \
  X(cuGetErrorString, 6000, (CUresult error, const char** text))                                \
  X(cuInit, 2000, (unsigned int flags))                                                         \
  X(cuDriverGetVersion, 2020, (int* version))                                                   \
  X(cuDeviceGet, 2000, (CUdevice* device, int ordinal))                                         \
  X(cuDeviceGetCount, 2000, (int* count))                                                       \
  X(cuDeviceGetName, 2000, (char* name, int length, CUdevice device))                           \
  X(cuDeviceGetAttribute, 2000, (int* value, CUdevice_attribute attribute, CUdevice device))   \
  X(cuDeviceTotalMem, 3020, (std::size_t* bytes, CUdevice device))                             \
  X(cuDeviceGetUuid, 11040, (CUuuid* uuid, CUdevice device))                                    \
  X(cuDevicePrimaryCtxRetain, 7000, (CUcontext* context, CUdevice device))                      \
  X(cuCtxGetCurrent, 4000, (CUcontext* context))                                                \
  X(cuCtxSetCurrent, 4000, (CUcontext context))                                                 \
  X(cuCtxPushCurrent, 4000, (CUcontext context))                                                \
  X(cuCtxPopCurrent, 4000, (CUcontext* context))                                                \
  X(cuCtxGetDevice, 2000, (CUdevice* device))                                                   \
  X(cuCtxSynchronize, 2000, ())                                                                 \
  X(cuMemAlloc, 3020, (CUdeviceptr* ptr, std::size_t bytes))                                   \
  X(cuMemAllocHost, 3020, (void** ptr, std::size_t bytes))                                     \
  X(cuMemAllocManaged, 6000, (CUdeviceptr* ptr, std::size_t bytes, unsigned int flags))        \
  X(cuMemFree, 3020, (CUdeviceptr ptr))                                                         \
  X(cuMemFreeHost, 2000, (void* ptr))                                                           \
  X(cuMemGetInfo, 3020, (std::size_t* free, std::size_t* total))                                \
  X(cuMemHostRegister, 6050, (void* ptr, std::size_t bytes, unsigned int flags))               \
  X(cuMemHostUnregister, 4000, (void* ptr))                                                     \
  X(cuMemHostGetDevicePointer, 3020, (CUdeviceptr* device_ptr, void* ptr, unsigned int flags)) \
  X(cuMemAllocAsync, 11020, (CUdeviceptr* ptr, std::size_t bytes, CUstream stream))            \
  X(cuMemFreeAsync, 11020, (CUdeviceptr ptr, CUstream stream))                                  \
  X(cuPointerGetAttribute, 4000, (void* data, CUpointer_attribute attribute, CUdeviceptr ptr))  \
  X(cuPointerGetAttributes, 7000,                                                               \
    (unsigned int count, CUpointer_attribute* attributes, void** data, CUdeviceptr ptr))        \
  X(cuMemGetAddressRange, 3020, (CUdeviceptr* base, std::size_t* size, CUdeviceptr ptr))       \
  X(cuMemsetD8Async, 3020, (CUdeviceptr dst, unsigned char value, std::size_t bytes,           \
                            CUstream stream))                                                   \
  X(cuMemcpyAsync, 4000, (CUdeviceptr dst, CUdeviceptr src, std::size_t bytes, CUstream stream)) \
  X(cuMemcpyPeerAsync, 4000, (CUdeviceptr dst, CUcontext dst_context, CUdeviceptr src,         \
                              CUcontext src_context, std::size_t bytes, CUstream stream))       \
  X(cuStreamCreate, 2000, (CUstream* stream, unsigned int flags))                              \
  X(cuStreamDestroy, 4000, (CUstream stream))                                                   \
  X(cuStreamSynchronize, 2000, (CUstream stream))                                               \
  X(cuStreamQuery, 2000, (CUstream stream))                                                     \
  X(cuStreamGetCtx, 9020, (CUstream stream, CUcontext* context))                                \
  X(cuStreamWaitEvent, 3020, (CUstream stream, CUevent event, unsigned int flags))             \
  X(cuLaunchHostFunc, 10000, (CUstream stream, CUhostFn fn, void* user_data))                  \
  X(cuEventCreate, 2000, (CUevent* event, unsigned int flags))                                 \
  X(cuEventDestroy, 4000, (CUevent event))                                                      \
  X(cuEventRecord, 2000, (CUevent event, CUstream stream))                                      \
  X(cuEventSynchronize, 2000, (CUevent event))                                                  \
  X(cuEventQuery, 2000, (CUevent event))                                                        \
  X(cuEventElapsedTime, 2000, (float* ms, CUevent start, CUevent end))                         \
  X(cuModuleLoadData, 2000, (CUmodule* module, const void* image))                             \
  X(cuModuleUnload, 2000, (CUmodule module))                                                    \
  X(cuModuleGetFunction, 2000, (CUfunction* function, CUmodule module, const char* name))      \
  X(cuLaunchKernel, 4000,                                                                       \
    (CUfunction function, unsigned int grid_x, unsigned int grid_y, unsigned int grid_z,        \
     unsigned int block_x, unsigned int block_y, unsigned int block_z,                          \
     unsigned int shared_bytes, CUstream stream, void** params, void** extra))                  \
  X(cuIpcGetMemHandle, 4010, (CUipcMemHandle* handle, CUdeviceptr ptr))                        \
  X(cuIpcOpenMemHandle, 11000, (CUdeviceptr* ptr, CUipcMemHandle handle, unsigned int flags))  \
  X(cuIpcCloseMemHandle, 4010, (CUdeviceptr ptr))                                               \
  X(cuIpcGetEventHandle, 4010, (CUipcEventHandle* handle, CUevent event))                      \
  X(cuIpcOpenEventHandle, 4010, (CUevent* event, CUipcEventHandle handle))

/// The simulated driver's own entry points: X(name, parameters). docs/simulator.md.
#define CAI_SIM_ENTRIES(X)                                                                      \
  X(caiSimGetErrorDetail, (const char** detail))                                                \
  X(caiSimDelay, (CUstream stream, double seconds))                                             \
  X(caiSimHostAccess, (const CaiSimAccess* access, const char* what))                          \
  X(caiSimLaunchHostTask, (CUstream stream, const CaiSimAccess* accesses, std::size_t count,  \
                           CaiSimTaskFn fn, void (*release)(void* user), void* user,            \
                           const char* name))                                                   \
  X(caiSimSetRaceDetection, (int on))                                                           \
  X(caiSimGetRaceDetection, (int* on))                                                          \
  X(caiSimForget, (CUdeviceptr ptr, std::size_t bytes))                                         \
  X(caiSimGetStats, (CaiSimStats* stats))                                                       \
  X(caiSimGetCallCounts, (unsigned long long* counts, std::size_t count))                       \
  X(caiSimResetCallCounts, ())                                                                  \
  X(caiSimTimeCalls, (int on))                                                                  \
  X(caiSimGetCallTimes, (unsigned long long* ns, std::size_t count))                            \
  X(caiSimInjectError, (const char* entry, CUresult result, unsigned int skip,                 \
                        unsigned int times))                                                    \
  X(caiSimMemAllocChunked, (CUdeviceptr* ptr, std::size_t chunk_bytes, unsigned int chunks))  \
  X(caiSimMemFreeChunked, (CUdeviceptr ptr))                                                    \
  X(caiSimHostAddress, (void** host, CUdeviceptr ptr))                                          \
  X(caiSimSetDeviceAttribute, (int value, CUdevice_attribute attribute, CUdevice device))
// clang-format on

namespace cai::device::cu {

/// How the simulated driver refuses a call whose accesses race with earlier ones (nothing was
/// enqueued): a code of the driver's enum, so that every client handles it, with a detail
/// (caiSimGetErrorDetail, and stderr) that starts with kSimRaceDetailPrefix.
inline constexpr CUresult kSimRaceResult = CUDA_ERROR_ILLEGAL_STATE;
inline constexpr std::string_view kSimRaceDetailPrefix = "race: ";

/// The CUDA version whose entry-point ABI is requested (cuGetProcAddress); the versions in
/// CAI_DRIVER_ENTRIES are those it resolves to, so the two change together.
inline constexpr int kDriverApiVersion = 12000;

#define CAI_DETAIL_FIELD(name, version, params) CUresult(*name) params = nullptr;
#define CAI_DETAIL_SIM_FIELD(name, params) CUresult(*name) params = nullptr;
/// The driver's entry points.
struct DriverApi {
  CAI_DRIVER_ENTRIES(CAI_DETAIL_FIELD)
};
/// The simulated driver's own entry points (absent from a real driver).
struct SimApi {
  CAI_SIM_ENTRIES(CAI_DETAIL_SIM_FIELD)
};
#undef CAI_DETAIL_FIELD
#undef CAI_DETAIL_SIM_FIELD

#define CAI_DETAIL_NAME(name, ...) #name,
/// The entry names in list order (the order of caiSimGetCallCounts too).
inline constexpr const char* driver_entry_names[] = {CAI_DRIVER_ENTRIES(CAI_DETAIL_NAME)};
inline constexpr const char* sim_entry_names[] = {CAI_SIM_ENTRIES(CAI_DETAIL_NAME)};
#undef CAI_DETAIL_NAME
inline constexpr std::size_t driver_entry_count = std::size(driver_entry_names);
inline constexpr std::size_t sim_entry_count = std::size(sim_entry_names);

/// Finds an exported symbol by name (dlsym on libcuda.so.1, or the simulator's own lookup).
using SymbolLookup = std::function<void*(const char* name)>;

/// A loaded driver: its table and what loading found. Shared by the backends over it.
struct Driver {
  std::string name;   ///< "libcuda.so.1" or "simulator"
  bool ok = false;    ///< usable; else `error` says why
  std::string error;  ///< why not, ending with how to use the simulator
  int version = 0;    ///< cuDriverGetVersion, e.g. 12040
  /// cuInit succeeded: from then on a forked child cannot use the driver (even when loading
  /// failed later).
  bool initialised = false;
  std::vector<CUdevice> devices;
  DriverApi api;
  /// The simulator's own table when `simulated`.
  bool simulated = false;
  SimApi sim;
  /// What must outlive the table (the simulated driver instance); null for libcuda.
  std::shared_ptr<void> keep;
};

/// Fills a Driver through `lookup`: the five plain symbols (cuInit, cuDriverGetVersion,
/// cuGetErrorName, cuGetErrorString, cuGetProcAddress_v2), then every entry through
/// cuGetProcAddress at kDriverApiVersion; the simulator's entries when the driver has them.
/// Checks the version (12.0 or later), cuInit and that there is a device. Never throws but
/// bad_alloc: a failure is reported in `error`.
Driver load_driver(const SymbolLookup& lookup, std::string name);

/// The process's libcuda.so.1 (NVIDIA's, or cai's simulated driver when it is the one the
/// process has): the one already loaded, else the one the library path finds. Loaded once
/// (thread-safe); never closed.
std::shared_ptr<const Driver> libcuda();

/// The folder of cai's simulated driver next to the module holding the backend (the wheel:
/// cai/_sim_driver/libcuda.so.1, the folder holding only it).
inline constexpr const char* kSimDriverFolder = "_sim_driver";

/// Where cai's simulated driver (libcuda.so.1 built from src/device/sim) is: CAI_SIM_DRIVER,
/// else <folder of the module holding the backend>/_sim_driver/, else the install location.
/// Empty when none exists; `tried` then lists the places looked at.
std::string sim_driver_path(std::string* tried = nullptr);

/// cai's simulated driver, loaded once per process (thread-safe): the process's libcuda.so.1
/// when it is this one, else the library at sim_driver_path() (RTLD_LOCAL beside another
/// libcuda.so.1, else RTLD_GLOBAL). The same object for cai and every other driver-API client
/// that finds it. docs/simulator.md, "As libcuda.so.1".
std::shared_ptr<const Driver> sim_driver();

/// "CUDA_ERROR_OUT_OF_MEMORY (out of memory)", or the number when the driver does not know it.
std::string describe(const DriverApi& api, CUresult r);

}  // namespace cai::device::cu
