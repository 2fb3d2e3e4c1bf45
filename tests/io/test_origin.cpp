// The origin a cloud is read with (OriginPolicy::Auto) comes from the median of its points,
// not from whichever point comes first: the same for any order of the same points, so the
// same map gives the same alignment; a few stray points neither move it nor take the other
// points' precision with them; a tiled map's origin does not depend on its metadata's order.
#include "../support/pcd_builder.hpp"
#include "../support/test_support.hpp"

#include <ndtcu/aligner.hpp>
#include <ndtcu/filters.hpp>
#include <ndtcu/io.hpp>
#include <ndtcu/settings.hpp>
#include <ndtcu/tiled_map.hpp>
#include <ndtcu/trajectory.hpp>

#include <algorithm>
#include <array>
#include <filesystem>
#include <optional>
#include <random>
#include <sstream>

using namespace ndtcu;
namespace fs = std::filesystem;

namespace {

const fs::path kSample = ndtcu::test::source_dir() / "data" / "sample";

// A PCD of `points` (world coordinates) as float64 x y z, binary.
std::string float64_pcd(const std::vector<Eigen::Vector3d>& points) {
  test::PcdSpec spec;
  spec.fields = {{"x", 'F', 8, 1}, {"y", 'F', 8, 1}, {"z", 'F', 8, 1}};
  for (const auto& p : points) spec.rows.push_back({p.x(), p.y(), p.z()});
  return test::make_pcd(spec);
}

// The per-axis lower median of `points`, rounded to whole metres: the origin the reader
// documents, computed here on its own.
Eigen::Vector3d rounded_median(std::vector<Eigen::Vector3d> points) {
  Eigen::Vector3d m;
  for (int a = 0; a < 3; ++a) {
    std::vector<double> v;
    for (const auto& p : points) v.push_back(p[a]);
    std::sort(v.begin(), v.end());
    m[a] = std::round(v[(v.size() - 1) / 2]);
  }
  return m;
}

std::vector<std::array<float, 3>> sorted_points(const PointCloud& c) {
  std::vector<std::array<float, 3>> v;
  for (const auto& p : c.points) v.push_back({p.x(), p.y(), p.z()});
  std::sort(v.begin(), v.end());
  return v;
}

}  // namespace

TEST_CASE("origin: a UTM map read in any order of its points has one origin and gives one alignment",
          "[unit][io][origin]") {
  // The sample map moved to UTM coordinates and written as float64 in four orders. The
  // origin was the first point rounded: three orders gave three lattices of NDT voxels and
  // three alignments of one scan (two not converged, the others 0.25 m apart).
  const Eigen::Vector3d offset(680000.37, 3900000.81, 40.25);
  const PointCloud local = read_point_cloud((kSample / "map.pcd").string());
  std::vector<Eigen::Vector3d> world;
  for (std::size_t i = 0; i < local.size(); ++i) world.push_back(local.world(i) + offset);
  const Eigen::Vector3d expected = rounded_median(world);
  const auto dir = test::temp_dir("origin_order");

  // The scan voxel-filtered to 1 m, as the command line's tests align it (--source-voxel 1).
  const PointCloud scan = voxel_downsample(read_point_cloud((kSample / "scans" / "000000.pcd").string()), 1.0);
  const Trajectory truth = read_trajectory((kSample / "poses_tum.txt").string());
  Eigen::Matrix4d guess = truth.front().pose.matrix();
  guess.topRightCorner<3, 1>() += offset;
  AlignSettings settings = autoware_preset();
  ExecutionOptions execution;
  execution.backend = Backend::Cpu;
  execution.threads = 2;

  std::vector<std::array<float, 3>> first_points;
  std::optional<Eigen::Vector3d> first_position;
  for (unsigned seed : {0u, 1u, 2u, 3u}) {
    CAPTURE(seed);
    std::vector<Eigen::Vector3d> order = world;
    if (seed > 0) std::shuffle(order.begin(), order.end(), std::mt19937(seed));
    const std::string path = (dir / ("map_" + std::to_string(seed) + ".pcd")).string();
    test::write_bytes(path, float64_pcd(order));
    const PointCloud map = read_point_cloud(path);
    REQUIRE(map.size() == world.size());
    CHECK(map.origin == expected);
    // The same float32 points, in another order.
    const auto points = sorted_points(map);
    if (first_points.empty()) first_points = points;
    CHECK(points == first_points);

    const AlignResult r = align(map, scan, guess, settings, execution);
    CHECK(r.converged);
    const Eigen::Vector3d position = r.transform.topRightCorner<3, 1>();
    // The truth is the sample's pose (the filtered scan aligns to within 1 cm of it).
    CHECK((position - (truth.front().pose.translation() + offset)).norm() < 0.05);
    if (!first_position) first_position = position;
    // The same voxels from the same points: the cell sums, in double, are added in another
    // order, which can change their last bits and nothing more.
    CHECK((position - *first_position).norm() < 1e-6);
  }
}

