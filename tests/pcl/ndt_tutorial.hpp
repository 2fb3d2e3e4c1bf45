#pragma once
// PCL's NDT tutorial ("How to use Normal Distributions Transform", PCL's documentation) as
// a function, built twice from ndt_tutorial.cpp: once with pcl::NormalDistributionsTransform
// (ndt_tutorial_pcl) and once with ndtcu::pcl::NormalDistributionsTransform
// (ndt_tutorial_ndtcu), the two builds differing in one include and one type. In the
// global namespace, as the tutorial's main(): inside namespace ndtcu, `pcl::` would name
// ndtcu::pcl.
#include <ndtcu/settings.hpp>

#include <pcl/point_cloud.h>
#include <pcl/point_types.h>

#include <Eigen/Core>

#include <cstddef>
#include <filesystem>

/// What the tutorial prints and writes, and what it ran on.
struct TutorialResult {
  Eigen::Matrix4f transform = Eigen::Matrix4f::Identity();  ///< getFinalTransformation()
  bool converged = false;                                    ///< hasConverged()
  int iterations = 0;                                        ///< getFinalNumIteration()
  double likelihood = 0.0;                                   ///< getTransformationLikelihood()
  double fitness = 0.0;                                      ///< getFitnessScore()
  pcl::PointCloud<pcl::PointXYZ> aligned;                    ///< align()'s output cloud
  std::size_t target_points = 0, source_points = 0;          ///< source after the filter
  double align_ms = 0.0;                                     ///< the align() call, wall clock
};

/// The tutorial on `room_scan_dir`/room_scan1.pcd (target) and room_scan2.pcd (source),
/// with PCL's NDT.
TutorialResult ndt_tutorial_pcl(const std::filesystem::path& room_scan_dir, ndtcu::Backend backend);
/// The same with ndtcu's drop-in, on `backend` (the PCL build ignores it).
TutorialResult ndt_tutorial_ndtcu(const std::filesystem::path& room_scan_dir, ndtcu::Backend backend);
