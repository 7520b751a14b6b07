// The simulated driver's memory: device heaps with reserved addresses, pinned, registered and
// managed host memory, stream-ordered and chunked allocations, pointer attributes, copies and
// memsets, and the declared host accesses of the race detector.

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <new>
#include <string>

#include "cai/core/error.h"
#include "cai/core/layout.h"
#include "cai/core/strided.h"
#include "sim/sim_driver.h"
#include "sim/sim_internal.h"

namespace cai::device::sim {

namespace {

// CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL of memory the driver does not know, from
// cuPointerGetAttributes: not the documented "NULL value" but -2, as NVIDIA's driver was seen
// to write for pointer 0 (other pointers: cuda_backend_test.pointer_attributes on a GPU).
constexpr int kUnknownPointerOrdinal = -2;

std::string range_of(std::uint64_t lo, std::uint64_t hi) {
  // Appended, not `"[" + hex(lo)`: GCC 12 warns (-Wrestrict) of that form once a profile
  // inlines it.
  std::string out = "[";
  out += hex(lo);
  out += '+';
  out += std::to_string(hi - lo);
  out += ')';
  return out;
}

// Whether [lo, hi) is mapped in this process (pageable host memory the host may touch).
bool host_mapped(std::uint64_t lo, std::uint64_t hi) {
  const std::uint64_t page = host_page_size();
  const std::uint64_t a = lo / page * page;
  return ::msync(reinterpret_cast<void*>(static_cast<std::uintptr_t>(a)), hi - a, MS_ASYNC) == 0;
}

}  // namespace

std::size_t host_page_size() noexcept {
  static const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  return page;
}

// Page-locked and managed memory occupies whole pages of its own, as the driver's does (it
// maps pages for it): a heap neighbour never shares a page with it, so cuMemHostRegister of
// the neighbour's pages cannot overlap it.
std::byte* allocate_host_block(std::size_t bytes) {
  const std::size_t page = host_page_size();
  const std::size_t rounded = (bytes + page - 1) / page * page;
  return static_cast<std::byte*>(::operator new (rounded, std::align_val_t{page}, std::nothrow));
}

void free_host_block(std::byte* p) noexcept {
  ::operator delete (p, std::align_val_t{host_page_size()});
}

// ---------------------------------------------------------------------------------------------
// Bookkeeping (mu_ held).

DeviceHeap& SimDriver::heap_locked(int device) {
  auto& heap = device_state_[static_cast<std::size_t>(device)].heap;
  if (!heap) heap = std::make_unique<DeviceHeap>(kDeviceMemory);
  return *heap;
}

std::uint64_t SimDriver::add_allocation_locked(std::uint64_t base, Allocation a) {
  races_.forget(base, base + a.size);  // in case stale history of host memory was here
  if (!freed_async_.empty()) {
    // Addresses given out again: no longer memory freed by cuMemFreeAsync.
    auto it = freed_async_.upper_bound(base);
    if (it != freed_async_.begin() && std::prev(it)->first + std::prev(it)->second > base) --it;
    while (it != freed_async_.end() && it->first < base + a.size) it = freed_async_.erase(it);
  }
  memory_[base] = std::move(a);
  return base;
}

const SimDriver::Allocation* SimDriver::find_locked(std::uint64_t lo, std::uint64_t hi,
                                                    std::uint64_t* base, bool* partial) const {
  if (partial) *partial = false;
  auto it = memory_.upper_bound(lo);
  if (it != memory_.begin()) {
    const auto a = std::prev(it);
    if (lo - a->first < a->second.size) {
      if (hi - a->first > a->second.size) {
        if (partial) *partial = true;
        return nullptr;
      }
      if (base) *base = a->first;
      return &a->second;
    }
  }
  if (partial && it != memory_.end() && it->first < hi) *partial = true;
  return nullptr;
}

const SimDriver::Allocation* SimDriver::chunks_locked(std::uint64_t lo, std::uint64_t hi,
                                                      std::uint64_t& base) const {
  // Consecutive chunks of one mapping are one range of addresses to a kernel, as on a GPU.
  auto it = memory_.upper_bound(lo);
  if (it == memory_.begin()) return nullptr;
  --it;
  if (it->second.kind != Kind::chunk || lo - it->first >= it->second.size) return nullptr;
  const auto first = it;
  std::uint64_t end = it->first + it->second.size;
  for (++it; end < hi && it != memory_.end() && it->first == end &&
             it->second.kind == Kind::chunk && it->second.chunk_group == first->second.chunk_group;
       ++it)
    end += it->second.size;
  if (end < hi) return nullptr;
  base = first->first;
  return &first->second;
}

CUresult SimDriver::reach_locked(std::uint64_t lo, std::uint64_t hi, int device, bool pageable_ok,
                                 bool write, CUresult error, const char* what, std::int64_t& delta,
                                 const char* part, std::size_t index, std::int64_t* to_host) {
  // Built only for a message: this check runs for every operand of every operation.
  const auto where = [&] {
    std::string s(what);
    if (part) s.append(" ").append(part).append(" ").append(std::to_string(index));
    return s + " " + range_of(lo, hi);
  };
  std::uint64_t base = 0;
  bool partial = false;
  const Allocation* a = find_locked(lo, hi, &base, &partial);
  if (a == nullptr && partial) a = chunks_locked(lo, hi, base);
  if (a == nullptr) {
    if (partial) return fail(error, where() + " straddles the end or the start of an allocation");
    if (!freed_async_.empty()) {
      if (CUresult r = freed_async_locked(lo, where().c_str())) return r;
    }
    for (const DeviceState& ds : device_state_) {
      if (ds.heap && ds.heap->contains(lo))
        return fail(error, where() +
                               " is in device address space but not in any allocation "
                               "(freed, or never allocated)");
    }
    if (!pageable_ok)
      return fail(error, where() +
                             " is not memory the device can access (pageable host memory "
                             "or a wild pointer)");
    if (!host_mapped(lo, hi))
      return fail(error, where() + " is not mapped in this process (a wild pointer)");
    delta = 0;
    return CUDA_SUCCESS;
  }
  const bool on_device = a->kind == Kind::device || a->kind == Kind::pool ||
                         a->kind == Kind::chunk || a->kind == Kind::opened;
  if (on_device && device >= 0 && a->device != device) {
    return fail(error, where() + " is memory of device " + std::to_string(a->device) +
                           ", which a kernel of device " + std::to_string(device) +
                           " cannot reach (peer access is not enabled)");
  }
  if (a->kind == Kind::registered && device >= 0) {
    // Copies reach page-locked memory without a mapping; kernels and memsets need one.
    if ((a->host_flags & kMemHostRegisterDeviceMap) == 0)
      return fail(error, where() +
                             " is host memory registered without CU_MEMHOSTREGISTER_DEVICEMAP, "
                             "which the driver does not map for the device");
    if (a->mapped != 0 && host_pointer_for_registered_[static_cast<std::size_t>(device)] == 0)
      return fail(error, where() +
                             " is registered host memory reached at its host address on device " +
                             std::to_string(device) +
                             ", whose CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM is 0: the device "
                             "reaches it at the address cuMemHostGetDevicePointer gives");
  }
  if (write && (a->kind == Kind::registered || a->kind == Kind::mapped) &&
      (a->host_flags & kMemHostRegisterReadOnly) != 0)
    return fail(error, where() +
                           " is written, but was registered with CU_MEMHOSTREGISTER_READ_ONLY: "
                           "the device may only read it");
  delta = reinterpret_cast<std::intptr_t>(a->host) - static_cast<std::int64_t>(base);
  if (to_host) *to_host = a->kind == Kind::mapped ? delta : 0;
  return CUDA_SUCCESS;
}

void SimDriver::give_back_locked(std::uint64_t base, const Allocation& a) {
  switch (a.kind) {
    case Kind::pool:
      device_state_[static_cast<std::size_t>(a.device)].pool_used -= a.size;
      [[fallthrough]];
    case Kind::device:
    case Kind::chunk:
      heap_locked(a.device).release(base, a.size);
      break;
    case Kind::pinned:
    case Kind::managed:
      free_host_block(a.host);
      break;
    case Kind::mapped:
      // Its block started at the alignment below it (the offset in a page is kept).
      heap_locked(a.device).release(base / DeviceHeap::alignment * DeviceHeap::alignment,
                                    a.size + base % DeviceHeap::alignment);
      break;
    case Kind::opened:
    case Kind::registered:
      break;  // the mapping goes with its last reference; registered memory is the caller's
  }
}

// ---------------------------------------------------------------------------------------------
// Allocation.

CUresult SimDriver::cuMemGetInfo(std::size_t* free, std::size_t* total) {
  if (free == nullptr || total == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lk(mu_);
  int device = 0;
  if (CUresult r = need_context_locked(device)) return r;
  // The device's address space: pages are taken from host memory only when written.
  const DeviceHeap& heap = heap_locked(device);
  *free = heap.free_bytes();
  *total = heap.capacity();
  return CUDA_SUCCESS;
}

CUresult SimDriver::cuMemAlloc(CUdeviceptr* ptr, std::size_t bytes) {
  if (ptr == nullptr || bytes == 0) return fail(CUDA_ERROR_INVALID_VALUE, "cuMemAlloc of 0 bytes");
  std::lock_guard lk(mu_);
  int device = 0;
  if (CUresult r = need_context_locked(device)) return r;
  DeviceHeap& heap = heap_locked(device);
  const std::uint64_t base = heap.allocate(bytes);
  if (base == 0)
    return fail(CUDA_ERROR_OUT_OF_MEMORY, "out of memory allocating " + std::to_string(bytes) +
                                              " bytes on device " + std::to_string(device));
  Allocation a;
  a.size = bytes;
  a.kind = Kind::device;
  a.device = device;
  a.host = heap.alias(base);
  *ptr = add_allocation_locked(base, std::move(a));
  return CUDA_SUCCESS;
}

CUresult SimDriver::cuMemAllocAsync(CUdeviceptr* ptr, std::size_t bytes, CUstream h) {
  if (ptr == nullptr || bytes == 0)
    return fail(CUDA_ERROR_INVALID_VALUE, "cuMemAllocAsync of 0 bytes");
  std::lock_guard lk(mu_);
  std::shared_ptr<Stream> s;
  if (CUresult r = resolve_locked(h, s)) return r;
  DeviceHeap& heap = heap_locked(s->device);
  const std::uint64_t base = heap.allocate(bytes);
  if (base == 0)
    return fail(CUDA_ERROR_OUT_OF_MEMORY, "out of memory allocating " + std::to_string(bytes) +
                                              " bytes on device " + std::to_string(s->device));
  Allocation a;
  a.size = bytes;
  a.kind = Kind::pool;
  a.device = s->device;
  a.host = heap.alias(base);
  *ptr = add_allocation_locked(base, std::move(a));
  DeviceState& ds = device_state_[static_cast<std::size_t>(s->device)];
  ds.pool_used += bytes;
  ds.pool_used_high = std::max(ds.pool_used_high, ds.pool_used);
  return CUDA_SUCCESS;
}

CUresult SimDriver::caiSimMemAllocChunked(CUdeviceptr* ptr, std::size_t chunk_bytes,
                                          unsigned int chunks) {
  if (ptr == nullptr || chunk_bytes == 0 || chunks == 0 || chunk_bytes % DeviceHeap::alignment != 0)
    return fail(CUDA_ERROR_INVALID_VALUE,
                "caiSimMemAllocChunked: chunks of a positive multiple of 256 bytes");
  std::lock_guard lk(mu_);
  int device = 0;
  if (CUresult r = need_context_locked(device)) return r;
  DeviceHeap& heap = heap_locked(device);
  const std::uint64_t base = heap.allocate(chunk_bytes * chunks);
  if (base == 0) return fail(CUDA_ERROR_OUT_OF_MEMORY, "out of memory");
  std::byte* const host = heap.alias(base);
  for (unsigned i = 0; i < chunks; ++i) {
    const std::uint64_t at = base + i * chunk_bytes;
    Allocation a;
    a.size = chunk_bytes;
    a.kind = Kind::chunk;
    a.device = device;
    a.host = host + i * chunk_bytes;
    a.chunk_group = base;
    a.reservation = chunk_bytes * chunks;
    add_allocation_locked(at, std::move(a));
  }
  *ptr = base;
  return CUDA_SUCCESS;
}

CUresult SimDriver::cuMemAllocHost(void** ptr, std::size_t bytes) {
  if (ptr == nullptr || bytes == 0)
    return fail(CUDA_ERROR_INVALID_VALUE, "cuMemAllocHost of 0 bytes");
  std::unique_lock lk(mu_);
  // An implicit synchronization point on the driver: it waits for the work queued so far
  // (without ordering anything for the race detector: cai must not rely on it).
  drain_locked(lk);
  CUresult r = CUDA_SUCCESS;
  const std::uint64_t p = host_allocation_locked(bytes, Kind::pinned, r);
  if (p != 0) *ptr = reinterpret_cast<void*>(static_cast<std::uintptr_t>(p));
  return r;
}

CUresult SimDriver::cuMemAllocManaged(CUdeviceptr* ptr, std::size_t bytes, unsigned int flags) {
  if (ptr == nullptr || bytes == 0 ||
      (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST))
    return fail(CUDA_ERROR_INVALID_VALUE,
                "cuMemAllocManaged: 0 bytes, or flags other than CU_MEM_ATTACH_GLOBAL/HOST");
  std::lock_guard lk(mu_);
  CUresult r = CUDA_SUCCESS;
  const std::uint64_t p = host_allocation_locked(bytes, Kind::managed, r);
  if (p != 0) *ptr = p;
  return r;
}

std::uint64_t SimDriver::host_allocation_locked(std::size_t bytes, Kind kind, CUresult& r) {
  int device = 0;
  if ((r = need_context_locked(device)) != CUDA_SUCCESS) return 0;
  std::byte* p = allocate_host_block(bytes);
  if (p == nullptr) {
    r = fail(CUDA_ERROR_OUT_OF_MEMORY, "out of host memory");
    return 0;
  }
  Allocation a;
  a.size = bytes;
  a.kind = kind;
  a.device = device;
  a.host = p;
  return add_allocation_locked(reinterpret_cast<std::uintptr_t>(p), std::move(a));
}

CUresult SimDriver::cuMemHostRegister(void* ptr, std::size_t bytes, unsigned int flags) {
  if (ptr == nullptr || bytes == 0 ||
      (flags &
       ~(kMemHostRegisterPortable | kMemHostRegisterDeviceMap | kMemHostRegisterReadOnly)) != 0)
    return fail(CUDA_ERROR_INVALID_VALUE,
                "cuMemHostRegister: null, empty, or flags other than PORTABLE, DEVICEMAP, "
                "READ_ONLY");
  const auto lo = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(ptr));
  std::unique_lock lk(mu_);
  int device = 0;
  if (CUresult r = need_context_locked(device)) return r;
  drain_locked(lk);  // an implicit synchronization point, as cuMemAllocHost
  bool partial = false;
  if (find_locked(lo, lo + bytes, nullptr, &partial) != nullptr || partial)
    return fail(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED,
                range_of(lo, lo + bytes) + " overlaps memory the driver already knows");
  if (!host_mapped(lo, lo + bytes))
    return fail(CUDA_ERROR_INVALID_VALUE, range_of(lo, lo + bytes) + " is not mapped");
  Allocation a;
  a.size = bytes;
  a.kind = Kind::registered;
  a.device = device;
  a.host = static_cast<std::byte*>(ptr);
  a.host_flags = flags;
  const bool host_pointer_everywhere =
      std::all_of(host_pointer_for_registered_.begin(), host_pointer_for_registered_.end(),
                  [](int v) { return v != 0; });
  if ((flags & kMemHostRegisterDeviceMap) != 0 && !host_pointer_everywhere) {
    // A device that cannot use the host pointer: the memory gets a device address of its own
    // (one for all devices), at the same offset from the heap's alignment as the host's.
    const std::uint64_t offset = lo % DeviceHeap::alignment;
    const std::uint64_t block = heap_locked(device).allocate(bytes + offset);
    if (block == 0)
      return fail(CUDA_ERROR_OUT_OF_MEMORY, "no device address for registered memory");
    Allocation m = a;
    m.kind = Kind::mapped;
    a.mapped = add_allocation_locked(block + offset, std::move(m));
  }
  add_allocation_locked(lo, std::move(a));
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------------------------------------
// Release.

CUresult SimDriver::cuMemFree(CUdeviceptr ptr) {
  std::unique_lock lk(mu_);
  auto it = memory_.find(ptr);
  if (it == memory_.end() || (it->second.kind != Kind::device && it->second.kind != Kind::pool &&
                              it->second.kind != Kind::managed)) {
    std::string why = hex(ptr) +
                      " is not the start of a cuMemAlloc, cuMemAllocAsync or "
                      "cuMemAllocManaged allocation";
    if (it != memory_.end() && it->second.kind == Kind::opened)
      why += " (it was opened from another process: cuIpcCloseMemHandle)";
    std::uint64_t base = 0;
    if (find_locked(ptr, ptr + 1, &base) != nullptr && base != ptr)
      why += " (it is inside the allocation at " + hex(base) + ")";
    return fail(CUDA_ERROR_INVALID_VALUE, why);
  }
  const Allocation a = it->second;
  memory_.erase(it);
  // The driver documents that cuMemFree may synchronize (work already queued may still use
  // the memory), except for stream-ordered memory.
  if (a.kind != Kind::pool) drain_locked(lk);
  races_.forget(ptr, ptr + a.size);
  unexport_locked(a);
  give_back_locked(ptr, a);
  return CUDA_SUCCESS;
}

CUresult SimDriver::caiSimMemFreeChunked(CUdeviceptr ptr) {
  std::unique_lock lk(mu_);
  auto it = memory_.find(ptr);
  if (it == memory_.end() || it->second.kind != Kind::chunk)
    return fail(CUDA_ERROR_INVALID_VALUE, hex(ptr) + " is not a caiSimMemAllocChunked chunk");
  const int device = it->second.device;
  const std::uint64_t group = it->second.chunk_group;
  const std::uint64_t size = group == ptr ? it->second.reservation : it->second.size;
  if (group == ptr) {
    // The first chunk: every chunk still mapped, then the whole reservation.
    while (it != memory_.end() && it->first < ptr + size) it = memory_.erase(it);
  } else {
    memory_.erase(it);  // one chunk unmapped: a hole in the reservation
  }
  drain_locked(lk);
  races_.forget(ptr, ptr + size);
  if (group == ptr) heap_locked(device).release(ptr, size);
  return CUDA_SUCCESS;
}

CUresult SimDriver::cuMemFreeHost(void* p) {
  const auto ptr = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(p));
  std::unique_lock lk(mu_);
  auto it = memory_.find(ptr);
  if (it == memory_.end() || it->second.kind != Kind::pinned)
    return fail(CUDA_ERROR_INVALID_VALUE, hex(ptr) + " is not from cuMemAllocHost");
  const Allocation a = it->second;
  memory_.erase(it);
  drain_locked(lk);
  races_.forget(ptr, ptr + a.size);
  give_back_locked(ptr, a);
  return CUDA_SUCCESS;
}

CUresult SimDriver::cuMemHostUnregister(void* p) {
  const auto ptr = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(p));
  std::unique_lock lk(mu_);
  auto it = memory_.find(ptr);
  if (it == memory_.end() || it->second.kind != Kind::registered)
    return fail(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED,
                hex(ptr) + " is not the start of a cuMemHostRegister range");
  const Allocation a = it->second;
  memory_.erase(it);
  drain_locked(lk);
  races_.forget(ptr, ptr + a.size);
  if (a.mapped != 0) {
    auto m = memory_.find(a.mapped);
    give_back_locked(m->first, m->second);
    memory_.erase(m);
  }
  return CUDA_SUCCESS;
}

