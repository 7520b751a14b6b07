#pragma once

// Internal to the arrays layer's IPC files (ipc_*.cpp): this process's registry of shared and
// opened memory, the control segment that holds the reference counts and tickets of its
// exports, and the checks every opened handle passes. docs/scale-out.md tells the protocol.

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "cai/arrays/devices.h"
#include "cai/arrays/ipc.h"
#include "cai/core/layout.h"
#include "cai/sync/ordering.h"
#include "ipc_tickets.h"
#include "shared_memory.h"

namespace cai::detail::ipc {

using platform::ProcessId;
using platform::SharedMapping;

// The control segment of a process that shares memory: a header, one slot per export (its
// reference count), then the ticket cells (ipc_tickets.h).
inline constexpr std::uint64_t kControlMagic = 0x33304c5254434941;  // "AICTRL03"
inline constexpr std::size_t kHeaderBytes = 4096;
inline constexpr std::uint32_t kSlots = 65536;
inline constexpr std::uint64_t kCells = std::uint64_t{1} << 20;

struct ControlHeader {
  std::uint64_t magic;
  std::atomic<std::uint64_t> next_ticket;
};
struct ControlSlot {
  std::atomic<std::int64_t> refs;
  std::atomic<std::uint64_t> generation;  ///< bumped when the slot is released
};
static_assert(std::atomic<std::int64_t>::is_always_lock_free, "shared between processes");
inline constexpr std::size_t kControlBytes =
    kHeaderBytes + kSlots * sizeof(ControlSlot) + kCells * sizeof(detail::TicketCell);

inline ControlHeader& header_of(const SharedMapping& m) {
  return *reinterpret_cast<ControlHeader*>(m.data());
}
inline ControlSlot& slot_of(const SharedMapping& m, std::uint32_t slot) {
  return reinterpret_cast<ControlSlot*>(m.data() + kHeaderBytes)[slot];
}
inline std::span<detail::TicketCell> cells_of(const SharedMapping& m) {
  return {
      reinterpret_cast<detail::TicketCell*>(m.data() + kHeaderBytes + kSlots * sizeof(ControlSlot)),
      kCells};
}

// An interprocess event of one exported allocation and one stream.
struct ExportEvent {
  device::EventHandle event = 0;
  device::IpcEventHandle handle;
};

// Memory of this process shared with others.
struct ExportRecord {
  std::uint64_t base = 0;
  int device = 0;
  /// What keeps the memory alive: the owner of every view shared (two views of one allocation
  /// may come from two producers, each of which holds its own part of a pool's block).
  std::vector<std::shared_ptr<const void>> keep;
  device::IpcMemoryHandle memory;
  std::uint32_t slot = 0;
  std::uint64_t generation = 0;
  /// One interprocess event per stream views were shared from, recorded at each such share:
  /// a handle waits for its own stream's work, which a share from another stream must not
  /// move (a re-record on the same stream only lengthens the wait, never shortens it).
  std::map<std::pair<device::StreamHandle, std::uint64_t>, ExportEvent> events;

  void keep_owner(const std::shared_ptr<const void>& owner) {
    for (const auto& k : keep) {
      if (!k.owner_before(owner) && !owner.owner_before(k)) return;  // held already
    }
    keep.push_back(owner);
  }

  ~ExportRecord() {
    if (device::exiting()) return;
    for (const auto& [stream, e] : events) {
      try {
        device::backend().event_destroy(e.event);
      } catch (...) {
      }
    }
  }
};

// Memory of another process mapped here, shared by every array opened on it.
/// Unmaps memory opened with Backend::ipc_open_memory on `device`, from a destructor: nothing at
/// exit, and a failure leaks the mapping (nothing else can be done there).
void close_mapping(std::uint64_t base, int device) noexcept;

struct ImportMapping {
  std::uint64_t base = 0;
  int device = 0;
  IpcArrayHandle origin;  ///< the memory and lifetime fields, for forwarding
  std::shared_ptr<SharedMapping> control;

  ~ImportMapping() { close_mapping(base, device); }
};

using TicketKey = std::tuple<std::int32_t, std::uint64_t, std::uint64_t>;
void forget_opened(const TicketKey& key) noexcept;

// One opened ticket: the reference it stands for is given back when the last View goes,
// once the work queued on the views has run (the exporter may free or reuse the memory as soon
// as every reference is back).
struct Lease {
  std::shared_ptr<const void> memory;  ///< an ImportMapping, or this process's ExportRecord
  std::shared_ptr<SharedMapping> control;
  std::uint32_t slot = 0;
  std::atomic<bool> returned{false};
  std::shared_ptr<sync::SyncState> sync;  ///< the views' stream state
  int device = 0;
  std::optional<TicketKey> ticket;  ///< in State::opened while this lease lives

