#pragma once

// What the fuzz targets share: the invariant check and a reader that turns the fuzzer's bytes
// into values (past the end it reads zeros, so every input decodes).

#include <cstddef>
#include <cstdint>
#include <string>

namespace cai_fuzz {

// Stops the fuzzer on a broken invariant (a crash is what libFuzzer reports).
inline void check(bool ok) {
  if (!ok) __builtin_trap();
}

class Reader {
 public:
  Reader(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  std::uint8_t byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  std::uint64_t u64() {
    std::uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v = (v << 8) | byte();
    return v;
  }
  std::string bytes(std::size_t n) {
    std::string out;
    while (n-- > 0 && pos_ < size_) out += static_cast<char>(data_[pos_++]);
    return out;
  }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

}  // namespace cai_fuzz
