// A frame of the Localizer: its attempts from the prediction, the retries and searches that
// recover it, and the check that decides it (Localizer::localize_frame).
#include "localizer_impl.hpp"

#include <ndtcu/error.hpp>
#include <ndtcu/localizability.hpp>
#include <ndtcu/pose_covariance.hpp>
#include <ndtcu/text.hpp>

#include <cmath>

#include "../log.hpp"
#include "../ndt/pose_search.hpp"
#include "../nvtx.hpp"

#include <chrono>
#include <optional>
#include <utility>

namespace ndtcu {

namespace detail {

double translation_gap(const Eigen::Matrix4d& a, const Eigen::Matrix4d& b) {
  return (a.topRightCorner<3, 1>() - b.topRightCorner<3, 1>()).norm();
}
double rotation_gap(const Eigen::Matrix4d& a, const Eigen::Matrix4d& b) {
  return Eigen::AngleAxisd(Eigen::Matrix3d(a.topLeftCorner<3, 3>().transpose() * b.topLeftCorner<3, 3>())).angle();
}

}  // namespace detail

namespace {

// The pose `d` away from `p` in the 6-vector [x y z roll pitch yaw] (a probe's step: small
// enough in angle for the sum of Euler angles to be the turn meant).
Pose6 stepped(const Pose6& p, const Eigen::Matrix<double, 6, 1>& d, double s) { return p + s * d; }

// The frame a turn is applied in: about the map's axes through the sensor (a heading
// change about the map's vertical), or about the sensor's own axes.
enum class Frame { Map, Sensor };

// Hypotheses at each centre's position, its orientation turned by each rotation vector
// (rad), centre by centre.
std::vector<Pose6> turned(const std::vector<Eigen::Matrix4d>& centres, const std::vector<Eigen::Vector3d>& turns,
                          Frame frame) {
  std::vector<Pose6> out;
  out.reserve(centres.size() * turns.size());
  for (const Eigen::Matrix4d& centre : centres) {
    for (const Eigen::Vector3d& v : turns) {
      Eigen::Matrix4d h = centre;
      const double angle = v.norm();
      if (angle > 0.0) {
        const Eigen::Matrix3d r = Eigen::AngleAxisd(angle, v / angle).toRotationMatrix();
        h.topLeftCorner<3, 3>() = frame == Frame::Map ? Eigen::Matrix3d(r * centre.topLeftCorner<3, 3>())
                                                      : Eigen::Matrix3d(centre.topLeftCorner<3, 3>() * r);
      }
      out.push_back(matrix_to_pose(h));
    }
  }
  return out;
}

// What the degeneracy probe found about an accepted alignment (LocalizerSettings::
// degeneracy_probe_m). The directions probed: the six of its localizability (the Hessian's
// eigenvectors, weakest first, each moving the points 1 m RMS), then the sensor's forward
// and left axes. The Hessian's eigenvectors mix a tunnel's axis with the voxels' own
// curvature (its weakest was 0.04-0.6 along the axis on some frames of the simulator's
// tunnel), while a vehicle drives along the tunnel, road or aisle that holds it, so its
// forward axis is the direction most worth probing. Each is stepped by 1 and 1.5 times
// `probe_m` both ways (the score ripples along a flat wall with the voxel lattice, which
// the scene need not be aligned with): 32 poses and the pose itself, one evaluation batch
// of at most kProbePoints of the scan (every k-th), each probe compared with the pose
// scored on the same points. NVTL is a mean over points, so 512 of them estimate it to a few
// hundredths, well inside the drops that separate held directions (0.24 and more on the
// real sets) from unheld ones (under 0.05 in the simulator's places).
constexpr int kProbeDirections = 8;
// The alignments a search's winner that ran out of iterations goes on for (each of
// max_iterations, each from where the one before stopped) before the check judges it.
constexpr int kSearchWinnerContinuations = 2;
constexpr std::size_t kProbePoints = 512;
struct Probe {
  bool weak[kProbeDirections] = {};
  Eigen::Matrix<double, 6, kProbeDirections> directions;
  int count = 0;
  double drop = std::numeric_limits<double>::quiet_NaN();  // the NVTL drop of the best probe
  int least_held = -1;                                       // the direction of that probe
  Pose6 best = Pose6::Zero();                                // and its pose
};

Probe probe_degeneracy(Aligner& aligner, PointCloudView scan, const AlignResult& r, double probe_m, double margin) {
  Probe out;
  const Localizability& l = r.localizability;
  if (!l.valid || probe_m <= 0.0) return out;
  out.directions.leftCols<6>() = l.directions;
  const Eigen::Matrix3d rotation = r.transform.topLeftCorner<3, 3>();
  for (int k = 0; k < 2; ++k) {
    out.directions.col(6 + k).setZero();
    out.directions.col(6 + k).head<3>() = rotation.col(k);  // 1 m of translation moves every point 1 m
  }
  constexpr double kSteps[4] = {1.0, -1.0, 1.5, -1.5};
  std::vector<Pose6> poses;
  poses.reserve(4 * kProbeDirections + 1);
  for (int i = 0; i < kProbeDirections; ++i) {
    for (double s : kSteps) poses.push_back(stepped(r.pose, out.directions.col(i), s * probe_m));
  }
  poses.push_back(r.pose);
  PointCloud storage;
  const std::vector<PoseScore> scores = aligner.score_batch(detail::thinned(scan, kProbePoints, storage), poses);
  const PoseScore& centre = scores.back();
  const double matched = static_cast<double>(centre.matched_points);
  for (int i = 0; i < kProbeDirections; ++i) {
    for (int step = 0; step < 4; ++step) {
      const PoseScore& e = scores[static_cast<std::size_t>(4 * i + step)];
      // A probe that loses most of the points the pose matched is no rival, however well
      // its few remaining points fit (NVTL averages over the matched ones).
      const bool overlaps = static_cast<double>(e.matched_points) >= 0.8 * matched;
      const double drop = overlaps ? centre.nvtl - e.nvtl : std::numeric_limits<double>::infinity();
      if (std::isnan(out.drop) || drop < out.drop) {
        out.drop = drop;
        out.least_held = i;
        out.best = poses[static_cast<std::size_t>(4 * i + step)];
      }
      if (drop <= margin) out.weak[i] = true;
    }
    out.count += out.weak[i] ? 1 : 0;
  }
  return out;
}

}  // namespace

// One frame's attempts, from the prediction to the searches, and the check that decides
// it: `best` is the highest-scoring attempt so far (the accepted one when one passes).
class Localizer::Impl::FrameAttempts {
 public:
  FrameAttempts(Impl& model, PointCloudView scan, const FramePrediction& prediction, double stamp,
                LocalizationResult& result, const Eigen::Matrix4d* first_start)
      : m(model), filtered(scan), predicted(prediction), time(stamp), out(result), start(first_start),
        // The gate holds once a good pose is known (the initial pose's uncertainty is not).
        gated(model.settings.gate_chi2 > 0.0 && prediction.has_covariance && model.known > 0 &&
              !(first_start && model.pass_from_search)),
        // No good pose yet and only a region to start from (set_initial_region).
        from_region(model.initial_search && model.known == 0),
        // No pose at all yet (set_initial_global): the global search until one is accepted.
        from_global(model.initial_global && model.known == 0),
        prior(model.aligner, model.settings, prediction) {
    out.status = FrameStatus::Tracked;
  }

