// PLY (ascii, binary little/big endian, float/double, other properties and elements)
// and KITTI .bin reading.
#include "../support/test_support.hpp"

#include <ndtcu/io.hpp>

#include <cstring>

using namespace ndtcu;

namespace {

template <typename T>
void put(std::string& out, T v, bool big) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  if (big) std::reverse(b, b + sizeof(T));
  out.append(b, sizeof(T));
}

// A PLY with a face element before and after the vertices, extra vertex properties,
// x y z as `xyz_type` (float or double), and intensity as uchar.
std::string make_ply(const std::string& format, const std::string& xyz_type, int n) {
  std::string h = "ply\nformat " + format + " 1.0\ncomment made by a test\nelement face 2\n"
                  "property list uchar int vertex_indices\nelement vertex " + std::to_string(n) + "\n"
                  "property " + xyz_type + " x\nproperty short label\nproperty " + xyz_type + " y\n"
                  "property " + xyz_type + " z\nproperty uchar intensity\nproperty list uchar float tags\n"
                  "element edge 1\nproperty int a\nproperty int b\nend_header\n";
  bool big = format == "binary_big_endian";
  if (format == "ascii") {
    std::string body = "3 0 1 2\n4 0 1 2 3\n";
    for (int i = 0; i < n; ++i) {
      body += std::to_string(i * 0.5) + " -7 " + std::to_string(-1.0 * i) + " " + std::to_string(10.0 + i) + " " +
              std::to_string(i % 200) + " 2 0.5 1.5\n";
    }
    return h + body + "0 1\n";
  }
  std::string body;
  put<std::uint8_t>(body, 3, big);
  for (int k = 0; k < 3; ++k) put<std::int32_t>(body, k, big);
  put<std::uint8_t>(body, 4, big);
  for (int k = 0; k < 4; ++k) put<std::int32_t>(body, k, big);
  for (int i = 0; i < n; ++i) {
    auto coord = [&](double v) { xyz_type == "double" ? put<double>(body, v, big) : put<float>(body, static_cast<float>(v), big); };
    coord(i * 0.5);
    put<std::int16_t>(body, -7, big);
    coord(-1.0 * i);
    coord(10.0 + i);
    put<std::uint8_t>(body, static_cast<std::uint8_t>(i % 200), big);
    put<std::uint8_t>(body, 2, big);
    put<float>(body, 0.5f, big);
    put<float>(body, 1.5f, big);
  }
  put<std::int32_t>(body, 0, big);
  put<std::int32_t>(body, 1, big);
  return h + body;
}

}  // namespace

TEST_CASE("PLY ascii and binary, little and big endian, float and double", "[unit][io]") {
  for (const char* format : {"ascii", "binary_little_endian", "binary_big_endian"}) {
    for (const char* type : {"float", "double"}) {
      CAPTURE(format, type);
      CloudInfo info;
      PointCloud c = parse_ply(make_ply(format, type, 30), "t.ply", {}, &info);
      REQUIRE(c.size() == 30);
      CHECK(info.encoding == format);
      CHECK(info.xyz_double == (std::string(type) == "double"));
      CHECK(info.intensity_field == "intensity");
      REQUIRE(c.has_intensity());
      for (int i = 0; i < 30; ++i) {
        CHECK(c.points[i] == Eigen::Vector3f(i * 0.5f, -1.f * i, 10.f + i));
        CHECK(c.intensity[i] == static_cast<float>(i % 200));
      }
    }
  }
}

TEST_CASE("PLY with vertex rows that contain non-finite values", "[unit][io]") {
  std::string ply = "ply\nformat ascii 1.0\nelement vertex 3\nproperty float x\nproperty float y\nproperty float z\n"
                    "end_header\n1 2 3\nnan 0 0\n4 5 6\n";
  CloudInfo info;
  PointCloud c = parse_ply(ply, "t.ply", {}, &info);
  CHECK(c.size() == 2);
  CHECK(info.non_finite == 1);
  CHECK_FALSE(c.has_intensity());
}

TEST_CASE("KITTI .bin reads float32 x y z reflectance", "[unit][io]") {
  std::string bytes;
  for (int i = 0; i < 5; ++i) {
    for (float v : {1.f * i, 2.f * i, -3.f * i, 0.1f * i}) put<float>(bytes, v, false);
  }
  CloudInfo info;
  PointCloud c = parse_kitti_bin(bytes, "t.bin", {}, &info);
  REQUIRE(c.size() == 5);
  CHECK(c.points[4] == Eigen::Vector3f(4, 8, -12));
  CHECK(c.intensity[4] == 0.4f);
  CHECK(info.intensity_field == "reflectance");
}

TEST_CASE("PLY element without properties and a huge count is skipped at once", "[unit][io]") {
  for (const char* format : {"ascii", "binary_little_endian"}) {
    CAPTURE(format);
    std::string ply = std::string("ply\nformat ") + format +
                      " 1.0\nelement nothing 1000000000000000000\nelement vertex 1\nproperty float x\n"
                      "property float y\nproperty float z\nend_header\n";
    if (std::string(format) == "ascii") ply += "1 2 3\n";
    else for (float v : {1.f, 2.f, 3.f}) put<float>(ply, v, false);
    PointCloud c = parse_ply(ply, "t.ply");
    REQUIRE(c.size() == 1);
    CHECK(c.points[0] == Eigen::Vector3f(1, 2, 3));
  }
}
