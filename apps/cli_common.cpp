#include "cli_common.hpp"

#include <ndtcu/cuda_device.hpp>
#include <ndtcu/error.hpp>
#include <ndtcu/result.hpp>
#include <ndtcu/simulator.hpp>
#include <ndtcu/text.hpp>

#include <fmt/format.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace ndtcu::cli {

nlohmann::json json_text(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  while (!bytes.empty()) {
    const std::size_t n = ndtcu::text_detail::utf8_sequence_length(bytes);
    if (n == 0) {
      out += fmt::format("\\x{:02X}", static_cast<unsigned char>(bytes.front()));
      bytes.remove_prefix(1);
    } else {
      out.append(bytes.data(), n);
      bytes.remove_prefix(n);
    }
  }
  return out;
}

std::string dump_json(const nlohmann::json& j) {
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
}

void require_finite_numbers(CLI::App& app) {
  // CLI11 converts with strtold/from_chars, which take "nan", "inf" and "infinity"; the
  // range checks (PositiveNumber, Range, ...) compare with <, which NaN passes.
  const CLI::Validator finite(
      [](std::string& value) -> std::string {
        const char* begin = value.c_str();
        char* end = nullptr;
        errno = 0;
        const double v = std::strtod(begin, &end);
        // Not a number at all: CLI11's conversion reports it.
        if (end == begin || *end != '\0') return {};
        if (!std::isfinite(v)) return "value " + value + " is not a finite number";
        return {};
      },
      "", "finite");
  for (CLI::Option* option : app.get_options()) {
    // First in line (transform() puts it there, and it changes nothing), so that a NaN or
    // infinity is named as such before a range check reports it as out of range.
    if (option->get_type_name().find("FLOAT") != std::string::npos) option->transform(finite);
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) require_finite_numbers(*sub);
}

std::string human_bytes(std::uint64_t bytes) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1000.0 && u < 4) {
    v /= 1000.0;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.1f} {}", v, units[u]);
}

std::string out_of_range_text(std::uint64_t dropped) {
  if (dropped == 0) return {};
  return fmt::format(", {} out of range dropped (a coordinate beyond float32's {:.3g} from the origin)", dropped,
                     3.4028234663852886e38);
}

nlohmann::json describe_json(const CloudInfo& info, const PointCloud& cloud) {
  nlohmann::json j;
  j["path"] = json_text(info.path);
  j["format"] = to_string(info.format);
  j["encoding"] = json_text(info.encoding);
  j["points"] = cloud.size();
  j["points_in_file"] = info.points_in_file;
  j["non_finite"] = info.non_finite;
  j["out_of_range"] = info.out_of_range;
  j["width"] = info.width;
  j["height"] = info.height;
  j["organized"] = info.height > 1;
  j["file_bytes"] = info.file_bytes;
  j["xyz_double"] = info.xyz_double;
  j["intensity_field"] = info.intensity_field.empty() ? nlohmann::json(nullptr) : json_text(info.intensity_field);
  j["time_field"] = info.time_field.empty() ? nlohmann::json(nullptr) : json_text(info.time_field);
  j["time_unit"] = info.time_field.empty() ? nlohmann::json(nullptr) : nlohmann::json(to_string(info.time_unit));
  j["time_absolute"] = info.time_absolute;
  j["time_dropped"] = info.time_dropped.empty() ? nlohmann::json(nullptr) : json_text(info.time_dropped);
  auto& fields = j["fields"] = nlohmann::json::array();
  for (const auto& f : info.fields) {
    fields.push_back({{"name", json_text(f.name)}, {"type", json_text(std::string(1, f.type))}, {"size", f.size}, {"count", f.count}});
  }
  j["origin"] = {cloud.origin.x(), cloud.origin.y(), cloud.origin.z()};
  Bounds b = compute_bounds(cloud);
  if (b.valid) {
    j["bounds"] = {{"min", {b.min.x(), b.min.y(), b.min.z()}}, {"max", {b.max.x(), b.max.y(), b.max.z()}}};
  } else {
    j["bounds"] = nullptr;
  }
  return j;
}

