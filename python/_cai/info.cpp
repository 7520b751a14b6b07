// cai._cai._cuda_info() and _devices(): the facts behind `python -m cai info`.

#include <nanobind/stl/string.h>

#include "bindings.h"
#include "cai/device/backend.h"

namespace cai::python {

namespace nb = nanobind;

void bind_info(nb::module_& m) {
  m.def(
      "_cuda_info",
      [] {
        const device::CudaInfo info = device::cuda_info();
        nb::dict d;
        d["api_version"] = info.api_version;
        d["kernels"] = info.kernels;
        d["driver_loaded"] = info.driver_loaded;
        d["driver_version"] = info.driver_version;
        d["devices"] = info.devices;
        d["error"] = info.error;
        return d;
      },
      nb::sig("def _cuda_info() -> dict[str, typing.Any]"),
      "The CUDA headers cai was built with, its kernels, and the driver found at run time.");
  m.def(
      "_devices",
      [] {
        device::Backend& b = device::backend();
        nb::list out;
        for (int i = 0; i < b.device_count(); ++i) {
          const device::DeviceProperties p = b.properties(i);
          nb::dict d;
          d["ordinal"] = p.ordinal;
          d["name"] = p.name;
          d["compute_capability"] = nb::make_tuple(p.compute_major, p.compute_minor);
          d["total_memory"] = p.total_memory;
          d["multiprocessors"] = p.multiprocessors;
          out.append(d);
        }
        return out;
      },
      nb::sig("def _devices() -> list[dict[str, typing.Any]]"),
      "The devices of the chosen backend (choosing it if not chosen yet).");
}

}  // namespace cai::python