  // Attempt 1: from the prediction, or the initial pose search over the region.
  bool first_attempt() {
    if (from_global) return global();
    if (from_region) {
      // The initial pose search, whose verdict must be found (converged, unambiguous, enough overlap) as well.
      const InitialPoseResult found = find_initial_pose(m.aligner, filtered, matrix_to_pose(m.initial), *m.initial_search);
      return take(found, FrameStage::InitialSearch) && verdict(found, m.settings.nvtl_threshold) == InitialPoseVerdict::Found;
    }
    return run(start ? *start : out.prediction);
  }

  // The retries after a failed first attempt (Recovery::LastGood and Recovery::Hypotheses):
  // on from a probe's better pose or from a continuation's end, else from the last good pose.
  bool retry() {
    bool ok = false;
    const Recovery mode = m.settings.recovery;
    int retries = 0;
    while (!ok && mode != Recovery::None && !from_region && !from_global && retries < m.settings.recovery_attempts) {
      // `best` is the highest-scoring attempt: a continuation that scores lower than the one
      // it went on from leaves `best` at a pose already tried, which ends the continuations.
      const bool can_continue = detail::has_pose(best) && best.reason == StopReason::MaxIterations;
      Eigen::Matrix4d guess;
      if (better && !already_tried(*better)) {
        guess = *better;  // the probe found a better pose near a refused one: go on from there
        out.stage = FrameStage::Probe;
      } else if (can_continue && !already_tried(best.transform)) {
        guess = best.transform;  // a long correction that ran out of iterations: go on from its end
        out.stage = FrameStage::Continuation;
      } else if (!already_tried(m.anchor())) {
        // Undo a velocity that no longer holds: a hand-held sensor's turn reverses between
        // two scans 2 s apart, and the Livox Avia set's frame 21 is 33 deg from its
        // constant-velocity prediction but 5 deg from the last good pose, from where it
        // converges. Its result passes the same check as the first attempt's, the gate
        // included; the rotation search holds this start too, but its coarse pass (5
        // iterations) can rank it below others and leave it unrefined.
        guess = m.anchor();
        out.stage = FrameStage::LastGood;
      } else {
        break;  // every start left would repeat one already tried
      }
      ++retries;
      out.status = FrameStatus::Recovered;
      ok = run(guess);
    }
    return ok;
  }

  // The searches come after the retries, without the prediction's prior: their hypotheses
  // are far from the prediction by design.
  void release_prior() { prior.release(); }

