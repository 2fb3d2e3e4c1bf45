// The rosbag reader against bags written by independent writers (tests/rosbag/write_bags.py:
// the rosbags package and Foxglove's mcap package), its own MCAP writer, and malformed bags.
#include "../support/test_support.hpp"

#include <ndtcu/io.hpp>
#include <ndtcu/localizer.hpp>
#include <ndtcu/rosbag.hpp>
#include <ndtcu/scan_sequence.hpp>
#include <ndtcu/trajectory.hpp>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <set>
#include <stdexcept>
#include <fstream>

namespace fs = std::filesystem;
using namespace ndtcu;
using namespace ndtcu::rosbag;

namespace {

// The bags write_bags.py wrote (CTest runs it first, with NDTCU_ROSBAG_DIR pointing there).
std::optional<nlohmann::json> manifest(const char* env = "NDTCU_ROSBAG_DIR") {
  const char* dir = std::getenv(env);
  if (!dir || !*dir) return std::nullopt;
  const fs::path m = fs::path(dir) / "manifest.json";
  if (!fs::exists(m)) return std::nullopt;
  return nlohmann::json::parse(test::read_bytes(m));
}

bool same_bits(const PointCloud& a, const PointCloud& b) {
  return a.points.size() == b.points.size() &&
         std::memcmp(a.points.data(), b.points.data(), a.points.size() * sizeof(Eigen::Vector3f)) == 0;
}

// Every message of every bag in the manifest against the PCD it was written from.
void check_bags_against_pcd(const nlohmann::json& m) {
  REQUIRE(!m["bags"].empty());
  for (const auto& bag : m["bags"]) {
    const std::string path = bag["path"];
    INFO(path);
    const BagReader reader(path);
    const BagInfo& info = reader.info();
    CHECK(to_string(info.format) == bag["format"].get<std::string>());
    CHECK(info.compression == bag["compression"].get<std::string>());
    const auto& scans = bag["scans"];
    const TopicInfo& t = reader.point_cloud_topic();  // the only PointCloud2 topic
    CHECK(t.name == "/points");
    CHECK(t.messages == scans.size());
    CHECK(reader.topic("/notes").messages == scans.size());
    CHECK_FALSE(is_point_cloud2_type(reader.topic("/notes").type));
    CHECK(info.messages == 2 * scans.size());
    const auto& refs = reader.messages("/points");
    for (std::size_t k = 0; k < scans.size(); ++k) {
      INFO("message " << k << ", " << scans[k].get<std::string>());
      CHECK(refs[k].time_ns == bag["times_ns"][k].get<std::int64_t>());
      PointCloud2Info pi;
      const PointCloud from_bag = reader.read_point_cloud("/points", k, {}, &pi);
      const PointCloud from_pcd = read_point_cloud(scans[k].get<std::string>());
      CHECK(pi.stamp_ns == refs[k].time_ns);
      CHECK(pi.frame_id == "lidar");
      REQUIRE(from_bag.size() == from_pcd.size());
      CHECK(same_bits(from_bag, from_pcd));
      if (bag["intensity"].get<bool>()) {
        REQUIRE(from_bag.intensity.size() == from_pcd.intensity.size());
        CHECK(std::memcmp(from_bag.intensity.data(), from_pcd.intensity.data(), from_bag.intensity.size() * 4) == 0);
      } else {
        CHECK(from_bag.intensity.empty());
      }
      const std::string layout = bag["layout"];
      if (layout == "organized_nan") {
        CHECK(pi.height == 2);
        CHECK_FALSE(pi.is_dense);
        CHECK(pi.non_finite == from_pcd.size());  // one NaN point per real one
        CHECK(pi.row_step == pi.width * pi.point_step + 8);
      } else {
        CHECK(pi.non_finite == 0);
      }
      CHECK(pi.is_bigendian == (layout == "bigendian"));
      if (info.format != BagFormat::Ros1) CHECK(pi.big_endian_cdr == (layout == "bigendian"));
      if (layout == "float64_padded") CHECK(pi.fields.at(0).size == 8);
    }
  }
}

std::string slurp(const std::string& path) { return test::read_bytes(path); }

// Replaces the first `from` in `bytes` by `to` (same length); fails the test when absent.
std::string patch(std::string bytes, const std::string& from, const std::string& to) {
  REQUIRE(from.size() == to.size());
  const auto at = bytes.find(from);
  REQUIRE(at != std::string::npos);
  bytes.replace(at, from.size(), to);
  return bytes;
}

// A small cloud with intensity, in world coordinates.
PointCloud small_cloud(int n, float shift) {
  PointCloud c;
  for (int i = 0; i < n; ++i) {
    c.points.emplace_back(0.25f * i + shift, -1.5f * i - 0.5f, 0.125f * i * i + 1.0f);  // no -0: a reader gives +0
    c.intensity.push_back(static_cast<float>(i) + 0.5f);
  }
  return c;
}

// A ROS 1 serialized message built by hand.
struct Msg {
  std::string b;
  template <typename T>
  void put(T v) {
    char c[sizeof(T)];
    std::memcpy(c, &v, sizeof(T));
    b.append(c, sizeof(T));
  }
  void str(const std::string& s) {
    put(static_cast<std::uint32_t>(s.size()));
    b += s;
  }
};

}  // namespace

TEST_CASE("rosbag: bags of the sample scans from rosbags and mcap hold the PCD's points, bit for bit", "[rosbag]") {
  auto m = manifest();
  if (!m) NDTCU_SKIP("no bags written (NDTCU_ROSBAG_DIR unset or write_bags.py skipped: run scripts/setup.sh)");
  check_bags_against_pcd(*m);
}

TEST_CASE("rosbag: BALM scans as bags hold the PCD's points, bit for bit", "[rosbag][data]") {
  auto m = manifest("NDTCU_ROSBAG_BALM_DIR");
  if (!m) NDTCU_SKIP("no BALM bags written (no data folder, or write_bags.py skipped)");
  check_bags_against_pcd(*m);
}

