// A program that links the installed simulator (ndtcu::sim) next to ndtcu::ndtcu: one
// ray-cast revolution over a hand-built ground plane.
#include <ndtcu/simulator.hpp>

#include <iostream>

int main() {
  ndtcu::sim::Scene scene;
  scene.ground.min_corner = Eigen::Vector2d(-20.0, -20.0);
  scene.ground.cell = 1.0;
  scene.ground.nx = scene.ground.ny = 40;
  scene.ground.heights.assign(41 * 41, 0.0f);
  const ndtcu::sim::World world(scene);
  ndtcu::sim::LidarModel lidar = ndtcu::sim::lidar_preset("hdl32");
  lidar.columns = 90;
  Eigen::Isometry3d pose = Eigen::Isometry3d::Identity();
  pose.translation().z() = 1.8;
  const ndtcu::sim::Scan scan = ndtcu::sim::cast_scan(world, lidar, pose, 1, 0, 1);
  std::cout << "ndtcu::sim: " << scan.cloud.size() << " ground points\n";
  return scan.cloud.empty() ? 1 : 0;
}
