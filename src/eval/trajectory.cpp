#include <ndtcu/trajectory.hpp>

#include <ndtcu/output_file.hpp>
#include <ndtcu/text.hpp>

#include "io/bytes.hpp"
#include "io/file_contents.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace ndtcu {
namespace {

// Rotations read from files must be rotations: a tolerance of 1e-3 admits the 6-9 digits
// files usually carry while rejecting a wrong column order or a scaled matrix.
constexpr double kRotationTolerance = 1e-3;

std::vector<double> parse_numbers(const std::string& path, std::size_t line_no, std::string_view line) {
  std::vector<std::string_view> tokens;
  detail::split_tokens(line, tokens, 64);
  std::vector<double> values(tokens.size());
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (!detail::parse_double(tokens[i], values[i]) || !std::isfinite(values[i])) {
      throw IoError(path, fmt::format("line {}: '{}' is not a finite number", line_no, tokens[i].substr(0, 40)));
    }
  }
  return values;
}

// Line by line through the file's buffer: a long trajectory is never held as one text.
template <typename Line>
void write_lines(const std::string& path, const Trajectory& trajectory, Line line) {
  OutputFile out(path);
  for (const auto& p : trajectory) out.write(line(p));
  out.commit();
}

}  // namespace

TrajectoryFormat trajectory_format_from_string(const std::string& name) {
  if (name == "tum") return TrajectoryFormat::Tum;
  if (name == "kitti") return TrajectoryFormat::Kitti;
  if (name == "auto") return TrajectoryFormat::Auto;
  throw Error("unknown trajectory format '" + name + "' (use tum, kitti or auto)");
}

Trajectory read_trajectory(const std::string& path, TrajectoryFormat format, double kitti_period) {
  detail::FileContents file(path);
  detail::LineReader lines(without_bom(file.bytes()));
  std::string_view line;
  Trajectory out;
  std::size_t line_no = 0;
  while (lines.next(line)) {
    ++line_no;
    std::size_t first = line.find_first_not_of(" \t\r");
    if (first == std::string_view::npos || line[first] == '#') continue;
    std::vector<double> v = parse_numbers(path, line_no, line);
    if (format == TrajectoryFormat::Auto) {
      if (v.size() == 8) format = TrajectoryFormat::Tum;
      else if (v.size() == 12) format = TrajectoryFormat::Kitti;
      else {
        throw IoError(path, fmt::format("line {}: {} numbers; a TUM line has 8 (t x y z qx qy qz qw), a KITTI "
                                        "line 12 (row-major 3x4)", line_no, v.size()));
      }
    }
    StampedPose p;
    if (format == TrajectoryFormat::Tum) {
      if (v.size() != 8) throw IoError(path, fmt::format("line {}: {} numbers, a TUM line has 8", line_no, v.size()));
      Eigen::Quaterniond q(v[7], v[4], v[5], v[6]);
      if (std::abs(q.norm() - 1.0) > kRotationTolerance) {
        throw IoError(path, fmt::format("line {}: quaternion norm {:.6f} is not 1", line_no, q.norm()));
      }
      p.time = v[0];
      p.pose.linear() = q.normalized().toRotationMatrix();
      p.pose.translation() = Eigen::Vector3d(v[1], v[2], v[3]);
    } else {
      if (v.size() != 12) {
        throw IoError(path, fmt::format("line {}: {} numbers, a KITTI line has 12", line_no, v.size()));
      }
      Eigen::Matrix3d R;
      R << v[0], v[1], v[2], v[4], v[5], v[6], v[8], v[9], v[10];
      double off = (R * R.transpose() - Eigen::Matrix3d::Identity()).cwiseAbs().maxCoeff();
      if (off > kRotationTolerance) {
        throw IoError(path, fmt::format("line {}: the 3x3 block is not a rotation (|R R^T - I| = {:.2g})", line_no, off));
      }
      // Orthonormal with determinant -1: a mirror image (e.g. one axis flipped, or a
      // left-handed frame), which no rigid motion produces.
      if (const double det = R.determinant(); det < 0) {
        throw IoError(path, fmt::format("line {}: the 3x3 block is a reflection, not a rotation (determinant {:.3g}; "
                                        "one axis is flipped)",
                                        line_no, det));
      }
      // Re-orthonormalize the few-digit rotation so later products stay rigid.
      Eigen::JacobiSVD<Eigen::Matrix3d> svd(R, Eigen::ComputeFullU | Eigen::ComputeFullV);
      p.time = static_cast<double>(out.size()) * kitti_period;
      p.pose.linear() = svd.matrixU() * svd.matrixV().transpose();
      p.pose.translation() = Eigen::Vector3d(v[3], v[7], v[11]);
    }
    out.push_back(p);
  }
  if (out.empty()) throw IoError(path, "no poses in the file");
  return out;
}

