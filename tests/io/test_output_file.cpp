// Files written whole (ndtcu/output_file.hpp) and the library's writers that go through it:
// the destination keeps its old bytes until the commit, a writer that stops leaves nothing,
// and a symbolic link planted at the destination is replaced, never written through.
#include "../support/test_support.hpp"

#include <ndtcu/io.hpp>
#include <ndtcu/output_file.hpp>
#include <ndtcu/tiled_map.hpp>
#include <ndtcu/trajectory.hpp>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

using namespace ndtcu;
namespace fs = std::filesystem;

namespace {

// The names in `dir`, sorted.
std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

PointCloud three_points() {
  PointCloud c;
  c.points = {{1.f, 2.f, 3.f}, {4.f, 5.f, 6.f}, {7.f, 8.f, 9.f}};
  return c;
}

}  // namespace

TEST_CASE("an output file keeps the old bytes until its commit, then holds exactly the new", "[unit][io]") {
  const fs::path dir = test::temp_dir("output_file_commit");
  const fs::path path = dir / "result.txt";
  test::write_bytes(path, "old result\n");
  // More than the 1 MiB buffer, in pieces of several sizes, so every write path is taken.
  std::string expected;
  {
    OutputFile f(path.string());
    CHECK(fs::path(f.temporary_path()).parent_path() == dir);
    CHECK(is_output_temporary(fs::path(f.temporary_path()).filename().string()));
    for (int k = 0; k < 40; ++k) {
      const std::string piece(static_cast<std::size_t>(k % 3 == 0 ? 3 << 16 : 17 + k), static_cast<char>('a' + k % 26));
      f.write(piece);
      expected += piece;
      if (k == 5) f.flush();
      CHECK(test::read_bytes(path) == "old result\n");
    }
    f.write(std::string(3 << 20, 'z'));
    expected += std::string(3 << 20, 'z');
    CHECK(test::read_bytes(path) == "old result\n");
    f.commit();
    CHECK(f.committed());
    CHECK_THROWS_WITH(f.write("more"), Catch::Contains("written to after its commit"));
  }
  CHECK(test::read_bytes(path) == expected);
  CHECK(names_in(dir) == std::vector<std::string>{"result.txt"});
}

TEST_CASE("an output file never committed leaves its destination as it was", "[unit][io]") {
  const fs::path dir = test::temp_dir("output_file_abandoned");
  const fs::path kept = dir / "kept.txt", absent = dir / "absent.txt";
  test::write_bytes(kept, "earlier\n");
  try {
    OutputFile a(kept.string()), b(absent.string());
    a.write("half of a new ");
    b.write("half");
    a.flush();
    throw std::runtime_error("stopped half-way");
  } catch (const std::runtime_error&) {
  }
  CHECK(test::read_bytes(kept) == "earlier\n");
  CHECK_FALSE(fs::exists(absent));
  CHECK(names_in(dir) == std::vector<std::string>{"kept.txt"});
  // Moved from: only the new owner's destructor removes the temporary file.
  {
    OutputFile a(absent.string());
    a.write("moved\n");
    OutputFile b(std::move(a));
    b.commit();
  }
  CHECK(test::read_bytes(absent) == "moved\n");
}

TEST_CASE("an output file's errors name the destination", "[unit][io]") {
  const fs::path dir = test::temp_dir("output_file_errors");
  CHECK_THROWS_WITH(OutputFile((dir / "no_folder" / "x.txt").string()),
                    Catch::Contains((dir / "no_folder" / "x.txt").string() + ": its folder") &&
                        Catch::Contains("does not exist"));
  fs::create_directories(dir / "a_folder" / "inside");
  CHECK_THROWS_WITH(write_file_whole((dir / "a_folder").string(), "x"),
                    Catch::Contains((dir / "a_folder").string() + ": is a folder"));
  CHECK(fs::is_directory(dir / "a_folder" / "inside"));
  CHECK_THROWS_WITH(OutputFile((dir / "").string()), Catch::Contains("names a folder, not a file"));
  CHECK(names_in(dir) == std::vector<std::string>{"a_folder"});
}

TEST_CASE("the library's writers replace a link planted at their output, never its target", "[unit][io]") {
  const fs::path dir = test::temp_dir("output_file_links");
  const fs::path outside = dir / "outside", out = dir / "out";
  fs::create_directories(outside);
  fs::create_directories(out);
  Trajectory trajectory(1);
  trajectory[0].time = 1.5;
  const std::vector<std::pair<std::string, std::function<void(const std::string&)>>> writers = {
      {"cloud.pcd", [](const std::string& p) { write_pcd(p, three_points()); }},
      {"cloud.bin", [](const std::string& p) { write_point_cloud(p, three_points()); }},
      {"kitti.bin", [](const std::string& p) { write_kitti_bin(p, three_points()); }},
      {"poses_tum.txt", [&](const std::string& p) { write_trajectory_tum(p, trajectory); }},
      {"poses_kitti.txt", [&](const std::string& p) { write_trajectory_kitti(p, trajectory); }},
      {"notes.txt", [](const std::string& p) { write_file_whole(p, "notes\n"); }},
  };
  for (const auto& [name, write] : writers) {
    CAPTURE(name);
    const fs::path target = outside / name, link = out / name;
    test::write_bytes(target, "a file outside the output folder\n");
    fs::create_symlink(target, link);
    write(link.string());
    CHECK(test::read_bytes(target) == "a file outside the output folder\n");
    CHECK_FALSE(fs::is_symlink(link));
    CHECK(fs::is_regular_file(link));
    CHECK(test::read_bytes(link) != "a file outside the output folder\n");
  }
  CHECK(read_point_cloud((out / "cloud.pcd").string()).size() == 3);
  CHECK(read_trajectory((out / "poses_tum.txt").string()).size() == 1);
  // A dangling link is replaced too, and nothing appears where it pointed.
  fs::create_symlink(outside / "not_there.pcd", out / "dangling.pcd");
  write_pcd((out / "dangling.pcd").string(), three_points());
  CHECK_FALSE(fs::exists(outside / "not_there.pcd"));
  CHECK(fs::is_regular_file(out / "dangling.pcd"));
}

TEST_CASE("a tiled map's folder never lists an earlier map's tiles beside new ones", "[unit][io]") {
  const fs::path dir = test::temp_dir("output_file_tiled") / "map";
  PointCloud map;
  for (int i = 0; i < 100; ++i) map.points.emplace_back(static_cast<float>(i % 50), static_cast<float>(i / 50), 0.f);
  write_tiled_map(map, 20.0, dir.string());
  REQUIRE(read_tiled_map_metadata(dir.string()).tiles.size() == 3);
  // A new map into the folder: the old metadata goes before its first tile is written,
  // the new one is written last; a writer stopped before finish() leaves no metadata.
  {
    TiledMapWriter writer(dir.string(), 10.0);
    writer.add(map);
    CHECK_FALSE(fs::exists(dir / kTiledMapMetadataFile));
  }
  CHECK_FALSE(fs::exists(dir / kTiledMapMetadataFile));
  write_tiled_map(map, 10.0, dir.string());
  CHECK(read_tiled_map_metadata(dir.string()).tiles.size() == 5);
  for (const std::string& name : names_in(dir)) CHECK_FALSE(is_output_temporary(name));
}
