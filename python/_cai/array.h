#pragma once

// Internal to the extension: cai.DeviceNDArray.

#include <nanobind/nanobind.h>

#include <memory>
#include <optional>
#include <utility>

#include "cai/arrays/import.h"
#include "cai/arrays/view.h"
#include "cai/capi.h"
#include "cai/core/dlpack.h"
#include "cai/core/interface.h"
#include "config.h"
#include "convert.h"
#include "gil.h"

namespace cai::python {

/// What keeps an import's memory alive until its View does: the producer's Python object, or
/// a DLPack tensor (its deleter runs with the GIL when the owner goes).
class ImportOwner {
 public:
  ImportOwner() = default;
  static ImportOwner python(nb::handle producer);  ///< None: nothing to keep
  static ImportOwner tensor(DLManagedTensorVersioned* t) noexcept;
  static ImportOwner tensor(DLManagedTensor* t) noexcept;
  ImportOwner(ImportOwner&& o) noexcept : p_(std::exchange(o.p_, nullptr)), kind_(o.kind_) {}
  ImportOwner& operator=(ImportOwner&& o) noexcept;
  ImportOwner(const ImportOwner&) = delete;
  ImportOwner& operator=(const ImportOwner&) = delete;
  ~ImportOwner() { reset(); }

  /// The owner of a View: it takes over what this held.
  std::shared_ptr<const void> share();
  /// The tensor, when it is one of that kind.
  DLManagedTensorVersioned* versioned() const noexcept {
    return kind_ == Kind::versioned ? static_cast<DLManagedTensorVersioned*>(p_) : nullptr;
  }
  DLManagedTensor* legacy() const noexcept {
    return kind_ == Kind::legacy ? static_cast<DLManagedTensor*>(p_) : nullptr;
  }
  /// The producer, when it is a Python object (the garbage collector sees it).
  PyObject* python_object() const noexcept {
    return kind_ == Kind::python ? (PyObject*)p_ : nullptr;
  }
  void reset() noexcept;

 private:
  enum class Kind : std::uint8_t { none, python, versioned, legacy };
  ImportOwner(void* p, Kind k) noexcept : p_(p), kind_(k) {}
  void* p_ = nullptr;
  Kind kind_ = Kind::none;
};

/// Runs a DLPack deleter with the GIL (Python producers need it), or leaks after shutdown.
template <class Managed>
void release_with_gil(Managed* t) noexcept;

/// cai.DeviceNDArray: an array's checked fields, stored inline, and its View.
///
/// An array cai made (or a view of one) has its View from the start. An import keeps only
/// its Import (cai/arrays/import.h: the checked fields and the resolved producer's stream)
/// and its producer; the View, with its stream state and its owner, is built by Import::view
/// when an operation first needs it, so that an import allocates nothing but the Python
/// object (an import whose stream stands behind an event builds it at once).
///
/// The garbage collector sees the Python objects it holds (tp_traverse): its caches, the
/// producer of an import, and the Python owners of its memory and mask when this array is
/// their only holder. wrap() gives every array its own owner so that this holds except while
/// C++ keeps a copy of the View (an operation in flight, an exported DLPack tensor), when the
/// owner is rightly treated as referenced from outside.
class PyArray {
 public:
  /// An array made by cai, or a view of one.
  explicit PyArray(View view, nb::object np_dtype = {});
  /// An import, its stream resolved: the View is built at once only when an event stands
  /// for the producer's stream.
  PyArray(std::uint64_t ptr, bool readonly, Layout&& layout, DType&& dtype, ImportStream&& stream,
          ImportOwner&& owner);
  PyArray(const PyArray&) = delete;
  PyArray& operator=(const PyArray&) = delete;
  /// Frees without the GIL when this array held the last reference to cai-allocated memory
  /// that its streams still use. At exit, device memory is leaked rather than freed (see
  /// device::set_exiting), while the Python owners are released normally.
  ~PyArray();

  std::uint64_t ptr() const noexcept { return import_.ptr; }
  const DType& dtype() const noexcept { return import_.dtype; }
  const Layout& layout() const noexcept { return import_.layout; }
  std::span<const std::int64_t> shape() const noexcept { return import_.layout.shape(); }
  std::span<const std::int64_t> strides() const noexcept { return import_.layout.strides(); }
  int ndim() const noexcept { return import_.layout.ndim(); }
  bool readonly() const noexcept { return import_.readonly; }
  bool masked() const noexcept { return view_ && view_->mask(); }

