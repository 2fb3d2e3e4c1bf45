// The shared per-point math (kernels/ndt_point.hpp, ndt_derivatives.hpp) against central finite differences of
// the score it differentiates, evaluated independently in double.
#include "../support/test_support.hpp"

#include "ndt_point.hpp"
#include "ndt_step.hpp"

#include <ndtcu/aligner.hpp>

#include <Eigen/Dense>

#include <array>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

using namespace ndtcu;
namespace m = ndtcu::math;

namespace {

struct Pair {
  Eigen::Vector3d x;     // untransformed source point
  Eigen::Vector3d mean;  // voxel mean
  Eigen::Matrix3d icov;  // voxel inverse covariance
};

// Score of the pairs at pose p, with the transform in double (no float, no search):
// sum of -d1 exp(-d2/2 q' C q), q = T(p) x - mu (Magnusson 2009, eq. 6.9).
double reference_score(const std::vector<Pair>& pairs, const Pose6& p, const m::GaussConstants& g) {
  const Eigen::Matrix4d t = pose_to_matrix(p);
  double s = 0;
  for (const auto& pr : pairs) {
    const Eigen::Vector3d q = t.topLeftCorner<3, 3>() * pr.x + t.topRightCorner<3, 1>() - pr.mean;
    s += -g.d1 * std::exp(-g.d2 * q.dot(pr.icov * q) / 2);
  }
  return s;
}

// Score, gradient and Hessian of the pairs from the shared math, with the angular terms
// `ang` (those of p's angles unless a test alters them).
m::DerivativeSums analytic(const std::vector<Pair>& pairs, const Pose6& p, const m::GaussConstants& g,
                           const m::AngularTerms<double>& ang) {
  m::DerivativeSums sums;
  sums.clear();
  const Eigen::Matrix4d t = pose_to_matrix(p);
  for (const auto& pr : pairs) {
    const auto J = m::point_jacobian(ang, pr.x.x(), pr.x.y(), pr.x.z());
    const auto H = m::point_hessian(ang, pr.x.x(), pr.x.y(), pr.x.z());
    const Eigen::Vector3d q = t.topLeftCorner<3, 3>() * pr.x + t.topRightCorner<3, 1>() - pr.mean;
    const double qa[3] = {q.x(), q.y(), q.z()};
    const double ic[6] = {pr.icov(0, 0), pr.icov(0, 1), pr.icov(0, 2), pr.icov(1, 1), pr.icov(1, 2), pr.icov(2, 2)};
    m::accumulate_pair(qa, ic, J, H, g.d1, g.d2, true, sums.v);
  }
  return sums;
}

m::DerivativeSums analytic(const std::vector<Pair>& pairs, const Pose6& p, const m::GaussConstants& g) {
  return analytic(pairs, p, g, m::angular_terms<double>(p(3), p(4), p(5)));
}

Eigen::Matrix<double, 6, 1> gradient_of(const m::DerivativeSums& s) {
  Eigen::Matrix<double, 6, 1> v;
  for (int i = 0; i < 6; ++i) v[i] = s.v[m::kGradient + i];
  return v;
}

Eigen::Matrix<double, 6, 6> hessian_of(const m::DerivativeSums& s) {
  Eigen::Matrix<double, 6, 6> h;
  for (int i = 0; i < 6; ++i)
    for (int j = i; j < 6; ++j) h(i, j) = h(j, i) = s.v[m::kHessian + m::upper_index(i, j)];
  return h;
}

std::vector<Pair> random_pairs(std::mt19937& rng, const Pose6& pose) {
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<Pair> pairs;
  const Eigen::Matrix4d t = pose_to_matrix(pose);
  for (int k = 0; k < 12; ++k) {
    Pair pr;
    pr.x = Eigen::Vector3d(20 * u(rng), 20 * u(rng), 3 * u(rng));
    // Mean near the transformed point so the pair is inside the Gaussian's useful range.
    const Eigen::Vector3d tx = t.topLeftCorner<3, 3>() * pr.x + t.topRightCorner<3, 1>();
    pr.mean = tx + 0.4 * Eigen::Vector3d(u(rng), u(rng), u(rng));
    Eigen::Matrix3d a = Eigen::Matrix3d::Random();
    const Eigen::Matrix3d cov = 0.05 * (a * a.transpose()) + 0.02 * Eigen::Matrix3d::Identity();
    pr.icov = cov.inverse();
    pairs.push_back(pr);
  }
  return pairs;
}

// The pair's terms as PCL's updateDerivatives writes them: every column of the point
// Jacobian and every block of the point Hessian multiplied out, ones and zeros included.
// accumulate_pair leaves those products out and must give the same bits.
double general_pair(const double* q, const double* icov, const m::PointJacobian<double>& J,
                    const m::PointHessian<double>& H, double d1, double d2, bool with_hessian, double* sums) {
  double cq[3];
  m::sym_mul(icov, q, cq);
  const double e = std::exp(-d2 * m::dot3(q, cq) / 2.0);
  const double score = -d1 * e;
  double de = d2 * e;
  if (de > 1.0 || de < 0.0 || de != de) return 0.0;
  de *= d1;
  double cj[6][3], g[6];
  for (int i = 0; i < 6; ++i) {
    m::sym_mul(icov, J.col[i], cj[i]);
    g[i] = m::dot3(q, cj[i]);
  }
  sums[m::kScore] += score;
  for (int i = 0; i < 6; ++i) sums[m::kGradient + i] += g[i] * de;
  if (!with_hessian) return score;
  // d2T/dpi dpj: zero with a translation index, eq. 6.21's a..f in the rotation block.
  const double* blocks[3][3] = {{H.a, H.b, H.c}, {H.b, H.d, H.e}, {H.c, H.e, H.f}};
  for (int i = 0; i < 6; ++i) {
    for (int j = i; j < 6; ++j) {
      const double second = i < 3 || j < 3 ? 0.0 : m::dot3(cq, blocks[i - 3][j - 3]);
      sums[m::kHessian + m::upper_index(i, j)] += de * (-d2 * g[i] * g[j] + second + m::dot3(J.col[j], cj[i]));
    }
  }
  return score;
}

}  // namespace

