// PCD reading: every encoding, field order, type, COUNT > 1, padding, organized clouds,
// non-finite points, and coordinates far from the origin.
#include "../support/pcd_builder.hpp"
#include "../support/test_support.hpp"

#include <ndtcu/io.hpp>

#include <cmath>
#include <limits>

using namespace ndtcu;
using ndtcu::test::make_pcd;
using ndtcu::test::PcdSpec;

namespace {
const char* kEncodings[] = {"ascii", "binary", "binary_compressed"};
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

PointCloud parse(const std::string& bytes, CloudInfo* info = nullptr, const ReadOptions& o = {}) {
  return parse_pcd(bytes, "test.pcd", o, info);
}
}  // namespace

TEST_CASE("PCD x y z intensity reads the same in every encoding", "[unit][io]") {
  PcdSpec s;
  s.fields = {{"x", 'F', 4, 1}, {"y", 'F', 4, 1}, {"z", 'F', 4, 1}, {"intensity", 'F', 4, 1}};
  for (int i = 0; i < 50; ++i) s.rows.push_back({i * 0.5, -i * 0.25, 1.0 + i, static_cast<double>(i % 7)});
  for (const char* enc : kEncodings) {
    CAPTURE(enc);
    s.encoding = enc;
    CloudInfo info;
    PointCloud c = parse(make_pcd(s), &info);
    REQUIRE(c.size() == 50);
    REQUIRE(c.has_intensity());
    CHECK(info.encoding == enc);
    CHECK(info.intensity_field == "intensity");
    CHECK(info.non_finite == 0);
    for (int i = 0; i < 50; ++i) {
      CHECK(c.points[i].x() == static_cast<float>(i * 0.5));
      CHECK(c.points[i].y() == static_cast<float>(-i * 0.25));
      CHECK(c.points[i].z() == static_cast<float>(1.0 + i));
      CHECK(c.intensity[i] == static_cast<float>(i % 7));
    }
  }
}

TEST_CASE("PCD fields in any order, with padding, COUNT > 1 and mixed types", "[unit][io]") {
  PcdSpec s;
  // normal (3 x F4), padding (U1 x 3), z as F8, rgb-ish U4, y as I2, fpfh (U1 x 5), x as F4
  s.fields = {{"normal", 'F', 4, 3}, {"_", 'U', 1, 3}, {"z", 'F', 8, 1}, {"rgb", 'U', 4, 1},
              {"y", 'I', 2, 1},      {"fpfh", 'U', 1, 5}, {"x", 'F', 4, 1}};
  for (int i = 0; i < 20; ++i) {
    s.rows.push_back({0.1, 0.2, 0.3, 7, 8, 9, 100.125 + i, 0xffffff, static_cast<double>(-i), 1, 2, 3, 4, 5,
                      2.5 * i});
  }
  for (const char* enc : kEncodings) {
    CAPTURE(enc);
    s.encoding = enc;
    CloudInfo info;
    PointCloud c = parse(make_pcd(s), &info);
    REQUIRE(c.size() == 20);
    CHECK_FALSE(c.has_intensity());
    CHECK(info.xyz_double);
    REQUIRE(info.fields.size() == 7);
    CHECK(info.fields[5].count == 5);
    for (int i = 0; i < 20; ++i) {
      CHECK(c.points[i].x() == static_cast<float>(2.5 * i));
      CHECK(c.points[i].y() == static_cast<float>(-i));
      CHECK(c.points[i].z() == static_cast<float>(100.125 + i));
    }
  }
}

TEST_CASE("PCD reads x y z of every type and size", "[unit][io]") {
  const std::pair<char, int> types[] = {{'F', 4}, {'F', 8}, {'I', 1}, {'I', 2}, {'I', 4}, {'I', 8},
                                        {'U', 1}, {'U', 2}, {'U', 4}, {'U', 8}};
  for (auto [t, size] : types) {
    for (const char* enc : kEncodings) {
      CAPTURE(t, size, enc);
      PcdSpec s;
      s.encoding = enc;
      s.fields = {{"x", t, size, 1}, {"y", t, size, 1}, {"z", t, size, 1}, {"intensity", t, size, 1}};
      for (int i = 0; i < 10; ++i) s.rows.push_back({1.0 * i, 2.0 * i, 100.0 + i, 3.0 * i});
      PointCloud c = parse(make_pcd(s));
      REQUIRE(c.size() == 10);
      for (int i = 0; i < 10; ++i) {
        CHECK(c.points[i] == Eigen::Vector3f(1.f * i, 2.f * i, 100.f + i));
        CHECK(c.intensity[i] == 3.f * i);
      }
    }
  }
}

TEST_CASE("PCD organized cloud with non-finite points drops and counts them", "[unit][io]") {
  PcdSpec s;
  s.fields = {{"x", 'F', 4, 1}, {"y", 'F', 4, 1}, {"z", 'F', 4, 1}};
  s.width = 4;
  s.height = 3;
  for (int i = 0; i < 12; ++i) {
    if (i % 4 == 1) s.rows.push_back({kNaN, kNaN, kNaN});
    else if (i == 6) s.rows.push_back({1.0, std::numeric_limits<double>::infinity(), 0.0});
    else s.rows.push_back({1.0 * i, 0.0, 0.0});
  }
  for (const char* enc : kEncodings) {
    CAPTURE(enc);
    s.encoding = enc;
    CloudInfo info;
    PointCloud c = parse(make_pcd(s), &info);
    CHECK(info.width == 4);
    CHECK(info.height == 3);
    CHECK(info.points_in_file == 12);
    CHECK(info.non_finite == 4);
    REQUIRE(c.size() == 8);
    CHECK(c.points[0].x() == 0.f);
    CHECK(c.points[1].x() == 2.f);
    CHECK(c.points.back().x() == 11.f);
  }
}

