// libFuzzer target for DType: raw bytes as a typestr, and bytes decoded into a DescrEntry tree.
// Only cai::Error may escape the library; every accepted input must round-trip.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "cai/core/dtype.h"
#include "cai/core/error.h"
#include "fuzz_common.h"

namespace {

using cai_fuzz::check;

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

void descr_case(FuzzedDataProvider& p, cai::TypestrOptions options) {
  const std::vector<cai::DescrEntry> entries = cai_fuzz::decode_descr(p, 1, 40);
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
  FuzzedDataProvider p(data, size);
  const cai::TypestrOptions options{.v2_as_bfloat16 = p.ConsumeBool()};
  typestr_case(p.ConsumeRandomLengthString(16), options);
  const auto code = p.ConsumeIntegral<std::uint8_t>();
  const auto bits = p.ConsumeIntegral<std::uint8_t>();
  try {
    const cai::DType t = cai::DType::from_dlpack(DLDataType{code, bits, 1});
    const DLDataType back = t.to_dlpack();
    check(back.code == code && back.bits == bits && back.lanes == 1);
  } catch (const cai::Error&) {
  }
  descr_case(p, options);
  return 0;
}
