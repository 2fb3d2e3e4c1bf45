// Every real file in the data folder loads, with the point counts its README states.
#include "../support/test_support.hpp"

#include <ndtcu/io.hpp>

using namespace ndtcu;

TEST_CASE("every .pcd, .ply and .bin in the data folder loads", "[data]") {
  NDTCU_REQUIRE_DATA(dir, "pairs", "kitti00", "balm_os0", "livox_avia_hku_mb", "formats");
  int files = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    auto ext = entry.path().extension().string();
    if (ext != ".pcd" && ext != ".ply" && ext != ".bin") continue;
    CAPTURE(entry.path().string());
    CloudInfo info;
    PointCloud c = read_point_cloud(entry.path().string(), {}, &info);
    CHECK(c.size() > 0);
    CHECK(c.size() + info.non_finite + info.out_of_range == info.points_in_file);
    ++files;
  }
  CHECK(files >= 74);  // 68 PCD/PLY files and 6 KITTI scans
}

TEST_CASE("real files have the sizes and layouts the data README gives", "[data]") {
  NDTCU_REQUIRE_DATA(dir, "pairs/hdl32");
  CloudInfo info;
  CHECK(read_point_cloud((dir / "pairs/hdl32/target_251370668.pcd").string(), {}, &info).size() == 69088);
  CHECK(info.intensity_field == "intensity");
  CHECK(read_point_cloud((dir / "pairs/hdl32/source_251371071.pcd").string()).size() == 69792);
  CHECK(read_point_cloud((dir / "balm_os0/map_even_frames_0-58_voxel0.1.pcd").string()).size() == 193337);
  PointCloud organized = read_point_cloud((dir / "formats/organized_128ring_lzf_f64field.pcd").string(), {}, &info);
  CHECK(info.encoding == "binary_compressed");
  CHECK(info.width == 1875);
  CHECK(info.height == 128);
  CHECK(organized.size() + info.non_finite + info.out_of_range == 1875u * 128u);
  PointCloud ply = read_point_cloud((dir / "formats/hdl32_target_binary.ply").string(), {}, &info);
  CHECK(info.encoding == "binary_little_endian");
  CHECK(info.intensity_field == "scalar_intensity");
  CHECK(ply.size() == 69088);
  PointCloud kitti = read_point_cloud((dir / "kitti00/velodyne/000000.bin").string(), {}, &info);
  CHECK(kitti.size() > 100000);
  CHECK(info.intensity_field == "reflectance");
}
