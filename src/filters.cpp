#include <ndtcu/error.hpp>
#include <ndtcu/filters.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <string>

namespace ndtcu {

PointCloud voxel_downsample(const PointCloud& cloud, double leaf) {
  if (!(leaf > 0.0) || !std::isfinite(leaf)) {
    throw Error("voxel leaf size must be positive and finite, got " + std::to_string(leaf));
  }
  PointCloud out;
  out.origin = cloud.origin;
  if (cloud.empty()) return out;

  // pcl::VoxelGrid: cell = floor(p * (1/leaf)) with the inverse leaf in float, the lattice
  // spans [min_cell, max_cell], and the linear index runs x fastest.
  const float inv = 1.0f / static_cast<float>(leaf);  // as PCL: the inverse leaf in float
  Eigen::Vector3f lo = cloud.points.front(), hi = lo;
  for (const auto& p : cloud.points) {
    lo = lo.cwiseMin(p);
    hi = hi.cwiseMax(p);
  }
  // Cell indices must fit comfortably in 64 bits before they are converted.
  constexpr float kMaxCell = 1e18f;
  for (int a = 0; a < 3; ++a) {
    if (!(std::abs(lo[a] * inv) < kMaxCell && std::abs(hi[a] * inv) < kMaxCell)) {
      throw Error("voxel leaf " + std::to_string(leaf) + " m is too small for the cloud's extent");
    }
  }
  std::int64_t min_cell[3], dims[3];
  for (int a = 0; a < 3; ++a) {
    min_cell[a] = static_cast<std::int64_t>(std::floor(lo[a] * inv));
    dims[a] = static_cast<std::int64_t>(std::floor(hi[a] * inv)) - min_cell[a] + 1;
  }
  const double cells = static_cast<double>(dims[0]) * static_cast<double>(dims[1]) * static_cast<double>(dims[2]);
  if (cells > static_cast<double>(std::numeric_limits<std::int64_t>::max() / 2)) {
    throw Error("voxel leaf " + std::to_string(leaf) + " m is too small for the cloud's extent (" +
                std::to_string(cells) + " cells do not fit a 64-bit index)");
  }
  std::vector<std::pair<std::int64_t, std::uint32_t>> keyed(cloud.size());
  for (std::size_t i = 0; i < cloud.size(); ++i) {
    const auto& p = cloud.points[i];
    std::int64_t c[3];
    for (int a = 0; a < 3; ++a) c[a] = static_cast<std::int64_t>(std::floor(p[a] * inv)) - min_cell[a];
    keyed[i] = {c[0] + c[1] * dims[0] + c[2] * dims[0] * dims[1], static_cast<std::uint32_t>(i)};
  }
  // Stable order within a cell: points are summed in their input order.
  std::stable_sort(keyed.begin(), keyed.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  const bool with_intensity = cloud.has_intensity();
  for (std::size_t begin = 0; begin < keyed.size();) {
    std::size_t end = begin;
    Eigen::Vector3f sum = Eigen::Vector3f::Zero();
    float isum = 0.f;
    while (end < keyed.size() && keyed[end].first == keyed[begin].first) {
      sum += cloud.points[keyed[end].second];
      if (with_intensity) isum += cloud.intensity[keyed[end].second];
      ++end;
    }
    const float n = static_cast<float>(end - begin);
    out.points.push_back(sum / n);
    if (with_intensity) out.intensity.push_back(isum / n);
    begin = end;
  }
  return out;
}

PointCloud crop_range(const PointCloud& cloud, double min_range, double max_range) {
  if (!(min_range >= 0.0) || !(max_range >= min_range)) {
    throw Error("crop range must satisfy 0 <= min <= max, got min " + std::to_string(min_range) + ", max " +
                std::to_string(max_range));
  }
  PointCloud out;
  out.origin = cloud.origin;
  const bool with_intensity = cloud.has_intensity();
  const double lo2 = min_range * min_range, hi2 = max_range * max_range;
  for (std::size_t i = 0; i < cloud.size(); ++i) {
    const double r2 = cloud.world(i).squaredNorm();
    if (r2 >= lo2 && r2 <= hi2) {
      out.points.push_back(cloud.points[i]);
      if (with_intensity) out.intensity.push_back(cloud.intensity[i]);
    }
  }
  return out;
}

}  // namespace ndtcu
