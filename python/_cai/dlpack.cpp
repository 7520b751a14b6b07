// DLPack in Python: DeviceNDArray.__dlpack__/__dlpack_device__, cai.from_dlpack, and the
// DLPack 1.3 C exchange API (type(x).__dlpack_c_exchange_api__), both as producer and consumer.

#include <nanobind/stl/optional.h>
#include <nanobind/stl/tuple.h>

#include <array>
#include <string>
#include <string_view>
#include <unordered_map>

#include "array.h"
#include "cai/arrays/devices.h"
#include "cai/arrays/dlpack.h"
#include "cai/arrays/ops.h"
#include "cai/core/error.h"

namespace cai::python {

namespace {

constexpr const char* kVersioned = "dltensor_versioned";
constexpr const char* kVersionedUsed = "used_dltensor_versioned";
constexpr const char* kLegacy = "dltensor";
constexpr const char* kLegacyUsed = "used_dltensor";
constexpr std::int64_t kNoSync = -1;

bool is_cuda_like(std::int32_t device_type) {
  return device_type == kDLCUDA || device_type == kDLCUDAHost || device_type == kDLCUDAManaged;
}

// ----- producer ------------------------------------------------------------------------------

// An unconsumed capsule still owns its tensor. Runs with the GIL, possibly during exception
// handling, so the error indicator is saved around it.
void versioned_capsule_destructor(PyObject* capsule) {
  if (PyCapsule_IsValid(capsule, kVersioned)) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    auto* t = static_cast<DLManagedTensorVersioned*>(PyCapsule_GetPointer(capsule, kVersioned));
    if (t && t->deleter) t->deleter(t);
    PyErr_Restore(type, value, tb);
  }
}

void legacy_capsule_destructor(PyObject* capsule) {
  if (PyCapsule_IsValid(capsule, kLegacy)) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    auto* t = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, kLegacy));
    if (t && t->deleter) t->deleter(t);
    PyErr_Restore(type, value, tb);
  }
}

template <class Managed>
nb::object make_capsule(Managed* t, const char* name, PyCapsule_Destructor destructor) {
  PyObject* cap = PyCapsule_New(t, name, destructor);
  if (!cap) {
    t->deleter(t);
    throw nb::python_error();
  }
  return nb::steal(cap);
}

int read_int32(nb::handle o, const char* what) {
  const std::int64_t v = read_int64(o, what, "an int", Errc::value_error);
  if (v < INT32_MIN || v > INT32_MAX)
    throw_error(Errc::value_error, std::string(what) + ": " + std::to_string(v) +
                                       " is out of range (a 32-bit integer is expected)");
  return static_cast<int>(v);
}

// A 2-tuple of ints, as (major, minor) or (device_type, device_id).
std::pair<int, int> read_int_pair(nb::handle o, const char* what) {
  if (!PyTuple_Check(o.ptr()) || PyTuple_GET_SIZE(o.ptr()) != 2)
    throw_error(Errc::type_error,
                std::string(what) + ": expected a tuple (int, int), got " + short_repr(o));
  return {read_int32(nb::handle(PyTuple_GET_ITEM(o.ptr(), 0)), what),
          read_int32(nb::handle(PyTuple_GET_ITEM(o.ptr(), 1)), what)};
}

std::optional<std::pair<int, int>> read_version(nb::handle max_version) {
  if (max_version.is_none()) return std::nullopt;
  return read_int_pair(max_version, "__dlpack__(): max_version");
}

