// `ndtcu eval covariance` run in-process on a localization of the sample sequence (simulated,
// exact truth): what it reads, what it reports, that it agrees with localize's summary, and
// its errors.
#include "../support/cli_run.hpp"
#include "../support/test_support.hpp"

#include <ndtcu/covariance_calibration.hpp>
#include <ndtcu/trajectory.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

using namespace ndtcu;
namespace fs = std::filesystem;

namespace {

const fs::path kSample = test::source_dir() / "data" / "sample";

std::string sample(const std::string& name) { return (kSample / name).string(); }

// The fields of one line of frames.csv (the sample's names need no quoting).
std::vector<std::string> fields_of(const std::string& line) {
  std::vector<std::string> f;
  std::stringstream in(line);
  for (std::string x; std::getline(in, x, ',');) f.push_back(x);
  if (!line.empty() && line.back() == ',') f.emplace_back();
  return f;
}

}  // namespace

TEST_CASE("ndtcu eval covariance: a localized run's NEES, ellipses and worst frames, as localize's summary gives them",
          "[unit][cli]") {
  const fs::path dir = test::temp_dir("cli_eval_covariance");
  const fs::path run = dir / "run";
  const test::CliRun loc = test::run_ndtcu({"--json", "localize", "--map", sample("map.pcd"), "--scans", sample("scans"),
                                            "--init-from", sample("poses_tum.txt"), "--reference",
                                            sample("poses_tum.txt"), "--out", run.string(), "--backend", "cpu",
                                            "--threads", "2", "--no-plot"});
  CAPTURE(loc.err);
  REQUIRE(loc.rc == 0);
  const nlohmann::json summary = nlohmann::json::parse(loc.out);
  REQUIRE(summary["localized"] == 10);

  const test::CliRun r = test::run_ndtcu({"--json", "eval", "covariance", run.string(), "--reference",
                                          sample("poses_tum.txt"), "--worst", "3"});
  CAPTURE(r.err);
  REQUIRE(r.rc == 0);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  CHECK(j["reference"]["matching"] == "index");
  CHECK(j["frames_in_csv"] == 10);
  CHECK(j["frames_matched"] == 10);
  CHECK(j["frames"] == 10);
  CHECK(j["xy"]["frames"] == 10);
  CHECK(j["pose"]["frames"] == 10);  // the 6x6 covariance of every frame is in frames.csv
  CHECK(j["worst"].size() == 3);
  // The same figures as the summary of the run that wrote the folder.
  const nlohmann::json& s = summary["covariance_calibration"];
  CHECK(s["xy"]["nees_mean"] == j["xy"]["nees_mean"]);
  CHECK(s["pose"]["within99"] == j["pose"]["within99"]);
  CHECK(s["far"] == j["far"]);
  CHECK(s["worst"][0] == j["worst"][0]);

  // The worst frame's x-y NEES recomputed here from its row of frames.csv and its reference
  // pose: e' C^-1 e with the 2x2 inverse written out.
  const std::size_t worst = j["worst"][0]["frame"];
  std::ifstream csv(run / "frames.csv");
  std::string header, line;
  std::getline(csv, header);
  const std::vector<std::string> names = fields_of(header);
  for (std::size_t k = 0; k <= worst; ++k) std::getline(csv, line);
  const std::vector<std::string> row = fields_of(line);
  REQUIRE(row.size() == names.size());
  auto value = [&](const std::string& name) {
    const auto it = std::find(names.begin(), names.end(), name);
    REQUIRE(it != names.end());
    return std::stod(row[static_cast<std::size_t>(it - names.begin())]);
  };
  const Trajectory truth = read_trajectory(sample("poses_tum.txt"));
  const double ex = value("x") - truth[worst].pose.translation().x();
  const double ey = value("y") - truth[worst].pose.translation().y();
  const double a = value("cov_xx"), b = value("cov_xy"), d = value("cov_yy");
  const double by_hand = (d * ex * ex - 2.0 * b * ex * ey + a * ey * ey) / (a * d - b * b);
  CHECK(double(j["worst"][0]["nees_xy"]) == Approx(by_hand).epsilon(1e-6));
  CHECK(double(j["worst"][0]["error_xy_m"]) == Approx(std::hypot(ex, ey)).epsilon(1e-6));
  CHECK(double(j["xy"]["nees_max"]) == Approx(by_hand).epsilon(1e-6));

  // Text: the lines a person reads.
  const test::CliRun t = test::run_ndtcu({"eval", "covariance", run.string(), "--reference", sample("poses_tum.txt")});
  REQUIRE(t.rc == 0);
  CHECK_THAT(t.out, Catch::Contains("10 frames, 10 with a pose, 10 of them matched a reference pose (by index)") &&
                        Catch::Contains("x-y: NEES mean") && Catch::Contains("6-D: NEES mean") &&
                        Catch::Contains("over-confident: frame"));

  // Errors a person can act on: the folder, the summary, the reference.
  const test::CliRun no_dir = test::run_ndtcu({"eval", "covariance", (dir / "nowhere").string(), "--reference",
                                               sample("poses_tum.txt")});
  CHECK(no_dir.rc == 1);
  CHECK_THAT(no_dir.err, Catch::Contains("nowhere: not a folder"));
  fs::create_directories(dir / "empty");
  const test::CliRun no_summary = test::run_ndtcu({"eval", "covariance", (dir / "empty").string(), "--reference",
                                                   sample("poses_tum.txt")});
  CHECK(no_summary.rc == 1);
  CHECK_THAT(no_summary.err, Catch::Contains("summary.json: cannot be read"));
  const test::CliRun no_ref = test::run_ndtcu({"eval", "covariance", run.string(), "--reference",
                                               (dir / "missing.txt").string()});
  CHECK(no_ref.rc == 1);
  CHECK_THAT(no_ref.err, Catch::Contains("missing.txt"));
  const test::CliRun usage = test::run_ndtcu({"eval", "covariance", run.string()});
  CHECK(usage.rc == 2);
}
