#pragma once

// Internal to the extension: every import of a foreign array, top to bottom (import.cpp):
// classify -> parse -> [typed check] -> resolve -> wrap (docs/architecture.md, "Import").

#include <nanobind/nanobind.h>

#include <memory>
#include <optional>

#include "array.h"
#include "cai/arrays/import.h"
#include "cai/arrays/view.h"
#include "cai/core/interface.h"

namespace cai::python {

/// A GPU array classified and parsed, its producer's stream not yet resolved: a cai array
/// (ours as it is, cai.Array's or a host array's device view, a DLPack import), or a CAI
/// producer's checked fields. A check may refuse it before resolve, which is then never paid
/// (docs/architecture.md, "Import").
struct ParsedArray {
  nb::object array;  ///< a cai array; invalid for a CAI import
  /// A CAI import: its fields, checked by the core (moved once, into the DeviceNDArray's
  /// Import or the View), and its producer's stream.
  Interface fields;
  ImportStream stream = ImportStream::none();
  nb::handle owner;                  ///< the CAI producer: keeps the memory alive
  std::shared_ptr<const View> mask;  ///< a CAI import's mask, imported already

  /// Resolve -> wrap: the array as a DeviceNDArray.
  nb::object wrap() &&;
  /// Resolve -> View, of a CAI import (`array` invalid); valid while `owner` lives.
  View view() &&;
};

/// Classify -> parse, for every entry that takes any GPU array but ours (each entry takes its
/// own arrays as they are first): cai.Array and host arrays, a CAI producer's dict
/// (read in one pass, top to bottom in interface.cpp), else DLPack. `entry` names the caller
/// in messages. With sync (and cai.config.CUDA_ARRAY_INTERFACE_SYNC, read here once), the
/// producer's stream is ordered after (CAI v3 consumer rule).
ParsedArray parse_array(nb::handle obj, bool sync, const char* entry);
/// The same from a CAI dict, whose memory `owner` (may be None) keeps alive; `sync` already
/// includes cai.config's switch.
ParsedArray parse_interface(nb::handle desc, nb::handle owner, bool sync, const char* entry);

/// parse_array(...).wrap(): any GPU array as a DeviceNDArray.
nb::object import_array(nb::handle obj, bool sync, const char* entry);

/// A cai.MappedNDArray or cai.ManagedNDArray as a DeviceNDArray of its own bytes, sharing the
/// streams of its memory's array; an invalid object for anything else.
nb::object host_array_device_view(nb::handle obj);

/// parse_interface(...).wrap(), cai.config's switch read here.
nb::object import_interface(nb::handle desc, nb::handle owner, bool sync, const char* entry);

/// An operation's argument: a cai array's View, or a foreign array imported as a View (no
/// Python object is made for it). Valid while the argument object lives.
class ViewArg {
 public:
  ViewArg(nb::handle obj, bool sync, const char* entry);
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

/// parse_interface(...).view(), cai.config's switch read here: a CAI dict as a View whose
/// memory `owner` (may be None) keeps alive.
View view_from_interface(nb::handle desc, nb::handle owner, bool sync, const char* entry);

/// True when obj's type exposes the DLPack protocol.
bool has_dlpack(nb::handle obj);

/// Imports an object through DLPack (the C exchange API of its type when it has one, else
/// __dlpack__). Without a target device, a CPU tensor is copied to the device only with
/// copy=true (otherwise BufferError), and copy=true always gives a new device array. With
/// one, the array API's rule: the result is on that device, copied there when it must be
/// (unless copy=false, a BufferError then) or when copy=true. `sync`: the caller's argument
/// and cai.config's switch (import_sync in config.h), read once by the caller.
nb::object import_dlpack(nb::handle obj, std::optional<bool> copy, bool sync, const char* entry,
                         std::optional<int> target_device = std::nullopt);

/// A validated dict's View: resolve -> View (the mask's import, from read_interface).
/// `sync` already includes cai.config's switch.
View resolved_view(Interface&& itf, std::shared_ptr<const View> mask, nb::handle owner, bool sync);

}  // namespace cai::python
