// The calibration of a reported pose covariance: chi-square, NEES and the ellipses against
// closed forms and hand-computed cases, and frames.csv read back.
#include "../support/test_support.hpp"

#include <ndtcu/aligner.hpp>
#include <ndtcu/covariance_calibration.hpp>
#include <ndtcu/error.hpp>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

using namespace ndtcu;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

using Matrix6 = Eigen::Matrix<double, 6, 6>;

CovarianceSample xy_sample(std::size_t frame, double ex, double ey, const Eigen::Matrix2d& c) {
  CovarianceSample s;
  s.frame = frame;
  s.time = 0.1 * static_cast<double>(frame);
  s.status = "tracked";
  s.error(0) = ex;
  s.error(1) = ey;
  s.covariance_xy = c;
  return s;
}

// The header of frames.csv with the columns the reader needs, and a row for it.
std::string csv_header() {
  std::string h = "frame,time,file,status,x,y,z,roll,pitch,yaw,cov_xx,cov_xy,cov_yy";
  for (const std::string& c : covariance6_columns()) h += "," + c;
  return h + "\n";
}

}  // namespace

TEST_CASE("chi-square: the cdf against closed forms, the quantiles against the tables", "[unit][eval]") {
  // Closed forms: 1 dof erf(sqrt(x/2)); 2 dof 1 - e^(-x/2); 4 dof 1 - e^(-x/2)(1 + x/2),
  // written with expm1 so that they keep their digits at small x. The 4-dof form still
  // subtracts two numbers near x/2 for a result near x^2/8: 1e-9 relative at x = 1e-6.
  for (const double x : {1e-6, 0.01, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 30.0, 80.0}) {
    CAPTURE(x);
    const double h = x / 2.0;
    CHECK(chi_square_cdf(x, 1) == Approx(std::erf(std::sqrt(h))).epsilon(1e-12));
    CHECK(chi_square_cdf(x, 2) == Approx(-std::expm1(-h)).epsilon(1e-12));
    CHECK(chi_square_cdf(x, 4) == Approx(-std::expm1(-h) - h * std::exp(-h)).epsilon(1e-9));
  }
  CHECK(chi_square_cdf(0.0, 6) == 0.0);
  CHECK(chi_square_cdf(-1.0, 6) == 0.0);
  CHECK(chi_square_cdf(INFINITY, 6) == 1.0);
  // Quantiles as printed in the tables (to the digits given).
  CHECK(chi_square_quantile(0.95, 1) == Approx(3.841459).epsilon(1e-6));
  CHECK(chi_square_quantile(0.99, 1) == Approx(6.634897).epsilon(1e-6));
  CHECK(chi_square_quantile(0.95, 2) == Approx(-2.0 * std::log(0.05)).epsilon(1e-10));
  CHECK(chi_square_quantile(0.99, 2) == Approx(-2.0 * std::log(0.01)).epsilon(1e-10));
  CHECK(chi_square_quantile(0.95, 6) == Approx(12.591587).epsilon(1e-6));
  CHECK(chi_square_quantile(0.99, 6) == Approx(16.811894).epsilon(1e-6));
  CHECK(chi_square_quantile(0.025, 100) == Approx(74.2219).epsilon(1e-5));
  CHECK(chi_square_quantile(0.975, 100) == Approx(129.5612).epsilon(1e-5));
  // Many frames' degrees of freedom (a long run's mean bounds): the quantile inverts the cdf.
  for (const double dof : {600.0, 60000.0, 6e6}) {
    const double q = chi_square_quantile(0.975, dof);
    CHECK(chi_square_cdf(q, dof) == Approx(0.975).epsilon(1e-9));
    CHECK(q > dof);
    CHECK(q < dof + 3.0 * std::sqrt(2.0 * dof));
  }
  CHECK_THROWS_AS(chi_square_cdf(1.0, 0.0), Error);
  CHECK_THROWS_AS(chi_square_cdf(NAN, 2.0), Error);
  CHECK_THROWS_AS(chi_square_quantile(1.0, 2.0), Error);
  CHECK_THROWS_AS(chi_square_quantile(0.0, 2.0), Error);
  CHECK_THROWS_AS(chi_square_quantile(0.5, NAN), Error);
}

