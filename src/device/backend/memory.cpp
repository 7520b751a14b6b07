// The backend's memory: allocation, pointer attributes and the one memory check that every
// operation applies to array data before any work.

#include <array>
#include <iterator>
#include <optional>
#include <span>
#include <string>

#include "backend/backend.h"
#include "backend/stream_memory.h"
#include "cai/core/error.h"
#include "checks.h"

namespace cai::device {

namespace detail {

using namespace cu;

namespace {

// "<where>: <name> [0x...+n)": the start of every memory-check message, built on failure only.
std::string what_of(std::string_view where, std::string_view name, const ByteRange& r) {
  std::string s(where);
  s.append(": ").append(name).append(" ").append(range_text(r));
  return s;
}

}  // namespace

Ranges::Entry BackendState::query_pointer(std::uint64_t ptr) {
  Ranges::Entry e;
  PointerInfo& info = e.info;
  if (ptr == 0) return e;
  current_context();
  unsigned int memory_type = 0;
  int ordinal = -1;
  CUcontext ctx = nullptr;
  // The driver writes its boolean attributes as 4-byte unsigned ints: a bool slot is overrun.
  unsigned int managed = 0;
  CUdeviceptr start = 0;
  std::size_t size = 0;
  CUmemoryPool pool = nullptr;
  unsigned int ipc = 0;
  CUpointer_attribute attrs[] = {
      CU_POINTER_ATTRIBUTE_MEMORY_TYPE,      CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
      CU_POINTER_ATTRIBUTE_CONTEXT,          CU_POINTER_ATTRIBUTE_IS_MANAGED,
      CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE,
      CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE,   CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
  };
  void* data[] = {&memory_type, &ordinal, &ctx, &managed, &start, &size, &pool, &ipc};
  const CUresult r = api.cuPointerGetAttributes(static_cast<unsigned int>(std::size(attrs)), attrs,
                                                data, static_cast<CUdeviceptr>(ptr));
  // Memory the driver does not know reads as default values (memory type 0) from the plural
  // call; some drivers answer with an error instead. Both mean unregistered.
  if (r == CUDA_ERROR_INVALID_VALUE || r == CUDA_ERROR_INVALID_CONTEXT) return e;
  check(r, "cuPointerGetAttributes");
  if (managed) {
    info.kind = MemoryKind::managed;
    info.host_accessible = true;
  } else if (memory_type == CU_MEMORYTYPE_DEVICE) {
    info.kind = MemoryKind::device;
  } else if (memory_type == CU_MEMORYTYPE_HOST) {
    // Page-locked and, with unified addressing, mapped for every device. The ordinal is the
    // device it was allocated against.
    info.kind = MemoryKind::pinned_host;
    info.host_accessible = true;
  } else {
    return e;
  }
  info.device = ordinal;
  info.device_accessible = true;
  info.context = reinterpret_cast<std::uintptr_t>(ctx);
  info.alloc_base = start;
  info.alloc_size = size;
  if (info.alloc_size == 0) {
    // No range attribute for this memory (an old driver): ask for the allocation's range
    // directly (the driver documents this for cuMemAlloc memory only).
    CUdeviceptr base = 0;
    std::size_t bytes = 0;
    if (api.cuMemGetAddressRange(&base, &bytes, ptr) == CUDA_SUCCESS) {
      info.alloc_base = base;
      info.alloc_size = bytes;
    }
  }
  if (frees.freeing(info.alloc_base)) return Ranges::Entry{};  // freed, not yet given back
  e.ipc_capable = ipc != 0;
  // Pools and virtual-memory mappings reuse their addresses at will: never remembered.
  e.cacheable = ctx != nullptr && pool == nullptr;
  // Device memory of neither a context nor a pool: a virtual-memory reservation, whose range
  // attributes span the whole reservation, unmapped parts included.
  e.reserved = info.kind == MemoryKind::device && ctx == nullptr && pool == nullptr;
  return e;
}

void BackendState::check_mapped(std::string_view where, std::string_view name, const ByteRange& r,
                                const ByteRange& reservation) {
  const auto unmapped = [&](std::uint64_t at) {
    throw_error(Errc::device_error, what_of(where, name, r) +
                                        " runs into an unmapped part of its reservation " +
                                        range_text(reservation) + " at " + hex(at));
  };
  CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_MAPPED,
                                 CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR,
                                 CU_POINTER_ATTRIBUTE_MAPPING_SIZE};
  // Mapping by mapping, from the view's first byte to its last.
  for (std::uint64_t at = r.lo; at < r.hi;) {
    unsigned int mapped = 0;
    CUdeviceptr base = 0;
    std::size_t bytes = 0;
    void* data[] = {&mapped, &base, &bytes};
    counts.pointer_query.bump();
    const CUresult q = api.cuPointerGetAttributes(static_cast<unsigned int>(std::size(attrs)),
                                                  attrs, data, static_cast<CUdeviceptr>(at));
    if (q != CUDA_SUCCESS) {
      // A driver without the mapping attributes (before CUDA 12.1): the two ends, at least.
      for (const std::uint64_t p : {at, r.hi - 1}) {
        void* one[] = {&mapped};
        mapped = 0;
        check(api.cuPointerGetAttributes(1, attrs, one, static_cast<CUdeviceptr>(p)),
              "cuPointerGetAttributes");
        if (mapped == 0) unmapped(p);
      }
      return;
    }
    if (mapped == 0 || bytes == 0 || base > at || base + bytes <= at) unmapped(at);
    at = base + bytes;
  }
}

PointerInfo BackendState::pointer_info(std::uint64_t ptr) {
  if (std::optional<Ranges::Entry> known = ranges.find(ptr)) return known->info;
  counts.pointer_query.bump();
  const Ranges::Entry e = query_pointer(ptr);
  ranges.add_foreign(e);
  return e.info;
}

namespace {
// Memory the host reaches at its own address (a NumPy array may lie partly in it).
bool host_memory(const PointerInfo& info) {
  return info.kind == MemoryKind::pinned_host || info.kind == MemoryKind::managed;
}
}  // namespace

PointerInfo BackendState::check_memory(std::string_view where, std::string_view name,
                                       const ByteRange& r, bool host, int device) {
  if (r.empty()) return {};
  std::optional<Ranges::Entry> e = ranges.find(r.lo);
  if (e && Ranges::answers(*e, r, device)) return e->info;
  auto ask = [&] {
    counts.pointer_query.bump();
    e = query_pointer(r.lo);
    ranges.add_foreign(*e);
  };
  bool asked = !e;
  if (!e) {
    ask();
  } else if (!e->own && device >= 0 && e->info.kind == MemoryKind::device &&
             e->info.device != device) {
    // A remembered range of another device: its addresses may have been reused since.
    ranges.forget(e->info.alloc_base, e->info.alloc_size);
    ask();
    asked = true;
  }
  const PointerInfo info = e->info;
  if (info.kind == MemoryKind::unregistered) {
    if (host) {
      const PointerInfo last = pointer_info(r.hi - 1);
      // Pageable memory running into page-locked memory: pageable as a whole, copied in
      // pieces (copy_pieces).
      if (last.kind != MemoryKind::unregistered && !host_memory(last)) {
        throw_error(Errc::device_error,
                    what_of(where, name, r) + " starts outside the allocation " +
                        range_text({last.alloc_base, last.alloc_base + last.alloc_size}) +
                        " but runs into it");
      }
      return info;
    }
    throw_error(Errc::device_error,
                what_of(where, name, r) +
                    " is not CUDA memory (a foreign or freed pointer, or pageable host memory); "
                    "array data must be device, pinned_host or managed memory");
  }
  const ByteRange alloc{info.alloc_base, info.alloc_base + info.alloc_size};
  if (alloc.contains(r)) {
    // Virtual-memory pools (PyTorch's expandable segments) map chunks into one reservation
    // as they grow: a view must not run into a part not mapped (yet, or any more).
    if (e->reserved) check_mapped(where, name, r, alloc);
    return info;
  }
  if (!asked && !e->own) {
    // A remembered foreign range may be stale (freed, its addresses reused): ask again.
    ranges.forget(info.alloc_base, info.alloc_size);
    return check_memory(where, name, r, host, device);
  }
  // Host memory that runs out of a page-locked range: pageable as a whole, copied in pieces.
  if (host && host_memory(info)) return PointerInfo{};
  throw_error(Errc::device_error, what_of(where, name, r) +
                                      " runs past the end of its allocation " + range_text(alloc));
}

void BackendState::check_operands(std::string_view where, std::span<const ByteRange> rs, int device,
                                  std::span<PointerInfo> out) {
  std::array<bool, CAI_KERNEL_MAX_OPERANDS> answered{};
  ranges.find_answers(rs, device, out, std::span(answered.data(), rs.size()));
  for (std::size_t k = 0; k < rs.size(); ++k) {
    if (!answered[k])
      out[k] = check_memory(where, elementwise_operand_name(k), rs[k], false, device);
  }
}

void BackendState::remember(std::uint64_t ptr, std::size_t bytes, MemoryKind kind, bool pooled) {
  Ranges::Entry e;
  PointerInfo& info = e.info;
  info.kind = kind;
  info.context = reinterpret_cast<std::uintptr_t>(current_context());
  info.device = current_ordinal();
  info.host_accessible = kind != MemoryKind::device;
  info.device_accessible = true;
  info.alloc_base = ptr;
  info.alloc_size = bytes;
  e.own = true;
  e.pooled = pooled;
  e.ipc_capable = kind == MemoryKind::device && !pooled;
  ranges.add_own(e);
}

bool BackendState::memory_pools_supported(int device) {
  const CUdevice dev = device_of(device, "memory pools");
  std::lock_guard lock(context_mu_);
  signed char& known = pools_[static_cast<std::size_t>(device)];
  if (known < 0) {
    int pools = 0;
    CAI_DRIVER(*this, cuDeviceGetAttribute, &pools, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED,
               dev);
    known = pools != 0 ? 1 : 0;
  }
  return known == 1;
}

std::uint64_t BackendState::kernel_address(const PointerInfo& info, std::uint64_t ptr,
                                           std::uint64_t lo, int device) {
  if (info.kind != MemoryKind::pinned_host) return ptr;
  const CUdevice dev = device_of(device, "registered memory");
  {
    std::lock_guard lock(context_mu_);
    signed char& known = host_pointer_ok_[static_cast<std::size_t>(device)];
    if (known < 0) {
      int ok = 0;
      CAI_DRIVER(*this, cuDeviceGetAttribute, &ok,
                 CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM, dev);
      known = ok != 0 ? 1 : 0;
    }
    if (known == 1) return ptr;
  }
  // The device address of the whole operand's memory (the same as the host's for memory of
  // cuMemAllocHost, another for registered memory when a device cannot use host pointers).
  CUdeviceptr mapped = 0;
  CAI_DRIVER(*this, cuMemHostGetDevicePointer, &mapped,
             reinterpret_cast<void*>(static_cast<std::uintptr_t>(lo)), 0);
  return mapped + (ptr - lo);
}

StreamMemory stream_alloc(std::size_t bytes, const StreamScope& on) {
  StreamMemory m;
  m.pooled = on.st.memory_pools_supported(on.device);
  if (m.pooled) {
    CAI_DRIVER(on.st, cuMemAllocAsync, &m.ptr, bytes, on.stream);
  } else {
    CAI_DRIVER(on.st, cuMemAlloc, &m.ptr, bytes);
  }
  return m;
}

void stream_free(const BackendState& st, const StreamMemory& m, CUstream stream) noexcept {
  if (m.pooled) {
    (void)st.api.cuMemFreeAsync(m.ptr, stream);
  } else {
    (void)st.api.cuStreamSynchronize(stream);
    (void)st.api.cuMemFree(m.ptr);
  }
}

}  // namespace detail

