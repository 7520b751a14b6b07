#pragma once

// Internal to the extension: functions on the per-call hot paths written as plain
// METH_FASTCALL | METH_KEYWORDS C functions (as_cuda_array, from_dlpack, __dlpack__): the
// arguments are matched against interned names by pointer, without the general dispatcher.

#include <nanobind/nanobind.h>

#include <array>
#include <cstddef>
#include <string>

#include "cai/core/error.h"
#include "convert.h"
#include "errors.h"

namespace cai::python {

/// The arguments of a call, matched to `names` (interned): the first `positional` may come by
/// position, the others by keyword only. Those not given keep what `out` held (their defaults).
/// Throws Error(type_error) "<entry>: ..." for a missing, repeated or unknown argument.
template <std::size_t N>
void read_args(const char* entry, PyObject* const* args, std::size_t nargsf, PyObject* kwnames,
               const std::array<PyObject*, N>& names, std::size_t positional, std::size_t required,
               std::array<PyObject*, N>& out) {
  const auto nargs = static_cast<std::size_t>(PyVectorcall_NARGS(nargsf));
  if (nargs > positional)
    throw_error(Errc::type_error, entry, ": takes at most ", positional, " positional argument",
                positional == 1 ? "" : "s", " (", nargs, " given)");
  std::array<bool, N> given{};
  for (std::size_t i = 0; i < nargs; ++i) {
    out[i] = args[i];
    given[i] = true;
  }
  const Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  for (Py_ssize_t k = 0; k < nkw; ++k) {
    PyObject* key = PyTuple_GET_ITEM(kwnames, k);
    std::size_t i = 0;
    while (i < N && names[i] != key) ++i;  // callers' literals are interned like ours
    if (i == N) {
      i = 0;
      while (i < N && PyUnicode_Compare(names[i], key) != 0) ++i;
      if (PyErr_Occurred()) PyErr_Clear();
    }
    if (i == N) throw_error(Errc::type_error, entry, ": unexpected keyword argument ", ReprOf{key});
    if (given[i])
      throw_error(Errc::type_error, entry, ": got multiple values for argument '",
                  PyUnicode_AsUTF8(names[i]), "'");
    out[i] = args[nargs + static_cast<std::size_t>(k)];
    given[i] = true;
  }
  for (std::size_t i = 0; i < required; ++i)
    if (!given[i])
      throw_error(Errc::type_error, entry, ": missing required argument '",
                  PyUnicode_AsUTF8(names[i]), "'");
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
