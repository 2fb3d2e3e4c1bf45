// Text from files shown to people: control characters escaped (printable), numbers with
// the digits they have (number_text), and the messages of ndtcu's errors built from both.
#include "../support/test_support.hpp"

#include <ndtcu/error.hpp>
#include <ndtcu/text.hpp>

#include <cmath>
#include <limits>
#include <string>

using namespace ndtcu;

TEST_CASE("printable: terminal commands are shown as \\xNN, text in any script kept", "[unit][io][text]") {
  // Set the window title, clear the screen, return over the line, ring the bell.
  CHECK(printable("a\x1b]0;pwned\x07" "b") == "a\\x1B]0;pwned\\x07b");
  CHECK(printable("\x1b[2J\x1b[H") == "\\x1B[2J\\x1B[H");
  CHECK(printable("ok\rno") == "ok\\x0Dno");
  CHECK(printable(std::string("a\0b", 3)) == "a\\x00b");
  CHECK(printable("tab\there\nline") == "tab\\x09here\\x0Aline");
  CHECK(printable("del\x7f") == "del\\x7F");
  // C1 controls as UTF-8 (U+009B is CSI) and bytes that are not UTF-8 at all (a lone 0x9B).
  CHECK(printable("\xc2\x9b" "31m") == "\\xC2\\x9B31m");
  CHECK(printable("\x9b" "31m") == "\\x9B31m");
  CHECK(printable("caf\xe9") == "caf\\xE9");
  // Valid UTF-8 is kept: accents, CJK, the no-break space (U+00A0, just above C1).
  CHECK(printable("Zürich 東京\xc2\xa0x") == "Zürich 東京\xc2\xa0x");
  CHECK(printable("") == "");
  // printable_lines keeps newlines and tabs, for a message of several lines.
  CHECK(printable_lines("a\n\tb\x1b[2J\r") == "a\n\tb\\x1B[2J\\x0D");
}

TEST_CASE("number_text: the shortest digits that read back as the number", "[unit][io][text]") {
  // std::to_string printed 1e-9 as 0.000000 and 0.1234567 as 0.123457.
  CHECK(number_text(1e-9) == "1e-09");
  CHECK(number_text(0.1234567) == "0.1234567");
  CHECK(number_text(2.0) == "2");
  CHECK(number_text(-0.5) == "-0.5");
  CHECK(number_text(4000000.125) == "4000000.125");
  CHECK(number_text(1e300) == "1e+300");
  CHECK(std::stod(number_text(0.1 + 0.2)) == 0.1 + 0.2);
  CHECK(number_text(std::numeric_limits<double>::infinity()) == "inf");
  CHECK(number_text(std::nan("")) == "nan");
}

TEST_CASE("error messages cannot carry terminal commands; paths keep their bytes", "[unit][io][text]") {
  const Error e("field '\x1b]0;title\x07' is bad\nsecond line");
  CHECK(std::string(e.what()) == "field '\\x1B]0;title\\x07' is bad\nsecond line");
  const std::string path = "scans/\x1b[2Jx\n.pcd";
  const IoError io(path, "value '\x1b[H' is not a number");
  CHECK(std::string(io.what()) == "scans/\\x1B[2Jx\\x0A.pcd: value '\\x1B[H' is not a number");
  CHECK(io.path() == path);  // the file as given, to open it again
  CHECK(io.reason() == "value '\\x1B[H' is not a number");
}

TEST_CASE("without_bom: one UTF-8 byte-order mark at the start, nothing else", "[unit][io][text]") {
  CHECK(without_bom("\xEF\xBB\xBF" "abc") == "abc");
  CHECK(without_bom("abc") == "abc");
  CHECK(without_bom("\xEF\xBB") == "\xEF\xBB");
  CHECK(without_bom("\xEF\xBB\xBF\xEF\xBB\xBF" "a") == "\xEF\xBB\xBF" "a");
  CHECK(without_bom("a\xEF\xBB\xBF") == "a\xEF\xBB\xBF");
}
