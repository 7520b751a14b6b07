#pragma once

// Internal to the extension: the CUDA Array Interface in both directions (interface.cpp).

#include <nanobind/nanobind.h>

#include <optional>
#include <vector>

#include "array.h"
#include "cai/arrays/import.h"
#include "cai/arrays/view.h"
#include "cai/core/dtype.h"

namespace cai::python {

/// A producer's __cuda_array_interface__ dict, read in one pass and validated by the core (the
/// CAI import's parse step, import.cpp). A mask is imported as its own array, its View put in
/// `mask`; `depth` counts the masks above.
Interface read_interface(nb::handle desc, bool sync, const char* entry, int depth,
                         std::shared_ptr<const View>* mask);

/// The __cuda_array_interface__ dict of an array: a new dict per call, its fixed entries
/// cached in the array; `stream` is None when no work is pending (docs/architecture.md).
nb::dict export_interface(PyArray& a);
/// The same for a View (no cache).
nb::dict export_interface(const View& v);

/// Python descr list -> DescrEntry tree, and back.
std::vector<DescrEntry> descr_from_python(nb::handle list, int depth = 0);
nb::list descr_to_python(const std::vector<DescrEntry>& descr);

}  // namespace cai::python
