// Every malformed input named in the IO contract gives IoError naming the file and the
// problem, never a crash, a hang, or an allocation the file cannot justify.
#include "../support/alloc_tracker.hpp"
#include "../support/pcd_builder.hpp"
#include "../support/test_support.hpp"

#include "io/file_contents.hpp"

#include <ndtcu/io.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <random>
#include <thread>

using namespace ndtcu;
using ndtcu::test::make_pcd;
using ndtcu::test::PcdSpec;

namespace {

PcdSpec xyz_spec(const char* encoding, int n = 100) {
  PcdSpec s;
  s.encoding = encoding;
  s.fields = {{"x", 'F', 4, 1}, {"y", 'F', 4, 1}, {"z", 'F', 4, 1}};
  for (int i = 0; i < n; ++i) s.rows.push_back({1.0 * i, 2.0, 3.0});
  return s;
}

// Writes `bytes` to a file named `file` and expects read_point_cloud to throw IoError
// whose path is the file and whose reason contains `expected`; also bounds the largest
// allocation by what the file size justifies (a few times the file plus 1 MiB).
void expect_io_error(const std::string& file, const std::string& bytes, const std::string& expected) {
  auto dir = ndtcu::test::temp_dir("bad_input");
  auto path = (dir / file).string();
  ndtcu::test::write_bytes(path, bytes);
  CAPTURE(file, expected);
  ndtcu::test::reset_largest_allocation();
  try {
    read_point_cloud(path);
    FAIL("no IoError thrown");
  } catch (const IoError& e) {
    CAPTURE(e.what());
    CHECK(e.path() == path);
    CHECK(std::string(e.what()).find(path) == 0);
    CHECK_THAT(e.reason(), Catch::Contains(expected));
  }
  CHECK(ndtcu::test::largest_allocation() <= 8 * bytes.size() + (1u << 20));
}

}  // namespace

TEST_CASE("bad input: truncated files", "[unit][io][bad]") {
  for (const char* enc : {"ascii", "binary", "binary_compressed"}) {
    std::string full = make_pcd(xyz_spec(enc));
    expect_io_error(std::string("trunc_") + enc + ".pcd", full.substr(0, full.size() - 20), "truncated");
  }
  std::string header_only = make_pcd(xyz_spec("binary"));
  expect_io_error("header_cut.pcd", header_only.substr(0, 60), "ends before its DATA line");
}

TEST_CASE("bad input: POINTS disagreeing with WIDTH x HEIGHT", "[unit][io][bad]") {
  PcdSpec s = xyz_spec("binary", 12);
  s.width = 4;
  s.height = 2;
  s.points = 12;
  expect_io_error("points_mismatch.pcd", make_pcd(s), "POINTS (12) disagrees with WIDTH x HEIGHT (4 x 2 = 8)");
}

TEST_CASE("bad input: unknown TYPE or SIZE", "[unit][io][bad]") {
  std::string good = make_pcd(xyz_spec("ascii", 2));
  std::string bad_type = good;
  bad_type.replace(bad_type.find("TYPE F F F"), 10, "TYPE F Q F");
  expect_io_error("bad_type.pcd", bad_type, "field 'y' has TYPE 'Q'");
  std::string bad_size = good;
  bad_size.replace(bad_size.find("SIZE 4 4 4"), 10, "SIZE 4 4 3");
  expect_io_error("bad_size.pcd", bad_size, "field 'z' has SIZE 3");
  std::string half = good;
  half.replace(half.find("SIZE 4 4 4"), 10, "SIZE 2 4 4");
  expect_io_error("half_float.pcd", half, "F needs SIZE 4 or 8");
  std::string short_size = good;
  short_size.replace(short_size.find("SIZE 4 4 4"), 10, "SIZE 4 4");
  expect_io_error("short_size.pcd", short_size, "SIZE lists 2 values but FIELDS names 3");
}

TEST_CASE("bad input: no x, y or z field", "[unit][io][bad]") {
  PcdSpec s;
  s.fields = {{"x", 'F', 4, 1}, {"b", 'F', 4, 1}, {"c", 'F', 4, 1}};
  s.rows = {{1, 2, 3}};
  expect_io_error("no_yz.pcd", make_pcd(s), "PCD has no field y, z (fields: x b c)");
}

