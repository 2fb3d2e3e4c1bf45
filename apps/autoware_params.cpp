#include "autoware_params.hpp"

#include <ndtcu/error.hpp>
#include <ndtcu/fields.hpp>
#include <ndtcu/initial_pose_tpe.hpp>
#include <ndtcu/localizer.hpp>
#include <ndtcu/log.hpp>
#include <ndtcu/pose_covariance.hpp>
#include <ndtcu/text.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <map>
#include <iostream>
#include <sstream>
#include <type_traits>
#include <utility>
#include <vector>

namespace ndtcu::cli {

namespace {

namespace fs = std::filesystem;

// The keys ndtcu reads besides the renamed NDT settings (visit_autoware_renames), by their
// path under ros__parameters (autoware_ndt_scan_matcher's config/ndt_scan_matcher.param.yaml).
const char* const kOtherUsedKeys[] = {
    "initial_pose_estimation.particles_num",
    "initial_pose_estimation.n_startup_trials",
    "validation.initial_pose_timeout_sec",
    "score_estimation.converged_param_type",
    "score_estimation.converged_param_transform_probability",
    "score_estimation.converged_param_nearest_voxel_transformation_likelihood",
    "covariance.covariance_estimation.covariance_estimation_type",
    "dynamic_map_loading.map_radius",
    "dynamic_map_loading.update_distance",
    "ndt.regularization.enable",
    "ndt.regularization.scale_factor",
};

// The file's other keys: ndtcu has no equivalent (ROS frames and topics' timeouts,
// diagnostics-only limits, the published covariance, debug output). Those
// marked in inspect_unused() are still looked at, for a value that asks for something
// ndtcu does not do.
const char* const kNotUsedKeys[] = {
    "frame.base_frame",
    "frame.ndt_base_frame",
    "frame.map_frame",
    "sensor_points.timeout_sec",
    "sensor_points.required_distance",
    "validation.initial_pose_distance_tolerance_m",
    "validation.initial_to_result_distance_tolerance_m",
    "validation.critical_upper_bound_exe_time_ms",
    "validation.skipping_publish_num",
    "score_estimation.no_ground_points.enable",
    "score_estimation.no_ground_points.z_margin_for_ground_removal",
    "covariance.output_pose_covariance",
    "covariance.covariance_estimation.initial_pose_offset_model_x",
    "covariance.covariance_estimation.initial_pose_offset_model_y",
    "covariance.covariance_estimation.temperature",
    "covariance.covariance_estimation.scale_factor",
    "dynamic_map_loading.lidar_radius",
    "dynamic_map_loading.save_loaded_map",
};

template <std::size_t N>
bool listed(const char* const (&keys)[N], const std::string& key) {
  return std::any_of(std::begin(keys), std::end(keys), [&](const char* k) { return key == k; });
}

// Every key ndtcu reads: the renamed NDT settings, then the others.
const std::vector<const char*>& used_keys() {
  static const std::vector<const char*> keys = [] {
    std::vector<const char*> k;
    visit_autoware_renames([&](const char* key, const char*, auto) { k.push_back(key); });
    k.insert(k.end(), std::begin(kOtherUsedKeys), std::end(kOtherUsedKeys));
    return k;
  }();
  return keys;
}

bool is_leaf(const std::string& key) {
  const auto& used = used_keys();
  return std::any_of(used.begin(), used.end(), [&](const char* k) { return key == k; }) || listed(kNotUsedKeys, key);
}

// A section: a prefix of some known key ("ndt", "covariance.covariance_estimation").
bool is_section(const std::string& key) {
  const std::string prefix = key + ".";
  const auto starts = [&](const char* k) { return std::strncmp(k, prefix.c_str(), prefix.size()) == 0; };
  const auto& used = used_keys();
  return std::any_of(used.begin(), used.end(), starts) ||
         std::any_of(std::begin(kNotUsedKeys), std::end(kNotUsedKeys), starts);
}

// The YAML tags a scalar may carry where ROS reads a value of that type ("!!str 1.0" is
// the string "1.0" to ROS, as "'1.0'" is; yaml-cpp gives "?" for an untagged plain scalar).
constexpr const char* kYamlStr = "tag:yaml.org,2002:str";
constexpr const char* kYamlInt = "tag:yaml.org,2002:int";
constexpr const char* kYamlFloat = "tag:yaml.org,2002:float";
constexpr const char* kYamlBool = "tag:yaml.org,2002:bool";

// Whether a scalar's tag lets it be read as one of `tags` (an untagged plain one always).
bool tagged_as(const YAML::Node& node, std::initializer_list<const char*> tags) {
  if (node.Tag() == "?") return true;
  return std::any_of(tags.begin(), tags.end(), [&](const char* t) { return node.Tag() == t; });
}

// What a value is, for a message: the scalar as written, or its kind.
std::string describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Scalar:
      // yaml-cpp tags quoted scalars "!": a string to ROS, even when it reads as a number,
      // as is one tagged !!str.
      if (node.Tag() == "!") return fmt::format("the quoted string \"{}\"", node.Scalar());
      if (node.Tag() == kYamlStr) return fmt::format("the string !!str {}", node.Scalar());
      if (node.Tag() != "?") return fmt::format("'{}' tagged {}", node.Scalar(), printable(node.Tag()));
      return "'" + node.Scalar() + "'";
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Map: return "a mapping";
    case YAML::NodeType::Null: return "no value";
    case YAML::NodeType::Undefined: break;
  }
  return "nothing";
}

