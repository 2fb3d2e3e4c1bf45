// The CUDA backend under load, as a long-running localization stack uses it: 10^5
// alignments and 10^4 localizer frames in one process with flat host and device memory;
// several aligners on several threads, each on its own stream, giving the single-stream
// bits; the device's memory taken by another allocation in the middle of a sequence: a
// clear CudaError for that frame, nothing leaked, and the next frame localizes.
#include "../ndt/batch_check.hpp"
#include "../support/test_support.hpp"
#include "reduce_probe.hpp"

#include <ndtcu/aligner.hpp>
#include <ndtcu/cuda_device.hpp>
#include <ndtcu/error.hpp>
#include <ndtcu/io.hpp>
#include <ndtcu/localizer.hpp>
#include <ndtcu/scan_sequence.hpp>
#include <ndtcu/trajectory.hpp>

#include "cuda/cuda_backend.hpp"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

using namespace ndtcu;
namespace fs = std::filesystem;

namespace {

const fs::path kSample = ndtcu::test::source_dir() / "data" / "sample";

// The process's resident memory (VmRSS of /proc/self/status), in bytes.
long resident_bytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6)) * 1024;
  }
  return 0;
}

struct Sample {
  PointCloud map;
  std::vector<PointCloud> scans;
  Trajectory truth;
  std::vector<ScanEntry> entries;
};

const Sample& sample() {
  static const Sample s = [] {
    Sample out;
    out.map = read_point_cloud((kSample / "map.pcd").string());
    out.entries = list_scans((kSample / "scans").string());
    out.truth = read_trajectory((kSample / "poses_tum.txt").string());
    match_to_reference(out.entries, out.truth);
    for (const ScanEntry& e : out.entries) out.scans.push_back(read_point_cloud(e.path));
    return out;
  }();
  return s;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

TEST_CASE("CUDA soak: 10^5 alignments and 10^4 localizer frames keep host and device memory flat", "[gpu]") {
  if (cuda_devices().empty()) NDTCU_SKIP("no CUDA device: " + cuda_unavailable_reason());
  const Sample& s = sample();
  LocalizerSettings ls;
  ExecutionOptions execution;
  execution.backend = Backend::Cuda;
  Localizer localizer(ls, execution);  // its preprocess filters the scans as localize does
  std::vector<PointCloud> filtered;
  for (const PointCloud& c : s.scans) filtered.push_back(localizer.preprocess(c));

  {  // 10^5 alignments, each scan from its truth moved 0.3 m and 2 deg
    AlignSettings as = autoware_preset();
    ExecutionOptions as_exec;
    as_exec.backend = Backend::Cuda;
    Aligner aligner(as, as_exec);
    aligner.set_target(s.map);
    const int total = 100000, sample_every = 10000;
    long rss_warm = 0;
    std::size_t free_warm = 0;
    std::uint64_t allocations_warm = 0;
    long rss_max = 0;
    std::size_t free_min = ~std::size_t(0);
    const auto t0 = std::chrono::steady_clock::now();
    int converged = 0;
    for (int i = 0; i < total; ++i) {
      const std::size_t k = static_cast<std::size_t>(i) % filtered.size();
      Pose6 guess = matrix_to_pose(s.truth[k].pose.matrix());
      guess(0) += 0.3;
      guess(5) += 2.0 * M_PI / 180.0;
      converged += aligner.align_from_pose(filtered[k], guess).converged;
      if ((i + 1) % sample_every == 0) {
        const long rss = resident_bytes();
        const std::size_t free_b = test::device_free_bytes();
        std::printf("soak: %d alignments, resident %.1f MiB, device free %.1f MiB, %llu device allocations\n", i + 1,
                    rss / 1048576.0, free_b / 1048576.0,
                    static_cast<unsigned long long>(detail::device_allocations()));
        if (i + 1 == sample_every) {
          rss_warm = rss;
          free_warm = free_b;
          allocations_warm = detail::device_allocations();
        } else {
          rss_max = std::max(rss_max, rss);
          free_min = std::min(free_min, free_b);
        }
      }
    }
    std::printf("soak: %d alignments in %.1f s, %d converged\n", total, seconds_since(t0), converged);
    CHECK(converged == total);
    CHECK(detail::device_allocations() == allocations_warm);  // nothing allocated after the first 10^4
    CHECK(rss_max - rss_warm < 4 * 1048576);                    // host: within 4 MiB of the warm process
    CHECK(free_warm - std::min(free_warm, free_min) < 4 * 1048576u);
  }

  {  // 10^4 localizer frames: the sample's scans there and back again, times going on
    Localizer loc(ls, execution);
    loc.set_map(s.map);
    loc.set_initial_pose(s.truth[0].pose.matrix());
    const int frames = 10000, n = static_cast<int>(s.scans.size());
    long rss_warm = 0, rss_max = 0;
    std::size_t free_warm = 0, free_min = ~std::size_t(0);
    int lost = 0;
    double worst = 0.0;
    const auto t0 = std::chrono::steady_clock::now();
    for (int f = 0; f < frames; ++f) {
      const int leg = f / (n - 1), step = f % (n - 1);
      const int k = leg % 2 == 0 ? step : n - 1 - step;  // 0 .. n-2, then n-1 .. 1, ...
      const LocalizationResult r = loc.localize_preprocessed(filtered[static_cast<std::size_t>(k)], 0.1 * f);
      lost += !r.valid;
      if (r.valid) {
        worst = std::max(worst, (r.pose.topRightCorner<3, 1>() - s.truth[static_cast<std::size_t>(k)].pose.translation()).norm());
      }
      if ((f + 1) % 1000 == 0) {
        const long rss = resident_bytes();
        const std::size_t free_b = test::device_free_bytes();
        if (f + 1 == 1000) {
          rss_warm = rss;
          free_warm = free_b;
        } else {
          rss_max = std::max(rss_max, rss);
          free_min = std::min(free_min, free_b);
        }
      }
    }
    std::printf("soak: %d localizer frames in %.1f s, %d lost, worst error %.3f m, resident %.1f -> %.1f MiB\n", frames,
                seconds_since(t0), lost, worst, rss_warm / 1048576.0, rss_max / 1048576.0);
    CHECK(lost == 0);
    CHECK(worst < 0.05);
    CHECK(rss_max - rss_warm < 4 * 1048576);
    CHECK(free_warm - std::min(free_warm, free_min) < 4 * 1048576u);
  }
}

TEST_CASE("Aligners on four threads, each on its own CUDA stream, give the single-stream bits", "[gpu]") {
  if (cuda_devices().empty()) NDTCU_SKIP("no CUDA device: " + cuda_unavailable_reason());
  const Sample& s = sample();
  AlignSettings as = autoware_preset();
  ExecutionOptions as_exec;
  as_exec.backend = Backend::Cuda;
  const PointCloud scan = s.scans[3];
  const std::vector<Pose6> guesses =
      test::guesses_around(matrix_to_pose(s.truth[3].pose.matrix()), test::repeats(24, 8), 3, 0.6, 6.0);
  std::vector<AlignResult> reference;
  {
    Aligner a(as, as_exec);
    a.set_target(s.map);
    for (const Pose6& g : guesses) reference.push_back(a.align_from_pose(scan, g));
  }
  constexpr int kThreads = 4;
  const int kRounds = test::repeats(20, 2);
  std::vector<std::vector<AlignResult>> got(kThreads);
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      CUstream_st* stream = nullptr;
      try {
        stream = test::create_stream();
        ExecutionOptions on_stream = as_exec;
        on_stream.cuda_stream = stream;
        Aligner a(as, on_stream);
        a.set_target(s.map);
        for (int round = 0; round < kRounds; ++round) {
          for (std::size_t k = 0; k < guesses.size(); ++k) {
            // Each thread starts at its own offset, so the streams run different hypotheses at once.
            const std::size_t j = (k + static_cast<std::size_t>(t) * 5) % guesses.size();
            AlignResult r = a.align_from_pose(scan, guesses[j]);
            if (round == kRounds - 1) got[static_cast<std::size_t>(t)].push_back(std::move(r));
          }
        }
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(t)] = e.what();
      }
      if (stream) test::destroy_stream(stream);
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    CAPTURE(t, errors[static_cast<std::size_t>(t)]);
    REQUIRE(errors[static_cast<std::size_t>(t)].empty());
    REQUIRE(got[static_cast<std::size_t>(t)].size() == guesses.size());
    for (std::size_t k = 0; k < guesses.size(); ++k) {
      const std::size_t j = (k + static_cast<std::size_t>(t) * 5) % guesses.size();
      test::check_same_bits(got[static_cast<std::size_t>(t)][k], reference[j]);
    }
  }
}

