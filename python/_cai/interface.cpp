// The CUDA Array Interface in Python, in both directions. Only Python types are checked here;
// the CAI rules live in the core (validate_interface), so every message is written once.
//
// The import's parse step (import.cpp has the import, top to bottom): read_interface reads the
// producer's __cuda_array_interface__ in one pass over the dict, keys matched by identity
// (collect); plain built-in values (exact ints, str, tuples of ints, None: reading them runs no
// Python code) are read in place (read_plain), anything else with strong references through
// the generic readers of convert.h (read_generic), which also write every message about a wrong
// Python type; the core validates the fields (validate_interface; a typestr is parsed once per
// distinct string, DTypeCache).
// An export (export_interface) clones a dict of the fixed entries cached per array and sets
// `stream`: the array's stream while work is pending, else None.

#include "interface.h"

#include <nanobind/stl/string.h>

#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#include "cai/core/error.h"
#include "import.h"

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

// ----- reading a dict ------------------------------------------------------------------------

enum Slot { kShape, kTypestr, kData, kVersion, kStrides, kDescr, kMask, kStream, kSlots };

// The values of the keys cai reads, borrowed from the dict.
struct Values {
  PyObject* v[kSlots] = {};
  PyObject* operator[](Slot s) const { return v[s]; }
};

// One pass over the dict: keys are matched by identity (producers' literal keys are interned
// like ours), by value otherwise. Cheaper than eight hashed lookups of a six-entry dict.
Values collect(PyObject* d) {
  const Keys& k = keys();
  PyObject* const slot_keys[kSlots] = {k.shape,   k.typestr, k.data, k.version,
                                       k.strides, k.descr,   k.mask, k.stream};
  Values out;
  Py_ssize_t pos = 0;
  PyObject *key, *item;
  while (PyDict_Next(d, &pos, &key, &item)) {
    int slot = 0;
    while (slot < kSlots && slot_keys[slot] != key) ++slot;
    if (slot == kSlots && PyUnicode_Check(key)) {
      slot = 0;
      while (slot < kSlots && PyUnicode_Compare(slot_keys[slot], key) != 0) ++slot;
    }
    if (slot < kSlots) out.v[slot] = item;
  }
  return out;
}

bool int_tuple(PyObject* o) {
  if (!PyTuple_CheckExact(o)) return false;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(o); ++i)
    if (!PyLong_CheckExact(PyTuple_GET_ITEM(o, i))) return false;
  return true;
}

// Whether every value read is a plain built-in value, which reading runs no Python code for
// (no __index__, no __bool__, no property): exact ints, str, tuples, None and bools.
bool plain(const Values& x) {
  const auto none_or = [](PyObject* o, bool (*ok)(PyObject*)) {
    return o == nullptr || o == Py_None || ok(o);
  };
  PyObject* data = x[kData];
  return (x[kShape] == nullptr || int_tuple(x[kShape])) &&
         (x[kTypestr] == nullptr || PyUnicode_CheckExact(x[kTypestr])) &&
         (data == nullptr || (PyTuple_CheckExact(data) && PyTuple_GET_SIZE(data) == 2 &&
                              PyLong_CheckExact(PyTuple_GET_ITEM(data, 0)) &&
                              PyBool_Check(PyTuple_GET_ITEM(data, 1)))) &&
         (x[kVersion] == nullptr || PyLong_CheckExact(x[kVersion])) &&
         none_or(x[kStrides], int_tuple) && (x[kDescr] == nullptr || x[kDescr] == Py_None) &&
         (x[kMask] == nullptr || x[kMask] == Py_None) &&
         none_or(x[kStream], [](PyObject* o) { return PyLong_CheckExact(o) != 0; });
}

bool read_int(PyObject* o, std::int64_t& out) {
  int overflow = 0;
  out = PyLong_AsLongLongAndOverflow(o, &overflow);
  return overflow == 0;
}

bool read_int_tuple(PyObject* t, Dims& out) {
  const Py_ssize_t n = PyTuple_GET_SIZE(t);
  if (n > max_ndim) return false;
  std::int64_t values[max_ndim];
  for (Py_ssize_t i = 0; i < n; ++i)
    if (!read_int(PyTuple_GET_ITEM(t, i), values[i])) return false;
  out.assign(std::span<const std::int64_t>(values, static_cast<std::size_t>(n)));
  return true;
}