// The key of a mapping as the messages name it: under a node's ros__parameters, its path
// there ("ndt.resolution", as the warnings name keys); above, the path from the top
// ("/**", "/**.ros__parameters").
std::string key_name(const std::vector<std::string>& path) {
  const std::size_t first = path.size() >= 3 && path[1] == "ros__parameters" ? 2 : 0;
  std::string out;
  for (std::size_t i = first; i < path.size(); ++i) out += (i == first ? "" : ".") + path[i];
  return out;
}

// Refuses a key given twice in one mapping. yaml-cpp (0.7) keeps both entries without a
// word, and the walk that reads the values would take the last: `resolution: 2.0` then
// `resolution: 0.5` ran at 0.5 m. The check reads the parser's events, so an alias counts
// once (as written) instead of being expanded, and a file of aliases costs what its text
// does.
class DuplicateKeys : public YAML::EventHandler {
 public:
  explicit DuplicateKeys(std::string path) : path_(std::move(path)) {}

  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t) override { node(mark, nullptr); }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override { node(mark, nullptr); }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t, const std::string& value) override {
    node(mark, &value);
  }
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    open(false);
  }
  void OnSequenceEnd() override { close(); }
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    open(true);
  }
  void OnMapEnd() override { close(); }

 private:
  struct Level {
    bool map = false;
    bool expect_key = true;                 // a map's next node is a key
    std::map<std::string, int> keys;        // scalar keys seen, with their line (from 0)
    bool named = false;                     // the value being read has a scalar key, on path_keys_
    bool is_key = false;                    // this container is its parent mapping's key
  };

  // A scalar (`value`) or another node that holds nothing (null, alias) ends here.
  void node(const YAML::Mark& mark, const std::string* value) {
    if (!levels_.empty() && levels_.back().map && levels_.back().expect_key) {
      Level& l = levels_.back();
      l.expect_key = false;
      if (!value) return;  // a null or an alias as a key: not one ROS names a parameter by
      path_keys_.push_back(*value);
      l.named = true;
      const auto [it, added] = l.keys.emplace(*value, mark.line);
      if (!added) {
        throw IoError(path_, fmt::format("lines {} and {}: {}: the key is given twice in one mapping (a YAML "
                                         "reader keeps one of the values without a word); give it once",
                                         it->second + 1, mark.line + 1, key_name(path_keys_)));
      }
      return;
    }
    value_done();
  }

  void open(bool map) {
    Level l;
    l.map = map;
    if (!levels_.empty() && levels_.back().map && levels_.back().expect_key) {
      levels_.back().expect_key = false;  // a mapping or a list as a key: never a parameter's name
      l.is_key = true;
    }
    levels_.push_back(std::move(l));
  }

  void close() {
    const bool was_key = levels_.back().is_key;
    levels_.pop_back();
    if (!was_key) value_done();  // after a key, its mapping waits for the value
  }

  // The value of the current key (or an item of a list) is complete.
  void value_done() {
    if (levels_.empty() || !levels_.back().map) return;
    Level& l = levels_.back();
    l.expect_key = true;
    if (l.named) path_keys_.pop_back();
    l.named = false;
  }

  std::string path_;
  std::vector<Level> levels_;
  std::vector<std::string> path_keys_;
};

