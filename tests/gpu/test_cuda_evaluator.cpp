// The CUDA evaluator against the CPU reference on identical input: the same score,
// gradient and Hessian (to float-transform rounding), identical bits run after run, and
// no device allocation inside the evaluation loop.
#include "../ndt/synthetic.hpp"
#include "../support/test_support.hpp"
#include "reduce_probe.hpp"

#include "cuda/cuda_backend.hpp"
#include "ndt/evaluator.hpp"
#include "ndt/optimizer.hpp"
#include "thread_pool.hpp"

#include <ndtcu/cuda_device.hpp>
#include <ndtcu/filters.hpp>
#include <ndtcu/io.hpp>

#include <cstdlib>
#include <cstring>
#include <random>

using namespace ndtcu;
using detail::CudaBackend;
using detail::VoxelLookup;

namespace {

// The same bits in every field of two evaluations (the device loop's sums at the final
// pose, as to_evaluation gives them).
bool same_bits(const detail::Evaluation& a, const detail::Evaluation& b) {
  return std::memcmp(&a.score, &b.score, sizeof(double)) == 0 &&
         std::memcmp(a.gradient.data(), b.gradient.data(), sizeof(double) * 6) == 0 &&
         std::memcmp(a.hessian.data(), b.hessian.data(), sizeof(double) * 36) == 0 &&
         std::memcmp(&a.nvtl_sum, &b.nvtl_sum, sizeof(double)) == 0 && a.correspondences == b.correspondences &&
         a.matched_points == b.matched_points;
}

// Both backends take the same pose frame (PCL's float transform from the shared code,
// the sin/cos of the host) and the same neighbour search, so every point meets the same
// voxels: the counts are equal. The CPU takes each pair's terms in double, the GPU sums a
// point's pairs in float in the factored form (math::PointPairSums; over the block and the
// scan in double: kernels/ndt_loop_kernels.cu says why), and they add in other orders: the
// sums agree to 1e-5 of their scale (measured on an H200 with the GPU's earlier pair-by-pair
// sums: at most 1.2e-6, in the Hessian).
void compare(const detail::Evaluation& gpu, const detail::Evaluation& cpu) {
  CHECK(gpu.correspondences == cpu.correspondences);
  CHECK(gpu.matched_points == cpu.matched_points);
  const double score_scale = std::abs(cpu.score) + 1.0;
  CHECK(std::abs(gpu.score - cpu.score) <= 1e-5 * score_scale);
  CHECK(std::abs(gpu.nvtl_sum - cpu.nvtl_sum) <= 1e-5 * (std::abs(cpu.nvtl_sum) + 1.0));
  const double g_scale = cpu.gradient.norm() + 1e-3 * score_scale;
  CHECK((gpu.gradient - cpu.gradient).norm() <= 1e-5 * g_scale);
  const double h_scale = cpu.hessian.norm() + 1.0;
  CHECK((gpu.hessian - cpu.hessian).norm() <= 1e-5 * h_scale);
}

Pose6 random_pose(std::mt19937& rng, double t, double r) {
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  Pose6 p;
  p << t * u(rng), t * u(rng), 0.3 * t * u(rng), r * u(rng), r * u(rng), r * u(rng);
  return p;
}

}  // namespace

