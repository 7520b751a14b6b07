#include "cai/core/interface.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>

#include "cai/core/error.h"
#include "cai/core/format.h"

namespace cai {

namespace {

using std::to_string;

[[noreturn]] void fail(Errc code, std::string message) {
  throw_error(code, std::move(message));
}

using detail::hex;

void require(bool present, const char* key) {
  if (!present) {
    fail(Errc::value_error,
         std::string("__cuda_array_interface__: missing required key '") + key + "'");
  }
}

// A descr that only restates the typestr: [('', typestr)] (NumPy's _is_default_descr) or a
// single unnamed entry of an equal type.
bool restates_typestr(std::span<const DescrEntry> descr, std::string_view typestr,
                      const DType& dtype, const TypestrOptions& options) {
  if (descr.size() != 1) return false;
  const DescrEntry& e = descr[0];
  if (!e.name.empty() || !e.fields.empty() || !e.shape.empty()) return false;
  if (e.typestr == typestr) return true;
  DType other;
  try {
    other = DType::from_typestr(e.typestr, options);
  } catch (const Error& err) {
    fail(err.code(), std::string("descr: entry ('', '") + e.typestr +
                         "') has an invalid typestr: " + err.what());
  }
  if (other == dtype) return true;
  fail(Errc::value_error, std::string("descr: [('', '") + e.typestr + "')] contradicts typestr '" +
                              std::string(typestr) +
                              "' (an unnamed single entry must restate the typestr)");
}

// Whether a type is, or has a field of, kind 'O'.
bool holds_objects(const DType& t) {
  if (t.kind() == Kind::object) return true;
  for (const Field& field : t.fields())
    if (holds_objects(field.type)) return true;
  return false;
}

// The parts of validate_interface, in the order of its checks.

void check_shape(std::span<const std::int64_t> shape) {
  const std::size_t ndim = shape.size();
  if (ndim > static_cast<std::size_t>(max_ndim)) {
    fail(Errc::value_error, "shape: " + to_string(ndim) + " dimensions; at most " +
                                to_string(max_ndim) + " are supported");
  }
  for (std::size_t i = 0; i < ndim; ++i) {
    if (shape[i] < 0) {
      fail(Errc::value_error, "shape: " + format_dims(shape) + " has a negative size at axis " +
                                  to_string(i) + " (sizes must be >= 0)");
    }
  }
}

DType read_dtype(const InterfaceFields& f, TypestrOptions options) {
  DType dtype = f.dtype ? *f.dtype : DType::from_typestr(f.typestr, options);
  if (f.has_descr && !restates_typestr(f.descr, f.typestr, dtype, options)) {
    DType structured = DType::from_descr(f.descr, options);
    if (structured.itemsize() != dtype.itemsize()) {
      fail(Errc::value_error, "descr: describes an item of " + to_string(structured.itemsize()) +
                                  " bytes but typestr '" + std::string(f.typestr) + "' has " +
                                  to_string(dtype.itemsize()) +
                                  " (descr must describe the typestr's item)");
    }
    dtype = std::move(structured);
  }
  if (holds_objects(dtype)) {
    fail(Errc::value_error,
         std::string(f.has_descr && dtype.is_structured() ? "descr" : "typestr") + ": '" +
             std::string(f.typestr) +
             "' holds Python object pointers (kind 'O'), which mean nothing in device memory "
             "and cannot be exchanged through the CUDA Array Interface");
  }
  return dtype;
}

// The extent of the array's bytes, checked: Layout's invariant (rank, sizes, byte size, extent).
Extent checked_extent(const InterfaceFields& f, std::int64_t itemsize) {
  const std::size_t ndim = f.shape.size();
  const std::optional<std::int64_t> nbytes = Layout::checked_nbytes(f.shape, itemsize);
  if (!nbytes) {
    fail(Errc::overflow, "shape: " + format_dims(f.shape) + " with typestr '" +
                             std::string(f.typestr) + "' has a byte size that overflows int64");
  }
  // Row-major: from byte 0 to the byte size (0 without elements, the item for 0-d).
  if (f.strides_state != Presence::given) return Extent{0, *nbytes};
  if (f.strides.size() != ndim) {
    fail(Errc::value_error, "strides: " + format_dims(f.strides) + " has " +
                                to_string(f.strides.size()) + " values but shape " +
                                format_dims(f.shape) + " has " + to_string(ndim) +
                                " dimensions (one byte stride per dimension)");
  }
  const std::optional<Extent> extent = Layout::checked_extent(f.shape, f.strides, itemsize);
  if (!extent) {
    fail(Errc::overflow, "strides: " + format_dims(f.strides) + " with shape " +
                             format_dims(f.shape) + " and item size " + to_string(itemsize) +
                             " reach bytes beyond int64");
  }
  return *extent;
}

std::uint64_t read_data(const InterfaceFields& f, const Layout& layout, int version) {
  if (layout.size() == 0) {
    if (f.ptr != 0 && version >= 2) {
      fail(Errc::value_error, "data: pointer " + hex(f.ptr) + " for a zero-size array of shape " +
                                  format_dims(f.shape) + "; CAI v2+ requires 0 (version " +
                                  to_string(f.version) + ")");
    }
    return 0;  // v0/v1 left it unspecified
  }
  // Elements of item size 0 ('S0', 'V0') occupy no bytes: nothing is dereferenced.
  if (f.ptr == 0 && layout.nbytes() != 0) {
    fail(Errc::value_error, "data: pointer 0 for an array of shape " + format_dims(f.shape) +
                                " with " + to_string(layout.size()) +
                                " elements; only an array of no bytes may have a null pointer");
  }
  return f.ptr;
}

std::shared_ptr<const Interface> read_mask(const InterfaceFields& f, const Layout& layout,
                                           int version) {
  if (f.mask_state != Presence::given) return nullptr;
  if (version == 0) {
    fail(Errc::value_error,
         "mask: an object was given but CAI v0 has no mask (added in v1); use None or "
         "version >= 1");
  }
  if (f.mask == nullptr) {
    fail(Errc::value_error, "mask: given without its validated descriptor (binding error)");
  }
  const Interface& m = *f.mask;
  check_mask("mask", layout.shape(), m.layout.shape(), m.dtype);
  return std::make_shared<const Interface>(m);
}

std::optional<std::uint64_t> read_stream(const InterfaceFields& f) {
  if (f.stream_state != Presence::given) return std::nullopt;
  if (f.stream == 0) {
    fail(Errc::value_error, stream_zero_message("stream:", "1, 2, a stream handle or None"));
  }
  if (f.stream < 0) {
    fail(Errc::value_error, "stream: " + to_string(f.stream) +
                                " is not a stream (CAI v3: None, 1 for the legacy default, "
                                "2 for the per-thread default, or a positive handle)");
  }
  return static_cast<std::uint64_t>(f.stream);
}

}  // namespace

void throw_key_type_error(std::string_view key, std::string_view got, std::string_view expected) {
  fail(Errc::type_error,
       std::string(key) + ": expected " + std::string(expected) + ", got " + std::string(got));
}

Interface validate_interface(const InterfaceFields& f, TypestrOptions options) {
  require(f.has_shape, "shape");
  require(f.has_typestr, "typestr");
  require(f.has_data, "data");
  require(f.has_version, "version");

  Interface out;
  if (f.version < 0) {
    fail(Errc::value_error, "version: " + to_string(f.version) +
                                " is not a valid version (must be >= 0; the current is 3)");
  }
  // Versions have been additive so far; a newer one is read with the newest rules we know.
  out.version =
      f.version > latest_interface_version ? latest_interface_version : static_cast<int>(f.version);
  check_shape(f.shape);
  out.dtype = read_dtype(f, options);
  out.strides_given = f.strides_state == Presence::given;
  const std::int64_t itemsize = out.dtype.itemsize();
  const Extent extent = checked_extent(f, itemsize);
  out.layout = Layout(f.shape, out.strides_given ? f.strides : Layout::c_strides(f.shape, itemsize),
                      itemsize, extent, Layout::Checked{});
  out.readonly = f.read_only;
  out.ptr = read_data(f, out.layout, out.version);
  out.mask = read_mask(f, out.layout, out.version);
  out.stream = read_stream(f);
  return out;
}

void check_mask(std::string_view key, std::span<const std::int64_t> shape,
                std::span<const std::int64_t> mask_shape, const DType& mask_dtype) {
  if (!std::ranges::equal(mask_shape, shape)) {
    fail(Errc::value_error, std::string(key) + ": shape " + format_dims(mask_shape) +
                                " differs from the data shape " + format_dims(shape) +
                                " (the mask must have the same shape as the data)");
  }
  const Kind k = mask_dtype.kind();
  if (k != Kind::boolean && k != Kind::signed_int && k != Kind::unsigned_int) {
    fail(Errc::value_error, std::string(key) + ": typestr '" + mask_dtype.str() +
                                "' is not bool or integer (mask elements are read as "
                                "true/false)");
  }
}

std::string stream_zero_message(std::string_view subject, std::string_view use) {
  std::string out(subject);
  out += subject.ends_with('=') ? "0" : " 0";
  out +=
      " is not allowed: the CUDA Array Interface forbids stream 0, which is ambiguous "
      "between no stream, the legacy default stream and the per-thread default stream; use ";
  out += use;
  return out;
}

}  // namespace cai
