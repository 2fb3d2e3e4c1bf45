// The math both backends share (kernels/ndt_*.hpp), checked where the two sides could
// drift apart: PCL's float transform from the shared code against Eigen's expression, the
// neighbour walk a GPU thread takes against the CPU's search, and the fixed step's LU
// direction against an independent solve.
#include "../support/test_support.hpp"
#include "synthetic.hpp"

#include <ndtcu/voxel_map.hpp>

#include "map/dense_voxel_index.hpp"
#include "ndt/evaluator.hpp"
#include "ndt_point.hpp"
#include "ndt_step.hpp"
#include "voxel_statistics.hpp"

#include <Eigen/Geometry>
#include <Eigen/Eigenvalues>
#include <Eigen/QR>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <vector>

using namespace ndtcu;
namespace m = ndtcu::math;

namespace {

// PCL 1.13's NormalDistributionsTransform::convertTransform with Scalar = float.
Eigen::Matrix4f pcl_float_transform(const double* p) {
  const Eigen::Affine3f t = Eigen::Translation<float, 3>(static_cast<float>(p[0]), static_cast<float>(p[1]),
                                                         static_cast<float>(p[2])) *
                            Eigen::AngleAxis<float>(static_cast<float>(p[3]), Eigen::Vector3f::UnitX()) *
                            Eigen::AngleAxis<float>(static_cast<float>(p[4]), Eigen::Vector3f::UnitY()) *
                            Eigen::AngleAxis<float>(static_cast<float>(p[5]), Eigen::Vector3f::UnitZ());
  return t.matrix();
}

}  // namespace

TEST_CASE("The shared pose frame reproduces PCL's float transform bit for bit", "[unit][math]") {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> angle(-M_PI, M_PI), small(-2e-4, 2e-4), pos(-500.0, 500.0);
  std::uniform_int_distribution<int> kind(0, 3);
  int checked = 0;
  for (int trial = 0; trial < 200000; ++trial) {
    double p[6];
    for (int i = 0; i < 3; ++i) p[i] = pos(rng);
    for (int i = 3; i < 6; ++i) {
      switch (kind(rng)) {
        case 0: p[i] = small(rng); break;        // around the small-angle threshold
        case 1: p[i] = 0.0; break;               // exactly zero
        case 2: p[i] = M_PI * (kind(rng) - 1.5); break;  // near +-pi/2, +-3pi/2 edges
        default: p[i] = angle(rng); break;
      }
    }
    float mine[12];
    m::pose_float_transform(p, mine);
    const Eigen::Matrix4f ref = pcl_float_transform(p);
    for (int r = 0; r < 3; ++r) {
      for (int c = 0; c < 4; ++c) {
        // Equal as floats (a zero may differ in sign, which no transform can tell).
        if (mine[4 * r + c] != ref(r, c)) {
          FAIL("entry (" << r << "," << c << ") of pose " << p[0] << " " << p[1] << " " << p[2] << " " << p[3] << " "
                         << p[4] << " " << p[5] << ": " << mine[4 * r + c] << " vs Eigen " << ref(r, c));
        }
      }
    }
    ++checked;
  }
  CHECK(checked == 200000);
  // And the CPU evaluator's pose terms take exactly this frame.
  const Pose6 pose = (Pose6() << 1.0, -2.0, 0.5, 0.3, -0.2, 2.5).finished();
  const m::PoseTerms<double> terms = detail::pose_terms(pose, m::gauss_constants(2.0, 0.55));
  const double raw[6] = {1.0, -2.0, 0.5, 0.3, -0.2, 2.5};
  float frame[12];
  m::pose_float_transform(raw, frame);
  CHECK(std::memcmp(terms.m, frame, sizeof(frame)) == 0);
}

