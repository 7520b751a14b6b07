#pragma once

// The CUDA Array Interface descriptor (versions 0 to 3) and its validation. A binding reads
// the Python dict into InterfaceFields, checking only Python types; every CAI rule is
// applied here, so that all messages are written in one place.

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "cai/core/dims.h"
#include "cai/core/dtype.h"
#include "cai/core/layout.h"

namespace cai {

/// The newest CAI version cai knows. Higher versions are read with its rules.
inline constexpr int latest_interface_version = 3;
/// How deeply cai follows masks of masks (a mask's own `mask` key, ...) when it reads them, from
/// a producer, a pickled IPC handle or a Dask header: deeper is refused (a cycle, or hostile).
inline constexpr int max_mask_depth = 8;

struct Interface;

/// Whether an optional key was absent, None, or given a value.
enum class Presence : std::uint8_t { absent, none, given };

/// What a binding read out of a `__cuda_array_interface__` dict, unvalidated.
struct InterfaceFields {
  bool has_shape = false;
  Dims shape;  ///< as given; may hold negatives
  bool has_typestr = false;
  std::string_view typestr;  ///< must stay alive during validate_interface
  /// The typestr as parsed before (a binding's cache of DType::from_typestr), or null.
  const DType* dtype = nullptr;
  bool has_data = false;
  std::uint64_t ptr = 0;
  bool read_only = false;
  bool has_version = false;
  std::int64_t version = 0;

  Presence strides_state = Presence::absent;
  Dims strides;            ///< bytes; read when strides_state == given
  bool has_descr = false;  ///< a binding treats `descr: None` as absent
  std::vector<DescrEntry> descr;
  Presence mask_state = Presence::absent;
  /// When mask_state == given: the mask object's own descriptor, already validated by the
  /// binding (recursively). Copied, not kept.
  const Interface* mask = nullptr;
  Presence stream_state = Presence::absent;
  std::int64_t stream = 0;  ///< as given; may be 0 or negative
};

/// A validated descriptor.
struct Interface {
  /// The rules applied: the given version, or 3 for anything above.
  int version = latest_interface_version;
  DType dtype;    ///< from typestr, or the structured type of descr
  Layout layout;  ///< strides always filled: C strides when absent or None
  bool strides_given = false;
  std::uint64_t ptr = 0;  ///< 0 for every zero-size array
  bool readonly = false;
  std::optional<std::uint64_t> stream;    ///< nullopt: no synchronization needed
  std::shared_ptr<const Interface> mask;  ///< null: every element is valid
};

/// Applies every rule of the CAI, versions 0-3; throws Error (value_error, overflow, or what
/// DType raises for typestr/descr) with a message naming the key, the value and the rule.
Interface validate_interface(const InterfaceFields& fields, TypestrOptions options = {});

/// The CAI's rule for a mask of data of `shape`: the same shape, bool or integer elements
/// (read as true/false). Throws Error(value_error) "<key>: ..." naming what differs; `key` is
/// "mask" in a CAI dict, or says where else a mask came from.
void check_mask(std::string_view key, std::span<const std::int64_t> shape,
                std::span<const std::int64_t> mask_shape, const DType& mask_dtype);

/// The one wording of the CAI rule that forbids stream 0 (ambiguous between no stream, the
/// legacy default stream and the per-thread default stream), for every entry point that can
/// meet it. `subject` ends where the 0 goes ("stream:", "copy_async(): stream",
/// "__dlpack__(): stream="); `use` lists what the caller may pass instead.
std::string stream_zero_message(std::string_view subject, std::string_view use =
                                                              "1 (legacy default), 2 (per-thread "
                                                              "default) or a stream handle");

/// For a binding that finds a value of the wrong Python type: throws Error(type_error)
/// "<key>: expected <expected>, got <got>".
[[noreturn]] void throw_key_type_error(std::string_view key, std::string_view got,
                                       std::string_view expected);

}  // namespace cai
