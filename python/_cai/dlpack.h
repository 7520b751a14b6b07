#pragma once

// Internal to the extension: DLPack in both directions (dlpack.cpp).

#include <nanobind/nanobind.h>

#include <optional>

#include "cai/arrays/view.h"

namespace cai::python {

namespace nb = nanobind;

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

}  // namespace cai::python
