// A program that links the installed evaluation library (ndtcu::eval): a TUM file written
// and read back, and its ATE against a copy shifted by 10 cm.
#include <ndtcu/trajectory.hpp>

#include <iostream>
#include <string>

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  ndtcu::Trajectory reference;
  for (int i = 0; i < 5; ++i) {
    ndtcu::StampedPose pose;
    pose.time = 0.1 * i;
    pose.pose.translation() = Eigen::Vector3d(1.0 * i, 0.5, 0.0);
    reference.push_back(pose);
  }
  ndtcu::write_trajectory_tum(argv[1], reference);
  ndtcu::Trajectory estimate = ndtcu::read_trajectory(argv[1]);
  for (ndtcu::StampedPose& pose : estimate) pose.pose.translation().y() += 0.1;
  const ndtcu::AteStats ate = ndtcu::absolute_trajectory_error(estimate, reference);
  std::cout << "ndtcu::eval: " << ate.pairs << " pairs, ATE RMSE " << ate.rmse_m << " m\n";
  return ate.pairs == reference.size() ? 0 : 1;
}
