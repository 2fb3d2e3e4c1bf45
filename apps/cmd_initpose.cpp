// `ndtcu initpose --map MAP --scan SCAN --around x,y,z,yaw`: where is the scan in the map
// near a rough pose? A sweep of positions and yaws (find_initial_pose), as text or one JSON
// object, with the ambiguity check spelled out.
#include "cli_common.hpp"
#include "commands.hpp"

#include <ndtcu/aligner.hpp>
#include <ndtcu/error.hpp>
#include <ndtcu/filters.hpp>
#include <ndtcu/global_search.hpp>
#include <ndtcu/initial_pose.hpp>
#include <ndtcu/initial_pose_tpe.hpp>
#include <ndtcu/pose_covariance.hpp>
#include <ndtcu/text.hpp>

#include <fmt/format.h>

#include <chrono>
#include <optional>
#include <cmath>
#include <iostream>
#include <memory>

namespace ndtcu::cli {

namespace {

struct InitPoseOptions {
  std::string map, scan, method = "sweep", origin = "auto";
  std::vector<double> around;  // x, y, z, yaw or x, y, z, roll, pitch, yaw (m, rad)
  std::vector<double> gravity_up;  // --up: the scan's up direction (an IMU's gravity reversed)
  bool global = false;
  GlobalSearchOptions global_search;
  double scan_voxel = 1.0, map_voxel = 0.0, nvtl_threshold = 2.3;
  double refine_ratio = 0.5;  // --global: the found pose polished at this times the resolution (0: off)
  InitialPoseOptions search;
  TpeOptions tpe;
  NdtOptions ndt;
  CLI::Option* global_radius = nullptr;
};

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

nlohmann::json pose_json(const Pose6& p) { return {p(0), p(1), p(2), p(3), p(4), p(5)}; }

std::string pose_text(const Pose6& p) {
  return fmt::format("x {:.4f}  y {:.4f}  z {:.4f}  roll {:.5f}  pitch {:.5f}  yaw {:.5f}", p(0), p(1), p(2), p(3), p(4),
                     p(5));
}

// The options a --config file sets unless the command line gives them.
struct ConfigurableOptions {
  CLI::Option* nvtl_threshold = nullptr;
  CLI::Option* particles = nullptr;
  CLI::Option* startup_trials = nullptr;
};

ConfigurableOptions add_initpose_options(CLI::App* cmd, InitPoseOptions& o) {
  cmd->add_option("--map", o.map, "map point cloud (.pcd, .ply, .bin), world frame")->required();
  cmd->add_option("--scan", o.scan, "scan point cloud, sensor frame")->required();
  add_origin_option(cmd, o.origin, "the map");
  cmd->add_option("--around", o.around,
                  "rough pose x,y,z,yaw (roll and pitch from the scan's ground plane, the map's z up) or "
                  "x,y,z,roll,pitch,yaw (m, rad); the sweep keeps its z (and roll and pitch when given); with "
                  "--global, the centre of the region searched (--radius)")
      ->delimiter(',')
      ->expected(4, 6);
  CLI::Option* radius =
      cmd->add_option("--radius", o.search.radius,
                      "search positions within this distance of --around (m); with --global any radius (default: "
                      "the whole map)")
          ->capture_default_str()
          ->check(non_negative_number());
  cmd->add_flag("--global", o.global,
                "search the whole map with no pose (branch and bound over x, y, z and yaw on the map's likelihood "
                "pyramid, then NDT alignment of the best distinct places); --around and --radius limit it to a region");
  cmd->add_option("--cell", o.global_search.cell,
                  "--global: leaf step of the positions and pyramid cell (m); 0: 1 m, or 2 m on a map whose extent "
                  "holds more than 1e8 cells of 1 m")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 10.0));
  cmd->add_option("--refine-ratio", o.refine_ratio,
                  "--global: the found pose polished against the map's voxels at this times the resolution (0: off)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 0.9));
  cmd->add_option("--candidates", o.global_search.candidates, "--global: distinct places aligned by NDT")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--search-points", o.global_search.points, "--global: scan points the bounds sum")
      ->capture_default_str()
      ->check(CLI::Range(16, 65536));
  cmd->add_option("--tilt", o.global_search.tilt_deg,
                  "--global: 6-DoF, roll and pitch searched within this many degrees of the leveled attitude "
                  "(0: 4-DoF)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 30.0));
  cmd->add_option("--tilt-step", o.global_search.tilt_step_deg, "--global: spacing of the --tilt grid (deg)")
      ->capture_default_str()
      ->check(CLI::Range(0.5, 15.0));
  cmd->add_option("--up", o.gravity_up,
                  "--global: the scan's up direction x,y,z in its own frame (an IMU's gravity reversed); default: "
                  "the normal of the scan's ground plane")
      ->delimiter(',')
      ->expected(3);
  o.global_radius = radius;
  cmd->add_option("--position-step", o.search.position_step, "grid spacing of the positions (m)")
      ->capture_default_str()
      ->check(positive_number());
  cmd->add_option("--yaw-range", o.search.yaw_range_deg, "yaws within +-DEG/2 of --around's (deg; 360 = all)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 360.0));
  cmd->add_option("--yaw-step", o.search.yaw_step_deg, "spacing of the yaws (deg)")
      ->capture_default_str()
      ->check(positive_number());
  ConfigurableOptions given;
  given.nvtl_threshold =
      cmd->add_option("--nvtl-threshold", o.nvtl_threshold,
                      "the pose is found when it converged, is not ambiguous and its NVTL reaches this")
          ->capture_default_str();
  cmd->add_option("--refine-count", o.search.refine_count, "distinct places of the coarse pass refined")
      ->capture_default_str()
      ->check(CLI::Range(1, 10000));
  cmd->add_option("--coarse-iterations", o.search.coarse_iterations, "Newton iterations of the coarse pass")
      ->capture_default_str()
      ->check(CLI::Range(1, kMaxIterations));
  cmd->add_option("--coarse-points", o.search.coarse_points,
                  "points of the scan the coarse pass aligns at most (every k-th; 0 = all)")
      ->capture_default_str();
  cmd->add_option("--method", o.method,
                  "sweep: positions and yaws in batches, coarse to fine; tpe: Autoware's tree-structured Parzen "
                  "estimator (particles around --around, yaw uniform, its startup particles as one batch)")
      ->capture_default_str()
      ->check(CLI::IsMember({"sweep", "tpe"}));
  given.particles = cmd->add_option("--particles", o.tpe.particles,
                                    "tpe: particles aligned in all (at most 2,000: the search's cost grows with the "
                                    "square of its particles, 2,000 take about 30 s on 2 CPU cores)")
                               ->capture_default_str()
                               ->check(CLI::Range(1, kMaxTpeParticles));
  given.startup_trials =
      cmd->add_option("--startup-trials", o.tpe.startup_trials, "tpe: of which drawn from the prior, in one batch")
          ->capture_default_str()
          ->check(CLI::Range(1, kMaxTpeParticles));
  cmd->add_option("--proposal-batch", o.tpe.proposal_batch,
                  "tpe: proposals aligned per batch after the startup (1 = Autoware's sequential search)")
      ->capture_default_str()
      ->check(CLI::Range(1, kMaxTpeParticles));
  cmd->add_option("--seed", o.tpe.seed, "tpe: seed of the particles")->capture_default_str();
  cmd->add_option("--scan-voxel", o.scan_voxel, "voxel-filter the scan first (leaf, m; 0 = no)")
      ->capture_default_str()
      ->check(non_negative_number());
  cmd->add_option("--map-voxel", o.map_voxel, "voxel-filter the map first (leaf, m; 0 = no)")
      ->capture_default_str()
      ->check(non_negative_number());
  add_ndt_options(cmd, o.ndt);
  add_config_option(cmd, o.ndt,
                    ", the NVTL threshold (score_estimation.converged_param_nearest_voxel_transformation_likelihood) "
                    "and, for --method tpe, initial_pose_estimation.particles_num and n_startup_trials");
  return given;
}

// What a search read, built and found.
struct InitPoseRun {
  AlignSettings settings;
  ExecutionOptions execution;
  Pose6 around = Pose6::Zero();
  bool tpe = false, global = false;
  GlobalSearchQuery query;
  double pyramid_ms = 0.0;
  std::size_t pyramid_bytes = 0;
  std::size_t map_points = 0, map_points_read = 0, scan_points = 0, scan_points_read = 0;
  double load_ms = 0.0, map_ms = 0.0, fine_map_ms = 0.0;
  InitialPoseResult result;
};

// The settings (with the --config file's values where `given` says the command line did
// not set them), the search's checks, then the clouds, the map and the search.
InitPoseRun run_initpose(InitPoseOptions& o, const ConfigurableOptions& given) {
  const std::optional<AutowareParams> config = load_autoware_params(o.ndt.config);
  // The file's values, where the command line did not give the option.
  if (config) {
    if (config->nvtl_threshold && given.nvtl_threshold->count() == 0) o.nvtl_threshold = *config->nvtl_threshold;
    if (config->particles && given.particles->count() == 0) o.tpe.particles = *config->particles;
    if (config->startup_trials && given.startup_trials->count() == 0) {
      o.tpe.startup_trials = *config->startup_trials;
    }
  }
  InitPoseRun run;
  AlignSettings& s = run.settings;
  s = ndt_settings(o.ndt, config ? &*config : nullptr);
  run.execution = execution_options(o.ndt, config ? &*config : nullptr);
  Pose6& around = run.around;
  around = Pose6::Zero();
  run.global = o.global;
  if (o.around.empty()) {
    // --global alone: no pose at all.
  } else if (o.around.size() == 4) {
    around << o.around[0], o.around[1], o.around[2], 0.0, 0.0, o.around[3];
    o.search.level_from_ground = true;  // roll and pitch from the scan's ground
  } else {
    for (int i = 0; i < 6; ++i) around(i) = o.around[static_cast<std::size_t>(i)];
  }
  if (!around.allFinite()) throw Error("--around: every value must be finite");
  // The search's settings are checked before any cloud is read: a refused search fails at once.
  run.tpe = o.method == "tpe";
  if (run.global) {
    if (!o.gravity_up.empty()) {
      const Eigen::Vector3d up(o.gravity_up[0], o.gravity_up[1], o.gravity_up[2]);
      if (!(up.allFinite() && up.norm() > 1e-6)) throw Error("--up: a finite non-zero direction x,y,z");
      run.query.up = up;
    }
    if (!o.around.empty() && o.global_radius->count() > 0) {
      if (!(o.search.radius > 0.0)) throw Error("--radius: with --global and --around it must be > 0 (m)");
      run.query.around = around;
      run.query.radius = o.search.radius;
    }
    o.global_search.refine = o.search;
    o.global_search.refine.radius = 0.0;  // the sweep's grid is not used
    validate(o.global_search);
  } else if (run.tpe) {
    validate(o.tpe);
  } else {
    (void)initial_pose_hypotheses(around, o.search);
  }

  auto t0 = std::chrono::steady_clock::now();
  PointCloud map = read_point_cloud(o.map, read_options_for_origin(o.origin));
  PointCloud scan = read_point_cloud(o.scan);
  run.map_points_read = map.size();
  run.scan_points_read = scan.size();
  if (o.map_voxel > 0) map = voxel_downsample(map, o.map_voxel);
  if (o.scan_voxel > 0) scan = voxel_downsample(scan, o.scan_voxel);
  run.load_ms = ms_since(t0);
  run.map_points = map.size();
  run.scan_points = scan.size();
  Aligner aligner(s, run.execution);
  t0 = std::chrono::steady_clock::now();
  aligner.set_target(map);
  run.map_ms = ms_since(t0);
  if (aligner.target()->size() == 0) {
    throw Error(fmt::format("{}: the map has no usable voxel at resolution {}", o.map, s.resolution));
  }

  if (run.global) {
    t0 = std::chrono::steady_clock::now();
    InitialPoseSearch search(aligner, o.global_search);
    run.pyramid_ms = ms_since(t0);
    run.pyramid_bytes = search.memory_bytes();
    std::optional<Aligner> fine;
    if (o.refine_ratio > 0.0) {
      t0 = std::chrono::steady_clock::now();
      AlignSettings fs = s;
      fs.resolution = o.refine_ratio * s.resolution;
      fine.emplace(fs, run.execution);
      fine->set_target(map);
      run.fine_map_ms = ms_since(t0);
      search.set_fine(&*fine);
    }
    run.result = search.find(scan, run.query);
  } else {
    // TPE keeps Autoware's semantics: its prior is around --around's roll and pitch.
    run.result = run.tpe ? find_initial_pose_tpe(aligner, scan, around, o.tpe)
                         : find_initial_pose(aligner, scan, around, o.search);
  }
  attach_pose_covariance(aligner, scan, run.result.best);  // --pose-covariance, the winner's only
  return run;
}

// The result as one JSON object.
nlohmann::json initpose_json(const InitPoseOptions& o, const InitPoseRun& run) {
  const AlignSettings& s = run.settings;
  const Pose6& around = run.around;
  const InitialPoseResult& r = run.result;
  // The best alignment's fields at the top level (its time_ms replaced by the search's).
  nlohmann::json j = align_result_json(r.best);
  j["method"] = run.global ? "global" : o.method;
  j["verdict"] = to_string(verdict(r, o.nvtl_threshold));
  j["status"] = found_state(verdict(r, o.nvtl_threshold));
  nlohmann::json candidates = nlohmann::json::array();
  for (const PoseCandidate& c : r.candidates) {
    candidates.push_back({{"xyzrpy", pose_json(c.pose)}, {"nvtl", c.nvtl}, {"overlap", c.overlap},
                          {"converged", c.converged}, {"distance_m", c.distance}, {"angle_deg", c.angle_deg},
                          {"distinct", c.distinct}});
  }
  j["candidates"] = candidates;
  j["nvtl_threshold"] = o.nvtl_threshold;
  j["hypotheses_aligned"] = r.hypotheses_aligned;
  j["screened_hypotheses"] = r.screened_hypotheses;
  j["coarse_hypotheses"] = r.coarse_hypotheses;
  j["refined_hypotheses"] = r.refined_hypotheses;
  j["time_ms"] = r.time_ms;
  j["screen_ms"] = r.screen_ms;
  j["coarse_ms"] = r.coarse_ms;
  j["refine_ms"] = r.refine_ms;
  j["has_rival"] = r.has_rival;
  // NaN is not JSON: no rival prints null.
  j["ambiguity_nvtl"] = r.has_rival ? nlohmann::json(r.ambiguity_nvtl) : nlohmann::json(nullptr);
  j["rival_xyzrpy"] = r.has_rival ? pose_json(r.rival_pose) : nlohmann::json(nullptr);
  j["ambiguous"] = r.ambiguous;
  j["ambiguity_margin"] = o.search.ambiguity_margin;
  j["around"] = o.around.empty() ? nlohmann::json(nullptr) : pose_json(around);
  if (run.global) {
    const GlobalSearchStats& g = r.global;
    j["refined"] = r.refined;
    j["refinement_m"] = r.refinement_m;
    j["refine_ratio"] = o.refine_ratio;
    j["search"] = {{"cell", g.cell},
                   {"region_radius", run.query.around ? nlohmann::json(run.query.radius) : nlohmann::json(nullptr)},
                   {"points", g.points},
                   {"yaws", g.yaws},
                   {"yaw_step_deg", g.yaw_step_deg},
                   {"tilts", g.tilts},
                   {"levels", g.levels},
                   {"top_nodes", g.top_nodes},
                   {"nodes_scored", g.nodes_scored},
                   {"leaves_scored", g.leaves_scored},
                   {"brute_force_leaves", g.brute_force_leaves},
                   {"batches", g.batches},
                   {"standing", g.standing},
                   {"sensor_height", g.sensor_height},
                   {"truncated", g.truncated},
                   {"prepare_ms", g.prepare_ms},
                   {"bound_ms", g.bound_ms},
                   {"align_ms", g.align_ms},
                   {"pyramid_build_ms", run.pyramid_ms},
                   {"pyramid_bytes", run.pyramid_bytes}};
  } else if (run.tpe) {
    j["search"] = {{"particles", o.tpe.particles},
                   {"startup_trials", o.tpe.startup_trials},
                   {"proposal_batch", o.tpe.proposal_batch},
                   {"seed", o.tpe.seed}};
  } else {
    j["search"] = {{"radius", o.search.radius},
                   {"position_step", o.search.position_step},
                   {"yaw_range_deg", o.search.yaw_range_deg},
                   {"yaw_step_deg", o.search.yaw_step_deg},
                   {"coarse_iterations", o.search.coarse_iterations},
                   {"refine_count", o.search.refine_count},
                   {"coarse_points", o.search.coarse_points}};
  }
  j["leveled_from_ground"] = r.leveled;
  j["scan_points"] = run.scan_points;
  j["scan_points_read"] = run.scan_points_read;
  j["map_points"] = run.map_points;
  j["map_points_read"] = run.map_points_read;
  j["load_ms"] = run.load_ms;
  j["map_build_ms"] = run.map_ms;
  if (run.global) j["fine_map_build_ms"] = run.fine_map_ms;
  j["settings"] = ndt_settings_json(o.ndt.preset, s, run.execution, o.ndt.config);
  return j;
}

// The result as text, with the ambiguity check spelled out.
std::string initpose_text(const InitPoseOptions& o, const InitPoseRun& run) {
  const Pose6& around = run.around;
  const InitialPoseResult& r = run.result;
  const AlignResult& b = r.best;
  std::string out = o.around.empty() ? fmt::format("{} in {}, anywhere\n", o.scan, o.map)
                                     : fmt::format("{} in {}, around {}\n", o.scan, o.map, pose_text(around));
  out += fmt::format("  points      scan {} (of {} read), map {} (of {} read), {} voxels\n", run.scan_points,
                     run.scan_points_read, run.map_points, run.map_points_read, b.target_voxels);
  if (run.global) {
    const GlobalSearchStats& g = r.global;
    out += fmt::format("  global      {} points x {} yaws ({:.2f} deg){} at {} m cells{}{}: {} nodes bounded ({} leaves; a "
                       "sweep scores {}), {} candidates aligned\n",
                       g.points, g.yaws, g.yaw_step_deg,
                       g.tilts > 1 ? fmt::format(" x {} tilts", g.tilts) : std::string(), g.cell,
                       g.standing ? fmt::format(", standing {:.2f} m above a floor", g.sensor_height) : std::string(),
                       run.query.around ? fmt::format(", within {} m of --around", run.query.radius) : std::string(),
                       g.nodes_scored, g.leaves_scored, g.brute_force_leaves, r.coarse_hypotheses);
    out += fmt::format("  pyramid     built in {:.1f} ms, {:.0f} MB; bound {:.1f} ms, alignment {:.1f} ms{}\n",
                       run.pyramid_ms, static_cast<double>(run.pyramid_bytes) / 1e6, g.bound_ms, g.align_ms,
                       g.truncated ? " (stopped at the node limit)" : "");
    if (o.refine_ratio > 0.0) {
      out += fmt::format("  refined     at {} m voxels (map built in {:.1f} ms): {}, moved {:.3f} m\n",
                         o.refine_ratio * run.settings.resolution, run.fine_map_ms,
                         r.refined ? "pose taken" : "pose kept (no finer alignment settled close by)", r.refinement_m);
    }
  } else if (run.tpe) {
    out += fmt::format("  tpe         {} startup particles (one batch) + {} proposed (batches of {}) = {} hypotheses "
                       "aligned\n",
                       r.coarse_hypotheses, r.refined_hypotheses, o.tpe.proposal_batch, r.hypotheses_aligned);
  } else {
    const std::string screen = r.screened_hypotheses == 0
                                   ? std::string()
                                   : fmt::format("{} screened ({:.1f} ms), the best ", r.screened_hypotheses, r.screen_ms);
    out += fmt::format("  sweep       radius {} m at {} m, yaw range {} deg at {} deg: {}{} coarse ({} iterations) + {} "
                       "refined = {} hypotheses aligned\n",
                       o.search.radius, o.search.position_step, o.search.yaw_range_deg, o.search.yaw_step_deg,
                       screen, r.coarse_hypotheses, o.search.coarse_iterations, r.refined_hypotheses,
                       r.hypotheses_aligned);
  }
  out += fmt::format("  attitude    {}\n", r.leveled ? "roll and pitch from the scan's ground plane"
                                                 : "roll and pitch of --around");
  out += fmt::format("  pose        {}\n", pose_text(b.pose));
  out += fmt::format("  fitness     NVTL {:.4f}, TP {:.4f}, {} after {} iterations ({})\n", b.nvtl, b.tp,
                     b.converged ? "converged" : "not converged (no refined hypothesis converged)", b.iterations,
                     to_string(b.reason));
  out += fmt::format("  time        search {:.1f} ms ({} {:.1f} ms, {} {:.1f} ms, backend {}), map {:.1f} ms, "
                     "load {:.1f} ms\n",
                     r.time_ms, run.tpe ? "startup" : "coarse", r.coarse_ms, run.tpe ? "proposed" : "refine", r.refine_ms,
                     to_string(b.backend), run.map_ms, run.load_ms);
  if (r.has_rival) {
    out += fmt::format("  rival       NVTL {:.4f} (winner - {:.4f}, margin {}) at {}\n", r.ambiguity_nvtl,
                       b.nvtl - r.ambiguity_nvtl, o.search.ambiguity_margin, pose_text(r.rival_pose));
  } else if (b.matched_points == 0) {
    out += "  rival       none: no hypothesis met the map\n";
  } else {
    out += fmt::format("  rival       none: every hypothesis ended within {} m and {} deg of the winner\n",
                       o.search.ambiguity_distance, o.search.ambiguity_angle_deg);
  }
  if (run.global && r.candidates.size() > 1) {
    out += "  candidates  (best first, one per place)\n";
    for (std::size_t k = 0; k < r.candidates.size() && k < 5; ++k) {
      const PoseCandidate& c = r.candidates[k];
      out += fmt::format("    {}. NVTL {:.4f}  overlap {:.2f}  {:6.2f} m {:6.1f} deg from the best  {}\n", k + 1, c.nvtl,
                         c.overlap, c.distance, c.angle_deg, pose_text(c.pose));
    }
  }
  if (r.ambiguous) out += "  AMBIGUOUS: a distinct pose scores within the margin; not guessing\n";
  const InitialPoseVerdict v = verdict(r, o.nvtl_threshold);
  switch (v) {
    case InitialPoseVerdict::Found:
      out += fmt::format("  verdict     found (NVTL {:.4f} >= {})\n", b.nvtl, o.nvtl_threshold);
      break;
    case InitialPoseVerdict::Ambiguous: out += "  verdict     ambiguous: no pose to take\n"; break;
    case InitialPoseVerdict::BelowThreshold:
      out += fmt::format("  verdict     below the threshold (NVTL {:.4f} < {}): the best pose fits poorly; not a pose "
                         "to take\n", b.nvtl, o.nvtl_threshold);
      break;
    case InitialPoseVerdict::NotConverged: out += "  verdict     not converged: no pose to take\n"; break;
    case InitialPoseVerdict::LowOverlap:
      out += fmt::format("  verdict     low overlap: {} of the scan's {} points met the map at the best pose; not a pose "
                         "to take\n", b.matched_points, b.source_points);
      break;
    case InitialPoseVerdict::NoOverlap:
      out += "  verdict     no overlap: the scan met no map voxel from any hypothesis (is --around in the map?)\n";
      break;
  }
  return out;
}

}  // namespace

Command add_initpose(CLI::App& app, const GlobalOptions& global) {
  auto o = std::make_shared<InitPoseOptions>();
  auto* cmd = app.add_subcommand("initpose", "Find a scan's pose in a map near a rough pose (sweep of positions and yaws), or anywhere in it (--global)");
  const ConfigurableOptions given = add_initpose_options(cmd, *o);
  // Five values are neither form: a usage error, found while parsing.
  cmd->callback([o]() {
    if (o->around.empty() && !o->global) {
      throw CLI::ValidationError("--around", "give a rough pose (--around x,y,z,yaw), or --global to search the whole map");
    }
    if (o->global && o->method != "sweep") {
      throw CLI::ValidationError("--global", "searches by branch and bound; --method tpe needs --around instead");
    }
    if (!o->around.empty() && o->around.size() != 4 && o->around.size() != 6) {
      throw CLI::ValidationError("--around", "4 values (x,y,z,yaw) or 6 (x,y,z,roll,pitch,yaw), received " +
                                                 std::to_string(o->around.size()));
    }
  });
  return [o, &global, given]() {
    const InitPoseRun run = run_initpose(*o, given);
    if (global.json) {
      std::cout << dump_json(initpose_json(*o, run)) << "\n";
      return 0;
    }
    std::cout << printable_lines(initpose_text(*o, run));  // it names the files: no terminal commands
    return 0;
  };
}

}  // namespace ndtcu::cli
