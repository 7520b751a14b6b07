#include "cai/arrays/ipc.h"

#include <memory>
#include <string>

#include "cai/core/error.h"
#include "cai/core/interface.h"
#include "ipc_state.h"

namespace cai::detail::ipc {

namespace {

View open_unmasked(const IpcArrayHandle& h, const sync::StreamRef& stream) {
  constexpr const char* where = "IpcHandle.open()";
  auto& backend = device::backend();
  check_origin(h, backend, where);
  Layout layout(h.shape, h.strides, h.dtype.itemsize());
  if (!h.has_memory) {
    return View(0, h.dtype, std::move(layout), h.readonly,
                std::make_shared<sync::SyncState>(stream), nullptr);
  }
  check_extent(h, layout, where);
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

}  // namespace

}  // namespace cai::detail::ipc

namespace cai {

// A mask travels as a handle of its own beside the array's, opened with it.
View ipc_open(const IpcArrayHandle& h, const sync::StreamRef& stream) {
  View v = detail::ipc::open_unmasked(h, stream);
  if (h.mask) {
    View mask = ipc_open(*h.mask, stream);
    check_mask("IpcHandle.open(): mask", v.shape(), mask.shape(), mask.dtype());
    v.set_mask(std::make_shared<const View>(std::move(mask)));
  }
  return v;
}

}  // namespace cai
