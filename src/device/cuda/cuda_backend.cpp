// The CUDA backend over the driver API: primary contexts, cuMem*, streams, events, and the
// kernels of kernels.cu loaded from the embedded PTX once per context.

#include "device/cuda/cuda_backend.h"

#ifndef CAI_HAVE_CUDA_HEADERS
#define CAI_HAVE_CUDA_HEADERS 0
#endif
#ifndef CAI_HAVE_CUDA_KERNELS
#define CAI_HAVE_CUDA_KERNELS 0
#endif

#include <iterator>
#include <string>

#include "cai/core/error.h"
#include "device/kernels/launch.h"

#if CAI_HAVE_CUDA_HEADERS
#include <algorithm>
#include <array>
#include <bit>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <map>

#include "device/checks.h"
#include "device/cuda/driver.h"
#include "device/cuda/foreign_ranges.h"
#include "device/kernels/plan.h"
#endif

namespace cai::device::detail {

std::span<const std::string_view> cuda_kernel_names() {
  return kernels::kernel_names;
}

bool cuda_kernels_built() {
  return CAI_HAVE_CUDA_KERNELS != 0;
}

#if !CAI_HAVE_CUDA_KERNELS
std::string_view cuda_kernels_ptx() {
  return {};
}
#endif

}  // namespace cai::device::detail

#if !CAI_HAVE_CUDA_HEADERS

namespace cai::device::detail {

std::unique_ptr<Backend> make_cuda_backend() {
  throw_error(Errc::device_error,
              "CUDA backend: cai was built without CUDA headers (no CUDA toolkit found at "
              "configure time); set CAI_BACKEND=sim to use the simulator");
}

bool probe_cuda() {
  return false;
}

}  // namespace cai::device::detail

namespace cai::device {

CudaInfo cuda_info() {
  CudaInfo info;
  info.error = "cai was built without CUDA headers (no CUDA toolkit at configure time)";
  return info;
}

}  // namespace cai::device

#else  // CAI_HAVE_CUDA_HEADERS