  // The hypothesis searches (Recovery::Hypotheses), each stage wider than the one before,
  // until one finds a pose that passes the check.
  bool search() {
    if (m.settings.recovery != Recovery::Hypotheses || from_region || from_global) return false;
    // The searches' rotation centres: the prediction and the last good pose, unless it is
    // the prediction (no velocity yet).
    std::vector<Eigen::Matrix4d> centres{out.prediction};
    if (detail::translation_gap(m.anchor(), out.prediction) >= 1e-3 ||
        detail::rotation_gap(m.anchor(), out.prediction) >= 1e-4) {
      centres.push_back(m.anchor());
    }
    if (!m.headings.empty() && heading_search(centres)) return true;
    // Stage 1: rotations about the sensor at each centre.
    const std::vector<Pose6> hypotheses = turned(centres, m.turns, Frame::Sensor);
    if (search(hypotheses, m.search_options, FrameStage::RotationSearch)) return true;
    const double since = m.since_last_good(time);
    if (m.settings.search_radius > 0.0) {
      // Stage 2: positions near the prediction.
      const InitialPoseOptions o = m.position_search(m.settings.search_radius, since);
      if (search(initial_pose_hypotheses(matrix_to_pose(out.prediction), o), o, FrameStage::PositionSearch)) return true;
    }
    const double wide = std::min(m.settings.max_search_radius, m.settings.search_radius + m.settings.max_speed * since);
    if (wide >= m.settings.search_radius + 1.0) {
      // Stage 3: wherever the sensor can have gone since the last good pose (screened):
      // positions about the last good pose, not the prediction, whose velocity may be what
      // no longer holds; headings about the predicted one.
      const InitialPoseOptions o = m.position_search(wide, since);
      Pose6 centre = matrix_to_pose(out.prediction);
      centre.head<3>() = m.anchor().topRightCorner<3, 1>();
      if (search(initial_pose_hypotheses(centre, o), o, FrameStage::WideSearch)) return true;
    }
    // Stage 4: the whole map, on the first lost frame and every global_search_interval-th
    // lost frame in a row after it.
    const int every = m.settings.global_search_interval;
    return every > 0 && m.consecutive_lost % every == 0 && global();
  }

  // The global search (InitialPoseSearch) over the whole map; its pose is taken only when
  // its verdict is found and it passes the check.
  bool global() {
    InitialPoseSearch* g = m.global_search();
    if (!g) return false;
    const InitialPoseResult found = g->find(filtered);
    return take(found, FrameStage::GlobalSearch) && verdict(found, m.settings.nvtl_threshold) == InitialPoseVerdict::Found;
  }

  // The frame check's outcome, from the attempts' best: valid, degenerate (the pose held
  // by the prediction along the directions the scan does not pin) or lost.
  void conclude(bool ok) {
    out.alignment = std::move(best);
    out.mahalanobis2 = predicted.mahalanobis2(out.alignment);
    if (ok && m.settings.degeneracy_probe_m > 0.0) {  // the accepted attempt's probe (probe_holds)
      out.degenerate_directions = probe.count;
      out.probe_nvtl_drop = probe.drop;
      if (probe.least_held >= 0) out.weakest_direction = probe.directions.col(probe.least_held);
    }
    if (ok && probe.count > 0) {
      remap_degenerate();
    } else if (ok) {
      out.valid = true;
      out.pose = out.alignment.transform;
      // The covariance of the accepted alignment only (settings.align.pose_covariance).
      attach_pose_covariance(m.aligner, filtered, out.alignment, m.estimate_mode());
      refine();
      // The frame's covariance: the estimate calibrated (LocalizerSettings::covariance_*),
      // and held to the bound (max_position_sigma).
      const CalibratedCovariance c = calibrated();
      out.covariance = c.valid ? c.covariance : out.alignment.covariance;
      out.covariance_term = c.dominant;
      const double bound = m.settings.max_position_sigma;
      if (c.valid && bound > 0.0 && !(max_position_sigma(out.covariance) <= bound)) {
        out.valid = false;
        out.status = FrameStatus::Uncertain;
        out.decided_by = FrameCheck::CovarianceBound;
        detail::log().debug("localizer: frame at t={} uncertain: position sigma {:.3f} m above {} m ({} term)", time,
                            max_position_sigma(out.covariance), bound, to_string(c.dominant));
      }
      // The motion model goes on from an uncertain frame too, with its covariance (the
      // next prediction's covariance, and so the gate, widen with it).
      m.advance(out.pose, time, out.covariance);
      if (out.valid) {
        m.typical_nvtl = std::isnan(m.typical_nvtl) ? out.alignment.nvtl : 0.8 * m.typical_nvtl + 0.2 * out.alignment.nvtl;
      }
    } else {
      lose();
    }
  }

