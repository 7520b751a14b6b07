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

#if CAI_HAVE_CUDA_HEADERS
#include <algorithm>
#include <array>
#include <bit>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "device/checks.h"
#include "device/cuda/driver.h"
#include "device/cuda/kernel_params.h"
#endif

namespace cai::device::detail {

namespace {

// Indexed by kCopy/kFill + log2(word width) and kAdd + ElementType.
constexpr std::string_view kKernelNames[] = {
    "cai_copy_strided_1",  "cai_copy_strided_2", "cai_copy_strided_4", "cai_copy_strided_8",
    "cai_copy_strided_16", "cai_fill_1",         "cai_fill_2",         "cai_fill_4",
    "cai_fill_8",          "cai_fill_16",        "cai_add_b8",         "cai_add_i8",
    "cai_add_i16",         "cai_add_i32",        "cai_add_i64",        "cai_add_u8",
    "cai_add_u16",         "cai_add_u32",        "cai_add_u64",        "cai_add_f16",
    "cai_add_f32",         "cai_add_f64",        "cai_add_c64",        "cai_add_c128",
};

static_assert(std::size(kKernelNames) == 24, "5 copies, 5 fills, 14 adds");

}  // namespace

std::span<const std::string_view> cuda_kernel_names() {
  return kKernelNames;
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

using detail::AddressRange;
using detail::check_element_type;
using detail::check_itemsize;
using detail::check_operand;
using detail::check_range;
using detail::check_shape;
using detail::check_stream_handle;
using detail::hex;
using detail::kMaxDims;
using namespace cai::device::cuda_kernels;

constexpr std::size_t kCopy = 0, kFill = 5, kAdd = 10;
constexpr std::size_t kKernelCount = kAdd + 14;
// Enough blocks to fill any current GPU; the kernels loop over the rest (grid-stride).
constexpr std::int64_t kMaxBlocks = 65535;

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

// Memset, fill and add take device, pinned_host or managed memory, as on the simulator: a
// kernel cannot reach pageable host memory. Returns whether the kernel can use it in place
// (false: another device's memory, staged).
bool kernel_operand(std::string_view where, std::string_view name, std::uint64_t ptr, int device) {
  const PointerInfo info = query_pointer(ptr);
  if (info.kind == MemoryKind::unregistered) {
    throw_error(Errc::device_error,
                std::string(where) + ": " + std::string(name) + " at " + hex(ptr) +
                    " is not CUDA memory (pageable host memory or a foreign pointer); kernels "
                    "need device, pinned_host or managed memory");
  }
  return kernel_can_access(info, device);
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

// Temporary device buffers for operands a kernel cannot reach (pageable host memory, another
// device's memory) or that overlap: stream-ordered, freed after the operation's last use.
class Staging {
 public:
  explicit Staging(const StreamScope& on) : stream_(on.stream), device_(on.device) {}
  ~Staging() { release(); }
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;

  /// A device copy of the bytes of r; returns where `ptr` lands in it.
  std::uint64_t in(std::uint64_t ptr, AddressRange r) {
    CUdeviceptr t = temp(r.size());
    check(api().memcpy_async(t, r.lo, r.size(), stream_), "cuMemcpyAsync");
    return t + (ptr - r.lo);
  }

  /// A device buffer standing for the bytes of r, copied back by finish(). Their old values
  /// are copied in first unless the operation overwrites every byte (`covered`).
  std::uint64_t out(std::uint64_t ptr, AddressRange r, bool covered) {
    CUdeviceptr t = temp(r.size());
    if (!covered) check(api().memcpy_async(t, r.lo, r.size(), stream_), "cuMemcpyAsync");
    write_backs_.push_back({r.lo, t, r.size()});
    return t + (ptr - r.lo);
  }

  /// Enqueues the copies back to the staged outputs.
  void finish() {
    for (const WriteBack& w : write_backs_) {
      check(api().memcpy_async(w.dst, w.temp, w.bytes, stream_), "cuMemcpyAsync");
    }
  }

 private:
  struct WriteBack {
    std::uint64_t dst;
    CUdeviceptr temp;
    std::size_t bytes;
  };

  CUdeviceptr temp(std::size_t bytes) {
    if (temps_.empty()) {
      int pools = 0;
      check(api().device_get_attribute(&pools, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED,
                                       device_of(device_, "staging")),
            "cuDeviceGetAttribute");
      pools_ = pools != 0;
    }
    CUdeviceptr p = 0;
    if (pools_) {
      check(api().mem_alloc_async(&p, bytes, stream_), "cuMemAllocAsync");
    } else {
      check(api().mem_alloc(&p, bytes), "cuMemAlloc");
    }
    temps_.push_back(p);
    return p;
  }

  void release() noexcept {
    if (temps_.empty()) return;
    const DriverApi& a = driver_state().api;
    // Without memory pools the free is not stream-ordered: wait for the stream first.
    if (!pools_) (void)a.stream_synchronize(stream_);
    for (CUdeviceptr p : temps_) {
      (void)(pools_ ? a.mem_free_async(p, stream_) : a.mem_free(p));
    }
  }

  CUstream stream_;
  int device_;
  bool pools_ = false;  // stream-ordered allocation, known from the first temp()
  std::vector<CUdeviceptr> temps_;
  std::vector<WriteBack> write_backs_;
};

// Every byte of the layout's extent is an element byte (no gaps), so a staged output need
// not be copied in, and a layout shared by both sides of a copy is one plain copy.
bool covers_extent(std::uint64_t ptr, std::span<const std::int64_t> shape,
                   std::span<const std::int64_t> strides, std::size_t itemsize) {
  return detail::for_each_run(ptr, shape, strides, itemsize, 1,
                              [](std::uint64_t, std::uint64_t) {});
}

bool same_layout(std::span<const std::int64_t> shape, std::span<const std::int64_t> a,
                 std::span<const std::int64_t> b) {
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] != 1 && a[d] != b[d]) return false;
  }
  return true;
}

