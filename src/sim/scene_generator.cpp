// The procedural outdoor scene: a street grid on rolling terrain, lots filled with
// buildings, parks or parking, and street furniture along every road.
//
// Layout in road terms: each road is a straight line of the grid. Across it, the
// carriageway spans |d| < 5 m (two 3 m lanes, |d| < 3, and 2 m parking strips), the
// sidewalks 5 < |d| < 8 m, and lots start beyond 8 m.
#include "random.hpp"
#include "world_data.hpp"

#include "io/bytes.hpp"
#include "log.hpp"

#include <ndtcu/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <string_view>
#include <thread>

namespace ndtcu::sim {

namespace {

using detail::hash4;
using detail::Rng;
using detail::to_unit;

constexpr double kPi = 3.14159265358979323846;
constexpr double kHalfCarriageway = 5.0;  ///< two 3 m lanes plus a 2 m parking strip each side (m)
constexpr double kSidewalkOuter = 8.0;    ///< sidewalks are 3 m wide (m from the centre line)
constexpr double kCurbHeight = 0.15;      ///< sidewalk and lots above the carriageway edge (m)
constexpr double kCamber = 0.10;          ///< crown of the carriageway above its edges (m)
constexpr double kParkingLane = 4.0;      ///< centre of the parking strip from the centre line (m)
constexpr double kIntersectionClear = 12.0;  ///< no parked vehicle this close to a crossing (m)
constexpr double kMinWorldSize = 50.0;    ///< one block and the streets around it (m)
constexpr double kMaxWorldSize = 5000.0;  ///< beyond this the scene holds millions of spheres
constexpr int kMaxGroundCells = 4096;     ///< per side: 16.8M vertices, 67 MB of heights

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

/// Quintic fade (Perlin 2002): C2-continuous interpolation weights.
inline double fade(double t) { return t * t * t * (t * (t * 6.0 - 15.0) + 10.0); }

/// Value noise in [-1, 1] on a unit lattice, hashed from (seed, octave, i, j).
double value_noise(std::uint64_t seed, std::uint64_t octave, double x, double y) {
  const double fx = std::floor(x), fy = std::floor(y);
  const auto ix = static_cast<std::int64_t>(fx), iy = static_cast<std::int64_t>(fy);
  auto v = [&](std::int64_t i, std::int64_t j) {
    return 2.0 * to_unit(hash4(seed, detail::kStreamTerrain + octave, static_cast<std::uint64_t>(i),
                               static_cast<std::uint64_t>(j))) - 1.0;
  };
  const double tx = fade(x - fx), ty = fade(y - fy);
  const double a = v(ix, iy) + tx * (v(ix + 1, iy) - v(ix, iy));
  const double b = v(ix, iy + 1) + tx * (v(ix + 1, iy + 1) - v(ix, iy + 1));
  return a + ty * (b - a);
}

/// Axis-aligned rectangle in the scene frame.
struct Rect {
  double x0, y0, x1, y1;
  double w() const { return x1 - x0; }
  double h() const { return y1 - y0; }
  Rect shrunk(double l, double b, double r, double t) const { return {x0 + l, y0 + b, x1 - r, y1 - t}; }
};

/// Everything the generator needs while it places objects.
class Generator {
 public:
  explicit Generator(const WorldSettings& s) : s_(s), rng_(hash4(s.seed, detail::kStreamLayout, 0)) {}

  Scene run() {
    scene_.origin = s_.origin;
    scene_.size = s_.size;
    // Any grid orientation is a rotation in [0, 90) deg; it keeps walls off the axes that
    // voxel grids use.
    scene_.yaw = rng_.uniform(0.0, 0.5 * kPi);
    lay_out_roads();
    make_ground();
    const int lots_x = static_cast<int>(lines_x_.size()) + 1, lots_y = static_cast<int>(lines_y_.size()) + 1;
    for (int j = 0; j < lots_y; ++j) {
      for (int i = 0; i < lots_x; ++i) fill_lot(lot(i, j));
    }
    for (double y : lines_y_) furnish_road(y, false);
    for (double x : lines_x_) furnish_road(x, true);
    return std::move(scene_);
  }

 private:
  // ---- streets ---------------------------------------------------------------------------

