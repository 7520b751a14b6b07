// The CPU executor of the operations (src/device/kernels/cpu.cpp), the element semantics it
// shares with the CUDA kernels (elementwise.h) and the table that drives both.

#include <gtest/gtest.h>

#include <cmath>
#include <complex>
#include <cstring>
#include <limits>
#include <vector>

#include "cai/device/operations.h"
#include "checks.h"
#include "kernels/cpu.h"
#include "kernels/elementwise.h"
#include "kernels/launch.h"
#include "test_sim_util.h"

namespace cai::device::kernels {
namespace {

using test::addr;
using test::dense;
using test::operand;

std::uint16_t half_bits(float f) {
  return to_half(f).bits;
}
float from_half(std::uint16_t bits) {
  return to_float(Half{bits});
}

template <class T>
std::vector<T> add(ElementType type, std::vector<T> a, std::vector<T> b) {
  std::vector<T> out(a.size());
  const auto n = static_cast<std::int64_t>(a.size());
  const Operand ops[] = {dense(addr(out.data()), {n}, sizeof(T)),
                         dense(addr(a.data()), {n}, sizeof(T)),
                         dense(addr(b.data()), {n}, sizeof(T))};
  cpu_elementwise(ElementwiseOp::add, type, ops);
  return out;
}

TEST(cpu_kernels, table) {
  EXPECT_EQ(element_type_count, 23);  // 14 NumPy types, bfloat16 and 8 float8 formats
  EXPECT_EQ(info(ElementType::c128).name, "c128");
  EXPECT_EQ(info(ElementType::bf16).name, "bf16");
  EXPECT_EQ(element_size(ElementType::bf16), 2u);
  EXPECT_EQ(element_size(ElementType::f8e8m0fnu), 1u);
  EXPECT_EQ(info(ElementType::f16).name, "f16");
  EXPECT_EQ(element_size(ElementType::f16), 2u);
  EXPECT_EQ(element_size(ElementType::c128), 16u);
  EXPECT_EQ(element_size(static_cast<ElementType>(99)), 0u);
  EXPECT_EQ(info(ElementwiseOp::add).name, "add");
  EXPECT_EQ(info(ElementwiseOp::add).inputs, 2);
  EXPECT_EQ(elementwise_operand_name(0), "out");
  EXPECT_EQ(elementwise_operand_name(2), "b");
  for (int t = 0; t < element_type_count; ++t) {
    EXPECT_TRUE(cai::device::detail::supported(ElementwiseOp::add, static_cast<ElementType>(t)));
  }
  EXPECT_FALSE(cai::device::detail::supported(ElementwiseOp::add, static_cast<ElementType>(99)));
  // The kernels' entry names follow the tables.
  EXPECT_EQ(kernel_names[kernel_index(DataKernel::copy, 0, Variant::strided32)],
            "cai_copy_1_strided32");
  EXPECT_EQ(kernel_names[kernel_index(DataKernel::fill, 4, Variant::tile)], "cai_fill_16_tile");
  EXPECT_EQ(kernel_names[kernel_index(ElementwiseOp::add, ElementType::b8, Variant::contiguous)],
            "cai_add_b8_contiguous");
  EXPECT_EQ(kernel_names[kernel_index(ElementwiseOp::add, ElementType::c128, Variant::strided64)],
            "cai_add_c128_strided64");
  EXPECT_EQ(std::size(kernel_names), static_cast<std::size_t>(kernel_count));
}

TEST(cpu_kernels, add_every_type) {
  using L = std::numeric_limits<std::int64_t>;
  EXPECT_EQ(add<std::int8_t>(ElementType::i8, {127, -5}, {1, 3}),
            (std::vector<std::int8_t>{-128, -2}));
  EXPECT_EQ(add<std::uint8_t>(ElementType::b8, {0, 2, 0}, {0, 0, 7}),
            (std::vector<std::uint8_t>{0, 1, 1}));
  EXPECT_EQ(add<std::uint16_t>(ElementType::u16, {65535, 7}, {2, 8}),
            (std::vector<std::uint16_t>{1, 15}));
  EXPECT_EQ(add<std::int16_t>(ElementType::i16, {1000, -7}, {2, 8}),
            (std::vector<std::int16_t>{1002, 1}));
  EXPECT_EQ(add<std::int32_t>(ElementType::i32, {1 << 30, -7}, {1 << 30, 8}),
            (std::vector<std::int32_t>{std::numeric_limits<std::int32_t>::min(), 1}));
  EXPECT_EQ(add<std::uint32_t>(ElementType::u32, {4000000000u, 1}, {300000000u, 2}),
            (std::vector<std::uint32_t>{4000000000u + 300000000u, 3}));
  EXPECT_EQ(add<std::int64_t>(ElementType::i64, {L::max(), 5}, {1, -6}),
            (std::vector<std::int64_t>{L::min(), -1}));
  EXPECT_EQ(add<std::uint64_t>(ElementType::u64, {~0ull, 5}, {2, 6}),
            (std::vector<std::uint64_t>{1, 11}));
  EXPECT_EQ(add<std::uint8_t>(ElementType::u8, {250, 1}, {10, 2}),
            (std::vector<std::uint8_t>{4, 3}));
  EXPECT_EQ(add<std::uint16_t>(ElementType::f16, {half_bits(1.0f), half_bits(65504.0f)},
                               {half_bits(2.0f), half_bits(65504.0f)}),
            (std::vector<std::uint16_t>{0x4200, 0x7c00}));  // 3.0; overflow to inf
  EXPECT_EQ(add<float>(ElementType::f32, {1.5f, -2}, {2.25f, 2}), (std::vector<float>{3.75f, 0}));
  EXPECT_EQ(add<double>(ElementType::f64, {0.1, 1e300}, {0.2, 1e300}),
            (std::vector<double>{0.1 + 0.2, 2e300}));
  EXPECT_EQ(add<std::complex<float>>(ElementType::c64, {{1, 2}, {3, 4}}, {{10, 20}, {-3, -4}}),
            (std::vector<std::complex<float>>{{11, 22}, {0, 0}}));
  EXPECT_EQ(add<std::complex<double>>(ElementType::c128, {{1, 2}, {3, 4}}, {{10, 20}, {0.5, 0.25}}),
            (std::vector<std::complex<double>>{{11, 22}, {3.5, 4.25}}));
}

TEST(cpu_kernels, add_in_place_and_broadcast) {
  // out is a; b is broadcast along the rows.
  float a[6] = {1, 2, 3, 4, 5, 6};
  float b[3] = {10, 20, 30};
  const Operand ops[] = {operand(addr(a), {2, 3}, {12, 4}, 4), operand(addr(a), {2, 3}, {12, 4}, 4),
                         operand(addr(b), {2, 3}, {0, 4}, 4)};
  cpu_elementwise(ElementwiseOp::add, ElementType::f32, ops);
  const float want[6] = {11, 22, 33, 14, 25, 36};
  EXPECT_EQ(0, std::memcmp(a, want, sizeof a));
}

TEST(cpu_kernels, copy_handles_overlap) {
  // Shift a buffer right by one element in place: as if the source were read first.
  std::int32_t v[6] = {0, 1, 2, 3, 4, 5};
  // Odd elements = even elements: the extents interleave.
  cpu_copy(operand(addr(v + 1), {3}, {8}, 4), operand(addr(v), {3}, {8}, 4));
  const std::int32_t every_other[6] = {0, 0, 2, 2, 4, 4};
  EXPECT_EQ(0, std::memcmp(v, every_other, sizeof v));
  std::int32_t w[6] = {0, 1, 2, 3, 4, 5};
  cpu_copy(dense(addr(w + 1), {5}, 4), dense(addr(w), {5}, 4));
  const std::int32_t shifted[6] = {0, 0, 1, 2, 3, 4};
  EXPECT_EQ(0, std::memcmp(w, shifted, sizeof w));
  // Reverse in place.
  std::int32_t r[4] = {1, 2, 3, 4};
  cpu_copy(dense(addr(r), {4}, 4), operand(addr(r + 3), {4}, {-4}, 4));
  const std::int32_t reversed[4] = {4, 3, 2, 1};
  EXPECT_EQ(0, std::memcmp(r, reversed, sizeof r));
}

TEST(cpu_kernels, copy_any_item_size_and_word) {
  // 3-byte items at odd addresses (1-byte words), the destination transposed.
  std::vector<std::uint8_t> src(24), dst(24, 0), want(24, 0);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::uint8_t>(i + 1);
  cpu_copy(operand(addr(dst.data()) + 1, {2, 3}, {3, 6}, 3),
           dense(addr(src.data()) + 1, {2, 3}, 3));
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 3; ++j) {
      for (int b = 0; b < 3; ++b) want[1 + 3 * i + 6 * j + b] = src[1 + 9 * i + 3 * j + b];
    }
  }
  EXPECT_EQ(dst, want);
  // 12-byte items (4-byte words), reversed.
  alignas(16) std::uint32_t s12[6] = {1, 2, 3, 4, 5, 6}, d12[6] = {};
  cpu_copy(operand(addr(d12 + 3), {2}, {-12}, 12), dense(addr(s12), {2}, 12));
  const std::uint32_t swapped[6] = {4, 5, 6, 1, 2, 3};
  EXPECT_EQ(0, std::memcmp(d12, swapped, sizeof d12));
}

