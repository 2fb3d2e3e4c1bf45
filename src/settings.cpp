#include <ndtcu/error.hpp>
#include <ndtcu/fields.hpp>
#include <ndtcu/result.hpp>
#include <ndtcu/settings.hpp>
#include <ndtcu/text.hpp>

#include "pose_matrix_check.hpp"

#include <Eigen/Eigenvalues>

#include <fmt/format.h>

#include <cmath>
#include <string>

namespace ndtcu {

AlignSettings autoware_preset() { return AlignSettings{}; }

AlignSettings pcl_preset() {
  AlignSettings s;
  s.resolution = 1.0;  // PCL's default (ndt.hpp constructor)
  s.step_size = 0.1;
  s.epsilon = 0.01;
  s.max_iterations = 35;
  s.search = SearchMethod::Radius;
  s.line_search = LineSearch::MoreThuente;
  s.convergence = ConvergenceRule::Pcl;
  s.covariance = CovarianceMode::Pcl;
  return s;
}

AlignSettings preset(const std::string& name) {
  if (name == "autoware") return autoware_preset();
  if (name == "pcl") return pcl_preset();
  throw Error("unknown preset '" + name + "' (expected autoware or pcl)");
}

const char* to_string(SearchMethod m) {
  switch (m) {
    case SearchMethod::Radius: return "radius";
    case SearchMethod::Direct27: return "direct27";
    case SearchMethod::Direct7: return "direct7";
    case SearchMethod::Direct1: return "direct1";
  }
  return "?";
}
const char* to_string(LineSearch l) { return l == LineSearch::MoreThuente ? "more-thuente" : "fixed"; }
const char* to_string(ConvergenceRule c) { return c == ConvergenceRule::Pcl ? "pcl" : "autoware"; }
const char* to_string(NewtonDirection d) { return d == NewtonDirection::Pcl ? "pcl" : "saddle-free"; }
const char* to_string(CovarianceMode c) { return c == CovarianceMode::Pcl ? "pcl" : "autoware"; }
const char* to_string(Backend b) { return b == Backend::Cpu ? "cpu" : b == Backend::Cuda ? "cuda" : "auto"; }
const char* to_string(GpuNewtonLoop l) { return l == GpuNewtonLoop::Device ? "device" : "host"; }
const char* to_string(PoseCovariance c) {
  switch (c) {
    case PoseCovariance::None: return "none";
    case PoseCovariance::Laplace: return "laplace";
    case PoseCovariance::MultiNdt: return "multi-ndt";
    case PoseCovariance::MultiNdtScore: return "multi-ndt-score";
    case PoseCovariance::Sandwich: return "sandwich";
    case PoseCovariance::Calibrated: return "calibrated";
  }
  return "?";
}

const char* to_string(StopReason r) {
  switch (r) {
    case StopReason::Converged: return "converged";
    case StopReason::MaxIterations: return "max_iterations";
    case StopReason::EmptySource: return "empty_source";
    case StopReason::NoVoxels: return "no_voxels";
    case StopReason::NoCorrespondence: return "no_correspondence";
    case StopReason::SingularHessian: return "singular_hessian";
  }
  return "?";
}

SearchMethod search_method_from_string(const std::string& name) {
  return enum_from_name<SearchMethod>(name, "search method");
}
LineSearch line_search_from_string(const std::string& name) {
  return enum_from_name<LineSearch>(name, "line search");
}
NewtonDirection newton_direction_from_string(const std::string& name) {
  return enum_from_name<NewtonDirection>(name, "Newton direction");
}
ConvergenceRule convergence_rule_from_string(const std::string& name) {
  return enum_from_name<ConvergenceRule>(name, "convergence rule");
}
CovarianceMode covariance_mode_from_string(const std::string& name) {
  return enum_from_name<CovarianceMode>(name, "covariance mode");
}
Backend backend_from_string(const std::string& name) {
  return enum_from_name<Backend>(name, "backend");
}
GpuNewtonLoop gpu_loop_from_string(const std::string& name) {
  return enum_from_name<GpuNewtonLoop>(name, "GPU Newton loop");
}
PoseCovariance pose_covariance_from_string(const std::string& name) {
  return enum_from_name<PoseCovariance>(name, "pose covariance");
}

bool wants_device_loop(const AlignSettings& s, const ExecutionOptions& e) {
  return s.line_search == LineSearch::Fixed && s.newton_direction == NewtonDirection::Pcl &&
         e.gpu_loop == GpuNewtonLoop::Device;
}

void validate(const ExecutionOptions& e) {
  // Each number against its range in the one list of fields (ndtcu/fields.hpp).
  validate_ranges(e);
}

void validate(const AlignSettings& s) {
  // Each number against its range in the one list of fields (ndtcu/fields.hpp).
  validate_ranges(s);
  // Step lengths are kept in [epsilon / 2, step_size] (PCL's and Autoware's rule); with
  // epsilon / 2 above step_size that range is empty and every step would be epsilon / 2 long.
  if (s.epsilon > 2.0 * s.step_size) {
    throw Error("invalid settings: epsilon " + fmt::format("{}", s.epsilon) + " is more than twice step_size " +
                fmt::format("{}", s.step_size) + " (steps are kept in [epsilon / 2, step_size]); lower epsilon to " +
                fmt::format("{}", 2.0 * s.step_size) + " or less, or raise step_size");
  }
  if (std::string(to_string(s.pose_covariance)) == "?") {
    throw Error("invalid setting pose_covariance (must be none, laplace, multi-ndt, multi-ndt-score or sandwich): " +
                std::to_string(static_cast<int>(s.pose_covariance)));
  }
  validate(s.prior);
}

namespace detail {

void check_pose_matrix(const Eigen::Matrix<double, 6, 6>& m, const std::string& what) {
  if (!m.allFinite()) throw Error(what + " has an entry that is not finite");
  const double largest = m.cwiseAbs().maxCoeff();
  for (int i = 0; i < 6; ++i) {
    for (int j = i + 1; j < 6; ++j) {
      if (std::abs(m(i, j) - m(j, i)) > 1e-9 * largest) {
        throw Error(fmt::format("{} is not symmetric ({},{} is {}, {},{} is {})", what, kPoseEntryNames[i], kPoseEntryNames[j], m(i, j),
                                kPoseEntryNames[j], kPoseEntryNames[i], m(j, i)));
      }
    }
  }
  if (largest > 0.0) {
    const double lowest = Eigen::SelfAdjointEigenSolver<Eigen::Matrix<double, 6, 6>>(m).eigenvalues()(0);
    if (lowest < -1e-9 * largest) {
      throw Error(fmt::format("{} is not positive semi-definite (eigenvalue {})", what, lowest));
    }
  }
}

}  // namespace detail

void validate(const PosePrior& prior) {
  for (int i = 0; i < 6; ++i) {
    if (!std::isfinite(prior.pose(i))) {
      throw Error(fmt::format("invalid prior: pose {} is {} (must be finite)", kPoseEntryNames[i], prior.pose(i)));
    }
  }
  detail::check_pose_matrix(prior.information, "invalid prior: the information matrix");
  if (!(prior.regularization_scale_factor >= 0.0) || !std::isfinite(prior.regularization_scale_factor)) {
    throw Error(fmt::format("invalid prior: regularization_scale_factor {} (must be finite and >= 0)",
                            prior.regularization_scale_factor));
  }
}

}  // namespace ndtcu
