#include "cai/arrays/dlpack.h"

#include "cai/arrays/import.h"

#include <cstdio>
#include <cstring>
#include <new>
#include <string>
#include <type_traits>

#include "cai/core/error.h"

namespace cai {
namespace {

// One allocation per export: the managed tensor, its shape and strides, and the View that
// keeps the memory alive.
template <class Managed>
struct ExportCtx {
  Managed managed{};
  View view;
  Dims shape;
  Dims strides;  // elements
};

template <class Managed>
void delete_export(Managed* m) {
  delete static_cast<ExportCtx<Managed>*>(m->manager_ctx);
}

// DLPack reads a sub-byte type (bits < 8) as packed unless a versioned tensor sets
// IS_SUBBYTE_TYPE_PADDED; cai stores one element per byte, as ml_dtypes does.
bool sub_byte(DLDataType t) noexcept {
  return t.bits < 8;
}

[[noreturn]] void refuse_sub_byte(DLDataType t, const char* entry, const char* form) {
  throw_error(Errc::buffer_error,
              std::string(entry) + ": a " + std::to_string(t.bits) +
                  "-bit type is stored one element per byte here, and " + form +
                  " cannot say so (DLPack reads sub-byte data as packed unless a versioned "
                  "tensor sets DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED); ask for "
                  "max_version=(1, 0) or later");
}

template <class Managed>
ExportCtx<Managed>* make_export(const View& v, const char* entry, const DLDevice* device) {
  auto ctx = std::make_unique<ExportCtx<Managed>>();
  ctx->view = v;
  ctx->shape = Dims(v.shape());
  try {
    ctx->strides = v.layout().element_strides();
  } catch (const Error& e) {
    throw_error(Errc::buffer_error,
                std::string(entry) + ": " + e.what() + " (DLPack strides count elements)");
  }
  DLTensor& t = ctx->managed.dl_tensor;
  t.data = reinterpret_cast<void*>(v.ptr());
  t.device = device ? *device : dlpack_device(v);
  t.ndim = v.ndim();
  try {
    t.dtype = v.dtype().to_dlpack();
  } catch (const Error& e) {
    throw_error(Errc::buffer_error, std::string(entry) + ": " + e.what());
  }
  if constexpr (!std::is_same_v<Managed, DLManagedTensorVersioned>) {
    if (sub_byte(t.dtype)) refuse_sub_byte(t.dtype, entry, "a legacy (unversioned) tensor");
  }
  t.shape = ctx->shape.data();
  // Since DLPack 1.2 strides are never NULL for ndim > 0.
  t.strides = ctx->strides.data();
  t.byte_offset = 0;
  ctx->managed.manager_ctx = ctx.get();
  ctx->managed.deleter = &delete_export<Managed>;
  return ctx.release();
}

// The array of a tensor, checked.
DlpackArray read_tensor(const DLTensor& t, DlpackImport info, bool padded, const char* entry) {
  if (t.ndim < 0 || t.ndim > max_ndim)
    throw_error(Errc::buffer_error, std::string(entry) + ": ndim " + std::to_string(t.ndim) +
                                        " is out of range [0, " + std::to_string(max_ndim) + "]");
  if (t.ndim > 0 && !t.shape)
    throw_error(Errc::buffer_error,
                std::string(entry) + ": shape is NULL with ndim " + std::to_string(t.ndim));
  DlpackArray out;
  try {
    out.dtype = DType::from_dlpack(t.dtype);
  } catch (const Error& e) {
    throw_error(Errc::buffer_error, e.what());
  }
  if (sub_byte(t.dtype) && !padded)
    throw_error(Errc::buffer_error,
                std::string(entry) + ": the " + std::to_string(t.dtype.bits) +
                    "-bit elements are packed (DLPack's default: the producer did not set "
                    "DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED), and cai stores one element "
                    "per byte as ml_dtypes does; unpack them in the producer first");
  const auto n = static_cast<std::size_t>(t.ndim);
  Dims shape(std::span<const std::int64_t>(t.shape, n));
  Dims strides(n);
  const std::int64_t itemsize = out.dtype.itemsize();
  if (t.strides) {
    for (std::size_t i = 0; i < n; ++i) {
      if (__builtin_mul_overflow(t.strides[i], itemsize, &strides[i]))
        throw_error(Errc::buffer_error, std::string(entry) + ": stride " +
                                            std::to_string(t.strides[i]) + " of axis " +
                                            std::to_string(i) + " overflows in bytes");
    }
  } else {
    // NULL strides (producers before DLPack 1.2): compact row-major.
    strides = Layout::c_strides(shape, itemsize);
  }
  for (std::size_t i = 0; i < n; ++i)
    if (shape[i] < 0)
      throw_error(Errc::buffer_error, std::string(entry) + ": shape[" + std::to_string(i) +
                                          "] is negative (" + std::to_string(shape[i]) + ")");
  out.layout = Layout(std::move(shape), std::move(strides), itemsize);
  out.ptr = reinterpret_cast<std::uint64_t>(t.data) + t.byte_offset;
  if (out.layout.size() == 0)
    out.ptr = 0;
  else if (out.ptr == 0)
    throw_error(Errc::buffer_error, std::string(entry) + ": data is NULL for a tensor of " +
                                        std::to_string(out.layout.size()) + " elements");
  out.info = info;
  return out;
}

View view_of(DlpackArray&& a, std::shared_ptr<const void> owner) {
  // No stream: ordering is the caller's.
  return Import{a.ptr, a.info.readonly, std::move(a.layout), std::move(a.dtype)}.view(
      std::move(owner));
}

template <class Managed>
std::shared_ptr<const void> owning(Managed* t, void (*release)(Managed*),
                                   std::shared_ptr<const void> keep) {
  // The deleter runs once, when the last View goes; `keep` dies after it.
  return std::shared_ptr<const void>(t, [release, keep = std::move(keep)](const void* p) {
    auto* m = static_cast<Managed*>(const_cast<void*>(p));
    if (release)
      release(m);
    else if (m->deleter)
      m->deleter(m);
  });
}

}  // namespace

DLDevice dlpack_device(const View& v) {
  auto& backend = device::backend();
  if (v.ptr() == 0) return {kDLCUDA, backend.current_device()};
  const device::PointerInfo info = backend.pointer_info(v.ptr());
  switch (info.kind) {
    case device::MemoryKind::device:
      return {kDLCUDA, info.device};
    case device::MemoryKind::pinned_host:
      return {kDLCUDAHost, 0};
    case device::MemoryKind::managed:
      return {kDLCUDAManaged, 0};
    case device::MemoryKind::unregistered:
      break;
  }
  // Memory the driver does not know (a CAI pointer of 0x1000, memory its producer freed):
  // naming it kDLCPU would make a consumer read it on the host.
  char at[32];
  std::snprintf(at, sizeof at, "0x%llx", static_cast<unsigned long long>(v.ptr()));
  throw_error(Errc::buffer_error,
              std::string("__dlpack__(): the array's memory at ") + at +
                  " is not memory the CUDA driver knows (a foreign or freed pointer, or pageable "
                  "host memory), so it has no DLPack device; a consumer would read it on the host");
}

DLManagedTensorVersioned* to_dlpack_versioned(const View& v, std::uint64_t flags,
                                              const DLDevice* device) {
  auto* ctx = make_export<DLManagedTensorVersioned>(v, "__dlpack__()", device);
  ctx->managed.version = {DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
  ctx->managed.flags = flags | (v.readonly() ? DLPACK_FLAG_BITMASK_READ_ONLY : 0) |
                       dlpack_storage_flags(ctx->managed.dl_tensor.dtype);
  return &ctx->managed;
}

DLManagedTensor* to_dlpack_legacy(const View& v, const DLDevice* device) {
  if (v.readonly())
    throw_error(Errc::buffer_error,
                "__dlpack__(): the array is read-only and a legacy (unversioned) DLPack tensor "
                "cannot say so; ask for max_version=(1, 0) or later");
  return &make_export<DLManagedTensor>(v, "__dlpack__()", device)->managed;
}

DlpackArray read_dlpack(const DLManagedTensorVersioned& t) {
  constexpr const char* entry = "from_dlpack()";
  if (t.version.major != DLPACK_MAJOR_VERSION)
    throw_error(Errc::buffer_error,
                std::string(entry) + ": DLPack major version " + std::to_string(t.version.major) +
                    " is not supported (cai reads " + std::to_string(DLPACK_MAJOR_VERSION) + ".x)");
  return read_tensor(t.dl_tensor,
                     {t.dl_tensor.device, (t.flags & DLPACK_FLAG_BITMASK_READ_ONLY) != 0,
                      (t.flags & DLPACK_FLAG_BITMASK_IS_COPIED) != 0},
                     (t.flags & DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED) != 0, entry);
}

DlpackArray read_dlpack(const DLManagedTensor& t) {
  return read_tensor(t.dl_tensor, {t.dl_tensor.device, false, false}, false, "from_dlpack()");
}

View from_dlpack(DLManagedTensorVersioned* t, std::shared_ptr<const void> keep,
                 void (*release)(DLManagedTensorVersioned*), DlpackImport* info) {
  if (!t) throw_error(Errc::buffer_error, "from_dlpack(): the producer gave a NULL tensor");
  auto owner = owning(t, release, std::move(keep));  // owns t from here on, also on errors
  DlpackArray a = read_dlpack(*t);
  if (info) *info = a.info;
  return view_of(std::move(a), std::move(owner));
}

View from_dlpack(DLManagedTensor* t, std::shared_ptr<const void> keep,
                 void (*release)(DLManagedTensor*), DlpackImport* info) {
  if (!t) throw_error(Errc::buffer_error, "from_dlpack(): the producer gave a NULL tensor");
  auto owner = owning(t, release, std::move(keep));
  DlpackArray a = read_dlpack(*t);
  if (info) *info = a.info;
  return view_of(std::move(a), std::move(owner));
}

void fill_dltensor(const View& v, const Dims& element_strides, DLTensor& out) {
  fill_dltensor(v.ptr(), dlpack_dtype(v.dtype(), "__dlpack__()"), v.shape(), element_strides,
                dlpack_device(v), out);
}

std::uint64_t dlpack_storage_flags(DLDataType t) noexcept {
  return sub_byte(t) ? DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED : 0;
}

void require_whole_bytes(DLDataType t, const char* entry, const char* form) {
  if (sub_byte(t)) refuse_sub_byte(t, entry, form);
}

DLDataType dlpack_dtype(const DType& dtype, const char* entry) {
  try {
    return dtype.to_dlpack();
  } catch (const Error& e) {
    throw_error(Errc::buffer_error, std::string(entry) + ": " + e.what());
  }
}

void fill_dltensor(std::uint64_t ptr, DLDataType dtype, std::span<const std::int64_t> shape,
                   const Dims& element_strides, DLDevice device, DLTensor& out) noexcept {
  out.dtype = dtype;
  out.data = reinterpret_cast<void*>(ptr);
  out.device = device;
  out.ndim = static_cast<std::int32_t>(shape.size());
  out.shape = const_cast<std::int64_t*>(shape.data());
  out.strides = const_cast<std::int64_t*>(element_strides.data());
  out.byte_offset = 0;
}

}  // namespace cai
