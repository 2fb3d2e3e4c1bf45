// LiDAR models (spinning and rosette): presets, validation and the ray-cast scan.
#include "random.hpp"
#include "world_data.hpp"

#include <ndtcu/error.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <thread>

namespace ndtcu::sim {

namespace {

constexpr double kDegToRad = 3.14159265358979323846 / 180.0;
constexpr int kMaxColumns = 1000000;           ///< far finer than any sensor (0.00036 deg)
constexpr std::size_t kMaxRays = 100000000;    ///< 10^8 rays: 2.4 GB of scratch, beyond any sensor
/// Columns handed to a worker at a time: small enough to balance two to sixteen threads,
/// large enough that taking work costs nothing next to casting 16 * rings rays.
constexpr int kColumnsPerTask = 16;

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

std::vector<double> linspace(double a, double b, int n) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = n == 1 ? a : a + (b - a) * i / (n - 1);
  return v;
}

// The rosette's two circular motions, in cycles per scan. Their ratio is irrational, so the
// curve never closes: each scan's rays fall between the earlier scans' (Livox's
// non-repetitive pattern). The radius oscillates at their sum, about 100 passes through the
// centre per scan, which leaves a single scan's coverage patchy, as a Livox's is at 10 Hz.
constexpr double kRosetteCycles1 = 57.29577951308232;  // 180 / pi
constexpr double kRosetteCycles2 = 43.30127018922193;  // 25 sqrt(3)

Eigen::Vector3d rosette_direction(const LidarModel& m, std::uint64_t frame, int ray) {
  // Time in scans since the first, as the prisms keep turning from scan to scan.
  const double t = static_cast<double>(frame) + static_cast<double>(ray) / m.columns;
  const double two_pi = 2.0 * 3.14159265358979323846;
  // The deflection from the boresight (x), a 2-vector of angles (rad) in the sensor's y-z
  // plane: the sum of two equal circular motions turning in opposite senses, so it reaches
  // every angle up to half the field of view.
  const double half = 0.5 * m.fov_deg * kDegToRad;
  const double a1 = two_pi * kRosetteCycles1 * t;
  const double a2 = -two_pi * kRosetteCycles2 * t;
  const double dy = 0.5 * half * (std::cos(a1) + std::cos(a2));
  const double dz = 0.5 * half * (std::sin(a1) + std::sin(a2));
  const double off = std::hypot(dy, dz);
  if (off < 1e-12) return Eigen::Vector3d::UnitX();
  const double s = std::sin(off) / off;
  return {std::cos(off), s * dy, s * dz};
}

}  // namespace

const std::vector<std::string>& lidar_preset_names() {
  static const std::vector<std::string> names{"hdl32", "hdl64", "os1-64", "os0-64", "vlp16", "avia"};
  return names;
}

