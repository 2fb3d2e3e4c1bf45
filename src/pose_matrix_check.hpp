#pragma once
// The check every 6x6 matrix over a pose [x y z roll pitch yaw] that a caller hands in
// must pass (a prior's information, a prediction's covariance).
#include <Eigen/Core>

#include <string>

namespace ndtcu::detail {

/// Throws Error "WHAT has an entry that is not finite", "WHAT is not symmetric (x,y is a,
/// y,x is b)" (beyond 1e-9 of the largest entry) or "WHAT is not positive semi-definite
/// (eigenvalue e)" (below -1e-9 of the largest entry).
void check_pose_matrix(const Eigen::Matrix<double, 6, 6>& m, const std::string& what);

}  // namespace ndtcu::detail
