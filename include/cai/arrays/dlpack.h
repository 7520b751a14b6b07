#pragma once

// DLPack <-> View, for C++ and for the bindings. An export is three steps, the same for C++
// and Python: plan_export decides (the array itself, a device copy or a host copy, and the
// consumer's stream to make wait), build_tensor fills the DLPack struct for whatever owns the
// memory (a View here, a Python reference in the binding), and the caller wraps it (a capsule
// in Python). Importing takes ownership of a tensor (from_dlpack).

#include <optional>

#include "cai/arrays/view.h"
#include "cai/core/dlpack.h"

namespace cai {

/// What a consumer asks of an export: the keywords of DLPack's __dlpack__, read.
struct ExportRequest {
  /// stream=: the consumer's stream. nullopt (None) is the legacy default stream for CUDA
  /// memory; -1 asks for no ordering; 0 and other negatives are refused.
  std::optional<std::int64_t> stream;
  bool versioned = false;             ///< max_version >= (1, 0): a DLManagedTensorVersioned
  std::optional<DLDevice> dl_device;  ///< dl_device=: nullopt = where the array lives
  std::optional<bool> copy;           ///< copy=: nullopt = copy only when needed
};

/// What an export does.
struct ExportPlan {
  enum class Kind : std::uint8_t {
    borrow,       ///< the array itself
    device_copy,  ///< a new array on the same device (copy=True)
    host_copy,    ///< a copy in host memory (dl_device=(kDLCPU, 0))
  };
  Kind kind = Kind::borrow;
  /// The consumer's stream, made to wait for the array's work (borrow) or for the copy
  /// (device_copy). nullopt: no ordering (stream=-1; a host copy is done when it returns).
  std::optional<device::StreamHandle> wait;
};

namespace detail {
/// plan_export's refusals, out of line: the plan itself builds no message.
void plan_dl_device(DLDevice want, DLDevice here, std::optional<bool> copy, ExportPlan::Kind& kind);
[[noreturn]] void refuse_stream(std::int64_t stream);
}  // namespace detail

/// The one policy of __dlpack__, for C++ and Python alike: Error(buffer_error) for what the
/// protocol refuses (a device cai cannot copy to, a copy that copy=False forbids, an invalid
/// stream). `here` is the DLPack device of the array's memory. Touches no driver. Inline: it
/// is on every export's path.
inline ExportPlan plan_export(const ExportRequest& request, DLDevice here) {
  ExportPlan plan;
  if (request.dl_device) detail::plan_dl_device(*request.dl_device, here, request.copy, plan.kind);
  if (plan.kind == ExportPlan::Kind::borrow && request.copy == true)
    plan.kind = ExportPlan::Kind::device_copy;
  // The consumer's stream, checked for every plan: None = the legacy default for CUDA
  // memory, -1 = no ordering.
  std::optional<device::StreamHandle> consumer;
  if (!request.stream) {
    const auto type = here.device_type;
    if (type == kDLCUDA || type == kDLCUDAHost || type == kDLCUDAManaged)
      consumer = device::kLegacyDefaultStream;
  } else if (*request.stream == 0 || *request.stream < -1) {
    detail::refuse_stream(*request.stream);
  } else if (*request.stream != -1) {
    consumer = static_cast<device::StreamHandle>(*request.stream);
  }
  if (plan.kind != ExportPlan::Kind::host_copy)
    plan.wait = consumer;  // a host copy is done on return
  return plan;
}

/// The flags a versioned tensor of type `t` needs beyond READ_ONLY/IS_COPIED:
/// IS_SUBBYTE_TYPE_PADDED for a sub-byte type (cai, like ml_dtypes, stores those one element
/// per byte, while DLPack reads them as packed without the flag).
constexpr std::uint64_t dlpack_storage_flags(DLDataType t) noexcept {
  return t.bits < 8 ? DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED : 0;
}

/// A DLTensor from an array's parts, its device and DLPack type known; it borrows `shape` and
/// `element_strides`.
void fill_dltensor(std::uint64_t ptr, DLDataType dtype, std::span<const std::int64_t> shape,
                   const std::int64_t* element_strides, DLDevice device, DLTensor& out) noexcept;

/// The parts of an array a tensor describes; shape and element_strides (ndim = shape.size()
/// of them) must outlive the tensor.
struct TensorParts {
  std::uint64_t ptr = 0;
  DLDataType dtype{};
  std::span<const std::int64_t> shape;
  const std::int64_t* element_strides = nullptr;
  DLDevice device{};
  bool readonly = false;
};

namespace detail {
/// The legacy form's refusals (a read-only array, a sub-byte type), if any apply.
void refuse_legacy(const TensorParts& parts);
}  // namespace detail

/// The one tensor builder. The storage of `m` and what keeps the memory alive are the
/// caller's: `context` becomes manager_ctx and `deleter` frees both. A versioned tensor gets
/// `flags`, READ_ONLY for a read-only array and IS_SUBBYTE_TYPE_PADDED for a sub-byte type.
/// Inline: every export runs it.
inline void build_tensor(DLManagedTensorVersioned& m, const TensorParts& parts, std::uint64_t flags,
                         void* context, void (*deleter)(DLManagedTensorVersioned*)) noexcept {
  fill_dltensor(parts.ptr, parts.dtype, parts.shape, parts.element_strides, parts.device,
                m.dl_tensor);
  m.version = {DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
  m.flags = flags | (parts.readonly ? DLPACK_FLAG_BITMASK_READ_ONLY : 0) |
            dlpack_storage_flags(parts.dtype);
  m.manager_ctx = context;
  m.deleter = deleter;
}
/// The legacy form can say neither: Error(buffer_error) for a read-only array (a consumer
/// would write to it) and for a sub-byte type, before `m` is touched.
inline void build_tensor(DLManagedTensor& m, const TensorParts& parts, void* context,
                         void (*deleter)(DLManagedTensor*)) {
  if (parts.readonly || dlpack_storage_flags(parts.dtype) != 0) detail::refuse_legacy(parts);
  fill_dltensor(parts.ptr, parts.dtype, parts.shape, parts.element_strides, parts.device,
                m.dl_tensor);
  m.manager_ctx = context;
  m.deleter = deleter;
}

/// An exported tensor the caller owns: exactly one of the two is set.
struct DlpackTensor {
  DLManagedTensorVersioned* versioned = nullptr;
  DLManagedTensor* legacy = nullptr;
};

/// __dlpack__ for C++: plan_export, then `v` itself (its pending work ordered before the
/// consumer's stream) or a copy made on `copy_stream` (IS_COPIED when versioned).
DlpackTensor to_dlpack(const View& v, const ExportRequest& request,
                       const sync::StreamRef& copy_stream);
/// The copying plans of to_dlpack, for a binding that borrows the array otherwise.
DlpackTensor export_copy(const View& v, const ExportPlan& plan, bool versioned,
                         const sync::StreamRef& copy_stream);

/// The DLPack device of a View's memory: kDLCUDA for device memory (the simulator's too),
/// kDLCUDAHost for pinned, kDLCUDAManaged for managed. Memory the driver does not know (a
/// foreign or freed pointer) is Error(buffer_error): it has no DLPack device, and kDLCPU would
/// make a consumer read it on the host.
DLDevice dlpack_device(const View& v);

/// A new owning tensor that keeps `v` (and what keeps it alive) until its deleter runs.
/// `flags` are added to the tensor's own (READ_ONLY when v is read-only). `device`, when the
/// caller knows it, saves a pointer-attribute query (about 1 us on CUDA).
DLManagedTensorVersioned* to_dlpack_versioned(const View& v, std::uint64_t flags = 0,
                                              const DLDevice* device = nullptr);
/// The pre-1.0 form. Throws Error(buffer_error) for a read-only View: the legacy struct has no
/// way to say so and a consumer would write to it.
DLManagedTensor* to_dlpack_legacy(const View& v, const DLDevice* device = nullptr);

/// Throws Error(buffer_error) for a sub-byte type in an export that cannot carry flags (a
/// legacy tensor, a bare DLTensor), `form` naming it; importers refuse packed data likewise.
void require_whole_bytes(DLDataType t, const char* entry, const char* form);

/// What a consumer wants of a tensor it imports.
struct DlpackImport {
  DLDevice device;
  bool readonly = false;
  bool copied = false;
};

/// A tensor's array, checked: what a View of it is made of.
struct DlpackArray {
  std::uint64_t ptr = 0;  ///< data + byte_offset; 0 for a zero-size array
  DType dtype;
  Layout layout;  ///< byte strides (C strides for NULL strides)
  DlpackImport info;
};

/// Checks a tensor without taking it: the major version, ndim, shape, dtype, strides (in
/// bytes) and data. Throws Error(buffer_error) naming what is wrong.
DlpackArray read_dlpack(const DLManagedTensorVersioned& t);
DlpackArray read_dlpack(const DLManagedTensor& t);

/// Takes ownership of `t` (its deleter runs exactly once, when the last View sharing it goes,
/// or at once if this throws). `keep` is added to what the View keeps alive; `release` runs
/// the deleter (so that a binding can do it under the right lock); null means call it directly.
View from_dlpack(DLManagedTensorVersioned* t, std::shared_ptr<const void> keep = nullptr,
                 void (*release)(DLManagedTensorVersioned*) = nullptr,
                 DlpackImport* info = nullptr);
View from_dlpack(DLManagedTensor* t, std::shared_ptr<const void> keep = nullptr,
                 void (*release)(DLManagedTensor*) = nullptr, DlpackImport* info = nullptr);

/// Fills a DLTensor that borrows `v`'s shape and `element_strides` (which the caller keeps
/// alive), for the no-copy dltensor_from_py_object path.
void fill_dltensor(const View& v, const Dims& element_strides, DLTensor& out);
/// The same from an array's parts (see the declaration above build_tensor).
/// The DLPack type of `dtype`, or Error(buffer_error) "<entry>: ..." when DLPack cannot name it.
DLDataType dlpack_dtype(const DType& dtype, const char* entry);
/// The element strides DLPack gives, or Error(buffer_error) "<entry>: ..." when a stride is
/// not a whole number of elements.
Dims dlpack_strides(const Layout& layout, const char* entry);

}  // namespace cai