 private:
  // The calibrated covariance of the accepted alignment (out.alignment, its estimate
  // attached): its fit, the scan's spread about the sensor, the refinement's gap and the
  // search's rival (calibrated_pose_covariance).
  CalibratedCovariance calibrated() const {
    const AlignResult& a = out.alignment;
    CovarianceEvidence e;
    e.laplace = a.covariance;
    e.laplace_valid = a.covariance_valid;
    e.resolution = m.settings.align.resolution;
    e.outlier_ratio = m.settings.align.outlier_ratio;
    e.matched_points = a.matched_points;
    e.nvtl = a.nvtl;
    // 2/3 E|x|^2: a point's squared distance from a rotation axis through the sensor,
    // averaged over the axes.
    e.rotation_arm2 = 2.0 / 3.0 * point_moments(filtered.points, filtered.size()).second.trace();
    e.refined = out.refined;
    e.localizability = a.localizability;
    if (resolution_gap) {
      e.has_resolution_gap = true;
      e.resolution_gap = *resolution_gap;
    }
    if (rival) {
      e.has_rival = true;
      e.rival_gap = rival->first;
      e.rival_nvtl_drop = rival->second;
    }
    if (!m.frame_alternatives.empty()) {
      const Pose6 here = matrix_to_pose(out.pose);
      for (const auto& [pose, nvtl] : m.frame_alternatives) {
        e.alternatives.emplace_back(detail::wrapped(pose - here), a.nvtl - nvtl);
      }
    }
    if (m.deskew_term) {
      // The motion's error, sensor frame, turned into the pose's axes (B = diag(R, R)).
      Eigen::Matrix<double, 6, 6> b = Eigen::Matrix<double, 6, 6>::Zero();
      b.topLeftCorner<3, 3>() = out.pose.topLeftCorner<3, 3>();
      b.bottomRightCorner<3, 3>() = out.pose.topLeftCorner<3, 3>();
      const Eigen::Matrix<double, 6, 1> variance = m.deskew_sigma.cwiseProduct(m.deskew_sigma);
      e.has_deskew = true;
      e.deskew = m.deskew_time2 * b * variance.asDiagonal() * b.transpose() + m.deskew_pose_noise;
    }
    return calibrated_pose_covariance(e, m.calibration());
  }

  // Guesses within 1 mm and 1e-4 rad of one already tried are skipped: they would give
  // the same result.
  bool already_tried(const Eigen::Matrix4d& guess) const {
    for (const auto& g : tried) {
      if (detail::translation_gap(g, guess) < 1e-3 && detail::rotation_gap(g, guess) < 1e-4) return true;
    }
    return false;
  }

  // Whether no pose near `r` scores better (see `probe`); else the best such pose is `better`.
  bool probe_holds(const AlignResult& r) {
    if (m.settings.degeneracy_probe_m <= 0.0) return true;
    Probe p = probe_degeneracy(m.aligner, filtered, r, m.settings.degeneracy_probe_m, m.settings.degeneracy_margin);
    if (p.drop < -m.settings.degeneracy_margin) {
      better = pose_to_matrix(p.best);
      return false;
    }
    probe = std::move(p);
    return true;
  }

  // One alignment from `guess`, held to every check.
  bool run(const Eigen::Matrix4d& guess) {
    tried.push_back(guess);
    AlignResult r = m.aligner.align(filtered, guess);
    ++out.attempts;
    out.iterations_total += r.iterations;
    out.evaluations += r.timings.evaluations;
    // Held to the scene's scores too (settings.search_nvtl_ratio): an attempt that passes
    // the fixed threshold far below them goes on to the retries and searches; to the
    // prediction's covariance (the gate): a larger jump must be confirmed by a search; and
    // to the probe.
    const bool scores = m.accept(r) && m.typical(r.nvtl) && !(gated && predicted.mahalanobis2(r) > m.settings.gate_chi2);
    const bool ok = scores && probe_holds(r);
    if (ok) rival.reset();  // this pose is no search's winner
    if (ok || !have_best || (detail::has_pose(r) && (!detail::has_pose(best) || r.nvtl > best.nvtl))) {
      best = std::move(r);
      have_best = true;
      best_beaten = scores && !ok;
    }
    return ok;
  }

