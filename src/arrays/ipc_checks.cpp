#include <string>

#include "cai/core/error.h"
#include "ipc_state.h"

namespace cai::detail::ipc {

// Every field of a handle came from another process: each is checked before it is used.

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

void check_extent(const IpcArrayHandle& h, const Layout& layout, const char* where) {
  const Layout::Extent ext = layout.extent();
  if (static_cast<std::int64_t>(h.offset) + ext.lo < 0 ||
      h.offset + static_cast<std::uint64_t>(ext.hi) > h.alloc_size) {
    throw_error(Errc::value_error,
                std::string(where) + ": the array reaches outside its allocation of " +
                    std::to_string(h.alloc_size) + " bytes; the handle is corrupt");
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

}  // namespace cai::detail::ipc