// Localizes `scans` as `ndtcu localize` does (readers ahead of the localizer), each scan read
// by `reader` (null: its file); the poses of the valid frames with their times.
std::vector<std::pair<double, Eigen::Matrix4d>> localize(const std::vector<ScanEntry>& scans,
                                                         ScanPrefetcher::Reader reader, const fs::path& map,
                                                         const Eigen::Matrix4d& initial) {
  LocalizerSettings s;
  ExecutionOptions e;
  e.threads = 2;
  e.backend = Backend::Cpu;
  Localizer localizer(s, e);
  localizer.set_map(read_point_cloud(map.string()));
  localizer.set_initial_pose(initial);
  std::vector<std::pair<double, Eigen::Matrix4d>> poses;
  ScanPrefetcher prefetcher(scans, std::move(reader), [&](const PointCloud& c) { return localizer.preprocess(c); }, 2, 4);
  while (auto scan = prefetcher.next()) {
    REQUIRE(scan->error.empty());
    const LocalizationResult r = localizer.localize_preprocessed(scan->cloud, scan->entry.time);
    if (r.valid) poses.emplace_back(scan->entry.time, r.pose);
  }
  return poses;
}

TEST_CASE("rosbag: BALM's odd scans localize from an MCAP bag exactly as from their PCD files", "[rosbag][data]") {
  auto m = manifest("NDTCU_ROSBAG_BALM_DIR");
  if (!m) NDTCU_SKIP("no BALM bags written (no data folder, or write_bags.py skipped)");
  NDTCU_REQUIRE_DATA(dir, "balm_os0");
  const fs::path balm = dir / "balm_os0";
  std::string path;
  for (const auto& b : (*m)["bags"]) {
    if (b["name"] == "balm_mcap_zstd") path = b["path"];
  }
  REQUIRE(!path.empty());
  const Trajectory reference = read_trajectory((balm / "poses_tum.txt").string());
  std::vector<ScanEntry> files = list_scans((balm / "odd_scans_1hz.txt").string());
  const auto bag = std::make_shared<const BagReader>(path);
  std::vector<ScanEntry> messages;
  for (const auto& ref : bag->messages("/points")) messages.push_back({path + "#" + std::to_string(ref.index), ref.time()});
  REQUIRE(messages.size() == files.size());
  match_to_reference(files, reference);
  match_to_reference(messages, reference);
  const fs::path map = balm / "map_even_frames_0-58_voxel0.1.pcd";
  const auto from_files = localize(files, nullptr, map, reference[1].pose.matrix());
  const auto from_bag = localize(
      messages,
      [bag](std::size_t k, const ScanEntry&) {
        ReadOptions o;
        o.read_intensity = false;
        return bag->read_point_cloud("/points", k, o);
      },
      map, reference[1].pose.matrix());
  REQUIRE(from_files.size() == 30);
  REQUIRE(from_bag.size() == from_files.size());
  for (std::size_t k = 0; k < from_files.size(); ++k) {
    INFO("frame " << k);
    CHECK(from_bag[k].first == from_files[k].first);
    CHECK(from_bag[k].second == from_files[k].second);  // the same bits
  }
}

TEST_CASE("rosbag: a topic is chosen by name or alone, and a wrong one is an error naming the topics", "[rosbag]") {
  auto m = manifest();
  if (!m) NDTCU_SKIP("no bags written");
  for (const auto& bag : (*m)["bags"]) {
    const std::string path = bag["path"];
    INFO(path);
    const BagReader reader(path);
    CHECK(reader.point_cloud_topic("/points").name == "/points");
    CHECK_THROWS_WITH(reader.point_cloud_topic("/notes"),
                      Catch::Contains(path) && Catch::Contains("topic /notes holds std_msgs/") &&
                          Catch::Contains("String, not sensor_msgs/PointCloud2"));
    CHECK_THROWS_WITH(reader.point_cloud_topic("/lidar"),
                      Catch::Contains("no topic '/lidar'") && Catch::Contains("/notes (std_msgs/") &&
                          Catch::Contains("/points (sensor_msgs/"));
    CHECK_THROWS_WITH(reader.read_point_cloud("/points", 10),
                      Catch::Contains("topic /points: message 10 does not exist (10 messages)"));
  }
}