class Reader {
 public:
  explicit Reader(std::string path) { out_.path = std::move(path); }

  AutowareParams read(const YAML::Node& root) {
    if (!root.IsMap()) {
      throw IoError(out_.path, fmt::format("not a ROS 2 parameter file: expected a mapping (`/**:` holding "
                                           "`ros__parameters:`), found {}",
                                           root.IsNull() ? "an empty document" : describe(root)));
    }
    std::optional<YAML::Node> found;  // the key of the node whose parameters are read
    for (const auto& node : root) {
      const std::string name = node.first.Scalar();
      if (!node.second.IsMap() || !node.second["ros__parameters"]) {
        warn(node.first, name, "not a node's parameters (no ros__parameters under it); ignored");
        continue;
      }
      if (found) {
        // ROS gives a node the parameters of every entry that matches its name, and which
        // wins depends on the name it runs under; ndtcu has no node name to decide by.
        throw IoError(out_.path, fmt::format("lines {} and {}: two nodes hold ros__parameters, '{}' and '{}': which "
                                             "values a node takes depends on the name it runs under; ndtcu reads "
                                             "one node's parameters (keep one, e.g. `/**:`)",
                                             found->Mark().line + 1, node.first.Mark().line + 1, found->Scalar(),
                                             name));
      }
      found = node.first;
      const YAML::Node params = node.second["ros__parameters"];
      for (const auto& entry : node.second) {
        const std::string key = entry.first.Scalar();
        if (key != "ros__parameters") warn(entry.first, name + "." + key, "unknown key; ignored");
      }
      if (params.IsMap()) {
        walk(params, "");
      } else if (!params.IsNull()) {
        warn(params, name + ".ros__parameters", "expected a mapping of parameters, got " + describe(params) +
                                                    "; ignored");
      }
    }
    if (!found) {
      throw IoError(out_.path, "not a ROS 2 parameter file: no node name holding `ros__parameters:` (Autoware's "
                               "layout starts `/**:` then `ros__parameters:`)");
    }
    for (const auto& [key, node] : entries_) take(key, node);
    check_together();
    settle_regularization();
    if (out_.converged_param_type == 0) {
      warnings_.emplace_back(INT_MAX, fmt::format(
          "{}: score_estimation.converged_param_type 0 (transform probability): ndtcu judges poses by NVTL only "
          "(localize, initpose), against {}; converged_param_transform_probability is not used",
          out_.path,
          out_.nvtl_threshold ? fmt::format("converged_param_nearest_voxel_transformation_likelihood ({})",
                                            *out_.nvtl_threshold)
                              : std::string("the NVTL threshold (--nvtl-threshold)")));
    }
    // In file order: the keys are looked at in two passes (the layout, then the values).
    std::stable_sort(warnings_.begin(), warnings_.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    for (auto& w : warnings_) out_.warnings.push_back(std::move(w.second));
    return std::move(out_);
  }

 private:
  // "FILE: line N: KEY" (without the line where yaml-cpp has no mark).
  std::string where(const YAML::Node& node, const std::string& key) const {
    const YAML::Mark mark = node.Mark();
    if (mark.line < 0) return fmt::format("{}: {}", out_.path, key);
    return fmt::format("{}: line {}: {}", out_.path, mark.line + 1, key);
  }

  void warn(const YAML::Node& node, const std::string& key, const std::string& what) {
    const int line = node.Mark().line;
    warnings_.emplace_back(line < 0 ? INT_MAX : line, where(node, key) + ": " + what);
  }

  [[noreturn]] void out_of_range(const YAML::Node& node, const std::string& key, const std::string& why) const {
    throw Error(fmt::format("{}: value {} is out of range: {}", where(node, key), node.Scalar(), why));
  }

  // Collects the known keys below `map` (in file order) and warns about the others.
  void walk(const YAML::Node& map, const std::string& prefix) {
    for (const auto& entry : map) {
      const std::string key = (prefix.empty() ? "" : prefix + ".") + entry.first.Scalar();
      if (is_leaf(key)) {
        entries_.emplace_back(key, entry.second);
      } else if (is_section(key)) {
        if (entry.second.IsMap()) {
          walk(entry.second, key);
        } else {
          warn(entry.second, key, "expected a section (a mapping of keys), got " + describe(entry.second) +
                                      "; ignored");
        }
      } else {
        warn(entry.first, key, "unknown key (not an ndt_scan_matcher parameter ndtcu knows); ignored");
      }
    }
  }

  // A plain (unquoted) scalar, untagged or tagged as one of `tags`, else a warning naming
  // what was expected (a quoted or !!str scalar is a string to ROS).
  bool plain_scalar(const YAML::Node& node, const std::string& key, const char* expected,
                    std::initializer_list<const char*> tags) {
    if (node.IsScalar() && tagged_as(node, tags)) return true;
    warn(node, key, fmt::format("expected {}, got {}; ignored", expected, describe(node)));
    return false;
  }

  std::optional<double> number(const YAML::Node& node, const std::string& key) {
    if (!plain_scalar(node, key, "a number", {kYamlFloat, kYamlInt})) return std::nullopt;
    double v = 0.0;
    if (YAML::convert<double>::decode(node, v)) return v;  // also .nan, .inf, -.inf
    warn(node, key, fmt::format("expected a number, got {}; ignored", describe(node)));
    return std::nullopt;
  }

  // A decimal integer that fits an int. One beyond int's range is out of range (an error);
  // a fraction or a word is of the wrong type (a warning).
  std::optional<int> integer(const YAML::Node& node, const std::string& key) {
    if (!plain_scalar(node, key, "an integer", {kYamlInt})) return std::nullopt;
    const std::string& text = node.Scalar();
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(text.c_str(), &end, 10);
    if (end == text.c_str() || *end != '\0' || std::isspace(static_cast<unsigned char>(text.front()))) {
      warn(node, key, fmt::format("expected an integer, got {}; ignored", describe(node)));
      return std::nullopt;
    }
    if (errno == ERANGE || v < INT_MIN || v > INT_MAX) out_of_range(node, key, "beyond a 32-bit integer");
    return static_cast<int>(v);
  }

  std::optional<bool> boolean(const YAML::Node& node, const std::string& key) {
    if (!plain_scalar(node, key, "true or false", {kYamlBool})) return std::nullopt;
    bool v = false;
    if (YAML::convert<bool>::decode(node, v)) return v;
    warn(node, key, fmt::format("expected true or false, got {}; ignored", describe(node)));
    return std::nullopt;
  }

  std::optional<std::vector<double>> numbers(const YAML::Node& node, const std::string& key) {
    if (!node.IsSequence()) {
      warn(node, key, fmt::format("expected a list of numbers, got {}; ignored", describe(node)));
      return std::nullopt;
    }
    std::vector<double> v;
    for (const auto& item : node) {
      double x = 0.0;
      if (!item.IsScalar() || !tagged_as(item, {kYamlFloat, kYamlInt}) || !YAML::convert<double>::decode(item, x)) {
        warn(item, key, fmt::format("expected a list of numbers, found {} in it; ignored", describe(item)));
        return std::nullopt;
      }
      v.push_back(x);
    }
    return v;
  }

  // The value passes the rules of the ndtcu setting it sets: `check` throws ndtcu::Error
  // (from a validate() of ndtcu) naming the setting and the value.
  void check(const YAML::Node& node, const std::string& key, const std::function<void()>& rule) const {
    try {
      rule();
    } catch (const Error& e) {
      out_of_range(node, key, e.what());
    }
  }

  // One NDT setting, checked by ndtcu::validate(AlignSettings) on Autoware's preset (or by
  // validate(ExecutionOptions) on the defaults, for ndt.num_threads) with only this value
  // changed. The one rule between two settings (epsilon at most twice the
  // step size) is kept out of it here (the other is set so that it holds) and checked with
  // both values in check_together() and again once the command line is applied.
  void ndt_value(const YAML::Node& node, const std::string& key,
                 const std::function<void(AlignSettings&, ExecutionOptions&)>& set) {
    check(node, key, [&] {
      AlignSettings probe = autoware_preset();
      ExecutionOptions execution;
      set(probe, execution);
      validate(execution);
      if (key == "ndt.step_size") probe.epsilon = 0.0;
      if (key == "ndt.trans_epsilon" && std::isfinite(probe.epsilon) && probe.epsilon > 0.0) {
        probe.step_size = std::max(probe.step_size, probe.epsilon);
      }
      validate(probe);
    });
  }

  // A renamed NDT setting (visit_autoware_renames): read as its field's type, checked by
  // validate() on that field, kept in AutowareParams. Whether `key` is one.
  bool take_renamed(const std::string& key, const YAML::Node& node) {
    bool taken = false;
    visit_autoware_renames([&](const char* name, const char* field, auto value) {
      if (taken || key != name) return;
      taken = true;
      using T = typename std::decay_t<decltype(out_.*value)>::value_type;
      std::optional<T> v;
      if constexpr (std::is_integral_v<T>) {
        v = integer(node, key);
      } else {
        v = number(node, key);
      }
      if (!v) return;
      ndt_value(node, key, [&](AlignSettings& s, ExecutionOptions& e) {
        if (!set_field(s, field, *v)) set_field(e, field, *v);
      });
      out_.*value = v;
      if (key == "ndt.step_size") step_node_ = node;
      if (key == "ndt.trans_epsilon") epsilon_node_ = node;
    });
    return taken;
  }

  void take(const std::string& key, const YAML::Node& node) {
    if (take_renamed(key, node)) return;
    if (key == "covariance.covariance_estimation.covariance_estimation_type") {
      if (const auto v = integer(node, key)) {
        // Autoware's CovarianceEstimationType, in its order.
        const PoseCovariance types[] = {PoseCovariance::None, PoseCovariance::Laplace, PoseCovariance::MultiNdt,
                                        PoseCovariance::MultiNdtScore};
        if (*v < 0 || *v > 3) {
          out_of_range(node, key, "must be 0 (FIXED_VALUE), 1 (LAPLACE_APPROXIMATION), 2 (MULTI_NDT) or 3 "
                                  "(MULTI_NDT_SCORE)");
        }
        out_.pose_covariance = types[*v];
      }
    } else if (key == "score_estimation.converged_param_type") {
      if (const auto v = integer(node, key)) {
        if (*v != 0 && *v != 1) {
          out_of_range(node, key, "must be 0 (TRANSFORM_PROBABILITY) or 1 (NEAREST_VOXEL_TRANSFORMATION_LIKELIHOOD)");
        }
        out_.converged_param_type = v;
      }
    } else if (key == "score_estimation.converged_param_nearest_voxel_transformation_likelihood") {
      if (const auto v = number(node, key)) {
        check(node, key, [&] {
          LocalizerSettings probe;
          probe.nvtl_threshold = *v;
          validate(probe);
        });
        out_.nvtl_threshold = v;
      }
    } else if (key == "score_estimation.converged_param_transform_probability") {
      if (const auto v = number(node, key)) {
        // No ndtcu setting takes it; the rule of the NVTL threshold beside it.
        if (!std::isfinite(*v)) out_of_range(node, key, "a score threshold must be finite");
        out_.tp_threshold = v;
      }
    } else if (key == "initial_pose_estimation.particles_num") {
      if (const auto v = integer(node, key)) {
        check(node, key, [&] {
          TpeOptions probe;
          probe.particles = *v;
          probe.startup_trials = std::clamp(probe.startup_trials, 1, std::max(1, *v));
          validate(probe);
        });
        out_.particles = v;
        particles_node_ = node;
      }
    } else if (key == "initial_pose_estimation.n_startup_trials") {
      if (const auto v = integer(node, key)) {
        check(node, key, [&] {
          TpeOptions probe;
          probe.startup_trials = *v;
          probe.particles = std::max(probe.particles, *v);
          validate(probe);
        });
        out_.startup_trials = v;
        startup_node_ = node;
      }
    } else if (key == "validation.initial_pose_timeout_sec") {
      if (const auto v = number(node, key)) {
        // The rule of --max-time-difference, which it sets.
        if (!(std::isfinite(*v) && *v >= 0.0)) out_of_range(node, key, "a time gap must be finite and >= 0 (s)");
        out_.initial_pose_timeout_sec = v;
      }
    } else if (key == "dynamic_map_loading.map_radius") {
      if (const auto v = number(node, key)) {
        // The rule of --map-radius, which it sets.
        if (!(std::isfinite(*v) && *v > 0.0)) out_of_range(node, key, "the map radius must be finite and > 0 (m)");
        out_.map_radius = v;
      }
    } else if (key == "dynamic_map_loading.update_distance") {
      if (const auto v = number(node, key)) {
        // The rule of --map-update-distance, which it sets.
        if (!(std::isfinite(*v) && *v > 0.0)) {
          out_of_range(node, key, "the map update distance must be finite and > 0 (m)");
        }
        out_.map_update_distance = v;
      }
    } else if (key == "ndt.regularization.enable") {
      regularization_enabled_ = boolean(node, key);
    } else if (key == "ndt.regularization.scale_factor") {
      if (const auto v = number(node, key)) {
        // The rule of PosePrior::regularization_scale_factor (--regularization), which it sets.
        if (!(std::isfinite(*v) && *v >= 0.0)) out_of_range(node, key, "the scale factor must be finite and >= 0");
        regularization_scale_ = v;
      }
    } else {
      inspect_unused(key, node);
      out_.not_used.push_back(key);
    }
  }

  // Keys ndtcu does not use whose value would ask for what it does not do.
  void inspect_unused(const std::string& key, const YAML::Node& node) {
    if (key == "score_estimation.no_ground_points.enable") {
      if (boolean(node, key).value_or(false)) {
        warn(node, key, "true: ndtcu scores every scan point (no ground removal)");
      }
    } else if (key == "covariance.covariance_estimation.initial_pose_offset_model_x" ||
               key == "covariance.covariance_estimation.initial_pose_offset_model_y") {
      const PoseCovarianceOptions defaults;
      const bool is_x = key.back() == 'x';
      const std::vector<double>& expected = is_x ? defaults.offset_x : defaults.offset_y;
      if (const auto v = numbers(node, key); v && *v != expected) {
        warn(node, key, fmt::format("ndtcu's multi-NDT covariance uses Autoware's default offsets ({}); these "
                                    "are not used",
                                    fmt::join(expected, ", ")));
      }
    } else if (key == "covariance.covariance_estimation.temperature") {
      const double expected = PoseCovarianceOptions{}.temperature;
      if (const auto v = number(node, key); v && !(*v == expected)) {
        warn(node, key, fmt::format("ndtcu's MULTI_NDT_SCORE covariance uses Autoware's default temperature {}; "
                                    "{} is not used",
                                    expected, node.Scalar()));
      }
    }
  }

  // The rules between two keys of the file, each value already within its own range.
  void check_together() const {
    if (out_.epsilon && out_.step_size) {
      AlignSettings probe = autoware_preset();
      probe.epsilon = *out_.epsilon;
      probe.step_size = *out_.step_size;
      try {
        validate(probe);
      } catch (const Error& e) {
        throw Error(fmt::format("{} {} with ndt.step_size {}: {}", where(epsilon_node_, "ndt.trans_epsilon"),
                                epsilon_node_.Scalar(), step_node_.Scalar(), e.what()));
      }
    }
    if (out_.particles && out_.startup_trials) {
      TpeOptions probe;
      probe.particles = *out_.particles;
      probe.startup_trials = *out_.startup_trials;
      try {
        validate(probe);
      } catch (const Error& e) {
        throw Error(fmt::format("{} {} with initial_pose_estimation.particles_num {}: {}",
                                where(startup_node_, "initial_pose_estimation.n_startup_trials"),
                                startup_node_.Scalar(), particles_node_.Scalar(), e.what()));
      }
    }
  }

  // Autoware's regularization: its scale factor counts only when enabled (0.01, Autoware's
  // default, when the file enables it without one); a file that disables it sets 0.
  void settle_regularization() {
    if (!regularization_enabled_) return;
    out_.regularization_scale_factor = *regularization_enabled_ ? regularization_scale_.value_or(0.01) : 0.0;
  }

  AutowareParams out_;
  std::optional<bool> regularization_enabled_;
  std::optional<double> regularization_scale_;
  std::vector<std::pair<int, std::string>> warnings_;  // (line, message); INT_MAX: no line
  std::vector<std::pair<std::string, YAML::Node>> entries_;
  YAML::Node step_node_, epsilon_node_, particles_node_, startup_node_;
};

std::string read_text(const std::string& path) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (!fs::exists(status)) throw IoError(path, "no such file");
  if (fs::is_directory(status)) throw IoError(path, "is a directory, not a parameter file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(path, std::string("cannot open: ") + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw IoError(path, "read error");
  return text.str();
}

}  // namespace