TEST_CASE("bad input: corrupt LZF block", "[unit][io][bad]") {
  std::string pcd = make_pcd(xyz_spec("binary_compressed", 200));
  std::size_t body = ndtcu::test::pcd_body_offset(pcd);
  std::string backref = pcd;
  // A back-reference as the very first LZF instruction points before the output start.
  backref[body + 8] = static_cast<char>(0xE0);
  expect_io_error("lzf_backref.pcd", backref, "corrupt LZF block");
  std::string sizes = pcd;
  std::uint32_t wrong = 12345;
  std::memcpy(&sizes[body + 4], &wrong, 4);
  expect_io_error("lzf_size.pcd", sizes, "uncompressed size 12345 disagrees");
  std::string overlong = pcd;
  std::uint32_t huge = 0x7fffffff;
  std::memcpy(&overlong[body], &huge, 4);
  expect_io_error("lzf_overlong.pcd", overlong, "declares 2147483647 compressed bytes");
}

TEST_CASE("bad input: a header claiming 10^12 points allocates nothing large", "[unit][io][bad]") {
  for (const char* enc : {"ascii", "binary", "binary_compressed"}) {
    PcdSpec s = xyz_spec(enc, 10);
    s.width = 1000000000000ull;
    s.points = 1000000000000ull;
    std::string expected = std::string(enc) == "binary_compressed" ? "disagrees" : "truncated";
    expect_io_error(std::string("huge_") + enc + ".pcd", make_pcd(s), expected);
  }
  // A compressed body whose sizes agree with a large header but that LZF cannot hold.
  PcdSpec s = xyz_spec("binary_compressed", 10);
  s.width = 100000000;
  s.points = 100000000;
  std::string pcd = make_pcd(s);
  std::size_t body = ndtcu::test::pcd_body_offset(pcd);
  std::uint32_t claimed = 1200000000;
  std::memcpy(&pcd[body + 4], &claimed, 4);
  expect_io_error("huge_lzf.pcd", pcd, "cannot hold the 1200000000 bytes");
}

TEST_CASE("bad input: empty file, directory, missing file, unknown extension", "[unit][io][bad]") {
  expect_io_error("empty.pcd", "", "empty file");
  expect_io_error("empty.ply", "", "empty file");
  expect_io_error("empty.bin", "", "empty file");
  auto dir = ndtcu::test::temp_dir("bad_dir");
  std::filesystem::create_directories(dir / "cloud.pcd");
  try {
    read_point_cloud((dir / "cloud.pcd").string());
    FAIL("no IoError for a directory");
  } catch (const IoError& e) {
    CHECK_THAT(e.reason(), Catch::Contains("is a directory"));
  }
  try {
    read_point_cloud((dir / "missing.pcd").string());
    FAIL("no IoError for a missing file");
  } catch (const IoError& e) {
    CHECK(e.path() == (dir / "missing.pcd").string());
    CHECK_THAT(e.reason(), Catch::Contains("no such file"));
  }
  expect_io_error("cloud.xyz", "1 2 3\n", "unknown point-cloud extension 'xyz'");
}

namespace {

// The file whose size the reader has just taken, and what to do to it before the read.
std::string g_change_path;
std::uintmax_t g_change_to_size = 0;

void change_file_size(const std::string& path) {
  if (path == g_change_path) std::filesystem::resize_file(path, g_change_to_size);
}

struct ResetReadHook {
  ~ResetReadHook() { detail::file_contents_before_read_hook = nullptr; }
};

}  // namespace

