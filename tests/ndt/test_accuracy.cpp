// Accuracy on labelled real data (Autoware mode): KITTI 00 against the ICP reference
// poses of ../shared/data/kitti00/poses_velo_icp_reference.txt. Simulator scenes with
// exact ground truth are in test_sim_accuracy.cpp.
//
// Tolerances: 5 cm and 0.2 deg. The reference is itself a registration (point-to-plane
// ICP, fit rms 3.7-4.5 cm), so a tighter bound would test the reference, not NDT.
#include "../support/test_support.hpp"

#include <ndtcu/aligner.hpp>
#include <ndtcu/filters.hpp>
#include <ndtcu/io.hpp>

#include <Eigen/Geometry>

#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>

using namespace ndtcu;

namespace {

constexpr double kMaxTranslation = 0.05;            // m
constexpr double kMaxRotation = 0.2 * M_PI / 180.0;  // rad

// Line N of a KITTI-style pose file (row-major 3x4) as a 4x4 transform.
Eigen::Matrix4d kitti_pose(const std::filesystem::path& file, int line) {
  std::ifstream in(file);
  std::string text;
  for (int i = 0; i <= line; ++i) REQUIRE(std::getline(in, text));
  std::istringstream ss(text);
  Eigen::Matrix4d m = Eigen::Matrix4d::Identity();
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 4; ++c) ss >> m(r, c);
  return m;
}

PointCloud load_filtered(const std::filesystem::path& file, double leaf) {
  ReadOptions o;
  o.read_intensity = false;
  return voxel_downsample(read_point_cloud(file.string(), o), leaf);
}

double translation_error(const Eigen::Matrix4d& a, const Eigen::Matrix4d& b) {
  return (a.topRightCorner<3, 1>() - b.topRightCorner<3, 1>()).norm();
}

double rotation_error(const Eigen::Matrix4d& a, const Eigen::Matrix4d& b) {
  return Eigen::AngleAxisd(Eigen::Matrix3d(a.topLeftCorner<3, 3>().transpose() * b.topLeftCorner<3, 3>())).angle();
}

// Target frame 0 and source frame N both filtered at 0.2 m, Autoware's defaults otherwise.
struct KittiPair {
  PointCloud target, source;
  Eigen::Matrix4d reference;
};

KittiPair kitti_pair(const std::filesystem::path& dir, int frame) {
  char name[32];
  std::snprintf(name, sizeof(name), "%06d.bin", frame);
  return {load_filtered(dir / "kitti00/velodyne/000000.bin", 0.2), load_filtered(dir / "kitti00/velodyne" / name, 0.2),
          kitti_pose(dir / "kitti00/poses_velo_icp_reference.txt", frame)};
}

}  // namespace

TEST_CASE("KITTI 00 frames 1 and 2 align to frame 0 from identity (Autoware mode)", "[data][accuracy]") {
  NDTCU_REQUIRE_DATA(dir, "kitti00");
  for (int frame : {1, 2}) {
    const KittiPair p = kitti_pair(dir, frame);
    AlignSettings s = autoware_preset();
    ExecutionOptions e;
    e.threads = 2;
    const AlignResult r = align(p.target, p.source, Eigen::Matrix4d::Identity(), s, e);
    const double dt = translation_error(r.transform, p.reference), da = rotation_error(r.transform, p.reference);
    std::printf("accuracy kitti00 0<-%d: %d iterations, %s, dt %.3f m, da %.3f deg, NVTL %.3f, TP %.3f\n", frame,
                r.iterations, to_string(r.reason), dt, da * 180 / M_PI, r.nvtl, r.tp);
    INFO("frame " << frame << ": " << r.pose.transpose());
    CHECK(r.converged);
    CHECK(dt < kMaxTranslation);
    CHECK(da < kMaxRotation);
  }
}

TEST_CASE("KITTI 00 0<-1 from 20 seeded perturbed guesses: at least 19 land within 5 cm", "[data][accuracy]") {
  NDTCU_REQUIRE_DATA(dir, "kitti00");
  const KittiPair p = kitti_pair(dir, 1);
  AlignSettings s = autoware_preset();
  ExecutionOptions execution;
  execution.threads = 2;
  Aligner aligner(s, execution);
  aligner.set_target(p.target);
  std::mt19937 rng(2024);
  std::uniform_real_distribution<double> unit(-1.0, 1.0);
  int good = 0;
  for (int k = 0; k < 20; ++k) {
    // A perturbation of up to 1.5 m (translation, uniform direction and length) and up to
    // 5 deg (rotation about a uniform axis), applied to the reference.
    Eigen::Vector3d dir3;
    do {
      dir3 = Eigen::Vector3d(unit(rng), unit(rng), unit(rng));
    } while (dir3.norm() < 1e-3 || dir3.norm() > 1.0);
    Eigen::Vector3d axis;
    do {
      axis = Eigen::Vector3d(unit(rng), unit(rng), unit(rng));
    } while (axis.norm() < 1e-3 || axis.norm() > 1.0);
    const double length = 1.5 * std::abs(unit(rng));
    const double angle = 5.0 * M_PI / 180.0 * std::abs(unit(rng));
    Eigen::Matrix4d delta = Eigen::Matrix4d::Identity();
    delta.topLeftCorner<3, 3>() = Eigen::AngleAxisd(angle, axis.normalized()).toRotationMatrix();
    delta.topRightCorner<3, 1>() = length * dir3.normalized();
    const Eigen::Matrix4d guess = delta * p.reference;
    const AlignResult r = aligner.align(p.source, guess);
    const double dt = translation_error(r.transform, p.reference), da = rotation_error(r.transform, p.reference);
    const bool ok = dt < kMaxTranslation && da < kMaxRotation;
    good += ok;
    std::printf("perturbed %2d: offset %.2f m %.1f deg -> %2d it, dt %.3f m, da %.3f deg %s\n", k, length,
                angle * 180 / M_PI, r.iterations, dt, da * 180 / M_PI, ok ? "" : "(missed)");
  }
  CHECK(good >= 19);
}