TEST_CASE("PCD points beyond float32's range are counted as out of range, not as non-finite", "[unit][io]") {
  // Finite float64 coordinates near 1e302 cannot be stored as float32: the point is
  // dropped, and the count says why (they are not NaN or infinite).
  PcdSpec s;
  s.fields = {{"x", 'F', 8, 1}, {"y", 'F', 8, 1}, {"z", 'F', 8, 1}};
  s.rows = {{1.0, 2.0, 3.0}, {1e302, 0.0, 0.0}, {0.0, -3e39, 0.0}, {kNaN, 0.0, 0.0}, {4.0, 5.0, 6.0}};
  for (const char* enc : kEncodings) {
    CAPTURE(enc);
    s.encoding = enc;
    CloudInfo info;
    ReadOptions o;
    o.origin_policy = OriginPolicy::Zero;
    PointCloud c = parse(make_pcd(s), &info, o);
    CHECK(info.points_in_file == 5);
    CHECK(info.non_finite == 1);
    CHECK(info.out_of_range == 2);
    REQUIRE(c.size() == 2);
    CHECK(c.points[1].z() == 6.f);
  }
}

TEST_CASE("PCD header variants: no POINTS line, comments, CRLF, no VIEWPOINT", "[unit][io]") {
  PcdSpec s;
  s.fields = {{"x", 'F', 4, 1}, {"y", 'F', 4, 1}, {"z", 'F', 4, 1}};
  s.rows = {{1, 2, 3}, {4, 5, 6}};
  s.encoding = "ascii";
  s.write_points_line = false;
  CHECK(parse(make_pcd(s)).size() == 2);

  std::string crlf =
      "# comment\r\nVERSION .7\r\nFIELDS x y z\r\nSIZE 4 4 4\r\nTYPE F F F\r\nCOUNT 1 1 1\r\nWIDTH 2\r\nHEIGHT 1\r\n"
      "POINTS 2\r\nDATA ascii\r\n1 2 3\r\n4 5 6\r\n";
  PointCloud c = parse(crlf);
  REQUIRE(c.size() == 2);
  CHECK(c.points[1] == Eigen::Vector3f(4, 5, 6));

  // Old files without SIZE/TYPE/COUNT: every field is a 4-byte float, as PCL assumes.
  std::string old = "FIELDS x y z\nWIDTH 1\nPOINTS 1\nDATA ascii\n7 8 9\n";
  CHECK(parse(old).points.at(0) == Eigen::Vector3f(7, 8, 9));
}

TEST_CASE("PCD with UTM float64 coordinates keeps millimetres through the origin", "[unit][io]") {
  PcdSpec s;
  s.fields = {{"x", 'F', 8, 1}, {"y", 'F', 8, 1}, {"z", 'F', 8, 1}};
  const double base[3] = {680000.1234, 3900000.5678, 40.9012};
  for (int i = 0; i < 100; ++i) s.rows.push_back({base[0] + 0.001 * i, base[1] - 0.0015 * i, base[2] + 0.01 * i});
  for (const char* enc : kEncodings) {
    CAPTURE(enc);
    s.encoding = enc;
    CloudInfo info;
    PointCloud c = parse(make_pcd(s), &info);
    CHECK(info.xyz_double);
    // The per-axis median of the points (point 50's y: the lower median of 100), rounded.
    CHECK(c.origin == Eigen::Vector3d(680000, 3900000, 41));
    for (int i = 0; i < 100; ++i) {
      Eigen::Vector3d w = c.world(i);
      CHECK(std::abs(w.x() - s.rows[i][0]) < 1e-6);
      CHECK(std::abs(w.y() - s.rows[i][1]) < 1e-6);
      CHECK(std::abs(w.z() - s.rows[i][2]) < 1e-6);
    }
  }
  ReadOptions fixed;
  fixed.origin_policy = OriginPolicy::Fixed;
  fixed.origin = {680000, 3900000, 40};
  s.encoding = "binary";
  PointCloud c = parse(make_pcd(s), nullptr, fixed);
  CHECK(c.origin == fixed.origin);
  CHECK(std::abs(c.world(5).y() - s.rows[5][1]) < 1e-6);

  // Near the origin, Auto keeps a zero origin.
  PcdSpec near = s;
  near.rows = {{1, 2, 3}};
  CHECK(parse(make_pcd(near)).origin.isZero());
}

TEST_CASE("PCD with zero points is a valid empty cloud", "[unit][io]") {
  PcdSpec s;
  s.fields = {{"x", 'F', 4, 1}, {"y", 'F', 4, 1}, {"z", 'F', 4, 1}};
  for (const char* enc : kEncodings) {
    s.encoding = enc;
    CHECK(parse(make_pcd(s)).empty());
  }
}
