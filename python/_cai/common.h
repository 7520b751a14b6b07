#pragma once

// Internal to the extension: what the binding files share.

#include <nanobind/nanobind.h>

#include <memory>

#include "cai/core/error.h"
#include "cai/device/backend.h"
#include "cai/device/owned.h"
#include "cai/sync/ordering.h"

namespace cai::python {

namespace nb = nanobind;

/// cai.Stream: a stream handle and, for streams cai created, ownership of it.
struct PyStream {
  sync::StreamRef stream;  ///< the handle, and what keeps the stream alive
  bool owned = false;      ///< cai created it and destroys it with its last user
  device::StreamHandle handle() const { return stream.handle; }
  const sync::StreamRef& ref() const { return stream; }
};

/// cai.Event.
struct PyEvent {
  std::shared_ptr<device::OwnedEvent> event;
};

/// The stream cai uses when a `stream=` argument is 0 or None and no array supplies one.
sync::StreamRef library_default_stream();

/// Reads a `stream=` argument: a cai.Stream, an int handle (0 = default), None (= default),
/// or an object with __cuda_stream__. `fallback` is what 0/None mean at this call site.
sync::StreamRef stream_arg(nb::handle obj, const char* entry, const sync::StreamRef& fallback);

/// True while the interpreter shuts down.
inline bool py_finalizing() noexcept {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing();
#else
  return _Py_IsFinalizing();
#endif
}

/// Releases the GIL around a blocking wait. Unlike nb::gil_scoped_release, it never tries to
/// take the GIL back once the interpreter is finalizing: a daemon thread still waiting at exit
/// would otherwise be unwound by the interpreter through a noexcept destructor and abort the
/// process. Such a thread parks instead (the process is exiting), as Python 3.14 does.
class NoGil {
 public:
  NoGil() : state_(PyEval_SaveThread()) {}
  ~NoGil();
  NoGil(const NoGil&) = delete;
  NoGil& operator=(const NoGil&) = delete;

 private:
  PyThreadState* state_;
};

/// Run-time switches (cai.config).
struct Config {
  bool import_sync = true;
  bool export_stream = true;
};
Config& config();

/// Sets the Python exception that stands for `e` (TypeError, ValueError, cai.RaceError, ...).
void set_python_error(const Error& e) noexcept;

/// Runs f for a C entry point (the C API, the DLPack exchange table): 0 on success, or -1 with
/// the Python exception set; nothing escapes.
template <class F>
int guarded(F&& f) noexcept {
  try {
    f();
    return 0;
  } catch (const Error& e) {
    set_python_error(e);
  } catch (nb::python_error& e) {
    e.restore();
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
  return -1;
}

void bind_errors(nb::module_& m);
void bind_core(nb::module_& m);
void bind_device(nb::module_& m);
void bind_array(nb::module_& m);
void bind_ops(nb::module_& m);
void bind_dlpack(nb::module_& m);
void bind_probes(nb::module_& m);
void bind_capi(nb::module_& m);
void bind_devices(nb::module_& m);
void bind_ipc(nb::module_& m);

}  // namespace cai::python