  /// The View: memory, stream state, owner and mask (built on first use for an import).
  const View& view();
  /// The array's stream (the default of operations on it), or none.
  std::optional<sync::StreamRef> stream() const;
  /// Its handle alone.
  std::optional<device::StreamHandle> stream_handle() const;
  /// Whether work may be pending (no driver call): an import named a stream, or the stream
  /// state says so.
  bool has_work() const noexcept;
  /// The CAI stream of the pending work (None when the host knows none), without building
  /// the View of an import.
  std::optional<device::StreamHandle> export_stream();
  /// The DLPack device of the memory, asked of the driver once.
  const DLDevice& device();
  /// The element type as the C API gives it (CaiArrayInfo): the DLPack type (lanes 0 when
  /// DLPack has none) and NumPy's dtype.str; one per distinct dtype of the process.
  struct CType {
    DLDataType dtype{0, 0, 0};
    char typestr[24] = {};
  };
  const CType& c_type();

  /// Visits what the garbage collector must see through the array (tp_traverse).
  int traverse(visitproc visit, void* arg) const;

  nb::object np_dtype;   ///< numpy.dtype, built on first use
  nb::object cai_fixed;  ///< the immutable entries of __cuda_array_interface__, on first use
  nb::object dl_device;  ///< the tuple __dlpack_device__ returns, on first use
  /// Element strides for DLTensors that borrow from this array (built on first use).
  std::unique_ptr<const Dims> element_strides;
  /// The C API's typed-view request this array last fitted, and its element strides.
  struct Fit {
    CaiArrayRequest request;
    Dims element_strides;
  };
  std::optional<Fit> fit;

 private:
  // What every call reads comes first (a few cache lines); the View, built for operations,
  // last.
  Import import_;  ///< the fields (and an import's stream, until view_ holds it)
  const CType* c_type_ = nullptr;
  ImportOwner owner_;  ///< an import's owner, until view_ holds it
  std::optional<DLDevice> device_;
  std::optional<View> view_;
};

/// Wraps a View in a new cai.DeviceNDArray.
nb::object wrap(View view, nb::object np_dtype = {});
/// A new cai.DeviceNDArray for an import whose stream is resolved (cai/arrays/import.h).
/// (The fields are moved once, into the array's Import.)
nb::object wrap_import(std::uint64_t ptr, bool readonly, Layout&& layout, DType&& dtype,
                       ImportStream&& stream, ImportOwner&& owner);

/// The DeviceNDArray inside `obj`, or nullptr if obj is not one (never throws). An instance
/// that holds no array (made by DeviceNDArray.__new__, or cleared by the garbage collector)
/// is a TypeError naming `entry`.
PyArray* as_py_array(nb::handle obj, const char* entry = "DeviceNDArray");

/// A GPU array: ours, one with the CAI, or a DLPack producer whose data is CUDA memory.
bool is_gpu_array(nb::handle value);

/// A host value as a C-contiguous NumPy array of dtype `dt` and dst's shape, by one of the
/// rules of cai._assign (docs/python.md, "No silent conversion"): "exact" (copy_to_device:
/// Numba's same dtype and shape) or "assignable" (a[...] = value: NumPy's broadcasting, no
/// conversion that loses values). Errors name `entry`; a numpy.ma.MaskedArray is refused
/// (refuse_host_mask).
nb::object host_value(const char* rule, nb::handle value, nb::handle dt,
                      std::span<const std::int64_t> shape, const char* entry);

/// Copies `host` (from host_value of the caller's `value`) into dst on `stream`; returns once
/// copied when `blocking`, or when `host` is a temporary cai made rather than `value`'s memory.
void set_from_host(const View& dst, nb::handle host, nb::handle value,
                   const sync::StreamRef& stream, bool blocking);

/// A TypeError naming `entry` when `value` is a numpy.ma.MaskedArray: a device array made or
/// written from host data has no mask to keep it in (docs/reliability.md: masks are kept or
/// refused, never dropped). host_value calls it.
void refuse_host_mask(nb::handle value, const char* entry);

/// DType <-> numpy.dtype.
DType dtype_from_numpy(nb::handle np_dtype, const char* entry);
nb::object numpy_dtype(const DType& t);
/// The array's numpy.dtype, built once.
nb::object array_dtype(PyArray& a);

}  // namespace cai::python
