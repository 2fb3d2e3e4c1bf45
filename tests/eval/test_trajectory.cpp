// Trajectory files (TUM, KITTI) and the ATE / RPE metrics.
#include "../support/test_support.hpp"

#include <ndtcu/trajectory.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

using namespace ndtcu;

namespace {
// A planar arc: 0.5 m steps, turning 2 degrees a step, at 10 Hz, far from the origin.
Trajectory arc(int n) {
  Trajectory t;
  Eigen::Isometry3d pose = Eigen::Isometry3d::Identity();
  pose.translation() = Eigen::Vector3d(680000.25, 3900000.75, 40.0);
  for (int i = 0; i < n; ++i) {
    t.push_back({0.1 * i, pose});
    Eigen::Isometry3d step = Eigen::Isometry3d::Identity();
    step.translation() = Eigen::Vector3d(0.5, 0, 0.01);
    step.linear() = Eigen::AngleAxisd(2.0 * M_PI / 180.0, Eigen::Vector3d::UnitZ()).toRotationMatrix();
    pose = pose * step;
  }
  return t;
}
}  // namespace

TEST_CASE("TUM and KITTI round trips keep sub-millimetre poses at UTM coordinates", "[unit][eval]") {
  auto dir = ndtcu::test::temp_dir("trajectory");
  Trajectory t = arc(50);
  write_trajectory_tum((dir / "t.txt").string(), t);
  write_trajectory_kitti((dir / "k.txt").string(), t);
  Trajectory tum = read_trajectory((dir / "t.txt").string());
  Trajectory kitti = read_trajectory((dir / "k.txt").string());
  REQUIRE(tum.size() == 50);
  REQUIRE(kitti.size() == 50);
  for (int i = 0; i < 50; ++i) {
    CHECK((tum[i].pose.translation() - t[i].pose.translation()).norm() < 2e-6);
    CHECK((kitti[i].pose.translation() - t[i].pose.translation()).norm() < 2e-6);
    CHECK(Eigen::AngleAxisd(tum[i].pose.linear().transpose() * t[i].pose.linear()).angle() < 1e-8);
    CHECK(Eigen::AngleAxisd(kitti[i].pose.linear().transpose() * t[i].pose.linear()).angle() < 1e-8);
    CHECK(std::abs(tum[i].time - t[i].time) < 1e-9);
    CHECK(std::abs(kitti[i].time - 0.1 * i) < 1e-12);
  }
}

TEST_CASE("trajectory files with errors name the file and line", "[unit][eval]") {
  auto dir = ndtcu::test::temp_dir("trajectory_bad");
  auto check = [&](const std::string& name, const std::string& text, const std::string& expected) {
    auto path = (dir / name).string();
    ndtcu::test::write_bytes(path, text);
    CAPTURE(name);
    try {
      read_trajectory(path);
      FAIL("no IoError");
    } catch (const IoError& e) {
      CHECK(e.path() == path);
      CHECK_THAT(e.reason(), Catch::Contains(expected));
    }
  };
  check("cols.txt", "# header\n1 2 3 4 5\n", "line 2: 5 numbers");
  check("nan.txt", "0 1 2 3 0 0 0 nan\n", "line 1: 'nan' is not a finite number");
  check("quat.txt", "0 1 2 3 0 0 0 2\n", "quaternion norm 2.000000 is not 1");
  check("rot.txt", "2 0 0 1 0 1 0 2 0 0 1 3\n", "is not a rotation");
  // Orthonormal (R R^T = I exactly) but a mirror image: the message says so, instead of
  // reporting a zero orthogonality error.
  check("mirror.txt", "1 0 0 1 0 1 0 2 0 0 -1 3\n", "line 1: the 3x3 block is a reflection, not a rotation (determinant -1");
  check("mirror_swap.txt", "0 1 0 1 1 0 0 2 0 0 1 3\n", "is a reflection");
  check("empty.txt", "# nothing\n\n", "no poses");
  check("mixed.txt", "0 1 2 3 0 0 0 1\n1 0 0 1 0 1 0 2 0 0 1 3\n", "line 2: 12 numbers, a TUM line has 8");
  // A mark anywhere but at the start of the file is no number.
  check("bom_inside.txt", "0 1 2 3 0 0 0 1\n\xEF\xBB\xBF" "1 1 2 3 0 0 0 1\n", "line 2: '\xEF\xBB\xBF" "1' is not a finite number");
}

