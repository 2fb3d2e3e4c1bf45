// The Python module: AlignSettings and ExecutionOptions (their fields from ndtcu/fields.hpp,
// enums by name).
#include "common.hpp"

using namespace nb::literals;

namespace ndtcu::python {

void define_settings(nb::module_& m) {
  auto settings = nb::class_<AlignSettings>(m, "AlignSettings", "NDT settings (ndtcu's AlignSettings); enums by name.");
  settings.def(nb::init<>())
      .def_static("preset", &preset, "name"_a, "'autoware' (the default) or 'pcl'")
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
        // Every field by name, as keywords Aligner(...) takes, then the prior's.
        return fields_repr<AlignSettings>(self, "AlignSettings",
                                          {"prior_pose", "prior_information", "regularization_scale_factor"});
      });
  def_settings_fields(settings);

  auto execution = nb::class_<ExecutionOptions>(
      m, "ExecutionOptions",
      "How an Aligner or a Localizer runs (ndtcu's ExecutionOptions): backend, threads, device, gpu_loop; enums by "
      "name. Its fields are also keyword arguments of Aligner(...) and Localizer(...).");
  execution
      .def(
          "__init__",
          [](ExecutionOptions* self, const nb::kwargs& kwargs) {
            new (self) ExecutionOptions();
            if (kwargs.size() == 0) return;
            const ExecutionOptions e = apply_kwargs(ExecutionOptions{}, kwargs, "ExecutionOptions");
            *self = e;
          },
          "kwargs"_a, "The defaults (backend 'auto', threads 0, device -1, gpu_loop 'device') with keyword overrides.")
      .def("__copy__", [](const ExecutionOptions& e) { return e; })
      .def("__repr__", [](nb::handle self) { return fields_repr<ExecutionOptions>(self, "ExecutionOptions"); });
  def_settings_fields(execution);

  m.def(
      "settings_fields",
      [] {
        nb::dict d;
        d["AlignSettings"] = field_names<AlignSettings>();
        d["ExecutionOptions"] = field_names<ExecutionOptions>();
        d["LocalizerSettings"] = field_names<LocalizerSettings>();
        d["AlignResult"] = field_names<AlignResult>();
        return d;
      },
      "The fields of AlignSettings, ExecutionOptions, LocalizerSettings and AlignResult by name, as the library "
      "lists them (each an attribute, a keyword argument of Aligner/Localizer, a key of `ndtcu --json` output).");
}

}  // namespace ndtcu::python
