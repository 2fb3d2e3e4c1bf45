#include <ndtcu/covariance_calibration.hpp>

#include <ndtcu/aligner.hpp>
#include <ndtcu/error.hpp>
#include <ndtcu/text.hpp>

#include "io/bytes.hpp"

#include <Eigen/Cholesky>
#include <Eigen/Eigenvalues>
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <string_view>

namespace ndtcu {

namespace {

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kPi = 3.14159265358979323846;

// The regularised lower incomplete gamma function P(a, x), a > 0, x >= 0: its series for
// x < a + 1, else 1 - Q(a, x) by Q's continued fraction (modified Lentz), as in Press et
// al., Numerical Recipes (3rd ed.), sec. 6.2. Each converges to double precision well
// within the 100,000 terms allowed here for the a of up to 1e7 a NEES mean's bounds need
// (the series takes O(sqrt(a)) terms near x = a, the fraction fewer still).
double gamma_p(double a, double x) {
  if (x <= 0.0) return 0.0;
  if (std::isinf(x)) return 1.0;
  const double log_prefactor = a * std::log(x) - x - std::lgamma(a);
  constexpr int kMaxTerms = 100000;
  constexpr double kEps = 1e-16;
  if (x < a + 1.0) {
    double term = 1.0 / a, sum = term;
    for (int n = 1; n < kMaxTerms; ++n) {
      term *= x / (a + n);
      sum += term;
      if (std::abs(term) < std::abs(sum) * kEps) break;
    }
    return std::min(1.0, sum * std::exp(log_prefactor));
  }
  constexpr double kTiny = 1e-300;
  double b = x + 1.0 - a, c = 1.0 / kTiny, d = 1.0 / b, h = d;
  for (int i = 1; i < kMaxTerms; ++i) {
    const double an = -i * (i - a);
    b += 2.0;
    d = an * d + b;
    if (std::abs(d) < kTiny) d = kTiny;
    c = b + an / c;
    if (std::abs(c) < kTiny) c = kTiny;
    d = 1.0 / d;
    const double delta = d * c;
    h *= delta;
    if (std::abs(delta - 1.0) < kEps) break;
  }
  return std::max(0.0, 1.0 - std::exp(log_prefactor) * h);
}

void check_dof(double dof, const char* what) {
  if (!(dof >= 1.0) || !std::isfinite(dof)) {
    throw Error(fmt::format("{}: degrees of freedom must be a finite number >= 1, not {}", what, dof));
  }
}

// A kept NEES (a float: 4 bytes a frame, 7 digits) as the double with its shortest decimal
// form, so that reports show 8.27, not 8.2700004577636719.
double as_double(float v) { return std::strtod(fmt::format("{}", v).c_str(), nullptr); }

// Nearest-rank median of `v` (a copy); 0 for none.
double median_of(std::vector<float> v) {
  if (v.empty()) return 0.0;
  const auto k = v.begin() + static_cast<std::ptrdiff_t>((v.size() - 1) / 2);
  std::nth_element(v.begin(), k, v.end());
  return as_double(*k);
}

NeesStats nees_stats(const std::vector<float>& values, std::size_t invalid, int dof) {
  NeesStats s;
  s.dof = dof;
  s.frames = values.size();
  s.invalid = invalid;
  if (values.empty()) return s;
  const double q95 = chi_square_quantile(0.95, dof), q99 = chi_square_quantile(0.99, dof);
  std::size_t in95 = 0, in99 = 0;
  double sum = 0.0;
  for (const float v : values) {
    sum += v;
    s.max = std::max(s.max, static_cast<double>(v));
    in95 += v <= q95;
    in99 += v <= q99;
  }
  const double n = static_cast<double>(values.size());
  s.mean = sum / n;
  s.median = median_of(values);
  s.max = as_double(static_cast<float>(s.max));
  s.within95 = static_cast<double>(in95) / n;
  s.within99 = static_cast<double>(in99) / n;
  // Under an honest covariance the frames' NEES sum is chi-square with n * dof degrees of
  // freedom (independent errors), so its mean lies within these bounds 95% of the time.
  s.mean_low95 = chi_square_quantile(0.025, n * dof) / n;
  s.mean_high95 = chi_square_quantile(0.975, n * dof) / n;
  return s;
}

// The least over-confident of the kept frames on top of the heap.
bool more_over_confident(const OverConfidentFrame& a, const OverConfidentFrame& b) { return a.nees_xy > b.nees_xy; }

}  // namespace

std::vector<std::string> covariance6_columns() {
  std::vector<std::string> names;
  for (int i = 0; i < 6; ++i) {
    for (int j = i; j < 6; ++j) names.push_back(fmt::format("cov_{}_{}", kPoseEntryNames[i], kPoseEntryNames[j]));
  }
  return names;
}

double chi_square_cdf(double x, double dof) {
  check_dof(dof, "chi_square_cdf");
  if (std::isnan(x)) throw Error("chi_square_cdf: x is NaN");
  return gamma_p(0.5 * dof, 0.5 * x);
}

double chi_square_quantile(double p, double dof) {
  check_dof(dof, "chi_square_quantile");
  if (!(p > 0.0 && p < 1.0)) throw Error(fmt::format("chi_square_quantile: p must lie in (0, 1), not {}", p));
  // Bracket, then bisect: the cdf is increasing, and the mean (dof) plus enough standard
  // deviations (sqrt(2 dof)) holds any p short of 1 - 1e-300.
  double lo = 0.0, hi = dof + 10.0 * std::sqrt(2.0 * dof) + 10.0;
  while (chi_square_cdf(hi, dof) < p) hi *= 2.0;
  for (int i = 0; i < 200 && hi - lo > 1e-12 * hi; ++i) {
    const double mid = 0.5 * (lo + hi);
    (chi_square_cdf(mid, dof) < p ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

double nees(const Eigen::VectorXd& error, const Eigen::MatrixXd& covariance) {
  if (covariance.rows() != error.size() || covariance.cols() != error.size()) {
    throw Error(fmt::format("nees: a {}-entry error and a {}x{} covariance", error.size(), covariance.rows(),
                            covariance.cols()));
  }
  if (!error.allFinite() || !covariance.allFinite()) return kNan;
  // Symmetric within rounding: the CSV's six digits leave 1e-6 relative differences.
  const double scale = covariance.cwiseAbs().maxCoeff();
  if (!((covariance - covariance.transpose()).cwiseAbs().maxCoeff() <= 1e-5 * scale)) return kNan;
  const Eigen::LLT<Eigen::MatrixXd> llt(0.5 * (covariance + covariance.transpose()));
  if (llt.info() != Eigen::Success) return kNan;
  const double v = error.dot(llt.solve(error));
  return std::isfinite(v) && v >= 0.0 ? v : kNan;
}

double sigma_along(const Eigen::Vector2d& e, const Eigen::Matrix2d& c) {
  const double n = e.norm();
  if (!(n > 0.0)) {
    const Eigen::SelfAdjointEigenSolver<Eigen::Matrix2d> eig(0.5 * (c + c.transpose()), Eigen::EigenvaluesOnly);
    return std::sqrt(std::max(0.0, eig.eigenvalues()(1)));
  }
  const Eigen::Vector2d u = e / n;
  return std::sqrt(std::max(0.0, u.dot(c * u)));
}

Pose6 pose_error(const Eigen::Matrix4d& estimate, const Eigen::Matrix4d& reference) {
  Pose6 d = matrix_to_pose(estimate) - matrix_to_pose(reference);
  for (int a = 3; a < 6; ++a) d(a) = std::remainder(d(a), 2.0 * kPi);
  return d;
}

CovarianceCalibrationAccumulator::CovarianceCalibrationAccumulator(const CovarianceCalibrationOptions& options)
    : options_(options) {
  if (!(options.far_m > 0.0 && std::isfinite(options.far_m))) {
    throw Error(fmt::format("covariance calibration: far_m must be a finite number > 0, not {}", options.far_m));
  }
  if (!(options.small_sigma_m > 0.0 && std::isfinite(options.small_sigma_m))) {
    throw Error(fmt::format("covariance calibration: small_sigma_m must be a finite number > 0, not {}",
                            options.small_sigma_m));
  }
  for (const auto& [value, name] : {std::pair<double, const char*>{options.reference_sigma_m, "reference_sigma_m"},
                                    {options.reference_sigma_rad, "reference_sigma_rad"}}) {
    if (!(value >= 0.0 && std::isfinite(value))) {
      throw Error(fmt::format("covariance calibration: {} must be a finite number >= 0, not {}", name, value));
    }
  }
}

void CovarianceCalibrationAccumulator::add(const CovarianceSample& s) {
  if (!s.covariance_xy && !s.covariance) return;
  ++frames_;
  const Eigen::Vector2d e_xy = s.error.head<2>();
  // The error's covariance: the reported one plus the reference's own (options_.reference_sigma_*).
  const double p2 = options_.reference_sigma_m * options_.reference_sigma_m;
  const double a2 = options_.reference_sigma_rad * options_.reference_sigma_rad;
  std::optional<Eigen::Matrix<double, 6, 6>> covariance = s.covariance;
  if (covariance) covariance->diagonal() += (Pose6() << p2, p2, p2, a2, a2, a2).finished();
  std::optional<Eigen::Matrix2d> covariance_xy = s.covariance_xy;
  if (covariance_xy) covariance_xy->diagonal() += Eigen::Vector2d(p2, p2);
  if (covariance) {
    const double v = nees(s.error, *covariance);
    if (std::isnan(v)) {
      ++pose_invalid_;
    } else {
      pose_.push_back(static_cast<float>(v));
    }
  }
  for (int a = 0; a < 6; ++a) {
    double variance = kNan;
    if (covariance) {
      variance = (*covariance)(a, a);
    } else if (a < 2 && covariance_xy) {
      variance = (*covariance_xy)(a, a);
    } else {
      continue;
    }
    if (variance > 0.0 && std::isfinite(variance) && std::isfinite(s.error(a))) {
      axis_[a].push_back(static_cast<float>(s.error(a) * s.error(a) / variance));
    } else {
      ++axis_invalid_[a];
    }
  }
  if (!covariance_xy) return;
  const double v = nees(e_xy, *covariance_xy);
  if (std::isnan(v)) {
    ++xy_invalid_;
    return;
  }
  xy_.push_back(static_cast<float>(v));
  OverConfidentFrame f{s.frame, s.time, s.status, e_xy.norm(), sigma_along(e_xy, *s.covariance_xy), v};
  if (f.error_xy_m > options_.far_m) {
    ++far_;
    far_confident_ += f.sigma_m < options_.small_sigma_m;
  }
  if (options_.worst == 0) return;
  if (worst_.size() < options_.worst) {
    worst_.push_back(std::move(f));
    std::push_heap(worst_.begin(), worst_.end(), more_over_confident);
  } else if (f.nees_xy > worst_.front().nees_xy) {
    std::pop_heap(worst_.begin(), worst_.end(), more_over_confident);
    worst_.back() = std::move(f);
    std::push_heap(worst_.begin(), worst_.end(), more_over_confident);
  }
}

CovarianceCalibration CovarianceCalibrationAccumulator::result() const {
  CovarianceCalibration c;
  c.options = options_;
  c.frames = frames_;
  c.xy = nees_stats(xy_, xy_invalid_, 2);
  c.pose = nees_stats(pose_, pose_invalid_, 6);
  for (int a = 0; a < 6; ++a) c.axis[a] = nees_stats(axis_[a], axis_invalid_[a], 1);
  c.far = far_;
  c.far_confident = far_confident_;
  c.worst = worst_;
  std::sort(c.worst.begin(), c.worst.end(), more_over_confident);
  return c;
}

CovarianceCalibration calibrate_covariance(const std::vector<CovarianceSample>& samples,
                                           const CovarianceCalibrationOptions& options) {
  CovarianceCalibrationAccumulator acc(options);
  for (const CovarianceSample& s : samples) acc.add(s);
  return acc.result();
}

namespace {

// RFC 4180 records of `in`: fields split at commas, a quoted field's "" a quote, and its
// commas and line breaks its own; records end at LF (a CR before it dropped). Calls
// `record(fields, line)` with the line each record starts on. Reads as it goes: only one
// record is held.
template <typename F>
void for_each_csv_record(std::istream& in, const std::string& path, F&& record) {
  std::vector<std::string> fields(1);
  std::size_t line = 1, record_line = 1;
  bool quoted = false, any = false;
  std::streambuf* buf = in.rdbuf();
  for (int c = buf->sbumpc(); c != std::char_traits<char>::eof(); c = buf->sbumpc()) {
    const char ch = static_cast<char>(c);
    if (quoted) {
      if (ch == '"') {
        if (buf->sgetc() == '"') {
          fields.back() += '"';
          buf->sbumpc();
        } else {
          quoted = false;
        }
      } else {
        line += ch == '\n';
        fields.back() += ch;
      }
      continue;
    }
    any = true;
    if (ch == '"') {
      quoted = true;
    } else if (ch == ',') {
      fields.emplace_back();
    } else if (ch == '\n') {
      if (!fields.back().empty() && fields.back().back() == '\r') fields.back().pop_back();
      record(fields, record_line);
      fields.assign(1, std::string());
      any = false;
      record_line = ++line;
    } else {
      fields.back() += ch;
    }
  }
  if (in.bad()) throw IoError(path, fmt::format("read failed at line {}", line));
  if (quoted) throw IoError(path, fmt::format("line {}: a quoted field is not closed before the end of the file", record_line));
  if (any) record(fields, record_line);
}

}  // namespace

void for_each_localize_frame(const std::string& frames_csv, const std::function<void(const LocalizeFrame&)>& frame) {
  std::error_code ec;
  if (std::filesystem::is_directory(frames_csv, ec)) throw IoError(frames_csv, "is a folder, not a frames.csv");
  std::ifstream in(frames_csv, std::ios::binary);
  if (!in) throw IoError(frames_csv, fmt::format("cannot be opened: {}", std::strerror(errno)));
  std::map<std::string, std::size_t> column;
  std::size_t width = 0;
  const std::vector<std::string> cov6 = covariance6_columns();
  bool has_cov6 = false;
  auto index_of = [&](const std::string& name) {
    const auto it = column.find(name);
    if (it == column.end()) {
      throw IoError(frames_csv, fmt::format("line 1: no column '{}' (not a frames.csv of `ndtcu localize`?)", name));
    }
    return it->second;
  };
  for_each_csv_record(in, frames_csv, [&](const std::vector<std::string>& f, std::size_t line) {
    if (width == 0) {
      width = f.size();
      for (std::size_t k = 0; k < f.size(); ++k) column.emplace(f[k], k);
      for (const char* name : {"frame", "time", "status", "x", "y", "z", "roll", "pitch", "yaw", "cov_xx", "cov_xy",
                               "cov_yy"}) {
        index_of(name);
      }
      has_cov6 = column.count(cov6.front()) > 0;
      if (has_cov6) {
        for (const std::string& name : cov6) index_of(name);
      }
      return;
    }
    if (f.size() != width) {
      throw IoError(frames_csv, fmt::format("line {}: {} fields where the header has {}", line, f.size(), width));
    }
    // A number where one is due, or nullopt for an empty field.
    auto number = [&](const std::string& name) -> std::optional<double> {
      const std::string& text = f[index_of(name)];
      if (text.empty()) return std::nullopt;
      double v = 0.0;
      if (!detail::parse_double(text, v) || !std::isfinite(v)) {
        throw IoError(frames_csv, fmt::format("line {}, column {}: '{}' is not a finite number", line, name,
                                              printable(text.substr(0, 40))));
      }
      return v;
    };
    auto required = [&](const std::string& name) {
      const std::optional<double> v = number(name);
      if (!v) throw IoError(frames_csv, fmt::format("line {}, column {}: empty", line, name));
      return *v;
    };
    LocalizeFrame fr;
    const double index = required("frame");
    if (!(index >= 0.0 && index <= 1e15 && index == std::floor(index))) {
      throw IoError(frames_csv, fmt::format("line {}, column frame: {} is not a frame number", line, index));
    }
    fr.frame = static_cast<std::size_t>(index);
    fr.time = required("time");
    fr.status = f[index_of("status")];
    // All six, or none (lost and skipped frames).
    Pose6 p;
    int given = 0;
    for (int a = 0; a < 6; ++a) {
      const std::optional<double> v = number(kPoseEntryNames[a]);
      given += v.has_value();
      p(a) = v.value_or(0.0);
    }
    if (given != 0 && given != 6) {
      throw IoError(frames_csv, fmt::format("line {}: {} of the pose's six columns x..yaw are empty", line, 6 - given));
    }
    if (given == 6) fr.pose = p;
    const std::optional<double> xx = number("cov_xx"), xy = number("cov_xy"), yy = number("cov_yy");
    if (xx && xy && yy) {
      Eigen::Matrix2d c;
      c << *xx, *xy, *xy, *yy;
      fr.covariance_xy = c;
    }
    if (has_cov6) {
      Eigen::Matrix<double, 6, 6> c;
      int k = 0, filled = 0;
      for (int i = 0; i < 6; ++i) {
        for (int j = i; j < 6; ++j) {
          const std::optional<double> v = number(cov6[k++]);
          filled += v.has_value();
          c(i, j) = c(j, i) = v.value_or(0.0);
        }
      }
      if (filled != 0 && filled != 21) {
        throw IoError(frames_csv, fmt::format("line {}: {} of the 21 covariance columns cov_x_x..cov_yaw_yaw are empty",
                                              line, 21 - filled));
      }
      if (filled == 21) fr.covariance = c;
    }
    frame(fr);
  });
  if (width == 0) throw IoError(frames_csv, "empty: no header line");
}

std::vector<LocalizeFrame> read_localize_frames(const std::string& frames_csv) {
  std::vector<LocalizeFrame> frames;
  for_each_localize_frame(frames_csv, [&](const LocalizeFrame& f) { frames.push_back(f); });
  return frames;
}

std::optional<CovarianceSample> covariance_sample(const LocalizeFrame& f, const Trajectory& reference,
                                                 std::size_t frames_listed, double max_time_difference) {
  if (!f.pose) return std::nullopt;
  std::optional<std::size_t> match;
  if (reference.size() == frames_listed) {
    if (f.frame < reference.size()) match = f.frame;
  } else {
    match = nearest_in_time(reference, f.time, max_time_difference);
  }
  if (!match) return std::nullopt;
  CovarianceSample s;
  s.frame = f.frame;
  s.time = f.time;
  s.status = f.status;
  s.error = pose_error(pose_to_matrix(*f.pose), reference[*match].pose.matrix());
  s.covariance_xy = f.covariance_xy;
  s.covariance = f.covariance;
  return s;
}

std::vector<CovarianceSample> covariance_samples(const std::vector<LocalizeFrame>& frames, const Trajectory& reference,
                                                 std::size_t frames_listed, double max_time_difference) {
  std::vector<CovarianceSample> samples;
  for (const LocalizeFrame& f : frames) {
    if (auto s = covariance_sample(f, reference, frames_listed, max_time_difference)) samples.push_back(std::move(*s));
  }
  return samples;
}

LocalizeRunCalibration calibrate_localize_run(const std::string& frames_csv, const Trajectory& reference,
                                              std::size_t frames_listed, double max_time_difference,
                                              const CovarianceCalibrationOptions& options) {
  CovarianceCalibrationAccumulator acc(options);
  LocalizeRunCalibration run;
  for_each_localize_frame(frames_csv, [&](const LocalizeFrame& f) {
    ++run.frames;
    run.with_pose += f.pose.has_value();
    const std::optional<CovarianceSample> s = covariance_sample(f, reference, frames_listed, max_time_difference);
    if (!s) return;
    ++run.matched;
    acc.add(*s);
  });
  run.calibration = acc.result();
  return run;
}

}  // namespace ndtcu
