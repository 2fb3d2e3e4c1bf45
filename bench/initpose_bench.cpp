// ndtcu_initpose_bench: the initial pose search over BALM OS0 (balm_os0 in the real-data
// folder): each scan from seeded rough starts anywhere within a radius of its reference
// position with any yaw (roll and pitch from the scan's ground), how often it is found
// (within 10 cm and 1 deg), how often a wrong pose would be taken (verdict "found" at a
// wrong place), and the time per search. Not a test: see BENCHMARK.md, "Initial pose
// search".
#include <ndtcu/aligner.hpp>
#include <ndtcu/error.hpp>
#include <ndtcu/filters.hpp>
#include <ndtcu/initial_pose.hpp>
#include <ndtcu/io.hpp>
#include <ndtcu/output_file.hpp>
#include <ndtcu/trajectory.hpp>

#include "bench_stats.hpp"

#include <CLI/CLI.hpp>
#include <Eigen/Geometry>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
using namespace ndtcu;

constexpr double kPi = 3.14159265358979323846;
constexpr double kDeg = kPi / 180.0;

using bench::percentile;
using bench::unit;

// A rough start: uniform over the disc of `radius` around the truth's x and y, the truth's
// z, a uniform yaw, no roll or pitch (the search levels the scan by its ground).
Pose6 rough_start(const Eigen::Matrix4d& truth, double radius, std::mt19937_64& rng) {
  const double r = radius * std::sqrt(unit(rng));
  const double a = 2.0 * kPi * unit(rng);
  Pose6 p = Pose6::Zero();
  p(0) = truth(0, 3) + r * std::cos(a);
  p(1) = truth(1, 3) + r * std::sin(a);
  p(2) = truth(2, 3);
  p(5) = 2.0 * kPi * unit(rng) - kPi;
  return p;
}


}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Initial pose search over BALM OS0 from rough starts (not a test: see BENCHMARK.md)"};
  const char* env = std::getenv("NDTCU_DATA_DIR");
  std::string data = env ? env : "../shared/data", backend = "auto", json_path;
  int starts = 20, scan_step = 1, threads = 0;
  double radius = 5.0, nvtl_threshold = 2.3;
  std::uint64_t seed = 1;
  app.add_option("--data", data, "the real-data folder (default $NDTCU_DATA_DIR or ../shared/data)");
  app.add_option("--starts", starts, "rough starts per scan")->check(CLI::Range(1, 1000));
  app.add_option("--scan-step", scan_step, "every k-th of the 60 scans")->check(CLI::Range(1, 60));
  app.add_option("--radius", radius, "starts and search within this distance of the reference (m)")
      ->check(CLI::Range(0.0, 50.0));
  app.add_option("--nvtl-threshold", nvtl_threshold, "a pose is taken from NVTL this high (the verdict)");
  app.add_option("--backend", backend, "cpu, cuda or auto")->check(CLI::IsMember({"cpu", "cuda", "auto"}));
  app.add_option("--threads", threads, "CPU threads (0 = all)")->check(CLI::Range(0, 1024));
  app.add_option("--seed", seed, "seed of the starts");
  app.add_option("--json", json_path, "write the per-search results here");
  CLI11_PARSE(app, argc, argv);
  try {
    const fs::path balm = fs::path(data) / "balm_os0";
    const Trajectory reference = read_trajectory((balm / "poses_tum.txt").string());
    if (reference.size() != 60) {
      throw Error(fmt::format("{}: {} poses, expected 60", (balm / "poses_tum.txt").string(), reference.size()));
    }
    ExecutionOptions execution;
    execution.backend = backend_from_string(backend);
    execution.threads = threads;
    Aligner aligner(autoware_preset(), execution);
    aligner.set_target(read_point_cloud((balm / "map_even_frames_0-58_voxel0.1.pcd").string()));
    InitialPoseOptions o;
    o.radius = radius;
    o.level_from_ground = true;
    std::mt19937_64 rng(seed);
    std::vector<double> times;
    int total = 0, found = 0, taken = 0, wrong_taken = 0;
    std::map<std::string, int> verdicts;
    std::string json = "[\n";
    std::string backend_name;
    for (int k = 0; k < 60; k += scan_step) {
      const std::string name = fmt::format("scans/{:03d}.pcd", k);
      const PointCloud scan = voxel_downsample(read_point_cloud((balm / name).string()), 1.0);
      const Eigen::Matrix4d truth = reference[static_cast<std::size_t>(k)].pose.matrix();
      int scan_found = 0;
      for (int s = 0; s < starts; ++s) {
        const Pose6 start = rough_start(truth, radius, rng);
        const InitialPoseResult r = find_initial_pose(aligner, scan, start, o);
        backend_name = to_string(r.best.backend);
        const double err = (r.best.transform.topRightCorner<3, 1>() - truth.topRightCorner<3, 1>()).norm();
        const double angle =
            Eigen::AngleAxisd(r.best.transform.topLeftCorner<3, 3>().transpose() * truth.topLeftCorner<3, 3>()).angle();
        const bool right = err < 0.10 && angle < 1.0 * kDeg;
        const InitialPoseVerdict v = verdict(r, nvtl_threshold);
        ++total;
        found += right;
        scan_found += right;
        taken += v == InitialPoseVerdict::Found;
        wrong_taken += v == InitialPoseVerdict::Found && !right;
        ++verdicts[to_string(v)];
        times.push_back(r.time_ms);
        json += fmt::format("  {{\"scan\": {}, \"start\": [{}, {}, {}, {}], \"error_m\": {}, \"error_deg\": {}, \"found\": {}, "
                            "\"verdict\": \"{}\", \"nvtl\": {}, \"time_ms\": {}}},\n",
                            k, start(0), start(1), start(2), start(5), err, angle / kDeg, right, to_string(v),
                            r.best.nvtl, r.time_ms);
      }
      std::printf("%s: %d of %d found\n", name.c_str(), scan_found, starts);
      std::fflush(stdout);
    }
    if (json.size() > 2) json.erase(json.size() - 2, 1);  // the last comma
    json += "]\n";
    std::printf("\nBALM OS0, %d scans x %d starts within %.1f m, any yaw, %s backend:\n", total / starts, starts, radius,
                backend_name.c_str());
    std::printf("  found (within 10 cm and 1 deg): %d of %d (%.1f%%)\n", found, total, 100.0 * found / total);
    std::printf("  verdict found: %d, of which wrong: %d\n", taken, wrong_taken);
    std::printf("  verdicts:");
    for (const auto& [v, n] : verdicts) std::printf(" %s %d", v.c_str(), n);
    std::printf("\n  time per search: median %.1f ms, p95 %.1f ms, max %.1f ms\n", percentile(times, 0.5),
                percentile(times, 0.95), percentile(times, 1.0));
    if (!json_path.empty()) {
      write_file_whole(json_path, json);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ndtcu_initpose_bench: %s\n", e.what());
    return 1;
  }
}
