// `ndtcu localize` run in-process on the sample sequence: whose clock its outputs are in,
// what frames.csv holds, what its warnings say and what it leaves in its folder.
#include "../support/cli_run.hpp"
#include "../support/test_support.hpp"

#include "cli_app.hpp"

#include <ndtcu/trajectory.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

using namespace ndtcu;
namespace fs = std::filesystem;

namespace {

using test::CliRun;

const fs::path kSample = test::source_dir() / "data" / "sample";

std::string sample(const std::string& name) { return (kSample / name).string(); }

// The sample sequence localized from its truth on the CPU, without plots, JSON on stdout.
std::vector<std::string> localize_args(const fs::path& out, std::vector<std::string> extra) {
  std::vector<std::string> a{"--json",    "localize", "--map",     sample("map.pcd"), "--out", out.string(),
                             "--backend", "cpu",      "--threads", "2",               "--no-plot"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

// `trajectory` with every time shifted by `by` seconds, in another fixed frame when `moved`.
Trajectory shifted(const Trajectory& trajectory, double by, bool moved) {
  Eigen::Isometry3d frame = Eigen::Isometry3d::Identity();
  if (moved) {
    frame.linear() = Eigen::AngleAxisd(0.7, Eigen::Vector3d::UnitZ()).toRotationMatrix();
    frame.translation() << 100.0, -50.0, 2.0;
  }
  Trajectory out;
  for (const StampedPose& p : trajectory) out.push_back({p.time + by, frame * p.pose});
  return out;
}

std::vector<std::string> lines_of(const fs::path& path) {
  std::vector<std::string> lines;
  std::istringstream in(test::read_bytes(path));
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

}  // namespace

TEST_CASE("ndtcu localize --reference keeps the scans' times: odometry in their clock predicts, the trajectory is "
          "in it",
          "[unit][cli]") {
  const fs::path dir = test::temp_dir("cli_reference_clock");
  const Trajectory truth = read_trajectory(sample("poses_tum.txt"));
  REQUIRE(truth.size() == 10);
  // The scans at 1.0-1.9 s, as a bag's record times or a list's would put them, with
  // odometry and the first pose in that clock; the reference (one pose per scan) at 0-0.9 s.
  std::string list;
  for (int k = 0; k < 10; ++k) list += fmt::format("{} {:.1f}\n", sample(fmt::format("scans/{:06d}.pcd", k)), 1.0 + 0.1 * k);
  test::write_bytes(dir / "scans.txt", list);
  write_trajectory_tum((dir / "odom.txt").string(), shifted(truth, 1.0, true));
  write_trajectory_tum((dir / "init.txt").string(), shifted(truth, 1.0, false));
  const CliRun r = test::run_ndtcu(localize_args(
      dir / "run", {"--scans", (dir / "scans.txt").string(), "--odometry", (dir / "odom.txt").string(), "--init-from",
                    (dir / "init.txt").string(), "--reference", sample("poses_tum.txt")}));
  CAPTURE(r.err);
  REQUIRE(r.rc == 0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["odometry"]["frames_predicted"] == 9);  // every frame after the first (it was 0)
  CHECK(j["odometry"]["frames_outside"] == 0);
  CHECK(j["reference"]["matching"] == "index");
  CHECK(j["reference"]["matched_scans"] == 10);
  CHECK(j["localized"] == 10);
  CHECK(j["ate"]["pairs"] == 10);
  CHECK(double(j["ate"]["rmse_m"]) < 0.02);
  // The trajectory in the scans' clock, and one a run takes back as a reference.
  const Trajectory written = read_trajectory((dir / "run" / "trajectory_tum.txt").string());
  REQUIRE(written.size() == 10);
  CHECK(written.front().time == Approx(1.0).margin(1e-9));
  CHECK(written.back().time == Approx(1.9).margin(1e-9));
  Trajectory as_reference = written;
  CHECK_NOTHROW(sort_reference(as_reference, "trajectory_tum.txt"));
  CHECK(lines_of(dir / "run" / "frames.csv").at(1).rfind("0,1.000000,", 0) == 0);
}

TEST_CASE("ndtcu localize refuses a scan list whose times would give a trajectory it cannot read back",
          "[unit][cli]") {
  const fs::path dir = test::temp_dir("cli_list_times");
  // All at time 0: the run wrote trajectory_tum.txt with ten poses at one stamp, which it
  // then refused as --reference.
  std::string list;
  for (int k = 0; k < 3; ++k) list += sample(fmt::format("scans/{:06d}.pcd", k)) + " 0\n";
  test::write_bytes(dir / "zero.txt", list);
  const CliRun r = test::run_ndtcu(localize_args(
      dir / "run", {"--scans", (dir / "zero.txt").string(), "--init-from", sample("poses_tum.txt")}));
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Catch::Contains("zero.txt: line 2 (000001.pcd): time 0 does not come after the previous scan's 0") &&
                        Catch::Contains("every scan at that one time"));
  CHECK_FALSE(fs::exists(dir / "run" / "trajectory_tum.txt"));
  // A time of 1e300 s, named with its line.
  test::write_bytes(dir / "absurd.txt", sample("scans/000000.pcd") + " 0\n" + sample("scans/000001.pcd") + " 1e300\n");
  const CliRun a = test::run_ndtcu(localize_args(
      dir / "run", {"--scans", (dir / "absurd.txt").string(), "--init-from", sample("poses_tum.txt")}));
  CHECK(a.rc == 1);
  CHECK_THAT(a.err, Catch::Contains("absurd.txt: line 2 (000001.pcd): time 1e+300 is not a time stamp in seconds"));
}

namespace {

// The fields of the CSV records in `text`, as RFC 4180 reads them (quoted fields may hold
// commas, doubled quotes and line breaks).
std::vector<std::vector<std::string>> csv_records(const std::string& text) {
  std::vector<std::vector<std::string>> records(1, std::vector<std::string>(1));
  bool quoted = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        records.back().back() += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        records.back().back() += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      records.back().emplace_back();
    } else if (c == '\n') {
      records.emplace_back(1);
    } else {
      records.back().back() += c;
    }
  }
  if (records.back().size() == 1 && records.back()[0].empty()) records.pop_back();
  return records;
}

// Sets an environment variable for a scope.
struct ScopedEnv {
  std::string name;
  std::optional<std::string> old;
  ScopedEnv(std::string variable, const std::string& value) : name(std::move(variable)) {
    if (const char* v = std::getenv(name.c_str())) old = v;
    ::setenv(name.c_str(), value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old) {
      ::setenv(name.c_str(), old->c_str(), 1);
    } else {
      ::unsetenv(name.c_str());
    }
  }
};

}  // namespace

