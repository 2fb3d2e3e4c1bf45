// The Python module: ScanMatcher, the work of the ROS 2 node ndtcu.ros2 (`ndtcu_scan_matcher`,
// Autoware's ndt_scan_matcher in its topics and parameters).
//
// The node is rclpy; everything it does per message is here, in one call with the GIL
// released: the serialized sensor_msgs/PointCloud2 (the bytes a raw subscription hands over,
// kept newest first in a slot of one: MessageSlot) decoded by the rosbag reader's decoder
// (rosbag::decode_point_cloud2, every field layout a bag may hold), the checks of the
// message, the prediction from the EKF's poses, the Localizer's frame, the pose moved from
// the sensor to the base frame, and ndt_pose, ndt_pose_with_covariance and points_aligned
// serialized for a raw publish (rosbag::encode_pose_stamped, ...). No point passes through
// Python, and no message is built there on the way to ndt_pose.
//
// The settings are those of `ndtcu localize`: the node's arguments are parsed by the same
// options (apps/localize/options.cpp), Autoware's ndt_scan_matcher.param.yaml is its --config
// (read_autoware_params, the same checks), and the map is loaded and streamed as localize
// loads it (load_map, attach_map: a PCD file, or a folder of tiles). On the same scans, with
// no EKF pose, the node's poses are those of `ndtcu localize` on the bag, bit for bit.
#include "common.hpp"

#include <autoware_params.hpp>
#include <cli_common.hpp>
#include <localize/inputs.hpp>
#include <localize/options.hpp>

#include <ndtcu/log.hpp>
#include <ndtcu/tiled_map.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cmath>
#include <cstdint>
#include <deque>
#include <optional>
#include <string_view>
#include <thread>

using namespace nb::literals;

namespace ndtcu::python {

namespace {

namespace loc = cli::localize;
using Matrix6d = Eigen::Matrix<double, 6, 6>;
using Vector7d = Eigen::Matrix<double, 7, 1>;

double ms_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// A header stamp in seconds, as the bag reader turns a record time into one
// (MessageRef::time): the same double for the same nanoseconds, so the node's frame times
// equal `ndtcu localize`'s on a bag stamped at its record times.
double stamp_seconds(std::int64_t stamp_ns) {
  rosbag::MessageRef m;
  m.time_ns = stamp_ns;
  return m.time();
}

// Options of `ndtcu localize` that say where scans, poses and files come from or go: the
// node's come from and go to topics.
const char* const kNotNodeOptions[] = {
    "--scans", "--topic", "--init-from", "--reference", "--reference-format", "--out",
    "--odometry", "--odometry-topic", "--odometry-noise", "--readers", "--queue", "--period",
    "--no-plot", "--map-update-wait", "--gpu-filter-in-line", "--max-time-difference",
};

// A pose message's x y z qx qy qz qw as a transform: finite, the quaternion of unit length
// within 1e-3 (as the trajectory readers require), normalized. Throws Error naming `what`.
Eigen::Matrix4d pose_from_xyzq(const Vector7d& v, const std::string& what) {
  if (!v.allFinite()) throw Error(what + ": the pose holds a value that is not finite");
  Eigen::Quaterniond q(v(6), v(3), v(4), v(5));
  const double n = q.norm();
  if (!(std::abs(n - 1.0) <= 1e-3)) {
    throw Error(fmt::format("{}: the orientation's quaternion has length {:.6g}, not 1", what, n));
  }
  q.normalize();
  Eigen::Matrix4d t = Eigen::Matrix4d::Identity();
  t.topLeftCorner<3, 3>() = q.toRotationMatrix();
  t.topRightCorner<3, 1>() = v.head<3>();
  return t;
}

Vector7d xyzq_of(const Eigen::Matrix4d& t) {
  const Eigen::Quaterniond q(Eigen::Matrix3d(t.topLeftCorner<3, 3>()));
  Vector7d v;
  v << t(0, 3), t(1, 3), t(2, 3), q.x(), q.y(), q.z(), q.w();
  return v;
}

// A 6x6 covariance of a message: finite and symmetric (within 1e-9 of its scale); a
// diagonal entry below zero is refused. Throws Error naming `what`.
Matrix6d covariance_arg(const Matrix6d& c, const std::string& what) {
  if (!c.allFinite()) throw Error(what + ": the covariance holds a value that is not finite");
  const double scale = std::max(1.0, c.cwiseAbs().maxCoeff());
  if (!((c - c.transpose()).cwiseAbs().maxCoeff() <= 1e-9 * scale)) throw Error(what + ": the covariance is not symmetric");
  if ((c.diagonal().array() < 0.0).any()) throw Error(what + ": the covariance has a negative variance");
  return c;
}

// The covariance of [x y z roll pitch yaw] of T(p) * offset when p has covariance `c`: to
// first order J c J', J the Jacobian of that map at `p` (central differences of 1e-6 m or
// rad, angles wrapped). The pose moved from the sensor to the base frame and back.
Matrix6d moved_covariance(const Pose6& p, const Eigen::Matrix4d& offset, const Matrix6d& c) {
  if (offset.isIdentity(0.0) || (c.array() == 0.0).all()) return c;
  constexpr double h = 1e-6;
  Matrix6d j;
  for (int k = 0; k < 6; ++k) {
    Pose6 a = p, b = p;
    a(k) += h;
    b(k) -= h;
    Pose6 d = matrix_to_pose(pose_to_matrix(a) * offset) - matrix_to_pose(pose_to_matrix(b) * offset);
    for (int r = 3; r < 6; ++r) d(r) = std::remainder(d(r), 2.0 * M_PI);
    j.col(k) = d / (2.0 * h);
  }
  const Matrix6d m = j * c * j.transpose();
  return 0.5 * (m + m.transpose());
}

// One pose of a topic the node buffers (ekf_pose_with_covariance,
// regularization_pose_with_covariance): T_map_base at a stamp, with its covariance.
struct BufferedPose {
  std::int64_t stamp_ns = 0;
  Eigen::Matrix4d pose = Eigen::Matrix4d::Identity();
  Matrix6d covariance = Matrix6d::Zero();
};

// A topic's recent poses, in stamp order; older ones go when it holds more than kCapacity
// (5 s of a 50 Hz EKF).
class PoseBuffer {
 public:
  static constexpr std::size_t kCapacity = 256;

