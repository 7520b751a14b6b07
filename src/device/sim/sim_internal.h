#pragma once

// Internal to the simulated driver's source files: constants, handle encodings and helpers.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "cai/core/format.h"
#include "sim/driver_names.h"

namespace cai::device::sim {

inline constexpr int kMaxDevices = 64;
/// CUDA 13.0, the driver cai was last run on.
inline constexpr int kSimDriverVersion = 13000;
inline constexpr const char* kSimDeviceName = "cai simulator";
/// Address space reserved for each simulated device's memory (pages are taken when written).
inline constexpr std::size_t kDeviceMemory = std::size_t{16} << 30;
/// Interprocess events and shared allocations one process may have at once.
inline constexpr std::uint32_t kEventSlots = 65536;
inline constexpr std::uint32_t kExportSlots = 65536;

// Handles are recognisable in messages and never collide between kinds or instances.
inline constexpr std::uint64_t kStreamBase = 0x5100000000;
inline constexpr std::uint64_t kEventBase = 0xe100000000;
inline constexpr std::uint64_t kModuleBase = 0x3d00000000;
inline constexpr std::uint64_t kFunctionBase = 0xf000000000;
inline constexpr std::uint64_t kContextBase = 0xc000000000;

inline CUcontext context_handle(std::uint64_t instance, int device) {
  return reinterpret_cast<CUcontext>(
      static_cast<std::uintptr_t>(kContextBase + instance * 256 + static_cast<unsigned>(device)));
}
/// The device of one of this instance's contexts, or -1.
inline int context_device(std::uint64_t instance, CUcontext c, int devices) {
  const auto v = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(c));
  const std::uint64_t base = kContextBase + instance * 256;
  if (v < base || v >= base + static_cast<std::uint64_t>(devices)) return -1;
  return static_cast<int>(v - base);
}

/// Contexts of cuCtxCreate: never reused, per instance.
inline constexpr std::uint64_t kCreatedContextBase = 0xc100000000;
inline constexpr std::uint64_t kCreatedContextsPerInstance = std::uint64_t{1} << 24;
/// The default memory pool of each device (cuDeviceGetMemPool), as a recognisable value.
inline constexpr std::uint64_t kPoolBase = 0x9001000000;
inline CUmemoryPool pool_handle(std::uint64_t instance, int device) {
  return reinterpret_cast<CUmemoryPool>(
      static_cast<std::uintptr_t>(kPoolBase + instance * 256 + static_cast<unsigned>(device)));
}

/// The simulated devices CUDA_VISIBLE_DEVICES leaves of `physical`, in its order (all when unset).
std::vector<int> visible_devices(int physical);
/// A device attribute of simulated device `physical`; false when the attribute is not simulated.
bool device_attribute(int attribute, int physical, int& value);

inline std::uint64_t handle_value(const void* h) {
  return static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(h));
}

/// Host threads get ids that are never reused (std::thread::id values are); their exit
/// releases their per-thread default streams in every live instance.
extern std::atomic<std::uint64_t> g_next_thread;
struct HostThread {
  std::uint64_t id = g_next_thread.fetch_add(1);
  HostThread() = default;
  HostThread(const HostThread&) = delete;
  HostThread& operator=(const HostThread&) = delete;
  ~HostThread();
};
std::uint64_t this_thread_id();

/// Sets the calling thread's error detail (caiSimGetErrorDetail) and returns r.
CUresult fail(CUresult r, std::string detail);

using cai::detail::hex;

/// The host's page size: page-locked and managed memory comes in whole pages.
std::size_t host_page_size() noexcept;
std::byte* allocate_host_block(std::size_t bytes);
void free_host_block(std::byte* p) noexcept;

}  // namespace cai::device::sim
