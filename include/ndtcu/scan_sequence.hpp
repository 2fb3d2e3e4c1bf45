#pragma once
/// \file
/// A sequence of scan files: listing them (a folder or a list file), giving them time
/// stamps, matching them to reference poses, and reading them ahead on host threads.
///
/// Time stamps. A list-file line `path time` gives the time (s). Otherwise the file name
/// does: a stem of up to 9 digits (`000042.bin`) is a frame number n, at n * period; a
/// time stamp of 10 digits is seconds, 13 milliseconds, 16 microseconds, 19 nanoseconds
/// (`1630577758.pcd`, `1630577758569.pcd`, ...), with or without decimals
/// (`1630577758.569490.pcd`; up to 10 digits before a point are seconds); any other number
/// of digits is refused as ambiguous; any other name is its position k in the sequence, at
/// k * period (period 0.1 s: KITTI's and most spinning LiDARs' 10 Hz), and so is a frame
/// number in a sequence where a scan without a time has a name of no number. The times must
/// be finite, at most 1e10 s, and each after the one before by at least a microsecond (what
/// a TUM line keeps): anything else is an IoError naming the file, the line and the value.
///
/// Matching to reference poses. When the reference has exactly as many poses as there are
/// scans, scan k is reference pose k. Otherwise scans and poses are matched by time (the
/// nearest pose within a tolerance). The scans keep their own times (reference_matches());
/// match_to_reference() also gives index-matched scans their poses' times.

#include <ndtcu/point_cloud.hpp>
#include <ndtcu/trajectory.hpp>

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ndtcu {

/// One scan of a sequence.
struct ScanEntry {
  std::string path;  ///< the file (.pcd, .ply, .bin)
  double time = 0.0;  ///< time stamp (s), see the file comment for where it comes from
};

/// Lists the scans of `folder_or_list`: every .pcd, .ply and .bin file of a folder (not
/// recursive), ordered by name (names that are all numbers by value, so 9 comes before 10),
/// or the lines of a text file (`path [time]`; '#' comments and blank lines skipped;
/// relative paths are relative to the list file's folder), in the file's order. Throws
/// IoError when the path does not exist or cannot be read, or a time is refused (see the
/// file comment), Error when it lists no scan.
std::vector<ScanEntry> list_scans(const std::string& folder_or_list, double period = 0.1);

/// Checks the times of a sequence (`source`: the folder, list or bag): finite, at most
/// 1e10 s from 0, and each after the one before by at least what a TUM line keeps (six
/// decimals), so that a run's trajectory reads back as a reference. Throws IoError naming
/// `source`, the scan (`where(k)` names scan k) and the value, followed by `remedy` (how to
/// give times). list_scans() calls it.
void check_scan_times(const std::string& source, const std::vector<ScanEntry>& scans,
                      const std::function<std::string(std::size_t)>& where, const std::string& remedy);

/// Matches scans to reference poses (see the file comment); element k is the reference
/// index of scan k, or nullopt. The scans keep their times: a run's trajectory and its
/// odometry stay in the scans' clock (what `ndtcu localize --reference` does).
std::vector<std::optional<std::size_t>> reference_matches(const std::vector<ScanEntry>& scans,
                                                          const Trajectory& reference,
                                                          double max_time_difference = 0.01);

/// reference_matches(), and with index matching each matched scan's time set to its pose's
/// time, so that later time association (ATE, RPE) pairs them exactly: for scans whose
/// times are only their positions in the sequence, put in the reference's clock.
std::vector<std::optional<std::size_t>> match_to_reference(std::vector<ScanEntry>& scans,
                                                           const Trajectory& reference,
                                                           double max_time_difference = 0.01);

/// A scan read and preprocessed ahead of its turn.
struct PreparedScan {
  std::size_t index = 0;        ///< position in the sequence
  ScanEntry entry;              ///< the file and its time
  PointCloud cloud;             ///< the preprocessed points
  std::size_t points_read = 0;  ///< points in the file (finite ones)
  double read_ms = 0.0;         ///< time to read the file
  double preprocess_ms = 0.0;   ///< time of the preprocessing function
  /// Non-empty when the file could not be read or preprocessed: the reason (the scan is
  /// skipped, `cloud` is empty).
  std::string error;
};

/// Reads and preprocesses the scans of a sequence on host threads, ahead of the consumer,
/// into a bounded queue, and hands them out in sequence order. Reading thus overlaps with
/// whatever the consumer does (aligning the previous scan), so file reading does not set
/// the frame rate while it is faster than the alignment.
class ScanPrefetcher {
 public:
  /// The preprocessing applied to each scan after reading (e.g. Localizer::preprocess).
  using Preprocess = std::function<PointCloud(const PointCloud&)>;
  /// Reads scan `index` of the sequence (e.g. a message of a rosbag); called on the reader
  /// threads, so it must be thread-safe. An exception skips the scan with its message.
  using Reader = std::function<PointCloud(std::size_t index, const ScanEntry& entry)>;
  /// Starts `threads` (at least 1) reader threads that keep at most `capacity` (at least 1)
  /// scans ready or in progress ahead of the consumer. Throws Error for 0 threads or capacity.
  ScanPrefetcher(std::vector<ScanEntry> scans, Preprocess preprocess, int threads = 2, std::size_t capacity = 4);
  /// As above, with scans read by `reader` instead of read_point_cloud(entry.path) (null:
  /// read_point_cloud). No defaults: a call of the constructor above with a null
  /// preprocessing stays unambiguous.
  ScanPrefetcher(std::vector<ScanEntry> scans, Reader reader, Preprocess preprocess, int threads,
                 std::size_t capacity);
  /// Stops the readers (work in progress finishes) and joins them.
  ~ScanPrefetcher();
  /// Not copyable: it owns running threads.
  ScanPrefetcher(const ScanPrefetcher&) = delete;
  /// Not copyable: it owns running threads.
  ScanPrefetcher& operator=(const ScanPrefetcher&) = delete;

  /// The next scan in sequence order (waiting for it), or nullopt after the last. A scan
  /// that failed comes back with `error` set rather than throwing.
  std::optional<PreparedScan> next();
  /// Number of scans in the sequence.
  std::size_t size() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ndtcu
