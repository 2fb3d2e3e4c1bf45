#include <ndtcu/error.hpp>
#include <ndtcu/filters.hpp>
#include <ndtcu/text.hpp>

#include "voxel_lattice.hpp"

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

namespace detail {

void check_voxel_leaf(double leaf) {
  if (!(leaf > 0.0) || !std::isfinite(leaf)) {
    throw Error("voxel leaf size must be positive and finite, got " + ndtcu::number_text(leaf));
  }
}

void check_crop_range(double min_range, double max_range) {
  if (!(min_range >= 0.0) || !(max_range >= min_range)) {
    throw Error("crop range must satisfy 0 <= min <= max, got min " + ndtcu::number_text(min_range) + ", max " +
                ndtcu::number_text(max_range));
  }
}

namespace {
// Bits needed to write v (0 for 0).
int bit_width(std::uint64_t v) {
  int bits = 0;
  for (; v != 0; v >>= 1) ++bits;
  return bits;
}
}  // namespace

VoxelLattice voxel_lattice(const float lo[3], const float hi[3], double leaf) {
  check_voxel_leaf(leaf);
  // pcl::VoxelGrid: cell = floor(p * (1/leaf)) with the inverse leaf in float, the lattice
  // spans [min_cell, max_cell], and the linear index runs x fastest.
  const float inv = 1.0f / static_cast<float>(leaf);  // as PCL: the inverse leaf in float
  // Cell indices must fit comfortably in 64 bits before they are converted.
  constexpr float kMaxCell = 1e18f;
  for (int a = 0; a < 3; ++a) {
    if (!(std::abs(lo[a] * inv) < kMaxCell && std::abs(hi[a] * inv) < kMaxCell)) {
      throw Error("voxel leaf " + ndtcu::number_text(leaf) + " m is too small for the cloud's extent");
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
  VoxelLattice lattice;
  lattice.pcl_index = cells <= kInt32Max && static_cast<double>(pcl_dims[0]) * static_cast<double>(pcl_dims[1]) *
                                                    static_cast<double>(pcl_dims[2]) <= kInt32Max;
  // Used only on a lattice that passes its checks: below 2^31 cells (where the double
  // product above is exact too) or below 2^63 (checked next), so the product never wraps.
  const std::uint64_t exact_cells = static_cast<std::uint64_t>(dims[0]) * static_cast<std::uint64_t>(dims[1]) *
                                    static_cast<std::uint64_t>(dims[2]);
  if (lattice.pcl_index) {
    // PCL's own path: 32-bit indices, (float) floor(p * inv) - (float) min (min_cell is a
    // float's floor, so the conversion back is exact).
    auto& g = lattice.pcl;
    g.inverse_leaf = inv;
    for (int a = 0; a < 3; ++a) g.min_cell[a] = static_cast<float>(min_cell[a]);
    g.mul1 = static_cast<std::uint32_t>(dims[0]);
    g.mul2 = static_cast<std::uint32_t>(dims[0] * dims[1]);
    // The float difference is exact (so each cell coordinate below its dimension and the
    // index below the cell count) while every dimension is at most 2^24; beyond, rounding
    // may push a coordinate past its dimension, and only the full 32 bits bound the index.
    constexpr std::int64_t kExactFloat = std::int64_t(1) << 24;
    const bool exact = dims[0] <= kExactFloat && dims[1] <= kExactFloat && dims[2] <= kExactFloat;
    lattice.key_bits = exact ? std::max(1, bit_width(exact_cells - 1)) : 32;
    return lattice;
  }
  // A lattice beyond 32-bit indices (PCL gives up there and returns the cloud unfiltered):
  // 64-bit indices.
  if (cells > static_cast<double>(std::numeric_limits<std::int64_t>::max() / 2)) {
    throw Error("voxel leaf " + ndtcu::number_text(leaf) + " m is too small for the cloud's extent (" +
                ndtcu::number_text(cells) + " cells do not fit a 64-bit index)");
  }
  auto& g = lattice.wide;
  g.inverse_leaf = inv;
  for (int a = 0; a < 3; ++a) g.min_cell[a] = min_cell[a];
  g.dims0 = static_cast<std::uint64_t>(dims[0]);
  g.dims01 = static_cast<std::uint64_t>(dims[0] * dims[1]);
  lattice.key_bits = std::max(1, bit_width(exact_cells - 1));
  return lattice;
}

}  // namespace detail

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
// `intensity`, `time`: one per point of `cloud`, or null (none). A centroid's time is the
// mean of its points' times, as its intensity is theirs: the moment the sensor saw the
// middle of the cell (within a cell the points of one sweep are close in time, except in
// the cells where the sweep begins and ends).
template <typename Key, typename It>
void emit_centroids(PointCloudView cloud, const float* intensity, const float* time, It begin, It end, Key key_of,
                    PointCloud& out) {
  const bool with_intensity = intensity != nullptr;
  const bool with_time = time != nullptr;
  for (It run = begin; run != end;) {
    It stop = run;
    Eigen::Vector3f sum = Eigen::Vector3f::Zero();
    float isum = 0.f;
    double tsum = 0.0;  // in double: a mean of 10^5 times keeps its nanoseconds
    std::size_t n = 0;
    while (stop != end && key_of(*stop) == key_of(*run)) {
      const std::size_t i = stop->cloud_point_index;
      sum += cloud[i];  // pcl::CentroidPoint accumulates x y z in float
      if (with_intensity) isum += intensity[i];
      if (with_time) tsum += time[i];
      ++n;
      ++stop;
    }
    out.points.push_back(sum / static_cast<float>(n));
    if (with_intensity) out.intensity.push_back(isum / static_cast<float>(n));
    if (with_time) out.time.push_back(static_cast<float>(tsum / static_cast<double>(n)));
    run = stop;
  }
}

}  // namespace

PointCloud detail::downsample_points(PointCloudView cloud, const float* intensity, const float* time, double leaf) {
  detail::check_voxel_leaf(leaf);
  PointCloud out;
  out.origin = cloud.origin;
  if (cloud.empty()) return out;
  if (cloud.size() > std::numeric_limits<unsigned int>::max()) {
    throw Error("voxel_downsample: more than 2^32 points");
  }

  Eigen::Vector3f lo = cloud[0], hi = lo;
  for (const auto& p : cloud) {
    lo = lo.cwiseMin(p);
    hi = hi.cwiseMax(p);
  }
  const detail::VoxelLattice lattice = detail::voxel_lattice(lo.data(), hi.data(), leaf);
  if (lattice.pcl_index) {
    // PCL's own path, sorted by boost's spreadsort integer_sort as PCL 1.13 does (same
    // algorithm, same order within a cell, so the same float sums).
    std::vector<CellPoint> index(cloud.size());
    for (std::size_t i = 0; i < cloud.size(); ++i) {
      const auto& p = cloud[i];
      index[i] = {math::cell_index(lattice.pcl, p.x(), p.y(), p.z()), static_cast<unsigned int>(i)};
    }
#if defined(NDTCU_HAVE_BOOST_SORT)
    boost::sort::spreadsort::integer_sort(index.begin(), index.end(),
                                          [](const CellPoint& x, unsigned offset) { return x.idx >> offset; });
#else
    // Without Boost the cells are the same but points within a cell keep input order, so a
    // centroid may differ from PCL's in the last float bit.
    std::stable_sort(index.begin(), index.end());
#endif
    emit_centroids(cloud, intensity, time, index.begin(), index.end(), [](const CellPoint& c) { return c.idx; }, out);
    return out;
  }
  // The 64-bit lattice: points within a cell in input order.
  struct WideCellPoint {
    std::uint64_t idx;
    unsigned int cloud_point_index;
  };
  std::vector<WideCellPoint> keyed(cloud.size());
  for (std::size_t i = 0; i < cloud.size(); ++i) {
    const auto& p = cloud[i];
    keyed[i] = {math::cell_index(lattice.wide, p.x(), p.y(), p.z()), static_cast<unsigned int>(i)};
  }
  std::stable_sort(keyed.begin(), keyed.end(),
                   [](const WideCellPoint& a, const WideCellPoint& b) { return a.idx < b.idx; });
  emit_centroids(cloud, intensity, time, keyed.begin(), keyed.end(), [](const WideCellPoint& c) { return c.idx; },
                 out);
  return out;
}

PointCloud detail::crop_points(PointCloudView cloud, const float* intensity, const float* time, double min_range,
                               double max_range) {
  detail::check_crop_range(min_range, max_range);
  PointCloud out;
  out.origin = cloud.origin;
  const bool with_intensity = intensity != nullptr;
  const double lo2 = min_range * min_range, hi2 = max_range * max_range;
  const Eigen::Vector3d& o = cloud.origin;
  for (std::size_t i = 0; i < cloud.size(); ++i) {
    const auto& p = cloud[i];
    if (math::within_range(o.x(), o.y(), o.z(), p.x(), p.y(), p.z(), lo2, hi2)) {
      out.points.push_back(p);
      if (with_intensity) out.intensity.push_back(intensity[i]);
      if (time) out.time.push_back(time[i]);
    }
  }
  return out;
}

PointCloud voxel_downsample(const PointCloud& cloud, double leaf) {
  return detail::downsample_points(cloud, cloud.intensity_or_null(), cloud.time_or_null(), leaf);
}
PointCloud voxel_downsample(PointCloudView cloud, double leaf) {
  return detail::downsample_points(cloud, nullptr, nullptr, leaf);
}

PointCloud crop_range(const PointCloud& cloud, double min_range, double max_range) {
  return detail::crop_points(cloud, cloud.intensity_or_null(), cloud.time_or_null(), min_range, max_range);
}
PointCloud crop_range(PointCloudView cloud, double min_range, double max_range) {
  return detail::crop_points(cloud, nullptr, nullptr, min_range, max_range);
}

}  // namespace ndtcu
