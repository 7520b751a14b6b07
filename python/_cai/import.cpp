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

#include <nanobind/stl/optional.h>

#include <array>
#include <string>
#include <unordered_map>

#include "cai/arrays/devices.h"
#include "cai/arrays/dlpack.h"
#include "cai/arrays/ops.h"
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

// ----- the DLPack road: parse -> resolve -> wrap ---------------------------------------------
// The tensor comes from the type's exchange table, or from __dlpack__ (called with a static
// keyword tuple, after __dlpack_device__); the core checks it (read_dlpack) and it becomes an
// Import with the producer's stream; a device tensor taken as it is is resolved and wrapped
// (wrap_import: the compact form, the tensor its owner); anything else (a copy, a host tensor,
// a target device) is resolved into a View first (finish_import).

namespace {

// The exchange API of a type, found by a lookup in its MRO and cached per type WITHOUT a
// reference: a cached type can die, and its module with it. An entry is valid while the type
// keeps the version tag it had when it was cached: CPython gives a type a new tag (never one
// used before) whenever its attributes change, so a dead type's address reused by a new type,
// or a deleted or replaced attribute, both miss. Types without a table are cached too.
struct ExchangeApiEntry {
  unsigned int tag;
  const DLPackExchangeAPI* api;
};
PyTypeObject* g_last_exchange_type = nullptr;  // the last hit, checked first
ExchangeApiEntry g_last_exchange{};

// The lookup behind the last hit (out of line: the hot path is the check above it).
[[gnu::noinline]] const DLPackExchangeAPI* lookup_exchange_api(PyTypeObject* type) {
  constexpr std::size_t kMaxEntries = 1024;  // then it starts over: dead types' entries go
  static auto* cache = new std::unordered_map<PyTypeObject*, ExchangeApiEntry>;
  const bool tagged =
      PyType_HasFeature(type, Py_TPFLAGS_VALID_VERSION_TAG) && type->tp_version_tag != 0;
  if (auto it = cache->find(type); it != cache->end()) {
    if (tagged && type->tp_version_tag == it->second.tag) {
      g_last_exchange_type = type;
      g_last_exchange = it->second;
      return g_last_exchange.api;
    }
    cache->erase(it);
  }
  const DLPackExchangeAPI* api = nullptr;
  // No AttributeError is raised and formatted for the many types that have no table, and the
  // lookup gives the type a version tag.
  if (PyObject* attr = _PyType_Lookup(type, dlpack_names().exchange_api)) {
    // Only the capsule form: an address given as an int (a draft of 1.3) cannot be checked
    // and would be dereferenced blindly.
    if (PyCapsule_IsValid(attr, "dlpack_exchange_api"))
      api =
          static_cast<const DLPackExchangeAPI*>(PyCapsule_GetPointer(attr, "dlpack_exchange_api"));
    if (PyErr_Occurred()) PyErr_Clear();
    if (api && (api->header.version.major != DLPACK_MAJOR_VERSION ||
                !api->managed_tensor_from_py_object_no_sync || !api->current_work_stream))
      api = nullptr;
  }
  // Types without a valid tag (tags ran out) are looked up every time.
  if (PyType_HasFeature(type, Py_TPFLAGS_VALID_VERSION_TAG) && type->tp_version_tag != 0) {
    if (cache->size() >= kMaxEntries) cache->clear();
    cache->emplace(type, ExchangeApiEntry{type->tp_version_tag, api});
    g_last_exchange_type = type;
    g_last_exchange = ExchangeApiEntry{type->tp_version_tag, api};
  }
  return api;
}

const DLPackExchangeAPI* exchange_api_of(nb::handle obj) {
  PyTypeObject* type = Py_TYPE(obj.ptr());
  if (type == g_last_exchange_type && PyType_HasFeature(type, Py_TPFLAGS_VALID_VERSION_TAG) &&
      type->tp_version_tag == g_last_exchange.tag && type->tp_version_tag != 0)
    return g_last_exchange.api;
  return lookup_exchange_api(type);
}

// obj.__dlpack_device__()[0], or kDLCUDA when obj has no __dlpack_device__.
std::int32_t device_type_of(nb::handle obj) {
  PyObject* self = obj.ptr();
  PyObject* dev = call_python([&] {
    return PyObject_VectorcallMethod(dlpack_names().dlpack_device, &self,
                                     1 | PY_VECTORCALL_ARGUMENTS_OFFSET, nullptr);
  });
  if (dev) return read_int_pair(nb::steal(dev), "__dlpack_device__()").first;
  if (!PyErr_ExceptionMatches(PyExc_AttributeError)) throw nb::python_error();
  PyErr_Clear();
  return kDLCUDA;
}

// obj.__dlpack__(stream=stream, max_version=(1, 3)); a producer from before DLPack 1.0, which
// knows neither max_version nor versioned capsules (a TypeError), gets stream= alone.
nb::object call_dlpack(nb::handle obj, nb::handle stream) {
  const DlpackNames& n = dlpack_names();
  PyObject* args[3] = {obj.ptr(), stream.ptr(), n.version13};
  // The producer's Python code runs here (see call_python).
  PyObject* r = call_python([&] {
    return PyObject_VectorcallMethod(n.dlpack, args, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET,
                                     n.stream_and_version);
  });
  if (r) return nb::steal(r);
  if (PyErr_ExceptionMatches(PyExc_AttributeError)) {
    PyErr_Clear();
    throw_error(Errc::type_error, "from_dlpack(): ", TypeNameOf{obj},
                " object has no __dlpack__ (expected a DLPack producer)");
  }
  if (!PyErr_ExceptionMatches(PyExc_TypeError)) throw nb::python_error();
  PyErr_Clear();
  const bool with_stream = !stream.is_none();
  r = call_python([&] {
    return PyObject_VectorcallMethod(n.dlpack, args, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET,
                                     with_stream ? n.stream_only : nullptr);
  });
  if (!r) throw nb::python_error();
  return nb::steal(r);
}

// Takes a capsule's tensor: renames the capsule "used_...", after which the owner returned
// runs the deleter.
ImportOwner consume_capsule(nb::handle capsule) {
  PyObject* cap = capsule.ptr();
  if (PyCapsule_IsValid(cap, kVersioned)) {
    auto* t = static_cast<DLManagedTensorVersioned*>(PyCapsule_GetPointer(cap, kVersioned));
    if (PyCapsule_SetName(cap, kVersionedUsed) != 0) throw nb::python_error();
    if (!t) throw_error(Errc::buffer_error, "from_dlpack(): the producer gave a NULL tensor");
    return ImportOwner::tensor(t);
  }
  if (PyCapsule_IsValid(cap, kLegacy)) {
    auto* t = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, kLegacy));
    if (PyCapsule_SetName(cap, kLegacyUsed) != 0) throw nb::python_error();
    if (!t) throw_error(Errc::buffer_error, "from_dlpack(): the producer gave a NULL tensor");
    return ImportOwner::tensor(t);
  }
  throw_error(Errc::type_error, "from_dlpack(): __dlpack__() returned ", TypeNameOf{capsule},
              ", expected an unconsumed PyCapsule named 'dltensor_versioned' or 'dltensor'");
}

