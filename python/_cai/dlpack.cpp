// DLPack's producer in Python: DeviceNDArray.__dlpack__/__dlpack_device__ and the DLPack 1.3 C
// exchange API (type(x).__dlpack_c_exchange_api__). The consumer, cai.from_dlpack, is one road
// of the import (import.cpp).
//
// An export, top to bottom (dlpack_method -> dlpack_export): the keywords are matched by
// pointer against interned names (no keyword dictionary) and read into an ExportRequest; the
// arrays layer's plan_export decides (cai/arrays/dlpack.h), as it does for C++ users. The usual
// plan (a device array, no copy) borrows the array: the tensor, filled by the one builder
// (build_tensor), holds a reference to the DeviceNDArray and points at its shape and element
// strides (one small allocation, no View copied), and the consumer's stream is made to wait
// only while work is pending. A copy is the arrays layer's export_copy. The binding adds the
// capsule.

#include "dlpack.h"

#include <nanobind/stl/optional.h>

#include <array>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>

#include "array.h"
#include "bindings.h"
#include "cai/arrays/devices.h"
#include "cai/arrays/dlpack.h"
#include "cai/arrays/ops.h"
#include "cai/core/error.h"
#include "errors.h"
#include "fastcall.h"
#include "import.h"
#include "streams.h"

