#include "cai/arrays/dlpack.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <new>
#include <string>
#include <type_traits>

#include "cai/arrays/import.h"
#include "cai/arrays/ops.h"
#include "cai/core/error.h"
#include "cai/core/interface.h"

namespace cai {
namespace {

constexpr const char* kExport = "__dlpack__()";

// One allocation per export of a View: the managed tensor, its shape and strides, and the
// View that keeps the memory alive.
template <class Managed>
struct OwnedExport {
  Managed managed{};
  View view;
  Dims shape;
  Dims strides;  // elements
};

template <class Managed>
void delete_owned(Managed* m) {
  delete static_cast<OwnedExport<Managed>*>(m->manager_ctx);
}

// DLPack reads a sub-byte type (bits < 8) as packed unless a versioned tensor sets
// IS_SUBBYTE_TYPE_PADDED; cai stores one element per byte, as ml_dtypes does.
bool sub_byte(DLDataType t) noexcept {
  return dlpack_storage_flags(t) != 0;
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
Managed* export_view(const View& v, std::uint64_t flags, const DLDevice* device) {
  auto e = std::make_unique<OwnedExport<Managed>>();
  e->view = v;
  e->shape = Dims(v.shape());
  e->strides = dlpack_strides(v.layout(), kExport);
  const TensorParts parts{v.ptr(),           dlpack_dtype(v.dtype(), kExport),    e->shape,
                          e->strides.data(), device ? *device : dlpack_device(v), v.readonly()};
  if constexpr (std::is_same_v<Managed, DLManagedTensorVersioned>)
    build_tensor(e->managed, parts, flags, e.get(), &delete_owned<Managed>);
  else
    build_tensor(e->managed, parts, e.get(), &delete_owned<Managed>);
  return &e.release()->managed;
}

// A host copy of `v`, compact, in memory the View owns; done when this returns.
View copy_to_new_host(const View& v, const sync::StreamRef& stream) {
  const Layout layout = Layout::c_contiguous(v.shape(), v.dtype().itemsize());
  std::shared_ptr<std::byte[]> bytes(
      new std::byte[static_cast<std::size_t>(std::max<std::int64_t>(layout.nbytes(), 1))]);
  copy_to_host(bytes.get(), v, stream);
  const std::uint64_t ptr = v.size() == 0 ? 0 : reinterpret_cast<std::uint64_t>(bytes.get());
  return View(ptr, v.dtype(), layout, false, std::make_shared<sync::SyncState>(), std::move(bytes));
}

DlpackTensor export_of(const View& v, bool versioned, std::uint64_t flags, const DLDevice* device) {
  if (versioned) return {export_view<DLManagedTensorVersioned>(v, flags, device), nullptr};
  return {nullptr, export_view<DLManagedTensor>(v, 0, device)};
}

// The array of a tensor, checked.
DlpackArray read_tensor(const DLTensor& t, DlpackImport info, bool padded, const char* entry) {
  if (t.ndim < 0 || t.ndim > max_ndim)
    throw_error(Errc::buffer_error, entry, ": ndim ", t.ndim, " is out of range [0, ", max_ndim,
                "]");
  if (t.ndim > 0 && !t.shape)
    throw_error(Errc::buffer_error, entry, ": shape is NULL with ndim ", t.ndim);
  DType dtype;
  try {
    dtype = DType::from_dlpack(t.dtype);
  } catch (const Error& e) {
    throw_error(Errc::buffer_error, e.what());
  }
  if (sub_byte(t.dtype) && !padded)
    throw_error(Errc::buffer_error, entry, ": the ", t.dtype.bits,
                "-bit elements are packed (DLPack's default: the producer did not set "
                "DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED), and cai stores one element per "
                "byte as ml_dtypes does; unpack them in the producer first");
  const auto n = static_cast<std::size_t>(t.ndim);
  const std::span<const std::int64_t> shape(t.shape, n);
  for (std::size_t i = 0; i < n; ++i)
    if (shape[i] < 0)
      throw_error(Errc::buffer_error, entry, ": shape[", i, "] is negative (", shape[i], ")");
  const std::int64_t itemsize = dtype.itemsize();
  Dims strides;
  if (t.strides) {
    strides.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      if (__builtin_mul_overflow(t.strides[i], itemsize, &strides[i]))
        throw_error(Errc::buffer_error, entry, ": stride ", t.strides[i], " of axis ", i,
                    " overflows in bytes");
    }
  } else {
    // NULL strides (producers before DLPack 1.2): compact row-major.
    strides = Layout::c_strides(shape, itemsize);
  }
  // Built in place: the result's fields are never moved here (this is every import's path).
  DlpackArray out{reinterpret_cast<std::uint64_t>(t.data) + t.byte_offset, std::move(dtype),
                  Layout(Dims(shape), std::move(strides), itemsize), info};
  if (out.layout.size() == 0)
    out.ptr = 0;
  else if (out.ptr == 0)
    throw_error(Errc::buffer_error, entry, ": data is NULL for a tensor of ", out.layout.size(),
                " elements");
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

namespace detail {

void plan_dl_device(DLDevice want, DLDevice here, std::optional<bool> copy,
                    ExportPlan::Kind& kind) {
  if (want.device_type == kDLCPU && here.device_type != kDLCPU) {
    if (copy == false)
      throw_error(Errc::buffer_error,
                  "__dlpack__(): dl_device=(kDLCPU, 0) needs a copy from the device, but "
                  "copy=False");
    kind = ExportPlan::Kind::host_copy;
  } else if (want.device_type != here.device_type || want.device_id != here.device_id) {
    throw_error(Errc::buffer_error,
                "__dlpack__(): dl_device=" +
                    format_dims(std::array<std::int64_t, 2>{want.device_type, want.device_id}) +
                    " is not where the array lives " +
                    format_dims(std::array<std::int64_t, 2>{here.device_type, here.device_id}) +
                    " and cai copies only to the CPU");
  }
}

void refuse_stream(std::int64_t stream) {
  if (stream == 0)
    throw_error(Errc::buffer_error,
                stream_zero_message("__dlpack__(): stream=",
                                    "1 (legacy default), 2 (per-thread default), a stream "
                                    "handle, or -1 for no synchronization"));
  throw_error(Errc::buffer_error,
              "__dlpack__(): stream=" + std::to_string(stream) + " is not a stream handle");
}

}  // namespace detail

void detail::refuse_legacy(const TensorParts& parts) {
  if (parts.readonly)
    throw_error(Errc::buffer_error,
                "__dlpack__(): the array is read-only and a legacy (unversioned) DLPack tensor "
                "cannot say so; ask for max_version=(1, 0) or later");
  require_whole_bytes(parts.dtype, kExport, "a legacy (unversioned) tensor");
}

DLManagedTensorVersioned* to_dlpack_versioned(const View& v, std::uint64_t flags,
                                              const DLDevice* device) {
  return export_view<DLManagedTensorVersioned>(v, flags, device);
}

DLManagedTensor* to_dlpack_legacy(const View& v, const DLDevice* device) {
  return export_view<DLManagedTensor>(v, 0, device);
}

DlpackTensor export_copy(const View& v, const ExportPlan& plan, bool versioned,
                         const sync::StreamRef& copy_stream) {
  // Legacy tensors cannot carry IS_COPIED; the copy is still a correct answer.
  constexpr std::uint64_t copied = DLPACK_FLAG_BITMASK_IS_COPIED;
  if (plan.kind == ExportPlan::Kind::host_copy) {
    const DLDevice host{kDLCPU, 0};
    return export_of(copy_to_new_host(v, copy_stream), versioned, copied, &host);
  }
  View out = View::allocate(v.dtype(), v.shape(), false, copy_stream);
  copy(out, v, copy_stream);
  if (plan.wait) out.sync()->order_before(device::backend(), *plan.wait);
  return export_of(out, versioned, copied, nullptr);
}

DlpackTensor to_dlpack(const View& v, const ExportRequest& request,
                       const sync::StreamRef& copy_stream) {
  const DLDevice here = dlpack_device(v);
  const ExportPlan plan = plan_export(request, here);
  if (plan.kind != ExportPlan::Kind::borrow)
    return export_copy(v, plan, request.versioned, copy_stream);
  if (plan.wait) v.sync()->order_before(device::backend(), *plan.wait);
  return export_of(v, request.versioned, 0, &here);
}

DlpackArray read_dlpack(const DLManagedTensorVersioned& t) {
  constexpr const char* entry = "from_dlpack()";
  if (t.version.major != DLPACK_MAJOR_VERSION)
    throw_error(Errc::buffer_error, entry, ": DLPack major version ", t.version.major,
                " is not supported (cai reads ", DLPACK_MAJOR_VERSION, ".x)");
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
  fill_dltensor(v.ptr(), dlpack_dtype(v.dtype(), kExport), v.shape(), element_strides.data(),
                dlpack_device(v), out);
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

Dims dlpack_strides(const Layout& layout, const char* entry) {
  try {
    return layout.element_strides();
  } catch (const Error& e) {
    throw_error(Errc::buffer_error,
                std::string(entry) + ": " + e.what() + " (DLPack strides count elements)");
  }
}

void fill_dltensor(std::uint64_t ptr, DLDataType dtype, std::span<const std::int64_t> shape,
                   const std::int64_t* element_strides, DLDevice device, DLTensor& out) noexcept {
  out.dtype = dtype;
  out.data = reinterpret_cast<void*>(ptr);
  out.device = device;
  out.ndim = static_cast<std::int32_t>(shape.size());
  out.shape = const_cast<std::int64_t*>(shape.data());
  out.strides = const_cast<std::int64_t*>(element_strides);
  out.byte_offset = 0;
}

}  // namespace cai
