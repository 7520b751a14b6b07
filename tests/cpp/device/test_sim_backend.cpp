// The simulator backend: devices, memory and pointer attributes, each operation, streams,
// events, sticky errors, threads. Each test uses a private instance.

#include <gtest/gtest.h>

#include <atomic>
#include <complex>
#include <cstring>
#include <numeric>
#include <thread>
#include <vector>

#include "cai/device/simulator.h"
#include "cai_matchers.h"
#include "checks.h"
#include "test_sim_util.h"

namespace cai::device::detail {
namespace {

using cai::test::ThrowsCaiError;
using ::testing::HasSubstr;

using test::addr;
using test::dense;
using test::host_buffer;
using test::operand;

class SimBackendTest : public ::testing::Test {
 protected:
  std::unique_ptr<test::Simulator> sim = test::make_simulator();

  // Device buffer holding `host`, synchronized on the legacy stream.
  template <class T>
  std::uint64_t upload(const std::vector<T>& host) {
    std::uint64_t p = sim->alloc(MemoryKind::device, host.size() * sizeof(T));
    sim->copy_async(p, addr(host.data()), host.size() * sizeof(T), kLegacyDefaultStream);
    sim->stream_synchronize(kLegacyDefaultStream);
    return p;
  }
  template <class T>
  std::vector<T> download(std::uint64_t p, std::size_t n, StreamHandle s = kLegacyDefaultStream) {
    std::vector<T> out(n);
    sim->copy_async(addr(out.data()), p, n * sizeof(T), s);
    sim->stream_synchronize(s);
    return out;
  }
};

TEST_F(SimBackendTest, devices) {
  EXPECT_EQ(sim->name(), "simulator");
  EXPECT_EQ(sim->device_count(), 1);
  DeviceProperties p = sim->properties(0);
  EXPECT_EQ(p.name, "cai simulator");
  EXPECT_EQ(p.compute_major, 9);
  EXPECT_EQ(p.compute_minor, 0);
  EXPECT_GT(p.total_memory, 0u);
  EXPECT_GT(p.multiprocessors, 0);
  EXPECT_EQ(sim->current_device(), 0);
  EXPECT_THAT(
      [&] { sim->properties(1); },
      ThrowsCaiError(Errc::index_error, HasSubstr("device 1 out of range (1 simulated devices")));
  EXPECT_THAT([&] { sim->set_current_device(-1); },
              ThrowsCaiError(Errc::index_error, HasSubstr("device -1 out of range")));
  EXPECT_THAT([&] { test::Simulator(0); },
              ThrowsCaiError(Errc::value_error, HasSubstr("0 devices requested")));
}

TEST_F(SimBackendTest, pointer_info_of_interior_and_foreign_pointers) {
  const std::uint64_t d = sim->alloc(MemoryKind::device, 1000);
  const std::uint64_t h = sim->alloc(MemoryKind::pinned_host, 10);
  const std::uint64_t m = sim->alloc(MemoryKind::managed, 64);
  EXPECT_EQ(d % 256, 0u);
  EXPECT_EQ(h % 256, 0u);
  PointerInfo i = sim->pointer_info(d + 999);
  EXPECT_EQ(i.kind, MemoryKind::device);
  EXPECT_EQ(i.device, 0);
  EXPECT_NE(i.context, 0u);
  EXPECT_FALSE(i.host_accessible);
  EXPECT_TRUE(i.device_accessible);
  EXPECT_EQ(i.alloc_base, d);
  EXPECT_EQ(i.alloc_size, 1000u);
  i = sim->pointer_info(h + 3);
  EXPECT_EQ(i.kind, MemoryKind::pinned_host);
  EXPECT_TRUE(i.host_accessible);
  EXPECT_TRUE(i.device_accessible);
  EXPECT_EQ(i.alloc_base, h);
  i = sim->pointer_info(m);
  EXPECT_EQ(i.kind, MemoryKind::managed);
  EXPECT_TRUE(i.host_accessible);
  EXPECT_EQ(i.context, sim->pointer_info(d).context);
  // One past the end, pageable host memory, null: unregistered.
  int local = 0;
  for (std::uint64_t p : {d + 1000, addr(&local), std::uint64_t{0}}) {
    i = sim->pointer_info(p);
    EXPECT_EQ(i.kind, MemoryKind::unregistered);
    EXPECT_EQ(i.device, -1);
    EXPECT_FALSE(i.host_accessible);
    EXPECT_FALSE(i.device_accessible);
    EXPECT_EQ(i.alloc_base, 0u);
  }
  sim->free(d);
  EXPECT_EQ(sim->pointer_info(d + 1).kind, MemoryKind::unregistered);
  sim->free(h);
  sim->free(m);
}

// cuMemGetInfo: total is the device's address space, free what no allocation takes.
TEST_F(SimBackendTest, memory_info_counts_allocations) {
  const auto [free0, total] = sim->memory_info();
  EXPECT_EQ(total, sim->properties(0).total_memory);
  EXPECT_EQ(free0, total);
  const std::uint64_t p = sim->alloc(MemoryKind::device, 1 << 20);
  const auto [free1, total1] = sim->memory_info();
  EXPECT_EQ(total1, total);
  EXPECT_EQ(free1, free0 - (1 << 20));
  sim->free(p);
  EXPECT_EQ(sim->memory_info().first, free0);
  const std::uint64_t host = sim->alloc(MemoryKind::pinned_host, 4096);  // not device memory
  EXPECT_EQ(sim->memory_info().first, free0);
  sim->free(host);
}

TEST_F(SimBackendTest, alloc_and_free_errors) {
  EXPECT_EQ(sim->alloc(MemoryKind::device, 0), 0u);
  sim->free(0);
  EXPECT_THAT([&] { sim->alloc(MemoryKind::unregistered, 8); },
              ThrowsCaiError(Errc::value_error,
                             HasSubstr("allocates device, pinned_host or managed memory")));
  const std::uint64_t p = sim->alloc(MemoryKind::device, 64);
  EXPECT_THAT([&] { sim->free(p + 8); },
              ThrowsCaiError(Errc::value_error, HasSubstr("is inside the allocation at")));
  int local = 0;
  EXPECT_THAT([&] { sim->free(addr(&local)); },
              ThrowsCaiError(Errc::value_error, HasSubstr("is not CUDA memory")));
  sim->free(p);
  EXPECT_THAT([&] { sim->free(p); },
              ThrowsCaiError(Errc::value_error, HasSubstr("is not CUDA memory")));
}

TEST_F(SimBackendTest, memset_and_copy) {
  const std::uint64_t d = sim->alloc(MemoryKind::device, 16);
  sim->memset_async(d, 0x5a, 16, kLegacyDefaultStream);
  sim->memset_async(d + 4, 0x01, 4, kLegacyDefaultStream);
  std::vector<std::uint8_t> got = download<std::uint8_t>(d, 16);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(got[i], (i >= 4 && i < 8) ? 0x01 : 0x5a) << i;
  // Host -> device -> pinned -> host.
  std::vector<std::uint32_t> src(100);
  std::iota(src.begin(), src.end(), 7u);
  const std::uint64_t dev = upload(src);
  const std::uint64_t pinned = sim->alloc(MemoryKind::pinned_host, 400);
  sim->copy_async(pinned, dev, 400, kLegacyDefaultStream);
  EXPECT_EQ(download<std::uint32_t>(pinned, 100), src);
  // Zero-byte operations are accepted, even with null pointers.
  sim->copy_async(0, 0, 0, kLegacyDefaultStream);
  sim->memset_async(0, 0, 0, kLegacyDefaultStream);
  sim->stream_synchronize(kLegacyDefaultStream);
}

TEST_F(SimBackendTest, kernels_reject_memory_the_device_cannot_reach) {
  std::vector<char> host(64);
  EXPECT_THAT([&] { sim->memset_async(addr(host.data()), 0, 64, kLegacyDefaultStream); },
              ThrowsCaiError(Errc::device_error, HasSubstr("memset_async(): dst [0x")));
  EXPECT_THAT([&] { sim->memset_async(addr(host.data()), 0, 64, kLegacyDefaultStream); },
              ThrowsCaiError(Errc::device_error, HasSubstr("is not CUDA memory")));
  const std::uint64_t d = sim->alloc(MemoryKind::device, 64);
  EXPECT_THAT([&] { sim->memset_async(d + 32, 0, 64, kLegacyDefaultStream); },
              ThrowsCaiError(Errc::device_error, HasSubstr("runs past the end of its allocation")));
  EXPECT_THAT([&] { sim->copy_async(addr(host.data()), d, 65, kLegacyDefaultStream); },
              ThrowsCaiError(Errc::device_error, HasSubstr("copy_async(): src")));
  const float one = 1;
  EXPECT_THAT([&] { sim->fill_async(operand(d + 16, {4}, {16}, 4), &one, kLegacyDefaultStream); },
              ThrowsCaiError(Errc::device_error, HasSubstr("fill_async(): dst")));
  EXPECT_THAT([&] { sim->fill_async(operand(d, {4}, {16}, 4), nullptr, kLegacyDefaultStream); },
              ThrowsCaiError(Errc::value_error, HasSubstr("value is a null pointer")));
  const Operand ops[] = {dense(d, {4}, 4), host_buffer(host.data(), {4}, 4), dense(d, {4}, 4)};
  EXPECT_THAT(
      [&] {
        sim->elementwise_async(ElementwiseOp::add, ElementType::f32, ops, kLegacyDefaultStream);
      },
      ThrowsCaiError(Errc::device_error, HasSubstr("add_async(): a [0x")));
  EXPECT_THAT(
      [&] {
        sim->copy_strided_async(dense(d, {4}, 4), dense(d, {2, 2}, 4), kLegacyDefaultStream);
      },
      ThrowsCaiError(
          Errc::value_error,
          HasSubstr("copy_strided_async(): src has shape (2, 2) but dst has shape (4,)")));
  EXPECT_THAT(
      [&] { sim->copy_strided_async(dense(d, {4}, 4), dense(d, {4}, 2), kLegacyDefaultStream); },
      ThrowsCaiError(Errc::value_error, HasSubstr("src has item size 2 but dst has 4")));
  sim->stream_synchronize(kLegacyDefaultStream);
}

// Array data must lie inside one live allocation of the simulator; only the host buffer of a
// host copy may be pageable host memory. Nothing is touched before the check.
TEST_F(SimBackendTest, wild_pointers_are_refused_before_any_work) {
  const std::uint64_t d = sim->alloc(MemoryKind::device, 64);
  std::vector<std::uint8_t> host(64, 0xee);
  const std::uint64_t wild = 0x1000;
  // A foreign pointer as array data, for each operation; the message names the operand, the
  // pointer and its range.
  EXPECT_THAT(
      [&] {
        sim->copy_strided_async(host_buffer(host.data(), {8}, 8), dense(wild, {8}, 8),
                                kLegacyDefaultStream);
      },
      ThrowsCaiError(
          Errc::device_error,
          HasSubstr("copy_strided_async(): src [0x1000+64) is not CUDA memory (a foreign or "
                    "freed pointer, or pageable host memory)")));
  EXPECT_THAT(
      [&] { sim->copy_strided_async(dense(wild, {8}, 8), dense(d, {8}, 8), kLegacyDefaultStream); },
      ThrowsCaiError(Errc::device_error, HasSubstr("copy_strided_async(): dst [0x1000+64)")));
  const std::uint64_t v = 5;
  EXPECT_THAT([&] { sim->fill_async(dense(wild, {8}, 8), &v, kLegacyDefaultStream); },
              ThrowsCaiError(Errc::device_error, HasSubstr("fill_async(): dst [0x1000+64)")));
  // Pageable host memory is array data only when marked as the host buffer of a copy.
  EXPECT_THAT(
      [&] {
        sim->copy_strided_async(dense(d, {8}, 8), dense(addr(host.data()), {8}, 8),
                                kLegacyDefaultStream);
      },
      ThrowsCaiError(Errc::device_error, HasSubstr("src")));
  // A view reaching past its allocation: the allocation is named.
  EXPECT_THAT(
      [&] {
        sim->copy_strided_async(host_buffer(host.data(), {8}, 8), operand(d + 8, {8}, {8}, 8),
                                kLegacyDefaultStream);
      },
      ThrowsCaiError(Errc::device_error,
                     HasSubstr("runs past the end of its allocation [" + hex(d) + "+64)")));
  EXPECT_THAT(
      [&] { sim->fill_async(operand(d + 56, {2}, {-64}, 8), &v, kLegacyDefaultStream); },
      ThrowsCaiError(Errc::device_error, HasSubstr("fill_async(): dst [" + hex(d - 8) + "+72)")));
  // A host buffer running into an allocation.
  EXPECT_THAT(
      [&] {
        sim->copy_strided_async(dense(d - 8, {8}, 8, true), dense(d, {8}, 8), kLegacyDefaultStream);
      },
      ThrowsCaiError(Errc::device_error, HasSubstr("starts outside the allocation")));
  // Memory freed by its producer.
  const std::uint64_t freed = sim->alloc(MemoryKind::device, 64);
  sim->free(freed);
  EXPECT_THAT(
      [&] {
        sim->copy_strided_async(host_buffer(host.data(), {8}, 8), dense(freed, {8}, 8),
                                kLegacyDefaultStream);
      },
      ThrowsCaiError(Errc::device_error, HasSubstr("a foreign or freed pointer")));
  sim->stream_synchronize(kLegacyDefaultStream);
  for (std::uint8_t b : host) ASSERT_EQ(b, 0xee);  // nothing was written
  // Inside the allocation, every form is accepted.
  sim->copy_strided_async(host_buffer(host.data(), {8}, 8), dense(d, {8}, 8), kLegacyDefaultStream);
  sim->stream_synchronize(kLegacyDefaultStream);
  sim->free(d);
}

TEST_F(SimBackendTest, stream_ordered_memory) {
  const StreamHandle s = sim->stream_create(false);
  const std::uint64_t t = sim->alloc_async(64, s);
  EXPECT_EQ(sim->pointer_info(t + 63).alloc_base, t);
  const std::uint64_t v = 9;
  sim->fill_async(dense(t, {8}, 8), &v, s);
  std::vector<std::uint64_t> host(8);
  sim->copy_strided_async(host_buffer(host.data(), {8}, 8), dense(t, {8}, 8), s);
  sim->free_async(t, s);  // returns at once, runs after the copy
  // Gone for every later operation at once. What the driver says of it is undefined until
  // its addresses are given out again: the simulator refuses to answer, naming the rule.
  EXPECT_THAT([&] { sim->pointer_info(t); },
              ThrowsCaiError(Errc::device_error, HasSubstr("undefined on a real driver")));
  EXPECT_THAT([&] { sim->fill_async(dense(t, {8}, 8), &v, s); },
              ThrowsCaiError(Errc::device_error, HasSubstr("freed by cuMemFreeAsync")));
  EXPECT_THAT([&] { sim->free_async(t, s); },
              ThrowsCaiError(Errc::value_error, HasSubstr("is not the start of an allocation")));
  sim->stream_synchronize(s);
  EXPECT_EQ(host, std::vector<std::uint64_t>(8, 9));
  // A stream-ordered free races with unordered work of another stream on the memory.
  const StreamHandle other = sim->stream_create(false);
  const std::uint64_t u = sim->alloc_async(64, s);
  sim->fill_async(dense(u, {8}, 8), &v, other);
  EXPECT_THAT([&] { sim->free_async(u, s); },
              ThrowsCaiError(Errc::race, HasSubstr("cuMemFreeAsync on stream")));
  sim->stream_synchronize(other);
  sim->free_async(u, s);
  sim->stream_synchronize(s);
  sim->stream_destroy(s);
  sim->stream_destroy(other);
}

TEST_F(SimBackendTest, fill_every_itemsize) {
  for (std::int64_t itemsize : {1, 2, 3, 4, 8, 16, 24}) {
    const auto bytes = static_cast<std::size_t>(10 * itemsize);
    const std::uint64_t d = sim->alloc(MemoryKind::device, bytes);
    sim->memset_async(d, 0, bytes, kLegacyDefaultStream);
    std::vector<std::uint8_t> value(static_cast<std::size_t>(itemsize));
    std::iota(value.begin(), value.end(), std::uint8_t{1});
    // Every other element.
    sim->fill_async(operand(d, {5}, {2 * itemsize}, itemsize), value.data(), kLegacyDefaultStream);
    value.assign(value.size(), 0);  // the value was copied at enqueue
    std::vector<std::uint8_t> got = download<std::uint8_t>(d, bytes);
    for (std::size_t i = 0; i < bytes; ++i) {
      const std::size_t elem = i / static_cast<std::size_t>(itemsize);
      const std::size_t byte = i % static_cast<std::size_t>(itemsize);
      EXPECT_EQ(got[i], elem % 2 == 0 ? byte + 1 : 0) << itemsize << " " << i;
    }
    sim->free(d);
  }
}

template <class T>
void check_add(test::Simulator& sim, ElementType type, std::vector<T> a, std::vector<T> b,
               std::vector<T> want) {
  const std::size_t n = a.size();
  const std::uint64_t da = sim.alloc(MemoryKind::device, n * sizeof(T));
  const std::uint64_t db = sim.alloc(MemoryKind::managed, n * sizeof(T));
  const std::uint64_t dout = sim.alloc(MemoryKind::pinned_host, n * sizeof(T));
  sim.copy_async(da, addr(a.data()), n * sizeof(T), kLegacyDefaultStream);
  sim.copy_async(db, addr(b.data()), n * sizeof(T), kLegacyDefaultStream);
  const auto count = static_cast<std::int64_t>(n);
  const Operand ops[] = {dense(dout, {count}, sizeof(T)), dense(da, {count}, sizeof(T)),
                         dense(db, {count}, sizeof(T))};
  sim.elementwise_async(ElementwiseOp::add, type, ops, kLegacyDefaultStream);
  std::vector<T> got(n);
  sim.copy_async(addr(got.data()), dout, n * sizeof(T), kLegacyDefaultStream);
  sim.stream_synchronize(kLegacyDefaultStream);
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), n * sizeof(T))) << info(type).name;
  sim.free(da);
  sim.free(db);
  sim.free(dout);
}

