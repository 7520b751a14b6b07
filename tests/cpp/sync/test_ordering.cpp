// Orderings between streams through events (src/sync/ordering.cpp): each event is made on the
// device of the stream it is recorded on, whatever device is current, and an import ordered by
// an event is re-exported as the legacy stream after that event.

#include <gtest/gtest.h>

#include <future>
#include <thread>

#include "backend/backend.h"
#include "cai/device/backend.h"
#include "cai/sync/ordering.h"
#include "device/test_sim_util.h"

namespace cai::sync {
namespace {

using device::kLegacyDefaultStream;

// Work on `s` that waits until the returned promise is set.
std::promise<void> hold(device::Backend& b, StreamHandle s) {
  std::promise<void> gate;
  b.launch_host_func(s, [f = gate.get_future().share()] { f.wait(); });
  return gate;
}

TEST(ordering_test, a_wait_between_streams_of_another_device_uses_an_event_of_their_device) {
  auto b = device::detail::make_sim_backend(2);
  // On a thread of its own: the thread's cached ordering events end with it, before b.
  std::thread([&] {
    b->set_current_device(1);
    const StreamHandle producer = b->stream_create(true), waiter = b->stream_create(true);
    b->set_current_device(0);  // the current device is not the streams'
    std::promise<void> gate = hold(*b, producer);
    // An event of device 0 cannot be recorded on a stream of device 1.
    EXPECT_NO_THROW(wait_for(*b, StreamRef(producer), StreamRef(waiter)));
    EXPECT_FALSE(b->stream_query(waiter));  // it waits for the held producer
    gate.set_value();
    b->stream_synchronize(waiter);
    EXPECT_TRUE(b->stream_query(producer));
    b->stream_destroy(producer);
    b->stream_destroy(waiter);
  }).join();
}

TEST(ordering_test, a_reexported_event_import_orders_the_legacy_stream_after_the_event) {
  device::Backend& b = device::backend();
  const StreamHandle producer = b.stream_create(/*non_blocking=*/true);
  std::promise<void> gate = hold(b, producer);
  // Busy: ordered by an event recorded on the producer.
  const auto state = SyncState::imported(b, producer);
  // The producer's stream may be gone by the time a consumer uses the export: the legacy
  // stream, which waits for the import's event (a non-blocking producer is not implicitly
  // ordered with it).
  EXPECT_EQ(state->export_handle(b), std::optional<StreamHandle>(kLegacyDefaultStream));
  EXPECT_FALSE(b.stream_query(kLegacyDefaultStream));
  gate.set_value();
  b.stream_synchronize(kLegacyDefaultStream);
  EXPECT_TRUE(b.stream_query(producer));
  b.stream_destroy(producer);
}

}  // namespace
}  // namespace cai::sync
