#include "ipc_state.h"

#include <string>

#include "cai/core/error.h"

namespace cai::detail::ipc {

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

SharedMapping& own_control_locked(State& st) {
  if (!st.control) {
    st.control = SharedMapping::create(kControlBytes, "cai-ipc-references");
    header_of(*st.control).magic = kControlMagic;
  }
  return *st.control;
}

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

void close_mapping(std::uint64_t base, int device) noexcept {
  if (device::exiting()) return;
  try {
    const DeviceGuard on(device);
    device::backend().ipc_close_memory(base);
  } catch (...) {
    // The mapping leaks; nothing else can be done in a destructor.
  }
}

}  // namespace cai::detail::ipc
