// The Python module: AlignSettings, its enums by name.
#include "common.hpp"

using namespace nb::literals;

namespace ndtcu::python {

void define_settings(nb::module_& m) {
  auto settings = nb::class_<AlignSettings>(m, "AlignSettings", "NDT settings (ndtcu's AlignSettings); enums by name.");
  settings.def(nb::init<>())
      .def_static("preset", &preset, "name"_a, "'autoware' (the default) or 'pcl'")
      .def_rw("resolution", &AlignSettings::resolution)
      .def_rw("step_size", &AlignSettings::step_size)
      .def_rw("epsilon", &AlignSettings::epsilon)
      .def_rw("max_iterations", &AlignSettings::max_iterations)
      .def_rw("outlier_ratio", &AlignSettings::outlier_ratio)
      .def_rw("min_points_per_voxel", &AlignSettings::min_points_per_voxel)
      .def_rw("eigenvalue_ratio", &AlignSettings::eigenvalue_ratio)
      .def_rw("threads", &AlignSettings::threads)
      .def_rw("device", &AlignSettings::device, "CUDA device index of the CUDA backend (-1: the current one)")
      .def_prop_rw(
          "prior_pose", [](const AlignSettings& s) { return Eigen::VectorXd(s.prior.pose); },
          [](AlignSettings& s, const Eigen::VectorXd& v) {
            if (v.size() != 6) throw nb::value_error("prior_pose: expected 6 values [x y z roll pitch yaw]");
            for (Eigen::Index i = 0; i < 6; ++i) {
              if (!std::isfinite(v(i))) {
                throw nb::value_error(("prior_pose: non-finite value " + repr_text(v(i)) + " at [" +
                                       std::to_string(i) + "]")
                                          .c_str());
              }
            }
            s.prior.pose = v;
          },
          "the pose prior's centre [x y z roll pitch yaw] (m, rad)")
      .def_prop_rw(
          "prior_information", [](const AlignSettings& s) { return Eigen::MatrixXd(s.prior.information); },
          [](AlignSettings& s, const Eigen::MatrixXd& v) {
            if (v.rows() != 6 || v.cols() != 6) throw nb::value_error("prior_information: expected a 6x6 matrix");
            for (Eigen::Index r = 0; r < 6; ++r) {
              for (Eigen::Index q = 0; q < 6; ++q) {
                if (!std::isfinite(v(r, q))) {
                  throw nb::value_error(("prior_information: non-finite value " + repr_text(v(r, q)) + " at [" +
                                         std::to_string(r) + ", " + std::to_string(q) + "]")
                                            .c_str());
                }
              }
            }
            s.prior.information = v;
          },
          "the pose prior's 6x6 information matrix (zero: no prior)")
      .def_prop_rw(
          "regularization_scale_factor", [](const AlignSettings& s) { return s.prior.regularization_scale_factor; },
          [](AlignSettings& s, double v) { s.prior.regularization_scale_factor = v; },
          "Autoware's GNSS regularization about prior_pose (0: off)")
      .def("__copy__", [](const AlignSettings& s) { return s; })
      .def("__repr__", [](nb::handle self) {
        // Every property by name, as keywords Aligner(...) takes.
        std::string out = "AlignSettings(";
        const char* names[] = {"resolution", "step_size", "epsilon", "max_iterations", "outlier_ratio",
                               "search", "line_search", "convergence", "newton_direction", "covariance",
                               "min_points_per_voxel", "eigenvalue_ratio", "threads", "backend", "device", "gpu_loop",
                               "pose_covariance", "prior_pose", "prior_information", "regularization_scale_factor"};
        bool first = true;
        for (const char* n : names) {
          out += (first ? "" : ", ") + std::string(n) + "=" + nb::cast<std::string>(nb::repr(self.attr(n)));
          first = false;
        }
        return out + ")";
      });
  enum_setting(settings, "search", &AlignSettings::search, &search_method_from_string, "radius|direct27|direct7|direct1");
  enum_setting(settings, "line_search", &AlignSettings::line_search, &line_search_from_string, "fixed|more-thuente");
  enum_setting(settings, "convergence", &AlignSettings::convergence, &convergence_rule_from_string, "autoware|pcl");
  enum_setting(settings, "newton_direction", &AlignSettings::newton_direction, &newton_direction_from_string,
               "pcl|saddle-free");
  enum_setting(settings, "covariance", &AlignSettings::covariance, &covariance_mode_from_string, "autoware|pcl");
  enum_setting(settings, "backend", &AlignSettings::backend, &backend_from_string, "cpu|cuda|auto");
  enum_setting(settings, "gpu_loop", &AlignSettings::gpu_loop, &gpu_loop_from_string, "device|host");
  enum_setting(settings, "pose_covariance", &AlignSettings::pose_covariance, &pose_covariance_from_string,
               "none|laplace|multi-ndt|multi-ndt-score");
}

}  // namespace ndtcu::python
