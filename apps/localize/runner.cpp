// `ndtcu localize`: reading ahead, the per-frame pipeline, and the run around it.
#include "localize/runner.hpp"

#include "localize/frame_files.hpp"
#include "localize/inputs.hpp"
#include "localize/report.hpp"
#include "output_folder.hpp"

#include <ndtcu/log.hpp>
#include <ndtcu/text.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <optional>

namespace ndtcu::cli::localize {

namespace {

namespace fs = std::filesystem;

using Prediction = std::pair<Eigen::Matrix4d, Eigen::Matrix<double, 6, 6>>;

// Whatever ends the run, no update may still be staging on the localizer when it goes.
struct WaitForUpdates {
  const TiledMapStreamer* streamer;
  ~WaitForUpdates() {
    if (streamer) streamer->wait_idle();
  }
};

// The frame loop: readers fill the queue while the aligner works on the current scan. Each
// frame is written out as it finishes; what stays is what the summary needs: a few
// numbers per frame and, when there is a reference to evaluate against, the poses.
class FrameLoop {
 public:
  FrameLoop(const LocalizeOptions& o, const LocalizerSettings& ls, LocalizeInputs& in, LocalizeMap& map,
            Localizer& localizer, FrameFiles& files, Progress& progress, FrameTally& tally)
      : o_(o), ls_(ls), in_(in), map_(map), localizer_(localizer), files_(files), progress_(progress), t_(tally),
        chain_pose_(in.initial),
        // The readers filter the scans they read (each GPU filter on a stream of its own), so
        // filtering overlaps the alignments. With --gpu-filter-in-line this thread filters each
        // scan just before aligning it instead: no filter kernels run during an alignment
        // (BALM on an H100, three runs each: alignment p95 1.30-1.44 ms in line, 1.35-1.45 ms
        // on the readers). With --deskew the scan is filtered in line too: its de-skew needs
        // the motion known only once the frame before is localized.
        filter_in_line_((localizer.preprocess_backend() == Backend::Cuda && o.gpu_filter_in_line) ||
                        ls.deskew != Deskew::Off) {}

  // Every scan in order, until the last or until `interrupt` notes a signal.
  void run(const InterruptWatch& interrupt) {
    ScanPrefetcher prefetcher(std::move(in_.scans), scan_reader(), reader_preprocess(), o_.readers, o_.queue);
    while (interrupt.received() == 0) {
      auto scan = prefetcher.next();
      if (!scan) break;
      const StampedPose* matched = reference_pose(scan->index);
      t_.judged += matched != nullptr;
      if (!scan->error.empty()) {
        skip(*scan, matched);
      } else {
        localize(*scan, matched);
      }
      t_.last_frame = scan->index;
      progress_.update(++t_.done, t_.lost, t_.skipped);
    }
  }

 private:
  // One frame: the map update, the prediction, the alignment with its checks and recovery,
  // then the records.
  void localize(PreparedScan& scan, const StampedPose* matched) {
    take_map_update();
    feed_imu(scan.entry.time);
    const std::optional<Prediction> predicted = predict(scan);
    LocalizationResult r = align(scan, predicted);
    if (predicted) ++t_.odometry_used;
    continue_chain(r, scan.entry.time);
    if (filter_in_line_) scan.preprocess_ms = r.preprocess_ms;
    r.points_in = scan.points_read;
    count(r, scan);
    std::optional<double> error_m;
    if (r.valid) error_m = record_pose(r, scan, matched);
    t_.within += matched && error_m && *error_m <= kSuccessRadius;
    if (error_m && *error_m > kWrongRadius) {
      ++t_.accepted_wrong;
      progress_.message(fmt::format("ndtcu: warning: frame {} ({}) was accepted {:.2f} m from its reference pose",
                                    scan.index, fs::path(scan.entry.path).filename().string(), *error_m));
    }
    files_.frame(frames_csv_row(scan, &r, matched, error_m));
  }

