// Pose covariance after Autoware's ndt_scan_matcher: Laplace, MULTI_NDT, MULTI_NDT_SCORE
// (formulas in include/ndtcu/pose_covariance.hpp).
#include <ndtcu/error.hpp>
#include <ndtcu/fields.hpp>
#include <ndtcu/pose_covariance.hpp>
#include <ndtcu/text.hpp>

#include "../nvtx.hpp"
#include "ndt_derivatives.hpp"

#include <Eigen/Cholesky>
#include <Eigen/Eigenvalues>
#include <Eigen/LU>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace ndtcu {

namespace {

using Matrix6d = Eigen::Matrix<double, 6, 6>;
using Vector6d = Eigen::Matrix<double, 6, 1>;
constexpr double kPi = 3.14159265358979323846;

// An angle difference brought into (-pi, pi], so a spread across +-pi stays small.
double wrap_angle(double a) {
  a = std::remainder(a, 2.0 * kPi);
  return a <= -kPi ? a + 2.0 * kPi : a;
}

// Weighted mean and covariance of `poses` (weights summing to 1), Autoware's
// calculate_weighted_mean_and_cov in all six entries. Computed on differences from the
// first pose (angles wrapped): the same values in exact arithmetic, without squaring map
// coordinates of 1e6 m. Returns the mean difference; `covariance` gets sum w (d - m)(d - m)'.
Vector6d weighted_spread(const std::vector<Pose6>& poses, const std::vector<double>& weights, Matrix6d& covariance) {
  std::vector<Vector6d> d(poses.size());
  for (std::size_t i = 0; i < poses.size(); ++i) {
    d[i] = poses[i] - poses[0];
    for (int a = 3; a < 6; ++a) d[i](a) = wrap_angle(d[i](a));
  }
  Vector6d mean = Vector6d::Zero();
  for (std::size_t i = 0; i < d.size(); ++i) mean += weights[i] * d[i];
  covariance.setZero();
  for (std::size_t i = 0; i < d.size(); ++i) {
    const Vector6d e = d[i] - mean;
    covariance += weights[i] * e * e.transpose();
  }
  return mean;
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

std::vector<Pose6> covariance_offset_poses(const Pose6& result_pose, const std::vector<double>& offset_x,
                                           const std::vector<double>& offset_y) {
  if (offset_x.size() != offset_y.size()) {
    throw Error("pose covariance: offset_x has " + std::to_string(offset_x.size()) + " entries but offset_y " +
                std::to_string(offset_y.size()) + " (they pair up)");
  }
  if (!result_pose.allFinite()) throw Error("pose covariance: the result pose has a non-finite entry");
  for (std::size_t k = 0; k < offset_x.size(); ++k) {
    if (!std::isfinite(offset_x[k]) || !std::isfinite(offset_y[k])) {
      throw Error("pose covariance: offset " + std::to_string(k) + " (" + ndtcu::number_text(offset_x[k]) + ", " +
                  ndtcu::number_text(offset_y[k]) + ") is not finite");
    }
  }
  // Autoware turns the offsets by the top-left 2x2 block of the result's rotation matrix
  // (propose_poses_to_search): the vehicle's x and y axes seen in the map's x-y plane.
  const Eigen::Matrix2d rotation = pose_to_matrix(result_pose).topLeftCorner<2, 2>();
  std::vector<Pose6> poses;
  poses.reserve(offset_x.size());
  for (std::size_t k = 0; k < offset_x.size(); ++k) {
    Pose6 p = result_pose;
    p.head<2>() += rotation * Eigen::Vector2d(offset_x[k], offset_y[k]);
    poses.push_back(p);
  }
  return poses;
}

std::vector<double> softmax_weights(const std::vector<double>& scores, double temperature) {
  if (scores.empty()) throw Error("pose covariance: no scores to weight");
  if (!(temperature > 0.0) || !std::isfinite(temperature)) {
    throw Error("pose covariance: temperature must be > 0, got " + ndtcu::number_text(temperature));
  }
  for (std::size_t i = 0; i < scores.size(); ++i) {
    if (!std::isfinite(scores[i])) {
      throw Error("pose covariance: score " + std::to_string(i) + " is not finite (" + ndtcu::number_text(scores[i]) + ")");
    }
  }
  // As Autoware's calc_weight_vec: shifted by the largest score so that exp never overflows.
  const double top = *std::max_element(scores.begin(), scores.end());
  std::vector<double> w(scores.size());
  double sum = 0.0;
  for (std::size_t i = 0; i < scores.size(); ++i) {
    w[i] = std::exp((scores[i] - top) / temperature);
    sum += w[i];
  }
  for (double& x : w) x /= sum;
  return w;
}

Eigen::Matrix2d laplace_xy_covariance(const Eigen::Matrix<double, 6, 6>& hessian) {
  return -Eigen::Matrix2d(hessian.topLeftCorner<2, 2>()).inverse();
}

Eigen::Matrix2d floor_xy_covariance(const Eigen::Matrix2d& covariance_xy, const Pose6& pose, double min_xx,
                                    double min_yy) {
  const Eigen::Matrix2d r = pose_to_matrix(pose).topLeftCorner<2, 2>();
  Eigen::Matrix2d body = r.transpose() * covariance_xy * r;
  body(0, 0) = std::max(body(0, 0), min_xx);
  body(1, 1) = std::max(body(1, 1), min_yy);
  return r * body * r.transpose();
}

PoseCovarianceResult estimate_pose_covariance(Aligner& aligner, PointCloudView source, const AlignResult& result,
                                              PoseCovariance mode, const PoseCovarianceOptions& options) {
  NDTCU_NVTX_RANGE("pose covariance");
  const auto t0 = std::chrono::steady_clock::now();
  PoseCovarianceResult out;
  out.mode = mode;
  out.mean_xy = result.pose.head<2>();
  switch (mode) {
    case PoseCovariance::None:
      break;
    case PoseCovariance::Laplace: {
      // -H is the information matrix only where the score is a maximum (-H positive
      // definite); elsewhere its inverse is no covariance and nothing is reported.
      const Matrix6d information = -result.hessian;
      Eigen::LLT<Matrix6d> llt(information);
      if (llt.info() == Eigen::Success && information.allFinite()) {
        const Matrix6d inverse = llt.solve(Matrix6d::Identity());
        out.covariance = 0.5 * (inverse + inverse.transpose());  // exactly symmetric
        out.covariance_xy = laplace_xy_covariance(result.hessian);
        out.valid = out.covariance.allFinite() && out.covariance_xy.allFinite();
        if (!out.valid) {
          out.covariance.setZero();
          out.covariance_xy.setZero();
        }
      }
      break;
    }
    case PoseCovariance::MultiNdt:
    case PoseCovariance::MultiNdtScore: {
      if (mode == PoseCovariance::MultiNdtScore && !(options.temperature > 0.0 && std::isfinite(options.temperature))) {
        throw Error("pose covariance: temperature must be > 0, got " + ndtcu::number_text(options.temperature));
      }
      out.start_poses = covariance_offset_poses(result.pose, options.offset_x, options.offset_y);
      std::vector<Pose6> poses{result.pose};  // the result is one of the samples, as in Autoware
      const double n = static_cast<double>(out.start_poses.size() + 1);
      if (mode == PoseCovariance::MultiNdt) {
        const std::vector<AlignResult> ends = aligner.align_batch(source, out.start_poses);
        for (const AlignResult& e : ends) out.end_poses.push_back(e.pose);
        out.alignments = static_cast<int>(out.start_poses.size());
        out.weights.assign(static_cast<std::size_t>(n), 1.0 / n);
      } else {
        out.scores.push_back(result.nvtl);
        const std::vector<PoseScore> scored = aligner.score_batch(source, out.start_poses);
        for (std::size_t k = 0; k < scored.size(); ++k) {
          out.scores.push_back(scored[k].nvtl);
          out.end_poses.push_back(out.start_poses[k]);
        }
        out.evaluations = static_cast<int>(out.start_poses.size());
        out.weights = softmax_weights(out.scores, options.temperature);
      }
      poses.insert(poses.end(), out.end_poses.begin(), out.end_poses.end());
      Matrix6d c;
      const Vector6d mean = weighted_spread(poses, out.weights, c);
      // Autoware's MULTI_NDT multiplies its 1/n-weighted covariance by (n - 1)/n.
      if (mode == PoseCovariance::MultiNdt) c *= (n - 1.0) / n;
      if (mode == PoseCovariance::MultiNdtScore) {
        // Only x and y vary among the seven poses: the other entries are not estimated.
        const Eigen::Matrix2d xy = c.topLeftCorner<2, 2>();
        c.setZero();
        c.topLeftCorner<2, 2>() = xy;
      }
      out.covariance = c;
      out.covariance_xy = c.topLeftCorner<2, 2>();
      out.mean_xy = result.pose.head<2>() + mean.head<2>();
      out.valid = c.allFinite();
      break;
    }
    case PoseCovariance::Sandwich: {
      // An M-estimator's covariance, A^-1 B A^-1 (Huber 1967; White 1982), where Laplace
      // takes B = A, true only for a log-likelihood, which the NDT score (its d1, d2 fitted
      // to a Gaussian-plus-uniform mixture) is not. Against the simulator's truth
      // (BENCHMARK.md, "Pose covariance against exact truth") it is narrower than Laplace
      // on open streets, whose error is the voxels' bias that all points share, and the
      // closest to honest for a degenerate frame refined against finer voxels. A prior
      // enters both halves as its information, a correctly stated prior's gradient having
      // that variance.
      Matrix6d hessian, scatter;
      if (!aligner.score_scatter(source, result.transform, hessian, scatter)) break;
      Matrix6d a = -hessian, b = scatter;
      const PosePrior& prior = aligner.settings().prior;
      if (prior.active()) {
        Matrix6d l = prior.information;
        const double yaw = prior.pose(5);
        const Eigen::Vector2d u(std::cos(yaw), std::sin(yaw));
        const double pairs = static_cast<double>(result.correspondences);  // add_prior's N
        l.topLeftCorner<2, 2>() += 2.0 * prior.regularization_scale_factor * pairs * u * u.transpose();
        a += l;
        b += l;
      }
      Eigen::LLT<Matrix6d> llt(a);
      if (llt.info() != Eigen::Success || !a.allFinite() || !b.allFinite()) break;
      const Matrix6d a_inverse = llt.solve(Matrix6d::Identity());
      const Matrix6d c = a_inverse * b * a_inverse;
      out.covariance = 0.5 * (c + c.transpose());
      out.covariance_xy = out.covariance.topLeftCorner<2, 2>();
      out.valid = out.covariance.allFinite();
      if (!out.valid) {
        out.covariance.setZero();
        out.covariance_xy.setZero();
      }
      break;
    }
    case PoseCovariance::Calibrated: {
      // The Laplace estimate and what the alignment knows of its fit (the evidence a
      // Localizer's frame gives but the refinement's gap and a search's rival).
      const PoseCovarianceResult laplace = estimate_pose_covariance(aligner, source, result, PoseCovariance::Laplace);
      CovarianceEvidence e;
      e.laplace = laplace.covariance;
      e.laplace_valid = laplace.valid;
      e.resolution = aligner.settings().resolution;
      e.outlier_ratio = aligner.settings().outlier_ratio;
      e.matched_points = result.matched_points;
      e.nvtl = result.nvtl;
      // 2/3 E|x|^2: a point's squared distance from a rotation axis through the sensor,
      // averaged over the axes (CovarianceEvidence::rotation_arm2).
      e.rotation_arm2 = 2.0 / 3.0 * point_moments(source.points, source.size()).second.trace();
      e.localizability = result.localizability;
      const CalibratedCovariance c = calibrated_pose_covariance(e, options.calibrated);
      out.valid = c.valid;
      out.covariance = c.covariance;
      out.covariance_xy = c.covariance.topLeftCorner<2, 2>();
      out.dominant = c.dominant;
      break;
    }
  }
  out.elapsed_ms = ms_since(t0);
  return out;
}

void attach_pose_covariance(Aligner& aligner, PointCloudView source, AlignResult& result, PoseCovariance mode) {
  if (mode == PoseCovariance::None) return;
  // The estimate aligns or evaluates again: on the map version `result` was aligned on.
  const Aligner::VersionHold hold = aligner.hold_target_version();
  const PoseCovarianceResult c = estimate_pose_covariance(aligner, source, result, mode);
  result.covariance_mode = c.mode;
  result.covariance_valid = c.valid;
  result.covariance = c.covariance;
  result.covariance_xy = c.covariance_xy;
  result.timings.covariance_ms = c.elapsed_ms;
  result.timings.total_ms += c.elapsed_ms;
}

void attach_pose_covariance(Aligner& aligner, PointCloudView source, AlignResult& result) {
  attach_pose_covariance(aligner, source, result, aligner.settings().pose_covariance);
}

void attach_pose_covariance(Aligner& aligner, PointCloudView source, std::vector<AlignResult>& results) {
  const PoseCovariance mode = aligner.settings().pose_covariance;
  if (mode == PoseCovariance::None) return;
  const Aligner::VersionHold hold = aligner.hold_target_version();  // one version for the whole batch
  for (AlignResult& r : results) attach_pose_covariance(aligner, source, r, mode);
}

const char* to_string(CovarianceTerm term) {
  switch (term) {
    case CovarianceTerm::None: return "none";
    case CovarianceTerm::Laplace: return "laplace";
    case CovarianceTerm::Sparsity: return "sparsity";
    case CovarianceTerm::Residual: return "residual";
    case CovarianceTerm::Disagreement: return "disagreement";
    case CovarianceTerm::Localizability: return "localizability";
    case CovarianceTerm::Deskew: return "deskew";
  }
  return "?";
}

CovarianceTerm covariance_term_from_string(const std::string& name) {
  return enum_from_name<CovarianceTerm>(name, "covariance term");
}

CalibratedCovariance calibrated_pose_covariance(const CovarianceEvidence& e, const CalibratedCovarianceSettings& s) {
  const auto check = [](double v, const char* name) {
    if (!(v >= 0.0) || !std::isfinite(v)) {
      throw Error(std::string("calibrated covariance: ") + name + " must be finite and >= 0, got " +
                  ndtcu::number_text(v));
    }
  };
  check(s.sparsity_translation, "sparsity_translation");
  check(s.sparsity_rotation, "sparsity_rotation");
  check(s.residual_scale, "residual_scale");
  check(s.refined_residual_scale, "refined_residual_scale");
  check(s.hypothesis_temperature, "hypothesis_temperature");
  check(s.weak_direction_sigma, "weak_direction_sigma");
  check(s.weak_direction_ratio, "weak_direction_ratio");
  if (s.weak_direction_ratio > 1.0) {
    throw Error("calibrated covariance: weak_direction_ratio must be at most 1 (an eigenvalue over the largest), got " +
                ndtcu::number_text(s.weak_direction_ratio));
  }
  check(s.deskew_scale, "deskew_scale");
  CalibratedCovariance out;
  if (!e.laplace_valid || !e.laplace.allFinite()) return out;
  out.valid = true;
  out.laplace = e.laplace;
  // Sparsity: the Laplace estimate of a sparse scan in coarse voxels is as narrow as the
  // score's curvature, while each voxel's Gaussian holds its points' optimum a fraction of a
  // voxel off (the Livox Avia set's frames 56-77, 10-12 cm off in 2 m voxels with 370-670
  // points); that bias averages down with the points, as 1/N.
  const double n = static_cast<double>(std::max<std::size_t>(e.matched_points, 1));
  const double t = s.sparsity_translation * e.resolution, r = s.sparsity_rotation;
  out.sparsity.diagonal() << t * t / n, t * t / n, t * t / n, r * r / n, r * r / n, r * r / n;
  // Residuals: NVTL is the mean over points of -d1 exp(-d2 m^2 / 2), m^2 a point's squared
  // Mahalanobis distance to its best voxel; the m^2 of the mean NVTL says how loosely the
  // scan fits (a point at its voxel's mean scores -d1), and the Laplace estimate, which
  // treats the score as a log-likelihood of unit scale, is scaled with it, as least squares
  // scales (J'J)^-1 by the residuals' variance.
  const math::GaussConstants g = math::gauss_constants(e.resolution, e.outlier_ratio);
  const double share = e.nvtl / -g.d1;
  // (No point matched, NVTL 0: no fit to scale, and the sparsity floor at N = 1 already holds it.)
  out.mean_squared_mahalanobis = share > 0.0 && share < 1.0 ? -2.0 * std::log(share) / g.d2 : 0.0;
  // A refined pose lost the coarse voxels' bias that most of this term stands for.
  const double scale = e.refined ? s.refined_residual_scale : s.residual_scale;
  out.residual = scale * out.mean_squared_mahalanobis * out.laplace;
  // Disagreement: two optima of the same scan (another resolution's, a distinct rival's) are
  // both candidates for the pose; the spread of the pair, weighted.
  if (e.has_resolution_gap && e.resolution_gap.allFinite()) {
    // The two resolutions weighed alike (w = 1/2): w (1 - w) g g'.
    out.disagreement += 0.25 * e.resolution_gap * e.resolution_gap.transpose();
  }
  if (s.hypothesis_temperature > 0.0) {
    // Softmax weights of the pose (NVTL s0, gap 0) and each other optimum (s0 - drop, gap
    // h): their weighted spread about their weighted mean.
    std::vector<std::pair<Vector6d, double>> optima{{Vector6d::Zero(), 1.0}};
    const auto offer = [&](const Pose6& gap, double drop) {
      if (gap.allFinite() && std::isfinite(drop)) {
        optima.emplace_back(gap, std::exp(-std::max(0.0, drop) / s.hypothesis_temperature));
      }
    };
    if (e.has_rival) offer(e.rival_gap, e.rival_nvtl_drop);
    for (const auto& [gap, drop] : e.alternatives) offer(gap, drop);
    double total = 0.0;
    Vector6d mean = Vector6d::Zero();
    for (const auto& [h, w] : optima) {
      total += w;
      mean += w * h;
    }
    mean /= total;
    for (const auto& [h, w] : optima) out.disagreement += w / total * (h - mean) * (h - mean).transpose();
  }
  // Localizability: along a direction the scan holds weakly the optimum slides further than
  // the score's curvature says (the voxels' bias along a street's axis); the weaker, the
  // further. Each direction whose eigenvalue ratio rho lies below the cut rho_c adds a
  // variance c^2 (1 / rho - 1 / rho_c) of RMS point motion along it (none at the cut).
  const Localizability& l = e.localizability;
  const double strongest = l.eigenvalues(5);
  if (l.valid && s.weak_direction_sigma > 0.0 && s.weak_direction_ratio > 0.0 && strongest > 0.0 &&
      std::isfinite(strongest)) {
    const double c2 = s.weak_direction_sigma * s.weak_direction_sigma;
    for (int i = 0; i < 6; ++i) {
      const double rho = l.eigenvalues(i) / strongest;
      // A ratio not above zero is a degenerate direction: the localizer keeps the alignment's
      // own estimate along it.
      if (!(rho > 0.0) || !(rho < s.weak_direction_ratio) || !l.directions.col(i).allFinite()) continue;
      const Vector6d v = l.directions.col(i);
      out.localizability += c2 * (1.0 / rho - 1.0 / s.weak_direction_ratio) * v * v.transpose();
    }
  }
  // De-skew: the sweep's motion as far as it was not known (the evidence's own estimate).
  if (e.has_deskew && e.deskew.allFinite()) out.deskew = s.deskew_scale * 0.5 * (e.deskew + e.deskew.transpose());
  out.covariance = out.laplace + out.sparsity + out.residual + out.disagreement + out.localizability + out.deskew;
  out.covariance = 0.5 * (out.covariance + out.covariance.transpose());
  // The dominant term: points moved, a rotation weighed by the points' arm about it.
  Vector6d w;
  w << 1.0, 1.0, 1.0, e.rotation_arm2, e.rotation_arm2, e.rotation_arm2;
  const auto size = [&w](const Matrix6d& m) { return (w.asDiagonal() * m).trace(); };
  const std::pair<CovarianceTerm, double> terms[] = {{CovarianceTerm::Laplace, size(out.laplace)},
                                                     {CovarianceTerm::Sparsity, size(out.sparsity)},
                                                     {CovarianceTerm::Residual, size(out.residual)},
                                                     {CovarianceTerm::Disagreement, size(out.disagreement)},
                                                     {CovarianceTerm::Localizability, size(out.localizability)},
                                                     {CovarianceTerm::Deskew, size(out.deskew)}};
  double largest = -1.0;
  for (const auto& [term, value] : terms) {
    if (value > largest) {
      largest = value;
      out.dominant = term;
    }
  }
  return out;
}

double max_position_sigma(const Matrix6d& covariance) {
  const Eigen::Matrix3d c = 0.5 * (covariance.topLeftCorner<3, 3>() + covariance.topLeftCorner<3, 3>().transpose());
  if (!c.allFinite()) return std::numeric_limits<double>::quiet_NaN();
  const Eigen::SelfAdjointEigenSolver<Eigen::Matrix3d> eig(c, Eigen::EigenvaluesOnly);
  return std::sqrt(std::max(0.0, eig.eigenvalues().maxCoeff()));
}

}  // namespace ndtcu
