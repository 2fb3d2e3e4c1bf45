#pragma once
/// \file
/// The NDT score's derivatives, written once for the CPU backend and the CUDA kernels: the
/// Gaussian fit, the pose terms of one pose (PCL's float transform and the angular terms),
/// the point Jacobian and point Hessian, and one point-voxel pair's score, gradient and
/// Hessian terms. It reproduces PCL 1.13's pcl::NormalDistributionsTransform
/// (registration/impl/ndt.hpp) and Autoware's multigrid NDT
/// (ndt_omp/multigrid_ndt_omp_impl.hpp); equation numbers refer to Magnusson, "The
/// Three-Dimensional Normal-Distributions Transform", PhD thesis, 2009.
///
/// Precision follows the references: points are transformed in float (PCL transforms
/// clouds with a float matrix) and everything after (q = T(x) - mu, score, derivatives)
/// is in the template scalar, double for the reference.

#include "ndt_hd.hpp"

#include <math.h>

namespace ndtcu::math {

/// Number of doubles in one derivative sum: score, gradient (6), upper Hessian (21),
/// NVTL sum, correspondences, points with a neighbour.
constexpr int kSumSize = 31;
/// Offsets into a derivative sum (see DerivativeSums).
enum SumIndex : int {
  kScore = 0,
  kGradient = 1,         ///< 6 entries
  kHessian = 7,          ///< 21 entries, upper triangle row by row
  kNvtlSum = 28,         ///< sum over points of the best per-pair score term
  kCorrespondences = 29, ///< point-voxel pairs found by the search
  kPointsMatched = 30,   ///< points with at least one neighbour voxel
};

/// Index of Hessian entry (i, j), i <= j, in the 21-entry upper triangle.
NDTCU_HD inline constexpr int upper_index(int i, int j) { return i * 6 - i * (i - 1) / 2 + (j - i); }

/// Fixed-layout sum of per-point contributions; reduced in a fixed order for
/// reproducible bits. Counts are stored as doubles (exact below 2^53).
struct DerivativeSums {
  double v[kSumSize];  ///< see SumIndex
  /// All entries zero.
  NDTCU_HD void clear() {
    for (int i = 0; i < kSumSize; ++i) v[i] = 0.0;
  }
  /// Adds another sum entry by entry.
  NDTCU_HD void add(const DerivativeSums& o) {
    for (int i = 0; i < kSumSize; ++i) v[i] += o.v[i];
  }
};

/// Gaussian fit constants d1, d2 of the NDT score (Magnusson 2009, eq. 6.8).
struct GaussConstants {
  double d1;  ///< negative scale of the score term
  double d2;  ///< exponent scale
};

/// d1 and d2 from the outlier ratio o and the voxel size r, as PCL and Autoware compute
/// them: c1 = 10 (1 - o), c2 = o / r^3, d3 = -ln c2, d1 = -ln(c1 + c2) - d3,
/// d2 = -2 ln((-ln(c1 e^-0.5 + c2) - d3) / d1). (r = 2: d1 = -4.196518, d2 = 0.248479.)
NDTCU_HD inline GaussConstants gauss_constants(double resolution, double outlier_ratio) {
  const double c1 = 10.0 * (1.0 - outlier_ratio);
  const double c2 = outlier_ratio / ::pow(resolution, 3.0);
  const double d3 = -::log(c2);
  GaussConstants g;
  g.d1 = -::log(c1 + c2) - d3;
  g.d2 = -2.0 * ::log((-::log(c1 * ::exp(-0.5) + c2) - d3) / g.d1);
  return g;
}

NDTCU_HD inline double ndt_cos(double a) { return ::cos(a); }
NDTCU_HD inline float ndt_cos(float a) { return ::cosf(a); }
NDTCU_HD inline double ndt_sin(double a) { return ::sin(a); }
NDTCU_HD inline float ndt_sin(float a) { return ::sinf(a); }
NDTCU_HD inline double ndt_exp(double a) { return ::exp(a); }
NDTCU_HD inline float ndt_exp(float a) { return ::expf(a); }

/// cos and sin of an angle, with PCL's and Autoware's small-angle rule: |angle| < 10e-5
/// (sic, 1e-4) is taken as exactly c = 1, s = 0 (ndt.hpp computeAngleDerivatives).
template <typename T>
NDTCU_HD inline void small_angle_cos_sin(T angle, T& c, T& s) {
  if ((angle < T(0) ? -angle : angle) < T(10e-5)) {
    c = T(1);
    s = T(0);
  } else {
    c = ndt_cos(angle);
    s = ndt_sin(angle);
  }
}

/// The angular parts of the point Jacobian and point Hessian for one pose: rows a..h of
/// eq. 6.19 (8 rows) and a2..f3 of eq. 6.21 (15 rows), each a row vector applied to the
/// untransformed point x. Pose p = [x y z roll pitch yaw], T = Trans * Rx * Ry * Rz.
template <typename T>
struct AngularTerms {
  T j[8][3];   ///< eq. 6.19: a, b, c, d, e, f, g, h
  T h[15][3];  ///< eq. 6.21: a2 a3 b2 b3 c2 c3 d1 d2 d3 e1 e2 e3 f1 f2 f3
};

/// Fills AngularTerms from roll, pitch, yaw (with the small-angle rule). The c2 and d1
/// rows carry PCL's 2021 sign fixes (the thesis has the wrong sign on sx*sz in c2; PCL
/// 1.13 has -sy in d1, Autoware's copy still has +sy: the finite-difference test decides).
template <typename T>
NDTCU_HD inline AngularTerms<T> angular_terms_sincos(T cx, T sx, T cy, T sy, T cz, T sz);

template <typename T>
NDTCU_HD inline AngularTerms<T> angular_terms(T roll, T pitch, T yaw) {
  T cx, sx, cy, sy, cz, sz;
  small_angle_cos_sin(roll, cx, sx);
  small_angle_cos_sin(pitch, cy, sy);
  small_angle_cos_sin(yaw, cz, sz);
  return angular_terms_sincos(cx, sx, cy, sy, cz, sz);
}

/// AngularTerms from cos and sin of roll (x), pitch (y) and yaw (z), the small-angle rule
/// already applied: what the GPU computes from the uploaded sin/cos.
template <typename T>
NDTCU_HD inline AngularTerms<T> angular_terms_sincos(T cx, T sx, T cy, T sy, T cz, T sz) {
  AngularTerms<T> a;
  auto set = [](T* r, T v0, T v1, T v2) {
    r[0] = v0;
    r[1] = v1;
    r[2] = v2;
  };
  // eq. 6.19
  set(a.j[0], -sx * sz + cx * sy * cz, -sx * cz - cx * sy * sz, -cx * cy);  // a
  set(a.j[1], cx * sz + sx * sy * cz, cx * cz - sx * sy * sz, -sx * cy);    // b
  set(a.j[2], -sy * cz, sy * sz, cy);                                       // c
  set(a.j[3], sx * cy * cz, -sx * cy * sz, sx * sy);                        // d
  set(a.j[4], -cx * cy * cz, cx * cy * sz, -cx * sy);                       // e
  set(a.j[5], -cy * sz, -cy * cz, T(0));                                    // f
  set(a.j[6], cx * cz - sx * sy * sz, -cx * sz - sx * sy * cz, T(0));       // g
  set(a.j[7], sx * cz + cx * sy * sz, cx * sy * cz - sx * sz, T(0));        // h
  // eq. 6.21
  set(a.h[0], -cx * sz - sx * sy * cz, -cx * cz + sx * sy * sz, sx * cy);   // a2
  set(a.h[1], -sx * sz + cx * sy * cz, -cx * sy * sz - sx * cz, -cx * cy);  // a3
  set(a.h[2], cx * cy * cz, -cx * cy * sz, cx * sy);                        // b2
  set(a.h[3], sx * cy * cz, -sx * cy * sz, sx * sy);                        // b3
  set(a.h[4], -sx * cz - cx * sy * sz, sx * sz - cx * sy * cz, T(0));       // c2
  set(a.h[5], cx * cz - sx * sy * sz, -sx * sy * cz - cx * sz, T(0));       // c3
  set(a.h[6], -cy * cz, cy * sz, -sy);                                      // d1
  set(a.h[7], -sx * sy * cz, sx * sy * sz, sx * cy);                        // d2
  set(a.h[8], cx * sy * cz, -cx * sy * sz, -cx * cy);                       // d3
  set(a.h[9], sy * sz, sy * cz, T(0));                                      // e1
  set(a.h[10], -sx * cy * sz, -sx * cy * cz, T(0));                         // e2
  set(a.h[11], cx * cy * sz, cx * cy * cz, T(0));                           // e3
  set(a.h[12], -cy * cz, cy * sz, T(0));                                    // f1
  set(a.h[13], -cx * sz - sx * sy * cz, -cx * cz + sx * sy * sz, T(0));     // f2
  set(a.h[14], -sx * sz + cx * sy * cz, -cx * sy * sz - sx * cz, T(0));     // f3
  return a;
}

/// d T(x, p) / dp for one point: a 3x6 matrix, identity in the translation columns
/// (eq. 6.18). Stored column-major: col[k] is the derivative along pose entry k.
/// accumulate_pair_terms reads only the rotation columns and takes the rest as
/// point_jacobian fills it (identity translation columns, col[3][0] = 0).
template <typename T>
struct PointJacobian {
  T col[6][3];  ///< column k = dT/dp_k
};

/// Second derivatives d^2 T(x, p) / dp_i dp_j (eq. 6.20). Only the rotation block is
/// non-zero: vectors a, b, c, d, e, f of eq. 6.21 at (3,3) (3,4) (3,5) (4,4) (4,5) (5,5).
/// The x entries of a, b and c are zero (point_hessian); accumulate_pair_terms skips them.
template <typename T>
struct PointHessian {
  T a[3], b[3], c[3], d[3], e[3], f[3];  ///< eq. 6.21
};

template <typename T>
NDTCU_HD inline T row_dot(const T* r, T x, T y, T z) {
  return r[0] * x + r[1] * y + r[2] * z;
}

/// The point Jacobian of eq. 6.18 for untransformed point (x, y, z).
template <typename T>
NDTCU_HD inline PointJacobian<T> point_jacobian(const AngularTerms<T>& a, T x, T y, T z) {
  PointJacobian<T> J;
  for (int k = 0; k < 6; ++k) J.col[k][0] = J.col[k][1] = J.col[k][2] = T(0);
  J.col[0][0] = T(1);
  J.col[1][1] = T(1);
  J.col[2][2] = T(1);
  J.col[3][1] = row_dot(a.j[0], x, y, z);
  J.col[3][2] = row_dot(a.j[1], x, y, z);
  J.col[4][0] = row_dot(a.j[2], x, y, z);
  J.col[4][1] = row_dot(a.j[3], x, y, z);
  J.col[4][2] = row_dot(a.j[4], x, y, z);
  J.col[5][0] = row_dot(a.j[5], x, y, z);
  J.col[5][1] = row_dot(a.j[6], x, y, z);
  J.col[5][2] = row_dot(a.j[7], x, y, z);
  return J;
}

/// The point Hessian of eqs. 6.20-6.21 for untransformed point (x, y, z).
template <typename T>
NDTCU_HD inline PointHessian<T> point_hessian(const AngularTerms<T>& a, T x, T y, T z) {
  PointHessian<T> H;
  H.a[0] = T(0);
  H.a[1] = row_dot(a.h[0], x, y, z);
  H.a[2] = row_dot(a.h[1], x, y, z);
  H.b[0] = T(0);
  H.b[1] = row_dot(a.h[2], x, y, z);
  H.b[2] = row_dot(a.h[3], x, y, z);
  H.c[0] = T(0);
  H.c[1] = row_dot(a.h[4], x, y, z);
  H.c[2] = row_dot(a.h[5], x, y, z);
  for (int r = 0; r < 3; ++r) {
    H.d[r] = row_dot(a.h[6 + r], x, y, z);
    H.e[r] = row_dot(a.h[9 + r], x, y, z);
    H.f[r] = row_dot(a.h[12 + r], x, y, z);
  }
  return H;
}

/// A symmetric 3x3 matrix by its 6 unique entries: xx, xy, xz, yy, yz, zz.
template <typename T>
NDTCU_HD inline void sym_mul(const T* s, const T* v, T* out) {
  out[0] = s[0] * v[0] + s[1] * v[1] + s[2] * v[2];
  out[1] = s[1] * v[0] + s[3] * v[1] + s[4] * v[2];
  out[2] = s[2] * v[0] + s[4] * v[1] + s[5] * v[2];
}

template <typename T>
NDTCU_HD inline T dot3(const T* a, const T* b) {
  return a[0] * b[0] + a[1] * b[1] + a[2] * b[2];
}

/// A pair's score term (eq. 6.9) and the factor d1 d2 e shared by its gradient and Hessian
/// terms (eqs. 6.12 and 6.13), from its e = exp(-d2 q' icov q / 2); false when the pair is
/// skipped because d2 e > 1, d2 e < 0 or NaN (PCL's and Autoware's guard against invalid
/// values).
template <typename T>
NDTCU_HD inline bool pair_weight(T e, T d1, T d2, T& score, T& de) {
  score = -d1 * e;
  const T d2e = d2 * e;
  if (d2e > T(1) || d2e < T(0) || d2e != d2e) return false;
  de = d2e * d1;
  return true;
}

/// The terms of one point-voxel pair: q = T(x) - mu, icov the voxel's inverse covariance
/// (6 unique entries), cq = icov q and e = exp(-d2 q' icov q / 2) from pair_gaussian. Adds
/// the pair's score term (eq. 6.9) to sums[kScore], its gradient (eq. 6.12) and, when
/// `with_hessian`, its Hessian (eq. 6.13, upper triangle), exactly as PCL's
/// updateDerivatives. Returns the score term, or 0 when the pair is skipped because
/// d2 * e > 1, d2 * e < 0 or NaN (PCL's and Autoware's guard against invalid values).
///
/// Written for the structure of eqs. 6.18 and 6.20 as point_jacobian and point_hessian
/// fill them: J's translation columns are unit vectors, column 3 has no x entry, and the
/// point Hessian is zero in every translation row and column (and in the x entry of a, b,
/// c). The terms PCL multiplies by those ones and zeros are left out; a product with an
/// exact 1 and a sum with an exact 0 round to the same double, so the sums are the bits
/// of the general 6-column form (checked by a unit test):
///  - icov J_i (i < 3) is column i of icov, so q' icov J_i = (icov q)_i and
///    J_j' icov J_i = (icov J_j)_i: entries of cq and of the rotation columns' icov J_j;
///  - the Hessian's second-derivative term q' icov d2T/dpi dpj is zero unless i, j >= 3.
template <typename T, typename S>
NDTCU_FORCE_INLINE NDTCU_HD inline T accumulate_pair_terms(const T* q, const T* icov, const T* cq, T e,
                                                           const PointJacobian<T>& J, const PointHessian<T>& H, T d1,
                                                           T d2, bool with_hessian, S* sums) {
  T score, de;
  if (!pair_weight(e, d1, d2, score, de)) return T(0);
  // The rotation columns of J (column 3 without its zero x entry) and icov times each:
  // c3 = icov J_3 is (s01 j31 + s02 j32, ...), the general sym_mul without its s * 0 terms.
  const T s00 = icov[0], s01 = icov[1], s02 = icov[2], s11 = icov[3], s12 = icov[4], s22 = icov[5];
  const T j31 = J.col[3][1], j32 = J.col[3][2];
  const T j4[3] = {J.col[4][0], J.col[4][1], J.col[4][2]};
  const T j5[3] = {J.col[5][0], J.col[5][1], J.col[5][2]};
  const T c3[3] = {s01 * j31 + s02 * j32, s11 * j31 + s12 * j32, s12 * j31 + s22 * j32};
  T c4[3], c5[3];
  sym_mul(icov, j4, c4);
  sym_mul(icov, j5, c5);
  // q' icov dT/dp_i: (icov q)_i for the translations.
  const T g[6] = {cq[0], cq[1], cq[2], dot3(q, c3), dot3(q, c4), dot3(q, c5)};
  sums[kScore] += static_cast<S>(score);
  for (int i = 0; i < 6; ++i) sums[kGradient + i] += static_cast<S>(g[i] * de);
  if (!with_hessian) return score;
  // eq. 6.13 entry (i, j): de (-d2 g_i g_j + q' icov d2T/dpidpj + J_j' icov J_i), with
  // (-d2 g_i) g_j evaluated in that order as in the general form.
  T t[6];
  for (int i = 0; i < 6; ++i) t[i] = -d2 * g[i];
  S* h = sums + kHessian;
  // Both indices translations: J_j' icov J_i = icov(i, j).
  h[upper_index(0, 0)] += static_cast<S>(de * (t[0] * g[0] + s00));
  h[upper_index(0, 1)] += static_cast<S>(de * (t[0] * g[1] + s01));
  h[upper_index(0, 2)] += static_cast<S>(de * (t[0] * g[2] + s02));
  h[upper_index(1, 1)] += static_cast<S>(de * (t[1] * g[1] + s11));
  h[upper_index(1, 2)] += static_cast<S>(de * (t[1] * g[2] + s12));
  h[upper_index(2, 2)] += static_cast<S>(de * (t[2] * g[2] + s22));
  // A translation i and a rotation j: J_j' icov J_i = (icov J_j)_i.
  for (int i = 0; i < 3; ++i) {
    h[upper_index(i, 3)] += static_cast<S>(de * (t[i] * g[3] + c3[i]));
    h[upper_index(i, 4)] += static_cast<S>(de * (t[i] * g[4] + c4[i]));
    h[upper_index(i, 5)] += static_cast<S>(de * (t[i] * g[5] + c5[i]));
  }
  // Both rotations: the point Hessian's term (a, b, c without their zero x entry) and
  // J_j' icov J_i in full (J_3 without its zero x entry).
  h[upper_index(3, 3)] += static_cast<S>(de * ((t[3] * g[3] + (cq[1] * H.a[1] + cq[2] * H.a[2])) +
                                                    (j31 * c3[1] + j32 * c3[2])));
  h[upper_index(3, 4)] += static_cast<S>(de * ((t[3] * g[4] + (cq[1] * H.b[1] + cq[2] * H.b[2])) +
                                                    dot3(j4, c3)));
  h[upper_index(3, 5)] += static_cast<S>(de * ((t[3] * g[5] + (cq[1] * H.c[1] + cq[2] * H.c[2])) +
                                                    dot3(j5, c3)));
  h[upper_index(4, 4)] += static_cast<S>(de * ((t[4] * g[4] + dot3(cq, H.d)) + dot3(j4, c4)));
  h[upper_index(4, 5)] += static_cast<S>(de * ((t[4] * g[5] + dot3(cq, H.e)) + dot3(j5, c4)));
  h[upper_index(5, 5)] += static_cast<S>(de * ((t[5] * g[5] + dot3(cq, H.f)) + dot3(j5, c5)));
  return score;
}

/// The Gaussian of one pair (eq. 6.9): cq = icov q, and returns e = exp(-d2 q' icov q / 2).
template <typename T>
NDTCU_HD inline T pair_gaussian(const T* q, const T* icov, T d2, T* cq) {
  sym_mul(icov, q, cq);
  return ndt_exp(-d2 * dot3(q, cq) / T(2));
}

/// One point-voxel pair: pair_gaussian, then accumulate_pair_terms (which see). A caller
/// with several pairs can take all their exponentials first (accumulate_neighbours).
template <typename T, typename S>
NDTCU_FORCE_INLINE NDTCU_HD inline T accumulate_pair(const T* q, const T* icov, const PointJacobian<T>& J,
                                                     const PointHessian<T>& H, T d1, T d2, bool with_hessian,
                                                     S* sums) {
  T cq[3];
  const T e = pair_gaussian(q, icov, d2, cq);
  return accumulate_pair_terms(q, icov, cq, e, J, H, d1, d2, with_hessian, sums);
}

/// A point's pairs summed before its derivatives are taken: the GPU's form of the terms
/// accumulate_pair_terms adds pair by pair. With cq = icov q, de = d1 d2 e and the pair's
/// gradient entry g_i = cq' J_i (J_i = dT/dp_i, the same for all of a point's pairs),
/// eqs. 6.12 and 6.13 summed over a point's pairs factor through three sums that do not
/// involve J or the point Hessian H_ij:
///   score  = sum -d1 e
///   u      = sum de cq                          gradient_i = J_i' u
///   M      = sum de (icov - d2 cq cq')          Hessian_ij = J_i' M J_j + u' H_ij
/// So a pair adds 10 numbers instead of 28 (about a quarter of the arithmetic), and a
/// thread holds neither J nor H while it walks a point's voxels; add_point_derivatives
/// expands them once per point. The same sums, added in another order: the CPU backend keeps
/// accumulate_pair_terms' order, which is PCL's bits; a unit test checks the two forms
/// against each other.
template <typename T>
struct PointPairSums {
  T score;  ///< sum of the pairs' score terms
  T u[3];   ///< sum of d1 d2 e icov q
  T m[6];   ///< sum of d1 d2 e (icov - d2 (icov q)(icov q)'): xx xy xz yy yz zz
};

/// All sums zero.
template <typename T>
NDTCU_HD inline PointPairSums<T> zero_pair_sums() {
  PointPairSums<T> s;
  s.score = T(0);
  for (int a = 0; a < 3; ++a) s.u[a] = T(0);
  for (int e = 0; e < 6; ++e) s.m[e] = T(0);
  return s;
}

/// The 10 numbers one pair (q = T(x) - mu, the voxel's inverse covariance) adds to its
/// point's PointPairSums, in `t` (t.m only `with_hessian`). False when the pair is skipped:
/// the same Gaussian and the same guard as accumulate_pair.
template <typename T>
NDTCU_FORCE_INLINE NDTCU_HD inline bool pair_sum_terms(const T* q, const T* icov, T d1, T d2, bool with_hessian,
                                                       PointPairSums<T>& t) {
  T cq[3];
  const T e = pair_gaussian(q, icov, d2, cq);
  T de;
  if (!pair_weight(e, d1, d2, t.score, de)) return false;
  for (int a = 0; a < 3; ++a) t.u[a] = de * cq[a];
  if (!with_hessian) return true;
  const T w = -d2 * de;
  t.m[0] = de * icov[0] + w * (cq[0] * cq[0]);
  t.m[1] = de * icov[1] + w * (cq[0] * cq[1]);
  t.m[2] = de * icov[2] + w * (cq[0] * cq[2]);
  t.m[3] = de * icov[3] + w * (cq[1] * cq[1]);
  t.m[4] = de * icov[4] + w * (cq[1] * cq[2]);
  t.m[5] = de * icov[5] + w * (cq[2] * cq[2]);
  return true;
}

/// Adds a pair's terms (pair_sum_terms) to its point's sums, each addition rounded on its
/// own (add_rn: never fused with the product that made the term), so that a point's sums
/// are the same bits whether its pairs' terms are added where they were made or after they
/// moved between the threads that share the point (the derivative kernel's lanes).
template <typename T>
NDTCU_FORCE_INLINE NDTCU_HD inline void add_pair_terms(const PointPairSums<T>& t, bool with_hessian,
                                                       PointPairSums<T>& s) {
  s.score = add_rn(s.score, t.score);
  for (int a = 0; a < 3; ++a) s.u[a] = add_rn(s.u[a], t.u[a]);
  if (!with_hessian) return;
  for (int e = 0; e < 6; ++e) s.m[e] = add_rn(s.m[e], t.m[e]);
}

/// Adds one pair to a point's PointPairSums (pair_sum_terms, then add_pair_terms). Returns
/// the pair's score term, or 0 when the pair is skipped.
template <typename T>
NDTCU_FORCE_INLINE NDTCU_HD inline T add_pair_sums(const T* q, const T* icov, T d1, T d2, bool with_hessian,
                                                   PointPairSums<T>& s) {
  PointPairSums<T> t;
  if (!pair_sum_terms(q, icov, d1, d2, with_hessian, t)) return T(0);
  add_pair_terms(t, with_hessian, s);
  return t.score;
}

/// A point's score, gradient and (`with_hessian`) Hessian from its PointPairSums, its point
/// Jacobian and point Hessian (PointPairSums says how), added to `sums`. Written for the
/// structure point_jacobian and point_hessian give (translation columns the unit vectors,
/// no x entry in column 3 nor in a, b, c), as accumulate_pair_terms is.
template <typename T, typename S>
NDTCU_FORCE_INLINE NDTCU_HD inline void add_point_derivatives(const PointPairSums<T>& s, const PointJacobian<T>& J,
                                                              const PointHessian<T>& H, bool with_hessian, S* sums) {
  const T* u = s.u;
  const T j31 = J.col[3][1], j32 = J.col[3][2];
  const T j4[3] = {J.col[4][0], J.col[4][1], J.col[4][2]};
  const T j5[3] = {J.col[5][0], J.col[5][1], J.col[5][2]};
  sums[kScore] += static_cast<S>(s.score);
  sums[kGradient + 0] += static_cast<S>(u[0]);
  sums[kGradient + 1] += static_cast<S>(u[1]);
  sums[kGradient + 2] += static_cast<S>(u[2]);
  sums[kGradient + 3] += static_cast<S>(j31 * u[1] + j32 * u[2]);
  sums[kGradient + 4] += static_cast<S>(dot3(j4, u));
  sums[kGradient + 5] += static_cast<S>(dot3(j5, u));
  if (!with_hessian) return;
  const T* m = s.m;
  // M J_k for the rotation columns (column 3 without its zero x entry).
  const T mj3[3] = {m[1] * j31 + m[2] * j32, m[3] * j31 + m[4] * j32, m[4] * j31 + m[5] * j32};
  T mj4[3], mj5[3];
  sym_mul(m, j4, mj4);
  sym_mul(m, j5, mj5);
  S* h = sums + kHessian;
  h[upper_index(0, 0)] += static_cast<S>(m[0]);
  h[upper_index(0, 1)] += static_cast<S>(m[1]);
  h[upper_index(0, 2)] += static_cast<S>(m[2]);
  h[upper_index(1, 1)] += static_cast<S>(m[3]);
  h[upper_index(1, 2)] += static_cast<S>(m[4]);
  h[upper_index(2, 2)] += static_cast<S>(m[5]);
  for (int i = 0; i < 3; ++i) {
    h[upper_index(i, 3)] += static_cast<S>(mj3[i]);
    h[upper_index(i, 4)] += static_cast<S>(mj4[i]);
    h[upper_index(i, 5)] += static_cast<S>(mj5[i]);
  }
  h[upper_index(3, 3)] += static_cast<S>((j31 * mj3[1] + j32 * mj3[2]) + (u[1] * H.a[1] + u[2] * H.a[2]));
  h[upper_index(3, 4)] += static_cast<S>((j31 * mj4[1] + j32 * mj4[2]) + (u[1] * H.b[1] + u[2] * H.b[2]));
  h[upper_index(3, 5)] += static_cast<S>((j31 * mj5[1] + j32 * mj5[2]) + (u[1] * H.c[1] + u[2] * H.c[2]));
  h[upper_index(4, 4)] += static_cast<S>(dot3(j4, mj4) + dot3(u, H.d));
  h[upper_index(4, 5)] += static_cast<S>(dot3(j4, mj5) + dot3(u, H.e));
  h[upper_index(5, 5)] += static_cast<S>(dot3(j5, mj5) + dot3(u, H.f));
}

/// Transforms a float point by a float 3x4 row-major matrix m the way PCL 1.13's
/// transformPointCloud does on x86 (SSE path of pcl::detail::Transformer<float>::se3):
/// out_r = x m_r0 + (y m_r1 + (z m_r2 + m_r3)).
NDTCU_HD inline void transform_point(const float* m, float x, float y, float z, float* out) {
  for (int r = 0; r < 3; ++r) {
    const float* row = m + 4 * r;
    out[r] = add_rn(mul_rn(x, row[0]), add_rn(mul_rn(y, row[1]), add_rn(mul_rn(z, row[2]), row[3])));
  }
}

/// Per-iteration constants every point needs: the float transform (PCL's matrix for the
/// current pose), the angular terms, and the Gaussian constants.
template <typename T>
struct PoseTerms {
  float m[12];              ///< row-major 3x4 float transform into map-relative coordinates
  AngularTerms<T> angular;  ///< eqs. 6.19 and 6.21 at the current angles
  T d1;                     ///< Gaussian constant d1
  T d2;                     ///< Gaussian constant d2
};

/// What a pose's trigonometry gives the evaluation, and all of it: the double sin/cos of
/// roll, pitch and yaw for the angular terms (with PCL's small-angle rule recorded in
/// flags) and PCL's float transform. Computed once per pose (pose_frame); a host-driven
/// GPU evaluation uploads exactly this (104 bytes), and the device loop writes it per
/// hypothesis. Everything else of PoseTerms follows from it without a trigonometric call.
struct PoseFrame {
  double sincos[6];     ///< cos roll, sin roll, cos pitch, sin pitch, cos yaw, sin yaw (true angles)
  float m[12];          ///< PCL's row-major 3x4 float transform (pose_float_transform)
  unsigned flags;       ///< kSmallRoll | kSmallPitch | kSmallYaw | kWithHessian
};
/// PoseFrame::flags: an angle under the small-angle threshold (its angular terms take
/// c = 1, s = 0), and whether the evaluation wants the Hessian.
enum PoseFrameFlag : unsigned { kSmallRoll = 1u, kSmallPitch = 2u, kSmallYaw = 4u, kWithHessian = 8u };

/// cos (`sine` false) or sin of a float angle, as the CPU's float transform takes them:
/// Eigen's AngleAxisf calls std::cos/std::sin on float, glibc's cosf/sinf, which round
/// correctly but in rare near-halfway cases. The device's cosf/sinf are off by up to 2 ulp,
/// so the device takes the double functions and rounds once, which agrees with glibc's
/// float results except in those rare cases.
NDTCU_HD inline float float_cos_or_sin(float a, bool sine) {
#if defined(__CUDA_ARCH__)
  const double x = static_cast<double>(a);
  return static_cast<float>(sine ? ::sin(x) : ::cos(x));
#else
  return sine ? ::sinf(a) : ::cosf(a);
#endif
}

/// Values a PoseFrame is made of that take a trigonometric function: 0-5 the cos and sin of
/// roll, pitch and yaw (in double), 6-11 the same of each angle rounded to float, as the
/// float transform takes them (float_cos_or_sin). Independent of each other, so the device
/// takes them on 12 threads at once; pose_frame_from puts them together.
constexpr int kFrameTrig = 12;

/// Value t (< kFrameTrig) of pose [x y z roll pitch yaw].
NDTCU_HD inline double frame_trig(const double* pose, int t) {
  const double angle = pose[3 + (t % 6) / 2];
  const bool sine = t % 2 == 1;
#if defined(__CUDA_ARCH__)
  // One path for every t on the device (sincos, then the value picked; float_cos_or_sin is
  // the double function of the angle rounded to float, rounded): a warp that takes the 12
  // values at once runs it once, where sin on half its lanes and cos on the others ran one
  // after the other. CUDA's sincos gives its sin's and cos's bits.
  const double x = t < 6 ? angle : static_cast<double>(static_cast<float>(angle));
  double s, c;
  ::sincos(x, &s, &c);
  const double v = sine ? s : c;
  return t < 6 ? v : static_cast<double>(static_cast<float>(v));
#else
  if (t < 6) return sine ? ndt_sin(angle) : ndt_cos(angle);
  return static_cast<double>(float_cos_or_sin(static_cast<float>(angle), sine));
#endif
}

/// PCL's convertTransform in float (and Autoware's copy of it): Translation3f(t) *
/// AngleAxisf(roll, X) * AngleAxisf(pitch, Y) * AngleAxisf(yaw, Z), as the row-major 3x4
/// matrix the points are transformed with, computed with Eigen's float operations:
///  - AngleAxisf::toRotationMatrix about a unit axis gives the diagonal entry on the axis
///    as (1 - c) + c (not always 1 in float), the other diagonal entries c, and +-s;
///  - the products Rx Ry and (Rx Ry) Rz have, per entry, at most two non-zero terms, so
///    their float sums do not depend on the order Eigen adds them in.
/// A unit test checks the bits against Eigen's expression.
/// `trig`: the pose's frame_trig values 6-11.
NDTCU_HD inline void pose_float_transform_from(const double* pose, const double* trig, float* m) {
  float c[3], s[3], e[3];
  for (int a = 0; a < 3; ++a) {
    c[a] = static_cast<float>(trig[6 + 2 * a]);
    s[a] = static_cast<float>(trig[7 + 2 * a]);
    e[a] = add_rn(1.0f - c[a], c[a]);  // the diagonal entry on the rotation axis
  }
  // B = Rx Ry, entry by entry (Rx = [ex 0 0; 0 cx -sx; 0 sx cx], Ry = [cy 0 sy; 0 ey 0; -sy 0 cy]).
  const float b00 = mul_rn(e[0], c[1]), b02 = mul_rn(e[0], s[1]);
  const float b10 = mul_rn(s[0], s[1]), b11 = mul_rn(c[0], e[1]), b12 = -mul_rn(s[0], c[1]);
  const float b20 = -mul_rn(c[0], s[1]), b21 = mul_rn(s[0], e[1]), b22 = mul_rn(c[0], c[1]);
  // M = B Rz (Rz = [cz -sz 0; sz cz 0; 0 0 ez]); B's (0, 1) entry is zero.
  const float cz = c[2], sz = s[2], ez = e[2];
  m[0] = mul_rn(b00, cz);
  m[1] = mul_rn(b00, -sz);
  m[2] = mul_rn(b02, ez);
  m[4] = add_rn(mul_rn(b10, cz), mul_rn(b11, sz));
  m[5] = add_rn(mul_rn(b10, -sz), mul_rn(b11, cz));
  m[6] = mul_rn(b12, ez);
  m[8] = add_rn(mul_rn(b20, cz), mul_rn(b21, sz));
  m[9] = add_rn(mul_rn(b20, -sz), mul_rn(b21, cz));
  m[10] = mul_rn(b22, ez);
  for (int r = 0; r < 3; ++r) m[4 * r + 3] = static_cast<float>(pose[r]);
}

/// The float transform of a pose (pose_float_transform_from with its frame_trig values).
NDTCU_HD inline void pose_float_transform(const double* pose, float* m) {
  double trig[kFrameTrig];
  for (int t = 6; t < kFrameTrig; ++t) trig[t] = frame_trig(pose, t);
  pose_float_transform_from(pose, trig, m);
}

/// The PoseFrame of pose [x y z roll pitch yaw] (map-relative) from its frame_trig values.
NDTCU_HD inline PoseFrame pose_frame_from(const double* pose, const double* trig, bool with_hessian) {
  PoseFrame f;
  f.flags = with_hessian ? kWithHessian : 0u;
  for (int a = 0; a < 3; ++a) {
    const double angle = pose[3 + a];
    f.sincos[2 * a] = trig[2 * a];
    f.sincos[2 * a + 1] = trig[2 * a + 1];
    // PCL's and Autoware's small-angle rule (see small_angle_cos_sin).
    if ((angle < 0.0 ? -angle : angle) < 10e-5) f.flags |= (1u << a);
  }
  pose_float_transform_from(pose, trig, f.m);
  return f;
}

/// The PoseFrame of pose [x y z roll pitch yaw] (map-relative).
NDTCU_HD inline PoseFrame pose_frame(const double* pose, bool with_hessian) {
  double trig[kFrameTrig];
  for (int t = 0; t < kFrameTrig; ++t) trig[t] = frame_trig(pose, t);
  return pose_frame_from(pose, trig, with_hessian);
}

/// The pose terms of a PoseFrame and the Gaussian constants: the float transform as it is,
/// the angular terms from the sin/cos with the small-angle rule applied.
template <typename T>
NDTCU_HD inline void pose_terms(const PoseFrame& f, T d1, T d2, PoseTerms<T>& t) {
  for (int k = 0; k < 12; ++k) t.m[k] = f.m[k];
  const bool sr = (f.flags & kSmallRoll) != 0, sp = (f.flags & kSmallPitch) != 0, sy = (f.flags & kSmallYaw) != 0;
  t.angular = angular_terms_sincos<T>(sr ? T(1) : T(f.sincos[0]), sr ? T(0) : T(f.sincos[1]),
                                      sp ? T(1) : T(f.sincos[2]), sp ? T(0) : T(f.sincos[3]),
                                      sy ? T(1) : T(f.sincos[4]), sy ? T(0) : T(f.sincos[5]));
  t.d1 = d1;
  t.d2 = d2;
}

}  // namespace ndtcu::math