TEST_CASE("The derivative kernel's point sums (factored float pairs) give the CPU's point sums", "[unit][math]") {
  // accumulate_point_cells as the derivative kernel runs it (float terms from the pose
  // frame, the cell table; the kernel's threads that share a point add the same pair terms
  // in the same order, so this is every launch shape's arithmetic) against
  // accumulate_point_pairs (double, the CPU backend's order): the same pairs, so equal
  // counts; sums within 1e-4 of each group's scale (score, gradient, Hessian). One point's
  // float terms are that far from double in either form (measured here: at most 5.3e-5
  // factored, 5.2e-5 pair by pair in float); a scan's sums, where the points' rounding
  // averages out, are held to 1e-5 by the GPU tests. The kernel's arithmetic, checked here
  // on the host; the GPU tests check the kernel.
  const PointCloud target = test::synthetic_scene(43, 30000);
  VoxelMapOptions o;
  o.resolution = 2.0;
  const VoxelMap map = VoxelMap::build(target, o);
  const detail::DenseVoxelIndex dense = detail::DenseVoxelIndex::build(map, detail::occupied_box(map));
  const m::GaussConstants gauss = m::gauss_constants(map.resolution(), 0.55);
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> x(-13.f, 13.f), y(-10.f, 10.f), z(-2.f, 5.f);
  std::uniform_real_distribution<double> ut(-0.5, 0.5), ua(-0.1, 0.1);
  int compared = 0;
  for (const bool use_dense : {false, true}) {
    const m::VoxelGridView g = detail::host_view(map, use_dense ? &dense : nullptr);
    for (m::Search search : {m::Search::Radius, m::Search::Direct7}) {
      const m::CellTable table = m::cell_table(g, search);
      for (int trial = 0; trial < 400; ++trial) {
        Pose6 pose;
        pose << ut(rng), ut(rng), ut(rng), ua(rng), ua(rng), ua(rng);
        const m::PoseTerms<double> terms_d = detail::pose_terms(pose, gauss);
        m::PoseTerms<float> terms_f;
        const double raw[6] = {pose(0), pose(1), pose(2), pose(3), pose(4), pose(5)};
        m::pose_terms(m::pose_frame(raw, true), static_cast<float>(gauss.d1), static_cast<float>(gauss.d2), terms_f);
        const float px = x(rng), py = y(rng), pz = z(rng);
        m::PointNeighbours found;
        m::find_point_neighbours(g, search, terms_d.m, px, py, pz, found);
        if (found.n == 0) continue;
        m::DerivativeSums cpu;
        cpu.clear();
        m::accumulate_point_pairs(g, terms_d, px, py, pz, found, true, cpu.v);
        {
          double gpu[m::kSumSize] = {};
          float best = 0.0f;
          float own[m::kSumSize] = {};
          const int pairs = m::accumulate_point_cells(g, search, table, terms_f, px, py, pz, found.tp, true, own, best);
          for (int k = 0; k < m::kSumSize; ++k) gpu[k] += own[k];
          m::add_point_terms(best, pairs, gpu);
          CAPTURE(use_dense, static_cast<int>(search), trial);
          REQUIRE(pairs == found.n);
          CHECK(gpu[m::kCorrespondences] == cpu.v[m::kCorrespondences]);
          CHECK(gpu[m::kPointsMatched] == cpu.v[m::kPointsMatched]);
          // A group's scale: its largest entry, plus 1e-3 for a point whose pairs barely
          // count (a far voxel's exponential, a few 1e-8, is not held to float's relative
          // precision).
          auto scale = [&](int from, int count) {
            double sc = 1e-3;
            for (int i = from; i < from + count; ++i) sc = std::max(sc, std::abs(cpu.v[i]) + 1e-3);
            return sc;
          };
          const double groups[3] = {scale(m::kScore, 1), scale(m::kGradient, 6), scale(m::kHessian, 21)};
          for (int i = 0; i < m::kNvtlSum; ++i) {
            const double sc = groups[i == m::kScore ? 0 : i < m::kHessian ? 1 : 2];
            INFO("entry " << i << ": cpu " << cpu.v[i] << " gpu form " << gpu[i]);
            CHECK(std::abs(gpu[i] - cpu.v[i]) <= 1e-4 * sc);
          }
          CHECK(std::abs(gpu[m::kNvtlSum] - cpu.v[m::kNvtlSum]) <= 1e-5 * (std::abs(cpu.v[m::kNvtlSum]) + 1e-3));
          ++compared;
        }
      }
    }
  }
  CHECK(compared > 800);  // most points meet the map
}