namespace cai::device::cuda {

namespace {

using detail::check_operand;
using detail::check_range;
using detail::check_stream_handle;
using detail::hex;
using detail::range_text;
using kernels::KernelParams;

static_assert(CAI_CUDA_MAX_RANK <= max_ndim, "the kernels' rank limit is for merged dims");

std::string version_text(int v) {
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

CUstream to_stream(StreamHandle s, std::string_view where) {
  check_stream_handle(s, where);
  // 1 and 2 are CU_STREAM_LEGACY and CU_STREAM_PER_THREAD, which the driver takes as they are.
  return reinterpret_cast<CUstream>(static_cast<std::uintptr_t>(s));
}

bool is_default_stream(StreamHandle s) {
  return s == kLegacyDefaultStream || s == kPerThreadDefaultStream;
}

CUevent to_event(EventHandle e, std::string_view where) {
  if (e == 0) {
    throw_error(Errc::value_error, std::string(where) + ": event handle 0 is not an event");
  }
  return reinterpret_cast<CUevent>(static_cast<std::uintptr_t>(e));
}

void require_kernels(std::string_view where) {
  if (!detail::cuda_kernels_built()) {
    throw_error(Errc::not_implemented,
                std::string(where) +
                    ": cai was built without nvcc, so the CUDA backend has no kernels (fill, "
                    "add, strided copies); rebuild with the CUDA toolkit or set CAI_BACKEND=sim");
  }
}

PointerInfo query_pointer(std::uint64_t ptr) {
  PointerInfo info;
  if (ptr == 0) return info;
  current_context();
  unsigned int memory_type = 0;
  int ordinal = -1;
  CUcontext ctx = nullptr;
  // The driver writes a bool here; zero-initialised wider storage reads the same.
  unsigned int managed = 0;
  CUdeviceptr start = 0;
  std::size_t size = 0;
  CUpointer_attribute attrs[] = {
      CU_POINTER_ATTRIBUTE_MEMORY_TYPE,      CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
      CU_POINTER_ATTRIBUTE_CONTEXT,          CU_POINTER_ATTRIBUTE_IS_MANAGED,
      CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE,
  };
  void* data[] = {&memory_type, &ordinal, &ctx, &managed, &start, &size};
  CUresult r = api().pointer_get_attributes(static_cast<unsigned int>(std::size(attrs)), attrs,
                                            data, static_cast<CUdeviceptr>(ptr));
  // Memory CUDA does not know (pageable host memory) reads as an error on some drivers and as
  // memory type 0 on others; both mean unregistered.
  if (r == CUDA_ERROR_INVALID_VALUE || r == CUDA_ERROR_INVALID_CONTEXT) return info;
  check(r, "cuPointerGetAttributes");
  if (managed != 0) {
    info.kind = MemoryKind::managed;
    info.device = ordinal;
    info.host_accessible = true;
    info.device_accessible = true;
  } else if (memory_type == CU_MEMORYTYPE_DEVICE) {
    info.kind = MemoryKind::device;
    info.device = ordinal;
    info.device_accessible = true;
  } else if (memory_type == CU_MEMORYTYPE_HOST) {
    // Page-locked and, with unified addressing, mapped for every device. The ordinal is the
    // device it was allocated against, as on the simulator.
    info.kind = MemoryKind::pinned_host;
    info.device = ordinal;
    info.host_accessible = true;
    info.device_accessible = true;
  } else {
    return info;
  }
  info.context = reinterpret_cast<std::uintptr_t>(ctx);
  info.alloc_base = start;
  info.alloc_size = size;
  return info;
}

// Whether a kernel on `device` may dereference the memory. Device memory of another device is
// left to cuMemcpyAsync (staging): peer access may not be enabled.
bool kernel_can_access(const PointerInfo& p, int device) {
  switch (p.kind) {
    case MemoryKind::managed:
    case MemoryKind::pinned_host:
      return true;
    case MemoryKind::device:
      return p.device == device;
    case MemoryKind::unregistered:
      return false;
  }
  return false;
}

// The context of a stream, current for the scope, and its device.
struct StreamScope {
  explicit StreamScope(CUstream s) : stream(s), context(stream_context(s)), scope(context) {
    CUdevice dev = 0;
    check(api().ctx_get_device(&dev), "cuCtxGetDevice");
    device = ordinal_of(dev);
  }
  CUstream stream;
  CUcontext context;
  ScopedContext scope;
  int device = 0;
};

bool memory_pools_supported(int device) {
  int pools = 0;
  check(api().device_get_attribute(&pools, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED,
                                   device_of(device, "memory pools")),
        "cuDeviceGetAttribute");
  return pools != 0;
}

// Device memory for one stream: stream-ordered (cuMemAllocAsync) where the device has memory
// pools, else cuMemAlloc, whose free must then wait for the stream.
struct StreamMemory {
  CUdeviceptr ptr = 0;
  bool pooled = false;
};

StreamMemory stream_alloc(std::size_t bytes, const StreamScope& on) {
  StreamMemory m;
  m.pooled = memory_pools_supported(on.device);
  if (m.pooled) {
    check(api().mem_alloc_async(&m.ptr, bytes, on.stream), "cuMemAllocAsync");
  } else {
    check(api().mem_alloc(&m.ptr, bytes), "cuMemAlloc");
  }
  return m;
}

// Never throws (destructors call it); a failed free leaks the buffer.
void stream_free(const StreamMemory& m, CUstream stream) noexcept {
  const DriverApi& a = driver_state().api;
  if (m.pooled) {
    (void)a.mem_free_async(m.ptr, stream);
  } else {
    (void)a.stream_synchronize(stream);
    (void)a.mem_free(m.ptr);
  }
}

// Temporary device buffers for operands a kernel cannot reach (pageable host memory, another
// device's memory) or that overlap: stream-ordered, freed after the operation's last use.
class Staging {
 public:
  explicit Staging(const StreamScope& on) : on_(on) {}
  ~Staging() {
    for (const StreamMemory& m : temps_) stream_free(m, on_.stream);
  }
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;

  /// A device copy of the bytes of r; returns where `ptr` lands in it.
  std::uint64_t in(std::uint64_t ptr, const ByteRange& r) {
    const CUdeviceptr t = temp(r.size());
    check(api().memcpy_async(t, r.lo, r.size(), on_.stream), "cuMemcpyAsync");
    return t + (ptr - r.lo);
  }

  /// A device buffer standing for the bytes of r, copied back by finish(). Their old values
  /// are copied in first unless the operation overwrites every byte (`dense`).
  std::uint64_t out(std::uint64_t ptr, const ByteRange& r, bool dense) {
    const CUdeviceptr t = temp(r.size());
    if (!dense) check(api().memcpy_async(t, r.lo, r.size(), on_.stream), "cuMemcpyAsync");
    write_backs_.push_back({r.lo, t, r.size()});
    return t + (ptr - r.lo);
  }

  /// Enqueues the copies back to the staged outputs.
  void finish() {
    for (const WriteBack& w : write_backs_) {
      check(api().memcpy_async(w.dst, w.temp, w.bytes, on_.stream), "cuMemcpyAsync");
    }
  }

 private:
  struct WriteBack {
    std::uint64_t dst;
    CUdeviceptr temp;
    std::size_t bytes;
  };

  CUdeviceptr temp(std::size_t bytes) {
    temps_.push_back(stream_alloc(bytes, on_));
    return temps_.back().ptr;
  }

  const StreamScope& on_;
  std::vector<StreamMemory> temps_;
  std::vector<WriteBack> write_backs_;
};

// The kernels of one context, loaded from the PTX on first use there.
struct Module {
  std::array<CUfunction, kernels::kernel_count> fn{};
};

const Module& module_for(CUcontext ctx) {
  static std::mutex mutex;
  static std::unordered_map<CUcontext, std::unique_ptr<Module> > modules;
  std::lock_guard lock(mutex);
  auto it = modules.find(ctx);
  if (it != modules.end()) return *it->second;
  const DriverApi& a = api();
  std::string_view ptx = detail::cuda_kernels_ptx();
  CUmodule mod = nullptr;
  // The driver JIT-compiles the PTX for this context's GPU (and caches the result on disk).
  CUresult r = a.module_load_data(&mod, ptx.data());
  if (r == CUDA_ERROR_UNSUPPORTED_PTX_VERSION) {
    fail(r, "cuModuleLoadData",
         "; the kernels were compiled by CUDA " + version_text(CUDA_VERSION) +
             " and need a driver for that version or later, this one supports CUDA " +
             version_text(driver_state().version) +
             "; update the driver or build cai with an older toolkit");
  }
  check(r, "cuModuleLoadData");
  auto m = std::make_unique<Module>();
  for (std::size_t i = 0; i < m->fn.size(); ++i) {
    // The names are literals, so data() is NUL-terminated.
    check(a.module_get_function(&m->fn[i], mod, kernels::kernel_names[i].data()),
          "cuModuleGetFunction");
  }
  return *modules.emplace(ctx, std::move(m)).first->second;
}

// One launch as planned (kernels/plan.h).
void launch(const StreamScope& on, const kernels::LaunchPlan& plan) {
  const Module& m = module_for(on.context);
  KernelParams p = plan.params;
  void* args[] = {&p};
  check(api().launch_kernel(m.fn[static_cast<std::size_t>(plan.index)], plan.grid, 1, 1,
                            plan.block_x, plan.block_y, 1, 0, on.stream, args, nullptr),
        "cuLaunchKernel");
}

// The alignment each element type's kernel loads at (complex values load as two parts).
#define CAI_ALIGNMENT(ctx, name, kind, value) alignof(value),
constexpr std::size_t kAlignment[] = {CAI_ELEMENT_TYPES(CAI_ALIGNMENT, _)};
#undef CAI_ALIGNMENT

void check_aligned(std::string_view where, std::string_view name, const Operand& op,
                   std::size_t align) {
  bool ok = op.ptr % align == 0;
  const auto shape = op.layout.shape();
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] != 1 && op.layout.strides()[d] % static_cast<std::int64_t>(align) != 0) ok = false;
  }
  if (!ok) {
    throw_error(Errc::not_implemented,
                std::string(where) + ": " + std::string(name) + " at " + hex(op.ptr) +
                    " or one of its strides is not a multiple of " + std::to_string(align) +
                    " bytes; the CUDA kernels need naturally aligned elements");
  }
}

