// PointCloudView: points in a caller's own buffer (packed float triples, as a float32
// (N, 3) numpy array holds them) align, score and search with the bits of the same points
// in a PointCloud; the CPU backend reads them where they lie at every evaluation, not from
// a copy taken when they were set; and no call that takes a view allocates a block the size
// of its points.
#include "../support/alloc_tracker.hpp"
#include "../support/test_support.hpp"
#include "batch_check.hpp"
#include "synthetic.hpp"

#include <ndtcu/aligner.hpp>
#include <ndtcu/filters.hpp>
#include <ndtcu/initial_pose.hpp>
#include <ndtcu/localizer.hpp>
#include <ndtcu/pose_covariance.hpp>

#include "ndt/align_backend.hpp"
#include "ndt/evaluator.hpp"
#include "thread_pool.hpp"
#include "map/voxel_map_access.hpp"

#include <cstring>
#include <limits>
#include <memory>
#include <vector>

using namespace ndtcu;

namespace {

// A caller's buffer of N points as float32 x y z triples, with NaN points on each side of
// them: a read past either end would meet one (and the aligner rejects a non-finite point).
class RawPoints {
 public:
  static constexpr std::size_t kGuard = 4;

  explicit RawPoints(const PointCloud& cloud)
      : count_(cloud.size()), floats_(3 * (cloud.size() + 2 * kGuard), std::numeric_limits<float>::quiet_NaN()) {
    assign(cloud);
  }

  // Overwrites the points in place with those of `cloud` (as many).
  void assign(const PointCloud& cloud) {
    REQUIRE(cloud.size() == count_);
    for (std::size_t i = 0; i < count_; ++i) {
      for (int k = 0; k < 3; ++k) floats_[3 * (kGuard + i) + k] = cloud.points[i][k];
    }
  }

  // The points as a view, relative to `origin`.
  PointCloudView view(const Eigen::Vector3d& origin = Eigen::Vector3d::Zero()) const {
    return PointCloudView(reinterpret_cast<const Eigen::Vector3f*>(floats_.data() + 3 * kGuard), count_, origin);
  }

 private:
  std::size_t count_;
  std::vector<float> floats_;
};

bool same_bits(const math::DerivativeSums& a, const math::DerivativeSums& b) {
  return std::memcmp(a.v, b.v, sizeof(a.v)) == 0;
}

// An alignment with the pose covariance its aligner's settings ask for, as the callers of
// Aligner::align and align_batch attach it.
AlignResult with_covariance(Aligner& aligner, PointCloudView source, AlignResult r) {
  attach_pose_covariance(aligner, source, r);
  return r;
}
std::vector<AlignResult> with_covariance(Aligner& aligner, PointCloudView source, std::vector<AlignResult> r) {
  attach_pose_covariance(aligner, source, r);
  return r;
}
std::vector<std::vector<AlignResult>> with_covariance(Aligner& aligner, const std::vector<PointCloudView>& sources,
                                                      std::vector<std::vector<AlignResult>> r) {
  for (std::size_t b = 0; b < r.size(); ++b) attach_pose_covariance(aligner, sources[b], r[b]);
  return r;
}

void check_same_covariance(const AlignResult& a, const AlignResult& b) {
  CHECK(a.covariance_mode == b.covariance_mode);
  CHECK(a.covariance_valid == b.covariance_valid);
  CHECK(std::memcmp(a.covariance.data(), b.covariance.data(), sizeof(double) * 36) == 0);
}

void check_same_trace(const AlignResult& a, const AlignResult& b) {
  REQUIRE(a.trace.size() == b.trace.size());
  for (std::size_t i = 0; i < a.trace.size(); ++i) {
    CHECK(std::memcmp(a.trace[i].pose.data(), b.trace[i].pose.data(), sizeof(double) * 6) == 0);
    CHECK(std::memcmp(&a.trace[i].score, &b.trace[i].score, sizeof(double)) == 0);
  }
}

Pose6 make_pose(double x, double y, double z, double r, double p, double w) {
  Pose6 v;
  v << x, y, z, r, p, w;
  return v;
}

// Autoware's settings with 20 iterations at most (run on the CPU backend with 2 threads:
// kCpu).
AlignSettings cpu_settings() {
  AlignSettings s = autoware_preset();
  s.max_iterations = 20;
  return s;
}

const ExecutionOptions kCpu = test::on_cpu(2);

}  // namespace