TEST_CASE("bad input: a file that shrinks or grows while it is read is an IoError naming it", "[unit][io][bad]") {
  // `ndtcu info big.pcd & truncate -s 1000 big.pcd` once died of SIGBUS (the file was
  // memory-mapped); the reader now copies the bytes and checks the size did not change.
  auto dir = ndtcu::test::temp_dir("changing_file");
  const std::string path = (dir / "big.pcd").string();
  const std::string bytes = make_pcd(xyz_spec("binary", 100000));
  ResetReadHook reset;
  detail::file_contents_before_read_hook = change_file_size;
  g_change_path = path;
  for (std::uintmax_t new_size : {std::uintmax_t{1000}, std::uintmax_t{0}, bytes.size() + 4096}) {
    CAPTURE(new_size);
    ndtcu::test::write_bytes(path, bytes);
    g_change_to_size = new_size;
    try {
      read_point_cloud(path);
      FAIL("no IoError");
    } catch (const IoError& e) {
      CAPTURE(e.what());
      CHECK(e.path() == path);
      CHECK_THAT(e.reason(), Catch::Contains("changed while it was read (" + std::to_string(bytes.size()) +
                                             " bytes when opened"));
    }
  }
  detail::file_contents_before_read_hook = nullptr;

  // The real race, a truncation at a random moment of the read: the cloud, or an IoError
  // naming the file, never a signal.
  std::mt19937 rng(7);
  int clouds = 0, errors = 0;
  for (int round = 0; round < 30; ++round) {
    ndtcu::test::write_bytes(path, bytes);
    const auto delay = std::chrono::microseconds(std::uniform_int_distribution<int>(0, 3000)(rng));
    std::thread truncater([&] {
      std::this_thread::sleep_for(delay);
      std::filesystem::resize_file(path, 1000);
    });
    try {
      const PointCloud c = read_point_cloud(path);
      CHECK(c.size() == 100000u);
      ++clouds;
    } catch (const IoError& e) {
      CHECK(e.path() == path);
      ++errors;
    }
    truncater.join();
  }
  CHECK(clouds + errors == 30);
}

TEST_CASE("bad input: a FIFO is refused, not waited on", "[unit][io][bad]") {
  auto dir = ndtcu::test::temp_dir("fifo");
  const std::string path = (dir / "cloud.pcd").string();
  REQUIRE(::mkfifo(path.c_str(), 0600) == 0);
  try {
    read_point_cloud(path);
    FAIL("no IoError for a FIFO");
  } catch (const IoError& e) {
    CHECK(e.path() == path);
    CHECK_THAT(e.reason(), Catch::Contains("is not a regular file"));
  }
}

TEST_CASE("bad input: malformed headers and values", "[unit][io][bad]") {
  expect_io_error("garbage.pcd", std::string("\x89PNG\r\n\x1a\n", 8) + std::string(100, 'x'), "not a PCD file");
  expect_io_error("neg_width.pcd", "FIELDS x y z\nWIDTH -5\nPOINTS 1\nDATA ascii\n1 2 3\n", "WIDTH value '-5'");
  expect_io_error("bad_data.pcd", "FIELDS x y z\nWIDTH 1\nPOINTS 1\nDATA gzip\n", "DATA 'gzip'");
  expect_io_error("bad_value.pcd", "FIELDS x y z\nWIDTH 1\nPOINTS 1\nDATA ascii\n1 two 3\n", "'two' is not a number");
  expect_io_error("few_values.pcd", "FIELDS x y z\nWIDTH 1\nPOINTS 1\nDATA ascii\n1 2\n", "has 2 values");
  expect_io_error("zero_count.pcd", "FIELDS x y z\nCOUNT 1 0 1\nWIDTH 1\nDATA ascii\n1 2 3\n", "COUNT 0");
}

