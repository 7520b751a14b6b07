#pragma once

// Internal to the extension: what the binding files share.

#include <nanobind/nanobind.h>

#include <cxxabi.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <thread>
#include <utility>

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

/// Parks the calling thread for good: what a thread the interpreter ends at exit does instead
/// of unwinding (see call_python).
[[noreturn]] inline void park_thread() {
  for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}

/// Runs Python code from C++: f calls one C-API function (no C++ object with a destructor
/// between it and here). Before Python 3.14, a daemon thread that takes the GIL back after
/// the interpreter began to finalize is ended with pthread_exit, a forced unwind; through cai's
/// frames and nanobind's catch (...) it would release objects without the GIL and then crash.
/// The thread parks here instead (the process is exiting), never leaving the handler, so the
/// unwind is not swallowed.
template <class F>
auto call_python(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (abi::__forced_unwind&) {
    park_thread();
  }
}

/// Holds the GIL in code that may run without it (deleters of Python owners, called from
/// any thread). A thread that the interpreter ends while it waits for the GIL parks instead of
/// unwinding through the noexcept destructor that called it (see call_python).
class WithGil {
 public:
  WithGil() : state_(call_python([] { return PyGILState_Ensure(); })) {}
  ~WithGil() { PyGILState_Release(state_); }
  WithGil(const WithGil&) = delete;
  WithGil& operator=(const WithGil&) = delete;

 private:
  PyGILState_STATE state_;
};

namespace detail {
template <class F, class R, class... A>
auto exit_safe(F f, R (F::*)(A...) const) {
  return [f = std::move(f)](A... args) -> R {
    try {
      return f(std::forward<A>(args)...);
    } catch (abi::__forced_unwind&) {
      park_thread();
    }
  };
}
}  // namespace detail

/// Wraps a binding's body (a lambda) so that a forced unwind that started in Python code
/// deeper down parks the thread before it reaches nanobind's dispatcher (see call_python):
/// the safety net for the Python calls not made through call_python.
template <class F>
auto exit_safe(F f) {
  return detail::exit_safe(std::move(f), &F::operator());
}
template <class R, class... A>
auto exit_safe(R (*f)(A...)) {
  return exit_safe([f](A... args) -> R { return f(std::forward<A>(args)...); });
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

/// Counts the writes cai makes or allows to device memory (its operations, assignments, and
/// exports of writable arrays to other libraries), so that Dask's token of an array changes
/// when the array may have changed (python/cai/_dask_array.py). One relaxed increment.
inline std::atomic<std::uint64_t> g_write_epoch{0};
inline void note_write() noexcept {
  g_write_epoch.fetch_add(1, std::memory_order_relaxed);
}

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
  } catch (abi::__forced_unwind&) {
    park_thread();  // see call_python
  }
  return -1;
}

void bind_errors(nb::module_& m);
void bind_core(nb::module_& m);
void bind_device(nb::module_& m);
void bind_array(nb::module_& m);
void bind_ops(nb::module_& m);
void bind_dlpack(nb::module_& m);
void bind_capi(nb::module_& m);
void bind_devices(nb::module_& m);
void bind_ipc(nb::module_& m);
void bind_allocator(nb::module_& m);

}  // namespace cai::python