  /// Road centre lines, evenly spaced and centred. Pitch 70-100 m is a typical city block;
  /// a small world gets two lines 1/1.6 of its size apart (a block and its streets).
  std::vector<double> road_lines(double pitch) const {
    const double size = s_.size;
    int n = 2;
    if (size >= 2.2 * pitch) {
      n = static_cast<int>(std::floor((size - 0.4 * pitch) / pitch)) + 1;  // >= 0.2 pitch to the edge
    } else {
      pitch = size / 1.6;
    }
    std::vector<double> lines;
    for (int k = 0; k < n; ++k) lines.push_back((k - 0.5 * (n - 1)) * pitch);
    return lines;
  }

  void lay_out_roads() {
    pitch_x_ = rng_.uniform(70.0, 100.0);
    pitch_y_ = rng_.uniform(70.0, 100.0);
    lines_x_ = road_lines(pitch_x_);
    lines_y_ = road_lines(pitch_y_);
    RoadNetwork& roads = scene_.roads;
    roads.half_width = kHalfCarriageway;
    roads.lane_offset = 1.5;  // middle of the right-hand 3 m lane
    const int nx = static_cast<int>(lines_x_.size()), ny = static_cast<int>(lines_y_.size());
    for (int j = 0; j < ny; ++j) {
      for (int i = 0; i < nx; ++i) roads.nodes.emplace_back(lines_x_[i], lines_y_[j]);
    }
    for (int j = 0; j < ny; ++j) {
      for (int i = 0; i < nx; ++i) {
        if (i + 1 < nx) roads.edges.emplace_back(j * nx + i, j * nx + i + 1);
        if (j + 1 < ny) roads.edges.emplace_back(j * nx + i, (j + 1) * nx + i);
      }
    }
  }

  static double nearest(const std::vector<double>& lines, double v) {
    double best = 1e300;
    for (double l : lines) best = std::min(best, std::abs(v - l));
    return best;
  }

  /// Distance from (x, y) to the nearest road centre line.
  double road_distance(double x, double y) const { return std::min(nearest(lines_x_, x), nearest(lines_y_, y)); }

  // ---- terrain ---------------------------------------------------------------------------

  /// Height of the terrain at (x, y): three octaves of rolling relief (wavelengths 180,
  /// 60, 20 m, so slopes of a few per cent), then the street profile: a cambered
  /// carriageway, curbs, smooth sidewalks, rougher lots.
  double terrain(double x, double y) const {
    const std::uint64_t seed = s_.seed;
    double h = s_.relief * (value_noise(seed, 0, x / 180.0, y / 180.0) + 0.3 * value_noise(seed, 1, x / 60.0, y / 60.0) +
                            0.08 * value_noise(seed, 2, x / 20.0, y / 20.0));
    const double d = road_distance(x, y);
    if (d < kHalfCarriageway) {
      const double r = d / kHalfCarriageway;
      h += kCamber * (1.0 - r * r) + 0.02 * value_noise(seed, 3, x / 3.0, y / 3.0);  // 2 cm patches and ruts
    } else if (d < kSidewalkOuter) {
      h += kCurbHeight + 0.005 * value_noise(seed, 4, x / 2.0, y / 2.0);
    } else {
      h += kCurbHeight + 0.06 * value_noise(seed, 5, x / 1.5, y / 1.5) + 0.03 * value_noise(seed, 6, x / 0.7, y / 0.7);
    }
    return h;
  }

  /// Reflectivity of the ground at a cell centre: asphalt 0.12 with dashed centre lines
  /// (3 m on, 3 m off) at 0.65, concrete sidewalks 0.3, grass and gravel lots about 0.4.
  float ground_reflectivity(double x, double y, double cell) const {
    const double dx = nearest(lines_x_, x), dy = nearest(lines_y_, y);
    const double d = std::min(dx, dy);
    const double noise = 0.02 * value_noise(s_.seed, 7, x / 4.0, y / 4.0);
    if (d < kHalfCarriageway) {
      // On a road along x (dy is the smaller distance) outside the crossing.
      const bool on_line = d < 0.5 * cell && std::max(dx, dy) > kSidewalkOuter;
      const double along = dy <= dx ? x : y;
      if (on_line && std::fmod(along + 1e4, 6.0) < 3.0) return 0.65f;
      return static_cast<float>(0.12 + noise);
    }
    if (d < kSidewalkOuter) return static_cast<float>(0.30 + noise);
    return static_cast<float>(0.40 + 2.0 * noise);
  }

