// Settings validation: ranges, the thread bound, and settings that contradict each other.
#include "../support/test_support.hpp"

#include <ndtcu/aligner.hpp>
#include <ndtcu/cuda_device.hpp>
#include <ndtcu/error.hpp>
#include <ndtcu/localizer.hpp>
#include <ndtcu/settings.hpp>
#include <ndtcu/simulator.hpp>
#include <ndtcu/voxel_map.hpp>

#include <vector>

using namespace ndtcu;

TEST_CASE("threads settings are bounded by kMaxThreads, with the value named", "[unit][settings]") {
  ExecutionOptions s;
  s.threads = kMaxThreads;
  CHECK_NOTHROW(validate(s));
  s.threads = 0;
  CHECK_NOTHROW(validate(s));
  s.threads = 100000;
  CHECK_THROWS_WITH(validate(s), Catch::Contains("threads: 100000") && Catch::Contains("[0, 1024]"));
  CHECK_THROWS_AS(Aligner(AlignSettings{}, s), Error);
  CHECK_THROWS_WITH(Localizer(LocalizerSettings{}, s), Catch::Contains("threads: 100000"));
  s.threads = kMaxThreads + 1;
  CHECK_THROWS_WITH(validate(s), Catch::Contains("threads: 1025"));
  s.threads = -1;
  CHECK_THROWS_WITH(validate(s), Catch::Contains("threads: -1"));

  PointCloud cloud;
  cloud.points.assign(10, Eigen::Vector3f(1.f, 2.f, 3.f));
  VoxelMapOptions vo;
  vo.threads = 100000;
  CHECK_THROWS_WITH(VoxelMap::build(cloud, vo), Catch::Contains("threads") && Catch::Contains("100000"));

  sim::SimulationSettings sim_settings;
  sim_settings.threads = 100000;
  CHECK_THROWS_WITH(sim::validate(sim_settings), Catch::Contains("--threads") && Catch::Contains("got 100000"));
  sim::MapSettings map_settings;
  map_settings.threads = 100000;
  CHECK_THROWS_WITH(sim::validate(map_settings), Catch::Contains("threads") && Catch::Contains("got 100000"));
}

TEST_CASE("device is -1 (the current CUDA device) or an index, with the value named", "[unit][settings]") {
  const AlignSettings settings;
  ExecutionOptions s;
  CHECK(s.device == -1);
  CHECK(voxel_map_options(settings).device == -1);
  CHECK(voxel_map_options(settings, s).device == -1);
  s.device = 3;
  CHECK_NOTHROW(validate(s));
  CHECK(voxel_map_options(settings, s).device == 3);
  s.device = -2;
  CHECK_THROWS_WITH(validate(s), Catch::Contains("device: -2"));
  CHECK_THROWS_WITH(Aligner(settings, s), Catch::Contains("device: -2"));
  // The CPU backend runs on no device: an index is not checked against the devices there.
  s.device = 1000;
  s.backend = Backend::Cpu;
  const Aligner aligner(settings, s);
  CHECK(aligner.backend() == Backend::Cpu);
  CHECK(aligner.execution().device == 1000);
}

TEST_CASE("ExecutionOptions: the defaults, and the aligner and localizer keep what they were given",
          "[unit][settings]") {
  const ExecutionOptions defaults;
  CHECK(defaults.backend == Backend::Auto);
  CHECK(defaults.threads == 0);
  CHECK(defaults.device == -1);
  CHECK(defaults.gpu_loop == GpuNewtonLoop::Device);
  CHECK(defaults.cuda_stream == nullptr);
  // A map built for an aligner runs as the aligner does.
  ExecutionOptions e;
  e.backend = Backend::Cpu;
  e.threads = 3;
  e.gpu_loop = GpuNewtonLoop::Host;
  const VoxelMapOptions o = voxel_map_options(AlignSettings{}, e);
  CHECK(o.backend == Backend::Cpu);
  CHECK(o.threads == 3);
  const Aligner aligner(AlignSettings{}, e);
  CHECK(aligner.execution().threads == 3);
  CHECK(aligner.execution().gpu_loop == GpuNewtonLoop::Host);
  CHECK(aligner.backend() == Backend::Cpu);
  const Localizer localizer(LocalizerSettings{}, e);
  CHECK(localizer.execution().threads == 3);
  CHECK(localizer.backend() == Backend::Cpu);
  CHECK(localizer.aligner().execution().backend == Backend::Cpu);
  // The device loop is asked for by the settings (fixed step, PCL's direction) and the
  // execution (gpu_loop) together.
  CHECK(wants_device_loop(autoware_preset(), defaults));
  CHECK_FALSE(wants_device_loop(autoware_preset(), e));
  CHECK_FALSE(wants_device_loop(pcl_preset(), defaults));
}