  // A scan that could not be read or filtered: counted and recorded, never aligned.
  void skip(const PreparedScan& scan, const StampedPose* matched) {
    ++t_.skipped;
    progress_.message(fmt::format("ndtcu: warning: frame {} skipped: {}", scan.index, scan.error));
    files_.frame(frames_csv_row(scan, nullptr, matched, std::nullopt));
  }

  // Reads scan k: a message of a rosbag's topic, or a file, with the per-point time
  // --point-time asks for.
  ScanPrefetcher::Reader scan_reader() const {
    ReadOptions ro;
    ro.read_intensity = false;  // NDT uses geometry only
    if (o_.point_time != "auto") parse_point_time(o_.point_time, ro);
    if (in_.bag) {
      return [ro, bag = in_.bag, bag_topic = in_.bag_topic](std::size_t k, const ScanEntry&) {
        return bag->read_point_cloud(bag_topic, k, ro);
      };
    }
    return [ro](std::size_t, const ScanEntry& entry) { return read_point_cloud(entry.path, ro); };
  }

  // The filter the readers run (none when it runs in line, before each alignment).
  ScanPrefetcher::Preprocess reader_preprocess() const {
    ScanPrefetcher::Preprocess on_reader;
    if (!filter_in_line_) on_reader = [&localizer = localizer_](const PointCloud& c) { return localizer.preprocess(c); };
    return on_reader;
  }

  // The reference pose matched to scan `index`, or null.
  const StampedPose* reference_pose(std::size_t index) const {
    const std::optional<std::size_t> match = in_.matches.empty() ? std::nullopt : in_.matches[index];
    return match ? &in_.reference[*match] : nullptr;
  }

  // A finished map update goes in between two frames. The frame waits for the running
  // one with --map-update-wait (the one asked for after the last frame), and whenever the
  // map in hand does not cover the tiles the frame's scan reaches: replayed faster than
  // the updates run, a scan would otherwise align on the part of its surroundings that is
  // loaded (on CUDA, a simulated 5 Hz drive with 30 m of tiles at 1,700 frames per second
  // accepted 9-17 of 150 frames 0.3-0.5 m off).
  void take_map_update() {
    if (!map_.streamer) return;
    const bool uncovered = !map_covers_next_scan();
    const bool wait = o_.map_update_wait || uncovered;
    const auto wait0 = std::chrono::steady_clock::now();
    if (uncovered && map_.streamer->busy()) ++t_.map_coverage_waits;
    if (auto next = map_.streamer->take(wait)) {
      t_.map_wait_ms.push_back(static_cast<float>(ms_since(wait0)));
      localizer_.update_map(std::move(next));
      ++t_.map_swaps;
    } else if (map_.streamer->take_published(wait)) {
      // The localizer takes the published version as this frame starts.
      t_.map_wait_ms.push_back(static_cast<float>(ms_since(wait0)));
      ++t_.map_swaps;
    }
  }

  // Whether the map in hand holds the tiles within the scan's reach of where the next scan
  // is expected: the last localized position moved on by the last step between localized
  // frames. The reach is max_range, but no more than the radius minus the update distance,
  // the most that updates on time guarantee (Autoware's default of 100 m for both the
  // radius and the range leaves a scan's farthest points beyond the tiles by design, and a
  // frame must not wait on every update for them). True before the first localized frame
  // (the map was loaded about the start).
  bool map_covers_next_scan() const {
    if (!last_xy_) return true;
    const Eigen::Vector2d next = before_last_xy_ ? Eigen::Vector2d(2.0 * *last_xy_ - *before_last_xy_) : *last_xy_;
    const double reach = std::min(ls_.max_range, std::max(0.0, o_.map_radius - o_.map_update_distance));
    return map_.streamer->covers(next, reach);
  }

  // The IMU samples up to a second past the scan's time (the longest sweep the per-point
  // time check lets through), as a stack would have them by the end of its sweep.
  void feed_imu(double time) {
    const std::vector<ImuSample>& imu = in_.imu;
    for (; next_imu_ < imu.size() && imu[next_imu_].time <= time + 1.0; ++next_imu_) localizer_.add_imu(imu[next_imu_]);
  }

