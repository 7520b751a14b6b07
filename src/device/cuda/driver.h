#pragma once

// Internal: libcuda.so.1 opened with dlopen, the driver entry points the backend uses, and the
// contexts it runs in. Only compiled when the toolkit's headers were found (they give the
// types; nothing links libcuda).

#include <cuda.h>
#include <cudaTypedefs.h>

#include <string>
#include <string_view>
#include <vector>

namespace cai::device::cuda {

/// The CUDA version whose ABI every entry point is requested at (cuGetProcAddress): the
/// PFN_*_v<N> types below are those that version resolves to, so the two must change together.
inline constexpr int kDriverApiVersion = 12000;

/// Entry points, each resolved through cuGetProcAddress at kDriverApiVersion without
/// per-thread-default-stream variants: the backend always passes explicit stream handles.
struct DriverApi {
  PFN_cuGetErrorName_v6000 get_error_name = nullptr;
  PFN_cuGetErrorString_v6000 get_error_string = nullptr;
  PFN_cuInit_v2000 init = nullptr;
  PFN_cuDriverGetVersion_v2020 driver_get_version = nullptr;
  PFN_cuDeviceGet_v2000 device_get = nullptr;
  PFN_cuDeviceGetCount_v2000 device_get_count = nullptr;
  PFN_cuDeviceGetName_v2000 device_get_name = nullptr;
  PFN_cuDeviceGetAttribute_v2000 device_get_attribute = nullptr;
  PFN_cuDeviceTotalMem_v3020 device_total_mem = nullptr;
  PFN_cuDevicePrimaryCtxRetain_v7000 device_primary_ctx_retain = nullptr;
  PFN_cuCtxGetCurrent_v4000 ctx_get_current = nullptr;
  PFN_cuCtxSetCurrent_v4000 ctx_set_current = nullptr;
  PFN_cuCtxPushCurrent_v4000 ctx_push_current = nullptr;
  PFN_cuCtxPopCurrent_v4000 ctx_pop_current = nullptr;
  PFN_cuCtxGetDevice_v2000 ctx_get_device = nullptr;
  PFN_cuCtxSynchronize_v2000 ctx_synchronize = nullptr;
  PFN_cuMemAlloc_v3020 mem_alloc = nullptr;
  PFN_cuMemAllocHost_v3020 mem_alloc_host = nullptr;
  PFN_cuMemAllocManaged_v6000 mem_alloc_managed = nullptr;
  PFN_cuMemFree_v3020 mem_free = nullptr;
  PFN_cuMemFreeHost_v2000 mem_free_host = nullptr;
  PFN_cuMemAllocAsync_v11020 mem_alloc_async = nullptr;
  PFN_cuMemFreeAsync_v11020 mem_free_async = nullptr;
  PFN_cuPointerGetAttributes_v7000 pointer_get_attributes = nullptr;
  PFN_cuMemsetD8Async_v3020 memset_d8_async = nullptr;
  PFN_cuMemcpyAsync_v4000 memcpy_async = nullptr;
  PFN_cuStreamCreate_v2000 stream_create = nullptr;
  PFN_cuStreamDestroy_v4000 stream_destroy = nullptr;
  PFN_cuStreamSynchronize_v2000 stream_synchronize = nullptr;
  PFN_cuStreamQuery_v2000 stream_query = nullptr;
  PFN_cuStreamGetCtx_v9020 stream_get_ctx = nullptr;
  PFN_cuStreamWaitEvent_v3020 stream_wait_event = nullptr;
  PFN_cuEventCreate_v2000 event_create = nullptr;
  PFN_cuEventDestroy_v4000 event_destroy = nullptr;
  PFN_cuEventRecord_v2000 event_record = nullptr;
  PFN_cuEventSynchronize_v2000 event_synchronize = nullptr;
  PFN_cuEventQuery_v2000 event_query = nullptr;
  PFN_cuEventElapsedTime_v2000 event_elapsed_time = nullptr;
  PFN_cuModuleLoadData_v2000 module_load_data = nullptr;
  PFN_cuModuleGetFunction_v2000 module_get_function = nullptr;
  PFN_cuLaunchKernel_v4000 launch_kernel = nullptr;
  // Several devices and several processes (docs/scale-out.md).
  PFN_cuDeviceGetUuid_v11040 device_get_uuid = nullptr;
  PFN_cuMemcpyPeerAsync_v4000 memcpy_peer_async = nullptr;
  PFN_cuIpcGetMemHandle_v4010 ipc_get_mem_handle = nullptr;
  PFN_cuIpcOpenMemHandle_v11000 ipc_open_mem_handle = nullptr;
  PFN_cuIpcCloseMemHandle_v4010 ipc_close_mem_handle = nullptr;
  PFN_cuIpcGetEventHandle_v4010 ipc_get_event_handle = nullptr;
  PFN_cuIpcOpenEventHandle_v4010 ipc_open_event_handle = nullptr;
};

/// The outcome of loading the driver, computed once per process on first use.
struct DriverState {
  bool ok = false;
  std::string error;              ///< why not, ending with how to use the simulator
  int version = 0;                ///< cuDriverGetVersion, e.g. 12040
  std::vector<CUdevice> devices;  ///< by ordinal
  DriverApi api;
};

/// Loads libcuda.so.1, initialises it and counts devices, once (thread-safe); never throws.
const DriverState& driver_state() noexcept;

/// The loaded driver's entry points; throws Error(device_error) with driver_state().error.
const DriverApi& api();

/// Throws Error(device_error): "CUDA backend: <function> failed: <NAME> (<text>)<detail>".
[[noreturn]] void fail(CUresult r, std::string_view function, std::string_view detail = {});

inline void check(CUresult r, std::string_view function) {
  if (r != CUDA_SUCCESS) fail(r, function);
}

/// "CUDA_ERROR_OUT_OF_MEMORY (out of memory)", or the number when the driver does not know it.
std::string describe(CUresult r);

/// The CUdevice of an ordinal; throws Error(index_error) when out of range.
CUdevice device_of(int ordinal, std::string_view where);
/// The ordinal of a CUdevice (-1 when unknown).
int ordinal_of(CUdevice dev);

/// The primary context of a device, retained on first use and kept for the process lifetime
/// (releasing it from static destructors would race the driver's own teardown).
CUcontext primary_context(int ordinal);

/// The calling thread's current context, making device 0's primary context current first
/// when the thread has none (what the runtime API does on first use).
CUcontext current_context();

/// The context a stream belongs to; the current one for the legacy and per-thread streams.
CUcontext stream_context(CUstream s);

/// The ordinal of the device a context runs on.
int context_device(CUcontext ctx);

/// Makes a context current for a scope when it is not already, then restores the previous.
class ScopedContext {
 public:
  explicit ScopedContext(CUcontext ctx);
  ~ScopedContext();
  ScopedContext(const ScopedContext&) = delete;
  ScopedContext& operator=(const ScopedContext&) = delete;

 private:
  bool pushed_ = false;
};

}  // namespace cai::device::cuda
