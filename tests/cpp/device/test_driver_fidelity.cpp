// Where the simulated driver does what the real driver documents, and the backend relies on
// nothing more: boolean pointer attributes (docs/simulator.md, "Where it differs from a real
// driver").

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <tuple>

#include "cai/core/error.h"
#include "cai/device/backend.h"
#include "cai/device/simulator.h"
#include "cai_matchers.h"
#include "device/backend/backend.h"
#include "device/driver/api.h"
#include "test_sim_util.h"

namespace cai::device {
namespace {

using test::dense;
using namespace cu;

// ---------------------------------------------------------------------------------------------
// Boolean pointer attributes.

TEST(driver_fidelity, boolean_pointer_attributes_are_written_as_four_byte_unsigned_ints) {
  auto b = detail::make_sim_backend();
  const DriverApi& api = b->state().api;
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
  auto other = detail::make_backend(b->state().driver);
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

}  // namespace
}  // namespace cai::device