using detail::BackendState;
using detail::hex;
using namespace cu;

namespace {

// One allocation of `kind` by the driver; `entry` names the entry point called.
CUresult driver_alloc(BackendState& st, MemoryKind kind, std::size_t bytes, CUdeviceptr* p,
                      const char** entry) {
  switch (kind) {
    case MemoryKind::device:
      *entry = "cuMemAlloc";
      return st.api.cuMemAlloc(p, bytes);
    case MemoryKind::pinned_host: {
      void* h = nullptr;
      *entry = "cuMemAllocHost";
      const CUresult r = st.api.cuMemAllocHost(&h, bytes);
      *p = reinterpret_cast<std::uintptr_t>(h);
      return r;
    }
    case MemoryKind::managed:
      *entry = "cuMemAllocManaged";
      return st.api.cuMemAllocManaged(p, bytes, CU_MEM_ATTACH_GLOBAL);
    default:
      throw_error(Errc::value_error,
                  "alloc(): the backend allocates device, pinned_host or managed memory, not "
                  "kind " +
                      std::to_string(static_cast<int>(kind)));
  }
}

}  // namespace

std::uint64_t Backend::alloc(MemoryKind kind, std::size_t bytes) {
  if (bytes == 0) return 0;
  BackendState& st = *state_;
  st.current_context();
  CUdeviceptr p = 0;
  const char* entry = nullptr;
  CUresult r = driver_alloc(st, kind, bytes, &p, &entry);
  // Deferred frees may hold the memory: once they are done, one more try.
  if (r == CUDA_ERROR_OUT_OF_MEMORY && st.frees.flush())
    r = driver_alloc(st, kind, bytes, &p, &entry);
  if (r == CUDA_ERROR_OUT_OF_MEMORY) {
    throw_error(Errc::device_error, "alloc(): out of memory allocating " + std::to_string(bytes) +
                                        " bytes (" + entry + ": " + st.describe(r) + ")");
  }
  st.check(r, entry);
  st.remember(p, bytes, kind, false);
  return p;
}

