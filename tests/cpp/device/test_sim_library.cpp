// The simulated driver as a shared library (src/device/sim/export): its name and exports are
// libcuda.so.1's, cuGetProcAddress answers by name, version and flags as the driver documents,
// the per-thread variants read a NULL stream as the calling thread's default stream, and every
// entry reaches the one process-wide simulated driver.

#include <dlfcn.h>
#include <elf.h>
#include <gtest/gtest.h>
#include <link.h>

#include <cstdio>
#include <cstring>
#include <set>
#include <string>
#include <thread>

#include "driver/api.h"
#include "sim/entry_points.h"

#ifndef CAI_TEST_SIM_DRIVER
#error "CAI_TEST_SIM_DRIVER: the path of the built libcuda.so.1 (tests/cpp/CMakeLists.txt)"
#endif

namespace cai::device {
namespace {

using namespace cu;

void* library() {
  static void* const handle = [] {
    void* h = dlopen(CAI_TEST_SIM_DRIVER, RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) ADD_FAILURE() << dlerror();
    return h;
  }();
  return handle;
}

template <class F>
F entry(const char* symbol) {
  return reinterpret_cast<F>(dlsym(library(), symbol));
}

// What cuGetProcAddress_v2 answers: its result, the status, the function.
struct Answer {
  CUresult result;
  CUdriverProcAddressQueryResult status;
  void* fn;
};
Answer lookup(const char* name, int version, cuuint64_t flags = CU_GET_PROC_ADDRESS_DEFAULT) {
  const auto get_proc = entry<GetProcAddressFn>("cuGetProcAddress_v2");
  Answer a{CUDA_ERROR_UNKNOWN, static_cast<CUdriverProcAddressQueryResult>(-1), &a};
  a.result = get_proc(name, &a.fn, version, flags, &a.status);
  return a;
}

std::string run(const std::string& command) {
  std::string out;
  if (FILE* p = ::popen(command.c_str(), "r")) {
    char buf[4096];
    while (std::fgets(buf, sizeof buf, p) != nullptr) out += buf;
    ::pclose(p);
  }
  return out;
}

TEST(sim_library, named_libcuda_so_1) {
  ASSERT_NE(library(), nullptr);
  link_map* map = nullptr;
  ASSERT_EQ(dlinfo(library(), RTLD_DI_LINKMAP, &map), 0);
  const char* strtab = nullptr;
  const char* soname = nullptr;
  for (const ElfW(Dyn)* d = map->l_ld; d->d_tag != DT_NULL; ++d)
    if (d->d_tag == DT_STRTAB) strtab = reinterpret_cast<const char*>(d->d_un.d_ptr);
  for (const ElfW(Dyn)* d = map->l_ld; d->d_tag != DT_NULL; ++d)
    if (d->d_tag == DT_SONAME && strtab != nullptr) soname = strtab + d->d_un.d_val;
  ASSERT_NE(soname, nullptr);
  EXPECT_STREQ(soname, "libcuda.so.1");
  // A process that has it loaded finds it by that name, as clients look for the driver.
  void* again = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  EXPECT_EQ(again, library());
  if (again != nullptr) dlclose(again);
}

TEST(sim_library, exports_the_table_and_nothing_else) {
  const std::string out = run("nm -D --defined-only '" CAI_TEST_SIM_DRIVER "' 2>&1");
  std::set<std::string> exported;
  char name[512];
  for (std::size_t pos = 0; pos < out.size();) {
    const std::size_t end = out.find('\n', pos);
    const std::string line = out.substr(pos, end - pos);
    pos = end == std::string::npos ? out.size() : end + 1;
    char address[64], type[8];
    if (std::sscanf(line.c_str(), "%63s %7s %511s", address, type, name) == 3)
      exported.insert(name);
  }
  ASSERT_FALSE(exported.empty()) << "nm found nothing: " << out;
  for (const std::string& s : exported)
    EXPECT_TRUE(s.starts_with("cu") || s.starts_with("caiSim")) << s << " is exported";
  std::set<std::string> table;
  for (const sim::AbiRow& r : sim::abi_rows) table.insert(r.symbol);
  EXPECT_EQ(exported, table);
  // An ABI it does not implement is not exported under the driver's name for it.
  EXPECT_EQ(dlsym(library(), "cuMemAlloc"), nullptr);  // the 32-bit CUDA 2.0 ABI
  EXPECT_NE(dlsym(library(), "cuMemAlloc_v2"), nullptr);
}

TEST(sim_library, get_proc_address_answers_by_version) {
  Answer a = lookup("cuMemAlloc", 3020);
  EXPECT_EQ(a.result, CUDA_SUCCESS);
  EXPECT_EQ(a.status, CU_GET_PROC_ADDRESS_SUCCESS);
  EXPECT_EQ(a.fn, dlsym(library(), "cuMemAlloc_v2"));
  EXPECT_EQ(lookup("cuMemAlloc", 12000).fn, dlsym(library(), "cuMemAlloc_v2"));

  a = lookup("cuMemAlloc", 2000);
  EXPECT_EQ(a.result, CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(a.status, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  EXPECT_EQ(a.fn, nullptr);

  a = lookup("cuNoSuchEntry", 12000);
  EXPECT_EQ(a.result, CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(a.status, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  EXPECT_EQ(a.fn, nullptr);
  // A versioned symbol name is not an entry name.
  EXPECT_EQ(lookup("cuMemAlloc_v2", 12000).status, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);

  // Entries whose signature changed answer per version.
  EXPECT_EQ(lookup("cuCtxGetDevice", 12090).fn, dlsym(library(), "cuCtxGetDevice"));
  EXPECT_EQ(lookup("cuCtxGetDevice", 13000).fn, dlsym(library(), "cuCtxGetDevice_v2"));
  EXPECT_EQ(lookup("cuCtxSynchronize", 13000).fn, dlsym(library(), "cuCtxSynchronize_v2"));
  EXPECT_EQ(lookup("cuStreamGetCtx", 12040).fn, dlsym(library(), "cuStreamGetCtx"));
  EXPECT_EQ(lookup("cuStreamGetCtx", 12050).fn, dlsym(library(), "cuStreamGetCtx_v2"));
  EXPECT_EQ(lookup("cuEventElapsedTime", 12080).fn, dlsym(library(), "cuEventElapsedTime_v2"));
  EXPECT_EQ(lookup("cuGetProcAddress", 12000).fn, dlsym(library(), "cuGetProcAddress_v2"));
  EXPECT_EQ(lookup("cuGetProcAddress", 11030).fn, dlsym(library(), "cuGetProcAddress"));

  // A version newer than the driver's is refused, as are unknown flags and a null name.
  EXPECT_EQ(lookup("cuMemAlloc", 13010).result, CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(lookup("cuMemAlloc", 12000, 4).result, CUDA_ERROR_INVALID_VALUE);
  void* fn = nullptr;
  EXPECT_EQ(entry<GetProcAddressFn>("cuGetProcAddress_v2")(nullptr, &fn, 12000, 0, nullptr),
            CUDA_ERROR_INVALID_VALUE);
}

TEST(sim_library, per_thread_flag_gives_the_per_thread_variants) {
  constexpr auto per_thread = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  EXPECT_EQ(lookup("cuMemcpyAsync", 12000, per_thread).fn, dlsym(library(), "cuMemcpyAsync_ptsz"));
  EXPECT_EQ(lookup("cuMemcpyAsync", 12000, CU_GET_PROC_ADDRESS_LEGACY_STREAM).fn,
            dlsym(library(), "cuMemcpyAsync"));
  EXPECT_EQ(lookup("cuStreamGetCtx", 12050, per_thread).fn,
            dlsym(library(), "cuStreamGetCtx_v2_ptsz"));
  // Without a per-thread variant, the legacy one (as documented).
  EXPECT_EQ(lookup("cuMemAlloc", 12000, per_thread).fn, dlsym(library(), "cuMemAlloc_v2"));
  // A per-thread variant newer than the version asked for: the legacy one.
  EXPECT_EQ(lookup("cuMemcpyAsync", 6050, per_thread).fn, dlsym(library(), "cuMemcpyAsync"));
}

// The process's driver, initialised with a device 0 context current on this thread.
void make_current() {
  ASSERT_EQ(entry<CUresult (*)(unsigned)>("cuInit")(0), CUDA_SUCCESS);
  CUcontext ctx = nullptr;
  ASSERT_EQ(entry<CUresult (*)(CUcontext*, CUdevice)>("cuDevicePrimaryCtxRetain")(&ctx, 0),
            CUDA_SUCCESS);
  ASSERT_EQ(entry<CUresult (*)(CUcontext)>("cuCtxSetCurrent")(ctx), CUDA_SUCCESS);
}

using MemsetFn = CUresult (*)(CUdeviceptr, unsigned char, std::size_t, CUstream);

// Two threads write the same bytes with a NULL stream: through the legacy entry both use the
// legacy default stream (ordered); through the per-thread one each uses its own thread's
// default stream, which nothing orders, so the race detector refuses the second write.
CUresult memset_from_two_threads(const char* symbol) {
  make_current();
  CUdeviceptr p = 0;
  EXPECT_EQ(entry<CUresult (*)(CUdeviceptr*, std::size_t)>("cuMemAlloc_v2")(&p, 256), CUDA_SUCCESS);
  const auto memset = entry<MemsetFn>(symbol);
  EXPECT_EQ(memset(p, 1, 256, nullptr), CUDA_SUCCESS);
  CUresult second = CUDA_ERROR_UNKNOWN;
  std::thread([&] {
    make_current();
    second = memset(p, 2, 256, nullptr);
  }).join();
  EXPECT_EQ(entry<CUresult (*)()>("cuCtxSynchronize")(), CUDA_SUCCESS);
  return second;
}

TEST(sim_library, legacy_entry_reads_null_as_the_legacy_stream) {
  EXPECT_EQ(memset_from_two_threads("cuMemsetD8Async"), CUDA_SUCCESS);
}

TEST(sim_library, per_thread_entry_reads_null_as_the_threads_stream) {
  EXPECT_EQ(memset_from_two_threads("cuMemsetD8Async_ptsz"), kSimRaceResult);
}

TEST(sim_library, every_entry_reaches_one_driver) {
  make_current();
  ASSERT_EQ(entry<CUresult (*)()>("caiSimResetCallCounts")(), CUDA_SUCCESS);
  CUdeviceptr p = 0;
  ASSERT_EQ(entry<CUresult (*)(CUdeviceptr*, std::size_t)>("cuMemAlloc_v2")(&p, 4096),
            CUDA_SUCCESS);
  // Found through cuGetProcAddress, the entries see the memory the exported symbol allocated.
  void* fn = lookup("cuMemGetAddressRange", 12000).fn;
  ASSERT_NE(fn, nullptr);
  CUdeviceptr base = 0;
  std::size_t size = 0;
  EXPECT_EQ(reinterpret_cast<CUresult (*)(CUdeviceptr*, std::size_t*, CUdeviceptr)>(fn)(
                &base, &size, p + 100),
            CUDA_SUCCESS);
  EXPECT_EQ(base, p);
  EXPECT_EQ(size, 4096u);
  // The simulator's own entries too: the call counts include the calls above.
  unsigned long long counts[sim::k_entry_count] = {};
  ASSERT_EQ(entry<CUresult (*)(unsigned long long*, std::size_t)>("caiSimGetCallCounts")(
                counts, sim::k_entry_count),
            CUDA_SUCCESS);
  EXPECT_EQ(counts[sim::k_cuMemAlloc], 1u);
  EXPECT_EQ(counts[sim::k_cuMemGetAddressRange], 1u);
}

TEST(sim_library, adapters_take_the_context_argument) {
  const auto get_device = entry<CUresult (*)(CUdevice*, CUcontext)>("cuCtxGetDevice_v2");
  const auto get_current = entry<CUresult (*)(CUcontext*)>("cuCtxGetCurrent");
  ASSERT_EQ(entry<CUresult (*)(unsigned)>("cuInit")(0), CUDA_SUCCESS);
  CUcontext ctx = nullptr;
  ASSERT_EQ(entry<CUresult (*)(CUcontext*, CUdevice)>("cuDevicePrimaryCtxRetain")(&ctx, 0),
            CUDA_SUCCESS);
  CUcontext current = ctx;
  CUgreenCtx green = reinterpret_cast<CUgreenCtx>(std::uintptr_t{1});
  std::thread([&] {  // a new thread has no current context
    CUdevice dev = -1;
    // NULL means the current context, so it fails; a context argument works and leaves the
    // thread's stack as it was.
    EXPECT_EQ(get_device(&dev, nullptr), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_EQ(get_device(&dev, ctx), CUDA_SUCCESS);
    EXPECT_EQ(dev, 0);
    EXPECT_EQ(get_current(&current), CUDA_SUCCESS);
    EXPECT_EQ(current, nullptr);
    EXPECT_EQ(get_device(&dev, reinterpret_cast<CUcontext>(std::uintptr_t{0x10})),
              CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_EQ(entry<CUresult (*)(CUcontext)>("cuCtxSynchronize_v2")(ctx), CUDA_SUCCESS);
    EXPECT_EQ(entry<CUresult (*)(CUstream, CUcontext*, CUgreenCtx*)>("cuStreamGetCtx_v2")(
                  stream_legacy(), &current, &green),
              CUDA_ERROR_INVALID_CONTEXT);  // the legacy stream of no current context
  })
      .join();
  make_current();
  EXPECT_EQ(entry<CUresult (*)(CUstream, CUcontext*, CUgreenCtx*)>("cuStreamGetCtx_v2")(
                stream_legacy(), &current, &green),
            CUDA_SUCCESS);
  EXPECT_EQ(current, ctx);
  EXPECT_EQ(green, nullptr);
}

}  // namespace
}  // namespace cai::device
