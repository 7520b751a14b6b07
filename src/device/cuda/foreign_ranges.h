#pragma once

// Internal: the ranges of memory that another library allocated and the driver confirmed
// (cuPointerGetAttributes), so that operations on the memory of CuPy's, PyTorch's or JAX's
// pools do not ask the driver again for every operand (about a microsecond per question).
// A pointer outside every known range is still asked about (a wild pointer is still refused),
// and the backend asks again before refusing a view that runs past a remembered range (the
// range may have been freed and its addresses reused). What a remembered range cannot show: a
// range its library has since returned to the driver (docs/cuda-backend.md, "Memory checks").
// Header-only so that the CPU tests check it (tests/cpp/device/test_foreign_ranges.cpp).

#include <cstddef>
#include <cstdint>
#include <deque>
#include <iterator>
#include <map>
#include <mutex>
#include <optional>

#include "cai/device/backend.h"

namespace cai::device::cuda {

class ForeignRanges {
 public:
  explicit ForeignRanges(std::size_t capacity = 1024) : capacity_(capacity) {}

  /// The remembered range that holds ptr, if any.
  std::optional<PointerInfo> find(std::uint64_t ptr) const {
    std::lock_guard lock(mutex_);
    auto it = by_base_.upper_bound(ptr);
    if (it == by_base_.begin()) return std::nullopt;
    --it;
    if (ptr - it->first >= it->second.alloc_size) return std::nullopt;
    return it->second;
  }

  /// Remembers a range the driver described (alloc_base, alloc_size > 0); ranges it overlaps
  /// are forgotten first (their addresses were reused); the oldest go beyond the capacity.
  void add(const PointerInfo& info) {
    if (info.alloc_size == 0 || info.kind == MemoryKind::unregistered) return;
    std::lock_guard lock(mutex_);
    forget_locked(info.alloc_base, info.alloc_size);
    by_base_[info.alloc_base] = info;
    order_.push_back(info.alloc_base);
    while (by_base_.size() > capacity_ && !order_.empty()) {
      by_base_.erase(order_.front());
      order_.pop_front();
    }
  }

  /// Forgets every range that overlaps [base, base + size).
  void forget(std::uint64_t base, std::uint64_t size) {
    std::lock_guard lock(mutex_);
    forget_locked(base, size);
  }

  std::size_t size() const {
    std::lock_guard lock(mutex_);
    return by_base_.size();
  }

 private:
  void forget_locked(std::uint64_t base, std::uint64_t size) {
    auto it = by_base_.upper_bound(base);
    if (it != by_base_.begin() && std::prev(it)->first + std::prev(it)->second.alloc_size > base)
      --it;
    while (it != by_base_.end() && it->first < base + size) {
      std::erase(order_, it->first);
      it = by_base_.erase(it);
    }
  }

  std::size_t capacity_;
  mutable std::mutex mutex_;
  std::map<std::uint64_t, PointerInfo> by_base_;
  std::deque<std::uint64_t> order_;  // bases, oldest first
};

}  // namespace cai::device::cuda