  // A search of the search_hypotheses() kind; its winner is taken when it passes the check
  // and no distinct pose scores about as well (never a guess between two).
  bool take(const InitialPoseResult& found, FrameStage stage) {
    out.attempts += static_cast<int>(found.hypotheses_aligned);
    out.hypotheses += static_cast<int>(found.hypotheses_aligned);
    out.screened += static_cast<int>(found.screened_hypotheses);
    out.iterations_total += found.best.iterations;
    out.evaluations += found.best.timings.evaluations;
    out.status = FrameStatus::Recovered;
    out.stage = stage;
    out.ambiguity_nvtl = found.ambiguity_nvtl;
    out.ambiguous = found.ambiguous;
    // A winner that ran out of iterations, a long correction still under way (the 1 Hz
    // stop-and-go drive's frame after lost ones: NVTL 2.98 after 120 iterations), goes on
    // from where it stopped, as the first attempt's continuation does, before the check
    // judges it; not one the rival makes ambiguous.
    AlignResult winner = found.best;
    if (!found.ambiguous && detail::has_pose(winner) && winner.reason == StopReason::MaxIterations &&
        m.failed_check(winner) == FrameCheck::NotConverged) {
      AlignResult on =
          detail::align_continued(m.aligner, filtered, winner.transform, kSearchWinnerContinuations - 1, &out.attempts);
      out.iterations_total += on.iterations;
      out.evaluations += on.timings.evaluations;
      on.iterations += winner.iterations;
      detail::log().debug("localizer: {} at t={}: its winner (NVTL {:.3f}) ran out of iterations; continued: NVTL {:.3f}, "
                          "{}",
                          to_string(stage), time, winner.nvtl, on.nvtl, to_string(m.failed_check(on)));
      if (detail::has_pose(on)) winner = std::move(on);
    }
    const bool typical = m.typical(winner.nvtl);
    if (m.accept(winner) && !found.ambiguous && typical) {
      if (probe_holds(winner)) {
        best = winner;
        best_beaten = false;
        // The best distinct rival, weighed in the frame's covariance (its disagreement term).
        if (found.has_rival && std::isfinite(found.ambiguity_nvtl)) {
          rival.emplace(detail::wrapped(found.rival_pose - winner.pose), winner.nvtl - found.ambiguity_nvtl);
        } else {
          rival.reset();
        }
        return true;
      }
      // The winner stopped short of a better pose nearby: one alignment from there.
      if (!detail::has_pose(best) || winner.nvtl > best.nvtl) {
        best = winner;
        best_beaten = true;
      }
      return !already_tried(*better) && run(*better);
    }
    if (!typical && m.accept(winner) && !found.ambiguous) {
      detail::log().debug("localizer: {} at t={}: NVTL {:.3f} below {} of the accepted frames' {:.3f}",
                          to_string(stage), time, winner.nvtl, m.settings.search_nvtl_ratio, m.typical_nvtl);
    }
    detail::log().debug("localizer: {} at t={}: best NVTL {:.3f} after {} hypotheses{}", to_string(stage), time,
                        winner.nvtl, found.hypotheses_aligned, found.ambiguous ? ", ambiguous" : "");
    if (!detail::has_pose(best) || (detail::has_pose(winner) && winner.nvtl > best.nvtl)) {
      best = winner;
      best_beaten = false;
    }
    return false;
  }

  bool search(const std::vector<Pose6>& hypotheses, const InitialPoseOptions& o, FrameStage stage) {
    return take(search_hypotheses(m.aligner, filtered, hypotheses, o), stage);
  }

  // Stage 1a of the searches, turns about the vertical.
  bool heading_search(const std::vector<Eigen::Matrix4d>& centres) {
    // Stage 1a: turns about the map's vertical through each centre, the cheap first try
    // of stage 1 (2 x 6 hypotheses against its 2 x 123). A sensor turns mostly about the
    // vertical: on the hand-held Livox Avia set the turn between two scans is 10-14 deg
    // (median) about it and 3-6 deg about the other axes, and 60 of its 114 frames went to
    // stage 1, each costing 282 alignments there.
    std::vector<Pose6> hypotheses = turned(centres, m.headings, Frame::Map);
    if (centres.size() > 1) {
      // And the prediction swung about the last good pose's position: a turn that ended
      // (or began) between the frames turns the motion's direction with the heading, and a
      // constant-velocity prediction that carries a turn on is off in position too (on the
      // simulator's sparse 16-ring drive at 1 Hz, 2.6 m and 37 deg when the road
      // straightened after a turn, out of reach of every search about it).
      const Eigen::Vector3d pivot = m.anchor().topRightCorner<3, 1>();
      for (const Eigen::Vector3d& v : m.headings) {
        Eigen::Matrix4d swing = Eigen::Matrix4d::Identity();
        swing.topLeftCorner<3, 3>() = Eigen::AngleAxisd(v.z(), Eigen::Vector3d::UnitZ()).toRotationMatrix();
        swing.topRightCorner<3, 1>() = pivot - swing.topLeftCorner<3, 3>() * pivot;
        hypotheses.push_back(matrix_to_pose(swing * out.prediction));
      }
    }
    // Every one refined: the coarse pass (5 iterations) ranks a narrow or sparse scan's
    // right heading below wrong ones often enough (refining 16 of these 18 lost 5 frames
    // of the simulator's thinned HDL-32E turns, 4 or 8 of the 12 before the swung ones
    // flipped its Avia's frame 14).
    InitialPoseOptions o = m.search_options;
    o.refine_count = std::max(o.refine_count, static_cast<int>(hypotheses.size()));
    return search(hypotheses, o, FrameStage::HeadingSearch);
  }