  void make_ground() {
    Heightfield& g = scene_.ground;
    g.cell = s_.ground_cell > 0.0 ? s_.ground_cell : std::max(0.5, s_.size / kMaxGroundCells);
    g.nx = g.ny = static_cast<int>(std::ceil(s_.size / g.cell - 1e-9));
    g.min_corner = Eigen::Vector2d::Constant(-0.5 * g.nx * g.cell);
    const std::size_t nv = static_cast<std::size_t>(g.nx) + 1;
    g.heights.resize(nv * nv);
    g.reflectivity.resize(static_cast<std::size_t>(g.nx) * static_cast<std::size_t>(g.ny));
    // Rows in parallel; each value depends only on its coordinates, so threads do not
    // change the result.
    const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
    auto rows = [&](unsigned t) {
      for (int j = static_cast<int>(t); j <= g.ny; j += static_cast<int>(threads)) {
        const double y = g.min_corner.y() + j * g.cell;
        for (int i = 0; i <= g.nx; ++i) {
          const double x = g.min_corner.x() + i * g.cell;
          g.heights[static_cast<std::size_t>(j) * nv + static_cast<std::size_t>(i)] = static_cast<float>(terrain(x, y));
          if (i < g.nx && j < g.ny) {
            g.reflectivity[static_cast<std::size_t>(j) * static_cast<std::size_t>(g.nx) + static_cast<std::size_t>(i)] =
                ground_reflectivity(x + 0.5 * g.cell, y + 0.5 * g.cell, g.cell);
          }
        }
      }
    };
    std::vector<std::thread> pool;
    for (unsigned t = 1; t < threads; ++t) pool.emplace_back(rows, t);
    rows(0);
    for (auto& th : pool) th.join();
  }

  /// Lowest and highest ground over a rectangle (grid vertices inside it, plus corners).
  std::pair<double, double> ground_range(const Rect& r) const {
    const Heightfield& g = scene_.ground;
    double lo = 1e300, hi = -1e300;
    auto take = [&](double x, double y) {
      const double h = g.height_at(x, y);
      if (std::isfinite(h)) {
        lo = std::min(lo, h);
        hi = std::max(hi, h);
      }
    };
    take(r.x0, r.y0);
    take(r.x1, r.y0);
    take(r.x0, r.y1);
    take(r.x1, r.y1);
    const int i0 = std::max(0, static_cast<int>(std::ceil((r.x0 - g.min_corner.x()) / g.cell)));
    const int i1 = std::min(g.nx, static_cast<int>(std::floor((r.x1 - g.min_corner.x()) / g.cell)));
    const int j0 = std::max(0, static_cast<int>(std::ceil((r.y0 - g.min_corner.y()) / g.cell)));
    const int j1 = std::min(g.ny, static_cast<int>(std::floor((r.y1 - g.min_corner.y()) / g.cell)));
    for (int j = j0; j <= j1; ++j) {
      for (int i = i0; i <= i1; ++i) {
        const double h = g.heights[static_cast<std::size_t>(j) * (g.nx + 1) + i];
        lo = std::min(lo, h);
        hi = std::max(hi, h);
      }
    }
    if (lo > hi) lo = hi = 0.0;
    return {lo, hi};
  }

  /// Lowest ground under an oriented footprint (its four corners and centre).
  double ground_min_oriented(double cx, double cy, double hx, double hy, double yaw) const {
    const double c = std::cos(yaw), s = std::sin(yaw);
    double lo = scene_.ground.height_at(cx, cy);
    for (int sx = -1; sx <= 1; sx += 2) {
      for (int sy = -1; sy <= 1; sy += 2) {
        const double x = cx + c * sx * hx - s * sy * hy, y = cy + s * sx * hx + c * sy * hy;
        const double h = scene_.ground.height_at(x, y);
        if (std::isfinite(h)) lo = std::min(lo, h);
      }
    }
    return std::isfinite(lo) ? lo : 0.0;
  }

  bool inside_world(double x, double y, double margin) const {
    const double half = 0.5 * s_.size - margin;
    return std::abs(x) <= half && std::abs(y) <= half;
  }

  // ---- lots ------------------------------------------------------------------------------

  /// Lot (i, j): the block between road lines, minus the streets; at the world's edge
  /// it stops 2 m short of the border.
  Rect lot(int i, int j) const {
    const double half = 0.5 * s_.size;
    auto span = [&](const std::vector<double>& lines, int k, double& a, double& b) {
      a = k == 0 ? -half + 2.0 : lines[static_cast<std::size_t>(k - 1)] + kSidewalkOuter;
      b = k == static_cast<int>(lines.size()) ? half - 2.0 : lines[static_cast<std::size_t>(k)] - kSidewalkOuter;
    };
    Rect r{};
    span(lines_x_, i, r.x0, r.x1);
    span(lines_y_, j, r.y0, r.y1);
    return r;
  }

