// plan_export: the one policy of __dlpack__ (C++ and Python), each branch; and to_dlpack, the
// C++ exporter that carries a plan out through the one tensor builder.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "cai/arrays/dlpack.h"
#include "cai/arrays/ops.h"
#include "cai_matchers.h"

namespace cai {
namespace {

using test::ThrowsCaiError;
using ::testing::HasSubstr;
using Kind = ExportPlan::Kind;

constexpr DLDevice kGpu0{kDLCUDA, 0};

ExportPlan plan(ExportRequest r, DLDevice here = kGpu0) {
  return plan_export(r, here);
}

TEST(plan_export_test, borrows_and_waits_on_the_legacy_default_stream_by_default) {
  const ExportPlan p = plan({});
  EXPECT_EQ(p.kind, Kind::borrow);
  ASSERT_TRUE(p.wait.has_value());
  EXPECT_EQ(*p.wait, device::kLegacyDefaultStream);
}

TEST(plan_export_test, the_consumers_stream_is_waited_on_and_minus_one_means_none) {
  EXPECT_EQ(plan({.stream = 2}).wait, device::kPerThreadDefaultStream);
  EXPECT_EQ(plan({.stream = 0x1234}).wait, device::StreamHandle(0x1234));
  EXPECT_FALSE(plan({.stream = -1}).wait.has_value());
  // A tensor outside CUDA memory has no stream to order with.
  EXPECT_FALSE(plan({}, DLDevice{kDLCPU, 0}).wait.has_value());
}

TEST(plan_export_test, refuses_stream_zero_and_negative_handles) {
  EXPECT_THAT([] { (void)plan({.stream = 0}); },
              ThrowsCaiError(Errc::buffer_error, HasSubstr("__dlpack__(): stream=")));
  EXPECT_THAT([] { (void)plan({.stream = -2}); },
              ThrowsCaiError(Errc::buffer_error, HasSubstr("stream=-2 is not a stream handle")));
  // Checked for a host copy too, which waits on no stream.
  EXPECT_THAT(
      [] {
        (void)plan({.stream = 0, .dl_device = DLDevice{kDLCPU, 0}});
      },
      ThrowsCaiError(Errc::buffer_error, HasSubstr("stream=")));
}

TEST(plan_export_test, copy_true_copies_on_the_device_and_the_consumer_waits_for_the_copy) {
  const ExportPlan p = plan({.stream = 5, .copy = true});
  EXPECT_EQ(p.kind, Kind::device_copy);
  EXPECT_EQ(p.wait, device::StreamHandle(5));
  EXPECT_EQ(plan({.copy = false}).kind, Kind::borrow);
  EXPECT_EQ(plan({.dl_device = kGpu0}).kind, Kind::borrow);  // where it is: no copy
  EXPECT_EQ(plan({.dl_device = kGpu0, .copy = true}).kind, Kind::device_copy);
}

TEST(plan_export_test, dl_device_cpu_copies_to_the_host_and_waits_on_nothing) {
  for (const std::optional<bool> copy : {std::optional<bool>{}, std::optional<bool>{true}}) {
    const ExportPlan p = plan({.stream = 5, .dl_device = DLDevice{kDLCPU, 0}, .copy = copy});
    EXPECT_EQ(p.kind, Kind::host_copy);
    EXPECT_FALSE(p.wait.has_value());  // the copy is done when the export returns
  }
  EXPECT_THAT(
      [] {
        (void)plan({.dl_device = DLDevice{kDLCPU, 0}, .copy = false});
      },
      ThrowsCaiError(Errc::buffer_error,
                     HasSubstr("dl_device=(kDLCPU, 0) needs a copy from the device, but "
                               "copy=False")));
}

TEST(plan_export_test, refuses_a_device_other_than_its_own_or_the_cpu) {
  EXPECT_THAT(
      [] {
        (void)plan({.dl_device = DLDevice{kDLCUDA, 1}});
      },
      ThrowsCaiError(Errc::buffer_error,
                     HasSubstr("dl_device=(2, 1) is not where the array lives (2, 0) and "
                               "cai copies only to the CPU")));
  EXPECT_THAT(
      [] {
        (void)plan({.dl_device = DLDevice{kDLCUDAManaged, 0}});
      },
      ThrowsCaiError(Errc::buffer_error, HasSubstr("is not where the array lives")));
}

// ----- build_tensor and to_dlpack ---------------------------------------------------------------

TEST(build_tensor_test, the_legacy_form_refuses_what_it_cannot_say_before_touching_the_tensor) {
  const std::int64_t shape[1] = {4}, strides[1] = {1};
  TensorParts parts{0x10000, {kDLFloat, 32, 1}, shape, strides, kGpu0, true};
  DLManagedTensor m{};
  EXPECT_THAT([&] { build_tensor(m, parts, nullptr, nullptr); },
              ThrowsCaiError(Errc::buffer_error, HasSubstr("the array is read-only")));
  parts.readonly = false;
  parts.dtype = {kDLInt, 4, 1};
  EXPECT_THAT(
      [&] { build_tensor(m, parts, nullptr, nullptr); },
      ThrowsCaiError(Errc::buffer_error, HasSubstr("a legacy (unversioned) tensor cannot say so")));
  EXPECT_EQ(m.dl_tensor.data, nullptr);
  DLManagedTensorVersioned v{};
  parts.readonly = true;
  build_tensor(v, parts, DLPACK_FLAG_BITMASK_IS_COPIED, &v, nullptr);
  EXPECT_EQ(v.flags, DLPACK_FLAG_BITMASK_IS_COPIED | DLPACK_FLAG_BITMASK_READ_ONLY |
                         DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED);
  EXPECT_EQ(v.manager_ctx, &v);
  EXPECT_EQ(v.dl_tensor.strides, strides);
}

View upload(const std::vector<float>& values) {
  const std::int64_t shape[1] = {static_cast<std::int64_t>(values.size())};
  View v = View::allocate(DType::from_typestr("<f4"), shape, false,
                          sync::StreamRef(device::kLegacyDefaultStream));
  copy_from_host(v, values.data(), sync::StreamRef(device::kLegacyDefaultStream));
  return v;
}

TEST(to_dlpack_test, carries_out_each_plan) {
  const View v = upload({1, 2, 3});
  const sync::StreamRef s(device::kLegacyDefaultStream);
  DlpackTensor t = to_dlpack(v, {.versioned = true}, s);
  ASSERT_NE(t.versioned, nullptr);
  EXPECT_EQ(reinterpret_cast<std::uint64_t>(t.versioned->dl_tensor.data), v.ptr());
  EXPECT_EQ(t.versioned->flags & DLPACK_FLAG_BITMASK_IS_COPIED, 0u);
  t.versioned->deleter(t.versioned);

  t = to_dlpack(v, {.versioned = true, .copy = true}, s);
  EXPECT_NE(reinterpret_cast<std::uint64_t>(t.versioned->dl_tensor.data), v.ptr());
  EXPECT_EQ(t.versioned->dl_tensor.device.device_type, kDLCUDA);
  EXPECT_NE(t.versioned->flags & DLPACK_FLAG_BITMASK_IS_COPIED, 0u);
  t.versioned->deleter(t.versioned);

  t = to_dlpack(v, {.dl_device = DLDevice{kDLCPU, 0}}, s);
  ASSERT_NE(t.legacy, nullptr);
  EXPECT_EQ(t.legacy->dl_tensor.device.device_type, kDLCPU);
  const auto* host = static_cast<const float*>(t.legacy->dl_tensor.data);
  EXPECT_EQ(std::vector<float>(host, host + 3), (std::vector<float>{1, 2, 3}));
  t.legacy->deleter(t.legacy);
}

}  // namespace
}  // namespace cai