// What the backend knows of the memory it allocated itself: exact allocation ranges, without a
// driver call per operation. Entries are added by alloc/alloc_async and dropped by
// free/free_async, so they are never stale. Other memory (allocated by another library) is
// asked of the driver at each use: it can be freed or reallocated behind our back.
class AllocationCache {
 public:
  void add(std::uint64_t base, const PointerInfo& info, bool pooled) {
    std::lock_guard lock(mutex_);
    entries_[base] = {info, pooled};
  }
  std::optional<PointerInfo> find(std::uint64_t ptr) const {
    std::lock_guard lock(mutex_);
    auto it = entries_.upper_bound(ptr);
    if (it == entries_.begin()) return std::nullopt;
    --it;
    if (ptr >= it->first + it->second.info.alloc_size) return std::nullopt;
    return it->second.info;
  }
  /// Removes the allocation that starts at base; returns whether it was pooled (nullopt: none).
  std::optional<bool> remove(std::uint64_t base) {
    std::lock_guard lock(mutex_);
    auto it = entries_.find(base);
    if (it == entries_.end()) return std::nullopt;
    const bool pooled = it->second.pooled;
    entries_.erase(it);
    return pooled;
  }

 private:
  struct Entry {
    PointerInfo info;
    bool pooled = false;
  };
  mutable std::mutex mutex_;
  std::map<std::uint64_t, Entry> entries_;
};

std::size_t foreign_range_capacity() {
  const char* env = std::getenv("CAI_CUDA_POINTER_CACHE");
  return env != nullptr && std::string_view(env) == "0" ? 0 : 1024;
}

class CudaBackend final : public Backend {
 public:
  std::string_view name() const override { return "cuda"; }

