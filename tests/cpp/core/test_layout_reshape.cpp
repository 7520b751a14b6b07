// Layout::reshape and Layout::with_itemsize. The strides expected below are NumPy 2.4's for
// the same reshape (a.reshape(shape, order=..., copy=False).strides) except on axes of size 1,
// where any stride is valid; tests/python/test_shape_ops.py compares the two on generated
// layouts.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cai/core/error.h"
#include "cai/core/layout.h"
#include "cai_matchers.h"

namespace cai {
namespace {

using test::ThrowsCaiError;
using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(layout_reshape_test, contiguous_in_both_orders) {
  const Layout c = Layout::c_contiguous(Dims{3, 4}, 4);
  EXPECT_EQ(c.reshape(Dims{2, 6}), Layout::c_contiguous(Dims{2, 6}, 4));
  EXPECT_EQ(c.reshape(Dims{12}), Layout::c_contiguous(Dims{12}, 4));
  EXPECT_EQ(c.reshape(Dims{2, -1, 3}), Layout::c_contiguous(Dims{2, 2, 3}, 4));
  const Layout f = Layout::f_contiguous(Dims{3, 4}, 4);
  EXPECT_EQ(f.reshape(Dims{6, 2}, true), Layout::f_contiguous(Dims{6, 2}, 4));
  EXPECT_EQ(f.reshape(Dims{-1}, true), Layout::c_contiguous(Dims{12}, 4));
}

TEST(layout_reshape_test, strided_runs_stay_views) {
  // a[:, :3] of a (4, 6) float32 array: rows stay runs, and a[:, ::2] is one run.
  const Layout rows = Layout({4, 3}, {24, 4}, 4);
  EXPECT_EQ(rows.reshape(Dims{4, 3, 1}), Layout({4, 3, 1}, {24, 4, 4}, 4));
  EXPECT_EQ(rows.reshape(Dims{2, 2, 3}), Layout({2, 2, 3}, {48, 24, 4}, 4));
  EXPECT_EQ(Layout({4, 3}, {24, 8}, 4).reshape(Dims{12}), Layout({12}, {8}, 4));
  // A 1-d strided array splits into any shape.
  EXPECT_EQ(Layout({6}, {-8}, 4).reshape(Dims{2, 3}), Layout({2, 3}, {-24, -8}, 4));
  // Size-1 axes in the source are skipped whatever their stride.
  EXPECT_EQ(Layout({2, 1, 3}, {12, 999, 4}, 4).reshape(Dims{6}), Layout({6}, {4}, 4));
  // The transpose of a C array is a view in F order.
  EXPECT_EQ(Layout({4, 3}, {4, 16}, 4).reshape(Dims{12}, true), Layout({12}, {4}, 4));
}

TEST(layout_reshape_test, empty_arrays_reshape_freely) {
  const Layout empty = Layout({0, 3}, {999, -4}, 4);
  EXPECT_EQ(empty.reshape(Dims{3, 0, 5}), Layout::c_contiguous(Dims{3, 0, 5}, 4));
  EXPECT_EQ(empty.reshape(Dims{5, -1}).shape()[1], 0);
}

TEST(layout_reshape_test, refuses_a_copy_naming_the_axes) {
  // The transpose of a C (3, 4) array read in C order.
  EXPECT_THAT(
      [] {
        Layout({4, 3}, {4, 16}, 4).reshape(Dims{12});
      },
      ThrowsCaiError(Errc::not_implemented,
                     AllOf(HasSubstr("shape (4, 3) and strides (4, 16)"),
                           HasSubstr("cannot be reshaped to (12,) in C order"),
                           HasSubstr("axis 0 (stride 4) does not step over axis 1 (3 x stride 16)"),
                           HasSubstr("order='F' would be a view"), HasSubstr("never copies"))));
  // a[:, :3] of a (4, 6) array: no order helps.
  EXPECT_THAT(
      [] {
        Layout({4, 3}, {24, 4}, 4).reshape(Dims{12}, true);
      },
      ThrowsCaiError(
          Errc::not_implemented,
          AllOf(HasSubstr("in F order"),
                HasSubstr("axis 1 (stride 4) does not step over axis 0 (4 x stride 24)"))));
  try {
    Layout({4, 3}, {24, 4}, 4).reshape(Dims{12});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("axis 0 (stride 24) does not step over axis 1 (3 x "
                                         "stride 4)"),
              std::string::npos)
        << e.what();
    EXPECT_EQ(std::string(e.what()).find("would be a view"), std::string::npos) << e.what();
  }
}

TEST(layout_reshape_test, size_errors) {
  const Layout l = Layout::c_contiguous(Dims{3, 4}, 4);
  EXPECT_THAT(
      [&] {
        l.reshape(Dims{5, 2});
      },
      ThrowsCaiError(Errc::value_error,
                     HasSubstr("cannot reshape an array of size 12 into shape (5, 2)")));
  EXPECT_THAT(
      [&] {
        l.reshape(Dims{5, -1});
      },
      ThrowsCaiError(Errc::value_error, HasSubstr("size 12 into shape (5, -1)")));
  EXPECT_THAT(
      [&] {
        l.reshape(Dims{-1, -1});
      },
      ThrowsCaiError(Errc::value_error, HasSubstr("more than one -1")));
  EXPECT_THAT(
      [&] {
        l.reshape(Dims{-2, -6});
      },
      ThrowsCaiError(Errc::value_error, HasSubstr("negative size at axis 0")));
  EXPECT_THAT(
      [&] {
        l.reshape(Dims{std::int64_t{1} << 62, 1 << 4});
      },
      ThrowsCaiError(Errc::value_error, HasSubstr("size 12")));
  EXPECT_THAT(
      [] {
        Layout::c_contiguous(Dims{0}, 4).reshape(Dims{0, -1});
      },
      ThrowsCaiError(Errc::value_error, HasSubstr("size 0 into shape (0, -1)")));
}

TEST(layout_itemsize_test, resizes_the_last_axis) {
  const Layout c = Layout::c_contiguous(Dims{2, 4}, 4);
  EXPECT_EQ(c.with_itemsize(4), c);
  EXPECT_EQ(c.with_itemsize(8), Layout({2, 2}, {16, 8}, 8));
  EXPECT_EQ(c.with_itemsize(1), Layout({2, 16}, {16, 1}, 1));
  // Only the last axis needs to be contiguous: rows of a wider array.
  EXPECT_EQ(Layout({2, 4}, {64, 4}, 4).with_itemsize(2), Layout({2, 8}, {64, 2}, 2));
  // A last axis of size 1 may have any stride.
  EXPECT_EQ(Layout({3, 1}, {8, 100}, 8).with_itemsize(4), Layout({3, 2}, {8, 4}, 4));
}

TEST(layout_itemsize_test, errors) {
  EXPECT_THAT(
      [] {
        Layout({4, 2}, {4, 16}, 4).with_itemsize(8);
      },
      ThrowsCaiError(
          Errc::value_error,
          AllOf(HasSubstr("from 4 to 8"),
                HasSubstr("last axis to be contiguous (stride 4), but its stride is 16"))));
  EXPECT_THAT(
      [] {
        Layout::c_contiguous(Dims{2, 3}, 4).with_itemsize(8);
      },
      ThrowsCaiError(Errc::value_error,
                     HasSubstr("the last axis holds 12 bytes, not a multiple of 8")));
  EXPECT_THAT([] { Layout({}, {}, 4).with_itemsize(2); },
              ThrowsCaiError(Errc::value_error, HasSubstr("0-d array")));
  EXPECT_THAT([] { Layout::c_contiguous(Dims{2}, 4).with_itemsize(0); },
              ThrowsCaiError(Errc::value_error, HasSubstr("item size of 0")));
}

}  // namespace
}  // namespace cai
