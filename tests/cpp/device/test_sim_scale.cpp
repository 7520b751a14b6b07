// The simulator across devices and processes (docs/scale-out.md): the shared device heap,
// several devices with distinct memory, stream and event devices, peer copies, and IPC memory
// and event handles between two real processes (fork; the child uses only its own simulator).

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <future>
#include <numeric>
#include <thread>
#include <vector>

#include "cai_matchers.h"
#include "sim/device_heap.h"
#include "test_sim_util.h"

#if defined(CAI_TEST_COVERAGE)
extern "C" void __gcov_dump();  // libgcov, in a --coverage build
#endif

namespace cai::device::detail {
namespace {

using cai::test::ThrowsCaiError;
using test::addr;
using ::testing::HasSubstr;

TEST(device_heap_test, allocates_merges_and_hands_freed_addresses_out_last) {
  sim::DeviceHeap heap(std::size_t{1} << 20);
  const std::uint64_t a = heap.allocate(100), b = heap.allocate(5000), c = heap.allocate(1);
  ASSERT_NE(a, 0u);
  ASSERT_NE(b, 0u);
  ASSERT_NE(c, 0u);
  for (std::uint64_t p : {a, b, c}) {
    EXPECT_EQ(p % sim::DeviceHeap::alignment, 0u);
    EXPECT_TRUE(heap.contains(p));
  }
  // The CPU reaches the memory at its alias; the device address itself is not readable.
  std::memset(heap.alias(b), 0x5a, 5000);
  EXPECT_EQ(static_cast<unsigned char>(heap.alias(b)[4999]), 0x5a);
  EXPECT_NE(reinterpret_cast<std::uint64_t>(heap.alias(b)), b);
  heap.release(b, 5000);
  // A freed address is not handed out again while the rest of the space is free: a stale
  // pointer to b finds no allocation instead of a new one.
  const std::uint64_t d = heap.allocate(4000);
  EXPECT_NE(d, b);
  EXPECT_GT(d, c);
  heap.release(a, 100);
  heap.release(d, 4000);
  heap.release(c, 1);
  // Everything merged back into one block: the whole capacity is free again.
  const std::uint64_t all = heap.allocate(std::size_t{1} << 20);
  EXPECT_NE(all, 0u);
  EXPECT_EQ(heap.allocate(1), 0u);  // full
  heap.release(all, std::size_t{1} << 20);
  EXPECT_EQ(heap.allocate((std::size_t{1} << 20) + 1), 0u);  // larger than the heap
  // Once the cursor reaches the end, the space is used from the start again.
  const std::uint64_t x = heap.allocate(std::size_t{1} << 19);
  const std::uint64_t y = heap.allocate(std::size_t{1} << 19);
  heap.release(x, std::size_t{1} << 19);
  EXPECT_EQ(heap.allocate(256), x);
  heap.release(y, std::size_t{1} << 19);
}

class SimScaleTest : public ::testing::Test {
 protected:
  std::unique_ptr<test::Simulator> sim = test::make_simulator(2);

