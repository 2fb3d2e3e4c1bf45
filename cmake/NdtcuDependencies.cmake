# Every dependency comes from Debian packages (scripts/setup.sh installs them).
find_package(Threads REQUIRED)
find_package(Eigen3 3.3 REQUIRED NO_MODULE)
find_package(spdlog REQUIRED)
find_package(liblzf CONFIG REQUIRED)  # liblzf::liblzf, from liblzf-dev
find_package(CLI11 QUIET CONFIG)
if(NOT TARGET CLI11::CLI11)
  find_path(CLI11_INCLUDE_DIR CLI/CLI.hpp REQUIRED)
  add_library(CLI11::CLI11 INTERFACE IMPORTED)
  set_target_properties(CLI11::CLI11 PROPERTIES INTERFACE_INCLUDE_DIRECTORIES ${CLI11_INCLUDE_DIR})
endif()
find_package(nlohmann_json 3 REQUIRED)
# yaml-cpp (libyaml-cpp-dev) reads Autoware's parameter file for the command-line tool's
# --config; the library ndtcu::ndtcu never links it. Debian 12 ships 0.7, whose target is
# `yaml-cpp`; 0.8 names it yaml-cpp::yaml-cpp.
find_package(yaml-cpp REQUIRED)
if(TARGET yaml-cpp::yaml-cpp)
  set(NDTCU_YAML_CPP_TARGET yaml-cpp::yaml-cpp)
else()
  set(NDTCU_YAML_CPP_TARGET yaml-cpp)
endif()
# The rosbag reader (ndtcu::rosbag, include/ndtcu/rosbag.hpp) and nothing else links these:
# sqlite3 for rosbag2's .db3 storage, zstd and lz4 for compressed MCAP chunks, bz2 and lz4
# for compressed ROS 1 chunks (libsqlite3-dev, libzstd-dev, liblz4-dev, libbz2-dev).
find_package(SQLite3)
find_package(BZip2)
find_path(NDTCU_ZSTD_INCLUDE_DIR zstd.h)
find_library(NDTCU_ZSTD_LIBRARY zstd)
find_path(NDTCU_LZ4_INCLUDE_DIR lz4frame.h)
find_library(NDTCU_LZ4_LIBRARY lz4)
if(NOT (SQLite3_FOUND AND BZIP2_FOUND AND NDTCU_ZSTD_INCLUDE_DIR AND NDTCU_ZSTD_LIBRARY AND NDTCU_LZ4_INCLUDE_DIR
        AND NDTCU_LZ4_LIBRARY))
  message(FATAL_ERROR "ndtcu: the rosbag reader needs libsqlite3-dev, libzstd-dev, liblz4-dev and libbz2-dev "
                      "(scripts/setup.sh installs them)")
endif()
# Boost's header-only spreadsort gives voxel_downsample pcl::VoxelGrid's exact point order
# (libboost-dev); without it cells are the same, last-bit centroid differences possible.
find_package(Boost 1.66 QUIET CONFIG)

if(NDTCU_BUILD_TESTS)
  find_package(Catch2 2 REQUIRED)
endif()

# PCL is only ever the reference baseline in tests and benchmarks. Debian 12's PCL config
# loads VTK's, which names MPI::MPI_C: without MPI installed, give it an empty stand-in.
set(NDTCU_HAVE_PCL OFF)
if(NDTCU_WITH_PCL)
  find_package(MPI QUIET COMPONENTS C)
  if(NOT TARGET MPI::MPI_C)
    add_library(MPI::MPI_C INTERFACE IMPORTED)
  endif()
  find_package(PCL 1.10 QUIET COMPONENTS common io filters kdtree search registration)
  if(PCL_FOUND)
    set(NDTCU_HAVE_PCL ON)
    message(STATUS "ndtcu: PCL ${PCL_VERSION} found (baselines and parity tests)")
  else()
    message(STATUS "ndtcu: PCL not found; PCL baselines and parity tests are not built")
  endif()
endif()
