// Temporary stub; replaced by the driver-API backend.
#include "device/cuda/cuda_backend.h"

#include "cai/core/error.h"

namespace cai::device::detail {

std::unique_ptr<Backend> make_cuda_backend() {
  throw_error(Errc::device_error, "CUDA backend: not built yet; set CAI_BACKEND=sim");
}
bool probe_cuda() { return false; }

}  // namespace cai::device::detail
