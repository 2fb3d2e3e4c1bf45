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
  /// Per-point time in seconds relative to the scan's reference time (when the sensor took
  /// each point during its sweep; negative before the reference). Empty when the source had
  /// none or its times were implausible (see docs/formats.md, "Per-point time"), otherwise
  /// `points.size()` long. float32 resolves about 7 ns at 0.1 s, far below a point's
  /// motion.
  std::vector<float> time;
  /// Offset (metres, double) that was subtracted from every point; zero for sensor-frame
  /// scans.
  Eigen::Vector3d origin = Eigen::Vector3d::Zero();

  /// Number of points.
  std::size_t size() const noexcept { return points.size(); }
  /// True when there are no points.
  bool empty() const noexcept { return points.empty(); }
  /// True when `intensity` holds one value per point.
  bool has_intensity() const noexcept { return !points.empty() && intensity.size() == points.size(); }
  /// The intensities when has_intensity(), else null (what the filters take with a view).
  const float* intensity_or_null() const noexcept { return has_intensity() ? intensity.data() : nullptr; }
  /// True when `time` holds one value per point.
  bool has_time() const noexcept { return !points.empty() && time.size() == points.size(); }
  /// The times when has_time(), else null (what the filters take with a view).
  const float* time_or_null() const noexcept { return has_time() ? time.data() : nullptr; }
  /// World coordinates of point `i` (origin added back, in double).
  Eigen::Vector3d world(std::size_t i) const { return origin + points[i].cast<double>(); }
};

/// A read-only view of points somewhere else: a PointCloud's, or float32 xyz triples in the
/// caller's own buffer (a numpy array, a ROS message's data), used without copying them.
/// What a view points to must outlive every call it is given to and must not be written
/// while such a call runs; a view holds no intensities nor times (the calls that take one only read
/// coordinates). Made from a PointCloud implicitly, so a function taking a view takes a
/// PointCloud unchanged; a view of a temporary cloud is valid until the end of the full
/// expression, as for any reference.
struct PointCloudView {
  /// The first of `count` points, each relative to `origin` (null when `count` is 0).
  const Eigen::Vector3f* points = nullptr;
  /// Number of points.
  std::size_t count = 0;
  /// Offset (metres, double) of the points, as PointCloud::origin.
  Eigen::Vector3d origin = Eigen::Vector3d::Zero();

  /// No points.
  PointCloudView() = default;
  /// The points and origin of `cloud` (not its intensities); valid while `cloud`'s points
  /// are neither reallocated nor destroyed.
  PointCloudView(const PointCloud& cloud) noexcept
      : points(cloud.points.data()), count(cloud.points.size()), origin(cloud.origin) {}
  /// `n` points starting at `first` (float32 x y z, packed: 12 bytes a point), relative to
  /// `offset`.
  PointCloudView(const Eigen::Vector3f* first, std::size_t n,
                 const Eigen::Vector3d& offset = Eigen::Vector3d::Zero()) noexcept
      : points(first), count(n), origin(offset) {}

  /// Number of points.
  std::size_t size() const noexcept { return count; }
  /// True when there are no points.
  bool empty() const noexcept { return count == 0; }
  /// Point `i`, relative to `origin` (unchecked).
  const Eigen::Vector3f& operator[](std::size_t i) const noexcept { return points[i]; }
  /// The points as a contiguous range.
  const Eigen::Vector3f* begin() const noexcept { return points; }
  /// One past the last point.
  const Eigen::Vector3f* end() const noexcept { return points + count; }
  /// World coordinates of point `i` (origin added back, in double).
  Eigen::Vector3d world(std::size_t i) const { return origin + points[i].cast<double>(); }
};

// A view reads a caller's buffer of float32 triples as Eigen::Vector3f: three packed floats,
// no padding, no alignment beyond a float's.
static_assert(sizeof(Eigen::Vector3f) == 3 * sizeof(float) && alignof(Eigen::Vector3f) == alignof(float),
              "Eigen::Vector3f must be three packed floats");

/// Axis-aligned bounds of a cloud in world coordinates (double).
struct Bounds {
  Eigen::Vector3d min = Eigen::Vector3d::Zero();  ///< smallest x, y, z
  Eigen::Vector3d max = Eigen::Vector3d::Zero();  ///< largest x, y, z
  bool valid = false;                             ///< false for an empty cloud
};

/// Bounds of `cloud` in world coordinates; `valid` is false when it is empty.
Bounds compute_bounds(const PointCloud& cloud);

/// The earliest and latest finite value of `times[0, count)` (a sweep's span, s from the
/// scan's reference time: PointCloud::time). False, and both 0, when none is finite.
bool time_span(const float* times, std::size_t count, double& earliest, double& latest);

}  // namespace ndtcu
