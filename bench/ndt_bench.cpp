// ndtcu_bench: times PCL's NDT (when built with PCL), ndtcu's CPU backend and, when a
// device is present, its CUDA backend on the same pair, in one run: median and min of
// repeated aligns after a warm-up, iterations, per-iteration cost, GPU time and bytes per
// evaluation, and the pose's distance from PCL's. With --batch it times batches of K pose
// hypotheses instead (batch_bench.cpp). Not a test: see BENCHMARK.md.
#include "batch_bench.hpp"

#include <ndtcu/aligner.hpp>
#include <ndtcu/cuda_device.hpp>
#include <ndtcu/error.hpp>
#include <ndtcu/filters.hpp>
#include <ndtcu/io.hpp>
#include <ndtcu/output_file.hpp>
#include <ndtcu/trajectory.hpp>
#include <ndtcu/log.hpp>
#include <ndtcu/version.hpp>

#include <CLI/CLI.hpp>
#include <Eigen/Geometry>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#if defined(NDTCU_BENCH_WITH_PCL)
#include <pcl/point_cloud.h>
#include <pcl/point_types.h>
#include <pcl/registration/ndt.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

using namespace ndtcu;

namespace {

struct Row {
  std::string name, search;
  int threads = 1;
  std::vector<double> ms;
  int iterations = 0, evaluations = 0;
  Eigen::Matrix4d transform = Eigen::Matrix4d::Identity();
  double gpu_ms = 0.0;                          // CUDA rows: kernel time of the last align
  std::uint64_t bytes_up = 0, bytes_down = 0;   // CUDA rows: per-evaluation traffic of the last align
  double median() const {
    std::vector<double> v = ms;
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
  }
  double min() const { return *std::min_element(ms.begin(), ms.end()); }
};

// Reads a cloud, drops points exactly at the origin (invalid returns), voxel-filters it.
PointCloud prepare(const std::string& path, double leaf) {
  ReadOptions o;
  o.origin_policy = OriginPolicy::Zero;
  o.read_intensity = false;
  PointCloud raw = read_point_cloud(path, o), kept;
  for (const auto& p : raw.points) {
    if (!(p.x() == 0.f && p.y() == 0.f && p.z() == 0.f)) kept.points.push_back(p);
  }
  return leaf > 0 ? voxel_downsample(kept, leaf) : kept;
}

template <typename F>
void time_it(Row& row, int warmup, int repeats, F&& run) {
  for (int i = 0; i < warmup; ++i) run();
  for (int i = 0; i < repeats; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    run();
    row.ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
}

std::filesystem::path default_data_dir() {
  if (const char* env = std::getenv("NDTCU_DATA_DIR"); env && *env) return env;
  return std::filesystem::path(NDTCU_SOURCE_DIR) / ".." / "shared" / "data";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ndtcu_bench " NDTCU_VERSION_STRING ": PCL's NDT vs the ndtcu CPU backend on one pair", "ndtcu_bench"};
  const auto data = default_data_dir();
  std::string target = (data / "pairs/hdl32/target_251370668.pcd").string();
  std::string source = (data / "pairs/hdl32/source_251371071.pcd").string();
  double leaf = 0.1, resolution = 1.0, step = 1.0, epsilon = 1e-4;
  std::optional<double> target_leaf, source_leaf;
  std::vector<double> init;
  bool no_pcl = false, few_cpu_rows = false;
  std::string init_from;
  std::size_t init_index = 0;
  int iterations = 35, repeats = 7, warmup = 1;
  std::string json_file;
  app.add_option("--target", target, "target cloud (default: the hdl32 pair's target)");
  app.add_option("--source", source, "source cloud (default: the hdl32 pair's source)");
  app.add_option("--leaf", leaf, "voxel filter for both clouds (m)");
  app.add_option("--target-leaf", target_leaf, "voxel filter for the target (m; default --leaf, 0 = none)");
  app.add_option("--source-leaf", source_leaf, "voxel filter for the source (m; default --leaf, 0 = none)");
  app.add_option("--init", init, "initial guess x,y,z,roll,pitch,yaw (world frame)")->delimiter(',')->expected(6);
  app.add_option("--init-from", init_from, "initial guess: a pose of this TUM or KITTI trajectory file")
      ->excludes("--init");
  app.add_option("--init-index", init_index, "which pose of --init-from (0 = first)");
  app.add_flag("--no-pcl", no_pcl, "skip the PCL row (slow on large clouds)");
  app.add_flag("--few-cpu-rows", few_cpu_rows,
               "CPU rows: only radius with one thread and radius/direct7 with all threads (large clouds)");
  app.add_option("--resolution", resolution, "NDT resolution (m)");
  app.add_option("--step-size", step, "step size");
  app.add_option("--epsilon", epsilon, "transformation epsilon");
  app.add_option("--max-iterations", iterations, "iterations at most");
  app.add_option("--repeats", repeats, "timed aligns per row (--batch: timed batches per row at most)")->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "untimed aligns first (--batch: untimed batches per row)")->check(CLI::NonNegativeNumber);
  auto* json_opt = app.add_option("--json", json_file,
                                  "JSON: alone, one document on stdout instead of the table; with FILE, written there "
                                  "besides the table")
                       ->expected(0, 1);
  std::string batch_list, workloads, data_dir = data.string();
  bench::BatchBenchOptions batch;
  auto* batch_opt = app.add_option("--batch", batch_list,
                                   "time K pose hypotheses of one scan per align_batch call on the batch workloads "
                                   "instead of the pair, for each K of the list (alone: 1,8,64,200,1024,4096)")
                        ->expected(0, 1);
  app.add_option("--workloads", workloads, "--batch: which workloads (kitti00,balm,hdl32 by default)")
      ->needs(batch_opt);
  app.add_option("--data", data_dir, "--batch: the real-data folder (default $NDTCU_DATA_DIR or ../shared/data)")
      ->needs(batch_opt);
  app.add_option("--cpu-max-k", batch.cpu_max_k, "--batch: the CPU backend runs batches of at most this many")
      ->check(CLI::NonNegativeNumber)
      ->needs(batch_opt);
  app.add_option("--row-budget-ms", batch.row_budget_ms,
                 "--batch: timed batches per row as fit this (at least 3, at most --repeats)")
      ->check(CLI::PositiveNumber)
      ->needs(batch_opt);
  app.add_option("--seed", batch.seed, "--batch: seed of the random starts")->needs(batch_opt);
  app.add_option("--fixed-iterations", batch.fixed_iterations,
                 "--batch: iterations of the single align run to the cap")
      ->check(CLI::PositiveNumber)
      ->needs(batch_opt);
  CLI11_PARSE(app, argc, argv);
  set_log_level(LogLevel::Warn);
  const bool json = json_opt->count() > 0;

  if (batch_opt->count() > 0) {
    try {
      if (!batch_list.empty()) batch.ks = bench::parse_batch_sizes(batch_list);
      if (!workloads.empty()) {
        batch.workloads.clear();
        std::size_t start = 0;
        for (std::size_t comma; (comma = workloads.find(',', start)) != std::string::npos; start = comma + 1) {
          batch.workloads.push_back(workloads.substr(start, comma - start));
        }
        batch.workloads.push_back(workloads.substr(start));
        for (const auto& w : batch.workloads) {
          if (std::find(bench::kBatchWorkloads.begin(), bench::kBatchWorkloads.end(), w) == bench::kBatchWorkloads.end()) {
            throw Error("--workloads: unknown workload '" + w + "' (use kitti00, balm, hdl32)");
          }
        }
      }
      batch.data = data_dir;
      batch.max_repeats = repeats;
      batch.warmup = warmup;
      batch.json_path = json_file;
      batch.json_stdout = json && json_file.empty();
      return bench::run_batch_bench(batch);
    } catch (const Error& e) {
      std::cerr << "ndtcu_bench: error: " << e.what() << "\n";
      return 1;
    }
  }

  const PointCloud tgt = prepare(target, target_leaf.value_or(leaf)), src = prepare(source, source_leaf.value_or(leaf));
  Pose6 guess = Pose6::Zero();
  for (std::size_t i = 0; i < init.size(); ++i) guess(static_cast<int>(i)) = init[i];
  if (!init_from.empty()) {
    const Trajectory poses = read_trajectory(init_from);
    if (init_index >= poses.size()) {
      std::cerr << "ndtcu_bench: " << init_from << " has " << poses.size() << " poses, no index " << init_index << "\n";
      return 2;
    }
    guess = matrix_to_pose(poses[init_index].pose.matrix());
  }
  const Eigen::Matrix4d guess_matrix = pose_to_matrix(guess);
  std::vector<Row> rows;

  std::optional<Eigen::Matrix4d> pcl_pose;
#if defined(NDTCU_BENCH_WITH_PCL)
  if (!no_pcl) {
    using Cloud = pcl::PointCloud<pcl::PointXYZ>;
    Cloud::Ptr pt(new Cloud), ps(new Cloud);
    for (const auto& p : tgt.points) pt->push_back(pcl::PointXYZ(p.x(), p.y(), p.z()));
    for (const auto& p : src.points) ps->push_back(pcl::PointXYZ(p.x(), p.y(), p.z()));
    pcl::NormalDistributionsTransform<pcl::PointXYZ, pcl::PointXYZ> ndt;
    ndt.setResolution(static_cast<float>(resolution));
    ndt.setStepSize(step);
    ndt.setTransformationEpsilon(epsilon);
    ndt.setMaximumIterations(iterations);
    ndt.setInputSource(ps);
    ndt.setInputTarget(pt);  // builds PCL's voxel grid, outside the timed aligns
    Row row{"pcl", "radius (kd-tree)", 1, {}, 0, 0, {}};
    Cloud out;
    time_it(row, warmup, repeats, [&] { ndt.align(out, guess_matrix.cast<float>()); });
    row.iterations = ndt.getFinalNumIteration();
    row.transform = ndt.getFinalTransformation().cast<double>();
    pcl_pose = row.transform;
    rows.push_back(row);
  }
#endif

  const int all = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  struct Config {
    SearchMethod search;
    int threads;
    LineSearch line_search;
    Backend backend = Backend::Cpu;
    GpuNewtonLoop loop = GpuNewtonLoop::Device;  // CUDA, fixed step: where the Newton loop runs
  };
  // PCL's step rule and stopping rule in every row but "direct7 autoware": Autoware's
  // preset (fixed step 0.1, its stopping rule and covariance) at the same resolution, one
  // evaluation per iteration and no line-search trials.
  const auto mt = LineSearch::MoreThuente;
  std::vector<Config> configs = {{SearchMethod::Radius, 1, mt}, {SearchMethod::Direct27, 1, mt},
                                 {SearchMethod::Direct7, 1, mt}, {SearchMethod::Direct1, 1, mt},
                                 {SearchMethod::Direct7, 1, LineSearch::Fixed}};
  if (few_cpu_rows) configs = {{SearchMethod::Radius, 1, mt}};
  if (all > 1) {
    configs.push_back({SearchMethod::Radius, all, mt});
    configs.push_back({SearchMethod::Direct7, all, mt});
    configs.push_back({SearchMethod::Radius, all, LineSearch::Fixed});
    configs.push_back({SearchMethod::Direct7, all, LineSearch::Fixed});
  }
  if (cuda_unavailable_reason().empty()) {
    for (auto search : {SearchMethod::Radius, SearchMethod::Direct7}) {
      configs.push_back({search, 1, mt, Backend::Cuda});
      configs.push_back({search, 1, LineSearch::Fixed, Backend::Cuda});
      configs.push_back({search, 1, LineSearch::Fixed, Backend::Cuda, GpuNewtonLoop::Host});
    }
  } else {
    std::cerr << "ndtcu_bench: no CUDA rows: " << cuda_unavailable_reason() << "\n";
  }
  for (const auto& c : configs) {
    const bool autoware = c.line_search == LineSearch::Fixed;
    AlignSettings s = autoware ? autoware_preset() : pcl_preset();
    s.resolution = resolution;
    if (!autoware) {  // the same step rule and stopping rule as PCL's row
      s.step_size = step;
      s.epsilon = epsilon;
      s.max_iterations = iterations;
    }
    s.search = c.search;
    ExecutionOptions e;
    e.threads = c.threads;
    e.backend = c.backend;
    e.gpu_loop = c.loop;
    Aligner aligner(s, e);
    aligner.set_target(tgt);
    const bool cuda = c.backend == Backend::Cuda;
    const bool host_loop = cuda && autoware && c.loop == GpuNewtonLoop::Host;
    Row row{cuda ? "ndtcu cuda" : "ndtcu cpu",
            std::string(to_string(c.search)) + (autoware ? " autoware" : "") + (host_loop ? " host" : ""),
            cuda ? 0 : c.threads, {}, 0, 0, {}};
    AlignResult r;
    time_it(row, warmup, repeats, [&] { r = aligner.align_from_pose(src, guess); });
    row.iterations = r.iterations;
    row.evaluations = r.timings.evaluations;
    row.transform = r.transform;
    row.gpu_ms = r.timings.gpu_ms;
    row.bytes_up = r.timings.evaluations ? r.timings.bytes_up / r.timings.evaluations : 0;
    row.bytes_down = r.timings.evaluations ? r.timings.bytes_down / r.timings.evaluations : 0;
    rows.push_back(row);
  }

  auto agreement = [&](const Row& row) -> std::pair<double, double> {
    if (!pcl_pose) return {-1, -1};
    const double dt = (row.transform.topRightCorner<3, 1>() - pcl_pose->topRightCorner<3, 1>()).norm();
    const double da = Eigen::AngleAxisd(Eigen::Matrix3d(row.transform.topLeftCorner<3, 3>().transpose() *
                                                        pcl_pose->topLeftCorner<3, 3>()))
                          .angle();
    return {dt, da};
  };
  // PCL does not report its derivative evaluations (Newton steps plus More-Thuente trials).
  // ndtcu's radius row follows PCL's path exactly (same iterations and trials, pose within
  // 1e-7 m: see the dt column), so PCL's count is taken from it when they agree.
  if (pcl_pose && rows.size() > 1 && rows[1].iterations == rows[0].iterations &&
      (rows[1].transform.topRightCorner<3, 1>() - pcl_pose->topRightCorner<3, 1>()).norm() < 1e-6) {
    rows[0].evaluations = rows[1].evaluations;
  }
  const double pcl_per_iter = pcl_pose ? rows.front().median() / std::max(1, rows.front().iterations) : 0.0;
  const double pcl_per_eval =
      pcl_pose && rows.front().evaluations ? rows.front().median() / rows.front().evaluations : 0.0;
  auto per_eval = [](const Row& row) { return row.evaluations ? row.median() / row.evaluations : 0.0; };

  if (json) {
    nlohmann::json j;
    j["target"] = target;
    j["source"] = source;
    j["target_points"] = tgt.size();
    j["source_points"] = src.size();
    j["settings"] = {{"leaf", leaf}, {"resolution", resolution}, {"step_size", step}, {"epsilon", epsilon},
                     {"max_iterations", iterations}, {"repeats", repeats}, {"warmup", warmup}};
    for (const auto& row : rows) {
      const auto [dt, da] = agreement(row);
      const double per_iter = row.median() / std::max(1, row.iterations);
      j["rows"].push_back({{"name", row.name}, {"search", row.search}, {"threads", row.threads},
                           {"median_ms", row.median()}, {"min_ms", row.min()}, {"iterations", row.iterations},
                           {"evaluations", row.evaluations}, {"per_iteration_ms", per_iter},
                           {"pcl_per_iteration_ratio", pcl_per_iter > 0 ? per_iter / pcl_per_iter : 0.0},
                           {"per_evaluation_ms", per_eval(row)},
                           {"pcl_per_evaluation_ratio", pcl_per_eval > 0 ? per_eval(row) / pcl_per_eval : 0.0},
                           {"dt_vs_pcl_m", dt}, {"da_vs_pcl_rad", da},
                           {"gpu_us_per_evaluation", row.evaluations ? 1e3 * row.gpu_ms / row.evaluations : 0.0},
                           {"bytes_up_per_evaluation", row.bytes_up}, {"bytes_down_per_evaluation", row.bytes_down}});
    }
    if (json_file.empty()) {
      std::cout << j.dump(2) << "\n";
      return 0;
    }
    try {
      write_file_whole(json_file, j.dump(2) + "\n");
    } catch (const Error& e) {
      std::cerr << "ndtcu_bench: error: " << e.what() << "\n";
      return 1;
    }
  }
  std::cout << fmt::format("target {} ({} points), source {} ({} points), leaf {} m, resolution {} m, step {}, "
                           "epsilon {}, {} repeats after {} warm-up\n",
                           target, tgt.size(), source, src.size(), leaf, resolution, step, epsilon, repeats, warmup);
  std::cout << fmt::format("{:<10} {:<21} {:>7} {:>9} {:>9} {:>4} {:>4} {:>8} {:>7} {:>8} {:>7} {:>8} {:>8} {:>8} {:>9}\n",
                           "backend", "search", "threads", "median ms", "min ms", "iter", "eval", "ms/iter", "vs pcl",
                           "ms/eval", "vs pcl", "dt pcl m", "da rad", "gpu us/e", "B up/down");
  for (const auto& row : rows) {
    const auto [dt, da] = agreement(row);
    const double per_iter = row.median() / std::max(1, row.iterations);
    std::cout << fmt::format(
        "{:<10} {:<21} {:>7} {:>9.3f} {:>9.3f} {:>4} {:>4} {:>8.4f} {:>7} {:>8} {:>7} {:>8} {:>8} {:>8} {:>9}\n",
        row.name, row.search, row.threads ? std::to_string(row.threads) : "gpu", row.median(), row.min(), row.iterations,
        row.evaluations ? std::to_string(row.evaluations) : "-", per_iter,
        pcl_per_iter > 0 ? fmt::format("{:.3f}", per_iter / pcl_per_iter) : "-",
        row.evaluations ? fmt::format("{:.4f}", per_eval(row)) : "-",
        pcl_per_eval > 0 && row.evaluations ? fmt::format("{:.3f}", per_eval(row) / pcl_per_eval) : "-",
        dt >= 0 ? fmt::format("{:.1e}", dt) : "-", da >= 0 ? fmt::format("{:.1e}", da) : "-",
        row.gpu_ms > 0 && row.evaluations ? fmt::format("{:.1f}", 1e3 * row.gpu_ms / row.evaluations) : "-",
        row.bytes_up ? fmt::format("{}/{}", row.bytes_up, row.bytes_down) : "-");
  }
  if (pcl_per_eval > 0) std::cout << "(PCL's evaluation count is the radius row's: the two follow the same path)\n";
  if (cuda_unavailable_reason().empty()) {
    std::cout << "(cuda autoware rows run the Newton loop on the device, one graph per align; 'host' rows make one "
                 "round trip per iteration)\n";
  }
  return 0;
}