TEST_F(SimBackendTest, add_every_element_type) {
  check_add<std::uint8_t>(*sim, ElementType::b8, {0, 1, 0, 3}, {0, 0, 1, 4}, {0, 1, 1, 1});
  check_add<std::int8_t>(*sim, ElementType::i8, {100, -1}, {100, 1}, {-56, 0});
  check_add<std::int16_t>(*sim, ElementType::i16, {30000, -1}, {30000, 1}, {-5536, 0});
  check_add<std::int32_t>(*sim, ElementType::i32, {1, -1}, {2, 1}, {3, 0});
  check_add<std::int64_t>(*sim, ElementType::i64, {1ll << 40, -1}, {1, 1}, {(1ll << 40) + 1, 0});
  check_add<std::uint8_t>(*sim, ElementType::u8, {255}, {2}, {1});
  check_add<std::uint16_t>(*sim, ElementType::u16, {65535}, {2}, {1});
  check_add<std::uint32_t>(*sim, ElementType::u32, {7}, {8}, {15});
  check_add<std::uint64_t>(*sim, ElementType::u64, {~0ull}, {1}, {0});
  check_add<std::uint16_t>(*sim, ElementType::f16, {0x3800}, {0x3400}, {0x3a00});  // .5+.25
  check_add<float>(*sim, ElementType::f32, {0.5f, 1e38f}, {0.25f, 1e38f}, {0.75f, 2e38f});
  check_add<double>(*sim, ElementType::f64, {0.5}, {0.25}, {0.75});
  check_add<std::complex<float>>(*sim, ElementType::c64, {{1, 2}}, {{3, 4}}, {{4, 6}});
  check_add<std::complex<double>>(*sim, ElementType::c128, {{1, 2}}, {{3, -4}}, {{4, -2}});
}

