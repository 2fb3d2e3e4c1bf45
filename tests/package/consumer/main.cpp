// A program that links the installed ndtcu: writes a cloud, reads it back.
#include <ndtcu/io.hpp>
#include <ndtcu/version.hpp>

#include <iostream>

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  ndtcu::PointCloud cloud;
  cloud.points = {{1, 2, 3}, {4, 5, 6}, {7, 8, 9}};
  ndtcu::write_point_cloud(argv[1], cloud);
  auto back = ndtcu::read_point_cloud(argv[1]);
  std::cout << "ndtcu " << NDTCU_VERSION_STRING << ": read " << back.size() << " points\n";
  return back.points == cloud.points ? 0 : 1;
}
