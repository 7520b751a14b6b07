#pragma once

// Internal to the extension: cai.DeviceNDArray and the import/export of the CAI.

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cai/arrays/view.h"
#include "cai/core/interface.h"
#include "common.h"
#include "convert.h"

namespace cai::python {

/// cai.DeviceNDArray: a View plus Python-side caches.
///
/// The garbage collector sees the Python objects it holds (tp_traverse): its caches, and the
/// Python owners of its memory and mask (keep_alive owners) when this array is their only
/// holder. wrap() gives every array its own owner so that this holds except while C++ keeps
/// a copy of the View (an operation in flight, an exported DLPack tensor), when the owner is
/// rightly treated as referenced from outside.
struct PyArray {
  View view;
  nb::object np_dtype;   ///< numpy.dtype, built on first use
  nb::object cai_fixed;  ///< the immutable entries of __cuda_array_interface__, on first use
  /// Element strides for DLTensors that borrow from this array (built on first use).
  std::unique_ptr<const Dims> element_strides;

  PyArray(View v, nb::object dtype) : view(std::move(v)), np_dtype(std::move(dtype)) {}
  PyArray(const PyArray&) = delete;
  PyArray& operator=(const PyArray&) = delete;
  /// Frees without the GIL when this array held the last reference to cai-allocated memory
  /// (the free waits for the streams using it). At exit, device memory is leaked rather than
  /// freed (see device::set_exiting), while the Python owners are released normally.
  ~PyArray();
};

/// Wraps a View in a new cai.DeviceNDArray.
nb::object wrap(View view, nb::object np_dtype = {});

/// The DeviceNDArray inside `obj`, or nullptr if obj is not one (never throws). An instance
/// that holds no array (made by DeviceNDArray.__new__, or cleared by the garbage collector)
/// is a TypeError naming `entry`.
PyArray* as_py_array(nb::handle obj, const char* entry = "DeviceNDArray");

/// Imports any object with __cuda_array_interface__ (our own arrays are taken as they are).
/// `entry` names the caller in messages. With sync, an integer stream becomes the array's
/// stream (CAI v3 consumer rule, honoured by every later operation with events).
View import_view(nb::handle obj, bool sync, const char* entry,
                 std::optional<device::StreamHandle>* deferred = nullptr);

/// Imports an object through DLPack (the C exchange API of its type when it has one, else
/// __dlpack__). Without a target device, a CPU tensor is copied to the device only with
/// copy=true (otherwise BufferError), and copy=true always gives a new device array. With
/// one, the array API's rule: the result is on that device, copied there when it must be
/// (unless copy=false, a BufferError then) or when copy=true.
View import_dlpack(nb::handle obj, std::optional<bool> copy, bool sync, const char* entry,
                   std::optional<int> target_device = std::nullopt);
/// True when obj's type exposes the DLPack protocol.
bool has_dlpack(nb::handle obj);

/// Validates a CAI dict into a View whose memory is kept alive by `owner` (may be None). With
/// `deferred`, the producer's stream (when sync) is stored there instead of becoming the View's
/// state: the caller imports it once the View is wanted (SyncState::set_imported), so that a
/// View refused by a check records no event.
View view_from_interface(nb::handle desc, nb::handle owner, bool sync, const char* entry,
                         int depth = 0, std::optional<device::StreamHandle>* deferred = nullptr);

/// The __cuda_array_interface__ dict of a View (a new dict per call).
nb::dict export_interface(const View& v);
nb::dict export_interface(PyArray& a);  ///< the same, with the fixed entries cached

/// DType <-> numpy.dtype.
DType dtype_from_numpy(nb::handle np_dtype, const char* entry);
nb::object numpy_dtype(const DType& t);

/// Python descr list -> DescrEntry tree, and back.
std::vector<DescrEntry> descr_from_python(nb::handle list, int depth = 0);
nb::list descr_to_python(const std::vector<DescrEntry>& descr);

}  // namespace cai::python