  // Adds a pose; throws Error for one not after the last.
  void add(const BufferedPose& p, const std::string& what) {
    if (!poses_.empty() && p.stamp_ns <= poses_.back().stamp_ns) {
      throw Error(fmt::format("{}: stamp {:.9f} s is not after the previous pose's {:.9f} s (a stamp going backwards "
                              "or repeated); the pose is not used",
                              what, stamp_seconds(p.stamp_ns), stamp_seconds(poses_.back().stamp_ns)));
    }
    poses_.push_back(p);
    if (poses_.size() > kCapacity) poses_.pop_front();
  }

  void clear() { poses_.clear(); }
  bool empty() const { return poses_.empty(); }

  // The pose at `stamp_ns` as Autoware's ndt_scan_matcher takes the EKF's: interpolated
  // between the two poses around it (interpolate_pose: linear position, slerp), or the
  // newest when the scan is newer than it; either only when the poses used lie within
  // `timeout_s` of the stamp (validation.initial_pose_timeout_sec). Its covariance is the
  // later pose's.
  std::optional<BufferedPose> at(std::int64_t stamp_ns, double timeout_s) const {
    if (poses_.empty()) return std::nullopt;
    const double t = stamp_seconds(stamp_ns);
    const BufferedPose& newest = poses_.back();
    if (stamp_ns >= newest.stamp_ns) {
      if (t - stamp_seconds(newest.stamp_ns) > timeout_s) return std::nullopt;
      BufferedPose p = newest;
      p.stamp_ns = stamp_ns;
      return p;
    }
    const auto later = std::lower_bound(poses_.begin(), poses_.end(), stamp_ns,
                                        [](const BufferedPose& p, std::int64_t s) { return p.stamp_ns < s; });
    if (later->stamp_ns == stamp_ns) return *later;  // a pose at the scan's stamp
    if (later == poses_.begin()) return std::nullopt;  // older than every pose
    const BufferedPose& b = *later;
    const BufferedPose& a = *(later - 1);
    if (t - stamp_seconds(a.stamp_ns) > timeout_s || stamp_seconds(b.stamp_ns) - t > timeout_s) return std::nullopt;
    const Trajectory pair = {{stamp_seconds(a.stamp_ns), Eigen::Isometry3d(a.pose)},
                             {stamp_seconds(b.stamp_ns), Eigen::Isometry3d(b.pose)}};
    const std::optional<Eigen::Isometry3d> pose = interpolate_pose(pair, t);
    if (!pose) return std::nullopt;
    BufferedPose p;
    p.stamp_ns = stamp_ns;
    p.pose = pose->matrix();
    p.covariance = b.covariance;
    return p;
  }

 private:
  std::deque<BufferedPose> poses_;
};

// What the node does with one PointCloud2 message (ScanMatcher::frame, next_frame in Python).
struct FrameOutcome {
  /// Why the message was not localized ("" when it was): a message the decoder refused, a
  /// frame id or stamp that does not fit, no pose to start from, an empty cloud.
  std::string refused;
  /// The refusal's kind, a diagnostic key: "invalid_message", "frame_id", "stamp",
  /// "no_initial_pose", "empty", "localizer".
  std::string refused_as;
  rosbag::PointCloud2Info info;      ///< what the message declared (stamp, frame, layout, dropped points)
  std::size_t points = 0;            ///< finite points decoded
  bool localized = false;            ///< a LocalizationResult is in `result`
  LocalizationResult result;         ///< the localizer's frame (sensor frame)
  Eigen::Matrix4d pose = Eigen::Matrix4d::Identity();  ///< T_map_base of the result
  Matrix6d covariance = Matrix6d::Zero();              ///< its covariance, base frame
  /// Where the prediction came from: "ekf", "regularization", "motion model", "initial pose",
  /// "initial search" (an initialpose or --init region searched), "global search".
  std::string prediction_source;
  Eigen::Matrix4d prediction = Eigen::Matrix4d::Identity();  ///< T_map_base the frame started from
  Matrix6d prediction_covariance = Matrix6d::Zero();        ///< its covariance (base frame)
  std::string aligned;               ///< points_aligned, serialized (empty unless asked and valid)
  /// ndt_pose and ndt_pose_with_covariance, serialized (empty unless the pose is valid): the
  /// node publishes them as they are, with no Python message to build.
  std::string pose_msg, pose_with_covariance_msg;
  std::int64_t received_ns = 0;      ///< when the message was handed over (steady clock, ns)
  std::int64_t taken_ns = 0;         ///< when the frame took it (the wait in between: a frame under way)
  std::int64_t done_ns = 0;          ///< when the frame was done
  std::vector<Eigen::Matrix4d> trace;  ///< the alignment's poses, base frame (ndt_marker)
  int map_swaps = 0;                 ///< tiled map updates taken before this frame
  double decode_ms = 0.0, preprocess_ms = 0.0, covariance_ms = 0.0, encode_ms = 0.0;
  /// The Localizer's whole frame (its alignments, checks, probes and covariance): with
  /// preprocess_ms, the library's time in the frame.
  double localize_ms = 0.0;
  double call_ms = 0.0;              ///< the whole call, GIL released
};

// An initialpose waiting for the next frame.
struct InitialRequest {
  Eigen::Matrix4d pose = Eigen::Matrix4d::Identity();  // T_map_base
  Matrix6d covariance = Matrix6d::Zero();
};

// Autoware's validation.initial_pose_timeout_sec when the file has none.
constexpr double kDefaultPoseTimeoutS = 1.0;

/// The node's work (see the file comment). Its frame and its pose inputs may be called from
/// two threads: the frame holds the localizer, the inputs only their buffers.
class ScanMatcher {
 public:
  ScanMatcher(const std::vector<std::string>& args, const std::string& config, const std::string& map_path,
              const Pose6& sensor_to_base, const std::string& sensor_frame, const std::string& map_frame,
              const Matrix6d& fixed_covariance)
      : map_frame_(map_frame), fixed_covariance_(covariance_arg(fixed_covariance, "output_pose_covariance")),
        sensor_frame_(sensor_frame) {
    parse(args, config, map_path);
    if (!sensor_to_base.allFinite()) throw Error("sensor_to_base: every value must be finite");
    base_sensor_ = pose_to_matrix(sensor_to_base);
    sensor_base_ = base_sensor_.inverse();
    localizer_ = std::make_unique<Localizer>(settings_.localizer, settings_.execution);
    const bool init_pose = !options_.init.empty() && !(options_.init.size() == 1 && options_.init[0] == "global");
    Eigen::Matrix4d initial = Eigen::Matrix4d::Identity();
    if (init_pose) initial = init_option_pose();
    if (!is_tiled_map(options_.map) || init_pose) load_map(initial);
    if (init_pose) {
      start(initial, options_.init_radius, options_.init_yaw_range);
    } else if (!options_.init.empty()) {
      if (!map_loaded_) {
        throw Error("--init global: a tiled map is loaded about a pose; give --init x,y,z,roll,pitch,yaw or a map file");
      }
      if (options_.init_radius > 0.0) throw Error("--init global searches the whole map; --init-radius is for a rough pose");
      localizer_->set_initial_global();
      start_source_ = "global search";
      searching_ = true;
      from_start_ = true;
    }
  }

