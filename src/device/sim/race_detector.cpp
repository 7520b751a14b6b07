#include "sim/race_detector.h"

#include <algorithm>
#include <cstdio>

#include "cai/core/error.h"
#include "cai/core/format.h"
#include "cai/core/strided.h"
#include "driver/api.h"

namespace cai::device::sim {

namespace {

// Sorts and merges overlapping or touching runs; all of one kind.
void merge_sorted(std::vector<AccessRun>& v) {
  std::sort(v.begin(), v.end(), [](const AccessRun& a, const AccessRun& b) { return a.lo < b.lo; });
  std::size_t n = 0;
  for (const AccessRun& r : v) {
    if (r.hi <= r.lo) continue;
    if (n > 0 && r.lo <= v[n - 1].hi) {
      v[n - 1].hi = std::max(v[n - 1].hi, r.hi);
    } else {
      v[n++] = r;
    }
  }
  v.resize(n);
}

}  // namespace

void join(VectorClock& a, const VectorClock& b) {
  if (a.size() < b.size()) a.resize(b.size(), 0);
  for (std::size_t i = 0; i < b.size(); ++i) a[i] = std::max(a[i], b[i]);
}

bool append_runs(std::vector<AccessRun>& out, std::uint64_t ptr,
                 std::span<const std::int64_t> shape, std::span<const std::int64_t> strides,
                 std::int64_t itemsize, bool write) {
  return for_each_run(ptr, shape, strides, itemsize, kMaxRunsPerAccess,
                      [&](std::uint64_t lo, std::uint64_t hi) {
                        out.push_back({lo, hi, write});
                      });
}

std::vector<AccessRun> normalize_runs(std::vector<AccessRun> runs) {
  std::vector<AccessRun> writes, reads;
  for (const AccessRun& r : runs) (r.write ? writes : reads).push_back(r);
  merge_sorted(writes);
  merge_sorted(reads);
  // Subtract the writes from the reads: the write check is the stricter one.
  std::vector<AccessRun> out;
  out.reserve(writes.size() + reads.size());
  std::size_t w = 0;
  for (AccessRun r : reads) {
    while (w < writes.size() && writes[w].hi <= r.lo) ++w;
    std::size_t k = w;
    while (r.lo < r.hi && k < writes.size() && writes[k].lo < r.hi) {
      if (writes[k].lo > r.lo) out.push_back({r.lo, writes[k].lo, false});
      r.lo = std::max(r.lo, writes[k].hi);
      ++k;
    }
    if (r.lo < r.hi) out.push_back(r);
  }
  out.insert(out.end(), writes.begin(), writes.end());
  std::sort(out.begin(), out.end(),
            [](const AccessRun& a, const AccessRun& b) { return a.lo < b.lo; });
  return out;
}

const std::string* RaceDetector::intern(std::string_view name) {
  auto it = names_.find(name);
  if (it == names_.end()) it = names_.emplace(name).first;
  return &*it;
}

void RaceDetector::split_at(std::uint64_t at) {
  auto it = segments_.upper_bound(at);
  if (it == segments_.begin()) return;
  --it;
  if (it->first < at && it->second.hi > at) {
    Segment right = it->second;
    it->second.hi = at;
    segments_.emplace_hint(std::next(it), at, std::move(right));
  }
}

void RaceDetector::add_conflict(std::vector<Conflict>& out, const Stamp& prev, bool prev_write,
                                bool cur_write, std::uint64_t lo, std::uint64_t hi) {
  // Adjacent pieces of one conflicting access read better as one range.
  for (Conflict& c : out) {
    if (c.prev == prev && c.prev_write == prev_write && c.cur_write == cur_write && c.hi == lo) {
      c.hi = hi;
      return;
    }
  }
  out.push_back({prev, prev_write, cur_write, lo, hi});
}

void RaceDetector::check_and_record(std::span<const AccessRun> runs, const Who& who,
                                    const VectorClock& clock, std::string_view name) {
  const Actor actor = who.actor;
  std::vector<Conflict> conflicts;
  for (const AccessRun& run : runs) {
    auto it = segments_.upper_bound(run.lo);
    if (it != segments_.begin() && std::prev(it)->second.hi > run.lo) --it;
    for (; it != segments_.end() && it->first < run.hi; ++it) {
      const Segment& seg = it->second;
      const std::uint64_t lo = std::max(it->first, run.lo);
      const std::uint64_t hi = std::min(seg.hi, run.hi);
      if (seg.write.epoch != 0 && !ordered(seg.write, clock)) {
        add_conflict(conflicts, seg.write, true, run.write, lo, hi);
      }
      if (run.write) {
        for (const Stamp& r : seg.reads) {
          if (!ordered(r, clock)) add_conflict(conflicts, r, false, true, lo, hi);
        }
      }
    }
  }
  if (!conflicts.empty()) report(conflicts, who, name);

  const Stamp cur{actor, clock.at(actor), intern(name), who.label};
  for (const AccessRun& run : runs) {
    if (run.hi <= run.lo) continue;
    split_at(run.lo);
    split_at(run.hi);
    auto it = segments_.lower_bound(run.lo);
    if (run.write) {
      // A write supersedes everything before it on these bytes: one segment.
      while (it != segments_.end() && it->first < run.hi) it = segments_.erase(it);
      segments_.emplace_hint(it, run.lo, Segment{run.hi, cur, {}});
      continue;
    }
    std::uint64_t at = run.lo;
    while (at < run.hi) {
      if (it != segments_.end() && it->first == at) {
        std::vector<Stamp>& reads = it->second.reads;
        auto same = std::find_if(reads.begin(), reads.end(),
                                 [&](const Stamp& s) { return s.actor == actor; });
        if (same != reads.end()) {
          *same = cur;  // an actor's later read is ordered after its earlier ones
        } else {
          reads.push_back(cur);
        }
        at = it->second.hi;
        ++it;
      } else {
        const std::uint64_t gap_end =
            (it != segments_.end() && it->first < run.hi) ? it->first : run.hi;
        segments_.emplace_hint(it, at, Segment{gap_end, {}, {cur}});
        at = gap_end;
      }
    }
  }
}

void RaceDetector::report(const std::vector<Conflict>& conflicts, const Who& who,
                          std::string_view name) const {
  constexpr std::size_t kListed = 8;
  std::string msg(cu::kSimRaceDetailPrefix);
  for (std::size_t i = 0; i < conflicts.size() && i < kListed; ++i) {
    const Conflict& c = conflicts[i];
    const std::string range = cai::detail::range_text(c.lo, c.hi - c.lo);
    if (i > 0) msg += "; and ";
    msg += std::string(name) + " on " + *who.label + (c.cur_write ? " writes " : " reads ") +
           range + " while " + *c.prev.name + " on " + *c.prev.label +
           " (not ordered before it: no event wait or synchronize) " +
           (c.prev_write ? "writes " : "reads ") + range;
  }
  if (conflicts.size() > kListed) {
    msg += "; and " + std::to_string(conflicts.size() - kListed) + " more conflicting ranges";
  }
  throw_error(Errc::race, std::move(msg));
}

void RaceDetector::forget(std::uint64_t lo, std::uint64_t hi) {
  if (hi <= lo) return;
  split_at(lo);
  split_at(hi);
  auto it = segments_.lower_bound(lo);
  while (it != segments_.end() && it->first < hi) it = segments_.erase(it);
}

}  // namespace cai::device::sim
