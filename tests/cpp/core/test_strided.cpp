// Strided-layout arithmetic (cai/core/strided.h): extents, byte ranges, contiguity, overlap,
// normalisation, merging, contiguous runs and element iteration.

#include "cai/core/strided.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <limits>
#include <utility>
#include <vector>

namespace cai {
namespace {

using Runs = std::vector<std::pair<std::uint64_t, std::uint64_t>>;
constexpr std::int64_t max64 = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t min64 = std::numeric_limits<std::int64_t>::min();

Runs runs_of(std::uint64_t ptr, std::vector<std::int64_t> shape, std::vector<std::int64_t> strides,
             std::int64_t itemsize, std::uint64_t cap = 1 << 20, bool* exact = nullptr) {
  Runs out;
  bool ok = for_each_run(ptr, shape, strides, itemsize, cap,
                         [&](std::uint64_t lo, std::uint64_t hi) { out.emplace_back(lo, hi); });
  if (exact) *exact = ok;
  std::sort(out.begin(), out.end());
  return out;
}

TEST(strided_test, extent_and_byte_range) {
  const std::int64_t shape[] = {3, 4};
  EXPECT_EQ(checked_extent(shape, Dims{16, 4}, 4), (Extent{0, 48}));
  EXPECT_EQ(checked_extent(shape, Dims{-16, 4}, 4), (Extent{-32, 16}));
  EXPECT_EQ(checked_extent(shape, Dims{0, 0}, 8), (Extent{0, 8}));
  EXPECT_EQ(checked_extent(Dims{3, 0}, Dims{16, 4}, 4), (Extent{0, 0}));
  EXPECT_EQ(checked_extent(shape, Dims{max64, 1}, 4), std::nullopt);
  EXPECT_EQ(checked_extent(shape, Dims{4}, 4), std::nullopt);  // ranks differ

  EXPECT_EQ(byte_range(1000, Dims{2, 2}, Dims{-16, 8}, 8), (ByteRange{984, 1016}));
  EXPECT_EQ(byte_range(0, Dims{2, 0}, Dims{-16, 8}, 8), ByteRange{});
  EXPECT_EQ(byte_range(8, Dims{2, 2}, Dims{-16, 8}, 8), std::nullopt);  // below address 0
  // hi must be representable: the last usable byte is 2^64 - 2.
  EXPECT_EQ(byte_range(~std::uint64_t{0} - 3, Dims{}, Dims{}, 4), std::nullopt);
  EXPECT_EQ(byte_range(~std::uint64_t{0} - 4, Dims{}, Dims{}, 4),
            (ByteRange{~std::uint64_t{0} - 4, ~std::uint64_t{0}}));

  const ByteRange a{100, 200}, b{199, 300}, c{200, 300};
  EXPECT_TRUE(a.intersects(b));
  EXPECT_FALSE(a.intersects(c));
  EXPECT_FALSE(a.intersects(ByteRange{150, 150}));  // empty ranges share nothing
  EXPECT_TRUE(may_share_memory(a, b));
  EXPECT_TRUE((ByteRange{0, 300}).contains(b));
  EXPECT_FALSE(a.contains(b));
  EXPECT_EQ(b.size(), 101u);
}

TEST(strided_test, contiguity_ignores_size_one_dims) {
  EXPECT_TRUE(is_c_contiguous(Dims{2, 3}, Dims{12, 4}, 4));
  EXPECT_FALSE(is_f_contiguous(Dims{2, 3}, Dims{12, 4}, 4));
  EXPECT_TRUE(is_f_contiguous(Dims{2, 3}, Dims{4, 8}, 4));
  EXPECT_TRUE(is_c_contiguous(Dims{1, 3}, Dims{999, 4}, 4));
  EXPECT_TRUE(is_c_contiguous(Dims{0, 3}, Dims{7, 7}, 4));  // zero-size: both
  EXPECT_TRUE(is_f_contiguous(Dims{}, Dims{}, 4));
  EXPECT_FALSE(is_c_contiguous(Dims{3}, Dims{-4}, 4));
  // A huge last dim whose product overflows is still contiguous when nothing follows it.
  EXPECT_TRUE(is_c_contiguous(Dims{1, max64 / 4}, Dims{0, 4}, 4));
}

TEST(strided_test, overlap) {
  EXPECT_FALSE(may_overlap(Dims{2, 3}, Dims{12, 4}, 4));
  EXPECT_FALSE(may_overlap(Dims{2, 3}, Dims{-12, 4}, 4));
  EXPECT_TRUE(may_overlap(Dims{3}, Dims{0}, 4));
  EXPECT_TRUE(may_overlap(Dims{3}, Dims{2}, 4));
  EXPECT_FALSE(may_overlap(Dims{0, 3}, Dims{0, 0}, 4));
  EXPECT_FALSE(may_overlap(Dims{2}, Dims{min64}, 1));

  const std::int64_t shape[] = {4, 1};
  EXPECT_TRUE(same_elements(100, Dims{8, 4}, 100, Dims{8, 99}, shape));  // size-1 dim ignored
  EXPECT_FALSE(same_elements(100, Dims{8, 4}, 100, Dims{-8, 4}, shape));
  EXPECT_FALSE(same_elements(100, Dims{8, 4}, 108, Dims{8, 4}, shape));
}

TEST(strided_test, normalize_flips_sorts_and_drops) {
  const NormalizedDims n = normalize_dims(Dims{3, 1, 4}, Dims{-16, 5, 4});
  ASSERT_EQ(n.ndim, 2);
  EXPECT_FALSE(n.empty);
  EXPECT_EQ(n.offset, -32);
  EXPECT_EQ(n.shape[0], 4);
  EXPECT_EQ(n.strides[0], 4);
  EXPECT_EQ(n.shape[1], 3);
  EXPECT_EQ(n.strides[1], 16);
  EXPECT_TRUE(normalize_dims(Dims{3, 0}, Dims{4, 4}).empty);
  EXPECT_EQ(normalize_dims(Dims{}, Dims{}).ndim, 0);
}

TEST(strided_test, merge_keeps_c_order_and_merges_what_every_operand_allows) {
  // C-contiguous for both: one dim.
  auto m = merge_dims<2>(Dims{2, 3, 4}, {Strides(Dims{48, 16, 4}), Strides(Dims{96, 32, 8})});
  ASSERT_EQ(m.ndim, 1);
  EXPECT_EQ(m.shape[0], 24);
  EXPECT_EQ(m.strides[0][0], 4);
  EXPECT_EQ(m.strides[1][0], 8);
  // The second operand is transposed: nothing merges; size-1 dims vanish.
  const Dims a{12, 1, 4}, b{4, 7, 12};
  m = merge_dims<2>(Dims{2, 1, 3}, {Strides(a), Strides(b)});
  ASSERT_EQ(m.ndim, 2);
  EXPECT_THAT(std::vector<std::int64_t>(m.shape_span().begin(), m.shape_span().end()),
              ::testing::ElementsAre(2, 3));
  EXPECT_THAT(std::vector<std::int64_t>(m.strides_span(1).begin(), m.strides_span(1).end()),
              ::testing::ElementsAre(4, 12));
  EXPECT_EQ(merge_dims<1>(Dims{}, {Strides()}).ndim, 0);
  EXPECT_EQ(merge_dims<1>(Dims{1, 1}, {Strides(Dims{8, 8})}).ndim, 0);
}

TEST(strided_test, runs_merge_contiguous_layouts) {
  // C order, F order and reversed layouts are one run each.
  EXPECT_EQ(runs_of(1000, {3, 4}, {16, 4}, 4), (Runs{{1000, 1048}}));
  EXPECT_EQ(runs_of(1000, {3, 4}, {4, 12}, 4), (Runs{{1000, 1048}}));
  EXPECT_EQ(runs_of(1048 - 4, {12}, {-4}, 4), (Runs{{1000, 1048}}));
  // Broadcast dims add nothing; size-1 dims are ignored whatever their stride.
  EXPECT_EQ(runs_of(1000, {5, 1, 4}, {0, 999, 2}, 2), (Runs{{1000, 1008}}));
  EXPECT_EQ(runs_of(1000, {}, {}, 16), (Runs{{1000, 1016}}));  // 0-d: one element
  EXPECT_TRUE(runs_of(1000, {3, 0}, {4, 4}, 4).empty());
  // Overlapping elements (stride < itemsize) still form one run.
  EXPECT_EQ(runs_of(1000, {4}, {2}, 4), (Runs{{1000, 1010}}));
  EXPECT_TRUE(is_dense(Dims{3, 4}, Dims{4, 12}, 4));
  EXPECT_FALSE(is_dense(Dims{3}, Dims{16}, 4));
}

TEST(strided_test, runs_of_even_and_odd_views_are_disjoint) {
  const Runs even = runs_of(1000, {4}, {8}, 4);
  const Runs odd = runs_of(1004, {4}, {8}, 4);
  ASSERT_EQ(even.size(), 4u);
  ASSERT_EQ(odd.size(), 4u);
  for (auto [lo, hi] : even) {
    EXPECT_EQ(hi - lo, 4u);
    for (auto [lo2, hi2] : odd) EXPECT_TRUE(hi <= lo2 || hi2 <= lo);
  }
  // A column of a 3x4 row-major matrix of i32: three runs of 4 bytes.
  EXPECT_EQ(runs_of(1000 + 8, {3}, {16}, 4), (Runs{{1008, 1012}, {1024, 1028}, {1040, 1044}}));
  // Rows of a sliced 2-d block merge the inner dim only.
  EXPECT_EQ(runs_of(1000, {2, 2}, {16, 4}, 4), (Runs{{1000, 1008}, {1016, 1024}}));
}

TEST(strided_test, runs_fall_back_to_the_extent_beyond_the_cap) {
  bool exact = true;
  EXPECT_EQ(runs_of(1000, {10}, {8}, 4, 5, &exact), (Runs{{1000, 1076}}));
  EXPECT_FALSE(exact);
  EXPECT_EQ(runs_of(1000, {10}, {8}, 4, 10, &exact).size(), 10u);
  EXPECT_TRUE(exact);
}

TEST(strided_test, for_each_element_visits_in_c_order) {
  const std::int64_t shape[] = {2, 3};
  const std::int64_t a[] = {30, 10};
  const std::int64_t b[] = {-1, 100};
  std::vector<std::array<std::int64_t, 2>> seen;
  for_each_element<2>(shape, {Strides(a), Strides(b)},
                      [&](const std::array<std::int64_t, 2>& o) { seen.push_back(o); });
  const std::vector<std::array<std::int64_t, 2>> want = {{0, 0},   {10, 100}, {20, 200},
                                                         {30, -1}, {40, 99},  {50, 199}};
  EXPECT_EQ(seen, want);
  int n = 0;
  for_each_element<1>({}, {Strides()}, [&](const std::array<std::int64_t, 1>&) { ++n; });
  EXPECT_EQ(n, 1);
  const std::int64_t empty[] = {3, 0};
  for_each_element<1>(empty, {Strides(a)}, [&](const std::array<std::int64_t, 1>&) { ++n; });
  EXPECT_EQ(n, 1);
}

}  // namespace
}  // namespace cai