AutowareParams read_autoware_params(const std::string& path) {
  const std::string text = read_text(path);
  YAML::Node root;
  try {
    root = YAML::Load(text);
    // The document parsed: a second pass over its events for keys given twice.
    std::istringstream in(text);
    YAML::Parser parser(in);
    DuplicateKeys duplicates(path);
    parser.HandleNextDocument(duplicates);
    // A second document after `---`: a parameter file holds one, and what follows the
    // first would otherwise be dropped without a word.
    const std::vector<YAML::Node> documents = YAML::LoadAll(text);
    for (std::size_t d = 1; d < documents.size(); ++d) {
      if (documents[d].IsNull()) continue;  // a trailing `---` with nothing after it
      throw IoError(path, fmt::format("line {}: a second YAML document (after '---'); a parameter file holds one "
                                      "document, and the settings of the second would be ignored: merge them into "
                                      "the first",
                                      documents[d].Mark().line + 1));
    }
  } catch (const YAML::Exception& e) {
    if (e.mark.line < 0) throw IoError(path, "YAML syntax error: " + e.msg);
    throw IoError(path, fmt::format("line {}, column {}: YAML syntax error: {}", e.mark.line + 1, e.mark.column + 1,
                                    e.msg));
  }
  try {
    return Reader(path).read(root);
  } catch (const YAML::Exception& e) {
    // Not expected once the document parsed (the reader checks each node's kind first).
    throw IoError(path, std::string("cannot read the parameters: ") + e.what());
  }
}

std::optional<AutowareParams> load_autoware_params(const std::string& path) {
  if (path.empty()) return std::nullopt;
  AutowareParams params = read_autoware_params(path);
  if (log_level() <= LogLevel::Warn) {
    for (const auto& w : params.warnings) std::cerr << "ndtcu: warning: " << w << "\n";
  }
  if (log_level() <= LogLevel::Debug && !params.not_used.empty()) {
    std::cerr << fmt::format("ndtcu: {}: no ndtcu equivalent, not used: {}\n", path, fmt::join(params.not_used, ", "));
  }
  return params;
}

}  // namespace ndtcu::cli
