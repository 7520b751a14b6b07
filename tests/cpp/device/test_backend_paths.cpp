// The backend's less travelled paths, over the simulated driver: page-locking host memory,
// kernels refused memory they cannot reach, staging of misaligned and host operands, driver
// errors injected where the driver may fail (module loads, host functions, frees on the free
// thread), the simulator's own controls, the process-wide backend after fork, cuda_info().

#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "cai/core/error.h"
#include "cai/device/backend.h"
#include "cai/device/simulator.h"
#include "cai_matchers.h"
#include "driver/abi.h"
#include "test_sim_util.h"

#if defined(CAI_TEST_COVERAGE)
extern "C" void __gcov_dump();  // libgcov, in a --coverage build
#endif

namespace cai::device {
namespace {

using cai::test::ThrowsCaiError;
using test::addr;
using test::dense;
using ::testing::HasSubstr;

TEST(backend_paths, host_memory_is_page_locked_until_unregistered) {
  auto b = detail::make_sim_backend();
  std::vector<std::uint8_t> host(3 * 4096);
  const std::uint64_t p = addr(host.data());
  EXPECT_EQ(b->pointer_info(p).kind, MemoryKind::unregistered);
  b->host_register(p, host.size());
  EXPECT_EQ(b->pointer_info(p + 100).kind, MemoryKind::pinned_host);
  EXPECT_EQ(b->check_kernel_memory("test", "x", p, p + host.size(), 0).kind,
            MemoryKind::pinned_host);
  EXPECT_THAT(
      [&] { b->host_register(p, 64); },
      ThrowsCaiError(Errc::device_error, HasSubstr("CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED")));
  b->host_register(p, 0);  // nothing to lock
  b->host_unregister(p);
  EXPECT_EQ(b->pointer_info(p).kind, MemoryKind::unregistered);
  EXPECT_THAT([&] { b->check_kernel_memory("test", "x", p, p + 8, 0); },
              ThrowsCaiError(Errc::device_error, HasSubstr("is not CUDA memory")));
}

TEST(backend_paths, a_kernel_is_refused_memory_of_another_device) {
  auto b = detail::make_sim_backend(2);
  b->set_current_device(1);
  const std::uint64_t d1 = b->alloc(MemoryKind::device, 256);
  b->set_current_device(0);
  EXPECT_THAT([&] { b->check_kernel_memory("ops.fill()", "out", d1, d1 + 256, 0); },
              ThrowsCaiError(Errc::device_error,
                             HasSubstr("is memory of device 1, which a kernel on device 0 "
                                       "cannot reach")));
  EXPECT_EQ(b->check_kernel_memory("ops.fill()", "out", d1, d1, 0).kind,
            MemoryKind::unregistered);  // no bytes: nothing to check
  b->free(d1);
}

TEST(backend_paths, free_refuses_what_it_did_not_allocate) {
  auto b = detail::make_sim_backend();
  const std::uint64_t d = b->alloc(MemoryKind::device, 256);
  EXPECT_THAT([&] { b->free(d + 16); },
              ThrowsCaiError(Errc::value_error, HasSubstr("inside the allocation at")));
  std::uint64_t on_stack = 0;
  EXPECT_THAT([&] { b->free(addr(&on_stack)); },
              ThrowsCaiError(Errc::value_error, HasSubstr("is not CUDA memory")));
  b->free(d);
  b->free(0);
}

TEST(backend_paths, misaligned_and_other_device_operands_are_staged) {
  auto b = detail::make_sim_backend(2);
  b->set_current_device(1);
  const std::uint64_t other = b->alloc(MemoryKind::device, 100);
  b->set_current_device(0);
  const StreamHandle s = b->stream_create(true);
  // float32 operands two bytes off their natural alignment: computed through aligned copies.
  const std::uint64_t d = b->alloc(MemoryKind::device, 4096);
  std::vector<float> x(64), y(64);
  for (int i = 0; i < 64; ++i) x[static_cast<std::size_t>(i)] = static_cast<float>(i);
  b->copy_async(d + 2, addr(x.data()), 256, s);
  const Operand ops[] = {dense(d + 1026, {64}, 4), dense(d + 2, {64}, 4), dense(d + 2, {64}, 4)};
  b->elementwise_async(ElementwiseOp::add, ElementType::f32, ops, s);
  b->copy_async(addr(y.data()), d + 1026, 256, s);
  // A memset of device 1's memory on a stream of device 0: set locally, copied across.
  b->memset_async(other, 0x5a, 100, s);
  std::vector<std::uint8_t> back(100, 0);
  b->copy_async(addr(back.data()), other, 100, s);
  b->stream_synchronize(s);
  for (int i = 0; i < 64; ++i) EXPECT_EQ(y[static_cast<std::size_t>(i)], 2.0f * i) << i;
  EXPECT_EQ(back, std::vector<std::uint8_t>(100, 0x5a));
  b->free(d);
  b->free(other);
  b->stream_destroy(s);
}

// cuMemcpy is undefined on overlapping ranges: an overlapping copy reaches the driver as two
// copies through a staged copy of its source, never as one.
TEST(backend_paths, overlapping_copies_are_staged) {
  auto b = detail::make_sim_backend();
  const StreamHandle s = b->stream_create(true);
  std::vector<std::int32_t> host(64);
  for (int i = 0; i < 64; ++i) host[static_cast<std::size_t>(i)] = i;
  const std::uint64_t d = b->alloc(MemoryKind::device, 80 * sizeof(std::int32_t));
  const std::size_t bytes = host.size() * sizeof(std::int32_t);
  const auto check = [&](const char* what, auto copy) {
    b->copy_async(d, addr(host.data()), bytes, s);
    sim::reset_driver_calls(*b);
    copy();  // moves the 64 values up by 4 elements
    const auto calls = sim::driver_calls(*b);
    EXPECT_EQ(calls.at("cuMemcpyAsync"), 2u) << what << ": in, then out of a temporary copy";
    std::vector<std::int32_t> back(68, -1);
    b->copy_async(addr(back.data()), d, back.size() * sizeof(std::int32_t), s);
    b->stream_synchronize(s);
    for (std::size_t i = 0; i < 64; ++i) EXPECT_EQ(back[i + 4], host[i]) << what << " " << i;
  };
  check("copy_async", [&] { b->copy_async(d + 16, d, bytes, s); });
  // The strided copy of two dense operands with the same layout is one plain copy too.
  check("copy_strided_async", [&] {
    b->copy_strided_async(dense(d + 16, {8, 8}, 4), dense(d, {8, 8}, 4), s);
  });
  b->free(d);
  b->stream_destroy(s);
}

// An elementwise operand in memory of another device is staged, wherever it is among the
// operands: the kernel cannot reach it (peer access is not enabled).
TEST(backend_paths, elementwise_operands_of_another_device_are_staged) {
  auto b = detail::make_sim_backend(2);
  b->set_current_device(1);
  const std::uint64_t other = b->alloc(MemoryKind::device, 256);
  b->set_current_device(0);
  const std::uint64_t local = b->alloc(MemoryKind::device, 2 * 256);
  const StreamHandle s = b->stream_create(true);
  std::vector<std::int32_t> x(64);
  for (int i = 0; i < 64; ++i) x[static_cast<std::size_t>(i)] = i + 1;
  for (std::size_t k = 0; k < 3; ++k) {
    // Operand k in device 1's memory, the others in device 0's.
    std::uint64_t at[3] = {local, local + 256, local + 256};
    if (k == 0) at[0] = other;
    if (k > 0) at[k] = other;
    for (std::size_t j = 1; j < 3; ++j) b->copy_async(at[j], addr(x.data()), 256, s);
    const Operand ops[] = {dense(at[0], {64}, 4), dense(at[1], {64}, 4), dense(at[2], {64}, 4)};
    b->elementwise_async(ElementwiseOp::add, ElementType::i32, ops, s);
    std::vector<std::int32_t> y(64, 0);
    b->copy_async(addr(y.data()), at[0], 256, s);
    b->stream_synchronize(s);
    for (int i = 0; i < 64; ++i) EXPECT_EQ(y[static_cast<std::size_t>(i)], 2 * (i + 1)) << k;
  }
  b->free(local);
  b->free(other);
  b->stream_destroy(s);
}

TEST(backend_paths, a_module_the_driver_refuses_is_reported_with_the_ptx_isa) {
  for (const auto& [code, text] :
       {std::pair{cu::CUDA_ERROR_UNSUPPORTED_PTX_VERSION, std::string("declares ISA")},
        std::pair{cu::CUDA_ERROR_INVALID_PTX, std::string("cuModuleLoadData failed")}}) {
    auto b = detail::make_sim_backend();  // a fresh context: its module is not loaded yet
    const std::uint64_t d = b->alloc(MemoryKind::device, 64);
    sim::inject_error(*b, "cuModuleLoadData", code, 0, 1);
    const std::int32_t v = 1;
    EXPECT_THAT([&] { b->fill_async(dense(d, {16}, 4), &v, kLegacyDefaultStream); },
                ThrowsCaiError(Errc::device_error, HasSubstr(text)));
    b->fill_async(dense(d, {16}, 4), &v, kLegacyDefaultStream);  // the next load works
    b->synchronize();
    b->free(d);
  }
}

TEST(backend_paths, a_refused_host_function_is_released_and_reported) {
  auto b = detail::make_sim_backend();
  sim::inject_error(*b, "cuLaunchHostFunc", cu::CUDA_ERROR_LAUNCH_FAILED, 0, 1);
  auto token = std::make_shared<int>(0);
  std::weak_ptr<int> alive = token;
  EXPECT_THAT([&] { b->launch_host_func(kLegacyDefaultStream, [t = std::move(token)] {}); },
              ThrowsCaiError(Errc::device_error, HasSubstr("cuLaunchHostFunc")));
  EXPECT_TRUE(alive.expired());  // the function was freed, not leaked
  EXPECT_THAT([&] { b->event_record(0, kLegacyDefaultStream); },
              ThrowsCaiError(Errc::value_error, HasSubstr("event handle 0 is not an event")));
  // Both handles bad: the message names the first of the entry's parameters.
  EXPECT_THAT([&] { b->event_record(0, 0); },
              ThrowsCaiError(Errc::value_error,
                             HasSubstr("event_record(): event handle 0 is not an event")));
  EXPECT_THAT([&] { b->stream_wait_event(0, 0); },
              ThrowsCaiError(Errc::value_error, HasSubstr("stream_wait_event(): stream 0")));
  EXPECT_THAT([&] { b->stream_wait_event(kLegacyDefaultStream, 0); },
              ThrowsCaiError(Errc::value_error,
                             HasSubstr("stream_wait_event(): event handle 0 is not an event")));
}

TEST(backend_paths, a_free_that_fails_on_the_free_thread_leaks_only_that_allocation) {
  auto b = detail::make_sim_backend();
  const std::uint64_t d = b->alloc(MemoryKind::device, 256);
  sim::inject_error(*b, "cuMemFree", cu::CUDA_ERROR_UNKNOWN, 0, 1);
  b->free_deferred(d);
  b->flush_frees();
  // The driver kept it: the backend reads it as the driver does again, and can free it.
  EXPECT_EQ(b->pointer_info(d).kind, MemoryKind::device);
  b->free(d);
  EXPECT_EQ(b->pointer_info(d).kind, MemoryKind::unregistered);
}

TEST(backend_paths, the_simulators_own_controls) {
  auto b = detail::make_sim_backend();
  sim::reset_driver_calls(*b);
  const std::uint64_t d = b->alloc(MemoryKind::device, 256);
  EXPECT_EQ(sim::driver_calls(*b).at("cuMemAlloc"), 1u);
  EXPECT_NE(sim::host_address(*b, d), nullptr);
  EXPECT_NE(sim::host_address(*b, d), reinterpret_cast<void*>(static_cast<std::uintptr_t>(d)));
  const std::uint64_t c = sim::alloc_chunked(*b, 512, 3);
  EXPECT_EQ(b->pointer_info(c + 600).alloc_base, c);  // the whole reservation
  sim::free_chunked(*b, c);
  const std::size_t streams = sim::stats(*b).streams;
  const StreamHandle s = b->stream_create(true);
  EXPECT_EQ(sim::stats(*b).streams, streams + 1);
  b->stream_destroy(s);
  b->free(d);
  EXPECT_THAT([&] { sim::host_address(*b, d); },
              ThrowsCaiError(Errc::value_error,
                             HasSubstr(test::hex(d) + " is not memory the driver knows")));
}

TEST(backend_paths, stream_text_and_cuda_info) {
  EXPECT_EQ(stream_text(kLegacyDefaultStream), "legacy default stream (1)");
  EXPECT_EQ(stream_text(kPerThreadDefaultStream), "per-thread default stream (2)");
  EXPECT_EQ(stream_text(0xabc), "stream 0xabc");
  const CudaInfo info = cuda_info();
  EXPECT_EQ(info.api_version, cu::kDriverApiVersion);
  EXPECT_EQ(info.driver_loaded, cuda_available());
  EXPECT_EQ(info.driver_loaded, info.error.empty());
  if (!info.driver_loaded) EXPECT_THAT(info.error, HasSubstr("CAI_BACKEND=sim"));
}

TEST(backend_paths, a_forked_child_is_told_to_spawn) {
  // The process-wide backend, made before the fork: the child must refuse to use it.
  Backend& b = backend();
  (void)b.device_count();
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    int code = 1;
    try {
      (void)backend();
    } catch (const Error& e) {
      const std::string what = e.what();
      code = what.find("was forked from process") != std::string::npos &&
                     what.find("'spawn'") != std::string::npos
                 ? 0
                 : 2;
    }
#if defined(CAI_TEST_COVERAGE)
    __gcov_dump();  // _exit skips the write of the line counts at exit
#endif
    ::_exit(code);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_NO_THROW((void)backend());  // the parent is unaffected
}

}  // namespace
}  // namespace cai::device
