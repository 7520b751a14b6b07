#ifndef CAI_HAVE_CUDA_HEADERS
#define CAI_HAVE_CUDA_HEADERS 0
#endif

#if CAI_HAVE_CUDA_HEADERS

#include "device/cuda/driver.h"

#include <dlfcn.h>

#include <mutex>
#include <unordered_map>

#include "cai/core/error.h"

namespace cai::device::cuda {

namespace {

constexpr std::string_view kUseSim = "; set CAI_BACKEND=sim to use the simulator";

std::string version_text(int v) {
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

// Error text before api() exists: the loader holds the two reporting functions itself.
std::string describe_with(const DriverApi& a, CUresult r) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (a.get_error_name == nullptr || a.get_error_name(r, &name) != CUDA_SUCCESS) name = nullptr;
  if (a.get_error_string == nullptr || a.get_error_string(r, &text) != CUDA_SUCCESS) {
    text = nullptr;
  }
  std::string s = name ? name : "CUresult " + std::to_string(static_cast<int>(r));
  if (text) s += std::string(" (") + text + ")";
  return s;
}

struct Symbol {
  const char* name;
  void** slot;
};

DriverState load() {
  DriverState st;
  DriverApi& a = st.api;
  // RTLD_LOCAL: the driver's symbols stay out of the global namespace; we never dlclose it.
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    st.error = "CUDA backend: libcuda.so.1 not found (no NVIDIA driver on this machine";
    if (why != nullptr) st.error += std::string(": ") + why;
    st.error += ")" + std::string(kUseSim);
    return st;
  }
  // These five are exported under their plain names by every driver cuGetProcAddress_v2
  // exists in (CUDA 12.0+); everything else goes through cuGetProcAddress.
  auto get_proc = reinterpret_cast<PFN_cuGetProcAddress_v12000>(dlsym(lib, "cuGetProcAddress_v2"));
  a.get_error_name = reinterpret_cast<PFN_cuGetErrorName_v6000>(dlsym(lib, "cuGetErrorName"));
  a.get_error_string = reinterpret_cast<PFN_cuGetErrorString_v6000>(dlsym(lib, "cuGetErrorString"));
  a.init = reinterpret_cast<PFN_cuInit_v2000>(dlsym(lib, "cuInit"));
  a.driver_get_version =
      reinterpret_cast<PFN_cuDriverGetVersion_v2020>(dlsym(lib, "cuDriverGetVersion"));
  if (a.init == nullptr || a.driver_get_version == nullptr) {
    st.error = "CUDA backend: libcuda.so.1 does not export cuInit (not an NVIDIA driver)" +
               std::string(kUseSim);
    return st;
  }
  if (CUresult r = a.driver_get_version(&st.version); r != CUDA_SUCCESS) {
    if (r == CUDA_ERROR_STUB_LIBRARY) {
      // The toolkit's link-time stub found first on the library path: it only returns this.
      Dl_info info{};
      const bool named = dladdr(reinterpret_cast<void*>(a.init), &info) != 0 && info.dli_fname;
      st.error = "CUDA backend: libcuda.so.1" +
                 (named ? " (" + std::string(info.dli_fname) + ")" : std::string()) +
                 " is the CUDA toolkit's stub library, not an NVIDIA driver; remove its "
                 "directory from the library path" +
                 std::string(kUseSim);
      return st;
    }
    st.error =
        "CUDA backend: cuDriverGetVersion failed: " + describe_with(a, r) + std::string(kUseSim);
    return st;
  }
  if (get_proc == nullptr || st.version < kDriverApiVersion) {
    st.error = "CUDA backend: the NVIDIA driver supports CUDA " + version_text(st.version) +
               ", cai needs " + version_text(kDriverApiVersion) + " or later; update the driver" +
               std::string(kUseSim);
    return st;
  }
  if (CUresult r = a.init(0); r != CUDA_SUCCESS) {
    std::string what = r == CUDA_ERROR_NO_DEVICE ? "no CUDA device found"
                       : r == CUDA_ERROR_STUB_LIBRARY
                           ? "libcuda.so.1 is the toolkit's stub library, not a driver"
                           : "the driver failed to initialise";
    st.error =
        "CUDA backend: cuInit failed (" + what + "): " + describe_with(a, r) + std::string(kUseSim);
    return st;
  }

