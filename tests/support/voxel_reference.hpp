#pragma once
// The CUDA scan filter's algorithm (src/cuda/cuda_filter.cu) step by step on the CPU, with
// the same shared code: crop by math::within_range, bounds of the kept points, the lattice
// from detail::voxel_lattice, keys by math::cell_index, a stable sort of (key, point), and
// each cell's points summed one after another in input order. The GPU must give exactly
// this cloud, bit for bit; next to voxel_downsample it shows what summing in input order
// instead of PCL's sort order changes. Runs without a GPU.
#include "../ndt/synthetic.hpp"

#include <ndtcu/point_cloud.hpp>

#include "filters/voxel_lattice.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace ndtcu::test {

/// crop_range then voxel_downsample (leaf 0: crop only) as the CUDA scan filter computes
/// them. Throws std::logic_error when a key reaches 2^key_bits (the radix sort would miss
/// bits), and ndtcu::Error where the CPU filters throw.
inline PointCloud input_order_voxel_filter(const PointCloud& scan, double min_range, double max_range, double leaf) {
  detail::check_crop_range(min_range, max_range);
  if (leaf != 0.0) detail::check_voxel_leaf(leaf);
  PointCloud out;
  out.origin = scan.origin;
  const bool with_intensity = scan.has_intensity();
  const double min2 = min_range * min_range, max2 = max_range * max_range;
  std::vector<std::uint32_t> kept;
  for (std::size_t i = 0; i < scan.size(); ++i) {
    const auto& p = scan.points[i];
    if (math::within_range(scan.origin.x(), scan.origin.y(), scan.origin.z(), p.x(), p.y(), p.z(), min2, max2)) {
      kept.push_back(static_cast<std::uint32_t>(i));
    }
  }
  if (kept.empty()) return out;
  if (leaf == 0.0) {
    for (std::uint32_t i : kept) {
      out.points.push_back(scan.points[i]);
      if (with_intensity) out.intensity.push_back(scan.intensity[i]);
    }
    return out;
  }
  float lo[3], hi[3];
  for (int a = 0; a < 3; ++a) lo[a] = hi[a] = scan.points[kept.front()][a];
  for (std::uint32_t i : kept) {
    for (int a = 0; a < 3; ++a) {
      lo[a] = std::min(lo[a], scan.points[i][a]);
      hi[a] = std::max(hi[a], scan.points[i][a]);
    }
  }
  const detail::VoxelLattice lattice = detail::voxel_lattice(lo, hi, leaf);
  std::vector<std::pair<std::uint64_t, std::uint32_t>> keyed;
  for (std::uint32_t i : kept) {
    const auto& p = scan.points[i];
    const std::uint64_t key = lattice.pcl_index ? math::cell_index(lattice.pcl, p.x(), p.y(), p.z())
                                                : math::cell_index(lattice.wide, p.x(), p.y(), p.z());
    if (lattice.key_bits < 64 && (key >> lattice.key_bits) != 0) {
      throw std::logic_error("cell index " + std::to_string(key) + " needs more than " +
                             std::to_string(lattice.key_bits) + " bits");
    }
    keyed.emplace_back(key, i);
  }
  std::stable_sort(keyed.begin(), keyed.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (std::size_t run = 0; run < keyed.size();) {
    std::size_t stop = run;
    float sx = 0.f, sy = 0.f, sz = 0.f, si = 0.f;
    for (; stop < keyed.size() && keyed[stop].first == keyed[run].first; ++stop) {
      const std::uint32_t i = keyed[stop].second;
      sx += scan.points[i].x();
      sy += scan.points[i].y();
      sz += scan.points[i].z();
      if (with_intensity) si += scan.intensity[i];
    }
    const float count = static_cast<float>(stop - run);
    out.points.emplace_back(sx / count, sy / count, sz / count);
    if (with_intensity) out.intensity.push_back(si / count);
    run = stop;
  }
  return out;
}

/// A cloud for the filter comparisons, with the crop ranges and leaves to try on it.
struct FilterCase {
  std::string name;
  PointCloud cloud;
  std::vector<std::pair<double, double>> ranges;  ///< (min_range, max_range)
  std::vector<double> leaves;
};

/// Clouds that exercise every branch of the filter: a synthetic yard (with and without
/// intensity, with a frame origin away from zero), a 64-ring scan out to 120 m, clouds far
/// from their origin and across it where PCL's float cell arithmetic rounds, and a leaf
/// small enough to need 64-bit cell indices.
inline std::vector<FilterCase> filter_cases() {
  std::vector<FilterCase> out;
  const std::vector<std::pair<double, double>> ranges = {{0.0, 1e9}, {1.0, 100.0}, {2.5, 8.0}};
  const std::vector<double> leaves = {0.2, 0.5, 1.0};
  out.push_back({"yard", synthetic_scene(3, 60000), ranges, leaves});
  {
    PointCloud c = synthetic_scene(4, 40000);
    for (std::size_t i = 0; i < c.size(); ++i) c.intensity.push_back(0.5f * static_cast<float>(i % 97));
    c.origin = Eigen::Vector3d(12.5, -7.25, 1.0);  // the crop measures from the world origin
    out.push_back({"yard with intensity and origin", std::move(c), ranges, leaves});
  }
  {
    // 64 rings x 1100 columns, ranges from 0.5 to 120 m (some beyond 100 m, some inside 1 m).
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> u(0.f, 1.f);
    PointCloud c;
    for (int ring = 0; ring < 64; ++ring) {
      const float elevation = -0.4f + 0.6f * static_cast<float>(ring) / 63.f;
      for (int col = 0; col < 1100; ++col) {
        const float azimuth = 6.2831853f * static_cast<float>(col) / 1100.f;
        const float r = 0.5f + 119.5f * u(rng) * u(rng);
        c.points.emplace_back(r * std::cos(elevation) * std::cos(azimuth), r * std::cos(elevation) * std::sin(azimuth),
                              r * std::sin(elevation));
        c.intensity.push_back(255.f * u(rng));
      }
    }
    out.push_back({"64-ring scan", std::move(c), ranges, leaves});
  }
  {
    // 30 km from the origin: floor(p / leaf) beyond 2^24, PCL's 32-bit lattice.
    std::mt19937 rng(12);
    std::uniform_real_distribution<float> u(0.f, 1.f);
    PointCloud c;
    for (int i = 0; i < 20000; ++i) c.points.emplace_back(30000.f + 2.f * u(rng), -20000.f + 2.f * u(rng), 0.01f * u(rng));
    out.push_back({"far from the origin", std::move(c), {{0.0, 1e5}, {36055.0, 36057.0}}, {0.001, 0.01}});
  }
  {
    // A 40 km line across the origin at 1 mm: 4e7 cells along x, where (float) floor(x /
    // leaf) - (float) min rounds, so cell coordinates may pass the lattice's dimension.
    std::mt19937 rng(13);
    std::uniform_real_distribution<float> u(-20000.f, 20000.f);
    PointCloud c;
    for (int i = 0; i < 50000; ++i) c.points.emplace_back(u(rng), 0.0005f, 0.0005f);
    out.push_back({"line across the origin", std::move(c), {{0.0, 1e5}, {100.0, 1e4}}, {0.001}});
  }
  // More than 2^31 cells: PCL would give up, voxel_downsample indexes in 64 bits.
  out.push_back({"yard at 0.1 mm", synthetic_scene(5, 30000), {{0.0, 1e9}, {1.0, 100.0}}, {1e-4, 3e-4}});
  {
    // Non-finite coordinates (the loaders drop them; the filters must still agree).
    PointCloud c = synthetic_scene(6, 20000);
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    c.points[10] = {nan, 1.f, 1.f};
    c.points[500] = {inf, 0.f, 0.f};
    c.points[7000] = {1.f, -inf, nan};
    out.push_back({"with NaN and infinity", std::move(c), ranges, leaves});
  }
  return out;
}

/// Largest coordinate difference between same-sized clouds, point by point (m).
inline double max_point_difference(const PointCloud& a, const PointCloud& b) {
  double worst = 0.0;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    worst = std::max(worst, static_cast<double>((a.points[i] - b.points[i]).cwiseAbs().maxCoeff()));
  }
  return worst;
}