  // An accepted pose whose scan does not pin every direction: held by the prediction along those.
  void remap_degenerate() {
    // Solution remapping (Zhang, Kaess and Singh 2016): the correction from the prediction
    // is kept along the directions the scan holds and dropped along the weak ones, where the
    // pose stays the motion model's: the correction minus its G-orthogonal projection onto
    // the span of the weak directions (G the displacement metric, so the share removed is
    // the one that moves the points along them).
    // The weak directions overlap (the sensor's forward axis and a Hessian eigenvector that
    // mixes the same axis with a little of a held direction): each is taken only for what
    // it adds to the ones before, G-orthogonally, and only when that is most of it, so a
    // held direction's share is never dropped with a near-duplicate (the tunnel's sideways
    // position drifted 0.7 m when both were removed whole).
    const Pose6 delta = detail::wrapped(out.alignment.pose - predicted.pose6);
    const Eigen::Matrix<double, 6, 6> g =
        displacement_metric(out.alignment.pose, point_moments(filtered.points, filtered.size()));
    std::vector<Eigen::Matrix<double, 6, 1>> basis;  // G-orthonormal
    for (int i = 0; i < kProbeDirections; ++i) {
      if (!probe.weak[i]) continue;
      const Eigen::Matrix<double, 6, 1> d = probe.directions.col(i) / std::sqrt(probe.directions.col(i).dot(g * probe.directions.col(i)));
      Eigen::Matrix<double, 6, 1> rest = d;
      for (const auto& b : basis) rest -= b.dot(g * d) * b;
      const double left = std::sqrt(std::max(0.0, rest.dot(g * rest)));
      if (left > 0.5) basis.push_back(rest / left);
    }
    out.degenerate_directions = static_cast<int>(basis.size());
    const auto held_part = [&](const Pose6& d) {
      Pose6 kept = d;
      for (const auto& b : basis) kept -= b.dot(g * d) * b;
      return kept;
    };
    out.status = FrameStatus::Degenerate;
    out.decided_by = FrameCheck::DegeneracyProbe;
    out.valid = false;
    Pose6 remapped = predicted.pose6 + held_part(delta);
    // Refined (refine_ratio) along the held directions only: the 2 m voxels hold a
    // corridor's pose off across it and in height (the simulator's tunnel, aligned from the
    // true pose: 7-15 cm across and 9 cm low at 2 m, under 1.5 cm at 1 m), and the finer
    // voxels pin it there; along the weak directions the pose stays the prediction's. The
    // finer alignment is held by the prediction (its covariance as a prior), since along the
    // weak directions nothing else holds it, and it goes on while it runs out of iterations:
    // a correction of 1.5-2.5 deg in roll and pitch at the finer voxels' short steps ran out
    // of them on 34 of 200 of the tunnel's trials, and 1 of 200 with three continuations.
    // Before the first good pose the prediction has no covariance, and the refinement runs
    // without a prior (in the tunnel's 200 trials the prior moved the six-direction NEES
    // from 5.6 to 5.2 only; it matters where the scene along the axis is not uniform).
    std::optional<AlignResult> r;
    if (m.fine) {
      if (predicted.has_covariance) {
        PosePrior held;
        held.pose = predicted.pose6;
        held.information = predicted.information;
        m.fine->set_prior(held);
      }
      r = finer(pose_to_matrix(remapped), 3);
      m.fine->set_prior(PosePrior{});
    }
    if (r && settled(*r)) {
      // Taken when it moved the scan's points by at most half a finer voxel (RMS, by the
      // displacement metric), whatever the turn: those turns of 1.5-2.5 deg are past the
      // 2 deg a valid frame's refinement may make.
      const Pose6 move = held_part(detail::wrapped(r->pose - remapped));
      if (std::sqrt(move.dot(g * move)) <= 0.5 * m.fine_resolution()) {
        remapped += move;
        out.refined = true;
        out.refinement_m = move.head<3>().norm();
      }
    }
    out.pose = pose_to_matrix(remapped);
    // The covariance follows the remapping: the pose is prediction + (I - P) delta, P the
    // G-orthogonal projector onto the weak span, so its error is P e_prediction +
    // (I - P) e_alignment, and with the two independent its covariance is
    // P C_prediction P' + (I - P) C_alignment (I - P)': the prediction's along the weak
    // directions (the pose is the prediction's there), the alignment's Laplace estimate
    // along the others. Without a prediction covariance (no good pose yet), each weak
    // direction gets the probe's step instead: the scan cannot tell poses that far apart.
    attach_pose_covariance(m.aligner, filtered, out.alignment, m.estimate_mode());
    // The held directions keep the alignment's own estimate, not the calibrated one: the
    // calibration's constants were fitted on valid frames in the map's voxels, while a
    // degenerate frame is held by the prediction and refined against finer ones. On the
    // simulator's tunnel (200 trials, refined; tests/localization/test_prediction.cpp) the
    // six-direction NEES is 5.96 with the Laplace estimate, 1.64 (far too wide) calibrated.
    const Eigen::Matrix<double, 6, 6>& aligned = out.alignment.covariance;
    out.covariance_term = out.alignment.covariance_valid ? CovarianceTerm::Laplace : CovarianceTerm::None;
    Eigen::Matrix<double, 6, 6> p = Eigen::Matrix<double, 6, 6>::Zero();
    for (const auto& b : basis) p += b * (g * b).transpose();
    const Eigen::Matrix<double, 6, 6> held = Eigen::Matrix<double, 6, 6>::Identity() - p;
    if (predicted.has_covariance) {
      out.covariance = held * aligned * held.transpose() + p * predicted.covariance * p.transpose();
    } else {
      out.covariance = aligned;
      for (int i = 0; i < kProbeDirections; ++i) {
        if (!probe.weak[i]) continue;
        const Eigen::Matrix<double, 6, 1> d = 1.5 * m.settings.degeneracy_probe_m * probe.directions.col(i);
        out.covariance += d * d.transpose();
      }
    }
    // The motion model goes on from it: along the weak directions that is dead reckoning.
    m.advance(out.pose, time, out.covariance);
    detail::log().debug("localizer: frame at t={} degenerate in {} direction{} (NVTL {:.3f}, best probe {:.3f} below)",
                        time, probe.count, probe.count == 1 ? "" : "s", out.alignment.nvtl, probe.drop);
  }

