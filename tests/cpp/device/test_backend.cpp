// The backend, the same code whichever driver is under it: on the simulated driver always, and
// on libcuda.so.1 where a driver and a GPU are present (the CUDA ctest group of
// scripts/gpu-check.sh): devices, memory and pointer attributes, copies, the kernels against
// the CPU executor (src/device/kernels/cpu.h) on the cases the CPU grid runner checks, the
// memory check, streams and events, driver errors.

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <future>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "backend/backend.h"
#include "cai/core/error.h"
#include "cai/device/backend.h"
#include "cai/device/simulator.h"
#include "cai_matchers.h"
#include "checks.h"
#include "driver/api.h"
#include "kernel_cases.h"
#include "kernels/cpu.h"
#include "kernels/elementwise.h"
#include "kernels/launch.h"
#include "test_sim_util.h"

namespace {

using cai::Dims;
using cai::Errc;
using cai::Error;
using cai::Layout;
using namespace cai::device;
using cai::test::ThrowsCaiError;
using test::dense;
using test::operand;
using ::testing::HasSubstr;

// ---------------------------------------------------------------------------------------------
// The backend against host references, on each driver ("sim", and "cuda" where one loads).

class cuda_backend_test : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "cuda") {
      if (!cu::libcuda()->ok) GTEST_SKIP() << "no CUDA driver or device";
      be_ = detail::make_backend(cu::libcuda());
    } else {
      be_ = detail::make_sim_backend();
    }
    stream_ = be_->stream_create(true);
  }
  bool simulated() const { return be_->simulated(); }
  void TearDown() override {
    if (!be_) return;
    be_->stream_synchronize(stream_);
    for (std::uint64_t p : allocs_) be_->free(p);
    be_->stream_destroy(stream_);
  }

  std::uint64_t alloc(MemoryKind kind, std::size_t bytes) {
    std::uint64_t p = be_->alloc(kind, bytes);
    allocs_.push_back(p);
    return p;
  }
  std::uint64_t upload(const std::vector<std::uint8_t>& host) {
    std::uint64_t p = alloc(MemoryKind::device, host.size());
    be_->copy_async(p, addr(host.data()), host.size(), stream_);
    return p;
  }
  std::vector<std::uint8_t> download(std::uint64_t p, std::size_t bytes) {
    std::vector<std::uint8_t> host(bytes);
    be_->copy_async(addr(host.data()), p, bytes, stream_);
    be_->stream_synchronize(stream_);
    return host;
  }
  static std::uint64_t addr(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }
  /// Whether the driver runs cai's kernels: the simulated one always (from PTX or, without
  /// nvcc, from the manifest of their names), a real one when the PTX was built.
  bool kernels() const { return detail::cuda_kernels_built() || simulated(); }

  std::unique_ptr<Backend> be_;
  StreamHandle stream_ = 0;
  std::vector<std::uint64_t> allocs_;
};

std::vector<std::uint8_t> pattern(std::size_t n, unsigned seed) {
  std::vector<std::uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint8_t>((i * 131 + seed * 7) & 0xff);
  return v;
}

TEST_P(cuda_backend_test, devices) {
  EXPECT_EQ(be_->name(), GetParam() == "cuda" ? "cuda" : "simulator");
  const int n = be_->device_count();
  ASSERT_GE(n, 1);
  DeviceProperties p = be_->properties(0);
  EXPECT_FALSE(p.name.empty());
  EXPECT_GE(p.compute_major, 5);
  EXPECT_GT(p.total_memory, 0u);
  EXPECT_GT(p.multiprocessors, 0);
  const int cur = be_->current_device();
  EXPECT_GE(cur, 0);
  EXPECT_LT(cur, n);
  be_->set_current_device(cur);
  EXPECT_EQ(be_->current_device(), cur);
  EXPECT_THAT(
      [&] { be_->properties(n); },
      ThrowsCaiError(Errc::index_error, HasSubstr("properties(): device " + std::to_string(n) +
                                                  " out of range (" + std::to_string(n))));
}

