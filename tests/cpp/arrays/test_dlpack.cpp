// read_dlpack: a tensor checked into the parts of a View, without taking it (the consumer's
// one check, for cai.from_dlpack's compact arrays and for from_dlpack's Views alike).

#include "cai/arrays/dlpack.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cai_matchers.h"

namespace cai {
namespace {

using test::ThrowsCaiError;
using ::testing::HasSubstr;

struct Tensor {
  std::int64_t shape[2] = {3, 4};
  std::int64_t strides[2] = {1, 3};  // elements: F order
  DLManagedTensorVersioned t{};
  Tensor() {
    t.version = {DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
    t.dl_tensor.data = reinterpret_cast<void*>(0x10000);
    t.dl_tensor.byte_offset = 16;
    t.dl_tensor.device = {kDLCUDA, 0};
    t.dl_tensor.ndim = 2;
    t.dl_tensor.dtype = {kDLFloat, 32, 1};
    t.dl_tensor.shape = shape;
    t.dl_tensor.strides = strides;
    t.flags = DLPACK_FLAG_BITMASK_READ_ONLY;
  }
};

TEST(read_dlpack_test, gives_the_parts_of_a_view) {
  Tensor x;
  const DlpackArray a = read_dlpack(x.t);
  EXPECT_EQ(a.ptr, 0x10010u);
  EXPECT_EQ(a.dtype, DType::from_typestr("<f4"));
  EXPECT_EQ(Dims(a.layout.shape()), (Dims{3, 4}));
  EXPECT_EQ(Dims(a.layout.strides()), (Dims{4, 12}));  // bytes
  EXPECT_TRUE(a.info.readonly);
  EXPECT_FALSE(a.info.copied);
  EXPECT_EQ(a.info.device.device_type, kDLCUDA);
  x.t.dl_tensor.strides = nullptr;  // before DLPack 1.2: C order
  EXPECT_EQ(Dims(read_dlpack(x.t).layout.strides()), (Dims{16, 4}));
}

TEST(read_dlpack_test, refuses_what_no_view_can_hold) {
  Tensor x;
  x.shape[1] = -1;
  EXPECT_THAT([&] { (void)read_dlpack(x.t); },
              ThrowsCaiError(Errc::buffer_error, HasSubstr("shape[1] is negative")));
  Tensor y;
  y.t.dl_tensor.data = nullptr;
  y.t.dl_tensor.byte_offset = 0;
  EXPECT_THAT([&] { (void)read_dlpack(y.t); },
              ThrowsCaiError(Errc::buffer_error, HasSubstr("data is NULL")));
  Tensor z;
  z.t.version.major = DLPACK_MAJOR_VERSION + 1;
  EXPECT_THAT([&] { (void)read_dlpack(z.t); },
              ThrowsCaiError(Errc::buffer_error, HasSubstr("major version")));
  Tensor w;
  w.t.dl_tensor.ndim = 65;
  EXPECT_THAT([&] { (void)read_dlpack(w.t); },
              ThrowsCaiError(Errc::buffer_error, HasSubstr("out of range [0, 64]")));
}

TEST(read_dlpack_test, sub_byte_elements_must_be_marked_padded) {
  // DLPack reads bits < 8 as packed unless IS_SUBBYTE_TYPE_PADDED is set; cai holds one per byte.
  for (const DLDataType type : {DLDataType{kDLFloat4_e2m1fn, 4, 1}, DLDataType{kDLInt, 4, 1},
                                DLDataType{kDLUInt, 2, 1}, DLDataType{kDLFloat6_e2m3fn, 6, 1}}) {
    SCOPED_TRACE(static_cast<int>(type.code));
    Tensor x;
    x.t.dl_tensor.dtype = type;
    EXPECT_THAT([&] { (void)read_dlpack(x.t); },
                ThrowsCaiError(Errc::buffer_error, HasSubstr("elements are packed")));
    x.t.flags |= DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED;
    const DlpackArray a = read_dlpack(x.t);
    EXPECT_EQ(a.dtype.itemsize(), 1);
    EXPECT_EQ(Dims(a.layout.strides()), (Dims{1, 3}));  // one byte per element
    DLManagedTensor legacy{};                           // no flags: always packed
    legacy.dl_tensor = x.t.dl_tensor;
    EXPECT_THAT([&] { (void)read_dlpack(legacy); },
                ThrowsCaiError(Errc::buffer_error, HasSubstr("elements are packed")));
    EXPECT_EQ(dlpack_storage_flags(type), DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED);
    EXPECT_THAT([&] { require_whole_bytes(type, "here", "a bare DLTensor"); },
                ThrowsCaiError(Errc::buffer_error, HasSubstr("a bare DLTensor cannot say so")));
  }
  EXPECT_EQ(dlpack_storage_flags({kDLFloat8_e4m3fn, 8, 1}), 0u);
  require_whole_bytes({kDLInt, 8, 1}, "here", "a bare DLTensor");
}

}  // namespace
}  // namespace cai