  // The valid pose polished against the finer map (LocalizerSettings::refine_ratio).
  // The frame's checks all ran at the map's resolution, where its basin is wide; the finer
  // voxels, from a pose already in it, pin it closer. On the Livox Avia set, whose scans
  // keep 370-670 points after the 1 m filter, the accepted poses of frames 56-77 were
  // 10-12 cm from the reference, consistently along x, where an independent point-to-plane
  // ICP of the raw scans agrees with the reference to 1-2 cm: 2 m voxels hold a sparse
  // scan's optimum a little off. Refined at 1 m, no frame is beyond 10 cm.
  // The covariance stays the accepted alignment's (its Hessian is the one the checks
  // judged; the refined pose is at least as good).
  void refine() {
    // A sweep the de-skew moved by more than half a finer voxel keeps the coarse pose: on the
    // simulator's fast drive (2-3 m per 0.1 s sweep) the finer voxels resolve what the
    // de-skew's motion leaves (LocalizerSettings::refine_ratio).
    if (m.deskew_shift > 0.5 * m.fine_resolution()) return;
    // A pose aligned with a prior (the prediction's, or Autoware's GNSS regularization) keeps
    // it: the finer voxels carry no prior, and their optimum would undo its pull.
    if (prior.active()) return;
    const std::optional<AlignResult> r = finer(out.pose);
    if (!r) return;
    out.refinement_m = detail::translation_gap(out.pose, r->transform);
    // The finer voxels' support: the points they held over those the map's voxels held.
    // Where the map is too sparse for them (a voxel needs 6 points) the finer alignment
    // fits the part of the scan that found one, and its optimum is no better evidence
    // than the coarse one (LocalizerSettings::refine_min_support).
    out.refinement_support = out.alignment.matched_points > 0 ? static_cast<double>(r->matched_points) /
                                                                    static_cast<double>(out.alignment.matched_points)
                                                              : 0.0;
    const bool supported = settled(*r) && out.refinement_support >= m.settings.refine_min_support;
    // The two resolutions' optima: their gap enters the covariance (its disagreement term).
    if (supported) resolution_gap = detail::wrapped(r->pose - out.alignment.pose);
    if (supported && out.refinement_m <= 0.5 * m.fine_resolution() &&
        detail::rotation_gap(out.pose, r->transform) <= 2.0 * detail::kPi / 180.0) {
      out.pose = r->transform;
      out.refined = true;
    }
  }

  // The alignment against the finer map from `from` (refine_ratio), when it gave a pose,
  // going on from where it stopped up to `continuations` times while it runs out of
  // iterations; its cost is counted in the frame's.
  std::optional<AlignResult> finer(const Eigen::Matrix4d& from, int continuations = 0) {
    if (!m.fine) return std::nullopt;
    const auto t0 = std::chrono::steady_clock::now();
    const AlignResult r = detail::align_continued(*m.fine, filtered, from, continuations);
    out.iterations_total += r.iterations;
    out.evaluations += r.timings.evaluations;
    out.align_ms += detail::ms_since(t0);
    if (!detail::has_pose(r)) return std::nullopt;
    return r;
  }
  // Whether a refinement may be taken: it converged and matched min_matched_ratio of the points.
  bool settled(const AlignResult& r) const { return r.reason == StopReason::Converged && m.matched_enough(r); }

  // No attempt passed: the frame is lost, with the check its best attempt failed.
  void lose() {
    out.status = FrameStatus::Lost;
    out.valid = false;
    out.pose = out.prediction;
    // The check its best attempt failed.
    if (const FrameCheck failed = m.failed_check(out.alignment); failed != FrameCheck::Passed) {
      out.decided_by = failed;
    } else if (!m.typical(out.alignment.nvtl)) {
      out.decided_by = FrameCheck::TypicalNvtl;
    } else if (out.ambiguous) {
      out.decided_by = FrameCheck::Ambiguous;
    } else if (best_beaten) {
      out.decided_by = FrameCheck::ProbeFoundBetter;
    } else {
      out.decided_by = FrameCheck::MahalanobisGate;
    }
    ++m.consecutive_lost;
    // The scene's typical NVTL is kept however many frames are lost: forgetting it let the
    // fixed threshold alone take a wrong pose after a kidnapping (11 m off at NVTL 2.5-2.7
    // on the simulator's streets, where right poses score 3.3-3.4). A new map forgets it.
    detail::log().debug("localizer: frame at t={} lost after {} attempts (best NVTL {:.3f}, {})", time, out.attempts,
                        out.alignment.nvtl, to_string(out.alignment.reason));
  }

