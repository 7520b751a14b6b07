// ArrayRef<T, N>: element addresses against View/Layout for random layouts, the tile slice
// rules, the checks of as_array_ref, const conversions and (with CCCL) the mdspan conversion.

// The bounds assertions are tested below, so they stay on in this file even under NDEBUG.
#define CAI_ENABLE_ASSERTS 1

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <complex>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "cai/arrays/array_ref.h"
#include "cai/arrays/as_array_ref.h"
#include "cai/arrays/view.h"
#include "cai/core/error.h"
#include "cai_matchers.h"

namespace {

using cai::ArrayRef;
using cai::as_array_ref;
using cai::DType;
using cai::Errc;
using cai::IndexItem;
using cai::Layout;
using cai::View;
using cai::test::ThrowsCaiError;
using ::testing::AllOf;
using ::testing::HasSubstr;

// A struct that users describe themselves.
struct Rgb {
  std::uint8_t r, g, b;
};
// One that gets its DType wrong, to test the itemsize check.
struct Wrong {
  double x;
};

}  // namespace

template <>
struct cai::DTypeTraits<Rgb> {
  static DType get() {
    return DType::from_descr(
        std::vector<DescrEntry>{{"r", "|u1", {}, {}}, {"g", "|u1", {}, {}}, {"b", "|u1", {}, {}}});
  }
};
template <>
struct cai::DTypeTraits<Wrong> {
  static DType get() { return DType::from_typestr("<f4"); }
};