  ~ScanMatcher() {
    // No update may still be staging on the localizer when it goes (localize's WaitForUpdates).
    if (map_.streamer) map_.streamer->wait_idle();
    localizer_.reset();
  }

  ScanMatcher(const ScanMatcher&) = delete;
  ScanMatcher& operator=(const ScanMatcher&) = delete;

  const loc::LocalizeSettings& settings() const { return settings_; }
  const loc::LocalizeOptions& options() const { return options_; }
  const std::vector<std::string>& config_warnings() const { return config_warnings_; }
  const std::string& config_path() const { return config_path_; }
  double pose_timeout_s() const { return pose_timeout_s_; }
  const Eigen::Matrix4d& base_sensor() const { return base_sensor_; }
  bool map_loaded() const { return map_loaded_; }
  const loc::LocalizeMap& map() const { return map_; }
  Backend backend() const { return localizer_->backend(); }

  bool initialized() {
    std::lock_guard<std::mutex> lock(work_);
    return localizer_->initialized();
  }

  // ekf_pose_with_covariance: the prediction of later scans.
  void add_prediction(std::int64_t stamp_ns, const Vector7d& xyzq, const Matrix6d& covariance) {
    add_pose(ekf_, stamp_ns, xyzq, covariance, "ekf_pose_with_covariance");
  }

  // regularization_pose_with_covariance: Autoware's GNSS pose.
  void add_regularization(std::int64_t stamp_ns, const Vector7d& xyzq, const Matrix6d& covariance) {
    add_pose(regularization_, stamp_ns, xyzq, covariance, "regularization_pose_with_covariance");
  }

  // initialpose: checked now, taken by the next frame.
  void request_initial_pose(const Vector7d& xyzq, const Matrix6d& covariance) {
    InitialRequest r;
    r.pose = pose_from_xyzq(xyzq, "initialpose");
    r.covariance = covariance_arg(covariance, "initialpose");
    std::lock_guard<std::mutex> lock(inputs_);
    initial_request_ = r;
    ekf_.clear();  // poses of before the reset would predict from where the vehicle is not
  }

  FrameOutcome frame(std::string_view raw, bool want_aligned) {
    const auto t0 = std::chrono::steady_clock::now();
    FrameOutcome out;
    std::lock_guard<std::mutex> lock(work_);
    frame_locked(raw, want_aligned, out);
    out.call_ms = ms_between(t0, std::chrono::steady_clock::now());
    return out;
  }

 private:
  // The node's arguments as `ndtcu localize` options, with the --params-file (`config`) as
  // --config and map_path as --map.
  void parse(const std::vector<std::string>& args, const std::string& config, const std::string& map_path) {
    CLI::App app("ndtcu_scan_matcher", "ndtcu_scan_matcher");
    const loc::ConfigurableOptions given = loc::add_localize_options(&app, options_);
    cli::require_finite_numbers(app);
    for (const std::string& arg : args) {
      for (const char* name : kNotNodeOptions) {
        const std::string_view n(name);
        if (arg == n || (arg.size() > n.size() && arg.compare(0, n.size(), n) == 0 && arg[n.size()] == '=')) {
          throw Error(fmt::format("{}: an option of `ndtcu localize` for files; the node reads points_raw and the "
                                  "pose topics instead",
                                  name));
        }
      }
    }
    std::vector<std::string> all = args;
    // --scans is required by localize's options; the node's scans come from points_raw.
    all.insert(all.end(), {"--scans", "points_raw"});
    if (!map_path.empty()) all.insert(all.end(), {"--map", map_path});
    if (!config.empty()) all.insert(all.end(), {"--config", config});
    std::vector<std::string> reversed(all.rbegin(), all.rend());  // CLI11 takes them last first
    try {
      app.parse(reversed);
    } catch (const CLI::ParseError& e) {
      throw Error(std::string("ndtcu_scan_matcher: ") + e.what());
    }
    if (app.get_option("--map")->count() > 1) throw Error("give the map once: map_path or --map");
    if (app.get_option("--config")->count() > 1) {
      throw Error("give Autoware's parameters once: --params-file or --config");
    }
    const std::vector<std::string>& init = options_.init;
    if (!init.empty() && init.size() != 6 && !(init.size() == 1 && init[0] == "global")) {
      throw Error(fmt::format("--init: {} values; give x,y,z,roll,pitch,yaw (m, rad) or `global`", init.size()));
    }
    config_path_ = options_.ndt.config;
    if (!config_path_.empty()) {
      // The file's warnings go to the node's log (the caller's), once: read here, and kept
      // out of stderr while localize_settings reads it again.
      config_warnings_ = cli::read_autoware_params(config_path_).warnings;
    }
    const LogLevel level = log_level();
    set_log_level(LogLevel::Error);
    try {
      settings_ = loc::localize_settings(options_, given);
    } catch (...) {
      set_log_level(level);
      throw;
    }
    set_log_level(level);
    if (settings_.config && settings_.config->initial_pose_timeout_sec) {
      pose_timeout_s_ = *settings_.config->initial_pose_timeout_sec;
    }
  }

