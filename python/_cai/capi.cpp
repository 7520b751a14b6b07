// Publishes the C API of include/cai/capi.h as the capsule cai._cai._C_API: the one runtime of
// the process, used by extension modules that link no cai library. A CaiArray* is the
// PyObject* of a cai.DeviceNDArray.

#include "cai/capi.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "array.h"
#include "bindings.h"
#include "cai/arrays/devices.h"
#include "cai/arrays/dlpack.h"
#include "cai/arrays/typed_view.h"
#include "cai/device/simulator.h"
#include "cai/version.h"
#include "convert.h"
#include "errors.h"
#include "import.h"
#include "streams.h"

#define CAI_CAPI_STR2(x) #x
#define CAI_CAPI_STR(x) CAI_CAPI_STR2(x)

struct CaiOrder {
  std::optional<cai::KernelOperands> operands;  // the device, current until order_end
  cai::sync::StreamOrder order;
  std::vector<std::shared_ptr<cai::sync::SyncState>> states;  // kept until finish()
};

namespace cai::python {

namespace {

PyObject* object_of(CaiArray* a) noexcept {
  return reinterpret_cast<PyObject*>(a);
}

// The array behind a handle (a cai.DeviceNDArray, by construction).
PyArray& array_of(CaiArray* a) {
  PyArray* p = a ? as_py_array(nb::handle(object_of(a))) : nullptr;
  if (!p) throw_error(Errc::type_error, "cai C API: not a CaiArray handle");
  return *p;
}

sync::StreamRef stream_ref(const CaiStream& s) {
  if (s.handle == 0) return library_default_stream();
  return {s.handle, keep_alive(nb::handle(s.owner))};
}

void require_size(std::uint32_t given, std::size_t needed, const char* what) {
  if (given < needed)
    throw_error(Errc::value_error, std::string("cai C API: ") + what + ".size is " +
                                       std::to_string(given) + ", expected at least " +
                                       std::to_string(needed));
}

// The typed-view spec of a request, built once per distinct request (a module's static
// constexpr): found by content, so that an unloaded module's address reused cannot mislead.
const TypedViewSpec& spec_of(const CaiArrayRequest& r) {
  require_size(r.size, sizeof(CaiArrayRequest), "CaiArrayRequest");
  struct Entry {
    CaiArrayRequest request;
    TypedViewSpec spec;
  };
  static constexpr std::size_t kEntries = 16;
  static auto* entries = new std::optional<Entry>[kEntries];  // with the GIL; leaked
  static std::size_t next = 0;
  for (std::size_t i = 0; i < kEntries && entries[i]; ++i)
    if (std::memcmp(&entries[i]->request, &r, sizeof r) == 0) return entries[i]->spec;
  TypedViewSpec spec;
  spec.dtype = DType::from_dlpack(r.dtype);
  spec.item_size = r.item_size;
  spec.alignment = r.alignment;
  spec.ndim = r.ndim;
  spec.writable = (r.flags & CAI_REQUIRE_WRITABLE) != 0;
  spec.c_contiguous = (r.flags & CAI_REQUIRE_C_CONTIG) != 0;
  spec.f_contiguous = (r.flags & CAI_REQUIRE_F_CONTIG) != 0;
  spec.allow_mask = (r.flags & CAI_ALLOW_MASK) != 0;
  std::optional<Entry>& e = entries[next++ % kEntries];
  e.emplace(Entry{r, std::move(spec)});
  return e->spec;
}

// The typed-view answer for the last request an array passed (by content: an unloaded
// module's address may be reused): a repeated argument of one signature is a compare and a copy.
bool fitted(PyArray& a, const CaiArrayRequest& r, std::int64_t* element_strides) noexcept {
  const PyArray::Fit* f = a.fit ? &*a.fit : nullptr;
  if (!f || r.size < sizeof r || std::memcmp(&f->request, &r, sizeof r) != 0) return false;
  if (element_strides)
    std::copy(f->element_strides.begin(), f->element_strides.end(), element_strides);
  return true;
}

void remember_fit(PyArray& a, const CaiArrayRequest& r, const std::int64_t* strides,
                  std::int64_t* element_strides) {
  const auto n = static_cast<std::size_t>(a.ndim());
  if (element_strides) std::copy(strides, strides + n, element_strides);
  PyArray::Fit& f = a.fit.emplace();
  std::memcpy(&f.request, &r, sizeof r);
  f.element_strides.assign(std::span<const std::int64_t>(strides, n));
}

// Fills `out` for the array `a` held by `obj`, taking over the reference.
void describe(PyArray& a, nb::object obj, CaiArrayInfo& out) {
  out.ndim = a.ndim();
  out.data = a.ptr();
  out.shape = a.shape().data();
  out.strides = a.strides().data();
  const PyArray::CType& c = a.c_type();
  out.dtype = c.dtype;
  out.readonly = a.readonly() ? 1 : 0;
  out.itemsize = a.dtype().itemsize();
  // The stream of the pending work, which work may be enqueued on after (none when nothing is
  // pending, or behind an import event: the C API's order_begin waits for that).
  const auto stream = a.has_work() ? a.stream_handle() : std::nullopt;
  out.stream = stream ? *stream : 0;
  out.has_mask = a.masked() ? 1 : 0;
  std::memcpy(out.typestr, c.typestr, sizeof out.typestr);
  out.array = reinterpret_cast<CaiArray*>(obj.release().ptr());
}

// Whether obj is an array in host memory (DLPack's CPU device): what the typed import refuses
// with a message of its own rather than as "not an array". Asked only after an import failed.
bool in_host_memory(nb::handle obj) {
  try {
    if (!nb::hasattr(obj, "__dlpack_device__")) return false;
    nb::tuple device = nb::cast<nb::tuple>(obj.attr("__dlpack_device__")());
    return device.size() == 2 && nb::cast<int>(device[0]) == 1;  // kDLCPU
  } catch (...) {
    return false;  // the import's own error is the one reported
  }
}

std::string host_memory_message(nb::handle obj, const char* who) {
  std::string what = type_name_of(obj);
  nb::object dtype = nb::getattr(obj, "dtype", nb::none());
  nb::object text = nb::steal(dtype.is_none() ? nullptr : PyObject_Str(dtype.ptr()));
  const char* name = text.is_valid() ? PyUnicode_AsUTF8(text.ptr()) : nullptr;
  if (name) what += std::string(" of ") + name;
  PyErr_Clear();  // a dtype without a text is left out
  return std::string(who) + ": got a " + what +
         " in host memory; this argument takes GPU arrays and copies nothing to the device "
         "implicitly: copy it first (cai.to_device(x))";
}

// The C API's import of an array that has not fitted `request` before (or with no request):
// a foreign one is imported as by cai.as_cuda_array, its producer's stream ordered after only
// once it fits. Returns 1 when it does not fit (the TypeError set unless CAI_IMPORT_QUIET).
[[gnu::noinline]] int import_and_fit(nb::handle h, PyArray* cai_array,
                                     const CaiArrayRequest* request, const char* who,
                                     std::uint32_t options, CaiArrayInfo& out,
                                     std::int64_t* element_strides) {
  // Classify -> parse.
  std::optional<ParsedArray> parsed;  // a foreign array's (ours: nothing to parse)
  if (!cai_array) {
    try {
      parsed.emplace(parse_array(h, true, who));
    } catch (...) {
      // A host array is an array that does not fit (the caster's second pass says why),
      // not "no array" (nanobind's generic message).
      if (!request || !in_host_memory(h)) throw;
      if (!(options & CAI_IMPORT_QUIET))
        PyErr_SetString(PyExc_TypeError, host_memory_message(h, who).c_str());
      return 1;
    }
    if (parsed->array.is_valid()) cai_array = as_py_array(parsed->array);
  }
  // The typed check, on the fields: a foreign array it refuses costs no driver call.
  const Interface* f = parsed ? &parsed->fields : nullptr;  // used when !cai_array
  std::int64_t strides[max_ndim];
  if (request) {
    const TypedViewSpec& spec = spec_of(*request);
    const TypedViewMismatch m =
        cai_array ? check_typed_view(cai_array->ptr(), cai_array->dtype(), cai_array->layout(),
                                     cai_array->readonly(), cai_array->masked(), spec, strides)
                  : check_typed_view(f->ptr, f->dtype, f->layout, f->readonly,
                                     parsed->mask != nullptr, spec, strides);
    if (m != TypedViewMismatch::none) {
      if (!(options & CAI_IMPORT_QUIET)) {
        const std::string message =
            cai_array ? typed_view_message(cai_array->view(), spec, m, who)
                      : typed_view_message(
                            Import{f->ptr, f->readonly, f->layout, f->dtype}.unresolved_view(),
                            spec, m, who);
        PyErr_SetString(PyExc_TypeError, message.c_str());
      }
      return 1;
    }
  } else if (element_strides) {
    const Layout& layout = cai_array ? cai_array->layout() : f->layout;
    if (!layout.try_element_strides(element_strides))
      (void)layout.element_strides();  // throws the rule's message
  }
  // Resolve -> wrap.
  nb::object array = parsed ? std::move(*parsed).wrap() : nb::borrow(h);
  PyArray& a = cai_array ? *cai_array : *as_py_array(array);
  if (request) remember_fit(a, *request, strides, element_strides);
  describe(a, std::move(array), out);
  return 0;
}

// The C API's import, the caster's per-argument path: a cai array that passed this very
// request before keeps its answer (the layout, dtype and flags of an array never change), so
// it costs a type check, a compare and a struct filled in, as one asked for with no request
// and no element strides; anything else is import_and_fit.
int capi_import_array(PyObject* obj, const CaiArrayRequest* request, const char* entry,
                      std::uint32_t options, CaiArrayInfo* out,
                      std::int64_t* element_strides) noexcept {
  int fits = 0;
  const int rc = guarded([&] {
    require_size(out->size, sizeof(CaiArrayInfo), "CaiArrayInfo");
    nb::handle h(obj);
    PyArray* cai_array = as_py_array(h);
    if (cai_array && (request ? fitted(*cai_array, *request, element_strides) : !element_strides))
      describe(*cai_array, nb::borrow(h), *out);
    else
      fits = import_and_fit(h, cai_array, request, entry ? entry : "cai C API", options, *out,
                            element_strides);
  });
  return rc != 0 ? -1 : fits;
}

void capi_retain_array(CaiArray* a) noexcept {
  if (!a || py_finalizing()) return;
  if (PyGILState_Check()) {  // the usual case, and much cheaper than taking the GIL
    Py_INCREF(object_of(a));
    return;
  }
  PyGILState_STATE st = PyGILState_Ensure();
  Py_INCREF(object_of(a));
  PyGILState_Release(st);
}

void capi_release_array(CaiArray* a) noexcept {
  // After finalization no Python call is legal: the reference is leaked, like the owners.
  if (!a || !nb::is_alive() || py_finalizing()) return;
  if (PyGILState_Check()) {
    Py_DECREF(object_of(a));
    return;
  }
  PyGILState_STATE st = PyGILState_Ensure();
  Py_DECREF(object_of(a));
  PyGILState_Release(st);
}

PyObject* capi_array_to_python(CaiArray* a) noexcept {
  PyObject* out = nullptr;
  guarded([&] {
    (void)array_of(a);
    out = object_of(a);
    Py_INCREF(out);
  });
  return out;
}

int capi_array_device(CaiArray* a, DLDevice* out) noexcept {
  return guarded([&] { *out = array_of(a).device(); });
}

int capi_new_array(const CaiArraySpec* spec, CaiArrayInfo* out,
                   std::int64_t* element_strides) noexcept {
  return guarded([&] {
    require_size(spec->size, sizeof(CaiArraySpec), "CaiArraySpec");
    require_size(out->size, sizeof(CaiArrayInfo), "CaiArrayInfo");
    if (spec->ndim < 0 || spec->ndim > max_ndim || (spec->ndim > 0 && !spec->shape))
      throw_error(Errc::value_error, "new_array(): ndim " + std::to_string(spec->ndim) +
                                         " needs 0 <= ndim <= " + std::to_string(max_ndim) +
                                         " and a shape");
    std::span<const std::int64_t> shape(spec->shape, static_cast<std::size_t>(spec->ndim));
    View v = View::allocate(DType::from_dlpack(spec->dtype), shape, spec->fortran_order != 0,
                            stream_ref(spec->stream));
    if (element_strides) v.layout().try_element_strides(element_strides);
    nb::object obj = wrap(std::move(v));
    PyArray& a = *as_py_array(obj);
    describe(a, std::move(obj), *out);
  });
}

// What keeps wrapped memory alive: the caller's Python owner and its release callback.
struct MemoryOwner {
  std::shared_ptr<const void> python;
  void* context = nullptr;
  void (*release)(void*) = nullptr;
  MemoryOwner() = default;
  MemoryOwner(const MemoryOwner&) = delete;
  MemoryOwner& operator=(const MemoryOwner&) = delete;
  ~MemoryOwner() {
    if (release) release(context);
  }
};

PyObject* capi_wrap_memory(const CaiMemory* m) noexcept {
  PyObject* out = nullptr;
  // Made first, so that every failure below still releases the caller's context once.
  auto owner = std::make_shared<MemoryOwner>();
  owner->context = m->context;
  owner->release = m->release_context;
  guarded([&] {
    require_size(m->size, sizeof(CaiMemory), "CaiMemory");
    if (m->ndim < 0 || m->ndim > max_ndim || (m->ndim > 0 && !m->shape))
      throw_error(Errc::value_error, "make_array(): ndim " + std::to_string(m->ndim) +
                                         " needs 0 <= ndim <= " + std::to_string(max_ndim) +
                                         " and a shape");
    const auto n = static_cast<std::size_t>(m->ndim);
    DType dtype = m->typestr ? DType::from_typestr(m->typestr) : DType::from_dlpack(m->dtype);
    std::span<const std::int64_t> shape(m->shape, n);
    Layout layout = m->strides
                        ? Layout(Dims(shape), Dims(std::span(m->strides, n)), dtype.itemsize())
                        : Layout::c_contiguous(shape, dtype.itemsize());
    const std::uint64_t ptr = layout.size() == 0 ? 0 : m->data;
    owner->python = keep_alive(nb::handle(m->owner));
    auto state = m->stream.handle != 0 ? std::make_shared<sync::SyncState>(stream_ref(m->stream))
                                       : std::make_shared<sync::SyncState>();
    View v(ptr, std::move(dtype), std::move(layout), m->readonly != 0, std::move(state),
           std::shared_ptr<const void>(owner, owner.get()));
    owner.reset();
    out = wrap(std::move(v)).release().ptr();
  });
  return out;
}

int capi_read_stream(PyObject* obj, const char* entry, CaiStream* out) noexcept {
  return guarded([&] {
    const sync::StreamRef ref =
        stream_arg(nb::handle(obj), entry ? entry : "stream=", library_default_stream());
    out->handle = ref.handle;
    // What keeps the stream alive is the argument itself (a cai.Stream, a __cuda_stream__
    // object); integer handles and the defaults need nothing.
    out->owner = ref.owner ? obj : nullptr;
    Py_XINCREF(out->owner);
  });
}

int capi_order_begin(const CaiStream* work, CaiArray* const* arrays, std::size_t count,
                     CaiOrder** out) noexcept {
  *out = nullptr;
  return guarded([&] {
    const sync::StreamRef stream = stream_ref(*work);
    // An extension's kernel dereferences the arrays itself: checked as cai's own operations
    // check their operands, and run on their device.
    std::vector<std::string> names;
    std::vector<NamedView> views;
    names.reserve(count);
    views.reserve(count);
    for (std::size_t i = 0; i < count; ++i) {
      names.push_back("array " + std::to_string(i));
      views.push_back({names.back().c_str(), &array_of(arrays[i]).view()});
    }
    auto order = std::unique_ptr<CaiOrder>(
        new CaiOrder{std::nullopt, sync::StreamOrder(device::backend(), stream), {}});
    order->operands.emplace("cai C API order_begin()", views, stream);
    order->states.reserve(count);
    for (std::size_t i = 0; i < count; ++i) {
      order->states.push_back(views[i].view->sync());
      order->order.add(*order->states.back());
    }
    *out = order.release();
  });
}

int capi_order_end(CaiOrder* order) noexcept {
  std::unique_ptr<CaiOrder> owned(order);
  if (!owned) return 0;
  return guarded([&] { owned->order.finish(); });
}

int capi_backend_kind(std::int32_t* out) noexcept {
  return guarded(
      [&] { *out = device::backend().simulated() ? CAI_BACKEND_SIMULATOR : CAI_BACKEND_CUDA; });
}

int capi_current_device(std::int32_t* out) noexcept {
  return guarded([&] { *out = device::backend().current_device(); });
}

int capi_enqueue_host_task(const CaiStream* stream, CaiArray* const* arrays,
                           const std::uint8_t* writes, std::size_t count,
                           const CaiHostTask* task) noexcept {
  // Made first, so that destroy runs once whatever happens: after the task ran, or when it
  // was never enqueued.
  std::shared_ptr<void> context(task->context, task->destroy);
  return guarded([&] {
    require_size(task->size, offsetof(CaiHostTask, run_at) + sizeof task->run_at,
                 "CaiHostTask (a module built against cai C API version 1: rebuild it)");
    std::vector<device::sim::Access> accesses;
    accesses.reserve(count);
    for (std::size_t i = 0; i < count; ++i) {
      const View& v = array_of(arrays[i]).view();
      accesses.push_back({v.ptr(), v.shape(), v.strides(),
                          static_cast<std::size_t>(v.dtype().itemsize()), writes[i] != 0});
    }
    std::string name = task->name ? task->name : "host task";
    auto run = task->run_at;
    device::sim::enqueue_task(
        stream->handle != 0 ? stream->handle : library_default_stream().handle, accesses,
        [context = std::move(context), run](std::span<const std::uint64_t> host) {
          if (const char* error = run(context.get(), host.data()))
            throw_error(Errc::device_error, error);  // the simulator names the task
        },
        name);
  });
}

void capi_set_error(std::int32_t code, const char* message) noexcept {
  if (code < 0 || code > static_cast<std::int32_t>(Errc::race)) code = CAI_ERROR_VALUE;
  set_python_error(Error(static_cast<Errc>(code), message ? message : ""));
}

static_assert(CAI_ERROR_TYPE == static_cast<int>(Errc::type_error) &&
                  CAI_ERROR_VALUE == static_cast<int>(Errc::value_error) &&
                  CAI_ERROR_INDEX == static_cast<int>(Errc::index_error) &&
                  CAI_ERROR_OVERFLOW == static_cast<int>(Errc::overflow) &&
                  CAI_ERROR_NOT_IMPLEMENTED == static_cast<int>(Errc::not_implemented) &&
                  CAI_ERROR_BUFFER == static_cast<int>(Errc::buffer_error) &&
                  CAI_ERROR_DEVICE == static_cast<int>(Errc::device_error) &&
                  CAI_ERROR_RACE == static_cast<int>(Errc::race),
              "capi.h's CAI_ERROR_* must follow cai::Errc");

// The table, from the one slot list of capi.h: slot NAME holds capi_NAME.
#define CAI_CAPI_FILL(ret, name, params, since) &capi_##name,
const CaiCApi g_table = {CAI_CAPI_VERSION, sizeof(CaiCApi),
                         CAI_CAPI_STR(CAI_VERSION_MAJOR) "." CAI_CAPI_STR(
                             CAI_VERSION_MINOR) "." CAI_CAPI_STR(CAI_VERSION_PATCH),
                         CAI_CAPI_SLOTS(CAI_CAPI_FILL)};
#undef CAI_CAPI_FILL

// The slots follow the header fields in list order, one pointer each: the ABI that modules
// built by other compilers rely on (tests/python/test_capi_layout.py checks it from there).
constexpr std::size_t kFirstSlot = offsetof(CaiCApi, import_array);
static_assert(kFirstSlot == 2 * sizeof(std::uint32_t) + sizeof(const char*));
#define CAI_CAPI_INDEX(ret, name, params, since) slot_##name,
enum SlotIndex : std::size_t { CAI_CAPI_SLOTS(CAI_CAPI_INDEX) slot_count };
#undef CAI_CAPI_INDEX
#define CAI_CAPI_OFFSET(ret, name, params, since)                                    \
  static_assert(offsetof(CaiCApi, name) == kFirstSlot + slot_##name * sizeof(void*), \
                "capi.h: slot " #name " is not where the slot list puts it");
CAI_CAPI_SLOTS(CAI_CAPI_OFFSET)
#undef CAI_CAPI_OFFSET
static_assert(sizeof(CaiCApi) == kFirstSlot + slot_count * sizeof(void*));

}  // namespace

void bind_capi(nb::module_& m) {
  m.attr("_C_API") =
      nb::steal(PyCapsule_New(const_cast<CaiCApi*>(&g_table), CAI_CAPI_CAPSULE, nullptr));
  // The typed-view rule for cai.Array (python/cai/_tile.py), the same as the C API's.
  m.def(
      "_element_strides",
      [](nb::handle array) {
        PyArray* a = as_py_array(array);
        if (!a) throw_error(Errc::type_error, "_element_strides(): expected a cai.DeviceNDArray");
        return to_tuple(a->layout().element_strides());
      },
      "Element strides by the typed-view rule (docs/cpp-typed-view.md).");
}

}  // namespace cai::python