  void fill_lot(const Rect& r) {
    if (r.w() < 6.0 || r.h() < 6.0) return;
    // Lot use: 65% buildings, 20% park, 15% parking; a lot under 15 m is a pocket park.
    const double u = rng_.uniform();
    if (std::min(r.w(), r.h()) < 15.0 || (u >= 0.65 && u < 0.85)) {
      park(r);
    } else if (u >= 0.85) {
      parking(r);
    } else {
      buildings(r);
    }
  }

  /// Rows of parcels along the lot's long side, most of them built on.
  void buildings(const Rect& r) {
    const bool along_x = r.w() >= r.h();
    const double length = along_x ? r.w() : r.h(), depth = along_x ? r.h() : r.w();
    const int rows = depth > 45.0 ? 2 : 1;  // deep blocks get a back row with a courtyard between
    const double row_depth = depth / rows;
    for (int row = 0; row < rows; ++row) {
      double a = 0.0;
      while (length - a >= 8.0) {
        double w = rng_.uniform(12.0, 30.0);  // frontages of town houses to office blocks (m)
        if (length - a - w < 8.0) w = length - a;  // the last parcel takes what is left
        const double d0 = row * row_depth, d1 = d0 + row_depth;
        const Rect parcel = along_x ? Rect{r.x0 + a, r.y0 + d0, r.x0 + a + w, r.y0 + d1}
                                    : Rect{r.x0 + d0, r.y0 + a, r.x0 + d1, r.y0 + a + w};
        if (rng_.chance(0.85)) {
          building(parcel);
        } else {
          park(parcel);
        }
        a += w;
      }
    }
  }

  /// Window lattice with common facade proportions: 2.4-4 m bays, windows a third to two
  /// thirds of the bay wide and about half a storey high, recessed 15-45 cm (the wall's
  /// thickness in front of the glass).
  WindowGrid windows(double floor_height, double base_z) {
    WindowGrid g;
    g.pitch = rng_.uniform(2.4, 4.0);
    g.width = g.pitch * rng_.uniform(0.35, 0.65);
    g.floor_height = floor_height;
    g.sill = rng_.uniform(0.6, 1.0);
    g.height = std::min(floor_height * rng_.uniform(0.35, 0.55), floor_height - g.sill - 0.3);  // 0.3 m lintel at least
    g.depth = rng_.uniform(0.15, 0.45);
    g.margin = std::max(g.depth, rng_.uniform(0.6, 2.0));
    g.base_z = base_z;
    g.top_margin = rng_.uniform(0.5, 1.2);  // parapet and roof slab
    g.glass_reflectivity = static_cast<float>(rng_.uniform(0.04, 0.12));
    return g;
  }

  static OrientedBox box_between(const Rect& r, double z0, double z1, float reflectivity) {
    OrientedBox b;
    b.center = {0.5 * (r.x0 + r.x1), 0.5 * (r.y0 + r.y1), 0.5 * (z0 + z1)};
    b.half_extents = {0.5 * r.w(), 0.5 * r.h(), 0.5 * (z1 - z0)};
    b.reflectivity = reflectivity;
    return b;
  }

