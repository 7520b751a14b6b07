#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cxxabi.h>

#include <mutex>
#include <string>
#include <vector>

#include "bindings.h"
#include "cai/arrays/ipc.h"
#include "cai/core/interface.h"
#include "cai/version.h"
#include "config.h"
#include "gil.h"

#define CAI_STR2(x) #x
#define CAI_STR(x) CAI_STR2(x)

namespace cai::python {

namespace {
// Lines from the sync layer's trace hook; it may be called without the GIL, from any thread.
std::mutex g_trace_mutex;
std::vector<std::string>* g_trace_lines = new std::vector<std::string>;  // leaked on purpose

void collect_trace(const std::string& line) {
  std::lock_guard lock(g_trace_mutex);
  g_trace_lines->push_back(line);
}
}  // namespace

namespace {
unsigned long g_main_thread = 0;  // Python's main thread, read at import
}  // namespace

CAI_CATCHES_FORCED_UNWIND NoGil::~NoGil() {
  // Only other threads are stopped by the interpreter at exit; the main thread (running
  // finalizers, say) takes the GIL back as usual.
  if (py_finalizing() && PyThread_get_thread_ident() != g_main_thread) park_thread();
  try {
    PyEval_RestoreThread(state_);
  } catch (abi::__forced_unwind&) {
    // Finalization began after the check: Python ends this thread with pthread_exit, whose
    // unwinding would reach a noexcept frame and abort. The process is exiting: park here
    // (never leaving the handler, so the unwind is not swallowed).
    park_thread();
  }
}

Config& config() {
  static Config c;
  return c;
}

}  // namespace cai::python

NB_MODULE(_cai, m) {
  using namespace cai::python;
  m.doc() = "cai: CUDA Array Interface and DLPack exchange (compiled core)";
  g_main_thread = nb::cast<unsigned long>(
      nb::module_::import_("threading").attr("main_thread")().attr("ident"));
  m.attr("_MAX_MASK_DEPTH") = cai::max_mask_depth;  // the Dask headers' limit (python/cai/_dask.py)
  m.attr("__version__") =
      CAI_STR(CAI_VERSION_MAJOR) "." CAI_STR(CAI_VERSION_MINOR) "." CAI_STR(CAI_VERSION_PATCH);
  bind_errors(m);
  bind_core(m);
  bind_device(m);
  bind_array(m);
  bind_indexing(m);
  bind_shape_ops(m);
  bind_interface(m);
  bind_import(m);
  bind_ops(m);
  bind_dlpack(m);
  bind_capi(m);
  bind_info(m);
  bind_devices(m);
  bind_ipc(m);
  bind_allocator(m);
  m.def(
      "_set_exiting",
      [] {
        cai::device::set_exiting();
        cai::ipc_release_at_exit();  // Python owners go while the interpreter runs
      },
      "Called at exit (atexit): leak device memory instead of waiting for streams to free it, "
      "and release the Python owners of memory shared with other processes.");
  m.def(
      "_set_current_device", [](int id) { cai::device::backend().set_current_device(id); },
      nb::arg("id"),
      "Makes device `id` (checked by the caller) current for the calling thread until changed: "
      "cai.select_device.");
  m.def(
      "_write_epoch", [] { return g_write_epoch.load(std::memory_order_relaxed); },
      "How many writes to device memory cai made or allowed so far (Dask's tokens).");
  m.def("_get_import_sync", [] { return config().import_sync; });
  m.def("_set_import_sync", [](bool v) { config().import_sync = v; });
  m.def("_get_export_stream", [] { return config().export_stream; });
  m.def("_set_export_stream", [](bool v) { config().export_stream = v; });
  m.def(
      "_set_trace", [](bool on) { cai::sync::set_trace(on ? &collect_trace : nullptr); },
      "Collects a line for every stream wait cai enqueues (see _take_trace).");
  m.def("_take_trace", [] {
    std::lock_guard lock(g_trace_mutex);
    std::vector<std::string> out;
    out.swap(*g_trace_lines);
    return out;
  });
}
