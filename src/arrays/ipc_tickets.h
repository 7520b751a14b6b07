#pragma once

// Internal: the tickets of IPC handles, in a table shared between processes (ipc.cpp's control
// segment). A handle sent to another process carries one reference and a ticket, a number never
// used before (64 bits: never exhausted). Ticket t lives in cell t % cells.size() while it is
// out: the cell holds t, its state, the slot (export) it was issued for and what it grants (the
// bytes of the allocation the handle's array covers, and whether it may write them), so that
// only an issued, unused ticket of that slot can open or give back a reference, and only for
// the array it was issued for: the driver maps more than the array (a whole 2 MiB block), and
// a handle whose array fields were changed must not reach the rest. A used cell is taken
// by a later ticket; a ticket still out when its cell comes round again is skipped over, so at
// most cells.size() handles can be out at once.

#include <atomic>
#include <cstdint>
#include <span>

namespace cai::detail {

/// What a ticket lets its handle open: bytes [lo, hi) from the allocation's start, read-only or
/// not.
struct TicketGrant {
  std::uint64_t lo = 0, hi = ~std::uint64_t{0};
  bool readonly = false;
};

struct TicketCell {
  std::atomic<std::uint64_t> word;  ///< ticket * 4 + state; 0 before first use
  std::atomic<std::uint32_t> slot;  ///< written while filling, read once out (so are the rest)
  std::atomic<std::uint32_t> readonly;
  std::atomic<std::uint64_t> lo, hi;
};
static_assert(std::atomic<std::uint64_t>::is_always_lock_free, "shared between processes");

inline constexpr std::uint64_t kCellFree = 0, kCellOut = 1, kCellUsed = 2, kCellFilling = 3;
inline constexpr std::uint64_t kMaxTicket = ~std::uint64_t{0} >> 2;

inline TicketCell& cell_of(std::span<TicketCell> cells, std::uint64_t t) {
  return cells[t % cells.size()];
}

/// A new ticket for a reference of `slot` (`next` is the shared counter); 0 when every cell
/// holds a ticket that is out.
inline std::uint64_t issue_ticket(std::atomic<std::uint64_t>& next, std::span<TicketCell> cells,
                                  std::uint32_t slot, const TicketGrant& grant = {}) {
  for (std::size_t tries = 0; tries < cells.size(); ++tries) {
    const std::uint64_t t = next.fetch_add(1) + 1;
    if (t > kMaxTicket) return 0;
    TicketCell& c = cell_of(cells, t);
    std::uint64_t w = c.word.load();
    if ((w & 3) != kCellFree && (w & 3) != kCellUsed) continue;  // its ticket is still out
    if (!c.word.compare_exchange_strong(w, t * 4 + kCellFilling)) continue;
    c.slot.store(slot);
    c.readonly.store(grant.readonly ? 1 : 0);
    c.lo.store(grant.lo);
    c.hi.store(grant.hi);
    c.word.store(t * 4 + kCellOut);
    return t;
  }
  return 0;
}

/// Marks ticket t of `slot` used: true once, for an issued ticket of that slot that grants
/// `wanted`; false for one never issued, used already, taken over by a later ticket, issued for
/// another slot, or for fewer bytes or read-only where `wanted` asks more. Giving a reference
/// back opens nothing: it asks no grant (`wanted` null).
inline bool use_ticket(std::span<TicketCell> cells, std::uint64_t t, std::uint32_t slot,
                       const TicketGrant* wanted = nullptr) {
  if (t == 0 || t > kMaxTicket) return false;
  TicketCell& c = cell_of(cells, t);
  std::uint64_t w = t * 4 + kCellOut;
  if (c.word.load() != w || c.slot.load() != slot) return false;
  if (wanted && (wanted->lo < c.lo.load() || wanted->hi > c.hi.load() ||
                 (c.readonly.load() != 0 && !wanted->readonly)))
    return false;
  return c.word.compare_exchange_strong(w, t * 4 + kCellUsed);
}

/// Whether t was used (for the message of a refused use).
inline bool ticket_was_used(std::span<TicketCell> cells, std::uint64_t t) {
  return t != 0 && t <= kMaxTicket && cell_of(cells, t).word.load() == t * 4 + kCellUsed;
}

}  // namespace cai::detail
