// ndtcu's readers against PCL's (pcl::io::loadPCDFile / loadPLYFile) on every real file.
// PCL io is linked into this one executable only. PCL keeps non-finite points; ndtcu drops
// them, so PCL's cloud is compared after removing the non-finite ones.
#include "../support/test_support.hpp"

#include <ndtcu/io.hpp>

#include <pcl/io/pcd_io.h>
#include <pcl/io/ply_io.h>
#include <pcl/point_types.h>

#include <cmath>

using namespace ndtcu;

TEST_CASE("every .pcd and .ply loads to the same xyz as PCL", "[data][parity]") {
  NDTCU_REQUIRE_DATA_DIR(dir);
  int compared = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
    auto ext = entry.path().extension().string();
    if (!entry.is_regular_file() || (ext != ".pcd" && ext != ".ply")) continue;
    const std::string path = entry.path().string();
    CAPTURE(path);
    pcl::PointCloud<pcl::PointXYZ> ref;
    int rc = ext == ".pcd" ? pcl::io::loadPCDFile(path, ref) : pcl::io::loadPLYFile(path, ref);
    REQUIRE(rc == 0);
    std::vector<Eigen::Vector3f> finite;
    for (const auto& p : ref.points) {
      if (std::isfinite(p.x) && std::isfinite(p.y) && std::isfinite(p.z)) finite.emplace_back(p.x, p.y, p.z);
    }
    ReadOptions zero_origin;
    zero_origin.origin_policy = OriginPolicy::Zero;  // PCL reads plain float32 coordinates
    CloudInfo info;
    PointCloud ours = read_point_cloud(path, zero_origin, &info);
    REQUIRE(ours.size() == finite.size());
    CHECK(info.points_in_file == ref.size());
    std::size_t mismatches = 0;
    for (std::size_t i = 0; i < finite.size(); ++i) mismatches += ours.points[i] != finite[i];
    CHECK(mismatches == 0);
    ++compared;
  }
  CHECK(compared >= 68);  // balm 61, pairs 4, formats 3
}