TEST_CASE("frames.csv quotes file names as RFC 4180 says and keeps formulas out of spreadsheets; the plotter reads it",
          "[unit][cli]") {
  const fs::path dir = test::temp_dir("cli_frames_csv_names");
  const fs::path scans = dir / "scans";
  fs::create_directories(scans);
  // Names that sort in this order (their times are their positions x 0.1 s).
  const std::vector<std::string> names = {"+x.pcd", "-y.pcd", "000001,\"x\",=1+2.pcd", "=cmd|' -C calc'!A0.pcd",
                                          "@w\nv.pcd"};
  const std::vector<std::string> written = {"'+x.pcd", "'-y.pcd", "000001,\"x\",=1+2.pcd", "'=cmd|' -C calc'!A0.pcd",
                                            "'@w\nv.pcd"};
  for (std::size_t k = 0; k < names.size(); ++k) {
    fs::copy_file(sample(fmt::format("scans/{:06d}.pcd", k)), scans / names[k]);
  }
  // Plotted when a Python that imports matplotlib and the built package is there.
  std::optional<ScopedEnv> python_path;
  if (!test::python_dir().empty()) python_path.emplace("PYTHONPATH", test::python_dir().string());
  std::vector<std::string> args = localize_args(dir / "run", {"--scans", scans.string(), "--init-from", sample("poses_tum.txt")});
  args.erase(std::find(args.begin(), args.end(), "--no-plot"));
  const CliRun r = test::run_ndtcu(args);
  CAPTURE(r.err);
  REQUIRE(r.rc == 0);
  const auto records = csv_records(test::read_bytes(dir / "run" / "frames.csv"));
  REQUIRE(records.size() == names.size() + 1);
  CHECK(records[0][2] == "file");
  for (std::size_t k = 0; k < names.size(); ++k) {
    CAPTURE(k);
    CHECK(records[k + 1].size() == records[0].size());
    CHECK(records[k + 1][0] == std::to_string(k));
    CHECK(records[k + 1][2] == written[k]);
  }
  const auto summary = nlohmann::json::parse(test::read_bytes(dir / "run" / "summary.json"));
  if (std::system("python3 -c 'import matplotlib, ndtcu.plot' >/dev/null 2>&1") != 0 &&
      std::system("/usr/bin/python3 -c 'import matplotlib, ndtcu.plot' >/dev/null 2>&1") != 0) {
    WARN("the plotter's part skipped: no Python here imports matplotlib and ndtcu.plot");
    return;
  }
  CHECK(summary["files"]["plots"].size() == 2);
  CHECK(fs::exists(dir / "run" / "frames.png"));
}

