#pragma once

// Internal to the extension: what DLPack's producer (dlpack.cpp) and consumer (import.cpp)
// share.

#include <nanobind/nanobind.h>

#include <cstdint>
#include <optional>
#include <utility>

#include "cai/arrays/view.h"
#include "cai/core/dlpack.h"

namespace cai::python {

namespace nb = nanobind;

/// The capsule names of DLPack (one object each: a capsule's name is compared by pointer).
inline constexpr const char* kVersioned = "dltensor_versioned";
inline constexpr const char* kVersionedUsed = "used_dltensor_versioned";
inline constexpr const char* kLegacy = "dltensor";
inline constexpr const char* kLegacyUsed = "used_dltensor";

/// Memory a CUDA device reaches: the device's, page-locked host memory, managed memory.
inline bool is_cuda_like(std::int32_t device_type) {
  return device_type == kDLCUDA || device_type == kDLCUDAHost || device_type == kDLCUDAManaged;
}

/// Interned names of the protocol, created once, for the producer (dlpack.cpp) and the
/// consumer (import.cpp).
struct DlpackNames {
  PyObject *stream, *max_version, *dl_device, *copy, *dlpack, *dlpack_device, *exchange_api;
  PyObject* version13;           // (1, 3)
  PyObject* stream_and_version;  // ("stream", "max_version"): the keywords of an import's call
  PyObject* stream_only;         // ("stream",)
};
const DlpackNames& dlpack_names();

/// A 2-tuple of ints, as (major, minor) or (device_type, device_id); `what` names it in the
/// messages.
std::pair<int, int> read_int_pair(nb::handle o, const char* what);

}  // namespace cai::python
