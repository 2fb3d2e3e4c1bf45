#pragma once
/// \file
/// One voxel's normal distribution from its points, written once for the CPU map build
/// (src/map/voxel_map.cpp) and the CUDA one (src/cuda/cuda_voxel_build.cu): the sums, the mean and
/// covariance in both conventions, PCL's eigenvalue inflation with a 3x3 symmetric
/// eigensolver, and the inverse. The arithmetic is unfused on both sides (ndt_hd.hpp), so
/// a cell whose points are added in the same order gets the same bits on the CPU and the
/// GPU.
///
/// The rules are pcl::VoxelGridCovariance::applyFilter's (PCL 1.13): mean sum x / n in
/// double, the single-pass covariance (sum x x' - sum x mu') / (n - 1) (Autoware's
/// multigrid NDT starts the sum of x x' at the identity), eigenvalues below
/// eigenvalue_ratio * lambda_max raised to it and the covariance rebuilt as V D V^-1, the
/// voxel dropped for a negative or zero eigenvalue or an inverse that is not finite. The
/// eigensolver is cyclic Jacobi, not Eigen's tridiagonal QR (which has no device build):
/// eigenvalues agree with Eigen's to about 1e-15 of the largest, so a rebuilt covariance
/// and its inverse differ from PCL's in the last bits only.

#include "ndt_hd.hpp"

#include <math.h>

#include <cstdint>

namespace ndtcu::math {

/// A cell's running sums: its points are added one at a time, in the order that fixes
/// the bits (the CPU and the GPU both add a cell's points in input order).
struct VoxelSums {
  double sum[3];
  double sxx[3][3];  ///< sum of x x' (both triangles, as PCL's full Matrix3d)
  float fsum[3];     ///< PCL's float centroid accumulator
  std::uint32_t n;
};

/// Empty sums; Autoware's convention starts the sum of x x' at the identity.
NDTCU_HD inline void start_sums(VoxelSums& s, bool autoware) {
  for (int i = 0; i < 3; ++i) {
    s.sum[i] = 0.0;
    s.fsum[i] = 0.0f;
    for (int j = 0; j < 3; ++j) s.sxx[i][j] = autoware && i == j ? 1.0 : 0.0;
  }
  s.n = 0;
}

NDTCU_HD inline void add_point(VoxelSums& s, float x, float y, float z) {
  const double p[3] = {static_cast<double>(x), static_cast<double>(y), static_cast<double>(z)};
  for (int i = 0; i < 3; ++i) {
    s.sum[i] = add_rn(s.sum[i], p[i]);
    for (int j = 0; j < 3; ++j) s.sxx[i][j] = add_rn(s.sxx[i][j], mul_rn(p[i], p[j]));
  }
  s.fsum[0] = add_rn(s.fsum[0], x);
  s.fsum[1] = add_rn(s.fsum[1], y);
  s.fsum[2] = add_rn(s.fsum[2], z);
  ++s.n;
}

/// Adds to `a` the sums `b` of another part of the same cell (both begun by start_sums
/// with the same convention; Autoware's identity is counted once): the sums of the points
/// of both parts, up to the order of summation. A tiled map joins a cell that two tiles
/// share this way, the parts in tile order.
NDTCU_HD inline void merge_sums(VoxelSums& a, const VoxelSums& b, bool autoware) {
  for (int i = 0; i < 3; ++i) {
    a.sum[i] = add_rn(a.sum[i], b.sum[i]);
    for (int j = 0; j < 3; ++j) {
      a.sxx[i][j] = add_rn(a.sxx[i][j], autoware && i == j ? sub_rn(b.sxx[i][j], 1.0) : b.sxx[i][j]);
    }
    a.fsum[i] = add_rn(a.fsum[i], b.fsum[i]);
  }
  a.n += b.n;
}

/// 3x3 determinant-and-cofactor inverse of row-major `m` into `out`; false when the
/// determinant is zero or a result is not finite.
NDTCU_HD inline bool inverse3(const double m[3][3], double out[3][3]) {
  double c[3][3];  // cofactors
  for (int i = 0; i < 3; ++i) {
    const int i1 = (i + 1) % 3, i2 = (i + 2) % 3;
    for (int j = 0; j < 3; ++j) {
      const int j1 = (j + 1) % 3, j2 = (j + 2) % 3;
      c[i][j] = sub_rn(mul_rn(m[i1][j1], m[i2][j2]), mul_rn(m[i1][j2], m[i2][j1]));
    }
  }
  const double det = add_rn(add_rn(mul_rn(m[0][0], c[0][0]), mul_rn(m[0][1], c[0][1])), mul_rn(m[0][2], c[0][2]));
  bool finite = det != 0.0;
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) {
      out[i][j] = div_rn(c[j][i], det);  // the adjugate is the cofactors' transpose
      finite = finite && isfinite(out[i][j]);
    }
  }
  return finite;
}