TEST_F(SimBackendTest, stream_handles) {
  const StreamHandle a = sim->stream_create(false);
  const StreamHandle b = sim->stream_create(true);
  EXPECT_GT(a, 2u);
  EXPECT_GT(b, 2u);
  EXPECT_NE(a, b);
  EXPECT_TRUE(sim->stream_query(a));
  sim->stream_synchronize(b);
  sim->stream_destroy(a);
  char text[64];
  std::snprintf(text, sizeof text, "stream 0x%llx: not a stream of the simulator",
                static_cast<unsigned long long>(a));
  EXPECT_THAT([&] { sim->stream_synchronize(a); },
              ThrowsCaiError(Errc::device_error, HasSubstr(text)));
  EXPECT_THAT(
      [&] { sim->stream_query(0x1234); },
      ThrowsCaiError(Errc::device_error,
                     HasSubstr("cuStreamQuery failed: CUDA_ERROR_INVALID_HANDLE (invalid resource "
                               "handle): stream 0x1234: not a stream of the simulator")));
  EXPECT_THAT([&] { sim->stream_synchronize(0); },
              ThrowsCaiError(Errc::value_error, HasSubstr("stream 0 is not allowed")));
  EXPECT_THAT([&] { sim->memset_async(1, 0, 0, 0); },
              ThrowsCaiError(Errc::value_error, HasSubstr("stream 0 is not allowed")));
  EXPECT_THAT([&] { sim->stream_destroy(kLegacyDefaultStream); },
              ThrowsCaiError(Errc::value_error, HasSubstr("cannot be destroyed")));
  EXPECT_THAT([&] { sim->stream_destroy(kPerThreadDefaultStream); },
              ThrowsCaiError(Errc::value_error, HasSubstr("cannot be destroyed")));
  EXPECT_TRUE(sim->stream_query(kLegacyDefaultStream));
  EXPECT_TRUE(sim->stream_query(kPerThreadDefaultStream));
  sim->stream_destroy(b);
}