// Reads plain values in place. False when one needs the generic reader (an int out of range,
// a str that is no UTF-8), which then says what is wrong.
bool read_plain(const Values& x, InterfaceFields& f) {
  if (PyObject* o = x[kShape]) {
    if (!read_int_tuple(o, f.shape)) return false;
    f.has_shape = true;
  }
  if (PyObject* o = x[kTypestr]) {
    Py_ssize_t n = 0;
    const char* s = PyUnicode_AsUTF8AndSize(o, &n);
    if (!s) {
      PyErr_Clear();
      return false;
    }
    f.typestr = {s, static_cast<std::size_t>(n)};
    f.has_typestr = true;
  }
  if (PyObject* o = x[kData]) {
    // unsigned long is 64 bits here, and its reader is much faster than the long long one.
    static_assert(sizeof(unsigned long) == sizeof(std::uint64_t));
    f.ptr = PyLong_AsUnsignedLong(PyTuple_GET_ITEM(o, 0));
    if (f.ptr == static_cast<unsigned long>(-1) && PyErr_Occurred()) {
      PyErr_Clear();
      return false;
    }
    f.read_only = PyTuple_GET_ITEM(o, 1) == Py_True;
    f.has_data = true;
  }
  if (PyObject* o = x[kVersion]) {
    if (!read_int(o, f.version)) return false;
    f.has_version = true;
  }
  if (PyObject* o = x[kStrides]) {
    f.strides_state = o == Py_None ? Presence::none : Presence::given;
    if (o != Py_None && !read_int_tuple(o, f.strides)) return false;
  }
  if (x[kMask] == Py_None) f.mask_state = Presence::none;
  if (PyObject* o = x[kStream]) {
    f.stream_state = o == Py_None ? Presence::none : Presence::given;
    if (o != Py_None && !read_int(o, f.stream)) return false;
  }
  return true;
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

// Reads any values under the integer policy of convert.h, from `held`: strong references,
// because reading one can run Python code (__index__, __bool__) that changes the dict and
// would free the others. The mask is read by the caller.
void read_generic(const nb::object (&held)[kSlots], InterfaceFields& f) {
  if (PyObject* o = held[kShape].ptr()) {
    f.shape = read_dims(o, "shape", DimsForm::cai_key);
    f.has_shape = true;
  }
  if (PyObject* o = held[kTypestr].ptr()) {
    f.typestr = read_str(o, "typestr");
    f.has_typestr = true;
  }
  if (PyObject* o = held[kData].ptr()) read_data(o, f);
  if (PyObject* o = held[kVersion].ptr()) {
    f.version = read_int64(o, "version", "an int");
    f.has_version = true;
  }
  if (PyObject* o = held[kStrides].ptr()) {
    if (o == Py_None) {
      f.strides_state = Presence::none;
    } else {
      f.strides = read_dims(o, "strides", DimsForm::cai_key);
      f.strides_state = Presence::given;
    }
  }
  if (PyObject* o = held[kDescr].ptr(); o && o != Py_None) {
    f.descr = descr_from_python(o);
    f.has_descr = true;
  }
  if (PyObject* o = held[kStream].ptr()) {
    if (o == Py_None) {
      f.stream_state = Presence::none;
    } else {
      f.stream = read_int64(o, "stream", "None or an int");
      f.stream_state = Presence::given;
    }
  }
}

// Typestrs parsed before, by the str object (producers pass the same, often interned, str each
// time) and else by its text. Valid with the GIL held; entries are replaced round-robin.
class DTypeCache {
 public:
  const DType* find(PyObject* key, std::string_view text) const noexcept {
    for (const Entry& e : entries_)
      if (e.key == key) return &e.dtype;
    for (const Entry& e : entries_)
      if (e.key && e.text == text) return &e.dtype;
    return nullptr;
  }
  void add(PyObject* key, std::string_view text, const DType& dtype) {
    if (text.size() > sizeof(Entry::text_buf)) return;
    Entry& e = entries_[next_++ % kEntries];
    Py_XDECREF(e.key);  // a str: its deallocation runs no Python code
    e.key = Py_NewRef(key);
    std::memcpy(e.text_buf, text.data(), text.size());
    e.text = {e.text_buf, text.size()};
    e.dtype = dtype;
  }

 private:
  static constexpr std::size_t kEntries = 8;
  struct Entry {
    PyObject* key = nullptr;
    char text_buf[16] = {};
    std::string_view text;
    DType dtype;
  };
  Entry entries_[kEntries];
  std::size_t next_ = 0;
};
DTypeCache& dtype_cache() {
  static auto* cache = new DTypeCache;  // leaked: its entries hold Python strings
  return *cache;
}

// The core's validation, a typestr seen before not parsed again (the descr, if any, is still
// checked against it).
Interface validate(InterfaceFields& f, PyObject* typestr) {
  DTypeCache& cache = dtype_cache();
  const DType* known = f.has_typestr ? cache.find(typestr, f.typestr) : nullptr;
  f.dtype = known;
  Interface itf = validate_interface(f);
  if (!known && f.has_typestr && !f.has_descr && PyUnicode_CheckExact(typestr))
    cache.add(typestr, f.typestr, itf.dtype);
  return itf;
}

// Any dict: strong references to its values, the generic readers and their messages, and the
// mask, imported first into `mask` (it must stay alive too).
Interface read_any(const Values& x, bool sync, const char* entry, int depth,
                   std::shared_ptr<const View>* mask) {
  nb::object held[kSlots];
  for (int s = 0; s < kSlots; ++s) held[s] = nb::borrow(x.v[s]);
  InterfaceFields f;
  read_generic(held, f);
  std::optional<Interface> mask_itf;
  if (PyObject* o = held[kMask].ptr()) {
    if (o == Py_None) {
      f.mask_state = Presence::none;
    } else {
      if (depth >= max_mask_depth)
        throw_error(Errc::value_error, std::string(entry) + ": mask: masks nested more than " +
                                           std::to_string(max_mask_depth) +
                                           " levels deep (a cycle of masks?)");
      PyObject* mask_desc = call_python([&] { return PyObject_GetAttr(o, keys().cai); });
      if (!mask_desc) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError)) throw nb::python_error();
        PyErr_Clear();
        throw_key_type_error("mask", type_name_of(o),
                             "None or an object with __cuda_array_interface__");
      }
      nb::object md = nb::steal(mask_desc);
      std::shared_ptr<const View> its_mask;
      Interface m = read_interface(md, sync, entry, depth + 1, &its_mask);
      *mask = std::make_shared<const View>(
          resolved_view(std::move(m), std::move(its_mask), nb::handle(o), sync));
      mask_itf.emplace();
      mask_itf->dtype = (*mask)->dtype();
      mask_itf->layout = (*mask)->layout();
      mask_itf->ptr = (*mask)->ptr();
      f.mask = &*mask_itf;
      f.mask_state = Presence::given;
    }
  }
  return validate(f, held[kTypestr].ptr());
}

}  // namespace