TEST_CASE("A view of a caller's buffer gives the bits of the PointCloud it holds", "[unit][aligner][view]") {
  const PointCloud target = test::synthetic_scene(71, 30000);
  const Pose6 truth = make_pose(0.3, -0.2, 0.05, 0.01, -0.01, 0.05);
  // A source with an origin off zero (its world points unchanged, to float rounding): the
  // view carries the origin as the cloud does.
  PointCloud source = test::moved_by_inverse(test::synthetic_scene(72, 4000), truth);
  source.origin = Eigen::Vector3d(0.5, -0.25, 0.125);
  for (auto& p : source.points) p -= source.origin.cast<float>();
  const RawPoints raw(source);
  const PointCloudView view = raw.view(source.origin);
  REQUIRE(view.size() == source.size());
  REQUIRE(view[0] == source.points[0]);

  AlignSettings s = cpu_settings();
  s.pose_covariance = PoseCovariance::MultiNdt;  // with_covariance aligns the view six times more
  Aligner aligner(s, kCpu);
  aligner.set_target(target);
  const Pose6 guess = truth + make_pose(0.2, -0.15, 0.0, 0.0, 0.0, 0.03);

  SECTION("align, align_from_pose and the one-shot align") {
    const AlignResult cloud = with_covariance(aligner, source, aligner.align(source, pose_to_matrix(guess)));
    const AlignResult viewed = with_covariance(aligner, view, aligner.align(view, pose_to_matrix(guess)));
    CHECK(cloud.converged);
    CHECK(cloud.iterations > 1);
    CHECK(cloud.covariance_valid);
    test::check_same_bits(viewed, cloud);
    check_same_trace(viewed, cloud);
    check_same_covariance(viewed, cloud);
    const AlignResult cloud_pose = with_covariance(aligner, source, aligner.align_from_pose(source, guess));
    const AlignResult viewed_pose = with_covariance(aligner, view, aligner.align_from_pose(view, guess));
    test::check_same_bits(viewed_pose, cloud_pose);
    check_same_trace(viewed_pose, cloud_pose);
    check_same_covariance(viewed_pose, cloud_pose);
    AlignSettings plain = cpu_settings();
    test::check_same_bits(align(target, view, pose_to_matrix(guess), plain, kCpu),
                          align(target, source, pose_to_matrix(guess), plain, kCpu));
  }

  SECTION("evaluate and evaluate_batch") {
    const std::vector<Pose6> poses{truth, guess, truth + make_pose(-0.4, 0.3, 0.1, 0.02, 0.0, -0.05)};
    const std::vector<AlignResult> cloud = aligner.evaluate_batch(source, poses);
    const std::vector<AlignResult> viewed = aligner.evaluate_batch(view, poses);
    REQUIRE(viewed.size() == poses.size());
    for (std::size_t k = 0; k < poses.size(); ++k) {
      CAPTURE(k);
      CHECK(cloud[k].matched_points > source.size() / 2);
      test::check_same_bits(viewed[k], cloud[k]);
      test::check_same_bits(aligner.evaluate(view, pose_to_matrix(poses[k])),
                            aligner.evaluate(source, pose_to_matrix(poses[k])));
    }
  }

  SECTION("align_batch, of one scan and of several") {
    const std::vector<Pose6> guesses = test::guesses_around(truth, 4, 17, 0.4, 4.0);
    std::vector<Eigen::Matrix4d> matrices;
    for (const Pose6& g : guesses) matrices.push_back(pose_to_matrix(g));
    const std::vector<AlignResult> cloud = with_covariance(aligner, source, aligner.align_batch(source, guesses));
    const std::vector<AlignResult> viewed = with_covariance(aligner, view, aligner.align_batch(view, guesses));
    const std::vector<AlignResult> viewed_matrices = aligner.align_batch(view, matrices);
    REQUIRE(viewed.size() == guesses.size());
    for (std::size_t k = 0; k < guesses.size(); ++k) {
      CAPTURE(k);
      test::check_same_bits(viewed[k], cloud[k]);
      check_same_covariance(viewed[k], cloud[k]);
      test::check_same_bits(viewed_matrices[k], aligner.align_batch(source, std::vector<Eigen::Matrix4d>{matrices[k]})[0]);
    }
    // Two scans in one batch: the second a view of part of the first's buffer.
    const PointCloudView part(view.points + 1000, 2000, view.origin);
    PointCloud part_cloud;
    part_cloud.origin = source.origin;
    part_cloud.points.assign(source.points.begin() + 1000, source.points.begin() + 3000);
    const std::vector<std::vector<Pose6>> lists{guesses, {guesses[1], guesses[2]}};
    const auto many_cloud = with_covariance(aligner, {source, part_cloud},
                                            aligner.align_batch(std::vector<PointCloud>{source, part_cloud}, lists));
    const auto many_viewed = with_covariance(aligner, {view, part},
                                             aligner.align_batch(std::vector<PointCloudView>{view, part}, lists));
    REQUIRE(many_viewed.size() == 2);
    for (std::size_t b = 0; b < 2; ++b) {
      REQUIRE(many_viewed[b].size() == lists[b].size());
      for (std::size_t k = 0; k < lists[b].size(); ++k) {
        CAPTURE(b, k);
        test::check_same_bits(many_viewed[b][k], many_cloud[b][k]);
        check_same_covariance(many_viewed[b][k], many_cloud[b][k]);
      }
    }
  }

  SECTION("the initial pose search, screened and thinned or not, and the ground estimate") {
    Aligner searcher(cpu_settings(), kCpu);
    searcher.set_target(target);
    for (std::size_t coarse_points : {std::size_t(0), std::size_t(512)}) {
      CAPTURE(coarse_points);
      InitialPoseOptions o;
      o.radius = 1.0;
      o.yaw_range_deg = 60.0;
      o.refine_count = 4;
      o.coarse_points = coarse_points;  // 0: the coarse pass aligns the scan itself
      o.screen_above = 8;               // screened (every k-th point scored), 12 kept
      o.screen_keep = 12;
      const InitialPoseResult cloud = find_initial_pose(searcher, source, truth, o);
      const InitialPoseResult viewed = find_initial_pose(searcher, view, truth, o);
      CHECK(cloud.screened_hypotheses > 0);
      test::check_same_bits(viewed.best, cloud.best);
      CHECK(viewed.coarse_hypotheses == cloud.coarse_hypotheses);
      CHECK(viewed.refined_hypotheses == cloud.refined_hypotheses);
      CHECK(viewed.has_rival == cloud.has_rival);
      CHECK(std::memcmp(viewed.rival_pose.data(), cloud.rival_pose.data(), sizeof(double) * 6) == 0);
    }
    const ScanGround g_cloud = estimate_ground(source), g_view = estimate_ground(view);
    CHECK(g_cloud.found);
    CHECK(g_view.found == g_cloud.found);
    CHECK(g_view.up == g_cloud.up);
    CHECK(g_view.height == g_cloud.height);
    CHECK(g_view.inliers == g_cloud.inliers);
  }
}

