// Writing PCD (ascii, binary, binary_compressed) and KITTI .bin, read back by ndtcu.
#include "../support/test_support.hpp"

#include <ndtcu/io.hpp>

#include <random>

using namespace ndtcu;

namespace {
PointCloud random_cloud(std::size_t n, bool intensity, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-50.f, 50.f);
  PointCloud c;
  for (std::size_t i = 0; i < n; ++i) {
    c.points.emplace_back(u(rng), u(rng), u(rng));
    if (intensity) c.intensity.push_back(std::abs(u(rng)));
  }
  return c;
}
}  // namespace

TEST_CASE("PCD round trip is exact in every encoding", "[unit][io]") {
  auto dir = ndtcu::test::temp_dir("write_pcd");
  for (bool with_intensity : {false, true}) {
    PointCloud c = random_cloud(1000, with_intensity, 7);
    for (auto enc : {PcdEncoding::Ascii, PcdEncoding::Binary, PcdEncoding::BinaryCompressed}) {
      CAPTURE(with_intensity, static_cast<int>(enc));
      WriteOptions w;
      w.pcd_encoding = enc;
      auto path = (dir / "c.pcd").string();
      write_point_cloud(path, c, w);
      PointCloud r = read_point_cloud(path);
      REQUIRE(r.size() == c.size());
      CHECK(r.points == c.points);
      CHECK(r.intensity == c.intensity);
    }
  }
}

TEST_CASE("PCD of a cloud with a UTM origin is written as float64 world coordinates", "[unit][io]") {
  auto dir = ndtcu::test::temp_dir("write_utm");
  PointCloud c = random_cloud(100, true, 3);
  c.origin = {680000.0, 3900000.0, 40.0};
  auto path = (dir / "utm.pcd").string();
  write_pcd(path, c);
  CloudInfo info;
  PointCloud r = read_point_cloud(path, {}, &info);
  CHECK(info.xyz_double);
  REQUIRE(r.size() == c.size());
  // The reader picks its own origin (the points' median, rounded), so coordinates are
  // re-quantized relative to it: float32 spacing at up to ~90 m is 7.6e-6 m.
  for (std::size_t i = 0; i < c.size(); ++i) CHECK((r.world(i) - c.world(i)).norm() < 2e-5);
}

TEST_CASE("KITTI .bin round trip", "[unit][io]") {
  auto dir = ndtcu::test::temp_dir("write_bin");
  PointCloud c = random_cloud(200, true, 11);
  auto path = (dir / "c.bin").string();
  write_point_cloud(path, c);
  CHECK(std::filesystem::file_size(path) == 200 * 16);
  PointCloud r = read_point_cloud(path);
  CHECK(r.points == c.points);
  CHECK(r.intensity == c.intensity);
}

TEST_CASE("KITTI .bin refuses a cloud its float32 world coordinates would move by more than 1 mm", "[unit][io]") {
  // A UTM cloud written to .bin lost up to 0.125 m of its coordinates without a word.
  auto dir = ndtcu::test::temp_dir("write_bin_utm");
  PointCloud c;
  c.origin = {680000.0, 3900000.0, 40.0};
  c.points = {{0.1f, 0.2f, 0.3f}, {1.0f, 2.0f, 3.0f}};
  const std::string path = (dir / "utm.bin").string();
  try {
    write_point_cloud(path, c);
    FAIL("no IoError");
  } catch (const IoError& e) {
    CHECK(e.path() == path);
    // y: float32 is 0.25 m apart at 3.9e6 m, so 3900000.2 becomes 3900000.25.
    CHECK_THAT(e.reason(), Catch::Contains("KITTI .bin stores float32 world coordinates, which move this cloud's "
                                           "points by up to 0.05 m (point 0: y 3900000.200 m becomes 3900000.250)") &&
                               Catch::Contains("WriteOptions::allow_precision_loss"));
  }
  CHECK(!std::filesystem::exists(path));
  CHECK_THROWS_AS(write_kitti_bin(path, c), IoError);

  // Allowed: written, each coordinate the float32 nearest its world value.
  WriteOptions allow;
  allow.allow_precision_loss = true;
  write_point_cloud(path, c, allow);
  const PointCloud back = read_point_cloud(path, ReadOptions{OriginPolicy::Zero});
  REQUIRE(back.size() == 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    for (int a = 0; a < 3; ++a) CHECK(back.points[i][a] == static_cast<float>(c.world(i)[a]));
  }

  // Within float32's millimetres (an origin 1 km out), .bin is written as it always was.
  c.origin = {1000.0, -500.0, 10.0};
  write_point_cloud(path, c);
  CHECK(read_point_cloud(path).size() == 2u);
}

TEST_CASE("writing to a folder that does not exist names the file", "[unit][io]") {
  PointCloud c = random_cloud(3, false, 1);
  CHECK_THROWS_WITH(write_point_cloud("/nonexistent-dir/x.pcd", c),
                    Catch::Contains("/nonexistent-dir/x.pcd: its folder /nonexistent-dir does not exist"));
  CHECK_THROWS_AS(write_point_cloud("x.ply", c), IoError);
}

TEST_CASE("a view of points writes the file their cloud without intensities writes", "[unit][io]") {
  auto dir = ndtcu::test::temp_dir("write_view");
  PointCloud c = random_cloud(500, true, 5);
  c.origin = {680000.0, 3900000.0, 40.0};
  PointCloud bare = c;
  bare.intensity.clear();
  using ndtcu::test::read_bytes;
  std::filesystem::create_directories(dir / "view");
  std::filesystem::create_directories(dir / "cloud");
  // The points in a buffer of the caller's own, not in a PointCloud.
  std::vector<Eigen::Vector3f> buffer(c.points.begin(), c.points.end());
  PointCloudView view(buffer.data(), buffer.size(), c.origin);
  for (const char* name : {"c.pcd", "c.bin"}) {
    for (bool world_double : {true, false}) {
      CAPTURE(name, world_double);
      WriteOptions w;
      w.world_double_when_offset = world_double;
      w.allow_precision_loss = true;  // .bin: float32 world coordinates of a UTM cloud
      write_point_cloud((dir / "view" / name).string(), view, w);
      write_point_cloud((dir / "cloud" / name).string(), bare, w);
      std::string from_view = read_bytes(dir / "view" / name);
      CHECK(from_view.size() > 500 * 12);
      CHECK(from_view == read_bytes(dir / "cloud" / name));
    }
  }
  // An empty view writes an empty cloud.
  write_point_cloud((dir / "view" / "empty.pcd").string(), PointCloudView());
  CHECK(read_point_cloud((dir / "view" / "empty.pcd").string()).empty());
}
