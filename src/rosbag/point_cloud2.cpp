// sensor_msgs/PointCloud2, serialized by ROS 2 (CDR) or ROS 1 (message_cursor.hpp).
//   std_msgs/Header header      stamp (sec, nanosec), frame_id
//   uint32 height, uint32 width
//   PointField[] fields         string name, uint32 offset, uint8 datatype, uint32 count
//   bool is_bigendian, uint32 point_step, uint32 row_step, uint8[] data, bool is_dense
#include "bag_internal.hpp"
#include "message_cursor.hpp"

#include "io/bytes.hpp"
#include "io/cloud_builder.hpp"
#include "io/point_time.hpp"

#include <algorithm>

namespace ndtcu::rosbag {

namespace {

// PointField datatypes 1..8 (INT8 .. FLOAT64) as 'I'/'U'/'F' and a size.
bool field_type(std::uint8_t datatype, char& type, int& size) {
  static constexpr char kTypes[] = {'I', 'U', 'I', 'U', 'I', 'U', 'F', 'F'};
  static constexpr int kSizes[] = {1, 1, 2, 2, 4, 4, 4, 8};
  if (datatype < 1 || datatype > 8) return false;
  type = kTypes[datatype - 1];
  size = kSizes[datatype - 1];
  return true;
}

struct Field {
  FieldInfo info;
  std::uint32_t offset = 0;
  ndtcu::detail::ScalarKind kind = ndtcu::detail::ScalarKind::Invalid;
};

std::string field_names(const std::vector<Field>& fields) {
  std::string out;
  for (const auto& f : fields) out += (out.empty() ? "" : " ") + f.info.name;
  return out.empty() ? "none" : out;
}

}  // namespace

bool is_point_cloud2_type(std::string_view type) {
  return type == "sensor_msgs/msg/PointCloud2" || type == "sensor_msgs/PointCloud2";
}

PointCloud decode_point_cloud2(std::string_view bytes, MessageEncoding encoding, const std::string& context,
                               const ReadOptions& options, PointCloud2Info* info) {
  PointCloud2Info local;
  PointCloud2Info& out = info ? *info : local;
  out = PointCloud2Info{};
  const detail::MessageStart start = detail::message_start(bytes, encoding, context);
  out.big_endian_cdr = start.big_endian_cdr;
  detail::MessageCursor c(bytes, start, "PointCloud2", context);
  out.stamp_ns = c.header(out.frame_id);
  out.height = c.get<std::uint32_t>("height");
  out.width = c.get<std::uint32_t>("width");
  const std::uint32_t field_count = c.get<std::uint32_t>("fields length");
  std::vector<Field> fields;
  // Each field takes at least 13 bytes: the count cannot make us reserve beyond the message.
  fields.reserve(std::min<std::size_t>(field_count, c.remaining() / 13));
  for (std::uint32_t i = 0; i < field_count; ++i) {
    Field f;
    f.info.name = c.string("fields[].name");
    f.offset = c.get<std::uint32_t>("fields[].offset");
    const std::uint8_t datatype = c.get<std::uint8_t>("fields[].datatype");
    f.info.count = static_cast<int>(std::min<std::uint32_t>(c.get<std::uint32_t>("fields[].count"), 1u << 30));
    if (!field_type(datatype, f.info.type, f.info.size)) {
      // Unknown types are tolerated for fields this reader does not use.
      f.info.type = '?';
      f.info.size = 0;
    }
    f.kind = ndtcu::detail::scalar_kind(f.info.type, f.info.size);
    fields.push_back(std::move(f));
    if (fields.back().kind == ndtcu::detail::ScalarKind::Invalid &&
        (fields.back().info.name == "x" || fields.back().info.name == "y" || fields.back().info.name == "z")) {
      c.fail("field '" + fields.back().info.name + "' has datatype " + std::to_string(datatype) +
             ", not a PointField type (1 INT8 .. 8 FLOAT64)");
    }
  }
  out.is_bigendian = c.get<std::uint8_t>("is_bigendian") != 0;
  out.point_step = c.get<std::uint32_t>("point_step");
  out.row_step = c.get<std::uint32_t>("row_step");
  const std::uint32_t data_length = c.get<std::uint32_t>("data length");
  const std::string_view data = c.bytes(data_length, "data");
  out.is_dense = c.get<std::uint8_t>("is_dense") != 0;
  for (const auto& f : fields) out.fields.push_back(f.info);

  auto find = [&](std::string_view name) -> const Field* {
    for (const auto& f : fields) {
      if (f.info.name == name) return &f;
    }
    return nullptr;
  };
  const Field* axis[3] = {find("x"), find("y"), find("z")};
  for (int a = 0; a < 3; ++a) {
    if (!axis[a]) {
      throw IoError(context, std::string("PointCloud2 has no field '") + "xyz"[a] + "' (fields: " + field_names(fields) + ")");
    }
    // Named twice, x would be either field; a count other than 1 would be no coordinate
    // or several (which of them is x?).
    const auto named = std::count_if(fields.begin(), fields.end(), [&](const Field& f) { return f.info.name == axis[a]->info.name; });
    if (named > 1) {
      throw IoError(context, "PointCloud2 names field '" + axis[a]->info.name + "' " + std::to_string(named) +
                                 " times (fields: " + field_names(fields) + ")");
    }
    if (axis[a]->info.count != 1) {
      throw IoError(context, "field '" + axis[a]->info.name + "' has count " + std::to_string(axis[a]->info.count) +
                                 "; x, y and z hold one value each (count 1)");
    }
  }
  const Field* intensity = nullptr;
  if (options.read_intensity) {
    int best = -1;
    for (const auto& f : fields) {
      const int r = ndtcu::detail::intensity_rank(f.info.name);
      if (r >= 0 && f.kind != ndtcu::detail::ScalarKind::Invalid && (best < 0 || r < best)) {
        best = r;
        intensity = &f;
      }
    }
  }
  const Field* time = nullptr;
  {
    std::vector<ndtcu::detail::TimeFieldCandidate> candidates;
    for (const auto& f : fields) {
      candidates.push_back({f.info.name, f.kind, static_cast<std::uint64_t>(std::max(f.info.count, 0))});
    }
    const int t = ndtcu::detail::choose_time_field(candidates, options, context);
    if (t >= 0) time = &fields[static_cast<std::size_t>(t)];
  }
  for (const Field* f : {axis[0], axis[1], axis[2], intensity, time}) {
    if (f && (f->offset > out.point_step || static_cast<std::uint32_t>(f->info.size) > out.point_step - f->offset)) {
      throw IoError(context, "field '" + f->info.name + "' at offset " + std::to_string(f->offset) + " (" +
                                 std::to_string(f->info.size) + " bytes) lies outside point_step " +
                                 std::to_string(out.point_step));
    }
  }
  const std::uint64_t width = out.width, height = out.height;
  out.points_in_message = width * height;
  if (out.points_in_message > 0) {
    if (static_cast<std::uint64_t>(out.point_step) * width > out.row_step) {
      throw IoError(context, "row_step " + std::to_string(out.row_step) + " is shorter than width " +
                                 std::to_string(width) + " x point_step " + std::to_string(out.point_step));
    }
    const std::uint64_t needed = (height - 1) * static_cast<std::uint64_t>(out.row_step) + width * out.point_step;
    if (needed > data.size()) {
      throw IoError(context, "data holds " + std::to_string(data.size()) + " bytes, height " + std::to_string(height) +
                                 " x row_step " + std::to_string(out.row_step) + " needs " + std::to_string(needed));
    }
  }
  // The message's byte order against this host's (little endian).
  const bool swap_points = out.is_bigendian;
  ndtcu::detail::CloudBuilder builder(options, intensity != nullptr, out.points_in_message);
  if (time) builder.keep_time(time->info.name, time->kind);
  const auto is_f32 = [](const Field* f) { return !f || f->kind == ndtcu::detail::ScalarKind::F32; };
  if (!swap_points && is_f32(axis[0]) && is_f32(axis[1]) && is_f32(axis[2]) && is_f32(intensity)) {
    // What drivers publish (float32 fields in the host's order): the builder reads each
    // row at once (a 100,000-point scan decoded in 0.5 ms instead of 2.2 on a 2-core x86
    // machine).
    for (std::uint64_t r = 0; r < height; ++r) {
      builder.add_float_points(data.data() + r * out.row_step, width, out.point_step, axis[0]->offset,
                               axis[1]->offset, axis[2]->offset, intensity ? intensity->offset : 0,
                               time ? time->offset : 0, time ? time->kind : ndtcu::detail::ScalarKind::F32);
    }
  } else {
    for (std::uint64_t r = 0; r < height; ++r) {
      const char* row = data.data() + r * out.row_step;
      for (std::uint64_t k = 0; k < width; ++k) {
        const char* p = row + k * out.point_step;
        builder.add(ndtcu::detail::load_scalar(p + axis[0]->offset, axis[0]->kind, swap_points),
                    ndtcu::detail::load_scalar(p + axis[1]->offset, axis[1]->kind, swap_points),
                    ndtcu::detail::load_scalar(p + axis[2]->offset, axis[2]->kind, swap_points),
                    intensity ? ndtcu::detail::load_scalar(p + intensity->offset, intensity->kind, swap_points)
                              : 0.0,
                    time ? ndtcu::detail::load_scalar(p + time->offset, time->kind, swap_points) : 0.0);
      }
    }
  }
  const bool xyz_double = axis[0]->kind == ndtcu::detail::ScalarKind::F64;
  CloudInfo ci;
  PointCloud cloud = builder.finish(context, xyz_double, &ci);
  out.non_finite = ci.non_finite;
  out.out_of_range = ci.out_of_range;
  out.intensity_field = intensity ? intensity->info.name : std::string();
  out.time_field = ci.time_field;
  out.time_unit = ci.time_unit;
  out.time_absolute = ci.time_absolute;
  out.time_dropped = ci.time_dropped;
  return cloud;
}

}  // namespace ndtcu::rosbag
