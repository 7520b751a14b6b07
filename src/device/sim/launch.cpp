// The simulated driver's modules and launches: cai's kernels, found by entry name and run on
// the CPU grid runner over the bodies the GPU runs, each launch checked by the race detector
// with the ranges its operands read and write; host functions and simulated host tasks.

#include <algorithm>
#include <cctype>
#include <cstring>
#include <stdexcept>
#include <string>

#include "cai/core/error.h"
#include "cai/core/layout.h"
#include "kernels/grid.h"
#include "sim/sim_driver.h"
#include "sim/sim_internal.h"

namespace cai::device::sim {

std::vector<AccessRun> declared_runs(const CaiSimAccess* accesses, std::size_t count);

namespace {

// The entry names an image declares: ".entry <name>" in PTX, and in the manifest a build
// without nvcc embeds.
std::set<std::string, std::less<>> entries_of(const char* image) {
  std::set<std::string, std::less<>> out;
  const std::string_view text(image);
  constexpr std::string_view tag = ".entry";
  for (std::size_t at = text.find(tag); at != std::string_view::npos; at = text.find(tag, at)) {
    at += tag.size();
    std::size_t b = at;
    while (b < text.size() && std::isspace(static_cast<unsigned char>(text[b]))) ++b;
    std::size_t e = b;
    while (e < text.size() && (std::isalnum(static_cast<unsigned char>(text[e])) || text[e] == '_'))
      ++e;
    if (e > b && b > at) out.emplace(text.substr(b, e - b));
  }
  return out;
}

int kernel_of(std::string_view name) {
  for (int i = 0; i < kernels::kernel_count; ++i)
    if (kernels::kernel_names[i] == name) return i;
  return -1;
}

// The byte range operand k of a launch touches, as strided runs.
struct OperandAccess {
  std::uint64_t lo = 0, hi = 0;  // empty when lo == hi
  std::vector<AccessRun> runs;
};

OperandAccess operand_access(const kernels::EntryInfo& e, const kernels::KernelParams& p, int k) {
  OperandAccess out;
  if (p.total < 0 || p.ndim < 0 || p.ndim > CAI_CUDA_MAX_RANK || p.words < 1)
    throw_error(Errc::value_error, "kernel parameters out of range (total, ndim or words)");
  const bool write = k == 0;
  const std::uint64_t ptr = p.ptr[k];
  const auto esize = static_cast<std::int64_t>(e.data ? e.width : element_size(e.type));
  if (p.total == 0) return out;
  if (e.variant == kernels::Variant::contiguous) {
    const auto bytes = static_cast<std::uint64_t>(p.total) * static_cast<std::uint64_t>(esize);
    out.lo = ptr;
    out.hi = ptr + bytes;
    if (out.hi < out.lo) throw_error(Errc::overflow, "kernel operand wraps around");
    out.runs.push_back({out.lo, out.hi, write});
    return out;
  }
  if (e.variant == kernels::Variant::tile && !e.data) return out;  // empty entries
  const int ndim = e.variant == kernels::Variant::tile ? 2 : p.ndim;
  const std::int64_t itemsize =
      e.variant == kernels::Variant::tile ? esize : (e.data ? esize * p.words : esize);
  const Layout layout(Dims(std::span(p.shape, static_cast<std::size_t>(ndim))),
                      Dims(std::span(p.strides[k], static_cast<std::size_t>(ndim))), itemsize);
  if (layout.nbytes() == 0) return out;
  const std::optional<ByteRange> r = layout.byte_range(ptr);
  if (!r) throw_error(Errc::overflow, "kernel operand wraps around");
  out.lo = r->lo;
  out.hi = r->hi;
  append_runs(out.runs, ptr, layout.shape(), layout.strides(), layout.itemsize(), write);
  return out;
}

}  // namespace

CUresult SimDriver::cuModuleLoadData(CUmodule* module, const void* image) {
  if (module == nullptr || image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Module m;
  m.entries = entries_of(static_cast<const char*>(image));
  if (m.entries.empty())
    return fail(CUDA_ERROR_INVALID_IMAGE, "the image declares no .entry (not PTX)");
  std::lock_guard lk(mu_);
  int device = 0;
  if (CUresult r = need_context_locked(device)) return r;
  const std::uint64_t h = kModuleBase + ++next_handle_;
  modules_[h] = std::move(m);
  *module = reinterpret_cast<CUmodule>(static_cast<std::uintptr_t>(h));
  return CUDA_SUCCESS;
}

CUresult SimDriver::cuModuleUnload(CUmodule module) {
  std::lock_guard lk(mu_);
  const std::uint64_t h = handle_value(module);
  if (modules_.erase(h) == 0) return fail(CUDA_ERROR_INVALID_HANDLE, "not a module");
  std::erase_if(functions_, [h](const auto& f) { return f.second.module == h; });
  return CUDA_SUCCESS;
}

CUresult SimDriver::cuModuleGetFunction(CUfunction* function, CUmodule module, const char* name) {
  if (function == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lk(mu_);
  auto m = modules_.find(handle_value(module));
  if (m == modules_.end()) return fail(CUDA_ERROR_INVALID_HANDLE, "not a module");
  if (!m->second.entries.contains(std::string_view(name)))
    return fail(CUDA_ERROR_NOT_FOUND, std::string("the module has no entry ") + name);
  const int kernel = kernel_of(name);
  if (kernel < 0)
    return fail(CUDA_ERROR_NOT_FOUND,
                std::string("entry ") + name + ": the simulator runs cai's kernels only");
  const std::uint64_t h = kFunctionBase + ++next_handle_;
  functions_[h] = Function{m->first, kernel};
  *function = reinterpret_cast<CUfunction>(static_cast<std::uintptr_t>(h));
  return CUDA_SUCCESS;
}

CUresult SimDriver::cuLaunchKernel(CUfunction function, unsigned int grid_x, unsigned int grid_y,
                                   unsigned int grid_z, unsigned int block_x, unsigned int block_y,
                                   unsigned int block_z, unsigned int shared_bytes, CUstream h,
                                   void** params, void** extra) {
  if (params == nullptr || params[0] == nullptr || extra != nullptr)
    return fail(CUDA_ERROR_INVALID_VALUE,
                "cuLaunchKernel: kernelParams with one argument, and "
                "no extra, expected");
  if (grid_x == 0 || grid_x > 0x7fffffffu || grid_y == 0 || grid_z == 0 || block_x == 0 ||
      block_y == 0 || block_z == 0 || std::uint64_t{block_x} * block_y * block_z > 1024)
    return fail(CUDA_ERROR_INVALID_VALUE,
                "cuLaunchKernel: grid or block out of the driver's "
                "limits");
  if (grid_y != 1 || grid_z != 1 || block_z != 1 || shared_bytes > 48 * 1024)
    return fail(CUDA_ERROR_NOT_SUPPORTED,
                "cuLaunchKernel: the simulator runs 1-D grids of "
                "2-D blocks, as cai's kernels use");
  const kernels::KernelParams args = *static_cast<const kernels::KernelParams*>(params[0]);
  std::lock_guard lk(mu_);
  auto f = functions_.find(handle_value(function));
  if (f == functions_.end()) return fail(CUDA_ERROR_INVALID_HANDLE, "not a function");
  std::shared_ptr<Stream> s;
  if (CUresult r = resolve_locked(h, s)) return r;
  const int index = f->second.kernel;
  const kernels::EntryInfo e = kernels::entry_info(index);
  // Each operand must lie in memory the stream's device reaches (what a GPU would fault on),
  // reached here through its CPU address.
  kernels::KernelParams run = args;
  std::vector<AccessRun> runs;
  for (int k = 0; k < e.operands; ++k) {
    OperandAccess a = operand_access(e, args, k);
    if (a.lo == a.hi) continue;
    std::int64_t delta = 0, to_host = 0;
    const bool write =
        std::any_of(a.runs.begin(), a.runs.end(), [](const AccessRun& r) { return r.write; });
    if (CUresult r = reach_locked(a.lo, a.hi, s->device, false, write, CUDA_ERROR_ILLEGAL_ADDRESS,
                                  kernels::kernel_names[index].data(), delta, "operand",
                                  static_cast<std::size_t>(k), &to_host))
      return r;
    run.ptr[k] = static_cast<std::uint64_t>(static_cast<std::int64_t>(args.ptr[k]) + delta);
    for (AccessRun r : a.runs) {
      r.lo = static_cast<std::uint64_t>(static_cast<std::int64_t>(r.lo) + to_host);
      r.hi = static_cast<std::uint64_t>(static_cast<std::int64_t>(r.hi) + to_host);
      runs.push_back(r);
    }
  }
  runs = normalize_runs(std::move(runs));
  Op op;
  op.name = std::string(kernels::kernel_names[index]);
  op.fn = [index, run, grid_x, block_x, block_y] {
    kernels::run_grid(index, run, grid_x, block_x, block_y);
  };
  enqueue_locked(s, std::move(op), runs);
  return CUDA_SUCCESS;
}

CUresult SimDriver::caiSimLaunchHostTask(CUstream h, const CaiSimAccess* accesses,
                                         std::size_t count, CaiSimTaskFn fn,
                                         void (*release)(void* user), void* user,
                                         const char* name) {
  if (fn == nullptr || (count > 0 && accesses == nullptr))
    return fail(CUDA_ERROR_INVALID_VALUE, "caiSimLaunchHostTask: no task or no accesses");
  const std::vector<AccessRun> runs = declared_runs(accesses, count);
  std::lock_guard lk(mu_);
  std::shared_ptr<Stream> s;
  if (CUresult r = resolve_locked(h, s)) return r;
  // The task reaches each access at its CPU address, as a kernel reaches it on the GPU.
  std::vector<std::uint64_t> host(count);
  for (std::size_t i = 0; i < count; ++i) {
    const std::vector<AccessRun> mine = declared_runs(&accesses[i], 1);
    std::int64_t delta = 0;
    if (!mine.empty()) {
      std::uint64_t lo = mine.front().lo, hi = mine.back().hi;
      if (CUresult r =
              reach_locked(lo, hi, -1, true, accesses[i].write != 0, CUDA_ERROR_ILLEGAL_ADDRESS,
                           name ? name : "task", delta, "access", i))
        return r;
    }
    host[i] = static_cast<std::uint64_t>(static_cast<std::int64_t>(accesses[i].ptr) + delta);
  }
  Op op;
  op.name = name ? name : "task";
  op.fn = [fn, release, user, host = std::move(host)] {
    std::string error;
    if (const char* e = fn(user, host.data())) error = e;
    if (release) release(user);
    if (!error.empty()) throw std::runtime_error(error);
  };
  enqueue_locked(s, std::move(op), runs);
  return CUDA_SUCCESS;
}

}  // namespace cai::device::sim
