// The localizer's calibrated covariance (LocalizationResult::covariance) against exact truth
// on the simulator and against the reference poses of the real sets, measured with the
// machinery of `ndtcu eval covariance` (calibrate_covariance: NEES, chi-square bounds,
// ellipses), not a second copy of it.
#include "../support/test_support.hpp"
#include "localizer_settings.hpp"

#include <ndtcu/covariance_calibration.hpp>
#include <ndtcu/imu.hpp>
#include <ndtcu/io.hpp>
#include <ndtcu/localizer.hpp>
#include <ndtcu/scan_sequence.hpp>
#include <ndtcu/simulator.hpp>
#include <ndtcu/trajectory.hpp>

#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

using namespace ndtcu;
namespace fs = std::filesystem;

namespace {

// The frame's error against `truth` and the covariance it reported, as `ndtcu eval
// covariance` reads them from frames.csv (the x-y block of the calibrated covariance).
CovarianceSample sample_of(std::size_t frame, const LocalizationResult& r, const Eigen::Matrix4d& truth) {
  CovarianceSample s;
  s.frame = frame;
  s.status = to_string(r.status);
  s.error = pose_error(r.pose, truth);
  s.covariance = r.covariance;
  s.covariance_xy = Eigen::Matrix2d(r.covariance.topLeftCorner<2, 2>());
  return s;
}

struct Run {
  std::vector<CovarianceSample> samples;  // the frames with a pose and a covariance
  int frames = 0, valid = 0, lost = 0, uncertain = 0;
};

// Localizes `scans` in `map` from the first reference pose with the default settings (CPU, 2
// threads), given the IMU samples `imu` (all before the first scan: the localizer keeps the
// last 10 s); each frame with a pose is compared with its reference pose.
Run localize(const PointCloud& map, std::vector<ScanEntry> scans, const Trajectory& reference,
           const LocalizerSettings& settings = test::cpu_localizer_settings(),
           const std::vector<ImuSample>& imu = {}) {
  const std::vector<std::optional<std::size_t>> match = match_to_reference(scans, reference);
  Localizer localizer(settings, test::on_cpu(2));
  localizer.set_map(map);
  localizer.add_imu(imu);
  REQUIRE(match.front());
  localizer.set_initial_pose(reference[*match.front()].pose.matrix());
  Run run;
  for (std::size_t k = 0; k < scans.size(); ++k) {
    const LocalizationResult r = localizer.localize(read_point_cloud(scans[k].path), scans[k].time);
    ++run.frames;
    run.valid += r.valid;
    run.lost += r.status == FrameStatus::Lost;
    run.uncertain += r.status == FrameStatus::Uncertain;
    REQUIRE(match[k]);
    if (r.status != FrameStatus::Lost && !r.covariance.isZero(0.0)) {
      run.samples.push_back(sample_of(k, r, reference[*match[k]].pose.matrix()));
    }
  }
  return run;
}

// A drive of `frames` scans at 10 Hz in a `world` m world (map voxelized to 0.2 m) by
// `sensor` with `columns` (0: the sensor's), simulated into a folder of its own and localized
// once with each of `settings` (one run each, in order).
std::vector<Run> simulated_drive(const std::string& sensor, int columns, double noise, std::uint64_t seed,
                                 int frames, double world = 150.0,
                                 const std::vector<LocalizerSettings>& settings = {test::cpu_localizer_settings()}) {
  const fs::path dir = test::temp_dir("covariance_" + sensor + "_" + std::to_string(seed));
  sim::SimulationSettings s;
  s.world.seed = seed;
  s.world.size = world;
  s.lidar = sim::lidar_preset(sensor);
  if (columns > 0) s.lidar.columns = columns;
  if (noise > 0.0) s.lidar.range_noise_sigma = noise;
  s.map.voxel = 0.2;
  s.trajectory.frames = frames;
  s.threads = 2;
  s.map.threads = 2;
  sim::simulate(s, dir.string());
  const std::vector<ScanEntry> scans = list_scans((dir / "scans").string());
  const Trajectory truth = read_trajectory((dir / "poses_tum.txt").string());
  REQUIRE(scans.size() == static_cast<std::size_t>(frames));
  const PointCloud map = read_point_cloud((dir / "map.pcd").string());
  std::vector<Run> runs;
  for (const LocalizerSettings& each : settings) runs.push_back(localize(map, scans, truth, each));
  return runs;
}

void print(const char* label, const Run& run, const CovarianceCalibration& c) {
  std::printf("%s: %d frames, %d valid, %d lost, %d uncertain; 6-D NEES mean %.2f (95%% bounds %.2f-%.2f), within "
              "99%% %.1f%%; x-y NEES mean %.2f; %zu more than 10 cm off, %zu of them with sigma under 3 cm\n",
              label, run.frames, run.valid, run.lost, run.uncertain, c.pose.mean, c.pose.mean_low95, c.pose.mean_high95,
              100.0 * c.pose.within99, c.xy.mean, c.far, c.far_confident);
}

}  // namespace

