// The ground: height lookup on the triangulated grid and ray casting through it with a
// two-level grid walk (blocks of cells with height bounds, then cells).
#include "world_data.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace ndtcu::sim {

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
/// Same as the primitives': hits closer than this are ignored (m).
constexpr double kMinT = 1e-9;
/// Slack on height-bound rejections (m): bounds come from float heights, rays are double.
constexpr double kBoundSlack = 1e-6;
/// Reflectivity of ground without a per-cell table: dry asphalt/soil, about 0.3.
constexpr float kDefaultGroundReflectivity = 0.3f;

/// Cell and in-cell fractions of (x, y); false outside the grid. The upper edges belong
/// to the last cell.
bool locate(const Heightfield& g, double x, double y, int& i, int& j, double& fx, double& fy) {
  const double gx = (x - g.min_corner.x()) / g.cell, gy = (y - g.min_corner.y()) / g.cell;
  if (!(gx >= 0.0 && gy >= 0.0 && gx <= g.nx && gy <= g.ny)) return false;
  i = std::min(static_cast<int>(gx), g.nx - 1);
  j = std::min(static_cast<int>(gy), g.ny - 1);
  fx = gx - i;
  fy = gy - j;
  return true;
}

inline double vertex(const Heightfield& g, int i, int j) {
  return g.heights[static_cast<std::size_t>(j) * static_cast<std::size_t>(g.nx + 1) + static_cast<std::size_t>(i)];
}

/// Walks the cells of a regular 2-D grid that the ray crosses for t in [t0, t1] (Amanatides
/// and Woo 1987), calling visit(i, j, t_enter, t_exit) in order until it returns true.
/// Cells are [lo + i * size, lo + (i + 1) * size); indices are limited to [i_lo, i_hi) x
/// [j_lo, j_hi).
template <class Visit>
bool walk_grid(const Eigen::Vector3d& o, const Eigen::Vector3d& d, double lo_x, double lo_y, double size, int i_lo,
               int i_hi, int j_lo, int j_hi, double t0, double t1, Visit&& visit) {
  const double sx = o.x() + d.x() * t0, sy = o.y() + d.y() * t0;
  int i = std::clamp(static_cast<int>(std::floor((sx - lo_x) / size)), i_lo, i_hi - 1);
  int j = std::clamp(static_cast<int>(std::floor((sy - lo_y) / size)), j_lo, j_hi - 1);
  const int step_i = d.x() > 0.0 ? 1 : -1, step_j = d.y() > 0.0 ? 1 : -1;
  double next_x = kInf, next_y = kInf, delta_x = kInf, delta_y = kInf;
  if (d.x() != 0.0) {
    next_x = (lo_x + (i + (d.x() > 0.0 ? 1 : 0)) * size - o.x()) / d.x();
    delta_x = size / std::abs(d.x());
  }
  if (d.y() != 0.0) {
    next_y = (lo_y + (j + (d.y() > 0.0 ? 1 : 0)) * size - o.y()) / d.y();
    delta_y = size / std::abs(d.y());
  }
  double t_enter = t0;
  while (true) {
    const double t_exit = std::min({next_x, next_y, t1});
    if (visit(i, j, t_enter, t_exit)) return true;
    if (t_exit >= t1) return false;
    if (next_x < next_y) {
      i += step_i;
      t_enter = next_x;
      next_x += delta_x;
      if (i < i_lo || i >= i_hi) return false;
    } else {
      j += step_j;
      t_enter = next_y;
      next_y += delta_y;
      if (j < j_lo || j >= j_hi) return false;
    }
  }
}

