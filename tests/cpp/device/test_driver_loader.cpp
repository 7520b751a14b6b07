// Loading a driver's table (device/driver/loader.cpp): libcuda.so.1 where present, the
// simulated driver, and drivers that fail each step of loading (the simulator's symbols with
// one entry point replaced), each reported with the step that failed and how to use the
// simulator instead. Also the kernels' embedded PTX and entry names.

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "backend/backend.h"
#include "cai/core/error.h"
#include "cai_matchers.h"
#include "driver/api.h"
#include "kernels/launch.h"
#include "sim/sim_driver.h"

namespace cai::device {
namespace {

using namespace cu;
using ::testing::HasSubstr;

bool driver_library_present() {
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) return false;
  dlclose(h);
  return true;
}

TEST(driver_loader, libcuda_is_loaded_once_or_reported_clearly) {
  const std::shared_ptr<const Driver> d = libcuda();
  EXPECT_EQ(libcuda(), d);  // loaded once per process
  EXPECT_EQ(d->name, "libcuda.so.1");
  EXPECT_FALSE(d->simulated);
  if (d->ok) {
    EXPECT_GE(d->version, kDriverApiVersion);
    EXPECT_FALSE(d->devices.empty());
    return;
  }
  EXPECT_THAT(d->error, HasSubstr("CUDA backend: "));
  EXPECT_THAT(d->error, HasSubstr("set CAI_BACKEND=sim to use the simulator"));
  if (!driver_library_present()) EXPECT_THAT(d->error, HasSubstr("libcuda.so.1 not found"));
  EXPECT_THAT([&] { detail::make_backend(d); },
              cai::test::ThrowsCaiError(Errc::device_error, HasSubstr("CUDA backend")));
}

// A driver made of the simulator's symbols, with some replaced.
struct Fake {
  std::shared_ptr<sim::SimDriver> sim = std::make_shared<sim::SimDriver>(1);
  Driver load(std::map<std::string, void*> replaced = {}) {
    return load_driver(
        [&](const char* name) -> void* {
          auto it = replaced.find(name);
          return it != replaced.end() ? it->second : sim->symbol(name);
        },
        "libfake.so");
  }
};

// The real entry point behind a replaced cuGetProcAddress_v2, and what it hides or replaces.
using GetProc = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
GetProc g_real_get_proc = nullptr;
std::string g_hidden;
void* g_replacement = nullptr;

CUresult hiding_get_proc(const char* symbol, void** fn, int version, cuuint64_t flags,
                         CUdriverProcAddressQueryResult* found) {
  if (g_hidden == symbol) {
    if (g_replacement != nullptr) {
      *fn = g_replacement;
      *found = CU_GET_PROC_ADDRESS_SUCCESS;
      return CUDA_SUCCESS;
    }
    *fn = nullptr;
    *found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_ERROR_NOT_FOUND;
  }
  return g_real_get_proc(symbol, fn, version, flags, found);
}

Driver load_hiding(Fake& f, const char* symbol, void* replacement = nullptr) {
  g_real_get_proc = reinterpret_cast<GetProc>(f.sim->symbol("cuGetProcAddress_v2"));
  g_hidden = symbol;
  g_replacement = replacement;
  return f.load({{"cuGetProcAddress_v2", reinterpret_cast<void*>(&hiding_get_proc)}});
}

CUresult old_driver(int* v) {
  *v = 11080;
  return CUDA_SUCCESS;
}
CUresult stub_library(int*) {
  return CUDA_ERROR_STUB_LIBRARY;
}
CUresult broken_version(int*) {
  return CUDA_ERROR_UNKNOWN;
}
CUresult no_device(unsigned) {
  return CUDA_ERROR_NO_DEVICE;
}
CUresult zero_devices(int* n) {
  *n = 0;
  return CUDA_SUCCESS;
}
CUresult count_fails(int*) {
  return CUDA_ERROR_NOT_INITIALIZED;
}
CUresult device_get_fails(CUdevice*, int) {
  return CUDA_ERROR_INVALID_DEVICE;
}

TEST(driver_loader, the_simulator_loads_through_the_same_steps) {
  Fake f;
  const Driver d = f.load();
  ASSERT_TRUE(d.ok) << d.error;
  EXPECT_TRUE(d.simulated);
  EXPECT_EQ(d.devices.size(), 1u);
  EXPECT_GE(d.version, kDriverApiVersion);
  EXPECT_NE(d.api.cuLaunchKernel, nullptr);
  EXPECT_NE(d.sim.caiSimDelay, nullptr);
  EXPECT_EQ(describe(d.api, CUDA_ERROR_OUT_OF_MEMORY), "CUDA_ERROR_OUT_OF_MEMORY (out of memory)");
  EXPECT_EQ(describe(d.api, static_cast<CUresult>(12345)), "CUresult 12345");
}

TEST(driver_loader, each_failed_step_is_named) {
  Fake f;
  auto error_of = [](const Driver& d) {
    EXPECT_FALSE(d.ok);
    EXPECT_THAT(d.error, HasSubstr("set CAI_BACKEND=sim to use the simulator"));
    return d.error;
  };
  EXPECT_THAT(error_of(f.load({{"cuInit", nullptr}})), HasSubstr("does not export cuInit"));
  EXPECT_THAT(error_of(f.load({{"cuDriverGetVersion", reinterpret_cast<void*>(&old_driver)}})),
              HasSubstr("supports CUDA 11.8, cai needs 12.0 or later"));
  EXPECT_THAT(error_of(f.load({{"cuDriverGetVersion", reinterpret_cast<void*>(&stub_library)}})),
              HasSubstr("is the CUDA toolkit's stub library"));
  EXPECT_THAT(error_of(f.load({{"cuDriverGetVersion", reinterpret_cast<void*>(&broken_version)}})),
              HasSubstr("cuDriverGetVersion failed: CUDA_ERROR_UNKNOWN"));
  EXPECT_THAT(error_of(f.load({{"cuGetProcAddress_v2", nullptr}})),
              HasSubstr("cai needs 12.0 or later"));
  EXPECT_THAT(error_of(f.load({{"cuInit", reinterpret_cast<void*>(&no_device)}})),
              HasSubstr("cuInit failed (no CUDA device found): CUDA_ERROR_NO_DEVICE"));
  EXPECT_THAT(error_of(load_hiding(f, "cuLaunchHostFunc")),
              HasSubstr("cuGetProcAddress(\"cuLaunchHostFunc\", 12000) failed"));
  EXPECT_THAT(error_of(load_hiding(f, "caiSimDelay")),
              HasSubstr("has 16 of the 17 entry points of cai's simulator"));
  EXPECT_THAT(error_of(load_hiding(f, "cuDeviceGetCount", reinterpret_cast<void*>(&zero_devices))),
              HasSubstr("found no CUDA device"));
  EXPECT_THAT(error_of(load_hiding(f, "cuDeviceGetCount", reinterpret_cast<void*>(&count_fails))),
              HasSubstr("cuDeviceGetCount failed: CUDA_ERROR_NOT_INITIALIZED"));
  EXPECT_THAT(error_of(load_hiding(f, "cuDeviceGet", reinterpret_cast<void*>(&device_get_fails))),
              HasSubstr("cuDeviceGet(0) failed: CUDA_ERROR_INVALID_DEVICE"));
}

TEST(driver_loader, a_driver_without_the_simulators_entries_is_a_real_one) {
  // Every entry of the simulator's own hidden: loads as a plain driver, without its controls.
  struct Hide {
    static CUresult get(const char* symbol, void** fn, int version, cuuint64_t flags,
                        CUdriverProcAddressQueryResult* found) {
      if (std::strncmp(symbol, "caiSim", 6) == 0) {
        *fn = nullptr;
        *found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        return CUDA_ERROR_NOT_FOUND;
      }
      return g_real_get_proc(symbol, fn, version, flags, found);
    }
  };
  Fake f;
  g_real_get_proc = reinterpret_cast<GetProc>(f.sim->symbol("cuGetProcAddress_v2"));
  const Driver d = f.load({{"cuGetProcAddress_v2", reinterpret_cast<void*>(&Hide::get)}});
  ASSERT_TRUE(d.ok) << d.error;
  EXPECT_FALSE(d.simulated);
  EXPECT_EQ(d.sim.caiSimDelay, nullptr);
}

// cai's simulated driver is a library like NVIDIA's (libcuda.so.1 built from src/device/sim):
// the backend and any other client of the process reach the same one.
TEST(driver_loader, the_simulated_driver_is_the_process_libcuda) {
  const std::shared_ptr<const Driver> d = sim_driver();
  ASSERT_TRUE(d->ok) << d->error;
  EXPECT_TRUE(d->simulated);
  EXPECT_EQ(sim_driver(), d);  // loaded once
  // Another library asking for the driver by name gets this one.
  void* other = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(other, nullptr);
  using GetRange = CUresult (*)(CUdeviceptr*, std::size_t*, CUdeviceptr);
  const auto get_range = reinterpret_cast<GetRange>(dlsym(other, "cuMemGetAddressRange_v2"));
  ASSERT_NE(get_range, nullptr);
  auto b = detail::make_backend(d);
  const std::uint64_t p = b->alloc(MemoryKind::device, 1000);
  CUdeviceptr base = 0;
  std::size_t size = 0;
  EXPECT_EQ(get_range(&base, &size, p + 10), CUDA_SUCCESS);  // cai's memory, seen by the other
  EXPECT_EQ(base, p);
  EXPECT_EQ(size, 1000u);
  b->free(p);
  EXPECT_EQ(get_range(&base, &size, p + 10), CUDA_ERROR_INVALID_VALUE);
  dlclose(other);
}

// When the process's libcuda.so.1 is the simulated driver already (LD_LIBRARY_PATH, or another
// library loaded it), the backend uses that one, whichever way it asks.
void exit_after_loading_the_simulator_first() {
  const char* path = std::getenv("CAI_SIM_DRIVER");
  if (path == nullptr || dlopen(path, RTLD_NOW | RTLD_GLOBAL) == nullptr) std::exit(2);
  const std::shared_ptr<const Driver> cuda = libcuda();
  const std::shared_ptr<const Driver> sim = sim_driver();
  const bool same = cuda->ok && cuda->simulated && sim->ok && cuda->api.cuInit == sim->api.cuInit;
  std::exit(same && !cuda_available() ? 0 : 1);
}

TEST(driver_loader, a_simulated_libcuda_already_loaded_is_the_one) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(exit_after_loading_the_simulator_first(), ::testing::ExitedWithCode(0), "");
}

