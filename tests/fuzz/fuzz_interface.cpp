// libFuzzer target for the CAI descriptor: bytes decoded into an InterfaceFields (shape,
// strides, typestr bytes, pointer, version, stream, descr entries, and a nested mask that is
// itself validated first, as the binding does) and given to validate_interface.
//
// Only cai::Error may escape, its message must be non-empty and start with the key it concerns,
// and every accepted descriptor must satisfy the rules of docs/core-interface.md.
//
// Build and run (clang): CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCAI_BUILD_FUZZERS=ON
//   -DCAI_BUILD_TESTS=OFF -DCAI_INSTALL=OFF && ninja -C build-fuzz cai_fuzz_interface &&
//   build-fuzz/tests/fuzz/cai_fuzz_interface -max_total_time=60 -timeout=5

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cai/core/error.h"
#include "cai/core/interface.h"
#include "fuzz_common.h"

namespace {

using cai_fuzz::check;

constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();

// Values that sit on the edges of the rules: sizes, strides, versions and streams.
constexpr std::int64_t kInts[] = {0,
                                  1,
                                  2,
                                  3,
                                  4,
                                  7,
                                  8,
                                  -1,
                                  -2,
                                  -8,
                                  255,
                                  256,
                                  1 << 20,
                                  std::int64_t{1} << 31,
                                  std::int64_t{1} << 32,
                                  std::int64_t{1} << 61,
                                  std::int64_t{1} << 62,
                                  kMax,
                                  kMax - 1,
                                  kMax / 2,
                                  kMax / 3,
                                  kMin,
                                  kMin + 1,
                                  -(std::int64_t{1} << 62)};
constexpr std::uint64_t kPtrs[] = {
    0,     1,           8,          256,        0x7f000000,   0xdeadbeef,
    ~0ull, ~0ull - 255, 1ull << 63, 1ull << 48, 0x51000001ull};
std::int64_t int_value(FuzzedDataProvider& p) {
  if (p.ConsumeIntegralInRange<int>(0, 7) != 0) return p.PickValueInArray(kInts);
  return p.ConsumeIntegral<std::int64_t>();  // raw value
}

std::int64_t small_dim(FuzzedDataProvider& p) {
  // Mostly ordinary sizes, so that deeper rules are reached.
  if (p.ConsumeIntegralInRange<int>(0, 3) != 0) return p.ConsumeIntegralInRange<int>(0, 5);
  return int_value(p);
}

// Everything an InterfaceFields refers to by view or pointer, kept alive alongside it.
struct Decoded {
  cai::InterfaceFields fields;
  std::string typestr;
  std::optional<cai::Interface> mask;  // validated mask, pointed to by fields.mask
  bool mask_invalid = false;           // the mask's own descriptor was rejected
};

cai::Presence presence(FuzzedDataProvider& p) {
  return p.PickValueInArray({cai::Presence::absent, cai::Presence::none, cai::Presence::given});
}

void check_error(const cai::Error& e);

void decode(FuzzedDataProvider& p, Decoded& out, int depth, cai::TypestrOptions options) {
  cai::InterfaceFields& f = out.fields;
  // Required keys are present most of the time, so that the later rules run.
  f.has_shape = p.ConsumeIntegralInRange<int>(0, 15) != 0;
  f.has_typestr = p.ConsumeIntegralInRange<int>(0, 15) != 0;
  f.has_data = p.ConsumeIntegralInRange<int>(0, 15) != 0;
  f.has_version = p.ConsumeIntegralInRange<int>(0, 15) != 0;
  f.has_descr = p.ConsumeIntegralInRange<int>(0, 3) == 0;
  f.strides_state = presence(p);
  f.stream_state = presence(p);
  f.mask_state = depth < 4 ? presence(p) : cai::Presence::absent;

  std::size_t ndim = p.ConsumeIntegralInRange<std::size_t>(0, 4);
  if (p.ConsumeIntegralInRange<int>(0, 15) == 0)
    ndim = p.ConsumeIntegralInRange<std::size_t>(0, 69);  // past max_ndim (64) now and then
  for (std::size_t i = 0; i < ndim; ++i) f.shape.push_back(small_dim(p));

  out.typestr = cai_fuzz::typestr_value(p);
  f.typestr = out.typestr;

  f.ptr = p.ConsumeIntegralInRange<int>(0, 7) != 0 ? p.PickValueInArray(kPtrs)
                                                   : p.ConsumeIntegral<std::uint64_t>();
  f.read_only = p.ConsumeBool();
  f.version =
      p.ConsumeIntegralInRange<int>(0, 3) != 0 ? p.ConsumeIntegralInRange<int>(0, 4) : int_value(p);

  if (f.strides_state == cai::Presence::given) {
    std::size_t n = ndim;
    if (p.ConsumeIntegralInRange<int>(0, 7) == 0)
      n = p.ConsumeIntegralInRange<std::size_t>(0, 69);  // wrong length
    for (std::size_t i = 0; i < n; ++i)
      f.strides.push_back(p.ConsumeBool() ? (p.ConsumeIntegralInRange<std::int64_t>(-2, 6)) * 8
                                          : int_value(p));
  }
  if (f.has_descr) f.descr = cai_fuzz::decode_descr(p, 1, 36);
  if (f.stream_state == cai::Presence::given)
    f.stream = p.ConsumeBool() ? p.ConsumeIntegralInRange<int>(0, 3) : int_value(p);
  if (f.mask_state == cai::Presence::given) {
    if (p.ConsumeIntegralInRange<int>(0, 255) == 0) {
      f.mask = nullptr;  // a binding that forgot to validate the mask: must be an Error
      return;
    }
    Decoded m;
    decode(p, m, depth + 1, options);
    if (m.mask_invalid) {
      out.mask_invalid = true;
      return;
    }
    try {
      out.mask = cai::validate_interface(m.fields, options);
    } catch (const cai::Error& e) {
      check_error(e);
      out.mask_invalid = true;
      return;
    }
    f.mask = &*out.mask;
  }
}

constexpr std::string_view kKeys[] = {"__cuda_array_interface__: ",
                                      "shape: ",
                                      "typestr: ",
                                      "data: ",
                                      "version: ",
                                      "strides: ",
                                      "descr",
                                      "mask: ",
                                      "stream: "};

void check_error(const cai::Error& e) {
  const std::string_view msg = e.what();
  check(!msg.empty());
  // Every message starts with the key it concerns (docs/core-interface.md).
  check(std::ranges::any_of(kKeys, [&](std::string_view k) { return msg.starts_with(k); }));
}

void check_accepted(const cai::InterfaceFields& f, const cai::Interface& itf) {
  check(f.has_shape && f.has_typestr && f.has_data && f.has_version);
  check(f.version >= 0);
  check(itf.version >= 0 && itf.version <= cai::latest_interface_version);
  check(itf.version == std::min<std::int64_t>(f.version, cai::latest_interface_version));
  check(std::ranges::equal(itf.layout.shape(), f.shape));
  check(itf.layout.strides().size() == f.shape.size());
  check(itf.layout.itemsize() == itf.dtype.itemsize());
  check(itf.strides_given == (f.strides_state == cai::Presence::given));
  if (itf.strides_given) check(std::ranges::equal(itf.layout.strides(), f.strides));
  for (std::int64_t d : itf.layout.shape()) check(d >= 0);
  check(itf.readonly == f.read_only);
  if (itf.layout.size() == 0) {
    check(itf.ptr == 0);
    if (itf.version >= 2) check(f.ptr == 0);
  } else {
    // Elements of item size 0 occupy no bytes and may have a null pointer.
    check(itf.ptr == f.ptr && (itf.ptr != 0 || itf.layout.nbytes() == 0));
  }
  if (f.stream_state == cai::Presence::given) {
    check(itf.stream.has_value() && *itf.stream == static_cast<std::uint64_t>(f.stream));
    check(*itf.stream != 0 && f.stream > 0);
  } else {
    check(!itf.stream.has_value());
  }
  if (f.mask_state == cai::Presence::given) {
    check(itf.version >= 1);
    check(itf.mask != nullptr);
    check(std::ranges::equal(itf.mask->layout.shape(), itf.layout.shape()));
    const cai::Kind k = itf.mask->dtype.kind();
    check(k == cai::Kind::boolean || k == cai::Kind::signed_int || k == cai::Kind::unsigned_int);
  } else {
    check(itf.mask == nullptr);
  }
  // Layout's invariants: element count and extent fit.
  const auto extent = itf.layout.extent();
  check(extent.lo <= extent.hi);
  check(itf.layout.nbytes() >= 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider p(data, size);
  const cai::TypestrOptions options{.v2_as_bfloat16 = p.ConsumeBool()};
  Decoded d;
  decode(p, d, 0, options);
  if (d.mask_invalid) return 0;
  cai::Interface itf;
  try {
    itf = cai::validate_interface(d.fields, options);
  } catch (const cai::Error& e) {
    check_error(e);
    return 0;
  }
  check_accepted(d.fields, itf);
  // A copy (what the binding keeps) holds the same.
  const cai::Interface copy = itf;
  check(copy.layout == itf.layout && copy.dtype == itf.dtype && copy.ptr == itf.ptr);
  return 0;
}