TEST_CASE("The neighbour walk of every lane split visits the CPU search's voxels", "[unit][math]") {
  const PointCloud target = test::synthetic_scene(41, 30000);
  for (double resolution : {1.0, 2.0}) {
    VoxelMapOptions o;
    o.resolution = resolution;
    const VoxelMap map = VoxelMap::build(target, o);
    const detail::DenseVoxelIndex dense = detail::DenseVoxelIndex::build(map, detail::occupied_box(map));
    for (const bool use_dense : {false, true}) {
      const m::VoxelGridView g = detail::host_view(map, use_dense ? &dense : nullptr);
      std::mt19937 rng(5);
      std::uniform_real_distribution<float> x(-13.f, 13.f), y(-10.f, 10.f), z(-2.f, 5.f);
      for (m::Search search : {m::Search::Radius, m::Search::Direct27, m::Search::Direct7, m::Search::Direct1}) {
        const m::CellTable table = m::cell_table(g, search);
        int nonempty = 0;
        for (int trial = 0; trial < 3000; ++trial) {
          const float p[3] = {x(rng), y(rng), z(rng)};
          std::int32_t found[m::kMaxNeighbours];
          const int n = m::find_neighbours(g, search, p, found);
          nonempty += n > 0;
          const std::multiset<std::int32_t> cpu(found, found + n);
          // The table order is the CPU's order wherever the CPU does not sort.
          std::vector<std::int32_t> walked;
          m::walk_neighbours(g, search, table, p, 0, 1, [&](std::int32_t v, int) { walked.push_back(v); });
          if (search != m::Search::Radius) CHECK(std::equal(walked.begin(), walked.end(), found, found + n));
          for (int stride : {1, 2, 4, 8}) {
            std::multiset<std::int32_t> gpu;
            for (int lane = 0; lane < stride; ++lane) {
              m::walk_neighbours(g, search, table, p, lane, stride, [&](std::int32_t v, int) { gpu.insert(v); });
            }
            CAPTURE(resolution, use_dense, static_cast<int>(search), stride, trial);
            REQUIRE(gpu == cpu);
          }
        }
        CHECK(nonempty > 500);  // the points meet the map, so the comparison has content
      }
    }
  }
}

TEST_CASE("The fixed step's LU direction solves the Newton system", "[unit][math]") {
  std::mt19937 rng(3);
  std::normal_distribution<double> n(0.0, 1.0);
  for (int trial = 0; trial < 200; ++trial) {
    Eigen::Matrix<double, 6, 6> a;
    for (int i = 0; i < 36; ++i) a.data()[i] = n(rng);
    const Eigen::Matrix<double, 6, 6> h = -(a * a.transpose() + 0.1 * Eigen::Matrix<double, 6, 6>::Identity());
    Eigen::Matrix<double, 6, 1> g;
    for (int i = 0; i < 6; ++i) g(i) = n(rng);
    m::DerivativeSums sums;
    sums.clear();
    for (int i = 0; i < 6; ++i) {
      sums.v[m::kGradient + i] = g(i);
      for (int j = i; j < 6; ++j) sums.v[m::kHessian + m::upper_index(i, j)] = h(i, j);
    }
    double dp[6];
    REQUIRE(m::lu_direction(sums.v, dp));
    // Householder QR as an independent solve (the system is well conditioned).
    const Eigen::Matrix<double, 6, 1> svd = h.colPivHouseholderQr().solve(-g);
    for (int i = 0; i < 6; ++i) CHECK(dp[i] == Approx(svd(i)).epsilon(1e-9).margin(1e-12));
  }
  // Singular: a zero row and column.
  m::DerivativeSums sums;
  sums.clear();
  for (int i = 0; i < 5; ++i) sums.v[m::kHessian + m::upper_index(i, i)] = -1.0;
  sums.v[m::kGradient] = 1.0;
  double dp[6];
  CHECK_FALSE(m::lu_direction(sums.v, dp));
}

