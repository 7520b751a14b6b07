// Where the simulated driver does what the real driver documents, and the backend relies on
// nothing more: foreign memory's attributes, memory freed by cuMemFreeAsync, cuMemGetAddressRange,
// virtual-memory reservations (docs/simulator.md, "Where it differs from a real driver").

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <future>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "backend/backend.h"
#include "cai/core/error.h"
#include "cai/device/backend.h"
#include "cai/device/simulator.h"
#include "cai_matchers.h"
#include "driver/api.h"
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
// Pointer attributes. Their byte widths and the answer for memory the driver does not know are
// asked of both drivers by cuda_backend_test.pointer_attributes (test_backend.cpp).

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
    // Every other use of the freed memory is named the same way (as compute-sanitizer would).
    CUipcMemHandle handle{};
    EXPECT_EQ(api.cuIpcGetMemHandle(&handle, t), CUDA_ERROR_ILLEGAL_STATE);
    EXPECT_THAT(detail_of(*b), HasSubstr("undefined on a real driver: cuIpcGetMemHandle"));
    EXPECT_EQ(api.cuMemsetD8Async(t + 8, 0, 8, nullptr), CUDA_ERROR_ILLEGAL_STATE);
    EXPECT_THAT(detail_of(*b), HasSubstr("undefined on a real driver: dst [" + test::hex(t + 8)));
    std::vector<char> bytes(8);
    EXPECT_EQ(api.cuMemcpyAsync(addr(bytes.data()), t, 8, nullptr), CUDA_ERROR_ILLEGAL_STATE);
    EXPECT_THAT(detail_of(*b), HasSubstr("in memory freed by cuMemFreeAsync at " + test::hex(t)));
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

// ---------------------------------------------------------------------------------------------
// Registered host memory.

// A page of `buffer` (which holds at least two pages), for cuMemHostRegister.
std::uint64_t page_of(std::vector<char>& buffer, int index = 0) {
  return (addr(buffer.data()) + 4095) / 4096 * 4096 + static_cast<std::uint64_t>(index) * 4096;
}

