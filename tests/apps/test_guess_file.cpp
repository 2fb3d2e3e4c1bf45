// The guess file of `ndtcu align --guesses`: both line forms, the separators and comments
// it accepts, and an IoError naming the file and the line for everything it rejects.
#include "../support/test_support.hpp"

#include "guess_file.hpp"

#include <ndtcu/aligner.hpp>
#include <ndtcu/error.hpp>
#include <ndtcu/trajectory.hpp>

#include <cmath>

using namespace ndtcu;
using ndtcu::cli::parse_guesses;
using ndtcu::cli::read_guesses;

namespace {

// The message parse_guesses throws for `text`, or "" when it throws nothing.
std::string error_of(const std::string& text, const std::string& path = "g.txt") {
  try {
    parse_guesses(text, path);
  } catch (const IoError& e) {
    CHECK(e.path() == path);
    return e.what();
  }
  return "";
}

Pose6 pose(double x, double y, double z, double roll, double pitch, double yaw) {
  Pose6 p;
  p << x, y, z, roll, pitch, yaw;
  return p;
}

}  // namespace

TEST_CASE("guess file: x y z roll pitch yaw lines with commas, blanks and comments", "[unit][cli]") {
  const std::string text =
      "# three hypotheses\n"
      "\n"
      "1,2,3,0.1,0.2,0.3\n"
      "  -1.5 2.25\t3e-2 , -0.001,+0.5 ,   6   # a trailing comment\r\n"
      "   \t\n"
      "0 0 0 0 0 0";  // no newline at the end
  const std::vector<Pose6> g = parse_guesses(text, "g.txt");
  REQUIRE(g.size() == 3);
  // Used as given: the very doubles the text spells, no round trip through a matrix.
  CHECK(g[0] == pose(1, 2, 3, 0.1, 0.2, 0.3));
  CHECK(g[1] == pose(-1.5, 2.25, 3e-2, -0.001, 0.5, 6));
  CHECK(g[2] == Pose6::Zero());
}

TEST_CASE("guess file: a TUM line is the pose read_trajectory reads from it", "[unit][cli]") {
  // A quaternion with 9 digits (norm 1 - 4e-10) and one 5e-4 off unit length: both are
  // normalized, as read_trajectory does.
  const std::string lines =
      "0.3 -24.358377 16.558956 1.359361 -0.028497736 0.002401440 -0.754676332 0.655473681\n"
      "12.5 1 2 3 0.10005 -0.2001 0.30015 0.92782553\n";
  const std::vector<Pose6> g = parse_guesses(lines, "g.txt");
  REQUIRE(g.size() == 2);
  const auto dir = ndtcu::test::temp_dir("guess_file_tum");
  ndtcu::test::write_bytes(dir / "poses.txt", lines);
  const Trajectory t = read_trajectory((dir / "poses.txt").string(), TrajectoryFormat::Tum);
  REQUIRE(t.size() == 2);
  for (std::size_t i = 0; i < 2; ++i) {
    CAPTURE(i);
    const Eigen::Matrix4d m = pose_to_matrix(g[i]);
    // Both rotations come from the same normalized quaternion; they differ only by the
    // rounding of the roll/pitch/yaw round trip (a few 1e-16).
    CHECK((m - t[i].pose.matrix()).cwiseAbs().maxCoeff() < 1e-12);
  }
  CHECK(g[0](0) == -24.358377);  // the translation is taken as written
}

