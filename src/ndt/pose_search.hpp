#pragma once
// What the initial pose searches (the sweep and its hypothesis search, and the TPE) share:
// when two poses are distinct places, how results rank, and the rival of a winner.
#include <ndtcu/aligner.hpp>
#include <ndtcu/initial_pose.hpp>
#include <ndtcu/result.hpp>

#include <Eigen/Geometry>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

namespace ndtcu::detail {

/// Whether two poses are distinct places for the ambiguity check: apart by more than
/// `distance` (m) in position, or in orientation by a rotation of more than `angle_rad`
/// (the whole rotation: yaw alone would take a sensor tilted 30 deg for the same pose).
inline bool distinct_poses(const Pose6& a, const Pose6& b, double distance, double angle_rad) {
  if ((a.head<3>() - b.head<3>()).norm() > distance) return true;
  const Eigen::Matrix3d ra = pose_to_matrix(a).topLeftCorner<3, 3>(), rb = pose_to_matrix(b).topLeftCorner<3, 3>();
  return Eigen::AngleAxisd(ra.transpose() * rb).angle() > angle_rad;
}

/// Every k-th point of `scan`, k the smallest that leaves at most `limit` (0: the scan):
/// `scan` itself when k is 1, else the points gathered into `storage` (the view is of it).
inline PointCloudView thinned(PointCloudView scan, std::size_t limit, PointCloud& storage) {
  if (limit == 0 || scan.size() <= limit) return scan;
  const std::size_t k = (scan.size() + limit - 1) / limit;
  storage.origin = scan.origin;
  storage.points.clear();
  storage.points.reserve(scan.size() / k + 1);
  for (std::size_t i = 0; i < scan.size(); i += k) storage.points.push_back(scan[i]);
  return storage;
}

/// aligner.align(scan, from), gone on from where it stopped up to `continuations` times
/// while it runs out of iterations (a pose from a coarser map may need more than one budget
/// on a finer one): iterations and evaluations are those of all the calls, and `calls` (when
/// given) is added their number.
inline AlignResult align_continued(Aligner& aligner, PointCloudView scan, const Eigen::Matrix4d& from,
                                   int continuations, int* calls = nullptr) {
  AlignResult r = aligner.align(scan, from);
  if (calls) ++*calls;
  for (int c = 0; c < continuations && r.reason == StopReason::MaxIterations && r.transform.allFinite(); ++c) {
    if (calls) ++*calls;
    const int iterations = r.iterations, evaluations = r.timings.evaluations;
    r = aligner.align(scan, r.transform);
    r.iterations += iterations;
    r.timings.evaluations += evaluations;
  }
  return r;
}

/// a ranks above b: a higher NVTL; a NaN NVTL never ranks above a number.
inline bool nvtl_ranks_above(const AlignResult& a, const AlignResult& b) {
  if (std::isnan(a.nvtl)) return false;
  return std::isnan(b.nvtl) || a.nvtl > b.nvtl;
}

/// Offers `r` as the rival of result.best: taken when it met the map, ended at a place
/// distinct from the winner's and scores above the rival so far.
inline void offer_rival(InitialPoseResult& result, const AlignResult& r, double distance, double angle_rad) {
  // A hypothesis that met no voxel is no place at all, and no rival.
  if (std::isnan(r.nvtl) || r.matched_points == 0 || !distinct_poses(r.pose, result.best.pose, distance, angle_rad)) {
    return;
  }
  if (!result.has_rival || r.nvtl > result.ambiguity_nvtl) {
    result.has_rival = true;
    result.ambiguity_nvtl = r.nvtl;
    result.rival_pose = r.pose;
  }
}

/// Sets result.ambiguous: a rival within `margin` of the winner's NVTL.
inline void settle_ambiguity(InitialPoseResult& result, double margin) {
  result.ambiguous = result.has_rival && result.ambiguity_nvtl >= result.best.nvtl - margin;
}

/// Fills result.candidates from a search's refined results: best first by NVTL, each place
/// once (a result within `distance` and `angle_rad` of one ranked before it is left out),
/// those that met no voxel left out; distances and angles from result.best.
inline void rank_candidates(InitialPoseResult& result, const std::vector<AlignResult>& refined, double distance,
                            double angle_rad) {
  std::vector<const AlignResult*> order;
  for (const AlignResult& r : refined) {
    if (!std::isnan(r.nvtl) && r.matched_points > 0) order.push_back(&r);
  }
  std::stable_sort(order.begin(), order.end(),
                   [](const AlignResult* a, const AlignResult* b) { return nvtl_ranks_above(*a, *b); });
  result.candidates.clear();
  std::vector<const AlignResult*> kept;
  const Eigen::Matrix3d rb = pose_to_matrix(result.best.pose).topLeftCorner<3, 3>();
  for (const AlignResult* r : order) {
    const bool fresh = std::all_of(kept.begin(), kept.end(),
                                   [&](const AlignResult* q) { return distinct_poses(r->pose, q->pose, distance, angle_rad); });
    if (!fresh) continue;
    kept.push_back(r);
    PoseCandidate c;
    c.pose = r->pose;
    c.nvtl = r->nvtl;
    c.overlap = r->source_points ? static_cast<double>(r->matched_points) / static_cast<double>(r->source_points) : 0.0;
    c.converged = r->converged;
    c.distance = (r->pose.head<3>() - result.best.pose.head<3>()).norm();
    c.angle_deg = Eigen::AngleAxisd(rb.transpose() * pose_to_matrix(r->pose).topLeftCorner<3, 3>()).angle() * 180.0 /
                  3.14159265358979323846;
    c.distinct = distinct_poses(r->pose, result.best.pose, distance, angle_rad);
    result.candidates.push_back(c);
  }
}

inline double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace ndtcu::detail
