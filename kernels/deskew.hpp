#pragma once
/// \file
/// De-skewing a sweep: each point, measured in the sensor frame of the moment it was taken,
/// moved into the sensor frame of the scan's reference time, given the sensor's motion
/// over the sweep as a twist (linear and angular velocity in the sensor frame, constant
/// over the sweep). Shared by the CPU preprocessing and the CUDA scan filter's kernel.
///
/// With a constant body twist xi = (v, w), the sensor at time t (seconds from the
/// reference time, negative before it) is at T_ref_sensor(t) = exp(t xi) (SE(3)
/// exponential), so a point p taken at t lies at exp(t xi) p in the reference frame:
///   R p + V t v,  R = I + A K + B K^2,  V = I + B K + C K^2,  K = [t w]x,
///   A = sin(th)/th, B = (1 - cos th)/th^2, C = (th - sin th)/th^3, th = |t w|
/// (Barfoot, State Estimation for Robotics, eqs. 7.85-7.86). The exponential rather than
/// the first-order form p + t (w x p + v): on the simulator's fast drive (up to 25 m/s,
/// 0.1 s sweeps, points at 10-30 m) with each sweep's own motion, 4.2 cm RMS from the
/// truth against 5.4 cm (the raw points 109 cm; the rest is the drive's twist changing
/// within a sweep as it brakes into a turn: tests/localization/test_deskew.cpp), and a
/// constant turn of 0.19 rad over a 2.25 m sweep puts the first-order form's last point
/// 21 cm to the side of the arc. It costs one sin and cos per point: 2.6 ms for 100k
/// points on one CPU thread. Computed in double, rounded to float once.

#include "ndt_hd.hpp"

#include <math.h>

