#include "cai/arrays/ipc.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <tuple>
#include <vector>

#include "cai/arrays/devices.h"
#include "cai/core/error.h"
#include "cai/core/interface.h"
#include "cai/core/strided.h"
#include "cai/sync/ordering.h"
#include "ipc_tickets.h"
#include "shared_memory.h"

namespace cai {

namespace {

using platform::ProcessId;
using platform::SharedMapping;

// The control segment of a process that shares memory: a header, one slot per export (its
// reference count), then the ticket cells (ipc_tickets.h).
constexpr std::uint64_t kControlMagic = 0x33304c5254434941;  // "AICTRL03"
constexpr std::size_t kHeaderBytes = 4096;
constexpr std::uint32_t kSlots = 65536;
constexpr std::uint64_t kCells = std::uint64_t{1} << 20;

struct ControlHeader {
  std::uint64_t magic;
  std::atomic<std::uint64_t> next_ticket;
};
struct ControlSlot {
  std::atomic<std::int64_t> refs;
  std::atomic<std::uint64_t> generation;  ///< bumped when the slot is released
};
static_assert(std::atomic<std::int64_t>::is_always_lock_free, "shared between processes");
constexpr std::size_t kControlBytes =
    kHeaderBytes + kSlots * sizeof(ControlSlot) + kCells * sizeof(detail::TicketCell);

ControlHeader& header_of(const SharedMapping& m) {
  return *reinterpret_cast<ControlHeader*>(m.data());
}
ControlSlot& slot_of(const SharedMapping& m, std::uint32_t slot) {
  return reinterpret_cast<ControlSlot*>(m.data() + kHeaderBytes)[slot];
}
std::span<detail::TicketCell> cells_of(const SharedMapping& m) {
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
struct ImportMapping {
  std::uint64_t base = 0;
  int device = 0;
  IpcArrayHandle origin;  ///< the memory and lifetime fields, for forwarding
  std::shared_ptr<SharedMapping> control;

  ~ImportMapping() {
    if (device::exiting()) return;
    try {
      const DeviceGuard on(device);
      device::backend().ipc_close_memory(base);
    } catch (...) {
      // The mapping leaks; nothing else can be done in a destructor.
    }
  }
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

State& state() {
  static auto* s = new State;  // leaked: exports may be released by late destructors
  return *s;
}

void forget_opened(const TicketKey& key) noexcept {
  State& st = state();
  std::lock_guard lock(st.mu);
  st.opened.erase(key);
}

bool is_self(std::int32_t pid, std::uint64_t start) {
  return ProcessId{pid, start} == ProcessId::self();
}

const std::vector<std::array<std::uint8_t, 16>>& uuids_locked(State& st) {
  if (st.uuids.empty()) {
    auto& backend = device::backend();
    for (int d = 0; d < backend.device_count(); ++d) st.uuids.push_back(backend.properties(d).uuid);
  }
  return st.uuids;
}

// Our control segment, made on first use.
SharedMapping& own_control_locked(State& st) {
  if (!st.control) {
    st.control = SharedMapping::create(kControlBytes, "cai-ipc-references");
    header_of(*st.control).magic = kControlMagic;
  }
  return *st.control;
}

// The control segment that holds h's reference count, mapped here.
std::shared_ptr<SharedMapping> control_of(const IpcArrayHandle& h, const char* where) {
  State& st = state();
  std::lock_guard lock(st.mu);
  if (is_self(h.owner_pid, h.owner_start)) {
    own_control_locked(st);
    return st.control;
  }
  const auto key = std::make_pair(h.owner_pid, h.owner_start);
  if (auto m = st.controls[key].lock()) return m;
  auto m = SharedMapping::open(ProcessId{h.owner_pid, h.owner_start}, h.control_fd, 0,
                               kControlBytes, where);
  if (header_of(*m).magic != kControlMagic) {
    throw_error(Errc::value_error, std::string(where) + ": process " + std::to_string(h.owner_pid) +
                                       " holds no cai reference counts at descriptor " +
                                       std::to_string(h.control_fd) + "; the handle is corrupt");
  }
  std::erase_if(st.controls, [](const auto& c) { return c.second.expired(); });
  st.controls[key] = m;
  return m;
}

void require_slot(const IpcArrayHandle& h, const SharedMapping& control, const char* where) {
  if (h.slot >= kSlots || slot_of(control, h.slot).generation.load() != h.generation) {
    throw_error(Errc::value_error,
                std::string(where) + ": the handle is stale: process " +
                    std::to_string(h.owner_pid) +
                    " released the memory it names (every reference came back before this one)");
  }
}

// Exports that no one holds any more, taken out of the registry (destroyed by the caller,
// outside the lock: releasing `keep` may call back into Python).
std::vector<std::shared_ptr<ExportRecord>> take_unused_locked(State& st) {
  std::vector<std::shared_ptr<ExportRecord>> done;
  for (auto it = st.exports.begin(); it != st.exports.end();) {
    ControlSlot& slot = slot_of(*st.control, it->second->slot);
    if (it->second.use_count() == 1 && slot.refs.load() == 0) {
      slot.generation.fetch_add(1);
      st.free_slots.push_back(it->second->slot);
      done.push_back(std::move(it->second));
      it = st.exports.erase(it);
    } else {
      ++it;
    }
  }
  return done;
}

std::string memory_kind_text(device::MemoryKind k) {
  switch (k) {
    case device::MemoryKind::pinned_host:
      return "pinned host memory";
    case device::MemoryKind::managed:
      return "managed memory";
    default:
      return "memory cai does not know (pageable host memory or a foreign pointer)";
  }
}

// The record of an allocation this process shares, made on its first export (st.mu held).
std::shared_ptr<ExportRecord> export_record_locked(State& st, device::Backend& backend,
                                                   const device::PointerInfo& info,
                                                   const char* where) {
  std::shared_ptr<ExportRecord>& record = st.exports[info.alloc_base];
  if (record) return record;
  auto r = std::make_shared<ExportRecord>();
  try {
    const DeviceGuard on(info.device);
    r->memory = backend.ipc_export_memory(info.alloc_base);
    SharedMapping& control = own_control_locked(st);
    if (!st.free_slots.empty()) {
      r->slot = st.free_slots.back();
      st.free_slots.pop_back();
    } else if (st.next_slot < kSlots) {
      r->slot = st.next_slot++;
    } else {
      throw_error(Errc::value_error, std::string(where) + ": this process shares " +
                                         std::to_string(kSlots) +
                                         " allocations already; release some first");
    }
    r->generation = slot_of(control, r->slot).generation.load();
  } catch (...) {
    st.exports.erase(info.alloc_base);
    throw;
  }
  r->base = info.alloc_base;
  r->device = info.device;
  record = std::move(r);
  return record;
}

// Work queued on the array before the export is seen by the importer's first use (no host
// wait) through an IPC event of its stream, recorded now; none when nothing is pending
// (st.mu held, the array's device current).
std::optional<device::IpcEventHandle> export_event_locked(ExportRecord& record, const View& v,
                                                          device::Backend& backend) {
  const auto stream = v.sync()->export_handle(backend);
  if (!stream) return std::nullopt;
  const sync::StreamRef ref(*stream);
  ExportEvent& e = record.events[{ref.handle, ref.thread}];
  if (e.event == 0) {
    const device::EventHandle made = backend.ipc_event_create();
    try {
      e.handle = backend.ipc_export_event(made);
    } catch (...) {
      backend.event_destroy(made);
      record.events.erase({ref.handle, ref.thread});
      throw;
    }
    e.event = made;
  }
  backend.event_record(e.event, *stream);
  return e.handle;
}

}  // namespace

static IpcArrayHandle export_unmasked(const View& v) {
  constexpr const char* where = "get_ipc_handle()";
  auto& backend = device::backend();
  IpcArrayHandle h;
  h.boot_id = platform::boot_id();
  h.backend = std::string(backend.name());
  h.dtype = v.dtype();
  h.shape = Dims(v.shape());
  h.strides = Dims(v.strides());
  h.readonly = v.readonly();
  ipc_collect();
  State& st = state();
  if (v.ptr() == 0) {
    // No memory to share: the importer makes an empty array.
    h.device = backend.current_device();
    std::lock_guard lock(st.mu);
    h.device_uuid = uuids_locked(st)[static_cast<std::size_t>(h.device)];
    return h;
  }
  const device::PointerInfo info = backend.pointer_info(v.ptr());
  if (info.kind != device::MemoryKind::device) {
    throw_error(Errc::value_error, std::string(where) +
                                       ": only device memory can be shared with "
                                       "another process; this array is in " +
                                       memory_kind_text(info.kind));
  }
  h.has_memory = true;
  h.device = info.device;
  h.alloc_size = info.alloc_size;
  h.offset = v.ptr() - info.alloc_base;
  std::unique_lock lock(st.mu);
  h.device_uuid = uuids_locked(st)[static_cast<std::size_t>(info.device)];
  if (auto it = st.imports_by_base.find(info.alloc_base); it != st.imports_by_base.end()) {
    if (auto mapping = it->second.lock()) {
      // Opened from another process: forward its owner's handle and reference count.
      const IpcArrayHandle& o = mapping->origin;
      h.memory = o.memory;
      h.owner_pid = o.owner_pid;
      h.owner_start = o.owner_start;
      h.control_fd = o.control_fd;
      h.slot = o.slot;
      h.generation = o.generation;
      h.keep = v.owner();
      lock.unlock();
      const DeviceGuard on(info.device);
      v.sync()->synchronize(backend);
      return h;
    }
  }
  const std::shared_ptr<ExportRecord> record = export_record_locked(st, backend, info, where);
  record->keep_owner(v.owner());
  const DeviceGuard on(info.device);
  if (const auto event = export_event_locked(*record, v, backend)) {
    h.has_event = true;
    h.event = *event;
  }
  h.memory = record->memory;
  h.owner_pid = ProcessId::self().pid;
  h.owner_start = ProcessId::self().start_time;
  h.control_fd = st.control->fd();
  h.slot = record->slot;
  h.generation = record->generation;
  h.keep = record;
  return h;
}

// What a handle's array reaches of its allocation: checked against its ticket's grant, so that
// changed array fields (a larger shape, another offset, writable) open nothing more.
static detail::TicketGrant grant_of(const IpcArrayHandle& h) {
  const auto range = byte_range(h.offset, h.shape, h.strides, h.dtype.itemsize());
  if (!range) return {~std::uint64_t{0}, ~std::uint64_t{0}, h.readonly};  // grants nothing
  return {range->lo, range->hi, h.readonly};
}

static IpcArrayHandle issue_unmasked(const IpcArrayHandle& h) {
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

namespace {

// The parts of open_unmasked. Every field of `h` came from another process: each is checked
// before it is used.

// A handle of this machine (since its boot) and of this process's backend.
void check_origin(const IpcArrayHandle& h, device::Backend& backend, const char* where) {
  if (h.boot_id != platform::boot_id()) {
    throw_error(Errc::value_error, std::string(where) +
                                       ": the handle was made on another machine or before this "
                                       "machine restarted (boot id " +
                                       h.boot_id + ", here " + platform::boot_id() +
                                       "); memory is shared only between processes of one machine");
  }
  if (h.backend != backend.name()) {
    throw_error(Errc::value_error, std::string(where) + ": the handle was made by the \"" +
                                       h.backend + "\" backend, this process uses \"" +
                                       std::string(backend.name()) + "\" (CAI_BACKEND)");
  }
}

// The device here with the exporter's uuid, whatever its number; the stream must be on it.
int device_of(const IpcArrayHandle& h, device::Backend& backend, const sync::StreamRef& stream,
              const char* where) {
  State& st = state();
  int device = -1;
  {
    std::lock_guard lock(st.mu);
    const auto& uuids = uuids_locked(st);
    for (std::size_t d = 0; d < uuids.size(); ++d) {
      if (uuids[d] == h.device_uuid) device = static_cast<int>(d);
    }
  }
  if (device < 0) {
    throw_error(Errc::value_error, std::string(where) + ": the memory is on device " +
                                       uuid_text(h.device_uuid) + " (device " +
                                       std::to_string(h.device) +
                                       " of the exporter), which this process does not see "
                                       "(CUDA_VISIBLE_DEVICES, CAI_SIM_DEVICES)");
  }
  if (stream.handle != device::kLegacyDefaultStream &&
      stream.handle != device::kPerThreadDefaultStream && backend.device_count() > 1 &&
      backend.stream_device(stream.handle) != device) {
    throw_error(Errc::value_error, std::string(where) + ": the stream belongs to device " +
                                       std::to_string(backend.stream_device(stream.handle)) +
                                       " but the memory is on device " + std::to_string(device));
  }
  return device;
}

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

struct OpenedMemory {
  std::uint64_t base = 0;
  std::shared_ptr<const void> memory;  // what keeps the allocation (or its mapping) alive
};

// Our own memory came back: the original allocation, after the handle's event.
OpenedMemory open_own(const IpcArrayHandle& h, device::Backend& backend,
                      const sync::StreamRef& stream, const char* where) {
  State& st = state();
  OpenedMemory out;
  std::lock_guard lock(st.mu);
  for (const auto& [b, record] : st.exports) {
    if (record->slot == h.slot && record->generation == h.generation) {
      out.base = b;
      out.memory = record;
    }
  }
  if (!out.memory) {
    throw_error(Errc::value_error, std::string(where) +
                                       ": the handle is stale: this process "
                                       "released the memory it names");
  }
  if (backend.pointer_info(out.base).alloc_size != h.alloc_size) {
    throw_error(Errc::value_error, std::string(where) + ": the handle's allocation size " +
                                       std::to_string(h.alloc_size) +
                                       " is not that of the memory it names; the handle is "
                                       "corrupt");
  }
  if (h.has_event) {
    // The event of the stream the handle was made from.
    const auto* record = static_cast<const ExportRecord*>(out.memory.get());
    for (const auto& [key, e] : record->events) {
      if (e.handle.bytes == h.event.bytes) sync::wait_for_event(backend, stream.handle, e.event);
    }
  }
  return out;
}

// Another process's memory: mapped once per shared allocation, after the exporter's event.
OpenedMemory open_foreign(const IpcArrayHandle& h, const std::shared_ptr<SharedMapping>& control,
                          int device, device::Backend& backend, const sync::StreamRef& stream,
                          const char* where) {
  State& st = state();
  const OriginKey key{h.owner_pid, h.owner_start, h.slot, h.generation};
  std::shared_ptr<ImportMapping> mapping;
  {
    std::lock_guard lock(st.mu);
    mapping = st.imports[key].lock();
  }
  if (!mapping) {
    mapping = std::make_shared<ImportMapping>();
    mapping->device = device;
    mapping->control = control;
    mapping->origin = h;
    mapping->origin.keep = nullptr;
    mapping->base = backend.ipc_open_memory(h.memory);
    std::lock_guard lock(st.mu);
    std::erase_if(st.imports, [](const auto& e) { return e.second.expired(); });
    std::erase_if(st.imports_by_base, [](const auto& e) { return e.second.expired(); });
    st.imports[key] = mapping;
    st.imports_by_base[mapping->base] = mapping;
  } else if (mapping->origin.memory.bytes != h.memory.bytes) {
    // The same shared allocation is named by the same driver handle: another one is forged.
    throw_error(Errc::value_error, std::string(where) +
                                       ": the handle's memory descriptor differs from the one "
                                       "this process opened for the same shared allocation; "
                                       "the handle is corrupt");
  }
  const std::uint64_t base = mapping->base;
  // The driver mapped what the exporter shared, which must cover the handle's allocation.
  // It may map more: the driver shares the whole underlying block (2 MiB for small ones).
  const device::PointerInfo mapped = backend.pointer_info(base);
  if (mapped.alloc_base > base || mapped.alloc_base + mapped.alloc_size < base + h.alloc_size) {
    throw_error(
        Errc::value_error,
        std::string(where) + ": the handle says its allocation has " +
            std::to_string(h.alloc_size) + " bytes, the memory shared has " +
            std::to_string(mapped.alloc_base <= base && base - mapped.alloc_base < mapped.alloc_size
                               ? mapped.alloc_size - (base - mapped.alloc_base)
                               : 0) +
            "; the handle is corrupt");
  }
  if (h.has_event) {
    // The exporter's queued work comes first, without blocking the host.
    const device::EventHandle e = backend.ipc_open_event(h.event);
    try {
      sync::wait_for_event(backend, stream.handle, e);
    } catch (...) {
      backend.event_destroy(e);
      throw;
    }
    backend.event_destroy(e);
  }
  return {base, std::move(mapping)};
}

}  // namespace

static View open_unmasked(const IpcArrayHandle& h, const sync::StreamRef& stream) {
  constexpr const char* where = "IpcHandle.open()";
  auto& backend = device::backend();
  check_origin(h, backend, where);
  Layout layout(h.shape, h.strides, h.dtype.itemsize());
  if (!h.has_memory) {
    return View(0, h.dtype, std::move(layout), h.readonly,
                std::make_shared<sync::SyncState>(stream), nullptr);
  }
  const Layout::Extent ext = layout.extent();
  if (static_cast<std::int64_t>(h.offset) + ext.lo < 0 ||
      h.offset + static_cast<std::uint64_t>(ext.hi) > h.alloc_size) {
    throw_error(Errc::value_error,
                std::string(where) + ": the array reaches outside its allocation of " +
                    std::to_string(h.alloc_size) + " bytes; the handle is corrupt");
  }
  const int device = device_of(h, backend, stream, where);
  const DeviceGuard on(device);
  auto control = control_of(h, where);
  require_slot(h, *control, where);
  std::shared_ptr<Lease> lease = take_ticket(h, control, where);
  OpenedMemory opened = is_self(h.owner_pid, h.owner_start)
                            ? open_own(h, backend, stream, where)
                            : open_foreign(h, control, device, backend, stream, where);
  std::shared_ptr<const void> owner = opened.memory;
  auto state = std::make_shared<sync::SyncState>(stream);
  if (lease) {
    lease->memory = std::move(opened.memory);
    lease->sync = state;
    lease->device = device;
    owner = lease;
  }
  return View(opened.base + h.offset, h.dtype, std::move(layout), h.readonly, std::move(state),
              std::move(owner));
}

static void discard_unmasked(const IpcArrayHandle& h) noexcept {
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

void ipc_return_all() noexcept {
  State& st = state();
  std::vector<std::shared_ptr<Lease>> live;
  {
    std::lock_guard lock(st.mu);
    for (const auto& l : st.leases) {
      if (auto p = l.lock()) live.push_back(std::move(p));
    }
  }
  for (const auto& l : live) l->give_back();
}

std::size_t ipc_collect() {
  State& st = state();
  std::vector<std::shared_ptr<ExportRecord>> done;
  {
    std::lock_guard lock(st.mu);
    if (!st.control) return 0;
    done = take_unused_locked(st);
  }
  return done.size();  // released here, outside the lock
}

std::size_t ipc_exports_in_use() {
  State& st = state();
  std::lock_guard lock(st.mu);
  if (!st.control) return 0;
  return static_cast<std::size_t>(std::count_if(st.exports.begin(), st.exports.end(), [&](auto& e) {
    return slot_of(*st.control, e.second->slot).refs.load() > 0;
  }));
}

IpcRecords ipc_records() {
  State& st = state();
  std::lock_guard lock(st.mu);
  return {st.opened.size(), st.imports.size(), st.leases.size(), st.controls.size()};
}

void ipc_release_at_exit() noexcept {
  if (!device::exiting()) return;  // the memory would be freed under the importers
  State& st = state();
  std::vector<std::shared_ptr<const void>> kept;
  {
    std::lock_guard lock(st.mu);
    for (auto& [base, record] : st.exports) {
      for (auto& k : record->keep) kept.push_back(std::move(k));
      record->keep.clear();
    }
  }
  // Released here, outside the lock. The registry itself is never destroyed (exports may be
  // released by late destructors), so without this a Python owner would outlive the
  // interpreter.
}

// A mask travels as a handle of its own beside the array's: exported, ticketed, opened and
// given back with it, never dropped.

IpcArrayHandle ipc_export(const View& v) {
  IpcArrayHandle h = export_unmasked(v);
  if (v.mask()) {
    try {
      h.mask = std::make_shared<const IpcArrayHandle>(ipc_export(*v.mask()));
    } catch (const Error& e) {
      throw_error(e.code(), std::string(e.what()) + " (the array's mask)");
    }
  }
  return h;
}

IpcArrayHandle ipc_issue_ticket(const IpcArrayHandle& h) {
  IpcArrayHandle out = issue_unmasked(h);
  if (h.mask) {
    try {
      out.mask = std::make_shared<const IpcArrayHandle>(ipc_issue_ticket(*h.mask));
    } catch (...) {
      discard_unmasked(out);  // the array's new reference will never be sent
      throw;
    }
  }
  return out;
}

View ipc_open(const IpcArrayHandle& h, const sync::StreamRef& stream) {
  View v = open_unmasked(h, stream);
  if (h.mask) {
    View mask = ipc_open(*h.mask, stream);
    check_mask("IpcHandle.open(): mask", v.shape(), mask.shape(), mask.dtype());
    v.set_mask(std::make_shared<const View>(std::move(mask)));
  }
  return v;
}

void ipc_discard(const IpcArrayHandle& h) noexcept {
  discard_unmasked(h);
  if (h.mask) ipc_discard(*h.mask);
}

}  // namespace cai