/// Largest intensity difference between same-sized clouds, relative to the larger value.
inline double max_intensity_difference(const PointCloud& a, const PointCloud& b) {
  double worst = 0.0;
  for (std::size_t i = 0; i < std::min(a.intensity.size(), b.intensity.size()); ++i) {
    const double d = std::abs(static_cast<double>(a.intensity[i]) - b.intensity[i]);
    worst = std::max(worst, d / std::max(1.0, std::abs(static_cast<double>(a.intensity[i]))));
  }
  return worst;
}

/// True when both clouds hold the same bits (points, intensities, origin).
inline bool bit_identical(const PointCloud& a, const PointCloud& b) {
  if (a.size() != b.size() || a.intensity.size() != b.intensity.size() || a.origin != b.origin) return false;
  // An empty vector's data() may be null, and memcmp's pointers must not be, even for 0 bytes.
  const auto same = [](const void* x, const void* y, std::size_t bytes) {
    return bytes == 0 || std::memcmp(x, y, bytes) == 0;
  };
  return same(a.points.data(), b.points.data(), a.size() * sizeof(Eigen::Vector3f)) &&
         same(a.intensity.data(), b.intensity.data(), a.intensity.size() * sizeof(float));
}

/// How far a centroid summed in input order may be from one summed in PCL's order: a few
/// units in the last place of the coordinates summed. At least 1e-5 m; 4 ulp of the
/// largest finite coordinate for clouds whose points reach beyond ~40 m from their origin
/// (an ulp is 3.8e-6 m at 32-64 m, 7.6e-6 m at 64-128 m, 2e-3 m at 30 km).
inline double centroid_tolerance(const PointCloud& c) {
  float largest = 0.f;
  for (const auto& p : c.points) {
    if (p.allFinite()) largest = std::max(largest, p.cwiseAbs().maxCoeff());
  }
  return std::max(1e-5, 4.0 * static_cast<double>(std::nextafter(largest, std::numeric_limits<float>::infinity()) - largest));
}

}  // namespace ndtcu::test
