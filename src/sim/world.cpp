// World: validation, ray/primitive intersection, and the BVH that finds the primitives a
// ray can meet.
#include "world_data.hpp"

#include <ndtcu/error.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

namespace ndtcu::sim {
namespace detail {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
/// Hits closer than this are ignored (m): a ray leaving a surface must not see it again.
constexpr double kMinT = 1e-9;

Eigen::Vector3d to_local(const BoxShape& b, const Eigen::Vector3d& v) {
  return {b.cos_yaw * v.x() + b.sin_yaw * v.y(), -b.sin_yaw * v.x() + b.cos_yaw * v.y(), v.z()};
}

Eigen::Vector3d to_scene(const BoxShape& b, const Eigen::Vector3d& v) {
  return {b.cos_yaw * v.x() - b.sin_yaw * v.y(), b.sin_yaw * v.x() + b.cos_yaw * v.y(), v.z()};
}

/// Ray against a box (slab method in the box frame); for a facade, a ray that enters
/// through a window opening continues to the recess's back wall or side reveals.
bool intersect_box(const WorldData& w, const BoxShape& b, const Eigen::Vector3d& o, const Eigen::Vector3d& d,
                   double t_max, Hit& hit) {
  const Eigen::Vector3d ol = to_local(b, o - b.center);
  const Eigen::Vector3d dl = to_local(b, d);
  double t_near = -kInf, t_far = kInf;
  int axis = -1;
  for (int a = 0; a < 3; ++a) {
    if (dl[a] == 0.0) {
      if (std::abs(ol[a]) > b.half[a]) return false;
      continue;
    }
    const double inv = 1.0 / dl[a];
    double t0 = (-b.half[a] - ol[a]) * inv, t1 = (b.half[a] - ol[a]) * inv;
    if (t0 > t1) std::swap(t0, t1);
    if (t0 > t_near) {
      t_near = t0;
      axis = a;
    }
    t_far = std::min(t_far, t1);
  }
  // Only entering hits count: a ray that starts inside the solid does not see it.
  if (axis < 0 || t_near > t_far || t_near <= kMinT || t_near > t_max) return false;
  const double side = dl[axis] > 0.0 ? -1.0 : 1.0;  // the entered face's outward normal sign
  Eigen::Vector3d normal_local = Eigen::Vector3d::Zero();
  float reflectivity = b.reflectivity;
  double t = t_near;
  WindowRect rect;
  if (b.windows >= 0 && axis < 2) {
    const Eigen::Vector3d p = ol + t_near * dl;
    const FacadeWindows& fw = w.windows[static_cast<std::size_t>(b.windows)];
    if (window_at(b, fw, axis, p[1 - axis], p.z(), 0.0, &rect)) {
      // The recess is an empty box open on the facade side; the ray leaves it through one
      // of its five other faces, all of them wall or glass.
      double lo[3], hi[3];
      lo[axis] = side > 0 ? b.half[axis] - fw.grid.depth : -b.half[axis];
      hi[axis] = side > 0 ? b.half[axis] : -b.half[axis] + fw.grid.depth;
      lo[1 - axis] = rect.u_lo;
      hi[1 - axis] = rect.u_hi;
      lo[2] = rect.z_lo;
      hi[2] = rect.z_hi;
      double t_exit = kInf;
      int exit_axis = axis;
      for (int k = 0; k < 3; ++k) {
        if (dl[k] == 0.0) continue;
        const double tk = ((dl[k] > 0.0 ? hi[k] : lo[k]) - ol[k]) / dl[k];
        if (tk < t_exit) {
          t_exit = tk;
          exit_axis = k;
        }
      }
      t = std::max(t_exit, t_near);
      if (t > t_max) return false;
      normal_local[exit_axis] = dl[exit_axis] > 0.0 ? -1.0 : 1.0;
      if (exit_axis == axis) reflectivity = fw.grid.glass_reflectivity;
      hit.range = t;
      hit.normal = to_scene(b, normal_local);
      hit.reflectivity = reflectivity;
      return true;
    }
  }
  normal_local[axis] = side;
  hit.range = t;
  hit.normal = to_scene(b, normal_local);
  hit.reflectivity = reflectivity;
  return true;
}

/// Ray against a capped vertical cylinder: the side (entering root of the quadratic in
/// x, y) or the cap the ray comes through.
bool intersect_cylinder(const Cylinder& c, const Eigen::Vector3d& o, const Eigen::Vector3d& d, double t_max,
                        Hit& hit) {
  const double ox = o.x() - c.center.x(), oy = o.y() - c.center.y();
  const double r2 = c.radius * c.radius;
  double best = kInf;
  Eigen::Vector3d normal = Eigen::Vector3d::UnitZ();
  const double a = d.x() * d.x() + d.y() * d.y();
  if (a > 0.0) {
    const double b = ox * d.x() + oy * d.y();
    const double cc = ox * ox + oy * oy - r2;
    const double disc = b * b - a * cc;
    if (cc > 0.0 && disc >= 0.0) {
      const double t = (-b - std::sqrt(disc)) / a;
      const double z = o.z() + t * d.z();
      if (t > kMinT && z >= c.z_min && z <= c.z_max) {
        best = t;
        normal = Eigen::Vector3d(ox + t * d.x(), oy + t * d.y(), 0.0).normalized();
      }
    }
  }
  auto cap = [&](double z_plane, double nz) {
    const double t = (z_plane - o.z()) / d.z();
    if (!(t > kMinT) || t >= best) return;
    const double px = ox + t * d.x(), py = oy + t * d.y();
    if (px * px + py * py <= r2) {
      best = t;
      normal = Eigen::Vector3d(0.0, 0.0, nz);
    }
  };
  if (d.z() < 0.0 && o.z() > c.z_max) cap(c.z_max, 1.0);
  if (d.z() > 0.0 && o.z() < c.z_min) cap(c.z_min, -1.0);
  if (!(best <= t_max)) return false;
  hit.range = best;
  hit.normal = normal;
  hit.reflectivity = c.reflectivity;
  return true;
}

/// Ray against a sphere: the entering root, when the origin is outside.
bool intersect_sphere(const Sphere& s, const Eigen::Vector3d& o, const Eigen::Vector3d& d, double t_max, Hit& hit) {
  const Eigen::Vector3d oc = o - s.center;
  const double b = oc.dot(d);
  const double cc = oc.squaredNorm() - s.radius * s.radius;
  if (cc <= 0.0 || b >= 0.0) return false;  // inside, or moving away from it
  const double disc = b * b - cc;
  if (disc < 0.0) return false;
  const double t = -b - std::sqrt(disc);
  if (!(t > kMinT) || t > t_max) return false;
  hit.range = t;
  hit.normal = (oc + t * d) / s.radius;
  hit.reflectivity = s.reflectivity;
  return true;
}

bool inside_box(const WorldData& w, const BoxShape& b, const Eigen::Vector3d& p, double tol) {
  const Eigen::Vector3d pl = to_local(b, p - b.center);
  for (int a = 0; a < 3; ++a) {
    if (std::abs(pl[a]) > b.half[a] - tol) return false;
  }
  if (b.windows < 0) return true;
  const FacadeWindows& fw = w.windows[static_cast<std::size_t>(b.windows)];
  for (int a = 0; a < 2; ++a) {
    // Within a recess's depth of a face and inside its (grown) opening: empty space.
    if (std::abs(pl[a]) >= b.half[a] - fw.grid.depth - tol && window_at(b, fw, a, pl[1 - a], pl.z(), tol, nullptr)) {
      return false;
    }
  }
  return true;
}

bool inside_cylinder(const Cylinder& c, const Eigen::Vector3d& p, double tol) {
  if (p.z() <= c.z_min + tol || p.z() >= c.z_max - tol) return false;
  const double r = c.radius - tol;
  return r > 0.0 && (p.head<2>() - c.center).squaredNorm() < r * r;
}

bool inside_sphere(const Sphere& s, const Eigen::Vector3d& p, double tol) {
  const double r = s.radius - tol;
  return r > 0.0 && (p - s.center).squaredNorm() < r * r;
}

/// Bounds of one shape.
struct Aabb {
  Eigen::Vector3d lo = Eigen::Vector3d::Constant(kInf);
  Eigen::Vector3d hi = Eigen::Vector3d::Constant(-kInf);
  void grow(const Aabb& o) {
    lo = lo.cwiseMin(o.lo);
    hi = hi.cwiseMax(o.hi);
  }
  void grow(const Eigen::Vector3d& p) {
    lo = lo.cwiseMin(p);
    hi = hi.cwiseMax(p);
  }
  double area() const {
    if (!(hi.x() >= lo.x())) return 0.0;
    const Eigen::Vector3d e = hi - lo;
    return 2.0 * (e.x() * e.y() + e.y() * e.z() + e.z() * e.x());
  }
};

Aabb shape_bounds(const WorldData& w, std::uint32_t ref) {
  const std::uint32_t i = ref & kIndexMask;
  Aabb box;
  switch (ref >> kKindShift) {
    case kBox: {
      const BoxShape& b = w.boxes[i];
      const double ex = std::abs(b.cos_yaw) * b.half.x() + std::abs(b.sin_yaw) * b.half.y();
      const double ey = std::abs(b.sin_yaw) * b.half.x() + std::abs(b.cos_yaw) * b.half.y();
      const Eigen::Vector3d e(ex, ey, b.half.z());
      box.lo = b.center - e;
      box.hi = b.center + e;
      break;
    }
    case kCylinder: {
      const Cylinder& c = w.scene.cylinders[i];
      box.lo = {c.center.x() - c.radius, c.center.y() - c.radius, c.z_min};
      box.hi = {c.center.x() + c.radius, c.center.y() + c.radius, c.z_max};
      break;
    }
    default: {
      const Sphere& s = w.scene.spheres[i];
      box.lo = s.center.array() - s.radius;
      box.hi = s.center.array() + s.radius;
      break;
    }
  }
  // Grown by a millimetre so that rounding in the bounds never culls a true hit.
  box.lo.array() -= 1e-3;
  box.hi.array() += 1e-3;
  return box;
}

bool intersect_shape(const WorldData& w, std::uint32_t ref, const Eigen::Vector3d& o, const Eigen::Vector3d& d,
                     double t_max, Hit& hit) {
  const std::uint32_t i = ref & kIndexMask;
  switch (ref >> kKindShift) {
    case kBox: return intersect_box(w, w.boxes[i], o, d, t_max, hit);
    case kCylinder: return intersect_cylinder(w.scene.cylinders[i], o, d, t_max, hit);
    default: return intersect_sphere(w.scene.spheres[i], o, d, t_max, hit);
  }
}

bool inside_shape(const WorldData& w, std::uint32_t ref, const Eigen::Vector3d& p, double tol) {
  const std::uint32_t i = ref & kIndexMask;
  switch (ref >> kKindShift) {
    case kBox: return inside_box(w, w.boxes[i], p, tol);
    case kCylinder: return inside_cylinder(w.scene.cylinders[i], p, tol);
    default: return inside_sphere(w.scene.spheres[i], p, tol);
  }
}

/// Keeps the nearest hit; at equal range the lower reference wins, so the answer does not
/// depend on the order the BVH visits primitives in.
struct Nearest {
  Hit hit;
  double t = kInf;
  std::uint32_t ref = std::numeric_limits<std::uint32_t>::max();
  bool found = false;
  void offer(const WorldData& w, std::uint32_t r, const Eigen::Vector3d& o, const Eigen::Vector3d& d) {
    Hit h;
    if (!intersect_shape(w, r, o, d, t, h)) return;
    if (h.range < t || (h.range == t && r < ref)) {
      hit = h;
      t = h.range;
      ref = r;
      found = true;
    }
  }
};

// ---- BVH build: binned surface-area heuristic --------------------------------------------

constexpr int kBins = 16;         ///< SAH bins per split: enough for near-optimal trees
constexpr int kLeafSize = 4;      ///< leaves at or below this size are never split
constexpr double kTraversalCost = 1.0;  ///< node visit cost relative to one primitive test
/// Below this depth splits are halves, so depth stays under 40 + log2(2^30) = 70, within
/// the traversal stack.
constexpr int kMaxSahDepth = 40;

struct BuildItem {
  Aabb box;
  Eigen::Vector3d centroid;
  std::uint32_t ref;
};

void build_node(WorldData& w, std::vector<BuildItem>& items, std::size_t begin, std::size_t end, int depth) {
  const std::size_t node_index = w.nodes.size();
  w.nodes.emplace_back();
  Aabb bounds, centroids;
  for (std::size_t i = begin; i < end; ++i) {
    bounds.grow(items[i].box);
    centroids.grow(items[i].centroid);
  }
  auto make_leaf = [&] {
    BvhNode& n = w.nodes[node_index];
    for (int a = 0; a < 3; ++a) {
      n.lo[a] = bounds.lo[a];
      n.hi[a] = bounds.hi[a];
    }
    n.index = static_cast<std::uint32_t>(w.refs.size());
    n.count = static_cast<std::uint16_t>(end - begin);
    for (std::size_t i = begin; i < end; ++i) w.refs.push_back(items[i].ref);
  };
  const std::size_t count = end - begin;
  if (count <= static_cast<std::size_t>(kLeafSize)) return make_leaf();

  const Eigen::Vector3d extent = centroids.hi - centroids.lo;
  int axis = 0;
  if (extent.y() > extent[axis]) axis = 1;
  if (extent.z() > extent[axis]) axis = 2;
  std::size_t mid = begin;
  if (extent[axis] > 0.0) {
    std::array<Aabb, kBins> bin_box;
    std::array<std::size_t, kBins> bin_count{};
    const double scale = kBins / extent[axis];
    auto bin_of = [&](const BuildItem& it) {
      return std::min(kBins - 1, static_cast<int>((it.centroid[axis] - centroids.lo[axis]) * scale));
    };
    for (std::size_t i = begin; i < end; ++i) {
      const int b = bin_of(items[i]);
      bin_box[b].grow(items[i].box);
      ++bin_count[b];
    }
    // Sweep from the right for suffix areas, then from the left for the split costs.
    std::array<double, kBins> right_area{};
    std::array<std::size_t, kBins> right_count{};
    Aabb acc;
    std::size_t n = 0;
    for (int b = kBins - 1; b > 0; --b) {
      acc.grow(bin_box[b]);
      n += bin_count[b];
      right_area[b] = acc.area();
      right_count[b] = n;
    }
    Aabb left;
    std::size_t left_n = 0;
    double best_cost = kInf;
    int best_split = -1;
    for (int b = 1; b < kBins; ++b) {
      left.grow(bin_box[b - 1]);
      left_n += bin_count[b - 1];
      if (left_n == 0 || right_count[b] == 0) continue;
      const double cost = left.area() * static_cast<double>(left_n) + right_area[b] * static_cast<double>(right_count[b]);
      if (cost < best_cost) {
        best_cost = cost;
        best_split = b;
      }
    }
    const double leaf_cost = static_cast<double>(count);
    const double split_cost = kTraversalCost + best_cost / std::max(bounds.area(), 1e-300);
    if (best_split > 0 && (split_cost < leaf_cost || count > 16)) {
      // stable_partition keeps the build identical on every standard library.
      mid = static_cast<std::size_t>(
          std::stable_partition(items.begin() + static_cast<std::ptrdiff_t>(begin),
                                items.begin() + static_cast<std::ptrdiff_t>(end),
                                [&](const BuildItem& it) { return bin_of(it) < best_split; }) -
          items.begin());
    }
  }
  if (depth >= kMaxSahDepth) mid = begin;  // fall through to a balanced split
  if (mid == begin || mid == end) {
    if (count <= 16) return make_leaf();
    mid = begin + count / 2;  // identical centroids: split in input order
  }
  build_node(w, items, begin, mid, depth + 1);
  const std::size_t right = w.nodes.size();
  build_node(w, items, mid, end, depth + 1);
  BvhNode& n = w.nodes[node_index];
  for (int a = 0; a < 3; ++a) {
    n.lo[a] = bounds.lo[a];
    n.hi[a] = bounds.hi[a];
  }
  n.index = static_cast<std::uint32_t>(right);
  n.count = 0;
  n.axis = static_cast<std::uint8_t>(axis);
}

/// Entry and exit of a ray through a node's box; false when it misses or starts beyond t_max.
inline bool slab(const BvhNode& n, const Eigen::Vector3d& o, const Eigen::Vector3d& inv, double t_max) {
  double t0 = 0.0, t1 = t_max;
  for (int a = 0; a < 3; ++a) {
    double ta = (n.lo[a] - o[a]) * inv[a], tb = (n.hi[a] - o[a]) * inv[a];
    if (ta > tb) std::swap(ta, tb);
    t0 = std::max(t0, ta);
    t1 = std::min(t1, tb);
  }
  return t0 <= t1;
}

constexpr int kStackDepth = 128;  ///< build_node caps the depth well below this

}  // namespace

bool window_at(const BoxShape& box, const FacadeWindows& w, int a, double u, double z, double tol, WindowRect* rect) {
  const WindowGrid& g = w.grid;
  const int cols = w.cols[a];
  if (cols <= 0 || w.rows <= 0) return false;
  const double k = std::floor((u - w.u_start[a]) / g.pitch);
  if (k < 0.0 || k >= cols) return false;
  const double uc = w.u_start[a] + (k + 0.5) * g.pitch;
  const double half_w = 0.5 * g.width + tol;
  if (std::abs(u - uc) > half_w) return false;
  const double zs = z + box.center.z() - g.base_z;  // height above the ground-floor level
  const double j = std::floor(zs / g.floor_height);
  if (j < 0.0 || j >= w.rows) return false;
  const double z_lo = j * g.floor_height + g.sill - tol, z_hi = j * g.floor_height + g.sill + g.height + tol;
  if (zs < z_lo || zs > z_hi) return false;
  if (rect) {
    const double to_local = g.base_z - box.center.z();
    *rect = {uc - half_w, uc + half_w, z_lo + to_local, z_hi + to_local};
  }
  return true;
}

FacadeWindows resolve_windows(const OrientedBox& box, const WindowGrid& grid) {
  FacadeWindows w;
  w.grid = grid;
  for (int a = 0; a < 2; ++a) {
    const double length = 2.0 * box.half_extents[1 - a];
    w.cols[a] = std::max(0, static_cast<int>(std::floor((length - 2.0 * grid.margin) / grid.pitch)));
    w.u_start[a] = -0.5 * w.cols[a] * grid.pitch;
  }
  const double top = box.center.z() + box.half_extents.z();
  const double room = top - grid.top_margin - grid.base_z - grid.sill - grid.height;
  w.rows = room < 0.0 ? 0 : static_cast<int>(std::floor(room / grid.floor_height)) + 1;
  return w;
}

void build_bvh(WorldData& w) {
  std::vector<BuildItem> items;
  items.reserve(w.boxes.size() + w.scene.cylinders.size() + w.scene.spheres.size());
  auto add = [&](ShapeKind kind, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
      BuildItem it;
      it.ref = make_ref(kind, static_cast<std::uint32_t>(i));
      it.box = shape_bounds(w, it.ref);
      it.centroid = 0.5 * (it.box.lo + it.box.hi);
      items.push_back(it);
    }
  };
  add(kBox, w.boxes.size());
  add(kCylinder, w.scene.cylinders.size());
  add(kSphere, w.scene.spheres.size());
  w.nodes.clear();
  w.refs.clear();
  if (items.empty()) return;
  w.nodes.reserve(2 * items.size() / kLeafSize + 1);
  build_node(w, items, 0, items.size(), 0);
}