  Eigen::Matrix4d init_option_pose() const {
    Pose6 p;
    for (int i = 0; i < 6; ++i) p(i) = std::strtod(options_.init[static_cast<std::size_t>(i)].c_str(), nullptr);
    if (!p.allFinite()) throw Error("--init: every value must be finite");
    return pose_to_matrix(p);
  }

  // The map, as localize loads it: a file at once, a tiled map about `sensor_pose`.
  void load_map(const Eigen::Matrix4d& sensor_pose) {
    loc::load_map(map_, options_, settings_.localizer.align, settings_.execution, sensor_pose);
    loc::attach_map(map_, *localizer_, options_, settings_.localizer.align);
    map_loaded_ = true;
  }

  // Tracking starts from T_map_sensor `pose`: exactly there, or with a search within
  // `radius` (m) and `yaw_range_deg` of it.
  void start(const Eigen::Matrix4d& pose, double radius, double yaw_range_deg) {
    searching_ = radius > 0.0;
    if (searching_) {
      localizer_->set_initial_region(pose, radius, yaw_range_deg);
      start_source_ = "initial search";
    } else {
      localizer_->set_initial_pose(pose);
      start_source_ = "initial pose";
    }
    from_start_ = true;
  }

  // The map about T_map_sensor `sensor`, where tracking is about to start: loaded the first
  // time; a tiled map loaded again about it, as a start there loads it
  // (TiledMapStreamer::load: the tiles within --map-radius read, those beyond dropped, a
  // running update superseded). The updates follow accepted poses only, so without this a
  // start beyond the tiles in hand would align on none of its places and no pose would
  // ever move them. The map keeps the scene's typical NVTL (Localizer::update_map: the
  // same map's next version). Returns 1 when a loaded map was replaced.
  int load_map_about(const Eigen::Matrix4d& sensor) {
    if (!map_loaded_) {
      load_map(sensor);
      return 0;
    }
    if (!map_.streamer) return 0;
    const Eigen::Vector2d xy = sensor.topRightCorner<2, 1>();
    std::shared_ptr<const VoxelMap> next;
    try {
      next = map_.streamer->load(xy);
    } catch (const Error& e) {
      throw Error(fmt::format("{} (--map-radius around the initial pose)", e.what()));
    }
    if (next) localizer_->update_map(std::move(next));  // else published: the localizer follows the tiles
    // The pose jumped: no extrapolation from the poses before it (take_map_update).
    last_xy_ = xy;
    before_last_xy_.reset();
    return 1;
  }

  void add_pose(PoseBuffer& buffer, std::int64_t stamp_ns, const Vector7d& xyzq, const Matrix6d& covariance,
                const char* what) {
    BufferedPose p;
    p.stamp_ns = stamp_ns;
    p.pose = pose_from_xyzq(xyzq, what);
    p.covariance = covariance_arg(covariance, what);
    std::lock_guard<std::mutex> lock(inputs_);
    buffer.add(p, what);
  }

  // An initialpose, taken: the map about it (load_map_about), then the search about it:
  // within --init-radius when given, else within three standard deviations of its
  // position's covariance (at most 50 m: the search's limit), over --init-yaw-range (the
  // full circle by default, as Autoware's initial pose estimation samples yaw); a
  // covariance under 1 cm takes the pose as it is. Returns the map updates swapped in.
  int take_initial_request(const InitialRequest& r) {
    const Eigen::Matrix4d sensor = r.pose * base_sensor_;
    const int swaps = load_map_about(sensor);
    double radius = options_.init_radius;
    if (radius <= 0.0) {
      const double sigma = std::sqrt(std::max(r.covariance(0, 0), r.covariance(1, 1)));
      radius = sigma < 0.01 / 3.0 ? 0.0 : std::min(50.0, std::max(1.0, 3.0 * sigma));
    }
    start(sensor, radius, options_.init_yaw_range);
    return swaps;
  }

  // A finished map update goes in between two frames (localize's take_map_update, without
  // --map-update-wait: a frame waits only when the map in hand lacks the tiles its scan
  // reaches from where it is expected).
  int take_map_update() {
    if (!map_.streamer) return 0;
    bool covered = true;
    if (last_xy_) {
      const Eigen::Vector2d next = before_last_xy_ ? Eigen::Vector2d(2.0 * *last_xy_ - *before_last_xy_) : *last_xy_;
      const double reach = std::min(settings_.localizer.max_range,
                                    std::max(0.0, options_.map_radius - options_.map_update_distance));
      covered = map_.streamer->covers(next, reach);
    }
    if (auto next = map_.streamer->take(!covered)) {
      localizer_->update_map(std::move(next));
      return 1;
    }
    return map_.streamer->take_published(!covered) ? 1 : 0;
  }

  static void refuse(FrameOutcome& out, const char* as, std::string why) {
    out.refused = std::move(why);
    out.refused_as = as;
  }

