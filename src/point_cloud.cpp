#include <ndtcu/point_cloud.hpp>

namespace ndtcu {

Bounds compute_bounds(const PointCloud& cloud) {
  Bounds b;
  if (cloud.empty()) return b;
  Eigen::Vector3f lo = cloud.points.front(), hi = lo;
  for (const auto& p : cloud.points) {
    lo = lo.cwiseMin(p);
    hi = hi.cwiseMax(p);
  }
  b.min = cloud.origin + lo.cast<double>();
  b.max = cloud.origin + hi.cast<double>();
  b.valid = true;
  return b;
}

}  // namespace ndtcu
