#pragma once
/// \file
/// Reading and writing point-cloud files: PCD (ascii, binary, binary_compressed), PLY
/// (ascii, binary little/big endian) and KITTI `.bin`. ndtcu reads files itself: no PCL.
///
/// Every failure throws ndtcu::IoError naming the file and what is wrong. Parsers never
/// allocate more than the file's size can justify, so a header claiming 10^12 points is
/// an error, not an allocation.

#include <ndtcu/error.hpp>
#include <ndtcu/point_cloud.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ndtcu {

/// File formats ndtcu reads and writes.
enum class FileFormat { Pcd, Ply, KittiBin };

/// PCD body encodings.
enum class PcdEncoding { Ascii, Binary, BinaryCompressed };

/// How the origin of a loaded cloud is chosen (see PointCloud::origin).
enum class OriginPolicy {
  /// From the points themselves, whatever their order: the per-axis median of the finite
  /// points (the lower median for an even count), rounded to whole metres, when its
  /// magnitude on some axis exceeds ReadOptions::auto_origin_threshold; zero otherwise. A
  /// median ignores up to half the points, so a few stray points (a first point at
  /// (0, 0, 0) in a UTM map, one at 1e300) do not move it.
  Auto,
  /// Always zero: coordinates are stored as they are (precision is lost far from 0).
  Zero,
  /// ReadOptions::origin is subtracted from every point (e.g. a map's UTM offset).
  Fixed,
};

/// Unit of a per-point time field. `Auto` detects it from the field's type and values
/// (docs/formats.md, "Per-point time").
enum class TimeUnit { Auto, Seconds, Milliseconds, Microseconds, Nanoseconds };

/// The widest span (s) of per-point times a scan may have, and how far (s) relative times
/// may lie from the scan's stamp: a spinning LiDAR sweeps in 0.05-0.2 s (5-20 Hz), a Livox
/// integrates 0.1 s, so a second is beyond any sweep. Times outside it are reported and
/// dropped.
inline constexpr double kMaxPointTimeSpan = 1.0;

/// Options for reading a point cloud.
struct ReadOptions {
  OriginPolicy origin_policy = OriginPolicy::Auto;  ///< how the origin is chosen
  Eigen::Vector3d origin = Eigen::Vector3d::Zero();  ///< used with OriginPolicy::Fixed
  /// Magnitude (m) of the points' median beyond which OriginPolicy::Auto moves the origin.
  /// float32 resolves about 1 mm at 1e4 m, so beyond it millimetres would be lost.
  double auto_origin_threshold = 1.0e4;
  bool read_intensity = true;  ///< read an intensity field when the file has one
  /// Read a per-point time field when the file has one (PointCloud::time).
  bool read_time = true;
  /// The time field to read; empty: the first of `t`, `time`, `timestamp`, `time_stamp`,
  /// `offset_time` the file has. A named field the file lacks is an IoError.
  std::string time_field{};
  /// Unit of the time field's values; Auto: nanoseconds for integer fields, seconds for
  /// floating-point ones (absolute stamps: by their magnitude).
  TimeUnit time_unit = TimeUnit::Auto;
};

/// Sets `options`' time fields from a `--point-time` value: `FIELD:UNIT` (UNIT one of s,
/// ms, us, ns, auto), `FIELD` (unit detected), or `none` (times not read). Throws Error
/// naming the value otherwise.
void parse_point_time(const std::string& text, ReadOptions& options);

/// Name of a time unit ("auto", "s", "ms", "us", "ns").
const char* to_string(TimeUnit unit);

/// One field (PCD) or vertex property (PLY) as the file declares it.
struct FieldInfo {
  std::string name;  ///< field name as written in the file ("_" is padding)
  char type = 'F';   ///< 'F' float, 'I' signed, 'U' unsigned
  int size = 4;      ///< bytes per value: 1, 2, 4 or 8
  int count = 1;     ///< values per point
};