  // The odometry's prediction from the previous frame, where it covers both times.
  std::optional<Prediction> predict(const PreparedScan& scan) {
    std::optional<Prediction> predicted;
    const auto& odometry = in_.odometry;
    if (odometry && have_chain_) predicted = odometry->predict(chain_pose_, chain_time_, chain_covariance_, scan.entry.time);
    if (odometry && have_chain_ && !predicted && ++t_.odometry_missing == 1) {
      progress_.message(fmt::format("ndtcu: warning: frame {} at time {:.6f}: {} does not cover it and the frame "
                                    "before; predicting at constant velocity where it does not (counted in "
                                    "summary.json, odometry.frames_outside)",
                                    scan.index, scan.entry.time, in_.odometry_source));
    }
    return predicted;
  }

  // The odometry's motion over the scan's sweep (its first to its last point time), for the
  // de-skew modes that take it (odometry, imu's translation, auto): none without odometry,
  // without per-point times, or where the odometry does not cover the sweep.
  std::optional<SweepMotionParts> sweep_motion(const PreparedScan& scan) const {
    const Deskew mode = ls_.deskew;
    const bool takes = mode == Deskew::Odometry || mode == Deskew::Imu || mode == Deskew::Auto;
    if (!in_.odometry || !takes || !filter_in_line_ || !scan.cloud.has_time()) return std::nullopt;
    double lo = 0.0, hi = 0.0;
    if (!time_span(scan.cloud.time.data(), scan.cloud.size(), lo, hi) || !(hi > lo)) return std::nullopt;
    return in_.odometry->sweep_motion(scan.entry.time, scan.entry.time + lo, scan.entry.time + hi);
  }

  // The localizer's frame: from the odometry's prediction when there is one, else its own.
  LocalizationResult align(const PreparedScan& scan, const std::optional<Prediction>& predicted) {
    const double time = scan.entry.time;
    if (const std::optional<SweepMotionParts> motion = sweep_motion(scan)) {
      ++t_.odometry_sweeps;
      t_.odometry_sweep_parts += motion->motion.size() > 1;
      return predicted ? localizer_.localize(scan.cloud, time, predicted->first, predicted->second, *motion)
                       : localizer_.localize(scan.cloud, time, *motion);
    }
    if (predicted) {
      return filter_in_line_ ? localizer_.localize(scan.cloud, time, predicted->first, predicted->second)
                             : localizer_.localize_preprocessed(scan.cloud, time, predicted->first, predicted->second);
    }
    return filter_in_line_ ? localizer_.localize(scan.cloud, time) : localizer_.localize_preprocessed(scan.cloud, time);
  }

  // The next frame's odometry prediction starts from this frame: its pose and
  // covariance when it has one (valid or degenerate), else its prediction's.
  void continue_chain(const LocalizationResult& r, double time) {
    if (!in_.odometry || !localizer_.initialized()) return;
    const bool has_pose = r.status != FrameStatus::Lost;
    chain_pose_ = has_pose ? r.pose : r.prediction;
    chain_covariance_ = has_pose ? r.covariance : r.prediction_covariance;
    chain_time_ = time;
    have_chain_ = true;
  }

  // The frame's status and numbers into the tally (a lost frame also as a warning).
  void count(const LocalizationResult& r, const PreparedScan& scan) {
    if (r.status == FrameStatus::Lost) {
      ++t_.lost;
      progress_.message(fmt::format("ndtcu: warning: frame {} ({}) lost after {} attempt{}: {}; not written to "
                                    "the trajectory",
                                    scan.index, fs::path(scan.entry.path).filename().string(), r.attempts,
                                    r.attempts == 1 ? "" : "s", lost_reason(r, ls_)));
      if (ls_.global_search_interval == 0 && r.decided_by != FrameCheck::TooFewPoints && !global_hinted_) {
        global_hinted_ = true;
        progress_.message(
            "ndtcu: note: lost frames are searched for within --max-search-radius only; "
            "--global-search-interval N also searches the whole map on the first lost frame and every N-th after it "
            "(tens of milliseconds a search on a GPU; on a CPU, seconds to minutes on a large map)");
      }
    } else if (r.status == FrameStatus::Recovered) {
      ++t_.recovered;
    } else if (r.status == FrameStatus::Degenerate) {
      ++t_.degenerate;
    } else if (r.status == FrameStatus::Uncertain) {
      ++t_.uncertain;
    }
    t_.refined += r.refined ? 1 : 0;
    t_.deskewed += r.deskewed ? 1 : 0;
    t_.latency.push_back(static_cast<float>(scan.read_ms + scan.preprocess_ms + r.align_ms));
    t_.align_ms.push_back(static_cast<float>(r.align_ms));
    t_.iterations.push_back(static_cast<float>(r.alignment.iterations));
    t_.points.push_back(static_cast<float>(r.points_used));
  }

