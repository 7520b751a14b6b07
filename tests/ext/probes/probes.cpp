// _cai_probes: test doubles that stand for other libraries, written only against the DLPack
// ABI header (no cai library, no cai internals), so that tests can drive cai's C exchange API
// as a foreign C++ consumer would, and cai's consumer through a foreign producer's table.
// A test-only extension (tests/ext/CMakeLists.txt); nothing of it ships.

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <cai/core/dlpack.h>

namespace nb = nanobind;

namespace {

const DLPackExchangeAPI* table_of(nb::handle obj) {
  nb::object cap =
      nb::borrow(reinterpret_cast<PyObject*>(Py_TYPE(obj.ptr()))).attr("__dlpack_c_exchange_api__");
  auto* api =
      static_cast<const DLPackExchangeAPI*>(PyCapsule_GetPointer(cap.ptr(), "dlpack_exchange_api"));
  if (!api) throw nb::python_error();
  return api;
}

nb::dict describe(const DLTensor& t) {
  nb::dict d;
  nb::list shape, strides;
  for (int i = 0; i < t.ndim; ++i) {
    shape.append(t.shape[i]);
    strides.append(t.strides ? nb::object(nb::int_(t.strides[i])) : nb::object(nb::none()));
  }
  d["shape"] = nb::tuple(shape);
  d["strides"] = nb::tuple(strides);
  d["data"] = reinterpret_cast<std::uintptr_t>(t.data) + t.byte_offset;
  d["device"] = nb::make_tuple(static_cast<int>(t.device.device_type), t.device.device_id);
  d["dtype"] = nb::make_tuple(t.dtype.code, t.dtype.bits, t.dtype.lanes);
  return d;
}

// A foreign producer: exports another array (a cai array) only through its own exchange
// table, which wraps the tensors of cai's table and counts their deletions.
struct ForeignProducer {
  nb::object array;
  const DLPackExchangeAPI* inner_api = nullptr;  // the array's table, found once (as a real
                                                 // producer has its own at hand)
  static inline std::atomic<int> deleted{0};
  static inline std::uint64_t work_stream = 0;  // what current_work_stream reports
};

struct ForeignCtx {
  DLManagedTensorVersioned managed{};
  DLManagedTensorVersioned* inner = nullptr;
};

int foreign_from_py_object(void* obj, DLManagedTensorVersioned** out) {
  try {
    auto* p = nb::inst_ptr<ForeignProducer>(nb::handle(static_cast<PyObject*>(obj)));
    DLManagedTensorVersioned* inner = nullptr;
    if (p->inner_api->managed_tensor_from_py_object_no_sync(p->array.ptr(), &inner) != 0) return -1;
    auto* ctx = new ForeignCtx;
    ctx->inner = inner;
    ctx->managed.version = {DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
    ctx->managed.manager_ctx = ctx;
    ctx->managed.flags = inner->flags;
    ctx->managed.dl_tensor = inner->dl_tensor;  // borrows the inner tensor's shape and strides
    ctx->managed.deleter = [](DLManagedTensorVersioned* m) {
      auto* c = static_cast<ForeignCtx*>(m->manager_ctx);
      c->inner->deleter(c->inner);
      delete c;
      ForeignProducer::deleted.fetch_add(1);
    };
    *out = &ctx->managed;
    return 0;
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_BufferError, e.what());
    return -1;
  }
}

int foreign_current_work_stream(DLDeviceType, std::int32_t, void** out) {
  *out = reinterpret_cast<void*>(ForeignProducer::work_stream);
  return 0;
}

int foreign_unsupported_alloc(DLTensor*, DLManagedTensorVersioned**, void* ctx,
                              void (*set_error)(void*, const char*, const char*)) {
  set_error(ctx, "NotImplementedError", "probe");
  return -1;
}

int foreign_unsupported_to_py(DLManagedTensorVersioned*, void**) {
  PyErr_SetString(PyExc_NotImplementedError, "probe");
  return -1;
}

const DLPackExchangeAPI g_foreign_api = {
    {{DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION}, nullptr},
    &foreign_unsupported_alloc,
    &foreign_from_py_object,
    &foreign_unsupported_to_py,
    nullptr,
    &foreign_current_work_stream,
};

}  // namespace

