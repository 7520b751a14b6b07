#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <new>
#include <string>
#include <vector>

#include "cai/core/error.h"
#include "cai/core/interface.h"
#include "cai_matchers.h"

// Counts heap allocations so that the hot path can be checked to allocate nothing.
namespace {
std::atomic<long> g_allocations{0};
}  // namespace

void* operator new(std::size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}

namespace cai {
namespace {

constexpr std::int64_t max64 = std::numeric_limits<std::int64_t>::max();

using test::ThrowsCaiError;
using ::testing::AllOf;
using ::testing::HasSubstr;

// A 2-D float32 v3 descriptor as CuPy would export it (no strides, no stream).
InterfaceFields simple(std::int64_t version = 3) {
  InterfaceFields f;
  f.has_shape = true;
  f.shape = {2, 3};
  f.has_typestr = true;
  f.typestr = "<f4";
  f.has_data = true;
  f.ptr = 0x1000;
  f.has_version = true;
  f.version = version;
  return f;
}

TEST(interface_test, simple_v3) {
  Interface i = validate_interface(simple());
  EXPECT_EQ(i.version, 3);
  EXPECT_EQ(i.dtype.kind(), Kind::floating);
  EXPECT_EQ(i.dtype.itemsize(), 4);
  EXPECT_EQ(Dims(i.layout.shape()), (Dims{2, 3}));
  EXPECT_EQ(Dims(i.layout.strides()), (Dims{12, 4}));
  EXPECT_FALSE(i.strides_given);
  EXPECT_EQ(i.ptr, 0x1000u);
  EXPECT_FALSE(i.readonly);
  EXPECT_FALSE(i.stream.has_value());
  EXPECT_EQ(i.mask, nullptr);
}

TEST(interface_test, hot_path_does_not_allocate) {
  InterfaceFields f = simple();
  f.stream_state = Presence::given;
  f.stream = 2;
  validate_interface(f);  // any lazy one-time setup happens here
  const long before = g_allocations.load();
  Interface i = validate_interface(f);
  EXPECT_EQ(g_allocations.load() - before, 0);
  EXPECT_EQ(i.stream, 2u);
  EXPECT_TRUE(i.layout.is_c_contiguous());
  // The counter works: a mask is shared, which allocates.
  InterfaceFields mf = simple();
  mf.typestr = "|b1";
  const Interface mask = validate_interface(mf);
  f.mask_state = Presence::given;
  f.mask = &mask;
  const long before_mask = g_allocations.load();
  EXPECT_NE(validate_interface(f).mask, nullptr);
  EXPECT_GT(g_allocations.load() - before_mask, 0);
}

TEST(interface_test, missing_keys) {
  const char* keys[] = {"shape", "typestr", "data", "version"};
  for (int k = 0; k < 4; ++k) {
    InterfaceFields f = simple();
    bool* flags[] = {&f.has_shape, &f.has_typestr, &f.has_data, &f.has_version};
    *flags[k] = false;
    EXPECT_THAT(
        [&] { validate_interface(f); },
        ThrowsCaiError(Errc::value_error,
                       HasSubstr(std::string("__cuda_array_interface__: missing required key '") +
                                 keys[k] + "'")));
  }
}

TEST(interface_test, version) {
  EXPECT_THAT([] { validate_interface(simple(-1)); },
              ThrowsCaiError(Errc::value_error, HasSubstr("version: -1 is not a valid version")));
  for (int v = 0; v <= 3; ++v) EXPECT_EQ(validate_interface(simple(v)).version, v);
  // Newer versions are read with the v3 rules.
  EXPECT_EQ(validate_interface(simple(4)).version, 3);
  EXPECT_EQ(validate_interface(simple(max64)).version, 3);
  InterfaceFields f = simple(9);
  f.shape = {0};
  EXPECT_THAT(
      [&] { validate_interface(f); },
      ThrowsCaiError(Errc::value_error, AllOf(HasSubstr("CAI v2+"), HasSubstr("version 9"))));
}

TEST(interface_test, shape) {
  InterfaceFields f = simple();
  f.shape = {2, -3};
  EXPECT_THAT(
      [&] { validate_interface(f); },
      ThrowsCaiError(Errc::value_error, HasSubstr("shape: (2, -3) has a negative size at axis 1")));
  f.shape = Dims(65, 1);
  EXPECT_THAT([&] { validate_interface(f); },
              ThrowsCaiError(Errc::value_error, HasSubstr("shape: 65 dimensions; at most 64")));
  f.shape = Dims(64, 1);
  EXPECT_EQ(validate_interface(f).layout.ndim(), 64);
  f.shape = {};
  Interface scalar = validate_interface(f);
  EXPECT_EQ(scalar.layout.ndim(), 0);
  EXPECT_EQ(scalar.layout.size(), 1);
  f.shape = {max64 / 2, 3};
  EXPECT_THAT(
      [&] { validate_interface(f); },
      ThrowsCaiError(Errc::overflow, AllOf(HasSubstr("shape: ("), HasSubstr("typestr '<f4'"),
                                           HasSubstr("overflows int64"))));
}

TEST(interface_test, typestr) {
  InterfaceFields f = simple();
  f.typestr = "<q9";
  try {
    validate_interface(f);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::value_error);
    EXPECT_EQ(std::string(e.what()).rfind("typestr: ", 0), 0u) << e.what();
  }
  f.typestr = ">i2";
  Interface i = validate_interface(f);
  EXPECT_EQ(i.dtype.itemsize(), 2);
  EXPECT_EQ(Dims(i.layout.strides()), (Dims{6, 2}));
}

TEST(interface_test, strides) {
  for (int v = 0; v <= 3; ++v) {
    InterfaceFields f = simple(v);
    f.strides_state = Presence::given;
    f.strides = {12, 4};  // explicit C strides: allowed in every version
    Interface i = validate_interface(f);
    EXPECT_TRUE(i.strides_given);
    EXPECT_TRUE(i.layout.is_c_contiguous());
    f.strides = {4, 8};
    EXPECT_TRUE(validate_interface(f).layout.is_f_contiguous());
    f.strides = {-12, 4};
    EXPECT_EQ(validate_interface(f).layout.extent(), (Layout::Extent{-12, 12}));
  }
  InterfaceFields f = simple();
  f.strides_state = Presence::none;
  f.strides = {1, 2, 3};  // ignored: None means C-contiguous
  Interface i = validate_interface(f);
  EXPECT_FALSE(i.strides_given);
  EXPECT_EQ(Dims(i.layout.strides()), (Dims{12, 4}));

  f.strides_state = Presence::given;
  f.strides = {4};
  EXPECT_THAT(
      [&] { validate_interface(f); },
      ThrowsCaiError(Errc::value_error,
                     HasSubstr("strides: (4,) has 1 values but shape (2, 3) has 2 dimensions")));
  f.strides = {max64 / 2, 4};
  f.shape = {3, 3};
  EXPECT_THAT([&] { validate_interface(f); },
              ThrowsCaiError(Errc::overflow, AllOf(HasSubstr("strides: ("),
                                                   HasSubstr("with shape (3, 3) and item size 4"),
                                                   HasSubstr("int64"))));
}

TEST(interface_test, zero_size) {
  for (int v = 0; v <= 1; ++v) {
    InterfaceFields f = simple(v);
    f.shape = {0, 3};
    f.ptr = 0xdead;  // unspecified before v2: accepted and normalized
    EXPECT_EQ(validate_interface(f).ptr, 0u);
  }
  for (int v = 2; v <= 3; ++v) {
    InterfaceFields f = simple(v);
    f.shape = {0, 3};
    f.ptr = 0xdead;
    EXPECT_THAT(
        [&] { validate_interface(f); },
        ThrowsCaiError(
            Errc::value_error,
            HasSubstr(
                "data: pointer 0xdead for a zero-size array of shape (0, 3); CAI v2+ requires 0")));
    f.ptr = 0;
    EXPECT_EQ(validate_interface(f).layout.size(), 0);
  }
}

TEST(interface_test, null_pointer) {
  InterfaceFields f = simple();
  f.ptr = 0;
  EXPECT_THAT(
      [&] { validate_interface(f); },
      ThrowsCaiError(Errc::value_error,
                     HasSubstr("data: pointer 0 for an array of shape (2, 3) with 6 elements")));
  f.shape = {};
  EXPECT_THAT([&] { validate_interface(f); },
              ThrowsCaiError(Errc::value_error, HasSubstr("shape ()")));
}

TEST(interface_test, readonly) {
  InterfaceFields f = simple();
  f.read_only = true;
  EXPECT_TRUE(validate_interface(f).readonly);
}

TEST(interface_test, stream) {
  InterfaceFields f = simple();
  f.stream_state = Presence::given;
  f.stream = 0;
  EXPECT_THAT(
      [&] { validate_interface(f); },
      ThrowsCaiError(
          Errc::value_error,
          HasSubstr(
              "stream: 0 is not allowed: the CUDA Array Interface forbids stream 0, which is "
              "ambiguous between no stream, the legacy default stream and the per-thread default "
              "stream; use 1, 2, a stream handle or None")));
  f.stream = -1;
  EXPECT_THAT([&] { validate_interface(f); },
              ThrowsCaiError(Errc::value_error, HasSubstr("stream: -1 is not a stream")));
  f.stream = 1;
  EXPECT_EQ(validate_interface(f).stream, 1u);
  f.stream = 0x7f00deadbeef;
  EXPECT_EQ(validate_interface(f).stream, 0x7f00deadbeefu);
  f.stream_state = Presence::none;
  EXPECT_FALSE(validate_interface(f).stream.has_value());
  // Honoured in any version where it appears.
  f = simple(2);
  f.stream_state = Presence::given;
  f.stream = 7;
  EXPECT_EQ(validate_interface(f).stream, 7u);
  f.stream = 0;
  EXPECT_THROW(validate_interface(f), Error);
}

TEST(interface_test, mask) {
  InterfaceFields mf = simple();
  mf.typestr = "|b1";
  mf.ptr = 0x2000;
  const Interface mask = validate_interface(mf);

  InterfaceFields f = simple(0);
  f.mask_state = Presence::none;
  EXPECT_EQ(validate_interface(f).mask, nullptr);
  f.mask_state = Presence::given;
  f.mask = &mask;
  EXPECT_THAT([&] { validate_interface(f); },
              ThrowsCaiError(Errc::value_error,
                             HasSubstr("mask: an object was given but CAI v0 has no mask")));

  for (int v = 1; v <= 3; ++v) {
    f.version = v;
    Interface i = validate_interface(f);
    ASSERT_NE(i.mask, nullptr);
    EXPECT_EQ(i.mask->ptr, 0x2000u);
    EXPECT_EQ(i.mask->dtype.kind(), Kind::boolean);
  }

  mf.typestr = "<u1";
  const Interface int_mask = validate_interface(mf);
  f.mask = &int_mask;
  EXPECT_NE(validate_interface(f).mask, nullptr);

  mf.typestr = "<f4";
  const Interface float_mask = validate_interface(mf);
  f.mask = &float_mask;
  EXPECT_THAT(
      [&] { validate_interface(f); },
      ThrowsCaiError(Errc::value_error, HasSubstr("mask: typestr '<f4' is not bool or integer")));

  mf.typestr = "|b1";
  mf.shape = {3, 2};
  const Interface wrong_shape = validate_interface(mf);
  f.mask = &wrong_shape;
  EXPECT_THAT([&] { validate_interface(f); },
              ThrowsCaiError(Errc::value_error,
                             HasSubstr("mask: shape (3, 2) differs from the data shape (2, 3)")));

  f.mask = nullptr;
  EXPECT_THAT([&] { validate_interface(f); },
              ThrowsCaiError(Errc::value_error, HasSubstr("mask:")));
}

TEST(interface_test, descr) {
  InterfaceFields f = simple();
  f.has_descr = true;
  f.descr = {DescrEntry{"", "<f4", {}, {}}};  // what NumPy and CuPy export
  Interface i = validate_interface(f);
  EXPECT_FALSE(i.dtype.is_structured());
  EXPECT_EQ(i.dtype, DType::from_typestr("<f4"));

  f.descr = {DescrEntry{"", "<i4", {}, {}}};
  EXPECT_THAT([&] { validate_interface(f); },
              ThrowsCaiError(Errc::value_error,
                             HasSubstr("descr: [('', '<i4')] contradicts typestr '<f4'")));

  f.typestr = "|V8";
  f.descr = {DescrEntry{"x", "<f4", {}, {}}, DescrEntry{"y", "<i4", {}, {}}};
  i = validate_interface(f);
  EXPECT_TRUE(i.dtype.is_structured());
  EXPECT_EQ(i.dtype.itemsize(), 8);
  ASSERT_EQ(i.dtype.fields().size(), 2u);
  EXPECT_EQ(i.dtype.fields()[1].name, "y");
  EXPECT_EQ(Dims(i.layout.strides()), (Dims{24, 8}));

  f.typestr = "|V4";
  EXPECT_THAT(
      [&] { validate_interface(f); },
      ThrowsCaiError(Errc::value_error,
                     HasSubstr("descr: describes an item of 8 bytes but typestr '|V4' has 4")));
}

TEST(interface_test, key_type_error) {
  EXPECT_THAT(
      [] { throw_key_type_error("shape", "list", "a tuple of int"); },
      ThrowsCaiError(Errc::type_error, HasSubstr("shape: expected a tuple of int, got list")));
}

}  // namespace
}  // namespace cai