bool cast_primitives(const WorldData& w, const Eigen::Vector3d& o, const Eigen::Vector3d& d, double t_max, Hit& hit) {
  if (w.nodes.empty()) return false;
  // A zero direction component gets a huge finite inverse, so 0 * inverse stays 0 (not NaN).
  Eigen::Vector3d inv;
  for (int a = 0; a < 3; ++a) inv[a] = d[a] != 0.0 ? 1.0 / d[a] : std::copysign(1e300, d[a]);
  Nearest best;
  best.t = t_max;
  std::uint32_t stack[kStackDepth];
  int top = 0;
  std::uint32_t node = 0;
  while (true) {
    const BvhNode& n = w.nodes[node];
    if (slab(n, o, inv, best.t)) {
      if (n.count > 0) {
        for (std::uint32_t k = 0; k < n.count; ++k) best.offer(w, w.refs[n.index + k], o, d);
      } else {
        const bool right_first = d[n.axis] < 0.0;
        const std::uint32_t near_child = right_first ? n.index : node + 1;
        const std::uint32_t far_child = right_first ? node + 1 : n.index;
        if (top < kStackDepth) stack[top++] = far_child;
        node = near_child;
        continue;
      }
    }
    if (top == 0) break;
    node = stack[--top];
  }
  if (best.found) hit = best.hit;
  return best.found;
}

