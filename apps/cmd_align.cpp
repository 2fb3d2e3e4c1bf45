// `ndtcu align TARGET SOURCE`: one NDT alignment on files, as a table or one JSON object.
#include "cli_common.hpp"
#include "commands.hpp"

#include <ndtcu/aligner.hpp>
#include <ndtcu/error.hpp>
#include <ndtcu/filters.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>

namespace ndtcu::cli {

namespace {

struct AlignOptions {
  std::string target, source, output, init_matrix;
  std::vector<double> init;
  double target_voxel = 0.0, source_voxel = 0.0;
  NdtOptions ndt;
};

// A 4x4 (16 numbers) or 3x4 (12 numbers, KITTI pose line) row-major matrix.
Eigen::Matrix4d read_matrix(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw IoError(path, "cannot open initial-guess matrix");
  std::vector<double> v;
  std::string token;
  while (in >> token) {
    try {
      std::size_t used = 0;
      v.push_back(std::stod(token, &used));
      if (used != token.size()) throw std::invalid_argument(token);
    } catch (const std::exception&) {
      throw IoError(path, "not a number: '" + token + "'");
    }
  }
  if (v.size() != 16 && v.size() != 12) {
    throw IoError(path, fmt::format("expected 16 (4x4) or 12 (3x4) numbers, found {}", v.size()));
  }
  Eigen::Matrix4d m = Eigen::Matrix4d::Identity();
  for (int r = 0; r < static_cast<int>(v.size()) / 4; ++r) {
    for (int c = 0; c < 4; ++c) m(r, c) = v[static_cast<std::size_t>(4 * r + c)];
  }
  return m;
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

Command add_align(CLI::App& app, const GlobalOptions& global) {
  auto o = std::make_shared<AlignOptions>();
  auto* cmd = app.add_subcommand("align", "Align SOURCE to TARGET with NDT (Autoware's settings unless told otherwise)");
  cmd->add_option("TARGET", o->target, "target (map) point cloud: .pcd, .ply or .bin")->required();
  cmd->add_option("SOURCE", o->source, "source (scan) point cloud")->required();
  auto* init = cmd->add_option("--init", o->init, "initial guess x,y,z,roll,pitch,yaw (m, rad)")
                   ->delimiter(',')
                   ->expected(6);
  cmd->add_option("--init-matrix", o->init_matrix, "initial guess as a 4x4 or 3x4 row-major matrix file")
      ->excludes(init);
  cmd->add_option("--target-voxel", o->target_voxel, "voxel-filter the target first (leaf, m; 0 = no)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--source-voxel", o->source_voxel, "voxel-filter the source first (leaf, m; 0 = no)")
      ->check(CLI::NonNegativeNumber);
  add_ndt_options(cmd, o->ndt);
  cmd->add_option("--output", o->output, "write the source, aligned into the target's frame (.pcd or .bin)");

  return [o, &global]() {
    AlignSettings s = ndt_settings(o->ndt);

    Pose6 guess = Pose6::Zero();
    if (!o->init.empty()) {
      for (int i = 0; i < 6; ++i) guess(i) = o->init[static_cast<std::size_t>(i)];
    } else if (!o->init_matrix.empty()) {
      guess = matrix_to_pose(read_matrix(o->init_matrix));
    }

    auto t0 = std::chrono::steady_clock::now();
    PointCloud target = read_point_cloud(o->target);
    PointCloud source = read_point_cloud(o->source);
    const std::size_t target_points_read = target.size(), source_points_read = source.size();
    if (o->target_voxel > 0) target = voxel_downsample(target, o->target_voxel);
    if (o->source_voxel > 0) source = voxel_downsample(source, o->source_voxel);
    const double load_ms = ms_since(t0);

    Aligner aligner(s);
    t0 = std::chrono::steady_clock::now();
    aligner.set_target(target);
    const double map_ms = ms_since(t0);
    const AlignResult r = aligner.align_from_pose(source, guess);

    if (!o->output.empty()) {
      // Source points in the target's frame, relative to the target's origin.
      PointCloud out;
      out.origin = target.origin;
      out.intensity = source.intensity;
      const Eigen::Matrix3d rot = r.transform.topLeftCorner<3, 3>();
      const Eigen::Vector3d shift = r.transform.topRightCorner<3, 1>() - target.origin;
      out.points.reserve(source.size());
      for (std::size_t i = 0; i < source.size(); ++i) {
        out.points.push_back((rot * source.world(i) + shift).cast<float>());
      }
      write_point_cloud(o->output, out);
    }

    if (global.json) {
      nlohmann::json j;
      std::vector<double> t;
      for (int row = 0; row < 4; ++row)
        for (int c = 0; c < 4; ++c) t.push_back(r.transform(row, c));
      j["transform"] = t;
      j["xyzrpy"] = {r.pose(0), r.pose(1), r.pose(2), r.pose(3), r.pose(4), r.pose(5)};
      j["converged"] = r.converged;
      j["reason"] = to_string(r.reason);
      j["iterations"] = r.iterations;
      j["score"] = r.score;
      j["tp"] = r.tp;
      j["nvtl"] = r.nvtl;
      j["correspondences"] = r.correspondences;
      j["matched_points"] = r.matched_points;
      j["source_points"] = r.source_points;
      j["source_points_read"] = source_points_read;
      j["target_points"] = target.size();
      j["target_points_read"] = target_points_read;
      j["target_voxels"] = r.target_voxels;
      j["oscillation_count"] = r.oscillation_count;
      j["backend"] = r.backend;
      j["time_ms"] = r.timings.total_ms;
      j["per_iteration_ms"] = r.timings.per_iteration_ms;
      j["evaluations"] = r.timings.evaluations;
      if (r.covariance_mode != PoseCovariance::None) {
        // Row-major, [x y z roll pitch yaw] (m, rad); zeros when covariance_valid is false.
        std::vector<double> c, cxy;
        for (int row = 0; row < 6; ++row)
          for (int col = 0; col < 6; ++col) c.push_back(r.covariance(row, col));
        for (int row = 0; row < 2; ++row)
          for (int col = 0; col < 2; ++col) cxy.push_back(r.covariance_xy(row, col));
        j["covariance_mode"] = to_string(r.covariance_mode);
        j["covariance_valid"] = r.covariance_valid;
        j["covariance"] = c;
        j["covariance_xy"] = cxy;
        j["covariance_ms"] = r.timings.covariance_ms;
      }
      if (r.backend == "cuda") {
        j["gpu"] = {{"gpu_ms", r.timings.gpu_ms},
                    {"upload_ms", r.timings.upload_ms},
                    {"bytes_up", r.timings.bytes_up},
                    {"bytes_down", r.timings.bytes_down},
                    {"setup_bytes_up", r.timings.setup_bytes_up},
                    {"derivatives", to_string(s.gpu_derivatives)},
                    {"newton_loop", wants_device_loop(s) ? to_string(s.gpu_loop) : "host"}};
      }
      j["map_build_ms"] = map_ms;
      j["load_ms"] = load_ms;
      j["settings"] = ndt_settings_json(o->ndt.preset, s);
      auto& trace = j["trace"] = nlohmann::json::array();
      for (const auto& it : r.trace) {
        trace.push_back({{"xyzrpy", {it.pose(0), it.pose(1), it.pose(2), it.pose(3), it.pose(4), it.pose(5)}},
                         {"score", it.score},
                         {"step", it.step_length}});
      }
      std::cout << j.dump(2) << "\n";
    } else {
      std::string out = fmt::format("{} -> {}\n", o->source, o->target);
      out += fmt::format("  points      source {} (of {} read), target {} (of {} read), {} voxels\n", r.source_points,
                         source_points_read, target.size(), target_points_read, r.target_voxels);
      out += fmt::format("  settings    preset {}, resolution {} m, {} search, {} step {}, epsilon {}, {} covariance\n",
                         o->ndt.preset, s.resolution, to_string(s.search), to_string(s.line_search), s.step_size,
                         s.epsilon, to_string(s.covariance));
      out += fmt::format("  result      {} after {} iterations ({})\n", r.converged ? "converged" : "not converged",
                         r.iterations, to_string(r.reason));
      out += fmt::format("  pose        x {:.4f}  y {:.4f}  z {:.4f}  roll {:.5f}  pitch {:.5f}  yaw {:.5f}\n", r.pose(0),
                         r.pose(1), r.pose(2), r.pose(3), r.pose(4), r.pose(5));
      out += fmt::format("  fitness     score {:.3f}, TP {:.4f}, NVTL {:.4f}, {} correspondences, oscillation {}\n",
                         r.score, r.tp, r.nvtl, r.correspondences, r.oscillation_count);
      out += fmt::format("  time        align {:.2f} ms ({:.2f} ms/iteration, {} evaluations, backend {}), map {:.1f} ms, "
                         "load {:.1f} ms\n",
                         r.timings.total_ms, r.timings.per_iteration_ms, r.timings.evaluations, r.backend, map_ms,
                         load_ms);
      if (r.backend == "cuda") {
        out += fmt::format("  gpu         {:.3f} ms kernels ({:.1f} us/evaluation), upload {:.3f} ms, {} B up and {} B down "
                           "per evaluation\n",
                           r.timings.gpu_ms, r.timings.evaluations ? 1e3 * r.timings.gpu_ms / r.timings.evaluations : 0.0,
                           r.timings.upload_ms, r.timings.evaluations ? r.timings.bytes_up / r.timings.evaluations : 0,
                           r.timings.evaluations ? r.timings.bytes_down / r.timings.evaluations : 0);
      }
      if (r.covariance_mode != PoseCovariance::None) {
        if (r.covariance_valid) {
          const auto sd = [&r](int i) { return std::sqrt(std::max(0.0, r.covariance(i, i))); };
          constexpr double kDeg = 180.0 / 3.14159265358979323846;
          out += fmt::format("  covariance  {} ({:.2f} ms): sigma x {:.4f} m, y {:.4f} m, z {:.4f} m, roll {:.4f} deg, "
                             "pitch {:.4f} deg, yaw {:.4f} deg\n",
                             to_string(r.covariance_mode), r.timings.covariance_ms, sd(0), sd(1), sd(2), sd(3) * kDeg,
                             sd(4) * kDeg, sd(5) * kDeg);
          for (int row = 0; row < 6; ++row) {
            out += "   ";
            for (int col = 0; col < 6; ++col) out += fmt::format(" {:13.6e}", r.covariance(row, col));
            out += "\n";
          }
          out += fmt::format("  cov x-y     {:13.6e} {:13.6e} / {:13.6e} {:13.6e} (m^2, as Autoware's estimator)\n",
                             r.covariance_xy(0, 0), r.covariance_xy(0, 1), r.covariance_xy(1, 0), r.covariance_xy(1, 1));
        } else {
          out += fmt::format("  covariance  {}: not available (laplace: -H is not positive definite at this pose; multi-ndt: not finite)\n",
                             to_string(r.covariance_mode));
        }
      }
      out += "  transform\n";
      for (int row = 0; row < 4; ++row) {
        out += fmt::format("    {:12.8f} {:12.8f} {:12.8f} {:12.6f}\n", r.transform(row, 0), r.transform(row, 1),
                           r.transform(row, 2), r.transform(row, 3));
      }
      std::cout << out;
    }
    return 0;
  };
}

}  // namespace ndtcu::cli
