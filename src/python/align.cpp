// The Python module: AlignResult (its fields from ndtcu/fields.hpp) and the Aligner.
#include "common.hpp"

#include <ndtcu/pose_covariance.hpp>

using namespace nb::literals;

namespace ndtcu::python {

namespace {

// One field of every score, `field(score)`, as a (K,) NumPy array that owns its copy.
template <typename T, typename Field>
nb::object score_column(const std::vector<PoseScore>& scores, Field field) {
  auto* buf = new T[scores.size()];
  for (std::size_t k = 0; k < scores.size(); ++k) buf[k] = static_cast<T>(field(scores[k]));
  nb::capsule owner(buf, [](void* p) noexcept { delete[] static_cast<T*>(p); });
  return nb::cast(nb::ndarray<nb::numpy, T, nb::ndim<1>>(buf, {scores.size()}, owner), nb::rv_policy::move);
}

}  // namespace

void def_result_fields(nb::class_<AlignResult>& cls) {
  visit_fields<AlignResult>([&](const auto& f) {
    using T = typename std::decay_t<decltype(f)>::Type;
    auto member = f.member;
    if constexpr (std::is_enum_v<T>) {
      cls.def_prop_ro(f.name, [member](const AlignResult& r) { return std::string(to_string(r.*member)); }, f.doc);
    } else if constexpr (std::is_base_of_v<Eigen::MatrixBase<T>, T>) {
      cls.def_prop_ro(f.name, [member](const AlignResult& r) { return T(r.*member); }, f.doc);
    } else {
      cls.def_ro(f.name, f.member, f.doc);
    }
  });
}

void define_align_result(nb::module_& m) {
  auto result = nb::class_<AlignResult>(m, "AlignResult", "One alignment; field names as `ndtcu align --json`.");
  def_result_fields(result);
  result
      .def_prop_ro("localizability", [](const AlignResult& r) { return localizability_dict(r.localizability); },
                   "How well the scan constrains each direction (ndtcu/localizability.hpp): eigenvalues "
                   "ascending, directions one row per eigenvalue (the pose change [x y z roll pitch yaw] moving the points 1 m RMS), degenerate")
      .def_prop_ro("degenerate", [](const AlignResult& r) { return r.localizability.degenerate; })
      .def_prop_ro("time_ms", [](const AlignResult& r) { return r.timings.total_ms; })
      .def_prop_ro("per_iteration_ms", [](const AlignResult& r) { return r.timings.per_iteration_ms; })
      .def_prop_ro("evaluations", [](const AlignResult& r) { return r.timings.evaluations; })
      .def_prop_ro("trace", &trace_list)
      .def_prop_ro("covariance_ms", [](const AlignResult& r) { return r.timings.covariance_ms; })
      .def("to_dict", &result_dict, "The fields as a dict (the JSON object's names)")
      .def("__repr__", [](const AlignResult& r) {
        return "AlignResult(xyzrpy=[" + std::to_string(r.pose(0)) + ", " + std::to_string(r.pose(1)) + ", " +
               std::to_string(r.pose(2)) + ", " + std::to_string(r.pose(3)) + ", " + std::to_string(r.pose(4)) + ", " +
               std::to_string(r.pose(5)) + "], converged=" + (r.converged ? "True" : "False") +
               ", iterations=" + std::to_string(r.iterations) + ", nvtl=" + std::to_string(r.nvtl) + ")";
      });
}

void define_aligner(nb::module_& m) {
  nb::class_<PyAligner>(m, "Aligner", "Aligns scans to one target; holds the map and the worker threads.")
      .def(
          "__init__",
          [](PyAligner* self, std::optional<AlignSettings> settings, std::optional<ExecutionOptions> execution,
             const nb::kwargs& kwargs) {
            const auto [s, e] = apply_kwargs(settings.value_or(autoware_preset()),
                                             execution.value_or(ExecutionOptions{}), kwargs, "Aligner");
            new (self) PyAligner(s, e);
          },
          "settings"_a = nb::none(), "execution"_a = nb::none(), "kwargs"_a,
          "Settings from `settings` (default: the autoware preset) and how it runs from `execution` (default: "
          "ExecutionOptions()), with keyword overrides of either, e.g. Aligner(resolution=1.0, backend='cpu').")
      .def_prop_ro("settings", [](const PyAligner& a) { return a.settings(); }, "the settings in use (a copy)")
      .def_prop_ro("execution", [](const PyAligner& a) { return a.execution(); },
                   "how it runs (ExecutionOptions, a copy): the backend asked for, threads, device, gpu_loop")
      .def_prop_ro("backend", [](const PyAligner& a) { return std::string(to_string(a.backend())); })
      .def(
          "set_target",
          [](PyAligner& a, nb::handle target) {
            if (nb::isinstance<VoxelMap>(target)) {
              auto map = nb::cast<std::shared_ptr<VoxelMap>>(target);
              Working working(a.mutex);
              a.set_target(std::shared_ptr<const VoxelMap>(map));
              return;
            }
            CloudArg c(target, "target");
            Working working(a.mutex);
            a.set_target(c.view());
          },
          "target"_a,
          "Builds the target map from a PointCloud or float32 (N, 3) array (read where it lies, not copied), or uses a "
          "VoxelMap.")
      .def_prop_ro("target",
                   [](PyAligner& a) {
                     std::shared_ptr<const VoxelMap> t;
                     {
                       Working working(a.mutex);
                       t = a.target();
                     }
                     return std::const_pointer_cast<VoxelMap>(t);
                   })
      .def(
          "align",
          [](PyAligner& a, nb::handle source, nb::handle guess) {
            CloudArg c(source, "source");
            nb::ndarray<> g;
            if (!guess.is_none() && nb::try_cast(guess, g, false) && g.ndim() == 1) {
              // A pose [x y z roll pitch yaw], used as given (Aligner::align_from_pose), as
              // `ndtcu align --init` does.
              const std::vector<Pose6> p = guesses_arg(guess.attr("reshape")(1, -1), "guess");
              Working working(a.mutex);
              AlignResult r = a.align_from_pose(c.view(), p.front());
              attach_pose_covariance(a, c.view(), r);  // AlignSettings.pose_covariance
              return r;
            }
            const Eigen::Matrix4d m = guess.is_none() ? Eigen::Matrix4d::Identity() : matrix_arg(guess, "guess");
            Working working(a.mutex);
            AlignResult r = a.align(c.view(), m);
            attach_pose_covariance(a, c.view(), r);
            return r;
          },
          "source"_a, "guess"_a = nb::none(),
          "Aligns `source` from `guess`: a 4x4 float64 transform (identity by default) or a (6,) float64 pose "
          "[x y z roll pitch yaw] used as given. A float32 (N, 3) array is read where it lies, not copied.")
      .def(
          "evaluate",
          [](PyAligner& a, nb::handle source, nb::handle transform) {
            CloudArg c(source, "source");
            const Eigen::Matrix4d t = matrix_arg(transform, "transform");
            Working working(a.mutex);
            return a.evaluate(c.view(), t);
          },
          "source"_a, "transform"_a, "Scores `source` at a fixed 4x4 pose, without iterating (an array is not copied).")
      .def(
          "score_batch",
          [](PyAligner& a, nb::handle source, nb::handle poses) {
            CloudArg c(source, "source");
            const std::vector<Pose6> p = guesses_arg(poses, "poses");
            std::vector<PoseScore> s;
            {
              Working working(a.mutex);
              s = a.score_batch(c.view(), p);
            }
            nb::dict out;
            out["score"] = score_column<double>(s, [](const PoseScore& r) { return r.score; });
            out["nvtl"] = score_column<double>(s, [](const PoseScore& r) { return r.nvtl; });
            out["correspondences"] =
                score_column<std::uint64_t>(s, [](const PoseScore& r) { return r.correspondences; });
            out["matched_points"] = score_column<std::uint64_t>(s, [](const PoseScore& r) { return r.matched_points; });
            return out;
          },
          "source"_a, "poses"_a,
          "Scores `source` at K fixed poses ((K, 6) poses or (K, 4, 4) transforms) without iterating or taking "
          "derivatives, for screening many poses: a dict of (K,) arrays 'score' and 'nvtl' (float64), "
          "'correspondences' and 'matched_points' (uint64), with the bits evaluate() gives at each pose.")
      .def(
          "align_batch",
          [](PyAligner& a, nb::handle source, nb::handle guesses, bool trace, int max_iterations) {
            CloudArg c(source, "source");
            const std::vector<Pose6> g = guesses_arg(guesses, "guesses");
            BatchOptions o;
            o.trace = trace;
            o.max_iterations = max_iterations;
            Working working(a.mutex);
            std::vector<AlignResult> r = a.align_batch(c.view(), g, o);
            attach_pose_covariance(a, c.view(), r);
            return r;
          },
          "source"_a, "guesses"_a, "trace"_a = false, "max_iterations"_a = 0,
          "Aligns K hypotheses of one scan as one batch; guesses (K, 4, 4) transforms or (K, 6) poses. Each result "
          "has the bits of align() from that guess. An array is not copied.");
}

}  // namespace ndtcu::python
