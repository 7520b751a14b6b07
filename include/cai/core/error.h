#pragma once

#include <concepts>
#include <exception>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace cai {

/// What went wrong, chosen so that each maps to one Python exception type.
enum class Errc : int {
  type_error,       ///< a value of the wrong type (Python TypeError)
  value_error,      ///< a value of the right type that breaks a rule (ValueError)
  index_error,      ///< an index or bound out of range (IndexError)
  overflow,         ///< arithmetic on sizes or strides overflowed int64 (OverflowError)
  not_implemented,  ///< valid input that cai does not support (NotImplementedError)
  buffer_error,     ///< a DLPack exchange that cannot be honoured (BufferError)
  device_error,     ///< the CUDA driver or the simulator failed (cai.DeviceError)
  race,             ///< the simulator saw two unordered conflicting accesses (cai.RaceError)
};

/// The one exception type of the library. The message starts with the entry point or the
/// key it concerns and says what was expected.
class Error : public std::exception {
 public:
  Error(Errc code, std::string message) : code_(code), message_(std::move(message)) {}
  Errc code() const noexcept { return code_; }
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  Errc code_;
  std::string message_;
};

/// Throws Error. A function rather than a throw expression so that call sites stay small;
/// inline so that header-only users (extension modules, which link no cai library) have it.
[[noreturn]] inline void throw_error(Errc code, std::string message) {
  throw Error(code, std::move(message));
}

/// The pieces a message is made of (throw_error below): text, a character, an integer. Other
/// types add overloads that argument-dependent lookup finds (Dims, in dims.h).
inline void append_part(std::string& out, std::string_view text) {
  out += text;
}
template <std::integral T>
void append_part(std::string& out, T value) {
  static_assert(!std::is_same_v<T, bool>, "say what a bool means in words");
  if constexpr (std::is_same_v<T, char>)
    out += value;
  else
    out += std::to_string(value);
}

/// Throws Error with the message `parts` concatenated (text, characters, integers). The
/// message is built here, cold and out of line, only when a check has failed: the check on a
/// hot path is its branch and one call, with no string code beside it (building the message
/// at the call site keeps that code, and its cleanups, among the hot instructions).
template <class... Parts>
[[noreturn, gnu::cold, gnu::noinline]] void throw_error(Errc code, const Parts&... parts) {
  std::string message;
  (append_part(message, parts), ...);
  throw Error(code, std::move(message));
}

}  // namespace cai