TEST_CASE("bad input: PLY", "[unit][io][bad]") {
  const std::string head = "ply\nformat binary_little_endian 1.0\nelement vertex 10\nproperty float x\n"
                           "property float y\nproperty float z\nend_header\n";
  expect_io_error("trunc.ply", head + std::string(50, '\0'), "truncated");
  expect_io_error("not.ply", "plx\nformat ascii 1.0\n", "not a PLY file");
  expect_io_error("no_end.ply", "ply\nformat ascii 1.0\nelement vertex 1\nproperty float x\n", "no end_header");
  expect_io_error("no_vertex.ply", "ply\nformat ascii 1.0\nelement face 0\nproperty list uchar int vertex_indices\nend_header\n",
                  "no 'vertex' element");
  expect_io_error("no_z.ply", "ply\nformat ascii 1.0\nelement vertex 1\nproperty float x\nproperty float y\nend_header\n1 2\n",
                  "no property z");
  expect_io_error("bad_type.ply", "ply\nformat ascii 1.0\nelement vertex 1\nproperty float128 x\nend_header\n",
                  "unknown PLY type 'float128'");
  expect_io_error("bad_format.ply", "ply\nformat binary_middle_endian 1.0\nend_header\n", "unknown PLY format");
  std::string huge = "ply\nformat binary_little_endian 1.0\nelement vertex 1000000000000\nproperty float x\n"
                     "property float y\nproperty float z\nend_header\n" + std::string(120, '\0');
  expect_io_error("huge.ply", huge, "declares 1000000000000 vertices");
  std::string huge_ascii = "ply\nformat ascii 1.0\nelement vertex 1000000000000\nproperty float x\nproperty float y\n"
                           "property float z\nend_header\n1 2 3\n";
  expect_io_error("huge_ascii.ply", huge_ascii, "truncated");
  std::string list = "ply\nformat binary_little_endian 1.0\nelement face 1\nproperty list uint int idx\n"
                     "element vertex 1\nproperty float x\nproperty float y\nproperty float z\nend_header\n";
  list += std::string("\xff\xff\xff\x7f", 4) + std::string(20, '\0');
  expect_io_error("huge_list.ply", list, "claims 2147483647 items");
}

TEST_CASE("bad input: KITTI .bin of the wrong size", "[unit][io][bad]") {
  expect_io_error("odd.bin", std::string(33, '\0'), "33 bytes is not a multiple of 16");
}

TEST_CASE("bad input: an ascii body holds one point a line, with the values its fields declare", "[unit][io][bad]") {
  // PLY read values across lines: "1 2 3 4 5\n1 2 3\n" gave two points, (1 2 3) and (4 5 1).
  const std::string ply = "ply\nformat ascii 1.0\nelement vertex 2\nproperty float x\nproperty float y\n"
                          "property float z\nend_header\n";
  expect_io_error("long_line.ply", ply + "1 2 3 4 5\n1 2 3\n",
                  "line 8: vertex 0 has 5 values, more than its properties take (3); an ascii PLY holds one record a line");
  expect_io_error("short_line.ply", ply + "1 2\n3 4 5\n6 7 8\n", "line 8: vertex 0 ends after 2 values, before property 'z'");
  expect_io_error("bad_value.ply", ply + "1 2 3\n4 five 6\n", "line 9: vertex 1: property 'y' 'five' is not a number");
  // Records of the elements before the vertices are lines too, lists included.
  const std::string faces = "ply\nformat ascii 1.0\nelement face 1\nproperty list uchar int idx\nelement vertex 1\n"
                            "property float x\nproperty float y\nproperty float z\nend_header\n";
  expect_io_error("face_line.ply", faces + "3 0 1\n2 1 2 3\n",
                  "line 10: element 'face' record 0: list property 'idx' claims 3 items, the line holds 2 more values");
  expect_io_error("face_long.ply", faces + "2 0 1 7\n1 2 3\n", "line 10: element 'face' record 0 has 4 values");
  // PCD: a line with more values than the fields was read as a point, the rest ignored.
  expect_io_error("long_line.pcd", "FIELDS x y z\nWIDTH 2\nPOINTS 2\nDATA ascii\n1 2 3 4\n5 6 7\n",
                  "line 5: ascii point 0 has more than 3 values; the fields need 3 on each line");
  expect_io_error("short_line.pcd", "FIELDS x y z intensity\nWIDTH 2\nPOINTS 2\nDATA ascii\n1 2 3 4\n5 6 7\n",
                  "line 6: ascii point 1 has 3 values; the fields need 4 on each line");
  expect_io_error("value.pcd", "# c\nFIELDS x y z\nWIDTH 2\nPOINTS 2\nDATA ascii\n1 2 3\n\n5 six 7\n",
                  "line 8: ascii point 1: 'six' is not a number");

  // Blank lines between points are passed over, in both formats.
  auto dir = ndtcu::test::temp_dir("ascii_lines");
  ndtcu::test::write_bytes(dir / "blank.ply", ply + "1 2 3\n\n  \n4 5 6\n");
  ndtcu::test::write_bytes(dir / "blank.pcd", "FIELDS x y z\nWIDTH 2\nPOINTS 2\nDATA ascii\n1 2 3\n\n4 5 6\n");
  for (const char* name : {"blank.ply", "blank.pcd"}) {
    const PointCloud c = read_point_cloud((dir / name).string());
    REQUIRE(c.size() == 2u);
    CHECK(c.points[1] == Eigen::Vector3f(4, 5, 6));
  }
}

