// Tiled maps in Autoware's layout: tiling then loading gives the whole map's points and
// voxels, a UTM map keeps its precision, tiles are chosen by distance, a malformed tile is
// skipped and named, and the metadata's errors name the file and the line.
#include "../support/test_support.hpp"

#include <ndtcu/filters.hpp>
#include <ndtcu/io.hpp>
#include <ndtcu/localizer.hpp>
#include <ndtcu/scan_sequence.hpp>
#include <ndtcu/tiled_map.hpp>
#include <ndtcu/trajectory.hpp>
#include <ndtcu/voxel_map.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <tuple>
#include <vector>

using namespace ndtcu;
namespace fs = std::filesystem;

namespace {

const fs::path kSample = ndtcu::test::source_dir() / "data" / "sample";

std::vector<std::tuple<float, float, float>> sorted_points(const PointCloud& c) {
  std::vector<std::tuple<float, float, float>> v;
  for (const auto& p : c.points) v.emplace_back(p.x(), p.y(), p.z());
  std::sort(v.begin(), v.end());
  return v;
}

}  // namespace

TEST_CASE("a map split into tiles and read back holds the same points and the same voxels", "[unit][io]") {
  const PointCloud map = read_point_cloud((kSample / "map.pcd").string());
  const fs::path dir = test::temp_dir("tiles_sample");
  const TiledMapMetadata meta = write_tiled_map(map, 20.0, dir.string());
  REQUIRE(is_tiled_map(dir.string()));
  CHECK(meta.x_resolution == 20.0);
  CHECK(meta.tiles.size() > 4);
  // Each tile's points lie in its square, and the files are named by the lower corner.
  for (const MapTile& t : meta.tiles) {
    CAPTURE(t.file);
    CHECK(t.file == fmt::format("{}_{}.pcd", t.x_min, t.y_min));
    const PointCloud tile = read_point_cloud((dir / t.file).string());
    REQUIRE(!tile.empty());
    for (std::size_t i = 0; i < tile.size(); ++i) {
      const Eigen::Vector3d w = tile.world(i);
      CHECK((w.x() >= t.x_min && w.x() < t.x_min + 20.0 && w.y() >= t.y_min && w.y() < t.y_min + 20.0));
    }
  }
  const TiledMapMetadata back = read_tiled_map_metadata(dir.string());
  REQUIRE(back.tiles.size() == meta.tiles.size());
  for (std::size_t k = 0; k < back.tiles.size(); ++k) {
    CHECK(back.tiles[k].file == meta.tiles[k].file);
    CHECK(back.tiles[k].x_min == meta.tiles[k].x_min);
    CHECK(back.tiles[k].y_min == meta.tiles[k].y_min);
    CHECK(back.tiles[k].line == static_cast<int>(k) + 3);
  }

  const TiledMapRead all = read_tiled_map(dir.string());
  CHECK(all.loaded.size() == meta.tiles.size());
  CHECK(all.skipped.empty());
  REQUIRE(all.cloud.size() == map.size());
  CHECK(sorted_points(all.cloud) == sorted_points(map));

  // The voxels: the same cells (a 20 m tile holds whole 2 m voxels), the same counts, and
  // means and inverse covariances equal up to the order the cell's points were summed in
  // (tile by tile here, file order there): 1e-9 m and 1e-6 relative.
  VoxelMapOptions o;
  o.resolution = 2.0;
  const VoxelMap whole = VoxelMap::build(map, o), tiled = VoxelMap::build(all.cloud, o);
  REQUIRE(whole.size() == tiled.size());
  for (std::size_t v = 0; v < whole.size(); ++v) {
    const auto& cell = whole.cells()[v];
    const std::int32_t u = tiled.find(cell[0], cell[1], cell[2]);
    REQUIRE(u >= 0);
    const auto w = static_cast<std::size_t>(u);
    CHECK(whole.point_counts()[v] == tiled.point_counts()[w]);
    CHECK((whole.mean_world(v) - tiled.mean_world(w)).norm() < 1e-9);
    const Eigen::Matrix3d a = whole.inverse_covariance_matrix(v), b = tiled.inverse_covariance_matrix(w);
    CHECK((a - b).norm() <= 1e-6 * a.norm());
  }

  // Only the tiles whose square comes within the radius of the centre.
  const Eigen::Vector2d centre(map.world(0).x(), map.world(0).y());
  const TiledMapRead near = read_tiled_map(dir.string(), centre, 10.0);
  CHECK(!near.loaded.empty());
  CHECK(near.loaded.size() < meta.tiles.size());
  for (const MapTile& t : meta.tiles) {
    const double dx = std::max({t.x_min - centre.x(), 0.0, centre.x() - t.x_min - 20.0});
    const double dy = std::max({t.y_min - centre.y(), 0.0, centre.y() - t.y_min - 20.0});
    const bool in = std::hypot(dx, dy) <= 10.0;
    CHECK(in == (std::find(near.loaded.begin(), near.loaded.end(), t.file) != near.loaded.end()));
  }
}