  // A valid frame's pose into the trajectory (lost frames are in frames.csv, flagged), the
  // map's next centre and the evaluation; returns its error against `matched`, if any.
  std::optional<double> record_pose(const LocalizationResult& r, const PreparedScan& scan, const StampedPose* matched) {
    const AlignResult& a = r.alignment;
    if (a.covariance_valid) {  // the frame's calibrated covariance
      t_.sigma_x.push_back(static_cast<float>(std::sqrt(std::max(0.0, r.covariance(0, 0)))));
      t_.sigma_y.push_back(static_cast<float>(std::sqrt(std::max(0.0, r.covariance(1, 1)))));
      t_.covariance_ms.push_back(static_cast<float>(a.timings.covariance_ms));
    }
    StampedPose p;
    p.time = scan.entry.time;
    p.pose = Eigen::Isometry3d(r.pose);
    files_.pose(p);
    ++t_.localized;
    before_last_xy_ = last_xy_;
    last_xy_ = r.pose.topRightCorner<2, 1>();
    if (map_.streamer) map_.streamer->request(*last_xy_);
    std::optional<double> error_m;
    if (in_.reference.empty()) return error_m;
    if (matched) {
      // The frame's error against the reference pose it was matched to: the same
      // pair the ATE is computed over.
      error_m = (p.pose.translation() - matched->pose.translation()).norm();
      t_.estimate_pairs.emplace_back(t_.estimate.size(), static_cast<std::size_t>(matched - in_.reference.data()));
    }
    t_.estimate.push_back(p);
    return error_m;
  }

