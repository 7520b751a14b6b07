#pragma once

// What the fuzz targets share: the invariant check and the descr decoder. Bytes are turned
// into values by LLVM's FuzzedDataProvider (past the end it gives zeros and empty strings, so
// every input decodes).

#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <string>
#include <vector>

#include "cai/core/dtype.h"

namespace cai_fuzz {

// Stops the fuzzer on a broken invariant (a crash is what libFuzzer reports).
inline void check(bool ok) {
  if (!ok) __builtin_trap();
}

// Typestrs on the edges of the grammar (sizes, byte orders, units, the empty string).
inline constexpr const char* kTypestrs[] = {"<f4", "<f8",     ">f8", "|b1", "<i2", "|u1",  "<c16",
                                            "<i8", "|S5",     "<U3", "|V4", "<V2", "|V0",  "|V16",
                                            "<V8", "<M8[ns]", ">m8", "|O",  "",    "<f16", "<t8",
                                            "<f3", "<f2",     "|i1", "=f4", "<b1", "<c8",  "|S0"};
inline constexpr const char* kNames[] = {"", "", "a", "b", "f0", "f1", "x"};
inline constexpr std::int64_t kSubarrayDims[] = {0, 1, 2, 3, -1, 2147483647, std::int64_t{1} << 31};

// A typestr: mostly one of kTypestrs, sometimes raw bytes.
inline std::string typestr_value(FuzzedDataProvider& p) {
  if (p.ConsumeIntegralInRange<int>(0, 15) != 0) return p.PickValueInArray(kTypestrs);
  return p.ConsumeRandomLengthString(12);
}

// A descr tree (NumPy's list of (name, type[, shape]) entries). Nesting may go past the
// library's limit of 32 levels (up to max_depth) so that the limit itself is exercised.
inline std::vector<cai::DescrEntry> decode_descr(FuzzedDataProvider& p, int depth, int max_depth) {
  std::vector<cai::DescrEntry> out;
  const int count = p.ConsumeIntegralInRange<int>(0, 4);
  for (int i = 0; i < count; ++i) {
    cai::DescrEntry e;
    e.name = p.PickValueInArray(kNames);
    if (depth < max_depth && p.ConsumeBool())
      e.fields = decode_descr(p, depth + 1, max_depth);
    else
      e.typestr = typestr_value(p);
    for (int d = p.ConsumeIntegralInRange<int>(0, 3); d > 0; --d)
      e.shape.push_back(p.PickValueInArray(kSubarrayDims));
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace cai_fuzz
