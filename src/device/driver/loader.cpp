// Loading a driver's entry points: the same steps for libcuda.so.1 and for the simulator.

#include <dlfcn.h>
#include <sys/stat.h>

#include <cstdlib>

#include <string>

#include "cai/core/format.h"
#include "driver/api.h"

namespace cai::device::cu {

namespace {

constexpr std::string_view kUseSim = "; set CAI_BACKEND=sim to use the simulator";

using cai::detail::cuda_version_text;

struct Slot {
  const char* name;
  void** slot;
};

}  // namespace

std::string describe(const DriverApi& a, CUresult r) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (a.cuGetErrorName == nullptr || a.cuGetErrorName(r, &name) != CUDA_SUCCESS) name = nullptr;
  if (a.cuGetErrorString == nullptr || a.cuGetErrorString(r, &text) != CUDA_SUCCESS) text = nullptr;
  std::string s = name ? name : "CUresult " + std::to_string(static_cast<int>(r));
  if (text) s += std::string(" (") + text + ")";
  return s;
}

namespace {

// The phases of load_driver: each returns "" or why the driver cannot be used.

// The entries every driver exports by name, its version, and cuInit.
std::string initialise(const SymbolLookup& lookup, GetProcAddressFn get_proc, Driver& d) {
  DriverApi& a = d.api;
  // These are exported under their plain names by every driver cuGetProcAddress_v2 exists in
  // (CUDA 12.0+); everything else goes through cuGetProcAddress.
  a.cuGetErrorName = reinterpret_cast<decltype(a.cuGetErrorName)>(lookup("cuGetErrorName"));
  a.cuGetErrorString = reinterpret_cast<decltype(a.cuGetErrorString)>(lookup("cuGetErrorString"));
  a.cuInit = reinterpret_cast<decltype(a.cuInit)>(lookup("cuInit"));
  a.cuDriverGetVersion =
      reinterpret_cast<decltype(a.cuDriverGetVersion)>(lookup("cuDriverGetVersion"));
  if (a.cuInit == nullptr || a.cuDriverGetVersion == nullptr)
    return d.name + " does not export cuInit (not an NVIDIA driver)";
  if (CUresult r = a.cuDriverGetVersion(&d.version); r != CUDA_SUCCESS) {
    if (r == CUDA_ERROR_STUB_LIBRARY) {
      // The toolkit's link-time stub found first on the library path: it only returns this.
      Dl_info info{};
      const bool named =
          dladdr(reinterpret_cast<void*>(a.cuInit), &info) != 0 && info.dli_fname != nullptr;
      return d.name + (named ? " (" + std::string(info.dli_fname) + ")" : std::string()) +
             " is the CUDA toolkit's stub library, not an NVIDIA driver; remove its "
             "directory from the library path";
    }
    return "cuDriverGetVersion failed: " + describe(a, r);
  }
  if (get_proc == nullptr || d.version < kDriverApiVersion) {
    return "the NVIDIA driver supports CUDA " + cuda_version_text(d.version) + ", cai needs " +
           cuda_version_text(kDriverApiVersion) + " or later; update the driver";
  }
  if (CUresult r = a.cuInit(0); r != CUDA_SUCCESS) {
    const char* what = r == CUDA_ERROR_NO_DEVICE      ? "no CUDA device found"
                       : r == CUDA_ERROR_STUB_LIBRARY ? "the toolkit's stub library, not a driver"
                                                      : "the driver failed to initialise";
    return std::string("cuInit failed (") + what + "): " + describe(a, r);
  }
  d.initialised = true;
  return {};
}

// Every entry of CAI_DRIVER_ENTRIES, at the ABI version cai was written for.
std::string resolve_entries(GetProcAddressFn get_proc, DriverApi& a) {
#define CAI_DETAIL_SLOT(entry, ...) {#entry, reinterpret_cast<void**>(&a.entry)},
  const Slot slots[] = {CAI_DRIVER_ENTRIES(CAI_DETAIL_SLOT)};
#undef CAI_DETAIL_SLOT
  for (const Slot& s : slots) {
    CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    const CUresult r =
        get_proc(s.name, s.slot, kDriverApiVersion, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &found);
    if (r != CUDA_SUCCESS || found != CU_GET_PROC_ADDRESS_SUCCESS || *s.slot == nullptr) {
      return std::string("cuGetProcAddress(\"") + s.name + "\", " +
             std::to_string(kDriverApiVersion) + ") failed: " +
             (r != CUDA_SUCCESS ? describe(a, r)
                                : "symbol status " + std::to_string(static_cast<int>(found)));
    }
  }
  return {};
}

// The simulator's own entries: all of them (d.simulated), or a driver without them.
std::string resolve_sim_entries(GetProcAddressFn get_proc, Driver& d) {
  SimApi& sim = d.sim;
#define CAI_DETAIL_SIM_SLOT(entry, ...) {#entry, reinterpret_cast<void**>(&sim.entry)},
  const Slot sim_slots[] = {CAI_SIM_ENTRIES(CAI_DETAIL_SIM_SLOT)};
#undef CAI_DETAIL_SIM_SLOT
  std::size_t sim_found = 0;
  for (const Slot& s : sim_slots) {
    CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    if (get_proc(s.name, s.slot, kDriverApiVersion, CU_GET_PROC_ADDRESS_DEFAULT, &found) ==
            CUDA_SUCCESS &&
        found == CU_GET_PROC_ADDRESS_SUCCESS && *s.slot != nullptr) {
      ++sim_found;
    } else {
      *s.slot = nullptr;
    }
  }
  if (sim_found != 0 && sim_found != sim_entry_count)
    return d.name + " has " + std::to_string(sim_found) + " of the " +
           std::to_string(sim_entry_count) + " entry points of cai's simulator";
  d.simulated = sim_found == sim_entry_count;
  return {};
}

std::string list_devices(Driver& d) {
  const DriverApi& a = d.api;
  int count = 0;
  if (CUresult r = a.cuDeviceGetCount(&count); r != CUDA_SUCCESS)
    return "cuDeviceGetCount failed: " + describe(a, r);
  if (count <= 0) return "the NVIDIA driver found no CUDA device";
  for (int i = 0; i < count; ++i) {
    CUdevice dev = 0;
    if (CUresult r = a.cuDeviceGet(&dev, i); r != CUDA_SUCCESS)
      return "cuDeviceGet(" + std::to_string(i) + ") failed: " + describe(a, r);
    d.devices.push_back(dev);
  }
  return {};
}

}  // namespace