TEST(driver_loader, the_simulated_driver_path_names_the_places_tried) {
  const char* saved = std::getenv("CAI_SIM_DRIVER");
  const std::string keep = saved ? saved : "";
  ::setenv("CAI_SIM_DRIVER", "/nonexistent/libcuda.so.1", 1);
  std::string tried;
  EXPECT_EQ(sim_driver_path(&tried), "");
  EXPECT_EQ(tried, "/nonexistent/libcuda.so.1 (CAI_SIM_DRIVER)");
  ::setenv("CAI_SIM_DRIVER", "/tmp", 1);  // a folder is not a library
  EXPECT_EQ(sim_driver_path(&tried), "");
  EXPECT_EQ(tried, "/tmp (CAI_SIM_DRIVER)");
  if (saved != nullptr) {
    ::setenv("CAI_SIM_DRIVER", keep.c_str(), 1);
    EXPECT_EQ(sim_driver_path(), keep);
  } else {
    ::unsetenv("CAI_SIM_DRIVER");
  }
}

TEST(driver_loader, kernel_names) {
  // The names come from the tables (src/device/kernels/launch.h), in load order.
  auto names = detail::cuda_kernel_names();
  ASSERT_EQ(names.size(), static_cast<std::size_t>(kernels::kernel_count));
  std::set<std::string_view> unique(names.begin(), names.end());
  EXPECT_EQ(unique.size(), names.size());
  EXPECT_EQ(names[0], "cai_copy_1_strided32");  // each name at its index: test_cpu_kernels.cpp
  EXPECT_EQ(names.back(), "cai_add_f8e8m0fnu_tile");  // the last type of the last table
}

TEST(driver_loader, embedded_ptx_has_every_kernel) {
  if (!detail::cuda_kernels_built()) {
    EXPECT_TRUE(detail::cuda_kernels_ptx().empty());
    GTEST_SKIP() << "built without nvcc";
  }
  const std::string_view ptx = detail::cuda_kernels_ptx();
  ASSERT_FALSE(ptx.empty());
  EXPECT_EQ(ptx.data()[ptx.size()], '\0');  // cuModuleLoadData reads up to the NUL
  EXPECT_NE(ptx.find(".version"), std::string_view::npos);
  EXPECT_NE(ptx.find(".target"), std::string_view::npos);
  for (std::string_view name : detail::cuda_kernel_names()) {
    const std::string entry = ".entry " + std::string(name) + "(";
    EXPECT_NE(ptx.find(entry), std::string_view::npos) << entry;
  }
}

}  // namespace
}  // namespace cai::device