TEST_P(cuda_backend_test, pointer_attributes) {
  const std::size_t bytes = 4096;
  std::uint64_t d = alloc(MemoryKind::device, bytes);
  std::uint64_t h = alloc(MemoryKind::pinned_host, bytes);
  std::uint64_t m = alloc(MemoryKind::managed, bytes);
  EXPECT_EQ(be_->alloc(MemoryKind::device, 0), 0u);

  PointerInfo di = be_->pointer_info(d + 16);
  EXPECT_EQ(di.kind, MemoryKind::device);
  EXPECT_EQ(di.device, be_->current_device());
  EXPECT_TRUE(di.device_accessible);
  EXPECT_FALSE(di.host_accessible);
  EXPECT_NE(di.context, 0u);
  EXPECT_EQ(di.alloc_base, d);
  EXPECT_GE(di.alloc_size, bytes);

  PointerInfo hi = be_->pointer_info(h);
  EXPECT_EQ(hi.kind, MemoryKind::pinned_host);
  EXPECT_TRUE(hi.host_accessible);
  EXPECT_TRUE(hi.device_accessible);

  PointerInfo mi = be_->pointer_info(m);
  EXPECT_EQ(mi.kind, MemoryKind::managed);
  EXPECT_TRUE(mi.host_accessible);
  EXPECT_TRUE(mi.device_accessible);

  std::vector<int> pageable(16);
  PointerInfo ui = be_->pointer_info(addr(pageable.data()));
  EXPECT_EQ(ui.kind, MemoryKind::unregistered);
  EXPECT_EQ(be_->pointer_info(0).kind, MemoryKind::unregistered);

  // Boolean attributes fill a 4-byte unsigned int (every byte written), on whichever driver
  // runs: a slot the backend read as 1 byte would keep the filler of the other 3.
  const cu::DriverApi& api = detail::state_of(*be_).api;
  for (const auto& [p, is_managed, ipc] : {std::tuple{m, 1u, 0u}, std::tuple{d, 0u, 1u}}) {
    std::uint32_t slots[3];
    std::memset(slots, 0xaa, sizeof slots);
    cu::CUpointer_attribute attrs[] = {cu::CU_POINTER_ATTRIBUTE_IS_MANAGED,
                                       cu::CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
                                       cu::CU_POINTER_ATTRIBUTE_MAPPED};
    void* data[] = {&slots[0], &slots[1], &slots[2]};
    ASSERT_EQ(api.cuPointerGetAttributes(3, attrs, data, p), cu::CUDA_SUCCESS);
    EXPECT_EQ(slots[0], is_managed) << "pointer " << p;
    EXPECT_EQ(slots[1], ipc) << "pointer " << p;
    EXPECT_EQ(slots[2], 1u) << "pointer " << p;
    std::uint32_t one = 0xaaaaaaaa;
    ASSERT_EQ(api.cuPointerGetAttribute(&one, cu::CU_POINTER_ATTRIBUTE_IS_MANAGED, p),
              cu::CUDA_SUCCESS);
    EXPECT_EQ(one, is_managed) << "pointer " << p;
  }

  // The driver's own answer for memory it does not know, which the simulated driver copies:
  // memory type 0 and device ordinal -2 from the plural call. A real driver may refuse
  // instead (the backend takes both as unregistered); the simulated one answers.
  for (const std::uint64_t p : {std::uint64_t{0}, addr(pageable.data())}) {
    unsigned int type = 0xaaaaaaaa;
    int ordinal = 0x5a5a5a5a;
    auto ctx = reinterpret_cast<cu::CUcontext>(std::uintptr_t{0xaa});
    cu::CUpointer_attribute attrs[] = {cu::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                       cu::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                       cu::CU_POINTER_ATTRIBUTE_CONTEXT};
    void* data[] = {&type, &ordinal, &ctx};
    const cu::CUresult r = api.cuPointerGetAttributes(3, attrs, data, p);
    if (simulated()) EXPECT_EQ(r, cu::CUDA_SUCCESS);
    if (r == cu::CUDA_SUCCESS) {
      EXPECT_EQ(type, 0u) << "pointer " << p;
      EXPECT_EQ(ordinal, -2) << "pointer " << p;
      EXPECT_EQ(ctx, nullptr) << "pointer " << p;
    }
  }

  be_->free(0);
  EXPECT_THAT([&] { be_->free(d + 16); },
              ThrowsCaiError(Errc::value_error, HasSubstr("is inside the allocation at")));
  EXPECT_THAT([&] { be_->free(addr(pageable.data())); },
              ThrowsCaiError(Errc::value_error, HasSubstr("is not CUDA memory")));
}