namespace {

std::uint64_t address_of(const void* p) {
  return reinterpret_cast<std::uint64_t>(p);
}

template <class T>
View make_view(T* data, std::vector<std::int64_t> shape, std::vector<std::int64_t> byte_strides,
               bool readonly = false) {
  Layout layout(cai::Dims(std::span<const std::int64_t>(shape)),
                cai::Dims(std::span<const std::int64_t>(byte_strides)), sizeof(T));
  return View(address_of(data), cai::dtype_of<T>(), std::move(layout), readonly,
              std::make_shared<cai::sync::SyncState>(), nullptr);
}

template <class T>
View c_view(T* data, std::vector<std::int64_t> shape, bool readonly = false) {
  return View(address_of(data), cai::dtype_of<T>(), Layout::c_contiguous(shape, sizeof(T)),
              readonly, std::make_shared<cai::sync::SyncState>(), nullptr);
}

// Calls f(idx) for every index of `shape`, in row-major order.
template <int N, class F>
void for_each_index(const std::array<std::int64_t, N>& shape, F&& f) {
  for (std::int64_t n : shape) {
    if (n == 0) return;
  }
  std::array<std::int64_t, N> idx{};
  while (true) {
    f(idx);
    int k = N - 1;
    for (; k >= 0; --k) {
      if (++idx[k] < shape[k]) break;
      idx[k] = 0;
    }
    if (k < 0) return;
  }
}

template <class T, int N>
std::array<std::int64_t, N> shape_of(const ArrayRef<T, N>& a) {
  std::array<std::int64_t, N> s{};
  for (int k = 0; k < N; ++k) s[k] = a.shape(k);
  return s;
}

// Every element of `a` is where the View's byte strides put it, and holds that value.
template <class T, int N>
void expect_same_elements(const ArrayRef<T, N>& a, const View& v) {
  ASSERT_EQ(v.ndim(), N);
  for (int k = 0; k < N; ++k) ASSERT_EQ(a.shape(k), v.shape()[k]) << "axis " << k;
  EXPECT_EQ(a.size(), v.size());
  for_each_index<N>(shape_of(a), [&](const std::array<std::int64_t, N>& idx) {
    std::uint64_t want = v.ptr();
    for (int k = 0; k < N; ++k) want += static_cast<std::uint64_t>(idx[k] * v.strides()[k]);
    T* got = std::apply([&](auto... i) { return &a(i...); }, idx);
    ASSERT_EQ(address_of(got), want);
    ASSERT_EQ(*got, *reinterpret_cast<const T*>(want));
  });
}

template <class T, int N>
void check_rank(const View& v, std::mt19937& rng) {
  const ArrayRef<T, N> a = as_array_ref<T, N>(v);
  expect_same_elements(a, v);
  expect_same_elements(as_array_ref<const T, N>(v), v);
  if constexpr (N > 0) {
    // A random valid tile slice of the ArrayRef matches the View's slice.
    const int axis = std::uniform_int_distribution<int>(-N, N - 1)(rng);
    const std::int64_t n = a.shape(axis < 0 ? axis + N : axis);
    if (n > 0) {
      const std::int64_t start = std::uniform_int_distribution<std::int64_t>(0, n - 1)(rng);
      const std::int64_t stop = std::uniform_int_distribution<std::int64_t>(start, n)(rng);
      const View vs = v.slice(axis, start, stop);
      const ArrayRef<T, N> as = a.slice(axis, start, stop);
      expect_same_elements(as, vs);
      if (vs.size() != 0) {  // an empty View has pointer 0; the ArrayRef keeps its own
        EXPECT_EQ(address_of(as.data()), vs.ptr());
      }
    }
  }
}

template <class T>
void check_any_rank(const View& v, std::mt19937& rng) {
  switch (v.ndim()) {
    case 0:
      return check_rank<T, 0>(v, rng);
    case 1:
      return check_rank<T, 1>(v, rng);
    case 2:
      return check_rank<T, 2>(v, rng);
    case 3:
      return check_rank<T, 3>(v, rng);
    case 4:
      return check_rank<T, 4>(v, rng);
    default:
      FAIL() << "rank " << v.ndim();
  }
}

// A random view of `base`: transposes, NumPy ranges (negative steps included), integers,
// new axes and tile slices, keeping the rank at most 4.
View random_view(View v, std::mt19937& rng) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const int ops = pick(0, 4);
  for (int op = 0; op < ops; ++op) {
    switch (pick(0, 3)) {
      case 0:
        v = v.transpose();
        break;
      case 1: {
        std::vector<IndexItem> items;
        int rank = 0;
        for (int k = 0; k < v.ndim(); ++k) {
          const std::int64_t n = v.shape()[k];
          const int kind = pick(0, 9);
          if (kind == 0 && n > 0) {
            items.push_back(IndexItem::at(pick(0, static_cast<int>(n) - 1)));
          } else {
            int step = pick(-3, 3);
            if (step == 0) step = 1;
            auto bound = [&]() -> std::optional<std::int64_t> {
              if (pick(0, 3) == 0) return std::nullopt;
              return pick(-6, 6);
            };
            items.push_back(IndexItem::range(bound(), bound(), step));
            ++rank;
          }
          if (rank < 4 && v.ndim() + 1 <= 4 && pick(0, 7) == 0) {
            items.push_back(IndexItem::newaxis());
            ++rank;
          }
        }
        v = v.index(items);
        break;
      }
      case 2: {
        if (v.ndim() == 0) break;
        const int axis = pick(-v.ndim(), v.ndim() - 1);
        const std::int64_t n = v.shape()[axis < 0 ? axis + v.ndim() : axis];
        if (n == 0) break;
        const int start = pick(0, static_cast<int>(n) - 1);
        v = v.slice(axis, start, pick(start, static_cast<int>(n)));
        break;
      }
      default: {
        std::vector<int> axes(v.ndim());
        for (int k = 0; k < v.ndim(); ++k) axes[k] = k;
        std::shuffle(axes.begin(), axes.end(), rng);
        const Layout permuted = v.layout().permute(axes);
        v = View(v.ptr(), v.dtype(), permuted, v.readonly(), v.sync(), v.owner());
        break;
      }
    }
  }
  return v;
}