TEST_CASE("the shared 3x3 eigensolver and inverse agree with Eigen's", "[unit][voxel_map]") {
  std::mt19937_64 rng(11);
  std::normal_distribution<double> g(0.0, 1.0);
  std::uniform_real_distribution<double> u(-6.0, 0.0);
  double worst_value = 0.0, worst_residual = 0.0, worst_inverse = 0.0;
  for (int trial = 0; trial < 20000; ++trial) {
    // Random rotations times eigenvalues over six decades, some repeated, some zero.
    const Eigen::Matrix3d q = Eigen::Matrix3d::NullaryExpr([&] { return g(rng); }).householderQr().householderQ();
    Eigen::Vector3d lambda(std::pow(10.0, u(rng)), std::pow(10.0, u(rng)), 1.0);
    if (trial % 7 == 0) lambda(0) = lambda(1);
    if (trial % 11 == 0) lambda(0) = 0.0;
    const Eigen::Matrix3d a = q * lambda.asDiagonal() * q.transpose();
    double m[3][3], w[3], v[3][3];
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j) m[i][j] = a(i, j);
    math::symmetric_eigen3(m, w, v);
    Eigen::SelfAdjointEigenSolver<Eigen::Matrix3d> ref(a);
    CHECK(w[0] <= w[1]);
    CHECK(w[1] <= w[2]);
    Eigen::Matrix3d vm;
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j) vm(i, j) = v[i][j];
    for (int k = 0; k < 3; ++k) {
      worst_value = std::max(worst_value, std::abs(w[k] - ref.eigenvalues()(k)) / ref.eigenvalues()(2));
      worst_residual = std::max(worst_residual, (a * vm.col(k) - w[k] * vm.col(k)).norm() / ref.eigenvalues()(2));
    }
    CHECK((vm.transpose() * vm - Eigen::Matrix3d::Identity()).norm() < 1e-13);
    if (lambda.minCoeff() > 0.0) {
      double inv[3][3];
      REQUIRE(math::inverse3(m, inv));
      Eigen::Matrix3d im;
      for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 3; ++j) im(i, j) = inv[i][j];
      worst_inverse = std::max(worst_inverse, (im - a.inverse()).norm() / a.inverse().norm() / (lambda.maxCoeff() / lambda.minCoeff()));
    }
  }
  std::printf("shared eigensolver vs Eigen: eigenvalues within %.1e of the largest, residual %.1e, inverse %.1e x "
              "the condition number\n", worst_value, worst_residual, worst_inverse);
  CHECK(worst_value < 1e-14);
  CHECK(worst_residual < 1e-14);
  // The cofactor inverse is not backward stable: its error grows faster than the
  // condition number (up to 1e6 here). An inflated voxel covariance has one of at most
  // 100, where it stays within 3.5e-12 of PCL's (tests/ndt/parity_pcl.cpp).
  CHECK(worst_inverse < 1e-10);
  // Singular: no inverse.
  const double z[3][3] = {{1, 2, 3}, {2, 4, 6}, {1, 1, 1}};
  double out[3][3];
  CHECK_FALSE(math::inverse3(z, out));
}

namespace ndtcu::math {
// A trace that grows as the host loop's does (optimizer.cpp), and notes the largest entry
// asked for.
struct GrowingTestTrace {
  std::vector<StepTrace>* entries;
  int* largest;
};
StepTrace* trace_entry(GrowingTestTrace t, int i) {
  *t.largest = std::max(*t.largest, i);
  if (t.entries->size() <= static_cast<std::size_t>(i)) t.entries->resize(static_cast<std::size_t>(i) + 1);
  return &(*t.entries)[static_cast<std::size_t>(i)];
}
}  // namespace ndtcu::math

TEST_CASE("The fixed step asks for trace entries one iteration at a time, not max_iterations ahead", "[unit][math]") {
  // Issue 26: the host loop sized its trace by max_iterations (636 MB for --max-iterations
  // 10000000, 13 iterations run). The score -|p - target|^2 / 2: from 0.95 m away at steps
  // of 0.1 the loop takes 9 full steps and one of 0.05 (below epsilon 0.06: converged), with
  // 1000 allowed.
  m::StepRules rules{};
  rules.step_min = 0.03;
  rules.step_max = 0.1;
  rules.epsilon = 0.06;
  rules.max_iterations = 1000;
  const double start[6] = {0, 0, 0, 0, 0, 0};
  const double target[6] = {0.57, 0.76, 0, 0, 0, 0};
  m::StepState state = m::start_state(start);
  std::vector<m::StepTrace> trace;
  int largest = -1;
  const auto sums_at = [&](const double* p) {
    m::DerivativeSums sums;
    sums.clear();
    sums.v[m::kPointsMatched] = 1.0;
    for (int i = 0; i < 6; ++i) {
      sums.v[m::kScore] -= 0.5 * (p[i] - target[i]) * (p[i] - target[i]);
      sums.v[m::kGradient + i] = -(p[i] - target[i]);
      sums.v[m::kHessian + m::upper_index(i, i)] = -1.0;
    }
    return sums;
  };
  m::DerivativeSums sums = sums_at(start);
  int calls = 0;
  while (m::fixed_step(sums.v, rules, state, m::GrowingTestTrace{&trace, &largest},
                       [](const double* v, double* dp) { return m::lu_direction(v, dp); })) {
    sums = sums_at(state.pose);
    REQUIRE(++calls < 100);
  }
  CHECK(state.reason == m::kConverged);
  CHECK(state.iterations == 10);
  CHECK(largest == state.iterations - 1);
  CHECK(trace.size() == static_cast<std::size_t>(state.iterations));
  CHECK(trace.front().step == Approx(0.1));
  CHECK(trace.back().step == Approx(0.05));
  CHECK(trace.back().pose[0] == Approx(0.57).margin(1e-9));
}