/// Eigen-decomposition of the symmetric matrix whose lower triangle is that of `a` (as
/// Eigen's SelfAdjointEigenSolver reads it): eigenvalues ascending in `w`, unit
/// eigenvectors in the columns of `v`. Cyclic Jacobi: each rotation zeroes one
/// off-diagonal entry; at most 32 sweeps (quadratic convergence needs 4-6 in double).
NDTCU_HD inline void symmetric_eigen3(const double a_in[3][3], double w[3], double v[3][3]) {
  double a[3][3];
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) {
      a[i][j] = i >= j ? a_in[i][j] : a_in[j][i];
      v[i][j] = i == j ? 1.0 : 0.0;
    }
  }
  for (int sweep = 0; sweep < 32; ++sweep) {
    // Done when every off-diagonal entry is negligible next to both of its diagonal ones.
    bool done = true;
    for (int p = 0; p < 2; ++p) {
      for (int q = p + 1; q < 3; ++q) {
        const double g = mul_rn(100.0, fabs(a[p][q]));
        if (a[p][q] != 0.0 && !(add_rn(fabs(a[p][p]), g) == fabs(a[p][p]) && add_rn(fabs(a[q][q]), g) == fabs(a[q][q]))) {
          done = false;
        }
      }
    }
    if (done) break;
    for (int p = 0; p < 2; ++p) {
      for (int q = p + 1; q < 3; ++q) {
        const double apq = a[p][q];
        if (apq == 0.0) continue;
        // The rotation (c, s) with t = tan of its angle, the smaller root of
        // t^2 + 2 theta t - 1 = 0 (Numerical Recipes' jacobi, without FMA).
        const double theta = div_rn(sub_rn(a[q][q], a[p][p]), mul_rn(2.0, apq));
        double t;
        if (fabs(theta) > 1e150) {
          t = div_rn(0.5, theta);
        } else {
          t = div_rn(1.0, add_rn(fabs(theta), sqrt_rn(add_rn(mul_rn(theta, theta), 1.0))));
          if (theta < 0.0) t = -t;
        }
        const double c = div_rn(1.0, sqrt_rn(add_rn(mul_rn(t, t), 1.0)));
        const double s = mul_rn(t, c);
        // A' = J' A J on rows and columns p and q.
        for (int k = 0; k < 3; ++k) {
          const double akp = a[k][p], akq = a[k][q];
          a[k][p] = sub_rn(mul_rn(c, akp), mul_rn(s, akq));
          a[k][q] = add_rn(mul_rn(s, akp), mul_rn(c, akq));
        }
        for (int k = 0; k < 3; ++k) {
          const double apk = a[p][k], aqk = a[q][k];
          a[p][k] = sub_rn(mul_rn(c, apk), mul_rn(s, aqk));
          a[q][k] = add_rn(mul_rn(s, apk), mul_rn(c, aqk));
        }
        a[p][q] = a[q][p] = 0.0;
        for (int k = 0; k < 3; ++k) {
          const double vkp = v[k][p], vkq = v[k][q];
          v[k][p] = sub_rn(mul_rn(c, vkp), mul_rn(s, vkq));
          v[k][q] = add_rn(mul_rn(s, vkp), mul_rn(c, vkq));
        }
      }
    }
  }
  for (int i = 0; i < 3; ++i) w[i] = a[i][i];
  // Ascending, the eigenvectors with them (a stable insertion sort of three).
  for (int i = 1; i < 3; ++i) {
    for (int j = i; j > 0 && w[j] < w[j - 1]; --j) {
      const double tw = w[j];
      w[j] = w[j - 1];
      w[j - 1] = tw;
      for (int k = 0; k < 3; ++k) {
        const double tv = v[k][j];
        v[k][j] = v[k][j - 1];
        v[k][j - 1] = tv;
      }
    }
  }
}

