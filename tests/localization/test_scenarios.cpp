// The simulator's hard scenarios (`ndtcu simulate --scenario`) localized with the default
// LocalizerSettings on the CPU backend, against their exact truth.
//
// What every sequence must meet. A frame may be lost only at an event (a sharp turn, a
// stop or a start, the kidnap) or the frame right after one. Every valid frame is within
// 10 cm of its truth (a pose farther off that passed the check is a wrong pose accepted),
// and the valid frames together within 3 cm ATE: the sample sequence reaches 2 cm with
// the same 2 cm range noise; 3 cm leaves room for the coarser map (0.5 m voxels) and the
// scans of 360 columns.
#include "../support/test_support.hpp"
#include "localizer_settings.hpp"

#include <ndtcu/cuda_device.hpp>
#include <ndtcu/io.hpp>
#include <ndtcu/localizer.hpp>
#include <ndtcu/scan_sequence.hpp>
#include <ndtcu/simulator.hpp>
#include <ndtcu/trajectory.hpp>

#include <Eigen/Geometry>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <set>

using namespace ndtcu;
namespace fs = std::filesystem;

namespace {

constexpr double kPi = 3.14159265358979323846;

struct Sequence {
  std::vector<ScanEntry> scans;
  Trajectory truth;
  PointCloud map;
  double simulate_seconds = 0.0;
  fs::path dir;  // where the simulator wrote it
};

/// The sensor of a sequence: a preset, its columns (rays per scan for a rosette), and the
/// share of each scan kept (SimulationSettings::keep_every).
struct Sensor {
  std::string preset = "hdl32";
  int columns = 360;
  std::size_t keep_every = 1;
};

/// A small world of the scenario: 150 m (one block and its streets, or two), an HDL-32 of
/// 360 columns (about 8,000 points a scan) unless told otherwise, a map voxelized to 0.5 m.
Sequence make_sequence(const std::string& name, sim::Scenario scenario, int frames, std::uint64_t seed,
                       double world_size = 150.0, const Sensor& sensor = {}, double map_voxel = 0.5,
                       const std::function<void(sim::SimulationSettings&)>& adjust = {}) {
  const fs::path dir = ndtcu::test::temp_dir("scenario_" + name);
  sim::SimulationSettings s;
  s.world.seed = seed;
  s.world.size = world_size;
  s.lidar = sim::lidar_preset(sensor.preset);
  s.lidar.columns = sensor.columns;
  s.keep_every = sensor.keep_every;
  s.map.voxel = map_voxel;
  s.trajectory.frames = frames;
  sim::apply_scenario(s, scenario);
  if (adjust) adjust(s);
  s.threads = 2;
  s.map.threads = 2;
  const auto t0 = std::chrono::steady_clock::now();
  sim::simulate(s, dir.string());
  Sequence out;
  out.dir = dir;
  out.simulate_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out.scans = list_scans((dir / "scans").string());
  out.truth = read_trajectory((dir / "poses_tum.txt").string());
  const auto match = match_to_reference(out.scans, out.truth);  // by index: the scans take the truth's times
  REQUIRE(out.scans.size() == static_cast<std::size_t>(frames));
  for (std::size_t k = 0; k < match.size(); ++k) REQUIRE(match[k] == k);
  out.map = read_point_cloud((dir / "map.pcd").string());
  return out;
}

struct Outcome {
  std::vector<LocalizationResult> results;
  Trajectory estimate;  // the valid frames
  std::size_t lost = 0, recovered = 0;
  AteStats ate;
  double seconds = 0.0;
};

/// Localizes the sequence from its true first pose, frame by frame, and prints its summary.
Outcome localize(const Sequence& seq, const LocalizerSettings& settings, const char* label,
                 Backend backend = Backend::Cpu) {
  Localizer localizer(settings, backend == Backend::Cpu ? test::on_cpu(2) : test::on(backend));
  localizer.set_map(seq.map);
  localizer.set_initial_pose(seq.truth.front().pose.matrix());
  Outcome out;
  const auto t0 = std::chrono::steady_clock::now();
  for (const ScanEntry& scan : seq.scans) {
    LocalizationResult r = localizer.localize(read_point_cloud(scan.path), scan.time);
    out.lost += r.status == FrameStatus::Lost;
    out.recovered += r.status == FrameStatus::Recovered;
    if (r.valid) out.estimate.push_back({scan.time, Eigen::Isometry3d(r.pose)});
    out.results.push_back(std::move(r));
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out.ate = absolute_trajectory_error(out.estimate, seq.truth);
  std::printf("%s: %zu frames, %zu lost, %zu recovered, ATE %.4f m, max error %.4f m, %.1f s\n", label,
              seq.scans.size(), out.lost, out.recovered, out.ate.rmse_m, out.ate.max_m, out.seconds);
  return out;
}

/// Rotation angle between two poses (deg).
double turn_deg(const Eigen::Isometry3d& a, const Eigen::Isometry3d& b) {
  return Eigen::AngleAxisd(a.linear().transpose() * b.linear()).angle() * 180.0 / kPi;
}

/// How far the constant-velocity prediction from the true poses k-2 and k-1 is from pose k (m).
double prediction_miss(const Trajectory& truth, std::size_t k) {
  if (k < 2) return 0.0;
  const Eigen::Isometry3d predicted = truth[k - 1].pose * (truth[k - 2].pose.inverse() * truth[k - 1].pose);
  return (predicted.translation() - truth[k].pose.translation()).norm();
}

/// The checks of the file comment: lost frames only at an event or the frame after it,
/// every valid frame within 10 cm, ATE under 3 cm over the valid ones.
void check_outcome(const Sequence& seq, const Outcome& run, const std::set<std::size_t>& events,
                   double ate_bound = 0.03) {
  for (std::size_t k = 0; k < run.results.size(); ++k) {
    const LocalizationResult& r = run.results[k];
    const double err = (r.pose.topRightCorner<3, 1>() - seq.truth[k].pose.translation()).norm();
    CAPTURE(k, to_string(r.status), err, r.alignment.nvtl, r.attempts);
    if (r.valid) {
      CHECK(err < 0.10);
    } else {
      const bool at_event = events.count(k) > 0 || (k > 0 && events.count(k - 1) > 0);
      CHECK(at_event);
    }
  }
  REQUIRE(run.ate.pairs == run.estimate.size());
  CHECK(run.ate.rmse_m < ate_bound);
}

/// The default settings on the CPU backend with 2 threads. The simulator's correct poses
/// score 3.3-3.4 (as the sample's do); on these scenes Autoware's threshold of 2.3 alone
/// passes poses metres off (NVTL 2.5-2.7 at 2-20 m in the turns sequence), which the
/// localizer's search_nvtl_ratio (0.9 of what the accepted frames score) refuses.
LocalizerSettings cpu_settings() { return test::cpu_localizer_settings(); }

}  // namespace

TEST_CASE("turns at 1 Hz: 45 deg and more between two scans, localized with the rotation search",
          "[unit][localization]") {
  const Sequence seq = make_sequence("turns", sim::Scenario::Turns, 20, 3);
  // The scenario's promise: a sharp turn between two consecutive scans, times at 1 Hz.
  double sharpest = 0.0;
  std::set<std::size_t> events;
  for (std::size_t k = 1; k < seq.truth.size(); ++k) {
    CHECK(seq.truth[k].time == Approx(static_cast<double>(k)).margin(1e-9));
    const double turn = turn_deg(seq.truth[k - 1].pose, seq.truth[k].pose);
    sharpest = std::max(sharpest, turn);
    if (turn >= 30.0) events.insert(k);
  }
  std::printf("turns: sharpest %.1f deg between two scans, %zu frames turning 30 deg or more, simulated in %.1f s\n",
              sharpest, events.size(), seq.simulate_seconds);
  REQUIRE(sharpest >= 45.0);
  const Outcome run = localize(seq, cpu_settings(), "turns");
  check_outcome(seq, run, events);
}

// Sensors other than the 32-ring one the scenarios were tuned with, at 1 Hz through turns:
// a 16-ring VLP-16; an HDL-32 thinned to every third point (as a campus robot's keyframes
// are: about 2,600 points a scan, 600-900 after the scan filter); and a Livox Avia's narrow
// forward rosette. The 16-ring and the thinned 32-ring meet the scenarios' checks; the
// Avia, whose 70 deg view shows little of a street it turns into, may lose frames anywhere
// (BENCHMARK.md, "Sparse and narrow sensors"), but never passes a wrong pose as valid, and
// at 10 Hz on a straight drive it loses none.
TEST_CASE("sparse and narrow sensors at 1 Hz: no wrong pose accepted", "[unit][localization][heavy]") {
  struct Case {
    const char* name;
    Sensor sensor;
    sim::Scenario scenario;
    int frames;
    double ate_bound;  // > 0: the checks of check_outcome() with this ATE bound; else only
                       // that no valid frame is more than 0.3 m off
  };
  // The VLP-16's range noise is 3 cm (the HDL-32's 2 cm): 4 cm ATE.
  for (const Case& c : {Case{"vlp16", {"vlp16", 900, 1}, sim::Scenario::Turns, 20, 0.04},
                        Case{"hdl32_third", {"hdl32", 360, 3}, sim::Scenario::Turns, 20, 0.03},
                        Case{"avia_turns", {"avia", 12000, 1}, sim::Scenario::Turns, 20, 0.0},
                        Case{"avia_drive", {"avia", 12000, 1}, sim::Scenario::Drive, 20, 0.0}}) {
    CAPTURE(c.name);
    const Sequence seq = make_sequence(std::string("sensor_") + c.name, c.scenario, c.frames, 3, 150.0, c.sensor);
    std::set<std::size_t> events;
    double sharpest = 0.0;
    for (std::size_t k = 1; k < seq.truth.size(); ++k) {
      const double turn = turn_deg(seq.truth[k - 1].pose, seq.truth[k].pose);
      sharpest = std::max(sharpest, turn);
      if (turn >= 30.0) events.insert(k);
    }
    if (c.scenario == sim::Scenario::Turns) REQUIRE(sharpest >= 45.0);
    const Outcome run = localize(seq, cpu_settings(), c.name);
    if (c.ate_bound > 0.0) {
      check_outcome(seq, run, events, c.ate_bound);
      continue;
    }
    std::size_t within_10cm = 0;
    for (std::size_t k = 0; k < run.results.size(); ++k) {
      const LocalizationResult& r = run.results[k];
      const double err = (r.pose.topRightCorner<3, 1>() - seq.truth[k].pose.translation()).norm();
      CAPTURE(k, to_string(r.status), err, r.alignment.nvtl, to_string(r.decided_by));
      if (r.valid) CHECK(err < 0.3);
      within_10cm += r.valid && err < 0.1;
    }
    std::printf("%s: %zu of %zu frames valid and within 10 cm\n", c.name, within_10cm, run.results.size());
    if (c.scenario == sim::Scenario::Drive) CHECK(run.lost == 0);
  }
}

// The refinement by default (LocalizerSettings::refine_ratio 0.5 with refine_min_support):
// a VLP-16 with 3 cm range noise driving at 10 Hz, localized with the defaults and with
// refine_ratio 0 (the defaults before). Over a map kept at 0.2 m the finer voxels hold the
// scan and the refined poses are at least as accurate (here ATE 2.00 -> 1.30 cm; over 60
// frames of seeds 21 and 22, 1.77 -> 1.24 cm and 1.02 -> 1.00 cm); over the same world's map
// thinned to 0.5 m the finer voxels hold at most 0.63 of the points (a voxel needs 6), no
// frame is refined and every pose is the one without refinement (4.71 cm either way).
// [heavy]: two worlds simulated and four runs of 30 frames (about 10 s here).
TEST_CASE("the refinement by default: as accurate as without over a dense map, the same poses over a sparse one",
          "[unit][localization][heavy]") {
  for (const double map_voxel : {0.2, 0.5}) {
    CAPTURE(map_voxel);
    const Sequence seq = make_sequence("refine_" + std::to_string(map_voxel), sim::Scenario::Drive, 30, 21, 150.0,
                                       Sensor{"vlp16", 900, 1}, map_voxel);
    LocalizerSettings before = cpu_settings();
    before.refine_ratio = 0.0;
    const Outcome a = localize(seq, before, map_voxel < 0.3 ? "0.2 m map, refine_ratio 0" : "0.5 m map, refine_ratio 0");
    const Outcome b = localize(seq, cpu_settings(), map_voxel < 0.3 ? "0.2 m map, defaults" : "0.5 m map, defaults");
    CHECK(a.lost == 0);
    CHECK(b.lost == 0);
    REQUIRE(a.results.size() == b.results.size());
    int refined = 0;
    double support = 0.0;
    for (std::size_t k = 0; k < b.results.size(); ++k) {
      const LocalizationResult& r = b.results[k];
      CAPTURE(k, r.refinement_support, r.refined);
      const double err = (r.pose.topRightCorner<3, 1>() - seq.truth[k].pose.translation()).norm();
      if (r.valid) CHECK(err < 0.10);
      refined += r.refined;
      support = std::max(support, r.refinement_support);
      if (map_voxel > 0.3) CHECK((r.pose - a.results[k].pose).norm() < 1e-9);
    }
    std::printf("refinement over a %.1f m map: %d of %zu frames refined, largest support %.2f, ATE %.2f -> %.2f cm\n",
                map_voxel, refined, b.results.size(), support, 100.0 * a.ate.rmse_m, 100.0 * b.ate.rmse_m);
    if (map_voxel < 0.3) {
      CHECK(refined >= 25);
      CHECK(b.ate.rmse_m <= a.ate.rmse_m + 0.001);
    } else {
      CHECK(refined == 0);
      CHECK(support < LocalizerSettings{}.refine_min_support);
    }
  }
}

// A constant-velocity prediction that carries a turn on after the road straightened is off
// in heading and position alike: here frame 14 of a sparse 16-ring drive (150 columns,
// every second point: 600-800 points after the scan filter) is predicted 2.6 m and 37 deg
// off, out of reach of the heading, rotation and position searches about the prediction
// and the last good pose, and the wide search's screen did not rank its place among the
// best it aligns; every later frame was lost with it. The heading search's prediction
// swung about the last good pose's position finds it.
// [heavy]: a 200 m world at 0.2 m (3 s here, minutes under the sanitizers).
TEST_CASE("a turn that ends between two frames: the prediction swung about the last good pose finds the frame",
          "[unit][localization][heavy]") {
  const Sequence seq =
      make_sequence("swing", sim::Scenario::Turns, 30, 3, 200.0, Sensor{"vlp16", 150, 2}, 0.2);
  const Outcome run = localize(seq, cpu_settings(), "vlp16 sparse turns");
  REQUIRE(turn_deg(seq.truth[12].pose, seq.truth[13].pose) > 30.0);  // a turn,
  REQUIRE(turn_deg(seq.truth[13].pose, seq.truth[14].pose) < 5.0);   // then none
  REQUIRE(prediction_miss(seq.truth, 14) > 2.0);
  CHECK(run.results[14].stage == FrameStage::HeadingSearch);
  check_outcome(seq, run, {});
}

TEST_CASE("stop-and-go at 1 Hz: the prediction overshoots into a stop and lags behind the start",
          "[unit][localization]") {
  const Sequence seq = make_sequence("stop_and_go", sim::Scenario::StopAndGo, 14, 3);
  // Standing still: consecutive poses equal; and the constant-velocity prediction misses
  // by metres at the stop and at the start.
  int standing = 0;
  double worst_miss = 0.0;
  std::set<std::size_t> events;
  for (std::size_t k = 1; k < seq.truth.size(); ++k) {
    standing += (seq.truth[k].pose.translation() - seq.truth[k - 1].pose.translation()).norm() < 1e-9;
    const double miss = prediction_miss(seq.truth, k);
    worst_miss = std::max(worst_miss, miss);
    if (miss > 1.0) events.insert(k);
  }
  std::printf("stop-and-go: %d scans standing, the prediction misses by up to %.1f m at %zu frames, simulated in %.1f s\n",
              standing, worst_miss, events.size(), seq.simulate_seconds);
  REQUIRE(standing >= 3);
  REQUIRE(worst_miss > 3.0);
  const Outcome run = localize(seq, cpu_settings(), "stop-and-go");
  check_outcome(seq, run, events);
}

// [heavy]: the wide search screens some 87,000 hypotheses and aligns 1,600 (minutes under
// the sanitizers); the position search and rough-start cases run the same search code.
TEST_CASE("kidnap at 1 Hz: a 20 m jump is found again by the wide search within two frames",
          "[unit][localization][heavy]") {
  const int frames = 12, kidnap = frames / 2;
  const Sequence seq = make_sequence("kidnap", sim::Scenario::Kidnap, frames, 3);
  const double jump = (seq.truth[kidnap].pose.translation() - seq.truth[kidnap - 1].pose.translation()).head<2>().norm();
  std::printf("kidnap: %.2f m and %.0f deg at frame %d, simulated in %.1f s\n", jump,
              turn_deg(seq.truth[kidnap - 1].pose, seq.truth[kidnap].pose), kidnap, seq.simulate_seconds);
  CHECK(jump == Approx(20.0).margin(0.2));  // the ground point jumps 20 m; the sensor sits 1.8 m above it, tilted
  CHECK(seq.truth[1].time == Approx(1.0).margin(1e-9));
  const std::set<std::size_t> events{static_cast<std::size_t>(kidnap)};

  // The default settings: at the kidnapped frame the wide search reaches 22 m from the
  // last good pose (2 m + 20 m/s x 1 s) with headings within 135 deg of the predicted one,
  // at the next one 42 m and every heading.
  const Outcome run = localize(seq, cpu_settings(), "kidnap");
  for (int k = kidnap; k < kidnap + 2; ++k) {
    const LocalizationResult& r = run.results[static_cast<std::size_t>(k)];
    std::printf("kidnap: frame %d %s by the %s after %d hypotheses (%d screened) in %.2f s, %.2f m off\n", k,
                to_string(r.status), to_string(r.stage), r.hypotheses, r.screened, r.align_ms / 1000.0,
                (r.pose.topRightCorner<3, 1>() - seq.truth[static_cast<std::size_t>(k)].pose.translation()).norm());
  }
  check_outcome(seq, run, events);
  CHECK(run.results[static_cast<std::size_t>(kidnap + 1)].valid);

  // Without the searches the frames after the jump are lost, and none of them takes a
  // wrong pose.
  LocalizerSettings last_good = cpu_settings();
  last_good.recovery = Recovery::LastGood;
  const Outcome plain = localize(seq, last_good, "kidnap, --recovery last-good");
  CHECK(plain.lost > 2);
  for (std::size_t k = 0; k < plain.results.size(); ++k) {
    if (plain.results[k].valid) {
      CHECK((plain.results[k].pose.topRightCorner<3, 1>() - seq.truth[k].pose.translation()).norm() < 0.10);
    }
  }
}

// Kidnaps beyond every local search: 50 m and 200 m jumps on a 400 m world (a 2 m ground
// grid: the streets are the same, the scene is made 16 times faster). The wide search
// reaches 22 m at the kidnapped frame; the global search (stage 4, on every lost frame
// here) must find the sensor again within three frames, and no frame may take a wrong pose.
// On CUDA: a global search of this world takes about two minutes on 2 CPU cores (measured:
// the 50 m kidnap found at the kidnapped frame after 128 s), under a second on the GPU. The
// CPU's own case of the stage is BALM's jump (tests/ndt/test_global_search.cpp).
TEST_CASE("kidnap of 50 m and 200 m: found again by the global search within three frames", "[gpu][localization]") {
  NDTCU_REQUIRE_GPU();
  const int frames = 8, kidnap = frames / 2;
  for (const double distance : {50.0, 200.0}) {
    CAPTURE(distance);
    const Sequence seq = make_sequence("kidnap_" + std::to_string(static_cast<int>(distance)), sim::Scenario::Kidnap,
                                       frames, 5, 400.0, Sensor{}, 0.5, [&](sim::SimulationSettings& s) {
                                         s.world.ground_cell = 2.0;
                                         s.trajectory.kidnap_distance = distance;
                                       });
    const double jump =
        (seq.truth[kidnap].pose.translation() - seq.truth[kidnap - 1].pose.translation()).head<2>().norm();
    REQUIRE(jump == Approx(distance).margin(0.2));
    LocalizerSettings settings = cpu_settings();
    settings.global_search_interval = 1;
    const std::string label = "kidnap " + std::to_string(static_cast<int>(distance)) + " m";
    const Outcome run = localize(seq, settings, label.c_str(), Backend::Cuda);
    // Found again at the kidnapped frame or one of the two after it, by the global search;
    // every frame from there on valid.
    int found_at = -1;
    for (int k = kidnap; k < frames && found_at < 0; ++k) {
      if (run.results[static_cast<std::size_t>(k)].valid) found_at = k;
    }
    REQUIRE(found_at >= 0);
    const LocalizationResult& back = run.results[static_cast<std::size_t>(found_at)];
    std::printf("%s: found again at frame %d (kidnapped at %d) by the %s in %.2f s\n", label.c_str(), found_at, kidnap,
                to_string(back.stage), back.align_ms / 1000.0);
    CHECK(found_at <= kidnap + 2);
    CHECK(back.stage == FrameStage::GlobalSearch);
    for (int k = found_at; k < frames; ++k) CHECK(run.results[static_cast<std::size_t>(k)].valid);
    // Every valid frame within 10 cm (check_outcome), lost ones only in those three. ATE
    // within 5 cm: this world's 2 m ground grid and 0.5 m map (4.4 cm measured on 2 CPU
    // cores for the 50 m kidnap, 6.9 cm the largest error).
    check_outcome(seq, run, {static_cast<std::size_t>(kidnap), static_cast<std::size_t>(kidnap + 1)}, 0.05);
  }
}

TEST_CASE("rough start: the first pose 3 m and 30 deg off is found by the initial search", "[unit][localization]") {
  const Sequence seq = make_sequence("rough_start", sim::Scenario::RoughStart, 8, 3);
  const Trajectory rough = read_trajectory((seq.dir / "initial_pose_rough.txt").string());
  REQUIRE(rough.size() == 1);
  Localizer localizer(cpu_settings(), test::on_cpu(2));
  localizer.set_map(seq.map);
  localizer.set_initial_region(rough[0].pose.matrix(), 5.0, 360.0);
  Outcome run;
  for (const ScanEntry& scan : seq.scans) {
    LocalizationResult r = localizer.localize(read_point_cloud(scan.path), scan.time);
    run.lost += r.status == FrameStatus::Lost;
    if (r.valid) run.estimate.push_back({scan.time, Eigen::Isometry3d(r.pose)});
    run.results.push_back(std::move(r));
  }
  run.ate = absolute_trajectory_error(run.estimate, seq.truth);
  const LocalizationResult& first = run.results.front();
  std::printf("rough start: frame 0 %s by the %s after %d hypotheses in %.2f s; %zu lost, ATE %.4f m\n",
              to_string(first.status), to_string(first.stage), first.hypotheses, first.align_ms / 1000.0, run.lost,
              run.ate.rmse_m);
  CHECK(first.valid);
  CHECK(first.stage == FrameStage::InitialSearch);
  CHECK(run.lost == 0);
  check_outcome(seq, run, {});
  CHECK_THROWS_WITH(localizer.set_initial_region(rough[0].pose.matrix(), -1.0, 360.0),
                    Catch::Matchers::Contains("radius"));
}

TEST_CASE("every scenario gives the same bytes for the same seed; rough-start's pose is 3 m and 30 deg off",
          "[unit][sim]") {
  for (const std::string& name : sim::scenario_names()) {
    CAPTURE(name);
    sim::SimulationSettings s;
    s.world.seed = 3;
    s.world.size = 150.0;
    s.lidar.columns = 90;
    s.map.voxel = 1.0;
    s.trajectory.frames = 6;
    sim::apply_scenario(s, sim::scenario_from_string(name));
    CHECK(sim::to_string(s.scenario) == name);
    const fs::path a = ndtcu::test::temp_dir("scenario_bytes_a"), b = ndtcu::test::temp_dir("scenario_bytes_b");
    sim::simulate(s, a.string());
    s.threads = 1;
    s.map.threads = 1;
    sim::simulate(s, b.string());
    for (const char* file : {"map.pcd", "poses_tum.txt", "world.json", "scans/000005.pcd"}) {
      CAPTURE(file);
      CHECK(ndtcu::test::read_bytes(a / file) == ndtcu::test::read_bytes(b / file));
    }
    const Trajectory truth = read_trajectory((a / "poses_tum.txt").string());
    REQUIRE(truth.size() == 6);
    CHECK(truth[5].time == Approx(5.0 / s.trajectory.rate_hz).margin(1e-6));
    CHECK(fs::exists(a / "initial_pose_rough.txt") == (s.scenario == sim::Scenario::RoughStart));
    if (s.scenario == sim::Scenario::RoughStart) {
      const Trajectory rough = read_trajectory((a / "initial_pose_rough.txt").string());
      REQUIRE(rough.size() == 1);
      CHECK(rough[0].time == truth[0].time);
      const Eigen::Vector3d d = rough[0].pose.translation() - truth[0].pose.translation();
      CHECK(d.head<2>().norm() == Approx(3.0).margin(1e-5));
      CHECK(d.z() == Approx(0.0).margin(1e-5));
      CHECK(turn_deg(truth[0].pose, rough[0].pose) == Approx(30.0).margin(1e-4));
    }
  }
  CHECK_THROWS_WITH(sim::scenario_from_string("loop"), Catch::Matchers::Contains("drive, turns, stop-and-go, kidnap, rough-start"));
}

// Every hard scenario on the CUDA backend, with the CPU backend's verdicts: the same frames
// valid, lost and degenerate, every valid frame within 10 cm of its truth. The kidnap, whose
// wide search screens some 87,000 hypotheses, runs in parts of at most 32,768 on the GPU.
TEST_CASE("the hard scenarios on CUDA: the CPU's verdict on every frame, no wrong pose", "[gpu]") {
  if (cuda_devices().empty()) NDTCU_SKIP("no CUDA device: " + cuda_unavailable_reason());
  struct Case {
    const char* name;
    sim::Scenario scenario;
    int frames;
  };
  for (const Case& c : {Case{"turns", sim::Scenario::Turns, 20}, Case{"stop-and-go", sim::Scenario::StopAndGo, 14},
                        Case{"kidnap", sim::Scenario::Kidnap, 12}, Case{"rough-start", sim::Scenario::RoughStart, 8}}) {
    const Sequence seq = make_sequence(std::string("gpu_") + c.name, c.scenario, c.frames, 3);
    const LocalizerSettings settings = cpu_settings();
    const ExecutionOptions on_cpu = test::on_cpu(0), on_gpu = test::on(Backend::Cuda);
    std::vector<LocalizationResult> cpu, gpu;
    for (const ExecutionOptions* s : {&on_cpu, &on_gpu}) {
      Localizer localizer(settings, *s);
      localizer.set_map(seq.map);
      if (c.scenario == sim::Scenario::RoughStart) {
        const Trajectory rough = read_trajectory((seq.dir / "initial_pose_rough.txt").string());
        localizer.set_initial_region(rough.at(0).pose.matrix(), 5.0, 360.0);
      } else {
        localizer.set_initial_pose(seq.truth.front().pose.matrix());
      }
      std::vector<LocalizationResult>& out = s == &on_cpu ? cpu : gpu;
      for (const ScanEntry& scan : seq.scans) out.push_back(localizer.localize(read_point_cloud(scan.path), scan.time));
    }
    int valid = 0, lost = 0;
    for (std::size_t k = 0; k < seq.scans.size(); ++k) {
      const double err = (gpu[k].pose.topRightCorner<3, 1>() - seq.truth[k].pose.translation()).norm();
      CAPTURE(c.name, k, to_string(cpu[k].status), to_string(gpu[k].status), to_string(cpu[k].stage), to_string(gpu[k].stage), err);
      CHECK(gpu[k].valid == cpu[k].valid);
      CHECK((gpu[k].status == FrameStatus::Lost) == (cpu[k].status == FrameStatus::Lost));
      CHECK((gpu[k].status == FrameStatus::Degenerate) == (cpu[k].status == FrameStatus::Degenerate));
      if (gpu[k].valid) CHECK(err < 0.10);
      valid += gpu[k].valid;
      lost += gpu[k].status == FrameStatus::Lost;
    }
    std::printf("%s on CUDA: %d of %zu valid, %d lost, the CPU's verdicts\n", c.name, valid, seq.scans.size(), lost);
  }
}
