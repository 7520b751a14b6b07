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
#include "fuzz_reader.h"

namespace {

using cai_fuzz::check;
using cai_fuzz::Reader;

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
constexpr const char* kTypestrs[] = {"<f4", "<f8", ">f8",  "|b1", "<i2",  "|u1", "<c16",
                                     "<i8", "|S5", "<U3",  "|V4", "<V2",  "|V0", "<M8[ns]",
                                     ">m8", "|O",  "<f16", "<t8", "<f3",  "",    "<f2",
                                     "|i1", "=f4", "<b1",  "<V8", "|V16", "<c8", "|S0"};
constexpr const char* kNames[] = {"", "", "a", "b", "f0", "f1", "x"};
constexpr std::int64_t kSubDims[] = {0, 1, 2, 3, -1, 2147483647, std::int64_t{1} << 31};

std::int64_t int_value(Reader& r) {
  const std::uint8_t b = r.byte();
  if (b < 0xE0) return kInts[b % std::size(kInts)];
  return static_cast<std::int64_t>(r.u64());  // raw value
}

std::int64_t small_dim(Reader& r) {
  const std::uint8_t b = r.byte();
  if (b < 0xC0) return b % 6;  // mostly ordinary sizes, so that deeper rules are reached
  return int_value(r);
}

std::string typestr_value(Reader& r) {
  const std::uint8_t b = r.byte();
  if (b < 0xD0) return kTypestrs[b % std::size(kTypestrs)];
  return r.bytes(r.byte() % 12);
}

std::vector<cai::DescrEntry> decode_descr(Reader& r, int depth) {
  std::vector<cai::DescrEntry> out;
  const int count = r.byte() % 5;
  for (int i = 0; i < count; ++i) {
    const std::uint8_t flags = r.byte();
    cai::DescrEntry e;
    e.name = kNames[r.byte() % std::size(kNames)];
    if ((flags & 1) != 0 && depth < 36) {
      e.fields = decode_descr(r, depth + 1);
    } else {
      e.typestr = typestr_value(r);
    }
    for (int d = (flags >> 2) % 4; d > 0; --d)
      e.shape.push_back(kSubDims[r.byte() % std::size(kSubDims)]);
    out.push_back(std::move(e));
  }
  return out;
}

// Everything an InterfaceFields refers to by view or pointer, kept alive alongside it.
struct Decoded {
  cai::InterfaceFields fields;
  std::string typestr;
  std::optional<cai::Interface> mask;  // validated mask, pointed to by fields.mask
  bool mask_invalid = false;           // the mask's own descriptor was rejected
};

cai::Presence presence(std::uint8_t bits) {
  switch (bits % 3) {
    case 0:
      return cai::Presence::absent;
    case 1:
      return cai::Presence::none;
    default:
      return cai::Presence::given;
  }
}

void check_error(const cai::Error& e);

void decode(Reader& r, Decoded& out, int depth, cai::TypestrOptions options) {
  cai::InterfaceFields& f = out.fields;
  const std::uint8_t present = r.byte();
  // Required keys are present most of the time (low bits clear), so the later rules run.
  f.has_shape = (present & 0x01) == 0;
  f.has_typestr = (present & 0x02) == 0;
  f.has_data = (present & 0x04) == 0;
  f.has_version = (present & 0x08) == 0;
  f.has_descr = (present & 0x30) == 0x30;
  const std::uint8_t optional = r.byte();
  f.strides_state = presence(optional);
  f.stream_state = presence(optional >> 2);
  f.mask_state = depth < 4 ? presence(optional >> 4) : cai::Presence::absent;

  std::size_t ndim = r.byte() % 6;
  if (ndim == 5) ndim = r.byte() % 70;  // past max_ndim (64) now and then
  for (std::size_t i = 0; i < ndim; ++i) f.shape.push_back(small_dim(r));

  out.typestr = typestr_value(r);
  f.typestr = out.typestr;

  const std::uint8_t pb = r.byte();
  f.ptr = pb < 0xE0 ? kPtrs[pb % std::size(kPtrs)] : r.u64();
  f.read_only = (r.byte() & 1) != 0;

  const std::uint8_t vb = r.byte();
  f.version = vb < 0xC0 ? vb % 5 : int_value(r);

  if (f.strides_state == cai::Presence::given) {
    std::size_t n = ndim;
    const std::uint8_t sb = r.byte();
    if (sb >= 0xE0) n = r.byte() % 70;  // wrong length
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint8_t b = r.byte();
      f.strides.push_back(b < 0x80 ? (static_cast<std::int64_t>(b % 9) - 2) * 8 : int_value(r));
    }
  }
  if (f.has_descr) f.descr = decode_descr(r, 1);
  if (f.stream_state == cai::Presence::given) {
    const std::uint8_t b = r.byte();
    f.stream = b < 0x80 ? b % 4 : int_value(r);
  }
  if (f.mask_state == cai::Presence::given) {
    const std::uint8_t mb = r.byte();
    if (mb == 0xFF) {
      f.mask = nullptr;  // a binding that forgot to validate the mask: must be an Error
      return;
    }
    Decoded m;
    decode(r, m, depth + 1, options);
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
  if (size == 0) return 0;
  const cai::TypestrOptions options{.v2_as_bfloat16 = (data[0] & 1) != 0};
  Reader r(data + 1, size - 1);
  Decoded d;
  decode(r, d, 0, options);
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
