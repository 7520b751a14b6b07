// cai._cai._cuda_info(), _build_info() and _devices(): the facts behind `python -m cai info`.

#include <nanobind/stl/string.h>

#include "bindings.h"
#include "cai/device/backend.h"

namespace cai::python {

namespace nb = nanobind;
using namespace nb::literals;

void bind_info(nb::module_& m) {
  m.def(
      "_cuda_info",
      [] {
        const device::CudaInfo info = device::cuda_info();
        return dict_of({"api_version"_a = info.api_version, "kernels"_a = info.kernels,
                        "driver_loaded"_a = info.driver_loaded,
                        "driver_version"_a = info.driver_version, "devices"_a = info.devices,
                        "error"_a = info.error});
      },
      nb::sig("def _cuda_info() -> dict[str, typing.Any]"),
      "The CUDA headers cai was built with, its kernels, and the driver found at run time.");
  m.def(
      "_build_info",
      [] {
#if defined(__clang__)
        const char* compiler = "clang " __clang_version__;
#elif defined(__GNUC__)
        const char* compiler = "GCC " __VERSION__;
#else
        const char* compiler = "unknown";
#endif
        return dict_of({"compiler"_a = compiler, "lto"_a = CAI_BUILD_LTO != 0,
                        "profile_guided"_a = CAI_BUILD_PROFILE_GUIDED != 0});
      },
      nb::sig("def _build_info() -> dict[str, typing.Any]"),
      "How this extension was compiled: the compiler, link-time and profile-guided "
      "optimization (cmake/cai_pgo.cmake).");
  m.def(
      "_devices",
      [] {
        device::Backend& b = device::backend();
        nb::list out;
        for (int i = 0; i < b.device_count(); ++i) {
          const device::DeviceProperties p = b.properties(i);
          out.append(dict_of(
              {"ordinal"_a = p.ordinal, "name"_a = p.name,
               "compute_capability"_a = nb::make_tuple(p.compute_major, p.compute_minor),
               "total_memory"_a = p.total_memory, "multiprocessors"_a = p.multiprocessors}));
        }
        return out;
      },
      nb::sig("def _devices() -> list[dict[str, typing.Any]]"),
      "The devices of the chosen backend (choosing it if not chosen yet).");
}

}  // namespace cai::python