TEST_CASE("origin: stray points neither move the origin nor take the others with them", "[unit][io][origin]") {
  const auto dir = test::temp_dir("origin_strays");
  std::vector<Eigen::Vector3d> utm;
  for (int i = 0; i < 999; ++i) utm.emplace_back(500000.0 + 0.013 * i, 4400000.0 + 0.007 * i, 12.0 + 0.001 * i);

  SECTION("a first point at 1e300 is dropped alone") {
    // It was the origin, and the 999 others, 1e300 away from it, were dropped instead.
    std::vector<Eigen::Vector3d> points = utm;
    points.insert(points.begin(), Eigen::Vector3d(1e300, 0.0, 0.0));
    const std::string path = (dir / "stray_far.pcd").string();
    test::write_bytes(path, float64_pcd(points));
    CloudInfo info;
    const PointCloud c = read_point_cloud(path, {}, &info);
    CHECK(c.size() == 999u);
    CHECK(info.out_of_range == 1u);
    CHECK(c.origin == rounded_median(utm));
  }

  SECTION("a first point at zero leaves a UTM map its millimetres") {
    // The origin stayed at zero, and float32 kept the UTM map at about 0.5 m.
    std::vector<Eigen::Vector3d> points = utm;
    points.insert(points.begin(), Eigen::Vector3d::Zero());
    const std::string path = (dir / "stray_zero.pcd").string();
    test::write_bytes(path, float64_pcd(points));
    const PointCloud c = read_point_cloud(path);
    REQUIRE(c.size() == 1000u);
    CHECK(c.origin == rounded_median(points));
    CHECK(c.origin.x() > 1e5);
    double worst = 0.0;
    for (std::size_t i = 1; i < points.size(); ++i) worst = std::max(worst, (c.world(i) - points[i]).cwiseAbs().maxCoeff());
    // float32 within 13 m of the origin resolves 1 um.
    CHECK(worst < 1e-5);

    // Reversed, the stray point last: the same origin.
    std::reverse(points.begin(), points.end());
    test::write_bytes(path, float64_pcd(points));
    CHECK(read_point_cloud(path).origin == c.origin);
  }
}

TEST_CASE("origin: near zero it stays zero and float32 points are read bit for bit", "[unit][io][origin]") {
  // A scan in its sensor frame, with a few far returns beyond 10 km: the median is near
  // zero, so the origin is zero and every float32 value is the file's own.
  test::PcdSpec spec;
  spec.fields = {{"x", 'F', 4, 1}, {"y", 'F', 4, 1}, {"z", 'F', 4, 1}};
  for (int i = 0; i < 100; ++i) spec.rows.push_back({0.37 * i, -0.11 * i, 1.5});
  spec.rows.push_back({20000.5, 0.0, 0.0});
  const auto dir = test::temp_dir("origin_zero");
  const std::string path = (dir / "scan.pcd").string();
  test::write_bytes(path, test::make_pcd(spec));
  const PointCloud c = read_point_cloud(path);
  CHECK(c.origin.isZero());
  REQUIRE(c.size() == spec.rows.size());
  for (std::size_t i = 0; i < c.size(); ++i) {
    for (int a = 0; a < 3; ++a) CHECK(c.points[i][a] == static_cast<float>(spec.rows[i][static_cast<std::size_t>(a)]));
  }
}

TEST_CASE("origin: a tiled UTM map's origin does not depend on the order of its metadata", "[unit][io][origin]") {
  PointCloud map = read_point_cloud((kSample / "map.pcd").string());
  map.origin = Eigen::Vector3d(680000.0, 3900000.0, 40.0);
  const fs::path dir = test::temp_dir("origin_tiles");
  const TiledMapMetadata meta = write_tiled_map(map, 25.0, dir.string());
  REQUIRE(meta.tiles.size() > 2);
  const Eigen::Vector3d first = read_tiled_map(dir.string()).cloud.origin;
  // A corner of the tile lattice, near the middle of the map.
  std::vector<double> xs, ys;
  for (const MapTile& t : meta.tiles) {
    xs.push_back(t.x_min);
    ys.push_back(t.y_min);
  }
  std::sort(xs.begin(), xs.end());
  std::sort(ys.begin(), ys.end());
  CHECK(first == Eigen::Vector3d(xs[(xs.size() - 1) / 2], ys[(ys.size() - 1) / 2], 0.0));

  // The metadata's tile lines reversed: the first tile was the origin, now another.
  const fs::path yaml = dir / kTiledMapMetadataFile;
  std::string text = test::read_bytes(yaml), head, body;
  std::vector<std::string> tiles;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.find(".pcd:") != std::string::npos) tiles.push_back(line);
    else head += line + "\n";
  }
  REQUIRE(tiles.size() == meta.tiles.size());
  std::reverse(tiles.begin(), tiles.end());
  for (const auto& t : tiles) body += t + "\n";
  test::write_bytes(yaml, head + body);
  REQUIRE(read_tiled_map_metadata(dir.string()).tiles.front().file == meta.tiles.back().file);
  CHECK(read_tiled_map(dir.string()).cloud.origin == first);
}
