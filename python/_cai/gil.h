#pragma once

// Internal to the extension: the GIL and the interpreter's exit, for code that runs Python or
// waits. A daemon thread that the interpreter ends at exit must never unwind through cai's
// frames (see call_python).

#include <nanobind/nanobind.h>

#include <cxxabi.h>

#include <chrono>
#include <thread>
#include <utility>

// A forced unwind (pthread_exit) is a foreign exception: the object a catch of
// abi::__forced_unwind& binds to is null, which UBSan's null check reports (it fired in 1 of
// about 150 exits under load). The handlers never touch it; their functions skip that check,
// and are never inlined: inlined into a caller, the handler takes the caller's checks (it
// fired 3 times in 60 runs under load while call_python was inlined).
#if defined(__GNUC__) || defined(__clang__)
#define CAI_CATCHES_FORCED_UNWIND __attribute__((noinline, no_sanitize("null")))
#else
#define CAI_CATCHES_FORCED_UNWIND
#endif

namespace cai::python {

namespace nb = nanobind;

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
CAI_CATCHES_FORCED_UNWIND auto call_python(F&& f) -> decltype(f()) {
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

namespace detail {
template <class F, class R, class... A>
auto exit_safe(F f, R (F::*)(A...) const) {
  return [f = std::move(f)](A... args) CAI_CATCHES_FORCED_UNWIND -> R {
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

}  // namespace cai::python
