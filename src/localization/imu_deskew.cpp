// De-skew from an IMU (Deskew::Imu): the localizer's buffer of samples, their mean angular
// rate over a sweep with the coverage checks, and the choice of a frame's de-skew motion.
#include <ndtcu/error.hpp>
#include <ndtcu/localizer.hpp>

#include "localizer_impl.hpp"

#include "../log.hpp"

#include <fmt/format.h>

#include <Eigen/Geometry>

#include <algorithm>
#include <cmath>
#include <limits>

namespace ndtcu {

namespace {

// Samples older than this (s) before the newest are dropped: a sweep is at most a second
// (the per-point time check's bound), and a stack feeds samples as they come.
constexpr double kImuKeepSeconds = 10.0;

constexpr double kDegToRad = 3.14159265358979323846 / 180.0;

}  // namespace

namespace detail {

// The constant twist that moves by `delta` in `dt` seconds (SE(3) logarithm over dt).
math::Twist twist_of(const Eigen::Matrix4d& delta, double dt) {
  const Eigen::AngleAxisd aa(Eigen::Matrix3d(delta.topLeftCorner<3, 3>()));
  const Eigen::Vector3d phi = aa.angle() * aa.axis();
  const Eigen::Vector3d trans = delta.topRightCorner<3, 1>();
  return math::twist_from_motion(phi.data(), trans.data(), dt);
}

}  // namespace detail

const char* to_string(ImuCoverage coverage) {
  switch (coverage) {
    case ImuCoverage::NotUsed: return "";
    case ImuCoverage::Covered: return "covered";
    case ImuCoverage::Gap: return "gap";
    case ImuCoverage::Missing: return "missing";
  }
  return "?";
}

namespace detail {

ImuSweepRate imu_sweep_rate(const ImuSample* samples, std::size_t n, double begin, double end, double max_gap) {
  ImuSweepRate out;
  // The samples within max_gap of the sweep: [first, last).
  const ImuSample* first = std::lower_bound(samples, samples + n, begin - max_gap,
                                            [](const ImuSample& s, double t) { return s.time < t; });
  const ImuSample* last = std::upper_bound(samples, samples + n, end + max_gap,
                                           [](double t, const ImuSample& s) { return t < s.time; });
  if (first >= last) {
    out.longest_gap = std::numeric_limits<double>::infinity();
    return out;  // Missing
  }
  double gap = std::max({0.0, first->time - begin, end - (last - 1)->time});
  for (const ImuSample* s = first + 1; s < last; ++s) gap = std::max(gap, s->time - (s - 1)->time);
  out.longest_gap = gap;
  if (gap > max_gap) {
    out.coverage = ImuCoverage::Gap;
    return out;
  }
  out.coverage = ImuCoverage::Covered;
  // The rate interpolated linearly between the samples, held beyond the first and last.
  const auto rate_at = [&](double t) -> Eigen::Vector3d {
    if (t <= first->time) return first->angular_velocity;
    if (t >= (last - 1)->time) return (last - 1)->angular_velocity;
    const ImuSample* b = std::upper_bound(first, last, t, [](double x, const ImuSample& s) { return x < s.time; });
    const ImuSample* a = b - 1;
    const double u = (t - a->time) / (b->time - a->time);
    return (1.0 - u) * a->angular_velocity + u * b->angular_velocity;
  };
  if (!(end > begin)) {
    out.rate = rate_at(begin);
    return out;
  }
  // Trapezoids between begin, the sample times inside (begin, end), and end.
  Eigen::Vector3d integral = Eigen::Vector3d::Zero();
  double t_prev = begin;
  Eigen::Vector3d w_prev = rate_at(begin);
  for (const ImuSample* s = first; s < last; ++s) {
    if (!(s->time > begin && s->time < end)) continue;
    integral += 0.5 * (s->time - t_prev) * (w_prev + s->angular_velocity);
    t_prev = s->time;
    w_prev = s->angular_velocity;
  }
  const Eigen::Vector3d w_end = rate_at(end);
  integral += 0.5 * (end - t_prev) * (w_prev + w_end);
  out.rate = integral / (end - begin);
  return out;
}

}  // namespace detail

void Localizer::add_imu(const ImuSample& sample) {
  check_imu_sample(sample, fmt::format("add_imu: IMU sample at time {}", sample.time));
  Impl& m = *impl_;
  if (m.imu.size() > m.imu_front && !(sample.time > m.imu.back().time)) {
    ++m.imu_counts.out_of_order;
    if (!m.imu_order_warned) {
      m.imu_order_warned = true;
      detail::log().warn("IMU sample at time {:.6f} is not later than the one before it ({:.6f}): dropped (each "
                         "such sample is, counted in Localizer::imu_stats().out_of_order)",
                         sample.time, m.imu.back().time);
    }
    return;
  }
  m.imu.push_back(sample);
  ++m.imu_counts.added;
  while (m.imu_front < m.imu.size() && m.imu[m.imu_front].time < sample.time - kImuKeepSeconds) ++m.imu_front;
  // Compact once the dropped part is as large as the kept one: amortized O(1) a sample.
  if (m.imu_front > 1024 && m.imu_front * 2 > m.imu.size()) {
    m.imu.erase(m.imu.begin(), m.imu.begin() + static_cast<std::ptrdiff_t>(m.imu_front));
    m.imu_front = 0;
  }
}

void Localizer::add_imu(const std::vector<ImuSample>& samples) {
  for (const ImuSample& s : samples) add_imu(s);
}

ImuStats Localizer::imu_stats() const noexcept {
  ImuStats s = impl_->imu_counts;
  s.held = impl_->imu.size() - impl_->imu_front;
  return s;
}

Localizer::Impl::DeskewMotion Localizer::Impl::deskew_motion(double time, const Eigen::Matrix4d* prediction,
                                                             const detail::GivenSweep* given, double time_min,
                                                             double time_max) const {
  // The constant-velocity model's motion (velocity(), per second; none before two good
  // poses, nor right after a lost frame, where it is the motion of a stretch before the
  // loss), and the caller's prediction's (from the last good pose to it, per second).
  std::optional<math::Twist> constant_velocity, odometry;
  if (sweep_twist && known > 0 && consecutive_lost == 0 && last_time == sweep_twist_time) {
    constant_velocity = sweep_twist;  // the last frame's own sweep (localizer.cpp, sweep_motion)
  } else if (known == 2 && consecutive_lost == 0 && !frame_times_disagree) {
    Eigen::Matrix4d delta;
    double gap = 0.0;
    sweep_velocity(delta, gap);
    if (gap > 0.0 && std::isfinite(gap)) constant_velocity = detail::twist_of(delta, gap);
  }
  if (given) {
    odometry = given->mean;  // the caller's, over the sweep itself
  } else if (prediction && known > 0) {
    const double gap = time - last_time;
    if (gap > 0.0 && std::isfinite(gap)) odometry = detail::twist_of(last.inverse() * *prediction, gap);
  }
  Deskew mode = settings.deskew;
  if (mode == Deskew::Auto) {
    mode = imu_counts.added > 0 ? Deskew::Imu : given ? Deskew::Odometry : Deskew::ConstantVelocity;
  }
  DeskewMotion out;
  const auto from = [&out](const std::optional<math::Twist>& twist, Deskew source) {
    out.twist = twist;
    out.source = twist ? source : Deskew::Off;
  };
  switch (mode) {
    case Deskew::ConstantVelocity: from(constant_velocity, Deskew::ConstantVelocity); break;
    case Deskew::Odometry:
      from(odometry, Deskew::Odometry);
      if (given) out.parts = given->parts;  // the caller's, when in parts
      break;
    case Deskew::Imu: {
      const detail::ImuSweepRate w = detail::imu_sweep_rate(imu.data() + imu_front, imu.size() - imu_front,
                                                            time + time_min, time + time_max, settings.imu_max_gap);
      out.imu = w.coverage;
      out.imu_gap = w.longest_gap;
      if (w.coverage != ImuCoverage::Covered) {
        from(constant_velocity, Deskew::ConstantVelocity);  // the fallback, said in the result
        break;
      }
      // The translation of the prediction (odometry) or of the constant-velocity model
      // (none: rotation only), the rotation the IMU's.
      math::Twist xi = odometry ? *odometry : constant_velocity ? *constant_velocity : math::Twist{};
      const Eigen::Matrix3d sensor_from_imu =
          (Eigen::AngleAxisd(settings.imu_roll_deg * kDegToRad, Eigen::Vector3d::UnitX()) *
           Eigen::AngleAxisd(settings.imu_pitch_deg * kDegToRad, Eigen::Vector3d::UnitY()) *
           Eigen::AngleAxisd(settings.imu_yaw_deg * kDegToRad, Eigen::Vector3d::UnitZ()))
              .toRotationMatrix();
      const Eigen::Vector3d rate = sensor_from_imu * w.rate;
      for (int i = 0; i < 3; ++i) xi.w[i] = rate(i);
      out.twist = xi;
      out.source = Deskew::Imu;
      // The rate part by part: one part per sample inside the sweep (and one more), at most
      // SweepPath::kMaxSegments. A turn's onset within a sweep (the fast drive's yaw rate
      // stepping from 0 to 1.3 rad/s) bends the sweep in a way no mean rate follows.
      const ImuSample* samples = imu.data() + imu_front;
      const std::size_t n = imu.size() - imu_front;
      const auto later = [](double t, const ImuSample& s) { return t < s.time; };
      const std::ptrdiff_t inside = std::lower_bound(samples, samples + n, time + time_max,
                                                     [](const ImuSample& s, double t) { return s.time < t; }) -
                                    std::upper_bound(samples, samples + n, time + time_min, later);
      const int parts = static_cast<int>(std::clamp<std::ptrdiff_t>(inside + 1, 1, math::SweepPath::kMaxSegments));
      if (parts > 1) {
        out.rotation_only = true;
        const double step = (time_max - time_min) / parts;
        for (int k = 0; k < parts; ++k) {
          const double begin = time_min + k * step;
          const double a = time + time_min + k * step, b = k + 1 == parts ? time + time_max : a + step;
          const detail::ImuSweepRate part = detail::imu_sweep_rate(samples, n, a, b, settings.imu_max_gap);
          // (A part of a covered sweep is covered; the mean rate stands in should it not be.)
          const Eigen::Vector3d part_rate =
              part.coverage == ImuCoverage::Covered ? Eigen::Vector3d(sensor_from_imu * part.rate) : rate;
          math::Twist turn;
          for (int i = 0; i < 3; ++i) turn.w[i] = part_rate(i);
          out.parts.emplace_back(begin, turn);
        }
      }
      break;
    }
    default: break;
  }
  return out;
}

math::SweepPath Localizer::Impl::sweep_path(const math::Twist& twist, const DeskewMotion& motion) {
  if (motion.parts.empty()) return math::constant_path(twist);
  math::SweepPath path;
  path.segments = static_cast<int>(motion.parts.size());
  for (int k = 0; k < path.segments; ++k) {
    const auto& [begin, part] = motion.parts[static_cast<std::size_t>(k)];
    path.begin[k] = begin;
    path.twist[k] = part;
    if (motion.rotation_only) std::copy(std::begin(twist.v), std::end(twist.v), std::begin(path.twist[k].v));
  }
  math::anchor_path(path);
  return path;
}

void Localizer::Impl::note_imu_coverage(const DeskewMotion& motion, double time, double time_min, double time_max) {
  switch (motion.imu) {
    case ImuCoverage::NotUsed: return;
    case ImuCoverage::Covered: ++imu_counts.frames_covered; return;
    case ImuCoverage::Gap: ++imu_counts.frames_gap; break;
    case ImuCoverage::Missing: ++imu_counts.frames_missing; break;
  }
  if (imu_fallback_warned) return;
  imu_fallback_warned = true;
  const std::string why =
      motion.imu == ImuCoverage::Gap
          ? fmt::format("a stretch of {:.4f} s without an IMU sample (more than imu_max_gap, {:g} s)", motion.imu_gap,
                        settings.imu_max_gap)
          : fmt::format("no IMU sample within imu_max_gap ({:g} s)", settings.imu_max_gap);
  detail::log().warn("frame at time {:.6f}: its sweep [{:.6f}, {:.6f}] has {}; de-skewed with {} instead (each such "
                     "frame is, counted in Localizer::imu_stats() and said by LocalizationResult::imu_coverage)",
                     time, time + time_min, time + time_max, why,
                     motion.twist ? "constant velocity" : "nothing (no constant-velocity motion yet)");
}

}  // namespace ndtcu