// The launch shape after dropping size-1 dims and merging each dim into the one outside it
// when every operand steps over it contiguously; fewer dims, fewer divisions per element.
template <std::size_t K>
struct Dims {
  int ndim = 0;
  std::array<std::int64_t, CAI_CUDA_MAX_RANK> shape{};
  std::array<std::array<std::int64_t, CAI_CUDA_MAX_RANK>, K> strides{};
};

template <std::size_t K>
Dims<K> merge_dims(std::string_view where, std::span<const std::int64_t> shape,
                   const std::array<std::span<const std::int64_t>, K>& strides) {
  std::array<std::int64_t, kMaxDims> sh{};
  std::array<std::array<std::int64_t, kMaxDims>, K> st{};
  std::size_t nd = 0;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool merge = nd > 0;
    for (std::size_t k = 0; k < K && merge; ++k) {
      std::int64_t step = 0;
      merge = !__builtin_mul_overflow(strides[k][d], shape[d], &step) && st[k][nd - 1] == step;
    }
    if (merge) {
      sh[nd - 1] *= shape[d];
      for (std::size_t k = 0; k < K; ++k) st[k][nd - 1] = strides[k][d];
      continue;
    }
    sh[nd] = shape[d];
    for (std::size_t k = 0; k < K; ++k) st[k][nd] = strides[k][d];
    ++nd;
  }
  if (nd > CAI_CUDA_MAX_RANK) {
    throw_error(Errc::not_implemented,
                std::string(where) + ": " + std::to_string(nd) +
                    " dimensions remain after merging contiguous ones; the CUDA kernels take at "
                    "most " +
                    std::to_string(CAI_CUDA_MAX_RANK));
  }
  Dims<K> out;
  out.ndim = static_cast<int>(nd);
  std::copy_n(sh.begin(), nd, out.shape.begin());
  for (std::size_t k = 0; k < K; ++k) std::copy_n(st[k].begin(), nd, out.strides[k].begin());
  return out;
}

// The widest word (16, 8, 4, 2 or 1 bytes) that divides the item size, every pointer and
// every stride, so that each word access is aligned.
template <std::size_t K>
std::size_t word_width(std::size_t itemsize, std::initializer_list<std::uint64_t> ptrs,
                       const Dims<K>& dims) {
  for (std::size_t w : {16u, 8u, 4u, 2u}) {
    bool ok = itemsize % w == 0;
    for (std::uint64_t p : ptrs) ok = ok && p % w == 0;
    for (std::size_t k = 0; k < K && ok; ++k) {
      for (int d = 0; d < dims.ndim; ++d) {
        ok = ok && dims.strides[k][static_cast<std::size_t>(d)] % static_cast<std::int64_t>(w) == 0;
      }
    }
    if (ok) return w;
  }
  return 1;
}

