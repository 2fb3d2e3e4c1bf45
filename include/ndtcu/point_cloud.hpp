#pragma once
/// \file
/// The point cloud every ndtcu stage takes: float32 xyz relative to a double origin.

#include <Eigen/Core>

#include <cstddef>
#include <vector>

namespace ndtcu {

/// A point cloud as ndtcu processes it. Coordinates are float32 *relative to `origin`*:
/// a map in UTM (1e6 m) keeps millimetres because the large offset stays in double.
/// The world coordinates of point i are `origin + points[i].cast<double>()`.
struct PointCloud {
  /// Point coordinates relative to `origin`, finite.
  std::vector<Eigen::Vector3f> points;
  /// Per-point intensity; empty when the source had none, otherwise `points.size()` long.
  std::vector<float> intensity;
  /// Offset (metres, double) that was subtracted from every point; zero for sensor-frame
  /// scans.
  Eigen::Vector3d origin = Eigen::Vector3d::Zero();

  /// Number of points.
  std::size_t size() const noexcept { return points.size(); }
  /// True when there are no points.
  bool empty() const noexcept { return points.empty(); }
  /// True when `intensity` holds one value per point.
  bool has_intensity() const noexcept { return !points.empty() && intensity.size() == points.size(); }
  /// World coordinates of point `i` (origin added back, in double).
  Eigen::Vector3d world(std::size_t i) const { return origin + points[i].cast<double>(); }
};

/// Axis-aligned bounds of a cloud in world coordinates (double).
struct Bounds {
  Eigen::Vector3d min = Eigen::Vector3d::Zero();  ///< smallest x, y, z
  Eigen::Vector3d max = Eigen::Vector3d::Zero();  ///< largest x, y, z
  bool valid = false;                             ///< false for an empty cloud
};

/// Bounds of `cloud` in world coordinates; `valid` is false when it is empty.
Bounds compute_bounds(const PointCloud& cloud);

}  // namespace ndtcu