TEST_CASE("accumulate_pair gives the bits of the general 6-column form", "[unit][ndt_math]") {
  // Poses with every angle general, with angles under the small-angle rule (exact zero
  // sines, so more exact zeros in J and H) and the identity; pairs with full and with
  // diagonal inverse covariances (exact zero products); Hessian on and off.
  const auto g = m::gauss_constants(1.0, 0.55);
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> ut(-2.0, 2.0), ua(-0.6, 0.6);
  int compared = 0;
  for (int trial = 0; trial < 30; ++trial) {
    Pose6 p;
    p << ut(rng), ut(rng), ut(rng), ua(rng), ua(rng), ua(rng);
    if (trial % 3 == 1) p(3) = p(5) = 5e-5;
    if (trial % 10 == 9) p.setZero();
    auto pairs = random_pairs(rng, p);
    for (std::size_t k = 0; k < pairs.size(); k += 3) {
      const Eigen::Vector3d diagonal = pairs[k].icov.diagonal();
      pairs[k].icov = diagonal.asDiagonal();
    }
    const Eigen::Matrix4d t = pose_to_matrix(p);
    const auto ang = m::angular_terms<double>(p(3), p(4), p(5));
    for (bool with_hessian : {true, false}) {
      m::DerivativeSums fast, general;
      fast.clear();
      general.clear();
      for (const auto& pr : pairs) {
        const auto J = m::point_jacobian(ang, pr.x.x(), pr.x.y(), pr.x.z());
        const auto H = m::point_hessian(ang, pr.x.x(), pr.x.y(), pr.x.z());
        const Eigen::Vector3d q = t.topLeftCorner<3, 3>() * pr.x + t.topRightCorner<3, 1>() - pr.mean;
        const double qa[3] = {q.x(), q.y(), q.z()};
        const double ic[6] = {pr.icov(0, 0), pr.icov(0, 1), pr.icov(0, 2),
                              pr.icov(1, 1), pr.icov(1, 2), pr.icov(2, 2)};
        const double a = m::accumulate_pair(qa, ic, J, H, g.d1, g.d2, with_hessian, fast.v);
        const double b = general_pair(qa, ic, J, H, g.d1, g.d2, with_hessian, general.v);
        CHECK(std::memcmp(&a, &b, sizeof(double)) == 0);
      }
      for (int i = 0; i < m::kSumSize; ++i) {
        INFO("trial " << trial << " entry " << i << ": " << fast.v[i] << " vs " << general.v[i]);
        CHECK(std::memcmp(&fast.v[i], &general.v[i], sizeof(double)) == 0);
      }
      compared += fast.v[m::kScore] != 0.0;
    }
  }
  CHECK(compared > 50);  // the pairs are within the Gaussian's range: the sums are not all zero
}

