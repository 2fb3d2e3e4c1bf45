// PCL's NDT tutorial, compiled twice (tests/CMakeLists.txt): without NDTCU_TUTORIAL_DROPIN
// against PCL's class, with it against ndtcu's drop-in. Between the two builds only the
// include and the type below change, plus the drop-in's one optional call (setBackend).
//
// The tutorial's steps and settings: room_scan1 is the target, room_scan2 the source,
// filtered by ApproximateVoxelGrid (leaf 0.2); epsilon 0.01, step size 0.1, resolution 1.0,
// 35 iterations; the guess a 0.6931 rad yaw and a (1.79387, 0.720047, 0) translation.
// The one departure: the PCD files are read with ndtcu's reader (PCL's io library would
// link VTK into the test); both builds read the same points.
#include "ndt_tutorial.hpp"

#if defined(NDTCU_TUTORIAL_DROPIN)
#include <ndtcu/pcl/ndt.hpp>
using Ndt = ndtcu::pcl::NormalDistributionsTransform<pcl::PointXYZ, pcl::PointXYZ>;
#define NDTCU_TUTORIAL_FUNCTION ndt_tutorial_ndtcu
#else
#include <pcl/registration/ndt.h>
using Ndt = pcl::NormalDistributionsTransform<pcl::PointXYZ, pcl::PointXYZ>;
#define NDTCU_TUTORIAL_FUNCTION ndt_tutorial_pcl
#endif

#include <ndtcu/io.hpp>

#include <pcl/filters/approximate_voxel_grid.h>

#include <Eigen/Geometry>

#include <chrono>

namespace {

pcl::PointCloud<pcl::PointXYZ>::Ptr load_pcd(const std::filesystem::path& path) {
  ndtcu::ReadOptions options;
  options.origin_policy = ndtcu::OriginPolicy::Zero;
  options.read_intensity = false;
  const ndtcu::PointCloud cloud = ndtcu::read_point_cloud(path.string(), options);
  pcl::PointCloud<pcl::PointXYZ>::Ptr out(new pcl::PointCloud<pcl::PointXYZ>);
  out->reserve(cloud.size());
  for (const auto& p : cloud.points) out->push_back(pcl::PointXYZ(p.x(), p.y(), p.z()));
  return out;
}

}  // namespace

TutorialResult NDTCU_TUTORIAL_FUNCTION(const std::filesystem::path& room_scan_dir, ndtcu::Backend backend) {
  TutorialResult result;
  // Loading the first scan of the room (the target) and the second (the source).
  pcl::PointCloud<pcl::PointXYZ>::Ptr target_cloud = load_pcd(room_scan_dir / "room_scan1.pcd");
  pcl::PointCloud<pcl::PointXYZ>::Ptr input_cloud = load_pcd(room_scan_dir / "room_scan2.pcd");

  // Filtering the input scan to about 10% of its size to speed up registration.
  pcl::PointCloud<pcl::PointXYZ>::Ptr filtered_cloud(new pcl::PointCloud<pcl::PointXYZ>);
  pcl::ApproximateVoxelGrid<pcl::PointXYZ> approximate_voxel_filter;
  approximate_voxel_filter.setLeafSize(0.2, 0.2, 0.2);
  approximate_voxel_filter.setInputCloud(input_cloud);
  approximate_voxel_filter.filter(*filtered_cloud);

  // Initializing the Normal Distributions Transform.
  Ndt ndt;
#if defined(NDTCU_TUTORIAL_DROPIN)
  ndt.setBackend(backend);
#else
  (void)backend;
#endif
  ndt.setTransformationEpsilon(0.01);
  ndt.setStepSize(0.1);
  ndt.setResolution(1.0);
  ndt.setMaximumIterations(35);
  ndt.setInputSource(filtered_cloud);
  ndt.setInputTarget(target_cloud);

  // The initial guess from the robot's odometry.
  Eigen::AngleAxisf init_rotation(0.6931, Eigen::Vector3f::UnitZ());
  Eigen::Translation3f init_translation(1.79387, 0.720047, 0);
  Eigen::Matrix4f init_guess = (init_translation * init_rotation).matrix();

  pcl::PointCloud<pcl::PointXYZ>::Ptr output_cloud(new pcl::PointCloud<pcl::PointXYZ>);
  const auto t0 = std::chrono::steady_clock::now();
  ndt.align(*output_cloud, init_guess);
  result.align_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

  result.transform = ndt.getFinalTransformation();
  result.converged = ndt.hasConverged();
  result.iterations = ndt.getFinalNumIteration();
  result.likelihood = ndt.getTransformationLikelihood();
  result.fitness = ndt.getFitnessScore();
  result.aligned = *output_cloud;
  result.target_points = target_cloud->size();
  result.source_points = filtered_cloud->size();
  return result;
}