// Exact truth: 720 frames of twelve drives, four sensors (a sparse 16-ring one with 3 cm range
// noise, a 32-ring, two dense 64-ring) in three worlds of their own (seeds 31-33, 200 m, the
// `ndtcu simulate` defaults). None of them was among the drives the constants were fitted on
// (seeds 7, 21 and 22: docs/library.md, "The calibrated covariance"). The mean 6-D NEES of an
// honest covariance lies within the chi-square 95% bounds of 720 x 6 degrees of freedom over
// 720 (5.75-6.26). Measured with the defaults: 5.94; per drive 2.3-9.3 (a scene's voxels bias
// its poses more or less than the scan's curvature shows), 97.4% of the frames within the 99%
// ellipse, the least 85% (VLP-16, seed 32). Before the refined residual scale 0.065 and the
// localizability term along every weak direction, 3.03: three times too wide.
// [heavy]: twelve simulated drives of 60 frames (about 70 s on 2 cores).
TEST_CASE("the calibrated covariance on the simulator: 720 held-out frames, the NEES within its 95% bounds",
          "[unit][sim][heavy]") {
  std::vector<CovarianceSample> all;
  for (std::uint64_t seed : {31, 32, 33}) {
    for (const auto& [sensor, noise] : {std::pair<const char*, double>{"vlp16", 0.03}, {"hdl32", 0.0},
                                        {"hdl64", 0.0}, {"os1-64", 0.0}}) {
      const Run run = simulated_drive(sensor, 0, noise, seed, 60, 200.0).front();
      const CovarianceCalibration c = calibrate_covariance(run.samples);
      print((std::string(sensor) + " seed " + std::to_string(seed)).c_str(), run, c);
      CHECK(run.lost == 0);
      CHECK(run.uncertain == 0);
      all.insert(all.end(), run.samples.begin(), run.samples.end());
    }
  }
  REQUIRE(all.size() == 720);
  const CovarianceCalibration c = calibrate_covariance(all);
  std::printf("simulator, all: 6-D NEES mean %.2f (95%% bounds %.2f-%.2f), within 99%% %.1f%%\n", c.pose.mean,
              c.pose.mean_low95, c.pose.mean_high95, 100.0 * c.pose.within99);
  CHECK(c.pose.invalid == 0);
  CHECK(c.pose.mean >= c.pose.mean_low95);
  CHECK(c.pose.mean <= c.pose.mean_high95);
  CHECK(c.pose.within99 >= 0.95);
  CHECK(c.far_confident == 0);
}