  /// A building on a parcel: a main block with window recesses, sometimes a recessed
  /// ground floor (arcade) or a setback top storey.
  void building(const Rect& parcel) {
    // Setbacks of up to 2.5 m on each side: gaps between neighbours and front yards.
    const Rect fp = parcel.shrunk(rng_.uniform(0.0, 2.5), rng_.uniform(0.0, 2.5), rng_.uniform(0.0, 2.5),
                                  rng_.uniform(0.0, 2.5));
    if (fp.w() < 6.0 || fp.h() < 6.0) return park(parcel);
    const auto [g_lo, g_hi] = ground_range(fp);
    const double bottom = g_lo - 0.5;    // foundations reach below the lowest ground
    const double base = g_hi + 0.1;      // ground floor just above the highest
    // Mostly 2-7 floors; in large worlds some towers.
    const bool tower = rng_.chance(0.08 * std::min(1.0, s_.size / 500.0));  // towers belong to cities, not blocks
    const int floors = tower ? rng_.between(10, 25) : rng_.between(2, 7);
    const double fh = rng_.uniform(3.0, 3.6);  // residential to office storey heights (m)
    const float wall = static_cast<float>(rng_.uniform(0.2, 0.6));  // brick, concrete, plaster
    const WindowGrid upper = windows(fh, base);
    const double top = base + floors * fh + upper.top_margin;

    if (floors >= 3 && std::min(fp.w(), fp.h()) > 12.0 && rng_.chance(0.15)) {
      // Arcade: the ground floor set back under the upper floors, with shop windows.
      const double inset = rng_.uniform(1.5, 3.0);
      WindowGrid shop = windows(fh, base);
      shop.sill = 0.4;
      shop.height = fh - 1.0;
      shop.pitch = rng_.uniform(4.0, 6.0);
      shop.width = 0.7 * shop.pitch;
      shop.top_margin = 0.5;
      shop.margin = std::max(shop.depth, 0.8);
      scene_.facades.push_back({box_between(fp.shrunk(inset, inset, inset, inset), bottom, base + fh + 0.3, wall), shop});
      WindowGrid up = upper;
      up.base_z = base + fh;
      scene_.facades.push_back({box_between(fp, base + fh, top, wall), up});
    } else {
      scene_.facades.push_back({box_between(fp, bottom, top, wall), upper});
    }
    if (floors >= 3 && std::min(fp.w(), fp.h()) > 14.0 && rng_.chance(0.3)) {
      // Setback storeys on the roof; the block overlaps the roof by 0.3 m so no face is
      // shared.
      const double inset = rng_.uniform(2.0, 4.0);
      const int extra = rng_.between(1, 3);
      WindowGrid g = windows(fh, top);
      scene_.facades.push_back(
          {box_between(fp.shrunk(inset, inset, inset, inset), top - 0.3, top + extra * fh + g.top_margin, wall), g});
    }
    ++scene_.contents.buildings;
  }

  /// Trees scattered with a minimum spacing, and a few low walls.
  void park(const Rect& r) {
    if (r.w() < 3.0 || r.h() < 3.0) return;
    const double area = r.w() * r.h();
    const int trees = static_cast<int>(area / rng_.uniform(40.0, 90.0));  // one tree per 40-90 m^2
    std::vector<Eigen::Vector2d> placed;
    for (int k = 0; k < trees; ++k) {
      for (int attempt = 0; attempt < 30; ++attempt) {  // rejection sampling, 3.5 m apart
        const Eigen::Vector2d p(rng_.uniform(r.x0 + 1.0, r.x1 - 1.0), rng_.uniform(r.y0 + 1.0, r.y1 - 1.0));
        bool free = true;
        for (const auto& q : placed) free = free && (p - q).squaredNorm() > 3.5 * 3.5;
        if (!free) continue;
        placed.push_back(p);
        tree(p, rng_.uniform(1.5, 4.0));
        break;
      }
    }
    const int walls = static_cast<int>(area / 1200.0 + rng_.uniform());  // about one per 1200 m^2
    for (int k = 0; k < walls; ++k) {
      const double len = rng_.uniform(3.0, 10.0), height = rng_.uniform(0.5, 1.2), yaw = rng_.uniform(0.0, kPi);
      if (!(r.w() > len && r.h() > len)) break;
      const Eigen::Vector2d c(rng_.uniform(r.x0 + 0.5 * len, r.x1 - 0.5 * len),
                              rng_.uniform(r.y0 + 0.5 * len, r.y1 - 0.5 * len));
      wall(c, 0.5 * len, 0.15, height, yaw);
    }
  }