  const Symbol symbols[] = {
      {"cuDeviceGet", reinterpret_cast<void**>(&a.device_get)},
      {"cuDeviceGetCount", reinterpret_cast<void**>(&a.device_get_count)},
      {"cuDeviceGetName", reinterpret_cast<void**>(&a.device_get_name)},
      {"cuDeviceGetAttribute", reinterpret_cast<void**>(&a.device_get_attribute)},
      {"cuDeviceTotalMem", reinterpret_cast<void**>(&a.device_total_mem)},
      {"cuDevicePrimaryCtxRetain", reinterpret_cast<void**>(&a.device_primary_ctx_retain)},
      {"cuCtxGetCurrent", reinterpret_cast<void**>(&a.ctx_get_current)},
      {"cuCtxSetCurrent", reinterpret_cast<void**>(&a.ctx_set_current)},
      {"cuCtxPushCurrent", reinterpret_cast<void**>(&a.ctx_push_current)},
      {"cuCtxPopCurrent", reinterpret_cast<void**>(&a.ctx_pop_current)},
      {"cuCtxGetDevice", reinterpret_cast<void**>(&a.ctx_get_device)},
      {"cuCtxSynchronize", reinterpret_cast<void**>(&a.ctx_synchronize)},
      {"cuMemAlloc", reinterpret_cast<void**>(&a.mem_alloc)},
      {"cuMemAllocHost", reinterpret_cast<void**>(&a.mem_alloc_host)},
      {"cuMemAllocManaged", reinterpret_cast<void**>(&a.mem_alloc_managed)},
      {"cuMemFree", reinterpret_cast<void**>(&a.mem_free)},
      {"cuMemFreeHost", reinterpret_cast<void**>(&a.mem_free_host)},
      {"cuMemAllocAsync", reinterpret_cast<void**>(&a.mem_alloc_async)},
      {"cuMemFreeAsync", reinterpret_cast<void**>(&a.mem_free_async)},
      {"cuPointerGetAttributes", reinterpret_cast<void**>(&a.pointer_get_attributes)},
      {"cuMemsetD8Async", reinterpret_cast<void**>(&a.memset_d8_async)},
      {"cuMemcpyAsync", reinterpret_cast<void**>(&a.memcpy_async)},
      {"cuStreamCreate", reinterpret_cast<void**>(&a.stream_create)},
      {"cuStreamDestroy", reinterpret_cast<void**>(&a.stream_destroy)},
      {"cuStreamSynchronize", reinterpret_cast<void**>(&a.stream_synchronize)},
      {"cuStreamQuery", reinterpret_cast<void**>(&a.stream_query)},
      {"cuStreamGetCtx", reinterpret_cast<void**>(&a.stream_get_ctx)},
      {"cuStreamWaitEvent", reinterpret_cast<void**>(&a.stream_wait_event)},
      {"cuEventCreate", reinterpret_cast<void**>(&a.event_create)},
      {"cuEventDestroy", reinterpret_cast<void**>(&a.event_destroy)},
      {"cuEventRecord", reinterpret_cast<void**>(&a.event_record)},
      {"cuEventSynchronize", reinterpret_cast<void**>(&a.event_synchronize)},
      {"cuEventQuery", reinterpret_cast<void**>(&a.event_query)},
      {"cuEventElapsedTime", reinterpret_cast<void**>(&a.event_elapsed_time)},
      {"cuModuleLoadData", reinterpret_cast<void**>(&a.module_load_data)},
      {"cuModuleGetFunction", reinterpret_cast<void**>(&a.module_get_function)},
      {"cuLaunchKernel", reinterpret_cast<void**>(&a.launch_kernel)},
      {"cuDeviceGetUuid", reinterpret_cast<void**>(&a.device_get_uuid)},
      {"cuMemcpyPeerAsync", reinterpret_cast<void**>(&a.memcpy_peer_async)},
      {"cuIpcGetMemHandle", reinterpret_cast<void**>(&a.ipc_get_mem_handle)},
      {"cuIpcOpenMemHandle", reinterpret_cast<void**>(&a.ipc_open_mem_handle)},
      {"cuIpcCloseMemHandle", reinterpret_cast<void**>(&a.ipc_close_mem_handle)},
      {"cuIpcGetEventHandle", reinterpret_cast<void**>(&a.ipc_get_event_handle)},
      {"cuIpcOpenEventHandle", reinterpret_cast<void**>(&a.ipc_open_event_handle)},
  };
  for (const Symbol& s : symbols) {
    CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    CUresult r =
        get_proc(s.name, s.slot, kDriverApiVersion, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &found);
    if (r != CUDA_SUCCESS || found != CU_GET_PROC_ADDRESS_SUCCESS || *s.slot == nullptr) {
      st.error = std::string("CUDA backend: cuGetProcAddress(\"") + s.name + "\", " +
                 std::to_string(kDriverApiVersion) + ") failed: " +
                 (r != CUDA_SUCCESS ? describe_with(a, r)
                                    : "symbol status " + std::to_string(static_cast<int>(found))) +
                 std::string(kUseSim);
      return st;
    }
  }