namespace {

// The map folder's files (metadata and tiles) and their bytes.
std::map<std::string, std::string> folder_bytes(const fs::path& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::directory_iterator(dir)) files[e.path().filename().string()] = test::read_bytes(e.path());
  return files;
}

}  // namespace

TEST_CASE("the tiled map writer holds a bounded number of points and writes the same tiles however the map comes",
          "[unit][io]") {
  PointCloud map = read_point_cloud((kSample / "map.pcd").string());
  map.intensity.assign(map.size(), 0.f);
  for (std::size_t i = 0; i < map.size(); ++i) map.intensity[i] = static_cast<float>(i % 251);
  const fs::path whole_dir = test::temp_dir("tiles_writer_whole");
  const TiledMapMetadata whole = write_tiled_map(map, 20.0, whole_dir.string());
  const std::map<std::string, std::string> expected = folder_bytes(whole_dir);
  REQUIRE(expected.size() == whole.tiles.size() + 1);

  // The same map in uneven parts through a buffer of 1000 points: spills to disk, the same
  // files, byte for byte, and no spill folder left behind.
  TiledMapWriterOptions o;
  o.buffer_points = 1000;
  const fs::path parts_dir = test::temp_dir("tiles_writer_parts");
  TiledMapWriter writer(parts_dir.string(), 20.0, o);
  std::size_t begin = 0, largest = 0;
  for (std::size_t part = 1; begin < map.size(); ++part) {
    const std::size_t end = std::min(map.size(), begin + 97 * part * part);
    PointCloud piece;
    piece.origin = map.origin;
    piece.points.assign(map.points.begin() + static_cast<std::ptrdiff_t>(begin), map.points.begin() + static_cast<std::ptrdiff_t>(end));
    piece.intensity.assign(map.intensity.begin() + static_cast<std::ptrdiff_t>(begin),
                           map.intensity.begin() + static_cast<std::ptrdiff_t>(end));
    largest = std::max(largest, end - begin);
    writer.add(piece);
    begin = end;
  }
  const TiledMapMetadata parts = writer.finish();
  CHECK(parts.tiles.size() == whole.tiles.size());
  CHECK(folder_bytes(parts_dir) == expected);
  const TiledMapWriteStats& st = writer.stats();
  CHECK(st.points_in == map.size());
  CHECK(st.points_written == map.size());
  CHECK(st.tiles == whole.tiles.size());
  CHECK(st.spills > 3);
  CHECK(st.peak_buffered == o.buffer_points);
  CHECK(largest > o.buffer_points);  // adds larger than the buffer spill on the way

  // A voxel leaf filters each tile on its own.
  o.voxel = 0.5;
  const fs::path voxel_dir = test::temp_dir("tiles_writer_voxel");
  TiledMapWriter filtered(voxel_dir.string(), 20.0, o);
  filtered.add(map);
  filtered.finish();
  std::size_t filtered_points = 0;
  for (const MapTile& t : whole.tiles) {
    CAPTURE(t.file);
    const PointCloud mine = read_point_cloud((voxel_dir / t.file).string());
    const PointCloud reference = voxel_downsample(read_point_cloud((whole_dir / t.file).string()), 0.5);
    CHECK(mine.points == reference.points);
    filtered_points += mine.size();
  }
  CHECK(filtered.stats().points_written == filtered_points);
  CHECK(filtered_points < map.size());

  // Errors, naming what is wrong; the writer stays as it was.
  CHECK_THROWS_WITH(TiledMapWriter(test::temp_dir("tiles_writer_bad").string(), -1.0),
                    Catch::Contains("tile size must be a positive finite number (m), got -1"));
  TiledMapWriter strict(test::temp_dir("tiles_writer_strict").string(), 20.0);
  strict.add(map);
  PointCloud moved = map;
  moved.origin.x() += 1.0;
  CHECK_THROWS_WITH(strict.add(moved), Catch::Contains(fmt::format("origin ({}, {}, {}) after clouds with origin ({}, {}, {})",
                                                                    moved.origin.x(), moved.origin.y(), moved.origin.z(),
                                                                    map.origin.x(), map.origin.y(), map.origin.z())));
  PointCloud bare = map;
  bare.intensity.clear();
  CHECK_THROWS_WITH(strict.add(bare), Catch::Contains("a cloud without intensity after clouds with it"));
  CHECK(strict.finish().tiles.size() == whole.tiles.size());
  CHECK_THROWS_WITH(strict.add(map), Catch::Contains("add() after finish()"));
}

