// The race detector as a data structure: runs, vector clocks, the per-byte history.

#include <gtest/gtest.h>

#include <vector>

#include "cai_matchers.h"
#include "sim/race_detector.h"
#include "test_sim_util.h"

namespace cai::device::sim {
namespace {

using cai::test::ThrowsCaiError;
using ::testing::HasSubstr;

bool same(const std::vector<AccessRun>& a, const std::vector<AccessRun>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].lo != b[i].lo || a[i].hi != b[i].hi || a[i].write != b[i].write) return false;
  }
  return true;
}

TEST(sim_race_detector, normalize_merges_and_lets_writes_win) {
  auto r = normalize_runs({{10, 20, false}, {15, 30, false}, {40, 50, true}, {45, 60, true}});
  EXPECT_TRUE(same(r, {{10, 30, false}, {40, 60, true}}));
  // A read covering a write is cut around it.
  r = normalize_runs({{0, 100, false}, {20, 30, true}, {50, 60, true}});
  EXPECT_TRUE(
      same(r, {{0, 20, false}, {20, 30, true}, {30, 50, false}, {50, 60, true}, {60, 100, false}}));
  // In-place (read and write of the same bytes) is a write.
  r = normalize_runs({{0, 8, false}, {0, 8, true}});
  EXPECT_TRUE(same(r, {{0, 8, true}}));
  EXPECT_TRUE(normalize_runs({{5, 5, true}}).empty());
}

TEST(sim_race_detector, join_is_componentwise_max) {
  VectorClock a = {1, 5};
  join(a, {3, 2, 7});
  EXPECT_EQ(a, (VectorClock{3, 5, 7}));
}

class RaceDetectorTest : public ::testing::Test {
 protected:
  static RaceDetector::Who who(RaceDetector::Actor slot, const char* label) {
    return {slot, std::make_shared<const std::string>(label)};
  }
  RaceDetector d;
  RaceDetector::Who s1 = who(0, "stream A");
  RaceDetector::Who s2 = who(1, "stream B");
  // Clocks: actor i at epoch e, knowing the given other epochs.
  static VectorClock at(const RaceDetector::Who& w, std::uint64_t epoch, VectorClock knows = {}) {
    knows.resize(std::max<std::size_t>(knows.size(), w.actor + 1), 0);
    knows[w.actor] = epoch;
    return knows;
  }
  static std::vector<AccessRun> w(std::uint64_t lo, std::uint64_t hi) { return {{lo, hi, true}}; }
  static std::vector<AccessRun> r(std::uint64_t lo, std::uint64_t hi) { return {{lo, hi, false}}; }
};

TEST_F(RaceDetectorTest, unordered_writes_race_ordered_do_not) {
  d.check_and_record(w(0x1000, 0x1040), s1, at(s1, 1), "copy_async");
  const std::string msg = cai::test::error_message(
      [&] { d.check_and_record(w(0x1020, 0x1080), s2, at(s2, 1), "add_async"); }, Errc::race);
  EXPECT_EQ(msg,
            "race: add_async on stream B writes [0x1020+32) while copy_async on stream A (not "
            "ordered before it: no event wait or synchronize) writes [0x1020+32)");
  // The rejected access was not recorded: B knowing A's write is now fine.
  d.check_and_record(w(0x1020, 0x1080), s2, at(s2, 1, {1}), "add_async");
}

TEST_F(RaceDetectorTest, reads_never_race_with_reads) {
  d.check_and_record(r(0, 100), s1, at(s1, 1), "a");
  d.check_and_record(r(50, 150), s2, at(s2, 1), "b");
  // A write must come after both reads.
  EXPECT_THAT(
      [&] { d.check_and_record(w(0, 10), s2, at(s2, 2), "c"); },
      ThrowsCaiError(Errc::race, HasSubstr("c on stream B writes [0x0+10) while a on stream A")));
  const std::string msg = cai::test::error_message(
      [&] { d.check_and_record(w(60, 70), s1, at(s1, 2), "d"); }, Errc::race);
  EXPECT_TRUE(test::contains(msg, "while b on stream B")) << msg;
  d.check_and_record(w(0, 150), s1, at(s1, 2, {0, 1}), "e");
}

