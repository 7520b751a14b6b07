// SyncState's four states (include/cai/sync/ordering.h) and what work on a stream does to each
// (after_work): the data adopts the work stream unless it keeps one of its own, and the order
// is told what it must still do (the kept stream waits; a foreign producer makes the legacy
// stream wait).

#include <gtest/gtest.h>

#include <future>
#include <variant>

#include "backend/backend.h"
#include "cai/device/backend.h"
#include "cai/sync/ordering.h"

namespace cai::sync {
namespace {

using device::kLegacyDefaultStream;

// What after_work reports, and the stream the data is on afterwards.
struct Outcome {
  SyncState::AfterWork after;
  std::optional<StreamHandle> stream;
};

Outcome work_on(SyncState& state, StreamHandle work, int work_device = -1) {
  Outcome out;
  state.after_work(StreamRef(work), work_device,
                   [&](const SyncState::AfterWork& after) { out.after = after; });
  out.stream = state.stream_handle();
  return out;
}

class SyncStateTest : public ::testing::Test {
 protected:
  device::Backend& b = device::backend();
  StreamHandle s = b.stream_create(true), t = b.stream_create(true);
  void TearDown() override {
    b.synchronize();
    b.stream_destroy(s);
    b.stream_destroy(t);
  }
};

TEST_F(SyncStateTest, memory_without_a_stream_adopts_the_work_stream) {
  SyncState state;
  EXPECT_FALSE(state.has_work());
  const Outcome o = work_on(state, s);
  EXPECT_FALSE(o.after.foreign);
  EXPECT_FALSE(o.after.kept);
  EXPECT_EQ(o.stream, s);
  EXPECT_TRUE(state.pending());
}

TEST_F(SyncStateTest, data_on_the_work_stream_needs_nothing) {
  auto state = SyncState::idle(StreamRef(s));
  const Outcome o = work_on(*state, s);
  EXPECT_FALSE(o.after.foreign);
  EXPECT_FALSE(o.after.kept);
  EXPECT_EQ(o.stream, s);
}

TEST_F(SyncStateTest, data_on_another_stream_keeps_it_and_it_must_wait) {
  auto state = SyncState::idle(StreamRef(t));
  const Outcome o = work_on(*state, s);
  EXPECT_FALSE(o.after.foreign);
  ASSERT_TRUE(o.after.kept);
  EXPECT_EQ(o.after.kept->handle, t);
  EXPECT_EQ(o.stream, t);
}

TEST_F(SyncStateTest, an_import_behind_an_event_names_its_producer_and_adopts_the_work_stream) {
  std::promise<void> gate;
  b.launch_host_func(t, [f = gate.get_future().share()] { f.wait(); });
  auto state = SyncState::imported(b, t);  // busy: an event stands for t
  ASSERT_TRUE(state->event());
  EXPECT_FALSE(state->stream_handle());
  gate.set_value();
  const Outcome o = work_on(*state, s);
  EXPECT_EQ(o.after.foreign, t);
  EXPECT_FALSE(o.after.kept);
  EXPECT_EQ(o.stream, s);
  EXPECT_FALSE(state->event());
}

TEST_F(SyncStateTest, an_idle_import_names_its_producer_and_adopts_the_work_stream) {
  auto none = SyncState::imported_without_stream();
  EXPECT_FALSE(none->has_work());
  Outcome o = work_on(*none, s);
  EXPECT_EQ(o.after.foreign, StreamHandle{0});  // the producer named no stream
  EXPECT_EQ(o.stream, s);

  auto idle = SyncState::imported(b, t);  // nothing queued on t: one query, no event
  EXPECT_FALSE(idle->event());
  EXPECT_FALSE(idle->pending());
  o = work_on(*idle, s);
  EXPECT_EQ(o.after.foreign, t);
  EXPECT_EQ(o.stream, s);
}

TEST_F(SyncStateTest, a_default_stream_of_another_device_is_left_for_the_work_stream) {
  // Default handles name a stream of each device (StreamOrder passes the device of a default
  // work stream): work on device 0's per-thread default stream marks the data as there.
  auto state = SyncState::idle(StreamRef(device::kPerThreadDefaultStream));
  work_on(*state, device::kPerThreadDefaultStream, 0);
  // Work on device 1's legacy stream (which waited for it): the data adopts it, and device
  // 0's stream is not made to wait for work of device 1.
  const Outcome o = work_on(*state, kLegacyDefaultStream, 1);
  EXPECT_FALSE(o.after.kept);
  EXPECT_FALSE(o.after.foreign);
  EXPECT_EQ(o.stream, kLegacyDefaultStream);
  // On that device, work on another default stream keeps the data's, which must wait.
  const Outcome kept = work_on(*state, device::kPerThreadDefaultStream, 1);
  ASSERT_TRUE(kept.after.kept);
  EXPECT_EQ(kept.after.kept->handle, kLegacyDefaultStream);
}

TEST_F(SyncStateTest, adopt_moves_any_state_to_the_work_stream) {
  auto state = SyncState::imported_without_stream(t);
  state->adopt(StreamRef(s), -1);
  EXPECT_EQ(state->stream_handle(), s);
  EXPECT_TRUE(state->pending());
  // No foreign producer is left to order: later work on another stream keeps s.
  const Outcome o = work_on(*state, t);
  EXPECT_FALSE(o.after.foreign);
  ASSERT_TRUE(o.after.kept);
  EXPECT_EQ(o.after.kept->handle, s);
}

}  // namespace
}  // namespace cai::sync