// A tensor taken from its producer, and the stream the producer's work is on. Each road is
// out of line, so that the import's own code stays one short run of instructions.
struct TakenTensor {
  ImportOwner owner;
  std::optional<device::StreamHandle> producer_stream;
};

[[gnu::noinline]] TakenTensor take_from_exchange_api(const DLPackExchangeAPI* api, nb::handle obj) {
  DLManagedTensorVersioned* t = nullptr;
  if (call_python([&] { return api->managed_tensor_from_py_object_no_sync(obj.ptr(), &t); }) != 0)
    throw nb::python_error();
  if (!t) throw_error(Errc::buffer_error, "from_dlpack(): the producer gave a NULL tensor");
  TakenTensor taken{ImportOwner::tensor(t), std::nullopt};
  // No-sync exchange: the producer's work is on its current work stream.
  const DLDevice device = t->dl_tensor.device;
  if (is_cuda_like(device.device_type)) {
    void* work = nullptr;
    if (api->current_work_stream(static_cast<DLDeviceType>(device.device_type), device.device_id,
                                 &work) != 0)
      throw nb::python_error();
    taken.producer_stream =
        work ? reinterpret_cast<device::StreamHandle>(work) : device::kLegacyDefaultStream;
  }
  return taken;
}

[[gnu::noinline]] TakenTensor take_from_dlpack_method(nb::handle obj) {
  // Ask where the data is first: a CPU producer must not be given a CUDA stream.
  const std::int32_t device_type = device_type_of(obj);
  if (!is_cuda_like(device_type) || device_type == kDLCUDAHost)
    return {consume_capsule(call_dlpack(obj, nb::none())), std::nullopt};
  // The producer makes our default stream wait for its work; our work then follows it.
  const auto ours = library_default_stream().handle;
  return {consume_capsule(call_dlpack(obj, nb::int_(ours))), ours};
}

