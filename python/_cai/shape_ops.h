#pragma once

// Internal to the extension: Numba's DeviceNDArray surface beyond indexing (reshape, ravel,
// view, squeeze, transpose, split, copy) and element access (docs/array-methods.md).

#include <optional>
#include <span>

#include "array.h"

namespace cai::python {

/// `a[i, j, ...]` with one integer per axis (`items`, read from the key by __getitem__): the
/// element as a NumPy scalar on the host, read after the array's pending work (as Numba's
/// DeviceNDArray gives it). nullopt for any other key, and for masked arrays, whose elements
/// stay 0-d views that carry the mask.
std::optional<nb::object> host_element(PyArray& self, std::span<const IndexItem> items);

/// Adds the methods to cai.DeviceNDArray (bound by bind_array before).
void bind_shape_ops(nb::module_& m);

}  // namespace cai::python