namespace detail {

CheckedFree BackendState::check_free(std::uint64_t ptr) {
  CheckedFree f{ptr, pointer_info(ptr), ranges.find(ptr)};
  if (f.info.kind == MemoryKind::unregistered) {
    throw_error(Errc::value_error, "free(): " + hex(ptr) + " is not CUDA memory");
  }
  if (f.info.alloc_base != 0 && f.info.alloc_base != ptr) {
    throw_error(Errc::value_error, "free(): " + hex(ptr) + " is inside the allocation at " +
                                       hex(f.info.alloc_base) + "; pass its start");
  }
  if (f.own && !f.own->own) f.own.reset();
  return f;
}

void BackendState::free_checked(const CheckedFree& f) {
  const std::uint64_t ptr = f.ptr;
  const auto ctx = reinterpret_cast<CUcontext>(static_cast<std::uintptr_t>(f.info.context));
  ScopedContext scope(*this, ctx != nullptr ? ctx : current_context());
  if (f.ipc_close) {
    // As cuMemFree: work already queued may still use the mapping. The driver documents no
    // such wait for cuIpcCloseMemHandle, so wait for the context here.
    CAI_DRIVER(*this, cuCtxSynchronize);
    CAI_DRIVER(*this, cuIpcCloseMemHandle, ptr);
    ranges.forget(ptr, std::max<std::uint64_t>(f.info.alloc_size, 1));
    return;
  }
  if (f.info.kind == MemoryKind::pinned_host) {
    CAI_DRIVER(*this, cuMemFreeHost, reinterpret_cast<void*>(static_cast<std::uintptr_t>(ptr)));
  } else if (f.own && f.own->pooled) {
    // Memory of alloc_async freed without a stream: order it after all work of the context.
    CAI_DRIVER(*this, cuCtxSynchronize);
    CAI_DRIVER(*this, cuMemFreeAsync, ptr, stream_legacy());
  } else {
    CAI_DRIVER(*this, cuMemFree, ptr);
  }
  // Forgotten once the driver took it back (a refused free changes nothing).
  if (f.own) {
    ranges.remove_own(ptr);
  } else {
    ranges.forget(ptr, std::max<std::uint64_t>(f.info.alloc_size, 1));
  }
}

// ---------------------------------------------------------------------------------------------
// Deferred frees.

void FreeQueue::push(BackendState& st, CheckedFree f) {
  std::lock_guard lock(mu_);
  if (!thread_.joinable()) thread_ = std::thread([this, &st] { run(st); });
  if (f.marked) ++freeing_[f.ptr];
  queue_.push_back(std::move(f));
  in_flight_.fetch_add(1);
  work_.notify_one();
}

void FreeQueue::unmark(std::uint64_t base) {
  if (in_flight_.load(std::memory_order_acquire) == 0) return;
  std::lock_guard lock(mu_);
  // The frees queued so far stop counting (each decrements only while marked), so that a
  // later free of the same memory keeps it marked until that free itself is done.
  for (CheckedFree& f : queue_) {
    if (f.ptr == base) f.marked = false;
  }
  if (running_ == base) running_marked_ = false;
  freeing_.erase(base);
}

bool FreeQueue::freeing(std::uint64_t base) {
  if (in_flight_.load(std::memory_order_acquire) == 0) return false;  // the usual case
  std::lock_guard lock(mu_);
  return freeing_.count(base) != 0;
}

void FreeQueue::run(BackendState& st) {
  std::unique_lock lock(mu_);
  for (;;) {
    work_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, nothing left
    const CheckedFree f = std::move(queue_.front());
    queue_.pop_front();
    running_ = f.ptr;
    running_marked_ = f.marked;
    lock.unlock();
    try {
      st.free_checked(f);
    } catch (...) {
      // As a destructor's failed free: the allocation leaks, nothing else is touched.
    }
    lock.lock();
    if (auto it = freeing_.find(f.ptr);
        running_marked_ && it != freeing_.end() && --it->second == 0)
      freeing_.erase(it);
    running_ = 0;
    if (in_flight_.fetch_sub(1) == 1) done_.notify_all();
  }
}

bool FreeQueue::flush() {
  std::unique_lock lock(mu_);
  if (in_flight_.load() == 0) return false;
  done_.wait(lock, [&] { return in_flight_.load() == 0; });
  return true;
}

void FreeQueue::stop() {
  std::thread t;
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    work_.notify_one();
    t = std::move(thread_);
  }
  if (t.joinable()) t.join();
}

}  // namespace detail

