#include "cli_common.hpp"

#include <fmt/format.h>

namespace ndtcu::cli {

std::string human_bytes(std::uint64_t bytes) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1000.0 && u < 4) {
    v /= 1000.0;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.1f} {}", v, units[u]);
}

nlohmann::json describe_json(const CloudInfo& info, const PointCloud& cloud) {
  nlohmann::json j;
  j["path"] = info.path;
  j["format"] = to_string(info.format);
  j["encoding"] = info.encoding;
  j["points"] = cloud.size();
  j["points_in_file"] = info.points_in_file;
  j["non_finite"] = info.non_finite;
  j["width"] = info.width;
  j["height"] = info.height;
  j["organized"] = info.height > 1;
  j["file_bytes"] = info.file_bytes;
  j["xyz_double"] = info.xyz_double;
  j["intensity_field"] = info.intensity_field.empty() ? nlohmann::json(nullptr) : nlohmann::json(info.intensity_field);
  auto& fields = j["fields"] = nlohmann::json::array();
  for (const auto& f : info.fields) {
    fields.push_back({{"name", f.name}, {"type", std::string(1, f.type)}, {"size", f.size}, {"count", f.count}});
  }
  j["origin"] = {cloud.origin.x(), cloud.origin.y(), cloud.origin.z()};
  Bounds b = compute_bounds(cloud);
  if (b.valid) {
    j["bounds"] = {{"min", {b.min.x(), b.min.y(), b.min.z()}}, {"max", {b.max.x(), b.max.y(), b.max.z()}}};
  } else {
    j["bounds"] = nullptr;
  }
  return j;
}

std::string describe_text(const CloudInfo& info, const PointCloud& cloud) {
  std::string fields;
  for (const auto& f : info.fields) {
    fields += fmt::format("{}{}:{}{}", fields.empty() ? "" : " ", f.name, f.type, f.size);
    if (f.count > 1) fields += fmt::format("x{}", f.count);
  }
  std::string out = fmt::format("{}\n", info.path);
  out += fmt::format("  format     {} ({})\n", to_string(info.format), info.encoding);
  out += fmt::format("  points     {} ({} in file, {} non-finite dropped)\n", cloud.size(), info.points_in_file,
                     info.non_finite);
  if (info.height > 1) out += fmt::format("  layout     organized {} x {}\n", info.width, info.height);
  out += fmt::format("  fields     {}\n", fields);
  out += fmt::format("  intensity  {}\n", info.intensity_field.empty() ? "none" : info.intensity_field);
  if (!cloud.origin.isZero()) {
    out += fmt::format("  origin     {:.3f} {:.3f} {:.3f} (subtracted; coordinates kept relative)\n", cloud.origin.x(),
                       cloud.origin.y(), cloud.origin.z());
  }
  Bounds b = compute_bounds(cloud);
  if (b.valid) {
    out += fmt::format("  bounds     x [{:.3f}, {:.3f}]  y [{:.3f}, {:.3f}]  z [{:.3f}, {:.3f}]\n", b.min.x(), b.max.x(),
                       b.min.y(), b.max.y(), b.min.z(), b.max.z());
  } else {
    out += "  bounds     (empty)\n";
  }
  out += fmt::format("  file       {}\n", human_bytes(info.file_bytes));
  return out;
}

void add_ndt_options(CLI::App* cmd, NdtOptions& o) {
  cmd->add_option("--preset", o.preset, "starting NDT settings; every other option overrides them")
      ->check(CLI::IsMember({"autoware", "pcl"}));
  cmd->add_option("--resolution", o.resolution, "NDT voxel size (m)")->check(CLI::PositiveNumber);
  cmd->add_option("--search", o.search, "neighbour search")
      ->check(CLI::IsMember({"radius", "direct27", "direct7", "direct1"}));
  cmd->add_option("--line-search", o.line_search, "step length rule")->check(CLI::IsMember({"more-thuente", "fixed"}));
  cmd->add_option("--step-size", o.step_size, "largest step |dp|")->check(CLI::PositiveNumber);
  cmd->add_option("--epsilon", o.epsilon, "convergence threshold")->check(CLI::NonNegativeNumber);
  cmd->add_option("--max-iterations", o.max_iterations, "Newton iterations at most")->check(CLI::PositiveNumber);
  cmd->add_option("--convergence", o.convergence, "stopping rule")->check(CLI::IsMember({"pcl", "autoware"}));
  cmd->add_option("--newton-direction", o.newton_direction,
                  "Newton direction: H dp = -g as PCL and Autoware solve it, or saddle-free (|eigenvalues|)")
      ->check(CLI::IsMember({"pcl", "saddle-free"}));
  cmd->add_option("--covariance", o.covariance, "voxel covariance convention")->check(CLI::IsMember({"pcl", "autoware"}));
  cmd->add_option("--pose-covariance", o.pose_covariance,
                  "covariance of the aligned pose, as Autoware estimates it: none, laplace ((-H)^-1 of the score), "
                  "multi-ndt (6 more aligns from 0.5-1 m offsets), multi-ndt-score (NVTL-weighted offsets)")
      ->check(CLI::IsMember({"none", "laplace", "multi-ndt", "multi-ndt-score"}));
  cmd->add_option("--threads", o.threads, "CPU threads for the alignment (0 = all)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--backend", o.backend, "backend (auto: CUDA when a device is present)")
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}));
  cmd->add_option("--gpu-loop", o.gpu_loop,
                  "CUDA, fixed step: Newton loop in one device graph, or one host round trip per iteration")
      ->check(CLI::IsMember({"device", "host"}));
}

nlohmann::json ndt_settings_json(const std::string& preset, const AlignSettings& s) {
  return {{"preset", preset},
          {"resolution", s.resolution},
          {"step_size", s.step_size},
          {"epsilon", s.epsilon},
          {"max_iterations", s.max_iterations},
          {"search", to_string(s.search)},
          {"line_search", to_string(s.line_search)},
          {"convergence", to_string(s.convergence)},
          {"newton_direction", to_string(s.newton_direction)},
          {"covariance", to_string(s.covariance)},
          {"pose_covariance", to_string(s.pose_covariance)},
          {"threads", s.threads},
          {"backend", to_string(s.backend)},
          {"gpu_loop", to_string(s.gpu_loop)}};
}

AlignSettings ndt_settings(const NdtOptions& o) {
  AlignSettings s = preset(o.preset);
  if (o.resolution) s.resolution = *o.resolution;
  if (o.step_size) s.step_size = *o.step_size;
  if (o.epsilon) s.epsilon = *o.epsilon;
  if (o.max_iterations) s.max_iterations = *o.max_iterations;
  if (o.threads) s.threads = *o.threads;
  if (o.search) s.search = search_method_from_string(*o.search);
  if (o.line_search) s.line_search = line_search_from_string(*o.line_search);
  if (o.covariance) s.covariance = covariance_mode_from_string(*o.covariance);
  if (o.convergence) s.convergence = convergence_rule_from_string(*o.convergence);
  if (o.newton_direction) s.newton_direction = newton_direction_from_string(*o.newton_direction);
  if (o.pose_covariance) s.pose_covariance = pose_covariance_from_string(*o.pose_covariance);
  if (o.backend) s.backend = backend_from_string(*o.backend);
  if (o.gpu_loop) s.gpu_loop = gpu_loop_from_string(*o.gpu_loop);
  return s;
}

}  // namespace ndtcu::cli