namespace {

// A drive of `frames` scans of `scenario` with 0.1 s sweeps (seed 1 unless given), simulated
// into a folder of its own and localized with the defaults and without the de-skew term; with
// `imu`, de-skewed with the simulator's IMU samples, with the defaults and with the IMU's rate
// taken as exact (covariance_imu_rate_sigma 0) in place of no term.
struct SweptRuns {
  Run off, on;
  CovarianceCalibration c_off, c_on;
};
SweptRuns swept_drive(sim::Scenario scenario, const std::string& sensor, std::uint64_t seed, int frames,
                      bool imu = false) {
  const fs::path dir = test::temp_dir("covariance_swept_" + sensor + "_" + std::to_string(seed) + "_" +
                                      std::to_string(frames));
  sim::SimulationSettings s;
  s.world.seed = seed;
  s.lidar = sim::lidar_preset(sensor);
  s.trajectory.frames = frames;
  sim::apply_scenario(s, scenario);
  s.sweep_time = 0.1;
  s.threads = 2;
  s.map.threads = 2;
  sim::simulate(s, dir.string());
  // The scans are numbered: at the scenario's own period (1 s for stop-and-go).
  const std::vector<ScanEntry> scans = list_scans((dir / "scans").string(), 1.0 / s.trajectory.rate_hz);
  const Trajectory truth = read_trajectory((dir / "poses_tum.txt").string());
  const PointCloud map = read_point_cloud((dir / "map.pcd").string());
  REQUIRE(scans.size() == static_cast<std::size_t>(frames));
  LocalizerSettings with = test::cpu_localizer_settings();
  std::vector<ImuSample> samples;
  if (imu) {
    with.deskew = Deskew::Imu;
    samples = read_imu_csv((dir / "imu.csv").string());
  }
  LocalizerSettings without = with;
  if (imu) {
    without.covariance_imu_rate_sigma = 0.0;
  } else {
    without.covariance_deskew_scale = 0.0;
  }
  SweptRuns r;
  r.off = localize(map, scans, truth, without, samples);
  r.on = localize(map, scans, truth, with, samples);
  r.c_off = calibrate_covariance(r.off.samples);
  r.c_on = calibrate_covariance(r.on.samples);
  print((sensor + (imu ? ", the IMU's rate as exact" : ", no de-skew term")).c_str(), r.off, r.c_off);
  print((sensor + ", the de-skew term").c_str(), r.on, r.c_on);
  return r;
}

// The term widens only what the de-skew did not know: the poses are those without it.
void check_same_poses(const Run& on, const Run& off) {
  REQUIRE(on.samples.size() == off.samples.size());
  for (std::size_t k = 0; k < on.samples.size(); ++k) {
    CAPTURE(k);
    CHECK(on.samples[k].error.cwiseAbs().maxCoeff() == Approx(off.samples[k].error.cwiseAbs().maxCoeff()).margin(1e-3));
  }
}

}  // namespace

// The simulator's fast drive with 0.1 s sweeps (`ndtcu simulate --scenario fast --sweep-time
// 0.1`, HDL-32, seed 1; 20-24 m/s, braking into a 4 m corner), de-skewed with constant
// velocity (`auto`: the scans have times, no IMU or odometry given). The motion a frame is
// de-skewed with comes from the poses before it and lags the sweep: the pose is off by what
// that motion misses times the points' time (2.9 cm per 0.5 m/s at a 0.1 s sweep's RMS
// time), which the alignment's curvature does not see. The de-skew term
// (covariance_deskew_scale) counts it; measured over the 30 frames: without it the mean 6-D
// NEES is 100 and 26.7% of the frames lie within the 99% ellipse, with it 2.69 (bounds
// 4.82-7.30) and 100%. (Before the motion came from the poses at the sweeps' mean times,
// 2026-12-05, the frames were further off: 160 and 6.7%, the one frame more than 10 cm off
// reporting a sigma under 3 cm along its error, against 6.04 and 93.3% with the term. The
// term is now about twice too wide there: its share of the last pose's covariance, P / dt^2,
// still counts the de-skew error of a pose the motion no longer comes from; taking that
// pose's covariance without its de-skew term gave 18.6, over-confident in rotation.)
// [heavy]: 30 swept scans simulated and localized twice (about 30 s on 2 cores).
TEST_CASE("the calibrated covariance of swept scans: the de-skew term counts the motion the de-skew missed",
          "[unit][sim][heavy]") {
  const SweptRuns r = swept_drive(sim::Scenario::Fast, "hdl32", 1, 30);
  CHECK(r.on.lost == 0);
  CHECK(r.on.uncertain == 0);
  CHECK(r.on.valid == r.off.valid);
  check_same_poses(r.on, r.off);
  CHECK(r.c_off.pose.mean > 2.0 * r.c_off.pose.mean_high95);
  CHECK(r.c_on.pose.mean <= r.c_on.pose.mean_high95);
  CHECK(r.c_on.pose.within99 >= 0.9);
  CHECK(r.c_on.far_confident == 0);
}

