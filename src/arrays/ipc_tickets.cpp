#include <string>

#include "cai/arrays/ipc.h"
#include "cai/core/error.h"
#include "cai/core/strided.h"
#include "ipc_state.h"

namespace cai::detail::ipc {

// What a handle's array reaches of its allocation: checked against its ticket's grant, so that
// changed array fields (a larger shape, another offset, writable) open nothing more.
detail::TicketGrant grant_of(const IpcArrayHandle& h) {
  const auto range = byte_range(h.offset, h.shape, h.strides, h.dtype.itemsize());
  if (!range) return {~std::uint64_t{0}, ~std::uint64_t{0}, h.readonly};  // grants nothing
  return {range->lo, range->hi, h.readonly};
}

namespace {

IpcArrayHandle issue_unmasked(const IpcArrayHandle& h) {
  constexpr const char* where = "IpcHandle (sending)";
  IpcArrayHandle out = h;
  if (!h.has_memory) return out;
  auto control = control_of(h, where);
  require_slot(h, *control, where);
  // The reference first: the exporter must never see the slot unused while a ticket is made.
  slot_of(*control, h.slot).refs.fetch_add(1);
  const std::uint64_t t = detail::issue_ticket(header_of(*control).next_ticket, cells_of(*control),
                                               h.slot, grant_of(h));
  if (t == 0) {
    slot_of(*control, h.slot).refs.fetch_sub(1);
    throw_error(Errc::value_error, std::string(where) + ": " + std::to_string(kCells) +
                                       " handles of process " + std::to_string(h.owner_pid) +
                                       " are out (sent, neither opened nor dropped), the most "
                                       "there can be at once");
  }
  out.ticket = t;
  ipc_collect();
  return out;
}

}  // namespace

// Uses the handle's ticket (once, for the bytes and access it grants): the lease that gives it
// back when the opened array dies. Null for a handle of this process without a ticket.
std::shared_ptr<Lease> take_ticket(const IpcArrayHandle& h,
                                   const std::shared_ptr<SharedMapping>& control,
                                   const char* where) {
  if (h.ticket == 0) {
    if (!is_self(h.owner_pid, h.owner_start)) {
      throw_error(Errc::value_error, std::string(where) +
                                         ": the handle carries no reference; only a handle "
                                         "received from another process (pickled) can be opened");
    }
    return nullptr;
  }
  State& st = state();
  const TicketKey key{h.owner_pid, h.owner_start, h.ticket};
  std::lock_guard lock(st.mu);
  if (st.opened.count(key) != 0) {
    throw_error(Errc::value_error, std::string(where) +
                                       ": this handle was opened in this process already; a "
                                       "handle opens once (send another for another array)");
  }
  const detail::TicketGrant wanted = grant_of(h);
  if (!detail::use_ticket(cells_of(*control), h.ticket, h.slot, &wanted)) {
    if (detail::ticket_was_used(cells_of(*control), h.ticket)) {
      throw_error(Errc::value_error, std::string(where) +
                                         ": this handle was opened (or given back) already, "
                                         "by another process (or earlier by this one); a "
                                         "handle opens once");
    }
    throw_error(Errc::value_error, std::string(where) + ": ticket " + std::to_string(h.ticket) +
                                       " was not issued by process " + std::to_string(h.owner_pid) +
                                       " for this memory and this array (its offset, shape, "
                                       "strides, dtype and read-only flag), or was used long "
                                       "ago; the handle is corrupt");
  }
  st.opened.insert(key);
  auto lease = std::make_shared<Lease>();
  lease->control = control;
  lease->slot = h.slot;
  std::erase_if(st.leases, [](const auto& l) { return l.expired(); });
  st.leases.push_back(lease);
  lease->ticket = key;  // last: a lease that dies under this lock must not take it again
  return lease;
}

namespace {

void discard_unmasked(const IpcArrayHandle& h) noexcept {
  // Every field came from another process: checked before any use, here too.
  if (!h.has_memory || h.ticket == 0 || h.slot >= kSlots) return;
  try {
    auto control = control_of(h, "IpcHandle (discard)");
    if (slot_of(*control, h.slot).generation.load() != h.generation) return;  // stale
    // Only an issued, unused ticket of this slot gives its reference back.
    if (detail::use_ticket(cells_of(*control), h.ticket, h.slot))
      slot_of(*control, h.slot).refs.fetch_sub(1);
  } catch (...) {
    // The owner exited: nobody waits for this reference any more.
  }
}

}  // namespace

}  // namespace cai::detail::ipc

namespace cai {

void ipc_return_all() noexcept {
  detail::ipc::State& st = detail::ipc::state();
  std::vector<std::shared_ptr<detail::ipc::Lease>> live;
  {
    std::lock_guard lock(st.mu);
    for (const auto& l : st.leases) {
      if (auto p = l.lock()) live.push_back(std::move(p));
    }
  }
  for (const auto& l : live) l->give_back();
}

// A mask travels as a handle of its own beside the array's: ticketed and given back with it.

IpcArrayHandle ipc_issue_ticket(const IpcArrayHandle& h) {
  IpcArrayHandle out = detail::ipc::issue_unmasked(h);
  if (h.mask) {
    try {
      out.mask = std::make_shared<const IpcArrayHandle>(ipc_issue_ticket(*h.mask));
    } catch (...) {
      detail::ipc::discard_unmasked(out);  // the array's new reference will never be sent
      throw;
    }
  }
  return out;
}

void ipc_discard(const IpcArrayHandle& h) noexcept {
  detail::ipc::discard_unmasked(h);
  if (h.mask) ipc_discard(*h.mask);
}

}  // namespace cai
