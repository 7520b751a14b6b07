#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

#include "cai/core/dims.h"
#include "cai/core/error.h"

namespace cai {
namespace {

// The message and code a throw_error call produces.
template <class... Parts>
Error thrown(Errc code, const Parts&... parts) {
  try {
    throw_error(code, parts...);
  } catch (const Error& e) {
    return e;
  }
  return Error(Errc::value_error, "nothing was thrown");
}

TEST(error_test, parts_are_concatenated_in_order) {
  const Error e = thrown(Errc::buffer_error, "from_dlpack(): shape[", std::size_t{1},
                         "] is negative (", std::int64_t{-3}, ")");
  EXPECT_EQ(e.code(), Errc::buffer_error);
  EXPECT_STREQ(e.what(), "from_dlpack(): shape[1] is negative (-3)");
}

TEST(error_test, integers_print_as_numbers_and_a_char_as_itself) {
  const std::string s = "x";
  const Error e = thrown(Errc::overflow, s, ": ", std::numeric_limits<std::int64_t>::min(), ' ',
                         '*', ' ', std::numeric_limits<std::uint64_t>::max(), ' ', -1);
  EXPECT_STREQ(e.what(), "x: -9223372036854775808 * 18446744073709551615 -1");
}

TEST(error_test, dims_print_as_python_tuples) {
  EXPECT_STREQ(thrown(Errc::value_error, Dims{}).what(), "()");
  EXPECT_STREQ(thrown(Errc::value_error, Dims{3}).what(), "(3,)");
  EXPECT_STREQ(thrown(Errc::value_error, "shape ", Dims{2, 3}, " bad").what(), "shape (2, 3) bad");
  EXPECT_EQ(format_dims(Dims{2, 3}), "(2, 3)");
}

TEST(error_test, a_single_string_keeps_the_plain_overload) {
  const Error e = thrown(Errc::type_error, std::string("just this"));
  EXPECT_EQ(e.code(), Errc::type_error);
  EXPECT_STREQ(e.what(), "just this");
}

}  // namespace
}  // namespace cai