/// What a file declared and what reading it found.
struct CloudInfo {
  std::string path;                      ///< the file read
  FileFormat format = FileFormat::Pcd;   ///< container format
  std::string encoding;                  ///< "ascii", "binary", "binary_compressed",
                                         ///< "binary_little_endian", "binary_big_endian"
  std::vector<FieldInfo> fields;         ///< fields / vertex properties, in file order
  std::uint64_t width = 0;               ///< PCD WIDTH (points for PLY/KITTI)
  std::uint64_t height = 1;              ///< PCD HEIGHT (> 1: organized cloud)
  std::uint64_t points_in_file = 0;      ///< points the file holds, finite or not
  std::uint64_t non_finite = 0;          ///< points dropped because x, y or z was not finite
  /// Points dropped because x, y or z, finite, is beyond float32's range (|value - origin|
  /// > 3.4e38, see PointCloud::origin): such a point cannot be stored.
  std::uint64_t out_of_range = 0;
  bool xyz_double = false;               ///< x, y, z stored as float64
  std::string intensity_field;           ///< the field read as intensity, empty if none
  /// The field read as per-point time, empty if none (also when its times were dropped).
  std::string time_field{};
  /// Unit the time field's values were read in (Auto when there is none).
  TimeUnit time_unit = TimeUnit::Auto;
  /// True when the times were absolute stamps, made relative to their earliest.
  bool time_absolute = false;
  /// Why the times of the field were dropped (implausible), empty when they were kept or
  /// the file had none.
  std::string time_dropped;
  std::uint64_t file_bytes = 0;          ///< size of the file
};

/// Format from the file name's extension (.pcd, .ply, .bin); throws IoError otherwise.
FileFormat format_from_path(const std::string& path);

/// Reads a PCD, PLY or KITTI `.bin` file, chosen by extension. Non-finite points are
/// dropped and counted in `info->non_finite`, points beyond float32's range in
/// `info->out_of_range`. Throws IoError.
PointCloud read_point_cloud(const std::string& path, const ReadOptions& options = {},
                            CloudInfo* info = nullptr);

/// Parses PCD bytes already in memory; `name` is used in error messages.
PointCloud parse_pcd(std::string_view bytes, const std::string& name,
                     const ReadOptions& options = {}, CloudInfo* info = nullptr);

/// Parses PLY bytes already in memory; `name` is used in error messages.
PointCloud parse_ply(std::string_view bytes, const std::string& name,
                     const ReadOptions& options = {}, CloudInfo* info = nullptr);

/// Parses KITTI `.bin` bytes (float32 x y z reflectance records).
PointCloud parse_kitti_bin(std::string_view bytes, const std::string& name,
                           const ReadOptions& options = {}, CloudInfo* info = nullptr);

/// Options for writing a point cloud.
struct WriteOptions {
  PcdEncoding pcd_encoding = PcdEncoding::Binary;  ///< PCD body encoding
  /// Write x y z as float64 world coordinates when the cloud's origin is not zero (so a
  /// UTM map keeps millimetres); float32 relative coordinates otherwise.
  bool world_double_when_offset = true;
  /// KITTI `.bin` holds float32 world coordinates: those of a cloud far from zero (UTM)
  /// are rounded, float32 values being 0.25 m apart at 4e6 m. Without this, a write that
  /// would move a coordinate by more than 1 mm throws IoError naming the largest change;
  /// with it, the file is written and the change logged as a warning.
  bool allow_precision_loss = false;
};

/// Writes `cloud` as PCD, PLY is not written; `.bin` writes KITTI float32 records
/// (world coordinates, intensity 0 when the cloud has none; see
/// WriteOptions::allow_precision_loss). Chosen by extension.
void write_point_cloud(const std::string& path, const PointCloud& cloud,
                       const WriteOptions& options = {});
/// Writes the points of `cloud` (a PointCloud's or the caller's own buffer, read where they
/// lie), as the overload above, without intensities.
void write_point_cloud(const std::string& path, PointCloudView cloud, const WriteOptions& options = {});

/// Writes a PCD file with fields x y z [intensity] [t] (t: float32 seconds, PointCloud::time).
void write_pcd(const std::string& path, const PointCloud& cloud, const WriteOptions& options = {});

/// Writes a KITTI `.bin` file (float32 x y z intensity, world coordinates); throws IoError
/// when that moves a coordinate by more than 1 mm, unless `options.allow_precision_loss`.
void write_kitti_bin(const std::string& path, const PointCloud& cloud, const WriteOptions& options = {});

/// Name of a format ("pcd", "ply", "kitti_bin").
const char* to_string(FileFormat format);

/// Parses "ascii", "binary" or "binary_compressed"; throws Error otherwise.
PcdEncoding pcd_encoding_from_string(const std::string& name);

}  // namespace ndtcu