TEST_F(SimBackendTest, enqueue_returns_before_a_delayed_producer_finishes) {
  const StreamHandle producer = sim->stream_create(true);
  const StreamHandle consumer = sim->stream_create(true);
  const std::uint64_t d = sim->alloc(MemoryKind::device, 256);
  const std::uint64_t out = sim->alloc(MemoryKind::pinned_host, 256);
  sim->delay(producer, 0.5);
  sim->memset_async(d, 7, 256, producer);
  const EventHandle done = sim->event_create(false);
  sim->event_record(done, producer);
  sim->stream_wait_event(consumer, done);
  sim->copy_async(out, d, 256, consumer);
  // The host got here at once: both streams still have work ahead of them.
  EXPECT_FALSE(sim->stream_query(producer));
  EXPECT_FALSE(sim->stream_query(consumer));
  EXPECT_FALSE(sim->event_query(done));
  sim->stream_synchronize(consumer);
  // The consumer waited for the producer in real execution too.
  EXPECT_TRUE(sim->event_query(done));
  std::vector<std::uint8_t> got(256);
  std::memcpy(got.data(), reinterpret_cast<void*>(out), 256);
  for (std::uint8_t v : got) ASSERT_EQ(v, 7);
  sim->event_destroy(done);
  sim->stream_destroy(producer);
  sim->stream_destroy(consumer);
}

