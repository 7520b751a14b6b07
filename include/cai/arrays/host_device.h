#pragma once

// The one place that decides how code shared by host and device is annotated, so that the
// same headers build with g++/clang++ alone and with nvcc (or clang in CUDA mode).

#include <cstdio>
#include <cstdlib>

#include "cai/core/host_device.h"  // CAI_HOST_DEVICE

// Precondition checks that are too hot to keep in release builds (element access). On by
// default unless NDEBUG, like assert; -DCAI_ENABLE_ASSERTS=1 or 0 overrides. Use the same
// setting in every translation unit, as with NDEBUG.
#if !defined(CAI_ENABLE_ASSERTS)
#if defined(NDEBUG)
#define CAI_ENABLE_ASSERTS 0
#else
#define CAI_ENABLE_ASSERTS 1
#endif
#endif

namespace cai::detail {

[[noreturn]] inline void assert_fail(const char* message, const char* file, int line) noexcept {
  std::fprintf(stderr, "%s:%d: %s\n", file, line, message);
  std::abort();
}

}  // namespace cai::detail

// Reports a failed precondition and stops: the host aborts, a kernel traps (the launch then
// fails with cudaErrorLaunchFailure / an illegal instruction).
#if defined(__CUDA_ARCH__)
#define CAI_DETAIL_FAIL(message) (::printf("%s:%d: %s\n", __FILE__, __LINE__, message), __trap())
#else
#define CAI_DETAIL_FAIL(message) ::cai::detail::assert_fail(message, __FILE__, __LINE__)
#endif

/// CAI_ASSERT(condition, "Component: what broke"): the message names the component first.
#if CAI_ENABLE_ASSERTS
#define CAI_ASSERT(condition, message) \
  do {                                 \
    if (!(condition)) {                \
      CAI_DETAIL_FAIL(message);        \
    }                                  \
  } while (false)
#else
// Unevaluated, so that names used only in checks do not warn.
#define CAI_ASSERT(condition, message)       \
  do {                                       \
    static_cast<void>(sizeof(!(condition))); \
  } while (false)
#endif