TEST_CASE("guess file: malformed lines name the file, the line and the problem", "[unit][cli]") {
  CHECK(error_of("1 2 3 4 5 6\n1 2 3 4 5\n") ==
        "g.txt: line 2: 5 values; a guess is 6 (x y z roll pitch yaw) or 8 (TUM: t x y z qx qy qz qw)");
  CHECK(error_of("# c\n1 2 3 4 5 6 7\n") ==
        "g.txt: line 2: 7 values; a guess is 6 (x y z roll pitch yaw) or 8 (TUM: t x y z qx qy qz qw)");
  CHECK(error_of("1 2 3 four 5 6\n") == "g.txt: line 1: value 4 'four' is not a number");
  CHECK(error_of("1 2 3 4 5 6x\n") == "g.txt: line 1: value 6 '6x' is not a number");
  CHECK(error_of("\n\n1 2 nan 4 5 6\n") == "g.txt: line 3: value 3 'nan' is not finite");
  CHECK(error_of("1 2 3 -inf 5 6\n") == "g.txt: line 1: value 4 '-inf' is not finite");
  CHECK(error_of("1 2 3 4 5 1e999\n") == "g.txt: line 1: value 6 '1e999' is not finite");
  CHECK(error_of("1,2,,3,4,5\n") == "g.txt: line 1: empty value before the comma at column 5");
  CHECK(error_of(",1,2,3,4,5,6\n") == "g.txt: line 1: empty value before the comma at column 1");
  CHECK(error_of("1,2,3,4,5,6,\n") == "g.txt: line 1: the line ends with a comma (a value is missing)");
  CHECK(error_of("0 1 2 3 0 0 0 0\n") == "g.txt: line 1: quaternion (qx qy qz qw) norm 0 is not 1 (within 0.001)");
  CHECK(error_of("0 1 2 3 0 0 0 2\n") == "g.txt: line 1: quaternion (qx qy qz qw) norm 2 is not 1 (within 0.001)");
  CHECK(error_of("0 1 2 3 0 0 0 1.002\n") ==
        "g.txt: line 1: quaternion (qx qy qz qw) norm 1.002 is not 1 (within 0.001)");
}

TEST_CASE("guess file: no guess at all is an error", "[unit][cli]") {
  CHECK(error_of("") == "g.txt: no guess in the file: it is empty");
  CHECK(error_of("# only a comment\n\n") == "g.txt: no guess in the file: 2 lines, only blank lines and comments");
  CHECK(error_of("   ") == "g.txt: no guess in the file: 1 line, only blank lines and comments");
}

TEST_CASE("guess file: reading from disk", "[unit][cli]") {
  const auto dir = ndtcu::test::temp_dir("guess_file_read");
  const std::string missing = (dir / "missing.txt").string();
  try {
    read_guesses(missing);
    FAIL("no IoError for a missing file");
  } catch (const IoError& e) {
    CHECK(std::string(e.what()) == missing + ": no such file");
  }
  try {
    read_guesses(dir.string());
    FAIL("no IoError for a folder");
  } catch (const IoError& e) {
    CHECK(std::string(e.what()) == dir.string() + ": is a directory, not a guess file");
  }
  const std::string empty = (dir / "empty.txt").string();
  ndtcu::test::write_bytes(empty, "");
  try {
    read_guesses(empty);
    FAIL("no IoError for an empty file");
  } catch (const IoError& e) {
    CHECK(std::string(e.what()) == empty + ": no guess in the file: it is empty");
  }
  ndtcu::test::write_bytes(dir / "two.txt", "1 2 3 0 0 0\n4,5,6,0,0,0.5\n");
  const std::vector<Pose6> g = read_guesses((dir / "two.txt").string());
  REQUIRE(g.size() == 2);
  CHECK(g[1] == pose(4, 5, 6, 0, 0, 0.5));
}

TEST_CASE("guess file: a UTF-8 byte-order mark is skipped, terminal commands in a value are escaped", "[unit][cli]") {
  // The mark was read as part of the first value: "value 1 '\xEF\xBB\xBF1' is not a number".
  const std::vector<Pose6> g = parse_guesses("\xEF\xBB\xBF" "1 2 3 0.1 0.2 0.3\n", "g.txt");
  REQUIRE(g.size() == 1);
  CHECK(g[0] == pose(1, 2, 3, 0.1, 0.2, 0.3));
  CHECK(parse_guesses("\xEF\xBB\xBF# hypotheses\n0 0 0 0 0 0\n", "g.txt").size() == 1);
  // Only one mark, at the start: one anywhere else is what it is, a value that is no number.
  CHECK(error_of("1 2 3 \xEF\xBB\xBF" "4 5 6\n") == "g.txt: line 1: value 4 '\xEF\xBB\xBF" "4' is not a number");
  // A value that clears the screen and sets the window title is shown, not obeyed.
  CHECK(error_of("1 2 3 \x1b[2J\x1b]0;title\x07 5 6\n") ==
        "g.txt: line 1: value 4 '\\x1B[2J\\x1B]0;title\\x07' is not a number");
}
