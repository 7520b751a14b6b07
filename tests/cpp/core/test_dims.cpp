#include <gtest/gtest.h>

#include <numeric>
#include <span>
#include <type_traits>
#include <utility>

#include "cai/core/dims.h"

namespace cai {
namespace {

TEST(dims_test, default_is_empty_and_inline) {
  Dims d;
  EXPECT_TRUE(d.empty());
  EXPECT_EQ(d.size(), 0u);
  EXPECT_TRUE(d.is_inline());
  EXPECT_EQ(d.capacity(), Dims::inline_capacity);
  EXPECT_EQ(d.begin(), d.end());
}

TEST(dims_test, construct_and_access) {
  Dims d{2, 3, 4};
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d[0], 2);
  EXPECT_EQ(d[2], 4);
  EXPECT_EQ(d.front(), 2);
  EXPECT_EQ(d.back(), 4);
  d[1] = 7;
  EXPECT_EQ(d, (Dims{2, 7, 4}));
  EXPECT_NE(d, (Dims{2, 7}));
  EXPECT_EQ(std::accumulate(d.begin(), d.end(), std::int64_t{0}), 13);

  Dims filled(5, -1);
  EXPECT_EQ(filled, (Dims{-1, -1, -1, -1, -1}));
  const std::int64_t raw[] = {9, 8};
  EXPECT_EQ(Dims(std::span<const std::int64_t>(raw)), (Dims{9, 8}));
}

TEST(dims_test, span_conversion) {
  Dims d{1, 2, 3};
  std::span<const std::int64_t> c = d;
  EXPECT_EQ(c.size(), 3u);
  EXPECT_EQ(c.data(), d.data());
  std::span<std::int64_t> m = d;
  m[0] = 10;
  EXPECT_EQ(d[0], 10);
  EXPECT_EQ(d.span().size(), 3u);
}

TEST(dims_test, stays_inline_up_to_eight) {
  Dims d;
  for (int i = 0; i < 8; ++i) d.push_back(i);
  EXPECT_TRUE(d.is_inline());
  d.push_back(8);
  EXPECT_FALSE(d.is_inline());
  for (int i = 9; i < 64; ++i) d.push_back(i);
  ASSERT_EQ(d.size(), 64u);
  for (int i = 0; i < 64; ++i) EXPECT_EQ(d[i], i);
  d.pop_back();
  EXPECT_EQ(d.size(), 63u);
  d.clear();
  EXPECT_TRUE(d.empty());
}

TEST(dims_test, resize) {
  Dims d{1, 2};
  d.resize(4, 9);
  EXPECT_EQ(d, (Dims{1, 2, 9, 9}));
  d.resize(1);
  EXPECT_EQ(d, (Dims{1}));
  d.resize(20);
  EXPECT_EQ(d.size(), 20u);
  EXPECT_EQ(d[0], 1);
  EXPECT_EQ(d[19], 0);
}

TEST(dims_test, copy_and_move_inline) {
  Dims a{1, 2, 3};
  Dims b = a;
  EXPECT_EQ(a, b);
  EXPECT_NE(a.data(), b.data());
  Dims c = std::move(a);
  EXPECT_EQ(c, b);
  EXPECT_TRUE(c.is_inline());
  EXPECT_TRUE(a.empty());  // NOLINT(bugprone-use-after-move): moved-from is empty by design
  a = c;
  EXPECT_EQ(a, c);
}

TEST(dims_test, copy_and_move_heap) {
  Dims big(20, 5);
  const std::int64_t* heap = big.data();
  Dims copy = big;
  EXPECT_EQ(copy, big);
  EXPECT_NE(copy.data(), heap);
  Dims moved = std::move(big);
  EXPECT_EQ(moved.data(), heap);  // the buffer is stolen, not copied
  EXPECT_TRUE(big.empty());       // NOLINT(bugprone-use-after-move)
  EXPECT_TRUE(big.is_inline());

  Dims small{1};
  small = std::move(moved);
  EXPECT_EQ(small.data(), heap);
  small = Dims{4, 5};
  EXPECT_EQ(small, (Dims{4, 5}));
  Dims& self = small;
  small = self;
  EXPECT_EQ(small, (Dims{4, 5}));
  Dims grow{1};
  grow = copy;  // inline to heap
  EXPECT_EQ(grow, copy);
}

TEST(dims_test, format) {
  EXPECT_EQ(format_dims(Dims{}), "()");
  EXPECT_EQ(format_dims(Dims{3}), "(3,)");
  EXPECT_EQ(format_dims(Dims{2, -3}), "(2, -3)");
}

static_assert(std::is_nothrow_move_constructible_v<Dims>);
static_assert(std::is_nothrow_move_assignable_v<Dims>);

}  // namespace
}  // namespace cai