Interface read_interface(nb::handle desc, bool sync, const char* entry, int depth,
                         std::shared_ptr<const View>* mask) {
  PyObject* d = desc.ptr();
  if (!PyDict_Check(d))
    throw_error(
        Errc::type_error,
        std::string(entry) + ": __cuda_array_interface__ must be a dict, got " + type_name_of(d));
  const Values x = collect(d);
  if (plain(x)) {
    InterfaceFields f;
    if (read_plain(x, f)) return validate(f, x[kTypestr]);
  }
  return read_any(x, sync, entry, depth, mask);
}

// ----- descr ---------------------------------------------------------------------------------

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

// ----- export --------------------------------------------------------------------------------

namespace {

// Everything of the dict but `stream`, which can change, and `descr`, a list the consumer may
// mutate.
nb::dict export_fixed_part(std::uint64_t ptr, const DType& t, const Layout& layout, bool readonly,
                           const View* mask) {
  const Keys& k = keys();
  static PyObject* version3 = PyLong_FromLong(3);
  nb::dict d;
  PyObject* dp = d.ptr();
  auto set = [&](PyObject* key, nb::handle value) {
    if (PyDict_SetItem(dp, key, value.ptr()) != 0) throw nb::python_error();
  };
  set(k.shape, to_tuple(layout.shape()));
  set(k.typestr, nb::str(t.str().c_str()));
  set(k.data, nb::make_tuple(nb::int_(ptr), nb::bool_(readonly)));
  set(k.version, nb::handle(version3));
  if (layout.is_c_contiguous())
    set(k.strides, nb::none());
  else
    set(k.strides, to_tuple(layout.strides()));
  // The mask is exported as an object with its own interface, as the CAI requires.
  if (mask) set(k.mask, wrap(*mask));
  // A placeholder, so that setting the real stream in a copy replaces a value: adding a key
  // to an exactly sized copy would resize it.
  set(k.stream, nb::none());
  return d;
}

nb::dict with_stream(nb::dict d, const DType& t, std::optional<device::StreamHandle> stream) {
  if (t.is_structured()) {
    nb::list descr = descr_to_python(t.descr());
    if (PyDict_SetItem(d.ptr(), keys().descr, descr.ptr()) != 0) throw nb::python_error();
  }
  if (!stream) return d;  // the placeholder None stays
  // Small ints are cached by CPython; handles are not, but cost one allocation.
  nb::object value = nb::int_(*stream);
  if (PyDict_SetItem(d.ptr(), keys().stream, value.ptr()) != 0) throw nb::python_error();
  return d;
}

}  // namespace

nb::dict export_interface(const View& v) {
  const auto stream =
      config().export_stream ? v.sync()->export_handle(device::backend()) : std::nullopt;
  return with_stream(
      export_fixed_part(v.ptr(), v.dtype(), v.layout(), v.readonly(), v.mask().get()), v.dtype(),
      stream);
}

nb::dict export_interface(PyArray& a) {
  // The immutable entries are built once per array; each read gets its own dict (consumers
  // may mutate it), copied from them, which is a single fast dict clone.
  if (!a.cai_fixed.is_valid()) {
    const View* mask = a.masked() ? a.view().mask().get() : nullptr;
    a.cai_fixed = export_fixed_part(a.ptr(), a.dtype(), a.layout(), a.readonly(), mask);
  }
  nb::dict d = nb::steal<nb::dict>(PyDict_Copy(a.cai_fixed.ptr()));
  if (!d.is_valid()) throw nb::python_error();
  if (!a.readonly()) note_write();  // the reader may write
  return with_stream(std::move(d), a.dtype(),
                     config().export_stream ? a.export_stream() : std::nullopt);
}

void bind_interface(nb::module_& m) {
  auto cls = nb::borrow<nb::class_<PyArray>>(m.attr("DeviceNDArray"));
  cls.def_prop_ro("__cuda_array_interface__",
                  exit_safe([](PyArray& a) { return export_interface(a); }));
}

}  // namespace cai::python
