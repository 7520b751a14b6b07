// Memory shared by another process with the driver's own IPC handle (include/cai/arrays/ipc.h,
// ipc_open_driver_handle): no ticket, no event, no reference count of cai's; the mapping is
// the only thing the handle proves, so the array is checked against it.

#include <memory>
#include <string>
#include <utility>

#include "cai/arrays/devices.h"
#include "cai/arrays/ipc.h"
#include "cai/core/error.h"
#include "cai/device/backend.h"
#include "cai/device/owned.h"
#include "ipc_state.h"

namespace cai {

namespace {

// Closes the mapping when the last view of the array goes.
struct DriverMapping {
  std::uint64_t base = 0;
  int device = 0;
  DriverMapping(std::uint64_t b, int d) : base(b), device(d) {}
  DriverMapping(const DriverMapping&) = delete;
  DriverMapping& operator=(const DriverMapping&) = delete;
  ~DriverMapping() { detail::ipc::close_mapping(base, device); }
};

}  // namespace

View ipc_open_driver_handle(const device::IpcMemoryHandle& handle, DType dtype, Layout layout,
                            std::uint64_t offset, bool readonly) {
  constexpr const char* where = "open_ipc_array()";
  auto& backend = device::backend();
  const int device = backend.current_device();
  auto mapping = std::make_shared<DriverMapping>(backend.ipc_open_memory(handle), device);
  const std::uint64_t base = mapping->base;
  // The driver maps the whole block the exporter's allocation is in (it may be more than the
  // allocation): the array must lie inside the mapping, or its kernels would fault.
  const device::PointerInfo mapped = backend.pointer_info(base);
  const std::uint64_t mapped_end = mapped.alloc_base + mapped.alloc_size;
  const Layout::Extent ext = layout.extent();
  const bool inside =
      layout.nbytes() == 0 ||
      (static_cast<std::int64_t>(offset) + ext.lo >= 0 && mapped.alloc_base <= base &&
       base + offset + static_cast<std::uint64_t>(ext.hi) <= mapped_end);
  if (!inside) {
    throw_error(Errc::value_error,
                std::string(where) + ": the array (offset " + std::to_string(offset) + ", bytes [" +
                    std::to_string(ext.lo) + ", " + std::to_string(ext.hi) +
                    ") from it) reaches outside the " + std::to_string(mapped_end - base) +
                    " bytes the handle maps; check its shape, dtype, strides and offset");
  }
  return View(base + offset, dtype, std::move(layout), readonly,
              sync::SyncState::imported_without_stream(), std::move(mapping));
}

}  // namespace cai
