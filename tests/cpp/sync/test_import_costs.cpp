// The "What an import costs" table of docs/architecture.md, row by row, in driver calls counted
// by the simulated driver: what an import of each kind of CAI `stream` pays at import, on its
// producer's stream, and on another stream W. "Nothing" means no driver call at all.

#include <gtest/gtest.h>

#include <cstdint>
#include <future>
#include <map>
#include <memory>
#include <string>

#include "cai/device/backend.h"
#include "cai/device/simulator.h"
#include "cai/sync/ordering.h"
#include "driver_calls.h"

namespace cai::sync {
namespace {

using device::kLegacyDefaultStream;
using device::kPerThreadDefaultStream;
using test::Calls;
using test::calls_of;
using test::count;
using test::total;

// One operation on `work` touching `state` (the shape of every cai operation: order, enqueue,
// finish); the enqueue itself is left out so that only the ordering is counted.
void use(device::Backend& b, SyncState& state, StreamHandle work) {
  StreamOrder order(b, StreamRef(work));
  order.add(state);
  order.finish();
}

class ImportCostTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!b.simulated()) GTEST_SKIP() << "counts driver calls through the simulated driver";
    producer = b.stream_create(/*non_blocking=*/true);
    w = b.stream_create(/*non_blocking=*/true);
    // Warm the thread's ordering events and the import event pool: their first use makes an
    // event, which the table does not count.
    std::promise<void> gate = hold(producer);
    auto warm = SyncState::imported(b, producer);
    use(b, *warm, w);
    gate.set_value();
    b.synchronize();
  }
  void TearDown() override {
    if (!b.simulated()) return;
    b.synchronize();
    b.stream_destroy(producer);
    b.stream_destroy(w);
  }
  // Work on `s` that waits until the returned promise is set: a busy stream.
  std::promise<void> hold(StreamHandle s) {
    std::promise<void> gate;
    b.launch_host_func(s, [f = gate.get_future().share()] { f.wait(); });
    return gate;
  }

  device::Backend& b = device::backend();
  StreamHandle producer = 0, w = 0;
};

TEST_F(ImportCostTest, stream_none_costs_nothing_until_its_first_operation_then_adopts_it) {
  std::shared_ptr<SyncState> state;
  EXPECT_EQ(total(calls_of(b, [&] { state = SyncState::imported_without_stream(); })), 0u);
  // The producer's later work is on a stream cai cannot name: after the first operation the
  // legacy stream waits for W (one record on W, one wait), and the array adopts W.
  const Calls first = calls_of(b, [&] { use(b, *state, w); });
  EXPECT_EQ(count(first, "cuEventRecord"), 1u);
  EXPECT_EQ(count(first, "cuStreamWaitEvent"), 1u);
  EXPECT_EQ(total(first), 2u);
  EXPECT_EQ(state->stream_handle(), std::optional<StreamHandle>(w));
  EXPECT_EQ(total(calls_of(b, [&] { use(b, *state, w); })), 0u);
  // Nothing at all when the first operation is on the legacy stream itself.
  auto on_legacy = SyncState::imported_without_stream();
  EXPECT_EQ(total(calls_of(b, [&] { use(b, *on_legacy, kLegacyDefaultStream); })), 0u);
}

TEST_F(ImportCostTest,
       a_default_stream_costs_nothing_there_and_one_record_and_two_waits_elsewhere) {
  for (const StreamHandle named : {kLegacyDefaultStream, kPerThreadDefaultStream}) {
    SCOPED_TRACE(named);
    std::shared_ptr<SyncState> state;
    EXPECT_EQ(total(calls_of(b, [&] { state = SyncState::imported(b, named); })), 0u);
    EXPECT_EQ(total(calls_of(b, [&] { use(b, *state, named); })), 0u);
    const Calls elsewhere = calls_of(b, [&] { use(b, *state, w); });
    // Before: a record on the data's stream and a wait of W; after: a record on W and a wait
    // of the data's stream.
    EXPECT_EQ(count(elsewhere, "cuEventRecord"), 2u);
    EXPECT_EQ(count(elsewhere, "cuStreamWaitEvent"), 2u);
    EXPECT_EQ(total(elsewhere), 4u);
    EXPECT_EQ(total(calls_of(b, [&] { use(b, *state, w); })), 4u);  // every operation
  }
}

