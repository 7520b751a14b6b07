// cai::Import, the value every foreign array is imported as: what resolve() and view() cost in
// driver calls (counted by the simulated driver) and which stream state the View gets.

#include "cai/arrays/import.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <future>
#include <map>
#include <memory>
#include <string>

#include "cai/device/backend.h"
#include "cai/device/simulator.h"
#include "driver_calls.h"

namespace cai {
namespace {

using device::StreamHandle;
using test::Calls;
using test::calls_of;
using test::count;
using test::total;

class ImportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!b.simulated()) GTEST_SKIP() << "counts driver calls through the simulated driver";
    producer = b.stream_create(/*non_blocking=*/true);
    // The import event pool's first event is made on first use, which is not counted below.
    std::promise<void> gate = hold(producer);
    ImportStream warm = ImportStream::producer(producer);
    warm.resolve();
    gate.set_value();
    b.synchronize();
  }
  void TearDown() override {
    if (!b.simulated()) return;
    b.synchronize();
    b.stream_destroy(producer);
  }
  std::promise<void> hold(StreamHandle s) {
    std::promise<void> gate;
    b.launch_host_func(s, [f = gate.get_future().share()] { f.wait(); });
    return gate;
  }
  Import import_of(ImportStream stream) {
    Import imp;
    imp.ptr = 0x1000;
    imp.readonly = true;
    imp.dtype = DType::from_typestr("<f4");
    const std::int64_t shape[] = {2, 3};
    imp.layout = Layout::c_contiguous(shape, 4);
    imp.stream = std::move(stream);
    return imp;
  }

  device::Backend& b = device::backend();
  StreamHandle producer = 0;
};

TEST_F(ImportTest, view_has_the_fields_and_the_owner) {
  auto owner = std::make_shared<int>(7);
  const Import imp = import_of(ImportStream::none());
  const View v = imp.view(owner);
  EXPECT_EQ(v.ptr(), 0x1000u);
  EXPECT_TRUE(v.readonly());
  EXPECT_EQ(v.dtype().str(), "<f4");
  EXPECT_EQ(v.shape()[0], 2);
  EXPECT_EQ(v.shape()[1], 3);
  EXPECT_EQ(v.owner(), owner);
  EXPECT_FALSE(v.sync()->has_work());
}

TEST_F(ImportTest, no_stream_and_unnamed_stream_cost_nothing) {
  for (ImportStream s : {ImportStream::none(), ImportStream::unnamed()}) {
    const Calls c = calls_of(b, [&] {
      s.resolve();
      (void)import_of(s).view(nullptr);
    });
    EXPECT_EQ(total(c), 0u);
    EXPECT_FALSE(s.unresolved());
    EXPECT_EQ(s.named().handle, 0u);
  }
}

TEST_F(ImportTest, default_stream_is_kept_by_name_without_a_driver_call) {
  ImportStream s = ImportStream::producer(device::kLegacyDefaultStream);
  EXPECT_TRUE(s.unresolved());
  const Calls c = calls_of(b, [&] { s.resolve(); });
  EXPECT_EQ(total(c), 0u);
  EXPECT_FALSE(s.unresolved());
  EXPECT_FALSE(s.by_event());
  EXPECT_EQ(s.named().handle, device::kLegacyDefaultStream);
  const View v = import_of(s).view(nullptr);
  EXPECT_EQ(v.sync()->stream_handle(), std::optional<StreamHandle>(device::kLegacyDefaultStream));
}

TEST_F(ImportTest, idle_foreign_stream_costs_one_query_and_keeps_nothing) {
  ImportStream s = ImportStream::producer(producer);
  const Calls c = calls_of(b, [&] { s.resolve(); });
  EXPECT_EQ(count(c, "cuStreamQuery"), 1u);
  EXPECT_EQ(total(c), 1u);
  EXPECT_FALSE(s.by_event());
  EXPECT_EQ(s.named().handle, 0u);
  const View v = import_of(s).view(nullptr);
  EXPECT_FALSE(v.sync()->has_work());
  EXPECT_EQ(v.sync()->event(), nullptr);
}

TEST_F(ImportTest, busy_foreign_stream_records_one_event_once) {
  std::promise<void> gate = hold(producer);
  ImportStream s = ImportStream::producer(producer);
  const Calls c = calls_of(b, [&] { s.resolve(); });
  EXPECT_EQ(count(c, "cuStreamQuery"), 1u);
  EXPECT_EQ(count(c, "cuEventRecord"), 1u);
  EXPECT_EQ(total(c), 2u);
  EXPECT_TRUE(s.by_event());
  // Resolved once: resolving again and building the View make no driver call.
  View v;
  const Calls later = calls_of(b, [&] {
    s.resolve();
    v = import_of(s).view(nullptr);
  });
  EXPECT_EQ(total(later), 0u);
  EXPECT_NE(v.sync()->event(), nullptr);
  EXPECT_TRUE(v.sync()->has_work());
  gate.set_value();
}

TEST_F(ImportTest, view_of_an_unresolved_stream_resolves_it) {
  std::promise<void> gate = hold(producer);
  const Import imp = import_of(ImportStream::producer(producer));
  View v;
  const Calls c = calls_of(b, [&] { v = imp.view(nullptr); });
  EXPECT_EQ(count(c, "cuEventRecord"), 1u);
  EXPECT_NE(v.sync()->event(), nullptr);
  gate.set_value();
}

}  // namespace
}  // namespace cai
