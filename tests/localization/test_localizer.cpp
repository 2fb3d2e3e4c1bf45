// Scan-to-map localization: the Localizer, scan sequences and the prefetcher.
//
// Accuracy bounds. The sample sequence (data/sample, made by `ndtcu simulate`) has exact
// truth and 2 cm range noise: 2 cm ATE. BALM's reference is a bundle adjustment consistent
// to about 1 cm: 3 cm ATE (PCL's NDT reaches 7.2 cm on the odd scans). KITTI's reference is
// itself an ICP registration with 3.7-4.5 cm fit residuals: 5 cm ATE.
#include "../ndt/synthetic.hpp"
#include "../support/test_support.hpp"

#include <ndtcu/fields.hpp>
#include <ndtcu/filters.hpp>
#include <ndtcu/io.hpp>
#include <ndtcu/localizer.hpp>
#include <ndtcu/scan_sequence.hpp>
#include <ndtcu/trajectory.hpp>

#include <Eigen/Geometry>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <limits>
#include <thread>

using namespace ndtcu;
namespace fs = std::filesystem;

namespace {

const fs::path kSample = ndtcu::test::source_dir() / "data" / "sample";

struct RunStats {
  Trajectory estimate;
  std::size_t lost = 0, recovered = 0, skipped = 0;
  double seconds = 0.0;
  std::vector<LocalizationResult> results;
};

// Localizes `scans` from `initial` the way `ndtcu localize` does (prefetcher + localizer).
RunStats run_sequence(Localizer& localizer, const std::vector<ScanEntry>& scans, const Eigen::Matrix4d& initial) {
  localizer.set_initial_pose(initial);
  RunStats out;
  const auto t0 = std::chrono::steady_clock::now();
  ScanPrefetcher prefetcher(scans, [&](const PointCloud& c) { return localizer.preprocess(c); }, 2, 4);
  while (auto scan = prefetcher.next()) {
    if (!scan->error.empty()) {
      ++out.skipped;
      continue;
    }
    LocalizationResult r = localizer.localize_preprocessed(scan->cloud, scan->entry.time);
    out.lost += r.status == FrameStatus::Lost;
    out.recovered += r.status == FrameStatus::Recovered;
    if (r.valid) out.estimate.push_back({scan->entry.time, Eigen::Isometry3d(r.pose)});
    out.results.push_back(std::move(r));
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

PointCloud shifted(const PointCloud& c, const Eigen::Vector3f& by) {
  PointCloud out = c;
  for (auto& p : out.points) p += by;
  return out;
}

}  // namespace

TEST_CASE("a frame's check and stage are enums named as frames.csv writes them", "[unit][localization]") {
  // The names frames.csv, the JSON summary and Python have always written.
  const std::vector<std::string> checks = {"passed", "degeneracy probe", "too few points", "no pose",
                                           "not converged", "matched ratio", "nvtl", "typical nvtl",
                                           "mahalanobis gate", "ambiguous", "probe found better", "covariance bound"};
  const std::vector<std::string> stages = {"none", "prediction", "continuation", "last-good", "probe",
                                           "heading search", "rotation search", "position search",
                                           "wide search", "initial search", "global search", "sweep motion"};
  CHECK(enum_names<FrameCheck>() == checks);
  CHECK(enum_names<FrameStage>() == stages);
  for (FrameCheck c : EnumValues<FrameCheck>::all()) CHECK(frame_check_from_string(to_string(c)) == c);
  for (FrameStage st : EnumValues<FrameStage>::all()) CHECK(frame_stage_from_string(to_string(st)) == st);
  CHECK_THROWS_WITH(frame_check_from_string("lost"), Catch::Contains("'lost'") && Catch::Contains("passed, "));
  CHECK_THROWS_AS(frame_stage_from_string("search"), Error);
  const LocalizationResult r;
  CHECK(r.decided_by == FrameCheck::Passed);
  CHECK(r.stage == FrameStage::Prediction);
}

TEST_CASE("the sample sequence localizes within 2 cm of its exact truth, no frame lost", "[unit][localization]") {
  std::vector<ScanEntry> scans = list_scans((kSample / "scans").string());
  REQUIRE(scans.size() == 10);
  const Trajectory truth = read_trajectory((kSample / "poses_tum.txt").string());
  const auto match = match_to_reference(scans, truth);
  for (std::size_t k = 0; k < scans.size(); ++k) {
    REQUIRE(match[k] == k);  // as many poses as scans: by index, with the pose's time
    CHECK(scans[k].time == truth[k].time);
  }
  LocalizerSettings s;
  ExecutionOptions e;
  e.threads = 2;
  e.backend = Backend::Cpu;
  Localizer localizer(s, e);
  localizer.set_map(read_point_cloud((kSample / "map.pcd").string()));
  const RunStats run = run_sequence(localizer, scans, truth.front().pose.matrix());
  const AteStats ate = absolute_trajectory_error(run.estimate, truth);
  std::printf("sample: ATE rmse %.4f m, max %.4f m, %zu lost, %zu recovered, %.1f fps\n", ate.rmse_m, ate.max_m,
              run.lost, run.recovered, scans.size() / run.seconds);
  CHECK(run.lost == 0);
  CHECK(run.skipped == 0);
  REQUIRE(ate.pairs == scans.size());
  CHECK(ate.rmse_m < 0.02);
  CHECK(ate.max_m < 0.04);
  for (const auto& r : run.results) {
    CHECK(r.valid);
    CHECK(r.alignment.nvtl >= s.nvtl_threshold);
    CHECK(r.points_used > 300);  // the filter keeps a usable scan
    CHECK(r.covariance(0, 0) > 0.0);
  }
}

TEST_CASE("a scan far outside the map is lost, keeps no wild pose, and tracking resumes", "[unit][localization]") {
  std::vector<ScanEntry> scans = list_scans((kSample / "scans").string());
  const Trajectory truth = read_trajectory((kSample / "poses_tum.txt").string());
  match_to_reference(scans, truth);
  LocalizerSettings s;
  ExecutionOptions execution;
  execution.threads = 2;
  execution.backend = Backend::Cpu;
  Localizer localizer(s, execution);
  localizer.set_map(read_point_cloud((kSample / "map.pcd").string()));
  localizer.set_initial_pose(truth[0].pose.matrix());
  for (int k = 0; k < 10; ++k) {
    PointCloud scan = read_point_cloud(scans[k].path);
    if (k == 4) scan = shifted(scan, Eigen::Vector3f(30.f, 25.f, 4.f));  // a scan taken elsewhere, still in range
    if (k == 6) scan = shifted(scan, Eigen::Vector3f(500.f, -300.f, 0.f));  // nothing left after the range crop
    const Eigen::Matrix4d predicted = localizer.predict(scans[k].time);
    const LocalizationResult r = localizer.localize(scan, scans[k].time);
    CAPTURE(k, r.alignment.nvtl, to_string(r.alignment.reason), r.points_used);
    const double err = (r.pose.topRightCorner<3, 1>() - truth[k].pose.translation()).norm();
    if (k == 6) {
      CHECK(r.status == FrameStatus::Lost);
      CHECK(r.points_used == 0);
      CHECK(r.decided_by == FrameCheck::TooFewPoints);  // nothing aligned, nothing searched
      CHECK(r.attempts == 0);
      CHECK(r.pose == predicted);
    } else if (k == 4) {
      CHECK(r.status == FrameStatus::Lost);
      CHECK_FALSE(r.valid);
      CHECK(r.pose == predicted);  // the prediction, never the failed alignment
      CHECK(r.attempts >= 2);      // the recovery ran, and stopped
      // The attempts, then the four searches, bounded: the heading search's 3 x 6 turns
      // (each refined), the rotation search's 123 rotations about each of its two centres,
      // the positions within 2 m of the prediction and those within 4 m of the last good
      // pose (2 m + 20 m/s x 0.1 s), at 7 yaws (+-(45 + 90 x 0.1) deg), the last three with
      // at most 32 refinements, and up to three continuations of each refinement:
      // 18 + 246 + 91 + 343 + (18 + 3 x 18) + 3 x (32 + 3 x 32).
      CHECK(r.stage == FrameStage::WideSearch);
      CHECK(r.hypotheses <= 18 + 246 + 91 + 343 + (18 + 3 * 18) + 3 * (32 + 3 * 32));
      CHECK(r.screened == 0);  // too few to screen
      // Each of the four stages' winners may go on for up to 2 alignments when it ran out of
      // iterations (frame_attempts.cpp, kSearchWinnerContinuations).
      CHECK(r.attempts <= 1 + s.recovery_attempts + r.hypotheses + 4 * 2);
      CHECK(localizer.consecutive_lost() == 1);
    } else {
      CHECK(r.valid);
      CHECK(err < 0.04);
      CHECK(localizer.consecutive_lost() == 0);
    }
  }
}

TEST_CASE("a scan too sparse to hold a pose is lost at once, without a search, and tracking resumes after it",
          "[unit][localization]") {
  std::vector<ScanEntry> scans = list_scans((kSample / "scans").string());
  const Trajectory truth = read_trajectory((kSample / "poses_tum.txt").string());
  match_to_reference(scans, truth);
  const PointCloud map = read_point_cloud((kSample / "map.pcd").string());
  PointCloud one_point;  // inside the range crop's minimum: nothing left after the filter
  one_point.points.emplace_back(0.1f, 0.f, 0.f);
  PointCloud sparse = read_point_cloud(scans[4].path);
  sparse.points.resize(40);  // a few points left, but fewer than min_frame_points
  for (const std::size_t min_frame_points : {std::size_t{100}, std::size_t{0}}) {
    CAPTURE(min_frame_points);
    LocalizerSettings s;
    ExecutionOptions e;
    e.threads = 2;
    e.backend = Backend::Cpu;
    s.min_frame_points = min_frame_points;
    Localizer localizer(s, e);
    localizer.set_map(map);
    localizer.set_initial_pose(truth[0].pose.matrix());
    for (int k = 0; k < 3; ++k) REQUIRE(localizer.localize(read_point_cloud(scans[k].path), scans[k].time).valid);
    int hypotheses = 0;
    for (int k = 3; k < 7; ++k) {
      const Eigen::Matrix4d predicted = localizer.predict(scans[k].time);
      const LocalizationResult r = localizer.localize(k == 4 ? sparse : one_point, scans[k].time);
      CAPTURE(k, r.attempts, r.hypotheses, to_string(r.stage));
      hypotheses += r.hypotheses;
      // Without the floor, the 40 points (a strip of one ring) are aligned, and on this
      // frame their pose passes every check though it is 3-4 deg off in roll and pitch.
      if (min_frame_points == 0 && k == 4) continue;
      CHECK(r.status == FrameStatus::Lost);
      CHECK_FALSE(r.valid);
      CHECK(r.pose == predicted);
      if (min_frame_points > 0) {
        CHECK(localizer.consecutive_lost() == k - 2);
        CHECK(r.decided_by == FrameCheck::TooFewPoints);
        CHECK(r.stage == FrameStage::None);
        CHECK(r.attempts == 0);
        CHECK(r.hypotheses == 0);
        CHECK(r.screened == 0);
      }
    }
    // Without the floor, the same frames run every search (the empty ones included).
    if (min_frame_points == 0) CHECK(hypotheses > 100);
    // The motion model was left at frame 2: frame 7, 0.5 s on, is found by the searches
    // sized by that time, and tracking goes on.
    for (int k = 7; k < 10; ++k) {
      const LocalizationResult r = localizer.localize(read_point_cloud(scans[k].path), scans[k].time);
      CAPTURE(k, to_string(r.stage), r.alignment.nvtl);
      CHECK(r.valid);
      CHECK((r.pose.topRightCorner<3, 1>() - truth[k].pose.translation()).norm() < 0.04);
    }
    CHECK(localizer.consecutive_lost() == 0);
  }
}

TEST_CASE("a bad prediction is recovered from the last good pose", "[unit][localization]") {
  std::vector<ScanEntry> scans = list_scans((kSample / "scans").string());
  const Trajectory truth = read_trajectory((kSample / "poses_tum.txt").string());
  match_to_reference(scans, truth);
  LocalizerSettings s;
  ExecutionOptions e;
  e.threads = 2;
  e.backend = Backend::Cpu;
  s.max_prediction_scale = 15.0;
  Localizer localizer(s, e);
  localizer.set_map(read_point_cloud((kSample / "map.pcd").string()));
  localizer.set_initial_pose(truth[0].pose.matrix());
  for (int k = 0; k < 3; ++k) REQUIRE(localizer.localize(read_point_cloud(scans[k].path), scans[k].time).valid);
  // A time stamp far in the future extrapolates the velocity (capped here at 15 frames'
  // motion, about 10 m) beyond the alignment's reach (30 steps of at most 0.1); the retry
  // from the last good pose, one frame away, still finds the scan's pose.
  const Eigen::Matrix4d far = localizer.predict(1e3);
  const Eigen::Matrix4d one = localizer.predict(scans[3].time);
  const double last_step = (truth[2].pose.translation() - truth[1].pose.translation()).norm();
  CHECK((far.topRightCorner<3, 1>() - truth[2].pose.translation()).norm() == Approx(15 * last_step).epsilon(0.05));
  CHECK((one.topRightCorner<3, 1>() - truth[3].pose.translation()).norm() < 0.1);  // the drive accelerates
  const LocalizationResult r = localizer.localize(read_point_cloud(scans[3].path), 1e3);
  CAPTURE(r.alignment.nvtl, r.attempts);
  CHECK(r.status == FrameStatus::Recovered);
  CHECK(r.valid);
  CHECK((r.pose.topRightCorner<3, 1>() - truth[3].pose.translation()).norm() < 0.04);
}

TEST_CASE("constant-velocity prediction scales with the time stamps", "[unit][localization]") {
  LocalizerSettings s;
  ExecutionOptions execution;
  execution.threads = 1;
  execution.backend = Backend::Cpu;
  s.voxel_leaf = 0.5;
  s.min_range = 0.0;
  // The motion model's arithmetic on the 2 m voxels' poses (within 1 cm of the truth here;
  // refined at 1 m the second is 1.4 cm off, the synthetic scene's few surfaces holding it
  // less well in the finer voxels).
  s.refine_ratio = 0.0;
  Localizer localizer(s, execution);
  CHECK_THROWS_AS(localizer.predict(0.0), Error);
  const PointCloud map = test::synthetic_scene(7);
  localizer.set_map(map);
  CHECK_THROWS_AS(localizer.localize(map, 0.0), Error);  // no initial pose yet
  CHECK_THROWS_AS(localizer.set_initial_pose(Eigen::Matrix4d::Zero()), Error);
  // Two scans of the scene from poses 0.3 m and 1 degree of yaw apart, 0.1 s apart.
  Pose6 p0, p1;
  p0 << 1.0, 0.5, 0.0, 0.0, 0.0, 0.1;
  p1 << 1.3, 0.55, 0.01, 0.0, 0.0, 0.1 + M_PI / 180;
  localizer.set_initial_pose(pose_to_matrix(p0));
  CHECK(localizer.predict(0.0) == pose_to_matrix(p0));  // no velocity before two poses
  const LocalizationResult r0 = localizer.localize(test::moved_by_inverse(map, p0), 0.0);
  REQUIRE(r0.valid);
  CHECK(localizer.predict(0.1) == r0.pose);  // one pose: still no velocity
  const LocalizationResult r1 = localizer.localize(test::moved_by_inverse(map, p1), 0.1);
  REQUIRE(r1.valid);
  CHECK((r1.pose.topRightCorner<3, 1>() - pose_to_matrix(p1).topRightCorner<3, 1>()).norm() < 0.01);
  const Eigen::Matrix4d delta = r0.pose.inverse() * r1.pose;
  // A non-finite stamp is refused and leaves the motion model as it was.
  CHECK_THROWS_WITH(localizer.localize(map, std::nan("")), Catch::Contains("frame time nan s is not finite"));
  CHECK_THROWS_WITH(localizer.localize(map, HUGE_VAL), Catch::Contains("frame time inf s is not finite"));
  // One frame ahead: exactly one more step of the last motion.
  CHECK((localizer.predict(0.2) - r1.pose * delta).cwiseAbs().maxCoeff() < 1e-9);
  // Two frames ahead (a frame lost in between): two steps. The rotation is exact; the
  // translation is scaled linearly, which differs from the exact screw motion by about
  // angle * step = 0.017 * 0.3 m = 5 mm.
  const Eigen::Matrix4d two = localizer.predict(0.3), exact = r1.pose * delta * delta;
  CHECK((two.topLeftCorner<3, 3>() - exact.topLeftCorner<3, 3>()).cwiseAbs().maxCoeff() < 1e-9);
  CHECK((two.topRightCorner<3, 1>() - exact.topRightCorner<3, 1>()).norm() < 0.01);
  CHECK((two.topRightCorner<3, 1>() - r1.pose.topRightCorner<3, 1>()).norm() ==
        Approx(2 * delta.topRightCorner<3, 1>().norm()).epsilon(1e-9));
  // Times that do not increase predict one step.
  CHECK((localizer.predict(0.1) - r1.pose * delta).cwiseAbs().maxCoeff() < 1e-9);
  // A restart forgets the velocity.
  localizer.set_initial_pose(pose_to_matrix(p0));
  CHECK(localizer.predict(5.0) == pose_to_matrix(p0));
}

TEST_CASE("localizer settings out of range are named", "[unit][localization]") {
  auto bad = [](auto change, const std::string& word) {
    LocalizerSettings s;
    change(s);
    try {
      validate(s);
      FAIL("no Error for " << word);
    } catch (const Error& e) {
      CHECK_THAT(e.what(), Catch::Contains(word));
    }
  };
  bad([](LocalizerSettings& s) { s.min_range = -1; }, "min_range");
  bad([](LocalizerSettings& s) { s.max_range = 0.5; }, "max_range");
  bad([](LocalizerSettings& s) { s.voxel_leaf = -0.1; }, "voxel_leaf");
  bad([](LocalizerSettings& s) { s.nvtl_threshold = NAN; }, "nvtl_threshold");
  bad([](LocalizerSettings& s) { s.recovery_attempts = -1; }, "recovery_attempts");
  bad([](LocalizerSettings& s) { s.max_prediction_scale = 0.5; }, "max_prediction_scale");
  bad([](LocalizerSettings& s) { s.align.resolution = 0; }, "resolution");
  bad([](LocalizerSettings& s) { s.refine_ratio = 0.95; }, "refine_ratio");
  bad([](LocalizerSettings& s) { s.refine_ratio = -0.5; }, "refine_ratio");
  bad([](LocalizerSettings& s) { s.search_step_size = -0.3; }, "search_step_size");
  bad([](LocalizerSettings& s) { s.heading_search_step_deg = 0.5; }, "heading_search_step_deg");
  bad([](LocalizerSettings& s) { s.search_yaw_step_deg = 0.5; }, "search_yaw_step_deg");
  bad([](LocalizerSettings& s) { s.search_position_step = 0.0; }, "search_position_step");
  // Steps are kept in [epsilon / 2, step]: a search step below that is an empty range.
  bad([](LocalizerSettings& s) { s.search_step_size = 0.004; }, "search_step_size must be 0 or at least half of epsilon (0.005 m), got 0.004");
}

TEST_CASE("refine_ratio polishes valid frames against finer voxels of the map's points, and only then",
          "[unit][localization]") {
  std::vector<ScanEntry> scans = list_scans((kSample / "scans").string());
  const Trajectory truth = read_trajectory((kSample / "poses_tum.txt").string());
  const PointCloud map = read_point_cloud((kSample / "map.pcd").string());
  LocalizerSettings s;
  const ExecutionOptions e = test::on_cpu(2);
  {
    Localizer defaults(s, e);
    defaults.set_map(map);
    CHECK(defaults.refines());  // on by default, at 0.5
  }
  CHECK(s.refine_ratio == 0.5);
  s.refine_ratio = 0.0;
  Localizer plain(s, e);
  plain.set_map(map);
  CHECK_FALSE(plain.refines());
  s.refine_ratio = 0.5;
  Localizer refining(s, e);
  refining.set_map(map);
  CHECK(refining.refines());
  const RunStats a = run_sequence(plain, scans, truth.front().pose.matrix());
  const RunStats b = run_sequence(refining, scans, truth.front().pose.matrix());
  REQUIRE(a.results.size() == b.results.size());
  int refined = 0;
  for (std::size_t k = 0; k < a.results.size(); ++k) {
    const LocalizationResult &x = a.results[k], &y = b.results[k];
    CAPTURE(k, y.refinement_m);
    CHECK_FALSE(x.refined);
    CHECK(std::isnan(x.refinement_m));
    REQUIRE(y.valid);
    CHECK(std::isfinite(y.refinement_m));  // it ran on every valid frame
    CHECK(std::isnan(x.refinement_support));
    refined += y.refined;
    if (y.refined) {
      // The finer voxels of the sample's 0.25 m map held as many of the points as the 2 m ones.
      CHECK(y.refinement_support >= s.refine_min_support);
      // Within its bounds (half the 1 m voxel), and the checks were those of the 2 m map:
      // the accepted alignment stays in `alignment`, the pose is the refinement's.
      CHECK(y.refinement_m <= 0.5);
      CHECK(y.alignment.nvtl >= s.nvtl_threshold);
      CHECK((y.pose.topRightCorner<3, 1>() - y.alignment.transform.topRightCorner<3, 1>()).norm() ==
            Approx(y.refinement_m).margin(1e-9));
    } else {
      CHECK(y.pose == y.alignment.transform);
    }
    const double err = (y.pose.topRightCorner<3, 1>() - truth[k].pose.translation()).norm();
    CHECK(err < 0.05);
  }
  CHECK(refined >= 8);
  // A map given as voxels has no finer ones: no refinement, and the frames are the plain run's.
  Localizer voxels(s, e);
  voxels.set_map(std::make_shared<const VoxelMap>(VoxelMap::build(map, voxel_map_options(s.align))));
  CHECK_FALSE(voxels.refines());
  const RunStats c = run_sequence(voxels, scans, truth.front().pose.matrix());
  for (std::size_t k = 0; k < a.results.size(); ++k) {
    CHECK_FALSE(c.results[k].refined);
    CHECK((c.results[k].pose - a.results[k].pose).norm() < 1e-6);
  }
  // update_map swaps in voxels: refinement stops with the old points' finer map.
  refining.update_map(std::make_shared<const VoxelMap>(VoxelMap::build(map, voxel_map_options(s.align))));
  CHECK_FALSE(refining.refines());
}

// LocalizerSettings::refine_min_support: the sample's map thinned to one point per 0.5 m
// leaves most 1 m voxels of a wall or the ground under the 6 points a voxel needs, so the
// finer voxels hold about a third of the points the 2 m ones hold; their pose is not
// taken, and the frames are those of no refinement. Without the rule (and with
// min_matched_ratio lowered so that so partial a fit settles), the finer pose is taken.
TEST_CASE("refine_min_support: a map too sparse for the finer voxels keeps the accepted poses",
          "[unit][localization]") {
  std::vector<ScanEntry> scans = list_scans((kSample / "scans").string());
  const Trajectory truth = read_trajectory((kSample / "poses_tum.txt").string());
  const PointCloud map = voxel_downsample(read_point_cloud((kSample / "map.pcd").string()), 0.5);
  const ExecutionOptions e = test::on_cpu(2);
  LocalizerSettings s;
  s.refine_ratio = 0.0;
  Localizer plain(s, e);
  plain.set_map(map);
  s.refine_ratio = 0.5;
  Localizer supported(s, e);
  supported.set_map(map);
  s.refine_min_support = 0.0;
  s.min_matched_ratio = 0.25;
  Localizer any(s, e);
  any.set_map(map);
  const RunStats a = run_sequence(plain, scans, truth.front().pose.matrix());
  const RunStats b = run_sequence(supported, scans, truth.front().pose.matrix());
  const RunStats c = run_sequence(any, scans, truth.front().pose.matrix());
  REQUIRE(a.results.size() == b.results.size());
  int refined_without_rule = 0;
  double largest_support = 0.0;
  for (std::size_t k = 0; k < a.results.size(); ++k) {
    const LocalizationResult &x = a.results[k], &y = b.results[k];
    CAPTURE(k, y.refinement_support, c.results[k].refinement_support);
    REQUIRE(y.valid);
    CHECK(y.refinement_support < LocalizerSettings{}.refine_min_support);
    largest_support = std::max(largest_support, y.refinement_support);
    CHECK_FALSE(y.refined);
    CHECK((y.pose - x.pose).norm() < 1e-9);
    refined_without_rule += c.results[k].refined;
  }
  std::printf("refine_min_support: sample map at 0.5 m, finer voxels' support at most %.2f; %d of %zu frames refined "
              "without the rule\n",
              largest_support, refined_without_rule, a.results.size());
  CHECK(refined_without_rule > 0);
}

TEST_CASE("a voxel leaf too small for the crop is refused before any scan, naming the value, the limit and max_range",
          "[unit][localization]") {
  // A scan reaching the crop's bounds along every axis: the widest lattice the filter sees.
  PointCloud scan;
  for (int a = 0; a < 3; ++a) {
    for (const float sign : {-1.0f, 1.0f}) {
      Eigen::Vector3f p = Eigen::Vector3f::Zero();
      p[a] = sign * 99.999f;
      scan.points.push_back(p);
    }
  }
  LocalizerSettings s;
  ExecutionOptions execution;
  execution.backend = Backend::Cpu;
  // The reproduction: at 1e-9 m the filter fails on every scan (each frame was skipped and
  // the run ended well, exit 0).
  CHECK_THROWS_WITH(voxel_downsample(crop_range(scan, s.min_range, s.max_range), 1e-9), Catch::Contains("too small"));
  CHECK(min_voxel_leaf(s) == 2.0 * 100.0 / 1e6);
  s.voxel_leaf = 1e-9;
  CHECK_THROWS_WITH(validate(s), "localizer voxel_leaf 1e-09 m is below the smallest leaf 0.0002 m for max_range 100 m "
                                 "(at most 1,000,000 cells along each axis of the crop's 2 x max_range)");
  CHECK_THROWS_WITH(Localizer(s, execution), Catch::Contains("voxel_leaf 1e-09 m is below the smallest leaf"));
  // At the limit the filter holds the whole crop (10^6 cells along each axis).
  s.voxel_leaf = min_voxel_leaf(s);
  CHECK(Localizer(s, execution).preprocess(scan).size() == scan.size());
  // The sparse-scan filter may shrink the leaf 4 times by 0.7: the limit rises by 1/0.7^4,
  // and the filter holds the crop at the smallest leaf it then uses.
  s.min_scan_points = 100;
  CHECK(min_voxel_leaf(s) == Approx(2.0 * 100.0 / 1e6 / (0.7 * 0.7 * 0.7 * 0.7)).epsilon(1e-12));
  CHECK_THROWS_WITH(validate(s), Catch::Contains("for max_range 100 m") && Catch::Contains("shrunk to 0.7^4"));
  s.voxel_leaf = min_voxel_leaf(s);
  CHECK(Localizer(s, execution).preprocess(scan).size() == scan.size());
  // The limit follows max_range; without a finite one the scan's own extent bounds it.
  s.min_scan_points = 0;
  s.max_range = 1000.0;
  CHECK(min_voxel_leaf(s) == 2.0 * 1000.0 / 1e6);
  s.max_range = std::numeric_limits<double>::infinity();
  CHECK(min_voxel_leaf(s) == 0.0);
}

TEST_CASE("preprocessing stays on the CPU with the CPU backend and equals the CPU filters", "[unit][localization]") {
  const PointCloud scan = read_point_cloud((kSample / "scans" / "000004.pcd").string());
  for (bool gpu_preprocess : {true, false}) {
    for (double leaf : {0.0, 0.5, 1.0}) {
      LocalizerSettings s;
      ExecutionOptions e;
      e.backend = Backend::Cpu;
      s.gpu_preprocess = gpu_preprocess;  // ignored: the aligner is on the CPU
      s.voxel_leaf = leaf;
      s.min_range = 2.0;
      s.max_range = 40.0;
      const Localizer localizer(s, e);
      CHECK(localizer.preprocess_backend() == Backend::Cpu);
      const PointCloud cropped = crop_range(scan, s.min_range, s.max_range);
      const PointCloud want = leaf > 0.0 ? voxel_downsample(cropped, leaf) : cropped;
      const PointCloud got = localizer.preprocess(scan);
      REQUIRE(got.size() == want.size());
      CHECK(got.points == want.points);
      CHECK(got.intensity == want.intensity);
    }
  }
}

TEST_CASE("scan folders are ordered by number, times come from names", "[unit][localization]") {
  const auto dir = test::temp_dir("scan_sequence");
  PointCloud one;
  one.points.emplace_back(1.f, 2.f, 3.f);
  for (const char* name : {"10.pcd", "9.pcd", "100.bin", "notes.txt"}) {
    if (fs::path(name).extension() == ".txt") {
      test::write_bytes(dir / name, "not a scan");
    } else {
      write_point_cloud((dir / name).string(), one);
    }
  }
  const auto scans = list_scans(dir.string(), 0.05);
  REQUIRE(scans.size() == 3);
  CHECK(fs::path(scans[0].path).filename() == "9.pcd");
  CHECK(fs::path(scans[1].path).filename() == "10.pcd");
  CHECK(fs::path(scans[2].path).filename() == "100.bin");
  CHECK(scans[0].time == Approx(0.45));  // frame number 9 at 0.05 s
  CHECK(scans[2].time == Approx(5.0));

  // Decimal-second names are time stamps.
  const auto stamped = test::temp_dir("scan_sequence_stamped");
  write_point_cloud((stamped / "1630577758.569490.pcd").string(), one);
  write_point_cloud((stamped / "1630577759.068947.pcd").string(), one);
  const auto st = list_scans(stamped.string());
  REQUIRE(st.size() == 2);
  CHECK(st[0].time == Approx(1630577758.569490).margin(1e-6));
  CHECK(st[1].time == Approx(1630577759.068947).margin(1e-6));

  // A list file: relative paths from its folder, optional times, comments (the times in
  // order: a list going back in time is refused, tests/eval/test_scan_sequence.cpp).
  test::write_bytes(dir / "list.txt", "# scans\n9.pcd\n\n10.pcd 7.5\n");
  const auto listed = list_scans((dir / "list.txt").string());
  REQUIRE(listed.size() == 2);
  CHECK(listed[1].path == (dir / "10.pcd").string());
  CHECK(listed[1].time == 7.5);
  CHECK(listed[0].time == Approx(0.9));  // frame number 9 at 0.1 s

  // Errors name the path.
  const auto empty = test::temp_dir("scan_sequence_empty");
  CHECK_THROWS_WITH(list_scans(empty.string()), Catch::Contains("no scan file") && Catch::Contains(empty.string()));
  CHECK_THROWS_AS(list_scans((dir / "missing").string()), IoError);
  test::write_bytes(dir / "bad_list.txt", "10.pcd\nreadme.md\n");
  CHECK_THROWS_WITH(list_scans((dir / "bad_list.txt").string()), Catch::Contains("line 2"));
  test::write_bytes(dir / "empty_list.txt", "# nothing\n");
  CHECK_THROWS_WITH(list_scans((dir / "empty_list.txt").string()), Catch::Contains("names no scan"));

  // A list saved with a UTF-8 byte-order mark: the mark was read as part of the first path.
  test::write_bytes(dir / "bom_list.txt", "\xEF\xBB\xBF" "10.pcd 7.5\n9.pcd 8\n");
  const auto bom = list_scans((dir / "bom_list.txt").string());
  REQUIRE(bom.size() == 2);
  CHECK(bom[0].path == (dir / "10.pcd").string());
  CHECK(bom[0].time == 7.5);
  test::write_bytes(dir / "bom_comment.txt", "\xEF\xBB\xBF# scans\n9.pcd\n");
  CHECK(list_scans((dir / "bom_comment.txt").string()).size() == 1);
}

TEST_CASE("scans match reference poses by index when counts agree, else by time", "[unit][localization]") {
  Trajectory ref;
  for (int i = 0; i < 6; ++i) ref.push_back({0.1 * i, Eigen::Isometry3d::Identity()});
  std::vector<ScanEntry> same(6);
  for (int i = 0; i < 6; ++i) same[i].time = 100.0 + i;  // times unrelated: index wins
  auto m = match_to_reference(same, ref);
  for (int i = 0; i < 6; ++i) {
    CHECK(m[i] == static_cast<std::size_t>(i));
    CHECK(same[i].time == ref[i].time);
  }
  std::vector<ScanEntry> odd = {{"a", 0.1}, {"b", 0.3}, {"c", 0.5004}, {"d", 0.9}};
  m = match_to_reference(odd, ref);
  CHECK(m[0] == 1u);
  CHECK(m[1] == 3u);
  CHECK(m[2] == 5u);
  CHECK_FALSE(m[3].has_value());  // no pose near 0.9 s
  CHECK(odd[2].time == 0.5004);   // time matching keeps the scans' own times
}

TEST_CASE("the prefetcher hands scans out in order, bounded, and reports bad files", "[unit][localization]") {
  const auto dir = test::temp_dir("prefetcher");
  std::vector<ScanEntry> scans;
  for (int i = 0; i < 12; ++i) {
    PointCloud c;
    for (int k = 0; k <= i; ++k) c.points.emplace_back(float(k), 0.f, 0.f);
    const auto path = dir / (std::to_string(i) + ".pcd");
    scans.push_back({path.string(), 0.1 * i});
    if (i == 5) continue;  // missing file
    if (i == 7) {
      test::write_bytes(path, "garbage, not a PCD header");
    } else {
      write_point_cloud(path.string(), c);
    }
  }
  std::atomic<int> in_flight{0}, most{0};
  std::atomic<std::size_t> started{0};
  std::size_t consumed = 0;
  std::atomic<std::size_t> most_ahead{0};
  const std::size_t capacity = 3;
  ScanPrefetcher prefetcher(
      scans,
      [&](const PointCloud& c) {
        const int now = ++in_flight;
        for (int m = most; now > m && !most.compare_exchange_weak(m, now);) {
        }
        ++started;
        std::this_thread::sleep_for(std::chrono::milliseconds(3));
        --in_flight;
        return c;
      },
      3, capacity);
  CHECK(prefetcher.size() == 12);
  std::size_t k = 0;
  while (auto s = prefetcher.next()) {
    // Readers never run more than `capacity` scans ahead of the consumer.
    const std::size_t ahead = started.load() > consumed ? started.load() - consumed : 0;
    for (std::size_t m = most_ahead; ahead > m && !most_ahead.compare_exchange_weak(m, ahead);) {
    }
    ++consumed;
    CHECK(s->index == k);
    CHECK(s->entry.path == scans[k].path);
    if (k == 5) {
      CHECK_THAT(s->error, Catch::Contains("no such file"));
    } else if (k == 7) {
      CHECK_FALSE(s->error.empty());
      CHECK(s->cloud.empty());
    } else {
      CHECK(s->error.empty());
      CHECK(s->points_read == k + 1);
      CHECK(s->cloud.size() == k + 1);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    ++k;
  }
  CHECK(k == 12);
  CHECK_FALSE(prefetcher.next().has_value());
  CHECK(most_ahead.load() <= capacity + 1);  // +1: the scan being handed out
  CHECK(most.load() >= 2);                   // the readers did overlap
  CHECK_THROWS_AS(ScanPrefetcher(scans, nullptr, 0, 2), Error);
  CHECK_THROWS_AS(ScanPrefetcher(scans, nullptr, 1, 0), Error);
}

TEST_CASE("BALM OS0: all 60 scans localize in the even-frame map within 3 cm ATE", "[data][localization]") {
  NDTCU_REQUIRE_DATA(dir, "balm_os0");
  const fs::path balm = dir / "balm_os0";
  std::vector<ScanEntry> scans = list_scans((balm / "scans").string());
  REQUIRE(scans.size() == 60);
  const Trajectory reference = read_trajectory((balm / "poses_tum.txt").string());
  const auto match = match_to_reference(scans, reference);
  REQUIRE(match.back() == 59u);
  LocalizerSettings s;
  ExecutionOptions execution;
  execution.threads = 2;
  execution.backend = Backend::Cpu;
  Localizer localizer(s, execution);
  localizer.set_map(read_point_cloud((balm / "map_even_frames_0-58_voxel0.1.pcd").string()));
  const RunStats run = run_sequence(localizer, scans, reference.front().pose.matrix());
  const AteStats ate = absolute_trajectory_error(run.estimate, reference);
  int over_10cm = 0;
  double odd_sq = 0;
  int odd = 0;
  for (const auto& [e, r, err] : ate.per_pose) {
    over_10cm += err > 0.10;
    if (r % 2 == 1) {
      odd_sq += err * err;
      ++odd;
    }
  }
  std::printf("balm_os0: ATE rmse %.4f m (odd scans %.4f m), max %.4f m, %d over 10 cm, %zu lost, %zu recovered, "
              "%.1f fps (CPU, 2 threads)\n",
              ate.rmse_m, odd ? std::sqrt(odd_sq / odd) : 0.0, ate.max_m, over_10cm, run.lost, run.recovered,
              scans.size() / run.seconds);
  CHECK(run.lost == 0);
  CHECK(run.skipped == 0);
  CHECK(ate.pairs == 60);
  CHECK(ate.rmse_m < 0.03);
  CHECK(over_10cm == 0);
}

// The hard case: BALM's 30 odd scans one second apart, the sensor turning up to 41 deg
// between them (the constant-velocity prediction up to 59 deg off, roll and pitch
// included). Without the rotation search 11 of them were lost and 3 accepted 2.3 m off.
TEST_CASE("BALM OS0 at 1 Hz: every odd scan localizes within 10 cm, ATE at most 3 cm", "[data][localization]") {
  NDTCU_REQUIRE_DATA(dir, "balm_os0");
  const fs::path balm = dir / "balm_os0";
  std::vector<ScanEntry> scans = list_scans((balm / "odd_scans_1hz.txt").string());
  REQUIRE(scans.size() == 30);
  const Trajectory reference = read_trajectory((balm / "poses_tum.txt").string());
  match_to_reference(scans, reference);
  LocalizerSettings s;
  ExecutionOptions execution;
  execution.threads = 2;
  execution.backend = Backend::Cpu;
  Localizer localizer(s, execution);
  localizer.set_map(read_point_cloud((balm / "map_even_frames_0-58_voxel0.1.pcd").string()));
  const RunStats run = run_sequence(localizer, scans, reference[1].pose.matrix());
  const AteStats ate = absolute_trajectory_error(run.estimate, reference);
  int over_10cm = 0;
  for (const auto& pose : ate.per_pose) over_10cm += std::get<2>(pose) > 0.10;
  std::printf("balm_os0 odd scans at 1 Hz: %zu of 30 localized, %zu lost, %zu recovered, ATE rmse %.4f m, max %.4f m "
              "over %zu poses, %d over 10 cm, %.1f fps (CPU, 2 threads)\n",
              run.estimate.size(), run.lost, run.recovered, ate.rmse_m, ate.max_m, ate.pairs, over_10cm,
              scans.size() / run.seconds);
  CHECK(run.lost == 0);
  CHECK(run.skipped == 0);
  CHECK(ate.pairs == 30);
  CHECK(ate.rmse_m <= 0.03);
  CHECK(over_10cm == 0);
}

TEST_CASE("the heading and rotation searches bring back a frame whose prediction is turned 40 and 60 deg, and only then",
          "[unit][localization]") {
  std::vector<ScanEntry> scans = list_scans((kSample / "scans").string());
  const Trajectory truth = read_trajectory((kSample / "poses_tum.txt").string());
  match_to_reference(scans, truth);
  const PointCloud scan = read_point_cloud(scans[0].path);
  // The first frame from its true position turned beyond the Newton basin of the
  // prediction: 40 deg about the vertical (the heading search's turns hold it), and 60 deg
  // in roll (only the rotation search's do; this scan comes back from 45 deg of roll or
  // pitch by itself, and from 40-45 deg about tilted axes through the heading search). The
  // sample's correct poses score about 3.3 and its wrong ones below 2.8, so the threshold
  // is 3.0.
  struct Turn {
    Eigen::Vector3d axis;
    double deg;
    FrameStage stage;
  };
  for (const Turn& turn : {Turn{Eigen::Vector3d::UnitZ(), 40.0, FrameStage::HeadingSearch},
                           Turn{Eigen::Vector3d::UnitX(), 60.0, FrameStage::RotationSearch}}) {
    Eigen::Isometry3d start = truth[0].pose;
    start.rotate(Eigen::AngleAxisd(turn.deg * M_PI / 180.0, turn.axis));
    for (const bool search : {false, true}) {
      LocalizerSettings s;
      ExecutionOptions e;
      e.threads = 2;
      e.backend = Backend::Cpu;
      s.recovery = search ? Recovery::Hypotheses : Recovery::LastGood;
      s.nvtl_threshold = 3.0;
      // With the searches' default 0.3 m steps the heading search's refinement rolls this
      // scan back from 60 deg too; at the aligner's 0.1 m only the rotation search does.
      if (turn.stage == FrameStage::RotationSearch) s.search_step_size = 0.0;
      Localizer localizer(s, e);
      localizer.set_map(read_point_cloud((kSample / "map.pcd").string()));
      localizer.set_initial_pose(start.matrix());
      const LocalizationResult r = localizer.localize(scan, scans[0].time);
      const double err = (r.pose.topRightCorner<3, 1>() - truth[0].pose.translation()).norm();
      const double angle = Eigen::AngleAxisd(r.pose.topLeftCorner<3, 3>().transpose() * truth[0].pose.linear()).angle();
      CAPTURE(to_string(turn.stage), search, err, angle, r.attempts, r.alignment.nvtl, to_string(r.stage));
      if (!search) {
        CHECK(r.status == FrameStatus::Lost);
        continue;
      }
      CHECK(r.status == FrameStatus::Recovered);
      CHECK(r.valid);
      CHECK(err < 0.04);
      CHECK(angle < 0.5 * M_PI / 180.0);
      CHECK(r.stage == turn.stage);
      // The 6 headings (one centre: no good pose yet) and their refinements count as
      // attempts, and for the rotation search its 123 rotations too.
      if (turn.stage == FrameStage::HeadingSearch) {
        CHECK(r.attempts > 6);
        CHECK(r.attempts < 123);
      } else {
        CHECK(r.attempts > 6 + 123);
      }
    }
  }
  {
    // A finer heading step: 12 headings about the one centre (7.5 to 45 deg either way),
    // the 40-deg turn found by the heading search again.
    Eigen::Isometry3d start = truth[0].pose;
    start.rotate(Eigen::AngleAxisd(40.0 * M_PI / 180.0, Eigen::Vector3d::UnitZ()));
    LocalizerSettings s;
    s.nvtl_threshold = 3.0;
    s.heading_search_step_deg = 7.5;
    Localizer localizer(s, test::on_cpu(2));
    localizer.set_map(read_point_cloud((kSample / "map.pcd").string()));
    localizer.set_initial_pose(start.matrix());
    const LocalizationResult r = localizer.localize(scan, scans[0].time);
    CAPTURE(r.attempts, r.hypotheses, to_string(r.stage));
    CHECK(r.valid);
    CHECK(r.stage == FrameStage::HeadingSearch);
    CHECK((r.pose.topRightCorner<3, 1>() - truth[0].pose.translation()).norm() < 0.04);
    CHECK(r.hypotheses > 12);  // the 12 headings' coarse pass, then their refinements
    CHECK(r.attempts < 123);
  }
  // A scan taken elsewhere is not forced into the map by the rotation search.
  LocalizerSettings s;
  ExecutionOptions execution;
  execution.threads = 2;
  execution.backend = Backend::Cpu;
  s.nvtl_threshold = 3.0;
  Localizer localizer(s, execution);
  localizer.set_map(read_point_cloud((kSample / "map.pcd").string()));
  localizer.set_initial_pose(truth[0].pose.matrix());
  const LocalizationResult r = localizer.localize(shifted(scan, Eigen::Vector3f(30.f, 25.f, 4.f)), scans[0].time);
  CAPTURE(r.alignment.nvtl, r.attempts);
  CHECK(r.status == FrameStatus::Lost);
  CHECK_FALSE(r.valid);
  CHECK_THROWS_WITH(Localizer([] {
                      LocalizerSettings bad;
                      bad.rotation_search_step_deg = 0.5;
                      return bad;
                    }()),
                    Catch::Matchers::Contains("rotation_search_step_deg"));
}

TEST_CASE("KITTI 00: frames 1, 3, 5 localize in a map of frames 0, 2, 4 within 5 cm ATE", "[data][localization]") {
  NDTCU_REQUIRE_DATA(dir, "kitti00");
  const fs::path kitti = dir / "kitti00";
  const Trajectory reference =
      read_trajectory((kitti / "poses_velo_icp_reference.txt").string(), TrajectoryFormat::Kitti, 0.1);
  REQUIRE(reference.size() == 6);
  // The map: frames 0, 2, 4 placed at their reference poses, 0.2 m voxels.
  PointCloud map;
  for (int f : {0, 2, 4}) {
    char name[32];
    std::snprintf(name, sizeof(name), "%06d.bin", f);
    const PointCloud scan = read_point_cloud((kitti / "velodyne" / name).string());
    const Eigen::Isometry3d& pose = reference[f].pose;
    for (const auto& p : scan.points) map.points.push_back((pose * p.cast<double>()).cast<float>());
  }
  map = voxel_downsample(map, 0.2);
  const auto list = test::temp_dir("kitti_localize") / "scans.txt";
  test::write_bytes(list, (kitti / "velodyne/000001.bin").string() + "\n" + (kitti / "velodyne/000003.bin").string() +
                              "\n" + (kitti / "velodyne/000005.bin").string() + "\n");
  std::vector<ScanEntry> scans = list_scans(list.string());
  const auto match = match_to_reference(scans, reference);  // 3 scans, 6 poses: by time
  REQUIRE(match[0] == 1u);
  REQUIRE(match[1] == 3u);
  REQUIRE(match[2] == 5u);
  LocalizerSettings s;
  ExecutionOptions e;
  e.threads = 2;
  e.backend = Backend::Cpu;
  Localizer localizer(s, e);
  localizer.set_map(map);
  const RunStats run = run_sequence(localizer, scans, reference[1].pose.matrix());
  const AteStats ate = absolute_trajectory_error(run.estimate, reference);
  std::printf("kitti00: ATE rmse %.4f m, max %.4f m, %zu lost\n", ate.rmse_m, ate.max_m, run.lost);
  CHECK(run.lost == 0);
  CHECK(ate.pairs == 3);
  CHECK(ate.rmse_m < 0.05);
}

TEST_CASE("the position search finds a frame far from its prediction, and only then", "[unit][localization]") {
  std::vector<ScanEntry> scans = list_scans((kSample / "scans").string());
  const Trajectory truth = read_trajectory((kSample / "poses_tum.txt").string());
  match_to_reference(scans, truth);
  // Frame 0 from its truth, then the same scan again 2 s later as if the sensor had moved
  // 1.2 m and turned 150 deg about its vertical: the prediction (the last good pose, one
  // pose known) is beyond the attempts and the rotation search. From there the retries end
  // 1.8 m off with NVTL 2.45, which Autoware's threshold of 2.3 would pass: the sample's
  // correct poses score about 3.3, so the threshold here is 3.0. The position search's yaw
  // range after 2 s is the full circle (+-(45 + 90 x 2) deg).
  const PointCloud scan = read_point_cloud(scans[0].path);
  const Eigen::Isometry3f move = Eigen::Translation3f(0.9f, -0.8f, 0.0f) *
                                 Eigen::AngleAxisf(static_cast<float>(150.0 * M_PI / 180.0), Eigen::Vector3f::UnitZ());
  // The scan of a sensor at truth * move^-1 (sensor frame): the same points seen from there.
  PointCloud moved = scan;
  for (auto& p : moved.points) p = move * p;
  const Eigen::Matrix4d moved_truth = (truth[0].pose * move.cast<double>().inverse()).matrix();
  for (const Recovery recovery : {Recovery::LastGood, Recovery::Hypotheses}) {
    LocalizerSettings s;
    ExecutionOptions execution;
    execution.threads = 2;
    execution.backend = Backend::Cpu;
    s.recovery = recovery;
    s.nvtl_threshold = 3.0;
    Localizer localizer(s, execution);
    localizer.set_map(read_point_cloud((kSample / "map.pcd").string()));
    localizer.set_initial_pose(truth[0].pose.matrix());
    REQUIRE(localizer.localize(scan, scans[0].time).status == FrameStatus::Tracked);
    const LocalizationResult r = localizer.localize(moved, scans[0].time + 2.0);
    const double err = (r.pose.topRightCorner<3, 1>() - moved_truth.topRightCorner<3, 1>()).norm();
    CAPTURE(to_string(recovery), err, r.attempts, r.alignment.nvtl, to_string(r.stage));
    if (recovery == Recovery::LastGood) {
      CHECK(r.status == FrameStatus::Lost);
      CHECK(r.attempts <= 1 + s.recovery_attempts);
      CHECK(r.hypotheses == 0);
    } else {
      CHECK(r.status == FrameStatus::Recovered);
      CHECK(r.valid);
      CHECK(err < 0.04);
      CHECK(r.stage == FrameStage::PositionSearch);
      CHECK(r.hypotheses > 100);  // the rotation search's and the position search's
      CHECK(r.attempts > r.hypotheses);
      CHECK_FALSE(r.ambiguous);
    }
  }
  // With no recovery the frame is lost after its one attempt.
  {
    LocalizerSettings s;
    ExecutionOptions e;
    e.threads = 2;
    e.backend = Backend::Cpu;
    s.recovery = Recovery::None;
    s.nvtl_threshold = 3.0;
    Localizer localizer(s, e);
    localizer.set_map(read_point_cloud((kSample / "map.pcd").string()));
    localizer.set_initial_pose(truth[0].pose.matrix());
    REQUIRE(localizer.localize(scan, scans[0].time).valid);
    const LocalizationResult r = localizer.localize(moved, scans[0].time + 2.0);
    CHECK(r.status == FrameStatus::Lost);
    CHECK(r.attempts == 1);
  }
  // A scan taken elsewhere is not forced into the map by the searches, however wide
  // (5 s after the last good pose: the wide search reaches its largest radius, 50 m). The
  // scan mirrored (y negated): its scene is nowhere in the map. (A scan moved rigidly is
  // not "elsewhere": the map holds it, and a wide enough search finds where.)
  LocalizerSettings s;
  ExecutionOptions execution;
  execution.threads = 2;
  execution.backend = Backend::Cpu;
  s.nvtl_threshold = 3.0;
  Localizer localizer(s, execution);
  localizer.set_map(read_point_cloud((kSample / "map.pcd").string()));
  localizer.set_initial_pose(truth[0].pose.matrix());
  REQUIRE(localizer.localize(scan, scans[0].time).valid);
  PointCloud mirrored = scan;
  for (auto& p : mirrored.points) p.y() = -p.y();
  const LocalizationResult r = localizer.localize(mirrored, scans[0].time + 5.0);
  CAPTURE(r.alignment.nvtl, to_string(r.stage), r.hypotheses, r.screened);
  CHECK(r.status == FrameStatus::Lost);
  CHECK_FALSE(r.valid);
  CHECK(r.stage == FrameStage::WideSearch);
  CHECK(r.screened > 10000);
  CHECK_THROWS_WITH(Localizer([] {
                      LocalizerSettings bad;
                      bad.max_speed = -1.0;
                      return bad;
                    }()),
                    Catch::Matchers::Contains("max_speed"));
  CHECK_THROWS_WITH(recovery_from_string("retry"), Catch::Matchers::Contains("none, last-good, hypotheses"));
}
