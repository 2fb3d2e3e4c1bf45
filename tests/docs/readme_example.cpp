// Aligns scan 3 of the sample sequence to the sample map, from a guess 0.4 m and 3 degrees
// off its true pose. Run from the repository root (the paths are relative to it).
#include <ndtcu/aligner.hpp>
#include <ndtcu/filters.hpp>
#include <ndtcu/io.hpp>

#include <cstdio>

int main() {
  const ndtcu::PointCloud map = ndtcu::read_point_cloud("data/sample/map.pcd");
  const ndtcu::PointCloud scan = ndtcu::voxel_downsample(ndtcu::read_point_cloud("data/sample/scans/000003.pcd"), 1.0);

  const ndtcu::AlignSettings settings = ndtcu::autoware_preset();  // the NDT math: resolution 2 m, 30 iterations
  ndtcu::ExecutionOptions execution;                        // how it runs: backend, threads, device, stream
  execution.backend = ndtcu::Backend::Auto;                 // CUDA when a device answers, else the CPU
  ndtcu::Aligner aligner(settings, execution);              // keep it: it holds the map and the threads
  aligner.set_target(map);                                  // voxelizes the map once

  ndtcu::Pose6 guess;                                       // x y z (m), roll pitch yaw (rad)
  guess << -24.06, 16.31, 1.41, -0.024, 0.036, -1.66;
  const ndtcu::AlignResult r = aligner.align_from_pose(scan, guess);

  std::printf("x %.3f y %.3f z %.3f yaw %.3f: %s after %d iterations, NVTL %.2f (%s)\n", r.pose(0), r.pose(1),
              r.pose(2), r.pose(5), ndtcu::to_string(r.reason), r.iterations, r.nvtl,
              ndtcu::to_string(aligner.backend()));
  return r.converged ? 0 : 1;
}