nb::object dlpack_export(PyArray& self, nb::handle stream, nb::handle max_version,
                         nb::handle dl_device, nb::handle copy_arg) {
  const View& v = self.view;
  if (v.mask())
    throw_error(Errc::buffer_error,
                "__dlpack__(): the array is masked, and a DLPack tensor cannot carry a mask; "
                "export the data and its .mask separately");
  const auto version = read_version(max_version);
  const bool versioned = version && version->first >= 1;
  std::optional<bool> copy;
  if (!copy_arg.is_none()) {
    if (!PyBool_Check(copy_arg.ptr()))
      throw_error(Errc::type_error,
                  "__dlpack__(): copy: expected None or a bool, got " + type_name_of(copy_arg));
    copy = copy_arg.ptr() == Py_True;
  }

  const DLDevice here = dlpack_device(v);
  bool to_host = false;
  if (!dl_device.is_none()) {
    const auto [type, id] = read_int_pair(dl_device, "__dlpack__(): dl_device");
    if (type == kDLCPU && here.device_type != kDLCPU) {
      if (copy == false)
        throw_error(Errc::buffer_error,
                    "__dlpack__(): dl_device=(kDLCPU, 0) needs a copy from the device, but "
                    "copy=False");
      to_host = true;
    } else if (type != here.device_type || id != here.device_id) {
      throw_error(Errc::buffer_error,
                  "__dlpack__(): dl_device=" + format_dims(std::array<std::int64_t, 2>{type, id}) +
                      " is not where the array lives " +
                      format_dims(std::array<std::int64_t, 2>{here.device_type, here.device_id}) +
                      " and cai copies only to the CPU");
    }
  }

  // The consumer's stream: None = legacy default, -1 = do not synchronize, 0 = invalid.
  std::optional<device::StreamHandle> consumer;
  if (stream.is_none()) {
    if (is_cuda_like(here.device_type)) consumer = device::kLegacyDefaultStream;
  } else {
    // Any integer, a cai.Stream included (its __index__ is its handle).
    const auto s = read_int64(stream, "__dlpack__(): stream", "None or an int", Errc::buffer_error);
    if (s == 0)
      throw_error(Errc::buffer_error,
                  stream_zero_message("__dlpack__(): stream=",
                                      "1 (legacy default), 2 (per-thread default), a stream "
                                      "handle, or -1 for no synchronization"));
    if (s < kNoSync)
      throw_error(Errc::buffer_error,
                  "__dlpack__(): stream=" + std::to_string(s) + " is not a stream handle");
    if (s != kNoSync) consumer = static_cast<device::StreamHandle>(s);
  }

  std::uint64_t flags = 0;
  View out = v;
  if (to_host) {
    // A host copy in a NumPy array, owned by the tensor.
    nb::object np_dtype = numpy_dtype(v.dtype());
    nb::object host = numpy_module().attr("empty")(to_tuple(v.shape()), np_dtype);
    void* ptr = reinterpret_cast<void*>(nb::cast<std::uintptr_t>(host.attr("ctypes").attr("data")));
    auto s = v.sync()->stream();
    {
      NoGil nogil;
      copy_to_host(ptr, v, s ? *s : library_default_stream());
    }
    out = View(v.size() == 0 ? 0 : reinterpret_cast<std::uint64_t>(ptr), v.dtype(),
               Layout::c_contiguous(v.shape(), v.dtype().itemsize()), false,
               std::make_shared<sync::SyncState>(), keep_alive(host));
    flags |= DLPACK_FLAG_BITMASK_IS_COPIED;
  } else {
    if (copy == true) {
      auto s = v.sync()->stream();
      const sync::StreamRef ref = s ? *s : library_default_stream();
      out = View::allocate(v.dtype(), v.shape(), false, ref);
      cai::copy(out, v, ref);
      flags |= DLPACK_FLAG_BITMASK_IS_COPIED;
    }
    if (consumer) out.sync()->order_before(device::backend(), *consumer);
  }
  if (!to_host && copy != true && !v.readonly()) note_write();  // the consumer may write
  const DLDevice out_device = to_host ? DLDevice{kDLCPU, 0} : here;
  if (versioned)
    return make_capsule(to_dlpack_versioned(out, flags, &out_device), kVersioned,
                        versioned_capsule_destructor);
  if (copy == true || to_host) {
    // Legacy capsules cannot carry IS_COPIED; the copy is still a correct answer.
  }
  return make_capsule(to_dlpack_legacy(out, &out_device), kLegacy, legacy_capsule_destructor);
}

// ----- consumer ------------------------------------------------------------------------------