TEST_CASE("an empty, zero-width or all-NaN frame is lost for too few points, and the warning says so", "[unit][cli]") {
  const fs::path dir = test::temp_dir("cli_too_few_points");
  const std::string header = "VERSION .7\nFIELDS x y z\nSIZE 4 4 4\nTYPE F F F\nCOUNT 1 1 1\n";
  test::write_bytes(dir / "empty.pcd", header + "WIDTH 0\nHEIGHT 1\nPOINTS 0\nDATA ascii\n");
  test::write_bytes(dir / "zero_width.pcd", header + "WIDTH 0\nHEIGHT 0\nPOINTS 0\nDATA ascii\n");
  test::write_bytes(dir / "nan.pcd", header + "WIDTH 2\nHEIGHT 1\nPOINTS 2\nDATA ascii\nnan nan nan\nnan 1 2\n");
  test::write_bytes(dir / "scans.txt", sample("scans/000000.pcd") + " 0.0\n" + (dir / "empty.pcd").string() + " 0.1\n" +
                                           (dir / "zero_width.pcd").string() + " 0.2\n" + (dir / "nan.pcd").string() +
                                           " 0.3\n" + sample("scans/000001.pcd") + " 0.4\n");
  const CliRun r = test::run_ndtcu(
      localize_args(dir / "run", {"--scans", (dir / "scans.txt").string(), "--init-from", sample("poses_tum.txt")}));
  CAPTURE(r.err);
  REQUIRE(r.rc == 0);
  for (const char* name : {"empty.pcd", "zero_width.pcd", "nan.pcd"}) {
    CAPTURE(name);
    CHECK_THAT(r.err, Catch::Contains(fmt::format("({}) lost after 0 attempts: too few points: 0 left after the range "
                                                  "crop and the voxel filter, fewer than --min-frame-points 100",
                                                  name)));
  }
  CHECK_THAT(r.err, !Catch::Contains("best NVTL") && !Catch::Contains("did not converge"));
  const auto records = lines_of(dir / "run" / "frames.csv");
  REQUIRE(records.size() == 6);
  for (int k = 2; k <= 4; ++k) CHECK_THAT(records[static_cast<std::size_t>(k)], Catch::Contains(",too few points,"));
}