Driver load_driver(const SymbolLookup& lookup, std::string name) {
  Driver d;
  d.name = std::move(name);
  const auto get_proc = reinterpret_cast<GetProcAddressFn>(lookup("cuGetProcAddress_v2"));
  std::string why = initialise(lookup, get_proc, d);
  if (why.empty()) why = resolve_entries(get_proc, d.api);
  if (why.empty()) why = resolve_sim_entries(get_proc, d);
  if (why.empty()) why = list_devices(d);
  if (why.empty()) {
    d.ok = true;
    return d;
  }
  // The simulated driver says why a call failed (a bad CAI_SIM_DEVICES, say).
  const auto error_detail =
      reinterpret_cast<decltype(SimApi::caiSimGetErrorDetail)>(lookup("caiSimGetErrorDetail"));
  const char* detail = nullptr;
  if (error_detail != nullptr && error_detail(&detail) == CUDA_SUCCESS && detail != nullptr)
    why += std::string(": ") + detail;
  d.error = "CUDA backend: " + why + std::string(kUseSim);
  return d;
}

namespace {

Driver load_library(void* lib, std::string name) {
  return load_driver([lib](const char* symbol) { return dlsym(lib, symbol); }, std::move(name));
}

std::shared_ptr<const Driver> failed(std::string name, std::string error) {
  auto d = std::make_shared<Driver>();
  d->name = std::move(name);
  d->error = std::move(error);
  return d;
}

// A regular file (or a link to one): dlopen of a folder fails later with a vaguer message.
bool is_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace

std::shared_ptr<const Driver> libcuda() {
  // A function-local static: loaded once, thread-safe. The library is never closed. The one
  // the process has already (another library loaded it), else the one the library path finds.
  static const std::shared_ptr<const Driver> driver = [] {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (lib == nullptr) lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* why = dlerror();
      std::string error = "CUDA backend: libcuda.so.1 not found (no NVIDIA driver on this machine";
      if (why != nullptr) error += std::string(": ") + why;
      return failed("libcuda.so.1", error + ")" + std::string(kUseSim));
    }
    return std::shared_ptr<const Driver>(
        std::make_shared<Driver>(load_library(lib, "libcuda.so.1")));
  }();
  return driver;
}