  int device_count() override { return static_cast<int>(driver_state().devices.size()); }

  DeviceProperties properties(int device) override {
    const DriverApi& a = api();
    CUdevice dev = device_of(device, "properties()");
    DeviceProperties p;
    p.ordinal = device;
    char name[256] = {};
    check(a.device_get_name(name, static_cast<int>(sizeof name) - 1, dev), "cuDeviceGetName");
    p.name = name;
    check(
        a.device_get_attribute(&p.compute_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev),
        "cuDeviceGetAttribute");
    check(
        a.device_get_attribute(&p.compute_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev),
        "cuDeviceGetAttribute");
    check(a.device_get_attribute(&p.multiprocessors, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev),
          "cuDeviceGetAttribute");
    std::size_t total = 0;
    check(a.device_total_mem(&total, dev), "cuDeviceTotalMem");
    p.total_memory = total;
    CUuuid uuid{};
    check(a.device_get_uuid(&uuid, dev), "cuDeviceGetUuid");
    static_assert(sizeof uuid.bytes == sizeof p.uuid);
    std::memcpy(p.uuid.data(), uuid.bytes, sizeof uuid.bytes);
    return p;
  }

  int current_device() override {
    current_context();
    CUdevice dev = 0;
    check(api().ctx_get_device(&dev), "cuCtxGetDevice");
    return ordinal_of(dev);
  }

  void set_current_device(int device) override {
    CUcontext ctx = primary_context(device);
    check(api().ctx_set_current(ctx), "cuCtxSetCurrent");
  }

  std::uint64_t alloc(MemoryKind kind, std::size_t bytes) override {
    if (bytes == 0) return 0;
    const DriverApi& a = api();
    current_context();
    CUdeviceptr p = 0;
    switch (kind) {
      case MemoryKind::device:
        check(a.mem_alloc(&p, bytes), "cuMemAlloc");
        break;
      case MemoryKind::pinned_host: {
        void* h = nullptr;
        check(a.mem_alloc_host(&h, bytes), "cuMemAllocHost");
        p = reinterpret_cast<std::uintptr_t>(h);
        break;
      }
      case MemoryKind::managed:
        check(a.mem_alloc_managed(&p, bytes, CU_MEM_ATTACH_GLOBAL), "cuMemAllocManaged");
        break;
      case MemoryKind::unregistered:
        throw_error(Errc::value_error,
                    "alloc(): the CUDA backend allocates device, pinned_host or managed memory, "
                    "not kind " +
                        std::to_string(static_cast<int>(kind)));
    }
    remember(p, bytes, kind, false);
    return p;
  }

  void free(std::uint64_t ptr) override {
    if (ptr == 0) return;
    PointerInfo info = pointer_info(ptr);
    if (info.kind == MemoryKind::unregistered) {
      throw_error(Errc::value_error, "free(): " + hex(ptr) + " is not CUDA memory");
    }
    if (info.alloc_base != 0 && info.alloc_base != ptr) {
      throw_error(Errc::value_error, "free(): " + hex(ptr) + " is inside the allocation at " +
                                         hex(info.alloc_base) + "; pass its start");
    }
    const std::optional<bool> pooled = cache_.remove(ptr);
    const DriverApi& a = api();
    CUcontext ctx = reinterpret_cast<CUcontext>(static_cast<std::uintptr_t>(info.context));
    ScopedContext scope(ctx != nullptr ? ctx : current_context());
    if (info.kind == MemoryKind::pinned_host) {
      check(a.mem_free_host(reinterpret_cast<void*>(static_cast<std::uintptr_t>(ptr))),
            "cuMemFreeHost");
    } else if (pooled.value_or(false)) {
      // Memory of alloc_async freed without a stream: order it after all work of the context.
      check(a.ctx_synchronize(), "cuCtxSynchronize");
      check(a.mem_free_async(ptr, CU_STREAM_LEGACY), "cuMemFreeAsync");
    } else {
      check(a.mem_free(ptr), "cuMemFree");
    }
  }

  PointerInfo pointer_info(std::uint64_t ptr) override {
    if (std::optional<PointerInfo> known = cache_.find(ptr)) return *known;
    if (std::optional<PointerInfo> known = foreign_.find(ptr)) return *known;
    counts_.pointer_query.bump();
    PointerInfo info = query_pointer(ptr);
    if (info.kind != MemoryKind::unregistered && info.alloc_size == 0) {
      // No range attribute for this memory: ask for the allocation's range directly.
      CUdeviceptr base = 0;
      std::size_t size = 0;
      if (api().mem_get_address_range(&base, &size, ptr) == CUDA_SUCCESS) {
        info.alloc_base = base;
        info.alloc_size = size;
      }
    }
    foreign_.add(info);
    return info;
  }

