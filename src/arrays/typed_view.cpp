#include "cai/arrays/typed_view.h"

#include <cstdio>

#include "cai/core/dims.h"
#include "cai/core/error.h"
#include "cai/core/format.h"

namespace cai {

TypedViewMismatch check_typed_view(const View& v, const TypedViewSpec& spec,
                                   std::int64_t* element_strides) noexcept {
  return check_typed_view(v.ptr(), v.dtype(), v.layout(), v.readonly(), v.mask() != nullptr, spec,
                          element_strides);
}

TypedViewMismatch check_typed_view(std::uint64_t ptr, const DType& dtype, const Layout& layout,
                                   bool readonly, bool masked, const TypedViewSpec& spec,
                                   std::int64_t* element_strides) noexcept {
  using M = TypedViewMismatch;
  if (spec.dtype.itemsize() != spec.item_size) return M::item_size;  // a bug of the spec
  if (!(dtype == spec.dtype)) return M::dtype;
  if (spec.ndim >= 0 && layout.ndim() != spec.ndim) return M::ndim;
  if (spec.writable && readonly) return M::readonly;
  if (spec.c_contiguous && !layout.is_c_contiguous()) return M::c_contiguous;
  if (spec.f_contiguous && !layout.is_f_contiguous()) return M::f_contiguous;
  if (masked && !spec.allow_mask) return M::mask;
  if (layout.size() != 0 && spec.alignment > 1 &&
      ptr % static_cast<std::uint64_t>(spec.alignment) != 0)
    return M::alignment;
  std::int64_t scratch[max_ndim];
  if (!layout.try_element_strides(element_strides ? element_strides : scratch)) return M::strides;
  return M::none;
}

std::string typed_view_message(const View& v, const TypedViewSpec& spec, TypedViewMismatch m,
                               std::string_view subject) {
  std::string out(subject);
  out += ": ";
  const std::string strides = format_dims(v.strides());
  switch (m) {
    case TypedViewMismatch::none:
      return out + "fits";
    case TypedViewMismatch::item_size:
      return out + "the element type has sizeof " + std::to_string(spec.item_size) +
             " but its dtype '" + spec.dtype.str() + "' has itemsize " +
             std::to_string(spec.dtype.itemsize()) + "; fix the DTypeTraits specialisation";
    case TypedViewMismatch::dtype:
      return out + "dtype is '" + v.dtype().display_name() + "', expected '" +
             spec.dtype.display_name() + "'";
    case TypedViewMismatch::ndim:
      return out + "ndim is " + std::to_string(v.ndim()) + " (shape " + format_dims(v.shape()) +
             "), expected " + std::to_string(spec.ndim);
    case TypedViewMismatch::readonly:
      return out +
             "the array is read-only (its producer exported data=(ptr, True)), but the view "
             "is writable; take a const element type (cai::nb::array<const T, N> without "
             "cai::writable, ArrayRef<const T, N>) to read it";
    case TypedViewMismatch::c_contiguous:
      return out + "the array is not C-contiguous (shape " + format_dims(v.shape()) + ", strides " +
             strides + " bytes), but cai::c_contig was asked for";
    case TypedViewMismatch::f_contiguous:
      return out + "the array is not F-contiguous (shape " + format_dims(v.shape()) + ", strides " +
             strides + " bytes), but cai::f_contig was asked for";
    case TypedViewMismatch::mask:
      return out +
             "the array has a mask, which a typed view does not carry; add cai::allow_mask "
             "to a cai::nb::array to accept it (as_array_ref() never does: read the mask "
             "separately and convert a copy of the View without it)";
    case TypedViewMismatch::alignment:
      return out + "the data pointer " + detail::hex(v.ptr()) + " is not aligned to " +
             std::to_string(spec.alignment) + " bytes, the alignment of the element type";
    case TypedViewMismatch::strides:
      try {
        (void)v.layout().element_strides();
      } catch (const Error& e) {
        return out + e.what();  // the core's message names the axis, stride and item size
      }
      break;
  }
  return out + "not accepted";
}

}  // namespace cai
