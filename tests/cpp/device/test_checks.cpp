// The argument checks both backends share (src/device/checks.h).

#include "checks.h"

#include <gtest/gtest.h>

#include <limits>

#include "cai_matchers.h"
#include "test_sim_util.h"

namespace cai::device::detail {
namespace {

using cai::test::ThrowsCaiError;
using test::dense;
using test::operand;
using ::testing::HasSubstr;

TEST(device_checks, stream_handle_zero_is_rejected) {
  EXPECT_THAT(
      [] { check_stream_handle(0, "copy_async()"); },
      ThrowsCaiError(Errc::value_error, HasSubstr("copy_async(): stream 0 is not allowed")));
  check_stream_handle(1, "x");
  check_stream_handle(2, "x");
  check_stream_handle(0x1234, "x");
}

TEST(device_checks, ranges_and_operands) {
  EXPECT_EQ(check_operand("f()", "dst", operand(1000, {2, 2}, {-16, 8}, 8)),
            (ByteRange{984, 1016}));
  EXPECT_THAT(
      [] {
        check_operand("f()", "src", operand(0, {2, 2}, {-16, 8}, 8));
      },
      ThrowsCaiError(Errc::value_error, HasSubstr("f(): src is a null pointer")));
  EXPECT_THAT(
      [] {
        check_operand("f()", "a", operand(8, {2, 2}, {-16, 8}, 8));
      },
      ThrowsCaiError(Errc::overflow, HasSubstr("f(): a at 0x8 with byte extent [-16, 16) wraps")));
  EXPECT_TRUE(check_operand("f()", "a", operand(0, {0, 2}, {-16, 8}, 8)).empty());
  EXPECT_TRUE(check_operand("f()", "a", dense(0, {4}, 0)).empty());  // item size 0: no bytes
  EXPECT_THAT([] { check_range("f()", "dst", 0, 4); },
              ThrowsCaiError(Errc::value_error, HasSubstr("null pointer for 4 bytes")));
  EXPECT_THAT([] { check_range("f()", "dst", ~std::uint64_t{0} - 2, 4); },
              ThrowsCaiError(Errc::overflow, HasSubstr("wraps around the address space")));
  EXPECT_TRUE(check_range("f()", "dst", 0, 0).empty());
  EXPECT_EQ(range_text({0x100, 0x140}), "[0x100+64)");
}

TEST(device_checks, operands_of_one_operation_agree) {
  EXPECT_THAT(
      [] {
        check_same_layout_size("f()", "dst", dense(64, {4}, 4), "src", dense(64, {2, 2}, 4));
      },
      ThrowsCaiError(Errc::value_error,
                     HasSubstr("f(): src has shape (2, 2) but dst has shape (4,)")));
  EXPECT_THAT(
      [] { check_same_layout_size("f()", "dst", dense(64, {4}, 4), "src", dense(64, {4}, 8)); },
      ThrowsCaiError(Errc::value_error, HasSubstr("src has item size 8 but dst has 4")));
}

TEST(device_checks, elementwise) {
  const Operand ok[] = {dense(0x1000, {4}, 4), dense(0x2000, {4}, 4), dense(0x3000, {4}, 4)};
  const auto ranges = check_elementwise("add_async()", ElementwiseOp::add, ElementType::f32, ok);
  EXPECT_EQ(ranges[1], (ByteRange{0x2000, 0x2010}));
  EXPECT_THAT(
      [&] { check_elementwise("x()", static_cast<ElementwiseOp>(7), ElementType::f32, ok); },
      ThrowsCaiError(Errc::value_error, HasSubstr("unknown elementwise operation 7")));
  EXPECT_THAT(
      [&] { check_elementwise("x()", ElementwiseOp::add, static_cast<ElementType>(99), ok); },
      ThrowsCaiError(Errc::value_error, HasSubstr("unknown element type 99")));
  EXPECT_THAT(
      [&] { check_elementwise("x()", ElementwiseOp::add, ElementType::f32, std::span(ok, 2)); },
      ThrowsCaiError(Errc::value_error,
                     HasSubstr("add takes 3 operands (out and 2 inputs), got 2")));
  EXPECT_THAT(
      [&] { check_elementwise("x()", ElementwiseOp::add, ElementType::f64, ok); },
      ThrowsCaiError(Errc::value_error, HasSubstr("x(): out has item size 4, f64 needs 8")));
  // In place (same elements) is fine; a partial overlap is refused.
  const Operand in_place[] = {ok[0], ok[0], ok[1]};
  check_elementwise("x()", ElementwiseOp::add, ElementType::f32, in_place);
  const Operand reversed[] = {ok[0], operand(0x100c, {4}, {-4}, 4), ok[1]};
  EXPECT_THAT(
      [&] { check_elementwise("x()", ElementwiseOp::add, ElementType::f32, reversed); },
      ThrowsCaiError(Errc::value_error, HasSubstr("x(): a [0x1000+16) partly overlaps out")));
}

}  // namespace
}  // namespace cai::device::detail
