// Localizability of an alignment from its Hessian (see include/ndtcu/localizability.hpp).
#include <ndtcu/localizability.hpp>

#include "ndt_derivatives.hpp"

#include <Eigen/Cholesky>
#include <Eigen/Eigenvalues>

#include <cmath>
#include <limits>

namespace ndtcu {

Localizability analyze_localizability(const Eigen::Matrix<double, 6, 6>& hessian,
                                      const Eigen::Matrix<double, 6, 6>& metric, double ratio) {
  Localizability out;
  if (!hessian.allFinite() || hessian.isZero(0.0) || !metric.allFinite()) return out;
  // The sums are symmetric; the mirror removes their rounding.
  const Eigen::Matrix<double, 6, 6> info = -0.5 * (hessian + hessian.transpose());
  Eigen::Matrix<double, 6, 6> g = 0.5 * (metric + metric.transpose());
  if (Eigen::LLT<Eigen::Matrix<double, 6, 6>>(g).info() != Eigen::Success) {
    g.bottomRightCorner<3, 3>().diagonal().array() += 1e-6;
  }
  // -H d = lambda G d; the solver normalizes d' G d = 1 (1 m RMS of point motion).
  const Eigen::GeneralizedSelfAdjointEigenSolver<Eigen::Matrix<double, 6, 6>> eig(info, g);
  if (eig.info() != Eigen::Success || !eig.eigenvalues().allFinite()) return out;
  out.valid = true;
  out.eigenvalues = eig.eigenvalues();  // ascending
  out.directions = eig.eigenvectors();
  const double largest = out.eigenvalues(5), smallest = out.eigenvalues(0);
  if (smallest > 0.0) {
    out.condition = largest / smallest;
    out.weakest_ratio = smallest / largest;
  } else {
    out.condition = std::numeric_limits<double>::infinity();
  }
  // Non-positive eigenvalues are weak whatever the ratio (the limit is 0 when even the
  // largest is not above zero, so all six are then weak).
  const double limit = largest > 0.0 ? ratio * largest : 0.0;
  for (int i = 0; i < 6; ++i) out.weak += !(out.eigenvalues(i) > limit) || !(out.eigenvalues(i) > 0.0) ? 1 : 0;
  out.degenerate = out.weak > 0;
  return out;
}

PointMoments point_moments(const Eigen::Vector3f* points, std::size_t count) {
  PointMoments m;
  if (count == 0) return m;
  for (std::size_t i = 0; i < count; ++i) {
    const Eigen::Vector3d x = points[i].cast<double>();
    m.mean += x;
    m.second.noalias() += x * x.transpose();
  }
  m.mean /= static_cast<double>(count);
  m.second /= static_cast<double>(count);
  return m;
}

Eigen::Matrix<double, 6, 6> displacement_metric(const Eigen::Matrix<double, 6, 1>& pose, const PointMoments& m) {
  // The rotation columns of the point Jacobian (eq. 6.18, as point_jacobian fills them) are
  // linear in the point: J_k(x) = A_k x, with A_k's rows the angular terms of eq. 6.19.
  const math::AngularTerms<double> a = math::angular_terms(pose(3), pose(4), pose(5));
  const auto row = [&a](int r) { return Eigen::RowVector3d(a.j[r][0], a.j[r][1], a.j[r][2]); };
  Eigen::Matrix3d A[3];
  A[0] << Eigen::RowVector3d::Zero(), row(0), row(1);
  A[1] << row(2), row(3), row(4);
  A[2] << row(5), row(6), row(7);
  Eigen::Matrix<double, 6, 6> g = Eigen::Matrix<double, 6, 6>::Zero();
  g.topLeftCorner<3, 3>().setIdentity();  // E[I' I]
  for (int k = 0; k < 3; ++k) {
    const Eigen::Vector3d t = A[k] * m.mean;  // E[I' A_k x]
    g.block<3, 1>(0, 3 + k) = t;
    g.block<1, 3>(3 + k, 0) = t.transpose();
    for (int j = 0; j <= k; ++j) {
      const double v = (A[j].transpose() * A[k] * m.second).trace();  // E[x' A_j' A_k x]
      g(3 + j, 3 + k) = v;
      g(3 + k, 3 + j) = v;
    }
  }
  return g;
}

}  // namespace ndtcu