TEST_CASE("A point's pairs summed in the factored form give accumulate_pair's derivatives", "[unit][ndt_math]") {
  // One point with 1 to 12 voxels around it (full and diagonal inverse covariances, some
  // pairs outside the Gaussian's guard), general poses, angles under the small-angle rule
  // and the identity: add_pair_sums then add_point_derivatives against accumulate_pair pair
  // by pair. In double they are the same sums in another order (agreement to 1e-12 of the
  // entries' scale); in float, what the GPU computes, to 1e-5 of it.
  const auto g = m::gauss_constants(1.0, 0.55);
  std::mt19937 rng(23);
  std::uniform_real_distribution<double> ut(-2.0, 2.0), ua(-0.6, 0.6), u(-1.0, 1.0);
  int compared = 0;
  for (int trial = 0; trial < 60; ++trial) {
    Pose6 p;
    p << ut(rng), ut(rng), ut(rng), ua(rng), ua(rng), ua(rng);
    if (trial % 3 == 1) p(3) = p(5) = 5e-5;
    if (trial % 10 == 9) p.setZero();
    const Eigen::Matrix4d t = pose_to_matrix(p);
    const Eigen::Vector3d x(30 * u(rng), 30 * u(rng), 3 * u(rng));
    const Eigen::Vector3d tx = t.topLeftCorner<3, 3>() * x + t.topRightCorner<3, 1>();
    const int n = 1 + trial % 12;
    std::vector<Eigen::Vector3d> q(n);
    std::vector<std::array<double, 6>> ic(n);
    for (int k = 0; k < n; ++k) {
      // Means 0.5 m and (every fourth) 1.5 m away: the far pairs add little.
      const Eigen::Vector3d mean = tx + (k % 4 == 3 ? 1.5 : 0.5) * Eigen::Vector3d(u(rng), u(rng), u(rng));
      Eigen::Matrix3d a = Eigen::Matrix3d::Random();
      Eigen::Matrix3d icov = (0.05 * (a * a.transpose()) + 0.02 * Eigen::Matrix3d::Identity()).inverse();
      if (k % 3 == 0) icov = Eigen::Matrix3d(icov.diagonal().asDiagonal());
      q[k] = tx - mean;
      ic[k] = {icov(0, 0), icov(0, 1), icov(0, 2), icov(1, 1), icov(1, 2), icov(2, 2)};
    }
    const auto ang_d = m::angular_terms<double>(p(3), p(4), p(5));
    const auto ang_f = m::angular_terms<float>(float(p(3)), float(p(4)), float(p(5)));
    for (bool with_hessian : {true, false}) {
      m::DerivativeSums ref, fact, fact_f;
      ref.clear();
      fact.clear();
      fact_f.clear();
      const auto J = m::point_jacobian(ang_d, x.x(), x.y(), x.z());
      const auto H = m::point_hessian(ang_d, x.x(), x.y(), x.z());
      const auto Jf = m::point_jacobian(ang_f, float(x.x()), float(x.y()), float(x.z()));
      const auto Hf = m::point_hessian(ang_f, float(x.x()), float(x.y()), float(x.z()));
      m::PointPairSums<double> sd = m::zero_pair_sums<double>();
      m::PointPairSums<float> sf = m::zero_pair_sums<float>();
      for (int k = 0; k < n; ++k) {
        const double qa[3] = {q[k].x(), q[k].y(), q[k].z()};
        const float qf[3] = {float(qa[0]), float(qa[1]), float(qa[2])};
        float icf[6];
        for (int e = 0; e < 6; ++e) icf[e] = float(ic[k][e]);
        const double a = m::accumulate_pair(qa, ic[k].data(), J, H, g.d1, g.d2, with_hessian, ref.v);
        const double b = m::add_pair_sums(qa, ic[k].data(), g.d1, g.d2, with_hessian, sd);
        CHECK(std::memcmp(&a, &b, sizeof(double)) == 0);  // the same Gaussian and guard
        m::add_pair_sums(qf, icf, float(g.d1), float(g.d2), with_hessian, sf);
      }
      m::add_point_derivatives(sd, J, H, with_hessian, fact.v);
      m::add_point_derivatives(sf, Jf, Hf, with_hessian, fact_f.v);
      // Scale: the largest entry of each group (score, gradient, Hessian).
      auto scale = [&](int from, int count) {
        double s = 1e-30;
        for (int i = from; i < from + count; ++i) s = std::max(s, std::abs(ref.v[i]));
        return s;
      };
      const double groups[3] = {scale(m::kScore, 1), scale(m::kGradient, 6), scale(m::kHessian, 21)};
      for (int i = 0; i < m::kNvtlSum; ++i) {
        const double sc = groups[i == m::kScore ? 0 : i < m::kHessian ? 1 : 2];
        INFO("trial " << trial << " pairs " << n << " entry " << i << ": " << ref.v[i] << " vs " << fact.v[i]
                      << " (double), " << fact_f.v[i] << " (float)");
        CHECK(std::abs(fact.v[i] - ref.v[i]) <= 1e-12 * sc);
        CHECK(std::abs(fact_f.v[i] - ref.v[i]) <= 1e-5 * sc);
        if (!with_hessian && i >= m::kHessian) CHECK(fact.v[i] == 0.0);
      }
      compared += ref.v[m::kScore] != 0.0;
    }
  }
  CHECK(compared > 80);  // most points have pairs inside the guard
}