TEST(cpu_kernels, fill) {
  std::uint16_t v[8] = {};
  const std::uint16_t value = 0xabcd;
  cpu_fill(operand(addr(v), {2, 2}, {8, 4}, 2), &value);  // every other element of a 2x4 array
  const std::uint16_t want[8] = {0xabcd, 0, 0xabcd, 0, 0xabcd, 0, 0xabcd, 0};
  EXPECT_EQ(0, std::memcmp(v, want, sizeof v));
  // The value may lie inside the destination; 24-byte items move as 8-byte words.
  alignas(16) std::uint64_t w[9] = {7, 8, 9};
  cpu_fill(dense(addr(w), {3}, 24), w);
  const std::uint64_t wwant[9] = {7, 8, 9, 7, 8, 9, 7, 8, 9};
  EXPECT_EQ(0, std::memcmp(w, wwant, sizeof w));
}

TEST(cpu_kernels, half_conversions) {
  EXPECT_EQ(half_bits(1.0f), 0x3c00);
  EXPECT_EQ(half_bits(-2.0f), 0xc000);
  EXPECT_EQ(half_bits(65504.0f), 0x7bff);
  EXPECT_EQ(half_bits(65520.0f), 0x7c00);  // rounds to inf
  EXPECT_EQ(half_bits(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(half_bits(std::ldexp(1.0f, -25)), 0x0000);  // tie rounds to even
  EXPECT_EQ(half_bits(std::ldexp(3.0f, -26)), 0x0001);
  EXPECT_EQ(half_bits(std::ldexp(3.0f, -25)), 0x0002);  // tie rounds to even
  EXPECT_EQ(half_bits(-0.0f), 0x8000);
  EXPECT_EQ(half_bits(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie to even
  EXPECT_EQ(half_bits(1.0f + std::ldexp(3.0f, -11)), 0x3c02);  // tie to even, up
  EXPECT_EQ(half_bits(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_TRUE(std::isnan(from_half(half_bits(std::nanf("")))));
  EXPECT_EQ(from_half(0x3555), 0.333251953125f);
  // Every non-NaN half survives a round trip through float.
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const auto v = static_cast<std::uint16_t>(h);
    if ((v & 0x7c00) == 0x7c00 && (v & 0x3ff) != 0) continue;
    ASSERT_EQ(half_bits(from_half(v)), v) << std::hex << h;
  }
}

}  // namespace
}  // namespace cai::device::kernels
