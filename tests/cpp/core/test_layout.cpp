#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "cai/core/error.h"
#include "cai/core/layout.h"
#include "cai_matchers.h"

namespace cai {
namespace {

constexpr std::int64_t max64 = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t min64 = std::numeric_limits<std::int64_t>::min();

using test::ThrowsCaiError;
using ::testing::AllOf;
using ::testing::HasSubstr;

Layout make(Dims shape, Dims strides, std::int64_t itemsize) {
  return Layout(std::move(shape), std::move(strides), itemsize);
}

TEST(layout_test, construct) {
  Layout l = make({2, 3}, {12, 4}, 4);
  EXPECT_EQ(l.ndim(), 2);
  EXPECT_EQ(Dims(l.shape()), (Dims{2, 3}));
  EXPECT_EQ(Dims(l.strides()), (Dims{12, 4}));
  EXPECT_EQ(l.itemsize(), 4);
  EXPECT_EQ(l.size(), 6);
  EXPECT_EQ(l.nbytes(), 24);

  Layout scalar;
  EXPECT_EQ(scalar.ndim(), 0);
  EXPECT_EQ(scalar.size(), 1);
  EXPECT_EQ(make({}, {}, 8).nbytes(), 8);
  EXPECT_EQ(make({3, 0}, {0, 0}, 8).size(), 0);
  EXPECT_EQ(make({3, 0}, {0, 0}, 8).nbytes(), 0);
}

TEST(layout_test, construct_rejects) {
  EXPECT_THAT(
      [] {
        make({2, 3}, {4}, 4);
      },
      ThrowsCaiError(Errc::value_error,
                     HasSubstr("Layout: shape (2, 3) has 2 dimensions but strides (4,) has 1")));
  EXPECT_THAT(
      [] {
        make({2, -1}, {4, 4}, 4);
      },
      ThrowsCaiError(Errc::value_error, HasSubstr("shape (2, -1) has a negative size at axis 1")));
  EXPECT_THAT([] { make({2}, {4}, -4); },
              ThrowsCaiError(Errc::value_error, HasSubstr("item size -4 is negative")));
  EXPECT_THAT([] { make(Dims(65, 1), Dims(65, 0), 1); },
              ThrowsCaiError(Errc::value_error, HasSubstr("65 dimensions, at most 64")));
  EXPECT_EQ(make(Dims(64, 1), Dims(64, 0), 1).ndim(), 64);
}

TEST(layout_test, construct_overflow) {
  EXPECT_THAT(
      [] {
        make({max64 / 2 + 1, 2}, {0, 0}, 1);
      },
      ThrowsCaiError(Errc::overflow,
                     AllOf(HasSubstr("byte size of shape"), HasSubstr("overflows int64"))));
  EXPECT_THAT([] { make({max64 / 4 + 1}, {8}, 4); },
              ThrowsCaiError(Errc::overflow, HasSubstr("item size 4")));
  // NumPy checks the non-zero dims even when another dim is 0.
  EXPECT_THAT(
      [] {
        make({0, max64, 2}, {0, 0, 0}, 1);
      },
      ThrowsCaiError(Errc::overflow, HasSubstr("byte size")));
  EXPECT_EQ(make({0, max64}, {0, 1}, 1).size(), 0);
  // Item size 0 still bounds the element count.
  EXPECT_THAT(
      [] {
        make({max64, 2}, {0, 0}, 0);
      },
      ThrowsCaiError(Errc::overflow, HasSubstr("byte size")));
  EXPECT_THAT(
      [] { make({3}, {max64 / 2 + 1}, 1); },
      ThrowsCaiError(Errc::overflow, AllOf(HasSubstr("byte extent of shape (3,) with strides ("),
                                           HasSubstr("item size 1 overflows int64"))));
  EXPECT_THAT(
      [] {
        make({2, 2}, {max64 - 1, 1}, 1);
      },
      ThrowsCaiError(Errc::overflow, HasSubstr("byte extent")));
  EXPECT_THAT(
      [] {
        make({2, 2}, {min64, -1}, 1);
      },
      ThrowsCaiError(Errc::overflow, HasSubstr("byte extent")));
  Layout edge = make({2}, {min64}, 1);
  EXPECT_EQ(edge.extent(), (Layout::Extent{min64, 1}));
}

TEST(layout_test, construct_reports_the_first_rule_broken) {
  // The checks run in one pass; the failures are reported in the order of the rules: a negative
  // size, then the item size, then the element count, then the extent.
  EXPECT_THAT(
      [] {
        make({2, -1}, {4, 4}, -4);
      },
      ThrowsCaiError(Errc::value_error, HasSubstr("negative size at axis 1")));
  EXPECT_THAT(
      [] {
        make({-3, 2, -1}, {0, 0, 0}, 1);
      },
      ThrowsCaiError(Errc::value_error, HasSubstr("negative size at axis 0")));
  EXPECT_THAT(
      [] {
        make({max64, 2, -1}, {0, 0, 0}, 1);
      },
      ThrowsCaiError(Errc::value_error, HasSubstr("negative size at axis 2")));
  EXPECT_THAT(
      [] {
        make({max64, 2}, {max64, max64}, 1);
      },
      ThrowsCaiError(Errc::overflow, HasSubstr("byte size")));
  // A zero-size layout reaches no byte, whatever its strides: no extent to overflow.
  const Layout empty = make({0, 3}, {4, max64}, 4);
  EXPECT_EQ(empty.size(), 0);
  EXPECT_EQ(empty.extent(), (Layout::Extent{0, 0}));
  // A dimension of size 1 adds no reach, whatever its stride.
  EXPECT_EQ(make({1, 3}, {max64, 4}, 4).extent(), (Layout::Extent{0, 12}));
  EXPECT_EQ(make({}, {}, 8).extent(), (Layout::Extent{0, 8}));
}

TEST(layout_test, checked_helpers) {
  const Dims shape{2, 3};
  EXPECT_EQ(Layout::checked_nbytes(shape, 4), 24);
  EXPECT_EQ(Layout::checked_nbytes(Dims{0, 5}, 4), 0);
  EXPECT_EQ(Layout::checked_nbytes(Dims{max64, 2}, 1), std::nullopt);
  EXPECT_EQ(Layout::checked_extent(shape, Dims{-12, 4}, 4), (Layout::Extent{-12, 12}));
  EXPECT_EQ(Layout::checked_extent(shape, Dims{4}, 4), std::nullopt);
  EXPECT_EQ(Layout::checked_extent(Dims{3}, Dims{max64}, 4), std::nullopt);
  EXPECT_EQ(Layout::checked_extent(Dims{0, 3}, Dims{max64, max64}, 4), (Layout::Extent{0, 0}));
}

TEST(layout_test, contiguous_factories) {
  EXPECT_EQ(Layout::c_strides(Dims{2, 3, 4}, 4), (Dims{48, 16, 4}));
  EXPECT_EQ(Layout::f_strides(Dims{2, 3, 4}, 4), (Dims{4, 8, 24}));
  // A zero dim counts as one, as in PyTorch (NumPy 2 gives all zeros; any strides are valid
  // for a zero-size array).
  EXPECT_EQ(Layout::c_strides(Dims{2, 0, 3}, 4), (Dims{12, 12, 4}));
  EXPECT_EQ(Layout::f_strides(Dims{2, 0, 3}, 4), (Dims{4, 8, 8}));
  EXPECT_EQ(Layout::c_strides(Dims{}, 4), Dims{});
  EXPECT_THAT(
      [] {
        Layout::c_strides(Dims{max64, 2}, 1);
      },
      ThrowsCaiError(Errc::overflow,
                     AllOf(HasSubstr("c_strides()"), HasSubstr("overflows int64"))));

  Layout c = Layout::c_contiguous(Dims{2, 3}, 8);
  EXPECT_EQ(Dims(c.strides()), (Dims{24, 8}));
  EXPECT_TRUE(c.is_c_contiguous());
  Layout f = Layout::f_contiguous(Dims{2, 3}, 8);
  EXPECT_EQ(Dims(f.strides()), (Dims{8, 16}));
  EXPECT_TRUE(f.is_f_contiguous());
  EXPECT_FALSE(f.is_c_contiguous());
}

// Expectations computed with NumPy 2.4 (flags, numpy.lib.array_utils.byte_bounds and
// numpy._core._multiarray_tests.internal_overlap) on np.ndarray views of these layouts.
struct NumpyRow {
  Dims shape, strides;
  std::int64_t itemsize;
  bool c_contiguous, f_contiguous;
  std::int64_t lo, hi;
  bool overlaps;
};

const std::vector<NumpyRow>& numpy_rows() {
  static const std::vector<NumpyRow> rows = {
      {{}, {}, 4, true, true, 0, 4, false},
      {{3}, {4}, 4, true, true, 0, 12, false},
      {{3}, {8}, 4, false, false, 0, 20, false},
      {{2, 3}, {12, 4}, 4, true, false, 0, 24, false},
      {{2, 3}, {4, 8}, 4, false, true, 0, 24, false},
      {{1, 3}, {99, 4}, 4, true, true, 0, 12, false},
      {{3, 1}, {4, 99}, 4, true, true, 0, 12, false},
      {{0, 3}, {7, 5}, 4, true, true, 0, 0, false},
      {{2, 0}, {3, 3}, 8, true, true, 0, 0, false},
      {{1}, {5}, 4, true, true, 0, 4, false},
      {{1, 1}, {0, 0}, 8, true, true, 0, 8, false},
      {{3}, {0}, 4, false, false, 0, 4, true},
      {{3}, {-4}, 4, false, false, -8, 4, false},
      {{2, 3}, {-12, -4}, 4, false, false, -20, 4, false},
      {{2, 3}, {12, -4}, 4, false, false, -8, 16, false},
      {{4, 4}, {4, 4}, 4, false, false, 0, 28, true},
      {{2, 2}, {8, 4}, 8, false, false, 0, 20, true},
      {{2, 2}, {16, 8}, 8, true, false, 0, 32, false},
      {{3, 4}, {16, 4}, 4, true, false, 0, 48, false},
      {{2, 3, 4}, {48, 16, 4}, 4, true, false, 0, 96, false},
      {{2, 3, 4}, {4, 8, 24}, 4, false, true, 0, 96, false},
      {{2, 3, 4}, {4, 8, 25}, 1, false, false, 0, 96, false},
      {{5}, {1}, 2, false, false, 0, 6, true},
      {{2, 2}, {2, 1}, 1, true, false, 0, 4, false},
      {{2, 2}, {1, 2}, 1, false, true, 0, 4, false},
      {{2, 2, 2}, {0, 8, 4}, 4, false, false, 0, 16, true},
      {{3, 3}, {-8, 12}, 4, false, false, -16, 28, false},
      {{1}, {0}, 4, true, true, 0, 4, false},
      {{2, 1, 3}, {12, 0, 4}, 4, true, false, 0, 24, false},
      {{2, 1, 3}, {12, 1000, 4}, 4, true, false, 0, 24, false},
      {{2, 4, 0}, {-3, -4, 16}, 2, true, true, 0, 0, false},
      {{0, 2}, {3, 0}, 1, true, true, 0, 0, false},
      {{3, 0, 1, 4}, {13, -2, 8, -3}, 1, true, true, 0, 0, false},
      {{1}, {6}, 2, true, true, 0, 2, false},
      {{3}, {48}, 4, false, false, 0, 100, false},
      {{1}, {-3}, 2, true, true, 0, 2, false},
      {{3}, {0}, 1, false, false, 0, 1, true},
      {{2, 3, 2, 1}, {4, -4, -7, 5}, 4, false, false, -15, 8, true},
      {{4, 2, 1, 3}, {-8, 24, -4, -4}, 4, false, false, -32, 28, true},
      {{4, 0, 3, 3}, {2, 3, 5, 4}, 1, true, true, 0, 0, false},
      {{2}, {48}, 4, false, false, 0, 52, false},
      {{4}, {32}, 4, false, false, 0, 100, false},
      {{4, 1, 0}, {32, -7, -16}, 8, true, true, 0, 0, false},
      {{1}, {-2}, 2, true, true, 0, 2, false},
      {{2, 0, 1, 2}, {25, 8, 25, 8}, 8, true, true, 0, 0, false},
      {{1, 1, 0}, {-8, 0, -24}, 8, true, true, 0, 0, false},
      {{1, 0}, {-4, 24}, 4, true, true, 0, 0, false},
      {{4, 3, 3}, {24, 9, 6}, 2, false, false, 0, 104, true},
      {{0, 2, 4, 2}, {-24, -16, 32, -16}, 8, true, true, 0, 0, false},
      {{0}, {8}, 1, true, true, 0, 0, false},
      {{3}, {-12}, 4, false, false, -24, 4, false},
      {{1, 4}, {8, 64}, 8, false, false, 0, 200, false},
      {{0, 2, 2, 2}, {4, -2, -2, 1}, 1, true, true, 0, 0, false},
      {{1, 3}, {2, 6}, 1, false, false, 0, 13, false},
      {{4, 1, 3}, {2, 2, 7}, 1, false, false, 0, 21, false},
      {{3, 1, 1}, {6, 1, 8}, 2, false, false, 0, 14, false},
      {{1}, {4}, 1, true, true, 0, 1, false},
      {{2, 4}, {8, -8}, 4, false, false, -24, 12, true},
      {{2}, {0}, 2, false, false, 0, 2, true},
      {{3, 3}, {-24, 96}, 8, false, false, -48, 200, false},
      {{2}, {0}, 1, false, false, 0, 1, true},
      {{4, 1}, {-16, 32}, 8, false, false, -48, 8, false},
      {{1}, {-2}, 2, true, true, 0, 2, false},
      {{4, 1}, {65, 32}, 8, false, false, 0, 203, false},
      {{0, 0}, {24, 12}, 2, true, true, 0, 0, false},
      {{1, 0, 1, 1}, {3, 1, 4, 12}, 2, true, true, 0, 0, false},
      {{4, 1}, {5, 6}, 1, false, false, 0, 16, false},
      {{3, 3}, {-6, -1}, 2, false, false, -14, 2, true},
      {{1}, {-2}, 2, true, true, 0, 2, false},
      {{1}, {13}, 1, true, true, 0, 1, false},
      {{3, 0, 1, 1}, {1, -1, 5, -3}, 1, true, true, 0, 0, false},
      {{3, 3, 3, 3}, {0, 17, 24, 24}, 4, false, false, 0, 134, true},
      {{2, 1, 2}, {-4, 8, -4}, 2, false, false, -8, 2, true},
      {{1, 4, 1, 0}, {-1, -1, -1, 0}, 1, true, true, 0, 0, false},
      {{1, 4, 1, 1}, {25, 24, 24, 16}, 8, false, false, 0, 80, false},
      {{0}, {9}, 4, true, true, 0, 0, false},
      {{4, 0, 2, 1}, {49, 9, -16, 0}, 8, true, true, 0, 0, false},
      {{1}, {-12}, 4, true, true, 0, 4, false},
      {{2, 4, 1}, {6, 13, 16}, 2, false, false, 0, 47, false},
      {{1, 0, 4}, {-1, -2, -3}, 1, true, true, 0, 0, false},
  };
  return rows;
}

TEST(layout_test, numpy_flags_extent_overlap) {
  for (const NumpyRow& r : numpy_rows()) {
    SCOPED_TRACE(format_dims(r.shape) + " strides " + format_dims(r.strides) + " itemsize " +
                 std::to_string(r.itemsize));
    Layout l = make(r.shape, r.strides, r.itemsize);
    EXPECT_EQ(l.is_c_contiguous(), r.c_contiguous);
    EXPECT_EQ(l.is_f_contiguous(), r.f_contiguous);
    EXPECT_EQ(l.extent(), (Layout::Extent{r.lo, r.hi}));
    EXPECT_EQ(Layout::checked_extent(r.shape, r.strides, r.itemsize), (Layout::Extent{r.lo, r.hi}));
    // may_overlap is conservative: it may say true where NumPy proves no overlap, never
    // false where there is one.
    if (r.overlaps) EXPECT_TRUE(l.may_overlap());
  }
}

TEST(layout_test, contiguity_rules) {
  EXPECT_TRUE(make({}, {}, 4).is_c_contiguous());
  EXPECT_TRUE(make({}, {}, 4).is_f_contiguous());
  // Size-1 dims are ignored, whatever their stride.
  EXPECT_TRUE(make({1, 3}, {-7, 4}, 4).is_c_contiguous());
  EXPECT_TRUE(make({1, 3}, {-7, 4}, 4).is_f_contiguous());
  // Zero-size is contiguous both ways, whatever the strides.
  EXPECT_TRUE(make({3, 0}, {5, -9}, 4).is_c_contiguous());
  EXPECT_TRUE(make({3, 0}, {5, -9}, 4).is_f_contiguous());
  EXPECT_FALSE(make({3}, {-4}, 4).is_c_contiguous());
  EXPECT_FALSE(make({3}, {0}, 4).is_c_contiguous());
}

TEST(layout_test, extent) {
  EXPECT_EQ(make({}, {}, 8).extent(), (Layout::Extent{0, 8}));
  EXPECT_EQ(make({2, 3}, {12, 4}, 4).extent(), (Layout::Extent{0, 24}));
  EXPECT_EQ(make({2, 3}, {-12, -4}, 4).extent(), (Layout::Extent{-20, 4}));
  EXPECT_EQ(make({0, 3}, {-12, -4}, 4).extent(), (Layout::Extent{0, 0}));
  EXPECT_EQ(make({4}, {0}, 4).extent(), (Layout::Extent{0, 4}));
}

TEST(layout_test, may_overlap) {
  EXPECT_FALSE(make({2, 3}, {12, 4}, 4).may_overlap());
  EXPECT_FALSE(make({2, 3}, {-12, 4}, 4).may_overlap());
  EXPECT_FALSE(make({2, 3}, {4, 8}, 4).may_overlap());
  EXPECT_FALSE(make({3, 2}, {4, 100}, 4).may_overlap());  // gaps are fine
  EXPECT_TRUE(make({3}, {0}, 4).may_overlap());
  EXPECT_TRUE(make({3}, {2}, 4).may_overlap());
  EXPECT_TRUE(make({2, 3}, {8, 4}, 4).may_overlap());
  // Zero-size arrays and size-1 dims never overlap.
  EXPECT_FALSE(make({0, 3}, {0, 0}, 4).may_overlap());
  EXPECT_FALSE(make({1, 3}, {0, 4}, 4).may_overlap());
  EXPECT_FALSE(make({}, {}, 4).may_overlap());
  EXPECT_FALSE(make({2}, {min64}, 1).may_overlap());
  EXPECT_FALSE(make({2, 2}, {3, 2}, 1).may_overlap());  // offsets 0, 2, 3, 5
  // Conservative: offsets 0, 2, 4, 3, 5, 7 never collide, but the test cannot prove it.
  EXPECT_TRUE(make({3, 2}, {2, 3}, 1).may_overlap());
}

TEST(layout_test, element_strides) {
  EXPECT_EQ(make({2, 3}, {-12, 4}, 4).element_strides(), (Dims{-3, 1}));
  EXPECT_EQ(make({}, {}, 4).element_strides(), Dims{});
  EXPECT_THAT(
      [] {
        make({2, 3}, {12, 6}, 4).element_strides();
      },
      ThrowsCaiError(
          Errc::value_error,
          HasSubstr("strides: axis 1 has a byte stride of 6, which is not a multiple of the item "
                    "size 4")));
  // The typed-view rule: an axis no address depends on (extent <= 1, or an empty array)
  // keeps a divisible stride and gets the row-major element stride otherwise.
  EXPECT_EQ(make({1, 3}, {12, 4}, 4).element_strides(), (Dims{3, 1}));
  EXPECT_EQ(make({1, 3}, {5, 4}, 4).element_strides(), (Dims{3, 1}));
  EXPECT_EQ(make({0, 3}, {12, 2}, 4).element_strides(), (Dims{3, 1}));
  EXPECT_EQ(make({2, 0, 3}, {7, 5, 3}, 4).element_strides(), (Dims{3, 3, 1}));
  EXPECT_EQ(make({3, 1}, {4, 3}, 4).element_strides(), (Dims{1, 1}));
  EXPECT_THAT(
      [] {
        make({2, 1}, {6, 4}, 4).element_strides();
      },
      ThrowsCaiError(Errc::value_error, AllOf(HasSubstr("axis 0"), HasSubstr("byte stride of 6"))));
  EXPECT_THAT([] { make({3}, {0}, 0).element_strides(); },
              ThrowsCaiError(Errc::value_error, HasSubstr("item size of 0")));
}

TEST(layout_test, slice) {
  Layout l = make({4, 5}, {20, 4}, 4);
  Layout::Sliced s = l.slice(0, 1, 3);
  EXPECT_EQ(Dims(s.layout.shape()), (Dims{2, 5}));
  EXPECT_EQ(Dims(s.layout.strides()), (Dims{20, 4}));
  EXPECT_EQ(s.offset, 20);
  s = l.slice(-1, 2, 5);
  EXPECT_EQ(Dims(s.layout.shape()), (Dims{4, 3}));
  EXPECT_EQ(s.offset, 8);
  s = l.slice(1, 4, 4);  // start == stop: empty, allowed
  EXPECT_EQ(Dims(s.layout.shape()), (Dims{4, 0}));
  EXPECT_EQ(s.offset, 16);
  s = make({4}, {-8}, 8).slice(0, 3, 4);
  EXPECT_EQ(s.offset, -24);
}

TEST(layout_test, slice_rejects) {
  Layout l = make({4, 5}, {20, 4}, 4);
  EXPECT_THAT(
      [&] { l.slice(0, 4, 4); },
      ThrowsCaiError(Errc::index_error,
                     HasSubstr("slice(): axis 0, start 4, stop 4, N 4: requires 0 <= start < N")));
  EXPECT_THAT(
      [&] { l.slice(0, -1, 2); },
      ThrowsCaiError(Errc::index_error, AllOf(HasSubstr("start -1"), HasSubstr("0 <= start < N"))));
  EXPECT_THAT(
      [&] { l.slice(-1, 3, 2); },
      ThrowsCaiError(
          Errc::index_error,
          HasSubstr("slice(): axis -1 (= 1), start 3, stop 2, N 5: requires start <= stop <= N")));
  EXPECT_THAT([&] { l.slice(1, 0, 6); },
              ThrowsCaiError(Errc::index_error,
                             AllOf(HasSubstr("stop 6"), HasSubstr("start <= stop <= N"))));
  EXPECT_THAT(
      [&] { l.slice(2, 0, 1); },
      ThrowsCaiError(Errc::index_error,
                     HasSubstr("slice(): axis 2 is out of range (allowed: -2 <= axis < 2)")));
  EXPECT_THAT([&] { l.slice(-3, 0, 1); },
              ThrowsCaiError(Errc::index_error, HasSubstr("axis -3 is out of range")));
  EXPECT_THAT([] { Layout().slice(0, 0, 0); },
              ThrowsCaiError(Errc::index_error, HasSubstr("0-dimensional")));
  // N = 0: no start satisfies 0 <= start < N.
  EXPECT_THAT([] { make({0}, {4}, 4).slice(0, 0, 0); },
              ThrowsCaiError(Errc::index_error, HasSubstr("N 0")));
}

struct IndexRow {
  Dims shape, strides;
  std::vector<IndexItem> items;
  Dims out_shape, out_strides;
  std::int64_t offset;
};

// Expectations computed with NumPy 2.4: a[items].shape, .strides, and the data pointer delta.
const std::vector<IndexRow>& index_rows() {
  static const std::vector<IndexRow> rows = {
      {{4, 5, 6}, {120, 24, 4}, {IndexItem::at(0)}, {5, 6}, {24, 4}, 0},
      {{4, 5, 6}, {120, 24, 4}, {IndexItem::at(-1)}, {5, 6}, {24, 4}, 360},
      {{4, 5, 6}, {120, 24, 4}, {IndexItem::at(1), IndexItem::at(2)}, {6}, {4}, 168},
      {{4, 5, 6},
       {120, 24, 4},
       {IndexItem::range(std::nullopt, std::nullopt, std::nullopt)},
       {4, 5, 6},
       {120, 24, 4},
       0},
      {{4, 5, 6},
       {120, 24, 4},
       {IndexItem::range(1, 3, std::nullopt)},
       {2, 5, 6},
       {120, 24, 4},
       120},
      {{4, 5, 6},
       {120, 24, 4},
       {IndexItem::range(std::nullopt, std::nullopt, -1)},
       {4, 5, 6},
       {-120, 24, 4},
       360},
      {{4, 5, 6},
       {120, 24, 4},
       {IndexItem::range(-2, std::nullopt, std::nullopt)},
       {2, 5, 6},
       {120, 24, 4},
       240},
      {{4, 5, 6}, {120, 24, 4}, {IndexItem::range(10, -10, -1)}, {4, 5, 6}, {-120, 24, 4}, 360},
      {{4, 5, 6}, {120, 24, 4}, {IndexItem::range(-100, 100, 2)}, {2, 5, 6}, {240, 24, 4}, 0},
      {{4, 5, 6}, {120, 24, 4}, {IndexItem::range(3, 1, std::nullopt)}, {0, 5, 6}, {120, 24, 4}, 0},
      {{4, 5, 6}, {120, 24, 4}, {IndexItem::range(3, 1, -1)}, {2, 5, 6}, {-120, 24, 4}, 360},
      {{4, 5, 6}, {120, 24, 4}, {IndexItem::newaxis()}, {1, 4, 5, 6}, {0, 120, 24, 4}, 0},
      {{4, 5, 6}, {120, 24, 4}, {IndexItem::ellipsis()}, {4, 5, 6}, {120, 24, 4}, 0},
      {{4, 5, 6}, {120, 24, 4}, {IndexItem::ellipsis(), IndexItem::at(0)}, {4, 5}, {120, 24}, 0},
      {{4, 5, 6}, {120, 24, 4}, {IndexItem::at(0), IndexItem::ellipsis()}, {5, 6}, {24, 4}, 0},
      {{4, 5, 6},
       {120, 24, 4},
       {IndexItem::newaxis(), IndexItem::ellipsis(), IndexItem::newaxis()},
       {1, 4, 5, 6, 1},
       {0, 120, 24, 4, 0},
       0},
      {{4, 5, 6},
       {120, 24, 4},
       {IndexItem::at(1), IndexItem::newaxis(), IndexItem::range(std::nullopt, std::nullopt, 2),
        IndexItem::at(-1)},
       {1, 3},
       {0, 48},
       140},
      {{4, 5, 6},
       {120, 24, 4},
       {IndexItem::range(std::nullopt, std::nullopt, 7)},
       {1, 5, 6},
       {840, 24, 4},
       0},
      {{4, 5, 6},
       {120, 24, 4},
       {IndexItem::range(std::nullopt, std::nullopt, -7)},
       {1, 5, 6},
       {-840, 24, 4},
       360},
      {{4, 5, 6},
       {120, 24, 4},
       {IndexItem::ellipsis(), IndexItem::range(1, 2, std::nullopt), IndexItem::newaxis()},
       {4, 5, 1, 1},
       {120, 24, 4, 0},
       4},
      {{4, 5, 6}, {120, 24, 4}, {}, {4, 5, 6}, {120, 24, 4}, 0},
      {{4, 5, 6},
       {120, 24, 4},
       {IndexItem::range(5, std::nullopt, -2), IndexItem::at(1)},
       {2, 6},
       {-240, 4},
       384},
      {{4, 5, 6}, {-120, 24, 4}, {IndexItem::at(0)}, {5, 6}, {24, 4}, 0},
      {{4, 5, 6}, {-120, 24, 4}, {IndexItem::at(-1)}, {5, 6}, {24, 4}, -360},
      {{4, 5, 6}, {-120, 24, 4}, {IndexItem::at(1), IndexItem::at(2)}, {6}, {4}, -72},
      {{4, 5, 6},
       {-120, 24, 4},
       {IndexItem::range(std::nullopt, std::nullopt, std::nullopt)},
       {4, 5, 6},
       {-120, 24, 4},
       0},
      {{4, 5, 6},
       {-120, 24, 4},
       {IndexItem::range(1, 3, std::nullopt)},
       {2, 5, 6},
       {-120, 24, 4},
       -120},
      {{4, 5, 6},
       {-120, 24, 4},
       {IndexItem::range(std::nullopt, std::nullopt, -1)},
       {4, 5, 6},
       {120, 24, 4},
       -360},
      {{4, 5, 6},
       {-120, 24, 4},
       {IndexItem::range(-2, std::nullopt, std::nullopt)},
       {2, 5, 6},
       {-120, 24, 4},
       -240},
      {{4, 5, 6}, {-120, 24, 4}, {IndexItem::range(10, -10, -1)}, {4, 5, 6}, {120, 24, 4}, -360},
      {{4, 5, 6}, {-120, 24, 4}, {IndexItem::range(-100, 100, 2)}, {2, 5, 6}, {-240, 24, 4}, 0},
      {{4, 5, 6},
       {-120, 24, 4},
       {IndexItem::range(3, 1, std::nullopt)},
       {0, 5, 6},
       {-120, 24, 4},
       0},
      {{4, 5, 6}, {-120, 24, 4}, {IndexItem::range(3, 1, -1)}, {2, 5, 6}, {120, 24, 4}, -360},
      {{4, 5, 6}, {-120, 24, 4}, {IndexItem::newaxis()}, {1, 4, 5, 6}, {0, -120, 24, 4}, 0},
      {{4, 5, 6}, {-120, 24, 4}, {IndexItem::ellipsis()}, {4, 5, 6}, {-120, 24, 4}, 0},
      {{4, 5, 6}, {-120, 24, 4}, {IndexItem::ellipsis(), IndexItem::at(0)}, {4, 5}, {-120, 24}, 0},
      {{4, 5, 6}, {-120, 24, 4}, {IndexItem::at(0), IndexItem::ellipsis()}, {5, 6}, {24, 4}, 0},
      {{4, 5, 6},
       {-120, 24, 4},
       {IndexItem::newaxis(), IndexItem::ellipsis(), IndexItem::newaxis()},
       {1, 4, 5, 6, 1},
       {0, -120, 24, 4, 0},
       0},
      {{4, 5, 6},
       {-120, 24, 4},
       {IndexItem::at(1), IndexItem::newaxis(), IndexItem::range(std::nullopt, std::nullopt, 2),
        IndexItem::at(-1)},
       {1, 3},
       {0, 48},
       -100},
      {{4, 5, 6},
       {-120, 24, 4},
       {IndexItem::range(std::nullopt, std::nullopt, 7)},
       {1, 5, 6},
       {-840, 24, 4},
       0},
      {{4, 5, 6},
       {-120, 24, 4},
       {IndexItem::range(std::nullopt, std::nullopt, -7)},
       {1, 5, 6},
       {840, 24, 4},
       -360},
      {{4, 5, 6},
       {-120, 24, 4},
       {IndexItem::ellipsis(), IndexItem::range(1, 2, std::nullopt), IndexItem::newaxis()},
       {4, 5, 1, 1},
       {-120, 24, 4, 0},
       4},
      {{4, 5, 6}, {-120, 24, 4}, {}, {4, 5, 6}, {-120, 24, 4}, 0},
      {{4, 5, 6},
       {-120, 24, 4},
       {IndexItem::range(5, std::nullopt, -2), IndexItem::at(1)},
       {2, 6},
       {240, 4},
       -336},
      {{6, 4, 5}, {4, 120, 24}, {IndexItem::at(0)}, {4, 5}, {120, 24}, 0},
      {{6, 4, 5}, {4, 120, 24}, {IndexItem::at(-1)}, {4, 5}, {120, 24}, 20},
      {{6, 4, 5}, {4, 120, 24}, {IndexItem::at(1), IndexItem::at(2)}, {5}, {24}, 244},
      {{6, 4, 5},
       {4, 120, 24},
       {IndexItem::range(std::nullopt, std::nullopt, std::nullopt)},
       {6, 4, 5},
       {4, 120, 24},
       0},
      {{6, 4, 5}, {4, 120, 24}, {IndexItem::range(1, 3, std::nullopt)}, {2, 4, 5}, {4, 120, 24}, 4},
      {{6, 4, 5},
       {4, 120, 24},
       {IndexItem::range(std::nullopt, std::nullopt, -1)},
       {6, 4, 5},
       {-4, 120, 24},
       20},
      {{6, 4, 5},
       {4, 120, 24},
       {IndexItem::range(-2, std::nullopt, std::nullopt)},
       {2, 4, 5},
       {4, 120, 24},
       16},
      {{6, 4, 5}, {4, 120, 24}, {IndexItem::range(10, -10, -1)}, {6, 4, 5}, {-4, 120, 24}, 20},
      {{6, 4, 5}, {4, 120, 24}, {IndexItem::range(-100, 100, 2)}, {3, 4, 5}, {8, 120, 24}, 0},
      {{6, 4, 5}, {4, 120, 24}, {IndexItem::range(3, 1, std::nullopt)}, {0, 4, 5}, {4, 120, 24}, 0},
      {{6, 4, 5}, {4, 120, 24}, {IndexItem::range(3, 1, -1)}, {2, 4, 5}, {-4, 120, 24}, 12},
      {{6, 4, 5}, {4, 120, 24}, {IndexItem::newaxis()}, {1, 6, 4, 5}, {0, 4, 120, 24}, 0},
      {{6, 4, 5}, {4, 120, 24}, {IndexItem::ellipsis()}, {6, 4, 5}, {4, 120, 24}, 0},
      {{6, 4, 5}, {4, 120, 24}, {IndexItem::ellipsis(), IndexItem::at(0)}, {6, 4}, {4, 120}, 0},
      {{6, 4, 5}, {4, 120, 24}, {IndexItem::at(0), IndexItem::ellipsis()}, {4, 5}, {120, 24}, 0},
      {{6, 4, 5},
       {4, 120, 24},
       {IndexItem::newaxis(), IndexItem::ellipsis(), IndexItem::newaxis()},
       {1, 6, 4, 5, 1},
       {0, 4, 120, 24, 0},
       0},
      {{6, 4, 5},
       {4, 120, 24},
       {IndexItem::at(1), IndexItem::newaxis(), IndexItem::range(std::nullopt, std::nullopt, 2),
        IndexItem::at(-1)},
       {1, 2},
       {0, 240},
       100},
      {{6, 4, 5},
       {4, 120, 24},
       {IndexItem::range(std::nullopt, std::nullopt, 7)},
       {1, 4, 5},
       {28, 120, 24},
       0},
      {{6, 4, 5},
       {4, 120, 24},
       {IndexItem::range(std::nullopt, std::nullopt, -7)},
       {1, 4, 5},
       {-28, 120, 24},
       20},
      {{6, 4, 5},
       {4, 120, 24},
       {IndexItem::ellipsis(), IndexItem::range(1, 2, std::nullopt), IndexItem::newaxis()},
       {6, 4, 1, 1},
       {4, 120, 24, 0},
       24},
      {{6, 4, 5}, {4, 120, 24}, {}, {6, 4, 5}, {4, 120, 24}, 0},
      {{6, 4, 5},
       {4, 120, 24},
       {IndexItem::range(5, std::nullopt, -2), IndexItem::at(1)},
       {3, 5},
       {-8, 24},
       140},
      {{4, 3, 2}, {120, 48, -12}, {IndexItem::at(0)}, {3, 2}, {48, -12}, 0},
      {{4, 3, 2}, {120, 48, -12}, {IndexItem::at(-1)}, {3, 2}, {48, -12}, 360},
      {{4, 3, 2}, {120, 48, -12}, {IndexItem::at(1), IndexItem::at(2)}, {2}, {-12}, 216},
      {{4, 3, 2},
       {120, 48, -12},
       {IndexItem::range(std::nullopt, std::nullopt, std::nullopt)},
       {4, 3, 2},
       {120, 48, -12},
       0},
      {{4, 3, 2},
       {120, 48, -12},
       {IndexItem::range(1, 3, std::nullopt)},
       {2, 3, 2},
       {120, 48, -12},
       120},
      {{4, 3, 2},
       {120, 48, -12},
       {IndexItem::range(std::nullopt, std::nullopt, -1)},
       {4, 3, 2},
       {-120, 48, -12},
       360},
      {{4, 3, 2},
       {120, 48, -12},
       {IndexItem::range(-2, std::nullopt, std::nullopt)},
       {2, 3, 2},
       {120, 48, -12},
       240},
      {{4, 3, 2}, {120, 48, -12}, {IndexItem::range(10, -10, -1)}, {4, 3, 2}, {-120, 48, -12}, 360},
      {{4, 3, 2}, {120, 48, -12}, {IndexItem::range(-100, 100, 2)}, {2, 3, 2}, {240, 48, -12}, 0},
      {{4, 3, 2},
       {120, 48, -12},
       {IndexItem::range(3, 1, std::nullopt)},
       {0, 3, 2},
       {120, 48, -12},
       0},
      {{4, 3, 2}, {120, 48, -12}, {IndexItem::range(3, 1, -1)}, {2, 3, 2}, {-120, 48, -12}, 360},
      {{4, 3, 2}, {120, 48, -12}, {IndexItem::newaxis()}, {1, 4, 3, 2}, {0, 120, 48, -12}, 0},
      {{4, 3, 2}, {120, 48, -12}, {IndexItem::ellipsis()}, {4, 3, 2}, {120, 48, -12}, 0},
      {{4, 3, 2}, {120, 48, -12}, {IndexItem::ellipsis(), IndexItem::at(0)}, {4, 3}, {120, 48}, 0},
      {{4, 3, 2}, {120, 48, -12}, {IndexItem::at(0), IndexItem::ellipsis()}, {3, 2}, {48, -12}, 0},
      {{4, 3, 2},
       {120, 48, -12},
       {IndexItem::newaxis(), IndexItem::ellipsis(), IndexItem::newaxis()},
       {1, 4, 3, 2, 1},
       {0, 120, 48, -12, 0},
       0},
      {{4, 3, 2},
       {120, 48, -12},
       {IndexItem::at(1), IndexItem::newaxis(), IndexItem::range(std::nullopt, std::nullopt, 2),
        IndexItem::at(-1)},
       {1, 2},
       {0, 96},
       108},
      {{4, 3, 2},
       {120, 48, -12},
       {IndexItem::range(std::nullopt, std::nullopt, 7)},
       {1, 3, 2},
       {840, 48, -12},
       0},
      {{4, 3, 2},
       {120, 48, -12},
       {IndexItem::range(std::nullopt, std::nullopt, -7)},
       {1, 3, 2},
       {-840, 48, -12},
       360},
      {{4, 3, 2},
       {120, 48, -12},
       {IndexItem::ellipsis(), IndexItem::range(1, 2, std::nullopt), IndexItem::newaxis()},
       {4, 3, 1, 1},
       {120, 48, -12, 0},
       -12},
      {{4, 3, 2}, {120, 48, -12}, {}, {4, 3, 2}, {120, 48, -12}, 0},
      {{4, 3, 2},
       {120, 48, -12},
       {IndexItem::range(5, std::nullopt, -2), IndexItem::at(1)},
       {2, 2},
       {-240, -12},
       408},
      {{4, 3, 2},
       {120, 48, -12},
       {IndexItem::range(5, std::nullopt, 1), IndexItem::range(std::nullopt, -5, 2)},
       {0, 0, 2},
       {120, 48, -12},
       0},
      {{0, 3}, {0, 0}, {IndexItem::range(-3, std::nullopt, -1)}, {0, 3}, {0, 0}, 0},
      {{0, 3}, {0, 0}, {}, {0, 3}, {0, 0}, 0},
      {{4, 5, 6}, {120, 24, 4}, {}, {4, 5, 6}, {120, 24, 4}, 0},
      {{4, 5, 6},
       {-120, 24, 4},
       {IndexItem::range(-2, std::nullopt, -1)},
       {3, 5, 6},
       {120, 24, 4},
       -240},
      {{6, 4, 5},
       {4, 120, 24},
       {IndexItem::range(5, std::nullopt, -2)},
       {3, 4, 5},
       {-8, 120, 24},
       20},
      {{4, 5, 6},
       {-120, 24, 4},
       {IndexItem::at(-3), IndexItem::range(std::nullopt, std::nullopt, 1)},
       {5, 6},
       {24, 4},
       -120},
      {{4, 5, 6},
       {120, 24, 4},
       {IndexItem::range(-1, std::nullopt, -5), IndexItem::newaxis(), IndexItem::at(1),
        IndexItem::at(-3)},
       {1, 1},
       {-600, 0},
       396},
      {{2}, {2}, {}, {2}, {2}, 0},
      {{4, 5, 6},
       {120, 24, 4},
       {IndexItem::range(std::nullopt, std::nullopt, -2), IndexItem::range(std::nullopt, 4, 1)},
       {2, 4, 6},
       {-240, 24, 4},
       360},
      {{0, 3},
       {0, 0},
       {IndexItem::range(std::nullopt, std::nullopt, std::nullopt), IndexItem::at(-1)},
       {0},
       {0},
       0},
      {{4, 5, 6}, {120, 24, 4}, {IndexItem::newaxis()}, {1, 4, 5, 6}, {0, 120, 24, 4}, 0},
      {{4, 5, 6}, {120, 24, 4}, {}, {4, 5, 6}, {120, 24, 4}, 0},
      {{4, 5, 6},
       {-120, 24, 4},
       {IndexItem::at(1), IndexItem::range(std::nullopt, std::nullopt, -2)},
       {3, 6},
       {-48, 4},
       -24},
      {{4, 5, 6}, {-120, 24, 4}, {IndexItem::at(-1)}, {5, 6}, {24, 4}, -360},
      {{4, 3, 2},
       {120, 48, -12},
       {IndexItem::range(std::nullopt, -7, 1), IndexItem::range(0, std::nullopt, -2),
        IndexItem::at(1)},
       {0, 1},
       {120, -96},
       -12},
      {{0, 3}, {0, 0}, {IndexItem::range(-3, std::nullopt, -2)}, {0, 3}, {0, 0}, 0},
      {{6, 4, 5}, {4, 120, 24}, {IndexItem::at(-6)}, {4, 5}, {120, 24}, 0},
      {{6, 4, 5},
       {4, 120, 24},
       {IndexItem::range(-7, -5, 2), IndexItem::range(std::nullopt, std::nullopt, std::nullopt),
        IndexItem::range(std::nullopt, std::nullopt, 3)},
       {1, 4, 2},
       {8, 120, 72},
       0},
      {{4, 5, 6},
       {120, 24, 4},
       {IndexItem::newaxis(), IndexItem::at(1), IndexItem::range(-4, std::nullopt, -2),
        IndexItem::at(0)},
       {1, 1},
       {0, -48},
       144},
      {{4, 5, 6},
       {120, 24, 4},
       {IndexItem::range(2, std::nullopt, -1)},
       {3, 5, 6},
       {-120, 24, 4},
       240},
      {{4, 5, 6},
       {120, 24, 4},
       {IndexItem::range(7, 4, 3), IndexItem::range(6, std::nullopt, -1), IndexItem::at(3)},
       {0, 5},
       {120, -24},
       108},
      {{4, 5, 6},
       {120, 24, 4},
       {IndexItem::at(-3), IndexItem::range(7, -8, 2)},
       {0, 6},
       {24, 4},
       120},
      {{0, 3}, {0, 0}, {}, {0, 3}, {0, 0}, 0},
      {{4, 5, 6},
       {-120, 24, 4},
       {IndexItem::newaxis(), IndexItem::range(-4, -1, 1),
        IndexItem::range(std::nullopt, std::nullopt, -1), IndexItem::at(-4)},
       {1, 3, 5},
       {0, -120, -24},
       104},
      {{4, 3, 2},
       {120, 48, -12},
       {IndexItem::range(std::nullopt, std::nullopt, std::nullopt), IndexItem::newaxis()},
       {4, 1, 3, 2},
       {120, 0, 48, -12},
       0},
      {{4, 3, 2}, {120, 48, -12}, {IndexItem::range(3, 4, 2)}, {1, 3, 2}, {240, 48, -12}, 360},
      {{4, 5, 6}, {120, 24, 4}, {}, {4, 5, 6}, {120, 24, 4}, 0},
      {{0, 3}, {0, 0}, {}, {0, 3}, {0, 0}, 0},
      {{2}, {2}, {}, {2}, {2}, 0},
      {{6, 4, 5}, {4, 120, 24}, {IndexItem::range(std::nullopt, 3, 1)}, {3, 4, 5}, {4, 120, 24}, 0},
      {{6, 4, 5}, {4, 120, 24}, {}, {6, 4, 5}, {4, 120, 24}, 0},
      {{4, 5, 6},
       {-120, 24, 4},
       {IndexItem::range(-6, -6, std::nullopt), IndexItem::at(2)},
       {0, 6},
       {-120, 4},
       48},
      {{2}, {2}, {}, {2}, {2}, 0},
      {{4, 3, 2}, {120, 48, -12}, {IndexItem::at(-1)}, {3, 2}, {48, -12}, 360},
      {{6, 4, 5},
       {4, 120, 24},
       {IndexItem::range(std::nullopt, std::nullopt, std::nullopt),
        IndexItem::range(std::nullopt, 0, 1), IndexItem::range(4, 6, -2)},
       {6, 0, 0},
       {4, 120, 24},
       0},
      {{4, 5, 6}, {-120, 24, 4}, {}, {4, 5, 6}, {-120, 24, 4}, 0},
      {{4, 3, 2},
       {120, 48, -12},
       {IndexItem::range(1, std::nullopt, 2), IndexItem::at(-1),
        IndexItem::range(std::nullopt, std::nullopt, 3)},
       {2, 1},
       {240, -36},
       216},
      {{4, 5, 6}, {120, 24, 4}, {}, {4, 5, 6}, {120, 24, 4}, 0},
      {{6, 4, 5},
       {4, 120, 24},
       {IndexItem::range(std::nullopt, 7, 3), IndexItem::range(std::nullopt, 0, -5),
        IndexItem::range(8, 1, -5)},
       {2, 1, 1},
       {12, -600, -120},
       456},
      {{0, 3}, {0, 0}, {}, {0, 3}, {0, 0}, 0},
      {{4, 5, 6}, {-120, 24, 4}, {IndexItem::range(2, -4, -1)}, {2, 5, 6}, {120, 24, 4}, -240},
      {{4, 5, 6},
       {120, 24, 4},
       {IndexItem::at(-4), IndexItem::range(-5, std::nullopt, std::nullopt),
        IndexItem::range(3, -2, 3)},
       {5, 1},
       {24, 12},
       12},
      {{4, 5, 6},
       {-120, 24, 4},
       {IndexItem::range(7, 1, std::nullopt)},
       {0, 5, 6},
       {-120, 24, 4},
       0},
      {{0, 3}, {0, 0}, {}, {0, 3}, {0, 0}, 0},
      {{6, 4, 5}, {4, 120, 24}, {}, {6, 4, 5}, {4, 120, 24}, 0},
      {{4, 5, 6}, {120, 24, 4}, {}, {4, 5, 6}, {120, 24, 4}, 0},
      {{4, 5, 6}, {-120, 24, 4}, {}, {4, 5, 6}, {-120, 24, 4}, 0},
      {{2}, {2}, {}, {2}, {2}, 0},
      {{2}, {2}, {IndexItem::range(-4, std::nullopt, -5)}, {0}, {2}, 0},
      {{0, 3},
       {0, 0},
       {IndexItem::range(2, -3, -2), IndexItem::range(std::nullopt, std::nullopt, -1)},
       {0, 3},
       {0, 0},
       0},
      {{4, 5, 6},
       {-120, 24, 4},
       {IndexItem::range(std::nullopt, -4, 1), IndexItem::newaxis(), IndexItem::at(-2),
        IndexItem::at(-3)},
       {0, 1},
       {-120, 0},
       84},
      {{4, 5, 6}, {-120, 24, 4}, {IndexItem::newaxis()}, {1, 4, 5, 6}, {0, -120, 24, 4}, 0},
      {{4, 3, 2},
       {120, 48, -12},
       {IndexItem::range(-4, std::nullopt, std::nullopt)},
       {4, 3, 2},
       {120, 48, -12},
       0},
      {{2}, {2}, {IndexItem::range(std::nullopt, 3, -1)}, {0}, {2}, 0},
      {{2}, {2}, {IndexItem::range(std::nullopt, std::nullopt, -5)}, {1}, {-10}, 2},
      {{0, 3},
       {0, 0},
       {IndexItem::range(std::nullopt, std::nullopt, std::nullopt)},
       {0, 3},
       {0, 0},
       0},
      {{4, 5, 6},
       {-120, 24, 4},
       {IndexItem::range(std::nullopt, -5, std::nullopt), IndexItem::newaxis(),
        IndexItem::range(std::nullopt, std::nullopt, -2), IndexItem::range(-4, 5, -2)},
       {0, 1, 3, 0},
       {-120, 0, -48, 4},
       96},
  };
  return rows;
}

TEST(layout_test, index_matches_numpy) {
  for (const IndexRow& r : index_rows()) {
    SCOPED_TRACE(format_dims(r.shape) + " strides " + format_dims(r.strides) + " -> " +
                 format_dims(r.out_shape));
    Layout::Sliced s = make(r.shape, r.strides, 4).index(r.items);
    EXPECT_EQ(Dims(s.layout.shape()), r.out_shape);
    EXPECT_EQ(Dims(s.layout.strides()), r.out_strides);
    EXPECT_EQ(s.offset, r.offset);
  }
}

TEST(layout_test, index_rules) {
  Layout l = make({3, 4}, {16, 4}, 4);
  std::vector<IndexItem> items = {IndexItem::at(0), IndexItem::at(0), IndexItem::at(0)};
  EXPECT_THAT(
      [&] { l.index(items); },
      ThrowsCaiError(
          Errc::index_error,
          HasSubstr("index(): too many indices: the array is 2-dimensional, but 3 were indexed")));
  items = {IndexItem::ellipsis(), IndexItem::ellipsis()};
  EXPECT_THAT([&] { l.index(items); },
              ThrowsCaiError(Errc::index_error, HasSubstr("single ellipsis")));
  items = {IndexItem::at(3)};
  EXPECT_THAT(
      [&] { l.index(items); },
      ThrowsCaiError(Errc::index_error,
                     HasSubstr("index(): index 3 is out of bounds for axis 0 with size 3")));
  items = {IndexItem::all(), IndexItem::at(-5)};
  EXPECT_THAT([&] { l.index(items); },
              ThrowsCaiError(Errc::index_error,
                             AllOf(HasSubstr("index -5"), HasSubstr("axis 1 with size 4"))));
  items = {IndexItem::range(std::nullopt, std::nullopt, 0)};
  EXPECT_THAT([&] { l.index(items); },
              ThrowsCaiError(Errc::value_error, HasSubstr("slice step cannot be zero")));
  items.assign(62, IndexItem::newaxis());
  EXPECT_EQ(l.index(items).layout.ndim(), 64);
  items.push_back(IndexItem::newaxis());
  EXPECT_THAT([&] { l.index(items); },
              ThrowsCaiError(Errc::index_error, HasSubstr("65 dimensions")));
  // Newaxis with no other index keeps everything.
  items = {IndexItem::newaxis()};
  Layout::Sliced s = l.index(items);
  EXPECT_EQ(Dims(s.layout.shape()), (Dims{1, 3, 4}));
  EXPECT_EQ(Dims(s.layout.strides()), (Dims{0, 16, 4}));
}

TEST(layout_test, index_extreme_slices) {
  Layout l = make({5}, {8}, 8);
  std::vector<IndexItem> items = {IndexItem::range(min64, max64, min64)};
  Layout::Sliced s = l.index(items);  // step clamps to -max64: Python yields an empty slice
  EXPECT_EQ(s.layout.shape()[0], 0);
  items = {IndexItem::range(max64, min64, min64)};
  s = l.index(items);  // from the last element, one step
  EXPECT_EQ(s.layout.shape()[0], 1);
  EXPECT_EQ(s.offset, 32);
  EXPECT_EQ(s.layout.strides()[0], 8);  // stride * step overflows, used once: kept
  items = {IndexItem::range(std::nullopt, std::nullopt, max64)};
  s = l.index(items);
  EXPECT_EQ(s.layout.shape()[0], 1);
  EXPECT_EQ(s.offset, 0);
  // A zero-size array with a huge stride on another axis: the offset overflows.
  Layout z = make({0, 3}, {8, max64 / 2}, 8);
  items = {IndexItem::all(), IndexItem::at(2)};
  EXPECT_EQ(z.index(items).offset, max64 / 2 * 2);
  items = {IndexItem::all(), IndexItem::range(std::nullopt, std::nullopt, 4)};
  EXPECT_EQ(Dims(z.index(items).layout.strides()), (Dims{8, max64 / 2}));  // used once: kept
}

TEST(layout_test, transpose_and_permute) {
  Layout l = make({2, 3, 4}, {48, 16, 4}, 4);
  Layout t = l.transpose();
  EXPECT_EQ(Dims(t.shape()), (Dims{4, 3, 2}));
  EXPECT_EQ(Dims(t.strides()), (Dims{4, 16, 48}));
  EXPECT_TRUE(t.is_f_contiguous());
  EXPECT_EQ(t.transpose(), l);

  const int axes[] = {1, -1, 0};
  Layout p = l.permute(axes);
  EXPECT_EQ(Dims(p.shape()), (Dims{3, 4, 2}));
  EXPECT_EQ(Dims(p.strides()), (Dims{16, 4, 48}));

  const int two[] = {0, 1};
  EXPECT_THAT([&] { l.permute(two); },
              ThrowsCaiError(Errc::value_error,
                             AllOf(HasSubstr("permute(): 2 axes given"), HasSubstr("3"))));
  const int repeated[] = {0, 1, -3};
  EXPECT_THAT([&] { l.permute(repeated); },
              ThrowsCaiError(Errc::value_error, HasSubstr("permute(): axis 0 is repeated")));
  const int out[] = {0, 1, 3};
  EXPECT_THAT(
      [&] { l.permute(out); },
      ThrowsCaiError(Errc::index_error,
                     HasSubstr("permute(): axis 3 is out of range (allowed: -3 <= axis < 3)")));
}

}  // namespace
}  // namespace cai

