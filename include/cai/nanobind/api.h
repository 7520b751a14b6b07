#pragma once

// The C API table (cai/capi.h) as the header-only nanobind layer reaches it: fetched on first
// use (no init call), and its errors turned into nanobind exceptions. Extension modules link
// no cai library; everything below is inline.

#include <nanobind/nanobind.h>

#include <atomic>
#include <exception>

#include "cai/capi.h"
#include "cai/core/error.h"

// Hidden, like nanobind's own namespace: classes that hold nanobind objects get their
// members' visibility, and two modules never share these symbols.
#if defined(__GNUC__)
#pragma GCC visibility push(hidden)
#endif

namespace cai {
namespace nb {
namespace detail {

// cai::Error thrown by code of this module (ArrayRef::slice, say) becomes the Python
// exception cai raises for its Errc, through the table (one mapping, in cai._cai).
inline void translate_cai_error(const std::exception_ptr& p, void* table) {
  try {
    std::rethrow_exception(p);
  } catch (const cai::Error& e) {
    static_cast<const CaiCApi*>(table)->set_error(static_cast<std::int32_t>(e.code()), e.what());
  }
}

/// The table, importing `cai` on first use; null with the Python exception set when it cannot
/// be had. Call with the GIL held. A race between threads only fetches the same table twice.
inline const CaiCApi* api_or_null() noexcept {
  static std::atomic<const CaiCApi*> table{nullptr};
  const CaiCApi* t = table.load(std::memory_order_acquire);
  if (t) return t;
  t = cai_capi_import();
  if (!t) return nullptr;
  static std::atomic<bool> translator{false};
  if (!translator.exchange(true)) {
    try {
      ::nanobind::register_exception_translator(&translate_cai_error, const_cast<CaiCApi*>(t));
    } catch (...) {
      // Without it a cai::Error is still an exception, only a less specific one.
    }
  }
  table.store(t, std::memory_order_release);
  return t;
}

/// The table; throws nanobind::python_error (the ImportError) when `cai` cannot be imported.
inline const CaiCApi& api() {
  if (const CaiCApi* t = api_or_null()) return *t;
  throw ::nanobind::python_error();
}

/// Turns a failed table call (-1, exception set) into nanobind::python_error.
inline void check(int rc) {
  if (rc != 0) throw ::nanobind::python_error();
}

}  // namespace detail
}  // namespace nb
}  // namespace cai

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif
