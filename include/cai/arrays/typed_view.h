#pragma once

// Layer 4: the one check "does this View fit a typed view" (ArrayRef<T, N> through
// as_array_ref(), cai::nb::array<T, N, ...> through the C API, the tile cai.Array). The
// stride part is the core's typed-view rule (Layout::try_element_strides); the rule and the
// messages are documented in docs/cpp-typed-view.md.

#include <cstdint>
#include <string>
#include <string_view>

#include "cai/arrays/view.h"
#include "cai/core/dtype.h"

namespace cai {

/// What a typed view asks of an array (nanobind's ndarray_config, for cai).
struct TypedViewSpec {
  DType dtype;                 ///< the element type's dtype
  std::int64_t item_size = 0;  ///< sizeof the element type; must equal dtype.itemsize()
  std::int64_t alignment = 1;  ///< alignof the element type (non-empty arrays only)
  int ndim = -1;               ///< the rank; -1 accepts any
  bool writable = false;       ///< refuse read-only arrays
  bool c_contiguous = false;   ///< require NumPy's C-contiguity
  bool f_contiguous = false;   ///< require NumPy's F-contiguity
  bool allow_mask = false;     ///< accept masked arrays (the mask is not part of the view)
};

/// The first requirement a View breaks, in the order they are checked.
enum class TypedViewMismatch : std::uint8_t {
  none,
  dtype,
  item_size,
  ndim,
  readonly,
  c_contiguous,
  f_contiguous,
  mask,
  alignment,
  strides,
};

/// Checks `v` against `spec`; with `element_strides` non-null and no mismatch, writes the
/// v.ndim() element strides there. Never throws or allocates: it runs on every argument of
/// every call of a bound function.
TypedViewMismatch check_typed_view(const View& v, const TypedViewSpec& spec,
                                   std::int64_t* element_strides) noexcept;
/// The same on the parts of an array that the check reads (for a binding that stores them
/// without a View).
TypedViewMismatch check_typed_view(std::uint64_t ptr, const DType& dtype, const Layout& layout,
                                   bool readonly, bool masked, const TypedViewSpec& spec,
                                   std::int64_t* element_strides) noexcept;

/// "<subject>: <what is wrong and what was expected>", for a mismatch check_typed_view found.
std::string typed_view_message(const View& v, const TypedViewSpec& spec, TypedViewMismatch m,
                               std::string_view subject);

}  // namespace cai