  std::vector<int> download(std::uint64_t p, std::size_t n) {
    std::vector<int> out(n);
    sim->copy_async(addr(out.data()), p, n * sizeof(int), kLegacyDefaultStream);
    sim->stream_synchronize(kLegacyDefaultStream);
    return out;
  }
};

TEST_F(SimScaleTest, devices_have_distinct_memory_streams_and_events) {
  const std::uint64_t d0 = sim->alloc(MemoryKind::device, 64);
  sim->set_current_device(1);
  const std::uint64_t d1 = sim->alloc(MemoryKind::device, 64);
  const StreamHandle s1 = sim->stream_create(true);
  const EventHandle e1 = sim->event_create(false);
  EXPECT_EQ(sim->pointer_info(d0).device, 0);
  EXPECT_EQ(sim->pointer_info(d1).device, 1);
  EXPECT_EQ(sim->stream_device(s1), 1);
  EXPECT_EQ(sim->stream_device(kLegacyDefaultStream), 1);  // the current device's
  EXPECT_NE(sim->properties(0).uuid, sim->properties(1).uuid);
  sim->set_current_device(0);
  EXPECT_EQ(sim->stream_device(kLegacyDefaultStream), 0);
  const EventHandle e0 = sim->event_create(false);
  EXPECT_THAT([&] { sim->event_record(e0, s1); },
              ThrowsCaiError(Errc::device_error, HasSubstr("belongs to device 0 but stream")));
  sim->event_record(e1, s1);
  sim->stream_wait_event(kLegacyDefaultStream, e1);  // waiting across devices is allowed
  sim->synchronize();
  sim->event_destroy(e0);
  sim->event_destroy(e1);
  sim->stream_destroy(s1);
  sim->free(d0);
  sim->free(d1);
}

TEST_F(SimScaleTest, peer_copy_checks_each_side_device) {
  std::vector<int> host(16);
  std::iota(host.begin(), host.end(), 0);
  const std::uint64_t d0 = sim->alloc(MemoryKind::device, 64);
  sim->copy_async(d0, addr(host.data()), 64, kLegacyDefaultStream);
  sim->synchronize();  // device 0's legacy stream is not ordered with device 1's
  sim->set_current_device(1);
  const std::uint64_t d1 = sim->alloc(MemoryKind::device, 64);
  sim->copy_peer_async(d1, 1, d0, 0, 64, kLegacyDefaultStream);
  sim->synchronize();
  EXPECT_EQ(download(d1, 16), host);
  EXPECT_THAT([&] { sim->copy_peer_async(d1, 0, d0, 0, 64, kLegacyDefaultStream); },
              ThrowsCaiError(Errc::device_error, HasSubstr("dst at")));
  EXPECT_THAT([&] { sim->copy_peer_async(d1, 1, d0, 1, 64, kLegacyDefaultStream); },
              ThrowsCaiError(Errc::device_error,
                             HasSubstr("src at " + test::hex(d0) +
                                       " is not device memory of the context's device 1")));
  EXPECT_THAT([&] { sim->copy_peer_async(d1, 2, d0, 0, 64, kLegacyDefaultStream); },
              ThrowsCaiError(Errc::index_error, HasSubstr("device 2 out of range")));
  sim->free(d0);
  sim->free(d1);
}

TEST_F(SimScaleTest, ipc_handles_refuse_what_cannot_be_shared) {
  const std::uint64_t pinned = sim->alloc(MemoryKind::pinned_host, 64);
  EXPECT_THAT([&] { sim->ipc_export_memory(pinned); },
              ThrowsCaiError(Errc::device_error, HasSubstr("not device memory")));
  const std::uint64_t d = sim->alloc(MemoryKind::device, 64);
  EXPECT_THAT([&] { sim->ipc_export_memory(d + 8); },
              ThrowsCaiError(Errc::value_error, HasSubstr("pass its start")));
  // A handle of this process is refused by name (CUDA fails the same way).
  EXPECT_THAT([&] { sim->ipc_open_memory(sim->ipc_export_memory(d)); },
              ThrowsCaiError(Errc::device_error, HasSubstr("exported by this process")));
  IpcMemoryHandle garbage;
  garbage.bytes.fill(7);
  EXPECT_THAT([&] { sim->ipc_open_memory(garbage); },
              ThrowsCaiError(Errc::device_error, HasSubstr("not a simulator memory handle")));
  EXPECT_THAT([&] { sim->ipc_close_memory(d); },
              ThrowsCaiError(Errc::value_error, HasSubstr("not memory opened by ipc_open_memory")));
  const EventHandle plain = sim->event_create(false);
  EXPECT_THAT(
      [&] { sim->ipc_export_event(plain); },
      ThrowsCaiError(Errc::device_error, HasSubstr("was not created with CU_EVENT_INTERPROCESS")));
  sim->event_destroy(plain);
  sim->free(pinned);
  sim->free(d);
}

// Runs `child` in a forked process with a simulator of its own. The child reports failures
// through its exit code (gtest assertions do not cross a fork); wait_child returns it.
template <class F>
pid_t start_child(F child) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    int code = 99;
    try {
      code = child();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child: %s\n", e.what());
    }
#if defined(CAI_TEST_COVERAGE)
    __gcov_dump();  // _exit skips the write of the line counts at exit
#endif
    ::_exit(code);
  }
  return pid;
}

int wait_child(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
}

