// The Python module: The initial pose search: InitialPoseResult and find_initial_pose.
#include "common.hpp"

#include <ndtcu/pose_covariance.hpp>

using namespace nb::literals;

namespace ndtcu::python {

void define_initial_pose(nb::module_& m) {
  nb::class_<InitialPoseResult>(m, "InitialPoseResult", "What find_initial_pose found; names as `ndtcu initpose --json`.")
      .def_ro("best", &InitialPoseResult::best, "the winning AlignResult")
      .def_prop_ro("xyzrpy", [](const InitialPoseResult& r) { return Eigen::VectorXd(r.best.pose); })
      .def_prop_ro("transform", [](const InitialPoseResult& r) { return Eigen::Matrix4d(r.best.transform); })
      .def_prop_ro("nvtl", [](const InitialPoseResult& r) { return r.best.nvtl; })
      .def_prop_ro("tp", [](const InitialPoseResult& r) { return r.best.tp; })
      .def_prop_ro("score", [](const InitialPoseResult& r) { return r.best.score; })
      .def_prop_ro("converged", [](const InitialPoseResult& r) { return r.best.converged; })
      .def_prop_ro("iterations", [](const InitialPoseResult& r) { return r.best.iterations; })
      .def_ro("hypotheses_aligned", &InitialPoseResult::hypotheses_aligned)
      .def_ro("screened_hypotheses", &InitialPoseResult::screened_hypotheses)
      .def_ro("coarse_hypotheses", &InitialPoseResult::coarse_hypotheses)
      .def_ro("refined_hypotheses", &InitialPoseResult::refined_hypotheses)
      .def_ro("time_ms", &InitialPoseResult::time_ms)
      .def_ro("screen_ms", &InitialPoseResult::screen_ms)
      .def_ro("coarse_ms", &InitialPoseResult::coarse_ms)
      .def_ro("refine_ms", &InitialPoseResult::refine_ms)
      .def_ro("has_rival", &InitialPoseResult::has_rival)
      .def_prop_ro("ambiguity_nvtl",
                   [](const InitialPoseResult& r) -> std::optional<double> {
                     if (!r.has_rival) return std::nullopt;
                     return r.ambiguity_nvtl;
                   })
      .def_prop_ro("rival_xyzrpy",
                   [](const InitialPoseResult& r) -> std::optional<Eigen::VectorXd> {
                     if (!r.has_rival) return std::nullopt;
                     return Eigen::VectorXd(r.rival_pose);
                   })
      .def_ro("ambiguous", &InitialPoseResult::ambiguous)
      .def_ro("leveled_from_ground", &InitialPoseResult::leveled)
      .def(
          "verdict",
          [](const InitialPoseResult& r, double nvtl_threshold) { return std::string(to_string(verdict(r, nvtl_threshold))); },
          "nvtl_threshold"_a = 2.3,
          "'found', 'ambiguous', 'below_threshold', 'not_converged', 'no_overlap' or 'low_overlap'");

  m.def(
      "find_initial_pose",
      [](PyAligner& aligner, nb::handle scan, nb::handle around, double radius, double position_step,
         double yaw_range_deg, double yaw_step_deg, int coarse_iterations, int refine_count, bool level_from_ground) {
        CloudArg c(scan, "scan");
        nb::ndarray<> g;
        // A (6,) pose is used as given (as `ndtcu initpose --around` does); a 4x4 is converted.
        const Pose6 a = nb::try_cast(around, g, false) && g.ndim() == 1
                            ? guesses_arg(around.attr("reshape")(1, -1), "around").front()
                            : matrix_to_pose(matrix_arg(around, "around"));
        InitialPoseOptions o;
        o.radius = radius;
        o.position_step = position_step;
        o.yaw_range_deg = yaw_range_deg;
        o.yaw_step_deg = yaw_step_deg;
        o.coarse_iterations = coarse_iterations;
        o.refine_count = refine_count;
        o.level_from_ground = level_from_ground;
        Working working(aligner.mutex);
        InitialPoseResult r = find_initial_pose(aligner, c.view(), a, o);
        attach_pose_covariance(aligner, c.view(), r.best);  // AlignSettings.pose_covariance
        return r;
      },
      "aligner"_a, "scan"_a, "around"_a, "radius"_a = 2.0, "position_step"_a = 1.0, "yaw_range_deg"_a = 360.0,
      "yaw_step_deg"_a = 15.0, "coarse_iterations"_a = 5, "refine_count"_a = 32, "level_from_ground"_a = false,
      "Sweeps positions within `radius` of `around` (a 4x4 transform or a (6,) pose) and yaws, coarse to fine (see "
      "ndtcu/initial_pose.hpp); the aligner must have a target. A sweep of more than 100,000 hypotheses is refused "
      "(ndtcu.Error naming the count, the values and the limit) before anything is built. An array is not copied "
      "(the coarse pass thins it into a few hundred points of its own).");
}

}  // namespace ndtcu::python
