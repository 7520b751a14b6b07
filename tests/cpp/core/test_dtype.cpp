#include "cai/core/dtype.h"

#include <gtest/gtest.h>

#include <bit>
#include <cstddef>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "cai/core/error.h"
#include "cai_matchers.h"

namespace cai {
namespace {

using test::ThrowsCaiError;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr bool kLittleHost = std::endian::native == std::endian::little;
constexpr ByteOrder kNative = kLittleHost ? ByteOrder::little : ByteOrder::big;
constexpr ByteOrder kForeign = kLittleHost ? ByteOrder::big : ByteOrder::little;
const std::string kNativeChar = kLittleHost ? "<" : ">";
const std::string kForeignChar = kLittleHost ? ">" : "<";

void expect_typestr_error(const std::string& s, std::initializer_list<std::string> phrases,
                          Errc code = Errc::value_error) {
  SCOPED_TRACE(s);
  std::vector<::testing::Matcher<std::string>> parts;
  for (const std::string& p : phrases) parts.push_back(HasSubstr(p));
  EXPECT_THAT([&] { DType::from_typestr(s); }, ThrowsCaiError(code, ::testing::AllOfArray(parts)));
}

DescrEntry leaf(std::string name, std::string typestr, std::vector<std::int64_t> shape = {}) {
  return DescrEntry{std::move(name), std::move(typestr), {}, std::move(shape)};
}

DescrEntry node(std::string name, std::vector<DescrEntry> fields,
                std::vector<std::int64_t> shape = {}) {
  return DescrEntry{std::move(name), "", std::move(fields), std::move(shape)};
}

// ---- DLPack ABI ------------------------------------------------------------------------------

TEST(dtype_test, dlpack_abi_layout) {
  static_assert(DLPACK_MAJOR_VERSION == 1 && DLPACK_MINOR_VERSION == 3);
  static_assert(sizeof(DLPackVersion) == 8);
  static_assert(sizeof(DLDevice) == 8);
  static_assert(sizeof(DLDataType) == 4);
  static_assert(kDLCPU == 1 && kDLCUDA == 2 && kDLCUDAHost == 3 && kDLCUDAManaged == 13);
  static_assert(kDLOneAPI == 14 && kDLTrn == 18);
  static_assert(kDLInt == 0 && kDLBool == 6 && kDLFloat8_e3m4 == 7 && kDLFloat8_e8m0fnu == 14);
  static_assert(kDLFloat6_e2m3fn == 15 && kDLFloat6_e3m2fn == 16 && kDLFloat4_e2m1fn == 17);
  static_assert(DLPACK_FLAG_BITMASK_READ_ONLY == 1 && DLPACK_FLAG_BITMASK_IS_COPIED == 2 &&
                DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED == 4);
  if constexpr (sizeof(void*) == 8) {
    EXPECT_EQ(sizeof(DLTensor), 48u);
    EXPECT_EQ(offsetof(DLTensor, device), 8u);
    EXPECT_EQ(offsetof(DLTensor, ndim), 16u);
    EXPECT_EQ(offsetof(DLTensor, dtype), 20u);
    EXPECT_EQ(offsetof(DLTensor, shape), 24u);
    EXPECT_EQ(offsetof(DLTensor, strides), 32u);
    EXPECT_EQ(offsetof(DLTensor, byte_offset), 40u);
    EXPECT_EQ(offsetof(DLManagedTensor, manager_ctx), 48u);
    EXPECT_EQ(offsetof(DLManagedTensorVersioned, manager_ctx), 8u);
    EXPECT_EQ(offsetof(DLManagedTensorVersioned, deleter), 16u);
    EXPECT_EQ(offsetof(DLManagedTensorVersioned, flags), 24u);
    EXPECT_EQ(offsetof(DLManagedTensorVersioned, dl_tensor), 32u);
    EXPECT_EQ(sizeof(DLPackExchangeAPIHeader), 16u);
    EXPECT_EQ(offsetof(DLPackExchangeAPI, managed_tensor_allocator), 16u);
    EXPECT_EQ(offsetof(DLPackExchangeAPI, managed_tensor_to_py_object_no_sync), 32u);
    EXPECT_EQ(offsetof(DLPackExchangeAPI, current_work_stream), 48u);
  }
}

// ---- typestr: accepted forms (expected strings from NumPy 2.4 dtype.str) --------------------

TEST(dtype_test, typestr_simple_numbers) {
  DType f4 = DType::from_typestr("<f4");
  EXPECT_EQ(f4.kind(), Kind::floating);
  EXPECT_EQ(f4.byte_order(), ByteOrder::little);
  EXPECT_EQ(f4.itemsize(), 4);
  EXPECT_EQ(f4.extended(), Extended::none);
  EXPECT_FALSE(f4.is_structured());
  EXPECT_TRUE(f4.fields().empty());
  EXPECT_EQ(f4.datetime_unit(), "");
  EXPECT_EQ(f4.str(), "<f4");

  struct Case {
    const char* in;
    std::string out;
    Kind kind;
    std::int64_t itemsize;
  };
  const Case cases[] = {
      {"<i1", "|i1", Kind::signed_int, 1},
      {">u1", "|u1", Kind::unsigned_int, 1},
      {"<i2", "<i2", Kind::signed_int, 2},
      {">i4", ">i4", Kind::signed_int, 4},
      {"=i8", kNativeChar + "i8", Kind::signed_int, 8},
      {"|u4", kNativeChar + "u4", Kind::unsigned_int, 4},
      {"u8", kNativeChar + "u8", Kind::unsigned_int, 8},
      {"<f2", "<f2", Kind::floating, 2},
      {">f8", ">f8", Kind::floating, 8},
      {"<f16", "<f16", Kind::floating, 16},
      {"<c8", "<c8", Kind::complex, 8},
      {"<c16", "<c16", Kind::complex, 16},
      {">c32", ">c32", Kind::complex, 32},
      {"<b1", "|b1", Kind::boolean, 1},
      {">b1", "|b1", Kind::boolean, 1},
      {"|b1", "|b1", Kind::boolean, 1},
      {"<i04", "<i4", Kind::signed_int, 4},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.in);
    DType t = DType::from_typestr(c.in);
    EXPECT_EQ(t.str(), c.out);
    EXPECT_EQ(t.kind(), c.kind);
    EXPECT_EQ(t.itemsize(), c.itemsize);
  }
}

TEST(dtype_test, typestr_byte_order_normalization) {
  EXPECT_EQ(DType::from_typestr("=f4").byte_order(), kNative);
  EXPECT_EQ(DType::from_typestr("f4").byte_order(), kNative);
  EXPECT_EQ(DType::from_typestr("|f4").byte_order(), kNative);  // NumPy: '|f4' -> '<f4'
  EXPECT_EQ(DType::from_typestr("<i1").byte_order(), ByteOrder::not_applicable);
  EXPECT_EQ(DType::from_typestr(">S3").byte_order(), ByteOrder::not_applicable);
  EXPECT_EQ(DType::from_typestr("=f4"), DType::from_typestr(kNativeChar + "f4"));
  EXPECT_EQ(DType::from_typestr("<i1"), DType::from_typestr(">i1"));
  EXPECT_NE(DType::from_typestr("<f4"), DType::from_typestr(">f4"));
}

TEST(dtype_test, typestr_big_endian_parses_but_is_not_native) {
  DType t = DType::from_typestr(kForeignChar + "f8");
  EXPECT_EQ(t.byte_order(), kForeign);
  EXPECT_FALSE(t.is_native());
  EXPECT_EQ(t.str(), kForeignChar + "f8");
  EXPECT_TRUE(DType::from_typestr(kNativeChar + "f8").is_native());
  EXPECT_TRUE(DType::from_typestr(">u1").is_native());  // '|' counts as native
  EXPECT_TRUE(DType::from_typestr("|S4").is_native());
}

TEST(dtype_test, typestr_strings_objects_raw) {
  DType u3 = DType::from_typestr("<U3");
  EXPECT_EQ(u3.kind(), Kind::unicode);
  EXPECT_EQ(u3.itemsize(), 12);  // U counts 4-byte characters
  EXPECT_EQ(u3.str(), "<U3");
  EXPECT_EQ(DType::from_typestr("|U3").str(), kNativeChar + "U3");
  EXPECT_EQ(DType::from_typestr(">U3").str(), ">U3");
  EXPECT_EQ(DType::from_typestr("<U0").itemsize(), 0);
  EXPECT_EQ(DType::from_typestr("<U536870911").itemsize(), 2147483644);

  EXPECT_EQ(DType::from_typestr("|S5").str(), "|S5");
  EXPECT_EQ(DType::from_typestr("<S5").str(), "|S5");
  EXPECT_EQ(DType::from_typestr("|S0").itemsize(), 0);
  EXPECT_EQ(DType::from_typestr("|S2147483647").itemsize(), 2147483647);

  DType v8 = DType::from_typestr("|V8");
  EXPECT_EQ(v8.kind(), Kind::raw);
  EXPECT_EQ(v8.itemsize(), 8);
  EXPECT_EQ(v8.str(), "|V8");
  EXPECT_EQ(DType::from_typestr("<V3").str(), "|V3");
  EXPECT_EQ(DType::from_typestr("|V0").itemsize(), 0);

  for (const char* s : {"|O", "O", "<O", "|O8", "O8"}) {
    SCOPED_TRACE(s);
    DType o = DType::from_typestr(s);
    EXPECT_EQ(o.kind(), Kind::object);
    EXPECT_EQ(o.itemsize(), static_cast<std::int64_t>(sizeof(void*)));
    EXPECT_EQ(o.byte_order(), ByteOrder::not_applicable);
    EXPECT_EQ(o.str(), "|O");
  }
}

TEST(dtype_test, typestr_datetime_units) {
  DType ns = DType::from_typestr("<M8[ns]");
  EXPECT_EQ(ns.kind(), Kind::datetime);
  EXPECT_EQ(ns.itemsize(), 8);
  EXPECT_EQ(ns.datetime_unit(), "ns");
  EXPECT_EQ(ns.str(), "<M8[ns]");

  struct Case {
    const char* in;
    std::string out;
    const char* unit;
  };
  const Case cases[] = {
      {"<M8", "<M8", ""},
      {"<m8", "<m8", ""},
      {"<M8[generic]", "<M8", ""},
      {"<M8[2generic]", "<M8", ""},
      {"<m8[ns]", "<m8[ns]", "ns"},
      {"M8[10us]", kNativeChar + "M8[10us]", "10us"},
      {"<M8[1ns]", "<M8[ns]", "ns"},
      {"<M8[010us]", "<M8[10us]", "10us"},
      {"<M8[D]", "<M8[D]", "D"},
      {"<M8[2D]", "<M8[2D]", "2D"},
      {"<m8[Y]", "<m8[Y]", "Y"},
      {"<M8[M]", "<M8[M]", "M"},
      {"<M8[W]", "<M8[W]", "W"},
      {"<M8[h]", "<M8[h]", "h"},
      {"<M8[m]", "<M8[m]", "m"},
      {"<M8[s]", "<M8[s]", "s"},
      {"<M8[ms]", "<M8[ms]", "ms"},
      {"<M8[ps]", "<M8[ps]", "ps"},
      {"<M8[fs]", "<M8[fs]", "fs"},
      {"<M8[as]", "<M8[as]", "as"},
      {"<M8[\xce\xbcs]", "<M8[us]", "us"},
      {">M8[us]", ">M8[us]", "us"},
      {"<M8[2147483647us]", "<M8[2147483647us]", "2147483647us"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.in);
    DType t = DType::from_typestr(c.in);
    EXPECT_EQ(t.str(), c.out);
    EXPECT_EQ(t.datetime_unit(), c.unit);
  }
  EXPECT_NE(DType::from_typestr("<M8[ns]"), DType::from_typestr("<M8[us]"));
  EXPECT_NE(DType::from_typestr("<M8[ns]"), DType::from_typestr("<m8[ns]"));
  EXPECT_EQ(DType::from_typestr("<M8[1ns]"), DType::from_typestr("<M8[ns]"));
}

// ---- typestr: rejections --------------------------------------------------------------------

TEST(dtype_test, typestr_rejects_bad_sizes) {
  expect_typestr_error("<f3", {"typestr: '<f3' has an item size 3 that kind 'f' (floating point) "
                               "does not allow; expected 2, 4, 8 or 16"});
  expect_typestr_error("<f12", {"item size 12", "expected 2, 4, 8 or 16"});
  expect_typestr_error("<i3", {"'<i3'", "signed integer", "expected 1, 2, 4 or 8"});
  expect_typestr_error("<i16", {"item size 16", "expected 1, 2, 4 or 8"});
  expect_typestr_error("<i0", {"item size 0"});
  expect_typestr_error("<u16", {"unsigned integer"});
  expect_typestr_error("<c4", {"complex", "expected 8, 16 or 32"});
  expect_typestr_error("|b2", {"boolean", "expected 1"});
  expect_typestr_error("<m4", {"timedelta", "expected 8"});
  expect_typestr_error("<M16", {"datetime", "expected 8"});
  expect_typestr_error("|O4", {"object", "expected 8 or none"});
  expect_typestr_error("<U536870912", {"at most 536870911 characters"});
  expect_typestr_error("|S2147483648", {"at most 2147483647 bytes"});
  expect_typestr_error("|V99999999999999999999999", {">2^40", "at most 2147483647 bytes"});
}

TEST(dtype_test, typestr_rejects_bad_grammar) {
  expect_typestr_error("", {"typestr: '' is empty"});
  expect_typestr_error("<", {"has no kind character"});
  expect_typestr_error("<x4", {"unknown kind 'x'", "expected one of t b i u f c m M O S U V"});
  expect_typestr_error("<d", {"unknown kind 'd'"});  // NumPy char codes are not typestrs
  expect_typestr_error("?", {"unknown kind '?'"});
  expect_typestr_error("<f", {"'<f' has no item size", "e.g. '<f4'"});
  expect_typestr_error("b", {"no item size"});  // NumPy reads 'b' as int8; we refuse
  expect_typestr_error("<S", {"no item size"});
  expect_typestr_error("<i4 ", {"unexpected characters ' '"});
  expect_typestr_error(" <i4", {"unknown kind ' '"});
  expect_typestr_error("<i+4", {"no item size"});
  expect_typestr_error("<i4[ns]", {"unexpected characters '[ns]'"});
  expect_typestr_error("<<i4", {"unknown kind '<'"});
  expect_typestr_error("<i4\x01", {"'<i4\\x01'"});  // control bytes are escaped
  expect_typestr_error("<t8", {"bit field"}, Errc::not_implemented);
  expect_typestr_error(std::string(200, 'i'), {"..."});
}

TEST(dtype_test, typestr_rejects_bad_datetime_units) {
  expect_typestr_error("<M8[ns", {"unterminated datetime unit"});
  expect_typestr_error("<M8[]", {"unknown datetime unit ''"});
  expect_typestr_error("<M8[B]", {"unknown datetime unit 'B'", "expected one of Y, M, W"});
  expect_typestr_error("<M8[3]", {"unknown datetime unit ''"});
  expect_typestr_error("<M8[ ns]", {"unknown datetime unit ' ns'"});
  expect_typestr_error("<M8[GENERIC]", {"unknown datetime unit"});
  expect_typestr_error("<M8[\xc2\xb5s]", {"unknown datetime unit"});  // micro sign, not mu
  expect_typestr_error("<M8[ns/2]", {"divisors are not supported"});
  expect_typestr_error("<M8[-1ns]", {"unknown datetime unit '-1ns'"});
  expect_typestr_error("<M8[0ns]", {"multiplier outside 1..2147483647"});
  expect_typestr_error("<M8[2147483648ns]", {"multiplier outside"});
  expect_typestr_error("<M8[ns]x", {"unexpected characters 'x'"});
  expect_typestr_error("<M8[ns][ns]", {"unexpected characters '[ns]'"});
}

// ---- '<V2' and bfloat16 ---------------------------------------------------------------------

TEST(dtype_test, v2_is_raw_unless_asked) {
  DType raw = DType::from_typestr("<V2");
  EXPECT_EQ(raw.kind(), Kind::raw);
  EXPECT_EQ(raw.extended(), Extended::none);
  EXPECT_EQ(raw.str(), "|V2");

  const TypestrOptions bf{.v2_as_bfloat16 = true};
  DType b = DType::from_typestr(kNativeChar + "V2", bf);
  EXPECT_EQ(b.kind(), Kind::raw);
  EXPECT_EQ(b.extended(), Extended::bfloat16);
  EXPECT_EQ(b.itemsize(), 2);
  EXPECT_TRUE(b.is_native());
  EXPECT_EQ(b.str(), kNativeChar + "V2");  // what PyTorch and ml_dtypes export
  EXPECT_EQ(DType::from_typestr("=V2", bf), b);
  EXPECT_NE(b, raw);
  // Only a native-order V2 is bfloat16: '|V2' is NumPy's own plain void.
  EXPECT_EQ(DType::from_typestr("|V2", bf).extended(), Extended::none);
  EXPECT_EQ(DType::from_typestr(kForeignChar + "V2", bf).extended(), Extended::none);
  EXPECT_EQ(DType::from_typestr("<V4", bf).extended(), Extended::none);
  // Round trip through str() with the option.
  EXPECT_EQ(DType::from_typestr(b.str(), bf), b);
}

// ---- DLPack mapping -------------------------------------------------------------------------

TEST(dtype_test, dlpack_round_trip_standard_types) {
  struct Case {
    std::string typestr;
    std::uint8_t code;
    std::uint8_t bits;
  };
  const Case cases[] = {
      {"|i1", kDLInt, 8},
      {kNativeChar + "i2", kDLInt, 16},
      {kNativeChar + "i4", kDLInt, 32},
      {kNativeChar + "i8", kDLInt, 64},
      {"|u1", kDLUInt, 8},
      {kNativeChar + "u2", kDLUInt, 16},
      {kNativeChar + "u4", kDLUInt, 32},
      {kNativeChar + "u8", kDLUInt, 64},
      {kNativeChar + "f2", kDLFloat, 16},
      {kNativeChar + "f4", kDLFloat, 32},
      {kNativeChar + "f8", kDLFloat, 64},
      {kNativeChar + "c8", kDLComplex, 64},
      {kNativeChar + "c16", kDLComplex, 128},
      {"|b1", kDLBool, 8},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.typestr);
    DType t = DType::from_typestr(c.typestr);
    DLDataType d = t.to_dlpack();
    EXPECT_EQ(d.code, c.code);
    EXPECT_EQ(d.bits, c.bits);
    EXPECT_EQ(d.lanes, 1);
    DType back = DType::from_dlpack(d);
    EXPECT_EQ(back, t);
    EXPECT_EQ(back.str(), c.typestr);
  }
}

