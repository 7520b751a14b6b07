#pragma once

// Internal to the extension: cai::Error as a Python exception, for bindings and C entry points.

#include <nanobind/nanobind.h>

#include <exception>

#include "cai/core/error.h"
#include "gil.h"

namespace cai::python {

/// Sets the Python exception that stands for `e` (TypeError, ValueError, cai.RaceError, ...).
void set_python_error(const Error& e) noexcept;

/// Runs f for a C entry point (the C API, the DLPack exchange table): 0 on success, or -1 with
/// the Python exception set; nothing escapes.
template <class F>
CAI_CATCHES_FORCED_UNWIND int guarded(F&& f) noexcept {
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

}  // namespace cai::python
