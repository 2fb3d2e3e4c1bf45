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
template <typename T>
struct PointJacobian {
  T col[6][3];  ///< column k = dT/dp_k
};

/// Second derivatives d^2 T(x, p) / dp_i dp_j (eq. 6.20). Only the rotation block is
/// non-zero: vectors a, b, c, d, e, f of eq. 6.21 at (3,3) (3,4) (3,5) (4,4) (4,5) (5,5).
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

/// The 3-vector d^2 T / dp_i dp_j, or nullptr where it is zero (any translation index).
template <typename T>
NDTCU_HD inline const T* point_hessian_block(const PointHessian<T>& H, int i, int j) {
  if (i < 3 || j < 3) return nullptr;
  const int lo = i < j ? i : j, hi = i < j ? j : i;
  if (lo == 3) return hi == 3 ? H.a : hi == 4 ? H.b : H.c;
  if (lo == 4) return hi == 4 ? H.d : H.e;
  return H.f;
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

/// One point-voxel pair: q = T(x) - mu, icov the voxel's inverse covariance (6 unique
/// entries). Adds the pair's score term (eq. 6.9) to sums[kScore], its gradient (eq. 6.12)
/// and, when `with_hessian`, its Hessian (eq. 6.13, upper triangle), exactly as PCL's
/// updateDerivatives. Returns the score term, or 0 when the pair is skipped because
/// d2 * e > 1, d2 * e < 0 or NaN (PCL's and Autoware's guard against invalid values).
template <typename T>
NDTCU_HD inline T accumulate_pair(const T* q, const T* icov, const PointJacobian<T>& J, const PointHessian<T>& H,
                                  T d1, T d2, bool with_hessian, double* sums) {
  T cq[3];
  sym_mul(icov, q, cq);
  const T e = ndt_exp(-d2 * dot3(q, cq) / T(2));
  const T score = -d1 * e;
  T de = d2 * e;
  if (de > T(1) || de < T(0) || de != de) return T(0);
  de *= d1;  // d1 d2 e: the factor shared by eqs. 6.12 and 6.13
  T cj[6][3];  // icov * dT/dp_i
  T g[6];      // q' icov dT/dp_i
  for (int i = 0; i < 6; ++i) {
    sym_mul(icov, J.col[i], cj[i]);
    g[i] = dot3(q, cj[i]);
  }
  sums[kScore] += static_cast<double>(score);
  for (int i = 0; i < 6; ++i) sums[kGradient + i] += static_cast<double>(g[i] * de);
  if (with_hessian) {
    for (int i = 0; i < 6; ++i) {
      for (int j = i; j < 6; ++j) {
        const T* hij = point_hessian_block(H, i, j);
        const T second = hij ? dot3(cq, hij) : T(0);  // q' icov d2T/dpidpj
        sums[kHessian + upper_index(i, j)] +=
            static_cast<double>(de * (-d2 * g[i] * g[j] + second + dot3(J.col[j], cj[i])));
      }
    }
  }
  return score;
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
  int n = 0;
  switch (search) {
    case Search::Radius: {
      float dist[kMaxNeighbours];
      for (int dk = -1; dk <= 1; ++dk) {
        for (int dj = -1; dj <= 1; ++dj) {
          for (int di = -1; di <= 1; ++di) {
            const std::int32_t v = find_voxel(g, ci + di, cj + dj, ck + dk);
            if (v < 0) continue;
            // FLANN's L2_Simple<float>: result = 0; result += diff * diff, axis by axis.
            const float dx = p[0] - g.centroid[0][v];
            const float dy = p[1] - g.centroid[1][v];
            const float dz = p[2] - g.centroid[2][v];
            const float d = add_rn(add_rn(mul_rn(dx, dx), mul_rn(dy, dy)), mul_rn(dz, dz));
            if (!(d < g.radius_sq)) continue;
            // Insertion by (distance, index): FLANN sorts DistanceIndex pairs that way.
            int at = n;
            while (at > 0 && (dist[at - 1] > d || (dist[at - 1] == d && out[at - 1] > v))) {
              dist[at] = dist[at - 1];
              out[at] = out[at - 1];
              --at;
            }
            dist[at] = d;
            out[at] = v;
            ++n;
          }
        }
      }
      return n;
    }
    case Search::Direct27: {
      const std::int32_t c = find_voxel(g, ci, cj, ck);
      if (c >= 0) out[n++] = c;
      for (int dk = -1; dk <= 1; ++dk) {
        for (int dj = -1; dj <= 1; ++dj) {
          for (int di = -1; di <= 1; ++di) {
            if (di == 0 && dj == 0 && dk == 0) continue;
            const std::int32_t v = find_voxel(g, ci + di, cj + dj, ck + dk);
            if (v >= 0) out[n++] = v;
          }
        }
      }
      return n;
    }
    case Search::Direct7: {
      // Centre, then +x -x +y -y +z -z (PCL's getFaceNeighborsAtPoint order).
      for (int m = 0; m < 7; ++m) {
        std::int64_t o[3] = {0, 0, 0};
        if (m > 0) o[(m - 1) / 2] = (m % 2 == 1) ? 1 : -1;
        const std::int32_t v = find_voxel(g, ci + o[0], cj + o[1], ck + o[2]);
        if (v >= 0) out[n++] = v;
      }
      return n;
    }
    case Search::Direct1:
    default: {
      const std::int32_t v = find_voxel(g, ci, cj, ck);
      if (v >= 0) out[n++] = v;
      return n;
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

/// All of one source point's contributions (PCL's computeDerivatives loop body):
/// transform it, find its voxels, add every pair's terms to `sums`, and the point's best
/// score term to the NVTL sum (Autoware's nearest-voxel transformation likelihood).
/// One point-voxel pair of transformed point `tp` and voxel `v`: q = tp - mu in T, the
/// voxel's inverse covariance, and accumulate_pair. Returns the pair's score term.
template <typename T>
NDTCU_HD inline T accumulate_voxel(const VoxelGridView& g, std::int32_t v, const float* tp, const PointJacobian<T>& J,
                                   const PointHessian<T>& H, const PoseTerms<T>& pt, bool with_hessian, double* sums) {
  const T q[3] = {static_cast<T>(tp[0]) - static_cast<T>(g.mean[0][v]),
                  static_cast<T>(tp[1]) - static_cast<T>(g.mean[1][v]),
                  static_cast<T>(tp[2]) - static_cast<T>(g.mean[2][v])};
  const T icov[6] = {static_cast<T>(g.icov[0][v]), static_cast<T>(g.icov[1][v]), static_cast<T>(g.icov[2][v]),
                     static_cast<T>(g.icov[3][v]), static_cast<T>(g.icov[4][v]), static_cast<T>(g.icov[5][v])};
  return accumulate_pair(q, icov, J, H, pt.d1, pt.d2, with_hessian, sums);
}

template <typename T>
NDTCU_HD inline void accumulate_point_derivatives(const VoxelGridView& g, Search search, const PoseTerms<T>& pt,
                                                  float x, float y, float z, const PointJacobian<T>& J,
                                                  const PointHessian<T>& H, bool with_hessian, double* sums);

template <typename T>
NDTCU_HD inline void accumulate_point(const VoxelGridView& g, Search search, const PoseTerms<T>& pt, float x, float y,
                                      float z, bool with_hessian, double* sums) {
  const T xd = static_cast<T>(x), yd = static_cast<T>(y), zd = static_cast<T>(z);
  const PointJacobian<T> J = point_jacobian(pt.angular, xd, yd, zd);
  PointHessian<T> H;
  if (with_hessian) {
    H = point_hessian(pt.angular, xd, yd, zd);
  } else {
    for (int r = 0; r < 3; ++r) H.a[r] = H.b[r] = H.c[r] = H.d[r] = H.e[r] = H.f[r] = T(0);
  }
  accumulate_point_derivatives(g, search, pt, x, y, z, J, H, with_hessian, sums);
}

/// accumulate_point with the point's Jacobian and point Hessian given (computed earlier,
/// e.g. by a separate GPU pass into per-point buffers).
template <typename T>
NDTCU_HD inline void accumulate_point_derivatives(const VoxelGridView& g, Search search, const PoseTerms<T>& pt,
                                                  float x, float y, float z, const PointJacobian<T>& J,
                                                  const PointHessian<T>& H, bool with_hessian, double* sums) {
  float tp[3];
  transform_point(pt.m, x, y, z, tp);
  std::int32_t nb[kMaxNeighbours];
  const int n = find_neighbours(g, search, tp, nb);
  if (n == 0) return;
  T best = T(0);
  for (int k = 0; k < n; ++k) {
    const T s = accumulate_voxel(g, nb[k], tp, J, H, pt, with_hessian, sums);
    if (s > best) best = s;
  }
  sums[kNvtlSum] += static_cast<double>(best);
  sums[kCorrespondences] += static_cast<double>(n);
  sums[kPointsMatched] += 1.0;
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
/// the pairs are added differs from accumulate_point's distance order. Adds the pairs'
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
