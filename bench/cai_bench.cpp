// Google Benchmark targets for cai's C++ hot paths (docs/benchmarks.md):
//   typestr/*            DType::from_typestr
//   validate_interface/* validate_interface on a filled InterfaceFields (no Python, no dict)
//   import_core/*        validate_interface + SyncState + View: what as_cuda_array does after
//                        reading the dict
//   view/*               View construction, tile slice, NumPy basic indexing, transpose
//   dlpack/*             dlpack_device, fill_dltensor (the borrowing exchange-API path),
//                        to_dlpack_versioned (+ deleter), from_dlpack alone, and both
//   array_ref/*          as_array_ref<T, N> (only when cai/arrays/array_ref.h exists)
//   copy/*               device-to-device copy of --cai_copy_mib MiB (default 64) through
//                        cai::copy on the active backend (the simulator unless CAI_BACKEND says
//                        otherwise), waiting for the stream, for contiguous, transposed and
//                        negative-stride layouts; and std::memcpy of the same bytes. Reported
//                        as bytes_per_second = bytes copied (not read + written) per second.
//
// Extra flags (removed before Google Benchmark sees the rest):
//   --cai_copy_mib=N   copy buffer size in MiB (default 64)
//   --cai_smoke        every benchmark runs with a tiny time budget and a 1 MiB copy buffer
//                      (the bench_smoke ctest), so that the benchmarks cannot rot.

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "cai/arrays/dlpack.h"
#include "cai/arrays/ops.h"
#include "cai/arrays/view.h"
#include "cai/core/dtype.h"
#include "cai/core/interface.h"
#include "cai/core/layout.h"
#include "cai/device/backend.h"
#include "cai/device/simulator.h"
#include "cai/sync/ordering.h"

#if __has_include("cai/arrays/array_ref.h")
#include "cai/arrays/as_array_ref.h"
#define CAI_BENCH_HAS_ARRAY_REF 1
#else
#define CAI_BENCH_HAS_ARRAY_REF 0
#endif