  void give_back() noexcept {
    if (!returned.exchange(true)) slot_of(*control, slot).refs.fetch_sub(1);
  }
  ~Lease() {
    if (ticket) forget_opened(*ticket);
    if (returned.load()) return;
    if (sync && !device::exiting()) {
      try {
        const auto s = sync->stream();
        if (s && sync->busy(device::backend())) {
          // A host function after the views' work: no host wait, nothing given back early.
          const DeviceGuard on(device);
          device::backend().launch_host_func(s->handle, [control = control, slot = slot] {
            slot_of(*control, slot).refs.fetch_sub(1);
          });
          returned = true;
          return;
        }
      } catch (...) {
        // The stream is gone: nothing can be queued after its work any more.
      }
    }
    give_back();
  }
};

using OriginKey = std::tuple<std::int32_t, std::uint64_t, std::uint32_t, std::uint64_t>;

struct State {
  std::mutex mu;
  std::shared_ptr<SharedMapping> control;  ///< ours, made at the first export
  std::vector<std::uint32_t> free_slots;
  std::uint32_t next_slot = 0;
  std::map<std::uint64_t, std::shared_ptr<ExportRecord>> exports;  ///< by allocation start
  std::map<OriginKey, std::weak_ptr<ImportMapping>> imports;
  std::map<std::uint64_t, std::weak_ptr<ImportMapping>> imports_by_base;
  std::map<std::pair<std::int32_t, std::uint64_t>, std::weak_ptr<SharedMapping>> controls;
  std::set<TicketKey> opened;  ///< tickets of this process's live leases (for the message)
  std::vector<std::weak_ptr<Lease>> leases;         ///< for ipc_return_all
  std::vector<std::array<std::uint8_t, 16>> uuids;  ///< by ordinal, read once
};

/// The process's registry (never destroyed: exports may be released by late destructors).
State& state();
/// Whether (pid, start) is this very process.
bool is_self(std::int32_t pid, std::uint64_t start);
/// The uuid of each device, by ordinal (st.mu held).
const std::vector<std::array<std::uint8_t, 16>>& uuids_locked(State& st);
/// This process's control segment, made on first use (st.mu held).
SharedMapping& own_control_locked(State& st);
/// The control segment that holds h's reference count, mapped here.
std::shared_ptr<SharedMapping> control_of(const IpcArrayHandle& h, const char* where);
/// Throws Error(value_error) when h's slot was released since h was made (a stale handle).
void require_slot(const IpcArrayHandle& h, const SharedMapping& control, const char* where);
/// Exports no one holds any more, taken out of the registry (st.mu held; destroyed by the
/// caller, outside the lock).
std::vector<std::shared_ptr<ExportRecord>> take_unused_locked(State& st);

/// What a handle's array reaches of its allocation (ipc_tickets.cpp).
detail::TicketGrant grant_of(const IpcArrayHandle& h);
/// Uses h's ticket: the lease that gives its reference back (null for an own handle without
/// a ticket) (ipc_tickets.cpp).
std::shared_ptr<Lease> take_ticket(const IpcArrayHandle& h,
                                   const std::shared_ptr<SharedMapping>& control,
                                   const char* where);

/// The handle checks (ipc_checks.cpp): machine and backend; the array inside its allocation;
/// the device here with the exporter's uuid (the stream on it).
void check_origin(const IpcArrayHandle& h, device::Backend& backend, const char* where);
void check_extent(const IpcArrayHandle& h, const Layout& layout, const char* where);
int device_of(const IpcArrayHandle& h, device::Backend& backend, const sync::StreamRef& stream,
              const char* where);

struct OpenedMemory {
  std::uint64_t base = 0;
  std::shared_ptr<const void> memory;  // what keeps the allocation (or its mapping) alive
};

/// This process's own memory come back (ipc_open_own.cpp).
OpenedMemory open_own(const IpcArrayHandle& h, device::Backend& backend,
                      const sync::StreamRef& stream, const char* where);
/// Another process's memory, mapped once per shared allocation (ipc_open_foreign.cpp).
OpenedMemory open_foreign(const IpcArrayHandle& h, const std::shared_ptr<SharedMapping>& control,
                          int device, device::Backend& backend, const sync::StreamRef& stream,
                          const char* where);

}  // namespace cai::detail::ipc
