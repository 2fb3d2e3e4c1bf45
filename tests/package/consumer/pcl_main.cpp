// A program written for PCL's NDT that uses the installed drop-in (ndtcu::pcl): a box of
// points as the target, the same box moved by (0.3, -0.2, 0) m as the source; the
// alignment must find the move back within 1 cm.
#include <ndtcu/pcl/ndt.hpp>

#include <pcl/point_cloud.h>
#include <pcl/point_types.h>

#include <cmath>
#include <iostream>

int main() {
  using Cloud = pcl::PointCloud<pcl::PointXYZ>;
  Cloud::Ptr target(new Cloud), source(new Cloud);
  // Floor and three walls of a 10 x 8 x 3 m room, on a 5 cm grid (the floor below the
  // lattice plane z = 0, so that its voxels are whole).
  for (float a = 0.f; a < 10.f; a += 0.05f) {
    for (float b = 0.f; b < 8.f; b += 0.05f) target->push_back(pcl::PointXYZ(a, b, -0.37f));
    for (float h = -0.37f; h < 3.f; h += 0.05f) target->push_back(pcl::PointXYZ(a, 0.f, h));
  }
  for (float b = 0.f; b < 8.f; b += 0.05f) {
    for (float h = -0.37f; h < 3.f; h += 0.05f) {
      target->push_back(pcl::PointXYZ(0.f, b, h));
      target->push_back(pcl::PointXYZ(10.f, b, h));
    }
  }
  for (std::size_t i = 0; i < target->size(); i += 7) {
    const auto& p = (*target)[i];
    source->push_back(pcl::PointXYZ(p.x - 0.3f, p.y + 0.2f, p.z));
  }

  ndtcu::pcl::NormalDistributionsTransform<pcl::PointXYZ, pcl::PointXYZ> ndt;
  ndt.setTransformationEpsilon(1e-4);
  ndt.setStepSize(0.5);
  ndt.setResolution(1.0f);
  ndt.setMaximumIterations(35);
  ndt.setInputSource(source);
  ndt.setInputTarget(target);
  Cloud output;
  ndt.align(output);
  const Eigen::Matrix4f t = ndt.getFinalTransformation();
  std::cout << "ndtcu::pcl: converged " << ndt.hasConverged() << " after " << ndt.getFinalNumIteration()
            << " iterations, x " << t(0, 3) << " y " << t(1, 3) << " z " << t(2, 3) << "\n";
  const bool found = std::abs(t(0, 3) - 0.3f) < 0.01f && std::abs(t(1, 3) + 0.2f) < 0.01f && std::abs(t(2, 3)) < 0.01f;
  return ndt.hasConverged() && found && output.size() == source->size() ? 0 : 1;
}
