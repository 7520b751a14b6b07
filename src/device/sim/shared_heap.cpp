#include "device/sim/shared_heap.h"

#include <algorithm>

namespace cai::device::detail {

SharedHeap::SharedHeap(std::size_t capacity)
    : segment_(SharedMapping::create(capacity, "cai-sim-device-memory")),
      base_(reinterpret_cast<std::uintptr_t>(segment_->data())),
      capacity_(capacity) {
  insert_free(0, capacity);
}

void SharedHeap::insert_free(std::uint64_t off, std::uint64_t size) {
  free_by_offset_.emplace(off, size);
  free_by_size_.emplace(size, off);
}

void SharedHeap::erase_free(std::map<std::uint64_t, std::uint64_t>::iterator it) {
  free_by_size_.erase({it->second, it->first});
  free_by_offset_.erase(it);
}

std::uint64_t SharedHeap::allocate(std::size_t bytes) {
  if (bytes == 0 || bytes > capacity_) return 0;
  const std::uint64_t need = rounded(bytes);
  auto fit = free_by_size_.lower_bound({need, 0});  // the smallest block that is large enough
  if (fit == free_by_size_.end()) return 0;
  const auto [size, off] = *fit;
  erase_free(free_by_offset_.find(off));
  if (size > need) insert_free(off + need, size - need);
  return base_ + off;
}

void SharedHeap::release(std::uint64_t ptr, std::size_t bytes) {
  const std::uint64_t released_lo = offset_of(ptr), released_hi = released_lo + rounded(bytes);
  std::uint64_t off = released_lo;
  std::uint64_t size = rounded(bytes);
  // Merge with the free neighbours, so that large blocks form again.
  auto next = free_by_offset_.lower_bound(off);
  if (next != free_by_offset_.end() && next->first == off + size) {
    size += next->second;
    erase_free(next);
  }
  auto after = free_by_offset_.lower_bound(off);
  if (after != free_by_offset_.begin()) {
    auto prev = std::prev(after);
    if (prev->first + prev->second == off) {
      off = prev->first;
      size += prev->second;
      erase_free(prev);
    }
  }
  insert_free(off, size);
  // The pages that the released block touches and that are now wholly free (not the whole
  // merged block: most of it is untouched already).
  constexpr std::uint64_t page = 4096;
  const std::uint64_t lo = std::max(off, released_lo / page * page);
  const std::uint64_t hi = std::min(off + size, (released_hi + page - 1) / page * page);
  if (hi > lo) segment_->discard(lo, hi - lo);
}

}  // namespace cai::device::detail