  int count = 0;
  if (CUresult r = a.device_get_count(&count); r != CUDA_SUCCESS) {
    st.error =
        "CUDA backend: cuDeviceGetCount failed: " + describe_with(a, r) + std::string(kUseSim);
    return st;
  }
  if (count <= 0) {
    st.error = "CUDA backend: the NVIDIA driver found no CUDA device" + std::string(kUseSim);
    return st;
  }
  for (int i = 0; i < count; ++i) {
    CUdevice dev = 0;
    if (CUresult r = a.device_get(&dev, i); r != CUDA_SUCCESS) {
      st.error = "CUDA backend: cuDeviceGet(" + std::to_string(i) +
                 ") failed: " + describe_with(a, r) + std::string(kUseSim);
      return st;
    }
    st.devices.push_back(dev);
  }
  st.ok = true;
  return st;
}

}  // namespace

const DriverState& driver_state() noexcept {
  // A function-local static: initialised once, thread-safe. load() only throws bad_alloc,
  // which noexcept turns into terminate, as any allocation failure this early would.
  static const DriverState state = load();
  return state;
}

const DriverApi& api() {
  const DriverState& st = driver_state();
  if (!st.ok) throw_error(Errc::device_error, st.error);
  return st.api;
}

std::string describe(CUresult r) {
  return describe_with(driver_state().api, r);
}

void fail(CUresult r, std::string_view function, std::string_view detail) {
  throw_error(Errc::device_error, "CUDA backend: " + std::string(function) +
                                      " failed: " + describe(r) + std::string(detail));
}

CUdevice device_of(int ordinal, std::string_view where) {
  const DriverState& st = driver_state();
  if (ordinal < 0 || static_cast<std::size_t>(ordinal) >= st.devices.size()) {
    throw_error(Errc::index_error, std::string(where) + ": device " + std::to_string(ordinal) +
                                       " out of range (" + std::to_string(st.devices.size()) +
                                       " CUDA devices)");
  }
  return st.devices[static_cast<std::size_t>(ordinal)];
}

int ordinal_of(CUdevice dev) {
  const std::vector<CUdevice>& devs = driver_state().devices;
  for (std::size_t i = 0; i < devs.size(); ++i) {
    if (devs[i] == dev) return static_cast<int>(i);
  }
  return -1;
}

CUcontext primary_context(int ordinal) {
  static std::mutex mutex;
  static std::unordered_map<int, CUcontext> retained;
  CUdevice dev = device_of(ordinal, "primary_context()");
  std::lock_guard lock(mutex);
  auto it = retained.find(ordinal);
  if (it != retained.end()) return it->second;
  CUcontext ctx = nullptr;
  check(api().device_primary_ctx_retain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  retained.emplace(ordinal, ctx);
  return ctx;
}

CUcontext current_context() {
  const DriverApi& a = api();
  CUcontext ctx = nullptr;
  check(a.ctx_get_current(&ctx), "cuCtxGetCurrent");
  if (ctx != nullptr) return ctx;
  ctx = primary_context(0);
  check(a.ctx_set_current(ctx), "cuCtxSetCurrent");
  return ctx;
}

CUcontext stream_context(CUstream s) {
  if (s == nullptr || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD) {
    return current_context();
  }
  CUcontext ctx = nullptr;
  check(api().stream_get_ctx(s, &ctx), "cuStreamGetCtx");
  return ctx;
}

int context_device(CUcontext ctx) {
  // Asked inside the context (no cache: a destroyed context's address can be reused).
  ScopedContext scope(ctx);
  CUdevice dev = 0;
  check(api().ctx_get_device(&dev), "cuCtxGetDevice");
  return ordinal_of(dev);
}

ScopedContext::ScopedContext(CUcontext ctx) {
  const DriverApi& a = api();
  CUcontext cur = nullptr;
  check(a.ctx_get_current(&cur), "cuCtxGetCurrent");
  if (cur == ctx) return;
  check(a.ctx_push_current(ctx), "cuCtxPushCurrent");
  pushed_ = true;
}

ScopedContext::~ScopedContext() {
  if (!pushed_) return;
  CUcontext popped = nullptr;
  // Nothing useful can be done about a failure here; the context stack is the driver's.
  (void)driver_state().api.ctx_pop_current(&popped);
}

}  // namespace cai::device::cuda

#endif  // CAI_HAVE_CUDA_HEADERS