TEST_CASE("the sample sequence localizes the same in the tiled map as in the whole map", "[unit][io][localization]") {
  const PointCloud map = read_point_cloud((kSample / "map.pcd").string());
  const fs::path dir = test::temp_dir("tiles_localize");
  write_tiled_map(map, 10.0, dir.string());
  const PointCloud tiled = read_tiled_map(dir.string()).cloud;
  std::vector<ScanEntry> scans = list_scans((kSample / "scans").string());
  const Trajectory truth = read_trajectory((kSample / "poses_tum.txt").string());
  LocalizerSettings s;
  ExecutionOptions e;
  e.backend = Backend::Cpu;
  e.threads = 2;
  Localizer a(s, e), b(s, e);
  a.set_map(map);
  b.set_map(tiled);
  a.set_initial_pose(truth[0].pose.matrix());
  b.set_initial_pose(truth[0].pose.matrix());
  for (const ScanEntry& scan : scans) {
    const PointCloud cloud = read_point_cloud(scan.path);
    const LocalizationResult ra = a.localize(cloud, scan.time), rb = b.localize(cloud, scan.time);
    REQUIRE(ra.valid);
    REQUIRE(rb.valid);
    CHECK((ra.pose.topRightCorner<3, 1>() - rb.pose.topRightCorner<3, 1>()).norm() < 1e-3);
  }
}

TEST_CASE("a UTM map keeps millimetres through its tiles", "[unit][io]") {
  PointCloud map = read_point_cloud((kSample / "map.pcd").string());
  map.origin = Eigen::Vector3d(680000.0, 3900000.0, 40.0);
  const fs::path dir = test::temp_dir("tiles_utm");
  const TiledMapMetadata meta = write_tiled_map(map, 25.0, dir.string());
  CHECK(meta.tiles.front().x_min >= 679900.0);
  const TiledMapRead all = read_tiled_map(dir.string());
  REQUIRE(all.cloud.size() == map.size());
  // One origin for every tile, a tile corner (the median of the corners): the points share
  // a lattice.
  std::vector<double> xs, ys;
  for (const MapTile& t : meta.tiles) {
    xs.push_back(t.x_min);
    ys.push_back(t.y_min);
  }
  std::sort(xs.begin(), xs.end());
  std::sort(ys.begin(), ys.end());
  CHECK(all.cloud.origin == Eigen::Vector3d(xs[(xs.size() - 1) / 2], ys[(ys.size() - 1) / 2], 0.0));
  // The tiles hold the points tile by tile (the metadata's order, by corner), each in the
  // map's order.
  std::map<std::pair<double, double>, std::vector<std::size_t>> by_tile;
  for (std::size_t i = 0; i < map.size(); ++i) {
    const Eigen::Vector3d p = map.world(i);
    by_tile[{std::floor(p.x() / 25.0), std::floor(p.y() / 25.0)}].push_back(i);
  }
  double worst = 0.0;
  std::size_t k = 0;
  for (const auto& [corner, members] : by_tile) {
    for (std::size_t i : members) worst = std::max(worst, (map.world(i) - all.cloud.world(k++)).cwiseAbs().maxCoeff());
  }
  // float32 relative to a corner within ~200 m resolves 15 um.
  CHECK(worst < 1e-4);
}

