// The global search's pyramids (score_pyramid.hpp): the map's NDT likelihood on a grid of
// leaf cells, its sliding-window maxima, and where a sensor can stand.
#include "score_pyramid.hpp"

#include <ndtcu/error.hpp>

#include "../thread_pool.hpp"

#include <fmt/format.h>

#include <Eigen/Cholesky>
#include <Eigen/LU>

#include <algorithm>
#include <cmath>
#include <limits>

namespace ndtcu::detail {

namespace {

// A cell counts as holding a surface (for where a sensor stands) when its centre's
// likelihood is at least this: within about 1.7 standard deviations of a voxel's mean.
// A flat ground voxel is thin, and the cells' centres lie anywhere across it: on a
// simulated city the ground's largest value in a column was 94-176 (one in ten below 110),
// so half of that (128) left a third of the street's columns with no surface at all.
constexpr std::uint8_t kOccupied = 64;
// Windows at the top level: at most this many over the map's x-y extent (8 x 8): the
// search scores all of them for every yaw before it branches.
constexpr long kTopWindows = 64;
constexpr int kMaxLevels = 9;  // windows of 256 cells at most

// Slabs of this many z cells are filled by one task (each voxel is visited by the few
// slabs its extent reaches).
constexpr int kSlab = 4;

// Level `dst` from level `src` = dst - 1 (window 2^src): at a, the combination (max or OR)
// of src at a and a + 2^src along x, then y, then z; cells beyond the grid count as 0.
template <typename Combine>
void pool_level(std::vector<std::uint8_t>& data, std::size_t stride, int nx, int ny, int nz, int src, Combine combine,
                std::vector<std::uint8_t>& scratch) {
  const int h = 1 << src;
  const std::uint8_t* in = data.data() + static_cast<std::size_t>(src) * stride;
  std::uint8_t* out = data.data() + static_cast<std::size_t>(src + 1) * stride;
  scratch.resize(stride);
  std::uint8_t* t = scratch.data();
  const auto at = [nx, ny](int x, int y, int z) {
    return (static_cast<std::size_t>(z) * static_cast<std::size_t>(ny) + static_cast<std::size_t>(y)) *
               static_cast<std::size_t>(nx) + static_cast<std::size_t>(x);
  };
  for (int z = 0; z < nz; ++z) {
    for (int y = 0; y < ny; ++y) {
      for (int x = 0; x < nx; ++x) {
        const std::uint8_t a = in[at(x, y, z)];
        t[at(x, y, z)] = x + h < nx ? combine(a, in[at(x + h, y, z)]) : a;
      }
    }
  }
  for (int z = 0; z < nz; ++z) {
    for (int y = 0; y < ny; ++y) {
      for (int x = 0; x < nx; ++x) {
        const std::uint8_t a = t[at(x, y, z)];
        out[at(x, y, z)] = y + h < ny ? combine(a, t[at(x, y + h, z)]) : a;
      }
    }
  }
  for (int z = 0; z < nz; ++z) {
    for (int y = 0; y < ny; ++y) {
      for (int x = 0; x < nx; ++x) {
        if (z + h < nz) out[at(x, y, z)] = combine(out[at(x, y, z)], out[at(x, y, z + h)]);
      }
    }
  }
}

}  // namespace

namespace {

// The grid of `map` at `cell` metres: its origin (a multiple of the cell) and the cells per
// axis (as doubles), covering the voxels' means with a margin of two cells and half a voxel,
// where the likelihood of the outermost voxels fades.
struct GridExtent {
  Eigen::Vector3d origin = Eigen::Vector3d::Zero();
  Eigen::Vector3d lo = Eigen::Vector3d::Zero(), hi = Eigen::Vector3d::Zero();
  double count[3] = {0.0, 0.0, 0.0};
};

GridExtent grid_extent(const VoxelMap& map, double cell) {
  GridExtent g;
  Eigen::Vector3d lo = Eigen::Vector3d::Constant(std::numeric_limits<double>::infinity());
  Eigen::Vector3d hi = -lo;
  for (std::size_t v = 0; v < map.size(); ++v) {
    for (int a = 0; a < 3; ++a) {
      lo(a) = std::min(lo(a), map.mean(a)[v]);
      hi(a) = std::max(hi(a), map.mean(a)[v]);
    }
  }
  const double margin = 2.0 * cell + 0.5 * map.resolution();
  g.lo = lo.array() - margin;
  g.hi = hi.array() + margin;
  g.origin = (g.lo / cell).array().floor().matrix() * cell;
  for (int a = 0; a < 3; ++a) g.count[a] = std::ceil((g.hi(a) - g.origin(a)) / cell);
  return g;
}

}  // namespace

double score_pyramid_cells(const VoxelMap& map, double cell) {
  if (map.empty()) return 0.0;
  const GridExtent g = grid_extent(map, cell);
  return g.count[0] * g.count[1] * g.count[2];
}

ScorePyramid build_score_pyramid(const VoxelMap& map, double cell, int levels, std::size_t max_cells, ThreadPool* pool,
                                 bool with_standing) {
  if (!(std::isfinite(cell) && cell > 0.0)) throw Error(fmt::format("global search: cell {} m must be > 0", cell));
  if (map.empty()) throw Error("global search: the map has no voxels");
  ScorePyramid p;
  p.cell = cell;
  const std::size_t nv = map.size();
  const GridExtent g = grid_extent(map, cell);
  p.origin = g.origin;
  double cells = 1.0;
  int n[3];
  for (int a = 0; a < 3; ++a) {
    const double count = g.count[a];
    cells *= count;
    if (!(count < 1e7) || !(cells <= static_cast<double>(max_cells))) {
      throw Error(fmt::format("global search: the map's extent {:.0f} x {:.0f} x {:.0f} m at a cell of {} m needs more "
                              "than {} cells per level (GlobalSearchOptions::max_cells); use a larger cell",
                              g.hi(0) - g.lo(0), g.hi(1) - g.lo(1), g.hi(2) - g.lo(2), cell, max_cells));
    }
    n[a] = static_cast<int>(count);
  }
  p.nx = n[0];
  p.ny = n[1];
  p.nz = n[2];
  if (levels <= 0) {
    int k = 0;
    while (k + 1 < kMaxLevels &&
           static_cast<long>(std::ceil(p.nx / double(1 << k))) * static_cast<long>(std::ceil(p.ny / double(1 << k))) >
               kTopWindows) {
      ++k;
    }
    levels = k + 1;
  }
  p.level_count = std::min(levels, kMaxLevels);
  const std::size_t stride = p.level_stride();
  p.levels.assign(stride * static_cast<std::size_t>(p.level_count), 0);
  if (with_standing) p.standing.assign(stride * static_cast<std::size_t>(p.level_count), 0);

  // Level 0: every voxel's widened Gaussian over the cells of its 3-sigma box, in slabs of
  // z so that tasks write disjoint cells.
  const double s2 = 0.25 * cell * cell;
  struct Reach {
    int z0, z1;
  };
  std::vector<Reach> reach(nv);
  std::vector<Eigen::Matrix3d> info(nv);
  std::vector<Eigen::Vector3d> half(nv);
  for (std::size_t v = 0; v < nv; ++v) {
    Eigen::Matrix3d c = map.covariance_matrix(v);
    c.diagonal().array() += s2;
    info[v] = c.inverse();
    half[v] = 3.0 * c.diagonal().array().sqrt();
    const double z = map.mean(2)[v] - p.origin(2);
    reach[v] = Reach{static_cast<int>(std::floor((z - half[v](2)) / cell)), static_cast<int>(std::floor((z + half[v](2)) / cell))};
  }
  const int slabs = (p.nz + kSlab - 1) / kSlab;
  std::vector<std::vector<std::uint32_t>> by_slab(static_cast<std::size_t>(slabs));
  for (std::size_t v = 0; v < nv; ++v) {
    const int s0 = std::max(0, reach[v].z0 / kSlab), s1 = std::min(slabs - 1, std::max(0, reach[v].z1) / kSlab);
    for (int s = s0; s <= s1; ++s) by_slab[static_cast<std::size_t>(s)].push_back(static_cast<std::uint32_t>(v));
  }
  std::uint8_t* level0 = p.levels.data();
  const auto fill_slab = [&](std::size_t s) {
    const int zs0 = static_cast<int>(s) * kSlab, zs1 = std::min(p.nz, zs0 + kSlab);
    for (std::uint32_t v : by_slab[s]) {
      const Eigen::Vector3d m(map.mean(0)[v] - p.origin(0), map.mean(1)[v] - p.origin(1), map.mean(2)[v] - p.origin(2));
      int b0[3], b1[3];
      for (int a = 0; a < 3; ++a) {
        b0[a] = std::max(0, static_cast<int>(std::floor((m(a) - half[v](a)) / cell)));
        b1[a] = std::min(n[a] - 1, static_cast<int>(std::floor((m(a) + half[v](a)) / cell)));
      }
      b0[2] = std::max(b0[2], zs0);
      b1[2] = std::min(b1[2], zs1 - 1);
      const Eigen::Matrix3d& a = info[v];
      for (int z = b0[2]; z <= b1[2]; ++z) {
        const double qz = (z + 0.5) * cell - m(2);
        for (int y = b0[1]; y <= b1[1]; ++y) {
          const double qy = (y + 0.5) * cell - m(1);
          std::uint8_t* row = level0 + (static_cast<std::size_t>(z) * static_cast<std::size_t>(p.ny) +
                                        static_cast<std::size_t>(y)) * static_cast<std::size_t>(p.nx);
          for (int x = b0[0]; x <= b1[0]; ++x) {
            const double qx = (x + 0.5) * cell - m(0);
            const double md = a(0, 0) * qx * qx + a(1, 1) * qy * qy + a(2, 2) * qz * qz +
                              2.0 * (a(0, 1) * qx * qy + a(0, 2) * qx * qz + a(1, 2) * qy * qz);
            const auto value = static_cast<std::uint8_t>(std::min(255.0, 255.0 * std::exp(-0.5 * md)));
            if (value > row[x]) row[x] = value;
          }
        }
      }
    }
  };
  if (pool) {
    pool->parallel_for(static_cast<std::size_t>(slabs), fill_slab);
  } else {
    for (std::size_t s = 0; s < static_cast<std::size_t>(slabs); ++s) fill_slab(s);
  }

  // Standing, level 0: bit h of a cell is set when the cell h below it in its column is
  // the top of a surface (a run of cells holding one; its top the last of the run), for
  // every such top within kFloorHeights - 1 cells, not only the nearest: a sensor beside a
  // parked car's roof or under a branch stands above the road as well.
  std::uint8_t* stand0 = p.standing.data();
  const std::size_t plane = static_cast<std::size_t>(p.nx) * static_cast<std::size_t>(p.ny);
  for (std::size_t col = 0; with_standing && col < plane; ++col) {
    unsigned tops = 0;
    for (int z = 0; z < p.nz; ++z) {
      const std::size_t at = static_cast<std::size_t>(z) * plane + col;
      const bool here = level0[at] >= kOccupied;
      const bool above = z + 1 < p.nz && level0[at + plane] >= kOccupied;
      tops = ((tops << 1) | (here && !above ? 1u : 0u)) & 0xffu;
      stand0[at] = static_cast<std::uint8_t>(tops);
    }
  }
  // A sensor stands above the floor around it as well as the one under it (a hole in the
  // map under the sensor, a column whose surface fell below kOccupied): each cell takes the
  // bits of its 3 x 3 neighbourhood in x-y.
  if (with_standing) {
    std::vector<std::uint8_t> row(static_cast<std::size_t>(p.nx));
    for (int pass = 0; pass < 2; ++pass) {
      const int n_along = pass == 0 ? p.nx : p.ny;
      const std::size_t step = pass == 0 ? 1 : static_cast<std::size_t>(p.nx);
      const int lines = pass == 0 ? p.ny * p.nz : p.nx * p.nz;
      row.resize(static_cast<std::size_t>(n_along));
      for (int line = 0; line < lines; ++line) {
        // pass 0: a row along x (line = z * ny + y); pass 1: a column along y (line = z * nx + x).
        const std::size_t first = pass == 0 ? static_cast<std::size_t>(line) * static_cast<std::size_t>(p.nx)
                                            : static_cast<std::size_t>(line / p.nx) * plane + static_cast<std::size_t>(line % p.nx);
        for (int a = 0; a < n_along; ++a) row[static_cast<std::size_t>(a)] = stand0[first + static_cast<std::size_t>(a) * step];
        for (int a = 0; a < n_along; ++a) {
          std::uint8_t v = row[static_cast<std::size_t>(a)];
          if (a > 0) v = static_cast<std::uint8_t>(v | row[static_cast<std::size_t>(a - 1)]);
          if (a + 1 < n_along) v = static_cast<std::uint8_t>(v | row[static_cast<std::size_t>(a + 1)]);
          stand0[first + static_cast<std::size_t>(a) * step] = v;
        }
      }
    }
    for (std::size_t at = 0; at < stride; ++at) ++p.standing_histogram[stand0[at]];
  }

  std::vector<std::uint8_t> scratch;
  for (int k = 0; k + 1 < p.level_count; ++k) {
    pool_level(p.levels, stride, p.nx, p.ny, p.nz, k, [](std::uint8_t a, std::uint8_t b) { return a > b ? a : b; },
               scratch);
    if (with_standing) {
      pool_level(p.standing, stride, p.nx, p.ny, p.nz, k,
                 [](std::uint8_t a, std::uint8_t b) { return static_cast<std::uint8_t>(a | b); }, scratch);
    }
  }
  return p;
}

}  // namespace ndtcu::detail
