#include <ndtcu/point_cloud.hpp>

#include <algorithm>
#include <cmath>
#include <limits>

namespace ndtcu {

bool time_span(const float* times, std::size_t count, double& earliest, double& latest) {
  float lo = std::numeric_limits<float>::infinity(), hi = -std::numeric_limits<float>::infinity();
  for (std::size_t i = 0; i < count; ++i) {
    if (!std::isfinite(times[i])) continue;
    lo = std::min(lo, times[i]);
    hi = std::max(hi, times[i]);
  }
  const bool any = lo <= hi;
  earliest = any ? lo : 0.0;
  latest = any ? hi : 0.0;
  return any;
}

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
