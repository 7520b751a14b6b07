// The simulated driver's memory entry points for other driver-API clients (client_entries.h):
// synchronous and typed copies, memsets of 8, 16 and 32 bits, cuMemHostAlloc and
// its queries, and the default memory pool of each device.

#include <algorithm>
#include <cstring>
#include <string>

#include "cai/core/error.h"
#include "sim/sim_driver.h"
#include "sim/sim_internal.h"

namespace cai::device::sim {

namespace {

std::uint64_t address(const void* p) {
  return static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(p));
}

}  // namespace

bool SimDriver::device_memory_locked(std::uint64_t ptr) const {
  std::uint64_t base = 0;
  const Allocation* a = find_locked(ptr, ptr + 1, &base);
  return a != nullptr && !host_kind(a->kind);
}

CUresult SimDriver::sync_locked(std::unique_lock<std::mutex>& lk, bool wait) {
  return wait ? stream_synchronize_locked(lk, nullptr) : CUDA_SUCCESS;
}

// ---------------------------------------------------------------------------------------------
// Copies. The synchronous forms run on the legacy default stream; as the driver documents, one
// with host memory on either side returns once the copy is done, a device-to-device one at once.

CUresult SimDriver::cuMemcpy(CUdeviceptr dst, CUdeviceptr src, std::size_t bytes) {
  std::unique_lock lk(mu_);
  const bool device_to_device = device_memory_locked(dst) && device_memory_locked(src);
  if (CUresult r = copy_locked(lk, dst, src, bytes, nullptr, "cuMemcpy", {}, {})) return r;
  return sync_locked(lk, !device_to_device && bytes > 0);
}

CUresult SimDriver::cuMemcpyHtoD(CUdeviceptr dst, const void* src, std::size_t bytes) {
  std::unique_lock lk(mu_);
  if (CUresult r = copy_locked(lk, dst, address(src), bytes, nullptr, "cuMemcpyHtoD", {}, {}))
    return r;
  return sync_locked(lk, bytes > 0);
}

CUresult SimDriver::cuMemcpyDtoH(void* dst, CUdeviceptr src, std::size_t bytes) {
  std::unique_lock lk(mu_);
  if (CUresult r = copy_locked(lk, address(dst), src, bytes, nullptr, "cuMemcpyDtoH", {}, {}))
    return r;
  return sync_locked(lk, bytes > 0);
}

CUresult SimDriver::cuMemcpyDtoD(CUdeviceptr dst, CUdeviceptr src, std::size_t bytes) {
  std::unique_lock lk(mu_);
  return copy_locked(lk, dst, src, bytes, nullptr, "cuMemcpyDtoD", {}, {});
}

CUresult SimDriver::cuMemcpyHtoDAsync(CUdeviceptr dst, const void* src, std::size_t bytes,
                                      CUstream stream) {
  std::unique_lock lk(mu_);
  return copy_locked(lk, dst, address(src), bytes, stream, "cuMemcpyHtoDAsync", {}, {});
}

CUresult SimDriver::cuMemcpyDtoHAsync(void* dst, CUdeviceptr src, std::size_t bytes,
                                      CUstream stream) {
  std::unique_lock lk(mu_);
  return copy_locked(lk, address(dst), src, bytes, stream, "cuMemcpyDtoHAsync", {}, {});
}

CUresult SimDriver::cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, std::size_t bytes,
                                      CUstream stream) {
  std::unique_lock lk(mu_);
  return copy_locked(lk, dst, src, bytes, stream, "cuMemcpyDtoDAsync", {}, {});
}

// ---------------------------------------------------------------------------------------------
// Memsets. The synchronous forms are asynchronous to the host except on pinned host memory or
// managed memory, where they are synchronous (the driver's documented behaviour).

CUresult SimDriver::memset_locked(CUdeviceptr dst, unsigned pattern, std::size_t size,
                                  std::size_t count, CUstream h, const char* name,
                                  bool* host_target) {
  std::shared_ptr<Stream> s;
  if (CUresult r = resolve_locked(h, s)) return r;
  if (count == 0) return CUDA_SUCCESS;
  const std::size_t bytes = count * size;
  if (dst == 0 || bytes / size != count || dst + bytes < dst)
    return fail(CUDA_ERROR_INVALID_VALUE, std::string(name) + ": a null or wrapping range");
  if (dst % size != 0)
    return fail(CUDA_ERROR_INVALID_VALUE, std::string(name) + ": " + hex(dst) +
                                              " is not aligned to " + std::to_string(size) +
                                              " bytes");
  std::int64_t delta = 0, to_host = 0;
  if (CUresult r = reach_locked(dst, dst + bytes, s->device, false, true, CUDA_ERROR_INVALID_VALUE,
                                "dst", delta, nullptr, 0, &to_host))
    return r;
  if (host_target != nullptr) *host_target = !device_memory_locked(dst);
  const std::uint64_t at = static_cast<std::uint64_t>(static_cast<std::int64_t>(dst) + to_host);
  const AccessRun runs[] = {{at, at + bytes, true}};
  Op op;
  op.name = name;
  op.fn = [to = reinterpret_cast<std::byte*>(static_cast<std::intptr_t>(dst) + delta), pattern,
           size, count] {
    if (size == 1) {
      std::memset(to, static_cast<int>(pattern), count);
      return;
    }
    for (std::size_t i = 0; i < count; ++i) std::memcpy(to + i * size, &pattern, size);
  };
  enqueue_locked(s, std::move(op), runs);
  return CUDA_SUCCESS;
}

