#pragma once

// The CAI v3 synchronization rules, in one place (docs/core-interface.md, "Synchronization").
//
// Every piece of memory that cai hands out or imports has a SyncState: the stream after which
// all work queued on that memory is complete (the CAI `stream` of the data), or none.
// Work on another stream is ordered with events, never by blocking the host:
//   before: the work stream waits for an event recorded on the data's stream (consumer rule);
//   after:  the data's stream waits for an event recorded after the work (so later producer
//           work cannot overtake it), which also keeps the producer rule: synchronizing on the
//           exported stream alone is enough.
// Data with no stream adopts the work stream, so that re-exporting it names a stream to wait on.

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cai/device/backend.h"

namespace cai::sync {

using device::StreamHandle;

/// A stream handle and what keeps the stream alive (null for streams cai does not own:
/// the default streams, or a producer's stream that the producer keeps alive).
struct StreamRef {
  StreamHandle handle = 0;
  std::shared_ptr<const void> owner;
};

/// The stream of one piece of memory, shared by an array and all of its views.
class SyncState {
 public:
  SyncState() = default;
  explicit SyncState(std::optional<StreamRef> stream) : stream_(std::move(stream)) {}

  /// The CAI `stream` of the data: none when no work is queued on it.
  std::optional<StreamHandle> handle() const {
    std::lock_guard lock(mutex_);
    return stream_ ? std::optional<StreamHandle>(stream_->handle) : std::nullopt;
  }
  std::optional<StreamRef> stream() const {
    std::lock_guard lock(mutex_);
    return stream_;
  }
  void set_stream(std::optional<StreamRef> s) {
    std::lock_guard lock(mutex_);
    stream_ = std::move(s);
  }

 private:
  mutable std::mutex mutex_;
  std::optional<StreamRef> stream_;
};

/// Orders one piece of stream work against the data it touches.
/// Usage: StreamOrder order(backend, work); order.add(a_state); order.add(b_state);
///        ... enqueue the work on work.handle ...; order.finish();
/// Each distinct data stream costs one event record and one wait before, and one wait after
/// (the work stream's event is recorded once). Data already on the work stream costs nothing.
/// The caller keeps the states alive until finish().
class StreamOrder {
 public:
  StreamOrder(device::Backend& backend, StreamRef work)
      : backend_(backend), work_(std::move(work)) {}
  StreamOrder(const StreamOrder&) = delete;
  StreamOrder& operator=(const StreamOrder&) = delete;

  /// Makes the work stream wait for the data's stream now, and remembers the data for finish().
  void add(SyncState& state);
  /// After the work is enqueued: makes each data stream wait for it; data without a stream
  /// adopts the work stream.
  void finish();

 private:
  device::Backend& backend_;
  StreamRef work_;
  std::vector<SyncState*> states_;
};

/// Makes `waiter` wait for all work queued so far on `producer` (record + wait, no host block).
/// Does nothing when they are the same stream.
void wait_for(device::Backend& backend, StreamHandle producer, StreamHandle waiter);

/// A hook that sees every wait that cai enqueues (for `python -m cai demo` and debugging).
using TraceFn = void (*)(const std::string& line);
void set_trace(TraceFn fn);

}  // namespace cai::sync
