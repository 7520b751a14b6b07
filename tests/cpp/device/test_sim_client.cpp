// The simulated driver's entry points for other driver-API clients (numba-cuda, cuda.core):
// reached as those clients reach them, through cuGetProcAddress_v2 by name and version, with
// the driver's documented semantics and codes, and ordered as the race detector sees them.

#include <gtest/gtest.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sim/client_entries.h"
#include "sim/sim_driver.h"

namespace cai::device::detail {
namespace {

using namespace cu;

// A simulated driver seen only through its exported lookup, with a current context.
class Client {
 public:
  explicit Client(int devices = 1) : sim_(std::make_unique<sim::SimDriver>(devices)) {
    getproc_ = reinterpret_cast<GetProcAddressFn>(sim_->symbol("cuGetProcAddress_v2"));
  }
  template <class F>
  F get(const char* name, int version = 13000) {
    void* fn = nullptr;
    CUdriverProcAddressQueryResult found{};
    EXPECT_EQ(getproc_(name, &fn, version, 0, &found), CUDA_SUCCESS) << name;
    EXPECT_EQ(found, CU_GET_PROC_ADDRESS_SUCCESS) << name;
    return reinterpret_cast<F>(fn);
  }
  CUresult lookup(const char* name, int version, CUdriverProcAddressQueryResult* found) {
    void* fn = nullptr;
    return getproc_(name, &fn, version, 0, found);
  }
  // The calling thread's detail of its last failed call.
  std::string detail() {
    const char* d = nullptr;
    get<decltype(SimApi::caiSimGetErrorDetail)>("caiSimGetErrorDetail")(&d);
    return d ? d : "";
  }
  CUcontext start(int device = 0) {
    EXPECT_EQ(get<decltype(DriverApi::cuInit)>("cuInit")(0), CUDA_SUCCESS);
    CUcontext c = nullptr;
    EXPECT_EQ(
        get<decltype(DriverApi::cuDevicePrimaryCtxRetain)>("cuDevicePrimaryCtxRetain")(&c, device),
        CUDA_SUCCESS);
    EXPECT_EQ(get<decltype(DriverApi::cuCtxSetCurrent)>("cuCtxSetCurrent")(c), CUDA_SUCCESS);
    return c;
  }