TEST_P(cuda_backend_test, host_memory_registered_without_devicemap_has_no_device_pointer) {
  // What the simulated driver assumes of cuMemHostRegister (test_driver_fidelity.cpp has the
  // rest), asked of whichever driver runs: with DEVICEMAP, as cai registers, the memory has a
  // device pointer; without it, it is page-locked for copies only.
  const cu::DriverApi& api = detail::state_of(*be_).api;
  constexpr std::size_t kPage = 4096;
  std::vector<char> buffer(3 * kPage);
  char* mapped = reinterpret_cast<char*>((addr(buffer.data()) + kPage - 1) / kPage * kPage);
  char* unmapped = mapped + kPage;
  be_->host_register(addr(mapped), kPage);
  cu::CUdeviceptr d = 0;
  EXPECT_EQ(api.cuMemHostGetDevicePointer(&d, mapped, 0), cu::CUDA_SUCCESS);
  EXPECT_NE(d, 0u);
  ASSERT_EQ(api.cuMemHostRegister(unmapped, kPage, cu::kMemHostRegisterPortable), cu::CUDA_SUCCESS);
  d = 0;
  EXPECT_EQ(api.cuMemHostGetDevicePointer(&d, unmapped, 0), cu::CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(be_->pointer_info(addr(unmapped)).kind, MemoryKind::pinned_host);
  EXPECT_EQ(api.cuMemHostUnregister(unmapped), cu::CUDA_SUCCESS);
  be_->host_unregister(addr(mapped));
}

TEST_P(cuda_backend_test, plain_copies_and_memset) {
  const std::size_t n = 1 << 16;
  std::vector<std::uint8_t> src = pattern(n, 1);
  std::uint64_t d = upload(src);
  EXPECT_EQ(download(d, n), src);

  be_->memset_async(d + 100, 0xab, 1000, stream_);
  std::vector<std::uint8_t> expect = src;
  std::fill(expect.begin() + 100, expect.begin() + 1100, 0xab);
  EXPECT_EQ(download(d, n), expect);

  // Overlapping copy behaves like memmove.
  be_->copy_async(d + 1, d, 4096, stream_);
  std::memmove(expect.data() + 1, expect.data(), 4096);
  EXPECT_EQ(download(d, n), expect);

  // Pageable host memory is the caller's: no memset there, as on the simulator.
  std::vector<std::uint8_t> host(64, 0);
  EXPECT_THAT([&] { be_->memset_async(addr(host.data()), 7, 16, stream_); },
              ThrowsCaiError(Errc::device_error, HasSubstr("memset_async(): dst")));
  EXPECT_THAT([&] { be_->copy_async(d, d + 1, 1, 0); },
              ThrowsCaiError(Errc::value_error, HasSubstr("stream 0 is not allowed")));
}

struct StridedCase {
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> dst_strides, src_strides;
  std::int64_t dst_offset, src_offset;  // bytes from the buffer start to the base pointer
  std::size_t itemsize;
};

std::vector<StridedCase> strided_cases() {
  return {
      // C-contiguous both: one plain copy.
      {{4, 5}, {20, 4}, {20, 4}, 0, 0, 4},
      // Transpose.
      {{4, 5}, {4, 16}, {20, 4}, 0, 0, 4},
      // Reversed source, odd item size.
      {{7, 3}, {9, 3}, {-9, -3}, 0, 6 * 9 + 2 * 3, 3},
      // Every other element, 16-byte items.
      {{3, 4}, {64, 16}, {128, 32}, 0, 0, 16},
      // Misaligned base: falls back to narrower words.
      {{5, 6}, {48, 8}, {8, 40}, 1, 3, 8},
      // A broadcast source (stride 0).
      {{6, 4}, {16, 4}, {0, 4}, 0, 0, 4},
      // 0-d.
      {{}, {}, {}, 4, 8, 4},
  };
}

std::size_t span_bytes(const StridedCase& c, bool dst) {
  const auto e = *cai::checked_extent(c.shape, dst ? c.dst_strides : c.src_strides,
                                      static_cast<std::int64_t>(c.itemsize));
  return static_cast<std::size_t>(e.hi) +
         static_cast<std::size_t>(dst ? c.dst_offset : c.src_offset) + 64;
}

Operand strided(std::uint64_t base, std::int64_t offset, const StridedCase& c,
                const std::vector<std::int64_t>& strides, bool host) {
  return operand(base + static_cast<std::uint64_t>(offset), Dims(c.shape), Dims(strides),
                 static_cast<std::int64_t>(c.itemsize), host);
}

// Runs one case with the given memory kinds (device or pageable host) for each side.
void run_strided(Backend& be, StreamHandle s, const StridedCase& c, bool dst_on_device,
                 bool src_on_device, std::vector<std::uint64_t>& allocs) {
  const std::size_t dn = span_bytes(c, true), sn = span_bytes(c, false);
  std::vector<std::uint8_t> src_host = pattern(sn, 3), dst_host = pattern(dn, 5);
  std::vector<std::uint8_t> expect = dst_host;
  kernels::cpu_copy(strided(test::addr(expect.data()), c.dst_offset, c, c.dst_strides, true),
                    strided(test::addr(src_host.data()), c.src_offset, c, c.src_strides, true));

  auto place = [&](std::vector<std::uint8_t>& host, bool on_device) -> std::uint64_t {
    if (!on_device) return reinterpret_cast<std::uintptr_t>(host.data());
    std::uint64_t p = be.alloc(MemoryKind::device, host.size());
    allocs.push_back(p);
    be.copy_async(p, reinterpret_cast<std::uintptr_t>(host.data()), host.size(), s);
    return p;
  };
  std::uint64_t dbase = place(dst_host, dst_on_device);
  std::uint64_t sbase = place(src_host, src_on_device);
  be.copy_strided_async(strided(dbase, c.dst_offset, c, c.dst_strides, !dst_on_device),
                        strided(sbase, c.src_offset, c, c.src_strides, !src_on_device), s);
  std::vector<std::uint8_t> got(dn);
  be.copy_async(reinterpret_cast<std::uintptr_t>(got.data()), dbase, dn, s);
  be.stream_synchronize(s);
  EXPECT_EQ(got, expect) << "dst on device " << dst_on_device << ", src on device " << src_on_device
                         << ", itemsize " << c.itemsize;
}

TEST_P(cuda_backend_test, strided_copies_match_host_reference) {
  if (!kernels()) GTEST_SKIP() << "built without nvcc, on a real driver";
  for (const StridedCase& c : strided_cases()) {
    for (bool dd : {true, false}) {
      for (bool sd : {true, false}) run_strided(*be_, stream_, c, dd, sd, allocs_);
    }
  }
}

// The cases the CPU grid runner checks the kernel bodies with (kernel_cases.h), on the GPU:
// each host buffer goes to device memory at the same offsets (so the same alignment), the
// backend runs the operation, and the buffers come back.
struct DeviceExecutor final : kernels::test::Executor {
  Backend& be;
  StreamHandle stream;
  DeviceExecutor(Backend& b, StreamHandle s) : be(b), stream(s) {}

  template <class F>
  void on_device(std::span<kernels::test::Buffer* const> buffers, std::span<Operand> ops, F run) {
    std::vector<std::uint64_t> dev;
    for (auto* b : buffers) {
      dev.push_back(be.alloc(MemoryKind::device, b->size()));
      be.copy_async(dev.back(), b->base(), b->size(), stream);
    }
    for (Operand& o : ops) {
      for (std::size_t i = 0; i < buffers.size(); ++i) {
        if (o.ptr >= buffers[i]->base() && o.ptr < buffers[i]->base() + buffers[i]->size()) {
          o.ptr = o.ptr - buffers[i]->base() + dev[i];
          break;
        }
      }
    }
    run();
    be.copy_async(buffers[0]->base(), dev[0], buffers[0]->size(), stream);  // the output
    be.stream_synchronize(stream);
    for (std::uint64_t d : dev) be.free(d);
  }
  void copy(const Operand& dst, const Operand& src,
            std::span<kernels::test::Buffer* const> buffers) override {
    Operand ops[] = {dst, src};
    on_device(buffers, ops, [&] { be.copy_strided_async(ops[0], ops[1], stream); });
  }
  void fill(const Operand& dst, const void* value,
            std::span<kernels::test::Buffer* const> buffers) override {
    Operand ops[] = {dst};
    on_device(buffers, ops, [&] { be.fill_async(ops[0], value, stream); });
  }
  void add(ElementType type, std::span<const Operand> operands,
           std::span<kernels::test::Buffer* const> buffers) override {
    std::vector<Operand> ops(operands.begin(), operands.end());
    on_device(buffers, ops, [&] { be.elementwise_async(ElementwiseOp::add, type, ops, stream); });
  }
};

TEST_P(cuda_backend_test, kernel_cases_of_the_cpu_grid_runner) {
  if (!kernels()) GTEST_SKIP() << "built without nvcc, on a real driver";
  DeviceExecutor ex(*be_, stream_);
  kernels::test::copy_cases(ex);
  kernels::test::fill_cases(ex);
  for (int t = 0; t < element_type_count; ++t)
    kernels::test::add_cases(ex, static_cast<ElementType>(t));
}

TEST_P(cuda_backend_test, overlapping_strided_copy_reads_source_first) {
  if (!kernels()) GTEST_SKIP() << "built without nvcc, on a real driver";
  const std::size_t n = 256;
  std::vector<std::uint8_t> host = pattern(n, 9);
  std::uint64_t d = upload(host);
  // Reverse 32 4-byte items in place.
  be_->copy_strided_async(dense(d, {32}, 4), operand(d + 31 * 4, {32}, {-4}, 4), stream_);
  std::vector<std::uint8_t> expect = host;
  kernels::cpu_copy(dense(addr(expect.data()), {32}, 4),
                    operand(addr(expect.data()) + 31 * 4, {32}, {-4}, 4));
  EXPECT_EQ(download(d, n), expect);
}

TEST_P(cuda_backend_test, fill_matches_host_reference) {
  if (!kernels()) GTEST_SKIP() << "built without nvcc, on a real driver";
  for (std::int64_t itemsize : {1, 3, 4, 16, 40}) {
    const std::size_t n = static_cast<std::size_t>(itemsize * 40);
    std::vector<std::uint8_t> host = pattern(n, 11);
    std::vector<std::uint8_t> value = pattern(static_cast<std::size_t>(itemsize), 13);
    const std::uint64_t off = static_cast<std::uint64_t>(itemsize * 8);
    auto at = [&](std::uint64_t base) {
      return operand(base + off, {5, 3}, {itemsize * 7, -itemsize * 2}, itemsize);
    };
    std::vector<std::uint8_t> expect = host;
    kernels::cpu_fill(at(addr(expect.data())), value.data());
    std::uint64_t d = upload(host);
    be_->fill_async(at(d), value.data(), stream_);
    EXPECT_EQ(download(d, n), expect) << "itemsize " << itemsize;
    // Pageable destination: refused, as on the simulator.
    std::vector<std::uint8_t> h = host;
    EXPECT_THAT([&] { be_->fill_async(at(addr(h.data())), value.data(), stream_); },
                ThrowsCaiError(Errc::device_error, HasSubstr("is not CUDA memory")));
  }
}

// Small exact values of each type, as bytes.
std::vector<std::uint8_t> typed_values(ElementType t, std::size_t count, int seed) {
  const std::size_t size = element_size(t);
  std::vector<std::uint8_t> out(count * size);
  for (std::size_t i = 0; i < count; ++i) {
    const int v = static_cast<int>((i * 37 + static_cast<std::size_t>(seed)) % 200) - 100;
    std::uint8_t* p = out.data() + i * size;
    auto put = [&](auto x) { std::memcpy(p, &x, sizeof x); };
    switch (t) {
      case ElementType::b8:
        put(static_cast<std::uint8_t>(v > 0));
        break;
      case ElementType::i8:
      case ElementType::u8:
        put(static_cast<std::int8_t>(v));
        break;
      case ElementType::i16:
      case ElementType::u16:
        put(static_cast<std::int16_t>(v * 300));
        break;
      case ElementType::i32:
      case ElementType::u32:
        put(static_cast<std::int32_t>(static_cast<std::int64_t>(v) * 30000000));  // wraps
        break;
      case ElementType::i64:
      case ElementType::u64:
        put(static_cast<std::int64_t>(v) * 90000000000000000);
        break;
      case ElementType::f16:
        put(kernels::to_half(static_cast<float>(v) * 0.37f).bits);
        break;
      case ElementType::f32:
        put(static_cast<float>(v) * 0.37f);
        break;
      case ElementType::f64:
      case ElementType::c64:
        if (t == ElementType::f64) {
          put(static_cast<double>(v) * 0.37);
        } else {
          put(std::array<float, 2>{static_cast<float>(v) * 0.5f, static_cast<float>(-v)});
        }
        break;
      case ElementType::c128:
        put(std::array<double, 2>{static_cast<double>(v) * 0.25, static_cast<double>(v)});
        break;
    }
  }
  return out;
}

TEST_P(cuda_backend_test, add_matches_host_reference) {
  if (!kernels()) GTEST_SKIP() << "built without nvcc, on a real driver";
  for (int ti = 0; ti < element_type_count; ++ti) {
    const auto t = static_cast<ElementType>(ti);
    const auto size = static_cast<std::int64_t>(element_size(t));
    const Dims shape{6, 7}, c_strides{7 * size, size}, f_strides{size, 6 * size};
    const std::size_t n = static_cast<std::size_t>(42 * size);
    std::vector<std::uint8_t> a = typed_values(t, 42, 1), b = typed_values(t, 42, 2);
    std::vector<std::uint8_t> expect(n, 0);
    const Operand host_ops[] = {operand(addr(expect.data()), shape, c_strides, size),
                                operand(addr(a.data()), shape, c_strides, size),
                                operand(addr(b.data()), shape, f_strides, size)};
    kernels::cpu_elementwise(ElementwiseOp::add, t, host_ops);
    std::uint64_t da = upload(a), db = upload(b), dout = upload(std::vector<std::uint8_t>(n, 0));
    const Operand ops[] = {operand(dout, shape, c_strides, size),
                           operand(da, shape, c_strides, size),
                           operand(db, shape, f_strides, size)};
    be_->elementwise_async(ElementwiseOp::add, t, ops, stream_);
    EXPECT_EQ(download(dout, n), expect) << info(t).name;
    // Pageable operands are refused, as on the simulator.
    const Operand pageable[] = {ops[0], host_ops[1], ops[2]};
    EXPECT_THAT([&] { be_->elementwise_async(ElementwiseOp::add, t, pageable, stream_); },
                ThrowsCaiError(Errc::device_error, HasSubstr("add_async(): a [")));
  }
}

TEST_P(cuda_backend_test, too_many_dims_after_merging) {
  if (!kernels()) GTEST_SKIP() << "built without nvcc, on a real driver";
  // 17 dims of 2, C order on one side and F order on the other: nothing merges.
  Dims shape(17, 2), c(17), f(17);
  for (std::size_t d = 0; d < 17; ++d) {
    c[16 - d] = std::int64_t{1} << d;
    f[d] = std::int64_t{1} << d;
  }
  std::uint64_t x = alloc(MemoryKind::device, 1 << 17), y = alloc(MemoryKind::device, 1 << 17);
  EXPECT_THAT(
      [&] { be_->copy_strided_async(operand(x, shape, c, 1), operand(y, shape, f, 1), stream_); },
      ThrowsCaiError(Errc::not_implemented, HasSubstr("17 dimensions remain")));
  // Mergeable layouts of the same rank are fine.
  be_->copy_strided_async(operand(x, shape, c, 1), operand(y, shape, c, 1), stream_);
}

TEST_P(cuda_backend_test, no_kernels_is_not_implemented_on_a_gpu) {
  if (kernels()) GTEST_SKIP() << "built with kernels";
  if (simulated()) GTEST_SKIP() << "the simulated driver runs the kernels' manifest";
  std::uint64_t d = alloc(MemoryKind::device, 64);
  const int value = 1;
  EXPECT_THAT([&] { be_->fill_async(operand(d, {4}, {8}, 4), &value, stream_); },
              ThrowsCaiError(Errc::not_implemented, HasSubstr("nvcc")));
}

// Array data must be CUDA memory inside one live allocation: a foreign dict's pointer, a view
// past its allocation or freed memory is refused before any copy or launch, and the context
// stays usable.
TEST_P(cuda_backend_test, wild_pointers_are_refused_before_any_work) {
  std::uint64_t d = alloc(MemoryKind::device, 256);
  std::vector<std::uint8_t> host(256, 0xee);
  const Operand to_host = dense(addr(host.data()), {32}, 8, true);
  EXPECT_THAT(
      [&] { be_->copy_strided_async(to_host, dense(0x1000, {32}, 8), stream_); },
      ThrowsCaiError(Errc::device_error,
                     HasSubstr("copy_strided_async(): src [0x1000+256) is not CUDA memory")));
  const std::uint64_t v = 1;
  // fill of a view reaching past its allocation: no launch (it would kill the context).
  EXPECT_THAT([&] { be_->fill_async(dense(d + 128, {32}, 8), &v, stream_); },
              ThrowsCaiError(Errc::device_error, HasSubstr("runs past the end of its allocation")));
  EXPECT_THAT(
      [&] {
        be_->copy_strided_async(dense(d, {32}, 8), dense(addr(host.data()), {32}, 8), stream_);
      },
      ThrowsCaiError(Errc::device_error, HasSubstr("src")));
  const std::uint64_t freed = be_->alloc(MemoryKind::device, 256);
  be_->free(freed);
  EXPECT_THAT([&] { be_->copy_strided_async(to_host, dense(freed, {32}, 8), stream_); },
              ThrowsCaiError(Errc::device_error, HasSubstr("is not CUDA memory")));
  be_->stream_synchronize(stream_);
  for (std::uint8_t b : host) ASSERT_EQ(b, 0xee);
  // The context is alive: the same operations inside the allocation work.
  be_->fill_async(dense(d, {32}, 8), &v, stream_);
  be_->copy_strided_async(to_host, dense(d, {32}, 8), stream_);
  be_->stream_synchronize(stream_);
  EXPECT_EQ(host[0], 1);
}

TEST_P(cuda_backend_test, stream_ordered_memory) {
  const std::uint64_t t = be_->alloc_async(1024, stream_);
  ASSERT_NE(t, 0u);
  EXPECT_EQ(be_->pointer_info(t + 1023).alloc_base, t);
  const std::uint32_t v = 0x01020304;
  be_->fill_async(dense(t, {256}, 4), &v, stream_);
  std::vector<std::uint32_t> host(256);
  be_->copy_strided_async(dense(addr(host.data()), {256}, 4, true), dense(t, {256}, 4), stream_);
  be_->free_async(t, stream_);
  // What a driver says of memory freed by cuMemFreeAsync is undefined (a GPU's pool may still
  // map it): the simulated driver refuses to answer, naming the rule.
  if (simulated()) {
    EXPECT_THAT([&] { be_->fill_async(dense(t, {256}, 4), &v, stream_); },
                ThrowsCaiError(Errc::device_error, HasSubstr("undefined on a real driver")));
  }
  be_->stream_synchronize(stream_);
  EXPECT_EQ(host, std::vector<std::uint32_t>(256, v));
}

TEST_P(cuda_backend_test, elementwise_refuses_a_partial_overlap) {
  if (!kernels()) GTEST_SKIP() << "built without nvcc, on a real driver";
  std::uint64_t d = alloc(MemoryKind::device, 64);
  const Operand ops[] = {dense(d, {8}, 4), operand(d + 28, {8}, {-4}, 4), dense(d + 32, {8}, 4)};
  EXPECT_THAT([&] { be_->elementwise_async(ElementwiseOp::add, ElementType::i32, ops, stream_); },
              ThrowsCaiError(Errc::value_error, HasSubstr("partly overlaps out")));
}

TEST_P(cuda_backend_test, streams_and_events) {
  StreamHandle s2 = be_->stream_create(false);
  EventHandle e0 = be_->event_create(true), e1 = be_->event_create(true);
  EventHandle plain = be_->event_create(false);
  std::uint64_t d = alloc(MemoryKind::device, 1 << 20);
  be_->event_record(e0, stream_);
  be_->memset_async(d, 1, 1 << 20, stream_);
  be_->event_record(e1, stream_);
  be_->event_record(plain, stream_);
  be_->stream_wait_event(s2, plain);
  be_->memset_async(d, 2, 16, s2);
  be_->stream_synchronize(s2);
  be_->event_synchronize(e1);
  EXPECT_TRUE(be_->event_query(e1));
  EXPECT_TRUE(be_->stream_query(stream_));
  EXPECT_GE(be_->event_elapsed_ms(e0, e1), 0.0f);
  std::vector<std::uint8_t> got = download(d, 32);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(got[static_cast<std::size_t>(i)], i < 16 ? 2 : 1);

  // The default streams work and cannot be destroyed; 0 is rejected.
  be_->memset_async(d, 3, 16, kLegacyDefaultStream);
  be_->stream_synchronize(kLegacyDefaultStream);
  be_->memset_async(d, 4, 16, kPerThreadDefaultStream);
  be_->stream_synchronize(kPerThreadDefaultStream);
  be_->synchronize();
  EXPECT_THAT([&] { be_->stream_destroy(StreamHandle{0}); },
              ThrowsCaiError(Errc::value_error, HasSubstr("stream_destroy(): stream")));
  for (StreamHandle bad : {kLegacyDefaultStream, kPerThreadDefaultStream}) {
    EXPECT_THAT([&] { be_->stream_destroy(bad); },
                ThrowsCaiError(Errc::value_error,
                               HasSubstr("the default streams (1, 2) cannot be destroyed")));
  }
  be_->event_destroy(e0);
  be_->event_destroy(e1);
  be_->event_destroy(plain);
  be_->stream_destroy(s2);
}

TEST_P(cuda_backend_test, deferred_frees_do_not_wait_for_unrelated_streams) {
  // A stream held by a host function until the gate opens: the driver's free would wait for it
  // (cuMemFree synchronizes the device; the simulated driver does the same), so a free on this
  // thread would never return. free_deferred must.
  // Allocated first: cuMemAllocHost waits for the device too.
  const std::uint64_t p = be_->alloc(MemoryKind::device, 4096);
  const std::uint64_t host = be_->alloc(MemoryKind::pinned_host, 64);
  StreamHandle busy = be_->stream_create(false);
  std::promise<void> gate;
  be_->launch_host_func(busy, [f = gate.get_future().share()] { f.wait(); });
  EXPECT_THAT([&] { be_->free_deferred(p + 8); },
              ThrowsCaiError(Errc::value_error, HasSubstr("inside the allocation at")));
  be_->free_deferred(p);
  be_->free_deferred(host);
  EXPECT_FALSE(be_->stream_query(busy));
  // Freed for the backend at once, while the driver still holds it.
  EXPECT_EQ(be_->pointer_info(p).kind, MemoryKind::unregistered);
  EXPECT_EQ(be_->pointer_info(host + 8).kind, MemoryKind::unregistered);
  gate.set_value();
  be_->flush_frees();
  EXPECT_EQ(be_->pointer_info(p).kind, MemoryKind::unregistered);
  EXPECT_EQ(be_->pointer_info(host).kind, MemoryKind::unregistered);
  be_->stream_synchronize(busy);
  be_->stream_destroy(busy);
}

TEST_P(cuda_backend_test, an_allocation_waits_for_deferred_frees_before_running_out) {
  // Most of the device's memory, dropped and taken again at once: the second allocation finds
  // the first still queued for its free at most once, and then waits for it.
  const std::size_t big = be_->properties(0).total_memory / 4 * 3;
  for (int i = 0; i < 4; ++i) {
    const std::uint64_t p = be_->alloc(MemoryKind::device, big);
    be_->free_deferred(p);
  }
  be_->flush_frees();
}

TEST_P(cuda_backend_test, driver_errors_name_the_function) {
  // Far more than any GPU has.
  EXPECT_THAT([&] { be_->alloc(MemoryKind::device, std::size_t{1} << 60); },
              ThrowsCaiError(Errc::device_error,
                             ::testing::AllOf(HasSubstr("cuMemAlloc"), HasSubstr("CUDA_ERROR_"))));
}

INSTANTIATE_TEST_SUITE_P(driver, cuda_backend_test, ::testing::Values("sim", "cuda"),
                         [](const auto& info) { return info.param; });

}  // namespace

