// `ndtcu localize`: the scans, the reference, the odometry, the first pose and the map.
#include "localize/inputs.hpp"

#include <ndtcu/imu.hpp>

#include <ndtcu/error.hpp>
#include <ndtcu/filters.hpp>
#include <ndtcu/log.hpp>
#include <ndtcu/text.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iostream>

namespace ndtcu::cli::localize {

namespace {

// The pose of `trajectory` for the first scan: index 0 when it has one pose per scan,
// else the pose nearest the scan's time.
// (The list is not copied for this: a list of a million scans is most of the run's memory.)
Eigen::Matrix4d first_scan_pose(const std::string& path, const Trajectory& trajectory,
                                const std::vector<ScanEntry>& scans, double max_time_difference) {
  if (trajectory.size() == scans.size()) return trajectory.front().pose.matrix();
  // By time, as reference_matches() matches a scan when the sizes differ (a list of one
  // scan and a trajectory of one pose would be matched by index there).
  const std::vector<ScanEntry> first{scans.front()};
  std::optional<std::size_t> match;
  if (trajectory.size() > 1) {
    match = reference_matches(first, trajectory, max_time_difference).front();
  } else if (std::abs(trajectory.front().time - first.front().time) <= max_time_difference) {
    match = 0;
  }
  if (!match) {
    throw Error(fmt::format("--init-from {}: no pose within {} s of the first scan's time {:.6f} (and {} poses for "
                            "{} scans, so not matched by index)",
                            path, max_time_difference, scans.front().time, trajectory.size(), scans.size()));
  }
  return trajectory[*match].pose.matrix();
}

// The scans of --scans: a folder, a list, or the PointCloud2 messages of a rosbag.
void list_scan_entries(LocalizeInputs& in, const LocalizeOptions& o) {
  if (rosbag::is_bag_path(o.scans)) {
    in.bag = std::make_shared<const rosbag::BagReader>(o.scans);
    in.bag_topic = in.bag->point_cloud_topic(o.topic).name;
    const auto& messages = in.bag->messages(in.bag_topic);
    if (messages.empty()) throw Error(o.scans + ": topic " + in.bag_topic + " holds no message");
    in.scans.reserve(messages.size());
    for (const auto& m : messages) in.scans.push_back({fmt::format("{}#{}", o.scans, m.index), m.time()});
    // Record times as they are; two messages recorded in one microsecond would give a
    // trajectory with two poses at one stamp, which no reader takes back as a reference.
    check_scan_times(
        o.scans, in.scans, [&](std::size_t k) { return fmt::format("message {} on {}", messages[k].index, in.bag_topic); },
        "localize the messages of a bag whose record times increase, or give the scans with their times in a scan list");
  } else {
    if (!o.topic.empty()) throw Error("--topic " + o.topic + ": " + o.scans + " is not a rosbag (--topic reads a bag)");
    in.scans = list_scans(o.scans, o.period);
  }
}

// The median gap between consecutive times of `times` (0 with fewer than two).
double median_spacing(std::vector<double> gaps) {
  if (gaps.empty()) return 0.0;
  std::nth_element(gaps.begin(), gaps.begin() + static_cast<std::ptrdiff_t>(gaps.size() / 2), gaps.end());
  return gaps[gaps.size() / 2];
}

// Matched by index, the scans and the reference should be as far apart in time: scans named
// by number take `--period` (0.1 s), and a 1 Hz sequence so read moves ten times as fast to
// the motion model and the de-skew while its errors still look right. Warns when the median
// spacings differ by more than half.
void check_spacing(const LocalizeInputs& in, const LocalizeOptions& o) {
  if (in.matching != "index" || in.scans.size() < 3) return;
  std::vector<double> scan_gaps, reference_gaps;
  for (std::size_t k = 1; k < in.scans.size(); ++k) {
    scan_gaps.push_back(in.scans[k].time - in.scans[k - 1].time);
    reference_gaps.push_back(in.reference[k].time - in.reference[k - 1].time);
  }
  const double scans = median_spacing(scan_gaps), reference = median_spacing(reference_gaps);
  if (!(scans > 0.0) || !(reference > 0.0) || (scans <= 1.5 * reference && reference <= 1.5 * scans)) return;
  if (log_level() <= LogLevel::Warn) {
    std::cerr << fmt::format("ndtcu: warning: the scans are a median {:g} s apart (their times{}), the poses of "
                             "--reference {} {:g} s (matched one to one, by index); the motion model and the "
                             "de-skew take the scans' times: give them their own{}\n",
                             scans, in.bag ? ": the bag's record times" : ": a list's, or their names' at --period",
                             printable(o.reference), reference,
                             in.bag ? "" : fmt::format(" (--period {:g}, or a list file with times)", reference));
  }
}

// The reference poses in time order, matched to the scans (by index when there is one
// pose per scan, else by time). The scans keep their own times (a bag's record times, a
// list's, their names'): the trajectory and --odometry stay in the scans' clock. (They
// once took the reference's stamps, which dropped odometry in the scans' clock.)
void match_reference(LocalizeInputs& in, const LocalizeOptions& o) {
  const TrajectoryFormat ref_format = trajectory_format_from_string(o.reference_format);
  if (!o.reference.empty()) {
    in.reference = read_trajectory(o.reference, ref_format, o.period);
    // In time order, each stamp once (two poses at one stamp are an error): the matching
    // below and every error computed from it assume it.
    in.reference_check = sort_reference(in.reference, o.reference);
    if (in.reference_check.out_of_order > 0 && log_level() <= LogLevel::Warn) {
      std::cerr << fmt::format("ndtcu: warning: --reference {}: {} pose{} out of time order; sorted by time before "
                               "matching (counted in summary.json, reference.out_of_order)\n",
                               printable(o.reference), in.reference_check.out_of_order,
                               in.reference_check.out_of_order == 1 ? "" : "s");
    }
    in.matching = in.reference.size() == in.scans.size() ? "index" : "time";
    check_spacing(in, o);
    in.matches = reference_matches(in.scans, in.reference, o.max_time_difference);
    for (const auto& m : in.matches) in.unmatched_frames += !m.has_value();
  }
}

// The odometry: a TUM file, or a nav_msgs/Odometry topic of the scans' bag (its poses at
// the bag's record times, the scans' clock).
void read_odometry(LocalizeInputs& in, const LocalizeOptions& o) {
  Trajectory odometry_poses;
  if (!o.odometry.empty()) {
    in.odometry_source = o.odometry;
    odometry_poses = read_trajectory(o.odometry, TrajectoryFormat::Tum);
  } else if (!o.odometry_topic.empty()) {
    if (!in.bag) {
      throw Error("--odometry-topic " + o.odometry_topic + ": " + o.scans +
                  " is not a rosbag (--odometry-topic reads the scans' bag; give a TUM file with --odometry)");
    }
    const rosbag::TopicInfo& topic = in.bag->topic(o.odometry_topic);
    if (!rosbag::is_odometry_type(topic.type)) {
      throw Error("--odometry-topic " + o.odometry_topic + ": " + o.scans + ": the topic holds " +
                  (topic.type.empty() ? "messages of no declared type" : topic.type) + ", not nav_msgs/Odometry");
    }
    in.odometry_source = o.scans + " topic " + o.odometry_topic;
    const auto& messages = in.bag->messages(o.odometry_topic);
    odometry_poses.reserve(messages.size());
    for (std::size_t k = 0; k < messages.size(); ++k) {
      const rosbag::OdometryMessage m = in.bag->read_odometry(o.odometry_topic, k);
      odometry_poses.push_back({messages[k].time(), Eigen::Isometry3d(m.pose)});
    }
  }
  if (!in.odometry_source.empty()) {
    if (odometry_poses.size() < 2) {
      throw IoError(in.odometry_source, fmt::format("odometry needs at least two poses, found {}", odometry_poses.size()));
    }
    for (std::size_t i = 1; i < odometry_poses.size(); ++i) {
      if (!(odometry_poses[i].time > odometry_poses[i - 1].time)) {
        throw IoError(in.odometry_source,
                      fmt::format("pose {} at time {} does not come after pose {} at {} (odometry must be in time "
                                  "order, without repeated stamps)",
                                  i + 1, odometry_poses[i].time, i, odometry_poses[i - 1].time));
      }
    }
    in.odometry.emplace(std::move(odometry_poses), o.odometry_noise);
  }
}

// The first scan's pose: --init, else --init-from's pose for its time, else the identity.
void find_initial_pose(LocalizeInputs& in, const LocalizeOptions& o, double init_time_difference) {
  if (o.init.size() == 1 && o.init[0] == "global") {
    in.initial_source = "--init global";
    in.global = true;
  } else if (!o.init.empty()) {
    if (o.init.size() != 6) {
      throw Error(fmt::format("--init: {} values; give x,y,z,roll,pitch,yaw (m, rad) or `global`", o.init.size()));
    }
    Pose6 p;
    for (int i = 0; i < 6; ++i) p(i) = std::strtod(o.init[static_cast<std::size_t>(i)].c_str(), nullptr);
    if (!p.allFinite()) throw Error("--init: every value must be finite");
    in.initial = pose_to_matrix(p);
    in.initial_source = "--init";
  } else if (!o.init_from.empty()) {
    const bool is_reference = o.init_from == o.reference && !in.reference.empty();
    Trajectory t = is_reference ? in.reference : read_trajectory(o.init_from, TrajectoryFormat::Auto, o.period);
    if (t.empty()) throw IoError(o.init_from, "holds no pose");
    // In time order, each stamp once, as the reference is: the first scan's pose is
    // picked by time, or as the earliest when there is one pose per scan. Unsorted, a
    // file of one pose per scan gave its first line's pose, and a shorter one found no
    // pose for a stamp it held.
    if (!is_reference) {
      const ReferenceCheck init_check = sort_reference(t, "--init-from " + o.init_from);
      if (init_check.out_of_order > 0 && log_level() <= LogLevel::Warn) {
        std::cerr << fmt::format("ndtcu: warning: --init-from {}: {} pose{} out of time order; sorted by time before "
                                 "taking the first scan's pose\n",
                                 o.init_from, init_check.out_of_order, init_check.out_of_order == 1 ? "" : "s");
      }
    }
    in.initial = first_scan_pose(o.init_from, t, in.scans, init_time_difference);
    in.initial_source = "--init-from";
  }
}

}  // namespace

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

std::optional<std::pair<Eigen::Matrix4d, Eigen::Matrix<double, 6, 6>>> OdometryPredictor::predict(
    const Eigen::Matrix4d& pose, double last_time, const Eigen::Matrix<double, 6, 6>& cov, double time) const {
  const auto from = interpolate_pose(odometry_, last_time), to = interpolate_pose(odometry_, time);
  if (!from || !to) return std::nullopt;
  const Eigen::Isometry3d motion = from->inverse() * *to;
  const double dt = std::abs(time - last_time);
  const double metres = motion.translation().norm();
  const double radians = Eigen::AngleAxisd(motion.rotation()).angle();
  const double st = noise_[0] * metres + noise_[1] * dt, sr = noise_[2] * radians + noise_[3] * dt;
  Eigen::Matrix<double, 6, 6> c = cov;
  c.diagonal() += (Eigen::Matrix<double, 6, 1>() << st * st, st * st, st * st, sr * sr, sr * sr, sr * sr).finished();
  return std::make_pair(Eigen::Matrix4d(pose * motion.matrix()), c);
}

std::optional<SweepMotionParts> OdometryPredictor::sweep_motion(double time, double begin, double end) const {
  return odometry_sweep_motion(odometry_, time, begin, end);
}

// The IMU samples: a CSV file, or a sensor_msgs/Imu topic of the scans' bag (each at the
// bag's record time, the clock of its scans).
void read_imu(LocalizeInputs& in, const LocalizeOptions& o) {
  if (!o.imu.empty()) {
    in.imu_source = o.imu;
    in.imu = read_imu_csv(o.imu);
  } else if (!o.imu_topic.empty()) {
    if (!in.bag) {
      throw Error("--imu-topic " + o.imu_topic + ": " + o.scans +
                  " is not a rosbag (--imu-topic reads the scans' bag; give a CSV file with --imu)");
    }
    const rosbag::TopicInfo& topic = in.bag->topic(o.imu_topic);
    if (!rosbag::is_imu_type(topic.type)) {
      throw Error("--imu-topic " + o.imu_topic + ": " + o.scans + ": the topic holds " +
                  (topic.type.empty() ? "messages of no declared type" : topic.type) + ", not sensor_msgs/Imu");
    }
    in.imu_source = o.scans + " topic " + o.imu_topic;
    const auto& messages = in.bag->messages(o.imu_topic);
    in.imu.reserve(messages.size());
    for (std::size_t k = 0; k < messages.size(); ++k) {
      ImuSample s = in.bag->read_imu(o.imu_topic, k).sample;
      s.time = messages[k].time();
      in.imu.push_back(s);
    }
  } else {
    return;
  }
  if (in.imu.empty()) throw IoError(in.imu_source, "holds no IMU sample");
}

LocalizeInputs read_inputs(const LocalizeOptions& o, double init_time_difference) {
  LocalizeInputs in;
  list_scan_entries(in, o);
  match_reference(in, o);
  read_odometry(in, o);
  read_imu(in, o);
  find_initial_pose(in, o, init_time_difference);
  return in;
}

void load_map(LocalizeMap& m, const LocalizeOptions& o, const AlignSettings& s, const ExecutionOptions& execution,
              const Eigen::Matrix4d& initial) {
  const auto t0 = std::chrono::steady_clock::now();
  if (is_tiled_map(o.map)) {
    TiledMapStreamOptions so;
    so.radius = o.map_radius;
    so.update_distance = o.map_update_distance;
    so.map_voxel = o.map_voxel;
    so.memory_budget = static_cast<std::size_t>(o.map_memory_mb * 1e6);
    so.threads = execution.threads;
    // Where the tiles are voxelized on the GPU (a CUDA localizer), each update publishes
    // them to the tiled map's device twin, which the localizer follows: only the voxels
    // that changed go up, the lookup is rebuilt on the device, and no host map is joined.
    // Otherwise each update's joined map is uploaded to the GPU on the worker (a no-op on
    // the CPU backend), so the swap between two frames costs no upload.
    so.publish = tiled_map_on_device(voxel_map_options(s, execution));
    so.on_map = [&m](const std::shared_ptr<const VoxelMap>& next) {
      if (m.localizer_slot) m.localizer_slot->stage_map(next);
    };
    m.streamer = std::make_unique<TiledMapStreamer>(o.map, voxel_map_options(s, execution), so, read_options_for_origin(o.origin));
    try {
      m.voxels = m.streamer->load(initial.topRightCorner<2, 1>());
    } catch (const Error& e) {
      throw Error(fmt::format("{} (--map-radius around the first pose)", e.what()));
    }
    const TiledMapStreamStats ts = m.streamer->stats();
    m.load_ms = ts.read_ms;
    m.build_ms = ts.join_ms;
    m.points_read = m.points = m.streamer->tiled_map()->stats().points;
  } else {
    m.map = read_point_cloud(o.map, read_options_for_origin(o.origin));
    m.points_read = m.map.size();
    if (o.map_voxel > 0) m.map = voxel_downsample(m.map, o.map_voxel);
    m.points = m.map.size();
    m.load_ms = ms_since(t0);
  }
}

void attach_map(LocalizeMap& m, Localizer& localizer, const LocalizeOptions& o, const AlignSettings& s) {
  m.localizer_slot = &localizer;
  if (m.streamer && !m.voxels) {
    localizer.set_map(m.streamer->tiled_map());  // published: followed
  } else if (m.voxels) {
    // Staged first: the staging buffers (pinned host memory above all, whose allocation
    // holds the driver's locks) are allocated now, not during a frame's alignment.
    if (m.streamer) localizer.stage_map(m.voxels);
    localizer.set_map(m.voxels);
  } else {
    const auto t0 = std::chrono::steady_clock::now();
    localizer.set_map(m.map);
    m.build_ms = ms_since(t0);
    m.voxels = localizer.aligner().target();
    m.map = PointCloud{};  // the voxels are what the run needs
  }
  m.voxel_count = m.voxels ? m.voxels->size() : m.streamer->stats().voxels;
  if (m.voxel_count == 0) throw Error(o.map + ": the map has no usable voxel at resolution " + fmt::format("{}", s.resolution));
}

}  // namespace ndtcu::cli::localize
