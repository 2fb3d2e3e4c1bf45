// The CUDA scan filter against the CPU filters: on synthetic clouds (tests/support/
// voxel_reference.hpp covers every branch: intensity, frame origin, far and wide lattices,
// 64-bit indices, non-finite points) and on the sample scans, with several leaves and crop
// ranges. The GPU must give exactly the cloud of the CPU run of its own algorithm (bit for
// bit), and next to voxel_downsample(crop_range(...)) the same number of points, the same
// cells in the same order and centroids within float rounding (the two sum a cell's points
// in different orders). Then edge cases, repeatability, concurrency and the Localizer.
#include "../support/test_support.hpp"
#include "../support/voxel_reference.hpp"

#include "cuda/cuda_backend.hpp"
#include "cuda/cuda_filter.hpp"
#include "deskew.hpp"

#include <ndtcu/cuda_device.hpp>
#include <ndtcu/error.hpp>
#include <ndtcu/filters.hpp>
#include <ndtcu/io.hpp>
#include <ndtcu/localizer.hpp>
#include <ndtcu/scan_sequence.hpp>
#include <ndtcu/simulator.hpp>
#include <ndtcu/trajectory.hpp>

#include <Eigen/Geometry>

#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <thread>

using namespace ndtcu;
namespace fs = std::filesystem;

namespace {

const fs::path kSample = ndtcu::test::source_dir() / "data" / "sample";

std::vector<PointCloud> sample_scans() {
  std::vector<PointCloud> out;
  for (const auto& e : list_scans((kSample / "scans").string())) out.push_back(read_point_cloud(e.path));
  return out;
}

// Checks the GPU result against both CPU references for one input.
void check_against_cpu(detail::CudaScanFilter& filter, const PointCloud& cloud, double lo, double hi, double leaf) {
  INFO("range [" << lo << ", " << hi << "], leaf " << leaf << ", " << cloud.size() << " points");
  const PointCloud gpu = filter.crop_and_downsample(cloud, lo, hi, leaf);
  const PointCloud cropped = crop_range(cloud, lo, hi);
  const PointCloud cpu = leaf > 0 ? voxel_downsample(cropped, leaf) : cropped;
  const PointCloud same_algorithm = test::input_order_voxel_filter(cloud, lo, hi, leaf);
  REQUIRE(gpu.size() == cpu.size());
  REQUIRE(gpu.intensity.size() == cpu.intensity.size());
  CHECK(gpu.origin == cloud.origin);
  const double diff = test::max_point_difference(gpu, cpu);
  CHECK(diff < test::centroid_tolerance(cloud));
  CHECK(test::max_intensity_difference(gpu, cpu) < 1e-5);
  CHECK(test::bit_identical(gpu, same_algorithm));
  if (leaf == 0.0) CHECK(test::bit_identical(gpu, cpu));  // the crop alone is exact
}

}  // namespace

TEST_CASE("the CUDA scan filter without a usable device is a CudaError", "[unit]") {
  if (!cuda_devices().empty()) return;  // the [gpu] tests cover the device
  CHECK_THROWS_AS(detail::CudaScanFilter(), CudaError);
}

TEST_CASE("the CUDA scan filter gives the CPU filter's cells in order on synthetic clouds", "[gpu]") {
  NDTCU_REQUIRE_GPU();
  detail::CudaScanFilter filter;
  for (const auto& c : test::filter_cases()) {
    INFO(c.name);
    for (const auto& [lo, hi] : c.ranges) {
      check_against_cpu(filter, c.cloud, lo, hi, 0.0);
      for (double leaf : c.leaves) check_against_cpu(filter, c.cloud, lo, hi, leaf);
    }
  }
  CHECK(filter.telemetry().calls > 0);
}