bool cast_primitives_brute_force(const WorldData& w, const Eigen::Vector3d& o, const Eigen::Vector3d& d,
                                 double t_max, Hit& hit) {
  Nearest best;
  best.t = t_max;
  for (std::size_t i = 0; i < w.boxes.size(); ++i) best.offer(w, make_ref(kBox, static_cast<std::uint32_t>(i)), o, d);
  for (std::size_t i = 0; i < w.scene.cylinders.size(); ++i) {
    best.offer(w, make_ref(kCylinder, static_cast<std::uint32_t>(i)), o, d);
  }
  for (std::size_t i = 0; i < w.scene.spheres.size(); ++i) {
    best.offer(w, make_ref(kSphere, static_cast<std::uint32_t>(i)), o, d);
  }
  if (best.found) hit = best.hit;
  return best.found;
}

bool inside_primitives(const WorldData& w, const Eigen::Vector3d& p, double tol) {
  if (w.nodes.empty()) return false;
  std::uint32_t stack[kStackDepth];
  int top = 0;
  std::uint32_t node = 0;
  while (true) {
    const BvhNode& n = w.nodes[node];
    const bool contains = p.x() >= n.lo[0] && p.x() <= n.hi[0] && p.y() >= n.lo[1] && p.y() <= n.hi[1] &&
                          p.z() >= n.lo[2] && p.z() <= n.hi[2];
    if (contains) {
      if (n.count > 0) {
        for (std::uint32_t k = 0; k < n.count; ++k) {
          if (inside_shape(w, w.refs[n.index + k], p, tol)) return true;
        }
      } else {
        if (top < kStackDepth) stack[top++] = n.index;
        node = node + 1;
        continue;
      }
    }
    if (top == 0) return false;
    node = stack[--top];
  }
}

}  // namespace detail

