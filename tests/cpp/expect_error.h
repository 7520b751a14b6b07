#pragma once

// Test helper: runs f and expects a cai::Error with `code` whose message contains every fragment.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cai/core/error.h"

namespace cai::test {

template <class F>
void expect_error(F&& f, Errc code, const std::vector<std::string>& fragments) {
  try {
    f();
    ADD_FAILURE() << "no cai::Error thrown";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    for (const auto& frag : fragments) {
      EXPECT_NE(std::string(e.what()).find(frag), std::string::npos)
          << "message \"" << e.what() << "\" lacks \"" << frag << "\"";
    }
  }
}

}  // namespace cai::test