  /// Rows of parked cars, often inside a boundary wall with an entrance gap.
  void parking(const Rect& r) {
    const bool along_x = r.w() >= r.h();
    const double length = along_x ? r.w() : r.h(), depth = along_x ? r.h() : r.w();
    const double row_yaw = along_x ? 0.5 * kPi : 0.0;  // stalls face across the long side
    for (double d = 3.5; d + 3.0 < depth; d += 7.5) {   // 5.2 m stalls, 2.3 m between rows
      for (double a = 2.5; a + 2.0 < length; a += 2.7) {  // 2.7 m stall width
        if (!rng_.chance(0.6)) continue;
        const Eigen::Vector2d c = along_x ? Eigen::Vector2d(r.x0 + a, r.y0 + d) : Eigen::Vector2d(r.x0 + d, r.y0 + a);
        vehicle(c, row_yaw + (rng_.chance(0.5) ? kPi : 0.0) + rng_.uniform(-0.06, 0.06));
      }
    }
    if (rng_.chance(0.6)) {
      const double height = rng_.uniform(1.0, 2.2), t = 0.125;  // fence to wall height; 25 cm thick
      const int gap_side = rng_.between(0, 3);
      auto side = [&](int k, double x0, double y0, double x1, double y1) {
        const Eigen::Vector2d a(x0, y0), b(x1, y1);
        const double len = (b - a).norm();
        const double yaw = std::atan2(b.y() - a.y(), b.x() - a.x());
        if (k != gap_side) return wall(0.5 * (a + b), 0.5 * len, t, height, yaw);
        // An entrance 6 m wide in the middle of this side.
        const Eigen::Vector2d dir = (b - a) / len;
        const double piece = 0.5 * (len - 6.0);
        if (piece < 1.0) return;
        wall(a + 0.5 * piece * dir, 0.5 * piece, t, height, yaw);
        wall(b - 0.5 * piece * dir, 0.5 * piece, t, height, yaw);
      };
      side(0, r.x0, r.y0, r.x1, r.y0);
      side(1, r.x1, r.y0, r.x1, r.y1);
      side(2, r.x1, r.y1, r.x0, r.y1);
      side(3, r.x0, r.y1, r.x0, r.y0);
    }
  }

  // ---- objects ---------------------------------------------------------------------------

  void wall(const Eigen::Vector2d& c, double half_len, double half_thick, double height, double yaw) {
    const double g = ground_min_oriented(c.x(), c.y(), half_len, half_thick, yaw);
    const double top = scene_.ground.height_at(c.x(), c.y()) + height;
    OrientedBox b;
    b.center = {c.x(), c.y(), 0.5 * (g - 0.3 + top)};
    b.half_extents = {half_len, half_thick, 0.5 * (top - g + 0.3)};
    b.yaw = yaw;
    b.reflectivity = static_cast<float>(rng_.uniform(0.25, 0.55));  // concrete, brick, render
    scene_.boxes.push_back(b);
    ++scene_.contents.walls;
  }

  /// A trunk and a crown of 7-14 overlapping spheres scattered about its centre; offsets
  /// and radii are bounded so the crown reaches at most about 1.05 R from the trunk.
  void tree(const Eigen::Vector2d& p, double crown_radius) {
    const double g = scene_.ground.height_at(p.x(), p.y());
    if (!std::isfinite(g)) return;
    const double trunk_h = rng_.uniform(2.2, 3.5), r = crown_radius;  // clear trunk: street trees are pruned high
    Cylinder trunk;
    trunk.center = p;
    trunk.radius = rng_.uniform(0.12, 0.25);
    trunk.z_min = g - 0.3;
    trunk.z_max = g + trunk_h + 0.5 * r;  // the trunk runs into the crown
    trunk.reflectivity = static_cast<float>(rng_.uniform(0.3, 0.45));
    scene_.cylinders.push_back(trunk);
    const Eigen::Vector3d centre(p.x(), p.y(), g + trunk_h + 0.8 * r);
    const int n = rng_.between(7, 14);
    const float leaf = static_cast<float>(rng_.uniform(0.35, 0.6));  // foliage is bright in the near infrared
    for (int k = 0; k < n; ++k) {
      Eigen::Vector2d off(rng_.normal(), rng_.normal());
      off *= 0.25 * r;
      if (off.norm() > 0.5 * r) off *= 0.5 * r / off.norm();
      Sphere s;
      s.center = centre + Eigen::Vector3d(off.x(), off.y(), std::clamp(0.2 * r * rng_.normal(), -0.4 * r, 0.4 * r));
      s.radius = r * rng_.uniform(0.35, 0.55);
      s.reflectivity = leaf;
      scene_.spheres.push_back(s);
    }
    ++scene_.contents.trees;
  }

  /// A pole from below the ground to `height` above it.
  void pole(const Eigen::Vector2d& p, double radius, double height) {
    const double g = scene_.ground.height_at(p.x(), p.y());
    Cylinder c;
    c.center = p;
    c.radius = radius;
    c.z_min = g - 0.3;
    c.z_max = g + height;
    c.reflectivity = static_cast<float>(rng_.uniform(0.5, 0.8));  // painted or galvanized metal
    scene_.cylinders.push_back(c);
    ++scene_.contents.poles;
  }

