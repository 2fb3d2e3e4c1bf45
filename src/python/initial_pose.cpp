// The Python module: The initial pose search: InitialPoseResult, find_initial_pose and the
// global search (InitialPoseSearch).
#include "common.hpp"

#include <ndtcu/global_search.hpp>
#include <ndtcu/pose_covariance.hpp>

#include <nanobind/stl/vector.h>

using namespace nb::literals;

namespace ndtcu::python {

// A search's `around`: a (6,) pose used as given (as `ndtcu initpose --around` takes it), or
// a 4x4 transform converted.
static Pose6 around_arg(nb::handle around) {
  nb::ndarray<> g;
  return nb::try_cast(around, g, false) && g.ndim() == 1 ? guesses_arg(around.attr("reshape")(1, -1), "around").front()
                                                         : matrix_to_pose(matrix_arg(around, "around"));
}

// An InitialPoseSearch with the PyAligner it searches (kept alive by the Python object).
struct PyInitialPoseSearch {
  PyAligner* aligner;
  InitialPoseSearch search;
  PyAligner* fine = nullptr;  // InitialPoseSearch::set_fine's, kept alive as well
};

void define_initial_pose(nb::module_& m) {
  nb::class_<PoseCandidate>(m, "PoseCandidate", "One refined place of a search (InitialPoseResult.candidates).")
      .def_prop_ro("xyzrpy", [](const PoseCandidate& c) { return Eigen::VectorXd(c.pose); })
      .def_ro("nvtl", &PoseCandidate::nvtl)
      .def_ro("overlap", &PoseCandidate::overlap, "share of the scan's points that met a voxel")
      .def_ro("converged", &PoseCandidate::converged)
      .def_ro("distance", &PoseCandidate::distance, "m from the best candidate")
      .def_ro("angle_deg", &PoseCandidate::angle_deg, "deg from the best candidate")
      .def_ro("distinct", &PoseCandidate::distinct, "a place distinct from the best's");
  nb::class_<GlobalSearchStats>(m, "GlobalSearchStats", "What a global search's branch and bound did.")
      .def_ro("cell", &GlobalSearchStats::cell, "leaf step and pyramid cell (m)")
      .def_ro("points", &GlobalSearchStats::points)
      .def_ro("yaws", &GlobalSearchStats::yaws)
      .def_ro("yaw_step_deg", &GlobalSearchStats::yaw_step_deg)
      .def_ro("tilts", &GlobalSearchStats::tilts, "roll-pitch attitudes per yaw (1: 4-DoF)")
      .def_ro("levels", &GlobalSearchStats::levels)
      .def_ro("top_nodes", &GlobalSearchStats::top_nodes)
      .def_ro("nodes_scored", &GlobalSearchStats::nodes_scored)
      .def_ro("leaves_scored", &GlobalSearchStats::leaves_scored)
      .def_ro("brute_force_leaves", &GlobalSearchStats::brute_force_leaves)
      .def_ro("batches", &GlobalSearchStats::batches)
      .def_ro("standing", &GlobalSearchStats::standing)
      .def_ro("sensor_height", &GlobalSearchStats::sensor_height)
      .def_ro("truncated", &GlobalSearchStats::truncated)
      .def_ro("bound_ms", &GlobalSearchStats::bound_ms)
      .def_ro("align_ms", &GlobalSearchStats::align_ms);
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
      .def_ro("candidates", &InitialPoseResult::candidates, "the refined places, best first (PoseCandidate)")
      .def_ro("refined", &InitialPoseResult::refined, "the pose is the finer map's (InitialPoseSearch's `fine`)")
      .def_ro("refinement_m", &InitialPoseResult::refinement_m, "how far the finer map's alignment moved the pose (m)")
      .def_ro("search", &InitialPoseResult::global, "the global search's counts and times (GlobalSearchStats)")
      .def(
          "verdict",
          [](const InitialPoseResult& r, double nvtl_threshold) { return std::string(to_string(verdict(r, nvtl_threshold))); },
          "nvtl_threshold"_a = 2.3,
          "'found', 'ambiguous', 'below_threshold', 'not_converged', 'no_overlap' or 'low_overlap'")
      .def(
          "status",
          [](const InitialPoseResult& r, double nvtl_threshold) {
            return std::string(found_state(verdict(r, nvtl_threshold)));
          },
          "nvtl_threshold"_a = 2.3, "'found', 'ambiguous' or 'not_found' (every other verdict)");

  m.def(
      "find_initial_pose",
      [](PyAligner& aligner, nb::handle scan, nb::handle around, double radius, double position_step,
         double yaw_range_deg, double yaw_step_deg, int coarse_iterations, int refine_count, bool level_from_ground) {
        CloudArg c(scan, "scan");
        const Pose6 a = around_arg(around);
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

  nb::class_<PyInitialPoseSearch>(m, "InitialPoseSearch",
                                  "Global localization: the scan's pose anywhere in the aligner's map, with no pose "
                                  "(see ndtcu/global_search.hpp). Builds the map's pyramid once; the aligner must have "
                                  "its target and is kept alive by the search.")
      .def(
          "__init__",
          [](PyInitialPoseSearch* self, PyAligner& aligner, double cell, std::size_t candidates, std::size_t points,
             double yaw_step_deg, double prune_ratio, bool standing, double tilt_deg, double tilt_step_deg,
             PyAligner* fine) {
            if (fine == &aligner) throw Error("InitialPoseSearch: `fine` must be another Aligner (the map at a finer resolution)");
            if (fine && !fine->has_target()) throw Error("InitialPoseSearch: the `fine` aligner has no map (set_target first)");
            GlobalSearchOptions o;
            o.cell = cell;
            o.candidates = candidates;
            o.points = points;
            o.yaw_step_deg = yaw_step_deg;
            o.prune_ratio = prune_ratio;
            o.standing = standing;
            o.tilt_deg = tilt_deg;
            o.tilt_step_deg = tilt_step_deg;
            Working working(aligner.mutex);
            new (self) PyInitialPoseSearch{&aligner, InitialPoseSearch(aligner, o), fine};
            self->search.set_fine(fine);
          },
          // The keywords' defaults are the library's (GlobalSearchOptions{}).
          "aligner"_a, "cell"_a = GlobalSearchOptions{}.cell, "candidates"_a = GlobalSearchOptions{}.candidates,
          "points"_a = GlobalSearchOptions{}.points, "yaw_step_deg"_a = GlobalSearchOptions{}.yaw_step_deg,
          "prune_ratio"_a = GlobalSearchOptions{}.prune_ratio, "standing"_a = GlobalSearchOptions{}.standing,
          "tilt_deg"_a = GlobalSearchOptions{}.tilt_deg, "tilt_step_deg"_a = GlobalSearchOptions{}.tilt_step_deg,
          "fine"_a = nb::none(), nb::keep_alive<1, 2>(), nb::keep_alive<1, 11>(),
          "`cell` 0 chooses 1 m or, on a large map, 2 m (ndtcu/global_search.hpp); `fine`: an Aligner of the same map "
          "at a finer resolution (e.g. half) that polishes the found pose (InitialPoseResult.refined).")
      .def(
          "find",
          [](PyInitialPoseSearch& s, nb::handle scan, std::optional<Eigen::Vector3d> up, nb::handle around,
             std::optional<double> radius) {
            CloudArg c(scan, "scan");
            GlobalSearchQuery q;
            q.up = up;
            if (!around.is_none()) {
              q.around = around_arg(around);
              if (!radius) throw Error("InitialPoseSearch.find: `around` needs a `radius` (m)");
              q.radius = *radius;
            }
            Working working(s.aligner->mutex);
            std::unique_lock<std::mutex> fine_lock;
            if (s.fine) fine_lock = std::unique_lock<std::mutex>(s.fine->mutex);
            InitialPoseResult r = s.search.find(c.view(), q);
            attach_pose_covariance(*s.aligner, c.view(), r.best);  // AlignSettings.pose_covariance
            return r;
          },
          "scan"_a, "up"_a = nb::none(), "around"_a = nb::none(), "radius"_a = nb::none(),
          "The scan's pose anywhere in the map (or within `radius` m of `around`, a 4x4 or a (6,) pose); `up` is the "
          "scan's up direction (an IMU's gravity reversed; default: its ground plane's normal). Returns an "
          "InitialPoseResult: .status() is 'found', 'ambiguous' or 'not_found', .candidates the places ranked.")
      .def_prop_ro("build_ms", [](const PyInitialPoseSearch& s) { return s.search.build_ms(); })
      .def_prop_ro("memory_bytes", [](const PyInitialPoseSearch& s) { return s.search.memory_bytes(); });
}

}  // namespace ndtcu::python