std::string sim_driver_path(std::string* tried) {
  std::string places;
  auto found = [&](std::string path) -> std::string {
    if (is_file(path)) return path;
    places += (places.empty() ? "" : ", ") + path;
    return {};
  };
  std::string path;
  if (const char* env = std::getenv("CAI_SIM_DRIVER"); env != nullptr && *env != '\0') {
    path = found(env);
    if (path.empty()) places += " (CAI_SIM_DRIVER)";
  } else {
    // Next to the module that holds the backend: cai/_cai*.so and cai/_sim_driver/ in the wheel.
    Dl_info self{};
    if (dladdr(reinterpret_cast<void*>(&sim_driver_path), &self) != 0 &&
        self.dli_fname != nullptr) {
      std::string dir = self.dli_fname;
      dir = dir.find('/') == std::string::npos ? "." : dir.substr(0, dir.rfind('/'));
      path = found(dir + "/" + kSimDriverFolder + "/libcuda.so.1");
    }
#ifdef CAI_SIM_DRIVER_INSTALL_PATH
    if (path.empty()) path = found(CAI_SIM_DRIVER_INSTALL_PATH);  // cmake --install's place
#endif
  }
  if (tried != nullptr) *tried = places;
  return path;
}

std::shared_ptr<const Driver> sim_driver() {
  static const std::shared_ptr<const Driver> driver = []() -> std::shared_ptr<const Driver> {
    // One simulated driver per process: the libcuda.so.1 already loaded when it is this one.
    void* loaded = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (loaded != nullptr && dlsym(loaded, "caiSimGetErrorDetail") != nullptr)
      return std::make_shared<Driver>(load_library(loaded, "simulator"));
    std::string tried;
    const std::string path = sim_driver_path(&tried);
    if (path.empty()) {
      return failed("simulator",
                    "CUDA backend: cai's simulated driver (libcuda.so.1) not found (tried " +
                        tried + "); set CAI_SIM_DRIVER to its path");
    }
    // By path; later dlopen("libcuda.so.1") calls find it by its SONAME. Beside another
    // libcuda.so.1 (NVIDIA's), privately: that one stays the process's driver for everyone else.
    void* lib = dlopen(path.c_str(), RTLD_NOW | (loaded != nullptr ? RTLD_LOCAL : RTLD_GLOBAL));
    if (lib == nullptr) {
      const char* why = dlerror();
      return failed("simulator", "CUDA backend: cannot load cai's simulated driver " + path +
                                     (why != nullptr ? std::string(": ") + why : std::string()));
    }
    Driver d = load_library(lib, "simulator");
    if (d.ok && !d.simulated) {
      return failed("simulator",
                    "CUDA backend: " + path +
                        " is not cai's simulated driver (it lacks the caiSim* entries)");
    }
    return std::make_shared<Driver>(std::move(d));
  }();
  return driver;
}

}  // namespace cai::device::cu