  /// A car (body and cabin), a van or a truck (cab and cargo box), resting on the ground.
  void vehicle(const Eigen::Vector2d& c, double yaw) {
    const double u = rng_.uniform();  // 80% cars, 15% vans, 5% trucks
    const float paint = static_cast<float>(rng_.uniform(0.2, 0.8));  // dark to white paint
    const Eigen::Vector2d fwd(std::cos(yaw), std::sin(yaw));
    auto part = [&](double along, double half_l, double half_w, double z0, double z1) {
      OrientedBox b;
      const Eigen::Vector2d p = c + along * fwd;
      b.center = {p.x(), p.y(), 0.5 * (z0 + z1)};
      b.half_extents = {half_l, half_w, 0.5 * (z1 - z0)};
      b.yaw = yaw;
      b.reflectivity = paint;
      scene_.boxes.push_back(b);
    };
    if (u < 0.8) {
      // Compact to mid-size car: 4.2-4.8 m long, 1.74-1.9 m wide, 1.4-1.5 m tall.
      const double half_l = rng_.uniform(2.1, 2.4), half_w = rng_.uniform(0.87, 0.95);
      const double g = ground_min_oriented(c.x(), c.y(), half_l, half_w, yaw);
      const double body_top = g + 1.0;
      part(0.0, half_l, half_w, g + 0.25, body_top);
      // The cabin overlaps the body by 5 cm so the two share no face.
      part(-0.2, rng_.uniform(1.2, 1.4), half_w - 0.1, body_top - 0.05, body_top + rng_.uniform(0.4, 0.5));
    } else if (u < 0.95) {
      const double half_l = rng_.uniform(2.5, 2.75);  // van: 5-5.5 m long, 2 m wide, 2-2.3 m tall
      const double g = ground_min_oriented(c.x(), c.y(), half_l, 1.0, yaw);
      part(0.0, half_l, 1.0, g + 0.3, g + rng_.uniform(2.0, 2.3));
    } else {
      const double half_l = rng_.uniform(3.25, 3.75);  // box truck: 6.5-7.5 m long, 3.2 m tall
      const double g = ground_min_oriented(c.x(), c.y(), half_l, 1.15, yaw);
      part(half_l - 0.9, 0.9, 1.15, g + 0.4, g + 2.6);             // cab
      part(-0.9, half_l - 0.9, 1.2, g + 0.6, g + 3.2);              // cargo box
    }
    ++scene_.contents.vehicles;
  }

  // ---- street furniture --------------------------------------------------------------------

  /// Lights, sign posts, trees and parked vehicles along both sides of one road line.
  /// `vertical`: the road runs along y at x = line; else along x at y = line.
  void furnish_road(double line, bool vertical) {
    const std::vector<double>& crossings = vertical ? lines_y_ : lines_x_;
    const double road_yaw = vertical ? 0.5 * kPi : 0.0;
    auto at = [&](double along, double across) {
      return vertical ? Eigen::Vector2d(line + across, along) : Eigen::Vector2d(along, line + across);
    };
    auto near_crossing = [&](double along, double clear) { return nearest(crossings, along) < clear; };
    const double half = 0.5 * s_.size;
    for (int side = -1; side <= 1; side += 2) {
      // Street lights 25-35 m apart, 0.5 m behind the curb, arm over the parking strip.
      const double spacing = rng_.uniform(25.0, 35.0);  // usual street-light spacing (m)
      std::vector<double> lights;
      for (double a = -half + rng_.uniform(3.0, spacing); a < half - 3.0; a += spacing) {
        if (near_crossing(a, kSidewalkOuter + 1.0)) continue;
        const Eigen::Vector2d p = at(a, side * 5.5);
        if (!inside_world(p.x(), p.y(), 1.0)) continue;
        const double h = rng_.uniform(7.0, 9.0);  // mast height (m)
        pole(p, 0.09, h);
        const double g = scene_.ground.height_at(p.x(), p.y());
        OrientedBox arm;
        const Eigen::Vector2d m = at(a, side * (5.5 - 0.9));
        arm.center = {m.x(), m.y(), g + h - 0.1};
        arm.half_extents = {0.06, 0.95, 0.06};  // along the road, across it, vertical
        arm.yaw = road_yaw;
        arm.reflectivity = 0.6f;
        scene_.boxes.push_back(arm);
        lights.push_back(a);
      }
      // A sign post 10 m before some crossings.
      for (double c : crossings) {
        const double a = c - side * 10.0;
        const Eigen::Vector2d p = at(a, side * 5.4);
        if (!rng_.chance(0.5) || !inside_world(p.x(), p.y(), 1.0)) continue;
        pole(p, 0.04, 2.5);
        const double g = scene_.ground.height_at(p.x(), p.y());
        OrientedBox plate;
        plate.center = {p.x(), p.y(), g + 2.5 + 0.35};
        plate.half_extents = {0.02, 0.35, 0.35};  // thin along the road: it faces traffic
        plate.yaw = road_yaw;
        plate.reflectivity = 0.9f;  // retroreflective sheeting
        scene_.boxes.push_back(plate);
      }
      // Street trees every 8-14 m where there is no light.
      for (double a = -half + rng_.uniform(2.0, 8.0); a < half - 3.0; a += rng_.uniform(8.0, 14.0)) {
        if (near_crossing(a, kSidewalkOuter + 2.0) || !rng_.chance(0.7)) continue;
        if (!lights.empty() && nearest(lights, a) < 2.5) continue;
        const Eigen::Vector2d p = at(a, side * 6.8);
        if (!inside_world(p.x(), p.y(), 2.0)) continue;
        tree(p, rng_.uniform(1.5, 2.8));
      }
      // Parked vehicles in 6.5 m slots, facing the traffic of their side.
      for (double a = -half + 4.0; a < half - 4.0; a += 6.5) {
        if (near_crossing(a, kIntersectionClear) || !rng_.chance(0.5)) continue;
        const Eigen::Vector2d p = at(a, side * kParkingLane);
        if (!inside_world(p.x(), p.y(), 4.0)) continue;
        // Right-hand traffic: on the +across side vehicles face -along.
        const double yaw = road_yaw + (side > 0 ? kPi : 0.0) + (vertical ? kPi : 0.0) + rng_.uniform(-0.03, 0.03);
        vehicle(p, yaw);
      }
    }
  }

