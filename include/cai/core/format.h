#pragma once

// How cai's messages write addresses, byte ranges and CUDA versions, for every layer (and the
// simulated driver) to write them alike. Not part of the API: names in cai::detail may change.

#include <cstdint>
#include <string>

namespace cai::detail {

/// "0x7f12..." for messages.
std::string hex(std::uint64_t v);
/// "[0x7f12...+64)": `bytes` bytes from `lo`, for messages.
std::string range_text(std::uint64_t lo, std::uint64_t bytes);
/// "12.0" for a CUDA version as the driver reports it (12000).
std::string cuda_version_text(int version);

}  // namespace cai::detail