std::string describe_text(const CloudInfo& info, const PointCloud& cloud) {
  // The path, field names and encoding are the file's bytes: shown through printable(),
  // so that a name cannot send commands to the terminal.
  std::string fields;
  for (const auto& f : info.fields) {
    fields += fmt::format("{}{}:{}{}", fields.empty() ? "" : " ", printable(f.name), printable(std::string(1, f.type)),
                          f.size);
    if (f.count > 1) fields += fmt::format("x{}", f.count);
  }
  std::string out = fmt::format("{}\n", printable(info.path));
  out += fmt::format("  format     {} ({})\n", to_string(info.format), printable(info.encoding));
  out += fmt::format("  points     {} ({} in file, {} non-finite dropped{})\n", cloud.size(), info.points_in_file,
                     info.non_finite, out_of_range_text(info.out_of_range));
  if (info.height > 1) out += fmt::format("  layout     organized {} x {}\n", info.width, info.height);
  out += fmt::format("  fields     {}\n", fields);
  out += fmt::format("  intensity  {}\n", info.intensity_field.empty() ? "none" : printable(info.intensity_field));
  if (!info.time_field.empty()) {
    out += fmt::format("  time       {} ({}{}, span {:.6f} s)\n", printable(info.time_field), to_string(info.time_unit),
                       info.time_absolute ? ", absolute stamps made relative to the earliest" : "",
                       cloud.has_time() ? static_cast<double>(*std::max_element(cloud.time.begin(), cloud.time.end()) -
                                                              *std::min_element(cloud.time.begin(), cloud.time.end()))
                                        : 0.0);
  } else if (!info.time_dropped.empty()) {
    out += fmt::format("  time       dropped: {}\n", printable(info.time_dropped));
  }
  if (!cloud.origin.isZero()) {
    out += fmt::format("  origin     {} {} {} (subtracted; coordinates kept relative)\n", cloud.origin.x(),
                       cloud.origin.y(), cloud.origin.z());
  }
  Bounds b = compute_bounds(cloud);
  if (b.valid) {
    out += fmt::format("  bounds     x [{:.3f}, {:.3f}]  y [{:.3f}, {:.3f}]  z [{:.3f}, {:.3f}]\n", b.min.x(), b.max.x(),
                       b.min.y(), b.max.y(), b.min.z(), b.max.z());
  } else {
    out += "  bounds     (empty)\n";
  }
  out += fmt::format("  file       {}\n", human_bytes(info.file_bytes));
  return out;
}

namespace {

// ReadOptions for an --origin value, or nullopt.
std::optional<ReadOptions> parse_origin_option(const std::string& text) {
  ReadOptions r;
  if (text == "auto") return r;
  if (text == "zero") {
    r.origin_policy = OriginPolicy::Zero;
    return r;
  }
  r.origin_policy = OriginPolicy::Fixed;
  try {
    r.origin = sim::parse_origin(text);
  } catch (const Error&) {
    return std::nullopt;
  }
  return r;
}

std::string origin_expected(const std::string& text) {
  return "expected auto, zero or X,Y,Z (three finite numbers in metres, comma-separated), got '" + text + "'";
}

}  // namespace

CLI::Option* add_origin_option(CLI::App* cmd, std::string& origin, const std::string& what, const std::string& name,
                               const std::string& note) {
  return cmd
      ->add_option(name, origin,
                   "origin of " + what +
                       " (coordinates are kept in float32 relative to it): auto (the per-axis median of the points, "
                       "rounded to whole metres, when it lies beyond 10 km of zero; else 0,0,0), zero, or X,Y,Z (m)" +
                       (note.empty() ? std::string() : "; " + note))
      ->capture_default_str()
      ->check(CLI::Validator(
          [](std::string& value) { return parse_origin_option(value) ? std::string() : origin_expected(value); },
          "auto|zero|X,Y,Z", "origin"));
}

ReadOptions read_options_for_origin(const std::string& text, const std::string& option) {
  if (auto r = parse_origin_option(text)) return *r;
  throw Error(option + ": " + origin_expected(text));
}

std::string option_name(const std::string& field) {
  std::string name = "--" + field;
  for (char& c : name) c = c == '_' ? '-' : c;
  return name;
}

namespace {

// The check of a number option from its field's range: CLI11's Range where both bounds are
// set and closed (its message names the value and the bounds), else the range's own rule.
// Either shows the range in --help.
template <typename T>
void check_range(CLI::Option* option, const FieldRange& range) {
  if (!range.bounded()) return;
  if (std::isfinite(range.lo) && std::isfinite(range.hi) && !range.lo_open && !range.hi_open) {
    option->check(CLI::Range(static_cast<T>(range.lo), static_cast<T>(range.hi)));
    return;
  }
  option->check(range_validator(range));
}

}  // namespace

