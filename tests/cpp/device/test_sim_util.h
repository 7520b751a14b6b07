#pragma once

// Helpers shared by the simulator tests.

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "cai/core/error.h"

namespace cai::device::test {

/// Runs f, expects a cai::Error with `code`, returns its message ("" when none was thrown).
inline std::string error_message(const std::function<void()>& f, Errc code) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(static_cast<int>(e.code()), static_cast<int>(code)) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "expected cai::Error";
  return {};
}

inline bool contains(std::string_view text, std::string_view part) {
  return text.find(part) != std::string_view::npos;
}

inline std::uint64_t addr(const void* p) {
  return static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(p));
}

}  // namespace cai::device::test

/// Expects `stmt` to throw cai::Error with `code` and a message containing `part`.
#define EXPECT_CAI_ERROR(stmt, code, part)                                                \
  do {                                                                                    \
    const std::string cai_msg_ = ::cai::device::test::error_message([&] { stmt; }, code); \
    EXPECT_TRUE(::cai::device::test::contains(cai_msg_, part)) << cai_msg_;               \
  } while (0)