/// A voxel's distribution.
struct VoxelStatistics {
  bool usable;
  double mean[3];
  double cov[3][3];   ///< after inflation
  double icov[3][3];
  float centroid[3];  ///< float sum / float n
};

/// The statistics of a cell with s.n >= 2 points by the rules of the file comment. `pcl`:
/// eigenvalues down to -1e-12 (Eigen's dummy_precision) pass the floor check, as in PCL;
/// Autoware's convention allows none below zero.
NDTCU_HD inline void voxel_statistics(const VoxelSums& s, bool pcl, double eigenvalue_ratio, VoxelStatistics& r) {
  r.usable = false;
  const double n = static_cast<double>(s.n);
  for (int i = 0; i < 3; ++i) {
    r.centroid[i] = div_rn(s.fsum[i], static_cast<float>(s.n));
    r.mean[i] = div_rn(s.sum[i], n);
  }
  const double n1 = sub_rn(n, 1.0);
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) {
      r.cov[i][j] = div_rn(sub_rn(s.sxx[i][j], mul_rn(s.sum[i], r.mean[j])), n1);
      r.icov[i][j] = 0.0;
    }
  }
  double w[3], v[3][3];
  symmetric_eigen3(r.cov, w, v);
  const double floor_ok = pcl ? -1e-12 : 0.0;
  if (w[0] < floor_ok || w[1] < floor_ok || !(w[2] > 0.0)) return;
  const double min_eig = mul_rn(eigenvalue_ratio, w[2]);
  if (w[0] < min_eig) {
    w[0] = min_eig;
    if (w[1] < min_eig) w[1] = min_eig;
    // V D V^-1, with the inverse as PCL takes it (not the transpose).
    double vi[3][3];
    if (!inverse3(v, vi)) return;
    for (int i = 0; i < 3; ++i) {
      for (int j = 0; j < 3; ++j) {
        double e = 0.0;
        for (int k = 0; k < 3; ++k) e = add_rn(e, mul_rn(mul_rn(v[i][k], w[k]), vi[k][j]));
        r.cov[i][j] = e;
      }
    }
  }
  r.usable = inverse3(r.cov, r.icov);
}

}  // namespace ndtcu::math

namespace ndtcu::detail {

/// A usable voxel's statistics as the GPU build computes them (device memory, one per
/// voxel; `pad` fills the struct to a multiple of 8 bytes and is written, so copying one
/// whole reads no uninitialized byte).
struct VoxelResult {
  double mean[3];
  double icov[6];  ///< xx xy xz yy yz zz
  double cov[6];
  float centroid[3];
  float pad;
};
static_assert(sizeof(VoxelResult) == 15 * sizeof(double) + 4 * sizeof(float), "no implicit padding");

/// The usable statistics `s` as a VoxelResult: each symmetric matrix by its upper triangle
/// (xx xy xz yy yz zz). What the GPU build writes for a voxel, and what the tiled map's
/// device twin is sent for a voxel the host joined.
NDTCU_HD inline void to_voxel_result(const math::VoxelStatistics& s, VoxelResult& out) {
  constexpr int kRow[6] = {0, 0, 0, 1, 1, 2}, kCol[6] = {0, 1, 2, 1, 2, 2};
  out.pad = 0.0f;
  for (int a = 0; a < 3; ++a) {
    out.mean[a] = s.mean[a];
    out.centroid[a] = s.centroid[a];
  }
  for (int e = 0; e < 6; ++e) {
    out.icov[e] = s.icov[kRow[e]][kCol[e]];
    out.cov[e] = s.cov[kRow[e]][kCol[e]];
  }
}

}  // namespace ndtcu::detail