LidarModel lidar_preset(const std::string& name) {
  LidarModel m;
  m.name = name;
  if (name == "hdl32") {
    // Velodyne HDL-32E: 32 lasers 1.33 deg apart from -30.67 to +10.67 deg; 0.16 deg
    // azimuth steps at 10 Hz; 100 m range; datasheet accuracy +-2 cm.
    m.ring_elevations_deg = linspace(-30.67, 10.67, 32);
    m.columns = 2250;
    m.min_range = 1.0;
    m.max_range = 100.0;
    m.range_noise_sigma = 0.02;
  } else if (name == "hdl64") {
    // Velodyne HDL-64E: an upper block of 32 lasers from +2.0 to -8.33 deg (1/3 deg apart)
    // and a lower block of 32 from -8.83 to -24.9 deg (about 1/2 deg apart), as calibrated
    // on KITTI's sensor; 0.18 deg steps at 10 Hz; 120 m; +-2 cm.
    std::vector<double> lower = linspace(-24.9, -8.83, 32);
    std::vector<double> upper = linspace(-8.33, 2.0, 32);
    m.ring_elevations_deg = lower;
    m.ring_elevations_deg.insert(m.ring_elevations_deg.end(), upper.begin(), upper.end());
    m.columns = 2000;
    m.min_range = 1.0;
    m.max_range = 120.0;
    m.range_noise_sigma = 0.02;
  } else if (name == "os1-64") {
    // Ouster OS1-64: 64 beams uniform over 45 deg; 1024 columns at 10 Hz; 120 m; about 1 cm
    // precision.
    m.ring_elevations_deg = linspace(-22.5, 22.5, 64);
    m.columns = 1024;
    m.min_range = 0.5;
    m.max_range = 120.0;
    m.range_noise_sigma = 0.01;
  } else if (name == "os0-64") {
    // Ouster OS0-64: 64 beams uniform over 90 deg; 1024 columns; 50 m; about 1 cm.
    m.ring_elevations_deg = linspace(-45.0, 45.0, 64);
    m.columns = 1024;
    m.min_range = 0.3;
    m.max_range = 50.0;
    m.range_noise_sigma = 0.01;
  } else if (name == "vlp16") {
    // Velodyne VLP-16 (Puck): 16 lasers 2 deg apart from -15 to +15 deg; 0.2 deg steps at
    // 10 Hz; 100 m; datasheet accuracy +-3 cm.
    m.ring_elevations_deg = linspace(-15.0, 15.0, 16);
    m.columns = 1800;
    m.min_range = 0.5;
    m.max_range = 100.0;
    m.range_noise_sigma = 0.03;
  } else if (name == "avia") {
    // Livox Avia: a solid-state sensor, its non-repetitive rosette in a 70.4 deg circular
    // field of view facing forward (x); 240,000 points per second, 24,000 per 10 Hz scan;
    // 190 m at 10% reflectivity; 2 cm range precision.
    m.pattern = ScanPattern::Rosette;
    m.ring_elevations_deg = {0.0};
    m.fov_deg = 70.4;
    m.columns = 24000;
    m.min_range = 1.0;
    m.max_range = 190.0;
    m.range_noise_sigma = 0.02;
  } else {
    std::string list;
    for (const auto& n : lidar_preset_names()) list += (list.empty() ? "" : ", ") + n;
    throw Error("unknown sensor (--sensor) '" + name + "': use one of " + list);
  }
  return m;
}

void validate(const LidarModel& m) {
  const std::string who = "lidar '" + m.name + "'";
  if (m.pattern == ScanPattern::Rosette) {
    if (m.ring_elevations_deg.size() != 1) {
      throw Error(who + ": a rosette has one laser: give exactly one ring (its elevation is unused), got " +
                  std::to_string(m.ring_elevations_deg.size()));
    }
    if (!(m.fov_deg > 0.0 && m.fov_deg < 180.0)) {
      throw Error(who + ": the rosette's field of view must be in (0, 180) deg, got " + num(m.fov_deg));
    }
  }
  if (m.ring_elevations_deg.empty()) throw Error(who + " has no rings: give at least one ring elevation");
  if (m.ring_elevations_deg.size() > 65535) {
    throw Error(who + " has " + std::to_string(m.ring_elevations_deg.size()) + " rings; at most 65535 are supported");
  }
  for (std::size_t r = 0; r < m.ring_elevations_deg.size(); ++r) {
    const double e = m.ring_elevations_deg[r];
    if (!(e > -90.0 && e < 90.0)) {
      throw Error(who + ": ring " + std::to_string(r) + " elevation must be in (-90, 90) deg, got " + num(e));
    }
  }
  if (m.columns < 1 || m.columns > kMaxColumns) {
    throw Error(who + ": columns (--columns) must be between 1 and " + std::to_string(kMaxColumns) + ", got " +
                std::to_string(m.columns));
  }
  if (m.rays() > kMaxRays) {
    throw Error(who + ": " + std::to_string(m.rays()) + " rays per scan is more than the " + std::to_string(kMaxRays) +
                " supported; use fewer columns");
  }
  if (!(m.min_range >= 0.0) || !std::isfinite(m.min_range)) {
    throw Error(who + ": min range must be zero or positive, got " + num(m.min_range));
  }
  if (!(m.max_range > 0.0) || !std::isfinite(m.max_range)) {
    throw Error(who + ": max range (--max-range) must be positive and finite, got " + num(m.max_range));
  }
  if (!(m.max_range > m.min_range)) {
    throw Error(who + ": max range (--max-range) " + num(m.max_range) + " must exceed the min range " + num(m.min_range));
  }
  if (!(m.range_noise_sigma >= 0.0) || !std::isfinite(m.range_noise_sigma)) {
    throw Error(who + ": range noise (--noise) must be zero or positive, got " + num(m.range_noise_sigma));
  }
  if (!(m.dropout >= 0.0 && m.dropout < 1.0)) {
    throw Error(who + ": dropout (--dropout) must be in [0, 1), got " + num(m.dropout));
  }
}