TEST_CASE("a trajectory file saved with a UTF-8 byte-order mark reads as without it", "[unit][eval]") {
  // The mark was read as part of the first number: "line 1: '\xEF\xBB\xBF0' is not a finite number".
  auto dir = ndtcu::test::temp_dir("trajectory_bom");
  const std::string tum = "0 1 2 3 0 0 0 1\n0.1 1.5 2 3 0 0 0 1\n";
  ndtcu::test::write_bytes(dir / "plain.txt", tum);
  ndtcu::test::write_bytes(dir / "bom.txt", "\xEF\xBB\xBF" + tum);
  const Trajectory plain = read_trajectory((dir / "plain.txt").string());
  const Trajectory bom = read_trajectory((dir / "bom.txt").string());
  REQUIRE(bom.size() == plain.size());
  for (std::size_t i = 0; i < bom.size(); ++i) {
    CHECK(bom[i].time == plain[i].time);
    CHECK(bom[i].pose.matrix() == plain[i].pose.matrix());
  }
  ndtcu::test::write_bytes(dir / "bom_comment.txt", "\xEF\xBB\xBF# t x y z qx qy qz qw\n" + tum);
  CHECK(read_trajectory((dir / "bom_comment.txt").string()).size() == 2);
}

TEST_CASE("ATE and RPE are zero for identical trajectories and measure known errors", "[unit][eval]") {
  Trajectory ref = arc(200);
  AteStats zero = absolute_trajectory_error(ref, ref);
  CHECK(zero.pairs == 200);
  CHECK(zero.rmse_m == 0.0);
  for (const auto& r : relative_pose_error(ref, ref)) {
    CHECK(r.pairs > 0);
    CHECK(r.translation_percent < 1e-9);
    CHECK(r.rotation_deg_per_m < 1e-9);
  }

  // Every estimate 3 cm off along +x of the world: ATE 3 cm everywhere, RPE zero (a
  // constant world offset cancels in relative motion).
  Trajectory shifted = ref;
  for (auto& p : shifted) p.pose.translation().x() += 0.03;
  AteStats ate = absolute_trajectory_error(shifted, ref);
  CHECK(ate.rmse_m == Approx(0.03).epsilon(1e-6));
  CHECK(ate.max_m == Approx(0.03).epsilon(1e-6));
  CHECK(relative_pose_error(shifted, ref)[0].translation_percent < 1e-6);

  // A scale error of 1% on every step: RPE translation 1%.
  Trajectory scaled = ref;
  for (std::size_t i = 1; i < ref.size(); ++i) {
    Eigen::Isometry3d step = ref[i - 1].pose.inverse() * ref[i].pose;
    step.translation() *= 1.01;
    scaled[i].pose = scaled[i - 1].pose * step;
  }
  auto rpe = relative_pose_error(scaled, ref, {1.0, 5.0, 10.0});
  REQUIRE(rpe.size() == 3);
  for (const auto& r : rpe) {
    CAPTURE(r.segment_m);
    // The error is 1% of the segment's chord. On this arc a path of length s turns by
    // theta = s / 0.5 m * 2 deg, and its chord is s * sin(theta/2) / (theta/2); each
    // segment spans at least its nominal length, up to one 0.5 m step more.
    const double half_turn = r.segment_m / 0.5 * (M_PI / 180.0);
    CHECK(r.translation_percent > 0.999 * std::sin(half_turn) / half_turn);
    CHECK(r.translation_percent < 1.01 * (r.segment_m + 0.5) / r.segment_m + 0.01);
  }
}

TEST_CASE("association pairs poses by time and skips missing frames", "[unit][eval]") {
  Trajectory ref = arc(20);
  Trajectory est;
  for (int i = 0; i < 20; i += 3) est.push_back(ref[i]);  // lost frames in between
  est.push_back({100.0, Eigen::Isometry3d::Identity()});   // no reference near t = 100
  auto pairs = associate(est, ref);
  REQUIRE(pairs.size() == est.size() - 1);
  for (std::size_t k = 0; k < pairs.size(); ++k) CHECK(pairs[k].second == 3 * k);
  CHECK(absolute_trajectory_error(est, ref).rmse_m == 0.0);
}