void Backend::free(std::uint64_t ptr) {
  if (ptr == 0) return;
  BackendState& st = *state_;
  st.free_checked(st.check_free(ptr));
}

void Backend::free_deferred(std::uint64_t ptr) {
  if (ptr == 0) return;
  BackendState& st = *state_;
  detail::CheckedFree f = st.check_free(ptr);
  // From now on the memory reads as freed, for the backend's checks too.
  if (f.own) st.ranges.remove_own(ptr);
  st.frees.push(st, std::move(f));
}

void Backend::flush_frees() {
  state_->frees.flush();
}

PointerInfo Backend::pointer_info(std::uint64_t ptr) {
  return state_->pointer_info(ptr);
}

void Backend::host_register(std::uint64_t ptr, std::size_t bytes, bool read_only) {
  if (bytes == 0) return;
  BackendState& st = *state_;
  detail::check_range("host_register()", "memory", ptr, bytes);
  st.current_context();
  // Mapped for kernels (DEVICEMAP: without it the driver maps nothing for the device), for
  // every context; READ_ONLY is what lets the driver register memory mapped read-only.
  const unsigned flags = kMemHostRegisterPortable | kMemHostRegisterDeviceMap |
                         (read_only ? kMemHostRegisterReadOnly : 0u);
  CAI_DRIVER(st, cuMemHostRegister, reinterpret_cast<void*>(static_cast<std::uintptr_t>(ptr)),
             bytes, flags);
  st.remember(ptr, bytes, MemoryKind::pinned_host, false);
}