TEST_CASE("NEES and the sigma along an error: hand-computed cases", "[unit][eval]") {
  // Diagonal: (0.1/0.1)^2 + (0.2/0.2)^2 = 2.
  CHECK(nees(Eigen::Vector2d(0.1, 0.2), Eigen::Vector2d(0.01, 0.04).asDiagonal().toDenseMatrix()) == Approx(2.0));
  // Correlated: C = [2 1; 1 2], C^-1 = [2 -1; -1 2] / 3; e = (1, 1): (2 - 1 - 1 + 2) / 3 = 2/3,
  // e = (1, -1): (2 + 1 + 1 + 2) / 3 = 2: along the correlation the error is less surprising.
  Eigen::Matrix2d c;
  c << 2.0, 1.0, 1.0, 2.0;
  CHECK(nees(Eigen::Vector2d(1.0, 1.0), c) == Approx(2.0 / 3.0));
  CHECK(nees(Eigen::Vector2d(1.0, -1.0), c) == Approx(2.0));
  // Not positive definite, or not finite: NaN, never a number a mean would take in.
  Eigen::Matrix2d singular;
  singular << 1.0, 1.0, 1.0, 1.0;
  CHECK(std::isnan(nees(Eigen::Vector2d(1.0, 0.0), singular)));
  CHECK(std::isnan(nees(Eigen::Vector2d(1.0, 0.0), -c)));
  Eigen::Matrix2d skew = c;
  skew(0, 1) = 1.5;
  CHECK(std::isnan(nees(Eigen::Vector2d(1.0, 0.0), skew)));
  CHECK(std::isnan(nees(Eigen::Vector2d(NAN, 0.0), c)));
  CHECK_THROWS_AS(nees(Eigen::Vector3d(1.0, 0.0, 0.0), c), Error);
  // Six entries, diagonal: the sum of the squared ratios.
  Pose6 e;
  e << 0.1, 0.0, 0.0, 0.0, 0.0, 0.02;
  Matrix6 c6 = Matrix6::Identity() * 0.01;
  c6(5, 5) = 1e-4;
  CHECK(nees(e, c6) == Approx(1.0 + 4.0));
  // sigma along: C = diag(4, 1); along y 1, along the diagonal sqrt((4 + 1) / 2); no error:
  // the largest.
  const Eigen::Matrix2d d = Eigen::Vector2d(4.0, 1.0).asDiagonal();
  CHECK(sigma_along(Eigen::Vector2d(0.0, 3.0), d) == Approx(1.0));
  CHECK(sigma_along(Eigen::Vector2d(1.0, 1.0), d) == Approx(std::sqrt(2.5)));
  CHECK(sigma_along(Eigen::Vector2d::Zero(), d) == Approx(2.0));
}

TEST_CASE("pose error: the angles' differences wrapped into (-pi, pi]", "[unit][eval]") {
  Pose6 est, ref;
  est << 1.0, 2.0, 3.0, 0.01, -0.02, 3.1;
  ref << 0.9, 2.05, 3.0, 0.0, 0.0, -3.1;
  const Pose6 e = pose_error(pose_to_matrix(est), pose_to_matrix(ref));
  CHECK(e(0) == Approx(0.1).margin(1e-12));
  CHECK(e(1) == Approx(-0.05).margin(1e-12));
  CHECK(e(3) == Approx(0.01).margin(1e-12));
  CHECK(e(4) == Approx(-0.02).margin(1e-12));
  CHECK(e(5) == Approx(6.2 - 2.0 * M_PI).margin(1e-12));  // 3.1 - (-3.1) = 6.2, i.e. -0.083 rad
}