// ---- World ---------------------------------------------------------------------------------

namespace {

bool finite3(const Eigen::Vector3d& v) { return v.allFinite(); }

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

void check_reflectivity(float r, const std::string& what) {
  if (!(r >= 0.0f && r <= 1.0f)) throw Error(what + ".reflectivity must be in [0, 1], got " + num(r));
}

void check_box(const OrientedBox& b, const std::string& what) {
  if (!finite3(b.center) || !std::isfinite(b.yaw)) throw Error(what + ": centre and yaw must be finite");
  for (int a = 0; a < 3; ++a) {
    if (!(b.half_extents[a] > 0.0) || !std::isfinite(b.half_extents[a])) {
      throw Error(what + ".half_extents must be positive and finite, got " + num(b.half_extents[a]));
    }
  }
  check_reflectivity(b.reflectivity, what);
}

void check_windows(const FacadeBox& f, const std::string& what) {
  const WindowGrid& g = f.windows;
  const double values[] = {g.pitch, g.width, g.floor_height, g.height, g.sill, g.depth, g.margin, g.base_z, g.top_margin};
  for (double v : values) {
    if (!std::isfinite(v)) throw Error(what + ".windows: every field must be finite");
  }
  if (!(g.width > 0.0 && g.width < g.pitch)) {
    throw Error(what + ".windows.width must be in (0, pitch), got " + num(g.width) + " with pitch " + num(g.pitch));
  }
  if (!(g.height > 0.0 && g.sill > 0.0 && g.sill + g.height < g.floor_height)) {
    throw Error(what + ".windows: need height > 0, sill > 0 and sill + height < floor_height, got sill " +
                num(g.sill) + ", height " + num(g.height) + ", floor_height " + num(g.floor_height));
  }
  if (!(g.depth > 0.0 && g.margin >= g.depth && g.top_margin >= 0.0)) {
    throw Error(what + ".windows: need depth > 0, margin >= depth (so recesses on adjacent faces do not meet) "
                       "and top_margin >= 0, got depth " + num(g.depth) + ", margin " + num(g.margin));
  }
  if (!(f.box.half_extents.x() > g.depth && f.box.half_extents.y() > g.depth)) {
    throw Error(what + ": the box must be thicker than two window depths (" + num(2 * g.depth) + " m)");
  }
  // A micrometre of slack: a box given by its bottom and top gets its centre and half
  // height by rounding.
  if (g.base_z < f.box.center.z() - f.box.half_extents.z() - 1e-6) {
    throw Error(what + ".windows.base_z " + num(g.base_z) + " is below the box's bottom " +
                num(f.box.center.z() - f.box.half_extents.z()));
  }
  check_reflectivity(g.glass_reflectivity, what + ".windows.glass");
}

void check_scene(const Scene& s) {
  if (s.ground.empty() && s.primitive_count() == 0) {
    throw Error("world is empty: the scene has no ground and no primitive (add a heightfield, boxes, facades, "
                "cylinders or spheres)");
  }
  if (s.primitive_count() > detail::kIndexMask) {
    throw Error("scene has " + std::to_string(s.primitive_count()) + " primitives; at most " +
                std::to_string(detail::kIndexMask) + " are supported");
  }
  const Heightfield& g = s.ground;
  if (g.nx < 0 || g.ny < 0) throw Error("ground: nx and ny must not be negative");
  if (!g.empty()) {
    const std::size_t vertices = static_cast<std::size_t>(g.nx + 1) * static_cast<std::size_t>(g.ny + 1);
    if (g.heights.size() != vertices) {
      throw Error("ground: heights has " + std::to_string(g.heights.size()) + " values, expected (nx + 1) * (ny + 1) = " +
                  std::to_string(vertices));
    }
    if (!g.reflectivity.empty() && g.reflectivity.size() != static_cast<std::size_t>(g.nx) * g.ny) {
      throw Error("ground: reflectivity has " + std::to_string(g.reflectivity.size()) + " values, expected nx * ny");
    }
    if (!(g.cell > 0.0) || !std::isfinite(g.cell) || !g.min_corner.allFinite()) {
      throw Error("ground: cell must be positive and the corner finite, got cell " + num(g.cell));
    }
    for (float h : g.heights) {
      if (!std::isfinite(h)) throw Error("ground: heights must be finite");
    }
  }
  for (std::size_t i = 0; i < s.boxes.size(); ++i) check_box(s.boxes[i], "boxes[" + std::to_string(i) + "]");
  for (std::size_t i = 0; i < s.facades.size(); ++i) {
    const std::string what = "facades[" + std::to_string(i) + "]";
    check_box(s.facades[i].box, what);
    check_windows(s.facades[i], what);
  }
  for (std::size_t i = 0; i < s.cylinders.size(); ++i) {
    const Cylinder& c = s.cylinders[i];
    const std::string what = "cylinders[" + std::to_string(i) + "]";
    if (!c.center.allFinite() || !std::isfinite(c.z_min) || !std::isfinite(c.z_max)) throw Error(what + ": values must be finite");
    if (!(c.radius > 0.0) || !std::isfinite(c.radius)) throw Error(what + ".radius must be positive, got " + num(c.radius));
    if (!(c.z_max > c.z_min)) throw Error(what + ": z_max must exceed z_min, got " + num(c.z_min) + " to " + num(c.z_max));
    check_reflectivity(c.reflectivity, what);
  }
  for (std::size_t i = 0; i < s.spheres.size(); ++i) {
    const Sphere& sp = s.spheres[i];
    const std::string what = "spheres[" + std::to_string(i) + "]";
    if (!finite3(sp.center)) throw Error(what + ": centre must be finite");
    if (!(sp.radius > 0.0) || !std::isfinite(sp.radius)) throw Error(what + ".radius must be positive, got " + num(sp.radius));
    check_reflectivity(sp.reflectivity, what);
  }
  if (!finite3(s.origin) || !std::isfinite(s.yaw)) throw Error("scene origin and yaw must be finite");
}

}  // namespace

