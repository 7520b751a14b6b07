// The stream-ordered operations on Views (cai/arrays/ops.h) on the process-wide backend: the
// elementwise dispatch from the table, staging of a partly overlapping out, host copies.

#include "cai/arrays/ops.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "cai/device/simulator.h"
#include "cai_matchers.h"

namespace cai {
namespace {

using test::HasSubstr;
using test::ThrowsCaiError;
using ::testing::ElementsAre;

const sync::StreamRef kLegacy{device::kLegacyDefaultStream, nullptr};

DType f64() {
  return DType::from_typestr("<f8");
}

View upload(const std::vector<double>& values, const sync::StreamRef& s = kLegacy) {
  const std::int64_t shape[] = {static_cast<std::int64_t>(values.size())};
  View v = View::allocate(f64(), shape, false, s);
  copy_from_host(v, values.data(), s);
  return v;
}

std::vector<double> download(const View& v) {
  std::vector<double> out(static_cast<std::size_t>(v.size()));
  copy_to_host(out.data(), v, v.sync()->stream().value_or(kLegacy));
  return out;
}

View reversed(const View& v) {
  const IndexItem items[] = {IndexItem::range(std::nullopt, std::nullopt, -1)};
  return v.index(items);
}

TEST(ops_test, out_partly_overlapping_an_input_gives_numpys_answer) {
  // x = x[::-1] + 0: computed into a temporary first, as NumPy buffers it.
  View x = upload({1, 2, 3, 4, 5, 6, 7, 8});
  View zeros = upload(std::vector<double>(8, 0));
  add(x, reversed(x), zeros, kLegacy);
  EXPECT_THAT(download(x), ElementsAre(8, 7, 6, 5, 4, 3, 2, 1));
  // A shift by one element: out[i] = in[i - 1] + in[i - 1].
  View y = upload({1, 2, 3, 4, 5});
  const IndexItem tail[] = {IndexItem::range(1, std::nullopt)};
  const IndexItem head[] = {IndexItem::range(std::nullopt, -1)};
  add(y.index(tail), y.index(head), y.index(head), kLegacy);
  EXPECT_THAT(download(y), ElementsAre(1, 2, 4, 6, 8));
  // In place, element for element, needs no staging and is exact.
  add(y, y, y, kLegacy);
  EXPECT_THAT(download(y), ElementsAre(2, 4, 8, 12, 16));
}

TEST(ops_test, staging_does_not_block_the_host) {
  if (!device::sim::active()) GTEST_SKIP() << "needs the simulator's delay";
  auto& backend = device::backend();
  const device::StreamHandle h = backend.stream_create(true);
  const sync::StreamRef s{h, nullptr};
  View x = upload({1, 2, 3, 4}, s);
  View zeros = upload({0, 0, 0, 0}, s);
  device::sim::delay(h, 0.2);
  add(x, reversed(x), zeros, s);          // staged through a temporary freed stream-ordered
  EXPECT_FALSE(backend.stream_query(h));  // returned while the stream is still busy
  EXPECT_THAT(download(x), ElementsAre(4, 3, 2, 1));
  backend.stream_destroy(h);
}

TEST(ops_test, elementwise_checks_its_operands) {
  View x = upload({1, 2, 3});
  const View* one[] = {&x};
  EXPECT_THAT([&] { elementwise(device::ElementwiseOp::add, x, one, kLegacy); },
              ThrowsCaiError(Errc::value_error, HasSubstr("add(): takes 2 inputs, got 1")));
  View y = upload({1, 2});
  EXPECT_THAT([&] { add(x, y, x, kLegacy); },
              ThrowsCaiError(Errc::value_error,
                             HasSubstr("add(): out has shape (3,) but a has shape (2,)")));
  const std::int64_t shape[] = {3};
  View s4 = View::allocate(DType::from_typestr("|S4"), shape, false, kLegacy);
  EXPECT_THAT(
      [&] { add(s4, s4, s4, kLegacy); },
      ThrowsCaiError(Errc::not_implemented, HasSubstr("add(): dtype |S4 is not supported")));
}

TEST(ops_test, element_types_come_from_the_table) {
  EXPECT_EQ(element_type(DType::from_typestr("|b1"), "f()"), device::ElementType::b8);
  EXPECT_EQ(element_type(DType::from_typestr("<u2"), "f()"), device::ElementType::u16);
  EXPECT_EQ(element_type(DType::from_typestr("<f2"), "f()"), device::ElementType::f16);
  EXPECT_EQ(element_type(DType::from_typestr("<c16"), "f()"), device::ElementType::c128);
  EXPECT_THAT([] { element_type(DType::from_typestr(">f8"), "f()"); },
              ThrowsCaiError(Errc::not_implemented, HasSubstr("big-endian")));
}

}  // namespace
}  // namespace cai
