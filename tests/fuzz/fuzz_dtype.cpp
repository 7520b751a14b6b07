// libFuzzer target for DType: raw bytes as a typestr, and bytes decoded into a DescrEntry tree.
// Only cai::Error may escape the library; every accepted input must round-trip.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "cai/core/dtype.h"
#include "cai/core/error.h"
#include "fuzz_reader.h"

namespace {

using cai_fuzz::check;
using cai_fuzz::Reader;

constexpr const char* kNames[] = {"", "", "a", "b", "f0", "f1", "x"};
constexpr const char* kTypestrs[] = {"<f4", ">f8", "|b1",  "<i2", "|u1", "<c16",
                                     "|S5", "<U3", "|V4",  "<V2", "|V0", "<M8[ns]",
                                     ">m8", "|O",  "<f16", "<t8", "<f3", ""};
constexpr std::int64_t kDims[] = {0, 1, 2, 3, -1, 2147483647, std::int64_t{1} << 31};

// Nesting may go past the library's limit of 32 so that the limit itself is exercised.
std::vector<cai::DescrEntry> decode(Reader& r, int depth) {
  std::vector<cai::DescrEntry> out;
  const int count = r.byte() % 5;
  for (int i = 0; i < count; ++i) {
    const std::uint8_t flags = r.byte();
    cai::DescrEntry e;
    e.name = kNames[r.byte() % std::size(kNames)];
    if ((flags & 1) != 0 && depth < 40) {
      e.fields = decode(r, depth + 1);
    } else if ((flags & 2) != 0) {
      e.typestr = r.bytes(r.byte() % 12);
    } else {
      e.typestr = kTypestrs[r.byte() % std::size(kTypestrs)];
    }
    for (int d = (flags >> 2) % 4; d > 0; --d)
      e.shape.push_back(kDims[r.byte() % std::size(kDims)]);
    out.push_back(std::move(e));
  }
  return out;
}

void typestr_case(std::string_view s, cai::TypestrOptions options) {
  cai::DType t;
  try {
    t = cai::DType::from_typestr(s, options);
  } catch (const cai::Error&) {
    return;
  }
  check(t.itemsize() >= 0);
  check(cai::DType::from_typestr(t.str(), options) == t);
  try {
    const DLDataType d = t.to_dlpack();
    check(cai::DType::from_dlpack(d) == t);
  } catch (const cai::Error&) {
  }
}

void check_layout(const cai::DType& t) {
  std::int64_t end = 0;
  for (const cai::Field& f : t.fields()) {
    check(f.offset >= end);
    std::int64_t count = 1;
    for (std::int64_t d : f.shape) count *= d;
    end = f.offset + f.type.itemsize() * count;
    check(end <= t.itemsize());
    check_layout(f.type);
  }
}

void descr_case(Reader& r, cai::TypestrOptions options) {
  const std::vector<cai::DescrEntry> entries = decode(r, 1);
  cai::DType t;
  try {
    t = cai::DType::from_descr(entries, options);
  } catch (const cai::Error&) {
    return;
  }
  check(t.is_structured());
  check_layout(t);
  // NumPy's descr is a fixed point after one step (empty nested lists become '|V0').
  const std::vector<cai::DescrEntry> d1 = t.descr();
  const cai::DType t2 = cai::DType::from_descr(d1, options);
  check(t2.itemsize() == t.itemsize());
  check(t2.str() == t.str());
  check(t2.descr() == d1);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const cai::TypestrOptions options{.v2_as_bfloat16 = (data[0] & 1) != 0};
  typestr_case(std::string_view(reinterpret_cast<const char*>(data + 1), size - 1), options);
  if (size >= 2) {
    const std::uint8_t code = data[1];
    const std::uint8_t bits = size >= 3 ? data[2] : 0;
    try {
      const cai::DType t = cai::DType::from_dlpack(DLDataType{code, bits, 1});
      const DLDataType back = t.to_dlpack();
      check(back.code == code && back.bits == bits && back.lanes == 1);
    } catch (const cai::Error&) {
    }
  }
  Reader r(data + 1, size - 1);
  descr_case(r, options);
  return 0;
}