template <class T>
void random_layouts(std::uint32_t seed, int trials) {
  std::mt19937 rng(seed);
  for (int t = 0; t < trials; ++t) {
    const int ndim = std::uniform_int_distribution<int>(0, 4)(rng);
    std::vector<std::int64_t> shape(ndim);
    std::int64_t count = 1;
    for (auto& n : shape) {
      n = std::uniform_int_distribution<int>(0, 9)(rng) == 0
              ? 0
              : std::uniform_int_distribution<int>(1, 5)(rng);
      count *= n;
    }
    std::vector<T> buffer(static_cast<std::size_t>(count));
    for (std::size_t i = 0; i < buffer.size(); ++i) buffer[i] = static_cast<T>(i + 1);
    const bool fortran = std::uniform_int_distribution<int>(0, 1)(rng) == 1;
    const View base(
        address_of(buffer.data()), cai::dtype_of<T>(),
        fortran ? Layout::f_contiguous(shape, sizeof(T)) : Layout::c_contiguous(shape, sizeof(T)),
        false, std::make_shared<cai::sync::SyncState>(), nullptr);
    const View v = random_view(base, rng);
    SCOPED_TRACE("trial " + std::to_string(t) + ": shape " + cai::format_dims(v.shape()) +
                 ", strides " + cai::format_dims(v.strides()));
    check_any_rank<T>(v, rng);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST(array_ref_test, trivially_copyable) {
  static_assert(std::is_trivially_copyable_v<ArrayRef<float, 0>>);
  static_assert(std::is_trivially_copyable_v<ArrayRef<const double, 1>>);
  static_assert(std::is_trivially_copyable_v<ArrayRef<Rgb, 4>>);
  static_assert(std::is_standard_layout_v<ArrayRef<float, 3>>);
  static_assert(sizeof(ArrayRef<float, 3>) == sizeof(void*) + 6 * sizeof(std::int64_t));
  static_assert(ArrayRef<int, 3>::ndim == 3);
  EXPECT_TRUE((std::is_trivially_copyable_v<ArrayRef<std::int64_t, 2>>));
}

TEST(array_ref_test, const_conversions) {
  static_assert(std::is_convertible_v<ArrayRef<float, 2>, ArrayRef<const float, 2>>);
  static_assert(!std::is_convertible_v<ArrayRef<const float, 2>, ArrayRef<float, 2>>);
  static_assert(!std::is_constructible_v<ArrayRef<float, 2>, ArrayRef<const float, 2>>);
  static_assert(!std::is_convertible_v<ArrayRef<float, 2>, ArrayRef<const float, 3>>);
  static_assert(!std::is_convertible_v<ArrayRef<float, 2>, ArrayRef<const double, 2>>);
  static_assert(std::is_same_v<decltype(std::declval<ArrayRef<const int, 1>>()(0)), const int&>);
  static_assert(std::is_same_v<decltype(std::declval<const ArrayRef<int, 1>>()(0)), int&>);

  float data[6] = {0, 1, 2, 3, 4, 5};
  const ArrayRef<float, 2> a(data, {2, 3}, {3, 1});
  const ArrayRef<const float, 2> c = a;
  EXPECT_EQ(c.data(), data);
  EXPECT_EQ(c.shape(0), 2);
  EXPECT_EQ(c.shape(1), 3);
  EXPECT_EQ(c.stride(0), 3);
  EXPECT_EQ(c.stride(1), 1);
  EXPECT_EQ(&c(1, 2), &data[5]);
  a(1, 2) = 50;
  EXPECT_EQ(c(1, 2), 50);
}

TEST(array_ref_test, construction_and_observers) {
  int data[24];
  const auto a = ArrayRef<int, 3>::c_contiguous(data, {2, 3, 4});
  EXPECT_EQ(a.stride(0), 12);
  EXPECT_EQ(a.stride(1), 4);
  EXPECT_EQ(a.stride(2), 1);
  EXPECT_EQ(a.size(), 24);
  EXPECT_FALSE(a.empty());
  EXPECT_EQ(&a(1, 2, 3), &data[23]);

  const ArrayRef<int, 1> v(data, {4}, {-2});  // negative strides are fine
  EXPECT_EQ(&v[3], data - 6);

  const auto e = ArrayRef<int, 2>::c_contiguous(data, {0, 5});
  EXPECT_EQ(e.stride(0), 5);
  EXPECT_TRUE(e.empty());

  const ArrayRef<int, 0> s(data);
  EXPECT_EQ(s.size(), 1);
  EXPECT_EQ(&s(), data);

  const ArrayRef<double, 2> d;
  EXPECT_EQ(d.data(), nullptr);
  EXPECT_EQ(d.size(), 0);
  EXPECT_EQ(d.shape(1), 0);
}

TEST(array_ref_test, element_access_exhaustive_small) {
  // Every layout of a 2x3 array that Layout can describe with transposes and reversals.
  std::int32_t data[6] = {1, 2, 3, 4, 5, 6};
  const View base = c_view(data, {2, 3});
  std::mt19937 rng(1);
  for (int rev0 = 0; rev0 < 2; ++rev0) {
    for (int rev1 = 0; rev1 < 2; ++rev1) {
      for (int tr = 0; tr < 2; ++tr) {
        const std::vector<IndexItem> items = {
            IndexItem::range(std::nullopt, std::nullopt, rev0 ? -1 : 1),
            IndexItem::range(std::nullopt, std::nullopt, rev1 ? -1 : 1)};
        View v = base.index(items);
        if (tr) v = v.transpose();
        check_any_rank<std::int32_t>(v, rng);
      }
    }
  }
}

TEST(array_ref_test, element_access_random_layouts) {
  random_layouts<float>(7, 400);
  random_layouts<double>(8, 200);
  random_layouts<std::int16_t>(9, 200);
  random_layouts<std::uint64_t>(10, 200);
}

TEST(array_ref_test, slice_rules) {
  int data[12];
  const auto a = ArrayRef<int, 2>::c_contiguous(data, {3, 4});

  const auto s = a.slice(-1, 1, 3);  // negative axis counts from the last
  EXPECT_EQ(s.shape(0), 3);
  EXPECT_EQ(s.shape(1), 2);
  EXPECT_EQ(s.stride(1), 1);
  EXPECT_EQ(&s(2, 1), &a(2, 2));

  const auto e = a.slice(0, 2, 2);  // empty, start still below N
  EXPECT_EQ(e.shape(0), 0);
  EXPECT_EQ(e.data(), &a(2, 0));
  EXPECT_EQ(a.slice(0, 0, 3).data(), data);

  EXPECT_THAT(
      [&] { (void)a.slice(0, 3, 3); },
      ThrowsCaiError(
          Errc::index_error,
          HasSubstr("ArrayRef::slice(): axis 0, start 3, stop 3, N 3: requires 0 <= start < N")));
  EXPECT_THAT([&] { (void)a.slice(1, -1, 2); },
              ThrowsCaiError(Errc::index_error, HasSubstr("0 <= start < N")));
  EXPECT_THAT(
      [&] { (void)a.slice(-1, 2, 1); },
      ThrowsCaiError(Errc::index_error,
                     HasSubstr("axis -1, start 2, stop 1, N 4: requires start <= stop <= N")));
  EXPECT_THAT([&] { (void)a.slice(1, 0, 5); },
              ThrowsCaiError(Errc::index_error, HasSubstr("start <= stop <= N")));
  EXPECT_THAT(
      [&] { (void)a.slice(2, 0, 1); },
      ThrowsCaiError(
          Errc::index_error,
          HasSubstr(
              "ArrayRef::slice(): axis 2 is out of range for 2 dimensions (-2 <= axis < 2)")));
  EXPECT_THAT([&] { (void)a.slice(-3, 0, 1); },
              ThrowsCaiError(Errc::index_error, HasSubstr("axis -3 is out of range")));
  // An axis of extent 0 cannot be sliced at all: no start satisfies 0 <= start < 0.
  EXPECT_THAT([&] { (void)e.slice(0, 0, 0); }, ThrowsCaiError(Errc::index_error, HasSubstr("N 0")));
}

TEST(array_ref_test, bounds_assertions) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  int data[6] = {};
  const auto a = ArrayRef<int, 2>::c_contiguous(data, {2, 3});
  EXPECT_DEATH((void)a(2, 0), "ArrayRef: index out of bounds");
  EXPECT_DEATH((void)a(0, -1), "ArrayRef: index out of bounds");
  EXPECT_DEATH((void)a.shape(2), "ArrayRef: axis out of range");
}

TEST(array_ref_test, dtype_of) {
  auto str = [](const DType& t) { return t.str(); };
  const std::string le = std::endian::native == std::endian::little ? "<" : ">";
  EXPECT_EQ(str(cai::dtype_of<bool>()), "|b1");
  EXPECT_EQ(str(cai::dtype_of<std::int8_t>()), "|i1");
  EXPECT_EQ(str(cai::dtype_of<std::uint8_t>()), "|u1");
  EXPECT_EQ(str(cai::dtype_of<std::int16_t>()), le + "i2");
  EXPECT_EQ(str(cai::dtype_of<std::uint16_t>()), le + "u2");
  EXPECT_EQ(str(cai::dtype_of<std::int32_t>()), le + "i4");
  EXPECT_EQ(str(cai::dtype_of<std::uint32_t>()), le + "u4");
  EXPECT_EQ(str(cai::dtype_of<std::int64_t>()), le + "i8");
  EXPECT_EQ(str(cai::dtype_of<std::uint64_t>()), le + "u8");
  EXPECT_EQ(str(cai::dtype_of<long long>()), le + "i8");
  EXPECT_EQ(str(cai::dtype_of<unsigned long>()), le + "u8");
  EXPECT_EQ(str(cai::dtype_of<float>()), le + "f4");
  EXPECT_EQ(str(cai::dtype_of<const volatile double>()), le + "f8");
  EXPECT_EQ(str(cai::dtype_of<std::complex<float>>()), le + "c8");
  EXPECT_EQ(str(cai::dtype_of<std::complex<double>>()), le + "c16");
  EXPECT_EQ(cai::dtype_of<Rgb>().itemsize(), 3);
  EXPECT_TRUE(cai::dtype_of<Rgb>().is_structured());
  EXPECT_EQ(&cai::dtype_of<float>(), &cai::dtype_of<float>());  // built once

  static_assert(cai::HasDType<int>);
  static_assert(cai::HasDType<const Rgb>);
  static_assert(!cai::HasDType<char>);  // text, not a number: say int8_t or uint8_t
  static_assert(!cai::HasDType<long double>);
  static_assert(!cai::HasDType<std::string>);
#if CAI_HAS_CUDA_STD_COMPLEX
  EXPECT_EQ(str(cai::dtype_of<cuda::std::complex<float>>()), le + "c8");
  EXPECT_EQ(str(cai::dtype_of<cuda::std::complex<double>>()), le + "c16");
#endif
#if CAI_HAS_CUDA_FP16
  EXPECT_EQ(str(cai::dtype_of<__half>()), le + "f2");
#endif
#if CAI_HAS_CUDA_BF16
  EXPECT_EQ(cai::dtype_of<__nv_bfloat16>().extended(), cai::Extended::bfloat16);
#endif
}

TEST(array_ref_test, from_view) {
  float data[12];
  for (int i = 0; i < 12; ++i) data[i] = static_cast<float>(i);
  const View v = c_view(data, {3, 4});
  const auto a = as_array_ref<float, 2>(v);
  EXPECT_EQ(a.data(), data);
  EXPECT_EQ(a.stride(0), 4);
  EXPECT_EQ(a(2, 3), 11.0f);

  // Read-only views convert to const element types only.
  const View ro = c_view(data, {3, 4}, /*readonly=*/true);
  EXPECT_EQ((as_array_ref<const float, 2>(ro)(1, 1)), 5.0f);
  EXPECT_THAT(([&] { (void)as_array_ref<float, 2>(ro); }),
              ThrowsCaiError(Errc::value_error,
                             AllOf(HasSubstr("as_array_ref(): "), HasSubstr("is read-only"),
                                   HasSubstr("ArrayRef<const T, N>"))));

  // 0-d.
  const View scalar = c_view(data + 7, {});
  EXPECT_EQ((as_array_ref<float, 0>(scalar)()), 7.0f);

  // Structured elements.
  Rgb pixels[4] = {{1, 2, 3}, {4, 5, 6}, {7, 8, 9}, {10, 11, 12}};
  const View pv(address_of(pixels), cai::dtype_of<Rgb>(),
                Layout::c_contiguous(std::vector<std::int64_t>{2, 2}, 3), false,
                std::make_shared<cai::sync::SyncState>(), nullptr);
  EXPECT_EQ((as_array_ref<Rgb, 2>(pv)(1, 0).g), 8);
}

TEST(array_ref_test, from_view_errors) {
  alignas(8) float data[16] = {};
  const View v = c_view(data, {2, 3});

  EXPECT_THAT(([&] { (void)as_array_ref<double, 2>(v); }),
              ThrowsCaiError(Errc::value_error,
                             HasSubstr("as_array_ref(): dtype is '<f4', expected '<f8'")));
  EXPECT_THAT(([&] { (void)as_array_ref<std::int32_t, 2>(v); }),
              ThrowsCaiError(Errc::value_error, HasSubstr("expected '<i4'")));
  EXPECT_THAT(([&] { (void)as_array_ref<float, 3>(v); }),
              ThrowsCaiError(Errc::value_error,
                             HasSubstr("as_array_ref(): ndim is 2 (shape (2, 3)), expected 3")));
  EXPECT_THAT(([&] { (void)as_array_ref<float, 0>(v); }),
              ThrowsCaiError(Errc::value_error, HasSubstr("expected 0")));

  // Misaligned pointer (the View itself allows it).
  const View odd(address_of(data) + 2, cai::dtype_of<float>(),
                 Layout::c_contiguous(std::vector<std::int64_t>{2}, 4), false,
                 std::make_shared<cai::sync::SyncState>(), nullptr);
  EXPECT_THAT(
      ([&] { (void)as_array_ref<float, 1>(odd); }),
      ThrowsCaiError(Errc::value_error, AllOf(HasSubstr("as_array_ref(): the data pointer 0x"),
                                              HasSubstr("is not aligned to 4 bytes"))));

  // A byte stride that is not a multiple of the item size, named by axis.
  const View skew = make_view(reinterpret_cast<float*>(data), {2, 2}, {16, 6});
  EXPECT_THAT(
      ([&] { (void)as_array_ref<float, 2>(skew); }),
      ThrowsCaiError(
          Errc::value_error,
          HasSubstr(
              "as_array_ref(): strides: axis 1 has a byte stride of 6, which is not a multiple "
              "of the item size 4")));

  // ... except where no address depends on it (an axis of extent 1, or an empty array): such
  // an axis gets the row-major element stride, and a divisible stride is kept as it is.
  const View one = make_view(reinterpret_cast<float*>(data), {1, 3}, {7, 4});
  const auto o = as_array_ref<float, 2>(one);
  EXPECT_EQ(o.stride(0), 3);
  EXPECT_EQ(o.stride(1), 1);
  const View one_divisible = make_view(reinterpret_cast<float*>(data), {1, 3}, {12, 4});
  EXPECT_EQ((as_array_ref<float, 2>(one_divisible).stride(0)), 3);
  const View none(0, cai::dtype_of<float>(), Layout({0, 3}, {12, 2}, 4), false,
                  std::make_shared<cai::sync::SyncState>(), nullptr);
  const auto n = as_array_ref<float, 2>(none);
  EXPECT_EQ(n.data(), nullptr);
  EXPECT_TRUE(n.empty());
  EXPECT_EQ(n.stride(0), 3);
  EXPECT_EQ(n.stride(1), 1);
  // An empty array may have any pointer.
  const View empty_odd(address_of(data) + 1, cai::dtype_of<float>(), Layout({0}, {4}, 4), false,
                       std::make_shared<cai::sync::SyncState>(), nullptr);
  EXPECT_TRUE((as_array_ref<float, 1>(empty_odd).empty()));

  // Masks cannot be carried.
  View masked = v;
  masked.set_mask(std::make_shared<View>(v));
  EXPECT_THAT(([&] { (void)as_array_ref<const float, 2>(masked); }),
              ThrowsCaiError(Errc::value_error, HasSubstr("as_array_ref(): the array has a mask")));

  // A DTypeTraits specialisation whose itemsize is not sizeof(T).
  EXPECT_THAT(
      ([&] { (void)as_array_ref<Wrong, 2>(v); }),
      ThrowsCaiError(Errc::value_error, AllOf(HasSubstr("itemsize 4"), HasSubstr("sizeof 8"),
                                              HasSubstr("DTypeTraits"))));
}

TEST(array_ref_test, flat_view) {
  float data[24];
  for (int i = 0; i < 24; ++i) data[i] = static_cast<float>(i);
  const View v = c_view(data, {2, 3, 4});
  const auto f = cai::as_flat_array_ref<const float>(v);
  EXPECT_EQ(f.shape(0), 24);
  EXPECT_EQ(f.stride(0), 1);
  EXPECT_EQ(f[23], 23.0f);
  EXPECT_EQ(cai::as_flat_array_ref<float>(c_view(data, {})).size(), 1);
  EXPECT_THAT([&] { (void)cai::as_flat_array_ref<float>(v.transpose()); },
              ThrowsCaiError(Errc::value_error,
                             AllOf(HasSubstr("as_flat_array_ref(): the array is not C-contiguous"),
                                   HasSubstr("shape (4, 3, 2)"))));
  EXPECT_THAT([&] { (void)cai::as_flat_array_ref<double>(v); },
              ThrowsCaiError(Errc::value_error, HasSubstr("as_flat_array_ref(): dtype is")));
  EXPECT_THAT([&] { (void)cai::as_flat_array_ref<float>(c_view(data, {2}, true)); },
              ThrowsCaiError(Errc::value_error, HasSubstr("read-only")));
}

#if CAI_HAS_CUDA_STD_MDSPAN

template <class T, int N>
void expect_same_addresses(const ArrayRef<T, N>& a) {
  const auto m = cai::to_mdspan(a);
  static_assert(std::is_same_v<typename decltype(m)::element_type, T>);
  static_assert(decltype(m)::rank() == N);
  for (int k = 0; k < N; ++k) ASSERT_EQ(m.extent(k), a.shape(k));
  for_each_index<N>(shape_of(a), [&](const std::array<std::int64_t, N>& idx) {
    const T* want = std::apply([&](auto... i) { return &a(i...); }, idx);
    const T* got = std::apply([&](auto... i) { return &m(i...); }, idx);
    ASSERT_EQ(got, want);
  });
}

TEST(array_ref_test, mdspan_same_addresses) {
  std::mt19937 rng(11);
  std::vector<double> buffer(4 * 5 * 3 * 2);
  for (int t = 0; t < 200; ++t) {
    // Random positive-stride layouts: a permuted dense block, then random tile slices.
    std::array<std::int64_t, 4> shape{}, order{0, 1, 2, 3}, strides{};
    for (auto& n : shape) n = std::uniform_int_distribution<int>(1, 4)(rng);
    std::shuffle(order.begin(), order.end(), rng);
    std::int64_t step = std::uniform_int_distribution<int>(1, 2)(rng);
    for (std::int64_t k : order) {
      strides[k] = step;
      step *= shape[k] + std::uniform_int_distribution<int>(0, 1)(rng);  // gaps allowed
    }
    if (step > static_cast<std::int64_t>(buffer.size())) buffer.resize(step);
    ArrayRef<double, 4> a(buffer.data(), {shape[0], shape[1], shape[2], shape[3]},
                          {strides[0], strides[1], strides[2], strides[3]});
    const int axis = std::uniform_int_distribution<int>(0, 3)(rng);
    const auto start = std::uniform_int_distribution<std::int64_t>(0, shape[axis] - 1)(rng);
    a = a.slice(axis, start, std::uniform_int_distribution<std::int64_t>(start, shape[axis])(rng));
    expect_same_addresses(a);
    expect_same_addresses(ArrayRef<const double, 4>(a));
    if (a.shape(0) > 0) expect_same_addresses(a.slice(0, 0, 1));
  }
}

TEST(array_ref_test, mdspan_strides_and_round_trip) {
  float data[64];
  const auto a = ArrayRef<float, 2>::c_contiguous(data, {4, 8}).slice(1, 2, 6);
  const cai::MdspanOf<float, 2> m = cai::to_mdspan(a);
  EXPECT_EQ(m.data_handle(), &a(0, 0));
  EXPECT_EQ(m.stride(0), 8);
  EXPECT_EQ(m.stride(1), 1);
  EXPECT_EQ(m.mapping().required_span_size(), 3 * 8 + 4);

  const auto back = as_array_ref(m);
  static_assert(std::is_same_v<decltype(back), const ArrayRef<float, 2>>);
  EXPECT_EQ(back.data(), a.data());
  EXPECT_EQ(back.shape(1), 4);
  EXPECT_EQ(back.stride(0), 8);

  // From the standard layouts.
  cuda::std::mdspan<const float, cuda::std::dextents<int, 3>, cuda::std::layout_left> left(data, 2,
                                                                                           3, 4);
  const auto l = as_array_ref(left);
  static_assert(std::is_same_v<decltype(l), const ArrayRef<const float, 3>>);
  EXPECT_EQ(l.stride(0), 1);
  EXPECT_EQ(l.stride(1), 2);
  EXPECT_EQ(l.stride(2), 6);
  EXPECT_EQ(&l(1, 2, 3), &left(1, 2, 3));
  cuda::std::mdspan<float, cuda::std::extents<std::size_t>> zero(data + 5);
  EXPECT_EQ(&as_array_ref(zero)(), data + 5);

  // 0-d.
  const auto z = cai::to_mdspan(ArrayRef<float, 0>(data + 3));
  EXPECT_EQ(&z(), data + 3);
}

TEST(array_ref_test, mdspan_degenerate_strides) {
  float data[16];
  // Strides of extent-1 axes reach no other element: made positive.
  const ArrayRef<float, 3> a(data, {1, 4, 1}, {0, 2, -5});
  const auto m = cai::to_mdspan(a);
  EXPECT_GT(m.stride(0), 0);
  EXPECT_GT(m.stride(2), 0);
  EXPECT_EQ(m.stride(1), 2);
  EXPECT_TRUE(m.is_unique());
  EXPECT_EQ(&m(0, 3, 0), &a(0, 3, 0));

  // Empty views: any positive set will do.
  const ArrayRef<float, 2> e(data, {0, 3}, {-1, 0});
  const auto me = cai::to_mdspan(e);
  EXPECT_EQ(me.size(), 0u);
  EXPECT_GT(me.stride(0), 0);
  EXPECT_GT(me.stride(1), 0);

  EXPECT_THAT(
      [&] { (void)cai::to_mdspan(ArrayRef<float, 1>(data + 15, {4}, {-1})); },
      ThrowsCaiError(Errc::value_error, AllOf(HasSubstr("to_mdspan(): axis 0 has stride -1"),
                                              HasSubstr("needs positive strides"))));
  EXPECT_THAT(
      [&] {
        (void)cai::to_mdspan(ArrayRef<float, 2>(data, {3, 4}, {0, 1}));
      },
      ThrowsCaiError(Errc::value_error, HasSubstr("axis 0 has stride 0")));
  EXPECT_THAT(
      [&] {
        (void)cai::to_mdspan(ArrayRef<float, 2>(data, {3, 4}, {2, 1}));
      },
      ThrowsCaiError(Errc::value_error, AllOf(HasSubstr("two indices reach the same element"),
                                              HasSubstr("unique mapping"))));
  // Interleaved but unique: fine.
  EXPECT_NO_THROW((void)cai::to_mdspan(ArrayRef<float, 2>(data, {2, 4}, {1, 2})));
  EXPECT_NO_THROW((void)cai::to_mdspan(ArrayRef<float, 2>(data, {4, 2}, {1, 4})));
  EXPECT_THAT(
      [&] {
        (void)cai::to_mdspan(ArrayRef<float, 2>(data, {4, 2}, {1, 3}));
      },
      ThrowsCaiError(Errc::value_error, HasSubstr("unique mapping")));
}

#endif  // CAI_HAS_CUDA_STD_MDSPAN

}  // namespace
