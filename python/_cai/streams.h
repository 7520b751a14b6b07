#pragma once

// Internal to the extension: cai.Stream and cai.Event, and how a `stream=` argument is read.

#include <nanobind/nanobind.h>

#include <memory>

#include "cai/arrays/view.h"
#include "cai/device/owned.h"
#include "cai/sync/ordering.h"

namespace cai::python {

namespace nb = nanobind;

/// cai.Stream: a stream handle and, for streams cai created, ownership of it.
struct PyStream {
  sync::StreamRef stream;  ///< the handle, and what keeps the stream alive
  bool owned = false;      ///< cai created it and destroys it with its last user
  device::StreamHandle handle() const { return stream.handle; }
  const sync::StreamRef& ref() const { return stream; }
};

/// cai.Event.
struct PyEvent {
  std::shared_ptr<device::OwnedEvent> event;
};

/// The stream cai uses when a `stream=` argument is 0 or None and no array supplies one.
sync::StreamRef library_default_stream();

/// The stream of work on `v` when the caller names none: the array's stream, else the library
/// default (docs/architecture.md, "stream=0 arguments").
sync::StreamRef stream_or_default(const View& v);

/// The device a new array like `like` (device_array_like, copy) is allocated on with
/// `stream`: its memory's device (managed and mapped memory included, which the operation
/// device leaves to the current one), unless a created stream says otherwise; -1: the current.
int new_array_device(const View& like, const sync::StreamRef& stream);

/// Reads a `stream=` argument: a cai.Stream, an int handle (0 = default), None (= default),
/// or an object with __cuda_stream__. `fallback` is what 0/None mean at this call site.
sync::StreamRef stream_arg(nb::handle obj, const char* entry, const sync::StreamRef& fallback);

}  // namespace cai::python