  const LocalizeOptions& o_;
  const LocalizerSettings& ls_;
  LocalizeInputs& in_;
  LocalizeMap& map_;
  Localizer& localizer_;
  FrameFiles& files_;
  Progress& progress_;
  FrameTally& t_;
  // The odometry chain: the previous frame's pose, time and covariance (the initial pose,
  // with its time unknown, starts no chain: the first frame predicts as without odometry).
  Eigen::Matrix4d chain_pose_;
  Eigen::Matrix<double, 6, 6> chain_covariance_ = Eigen::Matrix<double, 6, 6>::Zero();
  double chain_time_ = 0.0;
  bool have_chain_ = false;
  bool global_hinted_ = false;  // the note on --global-search-interval given (once a run)
  std::size_t next_imu_ = 0;    // the first IMU sample not yet given to the localizer
  // The last two localized frames' x-y positions (map_covers_next_scan).
  std::optional<Eigen::Vector2d> last_xy_, before_last_xy_;
  const bool filter_in_line_;
};

// The tally of a run of `frame_count` frames, its per-frame numbers reserved, not grown:
// no copy at each doubling (pages never written cost nothing).
void reserve_tally(FrameTally& t, std::size_t frame_count, bool with_reference) {
  t.frame_count = frame_count;
  if (with_reference) t.estimate.reserve(frame_count);
  for (Samples* v : {&t.latency, &t.align_ms, &t.iterations, &t.points, &t.sigma_x, &t.sigma_y, &t.covariance_ms}) {
    v->reserve(frame_count);
  }
}

}  // namespace

int run_localize(LocalizeOptions& o, const ConfigurableOptions& given, const GlobalOptions& global) {
  const auto run_start = std::chrono::steady_clock::now();
  const LocalizeSettings settings = localize_settings(o, given);
  const LocalizerSettings& ls = settings.localizer;
  LocalizeInputs in = read_inputs(o, settings.init_time_difference);
  // The output folder is this run's alone, and must take files, before hours of scans
  // are spent on it.
  const OutputFolder folder(o.out, "ndtcu localize");
  LocalizeMap map;
  load_map(map, o, ls.align, settings.execution, in.initial);
  Localizer localizer(ls, settings.execution);
  const WaitForUpdates wait_for_updates{map.streamer.get()};
  attach_map(map, localizer, o, ls.align);
  if (in.global) {
    if (o.init_radius > 0.0) throw Error("--init global searches the whole map; --init-radius is for a rough --init pose");
    localizer.set_initial_global();
  } else if (o.init_radius > 0.0) {
    localizer.set_initial_region(in.initial, o.init_radius, o.init_yaw_range);
  } else {
    localizer.set_initial_pose(in.initial);
  }

  // From here the folder holds this run's results or none: an earlier run's go before
  // the first frame, this run's are put in place when it ends or is stopped.
  folder.remove_earlier(kLocalizeOutputs);
  FrameFiles files{fs::path(o.out)};
  // SIGINT and SIGTERM stop the run between two frames: what is finished is written and
  // the exit code says which signal (130, 143). Before this point nothing was written.
  const InterruptWatch interrupt;
  FrameTally tally;
  reserve_tally(tally, in.scans.size(), !in.reference.empty());
  Progress progress(tally.frame_count, log_level() <= LogLevel::Info);
  const auto loop_start = std::chrono::steady_clock::now();
  FrameLoop(o, ls, in, map, localizer, files, progress, tally).run(interrupt);
  tally.loop_s = ms_since(loop_start) / 1000.0;
  progress.finish();
  // IMU samples out of order, and frames whose sweep they did not cover: said once, counted.
  const ImuStats imu = localizer.imu_stats();
  if (!in.imu.empty() && imu.out_of_order > 0) {
    progress.message(fmt::format("ndtcu: warning: {}: {} of {} IMU samples were not later than the sample before "
                                 "them and were dropped (summary.json imu.out_of_order)",
                                 in.imu_source, imu.out_of_order, in.imu.size()));
  }
  if (imu.frames_gap + imu.frames_missing > 0) {
    progress.message(fmt::format("ndtcu: warning: {} frames' sweeps were not covered by the IMU samples of {} ({} with "
                                 "a stretch longer than --imu-max-gap {} s without a sample, {} with none near them): "
                                 "de-skewed with constant velocity instead (frames.csv imu: gap, missing)",
                                 imu.frames_gap + imu.frames_missing, in.imu_source, imu.frames_gap,
                                 number_text(ls.imu_max_gap), imu.frames_missing));
  }
  if (localizer.frame_times_disagree()) {
    progress.message("ndtcu: warning: the scans' times do not match their points' times (a sweep's own speed against "
                     "the speed between frames, warned above): every sweep after that was de-skewed with its own "
                     "motion; give the scans their times (--period, or a list file with times) "
                     "(summary.json frame_times_disagree)");
  }
  files.commit();
  // Stopped by a signal with frames left (one that comes after the last frame stops
  // nothing: the run is complete).
  tally.stopped_by = tally.done < tally.frame_count ? interrupt.received() : 0;
  if (tally.stopped_by != 0) {
    progress.message(fmt::format("ndtcu: {} received: localize stopped after {} of {} frames{}; the results of "
                                 "those are in {}",
                                 InterruptWatch::name(tally.stopped_by), tally.done, tally.frame_count,
                                 tally.last_frame ? fmt::format(" (the last, frame {})", *tally.last_frame)
                                                  : std::string(),
                                 o.out));
  }
  return report_run({o, settings, in, map, localizer, tally, folder, interrupt, run_start}, progress, global);
}

}  // namespace ndtcu::cli::localize
