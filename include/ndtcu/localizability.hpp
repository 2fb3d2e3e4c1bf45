#pragma once
/// \file
/// How well a scan pins each direction of its pose: the eigen-structure of the NDT score's
/// Hessian at the result, translation and rotation made comparable.
///
/// The score's negative Hessian -H is the information the scan holds about the pose (its
/// inverse is the Laplace covariance). Its entries mix metres and radians, so directions
/// are measured by how far they move the scan's points: a pose change d moves point x by
/// J(x) d (the point Jacobian, eq. 6.18 of Magnusson 2009), and the mean of |J(x) d|^2 over
/// the source points is d' G d with G = E[J(x)' J(x)], the displacement metric (identity
/// in translation; a rotation's share grows with the points' distance from its axis, so a
/// turn about a narrow field of view's boresight or about a tunnel's axis is measured by
/// the little it moves them). The analysis solves -H d = lambda G d: lambda is the
/// information along d per square metre of RMS point motion. In a scene that held the
/// points equally well in every direction the six would be about equal; a direction whose
/// eigenvalue is a small share of the largest is one the scan barely constrains (a
/// corridor's axis, a flat open place's plane, the yaw of a scan of a round room): the
/// Newton method can slide along it to a pose that scores as well as the right one (Zhang,
/// Kaess and Singh, ICRA 2016, "On degeneracy of optimization-based state estimation
/// problems").
///
/// An NDT map never leaves a direction with no curvature at all: a voxel of a flat wall is
/// a Gaussian about 0.58 m wide along the wall (a 2 m voxel) and, with the eigenvalue floor
/// of 0.01, a tenth of that across it, so sliding along the wall still costs about 0.01 of
/// what moving into it does, with a false optimum at every voxel. A direction held by such
/// in-plane curvature alone scores 0.01 or more of the strongest, not zero (0.03 along the
/// simulator's walled road; 0.15 along its 4 m by 3 m tunnel, where a 2 m voxel holds a
/// wall and the floor at once).

#include <Eigen/Core>

#include <cstddef>

namespace ndtcu {

/// A direction is weak when its eigenvalue is below this share of the largest: its
/// standard deviation is then more than 10 times the best-held direction's. This is the
/// Hessian's own account, and NDT makes it an optimistic one (see the file comment):
/// measured with the displacement metric (BENCHMARK.md, "Localizability"), correct
/// alignments of real scans reach down to 0.009 (the Livox Avia set; BALM's Ouster 0.08),
/// while the simulator's walled road holds its axis at 0.03, its tunnel at 0.15 and an
/// open lot its plane at 0.012. No ratio separates them, so a localizer must not take this
/// flag as the verdict: Localizer probes the score along the directions instead
/// (LocalizerSettings::degeneracy_probe_m).
inline constexpr double kDegenerateEigenvalueRatio = 0.01;

/// How well each direction of a pose is constrained (see the file comment).
struct Localizability {
  /// False when there is nothing to analyse (no Hessian: an empty scan, no voxel, no
  /// correspondence) or the Hessian has a non-finite entry; every other field is then zero.
  bool valid = false;
  /// Eigenvalues of -H d = lambda G d, ascending (the score's curvature per square metre of
  /// RMS point motion). One at or below zero is a direction along which the score does not
  /// fall off at all (not a maximum there).
  Eigen::Matrix<double, 6, 1> eigenvalues = Eigen::Matrix<double, 6, 1>::Zero();
  /// Column i: the pose change [dx dy dz droll dpitch dyaw] (m, rad) of eigenvalues(i),
  /// scaled to move the points by 1 m RMS (d' G d = 1; its sign is arbitrary). Column 0 is
  /// the weakest direction.
  Eigen::Matrix<double, 6, 6> directions = Eigen::Matrix<double, 6, 6>::Zero();
  /// Largest eigenvalue over smallest; infinity when the smallest is not above zero.
  double condition = 0.0;
  /// Smallest eigenvalue over the largest (0 when the smallest is not above zero).
  double weakest_ratio = 0.0;
  /// Directions whose eigenvalue is below ratio x the largest (columns 0 .. weak - 1).
  int weak = 0;
  /// True when at least one direction is weak (the Hessian's view; see
  /// kDegenerateEigenvalueRatio).
  bool degenerate = false;
};

/// The mean and second moment of a cloud's points about its origin (what the
/// displacement metric needs of them: one pass over the points).
struct PointMoments {
  Eigen::Vector3d mean = Eigen::Vector3d::Zero();      ///< E[x] (m)
  Eigen::Matrix3d second = Eigen::Matrix3d::Zero();    ///< E[x x'] (m^2)
};

/// The moments of `count` float points (zero for none), in double.
PointMoments point_moments(const Eigen::Vector3f* points, std::size_t count);

/// G = E[J(x)' J(x)] at `pose` for points of moments `m` (see the file comment): the
/// identity in translation, E[A_k x] in the translation-rotation block and
/// trace(A_j' A_k E[x x']) in the rotation block, where J(x)'s rotation column k is A_k x
/// (the angular terms the derivatives use).
Eigen::Matrix<double, 6, 6> displacement_metric(const Eigen::Matrix<double, 6, 1>& pose, const PointMoments& m);

/// The analysis of a score Hessian `hessian` ([x y z roll pitch yaw], maximised score)
/// under the displacement metric `metric`, directions weak below `ratio` x the largest
/// eigenvalue. A metric that is not positive definite (a scan of one point: no turn about
/// it moves it) is made so with 1e-6 m^2 per rad^2 added to its rotation diagonal.
Localizability analyze_localizability(const Eigen::Matrix<double, 6, 6>& hessian,
                                      const Eigen::Matrix<double, 6, 6>& metric,
                                      double ratio = kDegenerateEigenvalueRatio);

}  // namespace ndtcu
