#include "cai/core/format.h"

#include <cstdio>

namespace cai::detail {

std::string hex(std::uint64_t v) {
  char buf[2 + 16 + 1];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string range_text(std::uint64_t lo, std::uint64_t bytes) {
  std::string s = "[";  // built by appending: GCC 12 warns falsely on "[" + string
  s.append(hex(lo)).append("+").append(std::to_string(bytes)).append(")");
  return s;
}

std::string cuda_version_text(int version) {
  return std::to_string(version / 1000) + "." + std::to_string((version % 1000) / 10);
}

}  // namespace cai::detail