TEST_CASE("CUDA evaluator matches the CPU evaluator in every search and lookup", "[gpu]") {
  if (cuda_devices().empty()) NDTCU_SKIP("no CUDA device: " + cuda_unavailable_reason());
  const PointCloud target = test::synthetic_scene(1, 60000);
  PointCloud source = test::synthetic_scene(2, 8000);
  for (double res : {1.0, 2.0}) {
    VoxelMapOptions vo;
    vo.resolution = res;
    const VoxelMap map = VoxelMap::build(target, vo);
    detail::ThreadPool pool(2);
    CudaBackend backend;
    for (VoxelLookup lookup : {VoxelLookup::Hash, VoxelLookup::Dense}) {
      backend.set_map(map, lookup);
      CHECK(backend.lookup() == lookup);
      backend.set_source(source);
      for (SearchMethod search :
           {SearchMethod::Radius, SearchMethod::Direct27, SearchMethod::Direct7, SearchMethod::Direct1}) {
        detail::CpuEvaluator cpu(map, source, search, 0.55, &pool);
        {
          backend.configure(search, 0.55);
          detail::CudaEvaluator gpu(backend);
          std::mt19937 rng(7);
          for (int trial = 0; trial < 4; ++trial) {
            CAPTURE(res, static_cast<int>(lookup), to_string(search), trial);
            // Trial 0 has angles under the small-angle threshold (1e-4 rad).
            Pose6 pose = trial == 0 ? (Pose6() << 0.1, -0.05, 0.02, 5e-5, -3e-5, 2e-5).finished()
                                    : random_pose(rng, 0.5, 0.05);
            auto c = cpu.evaluate(pose, true);
            auto g = gpu.evaluate(pose, true);
            REQUIRE(c.correspondences > 1000);
            compare(g, c);
            auto g2 = gpu.evaluate(pose, false);
            CHECK(g2.score == g.score);
            CHECK(g2.gradient == g.gradient);
            CHECK(g2.hessian.isZero());
          }
        }
      }
    }
  }
}

TEST_CASE("CUDA evaluations are bit-identical over 100 runs and allocate nothing", "[gpu]") {
  if (cuda_devices().empty()) NDTCU_SKIP("no CUDA device: " + cuda_unavailable_reason());
  const PointCloud target = test::synthetic_scene(3, 60000);
  const PointCloud source = test::synthetic_scene(4, 5000);
  VoxelMapOptions vo;
  vo.resolution = 2.0;
  const VoxelMap map = VoxelMap::build(target, vo);
  CudaBackend backend;
  backend.set_map(map);
  backend.set_source(source);
  backend.configure(SearchMethod::Radius, 0.55);
  Pose6 pose;
  pose << 0.3, -0.2, 0.05, 0.01, -0.02, 0.03;
  const math::DerivativeSums first = backend.evaluate(0, pose, true);
  const std::uint64_t allocations = detail::device_allocations();
  backend.reset_telemetry();
  for (int run = 0; run < 100; ++run) {
    const math::DerivativeSums again = backend.evaluate(0, pose, true);
    REQUIRE(std::memcmp(again.v, first.v, sizeof(first.v)) == 0);
  }
  CHECK(detail::device_allocations() == allocations);
  const auto& t = backend.telemetry();
  CHECK(t.evaluations == 100);
  CHECK(t.bytes_up == 100 * sizeof(math::PoseFrame));
  CHECK(t.bytes_down == 100 * math::kSumSize * sizeof(double));
  CHECK(t.device_allocations == 0);
  WARN("5000 points, radius search: " << t.gpu_ms / t.evaluations * 1e3 << " us GPU time per evaluation");

  // A smaller source reuses the buffers (grow-only); a larger one grows them once.
  PointCloud small = source;
  small.points.resize(1000);
  backend.set_source(small);
  backend.evaluate(0, pose, true);
  CHECK(detail::device_allocations() == allocations);
}

// The device loop for one hypothesis of source 0, with its trace.
static detail::OptimizerOutput run_one(CudaBackend& backend, const Pose6& guess, const math::StepRules& rules) {
  return backend.run_fixed_step({detail::Hypothesis{guess, 0}}, rules, true).front();
}

