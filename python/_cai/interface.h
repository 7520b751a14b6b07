#pragma once

// Internal to the extension: the CUDA Array Interface in both directions (interface.cpp).

#include <nanobind/nanobind.h>

#include <optional>
#include <vector>

#include "array.h"
#include "cai/arrays/view.h"
#include "cai/core/dtype.h"

namespace cai::python {

/// Imports any GPU array as a DeviceNDArray: ours as it is, a CAI producer's dict (the hot
/// path, readable top to bottom in interface.cpp), else DLPack. `entry` names the caller in
/// messages. With sync (and cai.config.CUDA_ARRAY_INTERFACE_SYNC), an integer stream becomes
/// the array's stream (CAI v3 consumer rule, honoured by every later operation with events).
/// With `deferred`, the producer's stream of a CAI import is stored there instead: the caller
/// imports it (SyncState::set_imported) once it keeps the array, so that an array refused by
/// a check records no event.
nb::object import_array(nb::handle obj, bool sync, const char* entry,
                        std::optional<device::StreamHandle>* deferred = nullptr);

/// A cai.MappedNDArray or cai.ManagedNDArray as a DeviceNDArray of its own bytes, sharing the
/// streams of its memory's array; an invalid object for anything else.
nb::object host_array_device_view(nb::handle obj);

/// The same from a CAI dict, whose memory `owner` (may be None) keeps alive.
nb::object import_interface(nb::handle desc, nb::handle owner, bool sync, const char* entry,
                            std::optional<device::StreamHandle>* deferred = nullptr);

/// An operation's argument: a cai array's View, or a foreign array imported as a View (no
/// Python object is made for it). Valid while the argument object lives.
class ViewArg {
 public:
  ViewArg(nb::handle obj, bool sync, const char* entry,
          std::optional<device::StreamHandle>* deferred = nullptr);
  ViewArg(const ViewArg&) = delete;
  ViewArg& operator=(const ViewArg&) = delete;
  const View& operator*() const noexcept { return *view_; }
  const View* operator->() const noexcept { return view_; }
  const View* get() const noexcept { return view_; }
  /// The array when the argument is a cai array, else nullptr.
  PyArray* ours() const noexcept { return ours_; }

 private:
  PyArray* ours_ = nullptr;
  std::optional<View> imported_;
  nb::object held_;  ///< a DLPack import's array
  const View* view_ = nullptr;
};

/// Validates a CAI dict into a View whose memory is kept alive by `owner` (may be None). With
/// `deferred`, the producer's stream (when sync) is stored there instead of becoming the View's
/// state: the caller imports it once the View is wanted (SyncState::set_imported), so that a
/// View refused by a check records no event.
View view_from_interface(nb::handle desc, nb::handle owner, bool sync, const char* entry,
                         std::optional<device::StreamHandle>* deferred = nullptr);

/// The __cuda_array_interface__ dict of an array: a new dict per call, its fixed entries
/// cached in the array; `stream` is None when no work is pending (docs/architecture.md).
nb::dict export_interface(PyArray& a);
/// The same for a View (no cache).
nb::dict export_interface(const View& v);

/// Python descr list -> DescrEntry tree, and back.
std::vector<DescrEntry> descr_from_python(nb::handle list, int depth = 0);
nb::list descr_to_python(const std::vector<DescrEntry>& descr);

}  // namespace cai::python
