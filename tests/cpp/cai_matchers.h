#pragma once

// GoogleMock matchers for cai::Error, shared by the C++ suites:
//   EXPECT_THAT([&] { f(); }, ThrowsCaiError(Errc::value_error, HasSubstr("f(): ...")));

#include <gmock/gmock.h>

#include <string>

#include "cai/core/error.h"

namespace cai::test {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using ::testing::StrEq;

/// Matches a cai::Error whose code is `code` and whose message matches `message` (a string
/// matcher such as HasSubstr, StartsWith or StrEq).
template <class M>
auto CaiError(Errc code, M message) {
  return AllOf(::testing::Property("code", &Error::code, code),
               ::testing::Property("what", &Error::what,
                                   ::testing::MatcherCast<const char*>(
                                       ::testing::SafeMatcherCast<std::string>(message))));
}

/// Matches a callable that throws such a cai::Error.
template <class M>
auto ThrowsCaiError(Errc code, M message) {
  return ::testing::Throws<Error>(CaiError(code, message));
}

/// The message of the cai::Error with `code` that f throws ("" and a failure when it throws
/// none): for tests that go on to check several parts of one message.
template <class F>
std::string error_message(F&& f, Errc code) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(static_cast<int>(e.code()), static_cast<int>(code)) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "expected cai::Error";
  return {};
}

}  // namespace cai::test