// 1 Hz frames (`--scenario stop-and-go --sweep-time 0.1 --seed 3`: from rest, 3.5 m/s^2 up to
// 9.6 m/s, braking at 6): the motion changes by metres per second from one frame to the
// next, but the motion between two poses lags the sweep by about half a second, not a
// whole frame, and the term takes that share of the change (LocalizerSettings::
// covariance_deskew_scale). Taken whole, it reported 0.20-0.35 m on frames 8-10 cm off and
// made three of them uncertain (12 of 20 within 10 cm against 15). Measured: 20 valid, none
// lost or uncertain with the term or without (17 valid and 3 lost before the candidate
// turns ran from the searches' best place too: frame 14, 25.8 cm off, reports 7.1 cm);
// 6-D NEES 10.7 (80% within the 99% ellipse) against 118 (25%); of the 3 frames more than
// 10 cm off, none reports a sigma under 3 cm (3 without the term). Frame 13 is 12 cm off: the car brakes at 6 m/s^2 from
// the sweep before on, and the motion between the last two poses has not changed. Without
// the velocity's unseen change over the lag (covariance_deskew_jerk, 2 m/s^2: 1 m/s
// here) it reported 1.2 cm, and the NEES was 24.6 (64.7%). (28.4 against 142 before the
// motion came from the poses at the sweeps' mean times.)
// [heavy]: 20 swept 1 Hz scans simulated and localized twice, searches included (about 60 s
// on 2 cores).
TEST_CASE("the calibrated covariance of swept scans at 1 Hz: the de-skew term makes no frame uncertain",
          "[unit][sim][heavy]") {
  const SweptRuns r = swept_drive(sim::Scenario::StopAndGo, "vlp16", 3, 20);
  CHECK(r.on.uncertain == 0);
  CHECK(r.on.valid == r.off.valid);
  CHECK(r.on.lost == r.off.lost);
  check_same_poses(r.on, r.off);
  CHECK(r.c_on.pose.mean < 0.5 * r.c_off.pose.mean);
  CHECK(r.c_on.far_confident <= r.c_off.far_confident);
  CHECK(r.c_on.far_confident == 0);  // frame 13, braking since the motion's poses: 12 cm off
}

// The fast drive (seed 2, VLP-16, 60 frames) de-skewed with the simulator's IMU, whose gyro
// has a bias of 0.003, -0.002, 0.004 rad/s: each sweep's rotation is the IMU's, part by part,
// which the de-skew term took as exact. The yaw was then a steady 0.33 mrad off where it
// reported 0.16-0.18 (NEES 3.3 in yaw alone): 6-D NEES 8.41, 93.3% within the 99% ellipse.
// With the rate's sigma (covariance_imu_rate_sigma, 0.002 rad/s) 6.68 and 100%; the poses
// are the same. (0.004 gave 4.77 here and 2.05-3.19 on the drives that were honest already.)
// [heavy]: 60 swept scans simulated and localized twice (about 80 s on 2 cores).
TEST_CASE("the calibrated covariance of scans de-skewed with an IMU: the gyro's bias counts", "[unit][sim][heavy]") {
  const SweptRuns r = swept_drive(sim::Scenario::Fast, "vlp16", 2, 60, true);
  CHECK(r.on.lost == 0);
  CHECK(r.on.uncertain == 0);
  check_same_poses(r.on, r.off);
  CHECK(r.c_off.pose.mean > r.c_off.pose.mean_high95);
  CHECK(r.c_off.pose.within99 < 0.95);
  CHECK(r.c_on.pose.mean <= r.c_on.pose.mean_high95);
  CHECK(r.c_on.pose.within99 >= 0.95);
  CHECK(r.c_on.far_confident == 0);
}

