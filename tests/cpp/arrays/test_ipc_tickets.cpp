// The tickets of IPC handles (src/arrays/ipc_tickets.h) on a small table: a ticket opens or
// gives back a reference once, only for the export it was issued for; numbers are never used
// twice, cells are, and a full table is refused instead of overwriting a ticket still out.

#include <gtest/gtest.h>

#include <array>
#include <set>
#include <thread>
#include <vector>

#include "ipc_tickets.h"

namespace {

using namespace cai::detail;

struct Table {
  std::atomic<std::uint64_t> next{0};
  std::array<TicketCell, 4> cells{};
  std::span<TicketCell> span() { return cells; }
};

TEST(ipc_tickets, a_ticket_is_used_once_and_only_for_its_slot) {
  Table t;
  const std::uint64_t a = issue_ticket(t.next, t.span(), 7);
  ASSERT_NE(a, 0u);
  EXPECT_FALSE(use_ticket(t.span(), a, 8));      // another export's slot
  EXPECT_FALSE(use_ticket(t.span(), a + 1, 7));  // never issued
  EXPECT_FALSE(use_ticket(t.span(), 0, 7));
  EXPECT_FALSE(use_ticket(t.span(), ~std::uint64_t{0}, 7));
  EXPECT_FALSE(ticket_was_used(t.span(), a));
  EXPECT_TRUE(use_ticket(t.span(), a, 7));
  EXPECT_TRUE(ticket_was_used(t.span(), a));
  EXPECT_FALSE(use_ticket(t.span(), a, 7));  // a replay
}

TEST(ipc_tickets, a_ticket_opens_only_the_bytes_and_access_it_grants) {
  Table t;
  const std::uint64_t a = issue_ticket(t.next, t.span(), 3, {64, 128, true});
  ASSERT_NE(a, 0u);
  const TicketGrant past_end{64, 129, true}, before_start{0, 128, true}, writable{64, 128, false},
      issued{64, 128, true}, inside{80, 96, true};
  EXPECT_FALSE(use_ticket(t.span(), a, 3, &past_end));
  EXPECT_FALSE(use_ticket(t.span(), a, 3, &before_start));
  EXPECT_FALSE(use_ticket(t.span(), a, 3, &writable));
  EXPECT_FALSE(ticket_was_used(t.span(), a));  // refusals use nothing
  EXPECT_TRUE(use_ticket(t.span(), a, 3, &issued));
  // A part of what it grants opens too; giving back asks no grant.
  const std::uint64_t b = issue_ticket(t.next, t.span(), 3, {64, 128, true});
  EXPECT_TRUE(use_ticket(t.span(), b, 3, &inside));
  const std::uint64_t c = issue_ticket(t.next, t.span(), 3, {64, 128, true});
  EXPECT_TRUE(use_ticket(t.span(), c, 3));
}

TEST(ipc_tickets, cells_are_reused_and_numbers_never_are) {
  Table t;
  std::set<std::uint64_t> seen;
  for (int i = 0; i < 1000; ++i) {
    const std::uint64_t k = issue_ticket(t.next, t.span(), 1);
    ASSERT_NE(k, 0u) << "issue " << i;
    EXPECT_TRUE(seen.insert(k).second);
    ASSERT_TRUE(use_ticket(t.span(), k, 1));
  }
  // An old ticket whose cell a later one took is refused, not taken for the new one.
  EXPECT_FALSE(use_ticket(t.span(), *seen.begin(), 1));
  EXPECT_FALSE(ticket_was_used(t.span(), *seen.begin()));
}

TEST(ipc_tickets, tickets_still_out_are_skipped_then_a_full_table_is_refused) {
  Table t;
  std::vector<std::uint64_t> out;
  for (int i = 0; i < 4; ++i) out.push_back(issue_ticket(t.next, t.span(), 2));
  for (std::uint64_t k : out) ASSERT_NE(k, 0u);
  EXPECT_EQ(issue_ticket(t.next, t.span(), 2), 0u);  // every cell holds a ticket that is out
  for (std::uint64_t k : out) EXPECT_TRUE(use_ticket(t.span(), k, 2));  // none overwritten
  ASSERT_TRUE(use_ticket(t.span(), out[0], 2) == false);
  // One cell out, the rest used: new tickets go round it.
  const std::uint64_t held = issue_ticket(t.next, t.span(), 3);
  for (int i = 0; i < 20; ++i) {
    const std::uint64_t k = issue_ticket(t.next, t.span(), 3);
    ASSERT_NE(k, 0u);
    EXPECT_NE(k % 4, held % 4);
    ASSERT_TRUE(use_ticket(t.span(), k, 3));
  }
  EXPECT_TRUE(use_ticket(t.span(), held, 3));
}

TEST(ipc_tickets, threads_issue_distinct_tickets_and_each_is_used_once) {
  std::atomic<std::uint64_t> next{0};
  std::vector<TicketCell> cells(64);
  std::span<TicketCell> span(cells);
  std::atomic<int> used{0}, refused{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      for (int n = 0; n < 2000; ++n) {
        const std::uint64_t k = issue_ticket(next, span, static_cast<std::uint32_t>(i));
        if (k == 0) {
          ++refused;
          continue;
        }
        // Two uses race; exactly one wins.
        int wins = use_ticket(span, k, static_cast<std::uint32_t>(i)) ? 1 : 0;
        wins += use_ticket(span, k, static_cast<std::uint32_t>(i)) ? 1 : 0;
        EXPECT_EQ(wins, 1);
        ++used;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(used + refused, 16000);
  EXPECT_EQ(refused, 0);  // at most 8 tickets are ever out at once, in 64 cells
}

}  // namespace
