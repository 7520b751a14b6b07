// The CUDA backend's memory of other libraries' allocations (src/device/cuda/foreign_ranges.h):
// found for any pointer inside, never outside; overlapping ranges replace each other; bounded.

#include <gtest/gtest.h>

#include "device/cuda/foreign_ranges.h"

namespace cai::device::cuda {
namespace {

PointerInfo range(std::uint64_t base, std::uint64_t size, int device = 0) {
  PointerInfo i;
  i.kind = MemoryKind::device;
  i.device = device;
  i.device_accessible = true;
  i.alloc_base = base;
  i.alloc_size = size;
  return i;
}

TEST(foreign_ranges, found_inside_only) {
  ForeignRanges r;
  r.add(range(0x1000, 0x100));
  EXPECT_EQ(r.find(0x1000)->alloc_base, 0x1000u);
  EXPECT_EQ(r.find(0x10ff)->alloc_size, 0x100u);
  EXPECT_FALSE(r.find(0x1100));
  EXPECT_FALSE(r.find(0xfff));
  EXPECT_FALSE(r.find(0));
}

TEST(foreign_ranges, unknown_memory_is_never_remembered) {
  ForeignRanges r;
  r.add(PointerInfo{});     // unregistered: must be asked about every time
  r.add(range(0x1000, 0));  // no size: nothing to check a range against
  EXPECT_EQ(r.size(), 0u);
}

TEST(foreign_ranges, a_reused_address_range_replaces_what_it_overlaps) {
  ForeignRanges r;
  r.add(range(0x1000, 0x100, 0));
  r.add(range(0x1100, 0x100, 0));
  r.add(range(0x10c0, 0x80, 1));  // overlaps both: both are stale
  EXPECT_EQ(r.size(), 1u);
  EXPECT_FALSE(r.find(0x1000));
  EXPECT_EQ(r.find(0x10c0)->device, 1);
  EXPECT_FALSE(r.find(0x1180));
  r.forget(0x10d0, 1);
  EXPECT_EQ(r.size(), 0u);
}

TEST(foreign_ranges, the_oldest_go_beyond_the_capacity) {
  ForeignRanges r(2);
  r.add(range(0x1000, 0x10));
  r.add(range(0x2000, 0x10));
  r.add(range(0x3000, 0x10));
  EXPECT_EQ(r.size(), 2u);
  EXPECT_FALSE(r.find(0x1000));
  EXPECT_TRUE(r.find(0x2000));
  EXPECT_TRUE(r.find(0x3000));
}

TEST(foreign_ranges, capacity_zero_remembers_nothing) {
  ForeignRanges r(0);  // CAI_CUDA_POINTER_CACHE=0: the driver is asked at every use
  r.add(range(0x1000, 0x10));
  EXPECT_FALSE(r.find(0x1000));
}

}  // namespace
}  // namespace cai::device::cuda