TEST_F(SimScaleTest, another_process_maps_the_memory_and_waits_for_the_event) {
#if defined(__SANITIZE_THREAD__)
  // ThreadSanitizer cannot start threads in the forked child of a threaded process; the
  // Python tests cover IPC between spawned processes.
  GTEST_SKIP() << "fork with threads under ThreadSanitizer";
#endif
  std::vector<int> host(256);
  std::iota(host.begin(), host.end(), 0);
  sim->set_current_device(1);
  const std::uint64_t d = sim->alloc(MemoryKind::device, host.size() * sizeof(int));
  sim->copy_async(d, addr(host.data()), host.size() * sizeof(int), kLegacyDefaultStream);
  const StreamHandle s = sim->stream_create(true);
  // The exporter's next write waits for a pipe: it is pending while the child looks.
  int release[2];
  ASSERT_EQ(::pipe(release), 0);
  sim->synchronize();
  sim->enqueue_task(
      s, {},
      [fd = release[0]] {
        char c;
        (void)::read(fd, &c, 1);
      },
      "gate");
  sim->memset_async(d, 0x11, 16, s);
  const EventHandle e = sim->ipc_event_create();
  sim->event_record(e, s);
  const IpcMemoryHandle mh = sim->ipc_export_memory(d);
  const IpcEventHandle eh = sim->ipc_export_event(e);
  int answer[2];
  ASSERT_EQ(::pipe(answer), 0);

  const pid_t child = start_child([&] {
    auto mine = test::make_simulator(1);
    const std::uint64_t p = mine->ipc_open_memory(mh);
    if (p == d) return 1;  // another mapping, at another address in general
    if (mine->pointer_info(p).kind != MemoryKind::device) return 2;
    // Pinned memory: a copy to pageable memory would wait for the stream before returning.
    // Allocated first: cuMemAllocHost waits for the device, as on the driver.
    const std::uint64_t seen = mine->alloc(MemoryKind::pinned_host, 16);
    const EventHandle ev = mine->ipc_open_event(eh);
    const StreamHandle cs = mine->stream_create(true);
    mine->stream_wait_event(cs, ev);
    mine->copy_async(seen, p, 16, cs);
    const bool waiting = !mine->stream_query(cs) && !mine->event_query(ev);
    const char c = waiting ? 'w' : 'x';
    if (::write(answer[1], &c, 1) != 1) return 3;
    mine->stream_synchronize(cs);  // the parent releases its stream after the answer
    if (!waiting) return 4;
    for (int i = 0; i < 4; ++i) {
      if (reinterpret_cast<const int*>(seen)[i] != 0x11111111) return 5;
    }
    mine->free(seen);
    mine->memset_async(p + 16, 0x22, 4, cs);  // a write the parent sees
    mine->stream_synchronize(cs);
    mine->event_destroy(ev);
    mine->stream_destroy(cs);
    mine->ipc_close_memory(p);
    return 0;
  });
  // Only the child writes answers: a child that dies makes the read return 0, not hang.
  ::close(answer[1]);
  char c = 0;
  const ssize_t got = ::read(answer[0], &c, 1);  // the child's stream waits for ours
  ASSERT_EQ(::write(release[1], "g", 1), 1);
  ::close(answer[0]);
  ::close(release[1]);
  EXPECT_EQ(wait_child(child), 0);
  ASSERT_EQ(got, 1);
  EXPECT_EQ(c, 'w');
  sim->synchronize();  // the gate has read its byte
  ::close(release[0]);
  EXPECT_EQ(download(d, 5)[4], 0x22222222);
  sim->event_destroy(e);
  sim->stream_destroy(s);
  sim->free(d);
}

