#pragma once
/// \file
/// One source point's contribution to the derivative sums, written once for the CPU
/// backend and the CUDA kernels: its pairs with the voxels around it (ndt_neighbours.hpp)
/// through the per-pair terms (ndt_derivatives.hpp).

#include "ndt_derivatives.hpp"
#include "ndt_neighbours.hpp"

namespace ndtcu::math {

/// The inputs of the pair of transformed point `tp` and voxel `v`: q = tp - mu in T and the
/// voxel's inverse covariance.
template <typename T>
NDTCU_HD inline void voxel_pair(const VoxelGridView& g, std::int32_t v, const float* tp, T* q, T* icov) {
  for (int a = 0; a < 3; ++a) q[a] = static_cast<T>(tp[a]) - static_cast<T>(g.mean[a][v]);
  for (int e = 0; e < 6; ++e) icov[e] = static_cast<T>(g.icov[e][v]);
}

/// One point-voxel pair of transformed point `tp` and voxel `v` (voxel_pair and
/// accumulate_pair). Returns the pair's score term.
template <typename T, typename S>
NDTCU_HD inline T accumulate_voxel(const VoxelGridView& g, std::int32_t v, const float* tp, const PointJacobian<T>& J,
                                   const PointHessian<T>& H, const PoseTerms<T>& pt, bool with_hessian, S* sums) {
  T q[3], icov[6];
  voxel_pair(g, v, tp, q, icov);
  return accumulate_pair(q, icov, J, H, pt.d1, pt.d2, with_hessian, sums);
}

/// A matched point's own terms, once per point after its pairs: its best score term to
/// the NVTL sum (Autoware's nearest-voxel transformation likelihood), its `pairs` to the
/// correspondences and one matched point. The CPU's sums are double, a GPU thread's Real.
template <typename T, typename S>
NDTCU_HD inline void add_point_terms(T best, int pairs, S* sums) {
  sums[kNvtlSum] += static_cast<S>(best);
  sums[kCorrespondences] += static_cast<S>(pairs);
  sums[kPointsMatched] += S(1);
}

/// The pairs of transformed point `tp` with its `n` > 0 voxels `nb` (in find_neighbours'
/// order), then the point's own terms (add_point_terms). The same terms as accumulate_voxel pair by
/// pair, added in the same order, but every pair's exponential is taken first: the exp
/// calls are then independent and overlap, where each would otherwise wait for the
/// previous pair's derivatives (measured: 10-15% of a CPU evaluation). Meant for the CPU:
/// the arrays take 2.8 KB.
template <typename T>
NDTCU_HD inline void accumulate_neighbours(const VoxelGridView& g, const std::int32_t* nb, int n, const float* tp,
                                           const PointJacobian<T>& J, const PointHessian<T>& H,
                                           const PoseTerms<T>& pt, bool with_hessian, double* sums) {
  T q[kMaxNeighbours][3], icov[kMaxNeighbours][6], cq[kMaxNeighbours][3], e[kMaxNeighbours];
  for (int k = 0; k < n; ++k) {
    voxel_pair(g, nb[k], tp, q[k], icov[k]);
    e[k] = pair_gaussian(q[k], icov[k], pt.d2, cq[k]);
  }
  T best = T(0);
  for (int k = 0; k < n; ++k) {
    const T s = accumulate_pair_terms(q[k], icov[k], cq[k], e[k], J, H, pt.d1, pt.d2, with_hessian, sums);
    if (s > best) best = s;
  }
  add_point_terms(best, n, sums);
}

/// A source point's voxels: the transformed point and find_neighbours' answer for it.
struct PointNeighbours {
  float tp[3];                      ///< the point transformed (map-relative float)
  std::int32_t nb[kMaxNeighbours];  ///< its voxels, in find_neighbours' order
  int n;                            ///< how many
};

/// Transforms source point (x, y, z) and finds its voxels.
NDTCU_HD inline void find_point_neighbours(const VoxelGridView& g, Search search, const float* m, float x, float y,
                                           float z, PointNeighbours& out) {
  transform_point(m, x, y, z, out.tp);
  out.n = find_neighbours(g, search, out.tp, out.nb);
}

/// The pairs of source point (x, y, z) with its voxels `found` (find_point_neighbours):
/// the point's Jacobian and point Hessian, then accumulate_neighbours. Nothing for a
/// point without voxels.
template <typename T>
NDTCU_HD inline void accumulate_point_pairs(const VoxelGridView& g, const PoseTerms<T>& pt, float x, float y, float z,
                                            const PointNeighbours& found, bool with_hessian, double* sums) {
  if (found.n == 0) return;
  const T xd = static_cast<T>(x), yd = static_cast<T>(y), zd = static_cast<T>(z);
  const PointJacobian<T> J = point_jacobian(pt.angular, xd, yd, zd);
  PointHessian<T> H;
  if (with_hessian) {
    H = point_hessian(pt.angular, xd, yd, zd);
  } else {
    for (int r = 0; r < 3; ++r) H.a[r] = H.b[r] = H.c[r] = H.d[r] = H.e[r] = H.f[r] = T(0);
  }
  accumulate_neighbours(g, found.nb, found.n, found.tp, J, H, pt, with_hessian, sums);
}

/// A point's terms from its PointPairSums (PointPairSums says how): its point Jacobian and
/// point Hessian at source point (x, y, z), then add_point_derivatives to `sums`.
template <typename T, typename S>
NDTCU_FORCE_INLINE NDTCU_HD inline void add_point_pair_sums(const PoseTerms<T>& pt, float x, float y, float z,
                                                            const PointPairSums<T>& ps, bool with_hessian, S* sums) {
  const T xd = static_cast<T>(x), yd = static_cast<T>(y), zd = static_cast<T>(z);
  const PointJacobian<T> J = point_jacobian(pt.angular, xd, yd, zd);
  PointHessian<T> H{};
  if (with_hessian) H = point_hessian(pt.angular, xd, yd, zd);
  add_point_derivatives(ps, J, H, with_hessian, sums);
}

/// The GPU's per-point accumulation, one thread for the point: the pairs of source point
/// (x, y, z), transformed to `tp`, with the voxels of cell table `cells` (cell_table of g
/// and `search`; walk_neighbours: no sort, every cell's load independent of the others'),
/// summed in the factored form (PointPairSums: each pair adds 10 numbers, in table order,
/// then the point's derivatives are taken once). The same voxel set as find_neighbours and
/// the same derivatives as accumulate_point_pairs, but not its bits: this is the GPU's
/// form, whose tolerances against the CPU backend tests/gpu states. When threads share a
/// point, the derivative kernel adds the same pair terms in the same table order, so a
/// point's sums are these bits however many threads share it. Adds the point's terms to
/// `sums`, raises `best` to the best score term found and returns the number of pairs; the
/// caller adds the point's own terms (add_point_terms).
template <typename T, typename S>
NDTCU_HD inline int accumulate_point_cells(const VoxelGridView& g, Search search, const CellTable& cells,
                                           const PoseTerms<T>& pt, float x, float y, float z, const float* tp,
                                           bool with_hessian, S* sums, T& best) {
  // The voxels first, then their pairs: the threads of a warp find their voxels at
  // different cells, so pair arithmetic inside the walk runs for one thread at a time;
  // in a loop of its own the warp runs it together. The point's derivatives are taken
  // after its pairs, so they do not hold registers through the walk or the pairs, and not
  // at all for a point without voxels.
  std::int32_t found[kMaxNeighbours];
  int pairs = 0;
  walk_neighbours(g, search, cells, tp, 0, 1, [&](std::int32_t v, int) { found[pairs++] = v; });
  if (pairs == 0) return 0;
  PointPairSums<T> ps = zero_pair_sums<T>();
  for (int k = 0; k < pairs; ++k) {
    T q[3], icov[6];
    voxel_pair(g, found[k], tp, q, icov);
    const T s = add_pair_sums(q, icov, pt.d1, pt.d2, with_hessian, ps);
    if (s > best) best = s;
  }
  add_point_pair_sums(pt, x, y, z, ps, with_hessian, sums);
  return pairs;
}

}  // namespace ndtcu::math
