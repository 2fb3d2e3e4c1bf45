#pragma once
// The initial-guess file of `ndtcu align --guesses FILE`: one pose hypothesis per line.
#include <ndtcu/result.hpp>

#include <string>
#include <vector>

namespace ndtcu::cli {

/// Largest distance of a TUM quaternion's norm from 1 that is accepted (and normalized
/// away). The same tolerance as read_trajectory: it admits the 6-9 digits such files carry
/// and rejects a scaled or mistyped quaternion.
constexpr double kGuessQuaternionTolerance = 1e-3;

/// Parses the text of a guess file, `path` naming it in errors. Each line is one of
///   `x y z roll pitch yaw`          6 numbers (m, rad), used as given
///   `t x y z qx qy qz qw`           8 numbers, a TUM line (t ignored), the quaternion normalized
/// with the numbers separated by spaces, tabs and/or single commas. `#` starts a comment
/// that runs to the end of the line; blank lines are skipped. Throws IoError naming the
/// file, the line and what is wrong: an empty value between commas, a token that is not a
/// number, a value that is not finite, a count other than 6 or 8, a quaternion whose norm
/// is off 1 by more than kGuessQuaternionTolerance, and a file without any guess.
std::vector<Pose6> parse_guesses(const std::string& text, const std::string& path);

/// Reads and parses the guess file at `path` (see parse_guesses). Throws IoError for a
/// file that does not exist or cannot be read.
std::vector<Pose6> read_guesses(const std::string& path);

}  // namespace ndtcu::cli
