#pragma once

// Internal to the extension: Python values read into C++ with ONE policy per kind of value
// (docs/python.md, "Arguments"), Python objects kept alive from C++, and the NumPy module.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "cai/core/dims.h"
#include "cai/core/error.h"
#include "cai/core/interface.h"
#include "gil.h"

namespace cai::python {

/// The type name of `o` for messages ("int", "numpy.ndarray").
std::string type_name_of(nb::handle o);

/// repr(o) for a message: at most 60 characters, the type name where repr itself fails.
std::string short_repr(nb::handle o);

/// The same two as pieces of a throw_error message, formatted only when it is thrown.
struct TypeNameOf {
  nb::handle object;
};
struct ReprOf {
  nb::handle object;
};
inline void append_part(std::string& out, TypeNameOf o) {
  out += type_name_of(o.object);
}
inline void append_part(std::string& out, ReprOf o) {
  out += short_repr(o.object);
}

/// The integer policy of every entry point: a Python int or any object with __index__ (NumPy
/// integers, 0-d integer arrays, cai.Stream), never a bool; floats and str have no __index__.
/// Calls no Python code.
bool is_integer(nb::handle o) noexcept;

/// Reads an integer under that policy. TypeError "<what>: expected <expected>, got <type>";
/// `range` (OverflowError by default) "<what>: <value> does not fit in a signed 64-bit
/// integer"; an exception raised by __index__ propagates.
std::int64_t read_int64(nb::handle o, std::string_view what, std::string_view expected = "an int",
                        Errc range = Errc::overflow);

/// The same for addresses and handles, in [0, 2**64): ValueError "<what>: <value> is out of
/// range (expected an int in [0, 2**64))".
std::uint64_t read_uint64(nb::handle o, std::string_view what, std::string_view expected);

/// What a shape or strides argument may be.
enum class DimsForm {
  cai_key,   ///< a CAI dict entry: a tuple (or list) of integers
  argument,  ///< an API argument: one integer, or any sequence of integers (tuple, list,
             ///< integer ndarray), as NumPy's shape arguments
};

/// Reads a shape or strides under the integer policy; at most max_ndim values.
Dims read_dims(nb::handle o, std::string_view what, DimsForm form);

/// Shape tuple from values (what Python prints as format_dims does).
nb::tuple to_tuple(std::span<const std::int64_t> values);

/// A Python object made by `make()` on first use and kept for the process (leaked on purpose:
/// finalizers that run at exit, when the import system is gone, still find it). `slot` is a
/// constant-initialized static, so no C++ guard is taken: `make` may import, and an import lets
/// other threads run; one that took the GIL meanwhile and waited on a static's guard would hold
/// the GIL the import needs back, and every thread would hang (docs/reliability.md). Two threads
/// may both make it; the first kept wins. Call with the GIL.
template <class Make>
nb::handle kept_for_process(PyObject*& slot, Make&& make) {
  if (!slot) {
    nb::object made = make();
    if (!slot) slot = made.release().ptr();
  }
  return slot;
}

/// The numpy module, imported on first use (kept_for_process).
nb::handle numpy_module();

/// Keeps a Python object alive from C++: the one owner type for every Python object a View,
/// a stream or a tensor holds. Released with the GIL; leaked once the interpreter is gone.
/// Null for None.
std::shared_ptr<const void> keep_alive(nb::handle obj);

/// The Python object behind an owner made by keep_alive, or nullptr for any other owner.
PyObject* kept_object(const std::shared_ptr<const void>& owner) noexcept;

}  // namespace cai::python