/// Moller-Trumbore ray/triangle test; barycentric bounds get a little slack so a ray
/// through a shared edge never falls between the two triangles.
bool ray_triangle(const Eigen::Vector3d& o, const Eigen::Vector3d& d, const Eigen::Vector3d& v0,
                  const Eigen::Vector3d& v1, const Eigen::Vector3d& v2, double& t) {
  constexpr double kEdgeSlack = 1e-9;  // relative to barycentric coordinates in [0, 1]
  const Eigen::Vector3d e1 = v1 - v0, e2 = v2 - v0;
  const Eigen::Vector3d p = d.cross(e2);
  const double det = e1.dot(p);
  if (std::abs(det) < 1e-18) return false;  // parallel to the plane
  const double inv = 1.0 / det;
  const Eigen::Vector3d s = o - v0;
  const double u = s.dot(p) * inv;
  if (u < -kEdgeSlack || u > 1.0 + kEdgeSlack) return false;
  const Eigen::Vector3d q = s.cross(e1);
  const double v = d.dot(q) * inv;
  if (v < -kEdgeSlack || u + v > 1.0 + kEdgeSlack) return false;
  t = e2.dot(q) * inv;
  return true;
}

}  // namespace

double Heightfield::height_at(double x, double y) const {
  int i, j;
  double fx, fy;
  if (empty() || !locate(*this, x, y, i, j, fx, fy)) return std::numeric_limits<double>::quiet_NaN();
  const double h00 = vertex(*this, i, j), h10 = vertex(*this, i + 1, j);
  const double h01 = vertex(*this, i, j + 1), h11 = vertex(*this, i + 1, j + 1);
  // Triangle (00, 10, 11) below the diagonal, (00, 11, 01) above it.
  if (fx >= fy) return h00 + fx * (h10 - h00) + fy * (h11 - h10);
  return h00 + fy * (h01 - h00) + fx * (h11 - h01);
}

float Heightfield::reflectivity_at(double x, double y) const {
  int i, j;
  double fx, fy;
  if (empty() || !locate(*this, x, y, i, j, fx, fy)) return 0.0f;
  if (reflectivity.empty()) return kDefaultGroundReflectivity;
  return reflectivity[static_cast<std::size_t>(j) * static_cast<std::size_t>(nx) + static_cast<std::size_t>(i)];
}