TEST_CASE("The CPU backend reads a view's points at every evaluation, not a copy of them", "[unit][aligner][view]") {
  const PointCloud target = test::synthetic_scene(73, 30000);
  const PointCloud source = test::synthetic_scene(74, 3000);
  PointCloud moved = source;  // the same scan 0.4 m off: other sums at the same pose
  for (auto& p : moved.points) p += Eigen::Vector3f(0.4f, -0.3f, 0.1f);
  VoxelMapOptions mo;
  mo.resolution = 2.0;
  const auto map = std::make_shared<const VoxelMap>(VoxelMap::build(target, mo));
  const AlignSettings s = cpu_settings();
  const Pose6 pose = make_pose(0.1, -0.05, 0.02, 0.0, 0.01, 0.02);
  RawPoints raw(source);
  const PointCloudView view = raw.view();

  // The backend is given the view once; the caller then rewrites its buffer in place. Had
  // set_sources (or anything after it) copied the points, the second evaluation would
  // still see the first points.
  const std::unique_ptr<detail::AlignBackend> backend = detail::make_align_backend(s, kCpu);
  backend->set_map(map);
  backend->set_sources({view});
  const math::DerivativeSums before = backend->evaluate(0, pose, true);
  raw.assign(moved);
  const math::DerivativeSums after = backend->evaluate(0, pose, true);
  const std::vector<detail::OptimizerOutput> aligned = backend->align_batch({{pose, 0}}, s, false);

  const std::unique_ptr<detail::AlignBackend> reference = detail::make_align_backend(s, kCpu);
  reference->set_map(map);
  reference->set_sources({source});
  CHECK(same_bits(before, reference->evaluate(0, pose, true)));
  reference->set_sources({moved});
  const math::DerivativeSums expected = reference->evaluate(0, pose, true);
  CHECK_FALSE(same_bits(before, expected));  // the test would not tell otherwise
  CHECK(same_bits(after, expected));
  const std::vector<detail::OptimizerOutput> expected_aligned = reference->align_batch({{pose, 0}}, s, false);
  REQUIRE(aligned.size() == 1);
  CHECK(std::memcmp(aligned[0].pose.data(), expected_aligned[0].pose.data(), sizeof(double) * 6) == 0);
  CHECK(aligned[0].iterations == expected_aligned[0].iterations);

  // The evaluator alike: made once over the view, evaluated before and after the change.
  raw.assign(source);
  detail::ThreadPool pool(2);
  detail::CpuEvaluator evaluator(*map, view, s.search, s.outlier_ratio, &pool);
  CHECK(same_bits(evaluator.evaluate_sums(pose, true), before));
  raw.assign(moved);
  CHECK(same_bits(evaluator.evaluate_sums(pose, true), expected));
}

