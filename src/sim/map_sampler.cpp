// The map: uniform samples on every surface of the world (the same surfaces the rays
// hit), minus the ones hidden inside other solids or under the ground, voxel-filtered
// or thinned to an exact count.
#include "random.hpp"
#include "world_data.hpp"

#include "log.hpp"

#include <ndtcu/error.hpp>
#include <ndtcu/settings.hpp>
#include <ndtcu/tiled_map.hpp>
#include <ndtcu/filters.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <thread>

namespace ndtcu::sim {

namespace {

constexpr double kTwoPi = 6.283185307179586;
/// A sample counts as hidden when it lies this far inside another solid (m): larger than
/// rounding on a face shared by two solids, far below any feature of the scene.
constexpr double kHiddenTolerance = 1e-3;
/// Samples a map may take before filtering: 2e8 float points are 2.4 GB.
constexpr double kMaxSamples = 2e8;
/// Samples of the pilot pass that measures how much of the surface is visible.
constexpr double kPilotSamples = 2e5;
/// Items (shapes or ground rows) per unit of parallel work.
constexpr std::size_t kItemsPerTask = 64;

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

/// Draws the samples of one item (a shape or a ground row) at a given density.
class ItemSampler {
 public:
  ItemSampler(const World& world, const Eigen::Matrix3d& world_rotation, double density, std::uint64_t seed,
              std::uint64_t item, std::vector<Eigen::Vector3f>& out)
      : world_(world), rotation_(world_rotation), density_(density), rng_(detail::hash4(seed, detail::kStreamMap, item)),
        out_(out) {}

  /// Number of samples for an area: area * density, rounded up or down at random so the
  /// expected count is exact.
  int count(double area) {
    const double x = area * density_;
    double n = std::floor(x);
    if (rng_.uniform() < x - n) n += 1.0;
    return static_cast<int>(n);
  }

  double uniform() { return rng_.uniform(); }

  /// Keeps p (scene frame) unless another solid or the ground hides it.
  void emit(const Eigen::Vector3d& p) {
    if (world_.inside_solid(p, kHiddenTolerance)) return;
    out_.push_back((rotation_ * p).cast<float>());
  }

  void triangle(const Eigen::Vector3d& v0, const Eigen::Vector3d& v1, const Eigen::Vector3d& v2) {
    const Eigen::Vector3d e1 = v1 - v0, e2 = v2 - v0;
    const int n = count(0.5 * e1.cross(e2).norm());
    for (int k = 0; k < n; ++k) {
      double a = rng_.uniform(), b = rng_.uniform();
      if (a + b > 1.0) {  // fold the parallelogram's far half onto the triangle
        a = 1.0 - a;
        b = 1.0 - b;
      }
      emit(v0 + a * e1 + b * e2);
    }
  }

