#pragma once
// Helpers for the parsers: typed little/big-endian loads from unaligned bytes, strict
// number parsing, and splitting text into lines and tokens.
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace ndtcu::detail {

/// A scalar type as files store it.
enum class ScalarKind : std::uint8_t { I8, U8, I16, U16, I32, U32, I64, U64, F32, F64, Invalid };

/// 'F'/'I'/'U' and a size in bytes -> ScalarKind (Invalid for anything else).
inline ScalarKind scalar_kind(char type, int size) {
  switch (type) {
    case 'F': return size == 4 ? ScalarKind::F32 : size == 8 ? ScalarKind::F64 : ScalarKind::Invalid;
    case 'I':
      return size == 1 ? ScalarKind::I8 : size == 2 ? ScalarKind::I16 : size == 4 ? ScalarKind::I32
           : size == 8 ? ScalarKind::I64 : ScalarKind::Invalid;
    case 'U':
      return size == 1 ? ScalarKind::U8 : size == 2 ? ScalarKind::U16 : size == 4 ? ScalarKind::U32
           : size == 8 ? ScalarKind::U64 : ScalarKind::Invalid;
    default: return ScalarKind::Invalid;
  }
}

template <typename T>
inline T load_raw(const char* p, bool swap) {
  unsigned char b[sizeof(T)];
  std::memcpy(b, p, sizeof(T));
  if (swap) {
    for (std::size_t i = 0; i < sizeof(T) / 2; ++i) std::swap(b[i], b[sizeof(T) - 1 - i]);
  }
  T v;
  std::memcpy(&v, b, sizeof(T));
  return v;
}

/// Reads one value of `kind` at `p` as double; `swap` for big-endian data.
inline double load_scalar(const char* p, ScalarKind kind, bool swap = false) {
  switch (kind) {
    case ScalarKind::I8: return load_raw<std::int8_t>(p, false);
    case ScalarKind::U8: return load_raw<std::uint8_t>(p, false);
    case ScalarKind::I16: return load_raw<std::int16_t>(p, swap);
    case ScalarKind::U16: return load_raw<std::uint16_t>(p, swap);
    case ScalarKind::I32: return load_raw<std::int32_t>(p, swap);
    case ScalarKind::U32: return load_raw<std::uint32_t>(p, swap);
    case ScalarKind::I64: return static_cast<double>(load_raw<std::int64_t>(p, swap));
    case ScalarKind::U64: return static_cast<double>(load_raw<std::uint64_t>(p, swap));
    case ScalarKind::F32: return load_raw<float>(p, swap);
    case ScalarKind::F64: return load_raw<double>(p, swap);
    default: return 0.0;
  }
}

/// The name of a scalar type ("int8", "uint16", "float32", ...), for messages.
inline const char* kind_name(ScalarKind kind) {
  switch (kind) {
    case ScalarKind::I8: return "int8";
    case ScalarKind::U8: return "uint8";
    case ScalarKind::I16: return "int16";
    case ScalarKind::U16: return "uint16";
    case ScalarKind::I32: return "int32";
    case ScalarKind::U32: return "uint32";
    case ScalarKind::I64: return "int64";
    case ScalarKind::U64: return "uint64";
    case ScalarKind::F32: return "float32";
    case ScalarKind::F64: return "float64";
    default: return "?";
  }
}

/// Whether a value read from text can be a value of an integer `kind`: a whole number in
/// its range (an int8 holds -128 to 127: 300 cannot be one, nor -1 a uint8, nor 1.5 or
/// nan any integer). Floating-point kinds take any number (what float32 cannot hold is
/// counted where the points are made).
inline bool fits_kind(double v, ScalarKind kind) {
  double lo = 0.0, hi = 0.0;
  switch (kind) {
    case ScalarKind::I8: lo = -128.0, hi = 127.0; break;
    case ScalarKind::U8: hi = 255.0; break;
    case ScalarKind::I16: lo = -32768.0, hi = 32767.0; break;
    case ScalarKind::U16: hi = 65535.0; break;
    case ScalarKind::I32: lo = -2147483648.0, hi = 2147483647.0; break;
    case ScalarKind::U32: hi = 4294967295.0; break;
    // (As doubles, the 64-bit bounds round to 2^63 and 2^64.)
    case ScalarKind::I64: lo = -9223372036854775808.0, hi = 9223372036854775807.0; break;
    case ScalarKind::U64: hi = 18446744073709551615.0; break;
    default: return true;
  }
  return v >= lo && v <= hi && std::floor(v) == v;  // NaN fails every comparison
}

/// "value 300 is outside int8's range" style reason for a value fits_kind() refuses.
inline std::string kind_refusal(std::string_view token, ScalarKind kind) {
  return "'" + std::string(token.substr(0, 40)) + "' is not a value of its type " + kind_name(kind) +
         " (a whole number that type holds)";
}

/// Parses the whole token as an unsigned integer; false on anything else.
inline bool parse_u64(std::string_view token, std::uint64_t& out) {
  if (token.empty()) return false;
  auto [ptr, ec] = std::from_chars(token.data(), token.data() + token.size(), out);
  return ec == std::errc() && ptr == token.data() + token.size();
}

/// Parses the whole token as a double ("nan" and "inf" included); false otherwise.
inline bool parse_double(std::string_view token, double& out) {
  if (!token.empty() && token.front() == '+') token.remove_prefix(1);
  if (token.empty()) return false;
  auto [ptr, ec] = std::from_chars(token.data(), token.data() + token.size(), out);
  if (ec == std::errc::result_out_of_range) {
    // Denormals and overflows: from_chars reports them; keep strtod's answer.
    std::string copy(token);
    out = std::strtod(copy.c_str(), nullptr);
    return true;
  }
  return ec == std::errc() && ptr == token.data() + token.size();
}

inline bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f'; }

/// Splits on blanks (spaces, tabs, CR); at most `limit` tokens are kept.
inline void split_tokens(std::string_view line, std::vector<std::string_view>& out, std::size_t limit = SIZE_MAX) {
  out.clear();
  std::size_t i = 0;
  while (i < line.size() && out.size() < limit) {
    while (i < line.size() && is_space(line[i])) ++i;
    std::size_t start = i;
    while (i < line.size() && !is_space(line[i])) ++i;
    if (i > start) out.push_back(line.substr(start, i - start));
  }
}

/// Cursor over text lines; `next` yields each line without its '\n' (and a trailing '\r').
class LineReader {
 public:
  explicit LineReader(std::string_view text) : text_(text) {}
  bool next(std::string_view& line) {
    if (pos_ >= text_.size()) return false;
    std::size_t end = text_.find('\n', pos_);
    if (end == std::string_view::npos) end = text_.size();
    line = text_.substr(pos_, end - pos_);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    pos_ = end + 1;
    return true;
  }
  /// Offset of the first byte after the last line returned.
  std::size_t position() const { return pos_ > text_.size() ? text_.size() : pos_; }

 private:
  std::string_view text_;
  std::size_t pos_ = 0;
};

/// The number of the line (from 1) that holds byte `offset` of `text`.
inline std::size_t line_number(std::string_view text, std::size_t offset) {
  std::size_t n = 1;
  for (std::size_t i = 0; i < offset && i < text.size(); ++i) n += text[i] == '\n';
  return n;
}

/// Case-insensitive equality of ASCII names.
inline bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

/// True for the field names read as intensity, in order of preference.
inline int intensity_rank(std::string_view name) {
  static constexpr std::string_view kNames[] = {"intensity", "scalar_intensity", "reflectance", "remission", "i"};
  for (int r = 0; r < static_cast<int>(std::size(kNames)); ++r) {
    if (iequals(name, kNames[r])) return r;
  }
  return -1;
}

}  // namespace ndtcu::detail
