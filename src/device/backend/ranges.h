#pragma once

// Internal: the allocations the backend knows without asking the driver (about a microsecond
// per question on a GPU). Two kinds of entry:
//   own      made by this backend (alloc, alloc_async): added when made, removed when freed,
//            exact and never stale;
//   foreign  memory of another library (CuPy's, PyTorch's or JAX's pools) as the driver
//            described it at first use: the pool's cuMemAlloc block, kept while there is room
//            (at most `capacity`, the oldest go first).
// A foreign range can go stale when its library returns the block to the driver and the
// addresses are reused, so it is trusted only where that is rare: memory of a stream-ordered
// pool or a virtual-memory mapping (no context, or a memory pool handle), whose addresses
// pools reuse at will, is never remembered; a remembered range is asked about again before a
// view past its end is refused, and when work of another device would use it
// (BackendState::check_memory). docs/cuda-backend.md, "Memory checks".
// Header-only so that the CPU tests check it (tests/cpp/device/test_ranges.cpp).

#include <cstddef>
#include <cstdint>
#include <deque>
#include <iterator>
#include <map>
#include <mutex>
#include <optional>
#include <span>

#include "cai/device/backend.h"

namespace cai::device::detail {

class Ranges {
 public:
  struct Entry {
    PointerInfo info;
    bool own = false;
    bool pooled = false;       ///< own: from a stream-ordered pool (freed with cuMemFreeAsync)
    bool cacheable = false;    ///< foreign: may be remembered (has a context, no pool)
    bool ipc_capable = false;  ///< the driver's IS_LEGACY_CUDA_IPC_CAPABLE
    bool reserved = false;     ///< foreign: a virtual-memory reservation (maybe partly mapped)
  };

  explicit Ranges(std::size_t foreign_capacity = 1024) : capacity_(foreign_capacity) {}

  /// The entry whose range holds ptr, if any.
  std::optional<Entry> find(std::uint64_t ptr) const {
    std::lock_guard lock(mutex_);
    auto it = by_base_.upper_bound(ptr);
    if (it == by_base_.begin()) return std::nullopt;
    --it;
    if (ptr - it->first >= it->second.info.alloc_size) return std::nullopt;
    return it->second;
  }
  /// Whether a remembered entry answers for the bytes r of work on `device` (-1: any) as it
  /// is: it holds them all and, when foreign, is of that device (a remembered range of another
  /// device may have been reused since). Anything else is BackendState::check_memory's to
  /// decide, by asking the driver.
  static bool answers(const Entry& e, const ByteRange& r, int device) noexcept {
    if (!e.own && device >= 0 && e.info.kind == MemoryKind::device && e.info.device != device)
      return false;
    if (e.info.kind == MemoryKind::unregistered) return false;
    return ByteRange{e.info.alloc_base, e.info.alloc_base + e.info.alloc_size}.contains(r);
  }
  /// For each non-empty range of `rs`, under one lock (the operands of one operation): the
  /// remembered entry's info into out[k] and true into answered[k] when it answers().
  void find_answers(std::span<const ByteRange> rs, int device, std::span<PointerInfo> out,
                    std::span<bool> answered) const {
    std::lock_guard lock(mutex_);
    for (std::size_t k = 0; k < rs.size(); ++k) {
      if (rs[k].empty()) continue;
      auto it = by_base_.upper_bound(rs[k].lo);
      if (it == by_base_.begin()) continue;
      --it;
      if (answers(it->second, rs[k], device)) {
        out[k] = it->second.info;
        answered[k] = true;
      }
    }
  }

  /// An allocation of this backend.
  void add_own(const Entry& e) {
    std::lock_guard lock(mutex_);
    forget_locked(e.info.alloc_base, e.info.alloc_size, true);
    by_base_[e.info.alloc_base] = e;
  }

  /// Removes this backend's allocation that starts at base; returns it (nullopt: none).
  std::optional<Entry> remove_own(std::uint64_t base) {
    std::lock_guard lock(mutex_);
    auto it = by_base_.find(base);
    if (it == by_base_.end() || !it->second.own) return std::nullopt;
    Entry e = it->second;
    by_base_.erase(it);
    return e;
  }

  /// Remembers a range the driver described, when it is cacheable; ranges it overlaps are
  /// forgotten first (their addresses were reused); the oldest go beyond the capacity.
  void add_foreign(const Entry& e) {
    if (!e.cacheable || e.info.alloc_size == 0 || e.info.kind == MemoryKind::unregistered ||
        capacity_ == 0)
      return;
    std::lock_guard lock(mutex_);
    forget_locked(e.info.alloc_base, e.info.alloc_size, false);
    if (by_base_.contains(e.info.alloc_base)) return;  // an own entry is exact
    by_base_[e.info.alloc_base] = e;
    order_.push_back(e.info.alloc_base);
    while (order_.size() > capacity_) {
      by_base_.erase(order_.front());
      order_.pop_front();
    }
  }

  /// Appends the offsets from lo at which a remembered range starts or ends strictly inside
  /// [lo, lo + bytes): where a host range passes in or out of page-locked memory.
  void cuts(std::uint64_t lo, std::uint64_t bytes, std::vector<std::uint64_t>& out) const {
    const std::uint64_t hi = lo + bytes;
    const auto add = [&](std::uint64_t at) {
      if (at > lo && at < hi) out.push_back(at - lo);
    };
    std::lock_guard lock(mutex_);
    auto it = by_base_.upper_bound(lo);
    if (it != by_base_.begin()) {
      const auto& prev = *std::prev(it);
      add(prev.first + prev.second.info.alloc_size);
    }
    for (; it != by_base_.end() && it->first < hi; ++it) {
      add(it->first);
      add(it->first + it->second.info.alloc_size);
    }
  }

  /// Forgets every foreign range that overlaps [base, base + size).
  void forget(std::uint64_t base, std::uint64_t size) {
    std::lock_guard lock(mutex_);
    forget_locked(base, size, false);
  }

  std::size_t foreign_size() const {
    std::lock_guard lock(mutex_);
    return order_.size();
  }

 private:
  void forget_locked(std::uint64_t base, std::uint64_t size, bool own_too) {
    auto it = by_base_.upper_bound(base);
    if (it != by_base_.begin() &&
        std::prev(it)->first + std::prev(it)->second.info.alloc_size > base)
      --it;
    while (it != by_base_.end() && it->first < base + size) {
      if (it->second.own && !own_too) {
        ++it;
        continue;
      }
      if (!it->second.own) std::erase(order_, it->first);
      it = by_base_.erase(it);
    }
  }

  std::size_t capacity_;
  mutable std::mutex mutex_;
  std::map<std::uint64_t, Entry> by_base_;
  std::deque<std::uint64_t> order_;  // foreign bases, oldest first
};

}  // namespace cai::device::detail