TEST_CASE("pose-by-pose association and lines give what the whole-trajectory forms give", "[unit][eval]") {
  // An estimate with gaps, a pose 5 ms from a reference one, one 11 ms from the nearest
  // (beyond the 10 ms tolerance) and one past the reference's end.
  Trajectory ref = arc(30);
  Trajectory est;
  for (int i = 0; i < 30; i += 4) est.push_back(ref[i]);
  est.push_back({1.405, ref[14].pose});
  est.push_back({1.489, ref[15].pose});
  std::sort(est.begin(), est.end(), [](const StampedPose& a, const StampedPose& b) { return a.time < b.time; });
  est.push_back({100.0, Eigen::Isometry3d::Identity()});
  const auto pairs = associate(est, ref);
  TimeAssociation association(ref);
  std::vector<std::pair<std::size_t, std::size_t>> streamed;
  for (std::size_t e = 0; e < est.size(); ++e) {
    if (const auto r = association.next(est[e].time)) streamed.emplace_back(e, *r);
  }
  CHECK(streamed == pairs);
  CHECK(streamed.size() == est.size() - 2);

  // The files are their lines, in order.
  auto dir = ndtcu::test::temp_dir("trajectory_lines");
  write_trajectory_tum((dir / "t.txt").string(), est);
  write_trajectory_kitti((dir / "k.txt").string(), est);
  std::string tum, kitti;
  for (const auto& p : est) {
    tum += tum_line(p);
    kitti += kitti_line(p);
  }
  auto text = [](const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  CHECK(text(dir / "t.txt") == tum);
  CHECK(text(dir / "k.txt") == kitti);
}

TEST_CASE("a reference is sorted by time, its out-of-order poses counted, a shared stamp refused", "[unit][eval]") {
  // Issue 26: two swapped stamps left 7 of 10 frames without an error, equal stamps gave
  // errors against the wrong poses, shuffled lines an ATE over pairs that were not the
  // frames'. The association below assumes time order; sort_reference gives it.
  const Trajectory truth = arc(10);
  Trajectory shuffled;
  for (const int k : {7, 2, 9, 0, 5, 3, 8, 1, 6, 4}) shuffled.push_back(truth[static_cast<std::size_t>(k)]);
  CHECK(absolute_trajectory_error(truth, shuffled).pairs < 10);  // what an unsorted reference gave
  const ReferenceCheck check = sort_reference(shuffled, "shuffled.txt");
  CHECK(check.out_of_order == 5);  // 7>2, 9>0, 5>3, 8>1, 6>4
  for (std::size_t k = 0; k < truth.size(); ++k) {
    CHECK(shuffled[k].time == truth[k].time);
    CHECK(shuffled[k].pose.isApprox(truth[k].pose));
  }
  const AteStats ate = absolute_trajectory_error(truth, shuffled);
  CHECK(ate.pairs == 10);
  CHECK(ate.rmse_m == 0.0);

  Trajectory in_order = truth;
  CHECK(sort_reference(in_order, "truth.txt").out_of_order == 0);

  // Two poses at one stamp: which one a frame at that time should be compared with is not
  // known; the error names the file, both poses and the stamp.
  Trajectory equal = truth;
  equal[6].time = equal[2].time;
  CHECK_THROWS_WITH(sort_reference(equal, "equal.txt"),
                    Catch::Contains("equal.txt: poses 3 and 7 (in the file's order, from 1) have the same time "
                                    "stamp 0.200000000"));
}

TEST_CASE("ATE and RPE over given pairs cover exactly those pairs", "[unit][eval]") {
  const Trajectory ref = arc(40);
  Trajectory est = ref;
  for (auto& p : est) p.pose.translation().y() += 0.02;
  est[5].pose.translation().y() += 1.0;  // paired with nothing below
  std::vector<std::pair<std::size_t, std::size_t>> pairs;
  for (std::size_t k = 0; k < est.size(); ++k) {
    if (k != 5) pairs.emplace_back(k, k);
  }
  const AteStats ate = absolute_trajectory_error(est, ref, pairs);
  CHECK(ate.pairs == 39);
  CHECK(ate.max_m == Approx(0.02).epsilon(1e-6));
  // Pairs given out of the reference's order give the RPE of the same pairs in order.
  std::vector<std::pair<std::size_t, std::size_t>> reversed(pairs.rbegin(), pairs.rend());
  const auto in_order = relative_pose_error(est, ref, {1.0, 5.0}, pairs);
  const auto out_of_order = relative_pose_error(est, ref, {1.0, 5.0}, reversed);
  REQUIRE(in_order.size() == 2);
  for (std::size_t i = 0; i < 2; ++i) {
    CHECK(in_order[i].pairs > 0);
    CHECK(out_of_order[i].pairs == in_order[i].pairs);
    CHECK(out_of_order[i].translation_percent == in_order[i].translation_percent);
  }
}
