#pragma once
// What the initial pose tests share: angles, and the simulator sample's map in an aligner
// with scan 3 and its true pose (loaded once for the whole test program).
#include <ndtcu/aligner.hpp>
#include <ndtcu/filters.hpp>
#include <ndtcu/io.hpp>
#include <ndtcu/trajectory.hpp>

#include "../support/test_support.hpp"

#include <Eigen/Geometry>

#include <cmath>
#include <filesystem>

namespace ndtcu::initial_pose_test {

constexpr double kPi = 3.14159265358979323846;
constexpr double kDeg = kPi / 180.0;

/// An angle brought into (-pi, pi].
inline double wrap(double a) {
  a = std::remainder(a, 2.0 * kPi);
  return a <= -kPi ? a + 2.0 * kPi : a;
}

/// The angle (rad) of the rotation between two poses.
inline double rotation_angle(const Pose6& a, const Pose6& b) {
  const Eigen::Matrix3d ra = pose_to_matrix(a).topLeftCorner<3, 3>(), rb = pose_to_matrix(b).topLeftCorner<3, 3>();
  return Eigen::AngleAxisd(ra.transpose() * rb).angle();
}

/// A cloud without its points exactly at the origin (invalid returns in these scans),
/// voxel-filtered at `leaf` (0: not).
inline PointCloud load_sample(const std::filesystem::path& path, double leaf) {
  const PointCloud c = read_point_cloud(path.string());
  PointCloud kept;
  kept.origin = c.origin;
  for (const auto& p : c.points) {
    if (!p.isZero()) kept.points.push_back(p);
  }
  return leaf > 0 ? voxel_downsample(kept, leaf) : kept;
}

/// Autoware's settings (the tests run them on the CPU backend with 2 threads:
/// test::on_cpu(2)).
inline AlignSettings cpu_settings() { return autoware_preset(); }

/// The sample's map in an aligner (on the CPU backend with 2 threads), scan 3 and its true
/// pose.
struct Sample {
  Aligner aligner{cpu_settings(), test::on_cpu(2)};
  PointCloud scan;
  Pose6 truth;
};

inline Sample& sample() {
  static Sample s = [] {
    const std::filesystem::path dir = ndtcu::test::source_dir() / "data" / "sample";
    Sample out;
    out.aligner.set_target(load_sample(dir / "map.pcd", 0.0));
    out.scan = load_sample(dir / "scans/000003.pcd", 0.5);
    const Trajectory truth = read_trajectory((dir / "poses_tum.txt").string());
    out.truth = matrix_to_pose(truth[3].pose.matrix());
    return out;
  }();
  return s;
}

}  // namespace ndtcu::initial_pose_test