TEST_CASE("a number below an option's range is refused with the range as a person writes it", "[unit][cli]") {
  // CLI11's NonNegativeNumber and PositiveNumber printed their upper end, the largest
  // double, in 309 digits.
  for (const auto& [args, expected] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"localize", "--map", "m.pcd", "--scans", "s", "--voxel", "-1"}, "--voxel: value -1 must be >= 0"},
           {{"localize", "--map", "m.pcd", "--scans", "s", "--max-range", "-1"}, "--max-range: value -1 must be > 0"},
           {{"localize", "--map", "m.pcd", "--scans", "s", "--min-range", "-1"}, "--min-range: value -1 must be >= 0"},
           {{"align", "a.pcd", "b.pcd", "--regularization", "-1"}, "--regularization: value -1 must be >= 0"},
           {{"align", "a.pcd", "b.pcd", "--source-voxel", "-0.5"}, "--source-voxel: value -0.5 must be >= 0"}}) {
    CAPTURE(args);
    const CliRun r = test::run_ndtcu(args);
    CHECK(r.rc == 2);
    CHECK_THAT(r.err, Catch::StartsWith(expected));
  }
  // No option of any command prints a number of 20 digits or more for any value below 0.
  const auto cli = cli::make_cli_app();
  for (const CLI::App* sub : cli->app.get_subcommands([](const CLI::App*) { return true; })) {
    for (const CLI::Option* o : sub->get_options()) {
      const std::string type = o->get_type_name().substr(0, o->get_type_name().find(':'));
      if ((type != "FLOAT" && type != "INT" && type != "UINT") || !o->nonpositional()) continue;
      std::vector<std::string> args{sub->get_name(), o->get_name(), "-1"};
      for (int k = 1; k < std::max(1, o->get_expected_min()); ++k) args.push_back("-1");
      args.push_back("--not-an-option");  // never a run, whatever the value does
      CAPTURE(args);
      const CliRun r = test::run_ndtcu(args);
      std::size_t run = 0, longest = 0;
      for (const char c : r.err) {
        run = std::isdigit(static_cast<unsigned char>(c)) ? run + 1 : 0;
        longest = std::max(longest, run);
      }
      CHECK(longest < 20);
    }
  }
}

TEST_CASE("a refine ratio or resolution too small says so, not that the map's origin is wrong", "[unit][cli]") {
  const fs::path dir = test::temp_dir("cli_tiny_resolution");
  const CliRun r = test::run_ndtcu(localize_args(dir / "run", {"--scans", sample("scans"), "--init-from",
                                                               sample("poses_tum.txt"), "--refine-ratio", "1e-9"}));
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Catch::Contains("refine_ratio 1e-09 x resolution 2: voxel map: resolution 2e-09 m is too small for "
                                    "this cloud") &&
                        !Catch::Contains("origin"));
  const CliRun a = test::run_ndtcu({"align", sample("map.pcd"), sample("scans/000000.pcd"), "--backend", "cpu",
                                    "--resolution", "1e-300"});
  CHECK(a.rc == 1);
  CHECK_THAT(a.err, Catch::Contains("resolution 1e-300 m is too small") && !Catch::Contains("origin"));
}

TEST_CASE("a prior's standard deviation whose weight would be 0 is named, not taken for a missing --prior-sigma",
          "[unit][cli]") {
  const std::vector<std::string> align = {"align", sample("map.pcd"), sample("scans/000000.pcd"), "--backend", "cpu",
                                          "--prior", "0,0,0,0,0,0", "--prior-sigma"};
  std::vector<std::string> huge = align;
  huge.push_back("1e300,inf,inf,inf,inf,inf");
  const CliRun h = test::run_ndtcu(huge);
  CHECK(h.rc == 1);
  CHECK_THAT(h.err, Catch::Contains("--prior-sigma: x standard deviation '1e300' is out of range: it must lie in "
                                    "[1e-150, 1e+150] (its weight 1/sigma^2 is 0 beyond)"));
  std::vector<std::string> tiny = align;
  tiny.push_back("0.1,0.1,1e-200,inf,inf,inf");
  const CliRun t = test::run_ndtcu(tiny);
  CHECK(t.rc == 1);
  CHECK_THAT(t.err, Catch::Contains("z standard deviation '1e-200' is out of range") && Catch::Contains("infinite beyond"));
  std::vector<std::string> none = align;
  none.push_back("inf,inf,inf,inf,inf,inf");
  const CliRun n = test::run_ndtcu(none);
  CHECK(n.rc == 1);
  CHECK_THAT(n.err, Catch::Contains("--prior-sigma: every standard deviation is inf"));
}

