// IMU samples as CSV (ndtcu/imu.hpp): a round trip bit for bit, and every error naming the
// file, the line and the column.
#include "../support/test_support.hpp"

#include <ndtcu/error.hpp>
#include <ndtcu/imu.hpp>

#include <cmath>
#include <fstream>
#include <limits>

using namespace ndtcu;
namespace fs = std::filesystem;

namespace {

std::string write_text(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
  return path.string();
}

}  // namespace

TEST_CASE("imu csv: written samples read back bit for bit; 4 or 7 columns, comments and blanks", "[unit][io]") {
  const fs::path dir = test::temp_dir("imu_csv");
  std::vector<ImuSample> samples;
  for (int k = 0; k < 50; ++k) {
    ImuSample s;
    s.time = 1.7e9 + k / 200.0;  // an epoch time: ns kept
    s.angular_velocity = Eigen::Vector3d(std::sin(k * 0.3), -1.0 / (k + 3.0), 1e-17 * k);
    s.linear_acceleration = Eigen::Vector3d(0.1 * k, -9.80665, std::cos(k * 1.1));
    samples.push_back(s);
  }
  const std::string path = (dir / "imu.csv").string();
  write_imu_csv(path, samples);
  const std::vector<ImuSample> back = read_imu_csv(path);
  REQUIRE(back.size() == samples.size());
  for (std::size_t k = 0; k < back.size(); ++k) {
    CAPTURE(k);
    CHECK(std::abs(back[k].time - samples[k].time) < 1e-9);
    CHECK(back[k].angular_velocity == samples[k].angular_velocity);
    CHECK(back[k].linear_acceleration == samples[k].linear_acceleration);
  }
  const std::vector<ImuSample> four =
      read_imu_csv(write_text(dir / "four.csv", "# a comment\n\n time , wx, wy, wz\r\n0.5,1,2,3\n# more\n0.25,-1,0,+4e-1\n"));
  REQUIRE(four.size() == 2);  // as the file orders them: the localizer drops what is out of order
  CHECK(four[1].time == 0.25);
  CHECK(four[1].angular_velocity == Eigen::Vector3d(-1, 0, 0.4));
  CHECK(four[0].linear_acceleration == Eigen::Vector3d::Zero());
}

TEST_CASE("imu csv: errors name the file, the line and the column", "[unit][io]") {
  const fs::path dir = test::temp_dir("imu_csv_errors");
  const auto fails = [&](const char* name, const std::string& text, const std::string& expected) {
    const std::string path = write_text(dir / name, text);
    INFO(text);
    CHECK_THROWS_AS(read_imu_csv(path), IoError);
    CHECK_THROWS_WITH(read_imu_csv(path), Catch::Contains(name) && Catch::Contains(expected));
  };
  fails("header.csv", "time,wx,wz,wy\n0,0,0,0\n", "line 1, column 3: header 'wz' where 'wy' belongs");
  fails("no_header.csv", "0.1,1,2,3\n", "line 1, column 1: header '0.1' where 'time' belongs");
  fails("five.csv", "time,wx,wy,wz,ax\n", "line 1: the header has 5 columns; expected time,wx,wy,wz or");
  fails("columns.csv", "time,wx,wy,wz\n0,1,2,3\n0.1,1,2\n", "line 3: 3 columns; the header has 4");
  fails("word.csv", "time,wx,wy,wz,ax,ay,az\n\n0,1,2,3,4,5,6\n0.1,1,two,3,4,5,6\n",
        "line 4, column 3 (wy): 'two' is not a number");
  fails("empty_cell.csv", "time,wx,wy,wz\n0.1,1,,3\n", "line 2, column 3 (wy): '' is not a number");
  fails("nan.csv", "time,wx,wy,wz,ax,ay,az\n0.1,1,2,3,4,5,nan\n", "line 2, column 7 (az): nan is not finite");
  fails("inf_time.csv", "time,wx,wy,wz\ninf,1,2,3\n", "line 2, column 1 (time): inf is not finite");
  fails("comments_only.csv", "# nothing\n\n", "no header line time,wx,wy,wz[,ax,ay,az]");
  CHECK_THROWS_AS(read_imu_csv((dir / "missing.csv").string()), IoError);
  ImuSample s;
  s.angular_velocity.x() = std::numeric_limits<double>::quiet_NaN();
  CHECK_THROWS_WITH(write_imu_csv((dir / "out.csv").string(), {s}), Catch::Contains("angular_velocity.x is nan"));
}