  void frame_locked(std::string_view raw, bool want_aligned, FrameOutcome& out) {
    auto t = std::chrono::steady_clock::now();
    PointCloud cloud;
    ReadOptions ro;
    ro.read_intensity = false;  // NDT uses geometry only, as localize reads a bag
    try {
      cloud = rosbag::decode_point_cloud2(raw, rosbag::MessageEncoding::Cdr, "points_raw", ro, &out.info);
    } catch (const Error& e) {
      return refuse(out, "invalid_message", e.what());
    }
    out.points = cloud.size();
    out.decode_ms = ms_between(t, std::chrono::steady_clock::now());
    const std::string& frame_id = out.info.frame_id;
    if (sensor_frame_.empty()) sensor_frame_ = frame_id;  // the first message's names the sensor
    if (frame_id != sensor_frame_) {
      return refuse(out, "frame_id",
                    fmt::format("points_raw: frame_id '{}' is not the sensor's '{}' (sensor_to_base places that "
                                "frame only); the scan is not used",
                                frame_id, sensor_frame_));
    }
    const std::int64_t stamp = out.info.stamp_ns;
    if (last_stamp_ns_ && stamp <= *last_stamp_ns_) {
      return refuse(out, "stamp",
                    fmt::format("points_raw: stamp {:.9f} s is not after the last scan's {:.9f} s (a stamp going "
                                "backwards or repeated); the scan is not used",
                                stamp_seconds(stamp), stamp_seconds(*last_stamp_ns_)));
    }
    if (cloud.empty()) {
      return refuse(out, "empty",
                    fmt::format("points_raw: no finite point in the message ({} points, {} not finite)",
                                out.info.points_in_message, out.info.non_finite));
    }

    // The pose inputs, taken together: an initialpose first, then the prediction.
    std::optional<InitialRequest> request;
    std::optional<BufferedPose> ekf, regularization;
    {
      std::lock_guard<std::mutex> lock(inputs_);
      request.swap(initial_request_);
      ekf = ekf_.at(stamp, pose_timeout_s_);
      if (settings_.localizer.regularization_scale_factor > 0.0) {
        regularization = regularization_.at(stamp, pose_timeout_s_);
      }
    }
    int swaps = 0;
    try {
      if (request) swaps = take_initial_request(*request);
      // Autoware's node starts from the EKF's pose; so does this one without an initial pose.
      if (!localizer_->initialized() && ekf) {
        if (!map_loaded_) load_map(ekf->pose * base_sensor_);
        localizer_->set_initial_pose(ekf->pose * base_sensor_);
        start_source_ = "initial pose";
        searching_ = false;
        from_start_ = true;
      }
    } catch (const Error& e) {
      return refuse(out, "localizer", std::string("initial pose: ") + e.what());
    }
    if (!localizer_->initialized()) {
      return refuse(out, "no_initial_pose",
                    "no pose to start from yet: waiting for initialpose or ekf_pose_with_covariance (or --init)");
    }
    last_stamp_ns_ = stamp;

    // The prediction: the EKF's pose at the scan's stamp (moved to the sensor), or with
    // Autoware's regularization and no EKF pose, the GNSS pose (the regularization is about
    // the prediction); else the localizer's own: until it takes a pose, the one it was started
    // at (or the search about it), then its constant velocity, as localize without odometry.
    // A search under way (an initialpose) runs from its own region.
    const BufferedPose* prior = searching_ ? nullptr : ekf ? &*ekf : regularization ? &*regularization : nullptr;
    std::optional<std::pair<Eigen::Matrix4d, Matrix6d>> predicted;
    if (prior) {
      const Eigen::Matrix4d sensor = prior->pose * base_sensor_;
      predicted.emplace(sensor, moved_covariance(matrix_to_pose(prior->pose), base_sensor_, prior->covariance));
      out.prediction_source = prior == &*ekf ? "ekf" : "regularization";
    } else {
      out.prediction_source = from_start_ ? start_source_ : "motion model";
    }

    try {
      t = std::chrono::steady_clock::now();
      const PointCloud filtered = localizer_->preprocess(cloud);
      out.preprocess_ms = ms_between(t, std::chrono::steady_clock::now());
      out.map_swaps = swaps + take_map_update();
      t = std::chrono::steady_clock::now();
      out.result = predicted ? localizer_->localize_preprocessed(filtered, stamp_seconds(stamp), predicted->first,
                                                                 predicted->second)
                             : localizer_->localize_preprocessed(filtered, stamp_seconds(stamp));
      out.localize_ms = ms_between(t, std::chrono::steady_clock::now());
      out.localized = true;
      finish(out, filtered, want_aligned);
    } catch (const Error& e) {
      return refuse(out, "localizer", e.what());
    }
  }

  // The result in the base frame, the map's next centre, points_aligned.
  void finish(FrameOutcome& out, const PointCloud& filtered, bool want_aligned) {
    const LocalizationResult& r = out.result;
    out.covariance_ms = r.alignment.timings.covariance_ms;
    out.pose = r.pose * sensor_base_;
    out.covariance = moved_covariance(matrix_to_pose(r.pose), sensor_base_, r.covariance);
    out.prediction = r.prediction * sensor_base_;
    out.prediction_covariance = moved_covariance(matrix_to_pose(r.prediction), sensor_base_, r.prediction_covariance);
    out.trace.reserve(r.alignment.trace.size());
    for (const IterationTrace& it : r.alignment.trace) out.trace.push_back(pose_to_matrix(it.pose) * sensor_base_);
    // The motion model took the pose (valid, degenerate or uncertain): later frames predict from it.
    if (r.valid || r.status == FrameStatus::Degenerate || r.status == FrameStatus::Uncertain) from_start_ = false;
    if (!r.valid) return;
    out.pose_msg = rosbag::encode_pose_stamped(out.info.stamp_ns, map_frame_, out.pose);
    out.pose_with_covariance_msg = rosbag::encode_pose_with_covariance_stamped(
        out.info.stamp_ns, map_frame_, out.pose, r.alignment.covariance_valid ? out.covariance : fixed_covariance_);
    searching_ = false;
    before_last_xy_ = last_xy_;
    last_xy_ = r.pose.topRightCorner<2, 1>();
    if (map_.streamer) map_.streamer->request(*last_xy_);
    if (!want_aligned) return;
    const auto t = std::chrono::steady_clock::now();
    // The scan that was aligned, in the map frame (Autoware's points_aligned), its floats
    // relative to the pose's position so that a map far from zero keeps their precision
    // until the encoder adds it back.
    PointCloud aligned;
    aligned.origin = r.pose.topRightCorner<3, 1>();
    aligned.points.resize(filtered.size());
    const Eigen::Matrix3d rotation = r.pose.topLeftCorner<3, 3>();
    for (std::size_t i = 0; i < filtered.size(); ++i) {
      aligned.points[i] = (rotation * filtered.world(i)).cast<float>();
    }
    out.aligned = rosbag::encode_point_cloud2(out.info.stamp_ns, map_frame_, aligned);
    out.encode_ms = ms_between(t, std::chrono::steady_clock::now());
  }