TEST_CASE("No call that takes a view allocates a block the size of its points", "[unit][aligner][view]") {
  const PointCloud target = test::synthetic_scene(75, 30000);
  const PointCloud scan = test::synthetic_scene(76, 200000);
  const RawPoints raw(scan);
  const PointCloudView view = raw.view();
  const std::size_t points_bytes = scan.size() * sizeof(Eigen::Vector3f);  // 2.4 MB
  const auto largest_during = [](auto&& call) {
    test::reset_largest_allocation();
    call();
    return test::largest_allocation();
  };
  // The tracker sees a copy: the points of a view copied into a PointCloud are one block.
  CHECK(largest_during([&] {
          PointCloud copy;
          copy.points.assign(view.begin(), view.end());
        }) >= points_bytes);

  // What the calls may allocate in one block stays well under the points' size: the CPU
  // evaluator's chunk sums (248 bytes for every 256 points, 194 kB here) and the ground
  // estimate's sample (at most 20,000 points in double, a 786 kB vector once grown).
  const std::size_t limit = points_bytes / 2;
  const Pose6 guess = make_pose(0.2, -0.1, 0.0, 0.0, 0.0, 0.02);
  AlignSettings s = cpu_settings();
  s.max_iterations = 4;
  s.pose_covariance = PoseCovariance::MultiNdt;
  Aligner aligner(s, kCpu);
  aligner.set_target(target);
  CHECK(largest_during([&] { (void)with_covariance(aligner, view, aligner.align(view, pose_to_matrix(guess))); }) <
        limit);
  CHECK(largest_during([&] { (void)aligner.evaluate(view, pose_to_matrix(guess)); }) < limit);
  const std::vector<Pose6> poses{guess, Pose6::Zero()};
  const std::vector<std::vector<Pose6>> lists{{guess}, {poses[1]}};
  CHECK(largest_during([&] { (void)aligner.evaluate_batch(view, poses); }) < limit);
  CHECK(largest_during([&] { (void)with_covariance(aligner, view, aligner.align_batch(view, poses)); }) < limit);
  CHECK(largest_during([&] {
          const std::vector<PointCloudView> views{view, view};
          (void)with_covariance(aligner, views, aligner.align_batch(views, lists));
        }) < limit);

  Aligner searcher(cpu_settings(), kCpu);
  searcher.set_target(target);
  InitialPoseOptions o;
  o.radius = 0.0;
  o.yaw_range_deg = 30.0;
  o.refine_count = 2;
  o.level_from_ground = true;
  CHECK(largest_during([&] { (void)find_initial_pose(searcher, view, Pose6::Zero(), o); }) < limit);
}

TEST_CASE("A map built from a view of a caller's buffer is the map of its PointCloud", "[unit][voxel_map][view]") {
  // At UTM coordinates: the view carries the origin, the map keeps it.
  PointCloud cloud = test::synthetic_scene(91, 30000);
  cloud.origin = Eigen::Vector3d(683000.0, 3950000.0, 30.0);
  const RawPoints raw(cloud);
  const PointCloudView view = raw.view(cloud.origin);
  for (const CovarianceMode mode : {CovarianceMode::Autoware, CovarianceMode::Pcl}) {
    CAPTURE(to_string(mode));
    VoxelMapOptions o;
    o.covariance = mode;
    o.threads = 2;
    const VoxelMap a = VoxelMap::build(cloud, o), b = VoxelMap::build(view, o);
    REQUIRE(a.size() > 100);
    REQUIRE(b.size() == a.size());
    CHECK(b.origin() == a.origin());
    CHECK(b.stats().points == a.stats().points);
    CHECK(b.cells() == a.cells());
    CHECK(b.point_counts() == a.point_counts());
    for (int k = 0; k < 3; ++k) CHECK(std::memcmp(b.mean(k).data(), a.mean(k).data(), a.size() * sizeof(double)) == 0);
    for (int e = 0; e < 6; ++e) {
      CHECK(std::memcmp(b.inverse_covariance(e).data(), a.inverse_covariance(e).data(), a.size() * sizeof(double)) == 0);
    }
    CHECK(detail::voxel_hash_table(b).keys == detail::voxel_hash_table(a).keys);
  }
  // An Aligner's and a Localizer's target from the view: the same map, so the same result.
  Aligner from_cloud(cpu_settings(), kCpu), from_view(cpu_settings(), kCpu);
  from_cloud.set_target(cloud);
  from_view.set_target(view);
  PointCloud scan = test::synthetic_scene(92, 3000);
  scan.origin = cloud.origin;
  test::check_same_bits(from_view.align(scan), from_cloud.align(scan));
}