  std::uint64_t alloc_async(std::size_t bytes, StreamHandle s) override {
    constexpr std::string_view where = "alloc_async()";
    CUstream stream = to_stream(s, where);
    if (bytes == 0) return 0;
    StreamScope on(stream);
    const StreamMemory m = stream_alloc(bytes, on);
    remember(m.ptr, bytes, MemoryKind::device, m.pooled);
    return m.ptr;
  }

  void free_async(std::uint64_t ptr, StreamHandle s) override {
    constexpr std::string_view where = "free_async()";
    CUstream stream = to_stream(s, where);
    if (ptr == 0) return;
    const std::optional<bool> pooled = cache_.remove(ptr);
    if (!pooled) {
      throw_error(Errc::value_error, std::string(where) + ": " + hex(ptr) +
                                         " is not the start of an allocation of alloc_async() or "
                                         "alloc()");
    }
    StreamScope on(stream);
    stream_free({ptr, *pooled}, stream);
  }

  void memset_async(std::uint64_t dst, int byte, std::size_t bytes, StreamHandle s) override {
    constexpr std::string_view where = "memset_async()";
    CUstream stream = to_stream(s, where);
    const ByteRange r = check_range(where, "dst", dst, bytes);
    if (bytes == 0) return;
    StreamScope on(stream);
    const auto value = static_cast<unsigned char>(byte);
    if (kernel_can_access(check_memory(where, "dst", r, false), on.device)) {
      check(api().memset_d8_async(dst, value, bytes, stream), "cuMemsetD8Async");
      return;
    }
    // Another device's memory: set a local buffer, let cuMemcpyAsync cross over.
    Staging stage(on);
    const std::uint64_t t = stage.out(dst, r, true);
    check(api().memset_d8_async(t, value, bytes, stream), "cuMemsetD8Async");
    stage.finish();
  }

  void copy_async(std::uint64_t dst, std::uint64_t src, std::size_t bytes,
                  StreamHandle s) override {
    constexpr std::string_view where = "copy_async()";
    CUstream stream = to_stream(s, where);
    const ByteRange dr = check_range(where, "dst", dst, bytes);
    const ByteRange sr = check_range(where, "src", src, bytes);
    if (bytes == 0 || dst == src) return;
    StreamScope on(stream);
    check_memory(where, "dst", dr, true);
    check_memory(where, "src", sr, true);
    if (dr.intersects(sr)) {
      // cuMemcpy is undefined on overlap; go through a copy of the source (memmove).
      Staging stage(on);
      const std::uint64_t t = stage.in(src, sr);
      check(api().memcpy_async(dst, t, bytes, stream), "cuMemcpyAsync");
      return;
    }
    check(api().memcpy_async(dst, src, bytes, stream), "cuMemcpyAsync");
  }

  void copy_strided_async(const Operand& dst, const Operand& src, StreamHandle s) override {
    constexpr std::string_view where = "copy_strided_async()";
    CUstream stream = to_stream(s, where);
    detail::check_same_layout_size(where, "dst", dst, "src", src);
    const ByteRange dr = check_operand(where, "dst", dst);
    const ByteRange sr = check_operand(where, "src", src);
    const Layout& layout = dst.layout;
    if (layout.nbytes() == 0) return;
    StreamScope on(stream);
    const PointerInfo dinfo = check_memory(where, "dst", dr, dst.host);
    const PointerInfo sinfo = check_memory(where, "src", sr, src.host);
    if (same_elements(dst.ptr, layout.strides(), src.ptr, src.layout.strides(), layout.shape())) {
      return;
    }
    const bool overlap = dr.intersects(sr);
    if (same_elements(0, layout.strides(), 0, src.layout.strides(), layout.shape()) &&
        layout.is_dense()) {
      // Both sides put the same bytes at the same offsets without gaps (e.g. both
      // C-contiguous): one plain copy, whatever the memory kinds.
      Staging stage(on);
      const std::uint64_t from = overlap ? stage.in(sr.lo, sr) : sr.lo;
      check(api().memcpy_async(dr.lo, from, dr.size(), stream), "cuMemcpyAsync");
      return;
    }
    require_kernels(where);
    Staging stage(on);
    std::uint64_t sp = src.ptr;
    std::uint64_t dp = dst.ptr;
    // The source is staged when the kernel cannot read it, or so that the result does not
    // depend on the order the threads run in when it overlaps the destination.
    if (overlap || !kernel_can_access(sinfo, on.device)) sp = stage.in(src.ptr, sr);
    if (!kernel_can_access(dinfo, on.device)) dp = stage.out(dst.ptr, dr, layout.is_dense());
    launch(on, kernels::plan_copy(where, dp, sp, kernels::merge_operands<2>({&dst, &src}),
                                  layout.itemsize()));
    stage.finish();
  }