// Runs a producer's deleter with the GIL (Python producers need it), or leaks after shutdown.
template <class Managed>
void release_with_gil(Managed* t) {
  if (!t->deleter) return;
  if (!nb::is_alive()) return;
  if (PyGILState_Check()) {  // the usual case: released from Python code
    t->deleter(t);
    return;
  }
  WithGil gil;
  t->deleter(t);
}

// The exchange API of a type, found by a lookup in its MRO and cached per type WITHOUT a
// reference: a cached type can die, and its module with it. An entry is valid while the type
// keeps the version tag it had when it was cached: CPython gives a type a new tag (never one
// used before) whenever its attributes change, so a dead type's address reused by a new type,
// or a deleted or replaced attribute, both miss. Types without a table are cached too.
const DLPackExchangeAPI* exchange_api_of(nb::handle obj) {
  struct Entry {
    unsigned int tag;
    const DLPackExchangeAPI* api;
  };
  constexpr std::size_t kMaxEntries = 1024;  // then it starts over: dead types' entries go
  static auto* cache = new std::unordered_map<PyTypeObject*, Entry>;
  static PyObject* name = PyUnicode_InternFromString("__dlpack_c_exchange_api__");
  PyTypeObject* type = Py_TYPE(obj.ptr());
  if (auto it = cache->find(type); it != cache->end()) {
    if (PyType_HasFeature(type, Py_TPFLAGS_VALID_VERSION_TAG) && type->tp_version_tag != 0 &&
        type->tp_version_tag == it->second.tag)
      return it->second.api;
    cache->erase(it);
  }
  const DLPackExchangeAPI* api = nullptr;
  // No AttributeError is raised and formatted for the many types that have no table, and the
  // lookup gives the type a version tag.
  if (PyObject* attr = _PyType_Lookup(type, name)) {
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
    cache->emplace(type, Entry{type->tp_version_tag, api});
  }
  return api;
}

nb::object call_dlpack(nb::handle obj, nb::handle stream) {
  PyObject* m = call_python([&] { return PyObject_GetAttrString(obj.ptr(), "__dlpack__"); });
  if (!m) {
    if (!PyErr_ExceptionMatches(PyExc_AttributeError)) throw nb::python_error();
    PyErr_Clear();
    throw_error(Errc::type_error, "from_dlpack(): " + type_name_of(obj) +
                                      " object has no __dlpack__ (expected a DLPack producer)");
  }
  nb::object method = nb::steal(m);
  nb::tuple no_args = nb::make_tuple();
  nb::dict versioned, kwargs;
  versioned["stream"] = stream;
  versioned["max_version"] = nb::make_tuple(1, 3);
  if (!stream.is_none()) kwargs["stream"] = stream;
  // The producer's Python code runs here (see call_python).
  PyObject* r =
      call_python([&] { return PyObject_Call(method.ptr(), no_args.ptr(), versioned.ptr()); });
  if (r) return nb::steal(r);
  if (!PyErr_ExceptionMatches(PyExc_TypeError)) throw nb::python_error();
  PyErr_Clear();
  // A producer from before DLPack 1.0 knows neither max_version nor versioned capsules.
  r = call_python([&] { return PyObject_Call(method.ptr(), no_args.ptr(), kwargs.ptr()); });
  if (!r) throw nb::python_error();
  return nb::steal(r);
}