namespace {

using cai::Dims;
using cai::DType;
using cai::IndexItem;
using cai::Layout;
using cai::View;

const cai::sync::StreamRef kLegacy{cai::device::kLegacyDefaultStream, nullptr};

// A fake device address for descriptors that are validated but never dereferenced.
constexpr std::uint64_t kFakePtr = 0x7f0000100000ull;

// ----- typestr ---------------------------------------------------------------------------------

void typestr(benchmark::State& state, std::string_view s) {
  for (auto _ : state) {
    DType t = DType::from_typestr(s);
    benchmark::DoNotOptimize(t);
  }
}

// ----- dict-free descriptor validation ---------------------------------------------------------

enum class Desc { c2d, strided2d, c4d_stream, v2_1d };

cai::InterfaceFields fields_for(Desc which) {
  cai::InterfaceFields f;
  f.has_shape = f.has_typestr = f.has_data = f.has_version = true;
  f.typestr = "<f4";
  f.ptr = kFakePtr;
  f.version = 3;
  switch (which) {
    case Desc::c2d:  // what CuPy/Numba export for a C-contiguous matrix: strides None
      f.shape = Dims{1024, 1024};
      f.strides_state = cai::Presence::none;
      f.stream_state = cai::Presence::none;
      break;
    case Desc::strided2d:  // a transposed matrix: strides given and checked
      f.shape = Dims{1024, 1024};
      f.strides = Dims{4, 4096};
      f.strides_state = cai::Presence::given;
      f.stream_state = cai::Presence::none;
      break;
    case Desc::c4d_stream:  // 4-d with an integer stream (event-ordered import)
      f.shape = Dims{8, 16, 32, 64};
      f.strides_state = cai::Presence::absent;
      f.stream = 1234;
      f.stream_state = cai::Presence::given;
      break;
    case Desc::v2_1d:  // an old producer: version 2, no stream key
      f.version = 2;
      f.typestr = "<i8";
      f.shape = Dims{100000};
      break;
  }
  return f;
}

void validate(benchmark::State& state, Desc which) {
  const cai::InterfaceFields f = fields_for(which);
  for (auto _ : state) {
    cai::Interface itf = cai::validate_interface(f);
    benchmark::DoNotOptimize(itf);
  }
}

// validate_interface plus what the binding does next (python/interface.cpp,
// view_from_validated): a SyncState and a View. The Python-independent part of an import.
void import_core(benchmark::State& state, Desc which) {
  const cai::InterfaceFields f = fields_for(which);
  for (auto _ : state) {
    const cai::Interface itf = cai::validate_interface(f);
    auto sync =
        itf.stream
            ? std::make_shared<cai::sync::SyncState>(cai::sync::StreamRef{*itf.stream, nullptr})
            : std::make_shared<cai::sync::SyncState>();
    View v(itf.ptr, itf.dtype, itf.layout, itf.readonly, std::move(sync), nullptr);
    benchmark::DoNotOptimize(v);
  }
}

// ----- View ------------------------------------------------------------------------------------

View fake_view(std::initializer_list<std::int64_t> shape, const char* ts = "<f4") {
  DType t = DType::from_typestr(ts);
  Layout l = Layout::c_contiguous(Dims(shape).span(), t.itemsize());
  return View(kFakePtr, t, l, false, std::make_shared<cai::sync::SyncState>(kLegacy), nullptr);
}

void view_construct(benchmark::State& state) {
  const DType t = DType::from_typestr("<f4");
  const std::int64_t shape[] = {1024, 1024};
  for (auto _ : state) {
    View v(kFakePtr, t, Layout::c_contiguous(shape, 4), false,
           std::make_shared<cai::sync::SyncState>(kLegacy), nullptr);
    benchmark::DoNotOptimize(v);
  }
}

void view_copy(benchmark::State& state) {
  const View src = fake_view({1024, 1024});
  for (auto _ : state) {
    View v = src;
    benchmark::DoNotOptimize(v);
  }
}

void view_slice(benchmark::State& state) {
  const View src = fake_view({1024, 1024});
  for (auto _ : state) {
    View v = src.slice(0, 16, 512);
    benchmark::DoNotOptimize(v);
  }
}

void view_index(benchmark::State& state) {
  const View src = fake_view({64, 64, 64});
  const IndexItem items[] = {IndexItem::range(1, std::nullopt, 2), IndexItem::at(3),
                             IndexItem::range(std::nullopt, std::nullopt, -1)};
  for (auto _ : state) {
    View v = src.index(items);
    benchmark::DoNotOptimize(v);
  }
}

void view_transpose(benchmark::State& state) {
  const View src = fake_view({1024, 1024});
  for (auto _ : state) {
    View v = src.transpose();
    benchmark::DoNotOptimize(v);
  }
}

// ----- DLPack ------------------------------------------------------------------------------------

// A real (simulator) allocation: export asks the backend where the pointer lives.
View device_view(std::initializer_list<std::int64_t> shape) {
  return View::allocate(DType::from_typestr("<f4"), Dims(shape).span(), false, kLegacy);
}

void dlpack_export(benchmark::State& state) {
  const View v = device_view({64, 64});
  for (auto _ : state) {
    DLManagedTensorVersioned* t = cai::to_dlpack_versioned(v);
    benchmark::DoNotOptimize(t);
    t->deleter(t);
  }
}

// What the C exchange API does end to end for a cai -> cai exchange:
// managed_tensor_from_py_object_no_sync (= to_dlpack_versioned) + from_dlpack + release.
void dlpack_roundtrip(benchmark::State& state) {
  const View v = device_view({64, 64});
  for (auto _ : state) {
    View w = cai::from_dlpack(cai::to_dlpack_versioned(v));
    benchmark::DoNotOptimize(w);
  }
}

// The consumer side only: a foreign tensor prepared outside the timed region.
void dlpack_import(benchmark::State& state) {
  const View v = device_view({64, 64});
  constexpr std::size_t kBatch = 256;
  std::vector<DLManagedTensorVersioned*> tensors(kBatch);
  std::vector<View> views(kBatch);
  for (auto _ : state) {
    state.PauseTiming();
    for (auto& t : tensors) t = cai::to_dlpack_versioned(v);
    views.assign(kBatch, View());
    state.ResumeTiming();
    for (std::size_t i = 0; i < kBatch; ++i) views[i] = cai::from_dlpack(tensors[i]);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * kBatch));
}

// dltensor_from_py_object_no_sync of the C exchange API after its type check: a DLTensor that
// borrows the array's shape and cached element strides (no allocation).
void dlpack_borrow(benchmark::State& state) {
  const View v = device_view({64, 64});
  const Dims strides = v.layout().element_strides();
  for (auto _ : state) {
    DLTensor t{};
    cai::fill_dltensor(v, strides, t);
    benchmark::DoNotOptimize(t);
  }
}

void dlpack_device_query(benchmark::State& state) {
  const View v = device_view({64, 64});
  for (auto _ : state) {
    DLDevice d = cai::dlpack_device(v);
    benchmark::DoNotOptimize(d);
  }
}