// A device copy of a host view (a CPU tensor imported with copy=True).
View host_to_device(const View& host, const sync::StreamRef& stream) {
  View dst = View::allocate(host.dtype(), host.shape(), false, stream);
  NoGil nogil;
  cai::copy_from_host(dst, host, stream);
  // The host memory belongs to the producer's tensor, released when `host` goes.
  device::backend().stream_synchronize(stream.handle);
  return dst;
}

// from_dlpack(..., device=target): the view itself when it is usable on the target device
// (there already, or pinned or managed memory, which every device reaches) and no copy is
// asked for; otherwise a copy on the target device, unless copy=false.
[[gnu::noinline]] std::optional<View> onto_device(const View& v, std::int32_t device_type,
                                                  int target, std::optional<bool> copy) {
  const int d = device_of(v);
  const bool usable = d < 0 || d == target || device_type != kDLCUDA;
  if (usable && copy != true) return std::nullopt;
  if (!usable && copy == false)
    throw_error(Errc::buffer_error, "from_dlpack(): the tensor is on device " + std::to_string(d) +
                                        ", not on device " + std::to_string(target) +
                                        ", and copy=False forbids the copy there");
  const DeviceGuard on(target);
  const sync::StreamRef stream = library_default_stream();  // the target's default stream
  View dst = View::allocate(v.dtype(), v.shape(), false, stream);
  NoGil nogil;  // a copy between devices may wait for its staging buffer
  cai::copy(dst, v, stream);
  return dst;
}

// Resolve -> View, for a tensor not taken as it is: a copy, a host tensor, a target device.
View view_of_import(Import&& imp, ImportOwner&& owner, const DlpackImport& info,
                    std::optional<bool> copy, const char* entry, std::optional<int> target) {
  // from_dlpack() speaks DLPack (BufferError); the CAI entry points (as_cuda_array, the ops)
  // follow Numba, whose callers catch TypeError for "not a GPU array".
  const bool dlpack_entry = copy.has_value() || std::string_view(entry) == "from_dlpack()";
  const Errc not_on_device = dlpack_entry ? Errc::buffer_error : Errc::type_error;
  if (info.device.device_type == kDLCPU) {
    // A target device asks for an array there: copying is the only way, unless forbidden.
    if (copy == false || (copy != true && !target))
      throw_error(
          not_on_device,
          std::string(entry) + ": the tensor is in CPU memory, not on the device; " +
              (!dlpack_entry ? "copy it with cai.to_device() or cai.from_dlpack(obj, copy=True)"
               : target      ? "copy=False forbids the copy to the device"
                             : "pass copy=True to copy it to the device"));
    const DeviceGuard on(target ? *target : -1);
    return host_to_device(std::move(imp).view(owner.share()), library_default_stream());
  }
  if (!is_cuda_like(info.device.device_type))
    throw_error(not_on_device, std::string(entry) + ": device type " +
                                   std::to_string(info.device.device_type) +
                                   " is not CUDA memory (expected kDLCUDA, kDLCUDAHost or "
                                   "kDLCUDAManaged)");
  imp.stream.resolve();
  View v = std::move(imp).view(owner.share());
  if (target) {
    if (auto moved = onto_device(v, info.device.device_type, *target, copy)) return *moved;
    return v;
  }
  if (copy == true) {
    const sync::StreamRef ref = stream_or_default(v);
    View dst = View::allocate(v.dtype(), v.shape(), false, ref);
    cai::copy(dst, v, ref);
    return dst;
  }
  return v;
}