TEST_CASE("The device-resident Newton loop follows the host loop and repeats its bits", "[gpu]") {
  if (cuda_devices().empty()) NDTCU_SKIP("no CUDA device: " + cuda_unavailable_reason());
  const PointCloud target = test::synthetic_scene(5, 60000);
  const PointCloud source = test::synthetic_scene(6, 4000);
  VoxelMapOptions vo;
  vo.resolution = 2.0;
  const VoxelMap map = VoxelMap::build(target, vo);
  CudaBackend backend;
  REQUIRE(backend.device_loop_supported());
  backend.set_map(map);
  backend.set_source(source);
  backend.configure(SearchMethod::Radius, 0.55);
  Pose6 guess;
  guess << 0.4, -0.3, 0.05, 0.01, -0.02, 0.04;

  for (bool pcl_rule : {false, true}) {
    AlignSettings s = autoware_preset();
    s.convergence = pcl_rule ? ConvergenceRule::Pcl : ConvergenceRule::Autoware;
    s.epsilon = pcl_rule ? 1e-6 : 1e-3;
    s.step_size = 0.1;
    s.max_iterations = 60;
    const detail::OptimizerOutput dev = run_one(backend, guess, detail::step_rules(s));
    detail::CudaEvaluator evaluator(backend);
    const detail::OptimizerOutput host = detail::optimize(evaluator, guess, s);
    CAPTURE(pcl_rule, dev.iterations, host.iterations, dev.pose.transpose(), host.pose.transpose());
    CHECK(dev.iterations > 3);  // a real descent, not a first-step stop
    CHECK(dev.iterations == host.iterations);
    CHECK(dev.reason == host.reason);
    CHECK(dev.reason == StopReason::Converged);
    CHECK(dev.evaluations == host.evaluations);
    // The same kernels and the same fixed-step code; sin/cos of the poses after the first
    // come from the device's libm on the device and from glibc on the host:
    // rounding-level differences only.
    CHECK((dev.pose - host.pose).norm() < 1e-7);
    REQUIRE(dev.trace.size() == host.trace.size());
    for (std::size_t k = 0; k < dev.trace.size(); ++k) {
      CHECK((dev.trace[k].pose - host.trace[k].pose).norm() < 1e-7);
      CHECK(dev.trace[k].score == Approx(host.trace[k].score).epsilon(1e-9));
      CHECK(dev.trace[k].step_length == Approx(host.trace[k].step_length).epsilon(1e-6));
    }
    const detail::Evaluation final_dev = dev.final;
    CHECK(final_dev.score == Approx(host.final.score).epsilon(1e-9));
  }

  // Run after run: identical bits, no allocation, the graph built once. A source of a
  // slightly different size reuses the graph (its grid has headroom).
  math::StepRules d{};
  d.step_min = 0.005;
  d.step_max = 0.1;
  d.epsilon = 0.01;
  d.max_iterations = 30;
  const detail::OptimizerOutput first = run_one(backend, guess, d);
  const std::uint64_t allocations = detail::device_allocations();
  backend.reset_telemetry();
  for (int run = 0; run < 20; ++run) {
    const detail::OptimizerOutput again = run_one(backend, guess, d);
    REQUIRE(again.iterations == first.iterations);
    REQUIRE(same_bits(again.final, first.final));
    REQUIRE(again.pose == first.pose);
  }
  CHECK(detail::device_allocations() == allocations);
  CHECK(backend.telemetry().graph_builds == 0);
  PointCloud fewer = source;
  fewer.points.resize(source.size() - 40);
  backend.set_source(fewer);
  run_one(backend, guess, d);
  CHECK(backend.telemetry().graph_builds == 0);
  WARN("device loop, 4000 points: " << backend.telemetry().gpu_ms / backend.telemetry().evaluations * 1e3
                                    << " us GPU time per evaluation");

  // Stops: the iteration cap, and a pose with no voxel around any point.
  d.max_iterations = 2;
  d.epsilon = 1e-9;
  const detail::OptimizerOutput capped = run_one(backend, guess, d);
  CHECK(capped.reason == StopReason::MaxIterations);
  CHECK(capped.iterations == 2);
  CHECK(capped.trace.size() == 2u);
  Pose6 far_away = guess;
  far_away(0) += 1e4;
  const detail::OptimizerOutput lost = run_one(backend, far_away, d);
  CHECK(lost.reason == StopReason::NoCorrespondence);
  CHECK(lost.iterations == 0);
  CHECK(lost.evaluations == 1);
}

