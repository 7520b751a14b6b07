// The backend's peer copies and interprocess memory and events (docs/scale-out.md).

#include <algorithm>
#include <cstring>
#include <string>

#include "backend/backend.h"
#include "cai/core/error.h"
#include "checks.h"

namespace cai::device {

using detail::BackendState;
using detail::hex;
using detail::ScopedContext;
using detail::StreamScope;
using detail::to_event;
using detail::to_stream;
using namespace cu;

void Backend::copy_peer_async(std::uint64_t dst, int dst_device, std::uint64_t src, int src_device,
                              std::size_t bytes, StreamHandle s) {
  constexpr std::string_view where = "copy_peer_async()";
  CUstream stream = to_stream(s, where);
  detail::check_range(where, "dst", dst, bytes);
  detail::check_range(where, "src", src, bytes);
  if (bytes == 0) return;
  BackendState& st = *state_;
  CUcontext dst_ctx = st.primary_context(dst_device);
  CUcontext src_ctx = st.primary_context(src_device);
  StreamScope on(st, stream);
  CAI_DRIVER(st, cuMemcpyPeerAsync, dst, dst_ctx, src, src_ctx, bytes, stream);
}

IpcMemoryHandle Backend::ipc_export_memory(std::uint64_t base) {
  constexpr std::string_view where = "ipc_export_memory()";
  BackendState& st = *state_;
  // Asked of the driver every time: whether memory can be shared is not in the ranges.
  const detail::Ranges::Entry e = st.query_pointer(base);
  const PointerInfo& info = e.info;
  if (info.kind != MemoryKind::device) {
    throw_error(Errc::device_error, std::string(where) + ": " + hex(base) +
                                        " is not device memory; only memory from cuMemAlloc "
                                        "can be shared with another process");
  }
  if (info.alloc_base != base) {
    throw_error(Errc::value_error, std::string(where) + ": " + hex(base) +
                                       " is inside the allocation at " + hex(info.alloc_base) +
                                       "; pass its start");
  }
  if (!e.ipc_capable) {
    throw_error(Errc::device_error,
                std::string(where) + ": the allocation at " + hex(base) +
                    " cannot be shared through CUDA IPC: the driver reports it is not legacy-IPC "
                    "capable (memory of a stream-ordered pool, such as cudaMallocAsync's or "
                    "PyTorch's and CuPy's async allocators, or of a virtual-memory mapping); "
                    "copy it into a cai array (cai.ops.copy) and share that");
  }
  ScopedContext scope(st, reinterpret_cast<CUcontext>(static_cast<std::uintptr_t>(info.context)));
  CUipcMemHandle h{};
  CAI_DRIVER(st, cuIpcGetMemHandle, &h, base);
  IpcMemoryHandle out;
  static_assert(sizeof h == sizeof out.bytes);
  std::memcpy(out.bytes.data(), &h, sizeof h);
  return out;
}

std::uint64_t Backend::ipc_open_memory(const IpcMemoryHandle& handle) {
  BackendState& st = *state_;
  st.current_context();
  CUipcMemHandle h{};
  std::memcpy(&h, handle.bytes.data(), sizeof h);
  CUdeviceptr p = 0;
  // Lazy peer access: the memory may be opened on another device than it lives on.
  CAI_DRIVER(st, cuIpcOpenMemHandle, &p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
  std::lock_guard lock(st.ipc_mu);
  if (++st.ipc_opened[p] == 1) st.frees.unmark(p);
  return p;
}

void Backend::ipc_close_memory(std::uint64_t base) {
  BackendState& st = *state_;
  detail::CheckedFree f{base, st.query_pointer(base).info, std::nullopt, true};
  {
    std::lock_guard lock(st.ipc_mu);
    auto it = st.ipc_opened.find(base);
    if (it == st.ipc_opened.end()) {
      throw_error(Errc::value_error, "ipc_close_memory(): " + detail::hex(base) +
                                         " is not memory opened by ipc_open_memory");
    }
    f.marked = --it->second == 0;
    if (f.marked) st.ipc_opened.erase(it);
  }
  // From now on the memory reads as closed: a remembered range would say otherwise.
  if (f.marked) st.ranges.forget(base, std::max<std::uint64_t>(f.info.alloc_size, 1));
  // Closed on the free thread: the close waits for the work of the whole context.
  st.frees.push(st, std::move(f));
}

EventHandle Backend::ipc_event_create() {
  BackendState& st = *state_;
  st.current_context();
  CUevent e = nullptr;
  CAI_DRIVER(st, cuEventCreate, &e, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING);
  return reinterpret_cast<std::uintptr_t>(e);
}

IpcEventHandle Backend::ipc_export_event(EventHandle e) {
  CUipcEventHandle h{};
  state_->current_context();
  CAI_DRIVER(*state_, cuIpcGetEventHandle, &h, to_event(e, "ipc_export_event()"));
  IpcEventHandle out;
  static_assert(sizeof h == sizeof out.bytes);
  std::memcpy(out.bytes.data(), &h, sizeof h);
  return out;
}

EventHandle Backend::ipc_open_event(const IpcEventHandle& handle) {
  BackendState& st = *state_;
  st.current_context();
  CUipcEventHandle h{};
  std::memcpy(&h, handle.bytes.data(), sizeof h);
  CUevent e = nullptr;
  CAI_DRIVER(st, cuIpcOpenEventHandle, &e, h);
  return reinterpret_cast<std::uintptr_t>(e);
}

}  // namespace cai::device