TEST_F(SimBackendTest, events) {
  const EventHandle e = sim->event_create(true);
  // Never recorded: complete; synchronize and wait are no-ops.
  EXPECT_TRUE(sim->event_query(e));
  sim->event_synchronize(e);
  sim->stream_wait_event(kLegacyDefaultStream, e);
  EXPECT_THAT([&] { sim->event_elapsed_ms(e, e); },
              ThrowsCaiError(Errc::device_error, HasSubstr("has not been recorded")));
  const EventHandle start = sim->event_create(true);
  const StreamHandle s = sim->stream_create(false);
  sim->event_record(start, s);
  sim->delay(s, 0.05);
  sim->event_record(e, s);
  EXPECT_FALSE(sim->event_query(e));
  EXPECT_THAT([&] { sim->event_elapsed_ms(start, e); },
              ThrowsCaiError(Errc::device_error, HasSubstr("has not completed yet")));
  sim->event_synchronize(e);
  EXPECT_TRUE(sim->stream_query(s));
  // The delay lies between the two records (sleep_for sleeps at least that long).
  EXPECT_GE(sim->event_elapsed_ms(start, e), 49.0f);
  EXPECT_LE(sim->event_elapsed_ms(e, start), -49.0f);
  const EventHandle plain = sim->event_create(false);
  sim->event_record(plain, s);
  sim->event_synchronize(plain);
  EXPECT_THAT([&] { sim->event_elapsed_ms(start, plain); },
              ThrowsCaiError(Errc::device_error, HasSubstr("was created without timing")));
  // Re-recording moves the event to the new position.
  sim->delay(s, 0.3);
  sim->event_record(plain, s);
  EXPECT_FALSE(sim->event_query(plain));
  sim->event_destroy(plain);
  EXPECT_THAT([&] { sim->event_query(plain); },
              ThrowsCaiError(Errc::device_error, HasSubstr("not an event of the simulator")));
  sim->event_destroy(e);
  sim->event_destroy(start);
  sim->stream_destroy(s);
}

