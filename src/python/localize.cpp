// The Python module: LocalizerSettings, LocalizationResult and the Localizer.
#include "common.hpp"

using namespace nb::literals;

namespace ndtcu::python {

void define_localizer_settings(nb::module_& m) {
  auto settings = nb::class_<LocalizerSettings>(m, "LocalizerSettings", "Localizer settings (ndtcu's LocalizerSettings).");
  settings.def(nb::init<>())
      .def_rw("align", &LocalizerSettings::align, "the NDT settings (AlignSettings)")
      .def("__copy__", [](const LocalizerSettings& s) { return s; })
      .def("__repr__", [](nb::handle self) {
        // Every field by name, as keywords Localizer(...) takes, then the NDT settings.
        return fields_repr<LocalizerSettings>(self, "LocalizerSettings", {"align"});
      });
  def_settings_fields(settings);

  nb::class_<LocalizationResult>(m, "LocalizationResult", "One frame of Localizer.localize.")
      .def_prop_ro("pose", [](const LocalizationResult& r) { return Eigen::Matrix4d(r.pose); }, "4x4 T_map_sensor")
      .def_prop_ro("xyzrpy", [](const LocalizationResult& r) { return Eigen::VectorXd(matrix_to_pose(r.pose)); })
      .def_ro("valid", &LocalizationResult::valid)
      .def_prop_ro("status", [](const LocalizationResult& r) { return std::string(to_string(r.status)); },
                   "'tracked', 'recovered', 'lost' or 'degenerate'")
      .def_ro("degenerate_directions", &LocalizationResult::degenerate_directions)
      .def_ro("probe_nvtl_drop", &LocalizationResult::probe_nvtl_drop)
      .def_ro("refined", &LocalizationResult::refined, "whether the pose is the refinement's (refine_ratio)")
      .def_ro("deskewed", &LocalizationResult::deskewed,
              "whether the scan's points were moved to its reference time (LocalizerSettings.deskew)")
      .def_prop_ro("deskew_motion", [](const LocalizationResult& r) { return std::string(to_string(r.deskew_motion)); },
                   "where the de-skew's motion came from: 'off' (not de-skewed), 'constant-velocity', 'odometry', 'imu'")
      .def_prop_ro("imu_coverage", [](const LocalizationResult& r) { return std::string(to_string(r.imu_coverage)); },
                   "with deskew 'imu': 'covered', or why the frame fell back to constant velocity ('gap', "
                   "'missing'); '' otherwise")
      .def_ro("deskew_passes", &LocalizationResult::deskew_passes,
              "re-de-skew passes run after the first alignment (LocalizerSettings.deskew_passes)")
      .def_ro("refinement_m", &LocalizationResult::refinement_m,
              "how far the refinement moved the accepted position (m; NaN when none ran)")
      .def_ro("refinement_support", &LocalizationResult::refinement_support,
              "the points the finer voxels held over those the accepted alignment's held (NaN when no refinement ran)")
      .def_prop_ro("weakest_direction",
                   [](const LocalizationResult& r) { return Eigen::VectorXd(r.weakest_direction); })
      .def_prop_ro("prediction", [](const LocalizationResult& r) { return Eigen::Matrix4d(r.prediction); })
      .def_prop_ro("prediction_covariance",
                   [](const LocalizationResult& r) { return Eigen::Matrix<double, 6, 6>(r.prediction_covariance); })
      .def_ro("mahalanobis2", &LocalizationResult::mahalanobis2)
      .def_prop_ro("decided_by", [](const LocalizationResult& r) { return std::string(to_string(r.decided_by)); },
                   "which check decided the frame")
      .def_ro("alignment", &LocalizationResult::alignment)
      .def_ro("attempts", &LocalizationResult::attempts)
      .def_ro("hypotheses", &LocalizationResult::hypotheses)
      .def_ro("screened", &LocalizationResult::screened)
      .def_prop_ro("stage", [](const LocalizationResult& r) { return std::string(to_string(r.stage)); })
      .def_ro("ambiguous", &LocalizationResult::ambiguous)
      .def_ro("ambiguity_nvtl", &LocalizationResult::ambiguity_nvtl)
      .def_ro("iterations_total", &LocalizationResult::iterations_total)
      .def_ro("evaluations", &LocalizationResult::evaluations)
      .def_ro("points_in", &LocalizationResult::points_in)
      .def_ro("points_used", &LocalizationResult::points_used)
      .def_ro("preprocess_ms", &LocalizationResult::preprocess_ms)
      .def_ro("align_ms", &LocalizationResult::align_ms)
      .def_prop_ro("covariance", [](const LocalizationResult& r) { return Eigen::Matrix<double, 6, 6>(r.covariance); })
      .def_prop_ro("covariance_term",
                   [](const LocalizationResult& r) { return std::string(to_string(r.covariance_term)); });
}

void define_localizer(nb::module_& m) {
  nb::class_<PyLocalizer>(m, "Localizer", "Tracks a sensor in a fixed map, one scan at a time.")
      .def(
          "__init__",
          [](PyLocalizer* self, std::optional<LocalizerSettings> settings, std::optional<ExecutionOptions> execution,
             const nb::kwargs& kwargs) {
            const auto [s, e] = apply_kwargs(settings.value_or(LocalizerSettings{}),
                                             execution.value_or(ExecutionOptions{}), kwargs, "Localizer");
            new (self) PyLocalizer(s, e);
          },
          "settings"_a = nb::none(), "execution"_a = nb::none(), "kwargs"_a,
          "Settings from `settings` (default: LocalizerSettings()) and how it runs from `execution` (default: "
          "ExecutionOptions()), with keyword overrides of either, e.g. Localizer(settings, backend='cpu').")
      .def_prop_ro("settings", [](const PyLocalizer& l) { return l.settings(); }, "the settings in use (a copy)")
      .def_prop_ro("execution", [](const PyLocalizer& l) { return l.execution(); },
                   "how it runs (ExecutionOptions, a copy)")
      .def_prop_ro("backend", [](const PyLocalizer& l) { return std::string(to_string(l.backend())); })
      .def(
          "set_map",
          [](PyLocalizer& l, nb::handle map) {
            if (nb::isinstance<VoxelMap>(map)) {
              auto v = nb::cast<std::shared_ptr<VoxelMap>>(map);
              Working working(l.mutex);
              l.set_map(std::shared_ptr<const VoxelMap>(v));
              return;
            }
            CloudArg c(map, "map");
            Working working(l.mutex);
            l.set_map(c.view());
          },
          "map"_a,
          "The map: a PointCloud, a float32 (N, 3) array (world frame; read where it lies, not copied) or a VoxelMap.")
      .def(
          "set_initial_pose",
          [](PyLocalizer& l, nb::handle pose) {
            const Eigen::Matrix4d p = matrix_arg(pose, "pose");
            Working working(l.mutex);
            l.set_initial_pose(p);
          },
          "pose"_a,
          "Starts tracking from the 4x4 T_map_sensor `pose`.")
      .def(
          "set_initial_region",
          [](PyLocalizer& l, nb::handle around, double radius, double yaw_range_deg) {
            const Eigen::Matrix4d a = matrix_arg(around, "around");
            Working working(l.mutex);
            l.set_initial_region(a, radius, yaw_range_deg);
          },
          "around"_a, "radius"_a, "yaw_range_deg"_a = 360.0,
          "Starts tracking with an initial pose search near `around` until a frame is accepted.")
      .def(
          "set_initial_global",
          [](PyLocalizer& l) {
            Working working(l.mutex);
            l.set_initial_global();
          },
          "Starts tracking with no pose: each frame searches the whole map (InitialPoseSearch) until one is "
          "accepted.")
      .def(
          "add_imu",
          [](PyLocalizer& l, double time, const std::vector<double>& angular_velocity,
             const std::vector<double>& linear_acceleration) {
            // Sequences of three (lists, tuples, arrays: the vector caster takes each).
            if (angular_velocity.size() != 3 || linear_acceleration.size() != 3) {
              throw nb::value_error("add_imu: angular_velocity and linear_acceleration take 3 numbers each");
            }
            ImuSample sample;
            sample.time = time;
            sample.angular_velocity = Eigen::Vector3d(angular_velocity.data());
            sample.linear_acceleration = Eigen::Vector3d(linear_acceleration.data());
            Working working(l.mutex);
            l.add_imu(sample);
          },
          "time"_a, "angular_velocity"_a, "linear_acceleration"_a = std::vector<double>{0.0, 0.0, 0.0},
          "One IMU sample for deskew 'imu' (and 'auto'): time (s, the scans' clock), angular velocity (rad/s) and "
          "linear acceleration (m/s^2) in the IMU's frame (Localizer::add_imu: out-of-order samples are dropped and "
          "counted; a non-finite value is an error naming it).")
      .def_prop_ro("imu_stats",
                   [](PyLocalizer& l) {
                     ImuStats s;
                     {
                       Working working(l.mutex);
                       s = l.imu_stats();
                     }
                     nb::dict d;  // with the GIL held again
                     d["added"] = s.added;
                     d["out_of_order"] = s.out_of_order;
                     d["held"] = s.held;
                     d["frames_covered"] = s.frames_covered;
                     d["frames_gap"] = s.frames_gap;
                     d["frames_missing"] = s.frames_missing;
                     return d;
                   },
                   "what the IMU buffer took and how it served the frames (a dict of counts)")
      .def_prop_ro("initialized",
                   [](PyLocalizer& l) {
                     Working working(l.mutex);
                     return l.initialized();
                   })
      .def_prop_ro("refines",
                   [](PyLocalizer& l) {
                     Working working(l.mutex);
                     return l.refines();
                   },
                   "whether valid frames are refined (refine_ratio, with a map given as points)")
      .def(
          "localize",
          [](PyLocalizer& l, nb::handle scan, double time, nb::handle prediction, nb::handle covariance,
             nb::handle sweep_motion, nb::handle sweep_motion_parts) {
            finite_arg(time, "time");
            CloudArg c(scan, "scan");
            if (prediction.is_none() != covariance.is_none()) {
              throw nb::value_error("localize: give prediction and covariance together");
            }
            // The sweep's motion only reaches a cloud with per-point times (an array has none).
            const auto six = [](nb::handle h, const std::string& what) {
              const auto v = nb::cast<std::vector<double>>(h);
              if (v.size() != 6) {
                throw nb::value_error(("localize: " + what + " must hold 6 numbers (vx, vy, vz in m/s, wx, wy, wz in "
                                       "rad/s, sensor frame), got " + std::to_string(v.size()))
                                          .c_str());
              }
              SweepMotion m;
              for (int i = 0; i < 3; ++i) {
                m.linear[i] = v[i];
                m.angular[i] = v[3 + i];
              }
              return m;
            };
            std::optional<SweepMotionParts> motion;
            if (!sweep_motion.is_none() && !sweep_motion_parts.is_none()) {
              throw nb::value_error("localize: give sweep_motion or sweep_motion_parts, not both");
            }
            if (!sweep_motion.is_none()) {
              motion = SweepMotionParts::whole(six(sweep_motion, "sweep_motion"));
            }
            if (!sweep_motion_parts.is_none()) {
              if (!nb::isinstance<nb::dict>(sweep_motion_parts)) {
                throw nb::value_error("localize: sweep_motion_parts must be a dict with 'begin', 'end' and 'motion'");
              }
              const nb::dict d = nb::borrow<nb::dict>(sweep_motion_parts);
              for (const char* key : {"begin", "end", "motion"}) {
                if (!d.contains(key)) {
                  throw nb::value_error((std::string("localize: sweep_motion_parts has no '") + key + "'").c_str());
                }
              }
              motion.emplace();
              motion->begin = nb::cast<std::vector<double>>(d["begin"]);
              motion->end = nb::cast<double>(d["end"]);
              std::size_t k = 0;
              for (nb::handle part : d["motion"]) {
                motion->motion.push_back(six(part, "sweep_motion_parts['motion'][" + std::to_string(k++) + "]"));
              }
            }
            if (prediction.is_none()) {
              Working working(l.mutex);
              if (c.given() && motion) return l.localize(*c.given(), time, *motion);
              return c.given() ? l.localize(*c.given(), time) : l.localize(c.view(), time);
            }
            const Eigen::Matrix4d p = matrix_arg(prediction, "prediction");
            const auto cov = nb::cast<Eigen::MatrixXd>(covariance);
            if (cov.rows() != 6 || cov.cols() != 6) throw nb::value_error("localize: covariance must be 6x6");
            for (Eigen::Index r = 0; r < 6; ++r) {
              for (Eigen::Index q = 0; q < 6; ++q) {
                if (!std::isfinite(cov(r, q))) {
                  throw nb::value_error(("covariance: non-finite value " + repr_text(cov(r, q)) + " at [" +
                                         std::to_string(r) + ", " + std::to_string(q) + "]")
                                            .c_str());
                }
              }
            }
            const Eigen::Matrix<double, 6, 6> c6 = cov;
            Working working(l.mutex);
            if (c.given() && motion) return l.localize(*c.given(), time, p, c6, *motion);
            if (c.given()) return l.localize(*c.given(), time, p, c6);
            const PointCloud filtered = l.preprocess(c.view());
            return l.localize_preprocessed(filtered, time, p, c6);
          },
          "scan"_a, "time"_a, "prediction"_a = nb::none(), "covariance"_a = nb::none(), "sweep_motion"_a = nb::none(),
          "sweep_motion_parts"_a = nb::none(),
          "Preprocesses and localizes one scan (sensor frame) taken at `time` (s, finite). The preprocessing crops and "
          "downsamples the scan into a new cloud; an array is read where it lies. With `prediction` (4x4 "
          "T_map_sensor, e.g. from odometry) and its 6x6 `covariance` ([x y z roll pitch yaw]), they replace the "
          "constant-velocity prediction. With `sweep_motion` (vx, vy, vz in m/s, wx, wy, wz in rad/s, sensor frame: "
          "the odometry's motion over this sweep), a cloud with per-point times is "
          "de-skewed with it (deskew odometry, imu's translation, or auto) and no re-de-skew pass replaces it. "
          "With `sweep_motion_parts` (a dict: 'begin', the parts' start times in s from `time`, increasing; 'end', "
          "the last part's end; 'motion', six numbers per part as sweep_motion: odometry denser than the sweeps), "
          "each point is de-skewed along the parts.")
      .def(
          "predict",
          [](PyLocalizer& l, double time) {
            finite_arg(time, "time");
            Eigen::Matrix4d p;
            {
              Working working(l.mutex);
              p = l.predict(time);
            }
            return p;
          },
          "time"_a,
          "The constant-velocity prediction for a scan at `time`.")
      .def_prop_ro("consecutive_lost", [](PyLocalizer& l) {
        Working working(l.mutex);
        return l.consecutive_lost();
      })
      .def_prop_ro(
          "frame_times_disagree",
          [](PyLocalizer& l) {
            Working working(l.mutex);
            return l.frame_times_disagree();
          },
          "True once the frames' times were found not to match their points' times (a sweep's own "
          "speed against the speed between frames): no motion from the frames' times de-skews a scan "
          "since.");
}

}  // namespace ndtcu::python
