#include "cli_common.hpp"
#include "commands.hpp"

#include <ndtcu/cuda_device.hpp>
#include <ndtcu/rosbag.hpp>
#include <ndtcu/text.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <memory>

namespace ndtcu::cli {

namespace {

double seconds(std::int64_t ns) { return static_cast<double>(ns) * 1e-9; }

nlohmann::json describe_bag_json(const rosbag::BagInfo& b) {
  nlohmann::json topics = nlohmann::json::array();
  for (const auto& t : b.topics) {
    topics.push_back({{"name", json_text(t.name)}, {"type", json_text(t.type)}, {"encoding", json_text(t.encoding)},
                      {"messages", t.messages}, {"point_cloud2", rosbag::is_point_cloud2_type(t.type)}});
  }
  nlohmann::json files = nlohmann::json::array();
  for (const auto& f : b.files) files.push_back(json_text(f));
  return {{"path", json_text(b.path)}, {"format", rosbag::to_string(b.format)}, {"storage_files", files},
          {"compression", b.compression}, {"chunks", b.chunks}, {"bytes", b.bytes}, {"messages", b.messages},
          {"start_time", seconds(b.start_ns)}, {"end_time", seconds(b.end_ns)}, {"topics", topics}};
}

std::string describe_bag_text(const rosbag::BagInfo& b) {
  std::string out = fmt::format("{}\n  bag         {}, {} storage file{}, {}\n", printable(b.path), rosbag::to_string(b.format),
                                b.files.size(), b.files.size() == 1 ? "" : "s", human_bytes(b.bytes));
  out += fmt::format("  compression {}{}\n", printable(b.compression),
                     b.chunks > 0 ? fmt::format(" ({} chunk{})", b.chunks, b.chunks == 1 ? "" : "s") : "");
  out += fmt::format("  messages    {} from {:.6f} to {:.6f} s ({:.3f} s)\n", b.messages, seconds(b.start_ns),
                     seconds(b.end_ns), seconds(b.end_ns - b.start_ns));
  // Topic names, types and encodings are the bag's bytes: shown through printable().
  std::size_t name_width = 5, type_width = 4;
  for (const auto& t : b.topics) {
    name_width = std::max(name_width, printable(t.name).size());
    type_width = std::max(type_width, printable(t.type).size());
  }
  out += fmt::format("  {:<{}}  {:<{}}  {:>8}  {}\n", "topic", name_width, "type", type_width, "messages", "encoding");
  for (const auto& t : b.topics) {
    out += fmt::format("  {:<{}}  {:<{}}  {:>8}  {}\n", printable(t.name), name_width, printable(t.type), type_width,
                       t.messages, printable(t.encoding));
  }
  return out;
}

}  // namespace

Command add_info(CLI::App& app, const GlobalOptions& global) {
  auto files = std::make_shared<std::vector<std::string>>();
  auto origin = std::make_shared<std::string>("auto");
  auto* cmd = app.add_subcommand(
      "info", "Describe point-cloud files (points, fields, encoding, bounds) and rosbags (topics, types, messages)");
  cmd->add_option("FILE", *files,
                  "PCD, PLY or KITTI .bin files; rosbags: .bag, .mcap, .db3 or a ROS 2 bag folder")
      ->required();
  add_origin_option(cmd, *origin, "each point-cloud FILE");
  return [files, origin, &global]() {
    const ReadOptions read = read_options_for_origin(*origin);
    nlohmann::json all = nlohmann::json::array();
    for (const auto& path : *files) {
      if (rosbag::is_bag_path(path)) {
        const rosbag::BagReader bag(path);
        if (global.json) all.push_back(describe_bag_json(bag.info()));
        else std::cout << describe_bag_text(bag.info());
        continue;
      }
      CloudInfo info;
      PointCloud cloud = read_point_cloud(path, read, &info);
      if (global.json) all.push_back(describe_json(info, cloud));
      else std::cout << describe_text(info, cloud);
    }
    if (global.json) std::cout << dump_json(nlohmann::json{{"files", all}}) << "\n";
    return 0;
  };
}

Command add_devices(CLI::App& app, const GlobalOptions& global) {
  app.add_subcommand("devices", "List the CUDA devices this build of ndtcu can use");
  return [&global]() {
    auto devices = cuda_devices();
    std::string why = cuda_unavailable_reason();
    if (global.json) {
      nlohmann::json j;
      j["cuda_compiled"] = cuda_compiled();
      j["unavailable_reason"] = why.empty() ? nlohmann::json(nullptr) : json_text(why);
      j["devices"] = nlohmann::json::array();
      for (const auto& d : devices) {
        j["devices"].push_back({{"index", d.index}, {"name", json_text(d.name)},
                                {"compute_capability", fmt::format("{}.{}", d.compute_major, d.compute_minor)},
                                {"multiprocessors", d.multiprocessors}, {"total_memory_bytes", d.total_memory_bytes},
                                {"free_memory_bytes", d.free_memory_bytes}});
      }
      std::cout << dump_json(j) << "\n";
      return 0;
    }
    if (devices.empty()) {
      std::cout << "no CUDA device: " << why << "\n";
      return 0;
    }
    for (const auto& d : devices) {
      std::cout << fmt::format("{}: {} (sm_{}{}, {} SMs, {} total, {} free)\n", d.index, d.name, d.compute_major,
                               d.compute_minor, d.multiprocessors, human_bytes(d.total_memory_bytes),
                               human_bytes(d.free_memory_bytes));
    }
    return 0;
  };
}

}  // namespace ndtcu::cli