  void fill_async(const Operand& dst, const void* value, StreamHandle s) override {
    constexpr std::string_view where = "fill_async()";
    CUstream stream = to_stream(s, where);
    const ByteRange dr = check_operand(where, "dst", dst);
    const Layout& layout = dst.layout;
    if (layout.nbytes() == 0) return;
    if (value == nullptr) {
      throw_error(Errc::value_error, std::string(where) + ": value is a null pointer");
    }
    StreamScope on(stream);
    const PointerInfo info = check_memory(where, "dst", dr, false);
    require_kernels(where);
    Staging stage(on);
    std::uint64_t dp = dst.ptr;
    if (!kernel_can_access(info, on.device)) dp = stage.out(dst.ptr, dr, layout.is_dense());
    launch(on, kernels::plan_fill(where, dp, kernels::merge_operands<1>({&dst}), layout.itemsize(),
                                  value));
    stage.finish();
  }

  void elementwise_async(ElementwiseOp op, ElementType type, std::span<const Operand> operands,
                         StreamHandle s) override {
    const std::string where =
        std::string(is_valid(op) ? info(op).name : "elementwise") + "_async()";
    CUstream stream = to_stream(s, where);
    const auto ranges = detail::check_elementwise(where, op, type, operands);
    if (operands[0].layout.size() == 0) return;
    require_kernels(where);
    const std::size_t align = kAlignment[static_cast<int>(type)];
    for (std::size_t k = 0; k < operands.size(); ++k) {
      check_aligned(where, elementwise_operand_name(k), operands[k], align);
    }
    StreamScope on(stream);
    std::array<PointerInfo, CAI_KERNEL_MAX_OPERANDS> infos;
    for (std::size_t k = 0; k < operands.size(); ++k) {
      infos[k] = check_memory(where, elementwise_operand_name(k), ranges[k], false);
    }
    Staging stage(on);
    std::array<std::uint64_t, CAI_KERNEL_MAX_OPERANDS> ptrs{};
    for (std::size_t k = 0; k < operands.size(); ++k) {
      ptrs[k] = operands[k].ptr;
      if (kernel_can_access(infos[k], on.device)) continue;
      ptrs[k] = k == 0 ? stage.out(ptrs[k], ranges[k], operands[k].layout.is_dense())
                       : stage.in(ptrs[k], ranges[k]);
    }
    switch (operands.size()) {
      case 2:
        launch(on, kernels::plan_elementwise<2>(
                       where, op, type, {ptrs[0], ptrs[1]},
                       kernels::merge_operands<2>({&operands[0], &operands[1]})));
        break;
      case 3:
        launch(on, kernels::plan_elementwise<3>(
                       where, op, type, {ptrs[0], ptrs[1], ptrs[2]},
                       kernels::merge_operands<3>({&operands[0], &operands[1], &operands[2]})));
        break;
      default:
        throw_error(Errc::not_implemented,
                    where + ": no launch for " + std::to_string(operands.size()) + " operands");
    }
    stage.finish();
  }

  StreamHandle stream_create(bool non_blocking) override {
    const DriverApi& a = api();
    current_context();
    CUstream s = nullptr;
    check(a.stream_create(&s, non_blocking ? CU_STREAM_NON_BLOCKING : CU_STREAM_DEFAULT),
          "cuStreamCreate");
    return reinterpret_cast<std::uintptr_t>(s);
  }

  void stream_destroy(StreamHandle s) override {
    constexpr std::string_view where = "stream_destroy()";
    CUstream stream = to_stream(s, where);
    if (is_default_stream(s)) {
      throw_error(Errc::value_error,
                  std::string(where) + ": the default streams (1, 2) cannot be destroyed");
    }
    check(api().stream_destroy(stream), "cuStreamDestroy");
  }

  void stream_synchronize(StreamHandle s) override {
    counts_.stream_synchronize.bump();
    CUstream stream = to_stream(s, "stream_synchronize()");
    if (is_default_stream(s)) current_context();
    check(api().stream_synchronize(stream), "cuStreamSynchronize");
  }

  bool stream_query(StreamHandle s) override {
    CUstream stream = to_stream(s, "stream_query()");
    if (is_default_stream(s)) current_context();
    CUresult r = api().stream_query(stream);
    if (r == CUDA_ERROR_NOT_READY) return false;
    check(r, "cuStreamQuery");
    return true;
  }

  EventHandle event_create(bool timing) override {
    counts_.event_create.bump();
    const DriverApi& a = api();
    current_context();
    CUevent e = nullptr;
    check(a.event_create(&e, timing ? CU_EVENT_DEFAULT : CU_EVENT_DISABLE_TIMING), "cuEventCreate");
    return reinterpret_cast<std::uintptr_t>(e);
  }

