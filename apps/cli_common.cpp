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

}  // namespace ndtcu::cli