CLI::Validator range_validator(const FieldRange& range) {
  return CLI::Validator(
      [range](std::string& value) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(value.c_str(), &end);
        if (end == value.c_str() || *end != '\0') return {};  // not a number: the conversion says so
        return range.contains(v) ? std::string() : "value " + value + " must be " + range.text();
      },
      range.text(), "range");
}

CLI::Validator non_negative_number() { return range_validator(range_at_least(0.0)); }

CLI::Validator positive_number() { return range_validator(range_above(0.0)); }

void check_number_range(CLI::Option* option, const FieldRange& range) { check_range<double>(option, range); }

namespace {

// The --help line of a field: its doc, then what a special value means.
std::string option_help(const char* doc, const FieldRange& range) {
  return range.note ? std::string(doc) + " (" + range.note + ")" : std::string(doc);
}

// One option per field of S (AlignSettings or ExecutionOptions), setting o.target<S>().
template <typename S>
void add_field_options(CLI::App* cmd, NdtOptions& o) {
  visit_fields<S>([&](const auto& f) {
    using T = typename std::decay_t<decltype(f)>::Type;
    const std::string field = f.name;
    auto member = f.member;
    if constexpr (std::is_enum_v<T>) {
      cmd->add_option_function<std::string>(
             option_name(field),
             [&o, field, member](const std::string& v) {
               o.target<S>().*member = EnumValues<T>::parse(v);
               o.given.insert(field);
             },
             f.doc)
          ->check(CLI::IsMember(enum_names<T>()));
    } else if (field == "device") {
      // The command line names a device; -1 (the current one) is the default, not a choice.
      cmd->add_option_function<T>(
             option_name(field),
             [&o, field, member](const T& v) {
               o.target<S>().*member = v;
               o.given.insert(field);
             },
             std::string(f.doc) + " (`ndtcu devices` lists them; default: device 0, or the first of "
                                  "CUDA_VISIBLE_DEVICES); one process per GPU with --device 0, 1, ...")
          ->check(CLI::Range(0, 1023));  // a bound only for the message: hosts have a few dozen GPUs at most
    } else {
      CLI::Option* option = cmd->add_option_function<T>(
          option_name(field),
          [&o, field, member](const T& v) {
            o.target<S>().*member = v;
            o.given.insert(field);
          },
          option_help(f.doc, f.range));
      check_range<T>(option, f.range);
    }
  });
}

}  // namespace

void add_ndt_options(CLI::App* cmd, NdtOptions& o) {
  cmd->add_option("--preset", o.preset, "starting NDT settings; every other option overrides them")
      ->check(CLI::IsMember({"autoware", "pcl"}));
  add_field_options<AlignSettings>(cmd, o);
  add_field_options<ExecutionOptions>(cmd, o);
}

CLI::Option* add_regularization_option(CLI::App* cmd, std::optional<double>& scale, const std::string& pose_from) {
  return cmd
      ->add_option("--regularization", scale,
                   "Autoware's GNSS regularization scale factor (its default 0.01; 0 = off): the score loses SCALE x "
                   "point-voxel pairs x the squared longitudinal distance from " +
                       pose_from + "; overrides --config's ndt.regularization")
      ->check(non_negative_number());
}

double regularization_scale(const std::optional<double>& option, const AutowareParams* config) {
  if (option) return *option;
  if (config && config->regularization_scale_factor) return *config->regularization_scale_factor;
  return 0.0;
}

namespace {
// The standard deviations a prior takes: 1/sigma^2 stays a finite number > 0 (double's
// range is about 1e+-308) with room to spare.
constexpr double kMinPriorSigma = 1e-150, kMaxPriorSigma = 1e150;
}  // namespace

