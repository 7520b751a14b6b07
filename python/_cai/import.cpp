// Every import of a foreign array, top to bottom. Each entry (as_cuda_array, an operation's
// argument, the C API and the caster, from_cuda_array_interface) goes
// classify -> parse -> [typed check] -> resolve -> wrap:
//   1. classify (parse_array): our own arrays are taken as they are (one type check, by each
//      entry first: their hot path), cai.Array's and a host array's device view likewise; an
//      object without the CAI goes to DLPack (import_dlpack, dlpack.cpp); cai.config's sync
//      switch is read here, once;
//   2. parse (parse_interface): the producer's __cuda_array_interface__ is read in one pass and
//      validated by the core (read_interface, interface.cpp); the result is the core's
//      Interface and the producer's stream, unresolved (stream_of: the CAI v3 consumer rule);
//   3. [typed check]: the C API checks the parsed fields before anything is resolved
//      (capi.cpp), so that an array it refuses costs no driver call;
//   4. resolve: the producer's stream, if any, is kept as sync::import_order says
//      (ImportStream::resolve, the only driver call of an import: a query of a foreign stream,
//      and an event record if busy);
//   5. wrap: PyArray stores the Import (its compact form: nothing is allocated but the Python
//      object; the View is built by Import::view on first use, or at once when an event stands
//      for the stream); a masked array, or an operation's argument (ViewArg), gets its View now.

#include "import.h"

#include <string>

#include "cai/core/error.h"
#include "convert.h"
#include "dlpack.h"
#include "errors.h"
#include "fastcall.h"
#include "gil.h"
#include "interface.h"
#include "streams.h"

