// The CUDA Array Interface in Python: reading a producer's dict (the per-call hot path) and
// building ours. Only Python types are checked here; the CAI rules live in the core
// (validate_interface), so every message is written once.

#include <nanobind/stl/string.h>

#include <cstring>
#include <string>

#include "cai/core/error.h"
#include "python/array.h"

namespace cai::python {

namespace {

constexpr int kMaxMaskDepth = 8;

// Interned keys, created once: dict lookups with them hash nothing.
struct Keys {
  PyObject *shape, *typestr, *data, *version, *strides, *descr, *mask, *stream, *cai;
};
const Keys& keys() {
  static const Keys k = {PyUnicode_InternFromString("shape"),
                         PyUnicode_InternFromString("typestr"),
                         PyUnicode_InternFromString("data"),
                         PyUnicode_InternFromString("version"),
                         PyUnicode_InternFromString("strides"),
                         PyUnicode_InternFromString("descr"),
                         PyUnicode_InternFromString("mask"),
                         PyUnicode_InternFromString("stream"),
                         PyUnicode_InternFromString("__cuda_array_interface__")};
  return k;
}

std::string type_name(PyObject* o) {
  return Py_TYPE(o)->tp_name;
}

PyObject* get(PyObject* dict, PyObject* key) {
  PyObject* v = PyDict_GetItemWithError(dict, key);  // borrowed
  if (!v && PyErr_Occurred()) throw nb::python_error();
  return v;
}

// A Python int (or an object with __index__, such as numpy.int64) as int64; bool is refused
// because True as a dimension is a bug in the producer, not a number.
std::int64_t read_int64(PyObject* o, const char* key, const char* expected) {
  if (PyBool_Check(o)) throw_key_type_error(key, "bool", expected);
  if (PyLong_CheckExact(o) || PyLong_Check(o)) {
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (v == -1 && PyErr_Occurred()) throw nb::python_error();
    if (overflow)
      throw_error(Errc::overflow, std::string(key) + ": " + nb::repr(o).c_str() +
                                      " does not fit in a signed 64-bit integer");
    return v;
  }
  if (PyIndex_Check(o)) {
    nb::object i = nb::steal(PyNumber_Index(o));
    if (!i.is_valid()) throw nb::python_error();
    return read_int64(i.ptr(), key, expected);
  }
  throw_key_type_error(key, type_name(o), expected);
}

void read_dims(PyObject* o, const char* key, Dims& out) {
  const char* expected = "a tuple of int";
  if (!PyTuple_Check(o) && !PyList_Check(o)) throw_key_type_error(key, type_name(o), expected);
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(o);
  if (n > max_ndim)
    throw_error(Errc::value_error, std::string(key) + ": " + std::to_string(n) +
                                       " dimensions; at most " + std::to_string(max_ndim) +
                                       " are supported");
  out.resize(static_cast<std::size_t>(n));
  PyObject** items = PySequence_Fast_ITEMS(o);
  for (Py_ssize_t i = 0; i < n; ++i)
    out[static_cast<std::size_t>(i)] = read_int64(items[i], key, expected);
}

std::string_view read_str(PyObject* o, const char* key) {
  if (!PyUnicode_Check(o)) throw_key_type_error(key, type_name(o), "a str");
  Py_ssize_t n = 0;
  const char* s = PyUnicode_AsUTF8AndSize(o, &n);
  if (!s) throw nb::python_error();
  return {s, static_cast<std::size_t>(n)};
}

void read_data(PyObject* o, InterfaceFields& f) {
  const char* expected = "a tuple (pointer: int, read_only: bool)";
  if (!(PyTuple_Check(o) || PyList_Check(o)) || PySequence_Fast_GET_SIZE(o) != 2)
    throw_key_type_error("data", PyTuple_Check(o) ? "a tuple of another length" : type_name(o),
                         expected);
  PyObject* p = PySequence_Fast_GET_ITEM(o, 0);
  PyObject* ro = PySequence_Fast_GET_ITEM(o, 1);
  if (PyBool_Check(p) || !PyIndex_Check(p)) throw_key_type_error("data[0]", type_name(p), "an int");
  nb::object pi = nb::steal(PyNumber_Index(p));
  if (!pi.is_valid()) throw nb::python_error();
  const unsigned long long ptr = PyLong_AsUnsignedLongLong(pi.ptr());
  if (ptr == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
    PyErr_Clear();
    throw_error(Errc::value_error, std::string("data: pointer ") + nb::repr(p).c_str() +
                                       " is not a valid address (expected an int in [0, 2**64))");
  }
  // numpy.bool_ is not an int subclass; producers written with NumPy may pass one.
  if (!PyBool_Check(ro) && !PyLong_Check(ro)) {
    const int np_bool = PyObject_IsInstance(ro, numpy_module().attr("bool_").ptr());
    if (np_bool < 0) PyErr_Clear();
    if (np_bool != 1) throw_key_type_error("data[1]", type_name(ro), "a bool (the read-only flag)");
  }
  f.has_data = true;
  f.ptr = ptr;
  f.read_only = PyObject_IsTrue(ro) == 1;
}

}  // namespace

std::shared_ptr<const void> keep_alive(nb::handle obj) {
  if (!obj.is_valid() || obj.is_none()) return nullptr;
  Py_INCREF(obj.ptr());
  return std::shared_ptr<const void>(obj.ptr(), [](const void* p) {
    // nb::is_alive(), not Py_IsInitialized(): the latter is already false while modules are
    // torn down at exit, which leaked every imported producer (nanobind reported the leaks).
    if (!nb::is_alive()) return;
    PyGILState_STATE st = PyGILState_Ensure();
    Py_DECREF(static_cast<PyObject*>(const_cast<void*>(p)));
    PyGILState_Release(st);
  });
}

namespace {

View view_from_validated(const Interface& itf, std::shared_ptr<const void> owner, bool sync) {
  std::shared_ptr<sync::SyncState> state;
  if (sync && itf.stream && config().import_sync)
    state = std::make_shared<sync::SyncState>(sync::StreamRef{*itf.stream, nullptr});
  else
    state = std::make_shared<sync::SyncState>();
  return View(itf.ptr, itf.dtype, itf.layout, itf.readonly, std::move(state), std::move(owner));
}

}  // namespace

std::vector<DescrEntry> descr_from_python(nb::handle list, int depth) {
  if (depth > 32) throw_error(Errc::value_error, "descr: nested more than 32 levels deep");
  if (!PyList_Check(list.ptr()) && !PyTuple_Check(list.ptr()))
    throw_key_type_error("descr", type_name(list.ptr()), "a list of (name, type[, shape]) tuples");
  std::vector<DescrEntry> out;
  for (nb::handle item : list) {
    if (!PyTuple_Check(item.ptr()) || PyTuple_GET_SIZE(item.ptr()) < 2 ||
        PyTuple_GET_SIZE(item.ptr()) > 3)
      throw_key_type_error("descr entry", nb::repr(item).c_str(),
                           "a tuple (name, type) or (name, type, shape)");
    DescrEntry e;
    nb::handle name = PyTuple_GET_ITEM(item.ptr(), 0);
    // NumPy allows (title, name) pairs as a name; the name is what addresses the field.
    if (PyTuple_Check(name.ptr()) && PyTuple_GET_SIZE(name.ptr()) == 2)
      name = PyTuple_GET_ITEM(name.ptr(), 1);
    e.name = std::string(read_str(name.ptr(), "descr name"));
    nb::handle type = PyTuple_GET_ITEM(item.ptr(), 1);
    if (PyUnicode_Check(type.ptr()))
      e.typestr = std::string(read_str(type.ptr(), "descr type"));
    else
      e.fields = descr_from_python(type, depth + 1);
    if (PyTuple_GET_SIZE(item.ptr()) == 3) {
      Dims shape;
      nb::handle s = PyTuple_GET_ITEM(item.ptr(), 2);
      if (PyLong_Check(s.ptr()))
        shape = Dims{read_int64(s.ptr(), "descr shape", "an int or a tuple of int")};
      else
        read_dims(s.ptr(), "descr shape", shape);
      e.shape.assign(shape.begin(), shape.end());
    }
    out.push_back(std::move(e));
  }
  return out;
}

nb::list descr_to_python(const std::vector<DescrEntry>& descr) {
  nb::list out;
  for (const DescrEntry& e : descr) {
    nb::object type = e.fields.empty() ? nb::object(nb::str(e.typestr.c_str()))
                                       : nb::object(descr_to_python(e.fields));
    if (e.shape.empty())
      out.append(nb::make_tuple(nb::str(e.name.c_str()), type));
    else
      out.append(nb::make_tuple(nb::str(e.name.c_str()), type, to_tuple(e.shape)));
  }
  return out;
}

View view_from_interface(nb::handle desc, nb::handle owner, bool sync, const char* entry,
                         int depth) {
  PyObject* d = desc.ptr();
  if (!PyDict_Check(d))
    throw_error(
        Errc::type_error,
        std::string(entry) + ": __cuda_array_interface__ must be a dict, got " + type_name(d));
  const Keys& k = keys();
  InterfaceFields f;
  if (PyObject* o = get(d, k.shape)) {
    read_dims(o, "shape", f.shape);
    f.has_shape = true;
  }
  if (PyObject* o = get(d, k.typestr)) {
    f.typestr = read_str(o, "typestr");
    f.has_typestr = true;
  }
  if (PyObject* o = get(d, k.data)) read_data(o, f);
  if (PyObject* o = get(d, k.version)) {
    f.version = read_int64(o, "version", "an int");
    f.has_version = true;
  }
  if (PyObject* o = get(d, k.strides)) {
    if (o == Py_None) {
      f.strides_state = Presence::none;
    } else {
      read_dims(o, "strides", f.strides);
      f.strides_state = Presence::given;
    }
  }
  if (PyObject* o = get(d, k.descr); o && o != Py_None) {
    f.descr = descr_from_python(o);
    f.has_descr = true;
  }
  if (PyObject* o = get(d, k.stream)) {
    if (o == Py_None) {
      f.stream_state = Presence::none;
    } else {
      f.stream = read_int64(o, "stream", "None or an int");
      f.stream_state = Presence::given;
    }
  }
  // The mask is an object with its own interface: import it first (it must stay alive too).
  std::shared_ptr<const View> mask_view;
  Interface mask_itf;
  if (PyObject* o = get(d, k.mask)) {
    if (o == Py_None) {
      f.mask_state = Presence::none;
    } else {
      if (depth >= kMaxMaskDepth)
        throw_error(Errc::value_error, std::string(entry) + ": mask: masks nested more than " +
                                           std::to_string(kMaxMaskDepth) +
                                           " levels deep (a cycle of masks?)");
      PyObject* mask_desc = PyObject_GetAttr(o, k.cai);
      if (!mask_desc) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError)) throw nb::python_error();
        PyErr_Clear();
        throw_key_type_error("mask", type_name(o),
                             "None or an object with __cuda_array_interface__");
      }
      nb::object md = nb::steal(mask_desc);
      mask_view = std::make_shared<const View>(
          view_from_interface(md, nb::handle(o), sync, entry, depth + 1));
      mask_itf.dtype = mask_view->dtype();
      mask_itf.layout = mask_view->layout();
      mask_itf.ptr = mask_view->ptr();
      f.mask = &mask_itf;
      f.mask_state = Presence::given;
    }
  }
  const Interface itf = validate_interface(f);
  View v = view_from_validated(itf, keep_alive(owner), sync);
  if (mask_view) v.set_mask(std::move(mask_view));
  return v;
}