// ----- typed views -------------------------------------------------------------------------------

#if CAI_BENCH_HAS_ARRAY_REF
void array_ref_2d(benchmark::State& state) {
  const View v = fake_view({1024, 1024});
  for (auto _ : state) {
    auto r = cai::as_array_ref<float, 2>(v);
    benchmark::DoNotOptimize(r);
  }
}

void array_ref_2d_const_strided(benchmark::State& state) {
  const View v = fake_view({1024, 1024}).transpose();
  for (auto _ : state) {
    auto r = cai::as_array_ref<const float, 2>(v);
    benchmark::DoNotOptimize(r);
  }
}
#endif

// ----- device-to-device copy throughput ----------------------------------------------------------

struct CopyBuffers {
  std::int64_t n = 0;  // n x n float32
  std::size_t bytes = 0;
  View a, b;                         // device (simulator) buffers, C-contiguous
  std::vector<char> host_a, host_b;  // memcpy buffers when the backend is not the simulator
  bool sim = false;
};

std::size_t g_copy_mib = 64;

CopyBuffers& buffers() {
  static CopyBuffers* buffers = [] {
    auto* c = new CopyBuffers;  // leaked: freed memory at exit would race the backend teardown
    c->n = static_cast<std::int64_t>(std::sqrt(static_cast<double>(g_copy_mib << 20) / 4.0));
    c->bytes = static_cast<std::size_t>(c->n * c->n * 4);
    c->a = device_view({c->n, c->n});
    c->b = device_view({c->n, c->n});
    auto& backend = cai::device::backend();
    c->sim = backend.name() == "simulator";
    // Touch every page of both buffers once, outside any timed region.
    backend.memset_async(c->a.ptr(), 1, c->bytes, kLegacy.handle);
    backend.memset_async(c->b.ptr(), 2, c->bytes, kLegacy.handle);
    backend.stream_synchronize(kLegacy.handle);
    if (!c->sim) {
      c->host_a.assign(c->bytes, 1);
      c->host_b.assign(c->bytes, 2);
    }
    return c;
  }();
  return *buffers;
}

enum class CopyKind { contiguous, transposed, reversed_rows, reversed_cols };

View source_of(const CopyBuffers& c, CopyKind kind) {
  const IndexItem rev = IndexItem::range(std::nullopt, std::nullopt, -1);
  switch (kind) {
    case CopyKind::contiguous:
      return c.b;
    case CopyKind::transposed:
      return c.b.transpose();
    case CopyKind::reversed_rows: {
      const IndexItem items[] = {rev};
      return c.b.index(items);  // strides (-4n, 4)
    }
    case CopyKind::reversed_cols: {
      const IndexItem items[] = {IndexItem::all(), rev};
      return c.b.index(items);  // strides (4n, -4)
    }
  }
  return c.b;
}

void device_copy(benchmark::State& state, CopyKind kind) {
  CopyBuffers& c = buffers();
  const View src = source_of(c, kind);
  auto& backend = cai::device::backend();
  for (auto _ : state) {
    cai::copy(c.a, src, kLegacy);
    backend.stream_synchronize(kLegacy.handle);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>(c.bytes));
  state.SetLabel(std::string(backend.name()) + ", " + std::to_string(c.n) + "x" +
                 std::to_string(c.n) + " float32");
}

void memcpy_baseline(benchmark::State& state) {
  CopyBuffers& c = buffers();
  // The simulator's memory is host memory behind a private alias (its device addresses are
  // not readable by the host): copy between the very same two buffers there.
  auto& backend = cai::device::backend();
  void* dst = c.sim ? cai::device::sim::host_address(backend, c.a.ptr()) : c.host_a.data();
  const void* src = c.sim ? cai::device::sim::host_address(backend, c.b.ptr()) : c.host_b.data();
  for (auto _ : state) {
    std::memcpy(dst, src, c.bytes);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>(c.bytes));
  state.SetLabel("same bytes, host thread");
}

// Per-operation cost of a tiny copy: enqueue, the worker thread, the wait.
void device_copy_latency(benchmark::State& state) {
  CopyBuffers& c = buffers();
  const std::int64_t k = std::min<std::int64_t>(c.n, 1024);  // 4 KiB
  const View dst = c.a.slice(0, 0, 1).slice(1, 0, k);
  const View src = c.b.slice(0, 0, 1).slice(1, 0, k);
  auto& backend = cai::device::backend();
  for (auto _ : state) {
    cai::copy(dst, src, kLegacy);
    backend.stream_synchronize(kLegacy.handle);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * k * 4);
}