CUresult SimDriver::cuMemFreeAsync(CUdeviceptr ptr, CUstream h) {
  std::lock_guard lk(mu_);
  std::shared_ptr<Stream> s;
  if (CUresult r = resolve_locked(h, s)) return r;
  auto it = memory_.find(ptr);
  if (it == memory_.end() || it->second.kind != Kind::pool)
    return fail(CUDA_ERROR_INVALID_VALUE,
                hex(ptr) + " is not the start of a cuMemAllocAsync allocation");
  const Allocation a = it->second;
  // The free writes the whole allocation: work of another stream not ordered before it races.
  const AccessRun runs[] = {{ptr, ptr + a.size, true}};
  Op op;
  op.name = "cuMemFreeAsync";
  op.fn = [this, ptr, a] {
    std::lock_guard g(mu_);
    give_back_locked(ptr, a);
  };
  enqueue_locked(s, std::move(op), runs);
  // From now on the memory is gone for every new operation.
  memory_.erase(it);
  races_.forget(ptr, ptr + a.size);
  freed_async_[ptr] = a.size;
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------------------------------------
// Pointer attributes.

CUresult SimDriver::freed_async_locked(CUdeviceptr ptr, const char* entry) const {
  auto it = freed_async_.upper_bound(ptr);
  if (it == freed_async_.begin() || ptr - std::prev(it)->first >= std::prev(it)->second)
    return CUDA_SUCCESS;
  --it;
  return fail(CUDA_ERROR_ILLEGAL_STATE,
              std::string("undefined on a real driver: ") + entry + " of " + hex(ptr) +
                  ", in memory freed by cuMemFreeAsync at " + hex(it->first) +
                  " (once the free is enqueued, the memory and its pointer attributes are "
                  "undefined)");
}

CUresult SimDriver::cuPointerGetAttribute(void* data, CUpointer_attribute attribute,
                                          CUdeviceptr ptr) {
  if (data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lk(mu_);
  if (CUresult r = freed_async_locked(ptr, "cuPointerGetAttribute")) return r;
  const Allocation* a = find_locked(ptr, ptr + 1);
  if (a == nullptr)
    return fail(CUDA_ERROR_INVALID_VALUE, hex(ptr) + " is not memory the driver knows");
  if (attribute == CU_POINTER_ATTRIBUTE_HOST_POINTER && !host_kind(a->kind))
    return fail(CUDA_ERROR_INVALID_VALUE, hex(ptr) + " is device memory: no host address");
  return attributes_locked(1, &attribute, &data, ptr);
}

CUresult SimDriver::cuPointerGetAttributes(unsigned int count, CUpointer_attribute* attributes,
                                           void** data, CUdeviceptr ptr) {
  if (count > 0 && (attributes == nullptr || data == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lk(mu_);
  if (CUresult r = freed_async_locked(ptr, "cuPointerGetAttributes")) return r;
  return attributes_locked(count, attributes, data, ptr);
}

CUresult SimDriver::attributes_locked(unsigned int count, const CUpointer_attribute* attributes,
                                      void* const* data, CUdeviceptr ptr) {
  // Memory the driver does not know reads as the defaults (null, zero; the device ordinal -2,
  // as NVIDIA's driver answers for pointer 0), not as an error. The boolean attributes are
  // unsigned ints (4 bytes), as cuda.h documents them.
  std::uint64_t base = 0;
  const Allocation* a = find_locked(ptr, ptr + 1, &base);
  const bool host = a && host_kind(a->kind);
  const bool has_context = a && a->kind != Kind::pool && a->kind != Kind::chunk;
  for (unsigned i = 0; i < count; ++i) {
    void* d = data[i];
    if (d == nullptr) return CUDA_ERROR_INVALID_VALUE;
    switch (attributes[i]) {
      case CU_POINTER_ATTRIBUTE_CONTEXT:
        *static_cast<CUcontext*>(d) = has_context ? context_handle(instance_, a->device) : nullptr;
        break;
      case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *static_cast<unsigned*>(d) =
            !a ? 0u
               : static_cast<unsigned>(host_kind(a->kind) && a->kind != Kind::managed
                                           ? CU_MEMORYTYPE_HOST
                                           : CU_MEMORYTYPE_DEVICE);
        break;
      case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
        *static_cast<CUdeviceptr*>(d) = !a ? 0 : a->mapped != 0 ? a->mapped + (ptr - base) : ptr;
        break;
      case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        *static_cast<void**>(d) = host ? a->host + (ptr - base) : nullptr;
        break;
      case CU_POINTER_ATTRIBUTE_IS_MANAGED:
        *static_cast<unsigned*>(d) = a && a->kind == Kind::managed ? 1u : 0u;
        break;
      case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        *static_cast<int*>(d) = a ? a->device : kUnknownPointerOrdinal;
        break;
      case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
        *static_cast<unsigned*>(d) = a && a->kind == Kind::device ? 1u : 0u;
        break;
      case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
        // A mapping's range is its whole reservation, unmapped parts included.
        *static_cast<CUdeviceptr*>(d) = !a ? 0 : a->kind == Kind::chunk ? a->chunk_group : base;
        break;
      case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
        *static_cast<std::size_t*>(d) = !a ? 0 : a->kind == Kind::chunk ? a->reservation : a->size;
        break;
      case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
        *static_cast<CUdeviceptr*>(d) = a ? base : 0;
        break;
      case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
        *static_cast<std::size_t*>(d) = a ? a->size : 0;
        break;
      case CU_POINTER_ATTRIBUTE_MAPPED:
        *static_cast<unsigned*>(d) = a != nullptr ? 1u : 0u;
        break;
      case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
        // The device's default pool, as a recognisable non-null value.
        *static_cast<CUmemoryPool*>(d) =
            a && a->kind == Kind::pool ? pool_handle(instance_, a->device) : nullptr;
        break;
      default:
        return fail(CUDA_ERROR_INVALID_VALUE, "pointer attribute " +
                                                  std::to_string(static_cast<int>(attributes[i])) +
                                                  " is not simulated");
    }
  }
  return CUDA_SUCCESS;
}

CUresult SimDriver::cuMemGetAddressRange(CUdeviceptr* base, std::size_t* size, CUdeviceptr ptr) {
  std::lock_guard lk(mu_);
  if (CUresult r = freed_async_locked(ptr, "cuMemGetAddressRange")) return r;
  std::uint64_t start = 0;
  const Allocation* a = find_locked(ptr, ptr + 1, &start);
  if (a == nullptr)
    return fail(CUDA_ERROR_INVALID_VALUE, hex(ptr) + " is not memory the driver knows");
  // Documented for cuMemAlloc/cuMemAllocPitch memory; the driver also answers for its other
  // allocations (numba-cuda's tests size cuMemHostAlloc memory with it on GPUs). Registered
  // ranges, mappings and opened IPC memory: unobserved, so the range attributes' to answer.
  if (a->kind != Kind::device && a->kind != Kind::pool && a->kind != Kind::pinned &&
      a->kind != Kind::managed)
    return fail(CUDA_ERROR_INVALID_VALUE,
                "cuMemGetAddressRange: " + hex(ptr) +
                    " is not memory the driver allocated (cuMemAlloc, cuMemAllocAsync, "
                    "cuMemAllocHost, cuMemAllocManaged); the simulated driver answers only for "
                    "those (use CU_POINTER_ATTRIBUTE_RANGE_START_ADDR/RANGE_SIZE)");
  if (base) *base = start;
  if (size) *size = a->size;
  return CUDA_SUCCESS;
}

CUresult SimDriver::caiSimHostAddress(void** host, CUdeviceptr ptr) {
  if (host == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lk(mu_);
  std::uint64_t base = 0;
  const Allocation* a = find_locked(ptr, ptr + 1, &base);
  if (a == nullptr)
    return fail(CUDA_ERROR_INVALID_VALUE, hex(ptr) + " is not memory the driver knows");
  *host = a->host + (ptr - base);
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------------------------------------
// Copies and memsets.

CUresult SimDriver::copy_locked(std::unique_lock<std::mutex>& lk, CUdeviceptr dst, CUdeviceptr src,
                                std::size_t bytes, CUstream h, const char* name,
                                std::optional<int> dst_device, std::optional<int> src_device) {
  std::shared_ptr<Stream> s;
  if (CUresult r = resolve_locked(h, s)) return r;
  if (bytes == 0) return CUDA_SUCCESS;
  if (dst == 0 || src == 0 || dst + bytes < dst || src + bytes < src)
    return fail(CUDA_ERROR_INVALID_VALUE, std::string(name) + ": a null or wrapping range");
  std::int64_t dd = 0, sd = 0, dst_to_host = 0, src_to_host = 0;
  const bool peer = dst_device.has_value();
  if (CUresult r = reach_locked(dst, dst + bytes, -1, !peer, true, CUDA_ERROR_INVALID_VALUE, "dst",
                                dd, nullptr, 0, &dst_to_host))
    return r;
  if (CUresult r = reach_locked(src, src + bytes, -1, !peer, false, CUDA_ERROR_INVALID_VALUE, "src",
                                sd, nullptr, 0, &src_to_host))
    return r;
  if (peer) {
    const std::pair<const char*, std::pair<std::uint64_t, int>> sides[] = {
        {"dst", {dst, *dst_device}}, {"src", {src, *src_device}}};
    for (const auto& [side, at] : sides) {
      const Allocation* a = find_locked(at.first, at.first + 1);
      if (host_kind(a->kind) || a->device != at.second)
        return fail(CUDA_ERROR_INVALID_VALUE, std::string(name) + ": " + side + " at " +
                                                  hex(at.first) +
                                                  " is not device memory of the context's device " +
                                                  std::to_string(at.second));
    }
  }
  // The driver's copies are undefined when the ranges overlap (a memcpy, not a memmove): a
  // silent memmove here would hide a missing staging step.
  if (dst < src + bytes && src < dst + bytes)
    return fail(CUDA_ERROR_INVALID_VALUE,
                std::string(name) + ": dst " + hex(dst) + " and src " + hex(src) +
                    " overlap over " + std::to_string(bytes) +
                    " bytes; undefined on a real driver: the ranges of a copy must not overlap");
  // Pageable host memory (outside every allocation) makes the copy synchronous, as the driver
  // documents: the caller may reuse its buffer as soon as the call returns.
  auto known = [&](std::uint64_t lo) {
    std::uint64_t base = 0;
    return find_locked(lo, lo + bytes) != nullptr || chunks_locked(lo, lo + bytes, base) != nullptr;
  };
  const bool pageable = !known(dst) || !known(src);
  const auto at_host = [](std::uint64_t p, std::int64_t shift) {
    return static_cast<std::uint64_t>(static_cast<std::int64_t>(p) + shift);
  };
  if (pageable && known(dst) && device_memory_locked(dst)) {
    // Pageable to device memory: the call returns once the bytes are staged (read by the host
    // now), so the caller may reuse its buffer at once; the rest is a copy on the stream. The
    // driver may also wait for the stream first: nothing may rely on either.
    const AccessRun read[] = {{src, src + bytes, false}};
    host_access_locked(read, name);
    auto staged = std::make_shared<std::vector<std::byte>>(bytes);
    std::memcpy(staged->data(), reinterpret_cast<const void*>(static_cast<std::uintptr_t>(src)),
                bytes);
    const std::uint64_t at = at_host(dst, dst_to_host);
    const AccessRun write[] = {{at, at + bytes, true}};
    Op op;
    op.name = name;
    op.fn = [to = reinterpret_cast<std::byte*>(static_cast<std::intptr_t>(dst) + dd),
             staged = std::move(staged)] { std::memcpy(to, staged->data(), staged->size()); };
    enqueue_locked(s, std::move(op), write);
    return CUDA_SUCCESS;
  }
  std::vector<AccessRun> runs{{at_host(src, src_to_host), at_host(src, src_to_host) + bytes, false},
                              {at_host(dst, dst_to_host), at_host(dst, dst_to_host) + bytes, true}};
  runs = normalize_runs(std::move(runs));
  Op op;
  op.name = name;
  op.fn = [to = reinterpret_cast<std::byte*>(static_cast<std::intptr_t>(dst) + dd),
           from = reinterpret_cast<const std::byte*>(static_cast<std::intptr_t>(src) + sd),
           bytes] { std::memcpy(to, from, bytes); };
  enqueue_locked(s, std::move(op), runs);
  if (pageable) {
    const std::uint64_t target = s->enqueued;
    wait_locked(lk, *s, target);
    join(host_clock_, s->clock);
    return sticky_locked(*s, target);
  }
  return CUDA_SUCCESS;
}

CUresult SimDriver::cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, std::size_t bytes,
                                  CUstream stream) {
  std::unique_lock lk(mu_);
  return copy_locked(lk, dst, src, bytes, stream, "cuMemcpyAsync", std::nullopt, std::nullopt);
}

CUresult SimDriver::cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext dst_context, CUdeviceptr src,
                                      CUcontext src_context, std::size_t bytes, CUstream stream) {
  const int dd = context_device(instance_, dst_context, devices_);
  const int sd = context_device(instance_, src_context, devices_);
  if (dd < 0 || sd < 0)
    return fail(CUDA_ERROR_INVALID_CONTEXT, "cuMemcpyPeerAsync: not a context of the simulator");
  std::unique_lock lk(mu_);
  return copy_locked(lk, dst, src, bytes, stream, "cuMemcpyPeerAsync", dd, sd);
}

CUresult SimDriver::cuMemsetD8Async(CUdeviceptr dst, unsigned char value, std::size_t bytes,
                                    CUstream h) {
  std::lock_guard lk(mu_);
  return memset_locked(dst, value, 1, bytes, h, "cuMemsetD8Async");
}

// ---------------------------------------------------------------------------------------------
// The race detector's host side.

namespace {

// The runs of one declared access (validated here: it comes from outside the driver).
void append_access(std::vector<AccessRun>& runs, const CaiSimAccess& a) {
  if (a.ndim < 0 || a.ndim > max_ndim ||
      (a.ndim > 0 && (a.shape == nullptr || a.strides == nullptr)))
    throw_error(Errc::value_error, "access: ndim " + std::to_string(a.ndim) +
                                       " needs 0 <= ndim <= 64 with a shape and strides");
  if (a.ndim == 0) {
    if (a.itemsize == 0) return;
    if (a.ptr == 0 || a.ptr + a.itemsize < a.ptr)
      throw_error(Errc::value_error, "access: a null or wrapping range");
    runs.push_back({a.ptr, a.ptr + a.itemsize, a.write != 0});
    return;
  }
  const auto n = static_cast<std::size_t>(a.ndim);
  // Layout validates the shape, strides and item size (and that the extent fits int64).
  const Layout layout(Dims(std::span(a.shape, n)), Dims(std::span(a.strides, n)),
                      static_cast<std::int64_t>(a.itemsize));
  if (layout.nbytes() == 0) return;
  if (a.ptr == 0 || !layout.byte_range(a.ptr))
    throw_error(Errc::value_error, "access: a null pointer, or a range that wraps around");
  append_runs(runs, a.ptr, layout.shape(), layout.strides(), layout.itemsize(), a.write != 0);
}

}  // namespace

std::vector<AccessRun> declared_runs(const CaiSimAccess* accesses, std::size_t count) {
  std::vector<AccessRun> runs;
  for (std::size_t i = 0; i < count; ++i) append_access(runs, accesses[i]);
  return normalize_runs(std::move(runs));
}

CUresult SimDriver::caiSimHostAccess(const CaiSimAccess* access, const char* what) {
  if (access == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const std::string name = what ? what : "host_access";
  const std::vector<AccessRun> runs = declared_runs(access, 1);
  if (runs.empty()) return CUDA_SUCCESS;
  std::lock_guard lk(mu_);
  for (const AccessRun& r : runs) {
    auto it = memory_.upper_bound(r.lo);
    if (it == memory_.begin()) continue;
    --it;
    const Kind k = it->second.kind;
    if ((k == Kind::device || k == Kind::pool || k == Kind::chunk || k == Kind::opened) &&
        r.lo < it->first + it->second.size) {
      return fail(CUDA_ERROR_ILLEGAL_ADDRESS,
                  name + "(): " + range_of(r.lo, r.hi) +
                      " is device memory, which the host cannot access; copy it to host memory "
                      "first");
    }
  }
  host_access_locked(runs, name);
  return CUDA_SUCCESS;
}

void SimDriver::host_access_locked(std::span<const AccessRun> runs, std::string_view name) {
  VectorClock clock = host_clock_;
  if (clock.size() <= host_.actor) clock.resize(host_.actor + 1, 0);
  ++clock[host_.actor];
  if (race_detection_) races_.check_and_record(runs, host_, clock, name);
  host_clock_ = std::move(clock);
}

CUresult SimDriver::caiSimSetRaceDetection(int on) {
  std::lock_guard lk(mu_);
  if ((on != 0) == race_detection_) return CUDA_SUCCESS;  // on again must not lose the history
  race_detection_ = on != 0;
  if (!race_detection_) races_.clear();  // nothing is recorded while off: free the history
  return CUDA_SUCCESS;
}

CUresult SimDriver::caiSimGetRaceDetection(int* on) {
  if (on == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lk(mu_);
  *on = race_detection_ ? 1 : 0;
  return CUDA_SUCCESS;
}

CUresult SimDriver::caiSimForget(CUdeviceptr ptr, std::size_t bytes) {
  if (bytes == 0) return CUDA_SUCCESS;
  if (ptr == 0 || ptr + bytes < ptr)
    return fail(CUDA_ERROR_INVALID_VALUE, "forget(): a null or wrapping range");
  std::lock_guard lk(mu_);
  races_.forget(ptr, ptr + bytes);
  return CUDA_SUCCESS;
}

}  // namespace cai::device::sim
