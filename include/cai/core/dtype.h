#pragma once

// Element types as the array interface (NumPy typestr / descr) and DLPack describe them.

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cai/core/dlpack.h"

namespace cai {

/// Byte order of a DType as stored; '=' in a typestr is resolved to the host's order at parse.
enum class ByteOrder : char { little = '<', big = '>', not_applicable = '|' };

/// NumPy's kind characters.
enum class Kind : char {
  bitfield = 't',  ///< in the grammar, but rejected (NumPy does not support it either)
  boolean = 'b',
  signed_int = 'i',
  unsigned_int = 'u',
  floating = 'f',
  complex = 'c',
  timedelta = 'm',
  datetime = 'M',
  object = 'O',
  bytes = 'S',
  unicode = 'U',
  raw = 'V',  ///< void: opaque bytes, structured types and the Extended formats
};

/// Formats DLPack can name but NumPy has no typestr for. They carry Kind::raw and their
/// storage itemsize (2 for bfloat16, 1 for the rest; sub-byte ones count one padded byte).
enum class Extended : std::uint8_t {
  none,
  bfloat16,
  float8_e3m4,
  float8_e4m3,
  float8_e4m3b11fnuz,
  float8_e4m3fn,
  float8_e4m3fnuz,
  float8_e5m2,
  float8_e5m2fnuz,
  float8_e8m0fnu,
  float6_e2m3fn,
  float6_e3m2fn,
  float4_e2m1fn,
  int4,  ///< ml_dtypes' sub-byte integers, one per byte (DLPack kDLInt/kDLUInt, bits 4 or 2)
  uint4,
  int2,
  uint2,
};

struct TypestrOptions {
  /// Read a native-order '<V2' (or '=V2') as bfloat16, the way PyTorch and ml_dtypes export
  /// it. Off by default because NumPy reads it as two opaque bytes.
  bool v2_as_bfloat16 = false;
};

/// One entry of a NumPy descr list: (name, typestr[, shape]) or (name, [entries...][, shape]).
struct DescrEntry {
  std::string name;                 ///< "" with a raw 'V' type marks padding
  std::string typestr;              ///< the type when fields is empty
  std::vector<DescrEntry> fields;   ///< non-empty: a nested structured type
  std::vector<std::int64_t> shape;  ///< sub-array shape; empty for a scalar field

  friend bool operator==(const DescrEntry&, const DescrEntry&) = default;
};

struct Field;

/// An element type. Cheap to copy: non-structured types are a few bytes with no heap;
/// structured types share their immutable field list.
class DType {
 public:
  using DescrEntry = cai::DescrEntry;
  using Field = cai::Field;

  /// '|V0', the empty raw type (a placeholder; NumPy's default float64 would surprise in C++).
  DType() = default;

  /// Parses an array-interface typestr such as '<f4', '|S5', '<U3' or '<M8[ns]'.
  /// Throws Error(value_error) starting "typestr: "; bit fields are not_implemented.
  static DType from_typestr(std::string_view s, TypestrOptions options = {});

  /// Builds a structured type from a descr list exactly as np.dtype(list) lays it out
  /// (packed, no alignment). Unnamed raw entries are padding. Errors start "descr: ".
  static DType from_descr(std::span<const DescrEntry> descr, TypestrOptions options = {});

  /// DLPack -> DType. Unknown codes are value_error; lanes != 1 and types cai cannot hold
  /// are not_implemented. Messages start "from_dlpack: ".
  static DType from_dlpack(DLDataType t);

  /// DType -> DLPack for native-order numbers, bool and Extended formats; anything else is
  /// not_implemented with a message starting "to_dlpack: ".
  DLDataType to_dlpack() const;

  /// The Extended format of that name ("bfloat16", "float8_e4m3fn", ...: the names of the
  /// ml_dtypes package and of NumPy's dtype.name for its types), or nullopt for other names.
  static std::optional<DType> from_extended_name(std::string_view name);
  /// The name of an Extended format, as from_extended_name takes it; "" for other types.
  std::string_view extended_name() const noexcept;
  /// str() for messages, with the Extended format's name, which str() cannot show:
  /// "|V1 (float8_e4m3fn)".
  std::string display_name() const;

  /// What NumPy's dtype.str prints ('|b1', '<i4', '|O', '<U3', '<M8[ns]', '|V12', ...).
  /// bfloat16 prints '<V2' (host order); the other Extended formats '|V1'.
  std::string str() const;

  /// What NumPy's dtype.descr gives; padding entries ('', '|Vn') fill gaps.
  /// A non-structured type gives [('', str())].
  std::vector<DescrEntry> descr() const;

  Kind kind() const noexcept { return kind_; }
  ByteOrder byte_order() const noexcept { return order_; }
  std::int64_t itemsize() const noexcept { return itemsize_; }
  Extended extended() const noexcept { return extended_; }
  /// False only for an order opposite to the host's; '|' counts as native.
  bool is_native() const noexcept;
  bool is_structured() const noexcept { return structure_ != nullptr; }
  /// The datetime/timedelta unit as NumPy prints it between brackets ("ns", "10us");
  /// "" for generic units and for other kinds.
  std::string_view datetime_unit() const noexcept { return {unit_, unit_len_}; }
  /// The named fields in declaration order (padding excluded); empty unless structured.
  std::span<const Field> fields() const noexcept;

  friend bool operator==(const DType& a, const DType& b) noexcept;

 private:
  struct Structure;
  DType(Kind kind, ByteOrder order, std::int64_t itemsize, Extended extended = Extended::none)
      : itemsize_(itemsize), kind_(kind), order_(order), extended_(extended) {}
  static DType parse_typestr(std::string_view s, TypestrOptions options);  // the full grammar
  // prefix is the dotted path of the enclosing fields, for messages.
  static DType build_struct(std::span<const DescrEntry> descr, const TypestrOptions& options,
                            int depth, const std::string& prefix);

  std::shared_ptr<const Structure> structure_;
  std::int64_t itemsize_ = 0;
  Kind kind_ = Kind::raw;
  ByteOrder order_ = ByteOrder::not_applicable;
  Extended extended_ = Extended::none;
  std::uint8_t unit_len_ = 0;
  char unit_[12] = {};  // fits "2147483647us", the longest unit NumPy accepts
};

/// A named field of a structured DType.
struct Field {
  std::string name;
  DType type;                       ///< the element type (the base type for a sub-array)
  std::vector<std::int64_t> shape;  ///< sub-array shape; empty for a scalar field
  std::int64_t offset = 0;          ///< bytes from the start of the enclosing element

  friend bool operator==(const Field&, const Field&) = default;
};

}  // namespace cai