TEST(dtype_test, dlpack_extended_types) {
  struct Case {
    std::uint8_t code;
    std::uint8_t bits;
    Extended ext;
    std::int64_t itemsize;
    std::string str;
  };
  const Case cases[] = {
      {kDLBfloat, 16, Extended::bfloat16, 2, kNativeChar + "V2"},
      {kDLFloat8_e3m4, 8, Extended::float8_e3m4, 1, "|V1"},
      {kDLFloat8_e4m3, 8, Extended::float8_e4m3, 1, "|V1"},
      {kDLFloat8_e4m3b11fnuz, 8, Extended::float8_e4m3b11fnuz, 1, "|V1"},
      {kDLFloat8_e4m3fn, 8, Extended::float8_e4m3fn, 1, "|V1"},
      {kDLFloat8_e4m3fnuz, 8, Extended::float8_e4m3fnuz, 1, "|V1"},
      {kDLFloat8_e5m2, 8, Extended::float8_e5m2, 1, "|V1"},
      {kDLFloat8_e5m2fnuz, 8, Extended::float8_e5m2fnuz, 1, "|V1"},
      {kDLFloat8_e8m0fnu, 8, Extended::float8_e8m0fnu, 1, "|V1"},
      {kDLFloat6_e2m3fn, 6, Extended::float6_e2m3fn, 1, "|V1"},
      {kDLFloat6_e3m2fn, 6, Extended::float6_e3m2fn, 1, "|V1"},
      {kDLFloat4_e2m1fn, 4, Extended::float4_e2m1fn, 1, "|V1"},
      {kDLInt, 4, Extended::int4, 1, "|V1"},
      {kDLUInt, 4, Extended::uint4, 1, "|V1"},
      {kDLInt, 2, Extended::int2, 1, "|V1"},
      {kDLUInt, 2, Extended::uint2, 1, "|V1"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(static_cast<int>(c.code));
    DType t = DType::from_dlpack(DLDataType{c.code, c.bits, 1});
    EXPECT_EQ(t.kind(), Kind::raw);
    EXPECT_EQ(t.extended(), c.ext);
    EXPECT_EQ(t.itemsize(), c.itemsize);
    EXPECT_EQ(t.str(), c.str);
    EXPECT_TRUE(t.is_native());
    DLDataType d = t.to_dlpack();
    EXPECT_EQ(d.code, c.code);
    EXPECT_EQ(d.bits, c.bits);
    EXPECT_EQ(d.lanes, 1);
  }
  // Extended formats are distinct from each other and from plain void.
  EXPECT_NE(DType::from_dlpack({kDLFloat8_e4m3fn, 8, 1}),
            DType::from_dlpack({kDLFloat8_e5m2, 8, 1}));
  EXPECT_NE(DType::from_dlpack({kDLFloat8_e4m3fn, 8, 1}), DType::from_typestr("|V1"));
  // bfloat16 from DLPack equals bfloat16 from '<V2' with the option.
  EXPECT_EQ(DType::from_dlpack({kDLBfloat, 16, 1}),
            DType::from_typestr(kNativeChar + "V2", {.v2_as_bfloat16 = true}));
}

TEST(dtype_test, from_dlpack_rejections) {
  auto from = [](std::uint8_t code, std::uint8_t bits, std::uint16_t lanes) {
    return [=] { DType::from_dlpack(DLDataType{code, bits, lanes}); };
  };
  EXPECT_THAT(from(18, 8, 1),
              ThrowsCaiError(Errc::value_error,
                             AllOf(HasSubstr("from_dlpack: (code 18 unknown, bits 8, lanes 1)"),
                                   HasSubstr("unknown type code"))));
  EXPECT_THAT(from(255, 8, 1), ThrowsCaiError(Errc::value_error, HasSubstr("unknown type code")));
  EXPECT_THAT(
      from(kDLFloat, 32, 4),
      ThrowsCaiError(Errc::not_implemented,
                     AllOf(HasSubstr("kDLFloat"), HasSubstr("lanes 4"), HasSubstr("vector type"))));
  EXPECT_THAT(from(kDLInt, 12, 1),
              ThrowsCaiError(Errc::not_implemented,
                             AllOf(HasSubstr("bits 12"), HasSubstr("expected bits 2, 4, 8, 16"))));
  EXPECT_THAT(from(kDLInt, 128, 1),
              ThrowsCaiError(Errc::not_implemented, HasSubstr("no NumPy equivalent")));
  EXPECT_THAT(from(kDLUInt, 0, 1), ThrowsCaiError(Errc::not_implemented, HasSubstr("kDLUInt")));
  EXPECT_THAT(from(kDLFloat, 128, 1),
              ThrowsCaiError(Errc::not_implemented, HasSubstr("expected bits 16, 32 or 64")));
  EXPECT_THAT(from(kDLFloat, 8, 1), ThrowsCaiError(Errc::not_implemented, HasSubstr("kDLFloat")));
  EXPECT_THAT(from(kDLComplex, 32, 1),
              ThrowsCaiError(Errc::not_implemented, HasSubstr("expected bits 64 or 128")));
  EXPECT_THAT(from(kDLBool, 1, 1),
              ThrowsCaiError(Errc::not_implemented,
                             AllOf(HasSubstr("kDLBool"), HasSubstr("expected bits 8"))));
  EXPECT_THAT(from(kDLOpaqueHandle, 64, 1),
              ThrowsCaiError(Errc::not_implemented, HasSubstr("opaque handle")));
  EXPECT_THAT(from(kDLBfloat, 32, 1),
              ThrowsCaiError(Errc::not_implemented,
                             AllOf(HasSubstr("bfloat16"), HasSubstr("expected bits 16"))));
  EXPECT_THAT(from(kDLFloat8_e4m3fn, 16, 1),
              ThrowsCaiError(Errc::not_implemented, HasSubstr("expected bits 8")));
  EXPECT_THAT(from(kDLFloat4_e2m1fn, 8, 1),
              ThrowsCaiError(Errc::not_implemented,
                             AllOf(HasSubstr("float4_e2m1fn"), HasSubstr("expected bits 4"))));
  EXPECT_THAT(from(kDLFloat6_e3m2fn, 8, 1),
              ThrowsCaiError(Errc::not_implemented, HasSubstr("expected bits 6")));
}

TEST(dtype_test, to_dlpack_rejections) {
  auto to = [](const std::string& s) { return [=] { DType::from_typestr(s).to_dlpack(); }; };
  EXPECT_THAT(to(kForeignChar + "f4"),
              ThrowsCaiError(Errc::not_implemented,
                             AllOf(HasSubstr("to_dlpack: '" + kForeignChar + "f4'"),
                                   HasSubstr("byte order"), HasSubstr("byte-swap"))));
  EXPECT_THAT(to("<f16"), ThrowsCaiError(Errc::not_implemented,
                                         AllOf(HasSubstr("'<f16'"), HasSubstr("long double"))));
  EXPECT_THAT(to("<c32"), ThrowsCaiError(Errc::not_implemented, HasSubstr("complex long double")));
  EXPECT_THAT(to("<M8[ns]"), ThrowsCaiError(Errc::not_implemented,
                                            AllOf(HasSubstr("'<M8[ns]'"), HasSubstr("datetime"))));
  EXPECT_THAT(to("<m8"), ThrowsCaiError(Errc::not_implemented, HasSubstr("timedelta")));
  EXPECT_THAT(to("|O"), ThrowsCaiError(Errc::not_implemented, HasSubstr("Python objects")));
  EXPECT_THAT(to("|S5"), ThrowsCaiError(Errc::not_implemented,
                                        AllOf(HasSubstr("'|S5'"), HasSubstr("string type"))));
  EXPECT_THAT(to("<U3"), ThrowsCaiError(Errc::not_implemented, HasSubstr("string type")));
  EXPECT_THAT(to("|V8"), ThrowsCaiError(Errc::not_implemented, HasSubstr("raw bytes")));
  EXPECT_THAT(to("<V2"), ThrowsCaiError(Errc::not_implemented,
                                        AllOf(HasSubstr("'|V2'"), HasSubstr("raw bytes"))));
  std::vector<DescrEntry> d = {leaf("a", "<f4")};
  EXPECT_THAT(
      [&] { DType::from_descr(d).to_dlpack(); },
      ThrowsCaiError(Errc::not_implemented, AllOf(HasSubstr("'|V4'"), HasSubstr("structured"))));
}

// ---- structured types (expected values from NumPy 2.4, numpy.lib.format.descr_to_dtype) ---

TEST(dtype_test, descr_simple_packed) {
  std::vector<DescrEntry> d = {leaf("a", "<f4"), leaf("b", "<i8")};
  DType t = DType::from_descr(d);
  EXPECT_TRUE(t.is_structured());
  EXPECT_EQ(t.kind(), Kind::raw);
  EXPECT_EQ(t.byte_order(), ByteOrder::not_applicable);
  EXPECT_EQ(t.itemsize(), 12);
  EXPECT_EQ(t.str(), "|V12");
  ASSERT_EQ(t.fields().size(), 2u);
  EXPECT_EQ(t.fields()[0].name, "a");
  EXPECT_EQ(t.fields()[0].offset, 0);
  EXPECT_EQ(t.fields()[0].type, DType::from_typestr("<f4"));
  EXPECT_EQ(t.fields()[1].name, "b");
  EXPECT_EQ(t.fields()[1].offset, 4);
  EXPECT_EQ(t.descr(), d);
}

TEST(dtype_test, descr_nested_with_padding_and_subarrays) {
  // [('id','<i4'),('','|V4'),('pos','<f8',(3,)),('tag','|S5'),
  //  ('inner',[('','|V2'),('x','<i2'),('y','>f4',(2,2)),('deep',[('z','|u1'),('w','<c8')])]),
  //  ('flag','|b1'),('','|V3')]
  std::vector<DescrEntry> d = {
      leaf("id", "<i4"),
      leaf("", "|V4"),
      leaf("pos", "<f8", {3}),
      leaf("tag", "|S5"),
      node("inner", {leaf("", "|V2"), leaf("x", "<i2"), leaf("y", ">f4", {2, 2}),
                     node("deep", {leaf("z", "|u1"), leaf("w", "<c8")})}),
      leaf("flag", "|b1"),
      leaf("", "|V3"),
  };
  DType t = DType::from_descr(d);
  EXPECT_EQ(t.itemsize(), 70);
  EXPECT_EQ(t.str(), "|V70");
  auto f = t.fields();
  ASSERT_EQ(f.size(), 5u);  // padding entries are not fields
  EXPECT_EQ(f[0].name, "id");
  EXPECT_EQ(f[0].offset, 0);
  EXPECT_EQ(f[1].name, "pos");
  EXPECT_EQ(f[1].offset, 8);
  EXPECT_EQ(f[1].type.str(), "<f8");
  EXPECT_EQ(f[1].shape, (std::vector<std::int64_t>{3}));
  EXPECT_EQ(f[2].name, "tag");
  EXPECT_EQ(f[2].offset, 32);
  EXPECT_EQ(f[3].name, "inner");
  EXPECT_EQ(f[3].offset, 37);
  EXPECT_EQ(f[3].type.itemsize(), 29);
  EXPECT_EQ(f[4].name, "flag");
  EXPECT_EQ(f[4].offset, 66);

  auto inner = f[3].type.fields();
  ASSERT_EQ(inner.size(), 3u);
  EXPECT_EQ(inner[0].name, "x");
  EXPECT_EQ(inner[0].offset, 2);
  EXPECT_EQ(inner[1].name, "y");
  EXPECT_EQ(inner[1].offset, 4);
  EXPECT_FALSE(inner[1].type.is_native());
  EXPECT_EQ(inner[1].shape, (std::vector<std::int64_t>{2, 2}));
  EXPECT_EQ(inner[2].name, "deep");
  EXPECT_EQ(inner[2].offset, 20);
  EXPECT_EQ(inner[2].type.itemsize(), 9);
  auto deep = inner[2].type.fields();
  ASSERT_EQ(deep.size(), 2u);
  EXPECT_EQ(deep[0].offset, 0);
  EXPECT_EQ(deep[1].offset, 1);

  // dtype.descr gives the same list back, padding included.
  EXPECT_EQ(t.descr(), d);
  EXPECT_EQ(DType::from_descr(t.descr()), t);
}

TEST(dtype_test, descr_padding_merges_and_names) {
  // NumPy: descr of [('', '|V2'), ('', '|V3'), ('a', '<i4')] is [('', '|V5'), ('a', '<i4')].
  std::vector<DescrEntry> d = {leaf("", "|V2"), leaf("", "|V3"), leaf("a", "<i4")};
  DType t = DType::from_descr(d);
  EXPECT_EQ(t.itemsize(), 9);
  ASSERT_EQ(t.fields().size(), 1u);
  EXPECT_EQ(t.fields()[0].offset, 5);
  EXPECT_EQ(t.descr(), (std::vector<DescrEntry>{leaf("", "|V5"), leaf("a", "<i4")}));

  // An unnamed field that is not void is a real field named f<index>, as np.dtype does.
  std::vector<DescrEntry> u = {leaf("", "<f4"), leaf("a", "<i4")};
  DType tu = DType::from_descr(u);
  ASSERT_EQ(tu.fields().size(), 2u);
  EXPECT_EQ(tu.fields()[0].name, "f0");
  // A padding sub-array counts its full size.
  std::vector<DescrEntry> p = {leaf("", "|V2", {3}), leaf("a", "|u1")};
  EXPECT_EQ(DType::from_descr(p).fields()[0].offset, 6);
}

TEST(dtype_test, descr_edge_cases) {
  // Zero-size sub-array: the next field starts at the same offset (NumPy agrees).
  std::vector<DescrEntry> z = {leaf("a", "<f4", {0}), leaf("b", "<i4")};
  DType tz = DType::from_descr(z);
  EXPECT_EQ(tz.itemsize(), 4);
  EXPECT_EQ(tz.fields()[1].offset, 0);
  EXPECT_EQ(tz.descr(), z);

  // Empty list: a structured type with no fields.
  DType empty = DType::from_descr({});
  EXPECT_TRUE(empty.is_structured());
  EXPECT_EQ(empty.itemsize(), 0);
  EXPECT_TRUE(empty.descr().empty());

  // Strings and datetimes in fields.
  std::vector<DescrEntry> s = {leaf("a", "<U3"), leaf("b", "|S5"), leaf("c", "<M8[ns]")};
  DType ts = DType::from_descr(s);
  EXPECT_EQ(ts.itemsize(), 25);
  EXPECT_EQ(ts.fields()[1].offset, 12);
  EXPECT_EQ(ts.fields()[2].offset, 17);
  EXPECT_EQ(ts.fields()[2].type.datetime_unit(), "ns");

  // Structured equality compares names, types, offsets and shapes.
  std::vector<DescrEntry> other = {leaf("x", "<f4"), leaf("b", "<i4")};
  EXPECT_NE(DType::from_descr(other),
            DType::from_descr(std::vector{leaf("a", "<f4"), leaf("b", "<i4")}));
  EXPECT_EQ(DType::from_descr(other), DType::from_descr(other));
  EXPECT_NE(DType::from_descr(std::vector{leaf("a", "<f4")}), DType::from_typestr("|V4"));

  // A non-structured type's descr is [('', str())].
  EXPECT_EQ(DType::from_typestr("=i4").descr(),
            (std::vector<DescrEntry>{leaf("", kNativeChar + "i4")}));
}

TEST(dtype_test, descr_rejections) {
  auto from = [](std::vector<DescrEntry> d) { return [d] { DType::from_descr(d); }; };
  EXPECT_THAT(
      from({leaf("a", "<f4"), leaf("a", "<i4")}),
      ThrowsCaiError(Errc::value_error, HasSubstr("descr: field 'a' occurs more than once")));
  EXPECT_THAT(
      from({node("s", {leaf("x", "<f4"), leaf("x", "<i4")})}),
      ThrowsCaiError(Errc::value_error, HasSubstr("descr: field 's.x' occurs more than once")));
  EXPECT_THAT(from({leaf("a", "<f4"), leaf("", "<i4"), leaf("f1", "<i4")}),
              ThrowsCaiError(Errc::value_error, HasSubstr("'f1' occurs more than once")));
  EXPECT_THAT(
      from({leaf("a", "<f4", {2, -1})}),
      ThrowsCaiError(
          Errc::value_error,
          HasSubstr("descr: field 'a' has a sub-array dimension -1; expected 0..2147483647")));
  EXPECT_THAT(from({leaf("a", "<f4", {std::int64_t{1} << 31})}),
              ThrowsCaiError(Errc::value_error, HasSubstr("dimension 2147483648")));
  EXPECT_THAT(
      from({leaf("a", "<f8", {2147483647, 2147483647, 2147483647})}),
      ThrowsCaiError(Errc::value_error,
                     HasSubstr("descr: field 'a' is too large: its element count overflows")));
  // NumPy keeps each field and the whole type within a C int (it wraps silently; we refuse).
  EXPECT_THAT(
      from({leaf("a", "<f4", {std::int64_t{1} << 29})}),
      ThrowsCaiError(
          Errc::value_error,
          HasSubstr(
              "descr: field 'a' is too large: 2147483648 bytes; expected at most 2147483647")));
  EXPECT_THAT(
      from({leaf("a", "|V2147483647"), leaf("b", "|u1")}),
      ThrowsCaiError(Errc::value_error, AllOf(HasSubstr("descr: field 'b' ends at byte 2147483648"),
                                              HasSubstr("at most 2147483647 bytes"))));
  EXPECT_THAT(
      from({leaf("", "|V2147483647"), leaf("", "|V1")}),
      ThrowsCaiError(Errc::value_error, HasSubstr("descr: field 'f1' ends at byte 2147483648")));
  EXPECT_EQ(DType::from_descr(std::vector{leaf("a", "|V2147483647")}).itemsize(), 2147483647);
  EXPECT_THAT(from({node("s", {leaf("y", "<f3")})}),
              ThrowsCaiError(Errc::value_error,
                             HasSubstr("descr: field 's.y': typestr: '<f3' has an item size 3")));
  EXPECT_THAT(from({leaf("b", "<t8")}),
              ThrowsCaiError(Errc::not_implemented,
                             AllOf(HasSubstr("descr: field 'b'"), HasSubstr("bit field"))));
  EXPECT_THAT(
      from({leaf("c", "")}),
      ThrowsCaiError(Errc::value_error, HasSubstr("descr: field 'c': typestr: '' is empty")));
}

TEST(dtype_test, descr_depth_limit) {
  auto nest = [](int levels) {
    DescrEntry e = leaf("v", "<f4");
    for (int i = 0; i < levels; ++i) e = node("n", {e});
    return std::vector<DescrEntry>{e};
  };
  // 32 levels of lists (31 nested below the top) are fine; 33 are not.
  DType ok = DType::from_descr(nest(31));
  EXPECT_EQ(ok.itemsize(), 4);
  EXPECT_THAT([&] { DType::from_descr(nest(32)); },
              ThrowsCaiError(Errc::value_error,
                             AllOf(HasSubstr("descr: structured types nest deeper than 32 levels"),
                                   HasSubstr("'n.n.n"))));
}

// ---- value semantics ------------------------------------------------------------------------

TEST(dtype_test, value_semantics) {
  static_assert(std::is_nothrow_move_constructible_v<DType>);
  DType def;
  EXPECT_EQ(def.kind(), Kind::raw);
  EXPECT_EQ(def.itemsize(), 0);
  EXPECT_EQ(def.str(), "|V0");
  EXPECT_EQ(def, DType::from_typestr("|V0"));

  std::vector<DescrEntry> d = {leaf("a", "<f4")};
  DType s = DType::from_descr(d);
  DType copy = s;
  EXPECT_EQ(copy, s);
  EXPECT_EQ(copy.fields().data(), s.fields().data());  // shared, not deep-copied
}

}  // namespace
}  // namespace cai