TEST_CASE("text headers: a UTF-8 byte-order mark at the start of the file is skipped", "[unit][io]") {
  // It was "not a PCD file: unexpected header line starting with '\xEF\xBB\xBFVERSION'" (and
  // "the first line is not 'ply'").
  const std::string bom = "\xEF\xBB\xBF";
  auto dir = ndtcu::test::temp_dir("bom");
  ndtcu::test::write_bytes(dir / "ascii.pcd", bom + "VERSION 0.7\nFIELDS x y z\nWIDTH 1\nPOINTS 1\nDATA ascii\n1 2 3\n");
  ndtcu::test::write_bytes(dir / "binary.pcd", bom + make_pcd(xyz_spec("binary", 3)));
  ndtcu::test::write_bytes(dir / "ascii.ply", bom + "ply\nformat ascii 1.0\nelement vertex 1\nproperty float x\n"
                                                    "property float y\nproperty float z\nend_header\n1 2 3\n");
  for (const char* name : {"ascii.pcd", "ascii.ply"}) {
    CAPTURE(name);
    const PointCloud c = read_point_cloud((dir / name).string());
    REQUIRE(c.size() == 1u);
    CHECK(c.points[0] == Eigen::Vector3f(1, 2, 3));
  }
  const PointCloud binary = read_point_cloud((dir / "binary.pcd").string());
  REQUIRE(binary.size() == 3u);
  CHECK(binary.points[2] == Eigen::Vector3f(2, 2, 3));
  // An ascii error names the line as a text editor numbers it.
  expect_io_error("bom_line.pcd", bom + "FIELDS x y z\nWIDTH 1\nPOINTS 1\nDATA ascii\n1 2\n", "line 5: ascii point 0 has 2 values");
}

namespace {

// What the reader's after-read hook does to the file it names: `g_rewrite` in place at
// `g_rewrite_at`, with its modification time set back to what it was.
std::string g_rewrite;
std::size_t g_rewrite_at = 0;

void rewrite_in_place_keeping_mtime(const std::string& path) {
  struct stat before {};
  REQUIRE(::stat(path.c_str(), &before) == 0);
  const int fd = ::open(path.c_str(), O_WRONLY);
  REQUIRE(fd >= 0);
  REQUIRE(::pwrite(fd, g_rewrite.data(), g_rewrite.size(), static_cast<off_t>(g_rewrite_at)) ==
          static_cast<ssize_t>(g_rewrite.size()));
  const struct timespec times[2] = {before.st_atim, before.st_mtim};
  REQUIRE(::futimens(fd, times) == 0);
  ::close(fd);
}

// The bytes of a mapping of the file (MAP_SHARED) that the after-read hook changes: a page
// already written through the mapping takes later writes without a fault, so without a new
// modification or change time. A rewrite the times cannot show.
char* g_mapped = nullptr;
std::size_t g_mapped_at = 0;  // the byte changed: the last, a float's, so the file stays a PCD

void write_through_mapping(const std::string&) { g_mapped[g_mapped_at] ^= 0x01; }

struct ResetAfterReadHook {
  ~ResetAfterReadHook() {
    detail::file_contents_after_read_hook = nullptr;
    detail::file_contents_before_pause_hook = nullptr;
  }
};

int g_pauses = 0;
void count_pause(const std::string&) { ++g_pauses; }
void write_through_mapping_at_pause(const std::string& path) {
  ++g_pauses;
  write_through_mapping(path);
}

}  // namespace