Eigen::Isometry3d world_from_scene(const Scene& scene) {
  Eigen::Isometry3d t = Eigen::Isometry3d::Identity();
  t.linear() = Eigen::AngleAxisd(scene.yaw, Eigen::Vector3d::UnitZ()).toRotationMatrix();
  t.translation() = scene.origin;
  return t;
}

World::World(Scene scene) : data_(std::make_unique<detail::WorldData>()) {
  check_scene(scene);
  detail::WorldData& w = *data_;
  w.scene = std::move(scene);
  const Scene& s = w.scene;
  w.boxes.reserve(s.boxes.size() + s.facades.size());
  auto add_box = [&](const OrientedBox& b, int windows) {
    detail::BoxShape shape;
    shape.center = b.center;
    shape.half = b.half_extents;
    shape.cos_yaw = std::cos(b.yaw);
    shape.sin_yaw = std::sin(b.yaw);
    shape.reflectivity = b.reflectivity;
    shape.windows = windows;
    w.boxes.push_back(shape);
  };
  for (const auto& b : s.boxes) add_box(b, -1);
  for (const auto& f : s.facades) {
    add_box(f.box, static_cast<int>(w.windows.size()));
    w.windows.push_back(detail::resolve_windows(f.box, f.windows));
  }
  detail::build_bvh(w);
  detail::build_ground_blocks(w);
}

World::World(World&&) noexcept = default;
World& World::operator=(World&&) noexcept = default;
World::~World() = default;

const Scene& World::scene() const noexcept { return data_->scene; }

std::optional<Hit> World::cast(const Eigen::Vector3d& origin, const Eigen::Vector3d& direction, double max_range) const {
  Hit hit;
  double t_max = max_range;
  bool found = detail::cast_primitives(*data_, origin, direction, t_max, hit);
  if (found) t_max = hit.range;
  // The ground search stops at the primitive hit, so a ray that meets a wall first walks
  // no further over the terrain.
  Hit ground_hit;
  if (detail::cast_ground(*data_, origin, direction, t_max, ground_hit) && (!found || ground_hit.range < hit.range)) {
    hit = ground_hit;
    found = true;
  }
  if (!found) return std::nullopt;
  return hit;
}

bool World::inside_solid(const Eigen::Vector3d& p, double tolerance) const {
  const double g = data_->scene.ground.height_at(p.x(), p.y());
  if (std::isfinite(g) && p.z() < g - tolerance) return true;
  return detail::inside_primitives(*data_, p, tolerance);
}

double World::ground_height(double x, double y) const { return data_->scene.ground.height_at(x, y); }

}  // namespace ndtcu::sim