 private:
  std::string map_frame_;  // the frame of the poses and points_aligned (Autoware's frame.map_frame)
  // ndt_pose_with_covariance's covariance when the alignment has no estimate (Autoware's
  // covariance.output_pose_covariance: covariance_estimation_type 0, or an estimate that failed).
  Matrix6d fixed_covariance_;
  loc::LocalizeOptions options_;
  loc::LocalizeSettings settings_;
  std::string config_path_;
  std::vector<std::string> config_warnings_;
  double pose_timeout_s_ = kDefaultPoseTimeoutS;
  Eigen::Matrix4d base_sensor_ = Eigen::Matrix4d::Identity();  // T_base_sensor (sensor_to_base)
  Eigen::Matrix4d sensor_base_ = Eigen::Matrix4d::Identity();  // its inverse
  // The map before the localizer: the localizer goes first (the destructor waits for the
  // streamer's update, which stages maps on the localizer).
  loc::LocalizeMap map_;
  std::unique_ptr<Localizer> localizer_;
  bool map_loaded_ = false;

  std::mutex work_;  // the frame: the localizer, the map and what follows
  std::string sensor_frame_;
  std::optional<std::int64_t> last_stamp_ns_;
  std::optional<Eigen::Vector2d> last_xy_, before_last_xy_;
  bool searching_ = false;             // a search (initialpose, --init-radius, --init global) runs until a frame is valid
  // The localizer has taken no pose since its start: it predicts from start_source_
  // ("initial pose", "initial search", "global search").
  bool from_start_ = false;
  std::string start_source_ = "none";

  std::mutex inputs_;  // the pose topics' buffers and the waiting initialpose
  PoseBuffer ekf_, regularization_;
  std::optional<InitialRequest> initial_request_;
};

// The steady clock (CLOCK_MONOTONIC, as Python's time.monotonic_ns) in nanoseconds.
std::int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The newest PointCloud2 message not taken yet, shared by the executor's callback (put,
// with the GIL) and the frames' thread (take, without it). A put replaces a message not
// taken yet (newest wins), so nothing queues; the frames' thread waits here in C++ and
// starts the frame as soon as a message comes, without waiting for the GIL first.
class MessageSlot {
 public:
  // With the GIL held (the replaced message is released here). True when it replaced one.
  bool put(nb::object raw) {
    nb::object replaced;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++received_;
      const bool drop = pending_.is_valid();
      if (drop) ++dropped_;
      replaced = std::move(pending_);
      pending_ = std::move(raw);
      received_ns_ = steady_ns();
    }
    ready_.notify_one();
    // The frames' thread needs no GIL to start the frame, but a core: on a busy 2-core machine
    // it waited for the executor's Python after this callback (0.5 ms medians in some runs).
    std::this_thread::yield();
    return replaced.is_valid();
  }

  // Without the GIL: moves the pending message into `raw` (no reference count changes: the
  // caller releases it once it holds the GIL again). False after `timeout_s` or stop().
  // `active`: whether the node was activated (trigger_node_srv) when the message was taken.
  bool take(nb::object& raw, std::int64_t& received_ns, bool& active, double timeout_s) {
    std::unique_lock<std::mutex> lock(mutex_);
    const auto ready = [&] { return stopping_ || pending_.is_valid(); };
    if (!ready_.wait_for(lock, std::chrono::duration<double>(timeout_s), ready) || stopping_) return false;
    raw = std::move(pending_);
    received_ns = received_ns_;
    active = active_;
    return true;
  }

  void set_active(bool active) {
    std::lock_guard<std::mutex> lock(mutex_);
    active_ = active;
  }

  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    ready_.notify_all();
  }

  std::pair<std::uint64_t, std::uint64_t> counts() {
    std::lock_guard<std::mutex> lock(mutex_);
    return {received_, dropped_};
  }

 private:
  std::mutex mutex_;
  std::condition_variable ready_;
  nb::object pending_;
  std::int64_t received_ns_ = 0;
  std::uint64_t received_ = 0, dropped_ = 0;
  bool stopping_ = false;
  bool active_ = true;
};

// ScanMatcher as Python holds it: with the slot its callback and frames' thread share.
struct PyScanMatcher {
  PyScanMatcher(const std::vector<std::string>& args, const std::string& config, const std::string& map_path,
                const Pose6& sensor_to_base, const std::string& sensor_frame, const std::string& map_frame,
                const Matrix6d& fixed_covariance)
      : matcher(args, config, map_path, sensor_to_base, sensor_frame, map_frame, fixed_covariance) {}
  ScanMatcher matcher;
  MessageSlot slot;
};

}  // namespace