Eigen::Vector3d ray_direction(const LidarModel& m, int ring, int column, std::uint64_t frame) {
  if (m.pattern == ScanPattern::Rosette) return rosette_direction(m, frame, column);
  const double el = m.ring_elevations_deg.at(static_cast<std::size_t>(ring)) * kDegToRad;
  const double az = 2.0 * 3.14159265358979323846 * column / m.columns;
  return {std::cos(el) * std::cos(az), std::cos(el) * std::sin(az), std::sin(el)};
}

double column_time(const LidarModel& m, int column, double sweep_time) {
  return sweep_time * column / m.columns;
}

namespace {

// cast_scan() and cast_sweep(): column c cast from `poses[c]` (`poses` holds one pose per
// column), or from `poses[0]` for every column (`one_pose`); times of each column's points
// from `sweep_time` when `timed`.
Scan cast_columns(const World& world, const LidarModel& m, const Eigen::Isometry3d* poses, bool one_pose, bool timed,
                  double sweep_time, std::uint64_t seed, std::uint64_t frame, unsigned threads) {
  validate(m);
  const bool rosette = m.pattern == ScanPattern::Rosette;
  const int rings = rosette ? 1 : static_cast<int>(m.ring_elevations_deg.size());
  const int columns = m.columns;
  const std::size_t rays = m.rays();
  // Unit directions in the sensor frame, computed once per ring and column.
  std::vector<double> cos_el(static_cast<std::size_t>(rings)), sin_el(cos_el.size());
  for (int r = 0; r < rings; ++r) {
    const double el = m.ring_elevations_deg[static_cast<std::size_t>(r)] * kDegToRad;
    cos_el[static_cast<std::size_t>(r)] = std::cos(el);
    sin_el[static_cast<std::size_t>(r)] = std::sin(el);
  }
  std::vector<double> cos_az(static_cast<std::size_t>(rosette ? 0 : columns)), sin_az(cos_az.size());
  for (int c = 0; c < static_cast<int>(cos_az.size()); ++c) {
    const double az = 2.0 * 3.14159265358979323846 * c / columns;
    cos_az[static_cast<std::size_t>(c)] = std::cos(az);
    sin_az[static_cast<std::size_t>(c)] = std::sin(az);
  }

  // Each ray writes only its own slot, so the work split cannot change the result.
  std::vector<Eigen::Vector3f> points(rays);
  std::vector<float> intensity(rays);
  std::vector<std::uint8_t> valid(rays, 0);
  std::atomic<int> next_task{0};
  const int tasks = (columns + kColumnsPerTask - 1) / kColumnsPerTask;
  auto work = [&] {
    for (int task = next_task++; task < tasks; task = next_task++) {
      const int c_end = std::min(columns, (task + 1) * kColumnsPerTask);
      for (int c = task * kColumnsPerTask; c < c_end; ++c) {
        const Eigen::Isometry3d& scene_from_sensor = poses[one_pose ? 0 : c];
        const Eigen::Matrix3d rotation = scene_from_sensor.linear();
        const Eigen::Vector3d origin = scene_from_sensor.translation();
        for (int r = 0; r < rings; ++r) {
          const std::size_t i = static_cast<std::size_t>(c) * static_cast<std::size_t>(rings) + static_cast<std::size_t>(r);
          const Eigen::Vector3d dir_sensor =
              rosette ? rosette_direction(m, frame, c)
                      : Eigen::Vector3d(cos_el[static_cast<std::size_t>(r)] * cos_az[static_cast<std::size_t>(c)],
                                        cos_el[static_cast<std::size_t>(r)] * sin_az[static_cast<std::size_t>(c)],
                                        sin_el[static_cast<std::size_t>(r)]);
          const Eigen::Vector3d dir = rotation * dir_sensor;
          const std::optional<Hit> hit = world.cast(origin, dir, m.max_range);
          if (!hit || hit->range < m.min_range) continue;
          if (m.dropout > 0.0 && detail::to_unit(detail::hash4(seed, detail::kStreamRayDrop, frame, i)) < m.dropout) {
            continue;
          }
          double range = hit->range;
          if (m.range_noise_sigma > 0.0) {
            range += m.range_noise_sigma * detail::normal_from_bits(detail::hash4(seed, detail::kStreamRayNoise, frame, 2 * i),
                                                                    detail::hash4(seed, detail::kStreamRayNoise, frame, 2 * i + 1));
          }
          if (!(range > 0.0)) continue;
          points[i] = (dir_sensor * range).cast<float>();
          // Lambertian return: reflectivity times the cosine of the incidence angle,
          // scaled to the 0-255 range of Velodyne's calibrated intensity.
          intensity[i] = static_cast<float>(255.0 * hit->reflectivity * std::abs(dir.dot(hit->normal)));
          valid[i] = 1;
        }
      }
    }
  };
  unsigned n_threads = threads == 0 ? std::max(1u, std::thread::hardware_concurrency()) : threads;
  n_threads = std::min<unsigned>(n_threads, static_cast<unsigned>(tasks));
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < n_threads; ++t) pool.emplace_back(work);
  work();
  for (auto& th : pool) th.join();