// The kernels of one context, loaded from the PTX on first use there.
struct Module {
  std::array<CUfunction, kKernelCount> fn{};
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
  for (std::size_t i = 0; i < kKernelCount; ++i) {
    // The names are literals, so data() is NUL-terminated.
    check(a.module_get_function(&m->fn[i], mod, detail::cuda_kernel_names()[i].data()),
          "cuModuleGetFunction");
  }
  return *modules.emplace(ctx, std::move(m)).first->second;
}

template <class Params>
void launch(CUfunction f, std::int64_t total, CUstream stream, Params& params) {
  const std::int64_t blocks = std::min((total + kBlockSize - 1) / kBlockSize, kMaxBlocks);
  void* args[] = {&params};
  check(api().launch_kernel(f, static_cast<unsigned int>(blocks), 1, 1, kBlockSize, 1, 1, 0, stream,
                            args, nullptr),
        "cuLaunchKernel");
}

// The alignment of the scalars an add kernel loads: complex values load as two parts.
std::size_t scalar_alignment(ElementType t) {
  switch (t) {
    case ElementType::c64:
      return 4;
    case ElementType::c128:
      return 8;
    default:
      return element_size(t);
  }
}

void check_aligned(std::string_view where, std::string_view name, const Operand& op,
                   std::span<const std::int64_t> shape, std::size_t align) {
  bool ok = op.ptr % align == 0;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] != 1 && op.strides[d] % static_cast<std::int64_t>(align) != 0) ok = false;
  }
  if (!ok) {
    throw_error(Errc::not_implemented,
                std::string(where) + ": " + std::string(name) + " at " + hex(op.ptr) +
                    " or one of its strides is not a multiple of " + std::to_string(align) +
                    " bytes; the CUDA kernels need naturally aligned elements");
  }
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
        return p;
      case MemoryKind::pinned_host: {
        void* h = nullptr;
        check(a.mem_alloc_host(&h, bytes), "cuMemAllocHost");
        return reinterpret_cast<std::uintptr_t>(h);
      }
      case MemoryKind::managed:
        check(a.mem_alloc_managed(&p, bytes, CU_MEM_ATTACH_GLOBAL), "cuMemAllocManaged");
        return p;
      case MemoryKind::unregistered:
        break;
    }
    throw_error(Errc::value_error,
                "alloc(): the CUDA backend allocates device, pinned_host or managed memory, not "
                "kind " +
                    std::to_string(static_cast<int>(kind)));
  }

  void free(std::uint64_t ptr) override {
    if (ptr == 0) return;
    PointerInfo info = query_pointer(ptr);
    if (info.kind == MemoryKind::unregistered) {
      throw_error(Errc::value_error, "free(): " + hex(ptr) + " is not CUDA memory");
    }
    if (info.alloc_base != 0 && info.alloc_base != ptr) {
      throw_error(Errc::value_error, "free(): " + hex(ptr) + " is inside the allocation at " +
                                         hex(info.alloc_base) + "; pass its start");
    }
    const DriverApi& a = api();
    CUcontext ctx = reinterpret_cast<CUcontext>(static_cast<std::uintptr_t>(info.context));
    ScopedContext scope(ctx != nullptr ? ctx : current_context());
    if (info.kind == MemoryKind::pinned_host) {
      check(a.mem_free_host(reinterpret_cast<void*>(static_cast<std::uintptr_t>(ptr))),
            "cuMemFreeHost");
    } else {
      check(a.mem_free(ptr), "cuMemFree");
    }
  }

  PointerInfo pointer_info(std::uint64_t ptr) override { return query_pointer(ptr); }

  void memset_async(std::uint64_t dst, int byte, std::size_t bytes, StreamHandle s) override {
    constexpr std::string_view where = "memset_async()";
    CUstream stream = to_stream(s, where);
    AddressRange r = check_range(where, "dst", dst, bytes);
    if (bytes == 0) return;
    StreamScope on(stream);
    const auto value = static_cast<unsigned char>(byte);
    if (kernel_operand(where, "dst", dst, on.device)) {
      check(api().memset_d8_async(dst, value, bytes, stream), "cuMemsetD8Async");
      return;
    }
    // Another device's memory: set a local buffer, let cuMemcpyAsync cross over.
    Staging stage(on);
    std::uint64_t t = stage.out(dst, r, true);
    check(api().memset_d8_async(t, value, bytes, stream), "cuMemsetD8Async");
    stage.finish();
  }

  void copy_async(std::uint64_t dst, std::uint64_t src, std::size_t bytes,
                  StreamHandle s) override {
    constexpr std::string_view where = "copy_async()";
    CUstream stream = to_stream(s, where);
    AddressRange dr = check_range(where, "dst", dst, bytes);
    AddressRange sr = check_range(where, "src", src, bytes);
    if (bytes == 0 || dst == src) return;
    StreamScope on(stream);
    if (dr.lo < sr.hi && sr.lo < dr.hi) {
      // cuMemcpy is undefined on overlap; go through a copy of the source (memmove).
      Staging stage(on);
      std::uint64_t t = stage.in(src, sr);
      check(api().memcpy_async(dst, t, bytes, stream), "cuMemcpyAsync");
      return;
    }
    check(api().memcpy_async(dst, src, bytes, stream), "cuMemcpyAsync");
  }

  void copy_strided_async(Operand dst, Operand src, std::span<const std::int64_t> shape,
                          std::size_t itemsize, StreamHandle s) override {
    constexpr std::string_view where = "copy_strided_async()";
    CUstream stream = to_stream(s, where);
    check_itemsize(where, itemsize);
    const std::int64_t total = check_shape(where, shape);
    AddressRange dr = check_operand(where, "dst", dst, shape, itemsize);
    AddressRange sr = check_operand(where, "src", src, shape, itemsize);
    if (total == 0) return;
    const bool same = same_layout(shape, dst.strides, src.strides);
    if (same && dst.ptr == src.ptr) return;
    const bool overlap = dr.lo < sr.hi && sr.lo < dr.hi;
    if (same && covers_extent(dst.ptr, shape, dst.strides, itemsize)) {
      // Both sides put the same bytes at the same offsets without gaps (e.g. both
      // C-contiguous): one plain copy, whatever the memory kinds.
      StreamScope on(stream);
      Staging stage(on);
      std::uint64_t from = overlap ? stage.in(sr.lo, sr) : sr.lo;
      check(api().memcpy_async(dr.lo, from, dr.size(), stream), "cuMemcpyAsync");
      return;
    }
    require_kernels(where);
    if (itemsize > static_cast<std::size_t>(INT32_MAX)) {
      throw_error(Errc::not_implemented, std::string(where) + ": itemsize " +
                                             std::to_string(itemsize) + " exceeds 2^31 - 1");
    }
    StreamScope on(stream);
    Staging stage(on);
    std::uint64_t sp = src.ptr;
    std::uint64_t dp = dst.ptr;
    // The source is staged when the kernel cannot read it, or so that the result does not
    // depend on the order the threads run in when it overlaps the destination.
    if (overlap || !kernel_can_access(query_pointer(src.ptr), on.device)) {
      sp = stage.in(src.ptr, sr);
    }
    if (!kernel_can_access(query_pointer(dst.ptr), on.device)) {
      dp = stage.out(dst.ptr, dr, covers_extent(dst.ptr, shape, dst.strides, itemsize));
    }
    const Dims<2> dims = merge_dims<2>(where, shape, {dst.strides, src.strides});
    const std::size_t w = word_width(itemsize, {dp, sp}, dims);
    CopyParams p{};
    p.dst = dp;
    p.src = sp;
    p.total = total;
    p.ndim = dims.ndim;
    p.words = static_cast<std::int32_t>(itemsize / w);
    std::copy_n(dims.shape.begin(), dims.ndim, p.shape);
    std::copy_n(dims.strides[0].begin(), dims.ndim, p.dst_strides);
    std::copy_n(dims.strides[1].begin(), dims.ndim, p.src_strides);
    const Module& m = module_for(on.context);
    launch(m.fn[kCopy + static_cast<std::size_t>(std::countr_zero(w))], total, stream, p);
    stage.finish();
  }

  void fill_async(Operand dst, std::span<const std::int64_t> shape, std::size_t itemsize,
                  const void* value, StreamHandle s) override {
    constexpr std::string_view where = "fill_async()";
    CUstream stream = to_stream(s, where);
    check_itemsize(where, itemsize);
    const std::int64_t total = check_shape(where, shape);
    AddressRange dr = check_operand(where, "dst", dst, shape, itemsize);
    if (total == 0) return;
    if (value == nullptr) {
      throw_error(Errc::value_error, std::string(where) + ": value is a null pointer");
    }
    if (itemsize > CAI_CUDA_MAX_FILL_BYTES) {
      throw_error(Errc::not_implemented, std::string(where) + ": itemsize " +
                                             std::to_string(itemsize) +
                                             " exceeds the CUDA fill kernel's " +
                                             std::to_string(CAI_CUDA_MAX_FILL_BYTES) + " bytes");
    }
    require_kernels(where);
    StreamScope on(stream);
    Staging stage(on);
    std::uint64_t dp = dst.ptr;
    if (!kernel_operand(where, "dst", dst.ptr, on.device)) {
      dp = stage.out(dst.ptr, dr, covers_extent(dst.ptr, shape, dst.strides, itemsize));
    }
    const Dims<1> dims = merge_dims<1>(where, shape, {dst.strides});
    const std::size_t w = word_width(itemsize, {dp}, dims);
    FillParams p{};
    p.dst = dp;
    p.total = total;
    p.ndim = dims.ndim;
    p.words = static_cast<std::int32_t>(itemsize / w);
    std::copy_n(dims.shape.begin(), dims.ndim, p.shape);
    std::copy_n(dims.strides[0].begin(), dims.ndim, p.dst_strides);
    std::memcpy(p.pattern, value, itemsize);
    const Module& m = module_for(on.context);
    launch(m.fn[kFill + static_cast<std::size_t>(std::countr_zero(w))], total, stream, p);
    stage.finish();
  }

  void add_async(Operand out, Operand a, Operand b, std::span<const std::int64_t> shape,
                 ElementType type, StreamHandle s) override {
    constexpr std::string_view where = "add_async()";
    CUstream stream = to_stream(s, where);
    check_element_type(where, type);
    const std::size_t itemsize = element_size(type);
    const std::int64_t total = check_shape(where, shape);
    AddressRange outr = check_operand(where, "out", out, shape, itemsize);
    AddressRange ar = check_operand(where, "a", a, shape, itemsize);
    AddressRange br = check_operand(where, "b", b, shape, itemsize);
    if (total == 0) return;
    require_kernels(where);
    const std::size_t align = scalar_alignment(type);
    check_aligned(where, "out", out, shape, align);
    check_aligned(where, "a", a, shape, align);
    check_aligned(where, "b", b, shape, align);
    StreamScope on(stream);
    Staging stage(on);
    std::uint64_t ap = a.ptr, bp = b.ptr, op = out.ptr;
    if (!kernel_operand(where, "a", a.ptr, on.device)) ap = stage.in(a.ptr, ar);
    if (!kernel_operand(where, "b", b.ptr, on.device)) bp = stage.in(b.ptr, br);
    if (!kernel_operand(where, "out", out.ptr, on.device)) {
      op = stage.out(out.ptr, outr, covers_extent(out.ptr, shape, out.strides, itemsize));
    }
    const Dims<3> dims = merge_dims<3>(where, shape, {out.strides, a.strides, b.strides});
    AddParams p{};
    p.out = op;
    p.a = ap;
    p.b = bp;
    p.total = total;
    p.ndim = dims.ndim;
    std::copy_n(dims.shape.begin(), dims.ndim, p.shape);
    std::copy_n(dims.strides[0].begin(), dims.ndim, p.out_strides);
    std::copy_n(dims.strides[1].begin(), dims.ndim, p.a_strides);
    std::copy_n(dims.strides[2].begin(), dims.ndim, p.b_strides);
    const Module& m = module_for(on.context);
    launch(m.fn[kAdd + static_cast<std::size_t>(type)], total, stream, p);
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
    constexpr std::string_view where = "event_record()";
    CUevent event = to_event(e, where);
    CUstream stream = to_stream(s, where);
    if (is_default_stream(s)) current_context();
    check(api().event_record(event, stream), "cuEventRecord");
  }

  void stream_wait_event(StreamHandle s, EventHandle e) override {
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
