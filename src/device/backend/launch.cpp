// The backend's kernels: the module of each context (the embedded PTX, or without nvcc a
// manifest of the entry names that only the simulated driver runs) and one launch as planned.

#include "backend/launch.h"

#include <string>

#include "cai/core/error.h"
#include "cai/core/format.h"

#ifndef CAI_HAVE_CUDA_KERNELS
#define CAI_HAVE_CUDA_KERNELS 0
#endif
#ifndef CAI_CUDA_PTX_ISA
#define CAI_CUDA_PTX_ISA ""
#endif

namespace cai::device::detail {

using namespace cu;

std::span<const std::string_view> cuda_kernel_names() {
  return kernels::kernel_names;
}

bool cuda_kernels_built() {
  return CAI_HAVE_CUDA_KERNELS != 0;
}

#if !CAI_HAVE_CUDA_KERNELS
std::string_view cuda_kernels_ptx() {
  return {};
}
#endif

namespace {

using cai::detail::cuda_version_text;

// What the backend loads: the PTX, or a manifest that declares the same entries.
const std::string& kernel_image() {
  static const std::string image = [] {
    const std::string_view ptx = cuda_kernels_ptx();
    if (!ptx.empty()) return std::string(ptx);
    std::string m = "// cai was built without nvcc: no PTX, only the names of its kernels\n";
    for (std::string_view n : kernels::kernel_names) m.append(".entry ").append(n).append("\n");
    return m;
  }();
  return image;
}

}  // namespace

const Module& BackendState::module_for(CUcontext ctx) {
  // The last answer of this thread: every launch asks, almost always for the same context.
  struct Last {
    std::uint64_t serial = 0;
    CUcontext ctx = nullptr;
    const Module* module = nullptr;
  };
  thread_local Last last;
  if (last.serial == serial_ && last.ctx == ctx) return *last.module;
  std::lock_guard lock(module_mu_);
  auto it = modules_.find(ctx);
  if (it != modules_.end()) {
    last = {serial_, ctx, it->second.get()};
    return *it->second;
  }
  CUmodule mod = nullptr;
  // The driver JIT-compiles the PTX for this context's GPU (and caches the result on disk).
  const CUresult r = api.cuModuleLoadData(&mod, kernel_image().c_str());
  if (r != CUDA_SUCCESS && !cuda_kernels_built()) {
    throw_error(Errc::not_implemented,
                "CUDA backend: cai was built without nvcc, so its kernels (fill, add, strided "
                "copies) exist only for the simulated driver, and this driver refused their "
                "manifest (" +
                    describe(r) + "); rebuild cai with the CUDA toolkit, or set CAI_BACKEND=sim");
  }
  if (r == CUDA_ERROR_UNSUPPORTED_PTX_VERSION) {
    fail(r, "cuModuleLoadData",
         std::string("; the kernels' PTX declares ISA ") + CAI_CUDA_PTX_ISA +
             ", which this driver (CUDA " + cuda_version_text(driver->version) +
             ") cannot compile; update the driver or build cai with CAI_CUDA_PTX_ISA set lower");
  }
  check(r, "cuModuleLoadData");
  auto m = std::make_unique<Module>();
  m->fn.resize(std::size(kernels::kernel_names));
  for (std::size_t i = 0; i < m->fn.size(); ++i) {
    // The names are literals, so data() is NUL-terminated.
    CAI_DRIVER(*this, cuModuleGetFunction, &m->fn[i], mod, kernels::kernel_names[i].data());
  }
  const Module& loaded = *modules_.emplace(ctx, std::move(m)).first->second;
  last = {serial_, ctx, &loaded};
  return loaded;
}

void launch(const StreamScope& on, const kernels::LaunchPlan& plan) {
  const Module& m = on.st.module_for(on.context);
  // The driver copies the argument; it does not write it.
  void* args[] = {const_cast<kernels::KernelParams*>(&plan.params)};
  CAI_DRIVER(on.st, cuLaunchKernel, m.fn[static_cast<std::size_t>(plan.index)], plan.grid, 1, 1,
             plan.block_x, plan.block_y, 1, 0, on.stream, args, nullptr);
}

}  // namespace cai::device::detail