  void event_destroy(EventHandle e) override {
    check(api().event_destroy(to_event(e, "event_destroy()")), "cuEventDestroy");
  }

  void event_record(EventHandle e, StreamHandle s) override {
    counts_.event_record.bump();
    constexpr std::string_view where = "event_record()";
    CUevent event = to_event(e, where);
    CUstream stream = to_stream(s, where);
    if (is_default_stream(s)) current_context();
    check(api().event_record(event, stream), "cuEventRecord");
  }

  void stream_wait_event(StreamHandle s, EventHandle e) override {
    counts_.stream_wait_event.bump();
    constexpr std::string_view where = "stream_wait_event()";
    CUstream stream = to_stream(s, where);
    CUevent event = to_event(e, where);
    if (is_default_stream(s)) current_context();
    check(api().stream_wait_event(stream, event, 0), "cuStreamWaitEvent");
  }

  void event_synchronize(EventHandle e) override {
    check(api().event_synchronize(to_event(e, "event_synchronize()")), "cuEventSynchronize");
  }

  bool event_query(EventHandle e) override {
    CUresult r = api().event_query(to_event(e, "event_query()"));
    if (r == CUDA_ERROR_NOT_READY) return false;
    check(r, "cuEventQuery");
    return true;
  }

  float event_elapsed_ms(EventHandle start, EventHandle end) override {
    constexpr std::string_view where = "event_elapsed_ms()";
    float ms = 0;
    check(api().event_elapsed_time(&ms, to_event(start, where), to_event(end, where)),
          "cuEventElapsedTime");
    return ms;
  }

  void synchronize() override {
    current_context();
    check(api().ctx_synchronize(), "cuCtxSynchronize");
  }

  // Several devices and several processes (docs/scale-out.md).

  int stream_device(StreamHandle s) override {
    CUstream stream = to_stream(s, "stream_device()");
    if (is_default_stream(s)) return current_device();
    return context_device(stream_context(stream));
  }

  void copy_peer_async(std::uint64_t dst, int dst_device, std::uint64_t src, int src_device,
                       std::size_t bytes, StreamHandle s) override {
    constexpr std::string_view where = "copy_peer_async()";
    CUstream stream = to_stream(s, where);
    check_range(where, "dst", dst, bytes);
    check_range(where, "src", src, bytes);
    if (bytes == 0) return;
    CUcontext dst_ctx = primary_context(dst_device);
    CUcontext src_ctx = primary_context(src_device);
    StreamScope on(stream);
    check(api().memcpy_peer_async(dst, dst_ctx, src, src_ctx, bytes, stream), "cuMemcpyPeerAsync");
  }

  IpcMemoryHandle ipc_export_memory(std::uint64_t base) override {
    const PointerInfo info = query_pointer(base);
    if (info.kind != MemoryKind::device) {
      throw_error(Errc::device_error, "ipc_export_memory(): " + hex(base) +
                                          " is not device memory; only memory from cuMemAlloc "
                                          "can be shared with another process");
    }
    if (info.alloc_base != base) {
      throw_error(Errc::value_error, "ipc_export_memory(): " + hex(base) +
                                         " is inside the allocation at " + hex(info.alloc_base) +
                                         "; pass its start");
    }
    ScopedContext scope(reinterpret_cast<CUcontext>(static_cast<std::uintptr_t>(info.context)));
    CUipcMemHandle h{};
    check(api().ipc_get_mem_handle(&h, base), "cuIpcGetMemHandle");
    IpcMemoryHandle out;
    static_assert(sizeof h == sizeof out.bytes);
    std::memcpy(out.bytes.data(), &h, sizeof h);
    return out;
  }