CUresult SimDriver::cuMemsetD8(CUdeviceptr dst, unsigned char value, std::size_t count) {
  std::unique_lock lk(mu_);
  bool host = false;
  if (CUresult r = memset_locked(dst, value, 1, count, nullptr, "cuMemsetD8", &host)) return r;
  return sync_locked(lk, host);
}

CUresult SimDriver::cuMemsetD16(CUdeviceptr dst, unsigned short value, std::size_t count) {
  std::unique_lock lk(mu_);
  bool host = false;
  if (CUresult r = memset_locked(dst, value, 2, count, nullptr, "cuMemsetD16", &host)) return r;
  return sync_locked(lk, host);
}

CUresult SimDriver::cuMemsetD32(CUdeviceptr dst, unsigned int value, std::size_t count) {
  std::unique_lock lk(mu_);
  bool host = false;
  if (CUresult r = memset_locked(dst, value, 4, count, nullptr, "cuMemsetD32", &host)) return r;
  return sync_locked(lk, host);
}

CUresult SimDriver::cuMemsetD16Async(CUdeviceptr dst, unsigned short value, std::size_t count,
                                     CUstream stream) {
  std::lock_guard lk(mu_);
  return memset_locked(dst, value, 2, count, stream, "cuMemsetD16Async");
}

CUresult SimDriver::cuMemsetD32Async(CUdeviceptr dst, unsigned int value, std::size_t count,
                                     CUstream stream) {
  std::lock_guard lk(mu_);
  return memset_locked(dst, value, 4, count, stream, "cuMemsetD32Async");
}

// ---------------------------------------------------------------------------------------------
// Page-locked host memory.

CUresult SimDriver::cuMemHostAlloc(void** ptr, std::size_t bytes, unsigned int flags) {
  constexpr unsigned known =
      kMemHostAllocPortable | kMemHostAllocDeviceMap | kMemHostAllocWriteCombined;
  if (ptr == nullptr || bytes == 0 || (flags & ~known) != 0)
    return fail(CUDA_ERROR_INVALID_VALUE,
                "cuMemHostAlloc: 0 bytes, or flags other than PORTABLE, DEVICEMAP, WRITECOMBINED");
  std::lock_guard lk(mu_);
  CUresult r = CUDA_SUCCESS;
  const std::uint64_t p = host_allocation_locked(bytes, Kind::pinned, r);
  if (p == 0) return r;
  memory_.at(p).host_flags = flags;
  *ptr = reinterpret_cast<void*>(static_cast<std::uintptr_t>(p));
  return CUDA_SUCCESS;
}

CUresult SimDriver::cuMemHostGetDevicePointer(CUdeviceptr* device_ptr, void* ptr,
                                              unsigned int flags) {
  if (device_ptr == nullptr || flags != 0)
    return fail(CUDA_ERROR_INVALID_VALUE, "cuMemHostGetDevicePointer: flags must be 0");
  std::lock_guard lk(mu_);
  int device = 0;
  if (CUresult r = need_context_locked(device)) return r;
  const std::uint64_t p = address(ptr);
  std::uint64_t base = 0;
  const Allocation* a = find_locked(p, p + 1, &base);
  if (a == nullptr || (a->kind != Kind::pinned && a->kind != Kind::registered))
    return fail(CUDA_ERROR_INVALID_VALUE,
                hex(p) +
                    " is not page-locked host memory (cuMemHostAlloc, cuMemAllocHost, "
                    "cuMemHostRegister)");
  if (a->kind == Kind::registered && (a->host_flags & kMemHostRegisterDeviceMap) == 0)
    return fail(CUDA_ERROR_INVALID_VALUE,
                hex(p) +
                    " was registered without CU_MEMHOSTREGISTER_DEVICEMAP: the driver "
                    "did not map it for the device");
  // Unified addressing: allocated page-locked memory is mapped at its host address on every
  // device; registered memory too, unless a device cannot use the host pointer.
  *device_ptr = a->mapped != 0 ? a->mapped + (p - base) : p;
  return CUDA_SUCCESS;
}

