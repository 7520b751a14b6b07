#pragma once

// The bridge between an extension module that links cai (a C++ library author's module) and
// the `cai` Python package: one table of functions, published by cai._cai as the capsule
// `cai._cai._C_API`, so that every module of a process imports arrays with the same code and
// shares one backend (one simulator, one set of CUDA contexts).
//
// Needs <Python.h>; no nanobind. The table passes C++ types (View, StreamRef), so both sides
// must be built with the same compiler family and standard library: the ABI tag checks that.

#include <Python.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "cai/arrays/view.h"
#include "cai/core/error.h"
#include "cai/device/backend.h"
#include "cai/sync/ordering.h"
#include "cai/version.h"

#define CAI_CAPI_VERSION 1

#define CAI_CAPI_STR2(x) #x
#define CAI_CAPI_STR(x) CAI_CAPI_STR2(x)
#if defined(__clang__)
#define CAI_CAPI_COMPILER "clang"
#elif defined(__GNUC__)
#define CAI_CAPI_COMPILER "gcc" CAI_CAPI_STR(__GNUC__)
#elif defined(_MSC_VER)
#define CAI_CAPI_COMPILER "msvc" CAI_CAPI_STR(_MSC_VER)
#else
#define CAI_CAPI_COMPILER "unknown"
#endif
#if defined(_GLIBCXX_USE_CXX11_ABI)
#define CAI_CAPI_STDLIB "libstdc++" CAI_CAPI_STR(_GLIBCXX_USE_CXX11_ABI)
#elif defined(_LIBCPP_VERSION)
#define CAI_CAPI_STDLIB "libc++"
#else
#define CAI_CAPI_STDLIB "stdlib"
#endif
/// What must match between cai._cai and a module using the table.
#define CAI_CAPI_ABI_TAG                                                                          \
  "cai" CAI_CAPI_STR(CAI_VERSION_MAJOR) "." CAI_CAPI_STR(CAI_VERSION_MINOR) "-capi" CAI_CAPI_STR( \
      CAI_CAPI_VERSION) "-" CAI_CAPI_COMPILER "-" CAI_CAPI_STDLIB

namespace cai::python {

/// The table. Every function returns 0 on success, or -1 with a Python exception set; none
/// throws. The caller holds the GIL.
struct CApi {
  std::uint32_t version;  ///< CAI_CAPI_VERSION of the publisher
  const char* abi_tag;    ///< CAI_CAPI_ABI_TAG of the publisher
  /// The process's backend (chosen on first use, so it can fail: no driver with CAI_BACKEND=cuda).
  int (*backend)(device::Backend** out);
  /// Imports any object with __cuda_array_interface__ or DLPack (cai's own arrays as they
  /// are) with the CAI v3 import rules; `entry` names the caller in messages.
  int (*import_view)(PyObject* obj, int sync, const char* entry, View* out);
  /// Reads a `stream=` argument (a cai.Stream, an int handle, None/0 for the default, or an
  /// object with __cuda_stream__).
  int (*read_stream)(PyObject* obj, const char* entry, sync::StreamRef* out);
  /// A new cai.DeviceNDArray for `view` (which keeps its owner alive); a new reference.
  int (*wrap_view)(const View* view, PyObject** out);
};

/// The table of the `cai` package, imported on first use (and the backend adopted). Throws
/// cai::Error(device_error) when `cai` cannot be imported or was built differently; the
/// Python exception, if any, is cleared into the message.
inline const CApi& capi() {
  static const CApi* table = [] {
    PyObject* mod = PyImport_ImportModule("cai._cai");
    if (!mod) {
      PyErr_Clear();
      throw_error(Errc::device_error,
                  "cai C API: cannot import cai._cai; install the cai Python package");
    }
    PyObject* cap = PyObject_GetAttrString(mod, "_C_API");
    Py_DECREF(mod);
    void* p = cap ? PyCapsule_GetPointer(cap, "cai._cai._C_API") : nullptr;
    Py_XDECREF(cap);
    if (!p) {
      PyErr_Clear();
      throw_error(Errc::device_error, "cai C API: cai._cai has no _C_API capsule");
    }
    auto* t = static_cast<const CApi*>(p);
    if (t->version != CAI_CAPI_VERSION || std::strcmp(t->abi_tag, CAI_CAPI_ABI_TAG) != 0)
      throw_error(Errc::device_error, std::string("cai C API: this module was built as '") +
                                          CAI_CAPI_ABI_TAG + "' but the cai package as '" +
                                          t->abi_tag + "'; rebuild it against the installed cai");
    device::Backend* shared = nullptr;
    if (t->backend(&shared) != 0) {
      PyObject *type, *value, *tb;
      PyErr_Fetch(&type, &value, &tb);
      std::string why = "cai C API: no backend";
      if (PyObject* s = value ? PyObject_Str(value) : nullptr) {
        if (const char* c = PyUnicode_AsUTF8(s)) why = c;
        Py_DECREF(s);
      }
      Py_XDECREF(type);
      Py_XDECREF(value);
      Py_XDECREF(tb);
      PyErr_Clear();
      throw_error(Errc::device_error, why);
    }
    device::adopt_backend(shared);
    return t;
  }();
  return *table;
}

}  // namespace cai::python
