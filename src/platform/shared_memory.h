#pragma once

// Internal: memory shared between the processes of one machine. A segment is a memfd mapped
// MAP_SHARED; another process maps it through /proc/<pid>/fd/<fd> while the owner runs, and
// keeps it after the owner exits. The simulator's device memory and interprocess events live
// in such segments, and so do the reference counts of cai's IPC handles (docs/scale-out.md).

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "process_id.h"

namespace cai::platform {

/// A shared segment mapped into this process.
class SharedMapping {
 public:
  /// A new zero-filled segment of `bytes` (sparse: a page takes memory when first written).
  /// `name` shows in /proc/<pid>/fd as "/memfd:<name>"; it must start with "cai".
  static std::shared_ptr<SharedMapping> create(std::size_t bytes, const char* name);
  /// Maps [offset, offset + bytes) of the segment that process `owner` holds as descriptor
  /// `fd`. Throws Error(device_error) saying why not: the owner exited, the descriptor is not a
  /// cai segment (a stale handle), the range is outside it, or /proc refused access.
  static std::shared_ptr<SharedMapping> open(const ProcessId& owner, int fd, std::uint64_t offset,
                                             std::size_t bytes, const char* where);

  ~SharedMapping();
  SharedMapping(const SharedMapping&) = delete;
  SharedMapping& operator=(const SharedMapping&) = delete;

  /// The first byte of the mapped range.
  std::byte* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  /// The descriptor other processes open (-1 for a segment opened from another process).
  int fd() const noexcept { return fd_; }
  /// Returns the whole pages inside [offset, offset + bytes) of a created segment to the
  /// system; they read as zeros afterwards, in every process.
  void discard(std::uint64_t offset, std::size_t bytes) noexcept;

 private:
  SharedMapping(int fd, void* map, std::size_t map_size, std::byte* data, std::size_t size)
      : fd_(fd), map_(map), map_size_(map_size), data_(data), size_(size) {}

  int fd_;
  void* map_;
  std::size_t map_size_;
  std::byte* data_;
  std::size_t size_;
};

/// Blocks while `word` holds `expected`, at most `timeout` (a futex shared between processes);
/// may return early. Pair with shared_wake_all after changing the word.
void shared_wait(std::atomic<std::uint32_t>& word, std::uint32_t expected,
                 std::chrono::milliseconds timeout) noexcept;
void shared_wake_all(std::atomic<std::uint32_t>& word) noexcept;

}  // namespace cai::platform