TEST_F(ImportCostTest, an_idle_foreign_stream_costs_one_query) {
  std::shared_ptr<SyncState> state;
  const Calls at_import = calls_of(b, [&] { state = SyncState::imported(b, producer); });
  EXPECT_EQ(count(at_import, "cuStreamQuery"), 1u);
  EXPECT_EQ(total(at_import), 1u);
  // On W: the legacy stream waits for W after the work (the producer's later work is on a
  // stream cai cannot trust to stay alive), one record and one wait.
  const Calls elsewhere = calls_of(b, [&] { use(b, *state, w); });
  EXPECT_EQ(count(elsewhere, "cuEventRecord"), 1u);
  EXPECT_EQ(count(elsewhere, "cuStreamWaitEvent"), 1u);
  EXPECT_EQ(total(elsewhere), 2u);
  EXPECT_EQ(total(calls_of(b, [&] { use(b, *state, w); })), 0u);  // W adopted
  // Nothing when W is the legacy stream itself.
  auto again = SyncState::imported(b, producer);
  EXPECT_EQ(total(calls_of(b, [&] { use(b, *again, kLegacyDefaultStream); })), 0u);
}

TEST_F(ImportCostTest, an_idle_foreign_stream_costs_nothing_more_on_that_stream) {
  auto state = SyncState::imported(b, producer);
  EXPECT_EQ(total(calls_of(b, [&] { use(b, *state, producer); })), 0u);
}

TEST_F(ImportCostTest, a_busy_foreign_stream_costs_a_query_and_a_record) {
  std::promise<void> gate = hold(producer);
  std::shared_ptr<SyncState> state;
  const Calls at_import = calls_of(b, [&] { state = SyncState::imported(b, producer); });
  EXPECT_EQ(count(at_import, "cuStreamQuery"), 1u);
  EXPECT_EQ(count(at_import, "cuEventRecord"), 1u);
  EXPECT_EQ(total(at_import), 2u);
  // On W: a wait for the import's event before; after, a record on W and a wait of the
  // legacy stream.
  const Calls elsewhere = calls_of(b, [&] { use(b, *state, w); });
  EXPECT_EQ(count(elsewhere, "cuStreamWaitEvent"), 2u);
  EXPECT_EQ(count(elsewhere, "cuEventRecord"), 1u);
  EXPECT_EQ(total(elsewhere), 3u);
  EXPECT_FALSE(b.stream_query(w));  // W really waits for the held producer
  gate.set_value();
  EXPECT_EQ(total(calls_of(b, [&] { use(b, *state, w); })), 0u);  // W adopted
}

TEST_F(ImportCostTest, arrays_on_one_cai_stream_cost_one_ordering_per_operation) {
  // Two arrays whose work is on the producer's stream, used together on W: the stream is
  // waited for once, however many arrays share it.
  SyncState x{std::optional<StreamRef>(StreamRef(producer))};
  SyncState y{std::optional<StreamRef>(StreamRef(producer))};
  EXPECT_EQ(total(calls_of(b,
                           [&] {
                             StreamOrder order(b, StreamRef(producer));
                             order.add(x);
                             order.add(y);
                             order.finish();
                           })),
            0u);
  const Calls elsewhere = calls_of(b, [&] {
    StreamOrder order(b, StreamRef(w));
    order.add(x);
    order.add(y);
    order.finish();
  });
  EXPECT_EQ(count(elsewhere, "cuEventRecord"), 2u);
  EXPECT_EQ(count(elsewhere, "cuStreamWaitEvent"), 2u);
  EXPECT_EQ(total(elsewhere), 4u);
}

}  // namespace
}  // namespace cai::sync
