// The driver's rules that the simulated driver enforces (docs/simulator.md, "Where it differs
// from a real driver"), and that the backend follows: a current context for every entry that
// needs one, errors that name what is undefined on a real driver (stale handles, overlapping
// copies), and no exception escaping a host function.

#include <gtest/gtest.h>

#include <cstring>
#include <exception>
#include <functional>
#include <numeric>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "cai_matchers.h"
#include "driver/api.h"
#include "test_sim_util.h"

namespace cai::device::sim {
namespace {

using cai::test::ThrowsCaiError;
using test::addr;
using test::dense;
using ::testing::HasSubstr;

std::string detail_of(const Driver& d) {
  const char* text = nullptr;
  if (d.sim.caiSimGetErrorDetail(&text) != CUDA_SUCCESS || text == nullptr) return {};
  return text;
}

// An entry called with every argument zero (never read when the entry refuses the call first).
template <class... A>
CUresult call_with_zeros(CUresult (*entry)(A...)) {
  return entry(A{}...);
}

// Runs fn on a new host thread, which has no current context; what it throws is a failure.
void on_new_thread(const std::function<void()>& fn) {
  std::thread t([&] {
    try {
      fn();
    } catch (const std::exception& e) {
      ADD_FAILURE() << e.what();
    }
  });
  t.join();
}

// The entries the driver runs without a current context (no CUDA_ERROR_INVALID_CONTEXT in
// their documentation): initialisation, errors, devices, primary contexts, the context stack.
const std::set<std::string_view> kContextFree = {
    "cuGetErrorName",
    "cuGetErrorString",
    "cuInit",
    "cuDriverGetVersion",
    "cuDeviceGet",
    "cuDeviceGetCount",
    "cuDeviceGetName",
    "cuDeviceGetAttribute",
    "cuDeviceTotalMem",
    "cuDeviceGetUuid",
    "cuDevicePrimaryCtxRetain",
    "cuCtxGetCurrent",
    "cuCtxSetCurrent",
    "cuCtxPushCurrent",
    "cuCtxPopCurrent",
};

TEST(sim_driver_rules, every_entry_that_needs_a_context_refuses_a_thread_without_one) {
  const auto d = make_sim_driver(1);
  std::set<std::string_view> refused;
  on_new_thread([&] {
    const cu::DriverApi& a = d->api;
#define CAI_TEST_CALL(name, ...)                                                      \
  if (!kContextFree.contains(#name)) {                                                \
    EXPECT_EQ(call_with_zeros(a.name), CUDA_ERROR_INVALID_CONTEXT) << #name;          \
    EXPECT_THAT(detail_of(*d), HasSubstr(#name " needs a current context")) << #name; \
    refused.insert(#name);                                                            \
  }
    CAI_DRIVER_ENTRIES(CAI_TEST_CALL)
#undef CAI_TEST_CALL
    const cu::SimApi& s = d->sim;
    for (auto [name, r] : {std::pair{"caiSimDelay", call_with_zeros(s.caiSimDelay)},
                           {"caiSimLaunchHostTask", call_with_zeros(s.caiSimLaunchHostTask)},
                           {"caiSimMemAllocChunked", call_with_zeros(s.caiSimMemAllocChunked)},
                           {"caiSimMemFreeChunked", call_with_zeros(s.caiSimMemFreeChunked)}}) {
      EXPECT_EQ(r, CUDA_ERROR_INVALID_CONTEXT) << name;
    }
    // cuda.core asks cuCtxGetDevice whether a thread has a context.
    CUdevice dev = 0;
    EXPECT_EQ(a.cuCtxGetDevice(&dev), CUDA_ERROR_INVALID_CONTEXT);
    // The context-free ones work, and once a context is current the others do too.
    int count = 0;
    EXPECT_EQ(a.cuDeviceGetCount(&count), CUDA_SUCCESS);
    CUcontext ctx = nullptr;
    EXPECT_EQ(a.cuCtxGetCurrent(&ctx), CUDA_SUCCESS);
    EXPECT_EQ(ctx, nullptr);
    ASSERT_EQ(a.cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
    ASSERT_EQ(a.cuCtxSetCurrent(ctx), CUDA_SUCCESS);
    EXPECT_EQ(a.cuCtxGetDevice(&dev), CUDA_SUCCESS);
    CUdeviceptr p = 0;
    EXPECT_EQ(a.cuMemAlloc(&p, 64), CUDA_SUCCESS);
    EXPECT_EQ(a.cuMemFree(p), CUDA_SUCCESS);
  });
  // Pointer queries, address ranges, IPC close, host unregister, allocation, streams, events.
  for (const char* name : {"cuPointerGetAttribute", "cuPointerGetAttributes",
                           "cuMemGetAddressRange", "cuIpcCloseMemHandle", "cuMemHostUnregister",
                           "cuMemAlloc", "cuMemFreeHost", "cuStreamSynchronize", "cuEventQuery",
                           "cuEventDestroy", "cuLaunchHostFunc", "cuCtxGetDevice"}) {
    EXPECT_TRUE(refused.contains(name)) << name;
  }
}

// Each backend call on a thread that never had a context: the backend makes one current
// first, as the runtime does (a thread that had one would hide a missing step).
class BackendOnNewThreads : public ::testing::Test {
 protected:
  std::unique_ptr<test::Simulator> sim = test::make_simulator();
};

TEST_F(BackendOnNewThreads, streams_and_events) {
  const StreamHandle s = sim->stream_create(false);
  const EventHandle e = sim->event_create(true);
  const EventHandle e2 = sim->event_create(true);
  on_new_thread([&] { sim->event_record(e, s); });
  on_new_thread([&] { sim->event_record(e2, s); });
  on_new_thread([&] { sim->stream_wait_event(s, e); });
  on_new_thread([&] { sim->launch_host_func(s, [] {}); });
  on_new_thread([&] { sim->stream_synchronize(s); });
  on_new_thread([&] { EXPECT_TRUE(sim->stream_query(s)); });
  on_new_thread([&] { sim->event_synchronize(e); });
  on_new_thread([&] { EXPECT_TRUE(sim->event_query(e)); });
  on_new_thread([&] { EXPECT_GE(sim->event_elapsed_ms(e, e2), 0.0f); });
  on_new_thread([&] { EXPECT_EQ(sim->stream_device(s), 0); });
  on_new_thread([&] { sim->event_destroy(e); });
  on_new_thread([&] { sim->event_destroy(e2); });
  on_new_thread([&] { sim->stream_destroy(s); });
  on_new_thread([&] { sim->delay(kLegacyDefaultStream, 0); });
  const EventHandle shared = sim->ipc_event_create();
  on_new_thread([&] { (void)sim->ipc_export_event(shared); });
  sim->event_destroy(shared);
}

TEST_F(BackendOnNewThreads, memory) {
  std::uint64_t p = 0;
  on_new_thread([&] { p = sim->alloc(MemoryKind::device, 256); });
  on_new_thread([&] { EXPECT_EQ(sim->pointer_info(p).kind, MemoryKind::device); });
  on_new_thread([&] { sim->memset_async(p, 7, 256, kLegacyDefaultStream); });
  on_new_thread([&] { sim->free(p); });
  std::vector<char> host(4096);
  const std::uint64_t h = addr(host.data());
  on_new_thread([&] { sim->host_register(h, host.size()); });
  on_new_thread([&] { sim->host_unregister(h); });
  std::uint64_t pinned = 0;
  on_new_thread([&] { pinned = sim->alloc(MemoryKind::pinned_host, 64); });
  on_new_thread([&] { sim->free(pinned); });
  std::uint64_t chunks = 0;
  on_new_thread([&] { chunks = sim::alloc_chunked(*sim, 4096, 2); });
  on_new_thread([&] { sim::free_chunked(*sim, chunks); });
  on_new_thread([&] { sim->synchronize(); });
}

// ---------------------------------------------------------------------------------------------
// Undefined on a real driver: reported, naming the rule.

TEST(sim_driver_rules, overlapping_copies_are_refused_naming_the_rule) {
  const auto d = make_sim_driver(1);
  const cu::DriverApi& a = d->api;
  CUcontext ctx = nullptr;
  ASSERT_EQ(a.cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
  ASSERT_EQ(a.cuCtxPushCurrent(ctx), CUDA_SUCCESS);
  CUdeviceptr p = 0;
  ASSERT_EQ(a.cuMemAlloc(&p, 64), CUDA_SUCCESS);
  EXPECT_EQ(a.cuMemcpyAsync(p + 8, p, 16, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_THAT(detail_of(*d), HasSubstr("undefined on a real driver: the ranges of a copy"));
  EXPECT_EQ(a.cuMemcpyAsync(p, p + 15, 16, nullptr), CUDA_ERROR_INVALID_VALUE);
  // Adjacent ranges do not overlap.
  EXPECT_EQ(a.cuMemcpyAsync(p + 16, p, 16, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(a.cuMemcpyAsync(p, p + 16, 16, nullptr), CUDA_SUCCESS);
  // Pageable host memory on both sides too.
  std::vector<char> host(64);
  const CUdeviceptr h = addr(host.data());
  EXPECT_EQ(a.cuMemcpyAsync(h + 1, h, 8, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(a.cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(a.cuMemFree(p), CUDA_SUCCESS);
  CUcontext popped = nullptr;
  EXPECT_EQ(a.cuCtxPopCurrent(&popped), CUDA_SUCCESS);
}

TEST(sim_driver_rules, stale_stream_and_event_handles_name_the_rule) {
  test::Simulator sim;
  const StreamHandle s = sim.stream_create(false);
  sim.stream_destroy(s);
  const EventHandle e = sim.event_create(false);
  sim.event_destroy(e);
  const auto undefined = HasSubstr("undefined on a real driver");
  EXPECT_THAT([&] { sim.stream_synchronize(s); }, ThrowsCaiError(Errc::device_error, undefined));
  EXPECT_THAT([&] { sim.stream_query(0x5100fff123); },
              ThrowsCaiError(Errc::device_error, undefined));
  EXPECT_THAT([&] { sim.event_query(e); }, ThrowsCaiError(Errc::device_error, undefined));
  EXPECT_THAT([&] { sim.event_record(e, kLegacyDefaultStream); },
              ThrowsCaiError(Errc::device_error, undefined));
}

// cai stages an overlapping copy (the driver's copy is a memcpy): without the staging step
// the simulated driver refuses the copy.
TEST(sim_driver_rules, the_backend_stages_overlapping_copies) {
  test::Simulator sim;
  std::vector<std::uint8_t> start(64);
  std::iota(start.begin(), start.end(), std::uint8_t{0});
  const std::uint64_t p = sim.alloc(MemoryKind::device, start.size());
  auto reset = [&] { sim.copy_async(p, addr(start.data()), start.size(), kLegacyDefaultStream); };
  auto read = [&] {
    std::vector<std::uint8_t> out(start.size());
    sim.copy_async(addr(out.data()), p, out.size(), kLegacyDefaultStream);
    sim.stream_synchronize(kLegacyDefaultStream);
    return out;
  };
  // What a memmove gives.
  auto moved = [&](std::size_t to, std::size_t from, std::size_t n) {
    std::vector<std::uint8_t> v = start;
    std::memmove(v.data() + to, v.data() + from, n);
    return v;
  };
  // The plain path, forwards and backwards.
  reset();
  sim.copy_async(p + 8, p, 32, kLegacyDefaultStream);
  EXPECT_EQ(read(), moved(8, 0, 32));
  reset();
  sim.copy_async(p, p + 8, 32, kLegacyDefaultStream);
  EXPECT_EQ(read(), moved(0, 8, 32));
  // The dense strided path: same layout on both sides, one plain copy.
  reset();
  sim.copy_strided_async(dense(p + 4, {8}, 4), dense(p, {8}, 4), kLegacyDefaultStream);
  EXPECT_EQ(read(), moved(4, 0, 32));
  reset();
  sim.copy_strided_async(dense(p, {2, 4}, 4), dense(p + 12, {2, 4}, 4), kLegacyDefaultStream);
  EXPECT_EQ(read(), moved(0, 12, 32));
  // A pinned host buffer (the driver copies it too).
  const std::uint64_t pinned = sim.alloc(MemoryKind::pinned_host, 64);
  std::memcpy(sim.host(pinned), start.data(), 64);
  sim.copy_async(pinned + 1, pinned, 40, kLegacyDefaultStream);
  sim.stream_synchronize(kLegacyDefaultStream);
  const std::vector<std::uint8_t> got(sim.host<std::uint8_t>(pinned),
                                      sim.host<std::uint8_t>(pinned) + 64);
  EXPECT_EQ(got, moved(1, 0, 40));
  sim.free(pinned);
  sim.free(p);
}

// ---------------------------------------------------------------------------------------------
// Host functions: an exception must not reach the driver's thread.

TEST(sim_driver_rules, an_exception_escaping_a_host_function_ends_the_process) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        const auto d = make_sim_driver(1);
        const cu::DriverApi& a = d->api;
        CUcontext ctx = nullptr;
        (void)a.cuDevicePrimaryCtxRetain(&ctx, 0);
        (void)a.cuCtxSetCurrent(ctx);
        (void)a.cuLaunchHostFunc(
            nullptr, [](void*) { throw std::runtime_error("from the host function"); }, nullptr);
        (void)a.cuCtxSynchronize();
      },
      "escaped a host function \\(cuLaunchHostFunc\\): from the host function; undefined on a "
      "real driver");
}

TEST(sim_driver_rules, the_backend_keeps_exceptions_inside_its_host_functions) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // In a child process: before the fix the exception ended it.
  EXPECT_EXIT(
      {
        test::Simulator sim;
        const StreamHandle s = sim.stream_create(false);
        sim.launch_host_func(s, [] { throw std::runtime_error("thrown by fn"); });
        sim.launch_host_func(s, [] { throw 42; });
        bool after = false;
        sim.launch_host_func(s, [&] { after = true; });
        sim.stream_synchronize(s);
        sim.stream_destroy(s);
        std::exit(after ? 0 : 3);
      },
      ::testing::ExitedWithCode(0), "a host function \\(launch_host_func\\) threw: thrown by fn");
}

}  // namespace
}  // namespace cai::device::sim
