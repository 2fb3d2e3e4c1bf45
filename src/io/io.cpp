// Format dispatch, the KITTI reader, and the writers.
#include "bytes.hpp"
#include "cloud_builder.hpp"
#include "file_contents.hpp"
#include "../log.hpp"

#include <ndtcu/io.hpp>
#include <ndtcu/output_file.hpp>
#include <ndtcu/text.hpp>

#include <fmt/format.h>

#include <lzf.h>

#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>

namespace ndtcu {
namespace {

std::string lower_extension(const std::string& path) {
  auto slash = path.find_last_of('/');
  auto dot = path.find_last_of('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return "";
  std::string ext = path.substr(dot + 1);
  for (auto& ch : ext) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return ext;
}

void append_number(std::string& out, double v) {
  char buf[32];
  auto res = std::to_chars(buf, buf + sizeof(buf), v);
  out.append(buf, res.ptr);
}

void append_number(std::string& out, float v) {
  char buf[32];
  auto res = std::to_chars(buf, buf + sizeof(buf), v);
  out.append(buf, res.ptr);
}

}  // namespace

const char* to_string(FileFormat format) {
  switch (format) {
    case FileFormat::Pcd: return "pcd";
    case FileFormat::Ply: return "ply";
    case FileFormat::KittiBin: return "kitti_bin";
  }
  return "?";
}

PcdEncoding pcd_encoding_from_string(const std::string& name) {
  if (name == "ascii") return PcdEncoding::Ascii;
  if (name == "binary") return PcdEncoding::Binary;
  if (name == "binary_compressed") return PcdEncoding::BinaryCompressed;
  throw Error("unknown PCD encoding '" + name + "' (use ascii, binary or binary_compressed)");
}

FileFormat format_from_path(const std::string& path) {
  std::string ext = lower_extension(path);
  if (ext == "pcd") return FileFormat::Pcd;
  if (ext == "ply") return FileFormat::Ply;
  if (ext == "bin") return FileFormat::KittiBin;
  throw IoError(path, "unknown point-cloud extension '" + ext + "' (ndtcu reads .pcd, .ply and KITTI .bin)");
}

PointCloud parse_kitti_bin(std::string_view bytes, const std::string& name, const ReadOptions& options,
                           CloudInfo* info) {
  if (bytes.empty()) throw IoError(name, "empty file (0 bytes)");
  constexpr std::size_t kRecord = 16;  // float32 x, y, z, reflectance
  if (bytes.size() % kRecord != 0) {
    throw IoError(name, "size " + std::to_string(bytes.size()) +
                            " bytes is not a multiple of 16 (KITTI .bin holds float32 x y z reflectance records)");
  }
  std::size_t n = bytes.size() / kRecord;
  if (info) {
    info->format = FileFormat::KittiBin;
    info->encoding = "binary";
    info->fields = {{"x", 'F', 4, 1}, {"y", 'F', 4, 1}, {"z", 'F', 4, 1}, {"reflectance", 'F', 4, 1}};
    info->width = n;
    info->height = 1;
    info->points_in_file = n;
    info->intensity_field = options.read_intensity ? "reflectance" : "";
  }
  detail::CloudBuilder out(options, options.read_intensity, n);
  const char* p = bytes.data();
  for (std::size_t k = 0; k < n; ++k, p += kRecord) {
    out.add(detail::load_raw<float>(p, false), detail::load_raw<float>(p + 4, false),
            detail::load_raw<float>(p + 8, false), detail::load_raw<float>(p + 12, false));
  }
  return out.finish(name, false, info);
}

PointCloud read_point_cloud(const std::string& path, const ReadOptions& options, CloudInfo* info) {
  // The extension decides; check it before touching the file so a typo is named clearly.
  FileFormat format = format_from_path(path);
  detail::FileContents file(path);
  if (info) {
    *info = CloudInfo{};
    info->path = path;
    info->file_bytes = file.bytes().size();
  }
  switch (format) {
    case FileFormat::Pcd: return parse_pcd(file.bytes(), path, options, info);
    case FileFormat::Ply: return parse_ply(file.bytes(), path, options, info);
    case FileFormat::KittiBin: return parse_kitti_bin(file.bytes(), path, options, info);
  }
  throw IoError(path, "unsupported format");
}

namespace {

// The PCD writer: the points of `cloud`, with `intensity` and `time` (one a point each)
// when not null. The time is field `t`, float32 seconds: what the readers take back as
// seconds relative to the scan's reference time.
void write_pcd_points(const std::string& path, PointCloudView cloud, const float* intensity, const float* time,
                      const WriteOptions& options) {
  const bool world_double = options.world_double_when_offset && !cloud.origin.isZero();
  const bool with_intensity = intensity != nullptr && !cloud.empty();
  const bool with_time = time != nullptr && !cloud.empty();
  const std::size_t n = cloud.size();
  const int xyz_size = world_double ? 8 : 4;
  const char* encoding = options.pcd_encoding == PcdEncoding::Ascii    ? "ascii"
                       : options.pcd_encoding == PcdEncoding::Binary ? "binary"
                                                                     : "binary_compressed";
  std::string header = "# .PCD v0.7 - Point Cloud Data file format\nVERSION 0.7\n";
  header += std::string("FIELDS x y z") + (with_intensity ? " intensity" : "") + (with_time ? " t" : "") + "\n";
  std::string sz = std::to_string(xyz_size);
  const int extra = (with_intensity ? 1 : 0) + (with_time ? 1 : 0);
  header += "SIZE " + sz + " " + sz + " " + sz;
  for (int k = 0; k < extra; ++k) header += " 4";
  header += "\nTYPE F F F";
  for (int k = 0; k < extra; ++k) header += " F";
  header += "\nCOUNT 1 1 1";
  for (int k = 0; k < extra; ++k) header += " 1";
  header += "\n";
  header += "WIDTH " + std::to_string(n) + "\nHEIGHT 1\nVIEWPOINT 0 0 0 1 0 0 0\nPOINTS " + std::to_string(n) +
            "\nDATA " + encoding + "\n";

  // Coordinates written: world (double) when offset, else relative float32.
  auto coordinate = [&](std::size_t i, int a) -> double {
    return world_double ? cloud.origin[a] + static_cast<double>(cloud[i][a]) : cloud[i][a];
  };
  if (!world_double && !cloud.origin.isZero()) {
    // The caller asked for float32 relative coordinates; the origin goes in a comment so
    // it is not lost.
    header.insert(header.find("VERSION"),
                  fmt::format("# origin {} {} {}\n", cloud.origin.x(), cloud.origin.y(), cloud.origin.z()));
  }
  OutputFile out(path);
  out.write(header);
  if (options.pcd_encoding == PcdEncoding::Ascii) {
    std::string text;
    text.reserve(1 << 20);
    for (std::size_t i = 0; i < n; ++i) {
      for (int a = 0; a < 3; ++a) {
        if (world_double) append_number(text, coordinate(i, a));
        else append_number(text, cloud[i][a]);
        text += ' ';
      }
      if (with_intensity) {
        append_number(text, intensity[i]);
        text += ' ';
      }
      if (with_time) append_number(text, time[i]);
      else text.pop_back();
      text += '\n';
      if (text.size() > (1 << 20)) {
        out.write(text);
        text.clear();
      }
    }
    out.write(text);
    out.commit();
    return;
  }
  const std::size_t step = 3 * xyz_size + 4 * static_cast<std::size_t>(extra);
  std::vector<char> body(n * step);
  const bool field_major = options.pcd_encoding == PcdEncoding::BinaryCompressed;
  // Binary: point after point. Compressed: field after field (x of all points, then y...).
  auto put = [&](std::size_t i, const void* src, std::size_t size, std::size_t field_offset) {
    char* dst = field_major ? body.data() + field_offset * n + i * size : body.data() + i * step + field_offset;
    std::memcpy(dst, src, size);
  };
  for (std::size_t i = 0; i < n; ++i) {
    for (int a = 0; a < 3; ++a) {
      if (world_double) {
        double v = coordinate(i, a);
        put(i, &v, 8, a * 8);
      } else {
        float v = cloud[i][a];
        put(i, &v, 4, a * 4);
      }
    }
    if (with_intensity) put(i, &intensity[i], 4, 3 * xyz_size);
    if (with_time) put(i, &time[i], 4, 3 * xyz_size + (with_intensity ? 4 : 0));
  }
  if (!field_major) {
    out.write(body.data(), body.size());
  } else {
    if (body.size() > 0xffffffffu) throw IoError(path, "cloud too large for binary_compressed (over 4 GiB)");
    // LZF may expand incompressible data slightly; leave room for it.
    std::vector<char> packed(body.size() + body.size() / 16 + 64);
    unsigned got = body.empty() ? 0
                                : lzf_compress(body.data(), static_cast<unsigned>(body.size()), packed.data(),
                                               static_cast<unsigned>(packed.size()));
    if (!body.empty() && got == 0) throw IoError(path, "LZF compression failed");
    std::uint32_t sizes[2] = {got, static_cast<std::uint32_t>(body.size())};
    out.write(sizes, sizeof(sizes));
    out.write(packed.data(), got);
  }
  out.commit();
}

// The KITTI writer: world coordinates, `intensity` or 0 for each point. float32 world
// coordinates of a cloud far from zero are rounded (float32 values are 0.25 m apart at
// 4e6 m): a change of more than 1 mm is refused unless the options allow it, and logged
// when they do.
void write_kitti_points(const std::string& path, PointCloudView cloud, const float* intensity,
                        const WriteOptions& options) {
  constexpr double kMaxRounding = 1e-3;  // metres: the millimetres a UTM map is read to keep
  std::vector<float> records(cloud.size() * 4);
  double worst = 0.0;
  std::size_t worst_point = 0;
  int worst_axis = 0;
  for (std::size_t i = 0; i < cloud.size(); ++i) {
    const Eigen::Vector3d w = cloud.world(i);
    for (int a = 0; a < 3; ++a) {
      // Beyond float32's range the conversion is undefined: refused before it.
      if (!(std::abs(w[a]) <= static_cast<double>(std::numeric_limits<float>::max()))) {
        throw IoError(path, fmt::format("point {}: {} = {} m is beyond float32's range, which KITTI .bin stores; "
                                        "write a .pcd (float64 coordinates) instead",
                                        i, "xyz"[a], w[a]));
      }
      const float f = static_cast<float>(w[a]);
      const double moved = std::abs(static_cast<double>(f) - w[a]);
      if (moved > worst) {
        worst = moved;
        worst_point = i;
        worst_axis = a;
      }
      records[4 * i + static_cast<std::size_t>(a)] = f;
    }
    records[4 * i + 3] = intensity ? intensity[i] : 0.f;
  }
  if (worst > kMaxRounding) {
    const double w = cloud.world(worst_point)[worst_axis];
    const std::string what = fmt::format(
        "KITTI .bin stores float32 world coordinates, which move this cloud's points by up to {:.3g} m (point {}: {} "
        "{:.3f} m becomes {:.3f})",
        worst, worst_point, "xyz"[worst_axis], w, static_cast<double>(static_cast<float>(w)));
    if (!options.allow_precision_loss) {
      throw IoError(path, what + "; write a .pcd (float64 coordinates) instead, or accept the loss "
                                 "(ndtcu convert --allow-precision-loss, WriteOptions::allow_precision_loss)");
    }
    detail::log().warn("{}: {}", printable(path), what);
  }
  OutputFile out(path);
  out.write(records.data(), records.size() * sizeof(float));
  out.commit();
}

void write_points(const std::string& path, PointCloudView cloud, const float* intensity, const float* time,
                  const WriteOptions& options) {
  switch (format_from_path(path)) {
    case FileFormat::Pcd: return write_pcd_points(path, cloud, intensity, time, options);
    case FileFormat::KittiBin: return write_kitti_points(path, cloud, intensity, options);
    case FileFormat::Ply: throw IoError(path, "writing PLY is not supported; write .pcd or .bin");
  }
}

}  // namespace

void write_pcd(const std::string& path, const PointCloud& cloud, const WriteOptions& options) {
  write_pcd_points(path, cloud, cloud.intensity_or_null(), cloud.time_or_null(), options);
}

void write_kitti_bin(const std::string& path, const PointCloud& cloud, const WriteOptions& options) {
  write_kitti_points(path, cloud, cloud.intensity_or_null(), options);
}

void write_point_cloud(const std::string& path, const PointCloud& cloud, const WriteOptions& options) {
  write_points(path, cloud, cloud.intensity_or_null(), cloud.time_or_null(), options);
}

void write_point_cloud(const std::string& path, PointCloudView cloud, const WriteOptions& options) {
  write_points(path, cloud, nullptr, nullptr, options);
}

}  // namespace ndtcu