 private:
  std::unique_ptr<sim::SimDriver> sim_;
  GetProcAddressFn getproc_ = nullptr;
};

// The driver entries at the ABI cai asks for (their members implement it).
#define DRV(c, name) (c).get<decltype(DriverApi::name)>(#name, kDriverApiVersion)
#define CLI(c, name) (c).get<decltype(ClientApi::name)>(#name)
#define SIM(c, name) (c).get<decltype(SimApi::name)>(#name)

CUdeviceptr alloc(Client& c, std::size_t bytes) {
  CUdeviceptr p = 0;
  EXPECT_EQ(DRV(c, cuMemAlloc)(&p, bytes), CUDA_SUCCESS);
  return p;
}

std::uint64_t addr(const void* p) {
  return static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(p));
}

// A host function that keeps a stream busy until released (what cai.sim.hold does).
struct Gate {
  std::promise<void> open;
  std::shared_future<void> opened = open.get_future().share();
  static void wait(void* self) { static_cast<Gate*>(self)->opened.wait(); }
};

// ---------------------------------------------------------------------------------------------
// Lookup.

TEST(SimClientTest, EntriesResolveByNameAndVersion) {
  Client c;
  CUdriverProcAddressQueryResult found{};
  EXPECT_EQ(c.lookup("cuMemcpyHtoD", 3020, &found), CUDA_SUCCESS);
  EXPECT_EQ(found, CU_GET_PROC_ADDRESS_SUCCESS);
  // cuCtxCreate implements the 12.5 ABI (CUctxCreateParams): not an older caller's.
  EXPECT_EQ(c.lookup("cuCtxCreate", 12000, &found), CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(found, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  EXPECT_EQ(c.lookup("cuNoSuchEntry", 13000, &found), CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(found, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
}

TEST(SimClientTest, EntriesNeedCuInitAndAreCountedAndInjectable) {
  Client c(1);
  char id[16] = {};
  EXPECT_EQ(CLI(c, cuDeviceGetPCIBusId)(id, sizeof id, 0), CUDA_ERROR_NOT_INITIALIZED);
  c.start();
  EXPECT_EQ(SIM(c, caiSimInjectError)("cuDeviceGetPCIBusId", CUDA_ERROR_OUT_OF_MEMORY, 0, 1),
            CUDA_SUCCESS);
  EXPECT_EQ(CLI(c, cuDeviceGetPCIBusId)(id, sizeof id, 0), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(CLI(c, cuDeviceGetPCIBusId)(id, sizeof id, 0), CUDA_SUCCESS);
  std::vector<unsigned long long> counts(driver_entry_count + sim_entry_count + client_entry_count);
  EXPECT_EQ(SIM(c, caiSimGetCallCounts)(counts.data(), counts.size()), CUDA_SUCCESS);
  // cuDeviceGetPCIBusId is the first client entry, counted after the simulator's own.
  EXPECT_EQ(counts[driver_entry_count + sim_entry_count], 3u);
}

// ---------------------------------------------------------------------------------------------
// Copies.

TEST(SimClientTest, SynchronousCopiesRoundTrip) {
  Client c;
  c.start();
  const CUdeviceptr a = alloc(c, 64), b = alloc(c, 64);
  std::array<unsigned char, 64> in{}, out{};
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<unsigned char>(i * 3);
  EXPECT_EQ(CLI(c, cuMemcpyHtoD)(a, in.data(), 64), CUDA_SUCCESS);
  EXPECT_EQ(CLI(c, cuMemcpyDtoD)(b, a, 64), CUDA_SUCCESS);
  EXPECT_EQ(CLI(c, cuMemcpyDtoH)(out.data(), b, 64), CUDA_SUCCESS);
  EXPECT_EQ(in, out);
  out.fill(0);
  EXPECT_EQ(CLI(c, cuMemcpy)(addr(out.data()), a + 8, 16), CUDA_SUCCESS);  // unified addressing
  EXPECT_EQ(out[0], in[8]);
  EXPECT_EQ(out[15], in[23]);
  // A copy across the end of an allocation, or from freed memory, is refused.
  EXPECT_EQ(CLI(c, cuMemcpyDtoH)(out.data(), a + 32, 64), CUDA_ERROR_INVALID_VALUE);
  EXPECT_NE(c.detail().find("straddles"), std::string::npos) << c.detail();
  EXPECT_EQ(DRV(c, cuMemFree)(b), CUDA_SUCCESS);
  EXPECT_EQ(CLI(c, cuMemcpyDtoH)(out.data(), b, 64), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(DRV(c, cuMemFree)(a), CUDA_SUCCESS);
}

TEST(SimClientTest, AsyncCopiesRunInStreamOrder) {
  Client c;
  c.start();
  const CUdeviceptr a = alloc(c, 16), b = alloc(c, 16);
  CUstream s = nullptr;
  EXPECT_EQ(DRV(c, cuStreamCreate)(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  void* pinned = nullptr;
  EXPECT_EQ(CLI(c, cuMemHostAlloc)(&pinned, 16, 0), CUDA_SUCCESS);
  std::memset(pinned, 7, 16);
  EXPECT_EQ(CLI(c, cuMemcpyHtoDAsync)(a, pinned, 16, s), CUDA_SUCCESS);
  EXPECT_EQ(CLI(c, cuMemcpyDtoDAsync)(b, a, 16, s), CUDA_SUCCESS);
  EXPECT_EQ(CLI(c, cuMemsetD8)(a, 0, 16), kSimRaceResult);  // legacy vs non-blocking: a race
  unsigned char out[16] = {};
  EXPECT_EQ(CLI(c, cuMemcpyDtoHAsync)(out, b, 16, s), CUDA_SUCCESS);  // pageable: returns done
  EXPECT_EQ(out[0], 7);
  EXPECT_EQ(out[15], 7);
  EXPECT_EQ(DRV(c, cuStreamSynchronize)(s), CUDA_SUCCESS);
  EXPECT_EQ(DRV(c, cuStreamDestroy)(s), CUDA_SUCCESS);
  EXPECT_EQ(DRV(c, cuMemFreeHost)(pinned), CUDA_SUCCESS);
}

TEST(SimClientTest, DeviceToDeviceCopyDoesNotWaitButHostCopiesDo) {
  Client c;
  c.start();
  const CUdeviceptr a = alloc(c, 16), b = alloc(c, 16);
  Gate gate;
  EXPECT_EQ(DRV(c, cuLaunchHostFunc)(nullptr, &Gate::wait, &gate), CUDA_SUCCESS);
  EXPECT_EQ(CLI(c, cuMemcpyDtoD)(b, a, 16), CUDA_SUCCESS);  // returns with the stream held
  EXPECT_EQ(CLI(c, cuMemsetD8)(a, 1, 16), CUDA_SUCCESS);    // device memory: returns at once
  EXPECT_EQ(DRV(c, cuStreamQuery)(nullptr), CUDA_ERROR_NOT_READY);
  // A host copy waits: it runs on another thread until the gate opens.
  unsigned char out[16] = {};
  auto copy = std::async(std::launch::async, [&] {
    return CLI(c, cuMemcpyDtoH)(out, a, 16);  // the context is this thread's: set it there
  });
  gate.open.set_value();
  EXPECT_EQ(copy.get(), CUDA_ERROR_INVALID_CONTEXT);  // no context current on that thread
  EXPECT_EQ(CLI(c, cuMemcpyDtoH)(out, a, 16), CUDA_SUCCESS);
  EXPECT_EQ(out[0], 1);
  EXPECT_EQ(DRV(c, cuStreamQuery)(nullptr), CUDA_SUCCESS);  // it waited for the legacy stream
}

// ---------------------------------------------------------------------------------------------
// Memsets.

TEST(SimClientTest, MemsetsWriteTheirElementSizes) {
  Client c;
  c.start();
  const CUdeviceptr a = alloc(c, 64);
  std::array<unsigned char, 64> out{};
  EXPECT_EQ(CLI(c, cuMemsetD32)(a, 0x11223344u, 16), CUDA_SUCCESS);
  EXPECT_EQ(CLI(c, cuMemsetD16)(a + 2, 0xabcd, 2), CUDA_SUCCESS);
  EXPECT_EQ(CLI(c, cuMemsetD16Async)(a + 62, 0x0102, 1, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(CLI(c, cuMemsetD32Async)(a + 8, 5u, 1, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(CLI(c, cuMemcpyDtoH)(out.data(), a, 64), CUDA_SUCCESS);
  std::uint32_t w0 = 0, w2 = 0, w3 = 0;
  std::uint16_t h1 = 0, h2 = 0, last = 0;
  std::memcpy(&w0, out.data(), 4);
  std::memcpy(&h1, out.data() + 2, 2);
  std::memcpy(&h2, out.data() + 4, 2);
  std::memcpy(&w2, out.data() + 8, 4);
  std::memcpy(&w3, out.data() + 12, 4);
  std::memcpy(&last, out.data() + 62, 2);
  EXPECT_EQ(h1, 0xabcd);
  EXPECT_EQ(h2, 0xabcd);
  EXPECT_EQ(w2, 5u);
  EXPECT_EQ(w3, 0x11223344u);
  EXPECT_EQ(last, 0x0102);
  EXPECT_EQ(w0 & 0xffff, 0x3344u);
  // Misaligned, wrapping and past-the-end memsets are refused.
  EXPECT_EQ(CLI(c, cuMemsetD32)(a + 2, 0, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_NE(c.detail().find("aligned"), std::string::npos);
  EXPECT_EQ(CLI(c, cuMemsetD16)(a + 1, 0, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(CLI(c, cuMemsetD32)(a, 0, ~std::size_t{0} / 2), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(CLI(c, cuMemsetD8)(a, 0, 65), CUDA_ERROR_INVALID_VALUE);
}

TEST(SimClientTest, SynchronousMemsetOfPinnedMemoryOrdersTheHost) {
  Client c;
  c.start();
  void* pinned = nullptr;
  EXPECT_EQ(CLI(c, cuMemHostAlloc)(&pinned, 64, 0), CUDA_SUCCESS);
  const CaiSimAccess read{addr(pinned), 0, nullptr, nullptr, 64, 0};
  // Synchronous on pinned memory: the host's read is ordered after it.
  EXPECT_EQ(CLI(c, cuMemsetD32)(addr(pinned), 9u, 16), CUDA_SUCCESS);
  EXPECT_EQ(static_cast<unsigned char*>(pinned)[0], 9);
  EXPECT_EQ(SIM(c, caiSimHostAccess)(&read, "read"), CUDA_SUCCESS);
  // Negative control: the Async form on a non-blocking stream is not ordered before the read.
  CUstream s = nullptr;
  EXPECT_EQ(DRV(c, cuStreamCreate)(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  EXPECT_EQ(CLI(c, cuMemsetD32Async)(addr(pinned), 1u, 16, s), CUDA_SUCCESS);
  EXPECT_EQ(SIM(c, caiSimHostAccess)(&read, "read"), kSimRaceResult);
  EXPECT_EQ(DRV(c, cuStreamSynchronize)(s), CUDA_SUCCESS);
  EXPECT_EQ(SIM(c, caiSimHostAccess)(&read, "read"), CUDA_SUCCESS);
  EXPECT_EQ(DRV(c, cuStreamDestroy)(s), CUDA_SUCCESS);
  EXPECT_EQ(DRV(c, cuMemFreeHost)(pinned), CUDA_SUCCESS);
}

// ---------------------------------------------------------------------------------------------
// A race, as a foreign client sees it: a code of the driver's enum, the detail on request.

TEST(SimClientTest, ARaceIsADocumentedResultWithItsDetail) {
  Client c;
  c.start();
  const CUdeviceptr a = alloc(c, 64);
  CUstream s1 = nullptr, s2 = nullptr;
  EXPECT_EQ(DRV(c, cuStreamCreate)(&s1, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  EXPECT_EQ(DRV(c, cuStreamCreate)(&s2, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  EXPECT_EQ(CLI(c, cuMemsetD32Async)(a, 1u, 16, s1), CUDA_SUCCESS);
  testing::internal::CaptureStderr();
  const CUresult r = CLI(c, cuMemsetD32Async)(a, 2u, 16, s2);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(r, CUDA_ERROR_ILLEGAL_STATE);
  const std::string detail = c.detail();  // before the next call, which clears it
  EXPECT_EQ(detail.rfind(kSimRaceDetailPrefix, 0), 0u) << detail;
  EXPECT_NE(detail.find("cuMemsetD32Async"), std::string::npos) << detail;
  EXPECT_NE(err.find(detail), std::string::npos) << err;
  const char* name = nullptr;
  EXPECT_EQ(DRV(c, cuGetErrorName)(r, &name), CUDA_SUCCESS);
  EXPECT_STREQ(name, "CUDA_ERROR_ILLEGAL_STATE");
  // Negative control: ordered by an event, the same memset is accepted.
  CUevent e = nullptr;
  EXPECT_EQ(DRV(c, cuEventCreate)(&e, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  EXPECT_EQ(DRV(c, cuEventRecord)(e, s1), CUDA_SUCCESS);
  EXPECT_EQ(DRV(c, cuStreamWaitEvent)(s2, e, 0), CUDA_SUCCESS);
  EXPECT_EQ(CLI(c, cuMemsetD32Async)(a, 2u, 16, s2), CUDA_SUCCESS);
  EXPECT_EQ(DRV(c, cuCtxSynchronize)(), CUDA_SUCCESS);
  std::uint32_t v = 0;
  EXPECT_EQ(CLI(c, cuMemcpyDtoH)(&v, a + 60, 4), CUDA_SUCCESS);
  EXPECT_EQ(v, 2u);
  EXPECT_EQ(DRV(c, cuEventDestroy)(e), CUDA_SUCCESS);
}

// ---------------------------------------------------------------------------------------------
// Memory info and page-locked host memory.

TEST(SimClientTest, MemGetInfoCountsTheDevicesAllocations) {
  Client c;
  c.start();
  std::size_t free0 = 0, total = 0, free1 = 0;
  EXPECT_EQ(DRV(c, cuMemGetInfo)(&free0, &total), CUDA_SUCCESS);
  EXPECT_LE(free0, total);
  const CUdeviceptr a = alloc(c, 1 << 20);
  EXPECT_EQ(DRV(c, cuMemGetInfo)(&free1, &total), CUDA_SUCCESS);
  EXPECT_EQ(free0 - free1, std::size_t{1} << 20);
  EXPECT_EQ(DRV(c, cuMemFree)(a), CUDA_SUCCESS);
  EXPECT_EQ(DRV(c, cuMemGetInfo)(&free1, &total), CUDA_SUCCESS);
  EXPECT_EQ(free1, free0);
  EXPECT_EQ(DRV(c, cuMemGetInfo)(nullptr, &total), CUDA_ERROR_INVALID_VALUE);
}

TEST(SimClientTest, HostAllocFlagsAndDevicePointers) {
  Client c;
  c.start();
  void* p = nullptr;
  EXPECT_EQ(CLI(c, cuMemHostAlloc)(&p, 64, 8), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(CLI(c, cuMemHostAlloc)(&p, 0, 0), CUDA_ERROR_INVALID_VALUE);
  const unsigned flags = kMemHostAllocPortable | kMemHostAllocDeviceMap;
  EXPECT_EQ(CLI(c, cuMemHostAlloc)(&p, 64, flags), CUDA_SUCCESS);
  unsigned got = 0;
  EXPECT_EQ(CLI(c, cuMemHostGetFlags)(&got, p), CUDA_SUCCESS);
  EXPECT_EQ(got, flags);
  CUdeviceptr d = 0;
  EXPECT_EQ(DRV(c, cuMemHostGetDevicePointer)(&d, static_cast<char*>(p) + 8, 0), CUDA_SUCCESS);
  EXPECT_EQ(d, addr(p) + 8);
  EXPECT_EQ(DRV(c, cuMemHostGetDevicePointer)(&d, p, 1), CUDA_ERROR_INVALID_VALUE);
  // A device copy reaches it at that pointer.
  const CUdeviceptr a = alloc(c, 64);
  EXPECT_EQ(CLI(c, cuMemsetD8)(a, 0x5a, 64), CUDA_SUCCESS);
  EXPECT_EQ(CLI(c, cuMemcpyDtoD)(d, a, 8), CUDA_SUCCESS);
  EXPECT_EQ(DRV(c, cuCtxSynchronize)(), CUDA_SUCCESS);
  EXPECT_EQ(static_cast<unsigned char*>(p)[8], 0x5a);
  // Registered memory has a device pointer but no cuMemHostAlloc flags; pageable memory neither.
  std::vector<char> mine(4096);
  EXPECT_EQ(DRV(c, cuMemHostRegister)(mine.data(), mine.size(), kMemHostRegisterDeviceMap),
            CUDA_SUCCESS);
  EXPECT_EQ(DRV(c, cuMemHostGetDevicePointer)(&d, mine.data(), 0), CUDA_SUCCESS);
  EXPECT_EQ(d, addr(mine.data()));
  EXPECT_EQ(CLI(c, cuMemHostGetFlags)(&got, mine.data()), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(DRV(c, cuMemHostUnregister)(mine.data()), CUDA_SUCCESS);
  EXPECT_EQ(DRV(c, cuMemHostGetDevicePointer)(&d, mine.data(), 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(DRV(c, cuMemFreeHost)(p), CUDA_SUCCESS);
  EXPECT_EQ(CLI(c, cuMemHostGetFlags)(&got, p), CUDA_ERROR_INVALID_VALUE);
}

// ---------------------------------------------------------------------------------------------
// Contexts.

TEST(SimClientTest, PrimaryContextIsRetainedAndReleasedByCount) {
  Client c;
  EXPECT_EQ(DRV(c, cuInit)(0), CUDA_SUCCESS);
  unsigned flags = 1;
  int active = 1;
  EXPECT_EQ(CLI(c, cuDevicePrimaryCtxGetState)(0, &flags, &active), CUDA_SUCCESS);
  EXPECT_EQ(active, 0);
  EXPECT_EQ(flags, 0u);
  EXPECT_EQ(CLI(c, cuDevicePrimaryCtxSetFlags)(0, 3), CUDA_ERROR_INVALID_VALUE);  // two modes
  EXPECT_EQ(CLI(c, cuDevicePrimaryCtxSetFlags)(0, 0x100), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(CLI(c, cuDevicePrimaryCtxSetFlags)(0, 4), CUDA_SUCCESS);
  const CUcontext ctx = c.start();  // one retain
  CUcontext again = nullptr;
  EXPECT_EQ(DRV(c, cuDevicePrimaryCtxRetain)(&again, 0), CUDA_SUCCESS);
  EXPECT_EQ(again, ctx);
  EXPECT_EQ(CLI(c, cuDevicePrimaryCtxGetState)(0, &flags, &active), CUDA_SUCCESS);
  EXPECT_EQ(active, 1);
  EXPECT_EQ(flags, 4u);
  EXPECT_EQ(CLI(c, cuCtxGetFlags)(&flags), CUDA_SUCCESS);
  EXPECT_EQ(flags, 4u);
  const CUdeviceptr a = alloc(c, 64);
  EXPECT_EQ(CLI(c, cuDevicePrimaryCtxRelease)(0), CUDA_SUCCESS);  // still retained once
  std::size_t size = 0;
  EXPECT_EQ(DRV(c, cuMemGetAddressRange)(nullptr, &size, a), CUDA_SUCCESS);
  EXPECT_EQ(CLI(c, cuDevicePrimaryCtxRelease)(0), CUDA_SUCCESS);  // the last: memory is gone
  EXPECT_EQ(DRV(c, cuMemGetAddressRange)(nullptr, &size, a), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(CLI(c, cuDevicePrimaryCtxGetState)(0, &flags, &active), CUDA_SUCCESS);
  EXPECT_EQ(active, 0);
  EXPECT_EQ(CLI(c, cuDevicePrimaryCtxRelease)(0), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(CLI(c, cuDevicePrimaryCtxRelease)(5), CUDA_ERROR_INVALID_DEVICE);
}

TEST(SimClientTest, PrimaryContextResetFreesItsMemoryAndStreams) {
  Client c;
  c.start();
  const CUdeviceptr a = alloc(c, 64);
  CUstream s = nullptr;
  EXPECT_EQ(DRV(c, cuStreamCreate)(&s, 0), CUDA_SUCCESS);
  EXPECT_EQ(DRV(c, cuMemsetD8Async)(a, 1, 64, s), CUDA_SUCCESS);
  EXPECT_EQ(CLI(c, cuDevicePrimaryCtxReset)(0), CUDA_SUCCESS);
  std::size_t size = 0;
  EXPECT_EQ(DRV(c, cuMemGetAddressRange)(nullptr, &size, a), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(DRV(c, cuStreamQuery)(s), CUDA_ERROR_INVALID_HANDLE);
  // The context itself lives on: new work is accepted.
  const CUdeviceptr b = alloc(c, 64);
  EXPECT_EQ(CLI(c, cuMemsetD8)(b, 2, 64), CUDA_SUCCESS);
  EXPECT_EQ(DRV(c, cuMemFree)(b), CUDA_SUCCESS);
}

TEST(SimClientTest, CreatedContextsAreCurrentUntilDestroyed) {
  Client c(2);
  const CUcontext primary = c.start(0);
  CUcontext mine = nullptr;
  EXPECT_EQ(CLI(c, cuCtxCreate)(&mine, nullptr, 0x100, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(CLI(c, cuCtxCreate)(&mine, nullptr, 0, 2), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(CLI(c, cuCtxCreate)(&mine, nullptr, 2, 1), CUDA_SUCCESS);
  EXPECT_NE(mine, nullptr);
  CUcontext current = nullptr;
  EXPECT_EQ(DRV(c, cuCtxGetCurrent)(&current), CUDA_SUCCESS);
  EXPECT_EQ(current, mine);  // pushed, as documented
  CUdevice dev = -1;
  EXPECT_EQ(DRV(c, cuCtxGetDevice)(&dev), CUDA_SUCCESS);
  EXPECT_EQ(dev, 1);
  unsigned flags = 0;
  EXPECT_EQ(CLI(c, cuCtxGetFlags)(&flags), CUDA_SUCCESS);
  EXPECT_EQ(flags, 2u);
  const CUdeviceptr a = alloc(c, 64);
  int ordinal = -1;
  EXPECT_EQ(DRV(c, cuPointerGetAttribute)(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, a),
            CUDA_SUCCESS);
  EXPECT_EQ(ordinal, 1);
  EXPECT_EQ(DRV(c, cuMemFree)(a), CUDA_SUCCESS);
  // Pop and push it back like any context.
  CUcontext popped = nullptr;
  EXPECT_EQ(DRV(c, cuCtxPopCurrent)(&popped), CUDA_SUCCESS);
  EXPECT_EQ(popped, mine);
  EXPECT_EQ(DRV(c, cuCtxGetCurrent)(&current), CUDA_SUCCESS);
  EXPECT_EQ(current, primary);
  EXPECT_EQ(DRV(c, cuCtxPushCurrent)(mine), CUDA_SUCCESS);
  EXPECT_EQ(CLI(c, cuCtxDestroy)(mine), CUDA_SUCCESS);  // popped from this thread
  EXPECT_EQ(DRV(c, cuCtxGetCurrent)(&current), CUDA_SUCCESS);
  EXPECT_EQ(current, primary);
  EXPECT_EQ(CLI(c, cuCtxDestroy)(mine), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(DRV(c, cuCtxPushCurrent)(mine), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(CLI(c, cuCtxDestroy)(primary), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_NE(c.detail().find("cuDevicePrimaryCtxRelease"), std::string::npos);
}

TEST(SimClientTest, PeerAccessIsRefusedAsUnsupported) {
  Client c(2);
  c.start(0);
  int can = 1;
  EXPECT_EQ(CLI(c, cuDeviceCanAccessPeer)(&can, 0, 1), CUDA_SUCCESS);
  EXPECT_EQ(can, 0);
  EXPECT_EQ(CLI(c, cuDeviceCanAccessPeer)(&can, 0, 2), CUDA_ERROR_INVALID_DEVICE);
  CUcontext other = nullptr, self = nullptr;
  EXPECT_EQ(DRV(c, cuDevicePrimaryCtxRetain)(&other, 1), CUDA_SUCCESS);
  EXPECT_EQ(DRV(c, cuCtxGetCurrent)(&self), CUDA_SUCCESS);
  EXPECT_EQ(CLI(c, cuCtxEnablePeerAccess)(other, 0), kErrorPeerAccessUnsupported);
  EXPECT_EQ(CLI(c, cuCtxEnablePeerAccess)(other, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(CLI(c, cuCtxEnablePeerAccess)(self, 0), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(CLI(c, cuCtxDisablePeerAccess)(other), kErrorPeerAccessNotEnabled);
  const char* name = nullptr;
  EXPECT_EQ(DRV(c, cuGetErrorName)(kErrorPeerAccessUnsupported, &name), CUDA_SUCCESS);
  EXPECT_STREQ(name, "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED");
}

// ---------------------------------------------------------------------------------------------
// Streams.

TEST(SimClientTest, StreamPrioritiesFlagsAndCapture) {
  Client c;
  c.start();
  int least = 1, greatest = 1;
  EXPECT_EQ(CLI(c, cuCtxGetStreamPriorityRange)(&least, &greatest), CUDA_SUCCESS);
  EXPECT_EQ(least, 0);
  EXPECT_EQ(greatest, -5);
  CUstream hi = nullptr, lo = nullptr, mid = nullptr;
  EXPECT_EQ(CLI(c, cuStreamCreateWithPriority)(&hi, CU_STREAM_NON_BLOCKING, -100), CUDA_SUCCESS);
  EXPECT_EQ(CLI(c, cuStreamCreateWithPriority)(&lo, 0, 7), CUDA_SUCCESS);
  EXPECT_EQ(CLI(c, cuStreamCreateWithPriority)(&mid, 0, -2), CUDA_SUCCESS);
  EXPECT_EQ(CLI(c, cuStreamCreateWithPriority)(&mid, 4, -2), CUDA_ERROR_INVALID_VALUE);
  int p = 1;
  EXPECT_EQ(CLI(c, cuStreamGetPriority)(hi, &p), CUDA_SUCCESS);
  EXPECT_EQ(p, -5);  // clamped, as documented
  EXPECT_EQ(CLI(c, cuStreamGetPriority)(lo, &p), CUDA_SUCCESS);
  EXPECT_EQ(p, 0);
  EXPECT_EQ(CLI(c, cuStreamGetPriority)(mid, &p), CUDA_SUCCESS);
  EXPECT_EQ(p, -2);
  EXPECT_EQ(CLI(c, cuStreamGetPriority)(nullptr, &p), CUDA_SUCCESS);
  EXPECT_EQ(p, 0);
  unsigned flags = 9;
  EXPECT_EQ(CLI(c, cuStreamGetFlags)(hi, &flags), CUDA_SUCCESS);
  EXPECT_EQ(flags, 1u);
  EXPECT_EQ(CLI(c, cuStreamGetFlags)(lo, &flags), CUDA_SUCCESS);
  EXPECT_EQ(flags, 0u);
  EXPECT_EQ(CLI(c, cuStreamGetFlags)(stream_per_thread(), &flags), CUDA_SUCCESS);
  EXPECT_EQ(flags, 0u);
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  EXPECT_EQ(CLI(c, cuStreamIsCapturing)(hi, &status), CUDA_SUCCESS);
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_NONE);
  EXPECT_EQ(DRV(c, cuStreamDestroy)(hi), CUDA_SUCCESS);
  EXPECT_EQ(CLI(c, cuStreamIsCapturing)(hi, &status), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(CLI(c, cuStreamGetPriority)(hi, &p), CUDA_ERROR_INVALID_HANDLE);
}

// ---------------------------------------------------------------------------------------------
// The default memory pool.

TEST(SimClientTest, DefaultPoolAllocatesAndReportsItsUse) {
  Client c;
  c.start();
  CUmemoryPool pool = nullptr, same = nullptr;
  EXPECT_EQ(CLI(c, cuDeviceGetMemPool)(&pool, 0), CUDA_SUCCESS);
  EXPECT_EQ(CLI(c, cuDeviceGetDefaultMemPool)(&same, 0), CUDA_SUCCESS);
  EXPECT_EQ(pool, same);
  EXPECT_EQ(CLI(c, cuDeviceGetMemPool)(&pool, 1), CUDA_ERROR_INVALID_DEVICE);
  CUstream s = nullptr;
  EXPECT_EQ(DRV(c, cuStreamCreate)(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  cuuint64_t threshold = 1 << 20;
  EXPECT_EQ(CLI(c, cuMemPoolSetAttribute)(same, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold),
            CUDA_SUCCESS);
  threshold = 0;
  EXPECT_EQ(CLI(c, cuMemPoolGetAttribute)(same, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold),
            CUDA_SUCCESS);
  EXPECT_EQ(threshold, cuuint64_t{1} << 20);
  CUdeviceptr a = 0, b = 0;
  EXPECT_EQ(CLI(c, cuMemAllocFromPoolAsync)(&a, 1000, same, s), CUDA_SUCCESS);
  EXPECT_EQ(CLI(c, cuMemAllocFromPoolAsync)(&b, 24, same, s), CUDA_SUCCESS);
  CUmemoryPool of_a = nullptr;
  EXPECT_EQ(DRV(c, cuPointerGetAttribute)(&of_a, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, a),
            CUDA_SUCCESS);
  EXPECT_EQ(of_a, same);
  cuuint64_t used = 0, high = 0;
  EXPECT_EQ(CLI(c, cuMemPoolGetAttribute)(same, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used),
            CUDA_SUCCESS);
  EXPECT_EQ(used, 1024u);
  EXPECT_EQ(DRV(c, cuMemFreeAsync)(a, s), CUDA_SUCCESS);
  EXPECT_EQ(DRV(c, cuStreamSynchronize)(s), CUDA_SUCCESS);
  EXPECT_EQ(CLI(c, cuMemPoolGetAttribute)(same, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used),
            CUDA_SUCCESS);
  EXPECT_EQ(used, 24u);
  EXPECT_EQ(CLI(c, cuMemPoolGetAttribute)(same, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &high),
            CUDA_SUCCESS);
  EXPECT_EQ(high, 1024u);
  cuuint64_t value = 5;
  EXPECT_EQ(CLI(c, cuMemPoolSetAttribute)(same, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &value),
            CUDA_ERROR_INVALID_VALUE);
  value = 0;
  EXPECT_EQ(CLI(c, cuMemPoolSetAttribute)(same, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &value),
            CUDA_SUCCESS);
  EXPECT_EQ(CLI(c, cuMemPoolGetAttribute)(same, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &high),
            CUDA_SUCCESS);
  EXPECT_EQ(high, 24u);
  EXPECT_EQ(CLI(c, cuMemPoolSetAttribute)(same, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &value),
            CUDA_ERROR_INVALID_VALUE);
  int reuse = 0;
  EXPECT_EQ(CLI(c, cuMemPoolGetAttribute)(same, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, &reuse),
            CUDA_SUCCESS);
  EXPECT_EQ(reuse, 1);
  EXPECT_EQ(CLI(c, cuMemPoolTrimTo)(same, 0), CUDA_SUCCESS);
  const auto bogus = reinterpret_cast<CUmemoryPool>(std::uintptr_t{0x1234});
  EXPECT_EQ(CLI(c, cuMemPoolTrimTo)(bogus, 0), CUDA_ERROR_INVALID_VALUE);
  // Each attribute entry names itself, for another pool and for a null value alike.
  EXPECT_EQ(CLI(c, cuMemPoolGetAttribute)(bogus, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &high),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(c.detail(), "cuMemPoolGetAttribute: not a pool of the simulator");
  EXPECT_EQ(CLI(c, cuMemPoolSetAttribute)(same, CU_MEMPOOL_ATTR_USED_MEM_HIGH, nullptr),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(c.detail(), "cuMemPoolSetAttribute: not a pool of the simulator");
  EXPECT_EQ(CLI(c, cuMemAllocFromPoolAsync)(&a, 8, bogus, s), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(DRV(c, cuMemFreeAsync)(b, s), CUDA_SUCCESS);
  EXPECT_EQ(DRV(c, cuStreamDestroy)(s), CUDA_SUCCESS);
}

// ---------------------------------------------------------------------------------------------
// Devices: attributes, PCI bus ids, CUDA_VISIBLE_DEVICES, the profiler.

TEST(SimClientTest, DeviceAttributesFollowTheTable) {
  Client c(2);
  EXPECT_EQ(DRV(c, cuInit)(0), CUDA_SUCCESS);
  const std::pair<int, int> expected[] = {{1, 1024}, {10, 32}, {17, 0}, {35, 0}, {50, 0},
                                          {75, 9},   {76, 0},  {87, 2}, {115, 1}};
  for (const auto& [attribute, value] : expected) {
    int v = -7;
    EXPECT_EQ(DRV(c, cuDeviceGetAttribute)(&v, static_cast<CUdevice_attribute>(attribute), 0),
              CUDA_SUCCESS)
        << attribute;
    EXPECT_EQ(v, value) << attribute;
  }
  int bus = 0;
  EXPECT_EQ(DRV(c, cuDeviceGetAttribute)(&bus, static_cast<CUdevice_attribute>(33), 1),
            CUDA_SUCCESS);
  EXPECT_EQ(bus, 2);
  char id[16] = {};
  EXPECT_EQ(CLI(c, cuDeviceGetPCIBusId)(id, sizeof id, 1), CUDA_SUCCESS);
  EXPECT_STREQ(id, "0000:02:00.0");
  int v = 0;
  EXPECT_EQ(DRV(c, cuDeviceGetAttribute)(&v, static_cast<CUdevice_attribute>(1000), 0),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_NE(c.detail().find("1000"), std::string::npos);
  EXPECT_EQ(CLI(c, cuProfilerStart)(), CUDA_SUCCESS);
  EXPECT_EQ(CLI(c, cuProfilerStop)(), CUDA_SUCCESS);
}

class SimVisibleDevicesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const char* v = std::getenv("CUDA_VISIBLE_DEVICES")) saved_ = v;
  }
  void TearDown() override {
    if (saved_) {
      ::setenv("CUDA_VISIBLE_DEVICES", saved_->c_str(), 1);
    } else {
      ::unsetenv("CUDA_VISIBLE_DEVICES");
    }
  }
  static int count(Client& c) {
    int n = -1;
    EXPECT_EQ(DRV(c, cuDeviceGetCount)(&n), CUDA_SUCCESS);
    return n;
  }

 private:
  std::optional<std::string> saved_;
};

TEST_F(SimVisibleDevicesTest, TheListSelectsAndRenumbersDevices) {
  ::setenv("CUDA_VISIBLE_DEVICES", "2,0", 1);
  Client c(3);
  EXPECT_EQ(DRV(c, cuInit)(0), CUDA_SUCCESS);
  EXPECT_EQ(count(c), 2);
  CUdevice d = -1;
  EXPECT_EQ(DRV(c, cuDeviceGet)(&d, 1), CUDA_SUCCESS);
  EXPECT_EQ(d, 1);
  EXPECT_EQ(DRV(c, cuDeviceGet)(&d, 2), CUDA_ERROR_INVALID_DEVICE);
  char id[16] = {};
  EXPECT_EQ(CLI(c, cuDeviceGetPCIBusId)(id, sizeof id, 0), CUDA_SUCCESS);
  EXPECT_STREQ(id, "0000:03:00.0");  // ordinal 0 is simulated device 2
  CUuuid u{};
  EXPECT_EQ(DRV(c, cuDeviceGetUuid)(&u, 0), CUDA_SUCCESS);
  EXPECT_EQ(u.bytes[15], 2);
}

TEST_F(SimVisibleDevicesTest, AnInvalidEntryEndsTheList) {
  ::setenv("CUDA_VISIBLE_DEVICES", "1,7,0", 1);
  Client c(2);
  EXPECT_EQ(DRV(c, cuInit)(0), CUDA_SUCCESS);
  EXPECT_EQ(count(c), 1);
  ::setenv("CUDA_VISIBLE_DEVICES", "0,0", 1);
  Client repeated(2);
  EXPECT_EQ(DRV(repeated, cuInit)(0), CUDA_SUCCESS);
  EXPECT_EQ(count(repeated), 1);
  ::setenv("CUDA_VISIBLE_DEVICES", "", 1);
  Client none(2);
  EXPECT_EQ(DRV(none, cuInit)(0), CUDA_ERROR_NO_DEVICE);
  int n = -1;
  EXPECT_EQ(DRV(none, cuDeviceGetCount)(&n), CUDA_ERROR_NOT_INITIALIZED);
  ::unsetenv("CUDA_VISIBLE_DEVICES");
  Client all(2);
  EXPECT_EQ(DRV(all, cuInit)(0), CUDA_SUCCESS);
  EXPECT_EQ(count(all), 2);
}

}  // namespace
}  // namespace cai::device::detail
