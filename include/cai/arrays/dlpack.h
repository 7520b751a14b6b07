#pragma once

// DLPack <-> View, for C++ and for the bindings: export a View as an owning
// DLManagedTensorVersioned (or legacy DLManagedTensor), and import one, taking ownership.
// No stream work happens here; ordering is the caller's (see cai/sync/ordering.h).

#include "cai/arrays/view.h"
#include "cai/core/dlpack.h"

namespace cai {

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

/// The flags a versioned tensor of type `t` needs beyond READ_ONLY/IS_COPIED:
/// IS_SUBBYTE_TYPE_PADDED for a sub-byte type (cai, like ml_dtypes, stores those one element
/// per byte, while DLPack reads them as packed without the flag).
std::uint64_t dlpack_storage_flags(DLDataType t) noexcept;
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
/// The same from an array's parts, its device and DLPack type known.
void fill_dltensor(std::uint64_t ptr, DLDataType dtype, std::span<const std::int64_t> shape,
                   const Dims& element_strides, DLDevice device, DLTensor& out) noexcept;
/// The DLPack type of `dtype`, or Error(buffer_error) "<entry>: ..." when DLPack cannot name it.
DLDataType dlpack_dtype(const DType& dtype, const char* entry);

}  // namespace cai
