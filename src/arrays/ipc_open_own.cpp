#include <string>

#include "cai/core/error.h"
#include "ipc_state.h"

namespace cai::detail::ipc {

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

}  // namespace cai::detail::ipc
