#pragma once
// The localizer settings the localization tests run with: the defaults. They run them on
// the CPU backend with 2 threads (the CI machine's cores): test::on_cpu(2).
#include "../support/test_support.hpp"

#include <ndtcu/localizer.hpp>
#include <ndtcu/trajectory.hpp>

#include <optional>

namespace ndtcu::test {

inline LocalizerSettings cpu_localizer_settings() { return LocalizerSettings{}; }

// The truth's motion over the sweep of `scan` (at `time`, with per-point times), from its
// first to its last point time: a perfect odometry's SweepMotion. None where the truth
// does not cover the sweep, or its points have no time span.
inline std::optional<SweepMotion> truth_sweep_motion(const Trajectory& truth, const PointCloud& scan, double time) {
  double lo = 0.0, hi = 0.0;
  if (!scan.has_time() || !time_span(scan.time.data(), scan.size(), lo, hi) || !(hi > lo)) return std::nullopt;
  const auto a = interpolate_pose(truth, time + lo), b = interpolate_pose(truth, time + hi);
  if (!a || !b) return std::nullopt;
  return sweep_motion_between(a->matrix(), b->matrix(), hi - lo);
}

// A flat grid of points 0.5 m apart over 20 m, at z = 0: a map and a scan for argument
// checks and de-skew rules (it holds height, roll and pitch only).
inline PointCloud flat_grid() {
  PointCloud grid;
  for (int i = -20; i <= 20; ++i) {
    for (int j = -20; j <= 20; ++j) grid.points.emplace_back(0.5f * i, 0.5f * j, 0.0f);
  }
  return grid;
}

}  // namespace ndtcu::test