TEST_CASE("A batch of one runs its loop in the cooperative kernel, with the graph's bits", "[gpu]") {
  if (cuda_devices().empty()) NDTCU_SKIP("no CUDA device: " + cuda_unavailable_reason());
  const PointCloud target = test::synthetic_scene(5, 60000);
  VoxelMapOptions vo;
  vo.resolution = 2.0;
  const VoxelMap map = VoxelMap::build(target, vo);
  CudaBackend backend;
  backend.set_map(map);
  backend.configure(SearchMethod::Radius, 0.55);
  math::StepRules d{};
  d.step_min = 0.005;
  d.step_max = 0.1;
  d.epsilon = 0.01;
  std::mt19937 rng(23);
  // 4,000 points fit one wave of the device with 8 threads per point and 20,000 with one
  // (cooperative under Auto, where the device has the 79 SMs those 20,000 take: the
  // cooperative loop alternates between two sets of partials, of the group sums with several
  // threads per point and of the block sums with one); 150,000 (586 blocks of 256 threads,
  // more than the one per SM the cooperative kernel's registers allow on any GPU of up to
  // 585 SMs) do not, and Auto falls back to the graph. LoopLaunch::Graph is what a device
  // without cooperative launch runs. Under the sanitizers that do not follow conditional
  // graph nodes (scripts/gpu_sanitize.sh runs them with NDTCU_CUDA_LOOP=stream) the stream
  // launch, which gives the graph's bits (the next case), stands in for it.
  const int multiprocessors = cuda_devices().front().multiprocessors;
  const char* env_loop = std::getenv("NDTCU_CUDA_LOOP");
  const detail::LoopLaunch fallback = env_loop && std::string(env_loop) == "stream" ? detail::LoopLaunch::Stream
                                                                                     : detail::LoopLaunch::Graph;
  for (int points : {4000, 20000, 150000}) {
    // Under those sanitizers the 150,000-point scan is left out: Auto's fallback for it is
    // the graph, which they do not follow (the cooperative kernel is the 4,000-point case).
    if (points == 150000 && fallback == detail::LoopLaunch::Stream) continue;
    backend.set_source(test::synthetic_scene(6, points));
    for (int run = 0; run < 6; ++run) {
      const Pose6 guess = random_pose(rng, 1.0, 0.1);
      d.max_iterations = run % 2 == 0 ? 30 : 3;
      const bool trace = run % 3 == 0;
      CAPTURE(points, run, trace);
      backend.set_loop_launch(fallback);
      backend.reset_telemetry();
      const detail::OptimizerOutput graph = backend.run_fixed_step({{guess, 0}}, d, trace).at(0);
      CHECK(backend.telemetry().cooperative_loops == 0);
      backend.set_loop_launch(detail::LoopLaunch::Auto);
      backend.reset_telemetry();
      const detail::OptimizerOutput autod = backend.run_fixed_step({{guess, 0}}, d, trace).at(0);
      const bool fits = points == 4000 || (points == 20000 && multiprocessors * 256 >= points);
      CHECK(backend.telemetry().cooperative_loops == (fits ? 1u : 0u));
      CHECK(autod.pose == graph.pose);
      CHECK(autod.iterations == graph.iterations);
      CHECK(autod.evaluations == graph.evaluations);
      CHECK(autod.reason == graph.reason);
      CHECK(same_bits(autod.final, graph.final));
      REQUIRE(autod.trace.size() == graph.trace.size());
      for (std::size_t k = 0; k < graph.trace.size(); ++k) {
        CHECK(autod.trace[k].pose == graph.trace[k].pose);
        CHECK(autod.trace[k].score == graph.trace[k].score);
      }
    }
  }
  // A pose with no voxel around any point stops after its first evaluation, in both.
  backend.set_source(test::synthetic_scene(6, 4000));
  Pose6 far_away = Pose6::Zero();
  far_away(0) = 1e4;
  backend.set_loop_launch(detail::LoopLaunch::Auto);
  const detail::OptimizerOutput lost = backend.run_fixed_step({{far_away, 0}}, d, false).at(0);
  CHECK(lost.reason == StopReason::NoCorrespondence);
  CHECK(lost.evaluations == 1);
}