NB_MODULE(_cai_probes, p) {
  p.doc() = "Test doubles for the DLPack exchange API.";

  // cai's table, used the way a foreign C++ consumer would.
  p.def("exchange_export", [](nb::handle obj) {
    const DLPackExchangeAPI* api = table_of(obj);
    DLManagedTensorVersioned* t = nullptr;
    if (api->managed_tensor_from_py_object_no_sync(obj.ptr(), &t) != 0) throw nb::python_error();
    nb::dict d = describe(t->dl_tensor);
    d["version"] = nb::make_tuple(t->version.major, t->version.minor);
    d["flags"] = t->flags;
    t->deleter(t);
    return d;
  });
  p.def("exchange_borrow", [](nb::handle obj) {
    const DLPackExchangeAPI* api = table_of(obj);
    DLTensor t{};
    if (api->dltensor_from_py_object_no_sync(obj.ptr(), &t) != 0) throw nb::python_error();
    return describe(t);
  });
  p.def("exchange_current_stream", [](nb::handle obj, int device_type) {
    void* s = nullptr;
    if (table_of(obj)->current_work_stream(static_cast<DLDeviceType>(device_type), 0, &s) != 0)
      throw nb::python_error();
    return reinterpret_cast<std::uintptr_t>(s);
  });
  p.def("exchange_allocate_and_wrap", [](nb::handle obj, nb::tuple shape) {
    // allocator -> a new tensor; to_py_object -> the producer's Python type owns it.
    const DLPackExchangeAPI* api = table_of(obj);
    std::vector<std::int64_t> dims;
    for (nb::handle h : shape) dims.push_back(nb::cast<std::int64_t>(h));
    DLTensor proto{};
    proto.ndim = static_cast<std::int32_t>(dims.size());
    proto.shape = dims.data();
    proto.dtype = {kDLFloat, 32, 1};
    proto.device = {kDLCUDA, 0};
    DLManagedTensorVersioned* t = nullptr;
    std::string error;
    auto set_error = [](void* ctx, const char* kind, const char* msg) {
      *static_cast<std::string*>(ctx) = std::string(kind) + ": " + msg;
    };
    if (api->managed_tensor_allocator(&proto, &t, &error, set_error) != 0)
      throw nb::value_error(("allocator failed: " + error).c_str());
    void* out = nullptr;
    if (api->managed_tensor_to_py_object_no_sync(t, &out) != 0) throw nb::python_error();
    return nb::steal(static_cast<PyObject*>(out));
  });

  p.def("capsule_flags", [](nb::handle capsule) {
    auto* t = static_cast<DLManagedTensorVersioned*>(
        PyCapsule_GetPointer(capsule.ptr(), "dltensor_versioned"));
    if (!t) throw nb::python_error();
    return nb::make_tuple(t->flags, nb::make_tuple(t->version.major, t->version.minor));
  });

  // A foreign producer with its own table and no usable __dlpack__.
  nb::class_<ForeignProducer> cls(p, "ForeignProducer");
  cls.def("__init__",
          [](ForeignProducer* self, nb::handle arr) {
            new (self) ForeignProducer{nb::borrow(arr), table_of(arr)};  // it must have one
          })
      .def("__dlpack__",
           [](ForeignProducer&, nb::args, nb::kwargs) -> nb::object {
             PyErr_SetString(PyExc_BufferError, "ForeignProducer: use the C exchange API");
             throw nb::python_error();
           })
      .def_static("deleted", [] { return ForeignProducer::deleted.load(); })
      .def_static("set_work_stream", [](std::uint64_t s) { ForeignProducer::work_stream = s; });
  cls.attr("__dlpack_c_exchange_api__") = nb::steal(PyCapsule_New(
      const_cast<DLPackExchangeAPI*>(&g_foreign_api), "dlpack_exchange_api", nullptr));
}
