#pragma once
/// \file
/// Text from files and users (paths, PCD field names, header lines, tokens, topic names)
/// made safe to show on a terminal. A file can hold any bytes, and some bytes are commands
/// to a terminal: ESC starts sequences that set the window title, move the cursor or clear
/// the screen, CR returns over what was printed. Every message ndtcu shows puts such text
/// through printable() first.

#include <charconv>
#include <cstddef>
#include <string>
#include <string_view>

namespace ndtcu {

namespace text_detail {

/// Length of the valid UTF-8 sequence at the start of `s` (RFC 3629: no overlong forms, no
/// surrogates, nothing above U+10FFFF); 0 when `s` does not start with one.
inline std::size_t utf8_sequence_length(std::string_view s) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char b0 = byte(0);
  if (b0 < 0x80) return 1;
  std::size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the range of the second byte (Unicode table 3-7)
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    if (b0 == 0xE0) lo = 0xA0;  // overlong below U+0800
    if (b0 == 0xED) hi = 0x9F;  // UTF-16 surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    if (b0 == 0xF0) lo = 0x90;  // overlong below U+10000
    if (b0 == 0xF4) hi = 0x8F;  // above U+10FFFF
  } else {
    return 0;  // a continuation byte, C0, C1 or F5-FF
  }
  if (s.size() < n || byte(1) < lo || byte(1) > hi) return 0;
  for (std::size_t i = 2; i < n; ++i) {
    if (byte(i) < 0x80 || byte(i) > 0xBF) return 0;
  }
  return n;
}

/// printable() that keeps the control characters `keep_a` and `keep_b` as they are ('\0'
/// for none; NUL itself is always escaped).
inline std::string escape_controls(std::string_view text, char keep_a, char keep_b) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size());
  const auto escape = [&](unsigned char b) {
    out += "\\x";
    out += kHex[b >> 4];
    out += kHex[b & 0xF];
  };
  while (!text.empty()) {
    const auto b0 = static_cast<unsigned char>(text.front());
    const std::size_t n = utf8_sequence_length(text);
    if (n == 1) {
      const bool control = b0 < 0x20 || b0 == 0x7F;
      if (control && (b0 == 0 || (text.front() != keep_a && text.front() != keep_b))) escape(b0);
      else out += text.front();
    } else if (n == 2 && b0 == 0xC2 && static_cast<unsigned char>(text[1]) < 0xA0) {
      // U+0080 to U+009F, the C1 controls (U+009B is CSI, as ESC [ is): shown as their bytes.
      escape(b0);
      escape(static_cast<unsigned char>(text[1]));
    } else if (n == 0) {
      escape(b0);  // not UTF-8: a lone 0x9B is CSI to a terminal in an 8-bit mode
      text.remove_prefix(1);
      continue;
    } else {
      out.append(text.data(), n);
    }
    text.remove_prefix(n);
  }
  return out;
}

}  // namespace text_detail

/// `text` with every byte a terminal could take as a command written as the four
/// characters \xNN (NN its value in upper-case hex): the C0 controls (ESC, CR, BEL, tab and
/// newline among them), DEL, the C1 controls (U+0080-U+009F, as their two UTF-8 bytes), and
/// each byte that is not part of valid UTF-8. Valid UTF-8 otherwise is kept as it is, so a
/// name in any script reads as written: "a\x1B]0;title\x07" for a name holding a
/// set-title sequence.
inline std::string printable(std::string_view text) { return text_detail::escape_controls(text, '\0', '\0'); }

/// printable() for a message of several lines: newlines and tabs are kept, every other
/// control escaped. What ndtcu::Error does to its message.
inline std::string printable_lines(std::string_view text) { return text_detail::escape_controls(text, '\n', '\t'); }

/// `value` in the fewest digits that read back as the same double: "1e-09", "0.1", "2",
/// "4000000.125", "inf", "nan". Messages print numbers with it (std::to_string's six fixed
/// decimals show 1e-9 as "0.000000" and cut 0.1234567 to "0.123457").
inline std::string number_text(double value) {
  char buffer[32];  // the longest shortest form, "-2.2250738585072014e-308", is 24
  const auto end = std::to_chars(buffer, buffer + sizeof(buffer), value).ptr;
  return std::string(buffer, end);
}

/// `text` without the UTF-8 byte-order mark (EF BB BF) that some editors put at the start
/// of a text file; as it is otherwise. Every text format ndtcu reads (PCD and PLY headers,
/// pose, guess and scan-list files) skips one.
inline std::string_view without_bom(std::string_view text) {
  if (text.size() >= 3 && text.compare(0, 3, "\xEF\xBB\xBF") == 0) text.remove_prefix(3);
  return text;
}

}  // namespace ndtcu
