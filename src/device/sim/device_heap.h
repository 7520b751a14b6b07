#pragma once

// Internal: one simulated device's memory. A shared segment (device/shared_memory.h) that
// another process can map, seen twice: at its device addresses without any access (so that a
// host dereference of a device pointer faults, as on a GPU) and at a private alias that the
// simulated kernels and copies use. Freed addresses are handed out again only after the rest
// of the address space was used (next fit from a moving cursor), so that a stale pointer is
// reported instead of landing in a new allocation. A block of own_segment_bytes or more is a
// segment of its own (its device addresses are still the heap's): a process that opened it
// keeps only that block alive after the exporter exits, not the exporter's whole memory.
// Not thread-safe: the simulator calls it with its mutex held.

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <utility>

#include "sim/driver_names.h"

namespace cai::device::sim {

class DeviceHeap {
 public:
  /// Reserves `capacity` bytes of address space twice; memory is taken as blocks are written.
  explicit DeviceHeap(std::size_t capacity);
  ~DeviceHeap();
  DeviceHeap(const DeviceHeap&) = delete;
  DeviceHeap& operator=(const DeviceHeap&) = delete;

  /// The device address of a new block of `bytes` (aligned to `alignment`), or 0 when none is
  /// free.
  std::uint64_t allocate(std::size_t bytes);
  /// Returns a block that allocate() gave, of the same size; its whole pages go back to the
  /// system.
  void release(std::uint64_t ptr, std::size_t bytes);

  /// The address space not taken by blocks (what cuMemGetInfo reports free).
  std::size_t free_bytes() const noexcept;
  std::size_t capacity() const noexcept { return capacity_; }

  bool contains(std::uint64_t ptr) const noexcept {
    return ptr >= base_ && ptr - base_ < capacity_;
  }
  /// Where the CPU reaches the block that starts at device address ptr.
  std::byte* alias(std::uint64_t ptr) const noexcept;
  /// The segment descriptor and offset of the block at ptr (what an importer maps).
  std::pair<int, std::uint64_t> share_point(std::uint64_t ptr) const noexcept;
  /// How much another process maps of the `bytes` at ptr: the whole underlying block, as the
  /// driver shares it (an allocation's own segment; else its 2 MiB block, within the heap).
  std::uint64_t shared_block(std::uint64_t ptr, std::uint64_t bytes) const noexcept;

  static constexpr std::size_t alignment = 256;
  static constexpr std::size_t own_segment_bytes = std::size_t{2} << 20;

 private:
  static std::size_t rounded(std::size_t bytes) {
    return (bytes + alignment - 1) / alignment * alignment;
  }

  std::shared_ptr<SharedMapping> segment_;  // the alias (read-write)
  std::uint64_t base_ = 0;                  // the device addresses (no access)
  std::byte* alias_ = nullptr;
  std::size_t capacity_ = 0;
  // An address range of the free list: its offset, or 0 and false when none is free.
  std::pair<std::uint64_t, bool> take(std::uint64_t need);
  void give_back(std::uint64_t off, std::uint64_t size);

  struct OwnBlock {
    std::uint64_t off, size;  // the address range taken (page-aligned start inside)
    std::shared_ptr<SharedMapping> segment;
  };
  std::map<std::uint64_t, std::uint64_t> free_;  // offset -> size, disjoint, merged
  std::uint64_t cursor_ = 0;                     // next fit starts here
  std::map<std::uint64_t, OwnBlock> own_;        // by device address
};

/// Reserves `bytes` of address space that nothing may access (a device address range).
std::uint64_t reserve_addresses(std::size_t bytes);
void unreserve_addresses(std::uint64_t base, std::size_t bytes) noexcept;

}  // namespace cai::device::sim
