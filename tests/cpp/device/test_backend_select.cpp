// Backend selection by CAI_BACKEND, and the public simulator controls on the process-wide
// backend.

#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "backend_select.h"
#include "cai/device/backend.h"
#include "cai/device/simulator.h"
#include "cai_matchers.h"
#include "test_sim_util.h"

namespace cai::device {
namespace {

using cai::test::ThrowsCaiError;
using ::testing::HasSubstr;

TEST(backend_select, sim) {
  auto b = detail::select_backend("sim");
  EXPECT_EQ(b->name(), "simulator");
  EXPECT_EQ(b->device_count(), 1);
}

TEST(backend_select, unknown_value_names_it_and_the_accepted_ones) {
  EXPECT_THAT([&] { detail::select_backend("gpu"); },
              ThrowsCaiError(Errc::value_error,
                             HasSubstr("CAI_BACKEND=gpu: unknown backend; expected \"sim\"")));
  EXPECT_THAT([&] { detail::select_backend("SIM"); },
              ThrowsCaiError(Errc::value_error, HasSubstr("\"cuda\"")));
}

TEST(backend_select, cuda_fails_clearly_without_a_driver) {
  if (cuda_available()) {
    EXPECT_EQ(detail::select_backend("cuda")->name(), "cuda");
  } else {
    EXPECT_THAT([&] { detail::select_backend("cuda"); },
                ThrowsCaiError(Errc::device_error, HasSubstr("CAI_BACKEND=sim")));
  }
}

TEST(backend_select, unset_prefers_cuda_when_available) {
  auto b = detail::select_backend("");
  EXPECT_EQ(b->name(), cuda_available() ? "cuda" : "simulator");
}

// The process's simulated driver (libcuda.so.1) reads CAI_SIM_DEVICES once, when first used:
// each value in a fresh process (a death test re-runs this binary).
void exit_with_devices(const char* value) {
  if (value != nullptr) {
    ::setenv("CAI_SIM_DEVICES", value, 1);
  } else {
    ::unsetenv("CAI_SIM_DEVICES");
  }
  try {
    std::exit(detail::select_backend("sim")->device_count());
  } catch (const Error& e) {
    std::fprintf(stderr, "%s [%s]\n", e.what(), e.code() == Errc::device_error ? "device" : "?");
    std::exit(100);
  }
}

TEST(backend_select, sim_devices_from_the_environment) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  using ::testing::ExitedWithCode;
  EXPECT_EXIT(exit_with_devices("3"), ExitedWithCode(3), "");
  EXPECT_EXIT(exit_with_devices(nullptr), ExitedWithCode(1), "");
  EXPECT_EXIT(exit_with_devices("zero"), ExitedWithCode(100),
              "CAI_SIM_DEVICES=zero: expected an integer from 1 to 64.*\\[device\\]");
  EXPECT_EXIT(exit_with_devices("65"), ExitedWithCode(100), "CAI_SIM_DEVICES=65");
}

TEST(backend_select, process_wide_backend_and_sim_controls) {
  const char* env = std::getenv("CAI_BACKEND");
  Backend* b = nullptr;
  try {
    b = &backend();
  } catch (const Error& e) {
    // Only an explicit CAI_BACKEND=cuda without a driver may fail.
    ASSERT_TRUE(env != nullptr && std::string(env) == "cuda") << e.what();
    EXPECT_FALSE(sim::active());
    return;
  }
  EXPECT_EQ(&backend(), b);  // chosen once
  EXPECT_EQ(sim::active(), b->name() == "simulator");
  if (!sim::active()) {
    EXPECT_THAT(
        [&] { sim::delay(kLegacyDefaultStream, 0); },
        ThrowsCaiError(Errc::device_error,
                       HasSubstr("cai::device::sim::delay(): the driver is \"cuda\", not the "
                                 "simulator")));
    EXPECT_THAT([&] { sim::set_race_detection(true); },
                ThrowsCaiError(Errc::device_error, HasSubstr("not the simulator")));
    return;
  }
  const std::uint64_t p = b->alloc(MemoryKind::pinned_host, 64);
  const StreamHandle s = b->stream_create(true);
  sim::delay(s, 0.2);
  std::atomic<int> ran{0};
  const sim::Access acc[] = {sim::Access::contiguous(p, 64, true)};
  sim::enqueue_task(
      s, acc,
      [&](std::span<const std::uint64_t> host) {
        EXPECT_EQ(host[0], p);  // pinned memory: the host reaches it at its own address
        ++ran;
      },
      "writer");
  EXPECT_FALSE(b->stream_query(s));
  EXPECT_THAT([&] { sim::host_access(p, 8, false); },
              ThrowsCaiError(Errc::race, HasSubstr("race: host_access on the host reads")));
  b->stream_synchronize(s);
  EXPECT_EQ(ran.load(), 1);
  sim::host_access(p, 8, false);
  EXPECT_TRUE(sim::race_detection());
  sim::set_race_detection(false);
  EXPECT_FALSE(sim::race_detection());
  sim::set_race_detection(true);
  std::vector<char> host(16);
  sim::forget(reinterpret_cast<std::uintptr_t>(host.data()), host.size());
  b->stream_destroy(s);
  b->free(p);
}

}  // namespace
}  // namespace cai::device