TEST_CASE("The device loop launched on the stream gives the graph's bits", "[gpu]") {
  if (cuda_devices().empty()) NDTCU_SKIP("no CUDA device: " + cuda_unavailable_reason());
  if (const char* loop = std::getenv("NDTCU_CUDA_LOOP"); test::under_sanitizer() && loop && std::string(loop) == "stream") {
    NDTCU_SKIP("its graph half: racecheck, initcheck and synccheck do not follow conditional graph nodes (memcheck "
               "runs this case)");
  }
  const PointCloud target = test::synthetic_scene(5, 60000);
  const PointCloud source = test::synthetic_scene(6, 4000);
  VoxelMapOptions vo;
  vo.resolution = 2.0;
  const VoxelMap map = VoxelMap::build(target, vo);
  CudaBackend backend;
  backend.set_map(map);
  backend.set_source(source);
  backend.configure(SearchMethod::Radius, 0.55);
  // Hypotheses that stop at different passes: converged, capped, and lost at once.
  std::mt19937 rng(17);
  std::vector<detail::Hypothesis> hyps;
  for (int i = 0; i < 37; ++i) hyps.push_back({random_pose(rng, 1.0, 0.1), 0});
  Pose6 far_away = hyps[5].start;
  far_away(0) += 1e4;
  hyps[5].start = far_away;
  math::StepRules d{};
  d.step_min = 0.005;
  d.step_max = 0.1;
  d.epsilon = 0.01;
  for (int max_iterations : {30, 4}) {
    d.max_iterations = max_iterations;
    for (bool trace : {false, true}) {
      CAPTURE(max_iterations, trace);
      backend.set_loop_launch(detail::LoopLaunch::Graph);
      const std::vector<detail::OptimizerOutput> graph = backend.run_fixed_step(hyps, d, trace);
      backend.set_loop_launch(detail::LoopLaunch::Stream);
      const std::vector<detail::OptimizerOutput> stream = backend.run_fixed_step(hyps, d, trace);
      REQUIRE(graph.size() == stream.size());
      int capped = 0, converged = 0, lost = 0;
      for (std::size_t h = 0; h < graph.size(); ++h) {
        CAPTURE(h);
        CHECK(stream[h].pose == graph[h].pose);
        CHECK(stream[h].iterations == graph[h].iterations);
        CHECK(stream[h].evaluations == graph[h].evaluations);
        CHECK(stream[h].reason == graph[h].reason);
        CHECK(same_bits(stream[h].final, graph[h].final));
        REQUIRE(stream[h].trace.size() == graph[h].trace.size());
        for (std::size_t k = 0; k < graph[h].trace.size(); ++k) {
          CHECK(stream[h].trace[k].pose == graph[h].trace[k].pose);
          CHECK(stream[h].trace[k].score == graph[h].trace[k].score);
        }
        capped += graph[h].reason == StopReason::MaxIterations;
        converged += graph[h].reason == StopReason::Converged;
        lost += graph[h].reason == StopReason::NoCorrespondence;
      }
      // The batch stops at different passes, so the passes after a stop are exercised.
      CHECK(lost == 1);
      CHECK(capped + converged == 36);
      if (max_iterations == 4) CHECK(capped > 0);
      if (max_iterations == 30) CHECK(converged > 0);
    }
  }
  CHECK(backend.loop_launch() == detail::LoopLaunch::Stream);

  // The environment chooses for a new backend; a value it does not know is an Error naming
  // it. (The run's own setting is put back after.)
  const char* before = std::getenv("NDTCU_CUDA_LOOP");
  const std::string run_setting = before ? before : "";
  ::setenv("NDTCU_CUDA_LOOP", "stream", 1);
  CHECK(CudaBackend().loop_launch() == detail::LoopLaunch::Stream);
  ::setenv("NDTCU_CUDA_LOOP", "graphs", 1);
  CHECK_THROWS_WITH(CudaBackend(), Catch::Contains("NDTCU_CUDA_LOOP is 'graphs'") && Catch::Contains("'stream'"));
  ::setenv("NDTCU_CUDA_LOOP", "graph", 1);
  CHECK(CudaBackend().loop_launch() == detail::LoopLaunch::Graph);
  ::unsetenv("NDTCU_CUDA_LOOP");
  CHECK(CudaBackend().loop_launch() == detail::LoopLaunch::Auto);
  if (before) ::setenv("NDTCU_CUDA_LOOP", run_setting.c_str(), 1);
}