 private:
  const World& world_;
  const Eigen::Matrix3d& rotation_;
  double density_;
  detail::Rng rng_;
  std::vector<Eigen::Vector3f>& out_;
};

/// Samples a box's faces; on a facade, the vertical faces skip window openings and each
/// recess contributes its back wall, two reveals, sill and head.
void sample_box(ItemSampler& s, const detail::WorldData& w, const detail::BoxShape& b) {
  const Eigen::Vector3d& h = b.half;
  auto to_scene = [&](const Eigen::Vector3d& pl) {
    return Eigen::Vector3d(b.center.x() + b.cos_yaw * pl.x() - b.sin_yaw * pl.y(),
                           b.center.y() + b.sin_yaw * pl.x() + b.cos_yaw * pl.y(), b.center.z() + pl.z());
  };
  const detail::FacadeWindows* fw = b.windows >= 0 ? &w.windows[static_cast<std::size_t>(b.windows)] : nullptr;
  // A rectangle in the box frame: coordinate `fixed_axis` = value, the other two spanning
  // [lo, hi] each.
  auto rect = [&](int fixed_axis, double value, int ax1, double lo1, double hi1, int ax2, double lo2, double hi2,
                  bool skip_windows) {
    const int n = s.count((hi1 - lo1) * (hi2 - lo2));
    for (int k = 0; k < n; ++k) {
      Eigen::Vector3d pl;
      pl[fixed_axis] = value;
      pl[ax1] = lo1 + (hi1 - lo1) * s.uniform();
      pl[ax2] = lo2 + (hi2 - lo2) * s.uniform();
      if (skip_windows && detail::window_at(b, *fw, fixed_axis, pl[ax1], pl.z(), 0.0, nullptr)) continue;
      s.emit(to_scene(pl));
    }
  };
  for (int side = -1; side <= 1; side += 2) {
    rect(2, side * h.z(), 0, -h.x(), h.x(), 1, -h.y(), h.y(), false);  // roof and floor
    for (int a = 0; a < 2; ++a) {
      const int u_axis = 1 - a;
      rect(a, side * h[a], u_axis, -h[u_axis], h[u_axis], 2, -h.z(), h.z(), fw != nullptr);
      if (!fw) continue;
      const WindowGrid& g = fw->grid;
      const double inner = side * (h[a] - g.depth), outer = side * h[a];
      const double d_lo = std::min(inner, outer), d_hi = std::max(inner, outer);
      for (int row = 0; row < fw->rows; ++row) {
        const double z_lo = g.base_z - b.center.z() + row * g.floor_height + g.sill, z_hi = z_lo + g.height;
        for (int col = 0; col < fw->cols[a]; ++col) {
          const double uc = fw->u_start[a] + (col + 0.5) * g.pitch;
          const double u_lo = uc - 0.5 * g.width, u_hi = uc + 0.5 * g.width;
          rect(a, inner, u_axis, u_lo, u_hi, 2, z_lo, z_hi, false);            // glass
          rect(u_axis, u_lo, a, d_lo, d_hi, 2, z_lo, z_hi, false);             // reveals
          rect(u_axis, u_hi, a, d_lo, d_hi, 2, z_lo, z_hi, false);
          rect(2, z_lo, a, d_lo, d_hi, u_axis, u_lo, u_hi, false);             // sill
          rect(2, z_hi, a, d_lo, d_hi, u_axis, u_lo, u_hi, false);             // head
        }
      }
    }
  }
}

void sample_cylinder(ItemSampler& s, const Cylinder& c) {
  const double height = c.z_max - c.z_min;
  const int n_side = s.count(kTwoPi * c.radius * height);
  for (int k = 0; k < n_side; ++k) {
    const double phi = kTwoPi * s.uniform(), z = c.z_min + height * s.uniform();
    s.emit({c.center.x() + c.radius * std::cos(phi), c.center.y() + c.radius * std::sin(phi), z});
  }
  for (double z : {c.z_min, c.z_max}) {
    const int n_cap = s.count(0.5 * kTwoPi * c.radius * c.radius);
    for (int k = 0; k < n_cap; ++k) {
      const double r = c.radius * std::sqrt(s.uniform()), phi = kTwoPi * s.uniform();  // uniform on the disc
      s.emit({c.center.x() + r * std::cos(phi), c.center.y() + r * std::sin(phi), z});
    }
  }
}

void sample_sphere(ItemSampler& s, const Sphere& sp) {
  const int n = s.count(2.0 * kTwoPi * sp.radius * sp.radius);
  for (int k = 0; k < n; ++k) {
    // Archimedes: z uniform in [-1, 1] and azimuth uniform give a uniform sphere.
    const double z = 1.0 - 2.0 * s.uniform(), phi = kTwoPi * s.uniform();
    const double r = std::sqrt(std::max(0.0, 1.0 - z * z));
    s.emit(sp.center + sp.radius * Eigen::Vector3d(r * std::cos(phi), r * std::sin(phi), z));
  }
}

void sample_ground_row(ItemSampler& s, const Heightfield& g, int j) {
  const std::size_t stride = static_cast<std::size_t>(g.nx) + 1;
  for (int i = 0; i < g.nx; ++i) {
    auto v = [&](int di, int dj) {
      return Eigen::Vector3d(g.min_corner.x() + (i + di) * g.cell, g.min_corner.y() + (j + dj) * g.cell,
                             g.heights[static_cast<std::size_t>(j + dj) * stride + static_cast<std::size_t>(i + di)]);
    };
    const Eigen::Vector3d p00 = v(0, 0), p10 = v(1, 0), p01 = v(0, 1), p11 = v(1, 1);
    s.triangle(p00, p10, p11);  // the same split as Heightfield::height_at and the ray caster
    s.triangle(p00, p11, p01);
  }
}

/// The surface of item `item` (m^2): boxes (with their window recesses), cylinders,
/// spheres, then ground rows, the order sample_items() takes them in.
double item_area(const detail::WorldData& w, std::size_t item) {
  const std::size_t n_boxes = w.boxes.size(), n_cyl = w.scene.cylinders.size(), n_sph = w.scene.spheres.size();
  if (item < n_boxes) {
    const auto& b = w.boxes[item];
    const Eigen::Vector3d& h = b.half;
    double area = 8.0 * (h.x() * h.y() + h.y() * h.z() + h.x() * h.z());
    if (b.windows >= 0) {
      const auto& fw = w.windows[static_cast<std::size_t>(b.windows)];
      const double per_window = 2.0 * fw.grid.depth * (fw.grid.width + fw.grid.height);
      area += per_window * 2.0 * (fw.cols[0] + fw.cols[1]) * fw.rows;
    }
    return area;
  }
  if (item < n_boxes + n_cyl) {
    const auto& c = w.scene.cylinders[item - n_boxes];
    return kTwoPi * c.radius * (c.z_max - c.z_min + c.radius);
  }
  if (item < n_boxes + n_cyl + n_sph) {
    const auto& sp = w.scene.spheres[item - n_boxes - n_cyl];
    return 2.0 * kTwoPi * sp.radius * sp.radius;
  }
  const Heightfield& g = w.scene.ground;
  return static_cast<double>(g.nx) * g.cell * g.cell;  // one row
}

/// Items of the world to sample: boxes, cylinders, spheres, then ground rows.
std::size_t item_count(const detail::WorldData& w) {
  const std::size_t n_rows = w.scene.ground.empty() ? 0 : static_cast<std::size_t>(w.scene.ground.ny);
  return w.boxes.size() + w.scene.cylinders.size() + w.scene.spheres.size() + n_rows;
}

/// Surface area of everything (ground counted flat), to size densities.
double surface_area(const detail::WorldData& w) {
  double area = 0.0;
  const std::size_t shapes = w.boxes.size() + w.scene.cylinders.size() + w.scene.spheres.size();
  for (std::size_t item = 0; item < shapes; ++item) area += item_area(w, item);
  const Heightfield& g = w.scene.ground;
  area += static_cast<double>(g.nx) * g.ny * g.cell * g.cell;  // the rows at once
  return area;
}

std::size_t item_count(const World& world) { return item_count(world.data()); }

/// The samples at `density` of items [first, last), in item order, from `threads` workers
/// taking kItemsPerTask items at a time. An item's samples depend on the item alone, so any
/// split of the items into calls gives the same samples in the same order.
std::vector<Eigen::Vector3f> sample_items(const World& world, double density, std::uint64_t seed, unsigned threads,
                                          std::size_t first, std::size_t last) {
  const detail::WorldData& w = world.data();
  const Scene& scene = world.scene();
  const Eigen::Matrix3d rotation = world_from_scene(scene).linear();
  const std::size_t n_boxes = w.boxes.size(), n_cyl = scene.cylinders.size(), n_sph = scene.spheres.size();
  const std::size_t tasks = (last - first + kItemsPerTask - 1) / kItemsPerTask;
  std::vector<std::vector<Eigen::Vector3f>> results(tasks);
  std::atomic<std::size_t> next{0};
  auto work = [&] {
    for (std::size_t task = next++; task < tasks; task = next++) {
      auto& out = results[task];
      const std::size_t begin = first + task * kItemsPerTask, end = std::min(last, begin + kItemsPerTask);
      for (std::size_t item = begin; item < end; ++item) {
        ItemSampler s(world, rotation, density, seed, item, out);
        if (item < n_boxes) {
          sample_box(s, w, w.boxes[item]);
        } else if (item < n_boxes + n_cyl) {
          sample_cylinder(s, scene.cylinders[item - n_boxes]);
        } else if (item < n_boxes + n_cyl + n_sph) {
          sample_sphere(s, scene.spheres[item - n_boxes - n_cyl]);
        } else {
          sample_ground_row(s, scene.ground, static_cast<int>(item - n_boxes - n_cyl - n_sph));
        }
      }
    }
  };
  unsigned n_threads = threads == 0 ? std::max(1u, std::thread::hardware_concurrency()) : threads;
  n_threads = static_cast<unsigned>(std::min<std::size_t>(n_threads, std::max<std::size_t>(tasks, 1)));
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < n_threads; ++t) pool.emplace_back(work);
  work();
  for (auto& th : pool) th.join();
  std::size_t total = 0;
  for (const auto& r : results) total += r.size();
  std::vector<Eigen::Vector3f> all;
  all.reserve(total);
  for (auto& r : results) {
    all.insert(all.end(), r.begin(), r.end());
    std::vector<Eigen::Vector3f>().swap(r);
  }
  return all;
}

/// All samples at `density`, in item order.
std::vector<Eigen::Vector3f> sample_all(const World& world, double density, std::uint64_t seed, unsigned threads) {
  return sample_items(world, density, seed, threads, 0, item_count(world));
}

/// The density (samples/m^2) a map of `settings` is sampled at, unless it asks for an exact
/// point count: the given one, else about six samples per voxel face, else 100.
double fixed_density(const MapSettings& settings) {
  return settings.density > 0.0 ? settings.density
         : settings.voxel > 0.0 ? 6.0 / (settings.voxel * settings.voxel)  // ~6 per voxel face
                                : 100.0;                                   // 10 cm spacing
}

/// The samples per m^2 at which about `target` samples stay visible, measured by a pilot
/// pass of kPilotSamples over the world.
double density_for_count(const World& world, double area, double target, const MapSettings& settings) {
  const double pilot_density = kPilotSamples / area;
  const std::size_t pilot = sample_all(world, pilot_density, settings.seed, settings.threads).size();
  if (pilot == 0) throw Error("map: the world has no visible surface to sample");
  return target / static_cast<double>(pilot) * pilot_density;
}

/// Exactly `n` of the samples, chosen by a hash of their position in the list, order kept.
std::vector<Eigen::Vector3f> pick_exactly(std::vector<Eigen::Vector3f> samples, std::size_t n, std::uint64_t seed) {
  if (samples.size() <= n) return samples;
  std::vector<std::uint64_t> keys(samples.size());
  for (std::size_t i = 0; i < keys.size(); ++i) keys[i] = detail::hash4(seed, detail::kStreamMapPick, i);
  std::vector<std::uint64_t> sorted = keys;
  std::nth_element(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(n - 1), sorted.end());
  const std::uint64_t threshold = sorted[n - 1];
  std::size_t below = 0;
  for (std::uint64_t k : keys) below += k < threshold ? 1 : 0;
  std::size_t ties_left = n - below;  // keys equal to the threshold, taken in list order
  std::size_t out = 0;
  for (std::size_t i = 0; i < samples.size(); ++i) {
    const bool keep = keys[i] < threshold || (keys[i] == threshold && ties_left > 0 && ties_left--);
    if (keep) samples[out++] = samples[i];
  }
  samples.resize(out);
  return samples;
}

}  // namespace

