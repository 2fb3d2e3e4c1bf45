#include "batch_bench.hpp"

#include <ndtcu/aligner.hpp>
#include <ndtcu/cuda_device.hpp>
#include <ndtcu/error.hpp>
#include <ndtcu/filters.hpp>
#include <ndtcu/io.hpp>
#include <ndtcu/output_file.hpp>
#include <ndtcu/localizer.hpp>
#include <ndtcu/trajectory.hpp>
#include <ndtcu/version.hpp>

#include <Eigen/Geometry>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <fstream>
#include <iostream>
#include <optional>
#include <random>
#include <thread>

namespace ndtcu::bench {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// Random starts lie within these of the reference: the translation uniform in a ball of
// this radius, the rotation by an angle uniform in [0, this] about a uniform axis.
constexpr double kMaxOffsetM = 1.0;
constexpr double kMaxOffsetDeg = 10.0;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

void require_file(const fs::path& path) {
  if (!fs::is_regular_file(path)) {
    throw IoError(path.string(), "no such file (the real-data folder is set by --data or NDTCU_DATA_DIR)");
  }
}

// Reads a cloud, drops points exactly at the origin (invalid returns in these scans) and
// voxel-filters it (leaf 0: no filter), as ndtcu_bench's pair rows and the GPU tests do.
PointCloud load(const fs::path& path, double leaf) {
  require_file(path);
  PointCloud raw = read_point_cloud(path.string()), kept;
  kept.origin = raw.origin;
  for (const auto& p : raw.points) {
    if (!p.isZero()) kept.points.push_back(p);
  }
  return leaf > 0 ? voxel_downsample(kept, leaf) : kept;
}

// The 16 numbers of a row-major 4x4 matrix file.
Eigen::Matrix4d read_matrix4(const fs::path& path) {
  require_file(path);
  std::ifstream in(path);
  Eigen::Matrix4d m;
  for (int i = 0; i < 16; ++i) {
    if (!(in >> m(i / 4, i % 4))) throw IoError(path.string(), fmt::format("number {} of 16 is missing or bad", i + 1));
  }
  return m;
}

struct Workload {
  std::string name, description;
  fs::path target_path, source_path;
  PointCloud target, source;
  Pose6 reference = Pose6::Zero();  // source-to-target registration reference
  AlignSettings settings;           // Autoware's preset at the workload's resolution
};

Workload make_workload(const std::string& name, const fs::path& data) {
  Workload w;
  w.name = name;
  w.settings = autoware_preset();
  if (name == "kitti00") {
    // Scan 1 against scan 0, the source at about 5k points (leaf 0.9 m: 5,003 points), the
    // target at 0.2 m, as in BENCHMARK.md's KITTI 5k rows.
    w.target_path = data / "kitti00/velodyne/000000.bin";
    w.source_path = data / "kitti00/velodyne/000001.bin";
    w.target = load(w.target_path, 0.2);
    w.source = load(w.source_path, 0.9);
    const fs::path poses = data / "kitti00/poses_velo_icp_reference.txt";
    require_file(poses);
    const Trajectory t = read_trajectory(poses.string(), TrajectoryFormat::Kitti);
    if (t.size() < 2) throw IoError(poses.string(), "fewer than 2 poses");
    w.reference = matrix_to_pose((t[0].pose.inverse() * t[1].pose).matrix());
    w.description = "KITTI 00 scan 1 -> scan 0 (source leaf 0.9 m, target leaf 0.2 m), reference: ICP registration";
  } else if (name == "balm") {
    // An odd (unseen) scan against the map of the even ones, cropped and voxel-filtered as
    // `ndtcu localize` does by default (1-100 m, 1.0 m leaf).
    const LocalizerSettings localize;
    w.settings = localize.align;
    w.target_path = data / "balm_os0/map_even_frames_0-58_voxel0.1.pcd";
    w.source_path = data / "balm_os0/scans/031.pcd";
    require_file(w.target_path);
    w.target = read_point_cloud(w.target_path.string());
    require_file(w.source_path);
    w.source = voxel_downsample(crop_range(read_point_cloud(w.source_path.string()), localize.min_range,
                                           localize.max_range),
                                localize.voxel_leaf);
    const fs::path poses = data / "balm_os0/poses_tum.txt";
    require_file(poses);
    const Trajectory t = read_trajectory(poses.string(), TrajectoryFormat::Tum);
    if (t.size() <= 31) throw IoError(poses.string(), "fewer than 32 poses (scan 31's is line 32)");
    w.reference = matrix_to_pose(t[31].pose.matrix());
    w.description = fmt::format("BALM OS0 scan 031 (unseen) -> map of the even scans (scan cropped to {}-{} m, leaf {} m), "
                                "reference: poses_tum.txt",
                                localize.min_range, localize.max_range, localize.voxel_leaf);
  } else if (name == "hdl32") {
    // Both clouds at 0.1 m, resolution 1.0, as tests/gpu/test_cuda_align.cpp aligns them.
    w.settings.resolution = 1.0;
    w.target_path = data / "pairs/hdl32/target_251370668.pcd";
    w.source_path = data / "pairs/hdl32/source_251371071.pcd";
    w.target = load(w.target_path, 0.1);
    w.source = load(w.source_path, 0.1);
    w.reference = matrix_to_pose(read_matrix4(data / "pairs/hdl32/T_target_source_reference.txt"));
    w.description = "hdl32 pair, source -> target (both leaf 0.1 m), reference: T_target_source_reference.txt";
  } else {
    throw Error("unknown workload '" + name + "' (use kitti00, balm or hdl32)");
  }
  return w;
}

// A uniform double in [0, 1) from 53 bits of the generator: std::mt19937_64's sequence is
// fixed by the standard, so the starts are the same with every standard library.
double uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

// A uniform point of the unit ball (rejection from the cube).
Eigen::Vector3d in_unit_ball(std::mt19937_64& rng) {
  for (;;) {
    const Eigen::Vector3d v(2 * uniform01(rng) - 1, 2 * uniform01(rng) - 1, 2 * uniform01(rng) - 1);
    if (v.squaredNorm() <= 1.0 && v.squaredNorm() > 1e-12) return v;
  }
}

// `count` starts around `reference`: T = [dR R_ref | t_ref + dt], dt uniform in the ball of
// kMaxOffsetM, dR by an angle uniform in [0, kMaxOffsetDeg] about a uniform axis. Every
// workload gets the same sequence of offsets (same seed).
std::vector<Pose6> random_starts(const Pose6& reference, std::size_t count, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const Eigen::Matrix4d ref = pose_to_matrix(reference);
  std::vector<Pose6> out;
  out.reserve(count);
  for (std::size_t i = 0; i < count; ++i) {
    const Eigen::Vector3d dt = kMaxOffsetM * in_unit_ball(rng);
    const Eigen::Vector3d axis = in_unit_ball(rng).normalized();
    const double angle = uniform01(rng) * kMaxOffsetDeg * M_PI / 180.0;
    Eigen::Matrix4d t = ref;
    t.topLeftCorner<3, 3>() = Eigen::AngleAxisd(angle, axis).toRotationMatrix() * ref.topLeftCorner<3, 3>();
    t.topRightCorner<3, 1>() += dt;
    out.push_back(matrix_to_pose(t));
  }
  return out;
}

// One row of a table: a batch size on one backend, or the fixed-iteration single align.
struct Row {
  Backend backend = Backend::Cpu;  // the backend the row ran on (never Auto)
  int k = 0;              // hypotheses per batch
  std::string skipped;    // why the row did not run ("" when it ran)
  std::vector<double> ms;  // wall time of each timed batch
  double gpu_ms = 0.0;     // device time of the last timed batch (CUDA)
  long long iterations = 0;  // summed over the hypotheses of the last timed batch
  int converged = 0;         // hypotheses of the last timed batch that converged