// The import of a tensor not taken as it is. Out of line, as are onto_device and
// device_number: the import of a device tensor as it is stays one short run of code.
[[gnu::noinline]] nb::object finish_import(DlpackArray&& a, ImportStream&& stream,
                                           ImportOwner&& owner, std::optional<bool> copy,
                                           const char* entry, std::optional<int> target) {
  Import imp{a.ptr, a.info.readonly, std::move(a.layout), std::move(a.dtype), std::move(stream)};
  return wrap(view_of_import(std::move(imp), std::move(owner), a.info, copy, entry, target));
}

// The device of a `device=` argument, by cai.Device's own rule (an int in range, a
// cai.Device; None is handled by the caller).
[[gnu::noinline]] int device_number(nb::handle device) {
  if (PyUnicode_Check(device.ptr()))
    throw_error(Errc::type_error,
                "from_dlpack(): device=" + short_repr(device) +
                    ": cai arrays live in device memory; pass a cai.Device or a device number "
                    "(numpy.from_dlpack(x, device='cpu') makes host arrays)");
  if (PyTuple_Check(device.ptr())) {
    // A DLPack device, as __dlpack_device__() gives it: (device type, device id).
    const nb::tuple t = nb::borrow<nb::tuple>(device);
    if (t.size() != 2 || !PyLong_Check(t[0].ptr()) || !PyLong_Check(t[1].ptr()))
      throw_error(Errc::type_error, "from_dlpack(): device=" + short_repr(device) +
                                        ": a DLPack device is a tuple (device type, device id) "
                                        "of two ints");
    const long type = PyLong_AsLong(t[0].ptr());
    if (type != kDLCUDA)
      throw_error(Errc::value_error,
                  "from_dlpack(): device=" + short_repr(device) + ": DLPack device type " +
                      std::to_string(type) + " is not a CUDA device (kDLCUDA, 2); cai arrays " +
                      "live in device memory (numpy.from_dlpack(x, device='cpu') makes host " +
                      "arrays)");
    device = t[1];
  }
  nb::object d = nb::module_::import_("cai._cai").attr("Device")(device);
  return nb::cast<int>(d.attr("id"));
}

}  // namespace

bool has_dlpack(nb::handle obj) {
  return nb::hasattr(obj, "__dlpack__");
}

nb::object import_dlpack(nb::handle obj, std::optional<bool> copy, bool sync, const char* entry,
                         std::optional<int> target_device) {
  // 1. The tensor, and the stream its producer's work is on.
  const DLPackExchangeAPI* api = exchange_api_of(obj);
  TakenTensor taken = api ? take_from_exchange_api(api, obj) : take_from_dlpack_method(obj);
  // 2. The core's checks; the owner releases the tensor if they fail.
  const ImportOwner& owner = taken.owner;
  DlpackArray a =
      owner.versioned() ? read_dlpack(*owner.versioned()) : read_dlpack(*owner.legacy());
  // 3. The producer's stream, ordered after with sync (`sync` includes cai.config's switch,
  // read once by the caller).
  ImportStream stream = sync && taken.producer_stream
                            ? ImportStream::producer(*taken.producer_stream)
                            : ImportStream::none();
  // 4. Resolve -> wrap: a device tensor taken as it is, else through a View (a copy, a host
  // tensor, a target device).
  if (!is_cuda_like(a.info.device.device_type) || copy == true || target_device)
    return finish_import(std::move(a), std::move(stream), std::move(taken.owner), copy, entry,
                         target_device);
  stream.resolve();
  return wrap_import(a.ptr, a.info.readonly, std::move(a.layout), std::move(a.dtype),
                     std::move(stream), std::move(taken.owner));
}

// ----- the entries ------------------------------------------------------------------------------

namespace {

// Out of line: the parsed value's frame is set up only for a foreign array.
[[gnu::noinline]] nb::object import_foreign(nb::handle obj, bool sync, const char* entry) {
  return parse_array(obj, sync, entry).wrap();
}

}  // namespace

