// ndtcu_global_search_bench: global localization (InitialPoseSearch) of every query scan
// of a real sequence against its map, or of seeded scans at random poses in a simulated
// city, with no pose given: how many are found within 10 cm and 1 deg, ambiguous, not
// found, and found at a wrong place (the worst failure), and the time per search, the
// branch and bound next to the exhaustive sweep of every leaf on the same scorer. Not a
// test: see BENCHMARK.md, "Global localization".
#include <ndtcu/aligner.hpp>
#include <ndtcu/error.hpp>
#include <ndtcu/filters.hpp>
#include <ndtcu/global_search.hpp>
#include <ndtcu/io.hpp>
#include <ndtcu/log.hpp>
#include <ndtcu/simulator.hpp>
#include <ndtcu/trajectory.hpp>

#include "bench_stats.hpp"

#include <CLI/CLI.hpp>
#include <Eigen/Geometry>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
using namespace ndtcu;

constexpr double kPi = 3.14159265358979323846;
constexpr double kDeg = kPi / 180.0;

using bench::percentile;
using bench::unit;


struct Query {
  std::string name;
  PointCloud scan;
  Eigen::Matrix4d truth = Eigen::Matrix4d::Identity();
};

// `path time` lines, the reference matched by time (within 1 ms).
std::vector<Query> read_queries(const std::string& list, const std::string& reference, double scan_voxel) {
  const Trajectory ref = read_trajectory(reference);
  std::ifstream in(list);
  if (!in) throw Error(list + ": cannot open");
  const fs::path base = fs::path(list).parent_path();
  std::vector<Query> out;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string path;
    double t = 0.0;
    if (!(ls >> path >> t)) continue;
    const StampedPose* match = nullptr;
    for (const StampedPose& p : ref) {
      if (std::abs(p.time - t) < 1e-3) match = &p;
    }
    if (!match) throw Error(fmt::format("{}: no reference pose at time {}", list, t));
    Query q;
    q.name = path;
    const fs::path full = fs::path(path).is_absolute() ? fs::path(path) : base / path;
    q.scan = read_point_cloud(full.string());
    if (scan_voxel > 0) q.scan = voxel_downsample(q.scan, scan_voxel);
    q.truth = match->pose.matrix();
    out.push_back(std::move(q));
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Global localization benchmark: every query found with no pose, counted and timed");
  std::string map_path, list, reference, json_out, backend = "auto", lidar = "hdl32";
  double refine_ratio = 0.5;
  double scan_voxel = 1.0, sim_size = 0.0, nvtl_threshold = 2.3, map_voxel = 0.0;
  int queries = 50, repeat = 1;
  std::uint64_t seed = 1;
  bool exhaustive = false, verbose = false;
  GlobalSearchOptions go;
  app.add_flag("--verbose", verbose, "the library's debug log (the pyramid, each search's counts)");
  app.add_option("--map", map_path, "map cloud (with --scans and --reference)");
  app.add_option("--scans", list, "a list of `path time` lines, the queries");
  app.add_option("--reference", reference, "TUM poses of the queries, matched by time");
  app.add_option("--sim-city", sim_size, "instead: a simulated city of this side (m), seeded random poses on its roads");
  app.add_option("--queries", queries, "simulated queries")->capture_default_str();
  app.add_option("--seed", seed, "simulation seed")->capture_default_str();
  app.add_option("--lidar", lidar, "simulated sensor preset")->capture_default_str();
  app.add_option("--scan-voxel", scan_voxel, "voxel filter of the scans (m)")->capture_default_str();
  app.add_option("--map-voxel", map_voxel, "voxel filter of the map (m; 0: none)")->capture_default_str();
  app.add_option("--backend", backend, "cpu, cuda or auto")->capture_default_str();
  app.add_option("--nvtl-threshold", nvtl_threshold, "found from this NVTL")->capture_default_str();
  app.add_option("--cell", go.cell, "leaf cell (m; 0: chosen from the map)")->capture_default_str();
  app.add_option("--refine-ratio", refine_ratio, "the found pose polished at this times the resolution (0: off)")
      ->capture_default_str();
  app.add_option("--points", go.points, "points of the bounds")->capture_default_str();
  app.add_option("--candidates", go.candidates, "candidates aligned")->capture_default_str();
  app.add_option("--prune-ratio", go.prune_ratio, "prune below this share of the best leaf")->capture_default_str();
  app.add_option("--yaw-step", go.yaw_step_deg, "yaw step (deg; 0: from the scan)")->capture_default_str();
  app.add_option("--ground-share", go.max_ground_share, "largest share of ground points")->capture_default_str();
  app.add_option("--max-point-range", go.max_point_range, "points farther are not used (m)")->capture_default_str();
  app.add_option("--tilt", go.tilt_deg, "6-DoF: roll and pitch within this many degrees (0: 4-DoF)")->capture_default_str();
  app.add_option("--tilt-step", go.tilt_step_deg, "spacing of the tilts (deg)")->capture_default_str();
  bool standing = false;
  app.add_flag("--standing", standing, "search only standing heights above a floor");
  app.add_option("--screen-leaves", go.screen_leaves, "leaves ranked by the NDT score")->capture_default_str();
  app.add_option("--batch-nodes", go.batch_nodes, "nodes scored per batch (CUDA; the CPU takes at most 2048)")
      ->capture_default_str();
  app.add_flag("--exhaustive", exhaustive, "score every leaf (the baseline) as well");
  app.add_option("--repeat", repeat, "searches per query (the time is their median)")->capture_default_str();
  app.add_option("--json", json_out, "write the per-query results here");
  CLI11_PARSE(app, argc, argv);
  go.standing = standing;
  try {
    if (verbose) set_log_level(LogLevel::Debug);
    ExecutionOptions ex;
    ex.backend = backend == "cpu" ? Backend::Cpu : backend == "cuda" ? Backend::Cuda : Backend::Auto;
    Aligner aligner(autoware_preset(), ex);
    std::vector<Query> qs;
    PointCloud map;
    const auto t_load = std::chrono::steady_clock::now();
    if (sim_size > 0) {
      sim::WorldSettings ws;
      ws.seed = seed;
      ws.size = sim_size;
      const sim::World world(sim::generate_scene(ws));
      sim::MapSettings ms;
      ms.seed = seed;
      ms.voxel = 0.25;
      // A 1 km city at the default density would need more samples than the simulator
      // makes: 40 per m^2 there, still 6 points per 0.25 m voxel face.
      if (sim_size > 700.0) ms.density = 40.0;
      map = sim::sample_map(world, ms);
      std::printf("simulated city %.0f m: %zu map points\n", sim_size, map.size());
      aligner.set_target(map);
      const sim::LidarModel model = sim::lidar_preset(lidar);
      const sim::RoadNetwork& roads = world.scene().roads;
      const Eigen::Isometry3d w_s = sim::world_from_scene(world.scene());
      std::mt19937_64 rng(seed * 7919 + 13);
      for (int k = 0; k < queries; ++k) {
        const auto& e = roads.edges[static_cast<std::size_t>(rng() % roads.edges.size())];
        const Eigen::Vector2d a = roads.nodes[static_cast<std::size_t>(e.first)];
        const Eigen::Vector2d b = roads.nodes[static_cast<std::size_t>(e.second)];
        // Away from the intersections (their corners are inside buildings' setbacks).
        const double t = 0.15 + 0.7 * unit(rng);
        Eigen::Vector2d xy = a + t * (b - a);
        const Eigen::Vector2d n = Eigen::Vector2d(-(b - a).y(), (b - a).x()).normalized();
        xy += n * (2.0 * unit(rng) - 1.0) * roads.lane_offset * 1.5;
        const double yaw = 2.0 * kPi * unit(rng) - kPi;
        Eigen::Isometry3d s = Eigen::Isometry3d::Identity();
        s.linear() = Eigen::AngleAxisd(yaw, Eigen::Vector3d::UnitZ()).toRotationMatrix();
        s.translation() = Eigen::Vector3d(xy.x(), xy.y(), world.ground_height(xy.x(), xy.y()) + 1.8);
        sim::Scan scan = sim::cast_scan(world, model, s, seed, static_cast<std::uint64_t>(k));
        Query q;
        q.name = fmt::format("sim{:03d}", k);
        q.scan = scan_voxel > 0 ? voxel_downsample(scan.cloud, scan_voxel) : scan.cloud;
        q.truth = (w_s * s).matrix();
        qs.push_back(std::move(q));
      }
    } else {
      map = read_point_cloud(map_path);
      if (map_voxel > 0) map = voxel_downsample(map, map_voxel);
      aligner.set_target(map);
      qs = read_queries(list, reference, scan_voxel);
    }
    const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count();
    InitialPoseSearch search(aligner, go);
    std::printf("backend %s, %zu queries (loaded in %.1f s), pyramid of %g m cells built in %.1f ms, %.0f MB\n",
                to_string(aligner.backend()), qs.size(), load_s, search.cell(), search.build_ms(),
                static_cast<double>(search.memory_bytes()) / 1e6);
    std::optional<Aligner> fine;
    if (refine_ratio > 0.0) {
      AlignSettings fs = autoware_preset();
      fs.resolution *= refine_ratio;
      fine.emplace(fs, ex);
      fine->set_target(map);
      search.set_fine(&*fine);
    }
    map = PointCloud();
    std::unique_ptr<InitialPoseSearch> baseline;
    if (exhaustive) {
      GlobalSearchOptions bo = go;
      bo.exhaustive = true;
      baseline = std::make_unique<InitialPoseSearch>(aligner, bo);
    }
    int found_right = 0, found_off = 0, found_wrong = 0, ambiguous = 0, not_found = 0, refined = 0;
    std::vector<double> times, bound_times, base_times;
    nlohmann::json rows = nlohmann::json::array();
    for (const Query& q : qs) {
      std::vector<double> t_runs;
      InitialPoseResult r;
      for (int k = 0; k < repeat; ++k) {
        r = search.find(q.scan);
        t_runs.push_back(r.time_ms);
      }
      const double t_ms = percentile(t_runs, 0.5);
      const InitialPoseVerdict v = verdict(r, nvtl_threshold);
      const Eigen::Matrix4d est = pose_to_matrix(r.best.pose);
      const double err = (est.topRightCorner<3, 1>() - q.truth.topRightCorner<3, 1>()).norm();
      const double ang = Eigen::AngleAxisd(Eigen::Matrix3d(est.topLeftCorner<3, 3>().transpose() *
                                                           q.truth.topLeftCorner<3, 3>())).angle() / kDeg;
      // Right: within 10 cm and 1 deg; off: the right place, not that close (within 1 m and
      // 5 deg); wrong: another place.
      const bool right = err < 0.10 && ang < 1.0;
      const bool off = !right && err < 1.0 && ang < 5.0;
      const std::string state = found_state(v);
      if (state == "found") (right ? found_right : off ? found_off : found_wrong)++;
      else if (state == "ambiguous") ++ambiguous;
      else ++not_found;
      if (r.refined) ++refined;
      times.push_back(t_ms);
      bound_times.push_back(r.global.bound_ms);
      double base_ms = std::nan("");
      if (baseline) {
        const InitialPoseResult b = baseline->find(q.scan);
        base_ms = b.time_ms;
        base_times.push_back(b.global.bound_ms);
      }
      std::printf("%-28s h %.2f %-16s err %7.3f m %6.2f deg  NVTL %.3f  rival %s  %6.1f ms (bound %6.1f, align %5.1f; %zu nodes, "
                  "%zu leaves of %zu)%s\n",
                  q.name.c_str(), r.global.sensor_height, to_string(v), err, ang, r.best.nvtl,
                  r.has_rival ? fmt::format("{:.3f}", r.ambiguity_nvtl).c_str() : "-", t_ms, r.global.bound_ms,
                  r.global.align_ms, r.global.nodes_scored, r.global.leaves_scored, r.global.brute_force_leaves,
                  baseline ? fmt::format("  exhaustive {:.1f} ms", base_ms).c_str() : "");
      rows.push_back({{"query", q.name}, {"verdict", to_string(v)}, {"state", state}, {"error_m", err},
                      {"error_deg", ang}, {"nvtl", r.best.nvtl}, {"time_ms", t_ms},
                      {"bound_ms", r.global.bound_ms}, {"align_ms", r.global.align_ms},
                      {"nodes", r.global.nodes_scored}, {"leaves", r.global.leaves_scored},
                      {"brute_force_leaves", r.global.brute_force_leaves}, {"points", r.global.points}, {"sensor_height", r.global.sensor_height},
                      {"standing", r.global.standing},
                      {"yaws", r.global.yaws}, {"refined", r.refined}, {"exhaustive_ms", base_ms}});
    }
    std::printf("\n%zu queries: found %d (right), found %d off (the right place, beyond 10 cm or 1 deg), ambiguous %d, "
                "not found %d, FOUND WRONG %d; %d poses refined at the finer voxels\n",
                qs.size(), found_right, found_off, ambiguous, not_found, found_wrong, refined);
    std::printf("search time median %.1f ms, p95 %.1f ms (branch and bound median %.1f ms)\n", percentile(times, 0.5),
                percentile(times, 0.95), percentile(bound_times, 0.5));
    if (baseline) {
      std::printf("exhaustive sweep's scoring: median %.1f ms, p95 %.1f ms\n", percentile(base_times, 0.5),
                  percentile(base_times, 0.95));
    }
    if (!json_out.empty()) {
      std::ofstream(json_out) << nlohmann::json{{"backend", to_string(aligner.backend())}, {"queries", rows}}.dump(1);
    }
    return found_wrong == 0 ? 0 : 3;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ndtcu_global_search_bench: %s\n", e.what());
    return 1;
  }
}
