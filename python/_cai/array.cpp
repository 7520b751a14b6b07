// cai.DeviceNDArray: the array object, its NumPy dtype, its host copies, and the functions that
// make new arrays (device_array, managed_array, mapped_array, device_array_like, to_device).

#include "array.h"

#include <nanobind/stl/string.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bindings.h"
#include "cai/arrays/devices.h"
#include "cai/arrays/dlpack.h"
#include "cai/arrays/ops.h"
#include "cai/core/error.h"
#include "import.h"
#include "interface.h"
#include "streams.h"

namespace cai::python {

namespace {

nb::handle g_array_type;

// The same View, with an owner of its own where a Python object keeps the memory (or the
// mask's memory) alive: a new array is then the only holder of that owner, so the garbage
// collector can see through it (PyArray).
// (Owners compare by control block: two owners of one object point to the same place.)
bool same_owner(const std::shared_ptr<const void>& a, const std::shared_ptr<const void>& b) {
  return !a.owner_before(b) && !b.owner_before(a);
}

View with_own_python_owner(View v) {
  std::shared_ptr<const View> mask = v.mask();
  if (mask) {
    View own_mask = with_own_python_owner(*mask);
    if (!same_owner(own_mask.owner(), mask->owner()))
      mask = std::make_shared<const View>(std::move(own_mask));
  }
  PyObject* o = kept_object(v.owner());
  const bool new_owner = o && v.owner().use_count() > 1;
  if (!new_owner && mask == v.mask()) return v;  // the usual case: an import, moved through
  View out(v.ptr(), v.dtype(), v.layout(), v.readonly(), v.sync(),
           new_owner ? keep_alive(o) : v.owner());
  out.set_mask(std::move(mask));
  return out;
}

// Visits what the GC must see through `v`: the Python owners only `v` holds.
int visit_owners(const View& v, visitproc visit, void* arg) {
  if (const auto& m = v.mask(); m && m.use_count() == 1)
    if (int r = visit_owners(*m, visit, arg)) return r;
  if (v.owner().use_count() == 1) Py_VISIT(kept_object(v.owner()));
  return 0;
}

int array_traverse(PyObject* self, visitproc visit, void* arg) {
  Py_VISIT(Py_TYPE(self));
  if (!nb::inst_ready(self)) return 0;  // between allocation and construction
  return nb::inst_ptr<PyArray>(self)->traverse(visit, arg);
}

int array_clear(PyObject* self) {
  // A cycle is being broken: the array goes. Later use of the instance is a TypeError
  // (as_py_array), as for an instance made by DeviceNDArray.__new__.
  if (nb::inst_ready(self)) nb::inst_destruct(self);
  return 0;
}

// DeviceNDArray.__new__ would make an instance that holds no array.
PyObject* array_new(PyTypeObject*, PyObject*, PyObject*) {
  PyErr_SetString(PyExc_TypeError,
                  "cai.DeviceNDArray cannot be created directly; make arrays with "
                  "cai.device_array(), cai.to_device() or cai.as_cuda_array()");
  return nullptr;
}

PyType_Slot g_array_slots[] = {{Py_tp_traverse, (void*)array_traverse},
                               {Py_tp_clear, (void*)array_clear},
                               {Py_tp_new, (void*)array_new},
                               {0, nullptr}};

}  // namespace

// ----- import owners ------------------------------------------------------------------------

template <class Managed>
void release_with_gil(Managed* t) noexcept {
  if (!t->deleter || !nb::is_alive()) return;
  if (PyGILState_Check()) {  // the usual case: released from Python code
    t->deleter(t);
    return;
  }
  WithGil gil;
  t->deleter(t);
}
template void release_with_gil(DLManagedTensorVersioned*) noexcept;
template void release_with_gil(DLManagedTensor*) noexcept;

ImportOwner ImportOwner::python(nb::handle producer) {
  if (!producer.is_valid() || producer.is_none()) return {};
  return {Py_NewRef(producer.ptr()), Kind::python};
}
ImportOwner ImportOwner::tensor(DLManagedTensorVersioned* t) noexcept {
  return {t, Kind::versioned};
}
ImportOwner ImportOwner::tensor(DLManagedTensor* t) noexcept {
  return {t, Kind::legacy};
}

ImportOwner& ImportOwner::operator=(ImportOwner&& o) noexcept {
  if (this != &o) {
    reset();
    p_ = std::exchange(o.p_, nullptr);
    kind_ = o.kind_;
  }
  return *this;
}

void ImportOwner::reset() noexcept {
  // A member of a DeviceNDArray, released with the GIL held (its deallocation, or a cleared
  // cycle): the deleters run as they are; after shutdown everything is leaked.
  void* p = std::exchange(p_, nullptr);
  if (!p || !nb::is_alive()) return;
  switch (kind_) {
    case Kind::python:
      Py_DECREF(static_cast<PyObject*>(p));
      break;
    case Kind::versioned:
      if (auto* t = static_cast<DLManagedTensorVersioned*>(p); t->deleter) t->deleter(t);
      break;
    case Kind::legacy:
      if (auto* t = static_cast<DLManagedTensor*>(p); t->deleter) t->deleter(t);
      break;
    case Kind::none:
      break;
  }
}

std::shared_ptr<const void> ImportOwner::share() {
  void* p = std::exchange(p_, nullptr);
  if (!p) return nullptr;
  switch (kind_) {
    case Kind::python: {
      auto owner = keep_alive(nb::handle(static_cast<PyObject*>(p)));
      Py_DECREF(static_cast<PyObject*>(p));  // keep_alive holds its own reference
      return owner;
    }
    case Kind::versioned:
      return std::shared_ptr<const void>(p, [](const void* t) {
        release_with_gil(static_cast<DLManagedTensorVersioned*>(const_cast<void*>(t)));
      });
    case Kind::legacy:
      return std::shared_ptr<const void>(p, [](const void* t) {
        release_with_gil(static_cast<DLManagedTensor*>(const_cast<void*>(t)));
      });
    case Kind::none:
      break;
  }
  return nullptr;
}

// ----- the array -----------------------------------------------------------------------------

PyArray::PyArray(View view, nb::object dtype)
    : np_dtype(std::move(dtype)),
      import_{view.ptr(), view.readonly(), view.layout(), view.dtype()},
      view_(with_own_python_owner(std::move(view))) {}

PyArray::PyArray(std::uint64_t ptr, bool readonly, Layout&& layout, DType&& dtype,
                 ImportStream&& stream, ImportOwner&& owner)
    : import_{ptr, readonly, std::move(layout), std::move(dtype), std::move(stream)},
      owner_(std::move(owner)) {
  // An import event is part of a stream state: the View holds it from the start.
  if (import_.stream.by_event()) view();
}

const View& PyArray::view() {
  if (!view_) view_.emplace(import_.view(owner_.share()));
  return *view_;
}

bool PyArray::has_work() const noexcept {
  return view_ ? view_->sync()->pending() : import_.stream.named().handle != 0;
}

std::optional<device::StreamHandle> PyArray::export_stream() {
  // An import never used since: its producer's default stream, when this thread can name it.
  const sync::StreamRef& s = import_.stream.named();
  if (!view_ && !s.other_thread()) return s.handle != 0 ? std::optional(s.handle) : std::nullopt;
  return view().sync()->export_handle(device::backend());
}

std::optional<sync::StreamRef> PyArray::stream() const {
  const sync::StreamRef& s = import_.stream.named();
  if (!view_) return s.handle != 0 ? std::optional(s) : std::nullopt;
  return view_->sync()->stream();
}

std::optional<device::StreamHandle> PyArray::stream_handle() const {
  const sync::StreamRef& s = import_.stream.named();
  if (!view_) return s.handle != 0 ? std::optional(s.handle) : std::nullopt;
  return view_->sync()->stream_handle();
}

const DLDevice& PyArray::device() {
  if (!device_) device_ = dlpack_device(view());
  return *device_;
}

const PyArray::CType& PyArray::c_type() {
  if (c_type_) return *c_type_;
  // One per distinct dtype, kept for the process (with the GIL): arrays of the same dtype,
  // imported again and again, build nothing.
  static auto* known = new std::vector<std::pair<DType, std::unique_ptr<const CType>>>;
  for (const auto& [t, c] : *known)
    if (t == import_.dtype) return *(c_type_ = c.get());
  auto c = std::make_unique<CType>();
  if (import_.dtype.is_native() && !import_.dtype.is_structured()) {
    try {
      c->dtype = import_.dtype.to_dlpack();
    } catch (const Error&) {
      // No DLPack type (strings, datetimes): lanes 0 says so; the typestr names it.
    }
  }
  const std::string s = import_.dtype.str();
  const std::size_t n = std::min(s.size(), sizeof c->typestr - 1);
  std::memcpy(c->typestr, s.data(), n);
  c_type_ = c.get();
  known->emplace_back(import_.dtype, std::move(c));
  return *c_type_;
}

int PyArray::traverse(visitproc visit, void* arg) const {
  Py_VISIT(np_dtype.ptr());
  Py_VISIT(cai_fixed.ptr());
  Py_VISIT(dl_device.ptr());
  Py_VISIT(owner_.python_object());
  return view_ ? visit_owners(*view_, visit, arg) : 0;
}

PyArray::~PyArray() {
  if (!view_) return;  // an import: its producer goes as usual
  const auto& owner = view_->owner();
  if (owner.use_count() != 1 || kept_object(owner) || device::exiting() || py_finalizing())
    return;  // nothing is freed here, or nothing waits: the members go as usual
  // The free waits only while work is queued on the array's stream (every stream that touched
  // the memory is ordered before it: docs/architecture.md). Only then is the GIL released:
  // releasing it for every free would make a deleter that needs it take it back.
  bool busy = false;
  try {
    busy = view_->sync()->busy(device::backend());
  } catch (const std::exception&) {
    busy = false;  // not a stream the backend knows: nothing of ours is queued on it
  }
  if (!busy) return;
  std::shared_ptr<const void> last = owner;
  view_.reset();  // with the GIL: the Python owners of the stream and the mask
  NoGil nogil;    // the free waits for the streams still using the memory
  last.reset();
}

namespace {

// A new instance of DeviceNDArray, constructed in place: no temporary PyArray to move from.
template <class... A>
nb::object new_array(A&&... args) {
  nb::object obj = nb::inst_alloc(g_array_type);
  new (nb::inst_ptr<PyArray>(obj)) PyArray(std::forward<A>(args)...);
  nb::inst_mark_ready(obj);
  return obj;
}

}  // namespace

nb::object wrap(View view, nb::object np_dtype) {
  return new_array(std::move(view), std::move(np_dtype));
}

nb::object wrap_import(std::uint64_t ptr, bool readonly, Layout&& layout, DType&& dtype,
                       ImportStream&& stream, ImportOwner&& owner) {
  return new_array(ptr, readonly, std::move(layout), std::move(dtype), std::move(stream),
                   std::move(owner));
}

PyArray* as_py_array(nb::handle obj, const char* entry) {
  if (Py_TYPE(obj.ptr()) != (PyTypeObject*)g_array_type.ptr() || !g_array_type.is_valid())
    return nullptr;
  if (!nb::inst_ready(obj))
    throw_error(Errc::type_error, entry,
                ": this DeviceNDArray holds no array (made by DeviceNDArray.__new__, or cleared "
                "by the garbage collector); make arrays with cai.device_array(), "
                "cai.to_device() or cai.as_cuda_array()");
  return nb::inst_ptr<PyArray>(obj);
}

// ----- dtypes --------------------------------------------------------------------------------

namespace {

// The ml_dtypes module, imported on first need (never when no array of its types is made), or
// None when it is not installed.
nb::handle ml_dtypes_module() {
  static PyObject* mod = nullptr;
  return kept_for_process(mod, []() -> nb::object {
    PyObject* m = PyImport_ImportModule("ml_dtypes");
    if (m) return nb::steal(m);
    if (!PyErr_ExceptionMatches(PyExc_ImportError)) throw nb::python_error();
    PyErr_Clear();
    return nb::none();
  });
}

// The Extended format of an ml_dtypes dtype (bfloat16, float8_e4m3fn, ...: NumPy reads them
// as 'V2', 'V1' or even '<f1', which would lose or refuse the type), or nullopt.
std::optional<DType> extended_from_numpy(nb::handle dt) {
  const auto itemsize = nb::cast<std::int64_t>(dt.attr("itemsize"));
  if (itemsize > 2) return std::nullopt;
  nb::object module = nb::getattr(dt.attr("type"), "__module__", nb::none());
  if (!PyUnicode_Check(module.ptr()) || nb::cast<std::string>(module) != "ml_dtypes")
    return std::nullopt;
  return DType::from_extended_name(nb::cast<std::string>(dt.attr("name")));
}

}  // namespace

DType dtype_from_numpy(nb::handle dtype_like, const char* entry) {
  nb::object dt = numpy_module().attr("dtype")(dtype_like);
  if (auto extended = extended_from_numpy(dt)) return *extended;
  if (nb::cast<bool>(dt.attr("hasobject")))
    throw_error(Errc::type_error, std::string(entry) + ": dtype " + nb::repr(dt).c_str() +
                                      " holds Python objects, which cannot live in device memory");
  if (!dt.attr("fields").is_none()) return DType::from_descr(descr_from_python(dt.attr("descr")));
  return DType::from_typestr(nb::cast<std::string>(dt.attr("str")));
}

nb::object numpy_dtype(const DType& t) {
  if (t.extended() != Extended::none) {
    // ml_dtypes' type when it is installed; else NumPy's opaque 'V2' / 'V1'.
    nb::handle ml = ml_dtypes_module();
    const std::string name(t.extended_name());
    if (!ml.is_none() && nb::hasattr(ml, name.c_str()))
      return numpy_module().attr("dtype")(ml.attr(name.c_str()));
  }
  if (!t.is_structured()) return numpy_module().attr("dtype")(nb::str(t.str().c_str()));
  // From names, formats and offsets: np.dtype(descr) would turn the ('', '|Vn') padding
  // entries of a descr into fields named f<i>, a different dtype.
  nb::list names, formats, offsets;
  for (const Field& f : t.fields()) {
    names.append(nb::str(f.name.c_str()));
    nb::object type = numpy_dtype(f.type);
    formats.append(f.shape.empty() ? type : nb::object(nb::make_tuple(type, to_tuple(f.shape))));
    offsets.append(f.offset);
  }
  nb::dict spec;
  spec["names"] = names;
  spec["formats"] = formats;
  spec["offsets"] = offsets;
  spec["itemsize"] = t.itemsize();
  return numpy_module().attr("dtype")(spec);
}

nb::object array_dtype(PyArray& a) {
  if (!a.np_dtype.is_valid()) a.np_dtype = numpy_dtype(a.dtype());
  return a.np_dtype;
}

// ----- host copies ---------------------------------------------------------------------------

namespace {

const void* buffer_ptr(nb::handle arr) {
  return reinterpret_cast<const void*>(nb::cast<std::uintptr_t>(arr.attr("ctypes").attr("data")));
}

// Numba's rule: stream=0 (the default) copies synchronously; a stream queues the copy, which
// returns at once when the host memory is page-locked. 0 is read under the integer policy
// (np.int64(0) and np.array(0) are 0 too); the caller read `stream` with stream_arg first.
bool blocking_stream(nb::handle stream) {
  if (stream.is_none()) return true;
  if (PyStream * s; nb::try_cast<PyStream*>(stream, s) && s) return false;
  return is_integer(stream) && read_uint64(stream, "stream", "an int") == 0;
}

// The values of v (not its mask) in a NumPy array: a new one, or `ary`; waits for the copy
// unless !blocking and the target is page-locked and contiguous (the copy is then queued).
nb::object data_to_host(const View& v, nb::handle dt, nb::handle ary, const sync::StreamRef& s,
                        bool blocking) {
  nb::object target;
  if (ary.is_none()) {
    // NumPy stores no item size 0 ('S0' becomes 'S1'): zeros, since no byte is copied then.
    target =
        numpy_module().attr(v.layout().nbytes() == 0 ? "zeros" : "empty")(to_tuple(v.shape()), dt);
  } else {
    target = nb::borrow(ary);
    if (!nb::cast<bool>(
            numpy_module().attr("array_equal")(target.attr("shape"), to_tuple(v.shape()))))
      throw_error(Errc::value_error, "copy_to_host(): ary has shape " +
                                         std::string(nb::repr(target.attr("shape")).c_str()) +
                                         " but the array has shape " + format_dims(v.shape()));
    if (!target.attr("dtype").equal(dt))
      throw_error(Errc::type_error, "copy_to_host(): ary has dtype " +
                                        std::string(nb::repr(target.attr("dtype")).c_str()) +
                                        " but the array has dtype " + v.dtype().display_name());
    if (!nb::cast<bool>(target.attr("flags").attr("writeable")))
      throw_error(Errc::value_error, "copy_to_host(): ary is read-only");
  }
  const bool contiguous = nb::cast<bool>(target.attr("flags").attr("c_contiguous"));
  nb::object staging = contiguous ? target : numpy_module().attr("empty")(to_tuple(v.shape()), dt);
  {
    void* host = const_cast<void*>(buffer_ptr(staging));
    NoGil nogil;
    // A staging array is read back right below: that copy must be done.
    copy_to_host(host, v, s, blocking || !contiguous);
  }
  if (!contiguous) target.attr("__setitem__")(nb::ellipsis(), staging);
  return target;
}

// A masked array reaches the host with its mask, as a numpy.ma.MaskedArray (docs/python.md).
// NumPy's mask marks the elements that are NOT valid; the CAI's, those that are.
nb::object masked_to_host(const View& v, nb::handle dt, nb::handle ary, const sync::StreamRef& s,
                          bool blocking) {
  nb::object ma = numpy_module().attr("ma");
  if (!ary.is_none()) {
    if (!nb::isinstance(ary, ma.attr("MaskedArray")))
      throw_error(Errc::type_error,
                  "copy_to_host(): the array is masked, so ary must be a numpy.ma.MaskedArray "
                  "(a plain ndarray cannot carry the mask), got " +
                      type_name_of(ary));
    if (nb::cast<bool>(ary.attr("hardmask")))
      throw_error(Errc::value_error,
                  "copy_to_host(): ary has a hard mask, which can only grow and so cannot take "
                  "the array's mask; call ary.soften_mask() first");
  }
  const View& mask = *v.mask();
  // The mask's values are read here: that copy waits.
  nb::object valid = data_to_host(mask, numpy_dtype(mask.dtype()), nb::none(), s, true);
  nb::object invalid = numpy_module().attr("logical_not")(valid);
  if (ary.is_none()) {
    nb::object data = data_to_host(v, dt, nb::none(), s, blocking);
    return ma.attr("MaskedArray")(data, nb::arg("mask") = invalid);
  }
  data_to_host(v, dt, ary.attr("data"), s, blocking);  // ary's data, seen as a plain ndarray
  nb::setattr(ary, "mask", invalid);
  return nb::borrow(ary);
}

nb::object copy_to_host_impl(PyArray& self, nb::handle ary, nb::handle stream) {
  const View& v = self.view();
  const auto s = stream_arg(stream, "copy_to_host()", stream_or_default(v));
  const bool blocking = blocking_stream(stream);
  if (v.mask()) return masked_to_host(v, array_dtype(self), ary, s, blocking);
  return data_to_host(v, array_dtype(self), ary, s, blocking);
}

// NumPy's __array__ protocol: a host copy, as Numba's DeviceNDArray gives (docs/python.md).
// Memory the host reaches at the array's own address (managed, pinned or mapped): NumPy views
// it, once the work queued on it is done; the NumPy array keeps the cai array alive.
nb::object host_view(PyArray& self) {
  const View& v = self.view();
  {
    const DeviceGuard on(device_of(v));
    NoGil nogil;
    v.sync()->synchronize(device::backend());
  }
  nb::dict iface;
  iface["version"] = 3;
  iface["shape"] = to_tuple(v.shape());
  iface["typestr"] = nb::str(v.dtype().str().c_str());
  if (v.dtype().is_structured()) iface["descr"] = descr_to_python(v.dtype().descr());
  iface["data"] = nb::make_tuple(nb::int_(v.ptr()), nb::bool_(v.readonly()));
  iface["strides"] =
      v.layout().is_c_contiguous() ? nb::object(nb::none()) : nb::object(to_tuple(v.strides()));
  return nb::module_::import_("cai._host")
      .attr("host_view")(nb::find(&self), iface, array_dtype(self));
}

bool host_reachable(const View& v) {
  if (v.ptr() == 0) return false;
  const device::MemoryKind k = device::backend().pointer_info(v.ptr()).kind;
  return k == device::MemoryKind::managed || k == device::MemoryKind::pinned_host;
}

nb::object array_protocol(PyArray& self, nb::handle dtype, nb::handle copy) {
  if (self.masked())
    throw_error(Errc::not_implemented,
                "__array__(): the array is masked and a NumPy array cannot carry the mask; "
                "copy_to_host() gives a numpy.ma.MaskedArray");
  if (copy.ptr() != Py_True && host_reachable(self.view())) {
    nb::object view = host_view(self);
    if (dtype.is_none()) return view;
    return view.attr("astype")(dtype, nb::arg("copy") = false);
  }
  if (copy.ptr() == Py_False)
    throw_error(Errc::value_error,
                "__array__(): copy=False, but device memory reaches the host only as a copy "
                "(managed_array and mapped_array are viewed in place)");
  nb::object host = copy_to_host_impl(self, nb::none(), nb::int_(0));
  if (dtype.is_none()) return host;
  return host.attr("astype")(dtype, nb::arg("copy") = false);
}

// bool(a), as NumPy and CuPy: the element's truth for one element, an error otherwise.
bool truth(PyArray& self) {
  if (self.masked())
    throw_error(Errc::not_implemented,
                "bool(): the array is masked and a truth value cannot carry the mask; "
                "copy_to_host() gives a numpy.ma.MaskedArray");
  const std::int64_t size = self.layout().size();
  if (size != 1)
    throw_error(Errc::value_error,
                size == 0
                    ? "The truth value of an empty array is ambiguous. Use a.size > 0 to check "
                      "that an array is not empty."
                    : "The truth value of an array with more than one element is ambiguous. Copy "
                      "it to the host (copy_to_host()) and use a.any() or a.all()");
  nb::object host = copy_to_host_impl(self, nb::none(), nb::int_(0));
  const int t = PyObject_IsTrue(host.ptr());
  if (t < 0) throw nb::python_error();
  return t == 1;
}

}  // namespace

bool is_gpu_array(nb::handle value) {
  if (as_py_array(value) || nb::hasattr(value, "__cuda_array_interface__")) return true;
  if (!nb::hasattr(value, "__dlpack__") || !nb::hasattr(value, "__dlpack_device__")) return false;
  nb::object dev = value.attr("__dlpack_device__")();
  const int type = nb::cast<int>(dev[0]);
  return type == kDLCUDA || type == kDLCUDAHost || type == kDLCUDAManaged;
}

namespace {

// Whether `host` (the contiguous array a copy reads) is memory of the caller's NumPy array
// `value`, rather than a temporary cai made (a conversion, a contiguous copy). A queued copy
// from a temporary would read it after it is freed (its pages may be locked by cai.pinned),
// so only the caller's own memory is copied without waiting. Live arrays never overlap, so
// NumPy's bounds check tells them apart.
bool is_callers_memory(nb::handle host, nb::handle value) {
  if (host.is(value)) return true;
  nb::handle np = numpy_module();
  return nb::isinstance(value, np.attr("ndarray")) &&
         nb::cast<bool>(np.attr("may_share_memory")(host, value));
}

// Where in `value` (itself, or an item of its nested lists and tuples, as NumPy reads them)
// a numpy.ma.MaskedArray or numpy.ma.masked is: "" for `value` itself, "[i][j]" for an item.
std::optional<std::string> find_host_mask(nb::handle value, PyTypeObject* masked, int depth) {
  if (PyObject_TypeCheck(value.ptr(), masked)) return std::string();
  if (depth > max_ndim || (!PyList_Check(value.ptr()) && !PyTuple_Check(value.ptr())))
    return std::nullopt;
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(value.ptr());
  for (Py_ssize_t i = 0; i < n; ++i) {
    nb::handle item(PySequence_Fast_GET_ITEM(value.ptr(), i));
    if (auto at = find_host_mask(item, masked, depth + 1))
      return "[" + std::to_string(i) + "]" + *at;
  }
  return std::nullopt;
}

}  // namespace

void refuse_host_mask(nb::handle value, const char* entry) {
  // numpy.ma is imported on first use (by NumPy's module __getattr__).
  static PyObject* masked = nullptr;
  kept_for_process(masked, [] { return numpy_module().attr("ma").attr("MaskedArray"); });
  const auto at = find_host_mask(value, reinterpret_cast<PyTypeObject*>(masked), 0);
  if (!at) return;
  throw_error(Errc::type_error,
              std::string(entry) + ": the host data " + (at->empty() ? "is" : "holds at " + *at) +
                  " a numpy.ma.MaskedArray, and its mask would be dropped here; pass "
                  ".filled(value) or .data, or attach a mask on the device "
                  "(cai.from_cuda_array_interface with a 'mask')");
}

nb::object host_value(const char* rule, nb::handle value, nb::handle dt,
                      std::span<const std::int64_t> shape, const char* entry) {
  refuse_host_mask(value, entry);
  static PyObject* assign = nullptr;
  return kept_for_process(assign, [] { return nb::module_::import_("cai._assign"); })
      .attr(rule)(value, dt, to_tuple(shape), entry);
}

void set_from_host(const View& dst, nb::handle host, nb::handle value,
                   const sync::StreamRef& stream, bool blocking) {
  const void* ptr = buffer_ptr(host);
  blocking = blocking || !is_callers_memory(host, value);
  NoGil nogil;  // may wait for the copy
  copy_from_host(dst, ptr, stream, blocking);
}

namespace {

// Numba's check_array_compatibility for a device source: the same dtype, the same shape once
// axes of length one are dropped. Strides may differ (cai copies any layout).
void require_compatible(const View& dst, const View& src, nb::handle dst_dt, const char* entry) {
  if (!(src.dtype() == dst.dtype()))
    throw_error(Errc::type_error,
                "incompatible dtype: " + std::string(nb::str(dst_dt).c_str()) + " vs. " +
                    nb::str(numpy_dtype(src.dtype())).c_str() + " (" + entry +
                    ": the array's dtype, then the source's; nothing is converted)");
  auto squeezed = [](std::span<const std::int64_t> shape) {
    Dims out;
    for (const std::int64_t n : shape)
      if (n != 1) out.push_back(n);
    return out;
  };
  const Dims a = squeezed(dst.shape()), b = squeezed(src.shape());
  if (!std::ranges::equal(a, b))
    throw_error(Errc::value_error, "incompatible shape: " + format_dims(dst.shape()) + " vs. " +
                                       format_dims(src.shape()) + " (" + entry +
                                       ": the array's shape, then the source's)");
}

void copy_to_device_impl(PyArray& self, nb::handle obj, nb::handle stream) {
  const View& dst = self.view();
  const auto s = stream_arg(stream, "copy_to_device()", stream_or_default(dst));
  dst.require_writable("copy_to_device()", "the array");
  note_write();
  if (is_gpu_array(obj)) {
    const ViewArg src(obj, true, "copy_to_device()");
    require_compatible(dst, *src, array_dtype(self), "copy_to_device()");
    const bool same = std::ranges::equal(src->shape(), dst.shape());
    copy(dst, same ? *src : src->reshape(dst.shape(), false), s);
  } else {
    nb::object host = host_value("exact", obj, array_dtype(self), dst.shape(), "copy_to_device()");
    set_from_host(dst, host, obj, s, blocking_stream(stream));
  }
}

std::string array_repr(PyArray& self) {
  std::string dtype = nb::str(array_dtype(self)).c_str();
  const std::string_view extended = self.dtype().extended_name();
  if (!extended.empty() && dtype != extended)  // without ml_dtypes: 'V1 (float8_e5m2)'
    dtype += " (" + std::string(extended) + ")";
  return "<cai.DeviceNDArray shape=" + format_dims(self.shape()) + " dtype=" + dtype +
         (self.readonly() ? " readonly" : "") + ">";
}

// ----- new arrays ----------------------------------------------------------------------------

View allocate_like(DType dtype, std::span<const std::int64_t> shape, nb::handle strides,
                   bool fortran, const sync::StreamRef& stream, device::MemoryKind kind) {
  std::optional<Layout> layout;
  if (!strides.is_none()) {
    // Explicit strides: allocate the extent they span.
    Dims st = read_dims(strides, "strides", DimsForm::argument);
    layout.emplace(Dims(shape), std::move(st), dtype.itemsize());
    if (layout->may_overlap())
      throw_error(Errc::value_error,
                  "device_array(): strides make elements overlap; each element "
                  "must have its own bytes");
  }
  const auto allocate = [&] {
    return layout ? View::allocate(std::move(dtype), std::move(*layout), stream, kind)
                  : View::allocate(std::move(dtype), shape, fortran, stream, kind);
  };
  // Only device memory may come from the Python allocator hook. Page-locked memory
  // (cuMemAllocHost, cuMemHostAlloc) waits for all device work: without the GIL.
  if (kind == device::MemoryKind::device) return allocate();
  NoGil nogil;
  return allocate();
}

// device_array, managed_array and mapped_array: Numba's signatures, one memory kind each.
nb::object new_device_array(const char* entry, device::MemoryKind kind, nb::handle shape,
                            nb::handle dtype, nb::handle strides, const std::string& order,
                            nb::handle stream) {
  if (order != "C" && order != "F")
    throw_error(Errc::value_error,
                std::string(entry) + ": order must be 'C' or 'F', got '" + order + "'");
  const Dims dims = read_dims(shape, "shape", DimsForm::argument);
  nb::object dt = numpy_module().attr("dtype")(dtype);
  DType t = dtype_from_numpy(dt, entry);
  auto s = stream_arg(stream, entry, library_default_stream());
  require_stream_of_current_device(entry, s);
  return wrap(allocate_like(std::move(t), dims, strides, order == "F", s, kind), dt);
}

nb::object device_array_like(nb::handle ary, nb::handle stream) {
  constexpr const char* entry = "device_array_like()";
  auto s = stream_arg(stream, entry, library_default_stream());
  PyArray* a = as_py_array(ary, entry);
  if (a || is_gpu_array(ary)) {
    // A GPU array: its view says shape, dtype (the DLPack-only types included) and order,
    // and the new array goes to its device, as CuPy's empty_like does.
    const ViewArg like(ary, false, entry);
    const OperationDevice on(entry, {{"ary", like.get()}}, s);
    const DeviceGuard there(new_array_device(*like, s));
    return wrap(View::allocate(like->dtype(), like->shape(), like->layout().is_f_only(), s),
                a ? a->np_dtype : nb::object());
  }
  // A host array: the new one goes to the current device.
  if (!nb::hasattr(ary, "shape") || !nb::hasattr(ary, "dtype"))
    throw_error(Errc::type_error,
                "device_array_like(): ary must be an array with a shape and a dtype (a NumPy or "
                "a GPU array), got " +
                    type_name_of(ary) + "; for a list, use np.asarray(ary) first");
  require_stream_of_current_device(entry, s);
  nb::object shape = ary.attr("shape");
  nb::object dt = numpy_module().attr("dtype")(ary.attr("dtype"));
  bool fortran = false;
  if (nb::hasattr(ary, "flags"))
    fortran = !nb::cast<bool>(ary.attr("flags").attr("c_contiguous")) &&
              nb::cast<bool>(ary.attr("flags").attr("f_contiguous"));
  return wrap(View::allocate(dtype_from_numpy(dt, entry),
                             read_dims(shape, "shape", DimsForm::argument), fortran, s),
              dt);
}

// Numba's to_device(obj, stream=0, copy=True, to=None): `to` takes the copy (copy_to_device's
// rules); copy=False allocates without copying, or imports a GPU array as it is.
nb::object to_device(nb::handle obj, nb::handle stream, bool copy_data, nb::handle to) {
  if (!to.is_none()) {
    PyArray* dst = as_py_array(to, "to_device()");
    if (!dst)
      throw_error(Errc::type_error,
                  "to_device(): to must be a cai.DeviceNDArray, got " + type_name_of(to));
    if (copy_data) copy_to_device_impl(*dst, obj, stream);
    return nb::borrow(to);
  }
  auto s = stream_arg(stream, "to_device()", library_default_stream());
  require_stream_of_current_device("to_device()", s);
  if (!copy_data)
    return is_gpu_array(obj) ? nb::module_::import_("cai._cai").attr("as_cuda_array")(obj)
                             : device_array_like(numpy_module().attr("asarray")(obj), stream);
  if (is_gpu_array(obj)) {
    // Already on the device: a device-to-device copy, stream-ordered like any op.
    const ViewArg src(obj, true, "to_device()");
    View dst = View::allocate(src->dtype(), src->shape(), src->layout().is_f_only(), s);
    copy(dst, *src, s);
    return wrap(std::move(dst));
  }
  refuse_host_mask(obj, "to_device()");
  nb::object arr = numpy_module().attr("asarray")(obj);
  nb::object dt = arr.attr("dtype");
  const bool fortran = !nb::cast<bool>(arr.attr("flags").attr("c_contiguous")) &&
                       nb::cast<bool>(arr.attr("flags").attr("f_contiguous"));
  View v = View::allocate(dtype_from_numpy(dt, "to_device()"),
                          read_dims(arr.attr("shape"), "shape", DimsForm::argument), fortran, s);
  // The device copy is C or F ordered like the source; the host side is C ordered.
  nb::object host =
      numpy_module().attr("ascontiguousarray")(fortran ? nb::object(arr.attr("T")) : arr);
  const void* ptr = buffer_ptr(host);
  const bool blocking = blocking_stream(stream) || !is_callers_memory(host, obj);
  {
    NoGil nogil;
    copy_from_host(fortran ? v.transpose() : v, ptr, s, blocking);
  }
  return wrap(std::move(v), dt);
}

}  // namespace

void bind_array(nb::module_& m) {
  auto cls = nb::class_<PyArray>(
      m, "DeviceNDArray", nb::is_weak_referenceable(), nb::type_slots(g_array_slots), nb::pooled(),
      "An array in device memory (or simulator memory), created by cai or imported from any "
      "object with __cuda_array_interface__. Indexing gives views; every operation is ordered "
      "on streams as CAI v3 requires.");
  g_array_type = cls;
  cls.def_prop_ro("shape", [](const PyArray& a) { return to_tuple(a.shape()); })
      .def_prop_ro(
          "strides", [](const PyArray& a) { return to_tuple(a.strides()); },
          "Byte strides, as NumPy gives them.")
      .def_prop_ro("dtype", [](PyArray& a) { return array_dtype(a); })
      .def_prop_ro("ndim", [](const PyArray& a) { return a.ndim(); })
      .def_prop_ro("size", [](const PyArray& a) { return a.layout().size(); })
      .def_prop_ro("itemsize", [](const PyArray& a) { return a.dtype().itemsize(); })
      .def_prop_ro("nbytes", [](const PyArray& a) { return a.layout().nbytes(); })
      .def_prop_ro(
          "ptr", [](const PyArray& a) { return a.ptr(); },
          "Address of the first element (0 for a zero-size array).")
      .def_prop_ro("readonly", [](const PyArray& a) { return a.readonly(); })
      .def_prop_ro(
          "stream",
          [](const PyArray& a) -> nb::object {
            auto s = a.stream();
            if (!s) return nb::none();
            return nb::cast(PyStream{*s, false});
          },
          "The stream after which all work queued on this array is complete (its default "
          "stream), or None when none was ever queued, and for an import from a foreign "
          "stream until its first use (an event stands for the producer's work then).")
      .def_prop_ro("mask",
                   [](PyArray& a) -> nb::object {
                     if (!a.masked()) return nb::none();
                     return wrap(*a.view().mask());
                   })
      .def("__len__",
           [](const PyArray& a) {
             if (a.ndim() == 0) throw_error(Errc::type_error, "len() of a 0-d array");
             return a.shape()[0];
           })
      .def("__bool__", exit_safe(&truth),
           "The element's truth for a one-element array (copied to the host); ValueError "
           "otherwise, as NumPy.")
      .def("__array__", exit_safe(&array_protocol), nb::arg("dtype").none() = nb::none(),
           nb::arg("copy").none() = nb::none(),
           nb::sig("def __array__(self, dtype: numpy.typing.DTypeLike | None = None, copy: bool "
                   "| None = None) -> numpy.typing.NDArray[Any]"),
           "NumPy's protocol: a host copy of device memory (np.asarray(a) is a.copy_to_host(); "
           "copy=False is a ValueError), and a view of memory the host reaches in place "
           "(managed_array, mapped_array), after the work queued on it.")
      .def("is_c_contiguous", [](const PyArray& a) { return a.layout().is_c_contiguous(); })
      .def("is_f_contiguous", [](const PyArray& a) { return a.layout().is_f_contiguous(); })
      .def("copy_to_host", exit_safe(&copy_to_host_impl), nb::arg("ary").none() = nb::none(),
           nb::arg("stream").none() = 0,
           "Copies to a NumPy array (a new one, or `ary`). Without a stream it waits for the "
           "copy; with `stream=` and page-locked `ary` (pinned_array, mapped_array) the copy "
           "is queued and the call returns at once (synchronize the stream before reading), "
           "and with pageable memory it waits, as CUDA does. A masked array gives a "
           "numpy.ma.MaskedArray (masked where the array's mask is false).")
      .def("copy_to_device", exit_safe(&copy_to_device_impl), nb::arg("ary"),
           nb::arg("stream").none() = 0,
           "Copies a host array (anything NumPy reads) or a device array of this array's dtype "
           "and shape into it (axes of length one aside); a different dtype is a TypeError, a "
           "different shape a ValueError, as in Numba: nothing is converted or broadcast.")
      .def("__repr__", &array_repr);

  m.def("device_array",
        exit_safe([](nb::handle shape, nb::handle dtype, nb::handle strides,
                     const std::string& order, nb::handle stream) {
          return new_device_array("device_array()", device::MemoryKind::device, shape, dtype,
                                  strides, order, stream);
        }),
        nb::arg("shape").none(), nb::arg("dtype") = nb::handle((PyObject*)&PyFloat_Type),
        nb::arg("strides") = nb::none(), nb::arg("order") = "C", nb::arg("stream").none() = 0,
        "A new uninitialized device array; `stream` becomes its default stream.");
  m.def("managed_array",
        exit_safe([](nb::handle shape, nb::handle dtype, nb::handle strides,
                     const std::string& order, nb::handle stream, bool attach_global) {
          if (!attach_global)
            throw_error(Errc::not_implemented,
                        "managed_array(): attach_global=False (memory attached to one stream) is "
                        "not supported; managed memory is attached globally");
          return new_device_array("managed_array()", device::MemoryKind::managed, shape, dtype,
                                  strides, order, stream);
        }),
        nb::arg("shape").none(), nb::arg("dtype") = nb::handle((PyObject*)&PyFloat_Type),
        nb::arg("strides") = nb::none(), nb::arg("order") = "C", nb::arg("stream").none() = 0,
        nb::arg("attach_global") = true,
        "A new array in managed (unified) memory: a device array, and through np.asarray(a) a "
        "NumPy array of the same memory (after the work queued on it). DLPack: kDLCUDAManaged.");
  m.def("mapped_array",
        exit_safe([](nb::handle shape, nb::handle dtype, nb::handle strides,
                     const std::string& order, nb::handle stream, bool portable, bool wc) {
          (void)portable;  // page-locked memory of the driver is portable across contexts
          if (wc)
            throw_error(Errc::not_implemented,
                        "mapped_array(): wc=True (write-combined memory) is not supported");
          return new_device_array("mapped_array()", device::MemoryKind::pinned_host, shape, dtype,
                                  strides, order, stream);
        }),
        nb::arg("shape").none(), nb::arg("dtype") = nb::handle((PyObject*)&PyFloat_Type),
        nb::arg("strides") = nb::none(), nb::arg("order") = "C", nb::arg("stream").none() = 0,
        nb::arg("portable") = false, nb::arg("wc") = false,
        "A new array in page-locked host memory mapped into the device: a device array, and "
        "through np.asarray(a) a NumPy array of the same memory (after the work queued on it). "
        "DLPack: kDLCUDAHost.");
  m.def("_host_array_view", exit_safe([](nb::handle owner, nb::handle desc, nb::handle dtype) {
          // A NumPy view of a managed or mapped array, as a device array of the same bytes
          // that shares the owner's streams (cai.MappedNDArray, cai.ManagedNDArray).
          constexpr const char* entry = "__cuda_array_interface__";
          PyArray* o = as_py_array(owner, entry);
          if (!o) throw_error(Errc::type_error, "_host_array_view(): owner must be a cai array");
          const View& whole = o->view();
          View part = view_from_interface(desc, nb::none(), false, entry);
          const auto outer = whole.layout().byte_range(whole.ptr());
          const auto inner = part.layout().byte_range(part.ptr());
          if (part.size() != 0 &&
              (!outer || !inner || inner->lo < outer->lo || inner->hi > outer->hi))
            throw_error(Errc::value_error,
                        "__cuda_array_interface__: the NumPy view's bytes lie outside the "
                        "memory of its managed or mapped array");
          // NumPy's dtype, not the typestr: ml_dtypes types are '<V2' there.
          return wrap(View(part.ptr(), dtype_from_numpy(dtype, entry), part.layout(),
                           part.readonly(), whole.sync(), whole.owner()),
                      nb::borrow(dtype));
        }),
        nb::arg("owner"), nb::arg("desc"), nb::arg("dtype"));
  m.def(
      "_host_register",
      [](std::uint64_t ptr, std::size_t bytes, bool read_only) {
        NoGil nogil;  // the driver may wait for all device work before it locks
        device::backend().host_register(ptr, bytes, read_only);
      },
      nb::arg("ptr"), nb::arg("nbytes"), nb::arg("read_only") = false,
      "Page-locks host memory (cai.pinned), mapped for the device; read_only: the device may "
      "only read it.");
  m.def(
      "_host_locked",
      [](std::uint64_t ptr, std::size_t bytes) {
        // Memory the driver page-locked itself (cuMemAllocHost, cuMemHostAlloc, an enclosing
        // cai.pinned block) or manages (cuMemAllocManaged): nothing for cai.pinned to lock.
        if (bytes == 0) return false;
        const device::PointerInfo info = device::backend().pointer_info(ptr);
        if (info.kind != device::MemoryKind::pinned_host &&
            info.kind != device::MemoryKind::managed)
          return false;
        return ptr - info.alloc_base + bytes <= info.alloc_size;
      },
      nb::arg("ptr"), nb::arg("nbytes"),
      "Whether [ptr, ptr + nbytes) lies wholly in one page-locked or managed allocation.");
  m.def("_host_unregister", exit_safe([](std::uint64_t ptr) {
          NoGil nogil;  // the driver waits for all device work before it unlocks
          device::backend().host_unregister(ptr);
        }),
        nb::arg("ptr"), "Undoes _host_register (cai.pinned).");
  m.def("device_array_like", exit_safe(&device_array_like), nb::arg("ary"),
        nb::arg("stream").none() = 0);
  m.def("to_device", exit_safe(&to_device), nb::arg("obj"), nb::arg("stream").none() = 0,
        nb::arg("copy") = true, nb::arg("to").none() = nb::none(),
        "Copies a host array (anything NumPy reads) to a new device array on `stream` (Numba's "
        "signature): with `to=`, into that array by copy_to_device's rules; copy=False "
        "allocates without copying (a GPU array is imported as it is).");
}

}  // namespace cai::python