TEST_CASE("rosbag: the MCAP writer's bag reads back bit for bit, with its times", "[rosbag][unit]") {
  const fs::path dir = test::temp_dir("rosbag_writer") / "bag";
  {
    McapBagWriter w(dir.string(), "/sim/points", "lidar");
    w.write(1'000'000'000, small_cloud(5, 0.0f));
    w.write(1'100'000'000, small_cloud(7, 1.0f));
    PointCloud empty;
    w.write(1'200'000'000, empty);
    w.close();
  }
  CHECK(is_bag_path(dir.string()));
  const BagReader reader(dir.string());
  CHECK(reader.info().format == BagFormat::Ros2Mcap);
  CHECK(reader.info().compression == "none");
  const auto& refs = reader.messages("/sim/points");
  REQUIRE(refs.size() == 3);
  CHECK(refs[1].time_ns == 1'100'000'000);
  PointCloud2Info pi;
  const PointCloud c = reader.read_point_cloud("/sim/points", 1, {}, &pi);
  CHECK(same_bits(c, small_cloud(7, 1.0f)));
  CHECK(c.intensity == small_cloud(7, 1.0f).intensity);
  CHECK(pi.stamp_ns == 1'100'000'000);
  CHECK(pi.frame_id == "lidar");
  CHECK(reader.read_point_cloud("/sim/points", 2).empty());
  // The MCAP file alone is a bag too.
  const BagReader file_only((dir / "bag_0.mcap").string());
  CHECK(file_only.messages("/sim/points").size() == 3);
  // Writing into a folder that holds files is refused.
  CHECK_THROWS_WITH(McapBagWriter(dir.string(), "/p", "f"), Catch::Contains("not an empty folder"));
}

TEST_CASE("rosbag: a bag whose writer stops half-way is no bag: no MCAP file, no metadata.yaml", "[rosbag][unit]") {
  const fs::path dir = test::temp_dir("rosbag_writer_stopped") / "bag";
  try {
    McapBagWriter w(dir.string(), "/points", "lidar");
    w.write(1'000'000'000, small_cloud(5, 0.0f));
    throw std::runtime_error("the next scan cannot be read");
  } catch (const std::runtime_error&) {
  }
  CHECK(fs::is_directory(dir));
  CHECK(fs::is_empty(dir));
  CHECK_FALSE(is_bag_path(dir.string()));
  // Without an exception, the destructor finishes the bag (as close() does).
  const fs::path finished = test::temp_dir("rosbag_writer_destructor") / "bag";
  {
    McapBagWriter w(finished.string(), "/points", "lidar");
    w.write(1'000'000'000, small_cloud(5, 0.0f));
  }
  CHECK(BagReader(finished.string()).messages("/points").size() == 1);
}

TEST_CASE("rosbag: malformed MCAP bags are errors naming the file, topic and message", "[rosbag][unit]") {
  const fs::path dir = test::temp_dir("rosbag_malformed") / "bag";
  {
    McapBagWriter w(dir.string(), "/points", "lidar");
    for (int k = 0; k < 3; ++k) w.write(1'000'000'000 + k, small_cloud(4 + k, 0.5f * k));
    w.close();
  }
  const std::string good = slurp((dir / "bag_0.mcap").string());
  REQUIRE_NOTHROW(BagReader::from_memory(good, "good.mcap", BagFormat::Ros2Mcap));

  SECTION("truncated anywhere: an error, never a crash") {
    for (std::size_t cut : {std::size_t{0}, std::size_t{5}, std::size_t{12}, good.size() / 3, good.size() / 2,
                            good.size() - 30, good.size() - 1}) {
      INFO("cut at " << cut);
      CHECK_THROWS_AS(BagReader::from_memory(std::string_view(good).substr(0, cut), "cut.mcap", BagFormat::Ros2Mcap),
                      IoError);
    }
    CHECK_THROWS_WITH(BagReader::from_memory(std::string_view(good).substr(0, good.size() / 2), "cut.mcap",
                                             BagFormat::Ros2Mcap),
                      Catch::StartsWith("cut.mcap: ") && Catch::Contains("remain in the file"));
  }
  SECTION("a record length beyond the file") {
    std::string bad = good;
    // The first record after the magic is the header: its u64 length at offset 9.
    const std::uint64_t lie = std::uint64_t{1} << 40;
    std::memcpy(bad.data() + 9, &lie, 8);
    CHECK_THROWS_WITH(BagReader::from_memory(bad, "lie.mcap", BagFormat::Ros2Mcap),
                      Catch::Contains("lie.mcap: record 0 (opcode 0x01) at offset 8 claims 1099511627776 bytes"));
  }
  SECTION("a CDR data array longer than its message") {
    // The message of 4 points (16 bytes each): the data length 64 follows row_step 64.
    const BagReader reader = BagReader::from_memory(good, "good.mcap", BagFormat::Ros2Mcap);
    const std::string raw = reader.read_raw("/points", 0);
    const std::string needle = std::string("\x40\x00\x00\x00\x40\x00\x00\x00", 8);
    std::string bad = good;
    const auto at = bad.find(raw);
    REQUIRE(at != std::string::npos);
    const auto field = bad.find(needle, at);
    REQUIRE(field != std::string::npos);
    bad[field + 4] = '\x50';  // data length 80: 16 bytes more than the message holds
    const BagReader r2 = BagReader::from_memory(bad, "short.mcap", BagFormat::Ros2Mcap);
    CHECK_THROWS_WITH(r2.read_point_cloud("/points", 0),
                      Catch::StartsWith("short.mcap: topic /points: message 0: PointCloud2 message truncated in "
                                        "data: needs 80 bytes, 65 remain"));
    CHECK(r2.read_point_cloud("/points", 1).size() == 5);  // the others still read
  }
  SECTION("a message on a channel the file never defines") {
    std::string bad = good;
    const BagReader reader = BagReader::from_memory(good, "good.mcap", BagFormat::Ros2Mcap);
    const std::string raw = reader.read_raw("/points", 0);
    const auto msg = bad.find(raw);
    REQUIRE(msg != std::string::npos);
    // The message record's channel id lies 22 bytes before its data.
    bad[msg - 22] = '\x07';
    CHECK_THROWS_WITH(BagReader::from_memory(bad, "orphan.mcap", BagFormat::Ros2Mcap),
                      Catch::Contains("orphan.mcap: a message refers to channel 7, which the file never defines"));
  }
}

TEST_CASE("rosbag: malformed bags from the independent writers are errors naming what is wrong", "[rosbag]") {
  auto m = manifest();
  if (!m) NDTCU_SKIP("no bags written");
  auto find_bag = [&](const std::string& name) {
    for (const auto& b : (*m)["bags"]) {
      if (b["name"] == name) return b["path"].get<std::string>();
    }
    FAIL("no bag " << name << " in the manifest");
    return std::string();
  };
  const fs::path tmp = test::temp_dir("rosbag_bad");
  SECTION("an unknown MCAP chunk compression") {
    const std::string bytes = slurp(find_bag("sample_mcap_lz4"));
    const std::string bad = patch(bytes, std::string("\x03\x00\x00\x00lz4", 7), std::string("\x03\x00\x00\x00xz4", 7));
    CHECK_THROWS_WITH(BagReader::from_memory(bad, "x.mcap", BagFormat::Ros2Mcap),
                      Catch::Contains("x.mcap: record") && Catch::Contains("unknown compression 'xz4'"));
  }
  SECTION("an MCAP chunk declaring more than it expands to, and more than the cap") {
    const std::string bytes = slurp(find_bag("sample_mcap_lz4"));
    // The first chunk record: opcode 0x06 after magic and header; its uncompressed_size
    // is the third u64 of its content.
    const auto at = bytes.find('\x06', 8);
    REQUIRE(at != std::string::npos);
    std::string bad = bytes;
    std::uint64_t declared;
    std::memcpy(&declared, bad.data() + at + 9 + 16, 8);
    const std::uint64_t more = declared + 1;
    std::memcpy(bad.data() + at + 9 + 16, &more, 8);
    CHECK_THROWS_WITH(BagReader::from_memory(bad, "more.mcap", BagFormat::Ros2Mcap),
                      Catch::Contains("more.mcap: ") && Catch::Contains("lz4 data: "));
    BagReadLimits small;
    small.max_chunk_bytes = 1000;
    CHECK_THROWS_WITH(BagReader::from_memory(bytes, "cap.mcap", BagFormat::Ros2Mcap, small),
                      Catch::Contains("bytes uncompressed, over the limit of 1000"));
  }
  SECTION("ROS 1: an unknown chunk compression, a truncated bag, a lying data length") {
    const std::string bytes = slurp(find_bag("sample_ros1_lz4"));
    CHECK_THROWS_WITH(BagReader::from_memory(patch(bytes, "compression=lz4", "compression=lzx"), "x.bag", BagFormat::Ros1),
                      Catch::Contains("x.bag: record") && Catch::Contains("unknown compression 'lzx'"));
    for (std::size_t cut : {std::size_t{3}, std::size_t{20}, std::size_t{4200}, bytes.size() / 2, bytes.size() - 3}) {
      INFO("cut at " << cut);
      CHECK_THROWS_AS(BagReader::from_memory(std::string_view(bytes).substr(0, cut), "cut.bag", BagFormat::Ros1), IoError);
    }
    // The bag header record (after the 13-byte version line): its data length follows
    // its header; made to claim 2 GiB.
    std::uint32_t header_length;
    std::memcpy(&header_length, bytes.data() + 13, 4);
    std::string bad = bytes;
    const std::uint32_t lie = 0x80000000u;
    std::memcpy(bad.data() + 13 + 4 + header_length, &lie, 4);
    CHECK_THROWS_WITH(BagReader::from_memory(bad, "lie.bag", BagFormat::Ros1),
                      Catch::Contains("lie.bag: record 0 at offset 13: data claims 2147483648 bytes"));
  }
  SECTION("a file that is not a bag, a folder without metadata.yaml, a missing bag") {
    test::write_bytes(tmp / "text.mcap", "hello, world");
    CHECK_THROWS_WITH(BagReader((tmp / "text.mcap").string()), Catch::Contains("text.mcap: not an MCAP file"));
    test::write_bytes(tmp / "text.bag", "hello, world, not a bag");
    CHECK_THROWS_WITH(BagReader((tmp / "text.bag").string()), Catch::Contains("text.bag: not a ROS 1 bag"));
    test::write_bytes(tmp / "text.db3", "hello, world, not a database");
    CHECK_THROWS_WITH(BagReader((tmp / "text.db3").string()), Catch::Contains("text.db3: "));
    fs::create_directories(tmp / "empty_folder");
    CHECK_FALSE(is_bag_path((tmp / "empty_folder").string()));
    CHECK_THROWS_WITH(BagReader((tmp / "empty_folder").string()), Catch::Contains("holds no metadata.yaml"));
    CHECK_THROWS_WITH(BagReader((tmp / "missing.bag").string()), Catch::Contains("missing.bag: no such file"));
  }
}

TEST_CASE("rosbag: PointCloud2 decoding of layouts and bad fields", "[rosbag][unit]") {
  // ROS 1 serialization built by hand: seq, stamp, frame_id, height, width, fields,
  // is_bigendian, point_step, row_step, data, is_dense.
  auto make = [](std::uint8_t x_type, std::uint32_t x_offset, std::uint32_t step, std::uint32_t data_bytes,
                 bool drop_z = false, std::uint32_t x_count = 1, bool x_twice = false) {
    Msg m;
    m.put<std::uint32_t>(0);
    m.put<std::uint32_t>(12);
    m.put<std::uint32_t>(5);
    m.str("f");
    m.put<std::uint32_t>(1);  // height
    m.put<std::uint32_t>(2);  // width
    m.put<std::uint32_t>(drop_z ? 2 : 3);
    const char* names[] = {"x", x_twice ? "x" : "y", "z"};
    for (int f = 0; f < (drop_z ? 2 : 3); ++f) {
      m.str(names[f]);
      m.put<std::uint32_t>(f == 0 ? x_offset : 4 * f + 8);
      m.put<std::uint8_t>(f == 0 ? x_type : 7);
      m.put<std::uint32_t>(f == 0 ? x_count : 1);
    }
    m.put<std::uint8_t>(0);
    m.put<std::uint32_t>(step);
    m.put<std::uint32_t>(2 * step);
    m.put<std::uint32_t>(data_bytes);
    for (std::uint32_t i = 0; i < data_bytes; ++i) m.b.push_back('\0');
    m.put<std::uint8_t>(1);
    return m.b;
  };
  // int16 x at offset 0, y and z float32 at 12 and 16: integers are read as numbers.
  std::string ok = make(3, 0, 20, 40);
  const std::int16_t x1 = -7;
  std::memcpy(ok.data() + ok.size() - 1 - 40 + 20, &x1, 2);
  PointCloud2Info info;
  const PointCloud c = decode_point_cloud2(ok, MessageEncoding::Ros1, "m", {}, &info);
  REQUIRE(c.size() == 2);
  CHECK(c.points[1].x() == -7.0f);
  CHECK(info.stamp_ns == 12'000'000'005);
  CHECK(info.fields.at(0).type == 'I');
  CHECK_THROWS_WITH(decode_point_cloud2(make(7, 0, 20, 40, true), MessageEncoding::Ros1, "bag: topic /p: message 2"),
                    Catch::Equals("bag: topic /p: message 2: PointCloud2 has no field 'z' (fields: x y)"));
  CHECK_THROWS_WITH(decode_point_cloud2(make(8, 16, 20, 40), MessageEncoding::Ros1, "m"),
                    Catch::Contains("field 'x' at offset 16 (8 bytes) lies outside point_step 20"));
  CHECK_THROWS_WITH(decode_point_cloud2(make(9, 0, 20, 40), MessageEncoding::Ros1, "m"),
                    Catch::Contains("field 'x' has datatype 9"));
  // x named twice (which is x?), or holding 0 or 3 values: refused, naming the field.
  CHECK_THROWS_WITH(decode_point_cloud2(make(7, 0, 20, 40, false, 1, true), MessageEncoding::Ros1, "m"),
                    Catch::Equals("m: PointCloud2 names field 'x' 2 times (fields: x x z)"));
  for (const std::uint32_t count : {0u, 3u}) {
    CAPTURE(count);
    CHECK_THROWS_WITH(decode_point_cloud2(make(7, 0, 20, 40, false, count), MessageEncoding::Ros1, "m"),
                      Catch::Equals("m: field 'x' has count " + std::to_string(count) +
                                    "; x, y and z hold one value each (count 1)"));
  }
  CHECK_THROWS_WITH(decode_point_cloud2(make(7, 0, 20, 30), MessageEncoding::Ros1, "m"),
                    Catch::Contains("data holds 30 bytes, height 1 x row_step 40 needs 40"));
  CHECK_THROWS_WITH(decode_point_cloud2(ok.substr(0, ok.size() - 10), MessageEncoding::Ros1, "m"),
                    Catch::Contains("m: PointCloud2 message truncated in data: needs 40 bytes"));
  CHECK_THROWS_WITH(decode_point_cloud2(std::string_view("\x00\x07\x00\x00", 4), MessageEncoding::Cdr, "m"),
                    Catch::Contains("is not plain CDR"));
  CHECK_THROWS_WITH(decode_point_cloud2(std::string_view("\x00", 1), MessageEncoding::Cdr, "m"),
                    Catch::Contains("shorter than its 4-byte encapsulation header"));
}

TEST_CASE("rosbag: nav_msgs/Odometry from independent writers and by hand; bad values are errors naming the field",
          "[rosbag]") {
  auto m = manifest();
  if (!m) NDTCU_SKIP("no bags written");
  const fs::path dir = fs::path(std::getenv("NDTCU_ROSBAG_DIR"));
  // write_bags.py --odometry: the sample's poses in another fixed frame, on /odom, in a ROS 1
  // bag and a ROS 2 MCAP bag (big-endian CDR), and as a TUM file.
  const Trajectory expected = read_trajectory((dir / "sample_odometry_tum.txt").string(), TrajectoryFormat::Tum);
  REQUIRE(expected.size() == 10);
  for (const char* name : {"sample_odometry.bag", "sample_odometry_mcap"}) {
    INFO(name);
    const BagReader reader((dir / name).string());
    REQUIRE(is_odometry_type(reader.topic("/odom").type));
    const auto& refs = reader.messages("/odom");
    REQUIRE(refs.size() == expected.size());
    for (std::size_t k = 0; k < refs.size(); ++k) {
      const OdometryMessage o = reader.read_odometry("/odom", k);
      CHECK(o.frame_id == "odom");
      CHECK(o.child_frame_id == "base_link");
      CHECK(o.stamp_ns == refs[k].time_ns);
      CHECK(std::abs(refs[k].time() - expected[k].time) < 1e-9);
      CHECK((o.pose - expected[k].pose.matrix()).cwiseAbs().maxCoeff() < 1e-8);
      CHECK(o.covariance(0, 0) == 0.01);
      CHECK(o.covariance(5, 5) == 0.001);
      CHECK(o.covariance(0, 1) == 0.0);
    }
    CHECK_THROWS_WITH(reader.read_odometry("/points", 0),
                      Catch::Contains("topic /points holds sensor_msgs/") && Catch::Contains("not nav_msgs/Odometry"));
  }

  // ROS 1 serialization by hand: seq, stamp, frame_id, child_frame_id, position, quaternion
  // (x y z w), covariance; the twist is not read.
  auto make = [](double px, double qw, int covariance_values = 36) {
    Msg msg;
    msg.put<std::uint32_t>(0);
    msg.put<std::uint32_t>(7);
    msg.put<std::uint32_t>(500);
    msg.str("odom");
    msg.str("base_link");
    for (double v : {px, 2.0, 3.0, 0.0, 0.0, 0.0, qw}) msg.put<double>(v);
    for (int i = 0; i < covariance_values; ++i) msg.put<double>(i == 0 ? 0.5 : 0.0);
    return msg.b;
  };
  const OdometryMessage o = decode_odometry(make(1.0, 1.0), MessageEncoding::Ros1, "by hand");
  CHECK(o.stamp_ns == 7000000500);
  CHECK(o.frame_id == "odom");
  CHECK(o.child_frame_id == "base_link");
  CHECK(o.pose.isApprox(Eigen::Matrix4d(Eigen::Affine3d(Eigen::Translation3d(1.0, 2.0, 3.0)).matrix())));
  CHECK(o.covariance(0, 0) == 0.5);
  CHECK_THROWS_WITH(decode_odometry(make(1.0, 0.0), MessageEncoding::Ros1, "by hand"),
                    Catch::Contains("by hand") && Catch::Contains("pose.pose.orientation: quaternion norm 0 is not 1"));
  CHECK_THROWS_WITH(decode_odometry(make(std::nan(""), 1.0), MessageEncoding::Ros1, "by hand"),
                    Catch::Contains("pose.pose.position.x is nan"));
  CHECK_THROWS_WITH(decode_odometry(make(1.0, 1.0, 20), MessageEncoding::Ros1, "by hand"),
                    Catch::Contains("Odometry message truncated in pose.covariance"));
  // Read as CDR, the ROS 1 bytes (a seq of 0: big-endian encapsulation) make a string
  // length beyond the message: an error, not an allocation.
  CHECK_THROWS_WITH(decode_odometry(make(1.0, 1.0), MessageEncoding::Cdr, "by hand"),
                    Catch::Contains("by hand") && Catch::Contains("Odometry message truncated in header.frame_id"));
  CHECK_THROWS_WITH(decode_odometry(std::string("\x02\x00", 2), MessageEncoding::Cdr, "by hand"),
                    Catch::Contains("shorter than its 4-byte encapsulation header"));
}

TEST_CASE("rosbag: sensor_msgs/Imu from an independent writer (ROS 1, ROS 2 sqlite3 and MCAP) equals its CSV",
          "[rosbag]") {
  auto m = manifest();
  if (!m) NDTCU_SKIP("no bags written");
  const fs::path dir = fs::path(std::getenv("NDTCU_ROSBAG_DIR"));
  // write_bags.py --odometry: 60 samples at 200 Hz on /imu, and the same as sample_imu.csv.
  const std::vector<ImuSample> expected = read_imu_csv((dir / "sample_imu.csv").string());
  REQUIRE(expected.size() == 60);
  for (const char* name : {"sample_imu.bag", "sample_imu_sqlite3", "sample_imu_mcap"}) {
    INFO(name);
    const BagReader reader((dir / name).string());
    REQUIRE(is_imu_type(reader.topic("/imu").type));
    const auto& refs = reader.messages("/imu");
    REQUIRE(refs.size() == expected.size());
    for (std::size_t k = 0; k < refs.size(); ++k) {
      CAPTURE(k);
      const ImuMessage msg = reader.read_imu("/imu", k);
      CHECK(msg.frame_id == "imu_link");
      CHECK(msg.stamp_ns == refs[k].time_ns);
      CHECK(refs[k].time() == expected[k].time);
      CHECK(msg.sample.angular_velocity == expected[k].angular_velocity);
      CHECK(msg.sample.linear_acceleration == expected[k].linear_acceleration);
    }
  }
}

TEST_CASE("rosbag: sensor_msgs/Imu written beside the scans reads back bit for bit; ROS 1 by hand; bad values named",
          "[rosbag][unit]") {
  const fs::path dir = test::temp_dir("rosbag_imu") / "bag";
  std::vector<ImuSample> samples;
  for (int k = 0; k < 25; ++k) {
    ImuSample s;
    s.time = 1.5 + k * 0.005;
    s.angular_velocity = Eigen::Vector3d(0.01 * k, -std::sin(k * 0.7), 1.0 / (k + 1.0));
    s.linear_acceleration = Eigen::Vector3d(std::cos(k * 0.2), 0.125 * k, 9.80665);
    samples.push_back(s);
  }
  {
    McapBagWriter w(dir.string(), "/points", "lidar");
    w.add_imu_topic("/imu", "imu_link", 1e-6, 4e-4);
    CHECK_THROWS_WITH(w.add_imu_topic("/imu2", "imu_link"), Catch::Contains("has an IMU topic already"));
    std::size_t next = 0;
    for (int f = 0; f < 2; ++f) {
      const std::int64_t ns = 1'500'000'000 + f * 100'000'000;
      for (; next < samples.size() && std::llround(samples[next].time * 1e9) <= ns; ++next) {
        w.write_imu(std::llround(samples[next].time * 1e9), samples[next]);
      }
      w.write(ns, small_cloud(4, 0.5f * f));
    }
    for (; next < samples.size(); ++next) w.write_imu(std::llround(samples[next].time * 1e9), samples[next]);
    CHECK_THROWS_WITH(w.write_imu(1'000'000'000, samples[0]), Catch::Contains("message times must not decrease"));
    w.close();
  }
  const BagReader reader(dir.string());
  REQUIRE(is_imu_type(reader.topic("/imu").type));
  CHECK(reader.topic("/imu").type == "sensor_msgs/msg/Imu");
  CHECK(reader.info().messages == samples.size() + 2);
  const auto& refs = reader.messages("/imu");
  REQUIRE(refs.size() == samples.size());
  for (std::size_t k = 0; k < refs.size(); ++k) {
    CAPTURE(k);
    const ImuMessage m = reader.read_imu("/imu", k);
    CHECK(m.frame_id == "imu_link");
    CHECK(m.stamp_ns == refs[k].time_ns);
    CHECK(std::abs(refs[k].time() - samples[k].time) < 1e-12);
    CHECK(m.sample.angular_velocity == samples[k].angular_velocity);
    CHECK(m.sample.linear_acceleration == samples[k].linear_acceleration);
  }
  CHECK(reader.messages("/points").size() == 2);
  CHECK_THROWS_WITH(reader.read_imu("/points", 0),
                    Catch::Contains("topic /points holds sensor_msgs/") && Catch::Contains("not sensor_msgs/Imu"));
  const std::string yaml = test::read_bytes(dir / "metadata.yaml");
  CHECK(yaml.find("type: sensor_msgs/msg/Imu") != std::string::npos);
  CHECK(yaml.find("message_count: 27") != std::string::npos);

  // ROS 1 serialization by hand: seq, stamp, frame_id, orientation (4), its covariance (9),
  // angular_velocity (3), its covariance (9), linear_acceleration (3), its covariance (9).
  auto make = [](double wy, double az, int last_values = 9) {
    Msg msg;
    msg.put<std::uint32_t>(3);
    msg.put<std::uint32_t>(12);
    msg.put<std::uint32_t>(250);
    msg.str("imu");
    for (int i = 0; i < 13; ++i) msg.put<double>(i == 3 ? 1.0 : 0.0);
    for (double v : {0.5, wy, -0.25}) msg.put<double>(v);
    for (int i = 0; i < 9; ++i) msg.put<double>(0.0);
    for (double v : {1.0, 2.0, az}) msg.put<double>(v);
    for (int i = 0; i < last_values; ++i) msg.put<double>(0.0);
    return msg.b;
  };
  const ImuMessage m = decode_imu(make(0.75, 9.5), MessageEncoding::Ros1, "by hand");
  CHECK(m.stamp_ns == 12000000250);
  CHECK(m.frame_id == "imu");
  CHECK(m.sample.angular_velocity == Eigen::Vector3d(0.5, 0.75, -0.25));
  CHECK(m.sample.linear_acceleration == Eigen::Vector3d(1.0, 2.0, 9.5));
  CHECK_THROWS_WITH(decode_imu(make(std::nan(""), 9.5), MessageEncoding::Ros1, "by hand"),
                    Catch::Contains("by hand") && Catch::Contains("angular_velocity.y is nan"));
  CHECK_THROWS_WITH(decode_imu(make(0.0, std::numeric_limits<double>::infinity()), MessageEncoding::Ros1, "by hand"),
                    Catch::Contains("linear_acceleration.z is inf"));
  CHECK_THROWS_WITH(decode_imu(make(0.0, 9.5, 4), MessageEncoding::Ros1, "by hand"),
                    Catch::Contains("Imu message truncated in linear_acceleration_covariance"));
  // The CDR encoder's bytes decode to the sample (ROS 2, sqlite3 or MCAP alike).
  const ImuMessage c = decode_imu(encode_imu(7'000'000'001, "x", samples[3]), MessageEncoding::Cdr, "cdr");
  CHECK(c.stamp_ns == 7'000'000'001);
  CHECK(c.sample.angular_velocity == samples[3].angular_velocity);
  CHECK(c.sample.linear_acceleration == samples[3].linear_acceleration);
}

TEST_CASE("rosbag: a metadata.yaml listing one storage file twice is an error naming the file and the entries",
          "[rosbag][unit]") {
  const fs::path dir = test::temp_dir("rosbag_metadata_twice") / "bag";
  {
    McapBagWriter w(dir.string(), "/points", "lidar");
    for (int k = 0; k < 3; ++k) w.write(1'000'000'000 + k, small_cloud(4 + k, 0.5f * k));
    w.close();
  }
  REQUIRE(BagReader(dir.string()).messages("/points").size() == 3);
  const fs::path meta = dir / "metadata.yaml";
  const std::string text = test::read_bytes(meta);
  const std::string entry = "- bag_0.mcap\n";
  const auto at = text.find(entry);
  REQUIRE(at != std::string::npos);
  const std::string indent = text.substr(text.rfind('\n', at) + 1, at - text.rfind('\n', at) - 1);
  // The file three times (each scan was read three times), and once more under another
  // folder: entries are opened by their name in the bag's folder, so it is the same file.
  test::write_bytes(meta, text.substr(0, at) + entry + indent + entry + indent + entry + text.substr(at + entry.size()));
  CHECK_THROWS_WITH(BagReader(dir.string()),
                    meta.string() + ": relative_file_paths lists the storage file bag_0.mcap 3 times (entries 1, 2 and "
                                    "3): its messages would be read as many times; list each file once");
  test::write_bytes(meta, text.substr(0, at) + entry + indent + "- elsewhere/bag_0.mcap\n" + text.substr(at + entry.size()));
  CHECK_THROWS_WITH(BagReader(dir.string()), Catch::Contains("lists the storage file bag_0.mcap 2 times (entries 1 and 2)"));
}

TEST_CASE("rosbag: a chunk is decompressed to exactly the size it declares, neither less nor more", "[rosbag]") {
  auto m = manifest();
  if (!m) NDTCU_SKIP("no bags written");
  auto bag_path = [&](const std::string& name) {
    for (const auto& b : (*m)["bags"]) {
      if (b["name"] == name) return b["path"].get<std::string>();
    }
    FAIL("no bag " << name << " in the manifest");
    return std::string();
  };
  // The first chunk's declared size, shifted by `delta`: MCAP's uncompressed_size (the
  // third u64 of the chunk record), ROS 1's size=<u32> header field.
  const auto mcap_declared = [](std::string bytes, std::int64_t delta) {
    std::size_t pos = 8;
    while (static_cast<std::uint8_t>(bytes[pos]) != 0x06) {
      std::uint64_t length;
      std::memcpy(&length, bytes.data() + pos + 1, 8);
      pos += 9 + static_cast<std::size_t>(length);
    }
    std::uint64_t v;
    std::memcpy(&v, bytes.data() + pos + 9 + 16, 8);
    v = static_cast<std::uint64_t>(static_cast<std::int64_t>(v) + delta);
    std::memcpy(bytes.data() + pos + 9 + 16, &v, 8);
    return std::make_pair(bytes, v);
  };
  const auto ros1_declared = [](std::string bytes, std::int64_t delta) {
    const std::string field = std::string("\x09\x00\x00\x00", 4) + "size=";
    const auto at = bytes.find(field);
    REQUIRE(at != std::string::npos);
    std::uint32_t v;
    std::memcpy(&v, bytes.data() + at + field.size(), 4);
    v = static_cast<std::uint32_t>(static_cast<std::int64_t>(v) + delta);
    std::memcpy(bytes.data() + at + field.size(), &v, 4);
    return std::make_pair(bytes, static_cast<std::uint64_t>(v));
  };
  const fs::path zstd_dir = bag_path("sample_mcap_zstd");
  std::string zstd_file;
  for (const auto& e : fs::directory_iterator(zstd_dir)) {
    if (e.path().extension() == ".mcap") zstd_file = e.path().string();
  }
  REQUIRE(!zstd_file.empty());
  struct Case {
    std::string path, method;
    BagFormat format;
  };
  const Case cases[] = {{zstd_file, "zstd", BagFormat::Ros2Mcap},
                        {bag_path("sample_mcap_lz4"), "lz4", BagFormat::Ros2Mcap},
                        {bag_path("sample_ros1_bz2"), "bz2", BagFormat::Ros1},
                        {bag_path("sample_ros1_lz4"), "lz4", BagFormat::Ros1}};
  for (const Case& c : cases) {
    INFO(c.path);
    const std::string bytes = slurp(c.path);
    REQUIRE(BagReader::from_memory(bytes, "good", c.format).messages("/points").size() == 10);
    for (const std::int64_t delta : {std::int64_t{-1}, std::int64_t{1}, std::int64_t{1} << 29}) {
      INFO("declared size shifted by " << delta);
      const auto [bad, declared] = c.format == BagFormat::Ros1 ? ros1_declared(bytes, delta) : mcap_declared(bytes, delta);
      const std::string expected =
          delta < 0 ? c.method + " data: expands beyond the " + std::to_string(declared) + " bytes the bag declares"
                    : c.method + " data: expands to " + std::to_string(declared - static_cast<std::uint64_t>(delta)) +
                          " bytes, the bag declares " + std::to_string(declared);
      CHECK_THROWS_WITH(BagReader::from_memory(bad, "bad", c.format), Catch::Contains("chunk 0: " + expected));
    }
  }
}

TEST_CASE("rosbag: per-point time from PointCloud2, each sensor's field and unit; implausible ones reported",
          "[rosbag][unit]") {
  // ROS 1 by hand: x y z float32 and one time field `name` of PointField `datatype`, whose
  // value for point i is value(i) (written as that type).
  auto make = [](const std::string& name, std::uint8_t datatype, int n, double (*value)(int)) {
    const std::uint32_t size = datatype == 8 ? 8 : 4;
    const std::uint32_t step = 12 + size;
    Msg m;
    m.put<std::uint32_t>(0);
    m.put<std::uint32_t>(100);  // stamp 100 s
    m.put<std::uint32_t>(0);
    m.str("lidar");
    m.put<std::uint32_t>(1);
    m.put<std::uint32_t>(static_cast<std::uint32_t>(n));
    m.put<std::uint32_t>(4);
    const char* axes[] = {"x", "y", "z"};
    for (std::uint32_t f = 0; f < 3; ++f) {
      m.str(axes[f]);
      m.put<std::uint32_t>(4 * f);
      m.put<std::uint8_t>(7);
      m.put<std::uint32_t>(1);
    }
    m.str(name);
    m.put<std::uint32_t>(12);
    m.put<std::uint8_t>(datatype);
    m.put<std::uint32_t>(1);
    m.put<std::uint8_t>(0);
    m.put<std::uint32_t>(step);
    m.put<std::uint32_t>(step * static_cast<std::uint32_t>(n));
    m.put<std::uint32_t>(step * static_cast<std::uint32_t>(n));
    for (int i = 0; i < n; ++i) {
      m.put<float>(static_cast<float>(i));
      m.put<float>(1.0f);
      m.put<float>(2.0f);
      if (datatype == 6) m.put<std::uint32_t>(static_cast<std::uint32_t>(value(i)));
      else if (datatype == 7) m.put<float>(static_cast<float>(value(i)));
      else m.put<double>(value(i));
    }
    m.put<std::uint8_t>(1);
    return m.b;
  };
  struct Case {
    const char* name;
    std::uint8_t datatype;  // 6 UINT32, 7 FLOAT32, 8 FLOAT64
    double (*value)(int);
    TimeUnit unit;
    bool absolute;
  };
  const Case cases[] = {
      {"t", 6, [](int i) { return i * 1e6; }, TimeUnit::Nanoseconds, false},            // Ouster
      {"offset_time", 6, [](int i) { return i * 1e6; }, TimeUnit::Nanoseconds, false},  // Livox
      {"time", 7, [](int i) { return i * 1e-3; }, TimeUnit::Seconds, false},            // Velodyne
      {"timestamp", 8, [](int i) { return 1.7e9 + i * 1e-3; }, TimeUnit::Seconds, true},  // Hesai
      {"time_stamp", 8, [](int i) { return i * 1e-3; }, TimeUnit::Seconds, false},      // Autoware
  };
  for (const Case& k : cases) {
    CAPTURE(k.name);
    PointCloud2Info info;
    const PointCloud c = decode_point_cloud2(make(k.name, k.datatype, 50, k.value), MessageEncoding::Ros1, "m", {}, &info);
    REQUIRE(c.has_time());
    CHECK(info.time_field == k.name);
    CHECK(info.time_unit == k.unit);
    CHECK(info.time_absolute == k.absolute);
    for (int i = 0; i < 50; ++i) CHECK(double(c.time[i]) == Approx(i * 1e-3).margin(1e-6));
  }
  // All zero: the points are read, the times dropped and the reason kept.
  PointCloud2Info info;
  const PointCloud zero =
      decode_point_cloud2(make("t", 6, 50, [](int) { return 0.0; }), MessageEncoding::Ros1, "bag: topic /p: message 4",
                          {}, &info);
  CHECK(zero.size() == 50);
  CHECK_FALSE(zero.has_time());
  CHECK(info.time_field.empty());
  CHECK_THAT(info.time_dropped, Catch::Contains("every point has the same time"));
  // A field named by --point-time that the message lacks: an error naming the message.
  ReadOptions o;
  parse_point_time("ring:ns", o);
  CHECK_THROWS_WITH(decode_point_cloud2(make("t", 6, 5, [](int i) { return i * 1.0; }), MessageEncoding::Ros1,
                                        "bag: topic /p: message 4", o),
                    Catch::Contains("bag: topic /p: message 4") && Catch::Contains("no time field 'ring'"));

  // ROS 2: the writer's field t (float32 seconds) through CDR and an MCAP bag, bit for bit.
  PointCloud cloud = small_cloud(40, 0.0f);
  for (std::size_t i = 0; i < cloud.size(); ++i) cloud.time.push_back(0.0025f * static_cast<float>(i));
  const PointCloud back = decode_point_cloud2(encode_point_cloud2(5, "lidar", cloud), MessageEncoding::Cdr, "cdr", {}, &info);
  CHECK(info.time_field == "t");
  CHECK(back.time == cloud.time);
  CHECK(back.intensity == cloud.intensity);
  const fs::path dir = test::temp_dir("rosbag_point_time") / "bag";
  {
    McapBagWriter w(dir.string(), "/points", "lidar");
    w.write(1'000'000'000, cloud);
    w.close();
  }
  const BagReader reader(dir.string());
  CHECK(reader.read_point_cloud("/points", 0).time == cloud.time);
}

TEST_CASE("rosbag: per-point time from ROS 1, ROS 2 sqlite3 and MCAP bags of rosbags, each sensor's field and unit",
          "[rosbag]") {
  // tests/rosbag/write_time_bags.py: every field name sensors use, in its usual type and
  // unit, and the implausible cases, through each bag format.
  auto m = manifest("NDTCU_ROSBAG_TIME_DIR");
  if (!m) NDTCU_SKIP("no time bags written (NDTCU_ROSBAG_TIME_DIR unset or write_time_bags.py skipped)");
  const std::size_t messages = (*m)["messages"].get<std::size_t>(), points = (*m)["points"].get<std::size_t>();
  const auto unit_of = [](const std::string& u) {
    return u == "ns" ? TimeUnit::Nanoseconds : u == "ms" ? TimeUnit::Milliseconds : TimeUnit::Seconds;
  };
  std::set<std::string> names, formats;
  for (const auto& bag : (*m)["bags"]) {
    const std::string path = bag["path"], name = bag["name"], dropped = bag["dropped"];
    INFO(path);
    names.insert(name);
    formats.insert(bag["format"].get<std::string>());
    const BagReader reader(path);
    REQUIRE(reader.point_cloud_topic().messages == messages);
    for (std::size_t k = 0; k < messages; ++k) {
      INFO("message " << k);
      PointCloud2Info info;
      const PointCloud c = reader.read_point_cloud("/points", k, {}, &info);
      REQUIRE(c.size() == points);  // the points are read whatever their times
      if (!dropped.empty()) {
        CHECK_FALSE(c.has_time());
        CHECK(info.time_field.empty());
        CHECK_THAT(info.time_dropped, Catch::Contains(dropped));
        continue;
      }
      REQUIRE(c.has_time());
      CHECK(info.time_field == bag["field"].get<std::string>());
      CHECK(info.time_unit == unit_of(bag["unit"]));
      CHECK(info.time_absolute == bag["absolute"].get<bool>());
      CHECK(info.time_dropped.empty());
      const auto& times = bag["times"];
      REQUIRE(times.size() == points);
      // float32 seconds, and the absolute stamps' double difference at 1.7e9 s (2.4e-7 s).
      for (std::size_t i = 0; i < points; ++i) CHECK(double(c.time[i]) == Approx(times[i].get<double>()).margin(1e-6));
    }
    if (name == "override") {
      // --point-time: the other field, by name and unit; by name alone its float32 values
      // (0-99.6) are taken as seconds and dropped as no sweep's, said so.
      ReadOptions o;
      parse_point_time("rel_ms:ms", o);
      PointCloud2Info info;
      const PointCloud c = reader.read_point_cloud("/points", 1, o, &info);
      REQUIRE(c.has_time());
      CHECK(info.time_field == "rel_ms");
      CHECK(info.time_unit == TimeUnit::Milliseconds);
      for (std::size_t i = 0; i < points; ++i) {
        CHECK(double(c.time[i]) == Approx(bag["times"][i].get<double>()).margin(1e-6));
      }
      parse_point_time("rel_ms", o);
      CHECK_FALSE(reader.read_point_cloud("/points", 1, o, &info).has_time());
      CHECK_THAT(info.time_dropped, Catch::Contains("more than a sweep takes"));
      parse_point_time("none", o);
      CHECK_FALSE(reader.read_point_cloud("/points", 1, o, &info).has_time());
      parse_point_time("ring:ns", o);
      CHECK_THROWS_WITH(reader.read_point_cloud("/points", 1, o),
                        Catch::Contains("/points") && Catch::Contains("no time field 'ring'"));
    }
  }
  // Every case through every format (a manifest that lost some would pass the loop above).
  CHECK(names == std::set<std::string>{"t", "offset_time", "time", "time_stamp", "timestamp", "override", "zero", "long",
                                       "float32_stamps"});
  CHECK(formats == std::set<std::string>{"ros1", "ros2_sqlite3", "ros2_mcap"});
  CHECK((*m)["bags"].size() == names.size() * formats.size());
}