  std::uint64_t ipc_open_memory(const IpcMemoryHandle& handle) override {
    const DriverApi& a = api();
    current_context();
    CUipcMemHandle h{};
    std::memcpy(&h, handle.bytes.data(), sizeof h);
    CUdeviceptr p = 0;
    // Lazy peer access: the memory may be opened on another device than it lives on.
    check(a.ipc_open_mem_handle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), "cuIpcOpenMemHandle");
    return p;
  }

  void ipc_close_memory(std::uint64_t base) override {
    const PointerInfo info = query_pointer(base);
    CUcontext ctx = reinterpret_cast<CUcontext>(static_cast<std::uintptr_t>(info.context));
    ScopedContext scope(ctx != nullptr ? ctx : current_context());
    // As free(): work already queued may still use the memory. The driver documents no such
    // wait for cuIpcCloseMemHandle, so wait for the context here.
    check(api().ctx_synchronize(), "cuCtxSynchronize");
    check(api().ipc_close_mem_handle(base), "cuIpcCloseMemHandle");
    foreign_.forget(base, std::max<std::uint64_t>(info.alloc_size, 1));
  }

  EventHandle ipc_event_create() override {
    const DriverApi& a = api();
    current_context();
    CUevent e = nullptr;
    check(a.event_create(&e, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING), "cuEventCreate");
    return reinterpret_cast<std::uintptr_t>(e);
  }

  IpcEventHandle ipc_export_event(EventHandle e) override {
    CUipcEventHandle h{};
    check(api().ipc_get_event_handle(&h, to_event(e, "ipc_export_event()")), "cuIpcGetEventHandle");
    IpcEventHandle out;
    static_assert(sizeof h == sizeof out.bytes);
    std::memcpy(out.bytes.data(), &h, sizeof h);
    return out;
  }

  EventHandle ipc_open_event(const IpcEventHandle& handle) override {
    const DriverApi& a = api();
    current_context();
    CUipcEventHandle h{};
    std::memcpy(&h, handle.bytes.data(), sizeof h);
    CUevent e = nullptr;
    check(a.ipc_open_event_handle(&e, h), "cuIpcOpenEventHandle");
    return reinterpret_cast<std::uintptr_t>(e);
  }

 private:
  // Records an allocation of the current context, from what we asked for rather than from a
  // driver query (a stream-ordered allocation may not be mapped yet).
  void remember(std::uint64_t ptr, std::size_t bytes, MemoryKind kind, bool pooled) {
    PointerInfo info;
    info.kind = kind;
    info.context = reinterpret_cast<std::uintptr_t>(current_context());
    CUdevice dev = 0;
    check(api().ctx_get_device(&dev), "cuCtxGetDevice");
    info.device = ordinal_of(dev);
    info.host_accessible = kind != MemoryKind::device;
    info.device_accessible = true;
    info.alloc_base = ptr;
    info.alloc_size = bytes;
    cache_.add(ptr, info, pooled);
  }

  // Checks the bytes r of an operand before any work: array data must be memory of this
  // backend (device, pinned_host or managed) within one live allocation; `host` operands may
  // also be pageable host memory. Returns what the memory is. Needs a current context.
  PointerInfo check_memory(std::string_view where, std::string_view name, const ByteRange& r,
                           bool host, bool asked_again = false) {
    if (r.empty()) return {};
    const std::string what = std::string(where) + ": " + std::string(name) + " " + range_text(r);
    const PointerInfo info = pointer_info(r.lo);
    if (info.kind == MemoryKind::unregistered) {
      if (host) {
        const PointerInfo last = pointer_info(r.hi - 1);
        if (last.kind != MemoryKind::unregistered) {
          throw_error(Errc::device_error,
                      what + " starts outside the allocation " +
                          range_text({last.alloc_base, last.alloc_base + last.alloc_size}) +
                          " but runs into it");
        }
        return info;
      }
      throw_error(Errc::device_error,
                  what +
                      " is not CUDA memory (a foreign or freed pointer, or pageable host "
                      "memory); array data must be device, pinned_host or managed memory");
    }
    const ByteRange alloc{info.alloc_base, info.alloc_base + info.alloc_size};
    if (info.alloc_size != 0 && !alloc.contains(r)) {
      if (!asked_again && !cache_.find(r.lo)) {
        // A remembered foreign range may be stale (freed, its addresses reused): ask again.
        foreign_.forget(info.alloc_base, info.alloc_size);
        return check_memory(where, name, r, host, true);
      }
      throw_error(Errc::device_error,
                  what + " runs past the end of its allocation " + range_text(alloc));
    }
    return info;
  }

  AllocationCache cache_;
  // Memory of other libraries' pools, as the driver described it; CAI_CUDA_POINTER_CACHE=0
  // asks the driver at every use instead (to catch a use after the owner returned the memory
  // to the driver, at about a microsecond per operand).
  ForeignRanges foreign_{foreign_range_capacity()};
};

}  // namespace

}  // namespace cai::device::cuda

namespace cai::device::detail {

std::unique_ptr<Backend> make_cuda_backend() {
  cuda::api();  // throws the reason the driver could not be loaded
  return std::make_unique<cuda::CudaBackend>();
}

bool probe_cuda() {
  return cuda::driver_state().ok;
}

}  // namespace cai::device::detail

namespace cai::device {

CudaInfo cuda_info() {
  CudaInfo info;
  info.headers_version = CUDA_VERSION;
  info.kernels = CAI_HAVE_CUDA_KERNELS != 0;
  const cuda::DriverState& st = cuda::driver_state();
  info.driver_loaded = st.ok;
  info.driver_version = st.version;
  info.devices = static_cast<int>(st.devices.size());
  info.error = st.error;
  return info;
}

}  // namespace cai::device

#endif  // CAI_HAVE_CUDA_HEADERS