namespace ndtcu::math {

/// The sensor's motion over a sweep: linear velocity v (m/s) and angular velocity w
/// (rad/s), both in the sensor frame, constant over the sweep.
struct Twist {
  double v[3] = {0.0, 0.0, 0.0};  ///< linear velocity (m/s)
  double w[3] = {0.0, 0.0, 0.0};  ///< angular velocity (rad/s)
};

namespace detail_deskew {

NDTCU_HD inline void cross(const double a[3], const double b[3], double out[3]) {
  out[0] = a[1] * b[2] - a[2] * b[1];
  out[1] = a[2] * b[0] - a[0] * b[2];
  out[2] = a[0] * b[1] - a[1] * b[0];
}

// A, B, C of the header for th^2 = `th2` (Taylor series below 1e-8: their first terms
// are exact to double rounding there, where the closed forms lose every digit).
NDTCU_HD inline void se3_coefficients(double th2, double& a, double& b, double& c) {
  if (th2 < 1e-8) {
    a = 1.0 - th2 / 6.0;
    b = 0.5 - th2 / 24.0;
    c = 1.0 / 6.0 - th2 / 120.0;
    return;
  }
  const double th = sqrt(th2);
  const double s = sin(th), co = cos(th);
  a = s / th;
  b = (1.0 - co) / th2;
  c = (th - s) / (th2 * th);
}

}  // namespace detail_deskew

/// The rigid motion exp(t xi) applied to `p` (double in and out): R p + V t v.
NDTCU_HD inline void apply_twist(const Twist& xi, double t, const double p[3], double out[3]) {
  const double phi[3] = {t * xi.w[0], t * xi.w[1], t * xi.w[2]};
  const double rho[3] = {t * xi.v[0], t * xi.v[1], t * xi.v[2]};
  double a, b, c;
  detail_deskew::se3_coefficients(phi[0] * phi[0] + phi[1] * phi[1] + phi[2] * phi[2], a, b, c);
  double kp[3], kkp[3], kr[3], kkr[3];
  detail_deskew::cross(phi, p, kp);
  detail_deskew::cross(phi, kp, kkp);
  detail_deskew::cross(phi, rho, kr);
  detail_deskew::cross(phi, kr, kkr);
  for (int i = 0; i < 3; ++i) out[i] = p[i] + a * kp[i] + b * kkp[i] + (rho[i] + b * kr[i] + c * kkr[i]);
}

/// A point taken `t` seconds after the reference time (sensor frame of that moment),
/// moved into the sensor frame of the reference time. t = 0 (or a non-finite t) returns
/// the point unchanged, bit for bit: a scan whose times are all zero de-skews to itself.
NDTCU_HD inline void deskew_point(const Twist& xi, float t, float& x, float& y, float& z) {
  if (!(t != 0.0f) || !isfinite(t)) return;
  const double p[3] = {x, y, z};
  double q[3];
  apply_twist(xi, static_cast<double>(t), p, q);
  x = static_cast<float>(q[0]);
  y = static_cast<float>(q[1]);
  z = static_cast<float>(q[2]);
}

/// The sensor's motion over a sweep as up to kMaxSegments pieces of constant twist: the
/// path an IMU's rate gives when it changes within the sweep (a turn's onset or end, where
/// the mean rate puts the sweep's ends a degree or more off). Segment k covers
/// [begin[k], begin[k + 1]) seconds from the reference time, the first reaching below it
/// and the last above; the sensor at time t of segment k is at
///   T_ref_sensor(t) = (rotation[k], translation[k]) exp((t - begin[k]) twist[k]),
/// the anchors (rotation row-major) making the path continuous and T_ref_sensor(0) = I.
/// One segment is the constant twist, computed as deskew_point(twist[0], t, ...) alone.
struct SweepPath {
  static constexpr int kMaxSegments = 16;
  int segments = 0;  ///< 1 to kMaxSegments
  double begin[kMaxSegments] = {};
  double rotation[kMaxSegments][9] = {};
  double translation[kMaxSegments][3] = {};
  Twist twist[kMaxSegments] = {};
};

/// The one-segment path of a constant twist.
NDTCU_HD inline SweepPath constant_path(const Twist& xi) {
  SweepPath path;
  path.segments = 1;
  path.twist[0] = xi;
  path.rotation[0][0] = path.rotation[0][4] = path.rotation[0][8] = 1.0;
  return path;
}

namespace detail_deskew {

// exp(s xi) as a row-major rotation and a translation (apply_twist on the origin and the axes).
NDTCU_HD inline void twist_motion(const Twist& xi, double s, double r[9], double o[3]) {
  const double zero[3] = {0.0, 0.0, 0.0};
  apply_twist(xi, s, zero, o);
  for (int c = 0; c < 3; ++c) {
    double e[3] = {0.0, 0.0, 0.0}, m[3];
    e[c] = 1.0;
    apply_twist(xi, s, e, m);
    for (int i = 0; i < 3; ++i) r[3 * i + c] = m[i] - o[i];
  }
}

// (r, o) = (ra, oa) (rb, ob).
NDTCU_HD inline void compose(const double ra[9], const double oa[3], const double rb[9], const double ob[3],
                             double r[9], double o[3]) {
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) r[3 * i + j] = ra[3 * i] * rb[j] + ra[3 * i + 1] * rb[3 + j] + ra[3 * i + 2] * rb[6 + j];
    o[i] = ra[3 * i] * ob[0] + ra[3 * i + 1] * ob[1] + ra[3 * i + 2] * ob[2] + oa[i];
  }
}

}  // namespace detail_deskew

/// Fills `path`'s anchors (rotation, translation) from its segments, begin and twist, so
/// that the path is continuous at each begin[k] and the identity at t = 0: the segment
/// holding 0 (the first below its begin, the last above) is anchored at exp(begin xi), and
/// the others follow it forwards and backwards.
NDTCU_HD inline void anchor_path(SweepPath& path) {
  const int n = path.segments;
  int j = 0;
  while (j + 1 < n && 0.0 >= path.begin[j + 1]) ++j;
  detail_deskew::twist_motion(path.twist[j], path.begin[j], path.rotation[j], path.translation[j]);
  for (int k = j + 1; k < n; ++k) {  // T(b_k) = T(b_{k-1}) exp((b_k - b_{k-1}) xi_{k-1})
    double r[9], o[3];
    detail_deskew::twist_motion(path.twist[k - 1], path.begin[k] - path.begin[k - 1], r, o);
    detail_deskew::compose(path.rotation[k - 1], path.translation[k - 1], r, o, path.rotation[k], path.translation[k]);
  }
  for (int k = j - 1; k >= 0; --k) {  // T(b_k) = T(b_{k+1}) exp(-(b_{k+1} - b_k) xi_k)
    double r[9], o[3];
    detail_deskew::twist_motion(path.twist[k], path.begin[k] - path.begin[k + 1], r, o);
    detail_deskew::compose(path.rotation[k + 1], path.translation[k + 1], r, o, path.rotation[k], path.translation[k]);
  }
}