TEST_CASE("ndtcu localize --odometry de-skews each scan with the odometry's motion over its own sweep",
          "[unit][cli][sim]") {
  // The simulator's fast drive (VLP-16 at 24 m/s, 0.1 s sweeps with per-point times) and
  // its exact poses as odometry. The odometry covers every sweep but the last (its end lies
  // past the last pose): frames 0-4 are given their sweep's motion, frame 0 too, which has no
  // pose before it to take a motion from (with constant velocity, its sweep's own motion
  // along the sensor's x axis, it is 2.5 cm off, and 8.0 cm with --deskew-sideways). Its
  // odometry at 100 Hz (--odometry-rate: odometry_tum.txt) has nine poses inside each sweep:
  // every sweep it covers is given its motion in ten parts.
  const fs::path dir = test::temp_dir("cli_sweep_odometry");
  const fs::path sim = dir / "sim";
  const CliRun made = test::run_ndtcu({"simulate", "--out", sim.string(), "--scenario", "fast", "--sweep-time", "0.1",
                                       "--frames", "6", "--sensor", "vlp16", "--seed", "1", "--threads", "2",
                                       "--odometry-rate", "100"});
  CAPTURE(made.err);
  REQUIRE(made.rc == 0);
  const std::string poses = (sim / "poses_tum.txt").string();
  const auto run = [&](const std::string& name, const std::string& deskew, const std::string& odometry,
                       const std::string& extra = "--no-plot") {
    const CliRun r = test::run_ndtcu({"--json", "localize", "--map", (sim / "map.pcd").string(), "--scans",
                                      (sim / "scans").string(), "--out", (dir / name).string(), "--backend", "cpu",
                                      "--threads", "2", "--no-plot", "--init-from", poses, "--reference", poses,
                                      "--odometry", odometry, "--odometry-noise", "0,0,0,0", "--deskew", deskew, extra});
    CAPTURE(r.err);
    REQUIRE(r.rc == 0);
    return nlohmann::json::parse(r.out);
  };
  const auto swept = run("odometry", "odometry", poses);
  CHECK(swept["odometry"]["frames_sweep_motion"] == 5);
  CHECK(swept["odometry"]["frames_sweep_parts"] == 0);
  CHECK(swept["deskewed"] == 6);
  CHECK(swept["lost"] == 0);
  CHECK(swept["success"]["accepted_wrong"] == 0);
  CHECK(double(swept["ate"]["rmse_m"]) < 0.03);
  // Constant velocity takes no motion from the odometry.
  const auto cv = run("constant_velocity", "constant-velocity", poses);
  CHECK(cv["odometry"]["frames_sweep_motion"] == 0);
  CHECK(cv["frame_times_disagree"] == false);
  // The first frame's own motion along the sensor's x axis (the default), or free to move
  // sideways.
  const auto sideways = run("sideways", "constant-velocity", poses, "--deskew-sideways");
  CHECK(cv["settings"]["deskew_forward"] == true);
  CHECK(sideways["settings"]["deskew_forward"] == false);
  std::printf("constant velocity, 6 frames: ATE %.4f m along x, %.4f m sideways free\n", double(cv["ate"]["rmse_m"]),
              double(sideways["ate"]["rmse_m"]));
  CHECK(sideways["success"]["accepted_wrong"] == 0);
  CHECK(double(cv["ate"]["rmse_m"]) < double(sideways["ate"]["rmse_m"]));
  // The scans numbered at a tenth of their period: 2.4 m between the first two frames in
  // 0.01 s (240 m/s), where the first's sweep moved at 24 m/s by its points' times.
  const CliRun tenth = test::run_ndtcu({"--json", "localize", "--map", (sim / "map.pcd").string(), "--scans",
                                       (sim / "scans").string(), "--out", (dir / "tenth").string(), "--backend", "cpu",
                                       "--threads", "2", "--no-plot", "--init-from", poses, "--deskew",
                                       "constant-velocity", "--period", "0.01"});
  CAPTURE(tenth.err);
  REQUIRE(tenth.rc == 0);
  CHECK(nlohmann::json::parse(tenth.out)["frame_times_disagree"] == true);
  CHECK_THAT(tenth.err, Catch::Contains("do not match their points' times"));
  // The dense odometry, its poses covering the last sweep too.
  const std::string dense = (sim / "odometry_tum.txt").string();
  REQUIRE(fs::exists(dense));
  const auto parts = run("odometry_dense", "odometry", dense);
  CHECK(parts["odometry"]["poses"] == 61);  // 0 to 0.6 s at 100 Hz: the last sweep's end
  CHECK(parts["odometry"]["frames_sweep_motion"] == 6);
  CHECK(parts["odometry"]["frames_sweep_parts"] == 6);
  CHECK(parts["lost"] == 0);
  CHECK(parts["success"]["accepted_wrong"] == 0);
  CHECK(double(parts["ate"]["rmse_m"]) < 0.03);
}
