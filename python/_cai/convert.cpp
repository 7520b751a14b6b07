// Python values read into C++ with one policy per kind of value, owners, the NumPy module.

#include "convert.h"

#include <nanobind/stl/string.h>

#include <cstdint>

#include "fastcall.h"

namespace cai::python {

std::string type_name_of(nb::handle o) {
  // The C name, as Python's own messages give it ("numpy.float64", "str"); nanobind's types
  // with their module ("cai._cai.Stream").
  if (nb::type_check(Py_TYPE(o.ptr()))) return nb::inst_name(o).c_str();
  return Py_TYPE(o.ptr())->tp_name;
}

bool is_integer(nb::handle o) noexcept {
  return !PyBool_Check(o.ptr()) && (PyLong_Check(o.ptr()) || PyIndex_Check(o.ptr()));
}

namespace {

// o as a Python int under the policy (a new reference), or a TypeError naming `what`.
nb::object as_int(nb::handle o, std::string_view what, std::string_view expected) {
  if (PyLong_Check(o.ptr()) && !PyBool_Check(o.ptr())) return nb::borrow(o);
  if (!is_integer(o)) throw_key_type_error(what, type_name_of(o), expected);
  // __index__ is Python code: a daemon thread ended inside it at exit parks (gil.h).
  PyObject* i = call_python([&] { return PyNumber_Index(o.ptr()); });
  if (!i) {
    // An ndarray of more than one element has __index__ but is no integer: say what was
    // expected. Other exceptions of __index__ are the object's own and propagate.
    if (!PyErr_ExceptionMatches(PyExc_TypeError)) throw nb::python_error();
    nb::python_error e;  // fetches it
    throw_error(Errc::type_error, std::string(what) + ": expected " + std::string(expected) +
                                      ", got " + type_name_of(o) + " (" + e.what() + ")");
  }
  return nb::steal(i);
}

}  // namespace

std::string short_repr(nb::handle o) {
  PyObject* r = PyObject_Repr(o.ptr());
  if (!r) {
    PyErr_Clear();
    return type_name_of(o);
  }
  nb::object ro = nb::steal(r);
  const char* c = PyUnicode_AsUTF8(r);
  if (!c) {
    PyErr_Clear();
    return type_name_of(o);
  }
  std::string out(c);
  if (out.size() > 60) out = out.substr(0, 57) + "...";
  return out;
}

std::int64_t read_int64(nb::handle o, std::string_view what, std::string_view expected,
                        Errc range) {
  if (PyLong_CheckExact(o.ptr())) {  // the usual case: no reference taken, no Python code
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(o.ptr(), &overflow);
    if (!overflow) return v;
  }
  nb::object i = as_int(o, what, expected);
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(i.ptr(), &overflow);
  if (v == -1 && PyErr_Occurred()) throw nb::python_error();
  if (overflow)
    throw_error(range, std::string(what) + ": " + short_repr(i) +
                           " does not fit in a signed 64-bit integer");
  return v;
}

std::uint64_t read_uint64(nb::handle o, std::string_view what, std::string_view expected) {
  nb::object i = as_int(o, what, expected);
  const unsigned long long v = PyLong_AsUnsignedLongLong(i.ptr());
  if (v == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
    if (!PyErr_ExceptionMatches(PyExc_OverflowError)) throw nb::python_error();
    PyErr_Clear();
    throw_error(Errc::value_error, std::string(what) + ": " + short_repr(i) +
                                       " is out of range (expected an int in [0, 2**64))");
  }
  return v;
}

Dims read_dims(nb::handle o, std::string_view what, DimsForm form) {
  const char* expected =
      form == DimsForm::cai_key ? "a tuple of int" : "an int or a sequence of int";
  nb::object items;
  if (PyTuple_Check(o.ptr())) {
    items = nb::borrow(o);
  } else if (PyList_Check(o.ptr())) {
    // An item's __index__ may change the list while it is read: read a tuple copy.
    items = nb::steal(PyList_AsTuple(o.ptr()));
    if (!items.is_valid()) throw nb::python_error();
  } else if (form == DimsForm::cai_key || PyUnicode_Check(o.ptr()) || PyBytes_Check(o.ptr())) {
    throw_key_type_error(what, type_name_of(o), expected);
  } else if (is_integer(o) && !PySequence_Check(o.ptr())) {
    return Dims{read_int64(o, what, expected)};
  } else if (PySequence_Check(o.ptr())) {
    // An ndarray is both: a 0-d integer array is one size (its __index__), any other is a
    // sequence, as NumPy reads shapes.
    if (is_integer(o)) {
      PyObject* i = call_python([&] { return PyNumber_Index(o.ptr()); });
      if (i) return Dims{read_int64(nb::steal(i), what, expected)};
      if (!PyErr_ExceptionMatches(PyExc_TypeError)) throw nb::python_error();
      PyErr_Clear();
    }
    PyObject* t = call_python([&] { return PySequence_Tuple(o.ptr()); });
    if (!t) throw nb::python_error();
    items = nb::steal(t);
  } else {
    throw_key_type_error(what, type_name_of(o), expected);
  }
  const Py_ssize_t n = PyTuple_GET_SIZE(items.ptr());
  if (n > max_ndim)
    throw_error(Errc::value_error, std::string(what) + ": " + std::to_string(n) +
                                       " dimensions; at most " + std::to_string(max_ndim) +
                                       " are supported");
  Dims out(static_cast<std::size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i)
    out[static_cast<std::size_t>(i)] =
        read_int64(PyTuple_GET_ITEM(items.ptr(), i), what, "a tuple of int");
  return out;
}

nb::tuple to_tuple(std::span<const std::int64_t> values) {
  PyObject* t = PyTuple_New(static_cast<Py_ssize_t>(values.size()));
  if (!t) throw nb::python_error();
  nb::tuple out = nb::steal<nb::tuple>(t);
  for (std::size_t i = 0; i < values.size(); ++i) {
    PyObject* v = PyLong_FromLongLong(values[i]);
    if (!v) throw nb::python_error();
    PyTuple_SET_ITEM(t, static_cast<Py_ssize_t>(i), v);
  }
  return out;
}

nb::handle numpy_module() {
  static PyObject* mod = nullptr;
  return kept_for_process(mod, [] { return nb::module_::import_("numpy"); });
}

namespace {

// The deleter of keep_alive's owners; its type identifies them (kept_object).
struct ReleasePyObject {
  void operator()(const void* p) const noexcept {
    // nb::is_alive(), not Py_IsInitialized(): the latter is already false while modules are
    // torn down at exit, which leaked every imported producer (nanobind reported the leaks).
    if (!nb::is_alive()) return;
    PyObject* o = static_cast<PyObject*>(const_cast<void*>(p));
    if (PyGILState_Check()) {  // the usual case: released from Python code
      Py_DECREF(o);
      return;
    }
    WithGil gil;
    Py_DECREF(o);
  }
};

}  // namespace

std::shared_ptr<const void> keep_alive(nb::handle obj) {
  if (!obj.is_valid() || obj.is_none()) return nullptr;
  Py_INCREF(obj.ptr());  // if the allocation throws, the deleter gives it back
  return std::shared_ptr<const void>(obj.ptr(), ReleasePyObject{});
}

PyObject* kept_object(const std::shared_ptr<const void>& owner) noexcept {
  if (!owner || !std::get_deleter<ReleasePyObject>(owner)) return nullptr;
  return static_cast<PyObject*>(const_cast<void*>(owner.get()));
}

void match_args(const char* entry, PyObject* const* args, std::size_t nargsf, PyObject* kwnames,
                std::span<PyObject* const> names, std::size_t positional, std::size_t required,
                std::span<PyObject*> out) {
  const std::size_t n = names.size();
  const auto nargs = static_cast<std::size_t>(PyVectorcall_NARGS(nargsf));
  if (nargs > positional)
    throw_error(Errc::type_error, entry, ": takes at most ", positional, " positional argument",
                positional == 1 ? "" : "s", " (", nargs, " given)");
  std::uint64_t given = 0;  // bit i: names[i] was given
  for (std::size_t i = 0; i < nargs; ++i) {
    out[i] = args[i];
    given |= std::uint64_t{1} << i;
  }
  const Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  for (Py_ssize_t k = 0; k < nkw; ++k) {
    PyObject* key = PyTuple_GET_ITEM(kwnames, k);
    std::size_t i = 0;
    while (i < n && names[i] != key) ++i;  // callers' literals are interned like ours
    if (i == n) {
      i = 0;
      while (i < n && PyUnicode_Compare(names[i], key) != 0) ++i;
      if (PyErr_Occurred()) PyErr_Clear();
    }
    if (i == n) throw_error(Errc::type_error, entry, ": unexpected keyword argument ", ReprOf{key});
    if (given & (std::uint64_t{1} << i))
      throw_error(Errc::type_error, entry, ": got multiple values for argument '",
                  PyUnicode_AsUTF8(names[i]), "'");
    out[i] = args[nargs + static_cast<std::size_t>(k)];
    given |= std::uint64_t{1} << i;
  }
  for (std::size_t i = 0; i < required; ++i)
    if (!(given & (std::uint64_t{1} << i)))
      throw_error(Errc::type_error, entry, ": missing required argument '",
                  PyUnicode_AsUTF8(names[i]), "'");
}

}  // namespace cai::python
