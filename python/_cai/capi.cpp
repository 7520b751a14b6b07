// Publishes cai/python/capi.h's table as the capsule cai._cai._C_API.

#include "cai/python/capi.h"

#include "array.h"

namespace cai::python {

namespace {

int capi_backend(device::Backend** out) {
  return guarded([&] { *out = &device::backend(); });
}

int capi_import_view(PyObject* obj, int sync, const char* entry, View* out) {
  return guarded([&] { *out = import_view(nb::handle(obj), sync != 0, entry); });
}

int capi_read_stream(PyObject* obj, const char* entry, sync::StreamRef* out) {
  return guarded([&] { *out = stream_arg(nb::handle(obj), entry, library_default_stream()); });
}

int capi_wrap_view(const View* view, PyObject** out) {
  return guarded([&] { *out = wrap(*view).release().ptr(); });
}

}  // namespace

void bind_capi(nb::module_& m) {
  static const CApi table{CAI_CAPI_VERSION,  CAI_CAPI_ABI_TAG,  &capi_backend,
                          &capi_import_view, &capi_read_stream, &capi_wrap_view};
  m.attr("_C_API") =
      nb::steal(PyCapsule_New(const_cast<CApi*>(&table), "cai._cai._C_API", nullptr));
}

}  // namespace cai::python