TEST_CASE("covariance calibration: the ellipses, the far and confident frames, the worst ones", "[unit][eval]") {
  // sigma 1 cm in x and y: NEES = (|e| / 1 cm)^2. The 95% ellipse of 2 dof is NEES 5.991,
  // the 99% one 9.210.
  const Eigen::Matrix2d c = Eigen::Matrix2d::Identity() * 1e-4;
  std::vector<CovarianceSample> s;
  s.push_back(xy_sample(0, 0.01, 0.0, c));   // NEES 1: inside both
  s.push_back(xy_sample(1, 0.0, 0.02, c));   // 4: inside both
  s.push_back(xy_sample(2, 0.02, 0.02, c));  // 8: outside 95%, inside 99%
  s.push_back(xy_sample(3, 0.12, 0.0, c));   // 144: outside both; 12 cm off reporting 1 cm
  // 15 cm off, reporting 5 cm along its error: far, not confident; NEES 9.
  s.push_back(xy_sample(4, 0.0, 0.15, Eigen::Matrix2d::Identity() * 0.0025));
  CovarianceSample none;  // no covariance: not counted
  none.frame = 5;
  none.error(0) = 1.0;
  s.push_back(none);
  CovarianceCalibrationOptions o;
  o.worst = 2;
  const CovarianceCalibration r = calibrate_covariance(s, o);
  CHECK(r.frames == 5);
  CHECK(r.xy.frames == 5);
  CHECK(r.xy.dof == 2);
  CHECK(r.xy.mean == Approx((1.0 + 4.0 + 8.0 + 144.0 + 9.0) / 5.0).epsilon(1e-6));
  CHECK(r.xy.median == Approx(8.0).epsilon(1e-6));
  CHECK(r.xy.max == Approx(144.0).epsilon(1e-6));
  CHECK(r.xy.within95 == Approx(2.0 / 5.0));
  CHECK(r.xy.within99 == Approx(4.0 / 5.0));
  // An honest mean of 5 frames x 2 dof: chi2(10) quantiles 3.247 and 20.483, over 5.
  CHECK(r.xy.mean_low95 == Approx(3.246973 / 5.0).epsilon(1e-5));
  CHECK(r.xy.mean_high95 == Approx(20.483177 / 5.0).epsilon(1e-5));
  CHECK(r.pose.frames == 0);
  CHECK(r.pose.mean == 0.0);
  // Per entry from the x-y covariance (no 6x6): x's NEES 1, 0, 4, 144, 0.
  CHECK(r.axis[0].frames == 5);
  CHECK(r.axis[0].mean == Approx((1.0 + 0.0 + 4.0 + 144.0 + 0.0) / 5.0).epsilon(1e-6));
  CHECK(r.axis[2].frames == 0);
  CHECK(r.far == 2);
  CHECK(r.far_confident == 1);
  REQUIRE(r.worst.size() == 2);
  CHECK(r.worst[0].frame == 3);
  CHECK(r.worst[0].sigma_m == Approx(0.01));
  CHECK(r.worst[0].error_xy_m == Approx(0.12));
  CHECK(r.worst[1].frame == 4);
  CHECK(r.worst[1].nees_xy == Approx(9.0));

  // With the 6x6 covariance: six entries, each its own 1-dof NEES; a singular one left out.
  CovarianceSample six = xy_sample(7, 0.01, 0.0, c);
  six.error << 0.01, 0.0, 0.02, 0.0, 0.001, 0.0;
  six.covariance = Matrix6::Identity() * 1e-4;
  (*six.covariance)(4, 4) = 1e-6;
  CovarianceSample singular = six;
  singular.frame = 8;
  (*singular.covariance)(3, 3) = 0.0;
  const CovarianceCalibration r6 = calibrate_covariance({six, singular});
  CHECK(r6.pose.frames == 1);
  CHECK(r6.pose.invalid == 1);
  CHECK(r6.pose.mean == Approx(1.0 + 4.0 + 1.0).epsilon(1e-6));
  CHECK(r6.axis[2].mean == Approx(4.0).epsilon(1e-6));
  CHECK(r6.axis[3].frames == 1);
  CHECK(r6.axis[3].invalid == 1);
  CHECK(r6.xy.frames == 2);

  // The reference's own sigma (0.01 m, 0.001 rad) added: x-y NEES of frame 3 becomes
  // 0.12^2 / (1e-4 + 1e-4) = 72; the 6-D one of `six` (0.01^2 + 0.02^2) / 2e-4 +
  // 0.001^2 / (1e-6 + 1e-6) = 2.5 + 0.5; the far-and-confident count and sigma along the
  // error stay the reported covariance's.
  CovarianceCalibrationOptions with_reference;
  with_reference.reference_sigma_m = 0.01;
  with_reference.reference_sigma_rad = 0.001;
  with_reference.worst = 1;
  const CovarianceCalibration rr = calibrate_covariance({s[3], s[4]}, with_reference);
  CHECK(rr.xy.max == Approx(72.0).epsilon(1e-6));
  CHECK(rr.far_confident == 1);
  REQUIRE(rr.worst.size() == 1);
  CHECK(rr.worst[0].sigma_m == Approx(0.01));
  CHECK(rr.worst[0].nees_xy == Approx(72.0).epsilon(1e-6));
  CHECK(calibrate_covariance({six}, with_reference).pose.mean == Approx(3.0).epsilon(1e-6));

  CovarianceCalibrationOptions bad;
  bad.far_m = 0.0;
  CHECK_THROWS_AS(CovarianceCalibrationAccumulator(bad), Error);
  bad.far_m = 0.1;
  bad.reference_sigma_m = -0.01;
  CHECK_THROWS_WITH(CovarianceCalibrationAccumulator(bad), Catch::Matchers::Contains("reference_sigma_m"));
  bad.reference_sigma_m = 0.0;
  bad.reference_sigma_rad = NAN;
  CHECK_THROWS_WITH(CovarianceCalibrationAccumulator(bad), Catch::Matchers::Contains("reference_sigma_rad"));
}

