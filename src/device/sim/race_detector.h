#pragma once

// Internal: the simulator's race detector. Actors (streams, host threads) carry vector clocks
// computed at enqueue time; every byte remembers its last write and the reads since, so a new
// access is checked against exactly the accesses it must be ordered after.

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace cai::device::sim {

/// One counter per actor: clock[a] = how many of a's accesses are ordered before the owner.
using VectorClock = std::vector<std::uint64_t>;

/// a = max(a, b) componentwise.
void join(VectorClock& a, const VectorClock& b);

/// A byte range [lo, hi) read or written by one operation.
struct AccessRun {
  std::uint64_t lo = 0;
  std::uint64_t hi = 0;
  bool write = false;
};

/// Strided runs beyond this count are replaced by the layout's byte extent (conservative).
inline constexpr std::size_t kMaxRunsPerAccess = std::size_t{1} << 20;

/// Appends the runs of a strided access (validated layout). Returns false when it fell back to
/// the byte extent.
bool append_runs(std::vector<AccessRun>& out, std::uint64_t ptr,
                 std::span<const std::int64_t> shape, std::span<const std::int64_t> strides,
                 std::int64_t itemsize, bool write);

/// Sorted, disjoint runs; a byte both read and written counts as written.
std::vector<AccessRun> normalize_runs(std::vector<AccessRun> runs);

class RaceDetector {
 public:
  /// A slot of the vector clocks. The simulator hands the slot of a destroyed stream to a later
  /// stream (see src/device/sim/streams.cpp), so each recorded access keeps the label of who made
  /// it.
  using Actor = std::uint32_t;

  /// Who performs an access: its slot and its name in messages ("stream 0x...", "the host").
  struct Who {
    Actor actor = 0;
    std::shared_ptr<const std::string> label;
  };

  /// Checks the normalized `runs` of operation `name`, performed by `who` as its access
  /// number clock[who.actor], against the history. Throws Error(race) naming every unordered
  /// conflicting access (and changes nothing); otherwise records the runs.
  void check_and_record(std::span<const AccessRun> runs, const Who& who, const VectorClock& clock,
                        std::string_view name);

  /// Drops the history of [lo, hi) (freed memory).
  void forget(std::uint64_t lo, std::uint64_t hi);
  void clear() { segments_.clear(); }
  /// Number of history intervals (for tests and memory bounds).
  std::size_t segment_count() const { return segments_.size(); }

 private:
  struct Stamp {
    Actor actor = 0;
    std::uint64_t epoch = 0;  ///< 0: none
    const std::string* name = nullptr;
    std::shared_ptr<const std::string> label;
    bool operator==(const Stamp&) const = default;
  };
  struct Segment {
    std::uint64_t hi = 0;
    Stamp write;               ///< last write (epoch 0 when none)
    std::vector<Stamp> reads;  ///< reads since that write, at most one per actor (the latest)
  };
  struct Conflict {
    Stamp prev;
    bool prev_write = false;
    bool cur_write = false;
    std::uint64_t lo = 0, hi = 0;
  };

  static bool ordered(const Stamp& s, const VectorClock& clock) {
    return s.actor < clock.size() && clock[s.actor] >= s.epoch;
  }
  // Makes lo a segment boundary (splitting a segment that straddles it).
  void split_at(std::uint64_t at);
  static void add_conflict(std::vector<Conflict>& out, const Stamp& prev, bool prev_write,
                           bool cur_write, std::uint64_t lo, std::uint64_t hi);
  [[noreturn]] void report(const std::vector<Conflict>& conflicts, const Who& who,
                           std::string_view name) const;
  const std::string* intern(std::string_view name);

  std::map<std::uint64_t, Segment> segments_;  // keyed by lo; disjoint
  std::set<std::string, std::less<>> names_;   // stable storage for operation names
};

}  // namespace cai::device::sim
