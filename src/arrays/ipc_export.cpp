#include "cai/arrays/ipc.h"

#include <algorithm>
#include <string>

#include "cai/core/error.h"
#include "ipc_state.h"

namespace cai::detail::ipc {

namespace {

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

IpcArrayHandle export_unmasked(const View& v) {
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

}  // namespace

}  // namespace cai::detail::ipc

namespace cai {

using detail::ipc::ExportRecord;
using detail::ipc::slot_of;
using detail::ipc::State;
using detail::ipc::state;

std::size_t ipc_collect() {
  State& st = state();
  std::vector<std::shared_ptr<ExportRecord>> done;
  {
    std::lock_guard lock(st.mu);
    if (!st.control) return 0;
    done = detail::ipc::take_unused_locked(st);
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

IpcArrayHandle ipc_export(const View& v) {
  IpcArrayHandle h = detail::ipc::export_unmasked(v);
  if (v.mask()) {
    try {
      h.mask = std::make_shared<const IpcArrayHandle>(ipc_export(*v.mask()));
    } catch (const Error& e) {
      throw_error(e.code(), std::string(e.what()) + " (the array's mask)");
    }
  }
  return h;
}

}  // namespace cai
