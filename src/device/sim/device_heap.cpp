#include "sim/device_heap.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include "cai/core/error.h"

namespace cai::device::sim {

std::uint64_t reserve_addresses(std::size_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    throw_error(Errc::device_error, "simulator: cannot reserve " + std::to_string(bytes) +
                                        " bytes of device addresses: " + std::strerror(errno));
  }
  return reinterpret_cast<std::uintptr_t>(p);
}

void unreserve_addresses(std::uint64_t base, std::size_t bytes) noexcept {
  ::munmap(reinterpret_cast<void*>(static_cast<std::uintptr_t>(base)), bytes);
}

DeviceHeap::DeviceHeap(std::size_t capacity)
    : segment_(SharedMapping::create(capacity, "cai-sim-device-memory")),
      base_(reserve_addresses(capacity)),
      alias_(segment_->data()),
      capacity_(capacity) {
  free_.emplace(0, capacity);
}

DeviceHeap::~DeviceHeap() {
  unreserve_addresses(base_, capacity_);
}

std::size_t DeviceHeap::free_bytes() const noexcept {
  std::size_t sum = 0;
  for (const auto& [off, size] : free_) sum += size;
  return sum;
}

std::pair<std::uint64_t, bool> DeviceHeap::take(std::uint64_t need) {
  // Next fit: the first free block at or after the cursor, then from the start.
  auto fits = [&](auto it) {
    return it->first + it->second >= std::max(it->first, cursor_) + need;
  };
  auto it = free_.upper_bound(cursor_);
  if (it != free_.begin() && std::prev(it)->first + std::prev(it)->second > cursor_) --it;
  for (; it != free_.end() && !fits(it); ++it) {
  }
  std::uint64_t at = 0;
  if (it != free_.end()) {
    at = std::max(it->first, cursor_);
  } else {
    it = std::find_if(free_.begin(), free_.end(), [&](const auto& b) { return b.second >= need; });
    if (it == free_.end()) return {0, false};
    at = it->first;
  }
  const std::uint64_t off = it->first, size = it->second;
  free_.erase(it);
  if (at > off) free_.emplace(off, at - off);
  if (off + size > at + need) free_.emplace(at + need, off + size - (at + need));
  cursor_ = at + need;
  return {at, true};
}

void DeviceHeap::give_back(std::uint64_t off, std::uint64_t size) {
  // Merge with the free neighbours, so that large blocks form again.
  auto next = free_.lower_bound(off);
  if (next != free_.end() && next->first == off + size) {
    size += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == off) {
      off = prev->first;
      size += prev->second;
      free_.erase(prev);
    }
  }
  free_.emplace(off, size);
}

std::uint64_t DeviceHeap::allocate(std::size_t bytes) {
  if (bytes == 0 || bytes > capacity_) return 0;
  constexpr std::uint64_t page = 4096;
  if (bytes >= own_segment_bytes) {
    const std::uint64_t pages = (bytes + page - 1) / page * page;
    const auto [off, ok] = take(pages + page);  // room to start on a page
    if (!ok) return 0;
    try {
      const std::uint64_t ptr = base_ + (off + page - 1) / page * page;
      own_.emplace(
          ptr, OwnBlock{off, pages + page, SharedMapping::create(pages, "cai-sim-device-memory")});
      return ptr;
    } catch (...) {
      give_back(off, pages + page);  // no segment (out of descriptors): the shared one below
    }
  }
  const auto [at, ok] = take(rounded(bytes));
  return ok ? base_ + at : 0;
}

std::byte* DeviceHeap::alias(std::uint64_t ptr) const noexcept {
  if (auto it = own_.find(ptr); it != own_.end()) return it->second.segment->data();
  return alias_ + (ptr - base_);
}

std::pair<int, std::uint64_t> DeviceHeap::share_point(std::uint64_t ptr) const noexcept {
  if (auto it = own_.find(ptr); it != own_.end()) return {it->second.segment->fd(), 0};
  return {segment_->fd(), ptr - base_};
}

std::uint64_t DeviceHeap::shared_block(std::uint64_t ptr, std::uint64_t bytes) const noexcept {
  if (auto it = own_.find(ptr); it != own_.end()) return it->second.segment->size();
  constexpr std::uint64_t block = std::uint64_t{2} << 20;
  return std::min<std::uint64_t>((bytes + block - 1) / block * block, capacity_ - (ptr - base_));
}

void DeviceHeap::release(std::uint64_t ptr, std::size_t bytes) {
  if (auto it = own_.find(ptr); it != own_.end()) {
    give_back(it->second.off, it->second.size);
    own_.erase(it);  // its segment goes once no other process maps it
    return;
  }
  const std::uint64_t released_lo = ptr - base_, released_hi = released_lo + rounded(bytes);
  give_back(released_lo, rounded(bytes));
  // The pages that the released block touches and that are now wholly free.
  constexpr std::uint64_t page = 4096;
  const auto block = std::prev(free_.upper_bound(released_lo));
  const std::uint64_t off = block->first, size = block->second;
  const std::uint64_t lo = std::max(off, released_lo / page * page);
  const std::uint64_t hi = std::min(off + size, (released_hi + page - 1) / page * page);
  if (hi > lo) segment_->discard(lo, hi - lo);
}

}  // namespace cai::device::sim
