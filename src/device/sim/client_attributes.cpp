// The simulated devices as other driver-API clients see them: the device attributes the
// simulator answers (docs/simulator.md has the table) and CUDA_VISIBLE_DEVICES.

#include <algorithm>
#include <cstdlib>
#include <string>
#include <string_view>
#include <thread>

#include "sim/sim_internal.h"

namespace cai::device::sim {

namespace {

// Values of a compute-capability 9.0 device (an H100's), except where the simulator differs:
// its multiprocessors are the host's cores, its PCI bus is its ordinal + 1.
struct Attribute {
  int id;
  int value;
};
constexpr int kFromHost = -1000;  // MULTIPROCESSOR_COUNT: the host's cores
constexpr int kBus = -1001;       // PCI_BUS_ID: the simulated device's index + 1
constexpr Attribute kAttributes[] = {
    {1, 1024},         // MAX_THREADS_PER_BLOCK
    {2, 1024},         // MAX_BLOCK_DIM_X
    {3, 1024},         // MAX_BLOCK_DIM_Y
    {4, 64},           // MAX_BLOCK_DIM_Z
    {5, 2147483647},   // MAX_GRID_DIM_X
    {6, 65535},        // MAX_GRID_DIM_Y
    {7, 65535},        // MAX_GRID_DIM_Z
    {8, 49152},        // MAX_SHARED_MEMORY_PER_BLOCK
    {9, 65536},        // TOTAL_CONSTANT_MEMORY
    {10, 32},          // WARP_SIZE
    {11, 2147483647},  // MAX_PITCH
    {12, 65536},       // MAX_REGISTERS_PER_BLOCK
    {13, 1980000},     // CLOCK_RATE (kHz)
    {14, 512},         // TEXTURE_ALIGNMENT
    {15, 1},           // GPU_OVERLAP
    {16, kFromHost},   // MULTIPROCESSOR_COUNT
    {17, 0},           // KERNEL_EXEC_TIMEOUT
    {18, 0},           // INTEGRATED
    {19, 1},           // CAN_MAP_HOST_MEMORY
    {20, 0},           // COMPUTE_MODE (default)
    {31, 1},           // CONCURRENT_KERNELS
    {32, 0},           // ECC_ENABLED
    {33, kBus},        // PCI_BUS_ID
    {34, 0},           // PCI_DEVICE_ID
    {35, 0},           // TCC_DRIVER
    {36, 2619000},     // MEMORY_CLOCK_RATE (kHz)
    {37, 5120},        // GLOBAL_MEMORY_BUS_WIDTH
    {38, 52428800},    // L2_CACHE_SIZE
    {39, 2048},        // MAX_THREADS_PER_MULTIPROCESSOR
    {40, 2},           // ASYNC_ENGINE_COUNT
    {41, 1},           // UNIFIED_ADDRESSING
    {50, 0},           // PCI_DOMAIN_ID
    {75, 9},           // COMPUTE_CAPABILITY_MAJOR
    {76, 0},           // COMPUTE_CAPABILITY_MINOR
    {78, 1},           // STREAM_PRIORITIES_SUPPORTED
    {81, 233472},      // MAX_SHARED_MEMORY_PER_MULTIPROCESSOR
    {82, 65536},       // MAX_REGISTERS_PER_MULTIPROCESSOR
    {83, 1},           // MANAGED_MEMORY
    {84, 0},           // MULTI_GPU_BOARD
    {86, 0},           // HOST_NATIVE_ATOMIC_SUPPORTED
    {87, 2},           // SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO
    {88, 0},           // PAGEABLE_MEMORY_ACCESS
    {89, 1},           // CONCURRENT_MANAGED_ACCESS
    {90, 1},           // COMPUTE_PREEMPTION_SUPPORTED
    {91, 1},           // CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM (SimDriver answers it)
    {95, 1},           // COOPERATIVE_LAUNCH
    {97, 232448},      // MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
    {99, 1},           // HOST_REGISTER_SUPPORTED
    {102, 0},          // VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED (not simulated)
    {106, 32},         // MAX_BLOCKS_PER_MULTIPROCESSOR
    {113, 1},          // READ_ONLY_HOST_REGISTER_SUPPORTED
    {115, 1},          // MEMORY_POOLS_SUPPORTED
    {119, 0},          // MEMPOOL_SUPPORTED_HANDLE_TYPES (pool IPC is not simulated)
    {125, 1},          // IPC_EVENT_SUPPORTED
};

}  // namespace

bool device_attribute(int attribute, int physical, int& value) {
  for (const Attribute& a : kAttributes) {
    if (a.id != attribute) continue;
    if (a.value == kFromHost) {
      value = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    } else if (a.value == kBus) {
      value = physical + 1;
    } else {
      value = a.value;
    }
    return true;
  }
  return false;
}

std::vector<int> visible_devices(int physical) {
  std::vector<int> all;
  for (int d = 0; d < physical; ++d) all.push_back(d);
  const char* env = std::getenv("CUDA_VISIBLE_DEVICES");
  if (env == nullptr) return all;
  // As the driver reads it: a comma-separated list of ordinals; the first entry that is not a
  // valid ordinal (or repeats one) ends the list. Device UUIDs are not simulated: they end it too.
  std::vector<int> visible;
  std::string_view rest(env);
  while (!rest.empty()) {
    const std::size_t comma = rest.find(',');
    std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (item.empty() || item.size() > 3 ||
        !std::all_of(item.begin(), item.end(), [](char c) { return c >= '0' && c <= '9'; }))
      break;
    const int d = std::stoi(std::string(item));
    if (d >= physical || std::find(visible.begin(), visible.end(), d) != visible.end()) break;
    visible.push_back(d);
  }
  return visible;
}

}  // namespace cai::device::sim