TEST_CASE("CUDA evaluator on the real hdl32 pair matches the CPU", "[gpu][data]") {
  if (cuda_devices().empty()) NDTCU_SKIP("no CUDA device: " + cuda_unavailable_reason());
  NDTCU_REQUIRE_DATA(dir, "pairs/hdl32");
  PointCloud target = voxel_downsample(read_point_cloud((dir / "pairs/hdl32/target_251370668.pcd").string()), 0.1);
  PointCloud source = voxel_downsample(read_point_cloud((dir / "pairs/hdl32/source_251371071.pcd").string()), 0.1);
  VoxelMapOptions vo;
  vo.resolution = 1.0;
  const VoxelMap map = VoxelMap::build(target, vo);
  detail::ThreadPool pool(2);
  CudaBackend backend;
  backend.set_map(map);
  backend.set_source(source);
  for (SearchMethod search : {SearchMethod::Radius, SearchMethod::Direct7}) {
    backend.configure(search, 0.55);
    detail::CpuEvaluator cpu(map, source, search, 0.55, &pool);
    detail::CudaEvaluator gpu(backend);
    Pose6 pose;
    pose << 0.8, 0.05, -0.02, 0.002, -0.004, 0.01;
    CAPTURE(to_string(search));
    compare(gpu.evaluate(pose, true), cpu.evaluate(pose, true));
  }
}

TEST_CASE("CUDA out-of-memory is a CudaError with the sizes, and the backend keeps working", "[gpu]") {
  if (cuda_devices().empty()) NDTCU_SKIP("no CUDA device: " + cuda_unavailable_reason());
  // Two clusters 4 km apart along each axis: at 1 m a dense index over their box would
  // hold 4000^3 cells (256 GB), more than any device has.
  PointCloud far = test::synthetic_scene(5, 20000);
  PointCloud other = test::synthetic_scene(6, 20000);
  for (auto& p : other.points) far.points.push_back(p + Eigen::Vector3f(4000.f, 4000.f, 4000.f));
  VoxelMapOptions vo;
  vo.resolution = 1.0;
  const VoxelMap map = VoxelMap::build(far, vo);
  const PointCloud source = test::synthetic_scene(7, 3000);
  CudaBackend backend;
  const std::uint64_t before = detail::device_allocations();
  try {
    backend.set_map(map, VoxelLookup::Dense);
    FAIL("no CudaError");
  } catch (const CudaError& e) {
    CHECK_THAT(e.what(), Catch::Contains("bytes free"));
    CHECK_THAT(e.what(), Catch::Contains("needs"));
  }
  // A single buffer larger than the device: cudaMalloc fails, the error names both sizes.
  try {
    test::allocate_and_free(std::size_t(1) << 42);  // 4 TiB
    FAIL("no CudaError");
  } catch (const CudaError& e) {
    CHECK_THAT(e.what(), Catch::Contains("4398046511104 bytes failed"));
    CHECK_THAT(e.what(), Catch::Contains("bytes free"));
  }
  // The same backend then works with the hash lookup.
  backend.set_map(map, VoxelLookup::Hash);
  backend.set_source(source);
  backend.configure(SearchMethod::Radius, 0.55);
  const math::DerivativeSums sums = backend.evaluate(0, Pose6::Zero(), true);
  CHECK(sums.v[math::kPointsMatched] > 1000);
  CHECK(detail::device_allocations() > before);
}
