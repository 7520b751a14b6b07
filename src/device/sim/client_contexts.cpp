// The simulated driver's entry points for other driver-API clients (client_entries.h): devices,
// primary and created contexts, peer access, stream priorities and flags, the profiler.

#include <algorithm>
#include <cstdio>
#include <string>

#include "cai/core/error.h"
#include "sim/sim_driver.h"
#include "sim/sim_internal.h"

namespace cai::device::sim {

namespace {

// The range cuCtxGetStreamPriorityRange reports (a GPU's: 0 is the lowest priority, -5 the
// highest); cuStreamCreateWithPriority clamps to it, as documented.
constexpr int kLeastPriority = 0;
constexpr int kGreatestPriority = -5;

// What the driver validates in context flags: known bits, one scheduling mode.
bool valid_context_flags(unsigned flags) {
  const unsigned sched = flags & kCtxSchedMask;
  return (flags & ~kCtxFlagsMask) == 0 && (sched == 0 || sched == 1 || sched == 2 || sched == 4);
}

// The layout of CUctxCreateParams (cuda.h), read only to refuse what is not simulated.
struct CtxCreateParamsLayout {
  void* exec_affinity_params;
  int exec_affinity_count;
  void* cig_params;
};

}  // namespace

#define CAI_SIM_CHECK_DEVICE(dev)          \
  if ((dev) < 0 || (dev) >= devices_)      \
    return fail(CUDA_ERROR_INVALID_DEVICE, \
                "device " + std::to_string(dev) + " is not a device of the simulator");

// ---------------------------------------------------------------------------------------------
// Devices.

CUresult SimDriver::cuDeviceGetPCIBusId(char* bus_id, int length, CUdevice device) {
  CAI_SIM_CHECK_DEVICE(device)
  if (bus_id == nullptr || length <= 0) return CUDA_ERROR_INVALID_VALUE;
  int bus = 0;
  device_attribute(33, physical_[static_cast<std::size_t>(device)], bus);
  std::snprintf(bus_id, static_cast<std::size_t>(length), "0000:%02x:00.0", bus);
  return CUDA_SUCCESS;
}

CUresult SimDriver::cuDeviceCanAccessPeer(int* can_access, CUdevice device, CUdevice peer) {
  CAI_SIM_CHECK_DEVICE(device)
  CAI_SIM_CHECK_DEVICE(peer)
  if (can_access == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *can_access = 0;  // peer access is not simulated: a device reaches only its own memory
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------------------------------------
// Primary contexts: retained and released by count; the last release or a reset frees what
// the context holds.

int SimDriver::context_device_locked(CUcontext c) const {
  const int d = context_device(instance_, c, devices_);
  if (d >= 0) return d;
  auto it = created_contexts_.find(handle_value(c));
  return it == created_contexts_.end() ? -1 : it->second.first;
}

void SimDriver::reset_device_locked(std::unique_lock<std::mutex>& lk, int device) {
  drain_locked(lk);  // the driver waits for the context's work before it destroys it
  for (auto it = memory_.begin(); it != memory_.end();) {
    const Allocation& a = it->second;
    if (a.device != device || a.kind == Kind::opened) {
      ++it;  // memory opened from other processes goes with cuIpcCloseMemHandle
      continue;
    }
    const std::uint64_t base = it->first;
    const Allocation copy = a;
    it = memory_.erase(it);
    races_.forget(base, base + copy.size);
    unexport_locked(copy);
    give_back_locked(base, copy);
  }
  for (auto it = streams_.begin(); it != streams_.end();) {
    if (it->second->device != device) {
      ++it;
      continue;
    }
    release_locked(it->second);
    it = streams_.erase(it);
  }
  std::erase_if(events_, [&](const auto& e) { return e.second.device == device; });
}

CUresult SimDriver::cuDevicePrimaryCtxRelease(CUdevice device) {
  CAI_SIM_CHECK_DEVICE(device)
  std::unique_lock lk(mu_);
  DeviceState& ds = device_state_[static_cast<std::size_t>(device)];
  if (ds.primary_refs == 0)
    return fail(CUDA_ERROR_INVALID_CONTEXT,
                "cuDevicePrimaryCtxRelease: the primary context of "
                "device " +
                    std::to_string(device) + " is not retained");
  if (--ds.primary_refs == 0) reset_device_locked(lk, device);
  return CUDA_SUCCESS;
}

CUresult SimDriver::cuDevicePrimaryCtxReset(CUdevice device) {
  CAI_SIM_CHECK_DEVICE(device)
  std::unique_lock lk(mu_);
  reset_device_locked(lk, device);
  return CUDA_SUCCESS;
}

CUresult SimDriver::cuDevicePrimaryCtxGetState(CUdevice device, unsigned int* flags, int* active) {
  CAI_SIM_CHECK_DEVICE(device)
  if (flags == nullptr || active == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lk(mu_);
  const DeviceState& ds = device_state_[static_cast<std::size_t>(device)];
  *flags = ds.primary_flags;
  *active = ds.primary_refs > 0 ? 1 : 0;
  return CUDA_SUCCESS;
}

CUresult SimDriver::cuDevicePrimaryCtxSetFlags(CUdevice device, unsigned int flags) {
  CAI_SIM_CHECK_DEVICE(device)
  if (!valid_context_flags(flags))
    return fail(CUDA_ERROR_INVALID_VALUE,
                "context flags " + hex(flags) + ": unknown bits or more than one scheduling mode");
  std::lock_guard lk(mu_);
  device_state_[static_cast<std::size_t>(device)].primary_flags = flags;
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------------------------------------
// Created (non-primary) contexts.

CUresult SimDriver::cuCtxCreate(CUcontext* context, CUctxCreateParams* params, unsigned int flags,
                                CUdevice device) {
  CAI_SIM_CHECK_DEVICE(device)
  if (context == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_context_flags(flags))
    return fail(CUDA_ERROR_INVALID_VALUE,
                "context flags " + hex(flags) + ": unknown bits or more than one scheduling mode");
  if (params != nullptr) {
    const auto* p = reinterpret_cast<const CtxCreateParamsLayout*>(params);
    if (p->exec_affinity_count != 0 || p->exec_affinity_params != nullptr ||
        p->cig_params != nullptr)
      return fail(CUDA_ERROR_NOT_SUPPORTED,
                  "cuCtxCreate: execution affinity and CIG parameters are not simulated");
  }
  std::lock_guard lk(mu_);
  if (next_context_ + 1 >= kCreatedContextsPerInstance)
    return fail(CUDA_ERROR_OUT_OF_MEMORY, "cuCtxCreate: too many contexts");
  const std::uint64_t h =
      kCreatedContextBase + instance_ * kCreatedContextsPerInstance + ++next_context_;
  created_contexts_[h] = {device, flags};
  contexts_[this_thread_id()].push_back(h);  // the new context is made current, as documented
  *context = reinterpret_cast<CUcontext>(static_cast<std::uintptr_t>(h));
  return CUDA_SUCCESS;
}

CUresult SimDriver::cuCtxDestroy(CUcontext context) {
  std::unique_lock lk(mu_);
  const std::uint64_t h = handle_value(context);
  auto it = created_contexts_.find(h);
  if (it == created_contexts_.end()) {
    return fail(CUDA_ERROR_INVALID_CONTEXT,
                context_device(instance_, context, devices_) >= 0
                    ? "cuCtxDestroy of a primary context (release it with "
                      "cuDevicePrimaryCtxRelease)"
                    : "cuCtxDestroy: not a context of the simulator (or destroyed)");
  }
  drain_locked(lk);  // the driver waits for the context's work
  created_contexts_.erase(it);
  // Popped from the calling thread's stack when current there; other threads that have it
  // current get an error at their next call, as the driver documents.
  auto& stack = contexts_[this_thread_id()];
  if (!stack.empty() && stack.back() == h) stack.pop_back();
  return CUDA_SUCCESS;
}

CUresult SimDriver::cuCtxGetFlags(unsigned int* flags) {
  if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lk(mu_);
  int device = 0;
  if (CUresult r = need_context_locked(device)) return r;
  const std::uint64_t h = contexts_[this_thread_id()].back();
  auto it = created_contexts_.find(h);
  *flags = it != created_contexts_.end()
               ? it->second.second
               : device_state_[static_cast<std::size_t>(device)].primary_flags;
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------------------------------------
// Peer access: not simulated, so refused as a driver refuses it between devices without it.

CUresult SimDriver::cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags) {
  if (flags != 0) return fail(CUDA_ERROR_INVALID_VALUE, "cuCtxEnablePeerAccess: flags must be 0");
  std::lock_guard lk(mu_);
  int device = 0;
  if (CUresult r = need_context_locked(device)) return r;
  const int peer_device = context_device_locked(peer);
  if (peer_device < 0)
    return fail(CUDA_ERROR_INVALID_CONTEXT,
                "cuCtxEnablePeerAccess: not a context of the simulator");
  if (peer_device == device)
    return fail(CUDA_ERROR_INVALID_DEVICE, "cuCtxEnablePeerAccess: the peer is the same device");
  return fail(kErrorPeerAccessUnsupported,
              "peer access is not simulated (cuDeviceCanAccessPeer reports 0)");
}

CUresult SimDriver::cuCtxDisablePeerAccess(CUcontext peer) {
  std::lock_guard lk(mu_);
  int device = 0;
  if (CUresult r = need_context_locked(device)) return r;
  if (context_device_locked(peer) < 0)
    return fail(CUDA_ERROR_INVALID_CONTEXT,
                "cuCtxDisablePeerAccess: not a context of the simulator");
  return fail(kErrorPeerAccessNotEnabled, "peer access was never enabled");
}

// ---------------------------------------------------------------------------------------------
// Stream priorities, flags and capture.

CUresult SimDriver::cuCtxGetStreamPriorityRange(int* least, int* greatest) {
  if (least != nullptr) *least = kLeastPriority;
  if (greatest != nullptr) *greatest = kGreatestPriority;
  return CUDA_SUCCESS;
}

CUresult SimDriver::cuStreamCreateWithPriority(CUstream* stream, unsigned int flags, int priority) {
  if (CUresult r = cuStreamCreate(stream, flags)) return r;
  std::lock_guard lk(mu_);
  streams_.at(handle_value(*stream))->priority =
      std::clamp(priority, kGreatestPriority, kLeastPriority);
  return CUDA_SUCCESS;
}

CUresult SimDriver::cuStreamGetPriority(CUstream stream, int* priority) {
  return read_stream(stream, priority, [](const Stream& s) { return s.priority; });
}

CUresult SimDriver::cuStreamGetFlags(CUstream stream, unsigned int* flags) {
  return read_stream(stream, flags, [](const Stream& s) {
    return static_cast<unsigned int>(s.non_blocking ? CU_STREAM_NON_BLOCKING : CU_STREAM_DEFAULT);
  });
}

CUresult SimDriver::cuStreamIsCapturing(CUstream stream, CUstreamCaptureStatus* status) {
  // Graphs and capture are not simulated.
  return read_stream(stream, status, [](const Stream&) { return CU_STREAM_CAPTURE_STATUS_NONE; });
}

// ---------------------------------------------------------------------------------------------
// The profiler: nothing to profile.

CUresult SimDriver::cuProfilerStart() {
  return CUDA_SUCCESS;
}

CUresult SimDriver::cuProfilerStop() {
  return CUDA_SUCCESS;
}

#undef CAI_SIM_CHECK_DEVICE

}  // namespace cai::device::sim