namespace cai::python {

const DlpackNames& dlpack_names() {
  static const DlpackNames n = [] {
    DlpackNames n{};
    n.stream = PyUnicode_InternFromString("stream");
    n.max_version = PyUnicode_InternFromString("max_version");
    n.dl_device = PyUnicode_InternFromString("dl_device");
    n.copy = PyUnicode_InternFromString("copy");
    n.dlpack = PyUnicode_InternFromString("__dlpack__");
    n.dlpack_device = PyUnicode_InternFromString("__dlpack_device__");
    n.exchange_api = PyUnicode_InternFromString("__dlpack_c_exchange_api__");
    n.version13 = Py_BuildValue("(ii)", 1, 3);
    n.stream_and_version = PyTuple_Pack(2, n.stream, n.max_version);
    n.stream_only = PyTuple_Pack(1, n.stream);
    return n;
  }();
  return n;
}

namespace {

int read_int32(nb::handle o, const char* what) {
  const std::int64_t v = read_int64(o, what, "an int", Errc::value_error);
  if (v < INT32_MIN || v > INT32_MAX)
    throw_error(Errc::value_error, std::string(what) + ": " + std::to_string(v) +
                                       " is out of range (a 32-bit integer is expected)");
  return static_cast<int>(v);
}

}  // namespace

// A 2-tuple of ints, as (major, minor) or (device_type, device_id).
std::pair<int, int> read_int_pair(nb::handle o, const char* what) {
  if (!PyTuple_Check(o.ptr()) || PyTuple_GET_SIZE(o.ptr()) != 2)
    throw_error(Errc::type_error, what, ": expected a tuple (int, int), got ", ReprOf{o});
  PyObject* a = PyTuple_GET_ITEM(o.ptr(), 0);
  PyObject* b = PyTuple_GET_ITEM(o.ptr(), 1);
  if (PyLong_CheckExact(a) && PyLong_CheckExact(b)) {  // plain ints: no Python code runs
    int overflow_a = 0, overflow_b = 0;
    const long x = PyLong_AsLongAndOverflow(a, &overflow_a);
    const long y = PyLong_AsLongAndOverflow(b, &overflow_b);
    if (!overflow_a && !overflow_b && x >= INT32_MIN && x <= INT32_MAX && y >= INT32_MIN &&
        y <= INT32_MAX)
      return {static_cast<int>(x), static_cast<int>(y)};
  }
  return {read_int32(nb::handle(a), what), read_int32(nb::handle(b), what)};
}

namespace {

// ----- producer ------------------------------------------------------------------------------

template <class Managed>
void delete_borrowed(Managed* m);
template <class Managed>
void delete_borrowed_with_gil(Managed* m) noexcept;

// An unconsumed capsule still owns its tensor. Runs with the GIL, possibly during exception
// handling: the error indicator is saved around the deleter then. A consumer renames the
// capsule, so the name pointer tells (no string compared); the tensor is also the context.
template <class Managed>
void capsule_destructor(PyObject* capsule) {
  constexpr const char* name =
      std::is_same_v<Managed, DLManagedTensorVersioned> ? kVersioned : kLegacy;
  if (PyCapsule_GetName(capsule) != name) return;  // consumed
  auto* t = static_cast<Managed*>(PyCapsule_GetContext(capsule));
  if (!t || !t->deleter) return;
  if (t->deleter == &delete_borrowed<Managed>) {
    // Our own export, here with the GIL: no GIL check, and nothing that can set an error
    // (after nanobind's shutdown it leaks, as delete_borrowed does).
    if (nb::is_alive()) delete_borrowed_with_gil(t);
    return;
  }
  if (!PyErr_Occurred()) {
    t->deleter(t);
    return;
  }
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  t->deleter(t);
  PyErr_Restore(type, value, tb);
}

template <class Managed>
nb::object make_capsule(Managed* t) {
  constexpr bool versioned = std::is_same_v<Managed, DLManagedTensorVersioned>;
  PyObject* cap = PyCapsule_New(t, versioned ? kVersioned : kLegacy, &capsule_destructor<Managed>);
  if (!cap || PyCapsule_SetContext(cap, t) != 0) {
    Py_XDECREF(cap);  // its destructor finds no context: the tensor is deleted here
    t->deleter(t);
    throw nb::python_error();
  }
  return nb::steal(cap);
}

// A tensor that borrows a DeviceNDArray: its memory, shape and element strides stay the
// array's, which the tensor keeps alive by a reference. One allocation per export.
template <class Managed>
struct BorrowedExport {
  Managed managed{};
  PyObject* array = nullptr;
};

// Frees a borrowed export; the caller holds the GIL.
template <class Managed>
void delete_borrowed_with_gil(Managed* m) noexcept {
  auto* e = static_cast<BorrowedExport<Managed>*>(m->manager_ctx);
  Py_DECREF(e->array);
  PyMem_Free(e);
}

// The DLPack deleter: from any thread, with or without the GIL; leaks after shutdown.
template <class Managed>
void delete_borrowed(Managed* m) {
  if (!nb::is_alive()) return;
  if (PyGILState_Check()) {
    delete_borrowed_with_gil(m);
    return;
  }
  WithGil gil;
  delete_borrowed_with_gil(m);
}

// The element strides DLPack gives, built once per array.
const Dims& element_strides_of(PyArray& a, const char* entry) {
  if (!a.element_strides)
    a.element_strides = std::make_unique<const Dims>(dlpack_strides(a.layout(), entry));
  return *a.element_strides;
}

// The array's DLPack type: the C API's cached one, else the core's answer (or its error).
DLDataType dlpack_dtype_of(PyArray& a, const char* entry) {
  const DLDataType known = a.c_type().dtype;  // lanes 0: DLPack has none
  return known.lanes != 0 ? known : dlpack_dtype(a.dtype(), entry);
}

// What a tensor borrowing `a` describes.
TensorParts parts_of(PyArray& a, const char* entry) {
  return {a.ptr(),    dlpack_dtype_of(a, entry),
          a.shape(),  element_strides_of(a, entry).data(),
          a.device(), a.readonly()};
}

template <class Managed>
Managed* borrow_export(PyArray& a, nb::handle obj, const char* entry) {
  const TensorParts parts = parts_of(a, entry);
  auto* e = static_cast<BorrowedExport<Managed>*>(PyMem_Malloc(sizeof(BorrowedExport<Managed>)));
  if (!e) throw std::bad_alloc();
  // build_tensor sets every field of the tensor: no zero-filling first.
  static_assert(std::is_trivially_copyable_v<BorrowedExport<Managed>>);
  if constexpr (std::is_same_v<Managed, DLManagedTensorVersioned>) {
    build_tensor(e->managed, parts, 0, e, &delete_borrowed<Managed>);
  } else {
    try {
      build_tensor(e->managed, parts, e, &delete_borrowed<Managed>);
    } catch (...) {
      PyMem_Free(e);
      throw;
    }
  }
  e->array = Py_NewRef(obj.ptr());
  return &e->managed;
}

// Whether max_version asks for a versioned tensor (major >= 1). Consumers pass one constant
// tuple from call to call: the last tuple of two plain ints that did is kept, so the same
// object is not read again. Only plain ints: they cannot change, and a kept tuple then holds
// nothing of the caller's (an element with __index__ could answer differently next time, and
// would live as long as the process).
bool asks_versioned(nb::handle max_version) {
  static PyObject* last_versioned = nullptr;  // a strong reference, replaced by a newer one
  PyObject* t = max_version.ptr();
  if (t == last_versioned) return true;
  if (read_int_pair(max_version, "__dlpack__(): max_version").first < 1) return false;
  if (PyTuple_CheckExact(t) && PyLong_CheckExact(PyTuple_GET_ITEM(t, 0)) &&
      PyLong_CheckExact(PyTuple_GET_ITEM(t, 1)))
    Py_XSETREF(last_versioned, Py_NewRef(t));
  return true;
}

// The keywords of __dlpack__, borrowed; None when not given.
struct ExportArgs {
  nb::handle stream = Py_None, max_version = Py_None, dl_device = Py_None, copy = Py_None;
};

// The keywords read into the arrays layer's request (types and ranges only; the rules are
// plan_export's).
ExportRequest read_request(const ExportArgs& args) {
  ExportRequest r;
  r.versioned = !args.max_version.is_none() && asks_versioned(args.max_version);
  if (!args.copy.is_none()) {
    if (!PyBool_Check(args.copy.ptr()))
      throw_error(Errc::type_error, "__dlpack__(): copy: expected None or a bool, got ",
                  TypeNameOf{args.copy});
    r.copy = args.copy.ptr() == Py_True;
  }
  if (!args.dl_device.is_none()) {
    const auto [type, id] = read_int_pair(args.dl_device, "__dlpack__(): dl_device");
    r.dl_device = DLDevice{static_cast<DLDeviceType>(type), id};
  }
  // Any integer, a cai.Stream included (its __index__ is its handle).
  if (!args.stream.is_none())
    r.stream =
        read_int64(args.stream, "__dlpack__(): stream", "None or an int", Errc::buffer_error);
  return r;
}

nb::object capsule_of(const DlpackTensor& t) {
  return t.versioned ? make_capsule(t.versioned) : make_capsule(t.legacy);
}

// __dlpack__: the plan (arrays layer), then the array itself, borrowed with a reference to
// it, or a copy the tensor owns.
nb::object dlpack_export(PyArray& self, nb::handle obj, const ExportArgs& args) {
  constexpr const char* entry = "__dlpack__()";
  if (self.masked())
    throw_error(Errc::buffer_error,
                "__dlpack__(): the array is masked, and a DLPack tensor cannot carry a mask; "
                "export the data and its .mask separately");
  const ExportRequest request = read_request(args);
  const ExportPlan plan = plan_export(request, self.device());
  if (plan.kind == ExportPlan::Kind::borrow) {
    if (plan.wait && self.has_work())
      self.view().sync()->order_before(device::backend(), *plan.wait);
    if (!self.readonly()) note_write();  // the consumer may write
    if (request.versioned)
      return make_capsule(borrow_export<DLManagedTensorVersioned>(self, obj, entry));
    return make_capsule(borrow_export<DLManagedTensor>(self, obj, entry));
  }
  const View& v = self.view();
  const sync::StreamRef stream = stream_or_default(v);
  DlpackTensor t;
  if (plan.kind == ExportPlan::Kind::host_copy) {
    NoGil nogil;  // the copy waits for the device
    t = export_copy(v, plan, request.versioned, stream);
  } else {
    t = export_copy(v, plan, request.versioned, stream);  // allocators may run Python code
  }
  return capsule_of(t);
}

// a.__dlpack__(*, stream, max_version, dl_device, copy), as a plain C method (fastcall.h).
PyObject* dlpack_method(PyObject* self, PyObject* const* args, Py_ssize_t nargs,
                        PyObject* kwnames) noexcept {
  return fastcall([&] {
    PyArray* a = as_py_array(self, "__dlpack__()");
    if (!a) throw_error(Errc::type_error, "__dlpack__(): expected a cai.DeviceNDArray");
    const DlpackNames& n = dlpack_names();
    const std::array<PyObject*, 4> keys = {n.stream, n.max_version, n.dl_device, n.copy};
    std::array<PyObject*, 4> in = {Py_None, Py_None, Py_None, Py_None};
    read_args("__dlpack__()", args, static_cast<std::size_t>(nargs), kwnames, keys, 0, 0, in);
    return dlpack_export(*a, self, {in[0], in[1], in[2], in[3]});
  });
}

// a.__dlpack_device__(): (device type, device id), a tuple built once per array.
PyObject* dlpack_device_method(PyObject* self, PyObject*) noexcept {
  return fastcall([&] {
    PyArray* a = as_py_array(self, "__dlpack_device__()");
    if (!a) throw_error(Errc::type_error, "__dlpack_device__(): expected a cai.DeviceNDArray");
    if (!a->dl_device.is_valid()) {
      const DLDevice& d = a->device();
      a->dl_device = nb::make_tuple(static_cast<int>(d.device_type), d.device_id);
    }
    return a->dl_device;
  });
}

// ----- our C exchange API table --------------------------------------------------------------

int api_allocator(DLTensor* prototype, DLManagedTensorVersioned** out, void* error_ctx,
                  void (*set_error)(void*, const char*, const char*)) {
  try {
    const DType dtype = DType::from_dlpack(prototype->dtype);
    const auto n = static_cast<std::size_t>(prototype->ndim);
    View v = View::allocate(dtype, std::span<const std::int64_t>(prototype->shape, n), false,
                            library_default_stream());
    *out = to_dlpack_versioned(v);
    return 0;
  } catch (const std::exception& e) {
    if (set_error) set_error(error_ctx, "RuntimeError", e.what());
    return -1;
  }
}

PyArray& exchanged(void* py_object) {
  PyArray* a = as_py_array(static_cast<PyObject*>(py_object), "dlpack exchange API");
  if (!a) throw_error(Errc::type_error, "dlpack exchange API: not a cai.DeviceNDArray");
  return *a;
}

// The no-sync exports promise data ready in order on current_work_stream (the legacy default
// stream): pending work on the array's own stream (a non-blocking one, another thread's per-
// thread default stream, an import's event) is ordered before it here, as __dlpack__ orders it
// before a consumer's stream. Nothing pending: nothing to do, no driver call.
void order_before_work_stream(PyArray& a) {
  if (a.has_work()) a.view().sync()->order_before(device::backend(), library_default_stream());
}

int api_from_py_object(void* py_object, DLManagedTensorVersioned** out) {
  return guarded([&] {
    PyArray& a = exchanged(py_object);
    order_before_work_stream(a);
    if (a.masked())
      throw_error(Errc::buffer_error,
                  "dlpack exchange API: the array is masked, and a DLPack tensor cannot carry a "
                  "mask");
    if (!a.readonly()) note_write();
    *out = borrow_export<DLManagedTensorVersioned>(a, static_cast<PyObject*>(py_object),
                                                   "dlpack exchange API");
  });
}

int api_to_py_object(DLManagedTensorVersioned* tensor, void** out_py_object) {
  return guarded([&] {
    View v = from_dlpack(tensor, nullptr, &release_with_gil<DLManagedTensorVersioned>);
    *out_py_object = wrap(std::move(v)).release().ptr();
  });
}

int api_dltensor_from_py_object(void* py_object, DLTensor* out) {
  return guarded([&] {
    PyArray& a = exchanged(py_object);
    constexpr const char* entry = "dlpack exchange API";
    const DLDataType dtype = dlpack_dtype_of(a, entry);
    require_whole_bytes(dtype, entry, "a DLTensor (dltensor_from_py_object)");
    order_before_work_stream(a);
    if (!a.readonly()) note_write();
    fill_dltensor(a.ptr(), dtype, a.shape(), element_strides_of(a, entry).data(), a.device(), *out);
  });
}

int api_current_work_stream(DLDeviceType device_type, std::int32_t, void** out_stream) {
  // cai's work goes to its default stream; CPU has none.
  *out_stream =
      device_type == kDLCPU ? nullptr : reinterpret_cast<void*>(library_default_stream().handle);
  return 0;
}

const DLPackExchangeAPI g_exchange_api = {
    {{DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION}, nullptr},
    &api_allocator,
    &api_from_py_object,
    &api_to_py_object,
    &api_dltensor_from_py_object,
    &api_current_work_stream,
};

}  // namespace

void bind_dlpack(nb::module_& m) {
  nb::handle cls = nb::type<PyArray>();
  static PyMethodDef dlpack_def = {
      "__dlpack__", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&dlpack_method)),
      METH_FASTCALL | METH_KEYWORDS,
      "__dlpack__($self, /, *, stream=None, max_version=None, dl_device=None, copy=None)\n--\n\n"
      "Exports the array as a DLPack capsule ('dltensor_versioned' when max_version >= (1, 0)). "
      "`stream` is the consumer's: it is made to wait for the array's work (-1: no ordering)."};
  nb::object method =
      nb::steal(PyDescr_NewMethod(reinterpret_cast<PyTypeObject*>(cls.ptr()), &dlpack_def));
  if (!method.is_valid()) throw nb::python_error();
  cls.attr("__dlpack__") = method;
  static PyMethodDef dlpack_device_def = {"__dlpack_device__", &dlpack_device_method, METH_NOARGS,
                                          "__dlpack_device__($self, /)\n--\n\n"
                                          "(device type, device id) of the array's memory."};
  cls.attr("__dlpack_device__") =
      nb::steal(PyDescr_NewMethod(reinterpret_cast<PyTypeObject*>(cls.ptr()), &dlpack_device_def));
  // Static, alive for the whole process, as the exchange API requires.
  cls.attr("__dlpack_c_exchange_api__") = nb::steal(PyCapsule_New(
      const_cast<DLPackExchangeAPI*>(&g_exchange_api), "dlpack_exchange_api", nullptr));
}

}  // namespace cai::python
