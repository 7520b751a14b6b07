// What the host knows complete without asking the driver (SyncState::pending): the rule behind
// exporting `stream: None` (docs/architecture.md, "The stream model").

#include <gtest/gtest.h>

#include "cai/device/backend.h"
#include "cai/sync/ordering.h"

namespace cai::sync {
namespace {

device::Backend& backend() {
  return device::backend();
}

StreamRef new_stream() {
  const device::StreamHandle h = backend().stream_create(/*non_blocking=*/true);
  return StreamRef(
      h, std::shared_ptr<const void>(nullptr, [h](const void*) { backend().stream_destroy(h); }));
}

TEST(pending_test, new_memory_has_nothing_pending) {
  EXPECT_FALSE(SyncState().pending());
  auto idle = SyncState::idle(new_stream());
  EXPECT_FALSE(idle->pending());
  EXPECT_FALSE(idle->export_handle(backend()).has_value());
  EXPECT_TRUE(idle->stream().has_value());  // still the default of operations on it
}

TEST(pending_test, a_given_stream_is_pending_until_the_host_waits) {
  SyncState s(new_stream());  // an IPC import, wrapped memory: work may be queued there
  EXPECT_TRUE(s.pending());
  EXPECT_EQ(s.export_handle(backend()), s.stream()->handle);
  s.synchronize(backend());
  EXPECT_FALSE(s.pending());
  EXPECT_FALSE(s.export_handle(backend()).has_value());
}

TEST(pending_test, work_marks_pending_and_a_wait_on_its_stream_clears_it) {
  const StreamRef a = new_stream(), b = new_stream();
  auto state = SyncState::idle(a);
  state->mark_work();
  EXPECT_TRUE(state->pending());
  const std::uint64_t before = work_clock();
  backend().stream_synchronize(b.handle);
  state->host_waited(b.handle, before);  // another stream: says nothing about a
  EXPECT_TRUE(state->pending());
  backend().stream_synchronize(a.handle);
  state->host_waited(a.handle, before);
  EXPECT_FALSE(state->pending());
}

TEST(pending_test, work_after_the_clock_was_read_stays_pending) {
  const StreamRef a = new_stream();
  auto state = SyncState::idle(a);
  const std::uint64_t before = work_clock();
  state->mark_work();  // marked after `before`: the wait may not cover it
  state->host_waited(a.handle, before);
  EXPECT_TRUE(state->pending());
}

TEST(pending_test, a_device_synchronize_completes_everything_marked_before_it) {
  auto x = SyncState::idle(new_stream()), y = SyncState::idle(new_stream());
  x->mark_work();
  y->mark_work();
  synchronize_device(backend());
  EXPECT_FALSE(x->pending());
  EXPECT_FALSE(y->pending());
  y->mark_work();
  EXPECT_TRUE(y->pending());
}

}  // namespace
}  // namespace cai::sync
