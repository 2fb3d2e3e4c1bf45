#pragma once
// Synthetic scenes for NDT tests: a walled yard with boxes and a pole, sampled with noise,
// so every pose direction is constrained. Deterministic for a seed.
#include <ndtcu/aligner.hpp>
#include <ndtcu/point_cloud.hpp>

#include <Eigen/Geometry>

#include <cstdint>
#include <random>

namespace ndtcu::test {

/// Points on the floor, four walls, two boxes and a pole of a 24 x 18 m yard. The floor
/// lies at z = -1.37, off the voxel lattice's planes (a surface exactly on a cell boundary
/// splits into two half-voxels and biases the score).
inline PointCloud synthetic_scene(std::uint32_t seed, int points = 30000, float noise = 0.01f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0.f, 1.f);
  std::normal_distribution<float> n(0.f, noise);
  PointCloud c;
  c.points.reserve(static_cast<std::size_t>(points));
  for (int i = 0; i < points; ++i) {
    const float a = u(rng), b = u(rng);
    Eigen::Vector3f p;
    switch (i % 9) {
      case 0: case 1: p = {-12.f + 24.f * a, -9.f + 18.f * b, 0.f}; break;        // floor
      case 2: p = {-12.f, -9.f + 18.f * a, 4.f * b}; break;                       // walls
      case 3: p = {12.f, -9.f + 18.f * a, 3.f * b}; break;
      case 4: p = {-12.f + 24.f * a, -9.f, 5.f * b}; break;
      case 5: p = {-12.f + 24.f * a, 9.f, 2.5f * b}; break;
      case 6: p = {2.f + 3.f * a, 1.f, 2.f * b}; break;                           // box faces
      case 7: p = {-4.f, -3.f + 2.f * a, 1.5f * b}; break;
      default: {                                                                   // pole
        const float t = 6.2831853f * a;
        p = {5.f + 0.3f * std::cos(t), -5.f + 0.3f * std::sin(t), 3.f * b};
      }
    }
    p.z() -= 1.37f;
    c.points.push_back(p + Eigen::Vector3f(n(rng), n(rng), n(rng)));
  }
  return c;
}

/// `cloud` moved by the inverse of `pose`: aligning the result to `cloud` should give `pose`.
inline PointCloud moved_by_inverse(const PointCloud& cloud, const Pose6& pose) {
  const Eigen::Matrix4d inv = pose_to_matrix(pose).inverse();
  PointCloud out = cloud;
  for (auto& p : out.points) p = (inv.topLeftCorner<3, 3>() * p.cast<double>() + inv.topRightCorner<3, 1>()).cast<float>();
  return out;
}

/// A target scene and a source scene (seeds `seed` and `seed` + 1) moved by the inverse of
/// `truth`: aligning the source to the target from near the identity should give `truth`.
struct SyntheticPair {
  PointCloud target, source;
  Pose6 truth;
};

inline SyntheticPair synthetic_pair(std::uint32_t seed, int target_points, int source_points, const Pose6& truth) {
  return {synthetic_scene(seed, target_points), moved_by_inverse(synthetic_scene(seed + 1, source_points), truth),
          truth};
}

/// A pose [x y z roll pitch yaw] from its six numbers.
inline Pose6 pose6(double x, double y, double z, double roll, double pitch, double yaw) {
  Pose6 p;
  p << x, y, z, roll, pitch, yaw;
  return p;
}

}  // namespace ndtcu::test