TEST_F(SimBackendTest, task_failures_are_reported_by_the_next_synchronize) {
  const StreamHandle s = sim->stream_create(false);
  std::atomic<int> ran{0};
  sim->enqueue_task(
      s, {}, [] { throw std::runtime_error("kernel exploded"); }, "my_kernel");
  sim->enqueue_task(s, {}, [&] { ++ran; });  // later work still runs
  EXPECT_THAT([&] { sim->stream_synchronize(s); },
              ThrowsCaiError(Errc::device_error,
                             HasSubstr("cuStreamSynchronize failed: CUDA_ERROR_LAUNCH_FAILED "
                                       "(unspecified launch failure): my_kernel on stream 0x")));
  EXPECT_EQ(ran.load(), 1);
  sim->stream_synchronize(s);  // reported once
  // Through an event recorded after it.
  const EventHandle e = sim->event_create(false);
  sim->enqueue_task(s, {}, [] { throw std::runtime_error("again"); });
  sim->event_record(e, s);
  EXPECT_THAT([&] { sim->event_synchronize(e); },
              ThrowsCaiError(Errc::device_error, HasSubstr("failed: again")));
  // Through the device.
  sim->enqueue_task(
      s, {}, [] { throw 42; }, "odd");
  EXPECT_THAT([&] { sim->synchronize(); },
              ThrowsCaiError(Errc::device_error, HasSubstr("odd on stream")));
  sim->synchronize();
  EXPECT_THAT([&] { sim->enqueue_task(s, {}, std::function<void()>()); },
              ThrowsCaiError(Errc::value_error, HasSubstr("the task is empty")));
  EXPECT_THAT([&] { sim->delay(s, -1); },
              ThrowsCaiError(Errc::value_error, HasSubstr("delay(): seconds must be")));
  sim->event_destroy(e);
  sim->stream_destroy(s);
}