void define_scan_matcher(nb::module_& m) {
  nb::class_<FrameOutcome>(m, "ScanMatcherFrame", "What ScanMatcher.next_frame did with one PointCloud2 message.")
      .def_ro("refused", &FrameOutcome::refused, "why the message was not localized ('' when it was)")
      .def_ro("refused_as", &FrameOutcome::refused_as,
              "the refusal's kind: invalid_message, frame_id, stamp, empty, no_initial_pose, localizer ('' when none)")
      .def_prop_ro("stamp_ns", [](const FrameOutcome& o) { return o.info.stamp_ns; })
      .def_prop_ro("frame_id", [](const FrameOutcome& o) { return name_out(o.info.frame_id); })
      .def_prop_ro("points_in_message", [](const FrameOutcome& o) { return o.info.points_in_message; })
      .def_prop_ro("non_finite", [](const FrameOutcome& o) { return o.info.non_finite; },
                   "points dropped: x, y or z not finite")
      .def_prop_ro("out_of_range", [](const FrameOutcome& o) { return o.info.out_of_range; },
                   "points dropped: beyond float32")
      .def_ro("points", &FrameOutcome::points, "finite points decoded")
      .def_ro("localized", &FrameOutcome::localized)
      .def_prop_ro("result",
                   [](const FrameOutcome& o) -> std::optional<LocalizationResult> {
                     if (!o.localized) return std::nullopt;
                     return o.result;
                   },
                   "the LocalizationResult (sensor frame), or None")
      .def_prop_ro("pose", [](const FrameOutcome& o) { return Eigen::Matrix4d(o.pose); }, "T_map_base")
      .def_prop_ro("xyzq", [](const FrameOutcome& o) { return Eigen::VectorXd(xyzq_of(o.pose)); },
                   "T_map_base as x y z qx qy qz qw")
      .def_prop_ro("covariance", [](const FrameOutcome& o) { return Matrix6d(o.covariance); },
                   "the pose's covariance, base frame, [x y z roll pitch yaw]")
      .def_ro("prediction_source", &FrameOutcome::prediction_source)
      .def_prop_ro("prediction_xyzq", [](const FrameOutcome& o) { return Eigen::VectorXd(xyzq_of(o.prediction)); })
      .def_prop_ro("prediction_covariance", [](const FrameOutcome& o) { return Matrix6d(o.prediction_covariance); })
      .def_prop_ro("aligned",
                   [](const FrameOutcome& o) -> nb::object {
                     if (o.aligned.empty()) return nb::none();
                     return nb::bytes(o.aligned.data(), o.aligned.size());
                   },
                   "points_aligned as a serialized sensor_msgs/msg/PointCloud2, or None")
      .def_prop_ro("pose_msg",
                   [](const FrameOutcome& o) -> nb::object {
                     if (o.pose_msg.empty()) return nb::none();
                     return nb::bytes(o.pose_msg.data(), o.pose_msg.size());
                   },
                   "ndt_pose as a serialized geometry_msgs/msg/PoseStamped, or None (no valid pose)")
      .def_prop_ro("pose_with_covariance_msg",
                   [](const FrameOutcome& o) -> nb::object {
                     if (o.pose_with_covariance_msg.empty()) return nb::none();
                     return nb::bytes(o.pose_with_covariance_msg.data(), o.pose_with_covariance_msg.size());
                   },
                   "ndt_pose_with_covariance as a serialized geometry_msgs/msg/PoseWithCovarianceStamped, or None")
      .def_ro("received_ns", &FrameOutcome::received_ns,
              "when submit() took the message (ns, the monotonic clock of time.monotonic_ns)")
      .def_ro("taken_ns", &FrameOutcome::taken_ns, "when next_frame() took it (ns, the same clock)")
      .def_ro("done_ns", &FrameOutcome::done_ns, "when its frame was done (ns, the same clock)")
      .def_prop_ro("trace_xyzq",
                   [](const FrameOutcome& o) {
                     Eigen::MatrixXd t(static_cast<Eigen::Index>(o.trace.size()), 7);
                     for (std::size_t i = 0; i < o.trace.size(); ++i) t.row(static_cast<Eigen::Index>(i)) = xyzq_of(o.trace[i]).transpose();
                     return t;
                   },
                   "the alignment's poses (base frame), one x y z qx qy qz qw row per iteration")
      .def_ro("map_swaps", &FrameOutcome::map_swaps)
      .def_ro("decode_ms", &FrameOutcome::decode_ms)
      .def_ro("preprocess_ms", &FrameOutcome::preprocess_ms)
      .def_ro("covariance_ms", &FrameOutcome::covariance_ms)
      .def_ro("encode_ms", &FrameOutcome::encode_ms)
      .def_ro("localize_ms", &FrameOutcome::localize_ms,
              "the Localizer's whole frame (alignments, checks, probes, covariance): with preprocess_ms, the library's "
              "time")
      .def_ro("call_ms", &FrameOutcome::call_ms, "the whole call (GIL released)");

  nb::class_<PyScanMatcher>(m, "ScanMatcher",
                            "The work of the ROS 2 node ndtcu_scan_matcher (ndtcu.ros2): `ndtcu localize`'s settings "
                            "and map, PointCloud2 messages in (newest first), poses in the base frame out.")
      .def(
          "__init__",
          [](PyScanMatcher* self, const std::vector<std::string>& args, const std::string& config,
             const std::string& map_path, const Pose6& sensor_to_base, const std::string& sensor_frame,
             const std::string& map_frame, const Matrix6d& fixed_covariance) {
            nb::gil_scoped_release release;
            new (self) PyScanMatcher(args, config, map_path, sensor_to_base, sensor_frame, map_frame, fixed_covariance);
          },
          "args"_a = std::vector<std::string>{}, "config"_a = "", "map_path"_a = "", "sensor_to_base"_a = Pose6::Zero(),
          "sensor_frame"_a = "", "map_frame"_a = "map", "fixed_covariance"_a = Matrix6d::Zero(),
          "`args`: options of `ndtcu localize` (--backend, --voxel, --init, ...; not those for files); `config`: "
          "Autoware's ndt_scan_matcher.param.yaml, read as --config; `map_path`: --map (a point cloud, or a folder "
          "of tiles, loaded about the first pose); `sensor_to_base`: the sensor's pose in the base frame [x y z "
          "roll pitch yaw]; `sensor_frame`: the frame_id scans must carry ('' = the first scan's); `map_frame`: the "
          "poses' frame; `fixed_covariance`: ndt_pose_with_covariance's covariance when the alignment has no "
          "estimate (Autoware's covariance.output_pose_covariance). Errors: ndtcu.Error naming the option, key or "
          "file.")
      .def_prop_ro("settings", [](const PyScanMatcher& s) { return s.matcher.settings().localizer; },
                   "the LocalizerSettings in use (a copy)")
      .def_prop_ro("execution", [](const PyScanMatcher& s) { return s.matcher.settings().execution; })
      .def_prop_ro("backend", [](const PyScanMatcher& s) { return std::string(to_string(s.matcher.backend())); })
      .def_prop_ro("config_path", [](const PyScanMatcher& s) { return path_out(s.matcher.config_path()); })
      .def_prop_ro("config_warnings", [](const PyScanMatcher& s) { return s.matcher.config_warnings(); },
                   "the parameter file's warnings (unknown keys, values of the wrong type), 'FILE: line N: KEY: what'")
      .def_prop_ro("config_not_used",
                   [](const PyScanMatcher& s) {
                     const auto& config = s.matcher.settings().config;
                     return config ? config->not_used : std::vector<std::string>{};
                   },
                   "Autoware keys of the file ndtcu has no equivalent for")
      .def_prop_ro("pose_timeout_s", [](const PyScanMatcher& s) { return s.matcher.pose_timeout_s(); },
                   "validation.initial_pose_timeout_sec: how far (s) an EKF pose may be from a scan's stamp")
      .def_prop_ro("sensor_to_base", [](const PyScanMatcher& s) { return Eigen::Matrix4d(s.matcher.base_sensor()); },
                   "T_base_sensor")
      .def_prop_ro("map_loaded", [](const PyScanMatcher& s) { return s.matcher.map_loaded(); })
      .def_prop_ro("map_info",
                   [](const PyScanMatcher& s) {
                     const loc::LocalizeMap& map = s.matcher.map();
                     nb::dict d;
                     d["path"] = path_out(s.matcher.options().map);
                     d["tiled"] = static_cast<bool>(map.streamer);
                     d["points"] = map.points;
                     d["voxels"] = map.voxel_count;
                     d["load_ms"] = map.load_ms;
                     d["build_ms"] = map.build_ms;
                     return d;
                   })
      .def_prop_ro("initialized",
                   [](PyScanMatcher& s) {
                     nb::gil_scoped_release release;
                     return s.matcher.initialized();
                   })
      .def_prop_ro("received", [](PyScanMatcher& s) { return s.slot.counts().first; },
                   "PointCloud2 messages submitted")
      .def_prop_ro("dropped", [](PyScanMatcher& s) { return s.slot.counts().second; },
                   "messages replaced by a newer one before a frame took them (newest wins)")
      .def(
          "add_prediction",
          [](PyScanMatcher& s, std::int64_t stamp_ns, const Vector7d& xyzq, const Matrix6d& covariance) {
            s.matcher.add_prediction(stamp_ns, xyzq, covariance);
          },
          "stamp_ns"_a, "xyzq"_a, "covariance"_a,
          "An ekf_pose_with_covariance pose (T_map_base as x y z qx qy qz qw, covariance [x y z roll pitch yaw]): "
          "the prediction of the scans near its stamp. ndtcu.Error for a pose or covariance that is not one, or a "
          "stamp not after the last.")
      .def(
          "add_regularization",
          [](PyScanMatcher& s, std::int64_t stamp_ns, const Vector7d& xyzq, const Matrix6d& covariance) {
            s.matcher.add_regularization(stamp_ns, xyzq, covariance);
          },
          "stamp_ns"_a, "xyzq"_a, "covariance"_a,
          "A regularization_pose_with_covariance pose: with ndt.regularization enabled, the prediction (and so the "
          "regularization's centre) of scans the EKF does not cover.")
      .def(
          "request_initial_pose",
          [](PyScanMatcher& s, const Vector7d& xyzq, const Matrix6d& covariance) {
            s.matcher.request_initial_pose(xyzq, covariance);
          },
          "xyzq"_a, "covariance"_a,
          "An initialpose (T_map_base): the next frame searches about it (see docs/ros2.md) and tracking restarts "
          "from what it finds.")
      .def(
          "submit",
          [](PyScanMatcher& s, nb::bytes raw) { return s.slot.put(std::move(raw)); },
          "raw"_a,
          "Hands a serialized sensor_msgs/msg/PointCloud2 (CDR, as a raw subscription gives it) to the next "
          "next_frame(), replacing one not taken yet (newest wins): True when it replaced one (a drop).")
      .def(
          "next_frame",
          [](PyScanMatcher& s, bool want_aligned, double timeout_s) -> std::optional<FrameOutcome> {
            nb::object raw;  // the message: released below with the GIL held
            std::optional<FrameOutcome> out;
            {
              nb::gil_scoped_release release;
              std::int64_t received_ns = 0;
              bool active = true;
              if (!s.slot.take(raw, received_ns, active, timeout_s)) return out;
              const std::int64_t taken_ns = steady_ns();
              out.emplace();
              if (active) {
                const std::string_view bytes(PyBytes_AS_STRING(raw.ptr()),
                                             static_cast<std::size_t>(PyBytes_GET_SIZE(raw.ptr())));
                *out = s.matcher.frame(bytes, want_aligned);
              } else {
                out->refused = "the node is not activated (trigger_node_srv)";
                out->refused_as = "not_activated";
              }
              out->received_ns = received_ns;
              out->taken_ns = taken_ns;
              out->done_ns = steady_ns();
            }
            return out;
          },
          "want_aligned"_a = false, "timeout_s"_a = 0.2,
          "Waits (GIL released) at most `timeout_s` for a submitted message and localizes it at once: a "
          "ScanMatcherFrame, or None when none came (or stop() was called). Never raises for a bad message: the frame "
          "says why it was refused. While deactivated (set_active), a message is taken and not localized "
          "(refused_as 'not_activated').")
      .def(
          "set_active", [](PyScanMatcher& s, bool active) { s.slot.set_active(active); }, "active"_a,
          "Activates or deactivates the node (trigger_node_srv): messages taken while deactivated are not localized.")
      .def("stop", [](PyScanMatcher& s) { s.slot.stop(); }, "Wakes next_frame(), which returns None from now on.");
}

}  // namespace ndtcu::python
