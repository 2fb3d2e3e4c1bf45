#include "cli_common.hpp"
#include "commands.hpp"

#include <ndtcu/cuda_device.hpp>

#include <fmt/format.h>

#include <iostream>
#include <memory>

namespace ndtcu::cli {

Command add_info(CLI::App& app, const GlobalOptions& global) {
  auto files = std::make_shared<std::vector<std::string>>();
  auto* cmd = app.add_subcommand("info", "Describe point-cloud files: points, fields, encoding, bounds");
  cmd->add_option("FILE", *files, "PCD, PLY or KITTI .bin files")->required();
  return [files, &global]() {
    nlohmann::json all = nlohmann::json::array();
    for (const auto& path : *files) {
      CloudInfo info;
      PointCloud cloud = read_point_cloud(path, {}, &info);
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
