// Autoware's ndt_scan_matcher.param.yaml (`--config`): the file as autoware_core ships it
// gives exactly its values, unknown keys and values of the wrong type are warnings naming
// the key and the file, values out of range are errors naming the file, the key and the
// value, and unreadable files are errors naming the file.
#include "../support/test_support.hpp"

#include "autoware_params.hpp"
#include "cli_common.hpp"

#include <ndtcu/error.hpp>
#include <ndtcu/settings.hpp>

#include <algorithm>
#include <filesystem>
#include <string>
#include <utility>

using namespace ndtcu;
namespace fs = std::filesystem;

namespace {

const fs::path kShipped = ndtcu::test::source_dir() / "tests" / "cli" / "autoware" / "ndt_scan_matcher.param.yaml";

// `body` under Autoware's `/**: ros__parameters:` header, written to a fresh file.
fs::path params_file(const std::string& name, const std::string& body) {
  const fs::path path = test::temp_dir("autoware_params_" + name) / (name + ".param.yaml");
  test::write_bytes(path, "/**:\n  ros__parameters:\n" + body);
  return path;
}

// The message of the ndtcu::Error that reading `path` throws ("" when it throws none).
std::string read_error(const fs::path& path) {
  try {
    cli::read_autoware_params(path.string());
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}

bool has(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

}  // namespace

TEST_CASE("Autoware's shipped ndt_scan_matcher.param.yaml gives its values, without a warning", "[unit][cli][config]") {
  const cli::AutowareParams p = cli::read_autoware_params(kShipped.string());
  CHECK(p.path == kShipped.string());
  CHECK(p.warnings.empty());
  REQUIRE(p.resolution);
  CHECK(*p.resolution == 2.0);
  REQUIRE(p.step_size);
  CHECK(*p.step_size == 0.1);
  REQUIRE(p.epsilon);
  CHECK(*p.epsilon == 0.01);
  REQUIRE(p.max_iterations);
  CHECK(*p.max_iterations == 30);
  REQUIRE(p.threads);
  CHECK(*p.threads == 4);
  REQUIRE(p.pose_covariance);
  CHECK(*p.pose_covariance == PoseCovariance::None);  // 0: FIXED_VALUE
  REQUIRE(p.converged_param_type);
  CHECK(*p.converged_param_type == 1);
  REQUIRE(p.nvtl_threshold);
  CHECK(*p.nvtl_threshold == 2.3);
  REQUIRE(p.tp_threshold);
  CHECK(*p.tp_threshold == 3.0);
  REQUIRE(p.particles);
  CHECK(*p.particles == 200);
  REQUIRE(p.startup_trials);
  CHECK(*p.startup_trials == 100);
  REQUIRE(p.initial_pose_timeout_sec);
  CHECK(*p.initial_pose_timeout_sec == 1.0);
  REQUIRE(p.map_radius);
  CHECK(*p.map_radius == 150.0);
  REQUIRE(p.map_update_distance);
  CHECK(*p.map_update_distance == 20.0);
  // Every other key of the file is an Autoware key without an ndtcu equivalent.
  CHECK(p.not_used.size() == 18);
  // The file disables the regularization: a scale factor of 0 (off).
  REQUIRE(p.regularization_scale_factor);
  CHECK(*p.regularization_scale_factor == 0.0);
  for (const char* key : {"frame.base_frame", "sensor_points.required_distance",
                          "validation.initial_to_result_distance_tolerance_m", "validation.skipping_publish_num",
                          "validation.critical_upper_bound_exe_time_ms", "covariance.output_pose_covariance",
                          "dynamic_map_loading.lidar_radius"}) {
    CHECK(has(p.not_used, key));
  }

  // On top of a preset: the file's NDT values replace the preset's, the rest stays.
  cli::NdtOptions o;
  o.preset = "pcl";
  const AlignSettings s = cli::ndt_settings(o, &p);
  CHECK(s.resolution == 2.0);  // pcl's is 1.0
  CHECK(s.step_size == 0.1);
  CHECK(s.epsilon == 0.01);
  CHECK(s.max_iterations == 30);  // pcl's is 35
  CHECK(cli::execution_options(o, &p).threads == 4);  // ndt.num_threads: how it runs
  CHECK(s.pose_covariance == PoseCovariance::None);
  CHECK(s.line_search == LineSearch::MoreThuente);  // not in the file: the preset's
  CHECK(s.covariance == CovarianceMode::Pcl);
}

TEST_CASE("every key ndtcu maps is read from the file, and options given override it", "[unit][cli][config]") {
  // Values unlike Autoware's defaults and ndtcu's, so that each one is seen to be read.
  const fs::path path = params_file("mapped", R"(
    ndt:
      trans_epsilon: 0.05
      step_size: 0.2
      resolution: 1.5
      max_iterations: 12
      num_threads: 3
    initial_pose_estimation:
      particles_num: 60
      n_startup_trials: 20
    validation:
      initial_pose_timeout_sec: 0.25
    score_estimation:
      converged_param_type: 1
      converged_param_transform_probability: 4.5
      converged_param_nearest_voxel_transformation_likelihood: 2.7
    covariance:
      covariance_estimation:
        covariance_estimation_type: 3
    dynamic_map_loading:
      map_radius: 80.0
      update_distance: 5.0
)");
  const cli::AutowareParams p = cli::read_autoware_params(path.string());
  CHECK(p.warnings.empty());
  CHECK(p.not_used.empty());
  CHECK(p.epsilon == 0.05);
  CHECK(p.step_size == 0.2);
  CHECK(p.resolution == 1.5);
  CHECK(p.max_iterations == 12);
  CHECK(p.threads == 3);
  CHECK(p.particles == 60);
  CHECK(p.startup_trials == 20);
  CHECK(p.initial_pose_timeout_sec == 0.25);
  CHECK(p.converged_param_type == 1);
  CHECK(p.tp_threshold == 4.5);
  CHECK(p.nvtl_threshold == 2.7);
  CHECK(p.pose_covariance == PoseCovariance::MultiNdtScore);
  CHECK(p.map_radius == 80.0);
  CHECK(p.map_update_distance == 5.0);

  SECTION("the file alone") {
    const AlignSettings s = cli::ndt_settings(cli::NdtOptions{}, &p);
    CHECK(s.epsilon == 0.05);
    CHECK(s.step_size == 0.2);
    CHECK(s.resolution == 1.5);
    CHECK(s.max_iterations == 12);
    CHECK(cli::execution_options(cli::NdtOptions{}, &p).threads == 3);
    CHECK(s.pose_covariance == PoseCovariance::MultiNdtScore);
  }
  SECTION("options given on the command line win") {
    cli::NdtOptions o;
    o.set(&AlignSettings::resolution, 3.0);
    o.set(&AlignSettings::max_iterations, 7);
    o.set(&AlignSettings::pose_covariance, PoseCovariance::Laplace);
    const AlignSettings s = cli::ndt_settings(o, &p);
    CHECK(s.resolution == 3.0);
    CHECK(s.max_iterations == 7);
    CHECK(s.pose_covariance == PoseCovariance::Laplace);
    CHECK(s.step_size == 0.2);  // not given: the file's
    CHECK(cli::execution_options(o, &p).threads == 3);
    o.set(&ExecutionOptions::threads, 5);
    CHECK(cli::execution_options(o, &p).threads == 5);
    CHECK(cli::execution_options(o, &p).backend == Backend::Auto);  // not given: the library's default
  }
  SECTION("the file's epsilon against the command line's step size") {
    cli::NdtOptions o;
    o.set(&AlignSettings::step_size, 0.02);  // 0.05 > 2 x 0.02
    const std::string what = [&] {
      try {
        cli::ndt_settings(o, &p);
      } catch (const Error& e) {
        return std::string(e.what());
      }
      return std::string();
    }();
    CHECK_THAT(what, Catch::Contains("epsilon 0.05 is more than twice step_size 0.02") &&
                         Catch::Contains("--config " + path.string()));
  }
}

TEST_CASE("unknown keys and values of the wrong type are warnings naming the file, line and key",
          "[unit][cli][config]") {
  const fs::path path = params_file("warnings", R"(
    ndt:
      resolutoin: 1.0
      step_size: "0.2"
      max_iterations: 30.5
      num_threads: four
      trans_epsilon: [0.01]
      regularization:
        enable: true
    score_estimation: 2.3
    sensor_points:
      timeout_sec: 1.0
    ndt_omp: {}
    covariance:
      covariance_estimation:
        temperature: 0.1
)");
  const cli::AutowareParams p = cli::read_autoware_params(path.string());
  const std::string f = path.string();
  // In file order; line 1 is "/**:", line 3 the empty one that starts the body.
  const std::vector<std::string> expected = {
      f + ": line 5: ndt.resolutoin: unknown key (not an ndt_scan_matcher parameter ndtcu knows); ignored",
      f + ": line 6: ndt.step_size: expected a number, got the quoted string \"0.2\"; ignored",
      f + ": line 7: ndt.max_iterations: expected an integer, got '30.5'; ignored",
      f + ": line 8: ndt.num_threads: expected an integer, got 'four'; ignored",
      f + ": line 9: ndt.trans_epsilon: expected a number, got a list; ignored",
      f + ": line 12: score_estimation: expected a section (a mapping of keys), got '2.3'; ignored",
      f + ": line 15: ndt_omp: unknown key (not an ndt_scan_matcher parameter ndtcu knows); ignored",
      f + ": line 18: covariance.covariance_estimation.temperature: ndtcu's MULTI_NDT_SCORE covariance uses "
          "Autoware's default temperature 0.05; 0.1 is not used",
  };
  CHECK(p.warnings == expected);
  // What had the wrong type is left unset: the preset's value stays.
  CHECK_FALSE(p.resolution);
  CHECK_FALSE(p.step_size);
  CHECK_FALSE(p.max_iterations);
  CHECK_FALSE(p.threads);
  CHECK_FALSE(p.epsilon);
  CHECK_FALSE(p.nvtl_threshold);
  CHECK(has(p.not_used, "sensor_points.timeout_sec"));
  // Enabled without a scale factor: Autoware's default, 0.01.
  REQUIRE(p.regularization_scale_factor);
  CHECK(*p.regularization_scale_factor == 0.01);
}

TEST_CASE("a value tagged !!str is a string, as a quoted one is; a tag of its own type reads", "[unit][cli][config]") {
  // ROS reads `!!str 1.0` as the string "1.0"; it was taken as the number 1.0.
  const fs::path path = params_file("tags", R"(
    ndt:
      resolution: !!str 1.0
      step_size: !!float 0.2
      max_iterations: !!str 30
      num_threads: !!int 2
      trans_epsilon: !custom 0.05
    initial_pose_estimation:
      particles_num: !!int 100
)");
  const cli::AutowareParams p = cli::read_autoware_params(path.string());
  const std::string f = path.string();
  const std::vector<std::string> expected = {
      f + ": line 5: ndt.resolution: expected a number, got the string !!str 1.0; ignored",
      f + ": line 7: ndt.max_iterations: expected an integer, got the string !!str 30; ignored",
      f + ": line 9: ndt.trans_epsilon: expected a number, got '0.05' tagged !custom; ignored",
  };
  CHECK(p.warnings == expected);
  CHECK_FALSE(p.resolution);
  CHECK_FALSE(p.max_iterations);
  CHECK_FALSE(p.epsilon);
  REQUIRE(p.step_size);
  CHECK(*p.step_size == 0.2);
  REQUIRE(p.threads);
  CHECK(*p.threads == 2);
  REQUIRE(p.particles);
  CHECK(*p.particles == 100);
}

TEST_CASE("the regularization keys set the prior's scale factor, within its range", "[unit][cli][config]") {
  const fs::path on = params_file("regularization_on", R"(
    ndt:
      regularization:
        scale_factor: 0.05
        enable: true
)");
  const cli::AutowareParams p = cli::read_autoware_params(on.string());
  REQUIRE(p.regularization_scale_factor);
  CHECK(*p.regularization_scale_factor == 0.05);
  CHECK(p.warnings.empty());
  const fs::path bad = params_file("regularization_bad", R"(
    ndt:
      regularization:
        enable: true
        scale_factor: -0.5
)");
  CHECK_THROWS_WITH(cli::read_autoware_params(bad.string()),
                    Catch::Matchers::Contains("ndt.regularization.scale_factor") && Catch::Matchers::Contains("-0.5"));
}

TEST_CASE("a transform-probability check in the file is a warning: ndtcu judges by NVTL", "[unit][cli][config]") {
  const fs::path path = params_file("tp", R"(
    score_estimation:
      converged_param_type: 0
      converged_param_transform_probability: 3.0
      converged_param_nearest_voxel_transformation_likelihood: 2.3
)");
  const cli::AutowareParams p = cli::read_autoware_params(path.string());
  REQUIRE(p.warnings.size() == 1);
  CHECK(p.warnings[0] == path.string() +
                             ": score_estimation.converged_param_type 0 (transform probability): ndtcu judges poses by "
                             "NVTL only (localize, initpose), against "
                             "converged_param_nearest_voxel_transformation_likelihood (2.3); "
                             "converged_param_transform_probability is not used");
  CHECK(p.nvtl_threshold == 2.3);
}

TEST_CASE("a value out of range is an error naming the file, line, key and value", "[unit][cli][config]") {
  struct Case {
    const char* name;
    const char* body;
    const char* message;  // after "FILE: "
  };
  const Case cases[] = {
      {"negative_resolution", "    ndt:\n      resolution: -1\n",
       "line 4: ndt.resolution: value -1 is out of range: invalid setting resolution (must be > 0): -1"},
      {"nan_step", "    ndt:\n      step_size: .nan\n",
       "line 4: ndt.step_size: value .nan is out of range: invalid setting step_size (must be > 0): nan"},
      {"inf_epsilon", "    ndt:\n      trans_epsilon: .inf\n",
       "line 4: ndt.trans_epsilon: value .inf is out of range: invalid setting epsilon (must be >= 0): inf"},
      {"zero_iterations", "    ndt:\n      max_iterations: 0\n",
       "line 4: ndt.max_iterations: value 0 is out of range: invalid setting max_iterations: 0 (must be in [1, 1000])"},
      {"many_iterations", "    ndt:\n      max_iterations: 10000000\n",
       "line 4: ndt.max_iterations: value 10000000 is out of range: invalid setting max_iterations: 10000000 (must be "
       "in [1, 1000])"},
      {"threads", "    ndt:\n      num_threads: 5000\n",
       "line 4: ndt.num_threads: value 5000 is out of range: invalid setting threads: 5000 (must be in [0, 1024], 0 = "
       "one per hardware thread)"},
      {"huge_iterations", "    ndt:\n      max_iterations: 99999999999\n",
       "line 4: ndt.max_iterations: value 99999999999 is out of range: beyond a 32-bit integer"},
      {"converged_type", "    score_estimation:\n      converged_param_type: 2\n",
       "line 4: score_estimation.converged_param_type: value 2 is out of range: must be 0 (TRANSFORM_PROBABILITY) or 1 "
       "(NEAREST_VOXEL_TRANSFORMATION_LIKELIHOOD)"},
      {"nvtl_nan", "    score_estimation:\n      converged_param_nearest_voxel_transformation_likelihood: .nan\n",
       "line 4: score_estimation.converged_param_nearest_voxel_transformation_likelihood: value .nan is out of range: "
       "localizer nvtl_threshold must be finite, got nan"},
      {"covariance_type", "    covariance:\n      covariance_estimation:\n        covariance_estimation_type: 4\n",
       "line 5: covariance.covariance_estimation.covariance_estimation_type: value 4 is out of range: must be 0 "
       "(FIXED_VALUE), 1 (LAPLACE_APPROXIMATION), 2 (MULTI_NDT) or 3 (MULTI_NDT_SCORE)"},
      {"particles", "    initial_pose_estimation:\n      particles_num: 0\n",
       "line 4: initial_pose_estimation.particles_num: value 0 is out of range: TpeOptions::particles = 0: must lie "
       "in [1, 2000] (the search's cost grows with the square of its particles: 2,000 take about 30 s on 2 CPU "
       "cores)"},
      // The command line's range (--particles), not skipped by the file: 2e9 particles once
      // ran out of memory.
      {"many_particles", "    initial_pose_estimation:\n      particles_num: 2000000000\n",
       "line 4: initial_pose_estimation.particles_num: value 2000000000 is out of range: TpeOptions::particles = "
       "2000000000: must lie in [1, 2000] (the search's cost grows with the square of its particles: 2,000 take "
       "about 30 s on 2 CPU cores)"},
      {"startup_over_particles", "    initial_pose_estimation:\n      particles_num: 50\n      n_startup_trials: 100\n",
       "line 5: initial_pose_estimation.n_startup_trials 100 with initial_pose_estimation.particles_num 50: "
       "TpeOptions::startup_trials = 100: must lie in [1, particles = 50]"},
      {"epsilon_over_step", "    ndt:\n      trans_epsilon: 0.5\n      step_size: 0.1\n",
       "line 4: ndt.trans_epsilon 0.5 with ndt.step_size 0.1: invalid settings: epsilon 0.5 is more than twice "
       "step_size 0.1 (steps are kept in [epsilon / 2, step_size]); lower epsilon to 0.2 or less, or raise step_size"},
      {"timeout", "    validation:\n      initial_pose_timeout_sec: -0.5\n",
       "line 4: validation.initial_pose_timeout_sec: value -0.5 is out of range: a time gap must be finite and >= 0 "
       "(s)"},
      {"map_radius", "    dynamic_map_loading:\n      map_radius: 0\n",
       "line 4: dynamic_map_loading.map_radius: value 0 is out of range: the map radius must be finite and > 0 (m)"},
      {"update_distance", "    dynamic_map_loading:\n      update_distance: -.inf\n",
       "line 4: dynamic_map_loading.update_distance: value -.inf is out of range: the map update distance must be "
       "finite and > 0 (m)"},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    const fs::path path = params_file(c.name, c.body);
    CHECK(read_error(path) == path.string() + ": " + c.message);
  }
  // Each value on its own, epsilon and step size: a file's epsilon may exceed Autoware's
  // step size when the file's own step size allows it.
  const fs::path ok = params_file("epsilon_with_step", "    ndt:\n      trans_epsilon: 0.5\n      step_size: 1.0\n");
  CHECK(read_error(ok).empty());
}

TEST_CASE("a file that cannot be read as parameters is an error naming it", "[unit][cli][config]") {
  const fs::path dir = test::temp_dir("autoware_params_bad");
  SECTION("missing") { CHECK(read_error(dir / "missing.yaml") == (dir / "missing.yaml").string() + ": no such file"); }
  SECTION("a folder") { CHECK(read_error(dir) == dir.string() + ": is a directory, not a parameter file"); }
  SECTION("YAML syntax error, with its line") {
    const fs::path path = dir / "malformed.yaml";
    test::write_bytes(path, "/**:\n  ros__parameters:\n    ndt:\n      resolution: [2.0\n      step_size: 0.1\n");
    CHECK_THAT(read_error(path), Catch::StartsWith(path.string() + ": line ") && Catch::Contains("YAML syntax error"));
  }
  SECTION("empty") {
    const fs::path path = dir / "empty.yaml";
    test::write_bytes(path, "");
    CHECK(read_error(path) == path.string() +
                                  ": not a ROS 2 parameter file: expected a mapping (`/**:` holding "
                                  "`ros__parameters:`), found an empty document");
  }
  SECTION("parameters without the ROS 2 layout") {
    const fs::path path = dir / "flat.yaml";
    test::write_bytes(path, "ndt:\n  resolution: 2.0\n");
    CHECK(read_error(path) == path.string() +
                                  ": not a ROS 2 parameter file: no node name holding `ros__parameters:` (Autoware's "
                                  "layout starts `/**:` then `ros__parameters:`)");
  }
}

TEST_CASE("a key given twice in one mapping is an error naming the file, the key and both lines",
          "[unit][cli][config]") {
  const fs::path dir = test::temp_dir("autoware_params_duplicates");
  const auto error_of = [&](const std::string& name, const std::string& text) {
    const fs::path path = dir / name;
    test::write_bytes(path, text);
    return std::make_pair(path.string(), read_error(path));
  };
  const std::string twice = ": the key is given twice in one mapping (a YAML reader keeps one of the values without "
                            "a word); give it once";
  SECTION("a parameter: the second value used to win silently (0.5 m instead of 2.0 m)") {
    const auto [f, e] = error_of("resolution.yaml",
                                 "/**:\n  ros__parameters:\n    ndt:\n      resolution: 2.0\n      max_iterations: 30\n"
                                 "      resolution: 0.5\n");
    CHECK(e == f + ": lines 4 and 6: ndt.resolution" + twice);
  }
  SECTION("in a flow mapping, and the same name in two sections is not a duplicate") {
    const auto [f, e] = error_of("flow.yaml",
                                 "/**:\n  ros__parameters:\n    ndt: {resolution: 2.0, step_size: 0.1}\n"
                                 "    sensor_points: {resolution: 1.0}\n"
                                 "    covariance: {covariance_estimation: {temperature: 0.05,\n"
                                 "      temperature: 0.1}}\n");
    CHECK(e == f + ": lines 5 and 6: covariance.covariance_estimation.temperature" + twice);
  }
  SECTION("a node name, and ros__parameters under one node") {
    const auto [f, e] = error_of("node.yaml", "/**:\n  ros__parameters:\n    ndt: {resolution: 2.0}\n"
                                              "/**:\n  ros__parameters:\n    ndt: {resolution: 0.5}\n");
    CHECK(e == f + ": lines 1 and 4: /**" + twice);
    const auto [g, e2] = error_of("ros_parameters.yaml", "/**:\n  ros__parameters:\n    ndt: {resolution: 2.0}\n"
                                                         "  ros__parameters:\n    ndt: {resolution: 0.5}\n");
    CHECK(e2 == g + ": lines 2 and 4: /**.ros__parameters" + twice);
  }
  SECTION("after a mapping used as a key, the keys that follow are still checked") {
    const auto [f, e] = error_of("complex_key.yaml",
                                 "/**:\n  ros__parameters:\n    ndt:\n      ? {resolution: 1.0}\n      : 3\n"
                                 "      ? [resolution]\n      : 4\n      resolution: 2.0\n      step_size: 0.1\n"
                                 "      resolution: 0.5\n");
    CHECK(e == f + ": lines 8 and 10: ndt.resolution" + twice);
  }
  SECTION("lists of mappings and aliases are read as written, each mapping on its own") {
    const fs::path path = dir / "lists.yaml";
    test::write_bytes(path, "/**:\n  ros__parameters:\n    ndt: &ndt\n      resolution: 2.0\n      step_size: 0.1\n"
                            "    sensor_points: *ndt\n    covariance:\n      covariance_estimation:\n"
                            "        initial_pose_offset_model_x: [{a: 1, b: 2}, {a: 1, b: 2}]\n");
    const cli::AutowareParams p = cli::read_autoware_params(path.string());
    REQUIRE(p.resolution);
    CHECK(*p.resolution == 2.0);
  }
}

TEST_CASE("two nodes holding ros__parameters are an error naming both nodes and their lines", "[unit][cli][config]") {
  const fs::path path = test::temp_dir("autoware_params_nodes") / "two_nodes.param.yaml";
  // ROS gives a node every entry that matches its name: which resolution a node named
  // /ndt_scan_matcher would run at depends on the name, which a file read alone lacks.
  test::write_bytes(path, "/**:\n  ros__parameters:\n    ndt:\n      resolution: 2.0\n"
                          "/ndt_scan_matcher:\n  ros__parameters:\n    ndt:\n      resolution: 0.5\n");
  CHECK(read_error(path) == path.string() +
                                ": lines 1 and 5: two nodes hold ros__parameters, '/**' and '/ndt_scan_matcher': "
                                "which values a node takes depends on the name it runs under; ndtcu reads one node's "
                                "parameters (keep one, e.g. `/**:`)");
  // A second entry without parameters is still only warned about.
  test::write_bytes(path, "/**:\n  ros__parameters:\n    ndt:\n      resolution: 2.0\n/other:\n  remappings: []\n");
  const cli::AutowareParams p = cli::read_autoware_params(path.string());
  REQUIRE(p.resolution);
  CHECK(*p.resolution == 2.0);
  REQUIRE(p.warnings.size() == 1);
  CHECK(p.warnings[0] == path.string() + ": line 5: /other: not a node's parameters (no ros__parameters under it); ignored");
}

TEST_CASE("a second YAML document is an error naming its line; a trailing '---' is not", "[unit][cli][config]") {
  const fs::path path = test::temp_dir("autoware_params_documents") / "two_documents.param.yaml";
  // Read as one document, the second's resolution would be dropped without a word.
  test::write_bytes(path, "/**:\n  ros__parameters:\n    ndt:\n      resolution: 2.0\n---\n"
                          "/**:\n  ros__parameters:\n    ndt:\n      resolution: 0.5\n");
  CHECK(read_error(path) == path.string() +
                                ": line 6: a second YAML document (after '---'); a parameter file holds one document, "
                                "and the settings of the second would be ignored: merge them into the first");
  test::write_bytes(path, "---\n/**:\n  ros__parameters:\n    ndt:\n      resolution: 2.0\n---\n");
  const cli::AutowareParams p = cli::read_autoware_params(path.string());
  REQUIRE(p.resolution);
  CHECK(*p.resolution == 2.0);
}