TEST_F(SimScaleTest, memory_closed_again_while_an_earlier_close_runs_reads_as_freed) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "fork with threads under ThreadSanitizer";
#endif
  // Open, close (queued), open again, close again: the first close ending must not make the
  // memory read as live while the second is still queued.
  const std::uint64_t d = sim->alloc(MemoryKind::device, 4096);
  const IpcMemoryHandle mh = sim->ipc_export_memory(d);
  const pid_t child = start_child([&] {
    auto mine = test::make_simulator(1);
    const StreamHandle s = mine->stream_create(false);
    // Each close waits for the context's work: two gates hold the first and the second.
    std::promise<void> gate1, gate2;
    mine->launch_host_func(s, [f = gate1.get_future().share()] { f.wait(); });
    const std::uint64_t p = mine->ipc_open_memory(mh);
    mine->ipc_close_memory(p);  // the free thread waits for gate 1
    if (mine->ipc_open_memory(mh) != p) return 1;
    if (mine->pointer_info(p).kind != MemoryKind::device) return 2;  // in use again
    mine->ipc_close_memory(p);
    if (mine->pointer_info(p).kind != MemoryKind::unregistered) return 3;
    // Waits (bounded) until the free thread has called cuCtxSynchronize `n` times.
    auto until_syncs = [&](std::uint64_t n) {
      for (int i = 0; sim::driver_calls(*mine)["cuCtxSynchronize"] < n; ++i) {
        if (i == 10'000'000) return false;
        std::this_thread::yield();
      }
      return true;
    };
    if (!until_syncs(1)) return 4;  // the first close waits for gate 1
    // Enqueued after that wait began, so only the second close waits for it.
    mine->launch_host_func(s, [f = gate2.get_future().share()] { f.wait(); });
    gate1.set_value();
    // The first close is done once the second one's wait for the context has begun.
    if (!until_syncs(2)) return 4;
    const bool freed = mine->pointer_info(p).kind == MemoryKind::unregistered;
    gate2.set_value();
    mine->flush_frees();
    mine->stream_synchronize(s);
    mine->stream_destroy(s);
    return freed ? 0 : 5;
  });
  EXPECT_EQ(wait_child(child), 0);
  sim->free(d);
}

TEST_F(SimScaleTest, closing_one_of_two_opens_leaves_the_mapping_in_use) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "fork with threads under ThreadSanitizer";
#endif
  // The driver counts the opens of a handle: only the last close unmaps. A close that is not
  // the last must not make the memory read as freed, even while it is queued.
  const std::uint64_t d = sim->alloc(MemoryKind::device, 4096);
  const IpcMemoryHandle mh = sim->ipc_export_memory(d);
  const pid_t child = start_child([&] {
    auto mine = test::make_simulator(1);
    const StreamHandle s = mine->stream_create(false);
    std::promise<void> gate;
    const std::uint64_t p = mine->ipc_open_memory(mh);
    if (mine->ipc_open_memory(mh) != p) return 1;  // the same mapping, opened twice
    // The close waits for the context's work on the free thread: the gate keeps it queued.
    mine->launch_host_func(s, [f = gate.get_future().share()] { f.wait(); });
    mine->ipc_close_memory(p);
    const bool in_use = mine->pointer_info(p).kind == MemoryKind::device;
    gate.set_value();
    mine->flush_frees();
    mine->stream_synchronize(s);
    if (!in_use) return 2;
    if (mine->pointer_info(p).kind != MemoryKind::device) return 3;  // after the close ran
    mine->memset_async(p, 0x33, 16, s);                              // still mapped: usable
    mine->stream_synchronize(s);
    mine->ipc_close_memory(p);  // the last
    if (mine->pointer_info(p).kind != MemoryKind::unregistered) return 4;
    mine->flush_frees();
    mine->stream_destroy(s);
    return 0;
  });
  EXPECT_EQ(wait_child(child), 0);
  EXPECT_EQ(download(d, 4)[0], 0x33333333);
  sim->free(d);
}

TEST_F(SimScaleTest, a_handle_differing_from_an_opened_one_is_checked_in_full) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "fork with threads under ThreadSanitizer";
#endif
  const std::uint64_t d = sim->alloc(MemoryKind::device, 4096);
  const IpcMemoryHandle mh = sim->ipc_export_memory(d);
  const pid_t child = start_child([&] {
    auto mine = test::make_simulator(1);
    const std::uint64_t p = mine->ipc_open_memory(mh);
    // Each byte of the handle flipped in turn while the genuine one is open: none is taken
    // for it (the exporter's table descriptor included).
    for (std::size_t i = 0; i < 40; ++i) {
      IpcMemoryHandle forged = mh;
      forged.bytes[i] ^= 0xFF;
      try {
        const std::uint64_t q = mine->ipc_open_memory(forged);
        mine->ipc_close_memory(q);
        return 10 + static_cast<int>(i);
      } catch (const Error&) {
      }
    }
    mine->ipc_close_memory(p);
    mine->flush_frees();
    return 0;
  });
  EXPECT_EQ(wait_child(child), 0);
  sim->free(d);
}

}  // namespace
}  // namespace cai::device::detail
