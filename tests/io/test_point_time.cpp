// Per-point time: the field sensors name, its unit from its type and values, absolute
// stamps made relative, implausible times reported and dropped, the PCD writer's `t`, and
// the filters keeping the time as they keep intensity.
#include "../support/pcd_builder.hpp"
#include "../support/test_support.hpp"

#include <ndtcu/filters.hpp>
#include <ndtcu/io.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

using namespace ndtcu;
using ndtcu::test::make_pcd;
using ndtcu::test::PcdSpec;

namespace {

const char* kEncodings[] = {"ascii", "binary", "binary_compressed"};

// A PCD of n points x = i, y = 2i, z = 1 with one time field `name` of TYPE/SIZE
// `type`/`size` whose value for point i is `value(i)`.
template <typename F>
std::string pcd_with_time(const std::string& name, char type, int size, int n, F value, const char* encoding) {
  PcdSpec s;
  s.fields = {{"x", 'F', 4, 1}, {"y", 'F', 4, 1}, {"z", 'F', 4, 1}, {name, type, size, 1}};
  for (int i = 0; i < n; ++i) s.rows.push_back({double(i), 2.0 * i, 1.0, value(i)});
  s.encoding = encoding;
  return make_pcd(s);
}

struct SensorField {
  const char* name;
  char type;
  int size;
  double (*value)(int);  // the file's value for point i
  TimeUnit unit;         // the unit detected
  bool absolute;
  double seconds_per_point;  // the time of point i relative to point 0
  double first;              // the time of point 0 (s)
};

// 100 points over 0.099 s (a 10 Hz sweep), as each sensor writes them.
const SensorField kSensorFields[] = {
    // Ouster: uint32 nanoseconds from the scan's stamp.
    {"t", 'U', 4, [](int i) { return i * 1e6; }, TimeUnit::Nanoseconds, false, 1e-3, 0.0},
    // Livox: uint32 nanoseconds.
    {"offset_time", 'U', 4, [](int i) { return i * 1e6 + 5e6; }, TimeUnit::Nanoseconds, false, 1e-3, 5e-3},
    // Velodyne: float32 seconds, before the stamp at the sweep's end.
    {"time", 'F', 4, [](int i) { return -0.099 + i * 1e-3; }, TimeUnit::Seconds, false, 1e-3, -0.099},
    // Hesai: float64 absolute seconds.
    {"timestamp", 'F', 8, [](int i) { return 1.7e9 + 0.25 + i * 1e-3; }, TimeUnit::Seconds, true, 1e-3, 0.0},
    // Livox's ROS driver: float64 absolute nanoseconds.
    {"timestamp", 'F', 8, [](int i) { return 1.7e18 + i * 1e6; }, TimeUnit::Nanoseconds, true, 1e-3, 0.0},
    // Autoware: float64 seconds from the stamp.
    {"time_stamp", 'F', 8, [](int i) { return i * 1e-3; }, TimeUnit::Seconds, false, 1e-3, 0.0},
    // uint64 absolute nanoseconds.
    {"time_stamp", 'U', 8, [](int i) { return 1.7e18 + i * 1e6; }, TimeUnit::Nanoseconds, true, 1e-3, 0.0},
};

}  // namespace

TEST_CASE("point time: each sensor's field and unit from PCD, in every encoding", "[unit][io]") {
  for (const SensorField& f : kSensorFields) {
    for (const char* enc : kEncodings) {
      CAPTURE(f.name, f.type, f.size, enc);
      CloudInfo info;
      const PointCloud c = parse_pcd(pcd_with_time(f.name, f.type, f.size, 100, f.value, enc), "s.pcd", {}, &info);
      REQUIRE(c.size() == 100);
      REQUIRE(c.has_time());
      CHECK(info.time_field == f.name);
      CHECK(info.time_unit == f.unit);
      CHECK(info.time_absolute == f.absolute);
      CHECK(info.time_dropped.empty());
      // Tolerance: float32 at 0.1 s resolves 7.5e-9 s; absolute stamps in float64 resolve
      // 2.4e-7 s at 1.7e9 s and 256 ns at 1.7e18 ns.
      const double tol = f.absolute ? 1e-6 : 2e-8;
      for (int i = 0; i < 100; ++i) {
        CHECK(std::abs(double(c.time[i]) - (f.first + i * f.seconds_per_point)) <= tol);
      }
    }
  }
}