TEST_CASE("The filters and the localizer read a view where it lies, with a PointCloud's bits", "[unit][localization][view]") {
  // A scan at UTM-like coordinates relative to its origin, and the same points without
  // intensities in a PointCloud: a view has none.
  PointCloud scan = test::synthetic_scene(77, 120000);
  scan.origin = Eigen::Vector3d(683000.0, 3950000.0, 30.0);
  const RawPoints raw(scan);
  const PointCloudView view = raw.view(scan.origin);
  const auto same_cloud = [](const PointCloud& a, const PointCloud& b) {
    REQUIRE(a.size() == b.size());
    CHECK(a.origin == b.origin);
    CHECK(a.intensity.empty());
    CHECK(std::memcmp(a.points.data(), b.points.data(), a.size() * sizeof(Eigen::Vector3f)) == 0);
  };
  for (const double leaf : {0.3, 1.0}) {
    const PointCloud filtered = voxel_downsample(view, leaf);
    CHECK(filtered.size() > 1000);
    same_cloud(filtered, voxel_downsample(scan, leaf));
  }
  // The crop measures from the frame's origin (the sensor): the scan about zero.
  PointCloud centred = scan;
  centred.origin = Eigen::Vector3d::Zero();
  const RawPoints centred_raw(centred);
  const PointCloud cropped = crop_range(centred_raw.view(), 2.0, 8.0);
  CHECK(cropped.size() > 1000);
  CHECK(cropped.size() < centred.size() / 2);
  same_cloud(cropped, crop_range(centred, 2.0, 8.0));
  // With intensities, the PointCloud overloads keep them (the view's output has none).
  PointCloud with = centred;
  with.intensity.assign(centred.size(), 0.5f);
  CHECK(voxel_downsample(with, 1.0).has_intensity());
  CHECK(crop_range(with, 2.0, 8.0).has_intensity());

  // The localizer: the same poses, frame after frame, from the view and from the cloud;
  // the view's preprocessing allocates no larger block than the cloud's (no copy first).
  const PointCloud map = test::synthetic_scene(77, 60000);
  LocalizerSettings s;
  s.align = cpu_settings();
  s.voxel_leaf = 0.5;
  s.max_range = 30.0;
  Localizer from_view(s, kCpu), from_cloud(s, kCpu);
  for (Localizer* l : {&from_view, &from_cloud}) {
    l->set_map(map);
    l->set_initial_pose(Eigen::Matrix4d::Identity());
  }
  PointCloud local = scan;
  local.origin = Eigen::Vector3d::Zero();
  const RawPoints local_raw(local);
  for (int frame = 0; frame < 3; ++frame) {
    const LocalizationResult a = from_view.localize(local_raw.view(), 0.1 * frame);
    const LocalizationResult b = from_cloud.localize(local, 0.1 * frame);
    CHECK(a.valid == b.valid);
    CHECK(a.points_in == b.points_in);
    CHECK(std::memcmp(a.pose.data(), b.pose.data(), sizeof(double) * 16) == 0);
  }
  // A crop that keeps a fraction of the points (within 5 m), so that the filters' own
  // blocks stay under the points' size and a copy of them would be the largest block.
  s.max_range = 5.0;
  const Localizer near(s, kCpu);
  test::reset_largest_allocation();
  const std::size_t kept = near.preprocess(local).size();
  const std::size_t cloud_largest = test::largest_allocation();
  test::reset_largest_allocation();
  CHECK(near.preprocess(local_raw.view()).size() == kept);
  CHECK(test::largest_allocation() <= cloud_largest);
  // The tracker would see a copy: the points copied into a PointCloud are one block.
  test::reset_largest_allocation();
  PointCloud copy;
  copy.points.assign(local_raw.view().begin(), local_raw.view().end());
  CHECK(test::largest_allocation() > cloud_largest);
}