namespace cai {
namespace {

TEST(layout_test, broadcast_to_follows_numpy) {
  const Layout row = make({3}, {4}, 4);
  const Layout b = row.broadcast_to(std::vector<std::int64_t>{2, 3}, "x");
  EXPECT_EQ(Dims(b.shape()), (Dims{2, 3}));
  EXPECT_EQ(Dims(b.strides()), (Dims{0, 4}));  // a new leading axis repeats
  const Layout col = make({2, 1}, {4, 4}, 4);
  EXPECT_EQ(Dims(col.broadcast_to(std::vector<std::int64_t>{2, 5}, "x").strides()), (Dims{4, 0}));
  EXPECT_THAT(
      [&] {
        (void)row.broadcast_to(std::vector<std::int64_t>{2, 4}, "__setitem__()");
      },
      ThrowsCaiError(Errc::value_error,
                     HasSubstr("__setitem__(): cannot broadcast axis 0 of size 3 to "
                               "size 4")));
  EXPECT_THAT(
      [&] {
        (void)make({2, 3}, {12, 4}, 4).broadcast_to(std::vector<std::int64_t>{3}, "s");
      },
      ThrowsCaiError(Errc::value_error,
                     HasSubstr("s: cannot broadcast a 2-d value to a 1-d array")));
}

TEST(layout_test, is_f_only_is_numpys_order_a) {
  EXPECT_TRUE(make({2, 3}, {4, 8}, 4).is_f_only());
  EXPECT_FALSE(make({2, 3}, {12, 4}, 4).is_f_only());
  EXPECT_FALSE(make({1, 3}, {12, 4}, 4).is_f_only());  // both orders: C wins
  EXPECT_FALSE(make({2, 3}, {24, 4}, 4).is_f_only());  // neither
}

TEST(layout_test, element_strides_of_any_item_size) {
  // Powers of two take a shift, others a division: the same rule.
  for (const std::int64_t itemsize : {1, 2, 4, 8, 16, 3, 6, 12}) {
    const Layout l = make({4, 5}, {-5 * 2 * itemsize, 2 * itemsize}, itemsize);
    std::int64_t out[2];
    ASSERT_TRUE(l.try_element_strides(out)) << itemsize;
    EXPECT_EQ(out[0], -10) << itemsize;
    EXPECT_EQ(out[1], 2) << itemsize;
    if (itemsize > 1)
      EXPECT_FALSE(make({4, 5}, {itemsize * 5, itemsize + 1}, itemsize).try_element_strides(out));
  }
}

}  // namespace
}  // namespace cai