TEST(driver_fidelity, registered_memory_is_mapped_for_the_device_only_with_DEVICEMAP) {
  auto b = detail::make_sim_backend();
  const DriverApi& api = detail::state_of(*b).api;
  std::vector<char> host(3 * 4096);
  const std::uint64_t mapped = page_of(host, 0), unmapped = page_of(host, 1);
  // cai registers with DEVICEMAP: its kernels and memsets reach the memory.
  b->host_register(mapped, 4096);
  CUdeviceptr d = 0;
  EXPECT_EQ(api.cuMemHostGetDevicePointer(&d, reinterpret_cast<void*>(mapped + 8), 0),
            CUDA_SUCCESS);
  EXPECT_EQ(d, mapped + 8);  // the device uses host pointers (as an H100 on Linux reports)
  const std::int32_t seven = 7;
  b->fill_async(dense(mapped, {16}, 4), &seven, kLegacyDefaultStream);
  b->memset_async(mapped + 64, 3, 64, kLegacyDefaultStream);
  b->synchronize();
  EXPECT_EQ(reinterpret_cast<const std::int32_t*>(mapped)[15], 7);
  EXPECT_EQ(reinterpret_cast<const unsigned char*>(mapped)[127], 3);
  // Registered without DEVICEMAP: page-locked for copies, but nothing is mapped for kernels.
  ASSERT_EQ(
      api.cuMemHostRegister(reinterpret_cast<void*>(unmapped), 4096, kMemHostRegisterPortable),
      CUDA_SUCCESS);
  EXPECT_EQ(api.cuMemHostGetDevicePointer(&d, reinterpret_cast<void*>(unmapped), 0),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_THAT(detail_of(*b), HasSubstr("without CU_MEMHOSTREGISTER_DEVICEMAP"));
  EXPECT_EQ(api.cuMemsetD8Async(unmapped, 1, 64, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_THAT(detail_of(*b), HasSubstr("registered without CU_MEMHOSTREGISTER_DEVICEMAP"));
  EXPECT_THAT([&] { b->fill_async(dense(unmapped, {16}, 4), &seven, kLegacyDefaultStream); },
              ThrowsCaiError(Errc::device_error, HasSubstr("CU_MEMHOSTREGISTER_DEVICEMAP")));
  EXPECT_EQ(api.cuMemcpyAsync(unmapped, mapped, 64, nullptr), CUDA_SUCCESS);
  b->synchronize();
  EXPECT_EQ(reinterpret_cast<const std::int32_t*>(unmapped)[15], 7);
  EXPECT_EQ(api.cuMemHostUnregister(reinterpret_cast<void*>(unmapped)), CUDA_SUCCESS);
  b->host_unregister(mapped);
}

TEST(driver_fidelity,
     kernels_reach_registered_memory_at_its_device_pointer_where_host_pointers_fail) {
  auto b = detail::make_sim_backend();
  const DriverApi& api = detail::state_of(*b).api;
  constexpr auto kHostPointer = CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM;
  ASSERT_EQ(detail::state_of(*b).sim->caiSimSetDeviceAttribute(0, kHostPointer, 0), CUDA_SUCCESS);
  int can = 1;
  ASSERT_EQ(api.cuDeviceGetAttribute(&can, kHostPointer, 0), CUDA_SUCCESS);
  EXPECT_EQ(can, 0);
  std::vector<char> host(3 * 4096);
  const std::uint64_t page = page_of(host);
  b->host_register(page, 4096);
  // The simulator's switch cannot change under registered memory.
  EXPECT_EQ(detail::state_of(*b).sim->caiSimSetDeviceAttribute(1, kHostPointer, 0),
            CUDA_ERROR_NOT_PERMITTED);
  CUdeviceptr d = 0;
  ASSERT_EQ(api.cuMemHostGetDevicePointer(&d, reinterpret_cast<void*>(page), 0), CUDA_SUCCESS);
  EXPECT_NE(d, page);  // as the driver documents when a device cannot use the host pointer
  EXPECT_EQ(api.cuMemsetD8Async(page, 1, 64, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_THAT(detail_of(*b), HasSubstr("CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM is 0"));
  // cai's kernels and memsets reach it at the device pointer: fill, memset, add, strided copy.
  const auto* values = reinterpret_cast<const std::int32_t*>(page);
  const std::int32_t seven = 7;
  b->fill_async(dense(page, {256}, 4), &seven, kLegacyDefaultStream);
  b->memset_async(page + 1024, 0, 1024, kLegacyDefaultStream);
  const Operand add[] = {dense(page + 1024, {256}, 4), dense(page, {256}, 4),
                         dense(page, {256}, 4)};
  b->elementwise_async(ElementwiseOp::add, ElementType::i32, add, kLegacyDefaultStream);
  b->copy_strided_async(test::operand(page + 2048, {128}, {8}, 4),
                        test::operand(page + 1024, {128}, {8}, 4), kLegacyDefaultStream);
  b->synchronize();
  EXPECT_EQ(values[0], 7);
  EXPECT_EQ(values[256], 14);
  EXPECT_EQ(values[512], 14);
  EXPECT_EQ(values[513], 0);  // between the strided elements: not written
  // A kernel that is given the host address (an extension module's) would miss the memory:
  // the check every such kernel gets refuses it.
  EXPECT_THAT([&] { b->check_kernel_memory("ext()", "array 0", page, page + 64, 0); },
              ThrowsCaiError(Errc::device_error, HasSubstr("REGISTERED_MEM is 0")));
  // The race detector keeps the kernels' accesses at the host address: a host write that is
  // not ordered after a kernel's races with it.
  const StreamHandle s = b->stream_create(false);
  b->fill_async(dense(page, {4}, 4), &seven, s);
  EXPECT_THAT([&] { sim::host_access(*b, sim::Access::contiguous(page, 16, true)); },
              ThrowsCaiError(Errc::race, HasSubstr("on the host")));
  b->stream_synchronize(s);
  b->stream_destroy(s);
  b->host_unregister(page);
  EXPECT_EQ(detail::state_of(*b).sim->caiSimSetDeviceAttribute(1, kHostPointer, 0), CUDA_SUCCESS);
  EXPECT_EQ(detail::state_of(*b).sim->caiSimSetDeviceAttribute(
                1, CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 0),
            CUDA_ERROR_NOT_SUPPORTED);
}

TEST(driver_fidelity, read_only_registered_memory_is_read_by_the_device_never_written) {
  auto b = detail::make_sim_backend();
  std::vector<char> host(3 * 4096);
  const std::uint64_t page = page_of(host);
  std::memset(reinterpret_cast<void*>(page), 5, 64);
  b->host_register(page, 4096, true);
  const std::uint64_t d = b->alloc(MemoryKind::device, 64);
  b->copy_async(d, page, 64, kLegacyDefaultStream);
  const Operand add[] = {dense(d, {16}, 4), dense(page, {16}, 4), dense(d, {16}, 4)};
  b->elementwise_async(ElementwiseOp::add, ElementType::i32, add, kLegacyDefaultStream);
  const std::int32_t seven = 7;
  EXPECT_THAT([&] { b->fill_async(dense(page, {16}, 4), &seven, kLegacyDefaultStream); },
              ThrowsCaiError(Errc::device_error, HasSubstr("CU_MEMHOSTREGISTER_READ_ONLY")));
  EXPECT_THAT([&] { b->copy_async(page, d, 64, kLegacyDefaultStream); },
              ThrowsCaiError(Errc::device_error, HasSubstr("CU_MEMHOSTREGISTER_READ_ONLY")));
  std::vector<std::int32_t> back(16);
  b->copy_async(addr(back.data()), d, 64, kLegacyDefaultStream);
  EXPECT_EQ(back[0], 2 * 0x05050505);
  b->synchronize();
  b->free(d);
  b->host_unregister(page);
}

// ---------------------------------------------------------------------------------------------
// Copies with pageable memory.

TEST(driver_fidelity, a_pageable_host_to_device_copy_returns_once_the_bytes_are_staged) {
  auto b = detail::make_sim_backend();
  const DriverApi& api = detail::state_of(*b).api;
  const StreamHandle s = b->stream_create(false);
  const std::uint64_t d = b->alloc(MemoryKind::device, 64);
  std::vector<unsigned char> host(64, 1);
  // The stream held by a task until released (a copy that waited for it would fail below,
  // once the task gives up: the wait only keeps a broken simulator from hanging the test).
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  sim::enqueue_task(*b, s, {}, [released](std::span<const std::uint64_t>) {
    released.wait_for(std::chrono::seconds(20));
  });
  b->copy_async(d, addr(host.data()), 64, s);
  // Staged: the copy is still queued, and the buffer is the caller's again (no race).
  EXPECT_EQ(api.cuStreamQuery(reinterpret_cast<CUstream>(s)), CUDA_ERROR_NOT_READY);
  std::fill(host.begin(), host.end(), 2);
  sim::host_access(*b, sim::Access::contiguous(addr(host.data()), 64, true));
  release.set_value();
  // Device to pageable memory: done when the call returns; the device got the staged bytes.
  std::vector<unsigned char> back(64, 0);
  b->copy_async(addr(back.data()), d, 64, s);
  sim::host_access(*b, sim::Access::contiguous(addr(back.data()), 64, true));
  EXPECT_EQ(back, std::vector<unsigned char>(64, 1));
  // Staging is the host reading the buffer now: a write to it still queued on a stream races.
  sim::enqueue_task(*b, s, std::vector{sim::Access::contiguous(addr(host.data()), 64, true)},
                    [](std::span<const std::uint64_t>) {});
  EXPECT_THAT([&] { b->copy_async(d, addr(host.data()), 64, s); },
              ThrowsCaiError(Errc::race, HasSubstr("cuMemcpyAsync")));
  b->stream_synchronize(s);
  b->stream_destroy(s);
  b->free(d);
}

}  // namespace
}  // namespace cai::device
