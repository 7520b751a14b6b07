#pragma once

// Internal: one simulated device's memory, a shared segment (see device/shared_memory.h) that
// another process can map, with a best-fit allocator over it. Not thread-safe: the simulator
// calls it with its mutex held.

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <utility>

#include "device/shared_memory.h"

namespace cai::device::detail {

class SharedHeap {
 public:
  /// Reserves `capacity` bytes of address space; memory is taken as blocks are written.
  explicit SharedHeap(std::size_t capacity);

  /// The address of a new block of `bytes` (aligned to `alignment`), or 0 when none is free.
  std::uint64_t allocate(std::size_t bytes);
  /// Returns a block that allocate() gave, of the same size; its whole pages go back to the
  /// system.
  void release(std::uint64_t ptr, std::size_t bytes);

  bool contains(std::uint64_t ptr) const noexcept {
    return ptr >= base_ && ptr < base_ + capacity_;
  }
  /// Offset of ptr in the segment (what an importer maps).
  std::uint64_t offset_of(std::uint64_t ptr) const noexcept { return ptr - base_; }
  int fd() const noexcept { return segment_->fd(); }
  std::size_t capacity() const noexcept { return capacity_; }

  static constexpr std::size_t alignment = 256;

 private:
  static std::size_t rounded(std::size_t bytes) {
    return (bytes + alignment - 1) / alignment * alignment;
  }
  void insert_free(std::uint64_t off, std::uint64_t size);
  void erase_free(std::map<std::uint64_t, std::uint64_t>::iterator it);

  std::shared_ptr<SharedMapping> segment_;
  std::uint64_t base_ = 0;
  std::size_t capacity_ = 0;
  std::map<std::uint64_t, std::uint64_t> free_by_offset_;           // offset -> size
  std::set<std::pair<std::uint64_t, std::uint64_t>> free_by_size_;  // (size, offset)
};

}  // namespace cai::device::detail