TEST_F(SimBackendTest, legacy_stream_waits_for_blocking_streams_in_real_execution) {
  const StreamHandle blocking = sim->stream_create(false);
  std::atomic<int> value{0};
  int seen = -1;
  sim->delay(blocking, 0.3);
  sim->enqueue_task(blocking, {}, [&] { value = 1; });
  sim->enqueue_task(kLegacyDefaultStream, {}, [&] { seen = value.load(); });
  sim->stream_synchronize(kLegacyDefaultStream);
  EXPECT_EQ(seen, 1);
  // And later blocking work waits for the legacy stream.
  sim->delay(kLegacyDefaultStream, 0.3);
  sim->enqueue_task(kLegacyDefaultStream, {}, [&] { value = 2; });
  sim->enqueue_task(blocking, {}, [&] { seen = value.load(); });
  sim->stream_synchronize(blocking);
  EXPECT_EQ(seen, 2);
  sim->stream_destroy(blocking);
}

TEST_F(SimBackendTest, non_blocking_streams_do_not_wait_for_the_legacy_stream) {
  const StreamHandle nb = sim->stream_create(true);
  sim->delay(nb, 0.5);
  sim->enqueue_task(kLegacyDefaultStream, {}, [] {});
  sim->stream_synchronize(kLegacyDefaultStream);
  EXPECT_FALSE(sim->stream_query(nb));  // the legacy work finished first
  sim->stream_destroy(nb);
}