  const WorldSettings& s_;
  Rng rng_;
  Scene scene_;
  double pitch_x_ = 0.0, pitch_y_ = 0.0;
  std::vector<double> lines_x_;  ///< x of the roads that run along y
  std::vector<double> lines_y_;  ///< y of the roads that run along x
};

}  // namespace

void validate(const WorldSettings& s) {
  if (!(s.size >= kMinWorldSize && s.size <= kMaxWorldSize)) {
    throw Error("world size (--world-size) must be between " + num(kMinWorldSize) + " m (one block and its streets) and " +
                num(kMaxWorldSize) + " m, got " + num(s.size));
  }
  if (!s.origin.allFinite() || s.origin.cwiseAbs().maxCoeff() > 1e8) {
    throw Error("world origin (--origin) must be finite and within 1e8 m, got " + num(s.origin.x()) + "," +
                num(s.origin.y()) + "," + num(s.origin.z()));
  }
  if (!(s.relief >= 0.0 && s.relief <= 50.0)) {
    throw Error("terrain relief must be between 0 and 50 m, got " + num(s.relief));
  }
  if (s.ground_cell != 0.0 && !(s.ground_cell >= 0.1 && s.ground_cell <= 10.0 && s.size / s.ground_cell <= 8192.0)) {
    throw Error("ground cell must be 0 (automatic) or between 0.1 and 10 m with at most 8192 cells per side, got " +
                num(s.ground_cell));
  }
}

Scene generate_scene(const WorldSettings& settings) {
  validate(settings);
  Generator generator(settings);
  Scene scene = generator.run();
  ndtcu::detail::log().debug("sim: scene {} m: {} buildings, {} trees, {} poles, {} vehicles, {} walls, {} primitives",
                             settings.size, scene.contents.buildings, scene.contents.trees, scene.contents.poles,
                             scene.contents.vehicles, scene.contents.walls, scene.primitive_count());
  return scene;
}

Eigen::Vector3d parse_origin(const std::string& text) {
  std::vector<std::string_view> parts;
  std::string_view rest(text);
  while (true) {
    const std::size_t comma = rest.find(',');
    std::string_view token = rest.substr(0, comma);
    while (!token.empty() && token.front() == ' ') token.remove_prefix(1);
    while (!token.empty() && token.back() == ' ') token.remove_suffix(1);
    parts.push_back(token);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  Eigen::Vector3d v = Eigen::Vector3d::Zero();
  bool ok = parts.size() == 3;
  for (std::size_t k = 0; ok && k < 3; ++k) ok = ndtcu::detail::parse_double(parts[k], v[static_cast<Eigen::Index>(k)]) && std::isfinite(v[static_cast<Eigen::Index>(k)]);
  if (!ok) {
    throw Error("--origin: expected x,y,z (three finite numbers in metres, comma-separated), got '" + text + "'");
  }
  return v;
}

}  // namespace ndtcu::sim
