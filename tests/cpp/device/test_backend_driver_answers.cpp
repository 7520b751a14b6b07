// The backend's answers to what the simulated driver never says by itself: a device without
// memory pools, pointer queries without the range attributes (the cuMemGetAddressRange
// fallback), managed memory another library allocated, and failing queries. Failures come from
// the simulator's error injection (sim::inject_error); answers a real driver may give but the
// simulator does not (an attribute of 0) from a copy of its entry table with one entry wrapped.

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <numeric>
#include <vector>

#include "backend/backend.h"
#include "cai/core/error.h"
#include "cai/device/backend.h"
#include "cai/device/simulator.h"
#include "cai_matchers.h"
#include "driver/abi.h"
#include "sim/sim_driver.h"
#include "test_sim_util.h"

namespace cai::device {
namespace {

using cai::test::ThrowsCaiError;
using test::addr;
using test::dense;
using ::testing::HasSubstr;

// The simulated driver's own entries, called by the wrappers below.
cu::DriverApi g_real;

cu::CUresult no_memory_pools(int* value, cu::CUdevice_attribute attribute, cu::CUdevice dev) {
  if (attribute == cu::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED) {
    *value = 0;  // as a device or driver without stream-ordered allocation
    return cu::CUDA_SUCCESS;
  }
  return g_real.cuDeviceGetAttribute(value, attribute, dev);
}

cu::CUresult no_range_attributes(unsigned int n, cu::CUpointer_attribute* attrs, void** data,
                                 cu::CUdeviceptr ptr) {
  const cu::CUresult r = g_real.cuPointerGetAttributes(n, attrs, data, ptr);
  // As a driver that leaves the range attributes at their defaults.
  for (unsigned int i = 0; i < n; ++i) {
    if (attrs[i] == cu::CU_POINTER_ATTRIBUTE_RANGE_START_ADDR)
      *static_cast<cu::CUdeviceptr*>(data[i]) = 0;
    if (attrs[i] == cu::CU_POINTER_ATTRIBUTE_RANGE_SIZE) *static_cast<std::size_t*>(data[i]) = 0;
  }
  return r;
}

// A simulated driver with `patch` applied to a copy of its entry table.
template <class Patch>
std::shared_ptr<const cu::Driver> patched_sim(Patch patch) {
  auto d = std::make_shared<cu::Driver>(*sim::make_sim_driver(1));
  g_real = d->api;
  patch(d->api);
  return d;
}

std::vector<std::int32_t> iota_ints(std::size_t n) {
  std::vector<std::int32_t> v(n);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

TEST(backend_driver_answers, a_device_without_memory_pools_stages_through_cuMemAlloc) {
  auto b = detail::make_backend(
      patched_sim([](cu::DriverApi& api) { api.cuDeviceGetAttribute = &no_memory_pools; }));
  const std::vector<std::int32_t> host = iota_ints(64);
  const std::uint64_t d = b->alloc(MemoryKind::device, 68 * sizeof(std::int32_t));
  const StreamHandle s = b->stream_create(true);
  b->copy_async(d, addr(host.data()), 64 * sizeof(std::int32_t), s);
  sim::reset_driver_calls(*b);
  // Overlapping: staged through temporary memory, here from cuMemAlloc, freed after the stream.
  b->copy_async(d + 16, d, 64 * sizeof(std::int32_t), s);
  auto calls = sim::driver_calls(*b);
  EXPECT_EQ(calls["cuMemAllocAsync"], 0u);
  EXPECT_EQ(calls["cuMemFreeAsync"], 0u);
  EXPECT_EQ(calls["cuMemAlloc"], 1u);
  EXPECT_EQ(calls["cuMemFree"], 1u);
  std::vector<std::int32_t> back(68, -1);
  b->copy_async(addr(back.data()), d, back.size() * sizeof(std::int32_t), s);
  b->stream_synchronize(s);
  for (std::size_t i = 0; i < 64; ++i) EXPECT_EQ(back[i + 4], host[i]) << i;
  b->free(d);
  b->stream_destroy(s);
}

TEST(backend_driver_answers, without_range_attributes_the_allocation_comes_from_its_address_range) {
  // Memory another library allocated (another backend over the same driver): the backend
  // asks the driver about it.
  auto d =
      patched_sim([](cu::DriverApi& api) { api.cuPointerGetAttributes = &no_range_attributes; });
  auto other = detail::make_backend(d);
  auto b = detail::make_backend(d);
  const std::uint64_t p = other->alloc(MemoryKind::device, 1000);
  const PointerInfo info = b->pointer_info(p + 100);
  EXPECT_EQ(info.kind, MemoryKind::device);
  EXPECT_EQ(info.alloc_base, p);
  EXPECT_GE(info.alloc_size, 1000u);
  EXPECT_EQ(b->check_kernel_memory("test", "x", p, p + 1000, 0).kind, MemoryKind::device);
  // When the address range fails too, the allocation's extent is unknown: refused, not guessed.
  const std::uint64_t q = other->alloc(MemoryKind::device, 1000);
  sim::inject_error(*b, "cuMemGetAddressRange", cu::CUDA_ERROR_INVALID_VALUE);
  EXPECT_THAT([&] { b->check_kernel_memory("test", "x", q, q + 8, 0); },
              ThrowsCaiError(Errc::device_error, HasSubstr("runs past the end of its allocation")));
  other->free(p);
  other->free(q);
}

TEST(backend_driver_answers, managed_memory_of_another_library_reads_as_managed) {
  auto d = sim::make_sim_driver(1);
  auto other = detail::make_backend(d);
  auto b = detail::make_backend(d);
  const std::vector<std::int32_t> host = iota_ints(16);
  const std::uint64_t m = other->alloc(MemoryKind::managed, host.size() * sizeof(std::int32_t));
  sim::reset_driver_calls(*b);
  const PointerInfo info = b->pointer_info(m + 4);
  EXPECT_EQ(sim::driver_calls(*b)["cuPointerGetAttributes"], 1u);  // asked, not remembered
  EXPECT_EQ(info.kind, MemoryKind::managed);
  EXPECT_TRUE(info.host_accessible);
  EXPECT_TRUE(info.device_accessible);
  EXPECT_EQ(info.alloc_base, m);
  // A kernel reads it in place.
  const std::uint64_t out = b->alloc(MemoryKind::device, host.size() * sizeof(std::int32_t));
  const StreamHandle s = b->stream_create(true);
  b->copy_async(m, addr(host.data()), host.size() * sizeof(std::int32_t), s);
  const Operand ops[] = {dense(out, {16}, 4), dense(m, {16}, 4), dense(m, {16}, 4)};
  b->elementwise_async(ElementwiseOp::add, ElementType::i32, ops, s);
  std::vector<std::int32_t> back(16, -1);
  b->copy_async(addr(back.data()), out, back.size() * sizeof(std::int32_t), s);
  b->stream_synchronize(s);
  for (std::size_t i = 0; i < 16; ++i) EXPECT_EQ(back[i], 2 * host[i]) << i;
  b->stream_destroy(s);
  b->free(out);
  other->free(m);
}

TEST(backend_driver_answers, a_pointer_query_answering_invalid_value_means_unregistered) {
  // Some drivers answer CUDA_ERROR_INVALID_VALUE for memory they do not know.
  auto b = detail::make_sim_backend();
  const std::uint64_t d = b->alloc(MemoryKind::device, 256);
  std::vector<std::uint8_t> host(64);
  sim::inject_error(*b, "cuPointerGetAttributes", cu::CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(b->pointer_info(addr(host.data())).kind, MemoryKind::unregistered);
  // Pageable host memory is still a valid end of a copy.
  std::vector<std::uint8_t> back(64, 1);
  sim::inject_error(*b, "cuPointerGetAttributes", cu::CUDA_ERROR_INVALID_VALUE);
  b->copy_async(d, addr(host.data()), 64, kLegacyDefaultStream);
  b->copy_async(addr(back.data()), d, 64, kLegacyDefaultStream);
  b->synchronize();
  EXPECT_EQ(back, host);
  b->free(d);
}

TEST(backend_driver_answers, failing_queries_are_reported_with_their_entry_point) {
  auto b = detail::make_sim_backend();
  std::vector<std::uint8_t> host(64);
  sim::inject_error(*b, "cuPointerGetAttributes", cu::CUDA_ERROR_UNKNOWN);
  EXPECT_THAT([&] { b->pointer_info(addr(host.data())); },
              ThrowsCaiError(Errc::device_error,
                             HasSubstr("cuPointerGetAttributes failed: CUDA_ERROR_UNKNOWN")));
  const StreamHandle s = b->stream_create(true);
  sim::inject_error(*b, "cuStreamQuery", cu::CUDA_ERROR_LAUNCH_FAILED);
  EXPECT_THAT([&] { b->stream_query(s); },
              ThrowsCaiError(Errc::device_error,
                             HasSubstr("cuStreamQuery failed: CUDA_ERROR_LAUNCH_FAILED")));
  EXPECT_TRUE(b->stream_query(s));  // one failure, then the real answer
  const EventHandle e = b->event_create(false);
  b->event_record(e, s);
  sim::inject_error(*b, "cuEventQuery", cu::CUDA_ERROR_LAUNCH_FAILED);
  EXPECT_THAT([&] { b->event_query(e); },
              ThrowsCaiError(Errc::device_error,
                             HasSubstr("cuEventQuery failed: CUDA_ERROR_LAUNCH_FAILED")));
  b->stream_synchronize(s);
  EXPECT_TRUE(b->event_query(e));
  // The memory-pool query fails once; the next operation that stages asks again.
  const std::uint64_t d = b->alloc(MemoryKind::device, 512);
  sim::inject_error(*b, "cuDeviceGetAttribute", cu::CUDA_ERROR_UNKNOWN);
  EXPECT_THAT([&] { b->copy_async(d + 4, d, 256, s); },
              ThrowsCaiError(Errc::device_error,
                             HasSubstr("cuDeviceGetAttribute failed: CUDA_ERROR_UNKNOWN")));
  b->copy_async(d + 4, d, 256, s);
  b->stream_synchronize(s);
  b->event_destroy(e);
  b->stream_destroy(s);
  b->free(d);
}

}  // namespace
}  // namespace cai::device
