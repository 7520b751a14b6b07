// The CUDA Array Interface in Python: reading a producer's dict (the per-call hot path) and
// building ours. Only Python types are checked here; the CAI rules live in the core
// (validate_interface), so every message is written once.

#include <nanobind/stl/string.h>

#include <cstring>
#include <optional>
#include <string>

#include "array.h"
#include "cai/core/error.h"

namespace cai::python {

namespace {

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

std::string_view read_str(PyObject* o, const char* key) {
  if (!PyUnicode_Check(o)) throw_key_type_error(key, type_name_of(o), "a str");
  Py_ssize_t n = 0;
  const char* s = PyUnicode_AsUTF8AndSize(o, &n);
  if (!s) throw nb::python_error();
  return {s, static_cast<std::size_t>(n)};
}

void read_data(PyObject* o, InterfaceFields& f) {
  const char* expected = "a tuple (pointer: int, read_only: bool)";
  if (!(PyTuple_Check(o) || PyList_Check(o)) || PySequence_Fast_GET_SIZE(o) != 2)
    throw_key_type_error("data", PyTuple_Check(o) ? "a tuple of another length" : type_name_of(o),
                         expected);
  // Strong references: the pointer's __index__ may change a list holding them.
  nb::object p = nb::borrow(PySequence_Fast_GET_ITEM(o, 0));
  nb::object ro = nb::borrow(PySequence_Fast_GET_ITEM(o, 1));
  const std::uint64_t ptr = read_uint64(p, "data[0]", "an int");
  // numpy.bool_ is not an int subclass; producers written with NumPy may pass one.
  if (!PyBool_Check(ro.ptr()) && !PyLong_Check(ro.ptr())) {
    const int np_bool = PyObject_IsInstance(ro.ptr(), numpy_module().attr("bool_").ptr());
    if (np_bool < 0) PyErr_Clear();
    if (np_bool != 1)
      throw_key_type_error("data[1]", type_name_of(ro), "a bool (the read-only flag)");
  }
  // An int subclass may define __bool__, and it may raise: the array is then refused, never
  // taken as writable.
  const int read_only = call_python([&] { return PyObject_IsTrue(ro.ptr()); });
  if (read_only < 0) throw nb::python_error();
  f.has_data = true;
  f.ptr = ptr;
  f.read_only = read_only == 1;
}

// The stream state of an imported array, owned by the Python object that keeps its memory
// alive (keep_alive): the garbage collector can then see through arrays (PyArray).
View view_from_validated(Interface&& itf, nb::handle owner, bool sync,
                         std::optional<device::StreamHandle>* deferred) {
  // The producer's stream: kept as a handle when it is a default stream, else stood for by an
  // event recorded on it now (the producer may destroy it before the first use).
  const bool ordered = sync && itf.stream && config().import_sync;
  if (ordered && deferred) *deferred = *itf.stream;
  auto state = ordered && !deferred ? sync::SyncState::imported(device::backend(), *itf.stream)
                                    : std::make_shared<sync::SyncState>();
  return View(itf.ptr, std::move(itf.dtype), std::move(itf.layout), itf.readonly, std::move(state),
              keep_alive(owner));
}

}  // namespace

std::vector<DescrEntry> descr_from_python(nb::handle list, int depth) {
  if (depth > 32) throw_error(Errc::value_error, "descr: nested more than 32 levels deep");
  if (!PyList_Check(list.ptr()) && !PyTuple_Check(list.ptr()))
    throw_key_type_error("descr", type_name_of(list.ptr()),
                         "a list of (name, type[, shape]) tuples");
  std::vector<DescrEntry> out;
  for (nb::handle item : list) {
    if (!PyTuple_Check(item.ptr()) || PyTuple_GET_SIZE(item.ptr()) < 2 ||
        PyTuple_GET_SIZE(item.ptr()) > 3)
      // The type, not a repr: a repr of hostile input can itself fail (deep nesting).
      throw_key_type_error(
          "descr entry",
          PyTuple_Check(item.ptr())
              ? "a tuple of " + std::to_string(PyTuple_GET_SIZE(item.ptr())) + " items"
              : type_name_of(item.ptr()),
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
      const Dims shape =
          read_dims(PyTuple_GET_ITEM(item.ptr(), 2), "descr shape", DimsForm::argument);
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

View view_from_interface(nb::handle desc, nb::handle owner, bool sync, const char* entry, int depth,
                         std::optional<device::StreamHandle>* deferred) {
  PyObject* d = desc.ptr();
  if (!PyDict_Check(d))
    throw_error(
        Errc::type_error,
        std::string(entry) + ": __cuda_array_interface__ must be a dict, got " + type_name_of(d));
  const Keys& k = keys();
  // One pass over the dict: keys are matched by identity (producers' literal keys are interned
  // like ours), by value otherwise. Cheaper than eight hashed lookups of a six-entry dict.
  enum Slot { kShape, kTypestr, kData, kVersion, kStrides, kDescr, kMask, kStream, kSlots };
  PyObject* const slot_keys[kSlots] = {k.shape,   k.typestr, k.data, k.version,
                                       k.strides, k.descr,   k.mask, k.stream};
  // Strong references: reading one value can run Python code (__index__, a mask's
  // property) that changes the dict and would free the others (the typestr is read in place).
  nb::object value[kSlots];
  Py_ssize_t pos = 0;
  PyObject *key, *item;
  while (PyDict_Next(d, &pos, &key, &item)) {
    int slot = 0;
    while (slot < kSlots && slot_keys[slot] != key) ++slot;
    if (slot == kSlots && PyUnicode_Check(key)) {
      slot = 0;
      while (slot < kSlots && PyUnicode_Compare(slot_keys[slot], key) != 0) ++slot;
    }
    if (slot < kSlots) value[slot] = nb::borrow(item);
  }
  InterfaceFields f;
  if (PyObject* o = value[kShape].ptr()) {
    f.shape = read_dims(o, "shape", DimsForm::cai_key);
    f.has_shape = true;
  }
  if (PyObject* o = value[kTypestr].ptr()) {
    f.typestr = read_str(o, "typestr");
    f.has_typestr = true;
  }
  if (PyObject* o = value[kData].ptr()) read_data(o, f);
  if (PyObject* o = value[kVersion].ptr()) {
    f.version = read_int64(o, "version", "an int");
    f.has_version = true;
  }
  if (PyObject* o = value[kStrides].ptr()) {
    if (o == Py_None) {
      f.strides_state = Presence::none;
    } else {
      f.strides = read_dims(o, "strides", DimsForm::cai_key);
      f.strides_state = Presence::given;
    }
  }
  if (PyObject* o = value[kDescr].ptr(); o && o != Py_None) {
    f.descr = descr_from_python(o);
    f.has_descr = true;
  }
  if (PyObject* o = value[kStream].ptr()) {
    if (o == Py_None) {
      f.stream_state = Presence::none;
    } else {
      f.stream = read_int64(o, "stream", "None or an int");
      f.stream_state = Presence::given;
    }
  }
  // The mask is an object with its own interface: import it first (it must stay alive too).
  std::shared_ptr<const View> mask_view;
  std::optional<Interface> mask_itf;
  if (PyObject* o = value[kMask].ptr()) {
    if (o == Py_None) {
      f.mask_state = Presence::none;
    } else {
      if (depth >= max_mask_depth)
        throw_error(Errc::value_error, std::string(entry) + ": mask: masks nested more than " +
                                           std::to_string(max_mask_depth) +
                                           " levels deep (a cycle of masks?)");
      PyObject* mask_desc = call_python([&] { return PyObject_GetAttr(o, k.cai); });
      if (!mask_desc) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError)) throw nb::python_error();
        PyErr_Clear();
        throw_key_type_error("mask", type_name_of(o),
                             "None or an object with __cuda_array_interface__");
      }
      nb::object md = nb::steal(mask_desc);
      mask_view = std::make_shared<const View>(
          view_from_interface(md, nb::handle(o), sync, entry, depth + 1));
      mask_itf.emplace();
      mask_itf->dtype = mask_view->dtype();
      mask_itf->layout = mask_view->layout();
      mask_itf->ptr = mask_view->ptr();
      f.mask = &*mask_itf;
      f.mask_state = Presence::given;
    }
  }
  Interface itf = validate_interface(f);
  View v = view_from_validated(std::move(itf), owner, sync, deferred);
  if (mask_view) v.set_mask(std::move(mask_view));
  return v;
}

// cai.Array (python/cai/_tile.py) wraps a cai array: its view, not an export and import of
// it (which would name the legacy stream for an array imported from a foreign stream).
PyArray* tile_array(nb::handle obj) {
  static PyObject* type = [] {
    nb::object t = nb::module_::import_("cai._tile").attr("Array");
    return t.release().ptr();  // kept for the process
  }();
  if (Py_TYPE(obj.ptr()) != reinterpret_cast<PyTypeObject*>(type)) return nullptr;
  return as_py_array(nb::getattr(obj, "_data"));
}

View import_view(nb::handle obj, bool sync, const char* entry,
                 std::optional<device::StreamHandle>* deferred) {
  if (PyArray* a = as_py_array(obj, entry)) return a->view;
  if (PyArray* a = tile_array(obj)) return a->view;
  PyObject* desc = call_python([&] { return PyObject_GetAttr(obj.ptr(), keys().cai); });
  if (!desc) {
    if (!PyErr_ExceptionMatches(PyExc_AttributeError)) throw nb::python_error();
    PyErr_Clear();
    // No CAI: DLPack is the other road onto the device.
    if (has_dlpack(obj)) return import_dlpack(obj, std::nullopt, sync, entry);
    throw_error(Errc::type_error, std::string(entry) + ": " + type_name_of(obj.ptr()) +
                                      " object has no __cuda_array_interface__ (expected a GPU "
                                      "array: cai, CuPy, PyTorch, Numba, JAX, ...)");
  }
  nb::object d = nb::steal(desc);
  return view_from_interface(d, obj, sync, entry, 0, deferred);
}

namespace {

// Everything of the dict but `stream`, which can change (data without a stream adopts one),
// and `descr`, a list the consumer may mutate.
nb::dict export_fixed_part(const View& v) {
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
  if (v.mask()) {
    // The mask is exported as an object with its own interface, as the CAI requires.
    set(k.mask, wrap(*v.mask()));
  }
  // A placeholder, so that setting the real stream in a copy replaces a value: adding a key
  // to an exactly sized copy would resize it.
  set(k.stream, nb::none());
  return d;
}

nb::dict with_stream(nb::dict d, const View& v) {
  if (v.dtype().is_structured()) {
    nb::list descr = descr_to_python(v.dtype().descr());
    if (PyDict_SetItem(d.ptr(), keys().descr, descr.ptr()) != 0) throw nb::python_error();
  }
  const auto stream =
      config().export_stream ? v.sync()->export_handle(device::backend()) : std::nullopt;
  // Small ints are cached by CPython; handles are not, but cost one allocation.
  nb::object value = stream ? nb::object(nb::int_(*stream)) : nb::object(nb::none());
  if (PyDict_SetItem(d.ptr(), keys().stream, value.ptr()) != 0) throw nb::python_error();
  return d;
}

}  // namespace

nb::dict export_interface(const View& v) {
  return with_stream(export_fixed_part(v), v);
}

nb::dict export_interface(PyArray& a) {
  // The immutable entries are built once per array; each read gets its own dict (consumers
  // may mutate it), copied from them, which is a single fast dict clone.
  if (!a.cai_fixed.is_valid()) a.cai_fixed = export_fixed_part(a.view);
  nb::dict d = nb::steal<nb::dict>(PyDict_Copy(a.cai_fixed.ptr()));
  if (!d.is_valid()) throw nb::python_error();
  return with_stream(std::move(d), a.view);
}

}  // namespace cai::python
