// Where the simulated driver does what the real driver documents, and the backend relies on
// nothing more: boolean pointer attributes, memory freed by cuMemFreeAsync, cuMemGetAddressRange,
// virtual-memory reservations (docs/simulator.md, "Where it differs from a real driver").

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <future>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "cai/core/error.h"
#include "cai/device/backend.h"
#include "cai/device/simulator.h"
#include "cai_matchers.h"
#include "device/backend/backend.h"
#include "device/driver/api.h"
#include "test_sim_util.h"

namespace cai::device {
namespace {

using cai::test::ThrowsCaiError;
using test::addr;
using test::dense;
using ::testing::HasSubstr;
using namespace cu;

std::string detail_of(Backend& b) {
  const char* text = nullptr;
  detail::state_of(b).sim->caiSimGetErrorDetail(&text);
  return text ? text : "";
}

// ---------------------------------------------------------------------------------------------
// Boolean pointer attributes.

TEST(driver_fidelity, boolean_pointer_attributes_are_written_as_four_byte_unsigned_ints) {
  auto b = detail::make_sim_backend();
  const DriverApi& api = detail::state_of(*b).api;
  const std::uint64_t managed = b->alloc(MemoryKind::managed, 256);
  const std::uint64_t device = b->alloc(MemoryKind::device, 256);
  CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_IS_MANAGED,
                                 CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
                                 CU_POINTER_ATTRIBUTE_MAPPED};
  for (const auto& [ptr, is_managed, ipc] :
       {std::tuple{managed, 1u, 0u}, std::tuple{device, 0u, 1u}}) {
    // Every byte of each slot is written: none of the filler survives.
    std::uint32_t slots[3];
    std::memset(slots, 0xaa, sizeof slots);
    void* data[] = {&slots[0], &slots[1], &slots[2]};
    ASSERT_EQ(api.cuPointerGetAttributes(3, attrs, data, ptr), CUDA_SUCCESS);
    EXPECT_EQ(slots[0], is_managed);
    EXPECT_EQ(slots[1], ipc);
    EXPECT_EQ(slots[2], 1u);
    std::uint32_t one = 0xaaaaaaaa;
    ASSERT_EQ(api.cuPointerGetAttribute(&one, CU_POINTER_ATTRIBUTE_IS_MANAGED, ptr), CUDA_SUCCESS);
    EXPECT_EQ(one, is_managed);
  }
  b->free(managed);
  b->free(device);
}

TEST(driver_fidelity, foreign_device_pinned_and_managed_memory_is_cuda_memory) {
  // Memory of another library (CuPy, PyTorch) over the same driver: asked of the driver,
  // whose 4-byte boolean answers must not land on the memory type read next to them.
  auto b = detail::make_sim_backend();
  auto other = detail::make_backend(detail::state_of(*b).driver);
  const std::uint64_t device = other->alloc(MemoryKind::device, 4096);
  const std::uint64_t pinned = other->alloc(MemoryKind::pinned_host, 4096);
  const std::uint64_t managed = other->alloc(MemoryKind::managed, 4096);
  EXPECT_EQ(b->pointer_info(device + 8).kind, MemoryKind::device);
  EXPECT_EQ(b->pointer_info(pinned + 8).kind, MemoryKind::pinned_host);
  EXPECT_EQ(b->pointer_info(managed + 8).kind, MemoryKind::managed);
  for (const std::uint64_t p : {device, pinned, managed}) {
    const PointerInfo info = b->pointer_info(p + 8);
    EXPECT_EQ(info.alloc_base, p);
    EXPECT_EQ(info.alloc_size, 4096u);
  }
  const std::int32_t v = 5;
  b->fill_async(dense(device, {1024}, 4), &v, kLegacyDefaultStream);
  b->fill_async(dense(pinned, {1024}, 4), &v, kLegacyDefaultStream);
  b->fill_async(dense(managed, {1024}, 4), &v, kLegacyDefaultStream);
  b->stream_synchronize(kLegacyDefaultStream);
  // Legacy-IPC capable (a 4-byte answer read whole): exported.
  (void)b->ipc_export_memory(device);
  other->free(device);
  other->free(pinned);
  other->free(managed);
}

// ---------------------------------------------------------------------------------------------
// Memory freed by cuMemFreeAsync.

TEST(driver_fidelity, pointer_attributes_of_memory_freed_by_cuMemFreeAsync_are_undefined) {
  auto b = detail::make_sim_backend();
  const DriverApi& api = detail::state_of(*b).api;
  const StreamHandle s = b->stream_create(false);
  const std::uint64_t t = b->alloc_async(1024, s);
  // The stream held by a task until released: the free stays queued behind it.
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  sim::enqueue_task(*b, s, {}, [released](std::span<const std::uint64_t>) { released.wait(); });
  b->free_async(t, s);
  auto expect_undefined = [&](const char* when) {
    SCOPED_TRACE(when);
    unsigned int type = 7;
    CUpointer_attribute attr = CU_POINTER_ATTRIBUTE_MEMORY_TYPE;
    void* data[] = {&type};
    EXPECT_EQ(api.cuPointerGetAttributes(1, &attr, data, t + 16), CUDA_ERROR_ILLEGAL_STATE);
    EXPECT_THAT(detail_of(*b), HasSubstr("undefined on a real driver: cuPointerGetAttributes"));
    EXPECT_EQ(api.cuPointerGetAttribute(&type, attr, t), CUDA_ERROR_ILLEGAL_STATE);
    CUdeviceptr base = 0;
    std::size_t size = 0;
    EXPECT_EQ(api.cuMemGetAddressRange(&base, &size, t), CUDA_ERROR_ILLEGAL_STATE);
    EXPECT_THAT(detail_of(*b), HasSubstr("freed by cuMemFreeAsync"));
    // The backend relies on no answer: work on the freed memory is refused, naming the rule.
    const std::int32_t v = 1;
    EXPECT_THAT([&] { b->fill_async(dense(t, {4}, 4), &v, s); },
                ThrowsCaiError(Errc::device_error, HasSubstr("undefined on a real driver")));
  };
  expect_undefined("free enqueued");
  release.set_value();
  b->stream_synchronize(s);
  expect_undefined("free done");
  b->stream_destroy(s);
}

// ---------------------------------------------------------------------------------------------
// cuMemGetAddressRange.

TEST(driver_fidelity, cuMemGetAddressRange_answers_for_the_driver_s_allocations_only) {
  auto b = detail::make_sim_backend();
  const DriverApi& api = detail::state_of(*b).api;
  const std::uint64_t device = b->alloc(MemoryKind::device, 512);
  const std::uint64_t pinned = b->alloc(MemoryKind::pinned_host, 512);
  const std::uint64_t managed = b->alloc(MemoryKind::managed, 512);
  const std::uint64_t pooled = b->alloc_async(512, kLegacyDefaultStream);
  std::vector<char> host(8192);
  const std::uint64_t page = (addr(host.data()) + 4095) / 4096 * 4096;
  b->host_register(page, 4096);
  CUdeviceptr base = 0;
  std::size_t size = 0;
  // numba-cuda's test_host_alloc_mapped sizes cuMemHostAlloc memory with it on GPUs.
  for (const std::uint64_t p : {device, pinned, managed, pooled}) {
    EXPECT_EQ(api.cuMemGetAddressRange(&base, &size, p + 100), CUDA_SUCCESS);
    EXPECT_EQ(base, p);
    EXPECT_GE(size, 512u);
  }
  EXPECT_EQ(api.cuMemGetAddressRange(&base, &size, page + 100), CUDA_ERROR_INVALID_VALUE);
  EXPECT_THAT(detail_of(*b), HasSubstr("not memory the driver allocated"));
  // The backend's checks read the range attributes: views inside each are accepted, views
  // past each end refused, for memory of another library too.
  auto other = detail::make_backend(detail::state_of(*b).driver);
  for (const std::uint64_t p : {pinned, managed, pooled, page}) {
    const PointerInfo info = other->pointer_info(p + 100);
    EXPECT_EQ(info.alloc_base, p);
    EXPECT_GE(info.alloc_size, 512u);
    const std::int32_t v = 2;
    other->fill_async(dense(p + 256, {64}, 4), &v, kLegacyDefaultStream);
    EXPECT_THAT([&] { other->fill_async(dense(p + 256, {2000}, 4), &v, kLegacyDefaultStream); },
                ThrowsCaiError(Errc::device_error, HasSubstr("runs past the end")));
  }
  other->synchronize();
  b->host_unregister(page);
  b->free(pooled);
  b->free(device);
  b->free(pinned);
  b->free(managed);
  b->synchronize();
}

// ---------------------------------------------------------------------------------------------
// Virtual-memory reservations.

TEST(driver_fidelity, a_reservation_is_one_range_and_views_into_its_unmapped_parts_are_refused) {
  auto b = detail::make_sim_backend();
  const std::uint64_t p = sim::alloc_chunked(*b, 4096, 4);
  // The range attributes span the whole reservation, as the driver reports it.
  PointerInfo info = b->pointer_info(p + 5000);
  EXPECT_EQ(info.kind, MemoryKind::device);
  EXPECT_EQ(info.alloc_base, p);
  EXPECT_EQ(info.alloc_size, 4u * 4096);
  const std::int32_t v = 7;
  b->fill_async(dense(p, {4096}, 4), &v, kLegacyDefaultStream);  // every chunk
  // The third chunk unmapped: a hole the range attributes do not show.
  sim::free_chunked(*b, p + 2 * 4096);
  EXPECT_EQ(b->pointer_info(p + 5000).alloc_size, 4u * 4096);
  EXPECT_EQ(b->pointer_info(p + 2 * 4096 + 8).kind, MemoryKind::unregistered);
  b->fill_async(dense(p, {2048}, 4), &v, kLegacyDefaultStream);             // chunks 0 and 1
  b->fill_async(dense(p + 3 * 4096, {1024}, 4), &v, kLegacyDefaultStream);  // chunk 3
  EXPECT_THAT([&] { b->fill_async(dense(p + 4096, {2048}, 4), &v, kLegacyDefaultStream); },
              ThrowsCaiError(Errc::device_error,
                             HasSubstr("runs into an unmapped part of its reservation")));
  EXPECT_THAT([&] { b->fill_async(dense(p, {4096}, 4), &v, kLegacyDefaultStream); },
              ThrowsCaiError(Errc::device_error,
                             HasSubstr("runs into an unmapped part of its reservation")));
  EXPECT_THAT([&] { b->fill_async(dense(p + 3 * 4096, {1025}, 4), &v, kLegacyDefaultStream); },
              ThrowsCaiError(Errc::device_error, HasSubstr("runs past the end")));
  b->synchronize();
  sim::free_chunked(*b, p);
  EXPECT_EQ(b->pointer_info(p + 3 * 4096).kind, MemoryKind::unregistered);
}

}  // namespace
}  // namespace cai::device