TEST_CASE("tiled map errors: a malformed tile is skipped by name, the metadata's by file and line", "[unit][io]") {
  const PointCloud map = read_point_cloud((kSample / "map.pcd").string());
  const fs::path dir = test::temp_dir("tiles_bad");
  const TiledMapMetadata meta = write_tiled_map(map, 20.0, dir.string());
  const std::string broken = meta.tiles[1].file;
  test::write_bytes(dir / broken, "# .PCD v0.7\nVERSION 0.7\nFIELDS x y z\nSIZE 4 4 4\nTYPE F F F\nCOUNT 1 1 1\n"
                                  "WIDTH 100\nHEIGHT 1\nPOINTS 100\nDATA binary\n\x01\x02");
  const TiledMapRead r = read_tiled_map(dir.string());
  CHECK(r.skipped == std::vector<std::string>{broken});
  CHECK(r.loaded.size() == meta.tiles.size() - 1);

  const fs::path meta_file = dir / kTiledMapMetadataFile;
  const auto expect = [&](const std::string& yaml, const std::string& message) {
    test::write_bytes(meta_file, yaml);
    CAPTURE(yaml);
    CHECK_THROWS_WITH(read_tiled_map_metadata(dir.string()),
                      Catch::Contains(meta_file.string()) && Catch::Contains(message));
  };
  const std::string head = "x_resolution: 20.0\ny_resolution: 20.0\n";
  const std::string good = meta.tiles[0].file + ": [" + fmt::format("{}, {}", meta.tiles[0].x_min, meta.tiles[0].y_min) + "]\n";
  expect(head + good + "missing.pcd: [40, 40]\n", "line 4: tile 'missing.pcd' does not exist");
  expect(head + good + "bad.pcd: [1, x]\n", "line 4: expected two finite numbers [x_min, y_min] for 'bad.pcd'");
  expect(head + "just words\n", "line 3: expected 'key: value'");
  expect(head + good + good, "line 4: tile '" + meta.tiles[0].file + "' is named twice");
  expect("x_resolution: -1\n", "line 1: x_resolution must be a positive finite number");
  expect("x_resolution: 20\n" + good, "no y_resolution");
  CHECK_THROWS_WITH(read_tiled_map_metadata((dir / "nowhere").string()), Catch::Contains("no such file"));

  // Autoware's own files: comments, a document start, quoted names, integer corners.
  test::write_bytes(meta_file, "---\n# written by a map divider\nx_resolution: 20\ny_resolution: 20.0  # m\n\"" +
                                   meta.tiles[0].file + "\": [" + fmt::format("{}, {}", meta.tiles[0].x_min, meta.tiles[0].y_min) +
                                   "] # -> a 20 m square\n");
  const TiledMapMetadata autoware = read_tiled_map_metadata(meta_file.string());
  REQUIRE(autoware.tiles.size() == 1);
  CHECK(autoware.tiles[0].file == meta.tiles[0].file);
  CHECK(autoware.tiles[0].line == 5);
  CHECK(autoware.y_resolution == 20.0);
}

