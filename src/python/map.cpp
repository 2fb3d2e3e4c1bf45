// The Python module: VoxelMap: the NDT target.
#include "common.hpp"

using namespace nb::literals;

namespace ndtcu::python {

void define_map(nb::module_& m) {
  nb::class_<VoxelMap>(m, "VoxelMap", "The NDT target: one normal distribution per usable voxel.")
      .def_static(
          "build",
          [](nb::handle points, double resolution, const std::string& covariance, int min_points, double eigenvalue_ratio,
             int threads, const std::string& backend) {
            CloudArg c(points, "points");
            VoxelMapOptions o;
            o.backend = backend_from_string(backend);
            o.resolution = resolution;
            o.covariance = covariance_mode_from_string(covariance);
            o.min_points = min_points;
            o.eigenvalue_ratio = eigenvalue_ratio;
            o.threads = threads;
            nb::gil_scoped_release release;
            return std::make_shared<VoxelMap>(VoxelMap::build(c.view(), o));
          },
          "points"_a, "resolution"_a = 2.0, "covariance"_a = "autoware", "min_points"_a = 6, "eigenvalue_ratio"_a = 0.01,
          "threads"_a = 0, "backend"_a = "cpu",
          "Builds the map of a PointCloud or float32 (N, 3) array (read where it lies, not copied). backend 'cpu' "
          "(the reference), 'cuda' (built on the GPU, the same voxels with the same bits; CudaError without a "
          "device) or 'auto'.")
      .def_prop_ro("size", &VoxelMap::size)
      .def("__len__", &VoxelMap::size)
      .def_prop_ro("resolution", &VoxelMap::resolution)
      .def_prop_ro("origin", [](const VoxelMap& v) { return Eigen::Vector3d(v.origin()); })
      .def_prop_ro(
          "means",
          [](const VoxelMap& v) {
            Eigen::Matrix<double, Eigen::Dynamic, 3, Eigen::RowMajor> a(static_cast<Eigen::Index>(v.size()), 3);
            for (int k = 0; k < 3; ++k)
              for (std::size_t i = 0; i < v.size(); ++i) a(static_cast<Eigen::Index>(i), k) = v.mean(k)[i];
            return a;
          },
          "(V, 3) float64 voxel means, map-relative (add `origin` for world coordinates)")
      .def_prop_ro(
          "covariances",
          [](const VoxelMap& v) {
            auto* buf = new double[v.size() * 9];
            for (std::size_t i = 0; i < v.size(); ++i) {
              const Eigen::Matrix3d c = v.covariance_matrix(i);
              for (int r = 0; r < 3; ++r)
                for (int q = 0; q < 3; ++q) buf[i * 9 + r * 3 + q] = c(r, q);
            }
            nb::capsule owner(buf, [](void* p) noexcept { delete[] static_cast<double*>(p); });
            return nb::ndarray<nb::numpy, double, nb::shape<-1, 3, 3>>(buf, {v.size(), 3, 3}, owner);
          },
          nb::rv_policy::move, "(V, 3, 3) float64 covariances (after eigenvalue inflation)")
      .def_prop_ro(
          "inverse_covariances",
          [](const VoxelMap& v) {
            auto* buf = new double[v.size() * 9];
            for (std::size_t i = 0; i < v.size(); ++i) {
              const Eigen::Matrix3d c = v.inverse_covariance_matrix(i);
              for (int r = 0; r < 3; ++r)
                for (int q = 0; q < 3; ++q) buf[i * 9 + r * 3 + q] = c(r, q);
            }
            nb::capsule owner(buf, [](void* p) noexcept { delete[] static_cast<double*>(p); });
            return nb::ndarray<nb::numpy, double, nb::shape<-1, 3, 3>>(buf, {v.size(), 3, 3}, owner);
          },
          nb::rv_policy::move, "(V, 3, 3) float64 inverse covariances")
      .def_prop_ro(
          "point_counts",
          [](const VoxelMap& v) {
            return nb::ndarray<nb::numpy, const std::uint32_t, nb::ndim<1>>(v.point_counts().data(), {v.size()},
                                                                           nb::handle());
          },
          nb::rv_policy::reference_internal, "(V,) uint32 points per voxel (a view)")
      .def_prop_ro(
          "cells",
          [](const VoxelMap& v) {
            return nb::ndarray<nb::numpy, const std::int32_t, nb::shape<-1, 3>>(v.cells().data()->data(), {v.size(), 3},
                                                                               nb::handle());
          },
          nb::rv_policy::reference_internal, "(V, 3) int32 lattice cells (a view)");
}

}  // namespace ndtcu::python