  Scan scan;
  scan.rays = rays;
  const std::size_t n = static_cast<std::size_t>(std::count(valid.begin(), valid.end(), 1));
  scan.cloud.points.reserve(n);
  scan.cloud.intensity.reserve(n);
  if (timed) scan.cloud.time.reserve(n);
  scan.ring.reserve(n);
  scan.column.reserve(n);
  for (std::size_t i = 0; i < rays; ++i) {
    if (!valid[i]) continue;
    scan.cloud.points.push_back(points[i]);
    scan.cloud.intensity.push_back(intensity[i]);
    scan.ring.push_back(static_cast<std::uint16_t>(i % static_cast<std::size_t>(rings)));
    scan.column.push_back(static_cast<std::uint32_t>(i / static_cast<std::size_t>(rings)));
    if (timed) scan.cloud.time.push_back(static_cast<float>(column_time(m, static_cast<int>(scan.column.back()), sweep_time)));
  }
  return scan;
}

}  // namespace

Scan cast_scan(const World& world, const LidarModel& m, const Eigen::Isometry3d& scene_from_sensor, std::uint64_t seed,
               std::uint64_t frame, unsigned threads) {
  return cast_columns(world, m, &scene_from_sensor, true, false, 0.0, seed, frame, threads);
}

Scan cast_sweep(const World& world, const LidarModel& m, const std::vector<Eigen::Isometry3d>& column_poses,
                double sweep_time, std::uint64_t seed, std::uint64_t frame, unsigned threads) {
  validate(m);
  if (column_poses.size() != static_cast<std::size_t>(m.columns)) {
    throw Error("cast_sweep: " + std::to_string(column_poses.size()) + " poses for " + std::to_string(m.columns) +
                " columns (one pose per column)");
  }
  if (!(sweep_time >= 0.0 && sweep_time <= kMaxSweepTime)) {
    throw Error("sweep time (--sweep-time) must be in [0, " + num(kMaxSweepTime) + "] s, got " + num(sweep_time));
  }
  return cast_columns(world, m, column_poses.data(), false, true, sweep_time, seed, frame, threads);
}

}  // namespace ndtcu::sim
