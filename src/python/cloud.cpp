// The Python module: PointCloud, reading and writing point clouds, and the filters.
#include "common.hpp"

using namespace nb::literals;

namespace ndtcu::python {

void define_cloud(nb::module_& m) {
  nb::class_<PointCloud>(m, "PointCloud",
                         "float32 points relative to a float64 origin (world = origin + points), as ndtcu "
                         "processes them. `points` is a view of the cloud's own memory.")
      .def(
          "__init__",
          [](PointCloud* self, nb::handle points, std::optional<Eigen::Vector3d> origin) {
            CloudArg arg(points, "points");
            new (self) PointCloud(arg.take());
            if (origin) self->origin = *origin;
          },
          "points"_a, "origin"_a = nb::none(),
          "Copies `points` (float32 (N, 3), or a PointCloud) into a cloud of its own; `origin` (3,) float64 "
          "defaults to 0.")
      .def_prop_ro(
          "points",
          [](PointCloud& c) {
            return nb::ndarray<nb::numpy, float, nb::shape<-1, 3>, nb::c_contig>(c.points.data(), {c.points.size(), 3},
                                                                                 nb::handle());
          },
          nb::rv_policy::reference_internal, "(N, 3) float32 view of the points (no copy; writes go to the cloud)")
      .def_prop_rw(
          "origin", [](const PointCloud& c) { return Eigen::Vector3d(c.origin); },
          [](PointCloud& c, const Eigen::Vector3d& o) { c.origin = o; }, "(3,) float64 offset of the points")
      .def_prop_ro(
          "intensity",
          [](PointCloud& c) -> nb::object {
            if (!c.has_intensity()) return nb::none();
            return nb::cast(nb::ndarray<nb::numpy, float, nb::ndim<1>>(c.intensity.data(), {c.intensity.size()}, nb::handle()),
                            nb::rv_policy::reference_internal, nb::cast(&c, nb::rv_policy::reference));
          },
          "(N,) float32 intensities, or None when the file had none")
      .def_prop_ro(
          "time",
          [](PointCloud& c) -> nb::object {
            if (!c.has_time()) return nb::none();
            return nb::cast(nb::ndarray<nb::numpy, float, nb::ndim<1>>(c.time.data(), {c.time.size()}, nb::handle()),
                            nb::rv_policy::reference_internal, nb::cast(&c, nb::rv_policy::reference));
          },
          "(N,) float32 per-point times (s from the scan's reference time; docs/formats.md, Per-point time), or "
          "None when the file had none or they were implausible")
      .def("world_points", [](const PointCloud& c) {
        Eigen::Matrix<double, Eigen::Dynamic, 3, Eigen::RowMajor> w(static_cast<Eigen::Index>(c.size()), 3);
        for (std::size_t i = 0; i < c.size(); ++i) w.row(static_cast<Eigen::Index>(i)) = c.world(i).transpose();
        return w;
      }, "(N, 3) float64 world coordinates (origin + points), a new array")
      .def("__len__", &PointCloud::size);

  m.def(
      "read_point_cloud",
      [](nb::handle path_obj, const std::string& origin) {
        const std::string path = path_arg(path_obj, "path");
        ReadOptions o;
        if (origin == "auto") o.origin_policy = OriginPolicy::Auto;
        else if (origin == "zero") o.origin_policy = OriginPolicy::Zero;
        else throw nb::value_error(("origin: expected 'auto' or 'zero', got '" + origin + "'").c_str());
        nb::gil_scoped_release release;
        return read_point_cloud(path, o);
      },
      "path"_a, "origin"_a = "auto",
      "Reads a PCD, PLY or KITTI .bin file (`path`: str, bytes or os.PathLike) into a PointCloud (non-finite "
      "points dropped). origin 'auto' moves a far cloud's origin to the median of its points (whole metres, "
      "whatever their order), as the CLI does; 'zero' keeps it at 0.");
  m.def(
      "write_point_cloud",
      [](nb::handle path_obj, nb::handle cloud) {
        const std::string path = path_arg(path_obj, "path");
        CloudArg c(cloud, "cloud");
        nb::gil_scoped_release release;
        if (c.given()) write_point_cloud(path, *c.given());  // with its intensities
        else write_point_cloud(path, c.view());
      },
      "path"_a, "cloud"_a,
      "Writes a PCD (binary) or KITTI .bin file, by extension (`path`: str, bytes or os.PathLike); an array is "
      "read where it lies (no intensities).");

  m.def(
      "voxel_downsample",
      [](nb::handle cloud, double leaf) {
        CloudArg c(cloud, "cloud");
        nb::gil_scoped_release release;
        return c.given() ? voxel_downsample(*c.given(), leaf) : voxel_downsample(c.view(), leaf);
      },
      "cloud"_a, "leaf"_a,
      "The centroid of each occupied leaf x leaf x leaf cell (PCL's VoxelGrid), as a new PointCloud (an array is "
      "read where it lies).");
  m.def(
      "crop_range",
      [](nb::handle cloud, double min_range, double max_range) {
        CloudArg c(cloud, "cloud");
        nb::gil_scoped_release release;
        return c.given() ? crop_range(*c.given(), min_range, max_range) : crop_range(c.view(), min_range, max_range);
      },
      "cloud"_a, "min_range"_a, "max_range"_a,
      "The points whose distance from the sensor lies in [min_range, max_range], as a new PointCloud (an array is "
      "read where it lies).");
}

}  // namespace ndtcu::python