TEST_CASE("bad input: a file rewritten in place while it is read is an IoError, whatever its times say",
          "[unit][io][bad]") {
  // Rewritten in place (same size) while being read, a file came back half old, half new in
  // 11 of 250 reads, although its modification time was checked: a write stamps the time
  // when it starts and not again within the clock's tick.
  auto dir = ndtcu::test::temp_dir("rewritten_file");
  const std::string path = (dir / "map.pcd").string();
  const std::string bytes = make_pcd(xyz_spec("binary", 10000));
  ResetAfterReadHook reset;

  SECTION("its modification time set back") {
    ndtcu::test::write_bytes(path, bytes);
    g_rewrite = std::string(4000, '\x7f');
    g_rewrite_at = bytes.size() / 2;
    detail::file_contents_after_read_hook = rewrite_in_place_keeping_mtime;
    try {
      read_point_cloud(path);
      FAIL("no IoError");
    } catch (const IoError& e) {
      CHECK(e.path() == path);
      CHECK_THAT(e.reason(), Catch::Contains("the file changed while it was read (" + std::to_string(bytes.size()) +
                                             " bytes when opened"));
    }
  }

  SECTION("through a mapping, with no new time at all") {
    ndtcu::test::write_bytes(path, bytes);
    const int fd = ::open(path.c_str(), O_RDWR);
    REQUIRE(fd >= 0);
    void* map = ::mmap(nullptr, bytes.size(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    REQUIRE(map != MAP_FAILED);
    g_mapped = static_cast<char*>(map);
    g_mapped_at = bytes.size() - 1;
    write_through_mapping(path);  // the page's first write: its fault stamps the times now
    // Modified an hour ago, by its time (just now, it would be a file being written).
    struct stat st {};
    REQUIRE(::fstat(fd, &st) == 0);
    struct timespec times[2] = {st.st_atim, st.st_mtim};
    times[1].tv_sec -= 3600;
    REQUIRE(::futimens(fd, times) == 0);
    detail::file_contents_after_read_hook = write_through_mapping;
    try {
      read_point_cloud(path);
      FAIL("no IoError");
    } catch (const IoError& e) {
      CHECK(e.path() == path);
      // The times are those of the first write: only a second read sees the change.
      CHECK_THAT(e.reason(), Catch::Contains("the file changed while it was read") &&
                                 Catch::Contains("a second read finds other bytes from byte " +
                                                 std::to_string(bytes.size() - 1)));
    }
    ::munmap(map, bytes.size());
    ::close(fd);
  }

  SECTION("last modified long ago, its modification time set back after the rewrite") {
    // No second read for a file no one holds open for writing and last modified more than a
    // second before: its status-change time shows the rewrite.
    ndtcu::test::write_bytes(path, bytes);
    struct stat st {};
    REQUIRE(::stat(path.c_str(), &st) == 0);
    struct timespec times[2] = {st.st_atim, st.st_mtim};
    times[1].tv_sec -= 3600;
    REQUIRE(::utimensat(AT_FDCWD, path.c_str(), times, 0) == 0);
    g_rewrite = std::string(4000, '\x7f');
    g_rewrite_at = bytes.size() / 2;
    detail::file_contents_after_read_hook = rewrite_in_place_keeping_mtime;
    try {
      read_point_cloud(path);
      FAIL("no IoError");
    } catch (const IoError& e) {
      CHECK_THAT(e.reason(), Catch::Contains("the file changed while it was read (" + std::to_string(bytes.size()) +
                                             " bytes when opened, then modified)"));
    }
  }

  // Unchanged, the same file reads as before.
  detail::file_contents_after_read_hook = nullptr;
  ndtcu::test::write_bytes(path, bytes);
  CHECK(read_point_cloud(path).size() == 10000u);
}

TEST_CASE("bad input: a file open for writing elsewhere is refused while it is being written, checked again after a pause"
          " otherwise", "[unit][io][bad]") {
  // Two reads agree on half a write when the writer was stopped in the middle of it (by the
  // scheduler, or the kernel's throttling of dirty pages) while both ran: under a busy writer
  // that rewrote the file in place, 16 of 150 reads still came back half old, half new.
  auto dir = ndtcu::test::temp_dir("written_file");
  const std::string path = (dir / "map.pcd").string();
  const std::string bytes = make_pcd(xyz_spec("binary", 10000));
  ndtcu::test::write_bytes(path, bytes);
  ResetAfterReadHook reset;
  g_pauses = 0;
  detail::file_contents_before_pause_hook = count_pause;

  // Closed by its writer: no pause where the kernel can say so (a read lease granted);
  // where it cannot, a file modified in the last 2 s is paused for too.
  {
    const int probe = ::open(path.c_str(), O_RDONLY);
    REQUIRE(probe >= 0);
    const bool leases = ::fcntl(probe, F_SETLEASE, F_RDLCK) == 0;
    if (leases) ::fcntl(probe, F_SETLEASE, F_UNLCK);
    ::close(probe);
    CHECK(read_point_cloud(path).size() == 10000u);
    CHECK(g_pauses == (leases ? 0 : 1));
    if (!leases) NDTCU_SKIP("this file system grants no read lease: whether a file is open for writing is unknown");
  }

  // Held open for writing and just modified: it is being written.
  const int fd = ::open(path.c_str(), O_RDWR);
  REQUIRE(fd >= 0);
  void* map = ::mmap(nullptr, bytes.size(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  REQUIRE(map != MAP_FAILED);
  g_mapped = static_cast<char*>(map);
  g_mapped_at = bytes.size() - 1;
  write_through_mapping(path);  // the page's first write stamps the times now
  try {
    read_point_cloud(path);
    FAIL("no IoError");
  } catch (const IoError& e) {
    CHECK(e.path() == path);
    CHECK_THAT(e.reason(), Catch::Contains("the file is being written: it is open for writing elsewhere and was "
                                           "modified") &&
                               Catch::Contains("s ago; read it once it is complete"));
  }

  // Held open, last modified an hour ago, and changed during the pause through the mapping
  // (its page written already: no new time): the two reads agree, the check after the pause
  // does not.
  struct stat st {};
  REQUIRE(::fstat(fd, &st) == 0);
  struct timespec times[2] = {st.st_atim, st.st_mtim};
  times[1].tv_sec -= 3600;
  REQUIRE(::futimens(fd, times) == 0);
  g_pauses = 0;
  detail::file_contents_before_pause_hook = write_through_mapping_at_pause;
  try {
    read_point_cloud(path);
    FAIL("no IoError");
  } catch (const IoError& e) {
    CHECK(e.path() == path);
    CHECK_THAT(e.reason(), Catch::Contains("a second read finds other bytes from byte " + std::to_string(bytes.size() - 1)));
  }
  CHECK(g_pauses == 1);
  // Held open, not modified lately, unchanged: read, after the pause.
  detail::file_contents_before_pause_hook = count_pause;
  g_pauses = 0;
  CHECK(read_point_cloud(path).size() == 10000u);
  CHECK(g_pauses == 1);
  ::munmap(map, bytes.size());
  ::close(fd);
}

TEST_CASE("bad input: rows or bytes beyond what the header declares, values their type cannot hold, fields named "
          "twice or counted wrong",
          "[unit][io][bad]") {
  // PCD: a row more than POINTS, bytes after the binary or compressed body.
  expect_io_error("extra_row.pcd", "FIELDS x y z\nWIDTH 1\nPOINTS 1\nDATA ascii\n1 2 3\n4 5 6\n",
                  "line 6: a row after the 1 points the header declares");
  expect_io_error("trailing_binary.pcd", make_pcd(xyz_spec("binary", 4)) + "junk",
                  "4 bytes follow the 4 points of 12 bytes the header declares");
  {
    // After an LZF block, bytes are read past as PCL reads them: files PCL wrote carry them.
    const std::string path = (ndtcu::test::temp_dir("bad_input_trailing_lzf") / "trailing.pcd").string();
    ndtcu::test::write_bytes(path, make_pcd(xyz_spec("binary_compressed", 4)) + "junk");
    CHECK(read_point_cloud(path).size() == 4u);
  }
  // Ascii values outside their integer type: an int8 of 300, a uint8 of -1, a fraction.
  expect_io_error("int8.pcd", "FIELDS x y z\nSIZE 4 4 1\nTYPE F F I\nWIDTH 1\nDATA ascii\n1 2 300\n",
                  "line 6: ascii point 0: field 'z': '300' is not a value of its type int8");
  expect_io_error("uint8.pcd", "FIELDS x y z intensity\nSIZE 4 4 4 1\nTYPE F F F U\nWIDTH 1\nDATA ascii\n1 2 3 -1\n",
                  "field 'intensity': '-1' is not a value of its type uint8");
  expect_io_error("fraction.pcd", "FIELDS x y z\nSIZE 2 4 4\nTYPE I F F\nWIDTH 1\nDATA ascii\n1.5 2 3\n",
                  "field 'x': '1.5' is not a value of its type int16");
  // A field named twice; a coordinate of 0 or 3 values.
  expect_io_error("twice.pcd", "FIELDS x x y z\nWIDTH 1\nDATA ascii\n1 2 3 4\n", "FIELDS names 'x' twice (fields 1 and 2)");
  expect_io_error("count3.pcd", "FIELDS x y z\nCOUNT 3 1 1\nWIDTH 1\nDATA ascii\n1 2 3 4 5\n",
                  "field 'x' has COUNT 3; x, y and z hold one value each");
  expect_io_error("count0.pcd", "FIELDS x y z\nCOUNT 1 1 0\nWIDTH 1\nDATA ascii\n1 2\n", "field 'z' has COUNT 0");

  // PLY: the same, in its own terms.
  const std::string ascii = "ply\nformat ascii 1.0\nelement vertex 1\nproperty float x\nproperty float y\n"
                            "property char z\nend_header\n";
  expect_io_error("extra_row.ply", ascii + "1 2 3\n4 5 6\n", "line 9: a record after the last element");
  expect_io_error("int8.ply", ascii + "1 2 300\n", "line 8: vertex 0: property 'z' '300' is not a value of its type int8");
  const std::string uchar = "ply\nformat ascii 1.0\nelement vertex 1\nproperty float x\nproperty float y\n"
                            "property float z\nproperty uchar intensity\nend_header\n";
  expect_io_error("uint8.ply", uchar + "1 2 3 -1\n", "property 'intensity' '-1' is not a value of its type uint8");
  const std::string twice = "ply\nformat ascii 1.0\nelement vertex 1\nproperty float x\nproperty float x\n"
                            "property float y\nproperty float z\nend_header\n1 2 3 4\n";
  expect_io_error("twice.ply", twice, "vertex element names property 'x' twice (properties 1 and 2)");
  std::string binary = "ply\nformat binary_little_endian 1.0\nelement vertex 2\nproperty float x\nproperty float y\n"
                       "property float z\nend_header\n";
  binary += std::string(24, '\0');
  expect_io_error("trailing.ply", binary + "xy", "2 bytes follow the last element the header declares");
  // Elements after the vertices (a mesh's faces) are read past, then checked the same way.
  const std::string mesh = "ply\nformat ascii 1.0\nelement vertex 3\nproperty float x\nproperty float y\n"
                           "property float z\nelement face 1\nproperty list uchar int vertex_indices\nend_header\n"
                           "0 0 0\n1 0 0\n0 1 0\n3 0 1 2\n";
  expect_io_error("mesh_extra.ply", mesh + "3 0 1 2\n", "line 14: a record after the last element");

  // What stays readable: blank lines at the end, a mesh's faces, a binary body to its last byte.
  auto dir = ndtcu::test::temp_dir("exact_bodies");
  ndtcu::test::write_bytes(dir / "mesh.ply", mesh + "\n\n");
  ndtcu::test::write_bytes(dir / "blank_end.pcd", "FIELDS x y z\nWIDTH 1\nPOINTS 1\nDATA ascii\n1 2 3\n\n  \n");
  ndtcu::test::write_bytes(dir / "exact.ply", binary);
  ndtcu::test::write_bytes(dir / "exact.pcd", make_pcd(xyz_spec("binary_compressed", 4)));
  ndtcu::test::write_bytes(dir / "padding.pcd", "FIELDS x _ _ y z\nWIDTH 1\nDATA ascii\n1 0 0 2 3\n");
  CHECK(read_point_cloud((dir / "mesh.ply").string()).size() == 3u);
  CHECK(read_point_cloud((dir / "blank_end.pcd").string()).size() == 1u);
  CHECK(read_point_cloud((dir / "exact.ply").string()).size() == 2u);
  CHECK(read_point_cloud((dir / "exact.pcd").string()).size() == 4u);
  CHECK(read_point_cloud((dir / "padding.pcd").string()).size() == 1u);
}
