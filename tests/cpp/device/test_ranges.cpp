// The allocations the backend knows without asking the driver (src/device/backend/ranges.h): its
// own, exact until freed; foreign ones found for any pointer inside, never outside, replacing
// the ones they overlap, bounded; memory of pools and virtual-memory mappings never remembered.

#include <gtest/gtest.h>

#include "backend/ranges.h"

namespace cai::device::detail {
namespace {

Ranges::Entry range(std::uint64_t base, std::uint64_t size, int device = 0, bool own = false) {
  Ranges::Entry e;
  e.info.kind = MemoryKind::device;
  e.info.device = device;
  e.info.device_accessible = true;
  e.info.alloc_base = base;
  e.info.alloc_size = size;
  e.own = own;
  e.cacheable = true;
  return e;
}

TEST(ranges, found_inside_only) {
  Ranges r;
  r.add_foreign(range(0x1000, 0x100));
  EXPECT_EQ(r.find(0x1000)->info.alloc_base, 0x1000u);
  EXPECT_EQ(r.find(0x10ff)->info.alloc_size, 0x100u);
  EXPECT_FALSE(r.find(0x1100));
  EXPECT_FALSE(r.find(0xfff));
  EXPECT_FALSE(r.find(0));
}

TEST(ranges, unknown_and_pool_memory_is_never_remembered) {
  Ranges r;
  r.add_foreign(Ranges::Entry{});   // unregistered: must be asked about every time
  r.add_foreign(range(0x1000, 0));  // no size: nothing to check a range against
  Ranges::Entry pool = range(0x2000, 0x100);
  pool.cacheable = false;  // a stream-ordered pool's or a mapping's: addresses reused at will
  r.add_foreign(pool);
  EXPECT_EQ(r.foreign_size(), 0u);
  EXPECT_FALSE(r.find(0x2000));
}

TEST(ranges, a_reused_address_range_replaces_what_it_overlaps) {
  Ranges r;
  r.add_foreign(range(0x1000, 0x100, 0));
  r.add_foreign(range(0x1100, 0x100, 0));
  r.add_foreign(range(0x10c0, 0x80, 1));  // overlaps both: both are stale
  EXPECT_EQ(r.foreign_size(), 1u);
  EXPECT_FALSE(r.find(0x1000));
  EXPECT_EQ(r.find(0x10c0)->info.device, 1);
  EXPECT_FALSE(r.find(0x1180));
  r.forget(0x10d0, 1);
  EXPECT_EQ(r.foreign_size(), 0u);
}

TEST(ranges, own_allocations_are_exact_and_stay) {
  Ranges r(1);
  r.add_own(range(0x1000, 0x100, 0, true));
  r.add_foreign(range(0x1000, 0x200));  // the driver's view never replaces our own record
  r.add_foreign(range(0x3000, 0x10));
  r.add_foreign(range(0x4000, 0x10));  // capacity 1: the foreign one before it goes
  r.forget(0x1000, 0x100);             // forgetting foreign ranges leaves own ones
  EXPECT_EQ(r.find(0x10ff)->info.alloc_size, 0x100u);
  EXPECT_TRUE(r.find(0x10ff)->own);
  EXPECT_FALSE(r.find(0x3000));
  EXPECT_TRUE(r.find(0x4000));
  EXPECT_TRUE(r.remove_own(0x1000));
  EXPECT_FALSE(r.remove_own(0x1000));
  EXPECT_FALSE(r.remove_own(0x4000));  // not ours
  EXPECT_FALSE(r.find(0x1000));
}

TEST(ranges, the_oldest_go_beyond_the_capacity) {
  Ranges r(2);
  r.add_foreign(range(0x1000, 0x10));
  r.add_foreign(range(0x2000, 0x10));
  r.add_foreign(range(0x3000, 0x10));
  EXPECT_EQ(r.foreign_size(), 2u);
  EXPECT_FALSE(r.find(0x1000));
  EXPECT_TRUE(r.find(0x2000));
  EXPECT_TRUE(r.find(0x3000));
}

TEST(ranges, capacity_zero_remembers_nothing_foreign) {
  Ranges r(0);  // CAI_CUDA_POINTER_CACHE=0: the driver is asked at every use
  r.add_foreign(range(0x1000, 0x10));
  EXPECT_FALSE(r.find(0x1000));
  r.add_own(range(0x2000, 0x10, 0, true));
  EXPECT_TRUE(r.find(0x2000));
}

}  // namespace
}  // namespace cai::device::detail
