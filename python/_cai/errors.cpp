// cai::Error -> the Python exception its code stands for; cai.RaceError and cai.DeviceError.

#include "errors.h"

#include "bindings.h"
#include "cai/core/error.h"

namespace cai::python {

namespace {
PyObject* g_race_error = nullptr;
PyObject* g_device_error = nullptr;
}  // namespace

void set_python_error(const Error& e) noexcept {
  PyObject* type = PyExc_RuntimeError;
  switch (e.code()) {
    case Errc::type_error:
      type = PyExc_TypeError;
      break;
    case Errc::value_error:
      type = PyExc_ValueError;
      break;
    case Errc::index_error:
      type = PyExc_IndexError;
      break;
    case Errc::overflow:
      type = PyExc_OverflowError;
      break;
    case Errc::not_implemented:
      type = PyExc_NotImplementedError;
      break;
    case Errc::buffer_error:
      type = PyExc_BufferError;
      break;
    case Errc::device_error:
      type = g_device_error ? g_device_error : PyExc_RuntimeError;
      break;
    case Errc::race:
      type = g_race_error ? g_race_error : PyExc_RuntimeError;
      break;
  }
  PyErr_SetString(type, e.what());
}

void bind_errors(nb::module_& m) {
  // Created by hand rather than with nb::exception<>, which would translate every cai::Error.
  g_device_error = PyErr_NewExceptionWithDoc("cai.DeviceError",
                                             "The CUDA driver or the simulator reported a failure.",
                                             PyExc_RuntimeError, nullptr);
  g_race_error = PyErr_NewExceptionWithDoc(
      "cai.RaceError",
      "The simulator saw two accesses to the same bytes from different streams (or a stream and "
      "the host), at least one writing, with nothing ordering them.",
      PyExc_RuntimeError, nullptr);
  m.attr("DeviceError") = nb::handle(g_device_error);
  m.attr("RaceError") = nb::handle(g_race_error);

  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const Error& e) {
      set_python_error(e);
    }
  });
}

}  // namespace cai::python
