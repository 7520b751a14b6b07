#include "cai/core/dtype.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cstring>
#include <limits>
#include <string>

#include "cai/core/error.h"

namespace cai {

// The field list of a structured type, shared by every copy of the DType.
struct DType::Structure {
  std::vector<Field> fields;
};

namespace {

constexpr ByteOrder kNativeOrder =
    std::endian::native == std::endian::little ? ByteOrder::little : ByteOrder::big;
constexpr char kNativeChar = static_cast<char>(kNativeOrder);

// NumPy keeps flexible item sizes and sub-array dimensions within a C int.
constexpr std::int64_t kMaxItemsize = 2147483647;
constexpr std::int64_t kMaxDim = 2147483647;
constexpr std::int64_t kMaxUnitMultiplier = 2147483647;
constexpr int kMaxDescrDepth = 32;

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

// Quotes user input for a message: non-printable bytes escaped, long input cut short, so
// hostile strings cannot flood logs or terminals.
std::string quote(std::string_view s) {
  constexpr std::size_t kMax = 64;
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "'";
  for (std::size_t i = 0; i < s.size() && i < kMax; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'') {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  if (s.size() > kMax) out += "...";
  out += "'";
  return out;
}

[[noreturn]] void typestr_error(std::string_view s, std::string_view what,
                                Errc code = Errc::value_error) {
  throw_error(code, "typestr: " + quote(s) + " " + std::string(what));
}

const char* kind_name(char k) {
  switch (k) {
    case 't':
      return "bit field";
    case 'b':
      return "boolean";
    case 'i':
      return "signed integer";
    case 'u':
      return "unsigned integer";
    case 'f':
      return "floating point";
    case 'c':
      return "complex";
    case 'm':
      return "timedelta";
    case 'M':
      return "datetime";
    case 'O':
      return "object";
    case 'S':
      return "bytes";
    case 'U':
      return "unicode";
    case 'V':
      return "raw (void)";
    default:
      return "unknown";
  }
}

// Item sizes NumPy accepts on a 64-bit host; null for kinds that take any size.
const char* allowed_sizes(char k) {
  switch (k) {
    case 'b':
      return "1";
    case 'i':
    case 'u':
      return "1, 2, 4 or 8";
    case 'f':
      return "2, 4, 8 or 16";
    case 'c':
      return "8, 16 or 32";
    case 'm':
    case 'M':
      return "8";
    case 'O':
      return "8 or none";
    default:
      return nullptr;
  }
}

bool size_allowed(char k, std::int64_t n) {
  switch (k) {
    case 'b':
      return n == 1;
    case 'i':
    case 'u':
      return n == 1 || n == 2 || n == 4 || n == 8;
    case 'f':
      return n == 2 || n == 4 || n == 8 || n == 16;
    case 'c':
      return n == 8 || n == 16 || n == 32;
    case 'm':
    case 'M':
      return n == 8;
    case 'O':
      return n == static_cast<std::int64_t>(sizeof(void*));
    case 'S':
    case 'V':
      return n <= kMaxItemsize;
    case 'U':
      return n <= kMaxItemsize / 4;
    default:
      return false;
  }
}

ByteOrder resolve(char order) {
  if (order == '<') return ByteOrder::little;
  if (order == '>') return ByteOrder::big;
  return kNativeOrder;  // '=', '|' (NumPy treats it as native here) or none written
}

bool is_known_unit(std::string_view u) {
  static constexpr std::string_view kUnits[] = {"Y",  "M",  "W",  "D",  "h",  "m",  "s",
                                                "ms", "us", "ns", "ps", "fs", "as", "generic"};
  return std::find(std::begin(kUnits), std::end(kUnits), u) != std::end(kUnits);
}

// Both operands are non-negative here (sizes and validated dimensions).
std::int64_t checked_mul(std::int64_t a, std::int64_t b, const std::string& what) {
  if (a != 0 && b > std::numeric_limits<std::int64_t>::max() / a) {
    throw_error(Errc::value_error, what);
  }
  return a * b;
}

std::string decimal(std::int64_t v) {
  char buf[24];
  auto res = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, res.ptr);
}

// The datetime unit of typestr `s` at `i` ('[' [multiplier] unit ']'), written to `unit`
// without the brackets ("" for generic, "ns", "500ps"); returns its length and moves `i` past it.
std::size_t parse_unit(std::string_view s, std::size_t& i, char (&unit)[12]) {
  const std::size_t close = s.find(']', i);
  if (close == std::string_view::npos) {
    typestr_error(s, "has an unterminated datetime unit; expected e.g. '<M8[ns]'");
  }
  std::size_t j = i + 1;
  std::int64_t mult = 0;
  const std::size_t mult_begin = j;
  while (j < close && is_digit(s[j])) {
    if (mult <= kMaxUnitMultiplier) mult = mult * 10 + (s[j] - '0');
    ++j;
  }
  const bool has_mult = j != mult_begin;
  std::string_view name = s.substr(j, close - j);
  if (name == "\xce\xbcs") name = "us";  // NumPy also accepts the Greek mu
  if (!is_known_unit(name)) {
    std::string why = "has an unknown datetime unit " + quote(name) +
                      "; expected one of Y, M, W, D, h, m, s, ms, us, ns, ps, fs, as or generic";
    if (name.find('/') != std::string_view::npos) {
      why += " (unit divisors are not supported; write '[500ps]' rather than '[ns/2]')";
    }
    typestr_error(s, why);
  }
  if (has_mult && (mult == 0 || mult > kMaxUnitMultiplier)) {
    typestr_error(s, "has a datetime unit multiplier outside 1..2147483647");
  }
  i = close + 1;
  std::size_t len = 0;
  if (name == "generic") return 0;
  if (has_mult && mult != 1) {
    len = static_cast<std::size_t>(std::to_chars(unit, unit + sizeof unit, mult).ptr - unit);
  }
  std::copy(name.begin(), name.end(), unit + len);
  return len + name.size();
}

[[noreturn]] void refuse_item_size(std::string_view s, char k, std::int64_t n) {
  const char* sizes = allowed_sizes(k);
  std::string why = "has an item size " + (n >= (std::int64_t{1} << 40) ? ">2^40" : decimal(n)) +
                    " that kind '" + k + "' (" + kind_name(k) + ") does not allow; expected ";
  if (sizes != nullptr) {
    why += sizes;
  } else if (k == 'U') {
    why += "at most 536870911 characters (4 bytes each; NumPy's limit)";
  } else {
    why += "at most 2147483647 bytes (NumPy's limit)";
  }
  typestr_error(s, why);
}

}  // namespace

// ---- typestr -------------------------------------------------------------------------------

DType DType::from_typestr(std::string_view s, TypestrOptions options) {
  // Fast path for the common three-character numeric forms such as '<f4' and '|b1'.
  if (s.size() == 3 && s[0] != '>') {
    const char k = s[1];
    const std::int64_t n = s[2] - '0';
    const bool order_ok = s[0] == '<' || s[0] == '|' || s[0] == '=';
    const ByteOrder order = s[0] == '<' ? ByteOrder::little : kNativeOrder;
    if (order_ok) {
      if ((k == 'f' && (n == 2 || n == 4 || n == 8)) || (k == 'c' && n == 8)) {
        return DType(static_cast<Kind>(k), order, n);
      }
      if ((k == 'i' || k == 'u') && (n == 2 || n == 4 || n == 8)) {
        return DType(static_cast<Kind>(k), order, n);
      }
      if ((k == 'i' || k == 'u') && n == 1) {
        return DType(static_cast<Kind>(k), ByteOrder::not_applicable, 1);
      }
      if (k == 'b' && n == 1) return DType(Kind::boolean, ByteOrder::not_applicable, 1);
    }
  }
  return parse_typestr(s, options);
}

// Kept out of from_typestr so the fast path above pays no large stack frame.
[[gnu::noinline]] DType DType::parse_typestr(std::string_view s, TypestrOptions options) {
  std::size_t i = 0;
  char order = '=';  // none written means native, as in NumPy
  if (!s.empty() && (s[0] == '<' || s[0] == '>' || s[0] == '|' || s[0] == '=')) {
    order = s[0];
    i = 1;
  }
  if (i == s.size()) {
    typestr_error(s, s.empty() ? "is empty; expected e.g. '<f4'"
                               : "has no kind character; expected one of t b i u f c m M O S U V");
  }
  const char k = s[i++];
  if (allowed_sizes(k) == nullptr && k != 'S' && k != 'U' && k != 'V' && k != 't') {
    typestr_error(s, "has an unknown kind " + quote(std::string_view(&k, 1)) +
                         "; expected one of t b i u f c m M O S U V");
  }

  // Saturates well above every limit so that a huge number stays huge without overflowing.
  std::int64_t n = 0;
  const std::size_t digits_begin = i;
  while (i < s.size() && is_digit(s[i])) {
    if (n < (std::int64_t{1} << 40)) n = n * 10 + (s[i] - '0');
    ++i;
  }
  const bool has_size = i != digits_begin;

  if (k == 't') {
    typestr_error(s, "is a bit field (kind 't'), which neither NumPy nor cai supports",
                  Errc::not_implemented);
  }
  if (!has_size && k != 'O') {
    typestr_error(s, std::string("has no item size; expected the kind '") + k +
                         "' followed by a size in bytes, e.g. '<" + k +
                         (k == 'b' ? "1'" : (k == 'f' ? "4'" : "8'")));
  }

  // Datetime unit: '[' [multiplier] unit ']'.
  char unit[12];
  std::size_t unit_len = 0;
  if ((k == 'm' || k == 'M') && i < s.size() && s[i] == '[') unit_len = parse_unit(s, i, unit);
  if (i != s.size()) {
    typestr_error(s, "has unexpected characters " + quote(s.substr(i)) + " after the item size");
  }

  if (has_size && !size_allowed(k, n)) refuse_item_size(s, k, n);

  switch (k) {
    case 'b':
      return DType(Kind::boolean, ByteOrder::not_applicable, 1);
    case 'i':
    case 'u':
      return DType(static_cast<Kind>(k), n == 1 ? ByteOrder::not_applicable : resolve(order), n);
    case 'f':
    case 'c':
      return DType(static_cast<Kind>(k), resolve(order), n);
    case 'm':
    case 'M': {
      DType t(static_cast<Kind>(k), resolve(order), 8);
      std::copy(unit, unit + unit_len, t.unit_);
      t.unit_len_ = static_cast<std::uint8_t>(unit_len);
      return t;
    }
    case 'O':
      return DType(Kind::object, ByteOrder::not_applicable,
                   static_cast<std::int64_t>(sizeof(void*)));
    case 'S':
      return DType(Kind::bytes, ByteOrder::not_applicable, n);
    case 'U':
      return DType(Kind::unicode, resolve(order), 4 * n);
    default:
      break;  // 'V'
  }
  if (options.v2_as_bfloat16 && n == 2 && order != '|' && resolve(order) == kNativeOrder) {
    return DType(Kind::raw, kNativeOrder, 2, Extended::bfloat16);
  }
  return DType(Kind::raw, ByteOrder::not_applicable, n);
}

std::string DType::str() const {
  std::string out;
  if (kind_ == Kind::raw) {
    out = extended_ == Extended::bfloat16 ? kNativeChar : '|';
    out += 'V';
    out += decimal(itemsize_);
    return out;
  }
  out = static_cast<char>(order_);
  out += static_cast<char>(kind_);
  switch (kind_) {
    case Kind::object:
      break;  // NumPy prints '|O' without a size
    case Kind::unicode:
      out += decimal(itemsize_ / 4);
      break;
    case Kind::timedelta:
    case Kind::datetime:
      out += '8';
      if (unit_len_ != 0) {
        out += '[';
        out += datetime_unit();
        out += ']';
      }
      break;
    default:
      out += decimal(itemsize_);
      break;
  }
  return out;
}

bool DType::is_native() const noexcept {
  return order_ == ByteOrder::not_applicable || order_ == kNativeOrder;
}

std::span<const Field> DType::fields() const noexcept {
  if (!structure_) return {};
  return structure_->fields;
}

bool operator==(const DType& a, const DType& b) noexcept {
  if (a.kind_ != b.kind_ || a.order_ != b.order_ || a.itemsize_ != b.itemsize_ ||
      a.extended_ != b.extended_ || a.unit_len_ != b.unit_len_) {
    return false;
  }
  // Most types have no unit: no library call to compare empty strings.
  if (a.unit_len_ != 0 && std::memcmp(a.unit_, b.unit_, a.unit_len_) != 0) return false;
  if (a.structure_ == b.structure_) return true;
  if (!a.structure_ || !b.structure_) return false;
  return a.structure_->fields == b.structure_->fields;
}

// ---- descr ---------------------------------------------------------------------------------

DType DType::build_struct(std::span<const DescrEntry> entries, const TypestrOptions& options,
                          int depth, const std::string& prefix) {
  if (depth > kMaxDescrDepth) {
    throw_error(Errc::value_error, "descr: structured types nest deeper than " +
                                       decimal(kMaxDescrDepth) + " levels at field " +
                                       quote(prefix.substr(0, prefix.size() - 1)));
  }
  auto s = std::make_shared<Structure>();
  std::vector<Field>& fields = s->fields;
  fields.reserve(entries.size());
  std::int64_t offset = 0;
  for (std::size_t k = 0; k < entries.size(); ++k) {
    const DescrEntry& e = entries[k];
    // NumPy names an unnamed non-padding field f<index>.
    std::string name = e.name;
    if (name.empty()) name.append("f").append(decimal(static_cast<std::int64_t>(k)));
    const std::string where = "descr: field " + quote(prefix + name);

    DType type;
    if (!e.fields.empty()) {
      type = build_struct(e.fields, options, depth + 1, prefix + name + ".");
    } else {
      try {
        type = from_typestr(e.typestr, options);
      } catch (const Error& err) {
        throw_error(err.code(), where + ": " + err.what());
      }
    }

    std::int64_t count = 1;
    for (std::int64_t d : e.shape) {
      if (d < 0 || d > kMaxDim) {
        throw_error(Errc::value_error, where + " has a sub-array dimension " + decimal(d) +
                                           "; expected 0.." + decimal(kMaxDim));
      }
      count = checked_mul(count, d, where + " is too large: its element count overflows");
    }
    const std::int64_t size =
        checked_mul(type.itemsize(), count, where + " is too large: its size overflows");
    // NumPy keeps every dtype size within a C int (and silently wraps a struct past it).
    if (size > kMaxItemsize) {
      throw_error(Errc::value_error, where + " is too large: " + decimal(size) +
                                         " bytes; expected at most 2147483647 (NumPy's limit)");
    }

    // NumPy's rule (numpy.lib.format.descr_to_dtype): unnamed plain void is padding.
    const bool padding = e.name.empty() && type.kind() == Kind::raw && !type.is_structured();
    if (!padding) fields.push_back(Field{std::move(name), std::move(type), e.shape, offset});
    offset += size;  // both terms are at most 2^31 - 1, so no overflow
    if (offset > kMaxItemsize) {
      throw_error(Errc::value_error, where + " ends at byte " + decimal(offset) +
                                         "; a structured type may span at most 2147483647 bytes "
                                         "(NumPy's limit)");
    }
  }

  std::vector<std::string_view> names;
  names.reserve(fields.size());
  for (const Field& f : fields) names.push_back(f.name);
  std::sort(names.begin(), names.end());
  const auto dup = std::adjacent_find(names.begin(), names.end());
  if (dup != names.end()) {
    throw_error(Errc::value_error, "descr: field " + quote(prefix + std::string(*dup)) +
                                       " occurs more than once; names must be unique");
  }

  DType t(Kind::raw, ByteOrder::not_applicable, offset);
  t.structure_ = std::move(s);
  return t;
}

DType DType::from_descr(std::span<const DescrEntry> descr, TypestrOptions options) {
  return build_struct(descr, options, 1, "");
}

std::vector<DescrEntry> DType::descr() const {
  if (!structure_) return {DescrEntry{"", str(), {}, {}}};
  std::vector<DescrEntry> out;
  auto pad = [&out](std::int64_t n) { out.push_back(DescrEntry{"", "|V" + decimal(n), {}, {}}); };
  std::int64_t pos = 0;
  // from_descr lays fields out in order without overlap, so no sorting is needed.
  for (const Field& f : structure_->fields) {
    if (f.offset > pos) pad(f.offset - pos);
    DescrEntry e;
    e.name = f.name;
    if (f.type.is_structured()) e.fields = f.type.descr();
    if (e.fields.empty()) e.typestr = f.type.str();
    e.shape = f.shape;
    std::int64_t count = 1;
    for (std::int64_t d : f.shape) count *= d;
    pos = f.offset + f.type.itemsize() * count;
    out.push_back(std::move(e));
  }
  if (itemsize_ > pos) pad(itemsize_ - pos);
  return out;
}

// ---- DLPack -------------------------------------------------------------------------------

namespace {

struct ExtendedInfo {
  Extended ext;
  std::uint8_t code;
  std::uint8_t bits;
  const char* name;
};

// Storage itemsize is 2 for bfloat16 and 1 for the rest (sub-byte formats count one byte
// when padded; packed storage is a property of the tensor, not of the type).
constexpr ExtendedInfo kExtended[] = {
    {Extended::bfloat16, kDLBfloat, 16, "bfloat16"},
    {Extended::float8_e3m4, kDLFloat8_e3m4, 8, "float8_e3m4"},
    {Extended::float8_e4m3, kDLFloat8_e4m3, 8, "float8_e4m3"},
    {Extended::float8_e4m3b11fnuz, kDLFloat8_e4m3b11fnuz, 8, "float8_e4m3b11fnuz"},
    {Extended::float8_e4m3fn, kDLFloat8_e4m3fn, 8, "float8_e4m3fn"},
    {Extended::float8_e4m3fnuz, kDLFloat8_e4m3fnuz, 8, "float8_e4m3fnuz"},
    {Extended::float8_e5m2, kDLFloat8_e5m2, 8, "float8_e5m2"},
    {Extended::float8_e5m2fnuz, kDLFloat8_e5m2fnuz, 8, "float8_e5m2fnuz"},
    {Extended::float8_e8m0fnu, kDLFloat8_e8m0fnu, 8, "float8_e8m0fnu"},
    {Extended::float6_e2m3fn, kDLFloat6_e2m3fn, 6, "float6_e2m3fn"},
    {Extended::float6_e3m2fn, kDLFloat6_e3m2fn, 6, "float6_e3m2fn"},
    {Extended::float4_e2m1fn, kDLFloat4_e2m1fn, 4, "float4_e2m1fn"},
    {Extended::int4, kDLInt, 4, "int4"},
    {Extended::uint4, kDLUInt, 4, "uint4"},
    {Extended::int2, kDLInt, 2, "int2"},
    {Extended::uint2, kDLUInt, 2, "uint2"},
};

const char* code_name(std::uint8_t code) {
  switch (code) {
    case kDLInt:
      return "kDLInt";
    case kDLUInt:
      return "kDLUInt";
    case kDLFloat:
      return "kDLFloat";
    case kDLOpaqueHandle:
      return "kDLOpaqueHandle";
    case kDLComplex:
      return "kDLComplex";
    case kDLBool:
      return "kDLBool";
    default:
      break;
  }
  for (const ExtendedInfo& e : kExtended) {
    if (e.code == code) return e.name;
  }
  return "unknown";
}

std::string describe(DLDataType t) {
  return std::string("(code ") + decimal(t.code) + " " + code_name(t.code) + ", bits " +
         decimal(t.bits) + ", lanes " + decimal(t.lanes) + ")";
}

[[noreturn]] void dlpack_unsupported(DLDataType t, std::string_view why) {
  throw_error(Errc::not_implemented, "from_dlpack: " + describe(t) + " " + std::string(why));
}

}  // namespace

DType DType::from_dlpack(DLDataType t) {
  if (t.code > kDLFloat4_e2m1fn) {
    throw_error(Errc::value_error, "from_dlpack: " + describe(t) +
                                       " has an unknown type code; expected 0..17 (DLPack 1.3)");
  }
  if (t.lanes != 1) dlpack_unsupported(t, "is a vector type; only lanes == 1 is supported");
  const int bits = t.bits;
  switch (t.code) {
    case kDLInt:
    case kDLUInt:
      if (bits == 8 || bits == 16 || bits == 32 || bits == 64) {
        return DType(t.code == kDLInt ? Kind::signed_int : Kind::unsigned_int,
                     bits == 8 ? ByteOrder::not_applicable : kNativeOrder, bits / 8);
      }
      if (bits == 4 || bits == 2) break;  // ml_dtypes' [u]int4 and [u]int2, below
      dlpack_unsupported(t, "has no NumPy equivalent; expected bits 2, 4, 8, 16, 32 or 64");
    case kDLFloat:
      if (bits == 16 || bits == 32 || bits == 64) {
        return DType(Kind::floating, kNativeOrder, bits / 8);
      }
      dlpack_unsupported(t, "has no NumPy equivalent; expected bits 16, 32 or 64");
    case kDLComplex:
      if (bits == 64 || bits == 128) return DType(Kind::complex, kNativeOrder, bits / 8);
      dlpack_unsupported(t, "has no NumPy equivalent; expected bits 64 or 128");
    case kDLBool:
      if (bits == 8) return DType(Kind::boolean, ByteOrder::not_applicable, 1);
      dlpack_unsupported(t, "is not supported; expected bits 8 (one byte per bool)");
    case kDLOpaqueHandle:
      dlpack_unsupported(t, "is an opaque handle type, which has no meaning outside its producer");
    default:
      break;
  }
  for (const ExtendedInfo& e : kExtended) {
    if (e.code != t.code) continue;
    if (bits != e.bits) {
      if (e.code == kDLInt || e.code == kDLUInt) continue;  // 4 and 2 have entries each
      dlpack_unsupported(t, "is not supported; expected bits " + decimal(e.bits));
    }
    return DType(Kind::raw, e.ext == Extended::bfloat16 ? kNativeOrder : ByteOrder::not_applicable,
                 e.ext == Extended::bfloat16 ? 2 : 1, e.ext);
  }
  dlpack_unsupported(t, "is not supported");  // unreachable: every code up to 17 is handled
}

std::optional<DType> DType::from_extended_name(std::string_view name) {
  for (const ExtendedInfo& e : kExtended) {
    if (name == e.name) return from_dlpack(DLDataType{e.code, e.bits, 1});
  }
  return std::nullopt;
}

std::string_view DType::extended_name() const noexcept {
  for (const ExtendedInfo& e : kExtended) {
    if (e.ext == extended_) return e.name;
  }
  return {};
}

std::string DType::display_name() const {
  if (extended_ == Extended::none) return str();
  return str() + " (" + std::string(extended_name()) + ")";
}

DLDataType DType::to_dlpack() const {
  auto make = [](std::uint8_t code, std::int64_t bits) {
    return DLDataType{code, static_cast<std::uint8_t>(bits), 1};
  };
  auto refuse = [this](std::string_view why) -> DLDataType {
    throw_error(Errc::not_implemented, "to_dlpack: " + quote(str()) + " " + std::string(why));
  };
  if (is_structured()) return refuse("is a structured type, which DLPack cannot describe");
  if (!is_native()) {
    return refuse(
        "is not in the host's byte order; DLPack data are native-endian, so byte-swap first");
  }
  if (extended_ != Extended::none) {
    for (const ExtendedInfo& e : kExtended) {
      if (e.ext == extended_) return make(e.code, e.bits);
    }
  }
  switch (kind_) {
    case Kind::boolean:
      return make(kDLBool, 8);
    case Kind::signed_int:
      return make(kDLInt, itemsize_ * 8);
    case Kind::unsigned_int:
      return make(kDLUInt, itemsize_ * 8);
    case Kind::floating:
      if (itemsize_ <= 8) return make(kDLFloat, itemsize_ * 8);
      return refuse("is long double, whose layout is platform-specific; DLPack has no code for it");
    case Kind::complex:
      if (itemsize_ <= 16) return make(kDLComplex, itemsize_ * 8);
      return refuse("is complex long double, which DLPack has no code for");
    case Kind::timedelta:
    case Kind::datetime:
      return refuse("is a datetime/timedelta type; DLPack has no code for it (view it as '<i8')");
    case Kind::object:
      return refuse("holds Python objects, which DLPack cannot describe");
    case Kind::bytes:
    case Kind::unicode:
      return refuse("is a string type, which DLPack cannot describe");
    case Kind::raw:
      return refuse("is raw bytes with no element type; DLPack cannot describe it");
    case Kind::bitfield:
      break;
  }
  return refuse("has no DLPack equivalent");
}

}  // namespace cai