void Backend::host_unregister(std::uint64_t ptr) {
  BackendState& st = *state_;
  st.ranges.remove_own(ptr);
  st.current_context();  // cuMemHostUnregister needs one
  CAI_DRIVER(st, cuMemHostUnregister, reinterpret_cast<void*>(static_cast<std::uintptr_t>(ptr)));
}

PointerInfo Backend::check_kernel_memory(std::string_view where, std::string_view name,
                                         std::uint64_t lo, std::uint64_t hi, int device) {
  const ByteRange r{lo, hi};
  const PointerInfo info = state_->check_memory(where, name, r, false, device);
  if (!r.empty() && !detail::kernel_can_access(info, device)) {
    throw_error(Errc::device_error,
                std::string(where) + ": " + std::string(name) + " " + detail::range_text(r) +
                    " is memory of device " + std::to_string(info.device) +
                    ", which a kernel on device " + std::to_string(device) +
                    " cannot reach; copy it to device " + std::to_string(device) + " first");
  }
  // cai's own kernels are given the device address (kernel_address); a caller that checks
  // here passes its addresses to a kernel as they are.
  if (!r.empty() && info.kind == MemoryKind::pinned_host &&
      state_->kernel_address(info, lo, lo, device) != lo) {
    throw_error(Errc::device_error,
                std::string(where) + ": " + std::string(name) + " " + detail::range_text(r) +
                    " is page-locked host memory that a kernel on device " +
                    std::to_string(device) +
                    " reaches only at another address (cuMemHostGetDevicePointer: the device's "
                    "CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM is 0), and this kernel would be "
                    "given the host address; copy it to device " +
                    std::to_string(device) + " first");
  }
  return info;
}

