// The CPU evaluator against the shared math applied point by point and pair by pair (the
// order its sums promise), with the map's hash and with a dense voxel index: the search one
// point ahead, the exponentials first and the dense lookup must not change a bit.
#include "../support/test_support.hpp"
#include "synthetic.hpp"

#include "ndt_point.hpp"
#include "ndt_step.hpp"

#include <ndtcu/voxel_map.hpp>

#include "map/dense_voxel_index.hpp"
#include "ndt/evaluator.hpp"
#include "thread_pool.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

using namespace ndtcu;
namespace m = ndtcu::math;

namespace {

// One point as PCL's computeDerivatives loop body: transform, search (through the hash),
// then each pair in turn (accumulate_voxel), the best term to the NVTL sum, the counts.
void point_terms(const m::VoxelGridView& view, m::Search search, const m::PoseTerms<double>& terms,
                 const Eigen::Vector3f& p, bool with_hessian, double* sums) {
  float tp[3];
  m::transform_point(terms.m, p.x(), p.y(), p.z(), tp);
  std::int32_t nb[m::kMaxNeighbours];
  const int n = m::find_neighbours(view, search, tp, nb);
  if (n == 0) return;
  const auto J = m::point_jacobian(terms.angular, double(p.x()), double(p.y()), double(p.z()));
  const auto H = m::point_hessian(terms.angular, double(p.x()), double(p.y()), double(p.z()));
  double best = 0.0;
  for (int k = 0; k < n; ++k) {
    best = std::max(best, m::accumulate_voxel(view, nb[k], tp, J, H, terms, with_hessian, sums));
  }
  sums[m::kNvtlSum] += best;
  sums[m::kCorrespondences] += n;
  sums[m::kPointsMatched] += 1.0;
}

// CpuEvaluator's documented order: each chunk of kChunkPoints points summed in point order,
// then the chunk sums added in chunk order.
detail::Evaluation point_by_point(const VoxelMap& map, const std::vector<Eigen::Vector3f>& points, m::Search search,
                                  const Pose6& pose, bool with_hessian) {
  const m::VoxelGridView view = detail::host_view(map);
  const m::PoseTerms<double> terms = detail::pose_terms(pose, m::gauss_constants(map.resolution(), 0.55));
  const std::size_t chunk = detail::CpuEvaluator::kChunkPoints;
  m::DerivativeSums total;
  total.clear();
  for (std::size_t begin = 0; begin < points.size(); begin += chunk) {
    m::DerivativeSums s;
    s.clear();
    for (std::size_t i = begin; i < std::min(points.size(), begin + chunk); ++i) {
      point_terms(view, search, terms, points[i], with_hessian, s.v);
    }
    total.add(s);
  }
  return detail::to_evaluation(total);
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof(double)) == 0; }

bool same_bits(const detail::Evaluation& a, const detail::Evaluation& b) {
  bool same = same_bits(a.score, b.score) && same_bits(a.nvtl_sum, b.nvtl_sum) &&
              a.correspondences == b.correspondences && a.matched_points == b.matched_points;
  for (int i = 0; i < 6; ++i) same = same && same_bits(a.gradient[i], b.gradient[i]);
  for (int i = 0; i < 36; ++i) same = same && same_bits(a.hessian.data()[i], b.hessian.data()[i]);
  return same;
}

}  // namespace

TEST_CASE("The CPU evaluator adds the pairs' terms in pair, point and chunk order, with either lookup",
          "[unit][cpu_evaluator]") {
  const PointCloud target = test::synthetic_scene(5, 30000);
  // The scene sampled again and moved, plus points beyond the map's box and near its faces,
  // where the dense lookup leaves its fast path.
  PointCloud source = test::synthetic_scene(6, 3000);
  for (auto& p : source.points) p += Eigen::Vector3f(0.3f, -0.2f, 0.05f);
  for (int i = 0; i < 40; ++i) {
    source.points.emplace_back(-14.f + 0.7f * static_cast<float>(i), 10.5f, -1.f);
    source.points.emplace_back(13.5f, -11.f + 0.55f * static_cast<float>(i), 6.f);
  }
  std::vector<Pose6> poses(3, Pose6::Zero());
  poses[1] << 0.2, -0.1, 0.05, 0.01, -0.02, 0.03;
  poses[2] << -0.3, 0.2, 0.0, 5e-5, 0.04, -5e-5;  // roll and yaw under the small-angle rule
  for (double res : {1.0, 2.0}) {
    VoxelMapOptions o;
    o.resolution = res;
    o.covariance = CovarianceMode::Pcl;
    const VoxelMap map = VoxelMap::build(target, o);
    const detail::DenseVoxelIndex dense = detail::DenseVoxelIndex::build(map, detail::occupied_box(map));
    REQUIRE_FALSE(dense.empty());
    for (auto search : {SearchMethod::Radius, SearchMethod::Direct27, SearchMethod::Direct7, SearchMethod::Direct1}) {
      for (int threads : {1, 3}) {
        detail::ThreadPool pool(threads);
        detail::CpuEvaluator hash(map, source, search, 0.55, &pool);
        detail::CpuEvaluator indexed(map, source, search, 0.55, &pool, &dense);
        for (const Pose6& pose : poses) {
          for (bool with_hessian : {true, false}) {
            const detail::Evaluation expect =
                point_by_point(map, source.points, detail::to_math(search), pose, with_hessian);
            INFO("resolution " << res << " search " << to_string(search) << " threads " << threads << " pose "
                               << pose.transpose() << " hessian " << with_hessian);
            REQUIRE(expect.matched_points > source.size() / 2);
            CHECK(same_bits(hash.evaluate(pose, with_hessian), expect));
            CHECK(same_bits(indexed.evaluate(pose, with_hessian), expect));
          }
        }
      }
    }
  }
}