std::string tum_line(const StampedPose& p) {
  Eigen::Quaterniond q(p.pose.linear());
  q.normalize();
  const auto& t = p.pose.translation();
  return fmt::format("{:.6f} {:.6f} {:.6f} {:.6f} {:.9f} {:.9f} {:.9f} {:.9f}\n", p.time, t.x(), t.y(), t.z(), q.x(),
                     q.y(), q.z(), q.w());
}

std::string kitti_line(const StampedPose& p) {
  const auto& R = p.pose.linear();
  const auto& t = p.pose.translation();
  return fmt::format("{:.9f} {:.9f} {:.9f} {:.6f} {:.9f} {:.9f} {:.9f} {:.6f} {:.9f} {:.9f} {:.9f} {:.6f}\n", R(0, 0),
                     R(0, 1), R(0, 2), t.x(), R(1, 0), R(1, 1), R(1, 2), t.y(), R(2, 0), R(2, 1), R(2, 2), t.z());
}

void write_trajectory_tum(const std::string& path, const Trajectory& trajectory) {
  write_lines(path, trajectory, tum_line);
}

void write_trajectory_kitti(const std::string& path, const Trajectory& trajectory) {
  write_lines(path, trajectory, kitti_line);
}

std::optional<std::size_t> TimeAssociation::next(double t) {
  const Trajectory& reference = *reference_;
  // Both are in time order: advance the reference while the next one is closer.
  while (r_ + 1 < reference.size() && std::abs(reference[r_ + 1].time - t) <= std::abs(reference[r_].time - t)) ++r_;
  if (r_ < reference.size() && std::abs(reference[r_].time - t) <= max_time_difference_) return r_;
  return std::nullopt;
}

std::vector<std::pair<std::size_t, std::size_t>> associate(const Trajectory& estimate, const Trajectory& reference,
                                                           double max_time_difference) {
  std::vector<std::pair<std::size_t, std::size_t>> pairs;
  TimeAssociation association(reference, max_time_difference);
  for (std::size_t e = 0; e < estimate.size(); ++e) {
    if (const auto r = association.next(estimate[e].time)) pairs.emplace_back(e, *r);
  }
  return pairs;
}

ReferenceCheck sort_reference(Trajectory& reference, const std::string& path) {
  ReferenceCheck check;
  for (std::size_t k = 1; k < reference.size(); ++k) check.out_of_order += reference[k].time < reference[k - 1].time;
  // Each pose keeps its place in the file, for a message about two of them.
  std::vector<std::size_t> order(reference.size());
  for (std::size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return reference[a].time < reference[b].time; });
  for (std::size_t k = 1; k < order.size(); ++k) {
    const std::size_t a = std::min(order[k - 1], order[k]), b = std::max(order[k - 1], order[k]);
    if (reference[a].time == reference[b].time) {
      throw Error(fmt::format("{}: poses {} and {} (in the file's order, from 1) have the same time stamp {:.9f}: a "
                              "frame at that time could be matched to either; each pose needs a stamp of its "
                              "own",
                              path, a + 1, b + 1, reference[a].time));
    }
  }
  if (check.out_of_order > 0) {
    Trajectory sorted;
    sorted.reserve(reference.size());
    for (std::size_t k : order) sorted.push_back(reference[k]);
    reference = std::move(sorted);
  }
  return check;
}

AteStats absolute_trajectory_error(const Trajectory& estimate, const Trajectory& reference,
                                   double max_time_difference) {
  return absolute_trajectory_error(estimate, reference, associate(estimate, reference, max_time_difference));
}

AteStats absolute_trajectory_error(const Trajectory& estimate, const Trajectory& reference,
                                   const std::vector<std::pair<std::size_t, std::size_t>>& pairs) {
  AteStats s;
  std::vector<double> errors;
  for (auto [e, r] : pairs) {
    double err = (estimate[e].pose.translation() - reference[r].pose.translation()).norm();
    errors.push_back(err);
    s.per_pose.emplace_back(e, r, err);
  }
  s.pairs = errors.size();
  if (errors.empty()) return s;
  double sum = 0, sq = 0;
  for (double err : errors) {
    sum += err;
    sq += err * err;
    s.max_m = std::max(s.max_m, err);
  }
  s.mean_m = sum / errors.size();
  s.rmse_m = std::sqrt(sq / errors.size());
  std::vector<double> sorted = errors;
  std::nth_element(sorted.begin(), sorted.begin() + sorted.size() / 2, sorted.end());
  s.median_m = sorted[sorted.size() / 2];
  return s;
}

std::vector<RpeStats> relative_pose_error(const Trajectory& estimate, const Trajectory& reference,
                                          const std::vector<double>& segment_lengths, double max_time_difference) {
  return relative_pose_error(estimate, reference, segment_lengths, associate(estimate, reference, max_time_difference));
}