TEST_CASE("tiled map metadata: a tile path leaving the folder is refused, naming the file, the tile and the path",
          "[unit][io]") {
  const PointCloud map = read_point_cloud((kSample / "map.pcd").string());
  const fs::path root = test::temp_dir("tiles_paths");
  const fs::path dir = root / "map";
  const TiledMapMetadata meta = write_tiled_map(map, 20.0, dir.string());
  // A cloud beside the map folder, which its metadata must not reach.
  write_point_cloud((root / "outside.pcd").string(), map);
  const fs::path meta_file = dir / kTiledMapMetadataFile;
  const std::string head = "x_resolution: 20.0\ny_resolution: 20.0\n";
  const auto corner = [](const MapTile& t) { return fmt::format("[{}, {}]", t.x_min, t.y_min); };
  const std::string good = meta.tiles[0].file + ": " + corner(meta.tiles[0]) + "\n";
  const auto error_of = [&](const std::string& yaml) -> std::string {
    test::write_bytes(meta_file, yaml);
    try {
      read_tiled_map(dir.string(), Eigen::Vector2d::Zero(), 1e9);
    } catch (const Error& e) {
      return e.what();
    }
    return {};
  };
  // The reproduction: the cloud outside, named with '..' or by its absolute path, was read
  // as a tile of the map.
  CHECK(error_of(head + good + "../outside.pcd: [1000, 1000]\n") ==
        meta_file.string() + ": line 4: tile '../outside.pcd' lies outside the map folder (" + dir.string() +
            ": the path leads to " + (root / "outside.pcd").string() +
            "); a tile is named relative to the folder, without '..' leaving it");
  CHECK(error_of(head + good + "sub/../../outside.pcd: [1000, 1000]\n") ==
        meta_file.string() + ": line 4: tile 'sub/../../outside.pcd' lies outside the map folder (" + dir.string() +
            ": the path leads to " + (root / "outside.pcd").string() +
            "); a tile is named relative to the folder, without '..' leaving it");
  const std::string absolute = (root / "outside.pcd").string();
  CHECK(error_of(head + good + "\"" + absolute + "\": [1000, 1000]\n") ==
        meta_file.string() + ": line 4: tile '" + absolute +
            "' is an absolute path; a tile is named relative to the map folder (" + dir.string() + ")");
  // A path that stays inside (a subfolder, or '..' back into it) is a tile like any other.
  fs::create_directories(dir / "sub");
  fs::copy_file(dir / meta.tiles[1].file, dir / "sub" / meta.tiles[1].file);
  test::write_bytes(meta_file, head + good + "sub/../sub/" + meta.tiles[1].file + ": " + corner(meta.tiles[1]) + "\n");
  const TiledMapRead r = read_tiled_map(dir.string(), Eigen::Vector2d::Zero(), 1e9);
  CHECK(r.loaded.size() == 2);
  CHECK(r.skipped.empty());
}

TEST_CASE("tiled map metadata: overlapping tiles are an error naming both tiles and their lines", "[unit][io]") {
  const fs::path dir = test::temp_dir("tiles_overlap");
  const fs::path meta_file = dir / kTiledMapMetadataFile;
  const auto error_of = [&](const std::string& yaml) -> std::string {
    test::write_bytes(meta_file, yaml);
    try {
      read_tiled_map_metadata(dir.string(), false);
    } catch (const Error& e) {
      return e.what();
    }
    return {};
  };
  const std::string head = "x_resolution: 20\ny_resolution: 10\n";
  // Squares of 20 x 10 m: [0, 20) x [0, 10) and [10, 30) x [5, 15) share a corner region.
  CHECK(error_of(head + "a.pcd: [0, 0]\nb.pcd: [40, 0]\nc.pcd: [10, 5]\n") ==
        meta_file.string() + ": lines 3 and 5: tiles 'a.pcd' at [0, 0] and 'c.pcd' at [10, 5] overlap (squares of 20 x "
                             "10 m); Autoware's layout is a grid of equal squares keyed by their lower corner, each "
                             "place in one tile");
  // Two files at one corner, and negative corners off the grid.
  CHECK_THAT(error_of(head + "a.pcd: [-20, -10]\nb.pcd: [-20, -10]\n"),
             Catch::Contains("lines 3 and 4: tiles 'a.pcd' at [-20, -10] and 'b.pcd' at [-20, -10] overlap"));
  CHECK_THAT(error_of(head + "a.pcd: [-20, -10]\nb.pcd: [-1, -0.5]\n"),
             Catch::Contains("lines 3 and 4: tiles 'a.pcd' at [-20, -10] and 'b.pcd' at [-1, -0.5] overlap"));
  // The resolution after the tiles counts too.
  CHECK_THAT(error_of("a.pcd: [0, 0]\nb.pcd: [0, 15]\nx_resolution: 20\ny_resolution: 20\n"),
             Catch::Contains("lines 1 and 2: tiles 'a.pcd' at [0, 0] and 'b.pcd' at [0, 15] overlap"));
  // Squares that meet at an edge (a grid), or off the grid without overlapping, are a map.
  CHECK(error_of(head + "a.pcd: [0, 0]\nb.pcd: [20, 0]\nc.pcd: [0, 10]\nd.pcd: [20, 10]\ne.pcd: [45, 3]\n"
                        "f.pcd: [65.00000001, 3]\n")
            .empty());
  CHECK_THAT(error_of(head + "a.pcd: [0, 0]\nx_resolution: 20\n"), Catch::Contains("line 4: x_resolution is given twice"));
}