TEST_CASE("the CUDA scan filter gives the CPU filter's cells in order on the sample scans", "[gpu]") {
  NDTCU_REQUIRE_GPU();
  const std::vector<PointCloud> scans = sample_scans();
  REQUIRE(scans.size() == 10);
  detail::CudaScanFilter filter;
  for (std::size_t k = 0; k < scans.size(); ++k) {
    INFO("scan " << k);
    REQUIRE(scans[k].has_intensity());
    for (const auto& [lo, hi] : std::vector<std::pair<double, double>>{{1.0, 100.0}, {0.0, 1e9}, {3.0, 20.0}}) {
      for (double leaf : {0.0, 0.2, 0.5, 1.0}) check_against_cpu(filter, scans[k], lo, hi, leaf);
    }
  }
}

TEST_CASE("the CUDA scan filter's edge cases match the CPU filters", "[gpu]") {
  NDTCU_REQUIRE_GPU();
  detail::CudaScanFilter filter;
  const PointCloud yard = test::synthetic_scene(21, 5000);

  // Empty input and everything cropped away: an empty cloud with the input's origin.
  PointCloud empty;
  empty.origin = Eigen::Vector3d(1.0, 2.0, 3.0);
  for (double leaf : {0.0, 0.5}) {
    const PointCloud out = filter.crop_and_downsample(empty, 1.0, 100.0, leaf);
    CHECK(out.empty());
    CHECK(out.intensity.empty());
    CHECK(out.origin == empty.origin);
    CHECK(filter.crop_and_downsample(yard, 1e6, 2e6, leaf).empty());
  }

  // One point; the yard in the 8 cells around the origin; every point in one cell.
  PointCloud one;
  one.points.emplace_back(3.f, -4.f, 0.5f);
  one.intensity.push_back(7.f);
  check_against_cpu(filter, one, 0.0, 100.0, 0.5);
  check_against_cpu(filter, yard, 0.0, 100.0, 1000.0);
  PointCloud line;
  for (int i = 0; i < 10; ++i) line.points.emplace_back(static_cast<float>(i), 0.f, 0.f);
  CHECK(filter.crop_and_downsample(line, 0.0, 100.0, 1000.0).size() == 1);
  check_against_cpu(filter, line, 0.0, 100.0, 1000.0);

  // A range exactly at a point's distance keeps it (inclusive bounds), as crop_range does.
  CHECK(filter.crop_and_downsample(line, 2.0, 5.0, 0.0).size() == 4);
  check_against_cpu(filter, line, 2.0, 5.0, 0.0);
  check_against_cpu(filter, line, 2.0, 5.0, 0.3);

  // Bad arguments and leaves too small for the extent: the CPU filters' Error.
  CHECK_THROWS_AS(filter.crop_and_downsample(yard, 5.0, 2.0, 0.5), Error);
  CHECK_THROWS_AS(filter.crop_and_downsample(yard, -1.0, 2.0, 0.5), Error);
  for (double bad : {-0.5, std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    CHECK_THROWS_AS(voxel_downsample(yard, bad), Error);
    CHECK_THROWS_AS(filter.crop_and_downsample(yard, 0.0, 100.0, bad), Error);
  }
  for (double tiny : {1e-9, 1e-20}) {  // beyond a 64-bit index; beyond the 1e18 cell bound
    CHECK_THROWS_AS(voxel_downsample(crop_range(yard, 0.0, 100.0), tiny), Error);
    CHECK_THROWS_AS(filter.crop_and_downsample(yard, 0.0, 100.0, tiny), Error);
  }
  // An infinite point survives only an infinite max_range, and then the lattice check
  // throws on both; a NaN point never survives the crop.
  PointCloud odd = yard;
  odd.points[3] = {std::numeric_limits<float>::infinity(), 0.f, 0.f};
  odd.points[4] = {std::numeric_limits<float>::quiet_NaN(), 0.f, 0.f};
  const double inf = std::numeric_limits<double>::infinity();
  CHECK_THROWS_AS(voxel_downsample(crop_range(odd, 0.0, inf), 0.5), Error);
  CHECK_THROWS_AS(filter.crop_and_downsample(odd, 0.0, inf, 0.5), Error);
  check_against_cpu(filter, odd, 0.0, 1e9, 0.5);
  check_against_cpu(filter, odd, 0.0, inf, 0.0);  // crop only: the infinite point is kept

  // The filter stays usable after an Error.
  check_against_cpu(filter, yard, 1.0, 100.0, 0.5);
}

TEST_CASE("the CUDA scan filter repeats its bits and allocates nothing once grown", "[gpu]") {
  NDTCU_REQUIRE_GPU();
  const auto cases = test::filter_cases();
  const PointCloud& scan = cases[2].cloud;  // the 64-ring scan, 70k points with intensity
  REQUIRE(scan.size() > 70000);
  detail::CudaScanFilter filter;
  const PointCloud first = filter.crop_and_downsample(scan, 1.0, 100.0, 0.5);
  const std::uint64_t allocations = detail::device_allocations();
  for (int run = 0; run < 5; ++run) CHECK(test::bit_identical(filter.crop_and_downsample(scan, 1.0, 100.0, 0.5), first));
  PointCloud half = scan;
  half.points.resize(scan.size() / 2);
  half.intensity.resize(scan.size() / 2);
  (void)filter.crop_and_downsample(half, 1.0, 100.0, 0.5);
  CHECK(test::bit_identical(filter.crop_and_downsample(scan, 1.0, 100.0, 0.5), first));
  CHECK(detail::device_allocations() == allocations);  // grow-only buffers, sized by the first scan
  detail::CudaScanFilter fresh;
  CHECK(test::bit_identical(fresh.crop_and_downsample(scan, 1.0, 100.0, 0.5), first));
  std::printf("CUDA scan filter: %zu -> %zu points, %.3f ms of GPU time per call\n", scan.size(), first.size(),
              filter.telemetry().gpu_ms / static_cast<double>(filter.telemetry().calls));
}

TEST_CASE("the CUDA scan filter from 4 threads gives the single-thread results", "[gpu]") {
  NDTCU_REQUIRE_GPU();
  std::vector<PointCloud> inputs = sample_scans();
  if (test::under_sanitizer()) inputs.resize(1);
  const auto cases = test::filter_cases();
  inputs.push_back(cases[2].cloud);
  const std::vector<double> leaves =
      test::under_sanitizer() ? std::vector<double>{0.5} : std::vector<double>{0.2, 0.5, 1.0};
  std::vector<PointCloud> expected;
  {
    detail::CudaScanFilter filter;
    for (const auto& in : inputs) {
      for (double leaf : leaves) expected.push_back(filter.crop_and_downsample(in, 1.0, 100.0, leaf));
    }
  }
  LocalizerSettings ls;
  ExecutionOptions e;
  e.backend = Backend::Cuda;
  ls.min_range = 1.0;
  ls.max_range = 100.0;
  std::vector<Localizer> localizers;
  for (double leaf : leaves) {
    ls.voxel_leaf = leaf;
    localizers.emplace_back(ls, e);
    CHECK(localizers.back().preprocess_backend() == Backend::Cuda);
  }
  // Each thread runs every input in its own order, three times: through a filter of its
  // own, and through the Localizers (whose pools hand each thread a filter).
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      detail::CudaScanFilter own;
      for (int round = 0; round < test::repeats(3, 1); ++round) {
        for (std::size_t k = 0; k < inputs.size(); ++k) {
          const std::size_t i = (k * 7 + static_cast<std::size_t>(t) * 3 + static_cast<std::size_t>(round)) % inputs.size();
          for (std::size_t l = 0; l < leaves.size(); ++l) {
            const PointCloud& want = expected[i * leaves.size() + l];
            mismatches[t] += !test::bit_identical(own.crop_and_downsample(inputs[i], 1.0, 100.0, leaves[l]), want);
            mismatches[t] += !test::bit_identical(localizers[l].preprocess(inputs[i]), want);
          }
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) CHECK(mismatches[t] == 0);
}

TEST_CASE("the sample sequence localizes the same with the scan filter on the GPU and on the CPU",
          "[gpu][localization]") {
  NDTCU_REQUIRE_GPU();
  const std::vector<ScanEntry> scans = list_scans((kSample / "scans").string());
  const Trajectory truth = read_trajectory((kSample / "poses_tum.txt").string());
  const PointCloud map = read_point_cloud((kSample / "map.pcd").string());
  std::vector<std::vector<LocalizationResult>> runs;
  for (bool gpu_preprocess : {true, false}) {
    LocalizerSettings s;
    ExecutionOptions execution;
    execution.backend = Backend::Cuda;
    s.gpu_preprocess = gpu_preprocess;
    Localizer localizer(s, execution);
    CHECK(localizer.preprocess_backend() == (gpu_preprocess ? Backend::Cuda : Backend::Cpu));
    localizer.set_map(map);
    localizer.set_initial_pose(truth.front().pose.matrix());
    std::vector<LocalizationResult> results;
    ScanPrefetcher prefetcher(scans, [&](const PointCloud& c) { return localizer.preprocess(c); }, 2, 4);
    while (auto scan = prefetcher.next()) {
      REQUIRE(scan->error.empty());
      results.push_back(localizer.localize_preprocessed(scan->cloud, scan->entry.time));
    }
    runs.push_back(std::move(results));
  }
  REQUIRE(runs[0].size() == scans.size());
  REQUIRE(runs[1].size() == scans.size());
  double worst_m = 0.0, worst_rad = 0.0;
  for (std::size_t k = 0; k < scans.size(); ++k) {
    INFO("frame " << k);
    const LocalizationResult &g = runs[0][k], &c = runs[1][k];
    CHECK(g.valid);
    CHECK(c.valid);
    CHECK(g.points_used == c.points_used);
    const double dt = (g.pose.topRightCorner<3, 1>() - c.pose.topRightCorner<3, 1>()).norm();
    const double dr = Eigen::AngleAxisd(Eigen::Matrix3d(g.pose.topLeftCorner<3, 3>().transpose() *
                                                        c.pose.topLeftCorner<3, 3>())).angle();
    CHECK(dt < 1e-3);
    CHECK(dr < 1e-4);
    worst_m = std::max(worst_m, dt);
    worst_rad = std::max(worst_rad, dr);
  }
  std::printf("sample with the filter on the GPU vs the CPU: poses within %.2e m, %.2e rad\n", worst_m, worst_rad);
}

TEST_CASE("the CUDA scan filter and a CUDA localizer read a view where it lies, with a PointCloud's bits",
          "[gpu][localization][view]") {
  NDTCU_REQUIRE_GPU();
  const std::vector<ScanEntry> scans = list_scans((kSample / "scans").string());
  const Trajectory truth = read_trajectory((kSample / "poses_tum.txt").string());
  // The sample scans without intensities (a view has none), and each as a caller's buffer.
  std::vector<PointCloud> clouds;
  for (const ScanEntry& e : scans) {
    PointCloud c = read_point_cloud(e.path);
    c.intensity.clear();
    clouds.push_back(std::move(c));
  }
  std::vector<std::vector<float>> buffers;
  for (const PointCloud& c : clouds) {
    const float* f = reinterpret_cast<const float*>(c.points.data());
    buffers.emplace_back(f, f + 3 * c.size());
  }
  const auto view_of = [&](std::size_t k) {
    return PointCloudView(reinterpret_cast<const Eigen::Vector3f*>(buffers[k].data()), clouds[k].size(),
                          clouds[k].origin);
  };
  detail::CudaScanFilter filter;
  for (std::size_t k = 0; k < clouds.size(); ++k) {
    CHECK(test::bit_identical(filter.crop_and_downsample(view_of(k), nullptr, 1.0, 100.0, 0.5),
                              filter.crop_and_downsample(clouds[k], 1.0, 100.0, 0.5)));
  }
  LocalizerSettings s;
  ExecutionOptions execution;
  execution.backend = Backend::Cuda;
  Localizer from_view(s, execution), from_cloud(s, execution);
  REQUIRE(from_view.preprocess_backend() == Backend::Cuda);
  const PointCloud map = read_point_cloud((kSample / "map.pcd").string());
  for (Localizer* l : {&from_view, &from_cloud}) {
    l->set_map(map);
    l->set_initial_pose(truth.front().pose.matrix());
  }
  for (std::size_t k = 0; k < clouds.size(); ++k) {
    INFO("frame " << k);
    const LocalizationResult a = from_view.localize(view_of(k), scans[k].time);
    const LocalizationResult b = from_cloud.localize(clouds[k], scans[k].time);
    CHECK(a.valid);
    CHECK(a.points_used == b.points_used);
    CHECK(a.pose == b.pose);
  }
}

namespace {

// A sweep-like cloud: points on a ring of walls at 5-40 m with times over 0.1 s by azimuth,
// some inside the crop's minimum range and some at time 0.
PointCloud timed_cloud(std::size_t n) {
  PointCloud c;
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (std::size_t i = 0; i < n; ++i) {
    const float a = 6.2831853f * static_cast<float>(i) / static_cast<float>(n);
    const float r = i % 97 == 0 ? 0.5f : 5.0f + 35.0f * u(rng);
    c.points.emplace_back(r * std::cos(a), r * std::sin(a), -2.0f + 4.0f * u(rng));
    c.time.push_back(i % 53 == 0 ? 0.0f : 0.1f * static_cast<float>(i) / static_cast<float>(n));
  }
  return c;
}

}  // namespace

TEST_CASE("the CUDA scan filter de-skews each point as the CPU does, to float rounding, and keeps the times",
          "[gpu]") {
  NDTCU_REQUIRE_GPU();
  detail::CudaScanFilter filter;
  const PointCloud cloud = timed_cloud(50000);
  math::Twist xi;  // the simulator's fast drive: 25 m/s forward, turning at 109 deg/s, a little roll
  xi.v[0] = 25.0;
  xi.v[2] = -0.5;
  xi.w[0] = 0.05;
  xi.w[2] = 1.9;
  // The twist alone, and the IMU's rate in 16 parts over the sweep [0, 0.1] (a turn's onset:
  // yaw 0 to 1.9 rad/s, the translation the twist's).
  const math::SweepPath constant = math::constant_path(xi);
  math::SweepPath parts;
  parts.segments = math::SweepPath::kMaxSegments;
  for (int k = 0; k < parts.segments; ++k) {
    parts.begin[k] = 0.1 * k / parts.segments;
    parts.twist[k] = xi;
    parts.twist[k].w[2] = 1.9 * std::min(1.0, k / 8.0);
  }
  math::anchor_path(parts);
  for (const math::SweepPath* path : {&constant, static_cast<const math::SweepPath*>(&parts)}) {
    INFO("parts " << path->segments);
    // The CPU: each point through math::deskew_point, then the CPU's crop and filter.
    PointCloud moved = cloud;
    for (std::size_t i = 0; i < moved.size(); ++i) {
      math::deskew_point(*path, moved.time[i], moved.points[i].x(), moved.points[i].y(), moved.points[i].z());
    }
    for (const double leaf : {0.0, 0.5, 1.0}) {
      INFO("leaf " << leaf);
      const PointCloud gpu = filter.crop_and_downsample(cloud, nullptr, 1.0, 100.0, leaf, cloud.time.data(), path);
      const PointCloud cropped = crop_range(moved, 1.0, 100.0);
      const PointCloud cpu = leaf > 0 ? voxel_downsample(cropped, leaf) : cropped;
      REQUIRE(gpu.size() == cpu.size());
      REQUIRE(gpu.time.size() == cpu.time.size());
      // sin and cos in double on the device and the host may differ in the last bit, which
      // the rounding to float almost always absorbs; a cell's centroid sums its points in
      // another order on the GPU (see check_against_cpu).
      CHECK(test::max_point_difference(gpu, cpu) < test::centroid_tolerance(moved));
      double worst_time = 0.0;
      for (std::size_t i = 0; i < gpu.size(); ++i) worst_time = std::max(worst_time, std::abs(double(gpu.time[i]) - cpu.time[i]));
      CHECK(worst_time < 1e-7);  // a mean of times in [0, 0.1] in double, rounded to float (6e-9 apart)
    }
  }
  // Without a twist the times are kept and the points are those of no de-skew, bit for bit.
  const PointCloud plain = filter.crop_and_downsample(cloud, nullptr, 1.0, 100.0, 0.0, cloud.time.data(), nullptr);
  PointCloud untimed = cloud;
  untimed.time.clear();
  CHECK(plain.points == filter.crop_and_downsample(untimed, 1.0, 100.0, 0.0).points);
  CHECK(plain.time.size() == plain.size());
  // What the de-skew costs on the device (printed, not checked: a benchmark): a 100,000-point
  // scan filtered at 1 m without de-skew, with the twist and with the 16 parts, 50 calls
  // each, GPU time per call.
  const PointCloud large = timed_cloud(100000);
  double per_call[3] = {0.0, 0.0, 0.0};
  const math::SweepPath* timed_paths[3] = {nullptr, &constant, &parts};
  for (int j = 0; j < 3; ++j) {
    detail::CudaScanFilter timed;
    (void)timed.crop_and_downsample(large, nullptr, 1.0, 100.0, 1.0, large.time.data(), timed_paths[j]);
    const auto before = timed.telemetry();
    for (int k = 0; k < 50; ++k) {
      (void)timed.crop_and_downsample(large, nullptr, 1.0, 100.0, 1.0, large.time.data(), timed_paths[j]);
    }
    const auto after = timed.telemetry();
    per_call[j] = (after.gpu_ms - before.gpu_ms) / static_cast<double>(after.calls - before.calls);
  }
  std::printf("CUDA scan filter, 100,000 points at 1 m: %.4f ms of GPU time per call without de-skew, %.4f ms with "
              "the twist (de-skew %.4f ms), %.4f ms with 16 parts (%.4f ms)\n",
              per_call[0], per_call[1], per_call[1] - per_call[0], per_call[2], per_call[2] - per_call[0]);
}

TEST_CASE("a CUDA localizer de-skews the simulator's fast drive as the CPU one does", "[gpu]") {
  NDTCU_REQUIRE_GPU();
  const fs::path dir = test::temp_dir("gpu_deskew_fast");
  sim::SimulationSettings s;
  s.world.seed = 1;
  s.lidar = sim::lidar_preset("vlp16");
  s.trajectory.frames = 10;
  sim::apply_scenario(s, sim::Scenario::Fast);
  s.sweep_time = 0.1;
  s.threads = 2;
  s.map.threads = 2;
  sim::simulate(s, dir.string());
  const std::vector<ScanEntry> scans = list_scans((dir / "scans").string());
  const Trajectory truth = read_trajectory((dir / "poses_tum.txt").string());
  const PointCloud map = read_point_cloud((dir / "map.pcd").string());
  // Constant velocity alone, and with the re-de-skew passes (the default; the device
  // filter de-skews the scan again with each pass's motion).
  for (const int passes : {0, 2}) {
    INFO("deskew_passes " << passes);
    std::vector<std::vector<LocalizationResult>> runs;
    for (const Backend backend : {Backend::Cuda, Backend::Cpu}) {
      LocalizerSettings settings;
      settings.deskew = Deskew::ConstantVelocity;
      settings.deskew_passes = passes;
      ExecutionOptions execution;
      execution.backend = backend;
      execution.threads = 2;
      Localizer localizer(settings, execution);
      CHECK(localizer.preprocess_backend() == backend);
      localizer.set_map(map);
      localizer.set_initial_pose(truth.front().pose.matrix());
      std::vector<LocalizationResult> results;
      for (const ScanEntry& e : scans) results.push_back(localizer.localize(read_point_cloud(e.path), e.time));
      runs.push_back(std::move(results));
    }
    for (std::size_t k = 0; k < scans.size(); ++k) {
      INFO("frame " << k);
      const LocalizationResult &g = runs[0][k], &c = runs[1][k];
      CHECK(g.deskewed == c.deskewed);
      // The passes de-skew every frame: frame 0 with its sweep's own motion, frame 1 with it too.
      CHECK(g.deskewed == (passes > 0 || k >= 2));
      // How many passes ran is not part of it either: a pass stops once its motion changes
      // no point by more than 1 cm, and poses millimetres apart fall either side of that.
      CHECK((g.deskew_passes > 0) == (c.deskew_passes > 0));
      // The verdict: valid (tracked or recovered), lost, degenerate or uncertain, and the
      // check that decided it. Whether the first attempt or a retry gave the pose is not
      // part of it: from poses millimetres apart, a first attempt can be refused on one
      // backend and taken on the other (measured on an H200 once the first frame's passes
      // went on to 8: frame 9 tracked on CUDA, recovered from the last good pose on the
      // CPU, both valid and within 1 cm).
      CHECK(g.valid == c.valid);
      CHECK((g.status == FrameStatus::Recovered ? FrameStatus::Tracked : g.status) ==
            (c.status == FrameStatus::Recovered ? FrameStatus::Tracked : c.status));
      CHECK(g.decided_by == c.decided_by);
      // The CUDA and CPU backends agree to 1 mm on the same points (the sample's test above),
      // and the de-skewed points to float rounding (the filter's test above); but the velocity
      // of the next de-skew comes from each backend's own poses, so the gap feeds back: a point
      // rounded across a voxel boundary changes the cells. Measured on an H200: at most 5 of
      // about 2,700 points apart (frames 7-9) and poses up to 4.2 mm apart (frame 8), where the
      // poses are 3-7 cm from the truth. With the first frame's motion along the sensor's x
      // axis (LocalizerSettings::deskew_forward), on an H100: frame 4 ran 2 passes on CUDA and
      // 1 on the CPU and the two poses were 3.4 cm apart, frame 5 1.7 cm, where the CPU's are
      // 1.6-2.8 cm from the truth: each within the truth's few centimetres, not of each other.
      CHECK(std::abs(static_cast<double>(g.points_used) - static_cast<double>(c.points_used)) <=
            0.01 * static_cast<double>(c.points_used));
      const double apart = (g.pose.topRightCorner<3, 1>() - c.pose.topRightCorner<3, 1>()).norm();
      const auto off = [&](const LocalizationResult& r) {
        return (r.pose.topRightCorner<3, 1>() - truth[k].pose.translation()).norm();
      };
      std::printf("passes %d, frame %zu: CUDA %.4f m from the truth (%d passes), CPU %.4f m (%d), %.4f m apart\n",
                  passes, k, off(g), g.deskew_passes, off(c), c.deskew_passes, apart);
      CHECK(apart < 0.05);
      if (passes > 0) {
        CHECK(off(g) < 0.1);
        CHECK(off(c) < 0.1);
      } else {
        // Without passes the first two frames are de-skewed with nothing (23-28 cm off on
        // both backends), and nothing feeds a pass's motion back: the poses stay millimetres
        // apart (at most 3.6 mm on an H100).
        CHECK(apart < 0.01);
      }
    }
  }
}