// A dense sensor down a walled street (`ndtcu simulate --seed 7 --sensor hdl64 --frames 100`,
// one of the drives the constants were fitted on: docs/library.md, "Along the weak
// directions"): the refined poses are 3-6 cm off along the street for 40 frames running where
// the Laplace estimate says 8 mm, and the weakest direction turns between the street's axis
// and across it. Measured: with the localizability term 97% of the frames lie within the 99%
// ellipse, mean 6-D NEES 7.95 (this street's bias is more than the term's average, which the
// 720 held-out frames above hold honest); without it 37% and 41.3.
// [heavy]: 100 dense scans simulated and localized twice (about 40 s on 2 cores).
TEST_CASE("the calibrated covariance down a walled street: the weak directions widen it", "[unit][sim][heavy]") {
  LocalizerSettings without = test::cpu_localizer_settings();
  without.covariance_weak_direction_sigma = 0.0;
  const std::vector<Run> runs =
      simulated_drive("hdl64", 0, 0.0, 7, 100, 200.0, {test::cpu_localizer_settings(), without});
  const Run& run = runs[0];
  const CovarianceCalibration c = calibrate_covariance(run.samples);
  const CovarianceCalibration c_without = calibrate_covariance(runs[1].samples);
  print("hdl64 seed 7", run, c);
  print("hdl64 seed 7, no localizability term", runs[1], c_without);
  CHECK(run.lost == 0);
  CHECK(run.uncertain == 0);
  REQUIRE(c.pose.frames == 100);
  CHECK(c.pose.within99 >= 0.95);
  CHECK(c.far_confident == 0);
  // The term is what holds it: without it the error leaves the ellipse on most frames.
  CHECK(c_without.pose.within99 < 0.5);
  CHECK(c_without.pose.mean > 3.0 * c.pose.mean);
}

// The real sets with the defaults: the error inside the 99% ellipse (6-D) on at least 95% of
// the frames, no frame more than 10 cm off reporting a sigma under 3 cm along its error, and
// no right frame lost or refused by the bound. The errors are against reference poses that
// are estimates themselves (../shared/data/README.md). The Livox set holds it against its
// reference taken as exact: 97.4% (111 of 114), mean 6-D NEES 4.97.
TEST_CASE("the calibrated covariance on the Livox Avia set: the 99% ellipse holds at least 95% of the frames",
          "[data]") {
  NDTCU_REQUIRE_DATA(dir, "livox_avia_hku_mb");
  const fs::path livox = dir / "livox_avia_hku_mb";
  const std::vector<ScanEntry> scans = list_scans((livox / "queries_2s.txt").string());
  const Trajectory reference = read_trajectory((livox / "poses_tum.txt").string());
  const Run run = localize(read_point_cloud((livox / "map_keyframes_3mod4_voxel0.05.pcd").string()), scans, reference);
  const CovarianceCalibration c = calibrate_covariance(run.samples);
  print("livox_avia_hku_mb", run, c);
  CHECK(run.lost == 0);
  CHECK(run.uncertain == 0);
  REQUIRE(c.pose.frames == 114);
  CHECK(c.pose.within99 >= 0.95);
  CHECK(c.far_confident == 0);
}

TEST_CASE("the calibrated covariance on BALM at 1 Hz: with the reference's own 1 cm, the 99% ellipse holds at "
          "least 95% of the frames",
          "[data]") {
  NDTCU_REQUIRE_DATA(dir, "balm_os0");
  const fs::path balm = dir / "balm_os0";
  const std::vector<ScanEntry> scans = list_scans((balm / "odd_scans_1hz.txt").string());
  const Trajectory reference = read_trajectory((balm / "poses_tum.txt").string());
  const Run run = localize(read_point_cloud((balm / "map_even_frames_0-58_voxel0.1.pcd").string()), scans, reference);
  // BALM's reference is a bundle adjustment "consistent to about 1 cm" (its README): the error
  // is the difference of two estimates, its covariance the reported one plus the reference's
  // 1 cm in x, y and z (`ndtcu eval covariance --reference-sigma 0.01,0`). With it 100% and a
  // mean 6-D NEES of 3.04. Taken as exact: 93.3%, the mean 7.22 (within its 95% bounds,
  // 4.82-7.30); frames 28 and 29 lie outside, 2.1 and 2.4 cm off reporting 0.7 cm along their
  // error, where BALM's errors (1.3 cm RMS) are the size of the reference's own.
  CovarianceCalibrationOptions options;
  options.reference_sigma_m = 0.01;
  const CovarianceCalibration c = calibrate_covariance(run.samples, options);
  print("balm_os0 1 Hz", run, c);
  CHECK(run.lost == 0);
  CHECK(run.uncertain == 0);
  REQUIRE(c.pose.frames == 30);
  CHECK(c.pose.within99 >= 0.95);
  CHECK(c.far_confident == 0);
}
