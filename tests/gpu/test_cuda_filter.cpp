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

#include <ndtcu/cuda_device.hpp>
#include <ndtcu/error.hpp>
#include <ndtcu/filters.hpp>
#include <ndtcu/io.hpp>
#include <ndtcu/localizer.hpp>
#include <ndtcu/scan_sequence.hpp>
#include <ndtcu/trajectory.hpp>

#include <Eigen/Geometry>

#include <cmath>
#include <cstdio>
#include <limits>
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