// Consumes a capsule: renames it "used_..." and gives its tensor to a View.
View consume_capsule(nb::handle capsule, DlpackImport& info) {
  PyObject* cap = capsule.ptr();
  if (PyCapsule_IsValid(cap, kVersioned)) {
    auto* t = static_cast<DLManagedTensorVersioned*>(PyCapsule_GetPointer(cap, kVersioned));
    if (PyCapsule_SetName(cap, kVersionedUsed) != 0) throw nb::python_error();
    return from_dlpack(t, nullptr, &release_with_gil<DLManagedTensorVersioned>, &info);
  }
  if (PyCapsule_IsValid(cap, kLegacy)) {
    auto* t = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, kLegacy));
    if (PyCapsule_SetName(cap, kLegacyUsed) != 0) throw nb::python_error();
    return from_dlpack(t, nullptr, &release_with_gil<DLManagedTensor>, &info);
  }
  throw_error(Errc::type_error,
              "from_dlpack(): __dlpack__() returned " + type_name_of(capsule) +
                  ", expected an unconsumed PyCapsule named 'dltensor_versioned' or 'dltensor'");
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
std::optional<View> onto_device(const View& v, std::int32_t device_type, int target,
                                std::optional<bool> copy) {
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

View finish_import(View v, const DlpackImport& info, std::optional<bool> copy,
                   std::optional<device::StreamHandle> producer_stream, bool sync,
                   const char* entry, std::optional<int> target) {
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
    return host_to_device(v, library_default_stream());
  }
  if (!is_cuda_like(info.device.device_type))
    throw_error(not_on_device, std::string(entry) + ": device type " +
                                   std::to_string(info.device.device_type) +
                                   " is not CUDA memory (expected kDLCUDA, kDLCUDAHost or "
                                   "kDLCUDAManaged)");
  if (sync && producer_stream && config().import_sync)
    v.sync()->set_imported(device::backend(), *producer_stream);
  if (target) {
    if (auto moved = onto_device(v, info.device.device_type, *target, copy)) return *moved;
    return v;
  }
  if (copy == true) {
    auto s = v.sync()->stream();
    const sync::StreamRef ref = s ? *s : library_default_stream();
    View dst = View::allocate(v.dtype(), v.shape(), false, ref);
    cai::copy(dst, v, ref);
    return dst;
  }
  return v;
}

// The device of a `device=` argument, by cai.Device's own rule (an int in range, a
// cai.Device; None is handled by the caller).
int device_number(nb::handle device) {
  if (PyUnicode_Check(device.ptr()))
    throw_error(Errc::type_error,
                "from_dlpack(): device=" + short_repr(device) +
                    ": cai arrays live in device memory; pass a cai.Device or a device number "
                    "(numpy.from_dlpack(x, device='cpu') makes host arrays)");
  nb::object d = nb::module_::import_("cai._cai").attr("Device")(device);
  return nb::cast<int>(d.attr("id"));
}

// ----- our C exchange API table ----------------------------------------------------------------

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