TEST_CASE("resolve_backend: the one rule for Backend::Auto, used by the aligner and the map build",
          "[unit][settings]") {
  CHECK(resolve_backend(Backend::Cpu) == Backend::Cpu);
  CHECK(resolve_backend(Backend::Cpu, 1000) == Backend::Cpu);
  const bool usable = cuda_unavailable_reason().empty();
  // Auto is CUDA exactly when a device answers, never Auto itself.
  CHECK(resolve_backend(Backend::Auto) == (usable ? Backend::Cuda : Backend::Cpu));
  if (usable) {
    CHECK(resolve_backend(Backend::Cuda) == Backend::Cuda);
  } else {
    CHECK_THROWS_AS(resolve_backend(Backend::Cuda), CudaError);
    CHECK_THROWS_WITH(resolve_backend(Backend::Cuda),
                      Catch::Contains("backend cuda requested, but") && Catch::Contains(cuda_unavailable_reason()));
  }
  // The aligner and the voxel map build follow it.
  ExecutionOptions s;
  s.backend = Backend::Auto;
  CHECK(Aligner(AlignSettings{}, s).backend() == resolve_backend(Backend::Auto));
  CHECK(Aligner().backend() == resolve_backend(Backend::Auto));  // the default
  PointCloud cloud;
  cloud.points = {{0.f, 0.f, 0.f}, {0.1f, 0.f, 0.f}, {0.f, 0.1f, 0.f},
                  {0.f, 0.f, 0.1f}, {0.1f, 0.1f, 0.f}, {0.1f, 0.f, 0.1f},
                  {0.f, 0.1f, 0.1f}, {0.1f, 0.1f, 0.1f}};
  VoxelMapOptions o;
  o.backend = Backend::Auto;
  CHECK(VoxelMap::build(cloud, o).built_on_gpu() == (resolve_backend(Backend::Auto) == Backend::Cuda));
}

TEST_CASE("max_iterations is bounded by kMaxIterations where the settings are checked", "[unit][settings]") {
  // Issue 26: 10,000,000 took 636 MB for an alignment of 13 iterations and 1e8 ended in an
  // "out of memory" naming nothing; now refused with the setting, the value and the range.
  AlignSettings s;
  s.max_iterations = kMaxIterations;
  CHECK_NOTHROW(validate(s));
  s.max_iterations = 10000000;
  CHECK_THROWS_WITH(validate(s), Catch::Equals("invalid setting max_iterations: 10000000 (must be in [1, 1000])"));
  CHECK_THROWS_AS(Aligner(s), Error);
  s.max_iterations = 0;
  CHECK_THROWS_WITH(validate(s), Catch::Contains("max_iterations: 0 (must be in [1, 1000])"));

  // A batch's own bound, checked before any hypothesis is aligned.
  PointCloud cloud;
  for (int i = 0; i < 200; ++i) cloud.points.emplace_back(0.1f * static_cast<float>(i % 20), 0.1f * static_cast<float>(i / 20), 0.f);
  ExecutionOptions cpu;
  cpu.backend = Backend::Cpu;
  cpu.threads = 1;
  Aligner aligner(AlignSettings{}, cpu);
  aligner.set_target(cloud);
  BatchOptions batch;
  batch.max_iterations = kMaxIterations + 1;
  const std::vector<Pose6> guesses{Pose6::Zero()};
  CHECK_THROWS_WITH(aligner.align_batch(cloud, guesses, batch),
                    Catch::Contains("BatchOptions::max_iterations = 1001") && Catch::Contains("[1, 1000]"));
}

TEST_CASE("epsilon above twice the step size is rejected with both values named", "[unit][settings]") {
  // Steps are kept in [epsilon / 2, step_size]: with epsilon 1e300 every step was 5e299
  // long and the alignment reported "converged" at x = -4.8e299.
  AlignSettings s;
  s.epsilon = 1e300;
  CHECK_THROWS_WITH(validate(s), Catch::Contains("epsilon 1e+300") && Catch::Contains("step_size 0.1"));
  CHECK_THROWS_AS(Aligner(s), Error);
  s.epsilon = 0.25;
  s.step_size = 0.1;
  CHECK_THROWS_WITH(validate(s), Catch::Contains("epsilon 0.25") && Catch::Contains("twice step_size 0.1"));
  // The boundary (every step exactly step_size long) and PCL's tutorial settings pass.
  s.epsilon = 0.2;
  CHECK_NOTHROW(validate(s));
  CHECK_NOTHROW(validate(pcl_preset()));
  CHECK_NOTHROW(validate(autoware_preset()));
}