TEST_F(RaceDetectorTest, a_read_checks_only_the_last_write) {
  d.check_and_record(w(0, 8), s1, at(s1, 1), "w1");
  d.check_and_record(w(0, 8), s2, at(s2, 1, {1}), "w2");  // ordered after w1
  // Knowing w2 implies knowing w1 (recorded writes are totally ordered).
  d.check_and_record(r(0, 8), s1, at(s1, 2, {1, 1}), "r");
  EXPECT_THAT(
      [&] {
        d.check_and_record(r(0, 8), s1, at(s1, 3, {1, 0}), "r2");
      },
      ThrowsCaiError(Errc::race, HasSubstr("r2 on stream A reads [0x0+8) while w2 on stream B")));
}

TEST_F(RaceDetectorTest, lists_every_conflict_and_merges_adjacent_pieces) {
  const auto s3 = who(2, "stream C");
  d.check_and_record(w(0, 4), s1, at(s1, 1), "x");
  d.check_and_record(w(4, 8), s1, at(s1, 2), "y");
  d.check_and_record(r(16, 24), s2, at(s2, 1), "z");
  const std::string msg = cai::test::error_message(
      [&] {
        d.check_and_record(std::vector<AccessRun>{{0, 8, true}, {16, 24, true}}, s3, at(s3, 1),
                           "big");
      },
      Errc::race);
  EXPECT_TRUE(test::contains(msg, "while x on stream A")) << msg;
  EXPECT_TRUE(test::contains(msg, "while y on stream A")) << msg;
  EXPECT_TRUE(test::contains(msg,
                             "while z on stream B (not ordered before it: no event wait or "
                             "synchronize) reads [0x10+8)"))
      << msg;
}

TEST_F(RaceDetectorTest, forget_and_clear_drop_history) {
  d.check_and_record(w(0, 100), s1, at(s1, 1), "a");
  d.forget(10, 20);
  d.check_and_record(w(10, 20), s2, at(s2, 1), "b");  // forgotten: no race
  EXPECT_THAT([&] { d.check_and_record(w(5, 15), s2, at(s2, 2), "c"); },
              ThrowsCaiError(Errc::race, HasSubstr("[0x5+5)")));
  d.clear();
  EXPECT_EQ(d.segment_count(), 0u);
  d.check_and_record(w(0, 100), s2, at(s2, 3), "d");
}

TEST_F(RaceDetectorTest, each_access_keeps_the_label_of_who_made_it) {
  // A slot handed on (a destroyed stream's, to a stream ordered after it) keeps naming the
  // stream that made each recorded access.
  d.check_and_record(w(0, 8), s1, at(s1, 1), "old");
  const auto reused = who(0, "stream D");
  d.check_and_record(w(8, 16), reused, at(reused, 2), "new");
  const std::string msg = cai::test::error_message(
      [&] { d.check_and_record(w(0, 16), s2, at(s2, 1), "x"); }, Errc::race);
  EXPECT_TRUE(test::contains(msg, "while old on stream A")) << msg;
  EXPECT_TRUE(test::contains(msg, "while new on stream D")) << msg;
}

TEST_F(RaceDetectorTest, writes_coalesce_the_history) {
  for (std::uint64_t i = 0; i < 100; ++i)
    d.check_and_record(r(i * 8, i * 8 + 4), s1, at(s1, i + 1), "r");
  EXPECT_EQ(d.segment_count(), 100u);
  d.check_and_record(w(0, 800), s1, at(s1, 101), "w");
  EXPECT_EQ(d.segment_count(), 1u);
  // Repeated reads by one actor keep one entry per actor.
  for (std::uint64_t i = 0; i < 50; ++i) d.check_and_record(r(0, 800), s1, at(s1, 102 + i), "r");
  d.check_and_record(r(0, 800), s2, at(s2, 1, {101}), "r");
  EXPECT_EQ(d.segment_count(), 1u);
}

}  // namespace
}  // namespace cai::device::sim