namespace detail {

void build_ground_blocks(WorldData& w) {
  const Heightfield& g = w.scene.ground;
  GroundBlocks& b = w.ground;
  if (g.empty()) return;
  b.nbx = (g.nx + b.block - 1) / b.block;
  b.nby = (g.ny + b.block - 1) / b.block;
  b.lo.assign(static_cast<std::size_t>(b.nbx) * b.nby, std::numeric_limits<float>::infinity());
  b.hi.assign(b.lo.size(), -std::numeric_limits<float>::infinity());
  for (int j = 0; j <= g.ny; ++j) {
    for (int i = 0; i <= g.nx; ++i) {
      const float h = static_cast<float>(vertex(g, i, j));
      // A vertex on a block edge belongs to the blocks on both sides.
      const int bi0 = std::max(0, (i - 1) / b.block), bi1 = std::min(b.nbx - 1, i / b.block);
      const int bj0 = std::max(0, (j - 1) / b.block), bj1 = std::min(b.nby - 1, j / b.block);
      for (int bj = bj0; bj <= bj1; ++bj) {
        for (int bi = bi0; bi <= bi1; ++bi) {
          const std::size_t k = static_cast<std::size_t>(bj) * b.nbx + bi;
          b.lo[k] = std::min(b.lo[k], h);
          b.hi[k] = std::max(b.hi[k], h);
        }
      }
    }
  }
  b.z_lo = *std::min_element(b.lo.begin(), b.lo.end());
  b.z_hi = *std::max_element(b.hi.begin(), b.hi.end());
}

bool cast_ground(const WorldData& w, const Eigen::Vector3d& o, const Eigen::Vector3d& d, double t_max, Hit& hit) {
  const Heightfield& g = w.scene.ground;
  const GroundBlocks& b = w.ground;
  if (g.empty()) return false;
  // Clip the ray to the ground's bounding box.
  const double lo[3] = {g.min_corner.x(), g.min_corner.y(), b.z_lo - kBoundSlack};
  const double hi[3] = {g.min_corner.x() + g.nx * g.cell, g.min_corner.y() + g.ny * g.cell, b.z_hi + kBoundSlack};
  double t0 = 0.0, t1 = t_max;
  for (int a = 0; a < 3; ++a) {
    if (d[a] == 0.0) {
      if (o[a] < lo[a] || o[a] > hi[a]) return false;
      continue;
    }
    double ta = (lo[a] - o[a]) / d[a], tb = (hi[a] - o[a]) / d[a];
    if (ta > tb) std::swap(ta, tb);
    t0 = std::max(t0, ta);
    t1 = std::min(t1, tb);
  }
  if (t0 > t1) return false;

  double best_t = kInf;
  Eigen::Vector3d best_normal = Eigen::Vector3d::UnitZ();
  int best_i = 0, best_j = 0;
  auto z_range = [&](double ta, double tb, double& z_min, double& z_max) {
    const double za = o.z() + d.z() * ta, zb = o.z() + d.z() * tb;
    z_min = std::min(za, zb);
    z_max = std::max(za, zb);
  };
  auto visit_cell = [&](int i, int j, double ta, double tb) {
    const double h00 = vertex(g, i, j), h10 = vertex(g, i + 1, j), h01 = vertex(g, i, j + 1), h11 = vertex(g, i + 1, j + 1);
    double z_min, z_max;
    z_range(ta, tb, z_min, z_max);
    if (z_min > std::max({h00, h10, h01, h11}) + kBoundSlack) return false;  // passes above the cell
    if (z_max < std::min({h00, h10, h01, h11}) - kBoundSlack) return false;  // below it (started underground)
    const double x0 = g.min_corner.x() + i * g.cell, y0 = g.min_corner.y() + j * g.cell;
    const double x1 = x0 + g.cell, y1 = y0 + g.cell;
    const Eigen::Vector3d p00(x0, y0, h00), p10(x1, y0, h10), p01(x0, y1, h01), p11(x1, y1, h11);
    double t;
    if (ray_triangle(o, d, p00, p10, p11, t) && t > kMinT && t <= t_max && t < best_t) {
      best_t = t;
      best_normal = Eigen::Vector3d(-(h10 - h00) * g.cell, (h10 - h11) * g.cell, g.cell * g.cell);
    }
    if (ray_triangle(o, d, p00, p11, p01, t) && t > kMinT && t <= t_max && t < best_t) {
      best_t = t;
      best_normal = Eigen::Vector3d((h01 - h11) * g.cell, -(h01 - h00) * g.cell, g.cell * g.cell);
    }
    if (best_t < kInf) {
      best_i = i;
      best_j = j;
      return true;  // cells are visited in ray order: the first hit is the nearest
    }
    return false;
  };
  const double block_size = g.cell * b.block;
  auto visit_block = [&](int bi, int bj, double ta, double tb) {
    const std::size_t k = static_cast<std::size_t>(bj) * b.nbx + bi;
    double z_min, z_max;
    z_range(ta, tb, z_min, z_max);
    if (z_min > b.hi[k] + kBoundSlack || z_max < b.lo[k] - kBoundSlack) return false;
    const int i_lo = bi * b.block, j_lo = bj * b.block;
    return walk_grid(o, d, g.min_corner.x(), g.min_corner.y(), g.cell, i_lo, std::min(i_lo + b.block, g.nx), j_lo,
                     std::min(j_lo + b.block, g.ny), ta, tb, visit_cell);
  };
  if (!walk_grid(o, d, g.min_corner.x(), g.min_corner.y(), block_size, 0, b.nbx, 0, b.nby, t0, t1, visit_block)) {
    return false;
  }
  hit.range = best_t;
  hit.normal = best_normal.normalized();
  hit.reflectivity = g.reflectivity.empty()
                         ? kDefaultGroundReflectivity
                         : g.reflectivity[static_cast<std::size_t>(best_j) * static_cast<std::size_t>(g.nx) +
                                          static_cast<std::size_t>(best_i)];
  return true;
}

}  // namespace detail
}  // namespace ndtcu::sim
