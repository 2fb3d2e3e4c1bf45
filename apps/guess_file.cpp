#include "guess_file.hpp"

#include <ndtcu/aligner.hpp>
#include <ndtcu/error.hpp>
#include <ndtcu/text.hpp>

#include <Eigen/Geometry>
#include <fmt/format.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>

namespace ndtcu::cli {

namespace {

bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }

// Tokens separated by blanks and/or single commas; a comma with no value before it (at the
// start, or right after another comma) or at the end of the line is an error, so that a
// dropped value is never read as a shorter line.
std::vector<std::string_view> split_values(std::string_view s, const std::string& path, std::size_t line_no) {
  std::vector<std::string_view> tokens;
  bool comma_pending = false;
  std::size_t i = 0;
  while (i < s.size()) {
    if (is_blank(s[i])) {
      ++i;
    } else if (s[i] == ',') {
      if (tokens.empty() || comma_pending) {
        throw IoError(path, fmt::format("line {}: empty value before the comma at column {}", line_no, i + 1));
      }
      comma_pending = true;
      ++i;
    } else {
      std::size_t j = i;
      while (j < s.size() && !is_blank(s[j]) && s[j] != ',') ++j;
      tokens.push_back(s.substr(i, j - i));
      comma_pending = false;
      i = j;
    }
  }
  if (comma_pending) throw IoError(path, fmt::format("line {}: the line ends with a comma (a value is missing)", line_no));
  return tokens;
}

// The whole token as a finite double ('+' sign allowed); IoError naming the value otherwise.
double parse_value(std::string_view token, std::size_t index, const std::string& path, std::size_t line_no) {
  const std::string shown(token.substr(0, 40));
  std::string_view digits = token;
  if (!digits.empty() && digits.front() == '+') digits.remove_prefix(1);
  double v = 0.0;
  const auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  const bool whole = !digits.empty() && ptr == digits.data() + digits.size();
  if (whole && ec == std::errc::result_out_of_range) {
    // from_chars reports underflow (denormals) and overflow alike; strtod tells them apart.
    v = std::strtod(std::string(digits).c_str(), nullptr);
  } else if (!whole || ec != std::errc()) {
    throw IoError(path, fmt::format("line {}: value {} '{}' is not a number", line_no, index + 1, shown));
  }
  if (!std::isfinite(v)) {
    throw IoError(path, fmt::format("line {}: value {} '{}' is not finite", line_no, index + 1, shown));
  }
  return v;
}

}  // namespace

std::vector<Pose6> parse_guesses(const std::string& text, const std::string& path) {
  std::vector<Pose6> guesses;
  std::size_t line_no = 0;
  std::size_t start = text.size() - without_bom(text).size();  // past a byte-order mark
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + start, end - start);
    start = end + 1;
    ++line_no;
    if (const std::size_t hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
    const std::vector<std::string_view> tokens = split_values(line, path, line_no);
    if (tokens.empty()) continue;
    if (tokens.size() != 6 && tokens.size() != 8) {
      throw IoError(path, fmt::format("line {}: {} values; a guess is 6 (x y z roll pitch yaw) or 8 (TUM: t x y z qx "
                                      "qy qz qw)",
                                      line_no, tokens.size()));
    }
    std::vector<double> v(tokens.size());
    for (std::size_t i = 0; i < tokens.size(); ++i) v[i] = parse_value(tokens[i], i, path, line_no);
    Pose6 pose;
    if (v.size() == 6) {
      for (int i = 0; i < 6; ++i) pose(i) = v[static_cast<std::size_t>(i)];
    } else {
      Eigen::Quaterniond q(v[7], v[4], v[5], v[6]);
      const double norm = q.norm();
      if (!(std::abs(norm - 1.0) <= kGuessQuaternionTolerance)) {
        throw IoError(path, fmt::format("line {}: quaternion (qx qy qz qw) norm {:.6g} is not 1 (within {})", line_no,
                                        norm, kGuessQuaternionTolerance));
      }
      q.normalize();
      Eigen::Matrix4d t = Eigen::Matrix4d::Identity();
      t.topLeftCorner<3, 3>() = q.toRotationMatrix();
      t.topRightCorner<3, 1>() = Eigen::Vector3d(v[1], v[2], v[3]);
      pose = matrix_to_pose(t);
    }
    guesses.push_back(pose);
  }
  if (guesses.empty()) {
    throw IoError(path, line_no == 0 ? std::string("no guess in the file: it is empty")
                                     : fmt::format("no guess in the file: {} line{}, only blank lines and comments",
                                                   line_no, line_no == 1 ? "" : "s"));
  }
  return guesses;
}

std::vector<Pose6> read_guesses(const std::string& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(status)) throw IoError(path, "no such file");
  if (std::filesystem::is_directory(status)) throw IoError(path, "is a directory, not a guess file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(path, std::string("cannot open: ") + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw IoError(path, "read failed");
  return parse_guesses(text.str(), path);
}

}  // namespace ndtcu::cli