std::vector<RpeStats> relative_pose_error(const Trajectory& estimate, const Trajectory& reference,
                                          const std::vector<double>& segment_lengths,
                                          std::vector<std::pair<std::size_t, std::size_t>> pairs) {
  // Along the reference path: in its order (associate()'s pairs are already).
  std::stable_sort(pairs.begin(), pairs.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
  // Distance along the reference path at each associated pose.
  std::vector<double> along(pairs.size(), 0.0);
  for (std::size_t k = 1; k < pairs.size(); ++k) {
    along[k] = along[k - 1] +
               (reference[pairs[k].second].pose.translation() - reference[pairs[k - 1].second].pose.translation()).norm();
  }
  std::vector<RpeStats> out;
  for (double length : segment_lengths) {
    if (!(length > 0)) throw Error("RPE segment length must be positive, got " + number_text(length));
    RpeStats s;
    s.segment_m = length;
    double t_sum = 0, r_sum = 0;
    std::size_t j = 0;
    for (std::size_t i = 0; i < pairs.size(); ++i) {
      j = std::max(j, i);
      while (j < pairs.size() && along[j] - along[i] < length) ++j;
      if (j >= pairs.size()) break;
      const auto& ei = estimate[pairs[i].first].pose;
      const auto& ej = estimate[pairs[j].first].pose;
      const auto& ri = reference[pairs[i].second].pose;
      const auto& rj = reference[pairs[j].second].pose;
      Eigen::Isometry3d error = (ri.inverse() * rj).inverse() * (ei.inverse() * ej);
      // Normalized by the nominal length, as KITTI's devkit does (the path between the
      // two poses is at least that long; at 10 Hz the difference is centimetres).
      t_sum += error.translation().norm() / length * 100.0;
      r_sum += Eigen::AngleAxisd(error.linear()).angle() * 180.0 / M_PI / length;
      ++s.pairs;
    }
    if (s.pairs > 0) {
      s.translation_percent = t_sum / s.pairs;
      s.rotation_deg_per_m = r_sum / s.pairs;
    }
    out.push_back(s);
  }
  return out;
}

std::optional<std::size_t> nearest_in_time(const Trajectory& trajectory, double time, double max_time_difference) {
  auto it = std::lower_bound(trajectory.begin(), trajectory.end(), time,
                             [](const StampedPose& p, double v) { return p.time < v; });
  std::optional<std::size_t> best;
  double gap = max_time_difference;
  // The pose at or after `time`, then the one before it (which wins a tie).
  for (auto c : {it, it == trajectory.begin() ? trajectory.end() : std::prev(it)}) {
    if (c == trajectory.end()) continue;
    const double d = std::abs(c->time - time);
    if (d <= gap) {
      gap = d;
      best = static_cast<std::size_t>(c - trajectory.begin());
    }
  }
  return best;
}

std::optional<Eigen::Isometry3d> interpolate_pose(const Trajectory& t, double time, double max_gap) {
  if (t.empty() || !std::isfinite(time)) return std::nullopt;
  // A time a rounding away from an end is that end: 19 x 0.1 s is 1.9000000000000001, past
  // a last stamp written as 1.900000.
  if (std::abs(time - t.front().time) <= kStampTolerance) return t.front().pose;
  if (std::abs(time - t.back().time) <= kStampTolerance) return t.back().pose;
  if (time < t.front().time || time > t.back().time) return std::nullopt;
  // The first pose at or after `time`.
  const auto after = std::lower_bound(t.begin(), t.end(), time,
                                      [](const StampedPose& p, double v) { return p.time < v; });
  if (after->time == time) return after->pose;
  const StampedPose& b = *after;
  const StampedPose& a = *(after - 1);
  const double gap = b.time - a.time;
  if (!(gap > 0.0) || gap > max_gap) return std::nullopt;
  const double f = (time - a.time) / gap;
  const Eigen::Quaterniond qa(a.pose.rotation()), qb(b.pose.rotation());
  Eigen::Isometry3d out = Eigen::Isometry3d::Identity();
  out.linear() = qa.slerp(f, qb).toRotationMatrix();
  out.translation() = (1.0 - f) * a.pose.translation() + f * b.pose.translation();
  return out;
}

std::optional<SweepMotionParts> odometry_sweep_motion(const Trajectory& odometry, double scan_time, double begin,
                                                      double end) {
  if (!(end > begin)) return std::nullopt;
  const auto from = interpolate_pose(odometry, begin), to = interpolate_pose(odometry, end);
  if (!from || !to) return std::nullopt;
  // The sweep's ends and the odometry's poses between them, kStampTolerance clear of the
  // ends so that no part is empty.
  std::vector<double> times{begin};
  std::vector<Eigen::Matrix4d> poses{from->matrix()};
  const auto inside = std::upper_bound(odometry.begin(), odometry.end(), begin + kStampTolerance,
                                       [](double t, const StampedPose& p) { return t < p.time; });
  for (auto p = inside; p != odometry.end() && p->time < end - kStampTolerance; ++p) {
    times.push_back(p->time);
    poses.push_back(p->pose.matrix());
  }
  times.push_back(end);
  poses.push_back(to->matrix());
  return sweep_motion_parts(times, poses, scan_time);
}

}  // namespace ndtcu