TEST_CASE("Gaussian constants match the design's values for r = 2", "[unit][ndt_math]") {
  const auto g = m::gauss_constants(2.0, 0.55);
  CHECK(g.d1 == Approx(-4.196518).epsilon(1e-6));
  CHECK(g.d2 == Approx(0.248479).epsilon(1e-5));
}

TEST_CASE("Gradient and Hessian of the score match central finite differences", "[unit][ndt_math]") {
  std::mt19937 rng(42);
  std::uniform_real_distribution<double> ut(-2.0, 2.0), ua(0.05, 0.6), sign(-1.0, 1.0);
  const auto g = m::gauss_constants(1.0, 0.55);
  for (int trial = 0; trial < 20; ++trial) {
    Pose6 p;
    // Angles kept away from the small-angle rule (|a| < 1e-4 is taken as exactly 0).
    p << ut(rng), ut(rng), ut(rng) * 0.5, ua(rng) * (sign(rng) < 0 ? -1 : 1), ua(rng) * (sign(rng) < 0 ? -1 : 1),
        ua(rng) * (sign(rng) < 0 ? -1 : 1);
    const auto pairs = random_pairs(rng, p);
    const auto s = analytic(pairs, p, g);
    CHECK(s.v[m::kScore] == Approx(reference_score(pairs, p, g)).epsilon(1e-12));

    // Gradient against differences of the score; h balances truncation (h^2) and rounding (eps/h).
    const double h = 1e-5;
    Eigen::Matrix<double, 6, 1> fd_grad;
    Eigen::Matrix<double, 6, 6> fd_hess;
    for (int i = 0; i < 6; ++i) {
      Pose6 hi = p, lo = p;
      hi(i) += h;
      lo(i) -= h;
      fd_grad(i) = (reference_score(pairs, hi, g) - reference_score(pairs, lo, g)) / (2 * h);
      // Hessian column i against differences of the analytic gradient.
      fd_hess.col(i) = (gradient_of(analytic(pairs, hi, g)) - gradient_of(analytic(pairs, lo, g))) / (2 * h);
    }
    const auto grad = gradient_of(s);
    const auto hess = hessian_of(s);
    const double grad_err = (grad - fd_grad).cwiseAbs().maxCoeff() / fd_grad.cwiseAbs().maxCoeff();
    const double hess_err = (hess - fd_hess).cwiseAbs().maxCoeff() / fd_hess.cwiseAbs().maxCoeff();
    INFO("trial " << trial << " pose " << p.transpose());
    CHECK(grad_err < 1e-5);
    CHECK(hess_err < 1e-5);
  }
}