// ---------------------------------------------------------------------------------------------
// Memory of pools and of virtual-memory mappings, on the simulated driver (it makes both).

namespace cai::device {
namespace {

using cai::test::ThrowsCaiError;
using test::addr;
using test::dense;
using ::testing::HasSubstr;

TEST(backend_pools, a_view_across_chunks_of_one_mapping_is_accepted) {
  // PyTorch's expandable segments map one allocation as chunks the driver reports one by one.
  auto b = detail::make_sim_backend();
  const std::uint64_t p = sim::alloc_chunked(*b, 4096, 3);
  const std::int32_t v = 7;
  b->fill_async(dense(p, {3072}, 4), &v, kLegacyDefaultStream);  // all three chunks
  std::vector<std::int32_t> host(3072);
  b->copy_async(addr(host.data()), p, host.size() * 4, kLegacyDefaultStream);
  b->stream_synchronize(kLegacyDefaultStream);
  EXPECT_EQ(host, std::vector<std::int32_t>(3072, 7));
  EXPECT_THAT([&] { b->fill_async(dense(p + 8192, {2000}, 4), &v, kLegacyDefaultStream); },
              ThrowsCaiError(Errc::device_error, HasSubstr("runs past the end of its allocation")));
  // Mapped memory has no context and its ranges are reused at will: asked every time.
  b->reset_call_counts();
  b->pointer_info(p + 5000);
  b->pointer_info(p + 5000);
  EXPECT_EQ(b->call_counts().pointer_query, 2u);
  sim::free_chunked(*b, p);
}

TEST(backend_pools, memory_of_a_stream_ordered_pool_is_refused_for_ipc_clearly) {
  auto b = detail::make_sim_backend();
  const std::uint64_t p = b->alloc_async(256, kLegacyDefaultStream);
  EXPECT_THAT([&] { b->ipc_export_memory(p); },
              ThrowsCaiError(Errc::device_error, HasSubstr("not legacy-IPC capable")));
  b->free(p);  // no context: freed in the current one, no null context pushed
  b->synchronize();
}

TEST(backend_pools, foreign_pool_memory_is_never_remembered_and_a_stale_range_is_asked_again) {
  auto b = detail::make_sim_backend(2);
  // Another library over the same driver: its memory is foreign to `b`.
  auto other = detail::make_backend(detail::state_of(*b).driver);
  const std::uint64_t pooled = other->alloc_async(4096, kLegacyDefaultStream);
  const std::uint64_t block = other->alloc(MemoryKind::device, 4096);
  b->reset_call_counts();
  b->pointer_info(pooled);
  b->pointer_info(pooled);
  b->pointer_info(block);
  b->pointer_info(block);
  EXPECT_EQ(b->call_counts().pointer_query, 3u);  // the pool's twice, the block's once
  // A remembered range that names another device than the work's (its addresses reused by
  // a pool of that device since) is asked about again before the work trusts it.
  detail::Ranges::Entry stale;
  stale.info = b->pointer_info(block);
  stale.info.device = 1;
  stale.cacheable = true;
  detail::state_of(*b).ranges.forget(block, 4096);
  detail::state_of(*b).ranges.add_foreign(stale);
  b->reset_call_counts();
  const std::int32_t v = 3;
  b->fill_async(dense(block, {1024}, 4), &v, kLegacyDefaultStream);
  EXPECT_EQ(b->call_counts().pointer_query, 1u);
  EXPECT_EQ(b->pointer_info(block).device, 0);
  b->synchronize();
  other->free_async(pooled, kLegacyDefaultStream);
  other->free(block);
  other->synchronize();
}

}  // namespace
}  // namespace cai::device
