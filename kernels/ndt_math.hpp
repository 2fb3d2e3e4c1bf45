#pragma once
/// \file
/// The per-point NDT math, written once for the CPU backend and the CUDA kernels.
///
/// Everything here is a plain function on plain data (`NDTCU_HD inline`), so nvcc and the
/// host compiler take the same text. It reproduces PCL 1.13's
/// pcl::NormalDistributionsTransform (registration/impl/ndt.hpp) and Autoware's multigrid
/// NDT (ndt_omp/multigrid_ndt_omp_impl.hpp); equation numbers refer to Magnusson, "The
/// Three-Dimensional Normal-Distributions Transform", PhD thesis, 2009.
///
/// Precision follows the references: points are transformed in float (PCL transforms
/// clouds with a float matrix), the neighbour search runs in float (FLANN's L2 distance on
/// float centroids), and everything after (q = T(x) - mu, score, derivatives) is in the
/// template scalar, double for the reference.

#include <cstdint>

#if defined(__CUDACC__)
#define NDTCU_HD __host__ __device__
#else
#define NDTCU_HD
#endif

// Inlining the host compiler must not decline. Out of line, accumulate_pair read its
// caller's scalar stores with packed loads, which store forwarding cannot serve: measured
// about 10% of a CPU evaluation. The device compiler inlines these functions on its own.
#if defined(__GNUC__) && !defined(__CUDACC__)
#define NDTCU_FORCE_INLINE __attribute__((always_inline))
#else
#define NDTCU_FORCE_INLINE
#endif

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
template <typename T>
NDTCU_FORCE_INLINE NDTCU_HD inline T accumulate_pair_terms(const T* q, const T* icov, const T* cq, T e,
                                                           const PointJacobian<T>& J, const PointHessian<T>& H, T d1,
                                                           T d2, bool with_hessian, double* sums) {
  const T score = -d1 * e;
  T de = d2 * e;
  if (de > T(1) || de < T(0) || de != de) return T(0);
  de *= d1;  // d1 d2 e: the factor shared by eqs. 6.12 and 6.13
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
  sums[kScore] += static_cast<double>(score);
  for (int i = 0; i < 6; ++i) sums[kGradient + i] += static_cast<double>(g[i] * de);
  if (!with_hessian) return score;
  // eq. 6.13 entry (i, j): de (-d2 g_i g_j + q' icov d2T/dpidpj + J_j' icov J_i), with
  // (-d2 g_i) g_j evaluated in that order as in the general form.
  T t[6];
  for (int i = 0; i < 6; ++i) t[i] = -d2 * g[i];
  double* h = sums + kHessian;
  // Both indices translations: J_j' icov J_i = icov(i, j).
  h[upper_index(0, 0)] += static_cast<double>(de * (t[0] * g[0] + s00));
  h[upper_index(0, 1)] += static_cast<double>(de * (t[0] * g[1] + s01));
  h[upper_index(0, 2)] += static_cast<double>(de * (t[0] * g[2] + s02));
  h[upper_index(1, 1)] += static_cast<double>(de * (t[1] * g[1] + s11));
  h[upper_index(1, 2)] += static_cast<double>(de * (t[1] * g[2] + s12));
  h[upper_index(2, 2)] += static_cast<double>(de * (t[2] * g[2] + s22));
  // A translation i and a rotation j: J_j' icov J_i = (icov J_j)_i.
  for (int i = 0; i < 3; ++i) {
    h[upper_index(i, 3)] += static_cast<double>(de * (t[i] * g[3] + c3[i]));
    h[upper_index(i, 4)] += static_cast<double>(de * (t[i] * g[4] + c4[i]));
    h[upper_index(i, 5)] += static_cast<double>(de * (t[i] * g[5] + c5[i]));
  }
  // Both rotations: the point Hessian's term (a, b, c without their zero x entry) and
  // J_j' icov J_i in full (J_3 without its zero x entry).
  h[upper_index(3, 3)] += static_cast<double>(de * ((t[3] * g[3] + (cq[1] * H.a[1] + cq[2] * H.a[2])) +
                                                    (j31 * c3[1] + j32 * c3[2])));
  h[upper_index(3, 4)] += static_cast<double>(de * ((t[3] * g[4] + (cq[1] * H.b[1] + cq[2] * H.b[2])) +
                                                    dot3(j4, c3)));
  h[upper_index(3, 5)] += static_cast<double>(de * ((t[3] * g[5] + (cq[1] * H.c[1] + cq[2] * H.c[2])) +
                                                    dot3(j5, c3)));
  h[upper_index(4, 4)] += static_cast<double>(de * ((t[4] * g[4] + dot3(cq, H.d)) + dot3(j4, c4)));
  h[upper_index(4, 5)] += static_cast<double>(de * ((t[4] * g[5] + dot3(cq, H.e)) + dot3(j5, c4)));
  h[upper_index(5, 5)] += static_cast<double>(de * ((t[5] * g[5] + dot3(cq, H.f)) + dot3(j5, c5)));
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
template <typename T>
NDTCU_FORCE_INLINE NDTCU_HD inline T accumulate_pair(const T* q, const T* icov, const PointJacobian<T>& J,
                                                     const PointHessian<T>& H, T d1, T d2, bool with_hessian,
                                                     double* sums) {
  T cq[3];
  const T e = pair_gaussian(q, icov, d2, cq);
  return accumulate_pair_terms(q, icov, cq, e, J, H, d1, d2, with_hessian, sums);
}

/// Float arithmetic that nvcc must not fuse, so the CPU and the GPU round alike: PCL's
/// float transform and FLANN's float distance are evaluated without FMA on x86.
NDTCU_HD inline float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
NDTCU_HD inline float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

/// The same for doubles, and float subtraction and division (the voxel filter's cell index).
NDTCU_HD inline double mul_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
NDTCU_HD inline double add_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
NDTCU_HD inline float sub_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
NDTCU_HD inline float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
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

/// How the voxels around a transformed point are chosen.
enum class Search : int {
  Radius = 0,    ///< every voxel centroid closer than the resolution (PCL, Autoware)
  Direct27 = 1,  ///< the 3x3x3 lattice block around the point's voxel
  Direct7 = 2,   ///< the point's voxel and its 6 face neighbours
  Direct1 = 3,   ///< the point's voxel only
};

/// Most neighbours any search returns.
constexpr int kMaxNeighbours = 27;

/// Lattice coordinates are packed into 21 bits each, offset by 2^20.
constexpr std::int32_t kKeyOffset = 1 << 20;
/// Key of an empty hash-table slot.
constexpr std::uint64_t kEmptyKey = ~std::uint64_t(0);

/// Packs lattice coordinates (each in [-2^20, 2^20)) into one 64-bit key.
NDTCU_HD inline std::uint64_t pack_key(std::int32_t i, std::int32_t j, std::int32_t k) {
  return static_cast<std::uint64_t>(i + kKeyOffset) | (static_cast<std::uint64_t>(j + kKeyOffset) << 21) |
         (static_cast<std::uint64_t>(k + kKeyOffset) << 42);
}

/// True when lattice coordinates fit pack_key.
NDTCU_HD inline bool key_in_range(std::int64_t i, std::int64_t j, std::int64_t k) {
  return i >= -kKeyOffset && i < kKeyOffset && j >= -kKeyOffset && j < kKeyOffset && k >= -kKeyOffset &&
         k < kKeyOffset;
}

/// Hash of a packed key (the splitmix64 finalizer: every input bit reaches every output bit).
NDTCU_HD inline std::uint64_t hash_key(std::uint64_t k) {
  k ^= k >> 30;
  k *= 0xbf58476d1ce4e5b9ULL;
  k ^= k >> 27;
  k *= 0x94d049bb133111ebULL;
  k ^= k >> 31;
  return k;
}

/// Read-only view of a voxel map for the per-point math: structure-of-arrays, plain
/// pointers (host or device memory), plus an open-addressing hash from lattice key to
/// voxel index (linear probing, capacity a power of two).
struct VoxelGridView {
  std::int32_t size;                ///< number of voxels
  const double* mean[3];            ///< voxel means, map-relative metres
  const double* icov[6];            ///< inverse covariances: xx xy xz yy yz zz
  const float* centroid[3];         ///< float centroids used by the radius search
  const std::uint64_t* table_keys;  ///< hash slots: packed key or kEmptyKey
  const std::int32_t* table_values; ///< hash slots: voxel index
  std::uint64_t table_mask;         ///< capacity - 1
  float inv_resolution;             ///< 1 / resolution in float, as PCL's inverse leaf size
  float radius_sq;                  ///< squared search radius in float, as FLANN compares it
  /// Optional dense index over the occupied lattice box (voxel index or -1 per cell, x
  /// fastest): one load per lookup instead of a probe sequence. Null: the hash is used.
  const std::int32_t* dense;
  std::int64_t dense_min[3];   ///< lattice cell of dense[0]
  std::int64_t dense_dims[3];  ///< box size in cells along x, y, z
};

/// Voxel index for lattice cell (i, j, k), or -1.
NDTCU_HD inline std::int32_t find_voxel(const VoxelGridView& g, std::int64_t i, std::int64_t j, std::int64_t k) {
  if (g.dense) {
    const std::int64_t a = i - g.dense_min[0], b = j - g.dense_min[1], c = k - g.dense_min[2];
    // One unsigned comparison per axis rejects both sides of the box.
    if (static_cast<std::uint64_t>(a) >= static_cast<std::uint64_t>(g.dense_dims[0]) ||
        static_cast<std::uint64_t>(b) >= static_cast<std::uint64_t>(g.dense_dims[1]) ||
        static_cast<std::uint64_t>(c) >= static_cast<std::uint64_t>(g.dense_dims[2])) {
      return -1;
    }
    return g.dense[(c * g.dense_dims[1] + b) * g.dense_dims[0] + a];
  }
  if (!key_in_range(i, j, k)) return -1;
  const std::uint64_t key = pack_key(static_cast<std::int32_t>(i), static_cast<std::int32_t>(j),
                                     static_cast<std::int32_t>(k));
  std::uint64_t slot = hash_key(key) & g.table_mask;
  for (;;) {
    const std::uint64_t stored = g.table_keys[slot];
    if (stored == key) return g.table_values[slot];
    if (stored == kEmptyKey) return -1;
    slot = (slot + 1) & g.table_mask;
  }
}

/// Lattice cell of a map-relative float coordinate: floor(p * (1/r)) with the inverse in
/// float, as pcl::VoxelGridCovariance computes it.
/// Non-finite or huge coordinates give an index outside key_in_range (never a cast of
/// NaN or infinity, which would be undefined).
NDTCU_HD inline std::int64_t lattice_index(float p, float inv_resolution) {
  const float scaled = ::floorf(mul_rn(p, inv_resolution));
  if (!(scaled > -1.0e9f && scaled < 1.0e9f)) return std::int64_t(1) << 40;
  return static_cast<std::int64_t>(scaled);
}

/// Where lattice cell (i, j, k) and its 26 neighbours all lie in g's dense box: the dense
/// entry of (i, j, k), from which neighbour (i + di, j + dj, k + dk) is the entry
/// di + dj * dims[0] + dk * dims[0] * dims[1] on, one load with no bounds test. Null
/// without a dense index or near the box's faces (the caller then takes find_voxel).
NDTCU_HD inline const std::int32_t* dense_block_centre(const VoxelGridView& g, std::int64_t i, std::int64_t j,
                                                       std::int64_t k) {
  if (!g.dense) return nullptr;
  const std::int64_t a = i - g.dense_min[0], b = j - g.dense_min[1], c = k - g.dense_min[2];
  if (a < 1 || a > g.dense_dims[0] - 2 || b < 1 || b > g.dense_dims[1] - 2 || c < 1 || c > g.dense_dims[2] - 2) {
    return nullptr;
  }
  return g.dense + (c * g.dense_dims[1] + b) * g.dense_dims[0] + a;
}

/// The voxels around transformed point p (map-relative float), in a fixed order:
///  - Radius: every voxel whose float centroid has squared distance < radius_sq
///    (strict, FLANN's RadiusResultSet), found in the 3x3x3 block (exact for a radius up
///    to the resolution), sorted by (float squared distance, voxel index) as PCL's sorted
///    FLANN radius search returns them; voxel indices follow PCL's centroid order.
///  - Direct27 / Direct7 / Direct1: the point's cell first, then the others (Direct7:
///    +x -x +y -y +z -z, as PCL's getFaceNeighborsAtPoint; Direct27: z, y, x ascending).
/// Returns the count; `out` needs kMaxNeighbours slots.
NDTCU_HD inline int find_neighbours(const VoxelGridView& g, Search search, const float* p, std::int32_t* out) {
  if (g.size == 0) return 0;
  const std::int64_t ci = lattice_index(p[0], g.inv_resolution);
  const std::int64_t cj = lattice_index(p[1], g.inv_resolution);
  const std::int64_t ck = lattice_index(p[2], g.inv_resolution);
  // With the block inside the dense box every cell is one load at a fixed stride.
  const std::int32_t* block = dense_block_centre(g, ci, cj, ck);
  const std::int64_t sy = g.dense_dims[0], sz = g.dense_dims[0] * g.dense_dims[1];
  auto cell = [&](int di, int dj, int dk) -> std::int32_t {
    return block ? block[di + dj * sy + dk * sz] : find_voxel(g, ci + di, cj + dj, ck + dk);
  };
  // Cells are appended without a branch (written, then counted when occupied): whether a
  // cell holds a voxel is data the branch predictor cannot learn.
  int n = 0;
  switch (search) {
    case Search::Radius: {
      float dist[kMaxNeighbours];
      for (int dk = -1; dk <= 1; ++dk) {
        for (int dj = -1; dj <= 1; ++dj) {
          for (int di = -1; di <= 1; ++di) {
            const std::int32_t v = cell(di, dj, dk);
            const std::int32_t u = v < 0 ? 0 : v;  // an empty cell measures to voxel 0, then is dropped
            // FLANN's L2_Simple<float>: result = 0; result += diff * diff, axis by axis.
            const float dx = p[0] - g.centroid[0][u];
            const float dy = p[1] - g.centroid[1][u];
            const float dz = p[2] - g.centroid[2][u];
            const float d = add_rn(add_rn(mul_rn(dx, dx), mul_rn(dy, dy)), mul_rn(dz, dz));
            dist[n] = d;
            out[n] = v;
            n += (v >= 0) & (d < g.radius_sq);
          }
        }
      }
      // Sorted by (distance, index): FLANN sorts DistanceIndex pairs that way.
      for (int k = 1; k < n; ++k) {
        const float d = dist[k];
        const std::int32_t v = out[k];
        int at = k;
        while (at > 0 && (dist[at - 1] > d || (dist[at - 1] == d && out[at - 1] > v))) {
          dist[at] = dist[at - 1];
          out[at] = out[at - 1];
          --at;
        }
        dist[at] = d;
        out[at] = v;
      }
      return n;
    }
    case Search::Direct27: {
      out[0] = cell(0, 0, 0);
      n = out[0] >= 0;
      for (int dk = -1; dk <= 1; ++dk) {
        for (int dj = -1; dj <= 1; ++dj) {
          for (int di = -1; di <= 1; ++di) {
            if (di == 0 && dj == 0 && dk == 0) continue;
            out[n] = cell(di, dj, dk);
            n += out[n] >= 0;
          }
        }
      }
      return n;
    }
    case Search::Direct7: {
      // Centre, then +x -x +y -y +z -z (PCL's getFaceNeighborsAtPoint order).
      const int face[7][3] = {{0, 0, 0}, {1, 0, 0}, {-1, 0, 0}, {0, 1, 0}, {0, -1, 0}, {0, 0, 1}, {0, 0, -1}};
      for (int m = 0; m < 7; ++m) {
        out[n] = cell(face[m][0], face[m][1], face[m][2]);
        n += out[n] >= 0;
      }
      return n;
    }
    case Search::Direct1:
    default: {
      out[0] = find_voxel(g, ci, cj, ck);
      return out[0] >= 0 ? 1 : 0;
    }
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

/// The inputs of the pair of transformed point `tp` and voxel `v`: q = tp - mu in T and the
/// voxel's inverse covariance.
template <typename T>
NDTCU_HD inline void voxel_pair(const VoxelGridView& g, std::int32_t v, const float* tp, T* q, T* icov) {
  for (int a = 0; a < 3; ++a) q[a] = static_cast<T>(tp[a]) - static_cast<T>(g.mean[a][v]);
  for (int e = 0; e < 6; ++e) icov[e] = static_cast<T>(g.icov[e][v]);
}

/// One point-voxel pair of transformed point `tp` and voxel `v` (voxel_pair and
/// accumulate_pair). Returns the pair's score term.
template <typename T>
NDTCU_HD inline T accumulate_voxel(const VoxelGridView& g, std::int32_t v, const float* tp, const PointJacobian<T>& J,
                                   const PointHessian<T>& H, const PoseTerms<T>& pt, bool with_hessian, double* sums) {
  T q[3], icov[6];
  voxel_pair(g, v, tp, q, icov);
  return accumulate_pair(q, icov, J, H, pt.d1, pt.d2, with_hessian, sums);
}

/// The pairs of transformed point `tp` with its `n` > 0 voxels `nb` (in find_neighbours'
/// order), then the point's best score term to the NVTL sum (Autoware's nearest-voxel
/// transformation likelihood) and its counts. The same terms as accumulate_voxel pair by
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
  sums[kNvtlSum] += static_cast<double>(best);
  sums[kCorrespondences] += static_cast<double>(n);
  sums[kPointsMatched] += 1.0;
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

/// Number of lattice cells a search visits around a point.
NDTCU_HD inline int search_cells(Search search) {
  return search == Search::Direct7 ? 7 : search == Search::Direct1 ? 1 : 27;
}

/// Lattice offset of cell m of a search, in lattice order: Radius and Direct27 z, y, x
/// ascending over the 3x3x3 block; Direct7 the centre, then +x -x +y -y +z -z.
NDTCU_HD inline void search_cell_offset(Search search, int m, int& di, int& dj, int& dk) {
  if (search == Search::Radius || search == Search::Direct27) {
    di = m % 3 - 1;
    dj = (m / 3) % 3 - 1;
    dk = m / 9 - 1;
    return;
  }
  di = dj = dk = 0;
  if (search == Search::Direct7 && m > 0) {
    const int d = (m % 2 == 1) ? 1 : -1;
    if (m <= 2) di = d;
    else if (m <= 4) dj = d;
    else dk = d;
  }
}

/// The share of one point's work that one of `stride` cooperating threads does: cells
/// first, first + stride, ... of the search, in lattice order (no sort, no neighbour
/// array: every load of a cell is independent of the other cells'). The same voxel set as
/// find_neighbours, the same per-pair terms (accumulate_voxel); only the order in which
/// the pairs are added differs from accumulate_point_pairs' distance order. Adds the pairs'
/// terms to `sums`, raises `best` to the best score term found and returns the number of
/// pairs; the caller combines `best` (max) and the counts over the point's threads and
/// adds the NVTL and match counts once. `tp` is the transformed point.
template <typename T>
NDTCU_HD inline int accumulate_point_cells(const VoxelGridView& g, Search search, const PoseTerms<T>& pt,
                                           const float* tp, const PointJacobian<T>& J, const PointHessian<T>& H,
                                           bool with_hessian, int first, int stride, double* sums, T& best) {
  if (g.size == 0) return 0;
  const std::int64_t ci = lattice_index(tp[0], g.inv_resolution);
  const std::int64_t cj = lattice_index(tp[1], g.inv_resolution);
  const std::int64_t ck = lattice_index(tp[2], g.inv_resolution);
  const int cells = search_cells(search);
  int pairs = 0;
  for (int m = first; m < cells; m += stride) {
    int di, dj, dk;
    search_cell_offset(search, m, di, dj, dk);
    const std::int32_t v = find_voxel(g, ci + di, cj + dj, ck + dk);
    if (v < 0) continue;
    if (search == Search::Radius) {
      // The same float distance test as find_neighbours (FLANN's L2_Simple<float>).
      const float dx = tp[0] - g.centroid[0][v];
      const float dy = tp[1] - g.centroid[1][v];
      const float dz = tp[2] - g.centroid[2][v];
      const float d = add_rn(add_rn(mul_rn(dx, dx), mul_rn(dy, dy)), mul_rn(dz, dz));
      if (!(d < g.radius_sq)) continue;
    }
    const T s = accumulate_voxel(g, v, tp, J, H, pt, with_hessian, sums);
    if (s > best) best = s;
    ++pairs;
  }
  return pairs;
}

}  // namespace ndtcu::math