TEST_CASE("frames.csv read back: quoted names, empty columns, the errors naming line and column", "[unit][eval]") {
  const fs::path dir = test::temp_dir("covariance_frames_csv");
  std::string cov6;
  for (int i = 0; i < 6; ++i) {
    for (int j = i; j < 6; ++j) cov6 += i == j ? ",1.0e-04" : ",0";
  }
  // Frame 0: a name with a comma and a line break, quoted; frame 1 lost (no pose); frame 2
  // from a run with no x-y covariance; columns in another order than localize writes them
  // are found by name.
  auto empty = [](int n) { return std::string(static_cast<std::size_t>(n), ','); };  // n empty fields
  const std::string rows = csv_header() + "0,0.5,\"a,\nb.pcd\",tracked,1,2,3,0,0,0.1,1e-4,0,4e-4" + cov6 + "\n" +
                           "1,1.0,c.pcd,lost" + empty(30) + "\n" + "2,1.5,d.pcd,degenerate,1,2,3,0,0,0.1" + empty(3) +
                           cov6 + "\r\n";
  test::write_bytes(dir / "frames.csv", rows);
  const std::vector<LocalizeFrame> f = read_localize_frames((dir / "frames.csv").string());
  REQUIRE(f.size() == 3);
  CHECK(f[0].frame == 0);
  CHECK(f[0].time == 0.5);
  REQUIRE(f[0].pose);
  CHECK((*f[0].pose)(5) == 0.1);
  REQUIRE(f[0].covariance_xy);
  CHECK((*f[0].covariance_xy)(1, 1) == 4e-4);
  REQUIRE(f[0].covariance);
  CHECK((*f[0].covariance)(5, 5) == 1e-4);
  CHECK(f[1].status == "lost");
  CHECK(!f[1].pose);
  CHECK(!f[1].covariance);
  CHECK(f[2].status == "degenerate");
  CHECK(!f[2].covariance_xy);
  CHECK(f[2].covariance);

  // Matching: by index when the reference has one pose per listed frame, else by time.
  Trajectory ref;
  for (int k = 0; k < 3; ++k) {
    StampedPose p;
    p.time = 0.5 * (k + 1);
    p.pose.translation() << 1.0, 2.0 + 0.01 * k, 3.0;
    ref.push_back(p);
  }
  const auto by_index = covariance_samples(f, ref, 3, 0.01);
  REQUIRE(by_index.size() == 2);  // the lost frame has no pose
  CHECK(by_index[1].error(1) == Approx(-0.02));
  ref[2].time = 1.52;  // frame 2 at 1.5 s: no pose within 0.01 s when matched by time
  const auto by_time = covariance_samples(f, ref, 4, 0.01);
  REQUIRE(by_time.size() == 1);
  CHECK(by_time[0].frame == 0);
  CHECK(covariance_samples(f, ref, 4, 0.05).size() == 2);

  // Errors: the file, the line and the column.
  auto error_of = [&](const std::string& text) {
    test::write_bytes(dir / "bad.csv", text);
    try {
      read_localize_frames((dir / "bad.csv").string());
    } catch (const IoError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK_THAT(error_of("frame,time,status\n0,1,tracked\n"), Contains("no column 'x'"));
  CHECK_THAT(error_of(csv_header() + "0,0.5,a.pcd,tracked,1,2\n"), Contains("line 2: 6 fields"));
  CHECK_THAT(error_of(csv_header() + "0,0.5,a.pcd,tracked,1,oops,3,0,0,0" + empty(24) + "\n"),
             Contains("line 2, column y: 'oops' is not a finite number"));
  CHECK_THAT(error_of(csv_header() + "0,0.5,a.pcd,tracked,1,,3,0,0,0" + empty(24) + "\n"),
             Contains("1 of the pose's six columns"));
  CHECK_THAT(error_of(csv_header() + "0,0.5,\"a.pcd,tracked\n"), Contains("not closed"));
  CHECK_THAT(error_of(""), Contains("empty"));
  CHECK_THROWS_AS(read_localize_frames((dir / "missing.csv").string()), IoError);
  CHECK_THROWS_AS(read_localize_frames(dir.string()), IoError);
}