  Impl& m;
  PointCloudView filtered;
  const FramePrediction& predicted;
  const double time;
  LocalizationResult& out;
  const Eigen::Matrix4d* start;  // the first attempt's start when not the prediction (a re-de-skew pass)
  const bool gated, from_region, from_global;
  FramePrior prior;
  std::vector<Eigen::Matrix4d> tried;
  bool have_best = false;
  AlignResult best;
  bool best_beaten = false;  // `best` failed only the probe: a pose nearby scores better
  // The degeneracy probe of the attempt that passed every other check, run as its last
  // check: a probe that scores more than degeneracy_margin above the pose shows it is not
  // the optimum (a correct pose, held or not along a direction, is never beaten: along a
  // corridor the probes score within a few hundredths of it). Such a pose is refused, and
  // the probe's pose is the next start (`better`). A wrong pose 3.5 m off on the Livox
  // Avia set passed the score checks at NVTL 2.69 (the scene's 3.1-3.2) and was taken as
  // degenerate, its probes 0.26 above it; the frames after it, predicted from it, were lost.
  Probe probe;
  std::optional<Eigen::Matrix4d> better;
  // The accepted search winner's best distinct rival: its pose minus the winner's and its
  // NVTL below the winner's (none when the pose is no search's winner).
  std::optional<std::pair<Pose6, double>> rival;
  // The refinement's pose minus the accepted alignment's (refine_ratio; none without one).
  std::optional<Pose6> resolution_gap;
};

LocalizationResult Localizer::localize_frame(PointCloudView filtered, double time, const Eigen::Matrix4d* given,
                                             const Eigen::Matrix<double, 6, 6>* given_covariance,
                                             const Eigen::Matrix4d* start) {
  NDTCU_NVTX_RANGE("localize");
  Impl& m = *impl_;
  if (!m.aligner.has_target()) throw Error("localizer: no map (call set_map first)");
  if (!m.initialized) throw Error("localizer: no initial pose (call set_initial_pose first)");
  // A NaN or infinite stamp would become the motion model's last time and spoil every
  // later prediction's time scaling; it is refused before anything changes.
  if (!std::isfinite(time)) throw Error("localizer: frame time " + number_text(time) + " s is not finite");
  LocalizationResult out;
  out.points_in = filtered.size();
  out.points_used = filtered.size();
  // Prediction: the caller's (odometry) or the motion model's.
  const FramePrediction predicted(given ? *given : predict(time),
                                  given_covariance ? *given_covariance : m.motion_covariance(time));
  out.prediction = predicted.pose;
  out.prediction_covariance = predicted.covariance;
  if (std::isnan(m.first_time)) m.first_time = time;
  if (filtered.size() < m.settings.min_frame_points) {
    // Too sparse to be held to a pose: lost before any attempt, the motion model untouched.
    out.status = FrameStatus::Lost;
    out.valid = false;
    out.pose = out.prediction;
    out.stage = FrameStage::None;
    out.decided_by = FrameCheck::TooFewPoints;
    ++m.consecutive_lost;
    detail::log().debug("localizer: frame at t={} lost: {} points after the filter, fewer than min_frame_points ({})",
                        time, filtered.size(), m.settings.min_frame_points);
    return out;
  }

  const auto t0 = std::chrono::steady_clock::now();
  Impl::FrameAttempts attempts(m, filtered, predicted, time, out, start);
  // Attempt 1 from the prediction. When it ran out of iterations (a long correction still
  // under way), the best attempt continues from where it stopped, as long as each
  // continuation runs out of iterations in turn and retries are left (a narrow scan's
  // correction of 0.7 m and 3 deg took 64 of Autoware's 0.1 m steps on the simulator's
  // Avia, where one continuation stopped 0.2 m short and the frame went to the searches); a
  // retry left then starts from the last good pose (undoing a velocity that no longer
  // holds), under Recovery::LastGood and Recovery::Hypotheses alike.
  bool ok = attempts.first_attempt();
  ok = ok || attempts.retry();
  attempts.release_prior();  // the searches' hypotheses are far from the prediction by design
  // A re-de-skew pass (from `start`) searches nothing: its caller keeps the pass before.
  ok = ok || (!start && attempts.search());
  out.align_ms = detail::ms_since(t0);
  // The frame check: valid, degenerate or lost.
  attempts.conclude(ok);
  return out;
}

}  // namespace ndtcu
