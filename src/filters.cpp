#include <ndtcu/error.hpp>
#include <ndtcu/filters.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#if defined(NDTCU_HAVE_BOOST_SORT)
#include <boost/sort/spreadsort/integer_sort.hpp>
#endif

namespace ndtcu {

namespace {

// pcl::VoxelGrid's (PCL 1.13) pairing of a point with its cell's linear index. Its sort
// compares the index only, so the order of points within a cell is whatever the sort
// leaves; the centroid's float sum follows that order.
struct CellPoint {
  unsigned int idx;
  unsigned int cloud_point_index;
  bool operator<(const CellPoint& o) const { return idx < o.idx; }
};

// Centroids of runs of equal cells, in the order of `order` (indices into cloud).
template <typename Key, typename It>
void emit_centroids(const PointCloud& cloud, It begin, It end, Key key_of, PointCloud& out) {
  const bool with_intensity = cloud.has_intensity();
  for (It run = begin; run != end;) {
    It stop = run;
    Eigen::Vector3f sum = Eigen::Vector3f::Zero();
    float isum = 0.f;
    std::size_t n = 0;
    while (stop != end && key_of(*stop) == key_of(*run)) {
      const std::size_t i = stop->cloud_point_index;
      sum += cloud.points[i];  // pcl::CentroidPoint accumulates x y z in float
      if (with_intensity) isum += cloud.intensity[i];
      ++n;
      ++stop;
    }
    out.points.push_back(sum / static_cast<float>(n));
    if (with_intensity) out.intensity.push_back(isum / static_cast<float>(n));
    run = stop;
  }
}

}  // namespace

PointCloud voxel_downsample(const PointCloud& cloud, double leaf) {
  if (!(leaf > 0.0) || !std::isfinite(leaf)) {
    throw Error("voxel leaf size must be positive and finite, got " + std::to_string(leaf));
  }
  PointCloud out;
  out.origin = cloud.origin;
  if (cloud.empty()) return out;
  if (cloud.size() > std::numeric_limits<unsigned int>::max()) {
    throw Error("voxel_downsample: more than 2^32 points");
  }

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
  std::int64_t min_cell[3], dims[3], pcl_dims[3];
  for (int a = 0; a < 3; ++a) {
    min_cell[a] = static_cast<std::int64_t>(std::floor(lo[a] * inv));
    dims[a] = static_cast<std::int64_t>(std::floor(hi[a] * inv)) - min_cell[a] + 1;
    pcl_dims[a] = static_cast<std::int64_t>((hi[a] - lo[a]) * inv) + 1;  // PCL's overflow check
  }
  const double cells = static_cast<double>(dims[0]) * static_cast<double>(dims[1]) * static_cast<double>(dims[2]);
  constexpr double kInt32Max = static_cast<double>(std::numeric_limits<std::int32_t>::max());
  const bool pcl_path = cells <= kInt32Max && static_cast<double>(pcl_dims[0]) * static_cast<double>(pcl_dims[1]) *
                                                      static_cast<double>(pcl_dims[2]) <= kInt32Max;
  if (pcl_path) {
    // PCL's own path: 32-bit indices, (float) floor(p * inv) - (float) min, sorted by
    // boost's spreadsort integer_sort as PCL 1.13 does (same algorithm, same order within a
    // cell, so the same float sums).
    const int mul1 = static_cast<int>(dims[0]), mul2 = static_cast<int>(dims[0] * dims[1]);
    std::vector<CellPoint> index(cloud.size());
    for (std::size_t i = 0; i < cloud.size(); ++i) {
      const auto& p = cloud.points[i];
      const int i0 = static_cast<int>(std::floor(p.x() * inv) - static_cast<float>(min_cell[0]));
      const int i1 = static_cast<int>(std::floor(p.y() * inv) - static_cast<float>(min_cell[1]));
      const int i2 = static_cast<int>(std::floor(p.z() * inv) - static_cast<float>(min_cell[2]));
      index[i] = {static_cast<unsigned int>(i0 + i1 * mul1 + i2 * mul2), static_cast<unsigned int>(i)};
    }
#if defined(NDTCU_HAVE_BOOST_SORT)
    boost::sort::spreadsort::integer_sort(index.begin(), index.end(),
                                          [](const CellPoint& x, unsigned offset) { return x.idx >> offset; });
#else
    // Without Boost the cells are the same but points within a cell keep input order, so a
    // centroid may differ from PCL's in the last float bit.
    std::stable_sort(index.begin(), index.end());
#endif
    emit_centroids(cloud, index.begin(), index.end(), [](const CellPoint& c) { return c.idx; }, out);
    return out;
  }
  // A lattice beyond 32-bit indices (PCL gives up there and returns the cloud unfiltered):
  // 64-bit indices, points within a cell in input order.
  if (cells > static_cast<double>(std::numeric_limits<std::int64_t>::max() / 2)) {
    throw Error("voxel leaf " + std::to_string(leaf) + " m is too small for the cloud's extent (" +
                std::to_string(cells) + " cells do not fit a 64-bit index)");
  }
  struct WideCellPoint {
    std::int64_t idx;
    unsigned int cloud_point_index;
  };
  std::vector<WideCellPoint> keyed(cloud.size());
  for (std::size_t i = 0; i < cloud.size(); ++i) {
    const auto& p = cloud.points[i];
    std::int64_t c[3];
    for (int a = 0; a < 3; ++a) c[a] = static_cast<std::int64_t>(std::floor(p[a] * inv)) - min_cell[a];
    keyed[i] = {c[0] + c[1] * dims[0] + c[2] * dims[0] * dims[1], static_cast<unsigned int>(i)};
  }
  std::stable_sort(keyed.begin(), keyed.end(),
                   [](const WideCellPoint& a, const WideCellPoint& b) { return a.idx < b.idx; });
  emit_centroids(cloud, keyed.begin(), keyed.end(), [](const WideCellPoint& c) { return c.idx; }, out);
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
