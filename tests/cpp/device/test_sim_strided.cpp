// Strided copies, fills and adds on random layouts (up to 4-d, permuted, reversed, sliced,
// broadcast), device to device and across host and device, against an index-by-index
// reference written here.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "checks.h"
#include "test_sim_util.h"

namespace cai::device::detail {
namespace {

using test::addr;

// A view of `shape` inside a base buffer of `base_bytes`: byte offset of element 0 and strides.
struct View {
  std::vector<std::int64_t> strides;
  std::int64_t offset = 0;
  std::size_t base_bytes = 0;
};

// Builds a random layout for `shape`: a base array with the dims in a random memory order,
// each dim stepped by 1-3, sometimes reversed, padded; `broadcast` allows zero strides.
View random_view(std::mt19937& rng, const std::vector<std::int64_t>& shape, std::size_t itemsize,
                 bool broadcast) {
  const std::size_t nd = shape.size();
  std::vector<std::int64_t> base_dim(nd), step(nd), start(nd);
  for (std::size_t i = 0; i < nd; ++i) {
    step[i] = std::uniform_int_distribution<std::int64_t>(1, 3)(rng);
    const std::int64_t pad = std::uniform_int_distribution<std::int64_t>(0, 2)(rng);
    base_dim[i] = std::max<std::int64_t>(1, (shape[i] - 1) * step[i] + 1 + pad);
    start[i] = std::uniform_int_distribution<std::int64_t>(0, pad)(rng);
  }
  std::vector<std::size_t> order(nd);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<std::int64_t> base_stride(nd);
  std::int64_t s = static_cast<std::int64_t>(itemsize);
  for (std::size_t k = nd; k-- > 0;) {
    base_stride[order[k]] = s;
    s *= base_dim[order[k]];
  }
  View v;
  v.base_bytes = static_cast<std::size_t>(s);
  v.strides.resize(nd);
  for (std::size_t i = 0; i < nd; ++i) {
    std::int64_t first = start[i];
    std::int64_t stride = step[i] * base_stride[i];
    if (std::uniform_int_distribution<int>(0, 2)(rng) == 0 && shape[i] > 0) {
      first += (shape[i] - 1) * step[i];  // walk this dim backwards
      stride = -stride;
    }
    if (broadcast && std::uniform_int_distribution<int>(0, 5)(rng) == 0) stride = 0;
    v.offset += first * base_stride[i];
    v.strides[i] = stride;
  }
  return v;
}

// Index-by-index reference: dst[i] = src[i] for every multi-index i, in C order.
void reference_copy(std::vector<std::uint8_t>& dst, const View& dv,
                    const std::vector<std::uint8_t>& src, const View& sv,
                    const std::vector<std::int64_t>& shape, std::size_t itemsize) {
  std::int64_t count = 1;
  for (std::int64_t n : shape) count *= n;
  std::vector<std::int64_t> idx(shape.size(), 0);
  for (std::int64_t flat = 0; flat < count; ++flat) {
    std::int64_t rem = flat;
    for (std::size_t k = shape.size(); k-- > 0;) {
      idx[k] = rem % shape[k];
      rem /= shape[k];
    }
    std::int64_t d = dv.offset, s = sv.offset;
    for (std::size_t k = 0; k < shape.size(); ++k) {
      d += idx[k] * dv.strides[k];
      s += idx[k] * sv.strides[k];
    }
    std::memcpy(&dst[static_cast<std::size_t>(d)], &src[static_cast<std::size_t>(s)], itemsize);
  }
}

std::vector<std::int64_t> random_shape(std::mt19937& rng) {
  const int nd = std::uniform_int_distribution<int>(0, 4)(rng);
  std::vector<std::int64_t> shape(static_cast<std::size_t>(nd));
  for (auto& n : shape) n = std::uniform_int_distribution<std::int64_t>(1, 5)(rng);
  if (nd > 0 && std::uniform_int_distribution<int>(0, 20)(rng) == 0) shape[0] = 0;
  return shape;
}

std::vector<std::uint8_t> random_bytes(std::mt19937& rng, std::size_t n) {
  std::vector<std::uint8_t> v(n);
  for (auto& b : v) b = static_cast<std::uint8_t>(rng());
  return v;
}

enum class Where { device_to_device, host_to_device, device_to_host };

class SimStridedTest : public ::testing::TestWithParam<Where> {
 protected:
  std::unique_ptr<test::Simulator> sim = test::make_simulator();
};

TEST_P(SimStridedTest, copy_matches_the_reference_on_random_layouts) {
  std::mt19937 rng(1234 + static_cast<unsigned>(GetParam()));
  const std::size_t itemsizes[] = {1, 2, 3, 4, 8, 16};
  const StreamHandle s = sim->stream_create(true);
  for (int iter = 0; iter < 300; ++iter) {
    const std::size_t itemsize = itemsizes[rng() % 6];
    const std::vector<std::int64_t> shape = random_shape(rng);
    const View sv = random_view(rng, shape, itemsize, /*broadcast=*/true);
    const View dv = random_view(rng, shape, itemsize, /*broadcast=*/false);
    const std::vector<std::uint8_t> src = random_bytes(rng, sv.base_bytes);
    std::vector<std::uint8_t> dst = random_bytes(rng, dv.base_bytes);
    std::vector<std::uint8_t> want = dst;
    reference_copy(want, dv, src, sv, shape, itemsize);

    // Place each side on the device or leave it in host memory, as the case asks.
    const bool src_dev = GetParam() != Where::host_to_device;
    const bool dst_dev = GetParam() != Where::device_to_host;
    std::uint64_t sp = addr(src.data()), dp = addr(dst.data());
    if (src_dev) {
      sp = sim->alloc(MemoryKind::device, src.size());
      sim->copy_async(sp, addr(src.data()), src.size(), s);
    }
    if (dst_dev) {
      dp = sim->alloc(MemoryKind::device, dst.size());
      sim->copy_async(dp, addr(dst.data()), dst.size(), s);
    }
    const auto n = static_cast<std::int64_t>(itemsize);
    sim->copy_strided_async(test::operand(dp + static_cast<std::uint64_t>(dv.offset), Dims(shape),
                                          Dims(dv.strides), n, !dst_dev),
                            test::operand(sp + static_cast<std::uint64_t>(sv.offset), Dims(shape),
                                          Dims(sv.strides), n, !src_dev),
                            s);
    std::vector<std::uint8_t> got(dst.size());
    if (dst_dev) {
      sim->copy_async(addr(got.data()), dp, dst.size(), s);
      sim->stream_synchronize(s);
    } else {
      sim->stream_synchronize(s);
      got = dst;
    }
    ASSERT_EQ(got, want) << "iteration " << iter << ", itemsize " << itemsize << ", "
                         << shape.size() << "-d";
    if (src_dev) sim->free(sp);
    if (dst_dev) sim->free(dp);
    // Host buffers are released by the loop: drop what the detector knows of them.
    sim->forget(addr(src.data()), src.size());
    sim->forget(addr(dst.data()), dst.size());
  }
  sim->stream_destroy(s);
}

INSTANTIATE_TEST_SUITE_P(sim, SimStridedTest,
                         ::testing::Values(Where::device_to_device, Where::host_to_device,
                                           Where::device_to_host));

TEST(sim_strided, fill_and_add_on_random_layouts) {
  auto sim = test::make_simulator();
  std::mt19937 rng(99);
  for (int iter = 0; iter < 100; ++iter) {
    const std::vector<std::int64_t> shape = random_shape(rng);
    const View ov = random_view(rng, shape, 4, false);
    const View av = random_view(rng, shape, 4, true);
    const View bv = random_view(rng, shape, 4, true);
    std::vector<std::int32_t> a(av.base_bytes / 4), b(bv.base_bytes / 4), o(ov.base_bytes / 4);
    for (auto& x : a) x = static_cast<std::int32_t>(rng() % 1000);
    for (auto& x : b) x = static_cast<std::int32_t>(rng() % 1000);
    for (auto& x : o) x = -1;
    const std::uint64_t da = sim->alloc(MemoryKind::device, av.base_bytes);
    const std::uint64_t db = sim->alloc(MemoryKind::device, bv.base_bytes);
    const std::uint64_t dout = sim->alloc(MemoryKind::device, ov.base_bytes);
    sim->copy_async(da, addr(a.data()), av.base_bytes, kLegacyDefaultStream);
    sim->copy_async(db, addr(b.data()), bv.base_bytes, kLegacyDefaultStream);
    sim->copy_async(dout, addr(o.data()), ov.base_bytes, kLegacyDefaultStream);
    auto at = [](std::uint64_t p, const View& v) {
      return p + static_cast<std::uint64_t>(v.offset);
    };
    auto op = [&](std::uint64_t p, const View& v) {
      return test::operand(at(p, v), Dims(shape), Dims(v.strides), 4);
    };
    const Operand ops[] = {op(dout, ov), op(da, av), op(db, bv)};
    sim->elementwise_async(ElementwiseOp::add, ElementType::i32, ops, kLegacyDefaultStream);
    std::vector<std::int32_t> got(o.size());
    sim->copy_async(addr(got.data()), dout, ov.base_bytes, kLegacyDefaultStream);
    sim->stream_synchronize(kLegacyDefaultStream);
    // Reference: visit every index; untouched elements stay -1.
    std::vector<std::int32_t> want = o;
    std::int64_t count = 1;
    for (std::int64_t n : shape) count *= n;
    for (std::int64_t flat = 0; flat < count; ++flat) {
      std::int64_t rem = flat, oo = ov.offset, ao = av.offset, bo = bv.offset;
      for (std::size_t k = shape.size(); k-- > 0;) {
        const std::int64_t i = rem % shape[k];
        rem /= shape[k];
        oo += i * ov.strides[k];
        ao += i * av.strides[k];
        bo += i * bv.strides[k];
      }
      want[static_cast<std::size_t>(oo / 4)] =
          a[static_cast<std::size_t>(ao / 4)] + b[static_cast<std::size_t>(bo / 4)];
    }
    ASSERT_EQ(got, want) << "iteration " << iter;
    // Fill the same output layout with 7 and check that only it changed.
    const std::int32_t seven = 7;
    sim->fill_async(op(dout, ov), &seven, kLegacyDefaultStream);
    sim->copy_async(addr(got.data()), dout, ov.base_bytes, kLegacyDefaultStream);
    sim->stream_synchronize(kLegacyDefaultStream);
    for (std::size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(got[i], want[i] == -1 ? -1 : 7) << "iteration " << iter << " element " << i;
    }
    sim->free(da);
    sim->free(db);
    sim->free(dout);
    sim->forget(addr(got.data()), got.size() * 4);
  }
}

}  // namespace
}  // namespace cai::device::detail