  double median() const {
    std::vector<double> v = ms;
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
  }
  double min() const { return *std::min_element(ms.begin(), ms.end()); }
  double aligns_per_s() const { return 1e3 * k / median(); }
  double mean_iterations() const { return static_cast<double>(iterations) / k; }
  double converged_fraction() const { return static_cast<double>(converged) / k; }
  // Wall time per hypothesis-iteration (us): the batch's median over its summed iterations.
  double wall_us_per_iteration() const { return iterations ? 1e3 * median() / static_cast<double>(iterations) : 0.0; }
  // Device time per hypothesis-iteration (us), CUDA rows.
  double gpu_us_per_iteration() const { return iterations ? 1e3 * gpu_ms / static_cast<double>(iterations) : 0.0; }
};

// Runs `run` options.warmup times untimed, then times it: as many times as
// options.row_budget_ms allows at the last warm-up's pace, within [min(3, max), max] where
// max is options.max_repeats (max with no warm-up to go by).
template <typename F>
void time_row(Row& row, const BatchBenchOptions& o, F&& run) {
  double estimate_ms = -1.0;
  for (int i = 0; i < o.warmup; ++i) {
    const auto t0 = Clock::now();
    run();
    estimate_ms = ms_since(t0);
  }
  int repeats = o.max_repeats;
  if (estimate_ms > 0) {
    const int fit = static_cast<int>(o.row_budget_ms / estimate_ms);
    repeats = std::clamp(fit, std::min(3, o.max_repeats), o.max_repeats);
  }
  for (int i = 0; i < repeats; ++i) {
    const auto t0 = Clock::now();
    run();
    row.ms.push_back(ms_since(t0));
  }
}

Row batch_row(Aligner& aligner, const PointCloud& source, const std::vector<Pose6>& starts, int k,
              const BatchBenchOptions& o) {
  Row row;
  row.backend = aligner.backend();
  row.k = k;
  const std::vector<Pose6> guesses(starts.begin(), starts.begin() + k);
  std::vector<AlignResult> results;
  time_row(row, o, [&] { results = aligner.align_batch(source, guesses); });
  for (const auto& r : results) {
    row.iterations += r.iterations;
    row.converged += r.converged ? 1 : 0;
  }
  // A batch reports its device time in every result (the same number).
  row.gpu_ms = results.front().timings.gpu_ms;
  return row;
}

Row fixed_row(Aligner& aligner, const PointCloud& source, const Pose6& start, const BatchBenchOptions& o) {
  Row row;
  row.backend = aligner.backend();
  row.k = 1;
  AlignResult r;
  time_row(row, o, [&] { r = aligner.align_from_pose(source, start); });
  row.iterations = r.iterations;
  row.converged = r.converged ? 1 : 0;
  row.gpu_ms = r.timings.gpu_ms;
  return row;
}

nlohmann::json row_json(const Row& row) {
  nlohmann::json j{{"backend", to_string(row.backend)}, {"k", row.k}};
  if (!row.skipped.empty()) {
    j["skipped"] = row.skipped;
    return j;
  }
  j["repeats"] = row.ms.size();
  j["median_ms"] = row.median();
  j["min_ms"] = row.min();
  j["aligns_per_s"] = row.aligns_per_s();
  j["iterations"] = row.iterations;
  j["mean_iterations"] = row.mean_iterations();
  j["converged_fraction"] = row.converged_fraction();
  j["wall_us_per_hypothesis_iteration"] = row.wall_us_per_iteration();
  if (row.backend == Backend::Cuda) {
    j["gpu_ms"] = row.gpu_ms;
    j["gpu_us_per_hypothesis_iteration"] = row.gpu_us_per_iteration();
  }
  return j;
}

}  // namespace

