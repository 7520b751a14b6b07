#pragma once

// Internal to the extension: functions on the per-call hot paths written as plain
// METH_FASTCALL | METH_KEYWORDS C functions (as_cuda_array, from_dlpack, __dlpack__): the
// arguments are matched against interned names by pointer, without the general dispatcher.

#include <nanobind/nanobind.h>

#include <array>
#include <cstddef>
#include <span>
#include <string>

#include "cai/core/error.h"
#include "convert.h"
#include "errors.h"

namespace cai::python {

/// The arguments of a call, matched to `names` (interned): the first `positional` may come by
/// position, the others by keyword only. Those not given keep what `out` held (their defaults).
/// Throws Error(type_error) "<entry>: ..." for a missing, repeated or unknown argument.
/// One function for every entry (not one per count of names): a call that passes through two
/// entries, as from_dlpack and the producer's __dlpack__, runs its code once.
void match_args(const char* entry, PyObject* const* args, std::size_t nargsf, PyObject* kwnames,
                std::span<PyObject* const> names, std::size_t positional, std::size_t required,
                std::span<PyObject*> out);

template <std::size_t N>
inline void read_args(const char* entry, PyObject* const* args, std::size_t nargsf,
                      PyObject* kwnames, const std::array<PyObject*, N>& names,
                      std::size_t positional, std::size_t required, std::array<PyObject*, N>& out) {
  static_assert(N <= 64, "match_args marks the arguments given in one 64-bit word");
  // The usual call, by position only: nothing to match (as_cuda_array(a), from_dlpack(p)).
  const auto nargs = static_cast<std::size_t>(PyVectorcall_NARGS(nargsf));
  if (!kwnames && nargs >= required && nargs <= positional) {
    for (std::size_t i = 0; i < nargs; ++i) out[i] = args[i];
    return;
  }
  match_args(entry, args, nargsf, kwnames, names, positional, required, out);
}

/// A bool argument: True or False only (as nanobind's bool caster reads it).
inline bool read_bool(PyObject* o, const char* entry, const char* name) {
  if (o == Py_True) return true;
  if (o == Py_False) return false;
  throw_error(Errc::type_error, entry, ": ", name, ": expected a bool, got ", TypeNameOf{o});
}

/// Runs the body of a fast C function: its result, or nullptr with the Python exception set.
template <class F>
PyObject* fastcall(F&& body) noexcept {
  PyObject* result = nullptr;
  guarded([&] { result = body().release().ptr(); });
  return result;
}

}  // namespace cai::python