void validate(const MapSettings& s) {
  if (!(s.voxel == 0.0 || (s.voxel >= 0.01 && s.voxel <= 100.0))) {
    throw Error("map voxel (--map-voxel) must be 0 (no filter) or between 0.01 and 100 m, got " + num(s.voxel));
  }
  if (!(s.density >= 0.0) || !std::isfinite(s.density)) {
    throw Error("map density must be 0 (automatic) or a positive number of samples per m^2, got " + num(s.density));
  }
  if (static_cast<double>(s.target_points) > kMaxSamples) {
    throw Error("map points (--map-points) must be at most " + num(kMaxSamples) + ", got " + std::to_string(s.target_points));
  }
  if (s.threads > static_cast<unsigned>(kMaxThreads)) {
    throw Error("map threads must be at most " + std::to_string(kMaxThreads) + " (0: one per hardware thread), got " +
                std::to_string(s.threads));
  }
}

PointCloud sample_map(const World& world, const MapSettings& settings) {
  validate(settings);
  const double area = surface_area(world.data());
  PointCloud map;
  map.origin = world.scene().origin;
  auto check_budget = [&](double density) {
    if (area * density > kMaxSamples) {
      throw Error("map: " + num(area) + " m^2 of surface at " + num(density) + " samples/m^2 needs " +
                  num(area * density) + " samples, more than the " + num(kMaxSamples) +
                  " supported; raise --map-voxel or lower the density");
    }
  };
  if (settings.target_points > 0) {
    // Measure the visible fraction with a small pilot pass, then sample a little more
    // than needed and thin to the exact count.
    const double target = static_cast<double>(settings.target_points);
    double density = 1.02 * density_for_count(world, area, target, settings);  // 2%: ten pilot sigmas
    std::vector<Eigen::Vector3f> samples;
    for (int attempt = 0; attempt < 5; ++attempt) {
      check_budget(density);
      samples = sample_all(world, density, settings.seed, settings.threads);
      if (samples.size() >= settings.target_points) break;
      density *= 1.05 * target / static_cast<double>(std::max<std::size_t>(samples.size(), 1));
    }
    map.points = pick_exactly(std::move(samples), settings.target_points, settings.seed);
    ndtcu::detail::log().debug("sim: map of {} points from {:.0f} m^2 at {:.1f} samples/m^2", map.size(), area, density);
    return map;
  }
  const double density = fixed_density(settings);
  check_budget(density);
  map.points = sample_all(world, density, settings.seed, settings.threads);
  const std::size_t raw = map.size();
  if (settings.voxel > 0.0 && !map.empty()) map = voxel_downsample(map, settings.voxel);
  ndtcu::detail::log().debug("sim: map of {} points ({} samples at {:.1f}/m^2 over {:.0f} m^2, voxel {} m)", map.size(),
                             raw, density, area, settings.voxel);
  return map;
}