std::vector<int> parse_batch_sizes(const std::string& text) {
  std::vector<int> ks;
  std::size_t start = 0;
  for (;;) {
    const std::size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    int k = 0;
    const auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), k);
    if (item.empty() || ec != std::errc() || ptr != item.data() + item.size() || k < 1) {
      throw Error("--batch: '" + item + "' is not a positive integer (expected K1,K2,... such as 1,8,64)");
    }
    ks.push_back(k);
    if (comma == std::string::npos) return ks;
    start = comma + 1;
  }
}

int run_batch_bench(const BatchBenchOptions& o) {
  const std::string no_cuda = cuda_unavailable_reason();
  const bool cuda = no_cuda.empty();
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  const std::size_t max_k = static_cast<std::size_t>(*std::max_element(o.ks.begin(), o.ks.end()));
  const bool text = !o.json_stdout;

  nlohmann::json doc;
  doc["version"] = NDTCU_VERSION_STRING;
  doc["cuda_device"] = cuda ? nlohmann::json(cuda_devices().front().name) : nlohmann::json(nullptr);
  doc["no_cuda_reason"] = cuda ? nlohmann::json(nullptr) : nlohmann::json(no_cuda);
  doc["cpu_threads"] = threads;
  doc["settings"] = {{"ks", o.ks},
                     {"cpu_max_k", o.cpu_max_k},
                     {"max_repeats", o.max_repeats},
                     {"warmup", o.warmup},
                     {"row_budget_ms", o.row_budget_ms},
                     {"seed", o.seed},
                     {"max_offset_m", kMaxOffsetM},
                     {"max_offset_deg", kMaxOffsetDeg},
                     {"fixed_iterations", o.fixed_iterations},
                     {"preset", "autoware"}};

  // Every workload is read before the first row runs, so that a missing file stops the run
  // at once.
  std::vector<Workload> workloads;
  for (const std::string& name : o.workloads) workloads.push_back(make_workload(name, o.data));

  if (text) {
    std::cout << fmt::format(
        "ndtcu_bench --batch: K pose hypotheses of one scan per align_batch call, random starts within {} m and {} deg "
        "of the reference (seed {}), Autoware preset\n",
        kMaxOffsetM, kMaxOffsetDeg, o.seed);
    std::cout << (cuda ? fmt::format("device: {}; CPU rows use all {} threads\n", cuda_devices().front().name, threads)
                       : fmt::format("no CUDA rows ({}): CPU rows only, all {} threads\n", no_cuda, threads));
    std::cout << fmt::format("per row: {} untimed batch{}, then as many timed batches as fit {:.0f} ms at that pace "
                             "(at least {}, at most {}); the CPU backend runs batches of at most K = {} (--cpu-max-k)\n",
                             o.warmup, o.warmup == 1 ? "" : "es", o.row_budget_ms, std::min(3, o.max_repeats),
                             o.max_repeats, o.cpu_max_k);
    std::cout << std::flush;
  }

  for (const Workload& w : workloads) {
    const std::vector<Pose6> starts = random_starts(w.reference, max_k, o.seed);

    ExecutionOptions on_cpu;
    on_cpu.backend = Backend::Cpu;
    on_cpu.threads = 0;  // all hardware threads
    Aligner cpu_aligner(w.settings, on_cpu);
    cpu_aligner.set_target(w.target);
    const std::shared_ptr<const VoxelMap> map = cpu_aligner.target();
    std::optional<Aligner> cuda_aligner;
    if (cuda) {
      ExecutionOptions on_cuda;
      on_cuda.backend = Backend::Cuda;
      cuda_aligner.emplace(w.settings, on_cuda);
      cuda_aligner->set_target(map);
    }

    if (text) {
      std::cout << fmt::format("\n== {}: {}\n   target {} ({} points, {} voxels at {} m), source {} ({} points)\n", w.name,
                               w.description, w.target_path.string(), w.target.size(), map->size(),
                               w.settings.resolution, w.source_path.string(), w.source.size());
      std::cout << fmt::format("   reference x {:.4f} y {:.4f} z {:.4f} roll {:.5f} pitch {:.5f} yaw {:.5f}\n",
                               w.reference(0), w.reference(1), w.reference(2), w.reference(3), w.reference(4),
                               w.reference(5));
      std::cout << fmt::format("{:<8} {:>5} {:>4} {:>10} {:>10} {:>10} {:>9} {:>6} {:>13} {:>13} {:>8}\n", "backend", "K",
                               "reps", "median ms", "min ms", "aligns/s", "mean iter", "conv", "wall us/h-it",
                               "gpu us/h-it", "cpu/cuda");
    }
    auto print_row = [&](const Row& row, const Row* cpu_row) {
      if (!text) return;
      if (!row.skipped.empty()) {
        std::cout << fmt::format("{:<8} {:>5}    -  skipped: {}\n", to_string(row.backend), row.k, row.skipped);
      } else {
        const bool ratio = row.backend == Backend::Cuda && cpu_row && cpu_row->skipped.empty();
        std::cout << fmt::format("{:<8} {:>5} {:>4} {:>10.3f} {:>10.3f} {:>10.1f} {:>9.2f} {:>6.3f} {:>13.2f} {:>13} {:>8}\n",
                                 to_string(row.backend), row.k, row.ms.size(), row.median(), row.min(), row.aligns_per_s(),
                                 row.mean_iterations(), row.converged_fraction(), row.wall_us_per_iteration(),
                                 row.backend == Backend::Cuda ? fmt::format("{:.2f}", row.gpu_us_per_iteration()) : "-",
                                 ratio ? fmt::format("{:.1f}x", cpu_row->median() / row.median()) : "-");
      }
      std::cout << std::flush;
    };

    nlohmann::json wj{{"name", w.name},
                      {"description", w.description},
                      {"target", w.target_path.string()},
                      {"source", w.source_path.string()},
                      {"target_points", w.target.size()},
                      {"target_voxels", map->size()},
                      {"source_points", w.source.size()},
                      {"resolution", w.settings.resolution},
                      {"reference_xyzrpy", {w.reference(0), w.reference(1), w.reference(2), w.reference(3),
                                            w.reference(4), w.reference(5)}}};
    for (const int k : o.ks) {
      // The CPU row first, so that the CUDA row can show the ratio.
      Row cpu_row;
      if (k > o.cpu_max_k) {
        cpu_row.backend = Backend::Cpu;
        cpu_row.k = k;
        cpu_row.skipped = fmt::format("K above --cpu-max-k {}", o.cpu_max_k);
      } else {
        cpu_row = batch_row(cpu_aligner, w.source, starts, k, o);
      }
      if (cuda) {
        Row cuda_row;
        try {
          cuda_row = batch_row(*cuda_aligner, w.source, starts, k, o);
        } catch (const Error& e) {  // e.g. a batch larger than the device's memory: say so, go on
          cuda_row.backend = Backend::Cuda;
          cuda_row.k = k;
          cuda_row.skipped = std::string("failed: ") + e.what();
        }
        print_row(cuda_row, &cpu_row);
        wj["rows"].push_back(row_json(cuda_row));
      }
      print_row(cpu_row, nullptr);
      wj["rows"].push_back(row_json(cpu_row));
    }

    // One alignment run to the iteration cap: epsilon 0 never stops Autoware's rule (a
    // step length is never below 0), so only the cap ends it (or a degenerate start, which
    // the iterations column would show).
    AlignSettings fixed = w.settings;
    fixed.epsilon = 0.0;
    fixed.max_iterations = o.fixed_iterations;
    if (text) {
      std::cout << fmt::format("single align from hypothesis 0, {} iterations (epsilon 0, no early stop):\n",
                               o.fixed_iterations);
      std::cout << fmt::format("{:<8} {:>4} {:>10} {:>10} {:>10} {:>12} {:>12}\n", "backend", "reps", "median ms",
                               "min ms", "iterations", "us/iteration", "gpu us/iter");
    }
    std::vector<Backend> backends{Backend::Cpu};
    if (cuda) backends.insert(backends.begin(), Backend::Cuda);
    for (const Backend backend : backends) {
      ExecutionOptions e;
      e.backend = backend;
      e.threads = 0;
      Aligner aligner(fixed, e);
      aligner.set_target(map);
      const Row row = fixed_row(aligner, w.source, starts.front(), o);
      if (text) {
        std::cout << fmt::format("{:<8} {:>4} {:>10.3f} {:>10.3f} {:>10} {:>12.2f} {:>12}\n", to_string(row.backend),
                                 row.ms.size(), row.median(), row.min(), row.iterations, row.wall_us_per_iteration(),
                                 row.backend == Backend::Cuda ? fmt::format("{:.2f}", row.gpu_us_per_iteration()) : "-");
        std::cout << std::flush;
      }
      nlohmann::json fj{{"backend", to_string(row.backend)},
                        {"repeats", row.ms.size()},
                        {"median_ms", row.median()},
                        {"min_ms", row.min()},
                        {"iterations", row.iterations},
                        {"converged", row.converged == 1},
                        {"wall_us_per_iteration", row.wall_us_per_iteration()}};
      if (row.backend == Backend::Cuda) {
        fj["gpu_ms"] = row.gpu_ms;
        fj["gpu_us_per_iteration"] = row.gpu_us_per_iteration();
      }
      wj["fixed_iterations"].push_back(fj);
    }
    doc["workloads"].push_back(wj);
  }

  if (text) {
    std::cout << "\ncolumns: reps = timed batches; median/min ms = wall time of one align_batch call; aligns/s = K / "
                 "median; mean iter = Newton iterations per hypothesis; conv = fraction converged; wall us/h-it = "
                 "median / summed iterations; gpu us/h-it = device time of the batch / summed iterations; cpu/cuda = "
                 "the CPU row's median over the CUDA row's\n";
  }
  if (o.json_stdout) {
    std::cout << doc.dump(2) << "\n";
  } else if (!o.json_path.empty()) {
    write_file_whole(o.json_path, doc.dump(2) + "\n");
    std::cout << "JSON written to " << o.json_path << "\n";
  }
  return 0;
}

}  // namespace ndtcu::bench
