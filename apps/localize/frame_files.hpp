#pragma once
// `ndtcu localize`: the per-frame files (frames.csv and the trajectories), written as frames
// finish.
#include <ndtcu/localizer.hpp>
#include <ndtcu/output_file.hpp>
#include <ndtcu/scan_sequence.hpp>
#include <ndtcu/trajectory.hpp>

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace ndtcu::cli::localize {

// The files localize writes in its --out folder; an earlier run's go before the first frame.
inline const std::vector<std::string> kLocalizeOutputs = {"summary.json",       "frames.csv", "trajectory_tum.txt",
                                                   "trajectory_kitti.txt", "trajectory.png", "frames.png"};

// The names of frames.csv's last 21 columns, the upper triangle of the frame's 6x6 pose
// covariance row by row: cov_x_x,cov_x_y,...,cov_yaw_yaw (see frames_csv_row).
std::string covariance6_header();

// The row of frames.csv for one frame: `result` null for a skipped frame, `reference` the
// matched reference pose, `error_m` the frame's ATE.
std::string frames_csv_row(const PreparedScan& s, const LocalizationResult* result, const StampedPose* reference,
                           std::optional<double> error_m);

// The per-frame files (frames.csv and the trajectories), written as frames finish rather
// than kept for the end: memory stays flat over any number of frames. Each is written
// whole (ndtcu/output_file.hpp): its temporary file is flushed at least once a second
// (it can be watched), and commit() puts the three in place when the run ends or is
// stopped, before the summary; a run killed outright leaves none of them.
class FrameFiles {
 public:
  explicit FrameFiles(const std::filesystem::path& out)
      : frames_(open(out / "frames.csv")),
        tum_(open(out / "trajectory_tum.txt")),
        kitti_(open(out / "trajectory_kitti.txt")),
        last_flush_(std::chrono::steady_clock::now()) {
    frames_.write("frame,time,file,status,lost,recovered,skipped,points_read,points,iterations,attempts,"
                      "iterations_total,evaluations,tp,nvtl,converged,read_ms,preprocess_ms,align_ms,total_ms,x,y,z,"
                      "roll,pitch,yaw,pred_x,pred_y,pred_z,ref_x,ref_y,ref_z,error_m,cov_xx,cov_xy,cov_yy,stage,hypotheses,"
                      "screened,ambiguity_nvtl,ambiguous,weakest_ratio,weak_directions,degenerate,weak_x,weak_y,weak_z,"
                      "weak_roll,weak_pitch,weak_yaw,degenerate_directions,probe_nvtl_drop,decided_by,mahalanobis2,refined,refinement_m," +
                  covariance6_header() + ",matched_points,position_sigma_m,covariance_term,deskewed,deskew_motion,imu,deskew_passes\n");
  }

  void frame(const std::string& row) {
    frames_.write(row);
    flush_if_due();
  }

  // A localized frame's pose (lost frames are in frames.csv only, flagged).
  void pose(const StampedPose& p) {
    tum_.write(tum_line(p));
    kitti_.write(kitti_line(p));
  }

  // Puts the files in place; throws IoError for one that could not be written.
  void commit() {
    for (OutputFile* f : {&tum_, &kitti_, &frames_}) f->commit();
  }

 private:
  static OutputFile open(const std::filesystem::path& path) { return OutputFile(path.string()); }

  void flush_if_due() {
    const auto now = std::chrono::steady_clock::now();
    if (now - last_flush_ < std::chrono::seconds(1)) return;
    last_flush_ = now;
    for (OutputFile* f : {&frames_, &tum_, &kitti_}) f->flush();
  }

  OutputFile frames_, tum_, kitti_;
  std::chrono::steady_clock::time_point last_flush_;
};

}  // namespace ndtcu::cli::localize