TEST_CASE("Device memory taken by another allocation mid-sequence: a CudaError for that frame, then tracking goes on",
          "[gpu]") {
  if (cuda_devices().empty()) NDTCU_SKIP("no CUDA device: " + cuda_unavailable_reason());
  const Sample& s = sample();
  LocalizerSettings ls;
  ExecutionOptions execution;
  execution.backend = Backend::Cuda;
  Localizer loc(ls, execution);
  loc.set_map(s.map);
  loc.set_initial_pose(s.truth[0].pose.matrix());
  for (std::size_t k = 0; k < 4; ++k) REQUIRE(loc.localize(s.scans[k], s.entries[k].time).valid);
  const std::size_t free_before = test::device_free_bytes();
  // A frame 60 times the size of the others (unfiltered: the filter would merge the
  // copies) needs larger device buffers; with all but 1 MiB of the device taken, growing
  // them fails.
  PointCloud big;
  for (int r = 0; r < 60; ++r) big.points.insert(big.points.end(), s.scans[4].points.begin(), s.scans[4].points.end());
  void* hog = test::hog_device_memory(std::size_t(1) << 20);
  bool threw = false;
  try {
    (void)loc.localize_preprocessed(big, s.entries[4].time);
  } catch (const CudaError& e) {
    threw = true;
    const std::string what = e.what();
    CAPTURE(what);
    CHECK(what.find("bytes") != std::string::npos);
  }
  test::release_device_memory(hog);
  CHECK(threw);
  // The next frames localize as if the failed one had not been there.
  for (std::size_t k = 5; k < 8; ++k) {
    const LocalizationResult r = loc.localize(s.scans[k], s.entries[k].time);
    CAPTURE(k, r.alignment.nvtl);
    CHECK(r.valid);
    CHECK((r.pose.topRightCorner<3, 1>() - s.truth[k].pose.translation()).norm() < 0.05);
  }
  // Nothing of the failed frame stays allocated beyond the buffers' usual headroom.
  const std::size_t free_after = test::device_free_bytes();
  INFO("device free before " << free_before << ", after " << free_after);
  if (test::under_sanitizer()) {
    WARN("under a sanitizer: device free before " << free_before << ", after " << free_after << " (not checked)");
  } else {
    CHECK(free_before - std::min(free_before, free_after) < 64u * 1048576u);
  }
}
