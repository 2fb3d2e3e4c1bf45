// PCL reads what ndtcu simulate writes: the committed sample (float32) and a map with a
// UTM-sized origin (float64 world coordinates). Built into the PCL io executable, the
// only one that links PCL's io library.
#include "../support/test_support.hpp"

#include <ndtcu/io.hpp>
#include <ndtcu/simulator.hpp>

#include <pcl/PCLPointCloud2.h>
#include <pcl/io/pcd_io.h>
#include <pcl/point_types.h>

#include <cstring>
#include <type_traits>

using namespace ndtcu;
namespace fs = std::filesystem;

TEST_CASE("PCL loads the sample map and scans to the same points as ndtcu", "[parity][sim]") {
  const fs::path sample = ndtcu::test::source_dir() / "data" / "sample";
  auto compare = [](const std::string& path, const auto& ref) {
    CAPTURE(path);
    ReadOptions zero_origin;
    zero_origin.origin_policy = OriginPolicy::Zero;
    const PointCloud ours = read_point_cloud(path, zero_origin);
    REQUIRE(ours.size() == ref.size());
    REQUIRE(ours.size() > 1000);
    std::size_t mismatches = 0;
    for (std::size_t i = 0; i < ours.size(); ++i) {
      mismatches += ours.points[i] != Eigen::Vector3f(ref[i].x, ref[i].y, ref[i].z);
      if constexpr (std::is_same_v<std::decay_t<decltype(ref[i])>, pcl::PointXYZI>) {
        mismatches += ours.intensity[i] != ref[i].intensity;
      }
    }
    CHECK(mismatches == 0);
  };
  pcl::PointCloud<pcl::PointXYZ> map;  // the map has no intensity
  REQUIRE(pcl::io::loadPCDFile((sample / "map.pcd").string(), map) == 0);
  compare((sample / "map.pcd").string(), map);
  for (const char* name : {"scans/000000.pcd", "scans/000009.pcd"}) {
    pcl::PointCloud<pcl::PointXYZI> scan;
    REQUIRE(pcl::io::loadPCDFile((sample / name).string(), scan) == 0);
    compare((sample / name).string(), scan);
  }
}

TEST_CASE("PCL reads a UTM map as float64 world coordinates", "[parity][sim]") {
  const fs::path dir = ndtcu::test::temp_dir("sim_pcl_utm");
  sim::SimulationSettings s;
  s.world.size = 60;
  s.world.origin = {680000.25, 3900000.5, 40};
  s.lidar.columns = 90;
  s.trajectory.frames = 1;
  s.map.voxel = 0.5;
  sim::simulate(s, dir.string());
  const std::string path = (dir / "map.pcd").string();
  pcl::PCLPointCloud2 blob;
  REQUIRE(pcl::io::loadPCDFile(path, blob) == 0);
  REQUIRE(blob.fields.size() == 3);
  for (const auto& f : blob.fields) CHECK(f.datatype == pcl::PCLPointField::FLOAT64);
  const PointCloud ours = read_point_cloud(path);
  REQUIRE(ours.size() == blob.width * blob.height);
  double worst = 0;
  for (std::size_t i = 0; i < ours.size(); ++i) {
    double xyz[3];
    for (int a = 0; a < 3; ++a) {
      std::memcpy(&xyz[a], blob.data.data() + i * blob.point_step + blob.fields[static_cast<std::size_t>(a)].offset, 8);
    }
    worst = std::max(worst, (Eigen::Vector3d(xyz[0], xyz[1], xyz[2]) - ours.world(i)).norm());
  }
  // ndtcu keeps coordinates relative to its own origin in float32: within 90 m of it the
  // spacing of float32 is under 8e-6 m.
  CHECK(worst < 1e-5);
  CHECK(std::abs(ours.world(0).x() - 680000) < 100);
}
