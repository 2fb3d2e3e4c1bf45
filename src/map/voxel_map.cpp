#include <ndtcu/error.hpp>
#include <ndtcu/text.hpp>
#include <ndtcu/voxel_map.hpp>

#include "cuda/cuda_voxel_build.hpp"
#include "cuda/device_scope.hpp"
#include "log.hpp"
#include "voxel_cells.hpp"
#include "voxel_map_access.hpp"
#include "ndt_neighbours.hpp"
#include "thread_pool.hpp"
#include "voxel_statistics.hpp"

#include <ndtcu/settings.hpp>

#include <Eigen/Dense>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <string>
#include <utility>

namespace ndtcu {

namespace {

using math::kEmptyKey;

}  // namespace

bool detail::build_on_gpu(const VoxelMapOptions& o) { return resolve_backend(o.backend, o.device) == Backend::Cuda; }

namespace {

// The CPU build of the cells: the points sorted into cells, each cell's points summed in
// input order and its statistics (kernels/voxel_statistics.hpp, the GPU build's), the
// usable ones in cell order.
detail::VoxelCells cpu_voxel_cells(PointCloudView cloud, float inverse_resolution, double resolution,
                                   const VoxelMapOptions& options) {
  detail::ThreadPool pool(options.threads);
  const detail::SortedCells sorted = detail::sort_into_cells(cloud, inverse_resolution, resolution, pool);
  const auto& runs = sorted.runs;
  // Statistics per cell, in parallel (each cell's result to its own slot).
  const bool autoware = options.covariance == CovarianceMode::Autoware;
  std::vector<math::VoxelStatistics> results(runs.size());
  constexpr std::size_t kCellChunk = 1024;
  pool.parallel_for((runs.size() + kCellChunk - 1) / kCellChunk, [&](std::size_t c) {
    const std::size_t end = std::min(runs.size(), (c + 1) * kCellChunk);
    for (std::size_t r = c * kCellChunk; r < end; ++r) {
      results[r].usable = false;
      if (runs[r].second - runs[r].first < static_cast<std::size_t>(options.min_points)) continue;
      math::voxel_statistics(detail::cell_sums(cloud, sorted, r, autoware), !autoware, options.eigenvalue_ratio,
                             results[r]);
    }
  });
  // The usable cells in cell order.
  detail::VoxelCells out;
  out.occupied_cells = runs.size();
  for (std::size_t r = 0; r < runs.size(); ++r) {
    const std::size_t count = runs[r].second - runs[r].first;
    if (count < static_cast<std::size_t>(options.min_points)) {
      ++out.sparse_cells;
    } else if (!results[r].usable) {
      ++out.singular_cells;
    } else {
      detail::append_voxel(out, sorted.keyed[runs[r].first].first, static_cast<std::uint32_t>(count), results[r]);
    }
  }
  return out;
}

}  // namespace

void detail::check_voxel_map_options(const VoxelMapOptions& options) {
  if (!(options.resolution > 0.0) || !std::isfinite(options.resolution)) {
    throw Error("voxel map resolution must be positive and finite, got " + ndtcu::number_text(options.resolution));
  }
  // The lattice keeps the resolution in float, as PCL and Autoware do: below float's
  // smallest normal value it is 0 or loses its digits, and its inverse is infinite.
  if (static_cast<float>(options.resolution) < std::numeric_limits<float>::min()) {
    throw Error(fmt::format("voxel map resolution {} m is too small: the lattice keeps it in float32, whose "
                            "smallest normal value is {:.3g} (no map has voxels that fine)",
                            ndtcu::number_text(options.resolution), std::numeric_limits<float>::min()));
  }
  if (options.min_points < 3) {
    throw Error("voxel map min_points must be at least 3 (a covariance needs them), got " +
                std::to_string(options.min_points));
  }
  if (!(options.eigenvalue_ratio >= 0.0 && options.eigenvalue_ratio <= 1.0)) {
    throw Error("voxel map eigenvalue_ratio must be in [0, 1], got " + ndtcu::number_text(options.eigenvalue_ratio));
  }
  if (options.threads < 0 || options.threads > kMaxThreads) {
    throw Error("voxel map threads must be in [0, " + std::to_string(kMaxThreads) + "] (0: one per hardware thread), got " +
                std::to_string(options.threads));
  }
}

float detail::inverse_resolution(double resolution) {
  // PCL and Autoware keep the resolution in float; so does the lattice.
  return 1.0f / static_cast<float>(resolution);
}

Error detail::lattice_error(PointCloudView cloud, std::size_t i, double resolution) {
  const Eigen::Vector3f& p = cloud[i];
  if (!p.allFinite()) {
    return Error(fmt::format("voxel map: point {} is not finite ({}, {}, {})", i, number_text(p.x()),
                             number_text(p.y()), number_text(p.z())));
  }
  // The lattice holds 2^21 cells a side about the origin. Whether moving the origin would
  // help depends on how far the points spread: a cloud wider than the lattice needs a
  // coarser resolution (a refine_ratio of 1e-9 or a resolution of 1e-9 m was told to move
  // its origin, which no origin fixes).
  Eigen::Vector3f lo = Eigen::Vector3f::Constant(std::numeric_limits<float>::infinity()), hi = -lo;
  for (std::size_t k = 0; k < cloud.size(); ++k) {
    if (!cloud[k].allFinite()) continue;
    lo = lo.cwiseMin(cloud[k]);
    hi = hi.cwiseMax(cloud[k]);
  }
  const double extent = (hi - lo).cast<double>().maxCoeff();
  const double side = 2.0 * math::kKeyOffset * resolution;  // the lattice's width (m)
  if (!(extent < side)) {
    // (The resolution as float keeps it: six digits give it back as it was written.)
    return Error(fmt::format("voxel map: resolution {:.6g} m is too small for this cloud: its lattice holds 2^21 "
                             "voxels a side ({:.3g} m), and the points spread over {:.6g} m, so their voxels would not "
                             "fit; use a resolution of at least {:.3g} m, or crop the cloud",
                             resolution, side, extent, extent / (2.0 * math::kKeyOffset) * 1.001));
  }
  return Error(fmt::format("voxel map: point {} lies more than 2^20 voxels of {:.6g} m from the cloud origin; read "
                           "the map with an origin near its points (ndtcu's --origin X,Y,Z, OriginPolicy::Fixed in "
                           "C++) or crop it",
                           i, resolution));
}

detail::SortedCells detail::sort_into_cells(PointCloudView cloud, float inverse_resolution, double resolution,
                                            ThreadPool& pool) {
  SortedCells out;
  const std::size_t n = cloud.size();
  // 1. Lattice key of every point (PCL: floor(p * inverse_leaf_size) in float).
  if (n > std::numeric_limits<std::uint32_t>::max()) throw Error("voxel map: more than 2^32 points");
  auto& keyed = out.keyed;
  keyed.resize(n);
  constexpr std::size_t kChunk = 1 << 16;
  const std::size_t chunks = (n + kChunk - 1) / kChunk;
  pool.parallel_for(chunks, [&](std::size_t c) {
    const std::size_t end = std::min(n, (c + 1) * kChunk);
    for (std::size_t i = c * kChunk; i < end; ++i) {
      const Eigen::Vector3f& p = cloud[i];
      const std::int64_t a = math::lattice_index(p.x(), inverse_resolution);
      const std::int64_t b = math::lattice_index(p.y(), inverse_resolution);
      const std::int64_t k = math::lattice_index(p.z(), inverse_resolution);
      if (!math::key_in_range(a, b, k)) throw lattice_error(cloud, i, resolution);
      keyed[i] = {math::pack_key(static_cast<std::int32_t>(a), static_cast<std::int32_t>(b),
                                 static_cast<std::int32_t>(k)),
                  static_cast<std::uint32_t>(i)};
    }
  });
  // 2. Sort by (key, point index): the packed key orders cells by (z, y, x), PCL's order,
  // and within a cell the points keep their input order.
  {
    const std::size_t parts = std::min<std::size_t>(static_cast<std::size_t>(pool.size()), std::max<std::size_t>(1, n / kChunk));
    std::vector<std::size_t> bounds(parts + 1);
    for (std::size_t p = 0; p <= parts; ++p) bounds[p] = n * p / parts;
    pool.parallel_for(parts, [&](std::size_t p) {
      std::sort(keyed.begin() + static_cast<std::ptrdiff_t>(bounds[p]),
                keyed.begin() + static_cast<std::ptrdiff_t>(bounds[p + 1]));
    });
    for (std::size_t width = 1; width < parts; width *= 2) {
      for (std::size_t p = 0; p + width < parts; p += 2 * width) {
        const std::size_t hi = std::min(parts, p + 2 * width);
        std::inplace_merge(keyed.begin() + static_cast<std::ptrdiff_t>(bounds[p]),
                           keyed.begin() + static_cast<std::ptrdiff_t>(bounds[p + width]),
                           keyed.begin() + static_cast<std::ptrdiff_t>(bounds[hi]));
      }
    }
  }
  // 3. Cells: runs of equal keys.
  for (std::size_t b = 0; b < n;) {
    std::size_t e = b + 1;
    while (e < n && keyed[e].first == keyed[b].first) ++e;
    out.runs.emplace_back(b, e);
    b = e;
  }
  return out;
}

math::VoxelSums detail::cell_sums(PointCloudView cloud, const SortedCells& cells, std::size_t run, bool autoware) {
  math::VoxelSums sums;
  math::start_sums(sums, autoware);
  for (std::size_t m = cells.runs[run].first; m < cells.runs[run].second; ++m) {
    const Eigen::Vector3f& p = cloud[cells.keyed[m].second];
    math::add_point(sums, p.x(), p.y(), p.z());
  }
  return sums;
}

void detail::resize_voxels(VoxelCells& out, std::size_t voxels) {
  out.keys.resize(voxels);
  out.counts.resize(voxels);
  for (int a = 0; a < 3; ++a) {
    out.mean[a].resize(voxels);
    out.centroid[a].resize(voxels);
  }
  for (int e = 0; e < 6; ++e) {
    out.icov[e].resize(voxels);
    out.cov[e].resize(voxels);
  }
}

void detail::set_voxel(VoxelCells& out, std::size_t v, std::uint64_t key, std::uint32_t count,
                       const math::VoxelStatistics& s) {
  static constexpr int kRow[6] = {0, 0, 0, 1, 1, 2}, kCol[6] = {0, 1, 2, 1, 2, 2};
  out.keys[v] = key;
  out.counts[v] = count;
  for (int a = 0; a < 3; ++a) {
    out.mean[a][v] = s.mean[a];
    out.centroid[a][v] = s.centroid[a];
  }
  for (int e = 0; e < 6; ++e) {
    out.icov[e][v] = s.icov[kRow[e]][kCol[e]];
    out.cov[e][v] = s.cov[kRow[e]][kCol[e]];
  }
}

void detail::append_voxel(VoxelCells& out, std::uint64_t key, std::uint32_t count, const math::VoxelStatistics& s) {
  const std::size_t v = out.keys.size();
  out.keys.push_back(key);
  out.counts.push_back(count);
  for (int a = 0; a < 3; ++a) {
    out.mean[a].emplace_back();
    out.centroid[a].emplace_back();
  }
  for (int e = 0; e < 6; ++e) {
    out.icov[e].emplace_back();
    out.cov[e].emplace_back();
  }
  set_voxel(out, v, key, count, s);
}

// Fills a VoxelMap's private members (detail::assemble_voxel_map's access).
struct detail::VoxelMapAccess {
  static VoxelMap assemble(VoxelCells&& cells, const VoxelMapOptions& options, const Eigen::Vector3d& origin,
                           std::size_t points, bool built_on_gpu) {
    VoxelMap map;
    map.options_ = options;
    const float res_f = static_cast<float>(options.resolution);
    map.resolution_ = static_cast<double>(res_f);
    map.inverse_resolution_ = inverse_resolution(options.resolution);
    map.radius_squared_ = static_cast<float>(map.resolution_ * map.resolution_);
    map.origin_ = origin;
    map.stats_.points = points;
    map.built_on_gpu_ = built_on_gpu;
    map.stats_.occupied_cells = cells.occupied_cells;
    map.stats_.sparse_cells = cells.sparse_cells;
    map.stats_.singular_cells = cells.singular_cells;
    map.cells_.reserve(cells.keys.size());
    for (const std::uint64_t key : cells.keys) {
      map.cells_.push_back({math::unpack_key(key, 0), math::unpack_key(key, 1), math::unpack_key(key, 2)});
    }
    // Arrays grown voxel by voxel hold up to twice their size: the map keeps what it uses.
    const auto fit = [](auto& v) { v.shrink_to_fit(); };
    fit(cells.counts);
    for (auto& v : cells.mean) fit(v);
    for (auto& v : cells.centroid) fit(v);
    for (auto& v : cells.icov) fit(v);
    for (auto& v : cells.cov) fit(v);
    map.counts_ = std::move(cells.counts);
    map.mean_ = std::move(cells.mean);
    map.centroid_ = std::move(cells.centroid);
    map.icov_ = std::move(cells.icov);
    map.cov_ = std::move(cells.cov);
    const std::size_t capacity = math::hash_capacity(map.size());
    map.table_keys_.assign(capacity, kEmptyKey);
    map.table_values_.assign(capacity, -1);
    for (std::size_t v = 0; v < map.size(); ++v) {
      const std::uint64_t key = cells.keys[v];
      std::uint64_t slot = math::hash_key(key) & (capacity - 1);
      while (map.table_keys_[slot] != kEmptyKey) slot = (slot + 1) & (capacity - 1);
      map.table_keys_[slot] = key;
      map.table_values_[slot] = static_cast<std::int32_t>(v);
    }
    return map;
  }
  static void set_build_ms(VoxelMap& map, double ms) { map.stats_.build_ms = ms; }
  static VoxelHashTable hash_table(const VoxelMap& map) noexcept { return {map.table_keys_, map.table_values_}; }
};

detail::VoxelHashTable detail::voxel_hash_table(const VoxelMap& map) noexcept { return VoxelMapAccess::hash_table(map); }

VoxelMap detail::assemble_voxel_map(VoxelCells&& cells, const VoxelMapOptions& options, const Eigen::Vector3d& origin,
                                    std::size_t points, bool built_on_gpu) {
  return VoxelMapAccess::assemble(std::move(cells), options, origin, points, built_on_gpu);
}

void detail::set_build_ms(VoxelMap& map, double ms) { VoxelMapAccess::set_build_ms(map, ms); }

VoxelMap detail::build_voxel_map(PointCloudView cloud, const VoxelMapOptions& options, CudaVoxelizer* voxelizer,
                                 DeviceVoxelCells* on_device) {
  const auto t0 = std::chrono::steady_clock::now();
  check_voxel_map_options(options);
  const float inverse = inverse_resolution(options.resolution);
  const double resolution = static_cast<double>(static_cast<float>(options.resolution));
  const bool on_gpu = voxelizer != nullptr || build_on_gpu(options);
  // A GPU build runs on the options' device (the voxelizer's buffers are on it too).
  const DeviceScope scope(on_gpu ? resolve_device(options.device) : -1);
  VoxelCells cells;
  try {
    cells = voxelizer ? voxelizer->usable_cells(cloud, inverse, options, on_device)
            : on_gpu  ? cuda_voxel_cells(cloud, inverse, options)
                      : cpu_voxel_cells(cloud, inverse, resolution, options);
  } catch (const CudaError&) {
    throw;
  } catch (const Error&) {
    // The device build names a point beyond the lattice without saying why: the host
    // finds the same point (the same lattice_index) and tells why it is there.
    if (on_gpu) {
      for (std::size_t i = 0; i < cloud.size(); ++i) {
        const Eigen::Vector3f& p = cloud[i];
        if (!math::key_in_range(math::lattice_index(p.x(), inverse), math::lattice_index(p.y(), inverse),
                                math::lattice_index(p.z(), inverse))) {
          throw lattice_error(cloud, i, resolution);
        }
      }
    }
    throw;
  }
  VoxelMap map = assemble_voxel_map(std::move(cells), options, cloud.origin, cloud.size(), on_gpu);
  set_build_ms(map, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  const VoxelMapStats& st = map.stats();
  log().debug("voxel map: {} points, {} cells, {} voxels ({} under {} points, {} singular), res {} m, {:.1f} ms ({})",
              st.points, st.occupied_cells, map.size(), st.sparse_cells, options.min_points, st.singular_cells,
              map.resolution(), st.build_ms, on_gpu ? "GPU" : "CPU");
  return map;
}

VoxelMap VoxelMap::build(PointCloudView cloud, const VoxelMapOptions& options) {
  return detail::build_voxel_map(cloud, options, nullptr, nullptr);
}

std::int32_t VoxelMap::find(std::int64_t i, std::int64_t j, std::int64_t k) const {
  if (table_keys_.empty()) return -1;
  math::VoxelGridView g{};
  math::attach_hash(g, table_keys_.data(), table_values_.data(), table_keys_.size());
  return math::find_voxel(g, i, j, k);
}

Eigen::Vector3d VoxelMap::mean_world(std::size_t v) const {
  return origin_ + Eigen::Vector3d(mean_[0][v], mean_[1][v], mean_[2][v]);
}

namespace {
Eigen::Matrix3d symmetric(const std::array<std::vector<double>, 6>& s, std::size_t v) {
  Eigen::Matrix3d m;
  m << s[0][v], s[1][v], s[2][v], s[1][v], s[3][v], s[4][v], s[2][v], s[4][v], s[5][v];
  return m;
}
}  // namespace

Eigen::Matrix3d VoxelMap::inverse_covariance_matrix(std::size_t v) const { return symmetric(icov_, v); }
Eigen::Matrix3d VoxelMap::covariance_matrix(std::size_t v) const { return symmetric(cov_, v); }

std::size_t VoxelMap::memory_bytes() const noexcept {
  std::size_t bytes = 0;
  for (const auto& v : mean_) bytes += v.capacity() * sizeof(double);
  for (const auto& v : icov_) bytes += v.capacity() * sizeof(double);
  for (const auto& v : cov_) bytes += v.capacity() * sizeof(double);
  for (const auto& v : centroid_) bytes += v.capacity() * sizeof(float);
  return bytes + cells_.capacity() * sizeof(cells_[0]) + counts_.capacity() * sizeof(std::uint32_t) +
         table_keys_.capacity() * sizeof(std::uint64_t) + table_values_.capacity() * sizeof(std::int32_t);
}

}  // namespace ndtcu