TiledMapWriteStats write_tiled_map(const World& world, const MapSettings& settings, double tile_size,
                                   const std::string& dir, const TiledMapWriterOptions& options) {
  validate(settings);
  const double area = surface_area(world.data());
  const double density = settings.target_points > 0
                             ? density_for_count(world, area, static_cast<double>(settings.target_points), settings)
                             : fixed_density(settings);
  // The samples are drawn a batch of items at a time and handed to the writer, which holds
  // a bounded number of them: the map is never whole in memory. A batch takes items until
  // their surface at this density reaches the writer's buffer (at least one item).
  const std::size_t items = item_count(world);
  const double batch_samples = static_cast<double>(std::max<std::size_t>(options.buffer_points, 1));
  TiledMapWriterOptions o = options;
  o.voxel = settings.target_points > 0 ? 0.0 : settings.voxel;
  TiledMapWriter writer(dir, tile_size, o);
  PointCloud part;
  part.origin = world.scene().origin;
  for (std::size_t first = 0; first < items;) {
    std::size_t last = first;
    for (double expected = 0.0; last < items && (last == first || expected + item_area(world.data(), last) * density <= batch_samples);
         ++last) {
      expected += item_area(world.data(), last) * density;
    }
    part.points = sample_items(world, density, settings.seed, settings.threads, first, last);
    writer.add(part);
    first = last;
  }
  std::vector<Eigen::Vector3f>().swap(part.points);
  writer.finish();
  ndtcu::detail::log().debug("sim: tiled map of {} points in {} tiles of {} m ({} samples at {:.1f}/m^2 over {:.0f} m^2)",
                             writer.stats().points_written, writer.stats().tiles, tile_size, writer.stats().points_in,
                             density, area);
  return writer.stats();
}

}  // namespace ndtcu::sim
