// IMU samples as CSV (ndtcu/imu.hpp): `time,wx,wy,wz[,ax,ay,az]`.
#include "bytes.hpp"
#include "file_contents.hpp"

#include <ndtcu/error.hpp>
#include <ndtcu/imu.hpp>
#include <ndtcu/output_file.hpp>

#include <fmt/format.h>

#include <cmath>
#include <string>
#include <string_view>
#include <vector>

namespace ndtcu {

namespace {

constexpr const char* kColumns[] = {"time", "wx", "wy", "wz", "ax", "ay", "az"};

std::string_view trimmed(std::string_view s) {
  while (!s.empty() && detail::is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && detail::is_space(s.back())) s.remove_suffix(1);
  return s;
}

// The comma-separated cells of `line`, blanks around each removed.
void split_cells(std::string_view line, std::vector<std::string_view>& out) {
  out.clear();
  std::size_t start = 0;
  for (;;) {
    const std::size_t comma = line.find(',', start);
    out.push_back(trimmed(line.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start)));
    if (comma == std::string_view::npos) return;
    start = comma + 1;
  }
}

std::string number(double v) { return fmt::format("{}", v); }

}  // namespace

void check_imu_sample(const ImuSample& s, const std::string& context) {
  const auto fail = [&](const char* field, double v) {
    throw Error(context + ": " + field + " is " + number(v) + " (every value of an IMU sample must be finite)");
  };
  if (!std::isfinite(s.time)) fail("time", s.time);
  static const char* const kRate[] = {"angular_velocity.x", "angular_velocity.y", "angular_velocity.z"};
  static const char* const kAccel[] = {"linear_acceleration.x", "linear_acceleration.y", "linear_acceleration.z"};
  for (int i = 0; i < 3; ++i) {
    if (!std::isfinite(s.angular_velocity(i))) fail(kRate[i], s.angular_velocity(i));
    if (!std::isfinite(s.linear_acceleration(i))) fail(kAccel[i], s.linear_acceleration(i));
  }
}

std::vector<ImuSample> read_imu_csv(const std::string& path) {
  const detail::FileContents file(path);
  detail::LineReader lines(file.bytes());
  std::string_view line;
  std::vector<std::string_view> cells;
  std::vector<ImuSample> out;
  std::size_t columns = 0;  // 4 or 7 once the header is read
  for (std::size_t number_line = 1; lines.next(line); ++number_line) {
    const std::string_view content = trimmed(line);
    if (content.empty() || content.front() == '#') continue;
    split_cells(content, cells);
    const std::string where = "line " + std::to_string(number_line);
    if (columns == 0) {
      if (cells.size() != 4 && cells.size() != 7) {
        throw IoError(path, where + ": the header has " + std::to_string(cells.size()) +
                                " columns; expected time,wx,wy,wz or time,wx,wy,wz,ax,ay,az");
      }
      for (std::size_t c = 0; c < cells.size(); ++c) {
        if (cells[c] != kColumns[c]) {
          throw IoError(path, where + ", column " + std::to_string(c + 1) + ": header '" + std::string(cells[c]) +
                                  "' where '" + kColumns[c] + "' belongs (time,wx,wy,wz[,ax,ay,az])");
        }
      }
      columns = cells.size();
      continue;
    }
    if (cells.size() != columns) {
      throw IoError(path, where + ": " + std::to_string(cells.size()) + " columns; the header has " +
                              std::to_string(columns));
    }
    double v[7] = {0, 0, 0, 0, 0, 0, 0};
    for (std::size_t c = 0; c < columns; ++c) {
      const std::string col = where + ", column " + std::to_string(c + 1) + " (" + kColumns[c] + ")";
      if (!detail::parse_double(cells[c], v[c])) {
        throw IoError(path, col + ": '" + std::string(cells[c]) + "' is not a number");
      }
      if (!std::isfinite(v[c])) throw IoError(path, col + ": " + std::string(cells[c]) + " is not finite");
    }
    ImuSample s;
    s.time = v[0];
    s.angular_velocity = Eigen::Vector3d(v[1], v[2], v[3]);
    s.linear_acceleration = Eigen::Vector3d(v[4], v[5], v[6]);
    out.push_back(s);
  }
  if (columns == 0) throw IoError(path, "no header line time,wx,wy,wz[,ax,ay,az]: the file holds no IMU samples");
  return out;
}

void write_imu_csv(const std::string& path, const std::vector<ImuSample>& samples) {
  std::string text = "time,wx,wy,wz,ax,ay,az\n";
  for (const ImuSample& s : samples) {
    check_imu_sample(s, path);
    text += fmt::format("{:.9f},{:.17g},{:.17g},{:.17g},{:.17g},{:.17g},{:.17g}\n", s.time, s.angular_velocity.x(),
                        s.angular_velocity.y(), s.angular_velocity.z(), s.linear_acceleration.x(),
                        s.linear_acceleration.y(), s.linear_acceleration.z());
  }
  write_file_whole(path, text);
}

}  // namespace ndtcu