/// A point taken `t` seconds after the reference time moved into the sensor frame of the
/// reference time along `path` (as deskew_point with a twist; bit for bit that for one
/// segment, and unchanged for t = 0 or a non-finite t).
NDTCU_HD inline void deskew_point(const SweepPath& path, float t, float& x, float& y, float& z) {
  if (path.segments <= 1) {
    deskew_point(path.twist[0], t, x, y, z);
    return;
  }
  if (!(t != 0.0f) || !isfinite(t)) return;
  int k = 0;
  while (k + 1 < path.segments && static_cast<double>(t) >= path.begin[k + 1]) ++k;
  const double p[3] = {x, y, z};
  double q[3];
  apply_twist(path.twist[k], static_cast<double>(t) - path.begin[k], p, q);
  const double* r = path.rotation[k];
  const double* o = path.translation[k];
  x = static_cast<float>(r[0] * q[0] + r[1] * q[1] + r[2] * q[2] + o[0]);
  y = static_cast<float>(r[3] * q[0] + r[4] * q[1] + r[5] * q[2] + o[1]);
  z = static_cast<float>(r[6] * q[0] + r[7] * q[1] + r[8] * q[2] + o[2]);
}

/// The path's pose at `t` (the sensor at t in the frame of the reference time), as a
/// row-major rotation and a translation: what deskew_point applies to a point taken at t.
NDTCU_HD inline void path_motion(const SweepPath& path, double t, double r[9], double o[3]) {
  int k = 0;
  while (k + 1 < path.segments && t >= path.begin[k + 1]) ++k;
  double rt[9], ot[3];
  detail_deskew::twist_motion(path.twist[k], t - path.begin[k], rt, ot);
  detail_deskew::compose(path.rotation[k], path.translation[k], rt, ot, r, o);
}

/// The twist that moves by (rotation vector `phi`, translation `trans`) in `dt` seconds:
/// log(T) / dt, T = (exp(phi), trans), with the translation's part V^-1 trans,
/// V^-1 = I - K/2 + (1 - A / (2 B)) / th^2 K^2, K = [phi]x (the inverse of the V above;
/// 1/12 + th^2/720 for the last coefficient below th^2 = 1e-8). `dt` must be positive.
NDTCU_HD inline Twist twist_from_motion(const double phi[3], const double trans[3], double dt) {
  const double th2 = phi[0] * phi[0] + phi[1] * phi[1] + phi[2] * phi[2];
  double d;
  if (th2 < 1e-8) {
    d = 1.0 / 12.0 + th2 / 720.0;
  } else {
    double a, b, c;
    detail_deskew::se3_coefficients(th2, a, b, c);
    d = (1.0 - a / (2.0 * b)) / th2;
  }
  double kt[3], kkt[3];
  detail_deskew::cross(phi, trans, kt);
  detail_deskew::cross(phi, kt, kkt);
  Twist xi;
  for (int i = 0; i < 3; ++i) {
    xi.v[i] = (trans[i] - 0.5 * kt[i] + d * kkt[i]) / dt;
    xi.w[i] = phi[i] / dt;
  }
  return xi;
}

/// Whether the twist moves anything (a zero twist de-skews every point to itself).
NDTCU_HD inline bool moves(const Twist& xi) {
  return xi.v[0] != 0.0 || xi.v[1] != 0.0 || xi.v[2] != 0.0 || xi.w[0] != 0.0 || xi.w[1] != 0.0 || xi.w[2] != 0.0;
}

/// Whether the path moves anything.
NDTCU_HD inline bool moves(const SweepPath& path) {
  for (int k = 0; k < path.segments; ++k) {
    if (moves(path.twist[k])) return true;
  }
  return false;
}

}  // namespace ndtcu::math