CUresult SimDriver::cuMemHostGetFlags(unsigned int* flags, void* ptr) {
  if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lk(mu_);
  const std::uint64_t p = address(ptr);
  const Allocation* a = find_locked(p, p + 1);
  if (a == nullptr || a->kind != Kind::pinned)
    return fail(CUDA_ERROR_INVALID_VALUE,
                hex(p) + " is not memory of cuMemHostAlloc or cuMemAllocHost");
  *flags = a->host_flags;
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------------------------------------
// The default memory pool of each device: cuMemAllocAsync's, the only one simulated.

int SimDriver::pool_device(CUmemoryPool pool) const {
  for (int d = 0; d < devices_; ++d)
    if (pool == pool_handle(instance_, d)) return d;
  return -1;
}

CUresult SimDriver::cuDeviceGetDefaultMemPool(CUmemoryPool* pool, CUdevice device) {
  if (device < 0 || device >= devices_)
    return fail(CUDA_ERROR_INVALID_DEVICE,
                "device " + std::to_string(device) + " is not a device of the simulator");
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pool = pool_handle(instance_, device);
  return CUDA_SUCCESS;
}

CUresult SimDriver::cuDeviceGetMemPool(CUmemoryPool* pool, CUdevice device) {
  return cuDeviceGetDefaultMemPool(pool, device);  // cuDeviceSetMemPool is not simulated
}

CUresult SimDriver::cuMemAllocFromPoolAsync(CUdeviceptr* ptr, std::size_t bytes, CUmemoryPool pool,
                                            CUstream stream) {
  const int device = pool_device(pool);
  if (device < 0)
    return fail(CUDA_ERROR_INVALID_VALUE,
                "cuMemAllocFromPoolAsync: not a memory pool of the simulator (only each "
                "device's default pool is simulated)");
  {
    std::lock_guard lk(mu_);
    std::shared_ptr<Stream> s;
    if (CUresult r = resolve_locked(stream, s)) return r;
    if (s->device != device)
      return fail(CUDA_ERROR_NOT_SUPPORTED, "cuMemAllocFromPoolAsync: the pool of device " +
                                                std::to_string(device) + " on a stream of device " +
                                                std::to_string(s->device) + " is not simulated");
  }
  return cuMemAllocAsync(ptr, bytes, stream);
}

template <class Use>
CUresult SimDriver::pool_attribute(CUmemoryPool pool, const void* value, const char* entry,
                                   Use use) {
  const int device = pool_device(pool);
  if (device < 0 || value == nullptr)
    return fail(CUDA_ERROR_INVALID_VALUE, std::string(entry) + ": not a pool of the simulator");
  std::lock_guard lk(mu_);
  return use(device_state_[static_cast<std::size_t>(device)]);
}

CUresult SimDriver::cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attribute,
                                          void* value) {
  return pool_attribute(pool, value, "cuMemPoolGetAttribute", [&](const DeviceState& ds) {
    switch (attribute) {
      case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
      case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
      case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        *static_cast<int*>(value) = ds.pool_reuse[attribute - 1];
        return CUDA_SUCCESS;
      case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
        *static_cast<cuuint64_t*>(value) = ds.pool_release_threshold;
        return CUDA_SUCCESS;
      // The simulator reserves exactly what is in use.
      case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
      case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
        *static_cast<cuuint64_t*>(value) = ds.pool_used;
        return CUDA_SUCCESS;
      case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
      case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
        *static_cast<cuuint64_t*>(value) = ds.pool_used_high;
        return CUDA_SUCCESS;
    }
    return fail(CUDA_ERROR_INVALID_VALUE, "memory pool attribute " +
                                              std::to_string(static_cast<int>(attribute)) +
                                              " is not simulated");
  });
}

CUresult SimDriver::cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attribute,
                                          void* value) {
  return pool_attribute(pool, value, "cuMemPoolSetAttribute", [&](DeviceState& ds) {
    switch (attribute) {
      case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
      case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
      case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        ds.pool_reuse[attribute - 1] = *static_cast<const int*>(value) != 0 ? 1 : 0;
        return CUDA_SUCCESS;
      case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
        ds.pool_release_threshold = *static_cast<const cuuint64_t*>(value);
        return CUDA_SUCCESS;
      case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
      case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
        // The documented reset: only to 0, which sets the watermark to the current amount.
        if (*static_cast<const cuuint64_t*>(value) != 0)
          return fail(CUDA_ERROR_INVALID_VALUE, "a pool's high watermark can only be reset to 0");
        ds.pool_used_high = ds.pool_used;
        return CUDA_SUCCESS;
      case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
      case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
        break;
    }
    return fail(
        CUDA_ERROR_INVALID_VALUE,
        "memory pool attribute " + std::to_string(static_cast<int>(attribute)) + " cannot be set");
  });
}

CUresult SimDriver::cuMemPoolTrimTo(CUmemoryPool pool, std::size_t keep_bytes) {
  (void)keep_bytes;  // nothing is reserved beyond what is in use
  if (pool_device(pool) < 0)
    return fail(CUDA_ERROR_INVALID_VALUE, "cuMemPoolTrimTo: not a pool of the simulator");
  return CUDA_SUCCESS;
}

}  // namespace cai::device::sim