Eigen::Matrix<double, 6, 6> information_from_sigmas(const std::vector<std::string>& sigmas, const std::string& option) {
  if (sigmas.size() != 6) {
    throw Error(fmt::format("{}: expected 6 standard deviations (x,y,z,roll,pitch,yaw; m, rad), got {}", option,
                            sigmas.size()));
  }
  Eigen::Matrix<double, 6, 6> info = Eigen::Matrix<double, 6, 6>::Zero();
  for (int i = 0; i < 6; ++i) {
    const std::string& text = sigmas[static_cast<std::size_t>(i)];
    if (text == "inf") continue;  // nothing known in this direction: zero information
    double sigma = 0.0;
    std::size_t used = 0;
    try {
      sigma = std::stod(text, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != text.size() || text.empty() || !std::isfinite(sigma) || !(sigma > 0.0)) {
      throw Error(fmt::format("{}: {} standard deviation '{}' (must be a finite number > 0, or inf for none)", option,
                              kPoseEntryNames[i], text));
    }
    // The prior weighs 1/sigma^2: beyond these bounds that is 0 (1e300 held nothing, and
    // the error said --prior-sigma was missing) or infinite.
    if (!(sigma >= kMinPriorSigma && sigma <= kMaxPriorSigma)) {
      throw Error(fmt::format("{}: {} standard deviation '{}' is out of range: it must lie in [{:g}, {:g}] (its "
                              "weight 1/sigma^2 is {} beyond), or be inf for a direction the prior does not hold",
                              option, kPoseEntryNames[i], text, kMinPriorSigma, kMaxPriorSigma,
                              sigma > kMaxPriorSigma ? "0" : "infinite"));
    }
    info(i, i) = 1.0 / (sigma * sigma);
  }
  return info;
}

CLI::Option* add_config_option(CLI::App* cmd, NdtOptions& o, const std::string& keys) {
  std::string renamed;
  visit_autoware_renames([&](const char* key, const char* field, auto) {
    renamed += fmt::format("{}{} ({})", renamed.empty() ? "" : ", ", key, option_name(field));
  });
  return cmd->add_option("--config", o.config,
                         "Autoware's ndt_scan_matcher.param.yaml (/**: ros__parameters:): " + renamed +
                             ", covariance_estimation_type" +
                             keys +
                             "; applied on top of --preset, and every option given here overrides the file. "
                             "Unknown keys and values of the wrong type are warnings, values out of range errors");
}

nlohmann::json localizability_json(const Localizability& l) {
  nlohmann::json j;
  j["valid"] = l.valid;
  j["eigenvalues"] = std::vector<double>(l.eigenvalues.data(), l.eigenvalues.data() + 6);
  auto& rows = j["directions"] = nlohmann::json::array();
  for (int i = 0; i < 6; ++i) {
    const Eigen::Matrix<double, 6, 1> d = l.directions.col(i);
    rows.push_back(std::vector<double>(d.data(), d.data() + 6));
  }
  j["condition"] = std::isfinite(l.condition) ? nlohmann::json(l.condition) : nlohmann::json(nullptr);
  j["weakest_ratio"] = l.weakest_ratio;
  j["weak"] = l.weak;
  j["degenerate"] = l.degenerate;
  return j;
}

std::string localizability_text(const Localizability& l) {
  if (!l.valid) return "not available (no Hessian at this pose)";
  const Eigen::Matrix<double, 6, 1> d = l.directions.col(0);
  const std::string weakest = fmt::format("[x {:+.3f} y {:+.3f} z {:+.3f} roll {:+.4f} pitch {:+.4f} yaw {:+.4f}]",
                                          d(0), d(1), d(2), d(3), d(4), d(5));
  if (l.degenerate) {
    return fmt::format("DEGENERATE: {} weak direction{}; the weakest holds {:.2e} of the strongest, along {} "
                       "(m, rad: 1 m of point motion)",
                       l.weak, l.weak == 1 ? "" : "s", l.weakest_ratio, weakest);
  }
  return fmt::format("the weakest direction holds {:.3f} of the strongest, along {} (m, rad: 1 m of point motion)",
                     l.weakest_ratio, weakest);
}

nlohmann::json prior_json(const PosePrior& p) {
  if (!p.active()) return nullptr;
  std::vector<double> info;
  for (int r = 0; r < 6; ++r)
    for (int c = 0; c < 6; ++c) info.push_back(p.information(r, c));
  return {{"pose", std::vector<double>(p.pose.data(), p.pose.data() + 6)},
          {"information", info},
          {"regularization_scale_factor", p.regularization_scale_factor}};
}

namespace {

// A field's value as JSON: enums by name, matrices row-major, strings through json_text.
template <typename T>
nlohmann::json field_json(const T& v) {
  if constexpr (std::is_enum_v<T>) {
    return to_string(v);
  } else if constexpr (std::is_same_v<T, std::string>) {
    return json_text(v);
  } else if constexpr (std::is_base_of_v<Eigen::MatrixBase<T>, T>) {
    std::vector<double> values;
    for (Eigen::Index r = 0; r < v.rows(); ++r)
      for (Eigen::Index c = 0; c < v.cols(); ++c) values.push_back(v(r, c));
    return values;
  } else {
    return v;
  }
}

// Every field of `s` listed for S (ndtcu/fields.hpp), by name.
template <typename S>
nlohmann::json fields_json(const S& s) {
  nlohmann::json j = nlohmann::json::object();
  visit_fields<S>([&](const auto& f) { j[f.name] = field_json(s.*f.member); });
  return j;
}

}  // namespace

nlohmann::json ndt_settings_json(const std::string& preset, const AlignSettings& s, const ExecutionOptions& execution,
                                 const std::string& config) {
  nlohmann::json j = fields_json(s);
  j.update(fields_json(execution));
  j["preset"] = preset;
  j["config"] = config.empty() ? nlohmann::json(nullptr) : json_text(config);
  j["prior"] = prior_json(s.prior);
  return j;
}

nlohmann::json align_result_json(const AlignResult& r) {
  nlohmann::json j = fields_json(r);
  j["localizability"] = localizability_json(r.localizability);
  j["time_ms"] = r.timings.total_ms;
  j["per_iteration_ms"] = r.timings.per_iteration_ms;
  j["evaluations"] = r.timings.evaluations;
  auto& trace = j["trace"] = nlohmann::json::array();
  for (const auto& it : r.trace) {
    trace.push_back({{"xyzrpy", field_json(it.pose)}, {"score", it.score}, {"step", it.step_length}});
  }
  return j;
}

AlignSettings ndt_settings(const NdtOptions& o, const AutowareParams* config) {
  AlignSettings s = preset(o.preset);
  if (config) apply_autoware_params(*config, s);
  // The command line's values replace the file's exactly when they were given.
  visit_fields<AlignSettings>([&](const auto& f) {
    if (o.was_given(f.name)) s.*f.member = o.values.*f.member;
  });
  // Before any point cloud is read: a contradiction fails at once. Each value of the file
  // passed its own range already; what is left is a rule between two settings that the
  // file and the command line (or the preset) set apart.
  try {
    validate(s);
  } catch (const Error& e) {
    if (!config) throw;
    throw Error(fmt::format("{} (settings from --preset {}, --config {} and the command line)", e.what(), o.preset,
                            config->path));
  }
  return s;
}

ExecutionOptions execution_options(const NdtOptions& o, const AutowareParams* config) {
  ExecutionOptions e;
  if (config) apply_autoware_params(*config, e);
  // The command line's values replace the file's exactly when they were given.
  visit_fields<ExecutionOptions>([&](const auto& f) {
    if (o.was_given(f.name) && std::string(f.name) != "device") e.*f.member = o.execution.*f.member;
  });
  if (o.was_given("device")) {
    const int device = o.execution.device;
    // Checked here, before any file is read, in the option's own words.
    if (e.backend == Backend::Cpu) {
      throw Error(fmt::format("--device {}: the CPU backend runs on no CUDA device (use --backend cuda or auto)",
                              device));
    }
    const std::size_t count = cuda_devices().size();
    if (device < 0 || static_cast<std::size_t>(device) >= count) {
      const std::string why = cuda_unavailable_reason();
      throw Error(fmt::format("--device {}: no such CUDA device ({} present{}; `ndtcu devices` lists them)", device,
                              count, count > 0 ? fmt::format(", indices 0 to {}", count - 1)
                                               : why.empty() ? std::string() : ": " + why));
    }
    e.device = device;
  }
  validate(e);
  return e;
}

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::optional<std::string> find_python_importing(const std::vector<std::string>& candidates,
                                                 const std::vector<std::string>& modules,
                                                 std::vector<std::string>* passed_over) {
  for (const auto& python : candidates) {
    // One import per run, so that the message names the module that failed (importing
    // matplotlib alone takes a fraction of a second: pyplot is what is slow).
    int status = 0;
    std::string failed;
    for (const auto& module : modules) {
      status = std::system((shell_quote(python) + " -c " + shell_quote("import " + module) + " >/dev/null 2>&1").c_str());
      if (status != 0) {
        failed = module;
        break;
      }
    }
    if (status == 0) return python;
    if (passed_over) {
      // The shell's 127 is "command not found", 126 "not executable".
      const int code = status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      passed_over->push_back(python + (code == 127 ? ": not found"
                                       : code == 126 ? ": not executable"
                                                     : ": cannot import " + failed));
    }
  }
  return std::nullopt;
}

}  // namespace ndtcu::cli