int api_from_py_object(void* py_object, DLManagedTensorVersioned** out) {
  return guarded([&] {
    PyArray* a = as_py_array(static_cast<PyObject*>(py_object), "dlpack exchange API");
    if (!a) throw_error(Errc::type_error, "dlpack exchange API: not a cai.DeviceNDArray");
    if (!a->view.readonly()) note_write();
    *out = to_dlpack_versioned(a->view);
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
    PyArray* a = as_py_array(static_cast<PyObject*>(py_object), "dlpack exchange API");
    if (!a) throw_error(Errc::type_error, "dlpack exchange API: not a cai.DeviceNDArray");
    if (!a->view.readonly()) note_write();
    if (!a->element_strides)
      a->element_strides = std::make_unique<const Dims>(a->view.layout().element_strides());
    fill_dltensor(a->view, *a->element_strides, *out);
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

bool has_dlpack(nb::handle obj) {
  return nb::hasattr(obj, "__dlpack__");
}

View import_dlpack(nb::handle obj, std::optional<bool> copy, bool sync, const char* entry,
                   std::optional<int> target_device) {
  DlpackImport info{};
  if (const DLPackExchangeAPI* api = exchange_api_of(obj)) {
    DLManagedTensorVersioned* t = nullptr;
    if (call_python([&] { return api->managed_tensor_from_py_object_no_sync(obj.ptr(), &t); }) != 0)
      throw nb::python_error();
    View v = from_dlpack(t, nullptr, &release_with_gil<DLManagedTensorVersioned>, &info);
    // No-sync exchange: the producer's work is on its current work stream.
    void* producer = nullptr;
    if (is_cuda_like(info.device.device_type) &&
        api->current_work_stream(static_cast<DLDeviceType>(info.device.device_type),
                                 info.device.device_id, &producer) != 0)
      throw nb::python_error();
    std::optional<device::StreamHandle> ps;
    if (producer)
      ps = reinterpret_cast<device::StreamHandle>(producer);
    else if (is_cuda_like(info.device.device_type))
      ps = device::kLegacyDefaultStream;
    return finish_import(std::move(v), info, copy, ps, sync, entry, target_device);
  }
  // Ask where the data is first: a CPU producer must not be given a CUDA stream.
  std::int32_t device_type = kDLCUDA;
  static PyObject* name = PyUnicode_InternFromString("__dlpack_device__");
  PyObject* method = call_python([&] { return PyObject_GetAttr(obj.ptr(), name); });
  if (method) {
    nb::object m = nb::steal(method);
    PyObject* dev = call_python([&] { return PyObject_CallNoArgs(m.ptr()); });
    if (!dev) throw nb::python_error();
    device_type = read_int_pair(nb::steal(dev), "__dlpack_device__()").first;
  } else if (PyErr_ExceptionMatches(PyExc_AttributeError)) {
    PyErr_Clear();
  } else {
    throw nb::python_error();
  }
  nb::object stream = nb::none();
  std::optional<device::StreamHandle> ps;
  if (is_cuda_like(device_type) && device_type != kDLCUDAHost) {
    // The producer makes our default stream wait for its work; our work then follows it.
    const auto ours = library_default_stream().handle;
    stream = nb::int_(ours);
    ps = ours;
  }
  nb::object capsule = call_dlpack(obj, stream);
  View v = consume_capsule(capsule, info);
  return finish_import(std::move(v), info, copy, ps, sync, entry, target_device);
}

void bind_dlpack(nb::module_& m) {
  nb::handle cls = nb::type<PyArray>();
  cls.attr("__dlpack__") = nb::cpp_function(
      exit_safe(&dlpack_export), nb::is_method(), nb::scope(cls), nb::name("__dlpack__"),
      nb::kw_only(), nb::arg("stream") = nb::none(), nb::arg("max_version") = nb::none(),
      nb::arg("dl_device") = nb::none(), nb::arg("copy") = nb::none(),
      "Exports the array as a DLPack capsule ('dltensor_versioned' when max_version >= (1, 0)). "
      "`stream` is the consumer's: it is made to wait for the array's work (-1: no ordering).");
  cls.attr("__dlpack_device__") = nb::cpp_function(
      [](PyArray& self) {
        const DLDevice d = dlpack_device(self.view);
        return nb::make_tuple(static_cast<int>(d.device_type), d.device_id);
      },
      nb::is_method(), nb::scope(cls), nb::name("__dlpack_device__"));
  // Static, alive for the whole process, as the exchange API requires.
  cls.attr("__dlpack_c_exchange_api__") = nb::steal(PyCapsule_New(
      const_cast<DLPackExchangeAPI*>(&g_exchange_api), "dlpack_exchange_api", nullptr));

  m.def("from_dlpack", exit_safe([](nb::handle obj, nb::handle device, std::optional<bool> copy) {
          PyArray* ours = as_py_array(obj, "from_dlpack()");
          if (device.is_none()) {
            if (ours && copy != true) return nb::borrow(obj);
            return wrap(import_dlpack(obj, copy, true, "from_dlpack()"));
          }
          const int target = device_number(device);
          if (!ours) return wrap(import_dlpack(obj, copy, true, "from_dlpack()", target));
          auto moved = onto_device(ours->view, dlpack_device(ours->view).device_type, target, copy);
          return moved ? wrap(std::move(*moved), ours->np_dtype) : nb::borrow(obj);
        }),
        nb::arg("obj").none(), nb::kw_only(), nb::arg("device").none() = nb::none(),
        nb::arg("copy") = nb::none(),
        "A DeviceNDArray from any DLPack producer (no copy). CPU tensors are copied to the "
        "device only with copy=True or a device. With `device` (a cai.Device or a number), the "
        "array is on that device: copied there when it is elsewhere (a BufferError with "
        "copy=False). The producer's work is ordered before cai's with events.");
}

}  // namespace cai::python