TEST_F(SimBackendTest, per_thread_default_streams_are_distinct) {
  std::atomic<bool> busy{false};
  std::thread a([&] {
    sim->delay(kPerThreadDefaultStream, 0.5);
    busy = !sim->stream_query(kPerThreadDefaultStream);
    std::thread b([&] {
      // Another thread's per-thread stream is idle.
      EXPECT_TRUE(sim->stream_query(kPerThreadDefaultStream));
    });
    b.join();
    sim->stream_synchronize(kPerThreadDefaultStream);
  });
  a.join();
  EXPECT_TRUE(busy.load());
  EXPECT_TRUE(sim->stream_query(kPerThreadDefaultStream));
  sim->synchronize();
}

TEST_F(SimBackendTest, several_devices) {
  auto two = test::make_simulator(2);
  EXPECT_EQ(two->device_count(), 2);
  two->set_current_device(1);
  EXPECT_EQ(two->current_device(), 1);
  const std::uint64_t p = two->alloc(MemoryKind::device, 8);
  EXPECT_EQ(two->pointer_info(p).device, 1);
  const StreamHandle s = two->stream_create(false);
  std::thread([&] { EXPECT_EQ(two->current_device(), 0); }).join();  // per host thread
  // Device 1's legacy stream does not wait for device 0's blocking streams.
  two->set_current_device(0);
  const std::uint64_t q = two->alloc(MemoryKind::device, 8);
  EXPECT_EQ(two->pointer_info(q).device, 0);
  EXPECT_NE(two->pointer_info(q).context, two->pointer_info(p).context);
  const StreamHandle s0 = two->stream_create(false);
  two->delay(s0, 0.5);
  two->set_current_device(1);
  two->enqueue_task(kLegacyDefaultStream, {}, [] {});
  two->stream_synchronize(kLegacyDefaultStream);
  EXPECT_FALSE(two->stream_query(s0));
  two->memset_async(p, 1, 8, s);
  two->synchronize();
  two->free(p);
  two->free(q);
}

TEST_F(SimBackendTest, many_threads_at_once) {
  constexpr int kThreads = 4, kRounds = 50;
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const StreamHandle s = sim->stream_create(t % 2 == 0);
      const std::uint64_t d = sim->alloc(MemoryKind::device, 1024);
      std::vector<std::uint8_t> host(1024);
      for (int r = 0; r < kRounds; ++r) {
        sim->memset_async(d, r + t, 1024, s);
        sim->copy_async(addr(host.data()), d, 1024, s);
        sim->stream_synchronize(s);
        if (host[0] != static_cast<std::uint8_t>(r + t) ||
            host[1023] != static_cast<std::uint8_t>(r + t)) {
          ++bad;
        }
      }
      sim->stream_destroy(s);
      sim->free(d);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
}

TEST(sim_backend_lifetime, destruction_drains_pending_work) {
  std::atomic<bool> ran{false};
  {
    auto sim = test::make_simulator();
    const StreamHandle s = sim->stream_create(false);
    sim->delay(s, 0.05);
    sim->enqueue_task(s, {}, [&] { ran = true; });
    sim->stream_destroy(s);  // returns at once; the work still runs
  }
  EXPECT_TRUE(ran.load());
}

TEST(sim_backend_lifetime, thread_exit_releases_per_thread_streams) {
  auto sim = test::make_simulator();
  std::atomic<int> ran{0};
  for (int i = 0; i < 8; ++i) {
    std::thread([&] { sim->enqueue_task(kPerThreadDefaultStream, {}, [&] { ++ran; }); }).join();
  }
  sim->synchronize();
  EXPECT_EQ(ran.load(), 8);
}

}  // namespace
}  // namespace cai::device::detail