TEST_CASE("The d1 point-Hessian row carries -sy: +sy (Autoware's copy) fails the difference test",
          "[unit][ndt_math]") {
  // With the sign flipped the pitch-pitch second derivative is wrong whenever sin(pitch) != 0.
  const auto g = m::gauss_constants(1.0, 0.55);
  std::mt19937 rng(3);
  Pose6 p;
  p << 0.3, -0.2, 0.1, 0.2, 0.4, -0.3;
  const auto pairs = random_pairs(rng, p);
  const double h = 1e-5;
  Pose6 hi = p, lo = p;
  hi(4) += h;
  lo(4) -= h;
  const double fd = (gradient_of(analytic(pairs, hi, g))(4) - gradient_of(analytic(pairs, lo, g))(4)) / (2 * h);
  const double exact = hessian_of(analytic(pairs, p, g))(4, 4);
  const double right_error = std::abs(exact - fd);
  CHECK(right_error < 1e-5 * std::abs(fd));
  // The same entry with d1's third component negated.
  auto ang = m::angular_terms<double>(p(3), p(4), p(5));
  ang.h[6][2] = -ang.h[6][2];
  const m::DerivativeSums wrong = analytic(pairs, p, g, ang);
  // The flipped sign misses by far more than the tolerance the right one meets.
  CHECK(std::abs(hessian_of(wrong)(4, 4) - fd) > 10 * 1e-5 * std::abs(fd));
  CHECK(std::abs(hessian_of(wrong)(4, 4) - fd) > 100 * right_error);
}

TEST_CASE("Small angles are taken as exactly zero below 1e-4 rad", "[unit][ndt_math]") {
  double c, s;
  m::small_angle_cos_sin(9.9e-5, c, s);
  CHECK(c == 1.0);
  CHECK(s == 0.0);
  m::small_angle_cos_sin(-9.9e-5, c, s);
  CHECK(s == 0.0);
  m::small_angle_cos_sin(1.01e-4, c, s);
  CHECK(s == std::sin(1.01e-4));
}

TEST_CASE("A pair is skipped when d2 * e is invalid", "[unit][ndt_math]") {
  // d2 > 1 makes d2 * e > 1 at q = 0; NaN input gives NaN: both contribute nothing.
  const auto ang = m::angular_terms<double>(0.2, 0.1, 0.3);
  const auto J = m::point_jacobian(ang, 1.0, 2.0, 3.0);
  const auto H = m::point_hessian(ang, 1.0, 2.0, 3.0);
  const double q[3] = {0, 0, 0}, ic[6] = {1, 0, 0, 1, 0, 1};
  m::DerivativeSums s;
  s.clear();
  CHECK(m::accumulate_pair(q, ic, J, H, -1.0, 1.5, true, s.v) == 0.0);
  const double qn[3] = {std::nan(""), 0, 0};
  CHECK(m::accumulate_pair(qn, ic, J, H, -1.0, 0.5, true, s.v) == 0.0);
  for (double v : s.v) CHECK(v == 0.0);
  // A valid pair adds -d1 e to the score.
  CHECK(m::accumulate_pair(q, ic, J, H, -1.0, 0.5, true, s.v) == 1.0);
  CHECK(s.v[m::kScore] == 1.0);
}

TEST_CASE("The float transform rounds as PCL's SSE path: x m0 + (y m1 + (z m2 + t))", "[unit][ndt_math]") {
  const float mtx[12] = {0.7f, -0.2f, 0.1f, 1.3f, 0.3f, 0.9f, -0.4f, -2.1f, 0.05f, 0.2f, 0.95f, 0.7f};
  const float x = 12.345f, y = -7.5f, z = 1.25f;
  float out[3];
  m::transform_point(mtx, x, y, z, out);
  for (int r = 0; r < 3; ++r) {
    const volatile float zr = z * mtx[4 * r + 2];
    const volatile float a = zr + mtx[4 * r + 3];
    const volatile float yr = y * mtx[4 * r + 1];
    const volatile float b = yr + a;
    const volatile float xr = x * mtx[4 * r];
    const volatile float c = xr + b;
    CHECK(out[r] == c);
  }
}