// ----- registration ------------------------------------------------------------------------------

void register_all(bool smoke) {
  std::vector<benchmark::internal::Benchmark*> all;
  auto add = [&](benchmark::internal::Benchmark* b) {
    all.push_back(b);
    return b;
  };

  for (const char* s : {"<f4", "|b1", "<c16", ">i8", "<M8[ns]", "|V16"})
    add(benchmark::RegisterBenchmark((std::string("typestr/") + s).c_str(), typestr,
                                     std::string_view(s)));

  const std::pair<const char*, Desc> descs[] = {{"c2d", Desc::c2d},
                                                {"strided2d", Desc::strided2d},
                                                {"c4d_stream", Desc::c4d_stream},
                                                {"v2_1d", Desc::v2_1d}};
  for (const auto& [name, d] : descs)
    add(benchmark::RegisterBenchmark((std::string("validate_interface/") + name).c_str(), validate,
                                     d));
  for (const auto& [name, d] : descs)
    add(benchmark::RegisterBenchmark((std::string("import_core/") + name).c_str(), import_core, d));

  add(benchmark::RegisterBenchmark("view/construct", view_construct));
  add(benchmark::RegisterBenchmark("view/copy", view_copy));
  add(benchmark::RegisterBenchmark("view/slice", view_slice));
  add(benchmark::RegisterBenchmark("view/index3", view_index));
  add(benchmark::RegisterBenchmark("view/transpose", view_transpose));

  add(benchmark::RegisterBenchmark("dlpack/device_query", dlpack_device_query));
  add(benchmark::RegisterBenchmark("dlpack/borrow", dlpack_borrow));
  add(benchmark::RegisterBenchmark("dlpack/export", dlpack_export));
  add(benchmark::RegisterBenchmark("dlpack/import", dlpack_import));
  add(benchmark::RegisterBenchmark("dlpack/export_import", dlpack_roundtrip));

#if CAI_BENCH_HAS_ARRAY_REF
  add(benchmark::RegisterBenchmark("array_ref/float_2d", array_ref_2d));
  add(benchmark::RegisterBenchmark("array_ref/const_float_2d_transposed",
                                   array_ref_2d_const_strided));
#endif

  const std::pair<const char*, CopyKind> copies[] = {{"contiguous", CopyKind::contiguous},
                                                     {"transposed", CopyKind::transposed},
                                                     {"reversed_rows", CopyKind::reversed_rows},
                                                     {"reversed_cols", CopyKind::reversed_cols}};
  add(benchmark::RegisterBenchmark("copy/memcpy", memcpy_baseline))->UseRealTime();
  for (const auto& [name, k] : copies)
    add(benchmark::RegisterBenchmark((std::string("copy/") + name).c_str(), device_copy, k))
        ->UseRealTime();
  add(benchmark::RegisterBenchmark("copy/latency_4KiB", device_copy_latency))->UseRealTime();

  if (smoke) {
    for (auto* b : all) b->Iterations(2);
  }
}

}  // namespace

int main(int argc, char** argv) {
  bool smoke = false;
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--cai_smoke") {
      smoke = true;
    } else if (a.rfind("--cai_copy_mib=", 0) == 0) {
      g_copy_mib = std::strtoull(argv[i] + 15, nullptr, 10);
      if (g_copy_mib == 0) g_copy_mib = 1;
    } else {
      args.push_back(argv[i]);
    }
  }
  if (smoke) g_copy_mib = 1;
  // The simulator unless the caller chose a backend: these are simulator benchmarks, and the
  // same numbers must come out on a machine with a GPU.
  setenv("CAI_BACKEND", "sim", /*overwrite=*/0);

  register_all(smoke);
  int n = static_cast<int>(args.size());
  args.push_back(nullptr);
  benchmark::Initialize(&n, args.data());
  if (benchmark::ReportUnrecognizedArguments(n, args.data())) return 1;
  benchmark::AddCustomContext("cai_backend", std::string(cai::device::backend().name()));
  benchmark::AddCustomContext("cai_copy_mib", std::to_string(g_copy_mib));
#if CAI_BENCH_HAS_ARRAY_REF
  benchmark::AddCustomContext("cai_array_ref", "yes");
#else
  benchmark::AddCustomContext("cai_array_ref", "not built (cai/arrays/array_ref.h missing)");
#endif
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
