// The device layer's shared helpers: argument checks, byte extents, contiguous runs, the CPU
// reference kernels and the half-precision conversions.

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <complex>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "device/checks.h"
#include "test_sim_util.h"

namespace cai::device::detail {
namespace {

using test::addr;

std::vector<std::pair<std::uint64_t, std::uint64_t>> runs_of(
    std::uint64_t ptr, std::vector<std::int64_t> shape, std::vector<std::int64_t> strides,
    std::size_t itemsize, std::size_t cap = 1 << 20, bool* exact = nullptr) {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> out;
  bool ok = for_each_run(ptr, shape, strides, itemsize, cap,
                         [&](std::uint64_t lo, std::uint64_t hi) { out.emplace_back(lo, hi); });
  if (exact) *exact = ok;
  std::sort(out.begin(), out.end());
  return out;
}

TEST(sim_checks, stream_handle_zero_is_rejected) {
  EXPECT_CAI_ERROR(check_stream_handle(0, "copy_async()"), Errc::value_error,
                   "copy_async(): stream 0 is not allowed");
  check_stream_handle(1, "x");
  check_stream_handle(2, "x");
  check_stream_handle(0x1234, "x");
}

TEST(sim_checks, shape) {
  const std::int64_t s[] = {2, 3, 4};
  EXPECT_EQ(check_shape("f()", s), 24);
  EXPECT_EQ(check_shape("f()", {}), 1);
  const std::int64_t z[] = {2, 0, -1};  // negative is checked before the zero shortcut
  EXPECT_CAI_ERROR(check_shape("f()", z), Errc::value_error, "f(): shape[2] is -1");
  const std::int64_t big[] = {std::int64_t{1} << 40, std::int64_t{1} << 40};
  EXPECT_CAI_ERROR(check_shape("f()", big), Errc::overflow, "element count overflows");
  std::vector<std::int64_t> many(kMaxDims + 1, 1);
  EXPECT_CAI_ERROR(check_shape("f()", many), Errc::value_error, "65 dimensions");
}

TEST(sim_checks, byte_extent) {
  const std::int64_t shape[] = {3, 4};
  const std::int64_t c[] = {16, 4};
  ByteExtent e = byte_extent(shape, c, 4);
  EXPECT_EQ(e.lo, 0);
  EXPECT_EQ(e.hi, 48);
  const std::int64_t neg[] = {-16, 4};
  e = byte_extent(shape, neg, 4);
  EXPECT_EQ(e.lo, -32);
  EXPECT_EQ(e.hi, 16);
  const std::int64_t zero[] = {0, 0};
  e = byte_extent(shape, zero, 8);
  EXPECT_EQ(e.lo, 0);
  EXPECT_EQ(e.hi, 8);
  const std::int64_t empty_shape[] = {3, 0};
  EXPECT_TRUE(byte_extent(empty_shape, c, 4).empty());
  const std::int64_t huge[] = {std::numeric_limits<std::int64_t>::max(), 1};
  EXPECT_CAI_ERROR(byte_extent(shape, huge, 4), Errc::overflow, "overflows int64");
}

TEST(sim_checks, operand) {
  const std::int64_t shape[] = {2, 2};
  const std::int64_t strides[] = {-16, 8};
  AddressRange r = check_operand("f()", "dst", Operand{1000, strides}, shape, 8);
  EXPECT_EQ(r.lo, 984u);
  EXPECT_EQ(r.hi, 1016u);
  const std::int64_t one[] = {8};
  EXPECT_CAI_ERROR(check_operand("f()", "dst", Operand{1000, one}, shape, 8), Errc::value_error,
                   "f(): dst has 1 strides for a 2-d shape");
  EXPECT_CAI_ERROR(check_operand("f()", "src", Operand{0, strides}, shape, 8), Errc::value_error,
                   "src is a null pointer");
  EXPECT_CAI_ERROR(check_operand("f()", "a", Operand{8, strides}, shape, 8), Errc::overflow,
                   "wraps around");
  const std::int64_t empty[] = {0, 2};
  EXPECT_TRUE(check_operand("f()", "a", Operand{0, strides}, empty, 8).empty());
  EXPECT_CAI_ERROR(check_range("f()", "dst", 0, 4), Errc::value_error, "null pointer");
  EXPECT_CAI_ERROR(check_range("f()", "dst", ~std::uint64_t{0} - 2, 4), Errc::overflow, "wraps");
  EXPECT_TRUE(check_range("f()", "dst", 0, 0).empty());
  EXPECT_CAI_ERROR(check_itemsize("f()", 0), Errc::value_error, "itemsize is 0");
  EXPECT_CAI_ERROR(check_element_type("f()", static_cast<ElementType>(99)), Errc::value_error,
                   "unknown element type 99");
}

TEST(sim_checks, runs_merge_contiguous_layouts) {
  // C order, F order and reversed layouts are one run each.
  EXPECT_EQ(runs_of(1000, {3, 4}, {16, 4}, 4), (decltype(runs_of(0, {}, {}, 0)){{1000, 1048}}));
  EXPECT_EQ(runs_of(1000, {3, 4}, {4, 12}, 4), (decltype(runs_of(0, {}, {}, 0)){{1000, 1048}}));
  EXPECT_EQ(runs_of(1048 - 4, {12}, {-4}, 4), (decltype(runs_of(0, {}, {}, 0)){{1000, 1048}}));
  // Broadcast dims add nothing; size-1 dims are ignored whatever their stride.
  EXPECT_EQ(runs_of(1000, {5, 1, 4}, {0, 999, 2}, 2),
            (decltype(runs_of(0, {}, {}, 0)){{1000, 1008}}));
  // 0-d: one element.
  EXPECT_EQ(runs_of(1000, {}, {}, 16), (decltype(runs_of(0, {}, {}, 0)){{1000, 1016}}));
  // Empty: nothing.
  EXPECT_TRUE(runs_of(1000, {3, 0}, {4, 4}, 4).empty());
  // Overlapping elements (stride < itemsize) still form one run.
  EXPECT_EQ(runs_of(1000, {4}, {2}, 4), (decltype(runs_of(0, {}, {}, 0)){{1000, 1010}}));
}

TEST(sim_checks, runs_of_even_and_odd_views_are_disjoint) {
  auto even = runs_of(1000, {4}, {8}, 4);
  auto odd = runs_of(1004, {4}, {8}, 4);
  ASSERT_EQ(even.size(), 4u);
  ASSERT_EQ(odd.size(), 4u);
  for (auto [lo, hi] : even) {
    EXPECT_EQ(hi - lo, 4u);
    for (auto [lo2, hi2] : odd) EXPECT_TRUE(hi <= lo2 || hi2 <= lo);
  }
  // A column of a 3x4 row-major matrix of i32: three runs of 4 bytes.
  EXPECT_EQ(runs_of(1000 + 8, {3}, {16}, 4),
            (decltype(runs_of(0, {}, {}, 0)){{1008, 1012}, {1024, 1028}, {1040, 1044}}));
  // Rows of a sliced 2-d block merge the inner dim only.
  EXPECT_EQ(runs_of(1000, {2, 2}, {16, 4}, 4),
            (decltype(runs_of(0, {}, {}, 0)){{1000, 1008}, {1016, 1024}}));
}

TEST(sim_checks, runs_fall_back_to_the_extent_beyond_the_cap) {
  bool exact = true;
  auto r = runs_of(1000, {10}, {8}, 4, 5, &exact);
  EXPECT_FALSE(exact);
  EXPECT_EQ(r, (decltype(runs_of(0, {}, {}, 0)){{1000, 1076}}));
  r = runs_of(1000, {10}, {8}, 4, 10, &exact);
  EXPECT_TRUE(exact);
  EXPECT_EQ(r.size(), 10u);
}

TEST(sim_checks, for_each_element_visits_in_c_order) {
  const std::int64_t shape[] = {2, 3};
  const std::int64_t a[] = {30, 10};
  const std::int64_t b[] = {-1, 100};
  std::vector<std::array<std::int64_t, 2>> seen;
  for_each_element<2>(shape, {std::span<const std::int64_t>(a), std::span<const std::int64_t>(b)},
                      [&](const std::array<std::int64_t, 2>& o) { seen.push_back(o); });
  const std::vector<std::array<std::int64_t, 2>> want = {{0, 0},   {10, 100}, {20, 200},
                                                         {30, -1}, {40, 99},  {50, 199}};
  EXPECT_EQ(seen, want);
  int n = 0;
  for_each_element<1>({}, {std::span<const std::int64_t>()},
                      [&](const std::array<std::int64_t, 1>&) { ++n; });
  EXPECT_EQ(n, 1);
  const std::int64_t empty[] = {3, 0};
  for_each_element<1>(empty, {std::span<const std::int64_t>(a)},
                      [&](const std::array<std::int64_t, 1>&) { ++n; });
  EXPECT_EQ(n, 1);
}

TEST(sim_checks, half_conversions) {
  EXPECT_EQ(float_to_half(1.0f), 0x3c00);
  EXPECT_EQ(float_to_half(-2.0f), 0xc000);
  EXPECT_EQ(float_to_half(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_half(65520.0f), 0x7c00);  // rounds to inf
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -25)), 0x0000);  // tie rounds to even
  EXPECT_EQ(float_to_half(std::ldexp(3.0f, -26)), 0x0001);
  EXPECT_EQ(float_to_half(std::ldexp(3.0f, -25)), 0x0002);  // tie rounds to even
  EXPECT_EQ(float_to_half(-0.0f), 0x8000);
  EXPECT_EQ(float_to_half(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie to even
  EXPECT_EQ(float_to_half(1.0f + std::ldexp(3.0f, -11)), 0x3c02);  // tie to even, up
  EXPECT_EQ(float_to_half(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_TRUE(std::isnan(half_to_float(float_to_half(std::nanf("")))));
  EXPECT_EQ(half_to_float(0x3555), 0.333251953125f);
  // Every non-NaN half survives a round trip through float.
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const auto v = static_cast<std::uint16_t>(h);
    if ((v & 0x7c00) == 0x7c00 && (v & 0x3ff) != 0) continue;
    ASSERT_EQ(float_to_half(half_to_float(v)), v) << std::hex << h;
  }
}

TEST(sim_checks, host_add_every_type) {
  const std::int64_t shape[] = {2};
  const std::int64_t st1[] = {1}, st2[] = {2}, st4[] = {4}, st8[] = {8}, st16[] = {16};
  {
    std::int8_t a[] = {127, -5}, b[] = {1, 3}, o[2];
    host_add({addr(o), st1}, {addr(a), st1}, {addr(b), st1}, shape, ElementType::i8);
    EXPECT_EQ(o[0], -128);  // wraps
    EXPECT_EQ(o[1], -2);
  }
  {
    std::uint8_t a[] = {0, 2}, b[] = {0, 0}, o[2];
    host_add({addr(o), st1}, {addr(a), st1}, {addr(b), st1}, shape, ElementType::b8);
    EXPECT_EQ(o[0], 0);
    EXPECT_EQ(o[1], 1);
  }
  {
    std::uint16_t a[] = {65535, 7}, b[] = {2, 8}, o[2];
    host_add({addr(o), st2}, {addr(a), st2}, {addr(b), st2}, shape, ElementType::u16);
    EXPECT_EQ(o[0], 1);
    EXPECT_EQ(o[1], 15);
  }
  {
    std::int16_t a[] = {1000, -7}, b[] = {2, 8}, o[2];
    host_add({addr(o), st2}, {addr(a), st2}, {addr(b), st2}, shape, ElementType::i16);
    EXPECT_EQ(o[0], 1002);
    EXPECT_EQ(o[1], 1);
  }
  {
    std::int32_t a[] = {1 << 30, -7}, b[] = {1 << 30, 8}, o[2];
    host_add({addr(o), st4}, {addr(a), st4}, {addr(b), st4}, shape, ElementType::i32);
    EXPECT_EQ(o[0], std::numeric_limits<std::int32_t>::min());
    EXPECT_EQ(o[1], 1);
  }
  {
    std::uint32_t a[] = {4000000000u, 1}, b[] = {300000000u, 2}, o[2];
    host_add({addr(o), st4}, {addr(a), st4}, {addr(b), st4}, shape, ElementType::u32);
    EXPECT_EQ(o[0], 4000000000u + 300000000u);
    EXPECT_EQ(o[1], 3u);
  }
  {
    std::int64_t a[] = {std::numeric_limits<std::int64_t>::max(), 5}, b[] = {1, -6}, o[2];
    host_add({addr(o), st8}, {addr(a), st8}, {addr(b), st8}, shape, ElementType::i64);
    EXPECT_EQ(o[0], std::numeric_limits<std::int64_t>::min());
    EXPECT_EQ(o[1], -1);
  }
  {
    std::uint64_t a[] = {~0ull, 5}, b[] = {2, 6}, o[2];
    host_add({addr(o), st8}, {addr(a), st8}, {addr(b), st8}, shape, ElementType::u64);
    EXPECT_EQ(o[0], 1u);
    EXPECT_EQ(o[1], 11u);
  }
  {
    std::uint8_t a[] = {250, 1}, b[] = {10, 2}, o[2];
    host_add({addr(o), st1}, {addr(a), st1}, {addr(b), st1}, shape, ElementType::u8);
    EXPECT_EQ(o[0], 4);
    EXPECT_EQ(o[1], 3);
  }
  {
    std::uint16_t a[] = {float_to_half(1.0f), float_to_half(65504.0f)};
    std::uint16_t b[] = {float_to_half(2.0f), float_to_half(65504.0f)}, o[2];
    host_add({addr(o), st2}, {addr(a), st2}, {addr(b), st2}, shape, ElementType::f16);
    EXPECT_EQ(o[0], 0x4200);  // 3.0
    EXPECT_EQ(o[1], 0x7c00);  // overflow to inf
  }
  {
    float a[] = {1.5f, -2}, b[] = {2.25f, 2}, o[2];
    host_add({addr(o), st4}, {addr(a), st4}, {addr(b), st4}, shape, ElementType::f32);
    EXPECT_EQ(o[0], 3.75f);
    EXPECT_EQ(o[1], 0.0f);
  }
  {
    double a[] = {0.1, 1e300}, b[] = {0.2, 1e300}, o[2];
    host_add({addr(o), st8}, {addr(a), st8}, {addr(b), st8}, shape, ElementType::f64);
    EXPECT_EQ(o[0], 0.1 + 0.2);
    EXPECT_EQ(o[1], 2e300);
  }
  {
    std::complex<float> a[] = {{1, 2}, {3, 4}}, b[] = {{10, 20}, {-3, -4}}, o[2];
    host_add({addr(o), st8}, {addr(a), st8}, {addr(b), st8}, shape, ElementType::c64);
    EXPECT_EQ(o[0], std::complex<float>(11, 22));
    EXPECT_EQ(o[1], std::complex<float>(0, 0));
  }
  {
    std::complex<double> a[] = {{1, 2}, {3, 4}}, b[] = {{10, 20}, {0.5, 0.25}}, o[2];
    host_add({addr(o), st16}, {addr(a), st16}, {addr(b), st16}, shape, ElementType::c128);
    EXPECT_EQ(o[0], std::complex<double>(11, 22));
    EXPECT_EQ(o[1], std::complex<double>(3.5, 4.25));
  }
}

TEST(sim_checks, host_add_in_place_and_broadcast) {
  // out aliases a; b is broadcast along the rows.
  float a[6] = {1, 2, 3, 4, 5, 6};
  float b[3] = {10, 20, 30};
  const std::int64_t shape[] = {2, 3};
  const std::int64_t sa[] = {12, 4};
  const std::int64_t sb[] = {0, 4};
  host_add({addr(a), sa}, {addr(a), sa}, {addr(b), sb}, shape, ElementType::f32);
  const float want[6] = {11, 22, 33, 14, 25, 36};
  EXPECT_EQ(0, std::memcmp(a, want, sizeof a));
}

TEST(sim_checks, host_copy_strided_handles_overlap) {
  // Shift a buffer right by one element in place: as if the source were read first.
  std::int32_t v[6] = {0, 1, 2, 3, 4, 5};
  const std::int64_t shape[] = {5};
  const std::int64_t st[] = {4};
  host_copy_strided({addr(v + 1), st}, {addr(v), st}, shape, 4);
  const std::int32_t want[6] = {0, 0, 1, 2, 3, 4};
  EXPECT_EQ(0, std::memcmp(v, want, sizeof v));
  // Reverse in place.
  std::int32_t r[4] = {1, 2, 3, 4};
  const std::int64_t rs[] = {-4};
  const std::int64_t s4[] = {4};
  const std::int64_t shape4[] = {4};
  host_copy_strided({addr(r), s4}, {addr(r + 3), rs}, shape4, 4);
  const std::int32_t rwant[4] = {4, 3, 2, 1};
  EXPECT_EQ(0, std::memcmp(r, rwant, sizeof r));
}

TEST(sim_checks, host_fill) {
  std::uint16_t v[8] = {};
  const std::int64_t shape[] = {2, 2};
  const std::int64_t st[] = {8, 4};  // every other element of a 2x4 array
  const std::uint16_t value = 0xabcd;
  host_fill({addr(v), st}, shape, 2, &value);
  const std::uint16_t want[8] = {0xabcd, 0, 0xabcd, 0, 0xabcd, 0, 0xabcd, 0};
  EXPECT_EQ(0, std::memcmp(v, want, sizeof v));
  EXPECT_EQ(element_type_name(ElementType::c128), "c128");
  EXPECT_EQ(element_type_name(ElementType::f16), "f16");
}

}  // namespace
}  // namespace cai::device::detail
