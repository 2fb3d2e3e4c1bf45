#include "evaluator.hpp"
#include "../map/voxel_map_access.hpp"

#include "../thread_pool.hpp"


#include <algorithm>

namespace ndtcu::detail {

Evaluation to_evaluation(const math::DerivativeSums& sums) {
  Evaluation e;
  e.score = sums.v[math::kScore];
  for (int i = 0; i < 6; ++i) e.gradient[i] = sums.v[math::kGradient + i];
  for (int i = 0; i < 6; ++i) {
    for (int j = i; j < 6; ++j) {
      e.hessian(i, j) = e.hessian(j, i) = sums.v[math::kHessian + math::upper_index(i, j)];
    }
  }
  e.nvtl_sum = sums.v[math::kNvtlSum];
  e.correspondences = static_cast<std::size_t>(sums.v[math::kCorrespondences]);
  e.matched_points = static_cast<std::size_t>(sums.v[math::kPointsMatched]);
  return e;
}

math::PoseTerms<double> pose_terms(const Pose6& pose, const math::GaussConstants& gauss) {
  const double p[6] = {pose(0), pose(1), pose(2), pose(3), pose(4), pose(5)};
  math::PoseTerms<double> t;
  math::pose_terms(math::pose_frame(p, true), gauss.d1, gauss.d2, t);
  return t;
}

math::Search to_math(SearchMethod m) {
  switch (m) {
    case SearchMethod::Radius: return math::Search::Radius;
    case SearchMethod::Direct27: return math::Search::Direct27;
    case SearchMethod::Direct7: return math::Search::Direct7;
    case SearchMethod::Direct1: return math::Search::Direct1;
  }
  return math::Search::Radius;
}

math::VoxelGridView host_view(const VoxelMap& map, const DenseVoxelIndex* dense) {
  const double* mean[3] = {map.mean(0).data(), map.mean(1).data(), map.mean(2).data()};
  const float* centroid[3] = {map.centroid(0).data(), map.centroid(1).data(), map.centroid(2).data()};
  const double* icov[6];
  for (int e = 0; e < 6; ++e) icov[e] = map.inverse_covariance(e).data();
  math::VoxelGridView g =
      math::voxel_grid_view(map.size(), mean, icov, centroid, map.inverse_resolution(), map.radius_squared());
  const detail::VoxelHashTable table = detail::voxel_hash_table(map);
  math::attach_hash(g, table.keys.data(), table.values.data(), table.keys.size());
  if (dense && !dense->empty()) dense->attach(g);
  return g;
}

CpuEvaluator::CpuEvaluator(const VoxelMap& map, PointCloudView points, SearchMethod search, double outlier_ratio,
                           ThreadPool* pool, const DenseVoxelIndex* dense)
    : points_(points), search_(to_math(search)), pool_(pool) {
  view_ = host_view(map, dense);
  gauss_ = math::gauss_constants(map.resolution(), outlier_ratio);
  chunk_sums_.resize((points_.size() + kChunkPoints - 1) / kChunkPoints);
}

math::DerivativeSums CpuEvaluator::evaluate_sums(const Pose6& pose, bool with_hessian) {
  const math::PoseTerms<double> terms = pose_terms(pose, gauss_);
  const std::size_t n = points_.size();
  auto chunk = [&](std::size_t c) {
    math::DerivativeSums& s = chunk_sums_[c];
    s.clear();
    const std::size_t begin = c * kChunkPoints, end = std::min(n, (c + 1) * kChunkPoints);
    // PCL's computeDerivatives loop body for each point (find_point_neighbours, then
    // accumulate_point_pairs), with the voxel search made one point ahead: the
    // search is a chain of dependent loads (transform, cell, index entry, voxel), and
    // issued before the previous point's arithmetic its latency hides behind that work
    // (measured: 10% of an evaluation without the Hessian). The pairs are still added in
    // point order, so the bits are those of searching and adding point by point.
    const Eigen::Vector3f* p = points_.points;
    math::PointNeighbours found[2];
    math::find_point_neighbours(view_, search_, terms.m, p[begin].x(), p[begin].y(), p[begin].z(), found[0]);
    for (std::size_t i = begin; i < end; ++i) {
      const std::size_t slot = (i - begin) & 1;
      if (i + 1 < end) {
        math::find_point_neighbours(view_, search_, terms.m, p[i + 1].x(), p[i + 1].y(), p[i + 1].z(),
                                    found[slot ^ 1]);
      }
      math::accumulate_point_pairs(view_, terms, p[i].x(), p[i].y(), p[i].z(), found[slot], with_hessian, s.v);
    }
  };
  if (pool_) {
    pool_->parallel_for(chunk_sums_.size(), chunk);
  } else {
    for (std::size_t c = 0; c < chunk_sums_.size(); ++c) chunk(c);
  }
  math::DerivativeSums total;
  total.clear();
  for (const auto& s : chunk_sums_) total.add(s);  // fixed order: chunk 0, 1, 2, ...
  return total;
}

void CpuEvaluator::gradient_scatter(const Pose6& pose, Eigen::Matrix<double, 6, 6>& hessian,
                                    Eigen::Matrix<double, 6, 6>& scatter) {
  const math::PoseTerms<double> terms = pose_terms(pose, gauss_);
  math::DerivativeSums total, point;
  total.clear();
  scatter.setZero();
  for (std::size_t i = 0; i < points_.size(); ++i) {
    const Eigen::Vector3f& p = points_.points[i];
    math::PointNeighbours found;
    math::find_point_neighbours(view_, search_, terms.m, p.x(), p.y(), p.z(), found);
    point.clear();
    math::accumulate_point_pairs(view_, terms, p.x(), p.y(), p.z(), found, true, point.v);
    const Eigen::Map<const Eigen::Matrix<double, 6, 1>> g(point.v + math::kGradient);
    scatter.noalias() += g * g.transpose();
    total.add(point);
  }
  hessian = to_evaluation(total).hessian;
}

}  // namespace ndtcu::detail
