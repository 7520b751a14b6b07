// The simulator used from 8 host threads at once: streams, events, memory, kernels and copies,
// with each thread ordering its own work (no race may be reported, every result is checked),
// and a true race between two threads still caught. Built into cai_test_device (device layer
// only); scripts/sanitize.sh also builds it with ThreadSanitizer.
//
// With -DCAI_SIM_THREADS_ALL_LAYERS (scripts/sanitize.sh builds it so, linked with every
// layer) it also runs the arrays operations and sync::StreamOrder from 8 threads on the
// process-wide simulator. cai_test_device links only cai_device, so the normal build leaves
// that part out.

#include <gtest/gtest.h>

#include <atomic>
#include <barrier>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <future>
#include <latch>
#include <thread>
#include <vector>

#include "cai/core/error.h"
#include "cai/device/owned.h"
#include "cai/device/simulator.h"
#include "test_sim_util.h"

#ifdef CAI_SIM_THREADS_ALL_LAYERS
#include "cai/arrays/ops.h"
#include "cai/arrays/view.h"
#include "cai/sync/ordering.h"
#endif

namespace cai::device::detail {
namespace {

constexpr int kThreads = 8;
constexpr std::int64_t kN = 256;  // int32 elements per buffer
constexpr std::size_t kBytes = kN * sizeof(std::int32_t);

using test::addr;

// Runs fn(i) on kThreads threads that start together; rethrows the first failure.
void run_threads(const std::function<void(int)>& fn) {
  std::latch start(kThreads);
  std::vector<std::future<void>> done;
  done.reserve(kThreads);
  for (int i = 0; i < kThreads; ++i) {
    done.push_back(std::async(std::launch::async, [&, i] {
      start.arrive_and_wait();
      fn(i);
    }));
  }
  for (auto& f : done) f.get();
}

class SimThreads : public ::testing::Test {
 protected:
  std::unique_ptr<test::Simulator> sim = test::make_simulator();
  Operand op(std::uint64_t p) const { return {p, Layout::c_contiguous(Dims{kN}, 4)}; }
  void fill(std::uint64_t p, std::int32_t v, StreamHandle s) { sim->fill_async(op(p), &v, s); }
  void add(std::uint64_t out, std::uint64_t a, std::uint64_t b, StreamHandle s) {
    const Operand ops[] = {op(out), op(a), op(b)};
    sim->elementwise_async(ElementwiseOp::add, ElementType::i32, ops, s);
  }
  std::vector<std::int32_t> read(std::uint64_t p, StreamHandle s) {
    std::vector<std::int32_t> host(kN);
    sim->copy_async(addr(host.data()), p, kBytes, s);
    sim->stream_synchronize(s);
    sim->forget(addr(host.data()), kBytes);  // the host buffer goes with this scope
    return host;
  }
};

TEST_F(SimThreads, own_streams_and_buffers) {
  run_threads([&](int i) {
    const StreamHandle s = sim->stream_create(/*non_blocking=*/true);
    const std::uint64_t a = sim->alloc(MemoryKind::device, kBytes);
    const std::uint64_t b = sim->alloc(MemoryKind::device, kBytes);
    for (int iter = 0; iter < 40; ++iter) {
      fill(a, i + iter, s);
      add(b, a, a, s);
      sim->copy_async(a, b, kBytes, s);  // a = 2 (i + iter)
      const auto host = read(a, s);
      for (std::int32_t v : host) ASSERT_EQ(v, 2 * (i + iter));
    }
    sim->free(a);
    sim->free(b);
    sim->stream_destroy(s);
  });
}

TEST_F(SimThreads, disjoint_slices_of_one_allocation) {
  const std::uint64_t shared = sim->alloc(MemoryKind::device, kBytes * kThreads);
  run_threads([&](int i) {
    const StreamHandle s = sim->stream_create(true);
    const std::uint64_t mine = shared + static_cast<std::uint64_t>(i) * kBytes;
    for (int iter = 0; iter < 20; ++iter) fill(mine, 100 * i + iter, s);
    sim->stream_synchronize(s);
    sim->stream_destroy(s);
  });
  // Every thread synchronized its stream: the host (one actor) is ordered after all of them.
  std::vector<std::int32_t> host(static_cast<std::size_t>(kN * kThreads));
  sim->copy_async(addr(host.data()), shared, host.size() * sizeof(std::int32_t),
                  kLegacyDefaultStream);
  sim->stream_synchronize(kLegacyDefaultStream);
  sim->forget(addr(host.data()), host.size() * sizeof(std::int32_t));
  for (int i = 0; i < kThreads; ++i)
    for (std::int64_t k = 0; k < kN; ++k)
      ASSERT_EQ(host[static_cast<std::size_t>(i * kN + k)], 100 * i + 19);
  sim->free(shared);
}

TEST_F(SimThreads, event_chain_across_threads) {
  // Thread i waits for thread i-1's event, then writes out[i] = out[i-1] + out[i-1].
  std::vector<std::uint64_t> bufs(kThreads);
  for (auto& p : bufs) p = sim->alloc(MemoryKind::device, kBytes);
  std::vector<std::promise<EventHandle>> ready(kThreads);
  std::vector<std::shared_future<EventHandle>> got;
  for (auto& p : ready) got.push_back(p.get_future().share());
  std::vector<StreamHandle> streams(kThreads);
  for (auto& s : streams) s = sim->stream_create(true);
  run_threads([&](int i) {
    const StreamHandle s = streams[static_cast<std::size_t>(i)];
    const std::uint64_t out = bufs[static_cast<std::size_t>(i)];
    if (i == 0) {
      fill(out, 1, s);
    } else {
      const EventHandle before = got[static_cast<std::size_t>(i - 1)].get();
      sim->stream_wait_event(s, before);
      const std::uint64_t in = bufs[static_cast<std::size_t>(i - 1)];
      add(out, in, in, s);
    }
    const EventHandle e = sim->event_create(false);
    sim->event_record(e, s);
    ready[static_cast<std::size_t>(i)].set_value(e);
  });
  const auto host = read(bufs.back(), streams.back());
  for (std::int32_t v : host) EXPECT_EQ(v, 1 << (kThreads - 1));
  sim->synchronize();
  for (auto& f : got) sim->event_destroy(f.get());
  for (auto p : bufs) sim->free(p);
  for (auto s : streams) sim->stream_destroy(s);
}

TEST_F(SimThreads, create_destroy_and_queries) {
  run_threads([&](int i) {
    for (int iter = 0; iter < 100; ++iter) {
      const StreamHandle s = sim->stream_create(iter % 2 == 0);
      const EventHandle e = sim->event_create(iter % 3 == 0);
      const std::uint64_t p = sim->alloc(iter % 2 ? MemoryKind::device : MemoryKind::pinned_host,
                                         64 + static_cast<std::size_t>(i));
      const PointerInfo info = sim->pointer_info(p + 8);
      ASSERT_EQ(info.alloc_base, p);
      sim->memset_async(p, i, 64, s);
      sim->event_record(e, s);
      (void)sim->event_query(e);
      (void)sim->stream_query(s);
      sim->event_synchronize(e);
      ASSERT_TRUE(sim->event_query(e));
      sim->free(p);
      sim->event_destroy(e);
      sim->stream_destroy(s);
    }
  });
}

TEST_F(SimThreads, per_thread_default_streams) {
  run_threads([&](int i) {
    const std::uint64_t a = sim->alloc(MemoryKind::device, kBytes);
    for (int iter = 0; iter < 20; ++iter) fill(a, i * iter, kPerThreadDefaultStream);
    const auto host = read(a, kPerThreadDefaultStream);
    for (std::int32_t v : host) ASSERT_EQ(v, i * 19);
    sim->free(a);
  });
}

TEST_F(SimThreads, a_real_race_between_two_threads_is_still_caught) {
  const std::uint64_t shared = sim->alloc(MemoryKind::device, kBytes);
  std::atomic<int> races{0};
  std::barrier sync_point(2);
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i) {
    threads.emplace_back([&, i] {
      const StreamHandle s = sim->stream_create(true);
      sync_point.arrive_and_wait();
      try {
        fill(shared, i, s);  // both write the same bytes, nothing orders them
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), Errc::race) << e.what();
        ++races;
      }
      sync_point.arrive_and_wait();
      sim->stream_synchronize(s);
      sim->stream_destroy(s);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(races.load(), 1);  // the second enqueue of the two is refused
  sim->free(shared);
}

#ifdef CAI_SIM_THREADS_ALL_LAYERS

// The process-wide simulator (the arrays layer uses device::backend()).
const bool g_sim = [] {
  setenv("CAI_BACKEND", "sim", 0);
  return true;
}();

DType i32() {
  return DType::from_typestr("<i4");
}

sync::StreamRef new_stream() {
  auto owned = OwnedStream::create(/*non_blocking=*/true);
  return {owned->handle(), owned};
}

std::vector<std::int32_t> to_host(const View& v, const sync::StreamRef& s) {
  std::vector<std::int32_t> host(static_cast<std::size_t>(v.size()));
  copy_to_host(host.data(), v, s);
  backend().stream_synchronize(s.handle);
  return host;
}

TEST(SimThreadsArrays, ops_from_eight_threads) {
  ASSERT_TRUE(g_sim);
  run_threads([&](int i) {
    const sync::StreamRef s = new_stream();
    const std::int64_t shape[] = {kN};
    std::vector<std::int32_t> src(kN);
    for (std::int64_t k = 0; k < kN; ++k)
      src[static_cast<std::size_t>(k)] = i + static_cast<int>(k);
    for (int iter = 0; iter < 20; ++iter) {
      View a = View::allocate(i32(), shape, false, s);
      View b = View::allocate(i32(), shape, false, s);
      copy_from_host(a, src.data(), s);
      add(b, a, a, s);  // b = 2 src
      View odd = b.slice(0, 1, kN);
      const std::int32_t seven = 7;
      fill(odd, &seven, s);
      copy(a, b, s);
      const auto host = to_host(a, s);
      ASSERT_EQ(host[0], 2 * i);
      for (std::int64_t k = 1; k < kN; ++k) ASSERT_EQ(host[static_cast<std::size_t>(k)], 7);
    }
  });
}

TEST(SimThreadsArrays, shared_source_read_by_eight_threads_then_overwritten) {
  const sync::StreamRef producer = new_stream();
  const std::int64_t shape[] = {kN};
  View src = View::allocate(i32(), shape, false, producer);
  const std::int32_t five = 5;
  fill(src, &five, producer);
  std::vector<View> dst(kThreads);
  run_threads([&](int i) {
    const sync::StreamRef s = new_stream();
    View d = View::allocate(i32(), shape, false, s);
    copy(d, src, s);  // waits for the producer; the producer then waits for this read
    dst[static_cast<std::size_t>(i)] = d;
  });
  // Overwriting src on its own stream is ordered after all eight reads (StreamOrder::finish):
  // the race detector would refuse it otherwise.
  const std::int32_t nine = 9;
  fill(src, &nine, producer);
  for (const View& d : dst) {
    const auto host = to_host(d, *d.sync()->stream());
    for (std::int32_t v : host) ASSERT_EQ(v, 5);
  }
  const auto after = to_host(src, producer);
  for (std::int32_t v : after) ASSERT_EQ(v, 9);
}

TEST(SimThreadsArrays, stream_order_on_one_state_from_eight_threads) {
  auto& b = backend();
  const sync::StreamRef producer = new_stream();
  auto state = std::make_shared<sync::SyncState>(producer);
  const std::uint64_t buf = b.alloc(MemoryKind::device, kBytes);
  b.memset_async(buf, 1, kBytes, producer.handle);
  run_threads([&](int) {
    const sync::StreamRef s = new_stream();
    for (int iter = 0; iter < 20; ++iter) {
      sync::StreamOrder order(b, s);
      order.add(*state);
      std::vector<std::uint8_t> host(kBytes);
      b.copy_async(addr(host.data()), buf, kBytes, s.handle);  // a read of buf on s
      order.finish();
      b.stream_synchronize(s.handle);
      sim::forget(addr(host.data()), kBytes);
      for (std::uint8_t v : host) ASSERT_EQ(v, 1);
    }
  });
  b.memset_async(buf, 2, kBytes, producer.handle);  // after every read: no race
  b.stream_synchronize(producer.handle);
  b.free(buf);
}

#endif  // CAI_SIM_THREADS_ALL_LAYERS

}  // namespace
}  // namespace cai::device::detail