TEST_CASE("point time: the preferred field, an override by name and unit, and none", "[unit][io]") {
  PcdSpec s;
  s.fields = {{"x", 'F', 4, 1}, {"y", 'F', 4, 1}, {"z", 'F', 4, 1}, {"time", 'F', 4, 1}, {"t", 'U', 4, 1},
              {"stamp_ms", 'F', 8, 1}};
  for (int i = 0; i < 10; ++i) s.rows.push_back({double(i), 0, 0, i * 0.01, i * 2e6, i * 3.0});
  const std::string pcd = make_pcd(s);
  CloudInfo info;
  PointCloud c = parse_pcd(pcd, "p.pcd", {}, &info);
  CHECK(info.time_field == "t");  // t comes first among the names sensors use
  CHECK(c.time.at(3) == static_cast<float>(6e-3));

  ReadOptions o;
  parse_point_time("time:s", o);
  c = parse_pcd(pcd, "p.pcd", o, &info);
  CHECK(info.time_field == "time");
  CHECK(c.time.at(3) == static_cast<float>(static_cast<float>(0.03)));
  parse_point_time("stamp_ms:ms", o);  // a field no sensor name matches, in milliseconds
  c = parse_pcd(pcd, "p.pcd", o, &info);
  CHECK(info.time_field == "stamp_ms");
  CHECK(info.time_unit == TimeUnit::Milliseconds);
  CHECK(c.time.at(3) == static_cast<float>(9e-3));
  parse_point_time("t", o);  // unit detected
  CHECK(o.time_unit == TimeUnit::Auto);
  parse_point_time("none", o);
  c = parse_pcd(pcd, "p.pcd", o, &info);
  CHECK_FALSE(c.has_time());

  parse_point_time("ring:ns", o);
  CHECK_THROWS_WITH(parse_pcd(pcd, "p.pcd", o), Catch::Contains("p.pcd") && Catch::Contains("no time field 'ring'") &&
                                                    Catch::Contains("x y z time t stamp_ms"));
  CHECK_THROWS_WITH(parse_point_time("t:minutes", o), Catch::Contains("unit 'minutes' is not s, ms, us, ns or auto"));
  CHECK_THROWS_WITH(parse_point_time(":ns", o), Catch::Contains("names no field"));
}

TEST_CASE("point time: implausible times are reported and dropped, the points kept", "[unit][io]") {
  struct Case {
    const char* why;
    const char* name;
    char type;
    int size;
    double (*value)(int);
    const char* reported;
  };
  const Case cases[] = {
      {"all zero", "t", 'U', 4, [](int) { return 0.0; }, "every point has the same time"},
      {"two seconds", "time", 'F', 4, [](int i) { return i * 0.02; }, "more than a sweep takes"},
      {"not finite", "time", 'F', 4, [](int i) { return i == 50 ? std::nan("") : i * 1e-3; }, "not finite"},
      {"far from the stamp", "time", 'F', 8, [](int i) { return 5.0 + i * 1e-3; }, "lie more than 1 s from"},
      {"float32 stamps", "timestamp", 'F', 4, [](int i) { return 1.7e9 + i * 1e-3 * 256; },
       "stored as float32"},
  };
  for (const Case& k : cases) {
    CAPTURE(k.why);
    CloudInfo info;
    const PointCloud c = parse_pcd(pcd_with_time(k.name, k.type, k.size, 100, k.value, "binary"), "bad.pcd", {}, &info);
    CHECK(c.size() == 100);
    CHECK_FALSE(c.has_time());
    CHECK(info.time_field.empty());
    CHECK_THAT(info.time_dropped, Catch::Contains(k.reported));
  }
}

TEST_CASE("point time: dropped points take their times with them", "[unit][io]") {
  // A NaN point (dropped as it is read) and points far from zero (an origin chosen after
  // all are read, then each made relative to it): every kept point keeps its own time.
  PcdSpec s;
  s.fields = {{"x", 'F', 8, 1}, {"y", 'F', 8, 1}, {"z", 'F', 8, 1}, {"t", 'U', 4, 1}};
  for (int i = 0; i < 20; ++i) s.rows.push_back({i == 7 ? std::nan("") : 5e5 + i, 4e6, 10.0, i * 1e6});
  const PointCloud c = parse_pcd(make_pcd(s), "far.pcd");
  REQUIRE(c.size() == 19);
  REQUIRE(c.has_time());
  CHECK(c.origin.x() != 0.0);
  for (std::size_t k = 0; k < c.size(); ++k) {
    const double x = c.world(k).x() - 5e5;
    CHECK(double(c.time[k]) == Approx(x * 1e-3).margin(1e-9));
  }
}