nb::object import_array(nb::handle obj, bool sync, const char* entry) {
  if (as_py_array(obj, entry)) return nb::borrow(obj);  // ours, as it is
  return import_foreign(obj, sync, entry);
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

namespace {

nb::object from_dlpack_call(PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  constexpr const char* entry = "from_dlpack()";
  static const std::array<PyObject*, 3> keys = {
      PyUnicode_InternFromString("obj"), PyUnicode_InternFromString("device"), dlpack_names().copy};
  std::array<PyObject*, 3> in = {nullptr, Py_None, Py_None};
  read_args(entry, args, static_cast<std::size_t>(nargs), kwnames, keys, 1, 1, in);
  nb::handle obj = in[0], device = in[1];
  std::optional<bool> copy;
  if (in[2] != Py_None) copy = read_bool(in[2], entry, "copy");
  nb::object host_array = host_array_device_view(obj);  // cai.MappedNDArray, ManagedNDArray
  if (host_array.is_valid()) obj = host_array;
  PyArray* ours = as_py_array(obj, entry);
  if (device.is_none()) {
    if (ours && copy != true) return nb::borrow(obj);
    return import_dlpack(obj, copy, import_sync(true), entry);
  }
  const int target = device_number(device);
  if (!ours) return import_dlpack(obj, copy, import_sync(true), entry, target);
  auto moved = onto_device(ours->view(), ours->device().device_type, target, copy);
  return moved ? wrap(std::move(*moved), ours->np_dtype) : nb::borrow(obj);
}

nb::object as_cuda_array_call(PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const std::array<PyObject*, 2> names = {PyUnicode_InternFromString("obj"),
                                                 PyUnicode_InternFromString("sync")};
  std::array<PyObject*, 2> in = {nullptr, Py_True};
  constexpr const char* entry = "as_cuda_array()";
  read_args(entry, args, static_cast<std::size_t>(nargs), kwnames, names, 2, 1, in);
  return import_array(in[0], read_bool(in[1], entry, "sync"), entry);
}

// The hot entries are plain METH_FASTCALL | METH_KEYWORDS C functions (fastcall.h), with no
// nanobind dispatch in front.
using EntryCall = nb::object (*)(PyObject* const*, Py_ssize_t, PyObject*);
template <EntryCall call>
PyObject* entry_function(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  return fastcall([&] { return call(args, nargs, kwnames); });
}
template <EntryCall call>
const PyCFunction fastcall_entry =
    reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&entry_function<call>));

void add_function(nb::module_& m, PyMethodDef& def) {
  m.attr(def.ml_name) = nb::steal(PyCFunction_NewEx(&def, nullptr, m.attr("__name__").ptr()));
}

}  // namespace

void bind_import(nb::module_& m) {
  static PyMethodDef as_cuda_array_def = {
      "as_cuda_array", fastcall_entry<as_cuda_array_call>, METH_FASTCALL | METH_KEYWORDS,
      "as_cuda_array(obj, sync=True)\n--\n\n"
      "A DeviceNDArray viewing any object with __cuda_array_interface__ (no copy); keeps `obj` "
      "alive. With sync (and cai.config.CUDA_ARRAY_INTERFACE_SYNC), later work is ordered after "
      "the producer's stream with events, without blocking: the default streams (1, 2) become "
      "the array's stream; any other stream is stood for by an event recorded at the import "
      "(the producer may destroy its stream afterwards)."};
  add_function(m, as_cuda_array_def);
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

  static PyMethodDef from_dlpack_def = {
      "from_dlpack", fastcall_entry<from_dlpack_call>, METH_FASTCALL | METH_KEYWORDS,
      "from_dlpack(obj, *, device=None, copy=None)\n--\n\n"
      "A DeviceNDArray from any DLPack producer (no copy). CPU tensors are copied to the "
      "device only with copy=True or a device. With `device` (a cai.Device or a number), the "
      "array is on that device: copied there when it is elsewhere (a BufferError with "
      "copy=False). The producer's work is ordered before cai's with events."};
  add_function(m, from_dlpack_def);
}

}  // namespace cai::python
