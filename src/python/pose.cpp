// The Python module: Poses: 4x4 transforms, [x y z roll pitch yaw] and TUM lines.
#include "common.hpp"

using namespace nb::literals;

namespace ndtcu::python {

void define_pose(nb::module_& m) {
  m.def(
      "tum_line",
      [](double time, nb::handle pose) {
        StampedPose p;
        p.time = finite_arg(time, "time");
        p.pose = Eigen::Isometry3d(matrix_arg(pose, "pose"));
        std::string line = tum_line(p);
        if (!line.empty() && line.back() == '\n') line.pop_back();
        return line;
      },
      "time"_a, "pose"_a, "The TUM line (t x y z qx qy qz qw) of a 4x4 pose, as ndtcu localize writes it (no newline).");

  m.def("pose_to_matrix", [](const Eigen::Matrix<double, 6, 1>& p) { return Eigen::Matrix4d(pose_to_matrix(p)); }, "xyzrpy"_a,
        "4x4 transform of [x y z roll pitch yaw] (T = Translation * Rx * Ry * Rz)");
  m.def("matrix_to_pose", [](nb::handle t) { return Eigen::VectorXd(matrix_to_pose(matrix_arg(t, "transform"))); },
        "transform"_a, "[x y z roll pitch yaw] of a rigid 4x4 transform");
}

}  // namespace ndtcu::python