namespace {
template <typename T>
void put(std::string& out, T v, bool big) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  if (big) std::reverse(b, b + sizeof(T));
  out.append(b, sizeof(T));
}
}  // namespace

TEST_CASE("point time: PLY vertex properties in ascii and binary", "[unit][io]") {
  for (const char* format : {"ascii", "binary_little_endian", "binary_big_endian"}) {
    for (const bool absolute : {false, true}) {
      CAPTURE(format, absolute);
      const std::string type = absolute ? "double" : "uint";
      const std::string name = absolute ? "timestamp" : "offset_time";
      std::string ply = std::string("ply\nformat ") + format + " 1.0\nelement vertex 30\nproperty float x\n" +
                        "property float y\nproperty float z\nproperty " + type + " " + name + "\nend_header\n";
      const bool big = std::string(format) == "binary_big_endian";
      for (int i = 0; i < 30; ++i) {
        const double v = absolute ? 1.6e9 + i * 2e-3 : i * 2e6;
        if (std::string(format) == "ascii") {
          ply += std::to_string(i) + " 0 0 " + (absolute ? std::to_string(v) : std::to_string(i * 2000000)) + "\n";
        } else {
          put<float>(ply, float(i), big);
          put<float>(ply, 0.f, big);
          put<float>(ply, 0.f, big);
          if (absolute) put<double>(ply, v, big);
          else put<std::uint32_t>(ply, static_cast<std::uint32_t>(v), big);
        }
      }
      CloudInfo info;
      const PointCloud c = parse_ply(ply, "v.ply", {}, &info);
      REQUIRE(c.has_time());
      CHECK(info.time_field == name);
      CHECK(info.time_absolute == absolute);
      CHECK(info.time_unit == (absolute ? TimeUnit::Seconds : TimeUnit::Nanoseconds));
      // std::to_string keeps 6 decimals of an absolute stamp: microseconds.
      for (int i = 0; i < 30; ++i) CHECK(double(c.time[i]) == Approx(i * 2e-3).margin(2e-6));
    }
  }
}

TEST_CASE("point time: the PCD writer's t reads back bit for bit", "[unit][io]") {
  PointCloud cloud;
  for (int i = 0; i < 64; ++i) {
    cloud.points.emplace_back(float(i), float(-i), 0.5f);
    cloud.time.push_back(-0.05f + i * 1.37e-3f);
  }
  const auto dir = test::temp_dir("point_time_write");
  for (const bool with_intensity : {false, true}) {
    cloud.intensity.assign(with_intensity ? 64 : 0, 7.0f);
    for (const char* enc : kEncodings) {
      CAPTURE(with_intensity, enc);
      WriteOptions w;
      w.pcd_encoding = pcd_encoding_from_string(enc);
      const std::string path = (dir / (std::string(enc) + ".pcd")).string();
      write_point_cloud(path, cloud, w);
      CloudInfo info;
      const PointCloud back = read_point_cloud(path, {}, &info);
      CHECK(info.time_field == "t");
      CHECK(back.time == cloud.time);
      CHECK(back.has_intensity() == with_intensity);
    }
  }
}

TEST_CASE("point time: the crop and the voxel filter keep it as they keep intensity", "[unit][io]") {
  PointCloud cloud;
  for (int i = 0; i < 40; ++i) {
    cloud.points.emplace_back(1.0f + 0.1f * float(i), 0.0f, 0.0f);
    cloud.time.push_back(i * 1e-3f);
    cloud.intensity.push_back(float(i));
  }
  const PointCloud cropped = crop_range(cloud, 1.5, 3.0);
  REQUIRE(cropped.has_time());
  for (std::size_t k = 0; k < cropped.size(); ++k) {
    CHECK(cropped.time[k] == cloud.time[static_cast<std::size_t>(cropped.intensity[k])]);
  }
  // Leaf 1 m: cells of about ten points, each centroid's time the mean of its points' (as
  // its intensity, point i's being i, is the mean of theirs).
  const PointCloud down = voxel_downsample(cloud, 1.0);
  REQUIRE(down.has_time());
  REQUIRE(down.size() >= 4);
  for (std::size_t k = 0; k < down.size(); ++k) {
    CHECK(double(down.time[k]) == Approx(double(down.intensity[k]) * 1e-3).margin(1e-8));
  }
  // A view holds no times: nothing to keep.
  CHECK_FALSE(voxel_downsample(PointCloudView(cloud), 1.0).has_time());
}