View import_view(nb::handle obj, bool sync, const char* entry) {
  if (PyArray* a = as_py_array(obj)) return a->view;
  PyObject* desc = PyObject_GetAttr(obj.ptr(), keys().cai);
  if (!desc) {
    if (!PyErr_ExceptionMatches(PyExc_AttributeError)) throw nb::python_error();
    PyErr_Clear();
    // No CAI: DLPack is the other road onto the device.
    if (has_dlpack(obj)) return import_dlpack(obj, std::nullopt, sync, entry);
    throw_error(Errc::type_error, std::string(entry) + ": " + type_name(obj.ptr()) +
                                      " object has no __cuda_array_interface__ (expected a GPU "
                                      "array: cai, CuPy, PyTorch, Numba, JAX, ...)");
  }
  nb::object d = nb::steal(desc);
  return view_from_interface(d, obj, sync, entry);
}

nb::dict export_interface(const View& v) {
  const Keys& k = keys();
  static PyObject* version3 = PyLong_FromLong(3);
  nb::dict d;
  PyObject* dp = d.ptr();
  auto set = [&](PyObject* key, nb::handle value) {
    if (PyDict_SetItem(dp, key, value.ptr()) != 0) throw nb::python_error();
  };
  set(k.shape, to_tuple(v.shape()));
  const DType& t = v.dtype();
  set(k.typestr, nb::str(t.str().c_str()));
  set(k.data, nb::make_tuple(nb::int_(v.ptr()), nb::bool_(v.readonly())));
  set(k.version, nb::handle(version3));
  if (v.layout().is_c_contiguous())
    set(k.strides, nb::none());
  else
    set(k.strides, to_tuple(v.strides()));
  if (t.is_structured()) set(k.descr, descr_to_python(t.descr()));
  if (v.mask()) {
    // The mask is exported as an object with its own interface, as the CAI requires.
    set(k.mask, wrap(*v.mask()));
  }
  const auto stream = config().export_stream ? v.sync()->handle() : std::nullopt;
  if (stream)
    set(k.stream, nb::int_(*stream));
  else
    set(k.stream, nb::none());
  return d;
}

}  // namespace cai::python
