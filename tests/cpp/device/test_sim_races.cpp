// The race detector through the backend: each ordering rule, positive and negative. No test
// sleeps to prove an order; the detector decides at enqueue time.

#include <gtest/gtest.h>

#include <cstdio>
#include <thread>
#include <vector>

#include "cai/device/simulator.h"
#include "cai_matchers.h"
#include "test_sim_util.h"

namespace cai::device::detail {
namespace {

using cai::test::ThrowsCaiError;
using ::testing::HasSubstr;

using test::addr;

std::string hex(std::uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

class SimRaceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    buf = sim->alloc(MemoryKind::device, 256);
    pinned = sim->alloc(MemoryKind::pinned_host, 256);
    s1 = sim->stream_create(false);
    s2 = sim->stream_create(false);
    nb = sim->stream_create(true);
  }
  void TearDown() override {
    sim->synchronize();
    sim->free(buf);
    sim->free(pinned);
  }
  void write(std::uint64_t p, StreamHandle s, std::size_t n = 64) { sim->memset_async(p, 1, n, s); }
  void read(std::uint64_t p, StreamHandle s, std::size_t n = 64) {
    sim->copy_async(pinned + 128, p, n, s);
  }

  std::unique_ptr<test::Simulator> sim = test::make_simulator();
  std::uint64_t buf = 0, pinned = 0;
  StreamHandle s1 = 0, s2 = 0, nb = 0;
};

TEST_F(SimRaceTest, missing_wait_is_a_race) {
  write(buf, s1);
  const std::uint64_t b = buf;
  const std::string msg = cai::test::error_message(
      [&] {
        const Operand ops[] = {test::dense(b, {16}, 4), test::dense(b, {16}, 4),
                               test::dense(b, {16}, 4)};
        sim->elementwise_async(ElementwiseOp::add, ElementType::f32, ops, s2);
      },
      Errc::race);
  // The driver names what it was asked to run: the kernel's entry, the copy's entry point.
  EXPECT_EQ(msg, "race: cai_add_f32_contiguous on stream " + hex(s2) + " writes [" + hex(buf) +
                     "+64) while cuMemsetD8Async on stream " + hex(s1) +
                     " (not ordered before it: no event wait or synchronize) writes [" + hex(buf) +
                     "+64)");
  // The racing operation was not enqueued.
  EXPECT_TRUE(sim->stream_query(s2));
}

TEST_F(SimRaceTest, read_after_unordered_write_and_write_after_unordered_read) {
  write(buf, s1);
  EXPECT_THAT([&] { read(buf, s2); },
              ThrowsCaiError(Errc::race, HasSubstr("cuMemcpyAsync on stream " + hex(s2) +
                                                   " reads [" + hex(buf) + "+64)")));
  sim->stream_synchronize(s1);
  read(buf + 64, s1);
  EXPECT_THAT(
      [&] { write(buf + 64, s2); },
      ThrowsCaiError(Errc::race,
                     HasSubstr("while cuMemcpyAsync on stream " + hex(s1) +
                               " (not ordered before it: no event wait or synchronize) reads [" +
                               hex(buf + 64) + "+64)")));
}

TEST_F(SimRaceTest, event_wait_orders_streams) {
  sim->delay(s1, 0.2);
  write(buf, s1);
  const EventHandle e = sim->event_create(false);
  sim->event_record(e, s1);
  sim->stream_wait_event(s2, e);
  write(buf, s2);  // no race
  read(buf, s2);
  // Transitively: s2 -> event -> nb.
  const EventHandle e2 = sim->event_create(false);
  sim->event_record(e2, s2);
  sim->stream_wait_event(nb, e2);
  write(buf, nb);
  // Work enqueued on s1 after the record is not covered by the event.
  write(buf + 128, s1);
  EXPECT_THAT([&] { read(buf + 128, s2); },
              ThrowsCaiError(Errc::race, HasSubstr("cuMemsetD8Async on stream " + hex(s1))));
  sim->event_destroy(e);
  sim->event_destroy(e2);
}

TEST_F(SimRaceTest, waiting_on_a_never_recorded_event_orders_nothing) {
  write(buf, s1);
  const EventHandle e = sim->event_create(false);
  sim->stream_wait_event(s2, e);
  EXPECT_THAT([&] { write(buf, s2); },
              ThrowsCaiError(Errc::race, HasSubstr("race: cuMemsetD8Async")));
  sim->event_destroy(e);
}

TEST_F(SimRaceTest, same_stream_is_ordered) {
  write(buf, s1);
  read(buf, s1);
  write(buf, s1);
  sim->fill_async(test::dense(buf, {8}, 8), "abcdefgh", s1);
}

TEST_F(SimRaceTest, host_access_needs_a_synchronize) {
  sim->delay(s1, 0.2);
  write(pinned, s1);
  EXPECT_THAT(
      [&] { sim->host_access(sim::Access::contiguous(pinned, 8, false)); },
      ThrowsCaiError(Errc::race, HasSubstr("race: host_access on the host reads [" + hex(pinned) +
                                           "+8) while cuMemsetD8Async on stream " + hex(s1))));
  sim->stream_synchronize(s1);
  sim->host_access(sim::Access::contiguous(pinned, 8, false));
  sim->host_access(sim::Access::contiguous(pinned, 64, true), "numpy write");
  // The host's write is ordered before work it enqueues afterwards ...
  read(pinned, s2);
  // ... but not its later writes before the stream has read.
  EXPECT_THAT(
      [&] { sim->host_access(sim::Access::contiguous(pinned, 4, true), "numpy write"); },
      ThrowsCaiError(Errc::race, HasSubstr("race: numpy write on the host writes [" + hex(pinned) +
                                           "+4) while cuMemcpyAsync on stream " + hex(s2))));
  // An event synchronize, a successful query or a device synchronize also order the host.
  const EventHandle e = sim->event_create(false);
  sim->event_record(e, s2);
  sim->event_synchronize(e);
  sim->host_access(sim::Access::contiguous(pinned, 4, true));
  write(pinned, s1);
  while (!sim->stream_query(s1)) {
  }
  sim->host_access(sim::Access::contiguous(pinned, 4, true));
  write(pinned, nb);
  sim->synchronize();
  sim->host_access(sim::Access::contiguous(pinned, 4, true));
  sim->event_destroy(e);
}

TEST_F(SimRaceTest, host_cannot_touch_device_memory) {
  EXPECT_THAT([&] { sim->host_access(sim::Access::contiguous(buf + 8, 4, false)); },
              ThrowsCaiError(Errc::device_error,
                             HasSubstr("is device memory, which the host cannot access")));
}

TEST_F(SimRaceTest, pageable_host_memory_is_tracked_too) {
  std::vector<char> host(64);
  const sim::Access all[] = {sim::Access::contiguous(addr(host.data()), 64, true)};
  sim->host_access(all[0]);
  sim->delay(s1, 0.05);
  sim->enqueue_task(
      s1, all, [] {}, "writer");  // ordered after the host's write
  EXPECT_THAT([&] { sim->host_access(all[0]); },
              ThrowsCaiError(Errc::race, HasSubstr("while writer on stream " + hex(s1))));
  sim->stream_synchronize(s1);
  sim->host_access(all[0]);
  sim->forget(addr(host.data()), 64);
}

TEST_F(SimRaceTest, copies_with_pageable_host_memory_give_the_buffer_back_when_the_call_returns) {
  // As the driver documents: the caller may reuse a pageable buffer at once (to the device the
  // bytes are staged at the call: driver_fidelity.a_pageable_host_to_device_copy_...).
  std::vector<char> host(64, 7);
  sim->delay(s1, 0.05);
  sim->copy_async(buf, addr(host.data()), 64, s1);
  sim->host_access(sim::Access::contiguous(addr(host.data()), 64, true));
  // From the device: done when the call returns.
  sim->delay(s1, 0.05);
  sim->copy_async(addr(host.data()), buf, 64, s1);
  EXPECT_TRUE(sim->stream_query(s1));
  sim->host_access(sim::Access::contiguous(addr(host.data()), 64, false));
  // Pinned memory stays asynchronous: the host must synchronize.
  sim->delay(s1, 0.05);
  sim->copy_async(pinned, buf, 64, s1);
  EXPECT_THAT([&] { sim->host_access(sim::Access::contiguous(pinned, 64, false)); },
              ThrowsCaiError(Errc::race, HasSubstr("cuMemcpyAsync on stream " + hex(s1))));
  sim->stream_synchronize(s1);
  sim->forget(addr(host.data()), 64);
}

TEST_F(SimRaceTest, legacy_stream_and_blocking_streams_are_ordered) {
  sim->delay(s1, 0.2);
  write(buf, s1);
  read(buf, kLegacyDefaultStream);   // waits for s1
  write(buf, kLegacyDefaultStream);  // and for s1's read-free past
  write(buf, s2);                    // blocking s2 waits for the legacy stream
}

TEST_F(SimRaceTest, legacy_stream_and_non_blocking_streams_race) {
  write(buf, nb);
  EXPECT_THAT(
      [&] { read(buf, kLegacyDefaultStream); },
      ThrowsCaiError(Errc::race, HasSubstr("cuMemcpyAsync on legacy default stream reads")));
  write(buf + 64, kLegacyDefaultStream);
  EXPECT_THAT(
      [&] { write(buf + 64, nb); },
      ThrowsCaiError(Errc::race, HasSubstr("on stream " + hex(nb) + " (non-blocking) writes")));
}

TEST_F(SimRaceTest, blocking_streams_do_not_order_each_other) {
  write(buf, s1);
  EXPECT_THAT([&] { write(buf, s2); }, ThrowsCaiError(Errc::race, HasSubstr("race:")));
}

TEST_F(SimRaceTest, per_thread_default_stream_and_legacy_stream) {
  const std::uint64_t b = buf;
  std::thread([&] { write(b, kPerThreadDefaultStream); }).join();
  read(b, kLegacyDefaultStream);  // the per-thread stream is blocking
  std::thread([&] { write(b + 64, kPerThreadDefaultStream); }).join();
  // Another thread's per-thread stream is another stream, not ordered with the first.
  std::string msg;
  std::thread([&] {
    msg = cai::test::error_message([&] { write(b + 64, kPerThreadDefaultStream); }, Errc::race);
  }).join();
  EXPECT_TRUE(test::contains(msg,
                             "while cuMemsetD8Async on per-thread default stream of host "
                             "thread"))
      << msg;
  // A non-blocking stream is ordered with neither.
  EXPECT_THAT([&] { read(b + 64, nb); },
              ThrowsCaiError(Errc::race, HasSubstr("per-thread default stream")));
}

TEST_F(SimRaceTest, reads_only_never_race) {
  const sim::Access a[] = {sim::Access::contiguous(buf, 256, false),
                           sim::Access::contiguous(pinned, 256, false)};
  for (StreamHandle s : {s1, s2, nb, kLegacyDefaultStream, kPerThreadDefaultStream}) {
    sim->enqueue_task(
        s, a, [] {}, "reader");
  }
  sim->host_access(sim::Access::contiguous(pinned, 256, false));
  // Copies read their source only.
  std::vector<char> h1(64), h2(64);
  sim->copy_async(addr(h1.data()), pinned, 64, s1);
  sim->copy_async(addr(h2.data()), pinned, 64, s2);
  sim->synchronize();
}

TEST_F(SimRaceTest, interleaved_even_and_odd_views_do_not_race) {
  const float one = 1;
  sim->fill_async(test::operand(buf, {32}, {8}, 4), &one, s1);      // even elements
  sim->fill_async(test::operand(buf + 4, {32}, {8}, 4), &one, s2);  // odd elements
  // All elements overlap both.
  const std::string msg = cai::test::error_message(
      [&] { sim->fill_async(test::dense(buf, {64}, 4), &one, nb); }, Errc::race);
  EXPECT_TRUE(test::contains(msg, "cai_fill_4_strided32 on stream " + hex(s1))) << msg;
  EXPECT_TRUE(test::contains(msg, "cai_fill_4_strided32 on stream " + hex(s2))) << msg;
  EXPECT_TRUE(test::contains(msg, "more conflicting ranges")) << msg;
}

TEST_F(SimRaceTest, a_column_and_a_row_share_one_element) {
  // 4x4 i32 matrix: row 1 on s1, column 2 on s2: they meet at (1, 2).
  const std::int32_t v = 3;
  sim->fill_async(test::operand(buf + 16, {4}, {4}, 4), &v, s1);
  const std::string msg = cai::test::error_message(
      [&] { sim->fill_async(test::operand(buf + 8, {4}, {16}, 4), &v, s2); }, Errc::race);
  EXPECT_TRUE(test::contains(msg, "writes [" + hex(buf + 24) + "+4) while")) << msg;
  // Column 2 of rows 2-3 does not meet row 1.
  sim->fill_async(test::operand(buf + 40, {2}, {16}, 4), &v, s2);
}

TEST_F(SimRaceTest, reversed_and_transposed_views_are_exact) {
  // Write the first half reversed on s1, the second half transposed on s2: disjoint.
  const std::int32_t v = 9;
  sim->fill_async(test::operand(buf + 60, {16}, {-4}, 4), &v, s1);
  sim->fill_async(test::operand(buf + 64, {4, 4}, {4, 16}, 4), &v, s2);
  EXPECT_THAT([&] { sim->fill_async(test::operand(buf + 60, {16}, {-4}, 4), &v, s2); },
              ThrowsCaiError(Errc::race, HasSubstr("writes [" + hex(buf) + "+64)")));
}

TEST_F(SimRaceTest, destroyed_blocking_stream_still_orders_the_legacy_stream) {
  const StreamHandle tmp = sim->stream_create(false);
  sim->delay(tmp, 0.2);
  write(buf, tmp);
  sim->stream_destroy(tmp);
  read(buf, kLegacyDefaultStream);
}

TEST_F(SimRaceTest, free_forgets_the_history) {
  const std::uint64_t p = sim->alloc(MemoryKind::device, 64);
  write(p, s1);
  const std::size_t before = sim->race_history_size();
  sim->free(p);  // waits for s1, as cuMemFree
  EXPECT_LT(sim->race_history_size(), before);
  const std::uint64_t q = sim->alloc(MemoryKind::device, 64);
  write(q, s2);  // whatever address it got, no stale history
  sim->stream_synchronize(s2);
  sim->free(q);
}

TEST_F(SimRaceTest, tasks_declare_strided_accesses) {
  const std::int64_t shape[] = {2, 2};
  const std::int64_t st[] = {32, 8};
  const sim::Access acc[] = {{buf, shape, st, 8, true}};
  int runs = 0;
  sim->enqueue_task(
      s1, acc, [&] { ++runs; }, "my_kernel");
  // It touches [0, 16) and [32, 48); the gap between is free.
  sim->memset_async(buf + 16, 0, 16, s2);
  EXPECT_THAT([&] { sim->memset_async(buf + 32, 0, 8, s2); },
              ThrowsCaiError(Errc::race, HasSubstr("while my_kernel on stream " + hex(s1))));
  sim->stream_synchronize(s1);
  EXPECT_EQ(runs, 1);
  const sim::Access zero_d[] = {{buf + 200, {}, {}, 8, false}};
  sim->enqueue_task(s2, zero_d, [] {});
}

TEST_F(SimRaceTest, detection_can_be_switched_off) {
  EXPECT_TRUE(sim->race_detection());
  sim->set_race_detection(false);
  // Two unordered writes, declared only: real ones would race in host memory (ThreadSanitizer).
  const sim::Access all[] = {sim::Access::contiguous(buf, 64, true)};
  sim->enqueue_task(
      s1, all, [] {}, "declared_write");
  sim->enqueue_task(
      s2, all, [] {}, "declared_write");
  sim->set_race_detection(true);
  write(buf, nb);  // the history was dropped when switching
  EXPECT_THAT([&] { write(buf, s1); }, ThrowsCaiError(Errc::race, HasSubstr("race:")));
}

TEST_F(SimRaceTest, switching_detection_on_again_keeps_the_history) {
  write(buf, s1);
  sim->set_race_detection(true);  // already on: nothing forgotten
  EXPECT_THAT([&] { write(buf, s2); },
              ThrowsCaiError(Errc::race, HasSubstr("while cuMemsetD8Async on stream " + hex(s1))));
}

// Short-lived streams, each ordered with the data's stream by events (what cai's operations do
// on a new stream): the clocks, the slots and the history stay the same size.
TEST_F(SimRaceTest, stream_churn_keeps_the_state_bounded) {
  const EventHandle e = sim->event_create(false);
  const std::int32_t v = 1;
  auto one_round = [&] {
    const StreamHandle s = sim->stream_create(true);
    sim->event_record(e, s1);
    sim->stream_wait_event(s, e);
    sim->fill_async(test::dense(buf, {16}, 4), &v, s);
    sim->event_record(e, s);
    sim->stream_wait_event(s1, e);
    sim->stream_destroy(s);
    return s;
  };
  for (int i = 0; i < 100; ++i) one_round();
  const std::size_t slots = sim->clock_slots();
  const std::size_t history = sim->race_history_size();
  StreamHandle last = 0;
  for (int i = 0; i < 5000; ++i) last = one_round();
  EXPECT_EQ(sim->clock_slots(), slots);
  EXPECT_LE(slots, 6u);  // the host, s1 and one for the churned streams (plus the fixture's)
  EXPECT_EQ(sim->race_history_size(), history);
  // Races are still caught, and name the stream that made the access.
  EXPECT_THAT(
      [&] { write(buf, nb); },
      ThrowsCaiError(Errc::race, HasSubstr("while cai_fill_16_contiguous on stream " + hex(last))));
  sim->event_destroy(e);
}

TEST_F(SimRaceTest, a_slot_goes_only_to_a_stream_ordered_after_its_accesses) {
  // Unordered short-lived streams keep their slots (their accesses may still race)...
  const StreamHandle a = sim->stream_create(true);
  write(buf, a);
  sim->stream_destroy(a);
  const std::size_t slots = sim->clock_slots();
  const StreamHandle b = sim->stream_create(true);
  write(buf + 128, b);  // b is not ordered after a: a new slot
  EXPECT_EQ(sim->clock_slots(), slots + 1);
  EXPECT_THAT([&] { write(buf, b); },
              ThrowsCaiError(Errc::race, HasSubstr("while cuMemsetD8Async on stream " + hex(a))));
  sim->stream_destroy(b);
  // ...until something orders the host after them: then new streams reuse them.
  sim->synchronize();
  for (int i = 0; i < 50; ++i) {
    const StreamHandle c = sim->stream_create(true);
    write(buf, c);
    sim->stream_synchronize(c);
    sim->stream_destroy(c);
  }
  EXPECT_EQ(sim->clock_slots(), slots + 1);
}

TEST_F(SimRaceTest, history_stays_bounded_under_repeated_work) {
  for (int i = 0; i < 200; ++i) {
    write(buf, s1);
    read(buf, s1);
  }
  EXPECT_LE(sim->race_history_size(), 4u);
}

}  // namespace
}  // namespace cai::device::detail