std::uint64_t Backend::alloc_async(std::size_t bytes, StreamHandle s) {
  constexpr std::string_view where = "alloc_async()";
  CUstream stream = detail::to_stream(s, where);
  if (bytes == 0) return 0;
  BackendState& st = *state_;
  detail::StreamScope on(st, stream);
  const detail::StreamMemory m = detail::stream_alloc(bytes, on);
  st.remember(m.ptr, bytes, MemoryKind::device, m.pooled);
  return m.ptr;
}

void Backend::free_async(std::uint64_t ptr, StreamHandle s) {
  constexpr std::string_view where = "free_async()";
  CUstream stream = detail::to_stream(s, where);
  if (ptr == 0) return;
  BackendState& st = *state_;
  const std::optional<detail::Ranges::Entry> own = st.ranges.find(ptr);
  if (!own || !own->own || own->info.alloc_base != ptr) {
    throw_error(Errc::value_error, std::string(where) + ": " + hex(ptr) +
                                       " is not the start of an allocation of alloc_async() or "
                                       "alloc()");
  }
  detail::StreamScope on(st, stream);
  if (own->pooled) {
    CAI_DRIVER(st, cuMemFreeAsync, ptr, stream);
  } else {
    CAI_DRIVER(st, cuStreamSynchronize, stream);
    CAI_DRIVER(st, cuMemFree, ptr);
  }
  st.ranges.remove_own(ptr);
}

}  // namespace cai::device