namespace cai::python {

// ----- 1. classify ------------------------------------------------------------------------------

namespace {

// An object whose type has `__cai_array__` wraps the cai array that attribute gives (cai.Array,
// python/cai/_tile.py, does): its view, not an export and import of it (which would name the
// legacy stream for an array imported from a foreign stream). A type lookup: no attribute error
// for the foreign objects of every other import.
PyArray* wrapped_array(nb::handle obj) {
  static PyObject* const name = PyUnicode_InternFromString("__cai_array__");
  if (_PyType_Lookup(Py_TYPE(obj.ptr()), name) == nullptr) return nullptr;
  return as_py_array(nb::getattr(obj, name));
}

PyObject* g_host_array_type = nullptr;  // cai._mapped's base class, set when it is imported

}  // namespace

nb::object host_array_device_view(nb::handle obj) {
  if (g_host_array_type == nullptr ||
      !PyObject_TypeCheck(obj.ptr(), reinterpret_cast<PyTypeObject*>(g_host_array_type)))
    return {};
  return obj.attr("_device_array")();
}

namespace {

// obj.__cuda_array_interface__, or an invalid object when obj has none.
nb::object interface_of(nb::handle obj) {
  static PyObject* const cai_name = PyUnicode_InternFromString("__cuda_array_interface__");
  PyObject* desc = call_python([&] { return PyObject_GetAttr(obj.ptr(), cai_name); });
  if (desc) return nb::steal(desc);
  if (!PyErr_ExceptionMatches(PyExc_AttributeError)) throw nb::python_error();
  PyErr_Clear();
  return {};
}

[[noreturn]] void not_a_gpu_array(nb::handle obj, const char* entry) {
  throw_error(Errc::type_error, std::string(entry) + ": " + type_name_of(obj.ptr()) +
                                    " object has no __cuda_array_interface__ (expected a GPU "
                                    "array: cai, CuPy, PyTorch, Numba, JAX, ...)");
}

}  // namespace

ParsedArray parse_array(nb::handle obj, bool sync, const char* entry) {
  sync = import_sync(sync);  // the one read of cai.config's switch for this import
  // Classify (each entry has taken its own arrays as they are first: their hot path):
  // cai.Array's and a host array's device view; a CAI producer; else DLPack, the other road
  // onto the device (parsed and resolved there). Each branch returns its value in place.
  if (PyArray* a = wrapped_array(obj)) return {wrap(a->view())};
  if (nb::object dev = host_array_device_view(obj); dev.is_valid()) return {std::move(dev)};
  if (nb::object desc = interface_of(obj); desc.is_valid())
    return parse_interface(desc, obj, sync, entry);
  if (has_dlpack(obj)) return {import_dlpack(obj, std::nullopt, sync, entry)};
  not_a_gpu_array(obj, entry);
}

// ----- 2. parse ---------------------------------------------------------------------------------

namespace {

// Parse: the producer's stream of a validated dict, unresolved. The CAI v3 consumer rule:
// with sync, a stream the producer names is ordered after, and one it does not name (None,
// absent) is ordered after through the legacy stream.
ImportStream stream_of(const Interface& itf, bool sync) {
  return !sync        ? ImportStream::none()
         : itf.stream ? ImportStream::producer(*itf.stream)
                      : ImportStream::unnamed();
}

}  // namespace

ParsedArray parse_interface(nb::handle desc, nb::handle owner, bool sync, const char* entry) {
  std::shared_ptr<const View> mask;
  // The fields built in place (braced: the dict is read before the mask is taken).
  ParsedArray parsed{nb::object(), read_interface(desc, sync, entry, 0, &mask)};
  parsed.stream = stream_of(parsed.fields, sync);
  parsed.owner = owner;
  parsed.mask = std::move(mask);
  return parsed;
}

// ----- 4. resolve -> 5. wrap --------------------------------------------------------------------

nb::object ParsedArray::wrap() && {
  if (array.is_valid()) return std::move(array);
  if (mask) return python::wrap(std::move(*this).view());
  stream.resolve();
  return wrap_import(fields.ptr, fields.readonly, std::move(fields.layout), std::move(fields.dtype),
                     std::move(stream), ImportOwner::python(owner));
}

View ParsedArray::view() && {
  stream.resolve();
  View v = Import{fields.ptr, fields.readonly, std::move(fields.layout), std::move(fields.dtype),
                  std::move(stream)}
               .view(keep_alive(owner));
  if (mask) v.set_mask(std::move(mask));
  return v;
}

View resolved_view(Interface&& itf, std::shared_ptr<const View> mask, nb::handle owner, bool sync) {
  ImportStream stream = stream_of(itf, sync);
  return ParsedArray{nb::object(), std::move(itf), std::move(stream), owner, std::move(mask)}
      .view();
}

// ----- the entries ------------------------------------------------------------------------------

nb::object import_array(nb::handle obj, bool sync, const char* entry) {
  if (as_py_array(obj, entry)) return nb::borrow(obj);  // ours, as it is
  return parse_array(obj, sync, entry).wrap();
}

nb::object import_interface(nb::handle desc, nb::handle owner, bool sync, const char* entry) {
  return parse_interface(desc, owner, import_sync(sync), entry).wrap();
}

View view_from_interface(nb::handle desc, nb::handle owner, bool sync, const char* entry) {
  return parse_interface(desc, owner, import_sync(sync), entry).view();
}

ViewArg::ViewArg(nb::handle obj, bool sync, const char* entry) {
  if ((ours_ = as_py_array(obj, entry)) != nullptr) {  // the usual case: nothing to parse
    view_ = &ours_->view();
    return;
  }
  ParsedArray parsed = parse_array(obj, sync, entry);
  if (parsed.array.is_valid()) {
    held_ = std::move(parsed.array);
    view_ = &as_py_array(held_)->view();
  } else {
    imported_.emplace(std::move(parsed).view());
    view_ = &*imported_;
  }
}

void bind_import(nb::module_& m) {
  // as_cuda_array(obj, sync=True), the hot path: a plain C function (fastcall.h).
  static PyMethodDef as_cuda_array_def = {
      "as_cuda_array",
      reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(
          +[](PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
            return fastcall([&] {
              static const std::array<PyObject*, 2> names = {PyUnicode_InternFromString("obj"),
                                                             PyUnicode_InternFromString("sync")};
              std::array<PyObject*, 2> in = {nullptr, Py_True};
              constexpr const char* entry = "as_cuda_array()";
              read_args(entry, args, static_cast<std::size_t>(nargs), kwnames, names, 2, 1, in);
              return import_array(in[0], read_bool(in[1], entry, "sync"), entry);
            });
          })),
      METH_FASTCALL | METH_KEYWORDS,
      "as_cuda_array(obj, sync=True)\n--\n\n"
      "A DeviceNDArray viewing any object with __cuda_array_interface__ (no copy); keeps `obj` "
      "alive. With sync (and cai.config.CUDA_ARRAY_INTERFACE_SYNC), later work is ordered after "
      "the producer's stream with events, without blocking: the default streams (1, 2) become "
      "the array's stream; any other stream is stood for by an event recorded at the import "
      "(the producer may destroy its stream afterwards)."};
  m.attr("as_cuda_array") =
      nb::steal(PyCFunction_NewEx(&as_cuda_array_def, nullptr, m.attr("__name__").ptr()));
  m.def("from_cuda_array_interface", exit_safe([](nb::handle desc, nb::handle owner, bool sync) {
          return import_interface(desc, owner, sync, "from_cuda_array_interface()");
        }),
        nb::arg("desc").none(), nb::arg("owner").none() = nb::none(), nb::arg("sync") = true,
        "A DeviceNDArray from a CAI dict; keeps `owner` alive if given.");
  m.def(
      "_register_host_array_type",
      [](nb::handle type) { g_host_array_type = nb::borrow(type).release().ptr(); },
      nb::arg("type"), "cai._mapped registers the base class of MappedNDArray, ManagedNDArray.");
  m.def("is_cuda_array", exit_safe([](nb::handle obj) {
          return as_py_array(obj, "is_cuda_array()") != nullptr ||
                 nb::hasattr(obj, "__cuda_array_interface__");
        }),
        nb::arg("obj").none());
}

}  // namespace cai::python
