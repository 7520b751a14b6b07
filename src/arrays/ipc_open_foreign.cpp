#include <string>

#include "cai/core/error.h"
#include "ipc_state.h"

namespace cai::detail::ipc {

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

}  // namespace cai::detail::ipc
