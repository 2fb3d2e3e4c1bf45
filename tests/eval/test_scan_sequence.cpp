// Scan sequences: the times their names and lists give, and the times they refuse.
#include "../support/test_support.hpp"

#include <ndtcu/error.hpp>
#include <ndtcu/io.hpp>
#include <ndtcu/scan_sequence.hpp>

#include <filesystem>
#include <string>
#include <vector>

using namespace ndtcu;
namespace fs = std::filesystem;

namespace {

// A folder holding one-point scans of the given names.
fs::path folder_of(const std::string& name, const std::vector<std::string>& files) {
  const fs::path dir = test::temp_dir(name);
  PointCloud one;
  one.points.emplace_back(1.f, 2.f, 3.f);
  for (const auto& f : files) write_point_cloud((dir / f).string(), one);
  return dir;
}

}  // namespace

TEST_CASE("time-stamp names are read in seconds, milliseconds, microseconds or nanoseconds", "[unit][eval]") {
  // A recorder's names in milliseconds were read as frame numbers, at n x 0.1 s.
  const auto ms = list_scans(folder_of("names_ms", {"1630577758669.pcd", "1630577758569.pcd"}).string());
  REQUIRE(ms.size() == 2);
  CHECK(fs::path(ms[0].path).filename() == "1630577758569.pcd");
  CHECK(ms[0].time == Approx(1630577758.569).margin(1e-6));
  CHECK(ms[1].time == Approx(1630577758.669).margin(1e-6));
  const auto us = list_scans(folder_of("names_us", {"1630577758569490.pcd", "1630577758669491.pcd"}).string());
  CHECK(us[0].time == Approx(1630577758.569490).margin(1e-6));
  CHECK(us[1].time - us[0].time == Approx(0.100001).margin(1e-6));
  const auto ns = list_scans(folder_of("names_ns", {"1630577758569490123.pcd", "1630577758669490124.pcd"}).string());
  CHECK(ns[0].time == Approx(1630577758.569490123).margin(1e-6));
  CHECK(ns[1].time - ns[0].time == Approx(0.1).margin(1e-6));
  const auto s = list_scans(folder_of("names_s", {"1630577758.pcd", "1630577759.pcd"}).string());
  CHECK(s[1].time == 1630577759.0);
  // Decimals after any of them; up to 10 digits before a point are seconds, as before.
  const auto decimals =
      list_scans(folder_of("names_decimal", {"1630577758569.5.pcd", "1630577758.6695.pcd", "12.5.pcd"}).string());
  REQUIRE(decimals.size() == 3);
  CHECK(decimals[0].time == 12.5);
  CHECK(decimals[1].time == Approx(1630577758.5695).margin(1e-6));
  CHECK(decimals[2].time == Approx(1630577758.6695).margin(1e-6));
  // Frame numbers stay frame numbers, zero-padded or not.
  const auto frames = list_scans(folder_of("names_frames", {"000000042.pcd", "43.pcd", "0000000000044.pcd"}).string());
  REQUIRE(frames.size() == 3);
  CHECK(frames[0].time == Approx(4.2));
  CHECK(frames[2].time == Approx(4.4));
  // A list's names are read the same way where a line gives no time.
  const fs::path dir = folder_of("names_list", {"1630577758569.pcd", "1630577758669.pcd"});
  test::write_bytes(dir / "list.txt", "1630577758569.pcd\n1630577758669.pcd 1630577758.7\n");
  const auto listed = list_scans((dir / "list.txt").string());
  CHECK(listed[0].time == Approx(1630577758.569).margin(1e-6));
  CHECK(listed[1].time == 1630577758.7);
}

TEST_CASE("a name of digits that is no frame number and no known unit is refused, saying how to give times",
          "[unit][eval]") {
  for (const std::string name : {"16305777585.pcd", "163057775856.pcd", "16305777585694.pcd",
                                 "16305777585694901234.pcd", "01630577758569.pcd", "16305777585.5.pcd"}) {
    CAPTURE(name);
    const fs::path dir = folder_of("names_refused", {name});
    CHECK_THROWS_WITH(list_scans(dir.string()),
                      Catch::Contains(name) && Catch::Contains("13 milliseconds") &&
                          Catch::Contains("in a scan list, one `path time` a line"));
  }
}

TEST_CASE("scan times going backwards, all equal, not finite or absurd are refused with the line and the value",
          "[unit][eval]") {
  const fs::path dir = folder_of("list_times", {"a.pcd", "b.pcd", "c.pcd"});
  const auto refused = [&](const std::string& name, const std::string& text) {
    test::write_bytes(dir / name, text);
    return (dir / name).string();
  };
  CHECK_THROWS_WITH(list_scans(refused("backwards.txt", "# times\na.pcd 2.0\nb.pcd 3.0\nc.pcd 2.5\n")),
                    Catch::Contains("backwards.txt: line 4 (c.pcd): time 2.5 does not come after the previous "
                                    "scan's 3 (line 3 (b.pcd))"));
  // All at one time: the trajectory a run wrote had every pose at one stamp, which the
  // same run then refused as --reference.
  CHECK_THROWS_WITH(list_scans(refused("equal.txt", "a.pcd 0\nb.pcd 0\nc.pcd 0\n")),
                    Catch::Contains("equal.txt: line 2 (b.pcd): time 0 does not come after") &&
                        Catch::Contains("every scan at that one time"));
  // Closer than a TUM line's microseconds keep apart.
  CHECK_THROWS_WITH(list_scans(refused("close.txt", "a.pcd 1.0000001\nb.pcd 1.0000002\n")),
                    Catch::Contains("line 2 (b.pcd)") && Catch::Contains("to the microsecond"));
  for (const std::string bad : {"1e300", "nan", "-inf", "1e999", "1630577758569490123"}) {
    CAPTURE(bad);
    CHECK_THROWS_WITH(list_scans(refused("absurd.txt", "a.pcd 1\nb.pcd " + bad + "\n")),
                      Catch::Contains("absurd.txt: line 2 (b.pcd): time ") &&
                          Catch::Contains("is not a time stamp in seconds") && Catch::Contains("scan list"));
  }
  CHECK_THROWS_WITH(list_scans(refused("big.txt", "a.pcd 1e300\n")), Catch::Contains("time 1e+300 is not"));
  // A folder whose names give times out of order (a time stamp, then a name that is no
  // number, at its position) is refused too, naming the files.
  const fs::path mixed = folder_of("mixed_names", {"1630577758.pcd", "a.pcd"});
  CHECK_THROWS_WITH(list_scans(mixed.string()), Catch::Contains("a.pcd: time 0.1 does not come after the previous "
                                                                "scan's 1630577758 (1630577758.pcd)"));
  // Frame numbers count only when every scan without a time has one: else each is at its
  // position (a numbered scan took its frame number's time beside one at its position: 5.pcd
  // at 0.5 s and a.pcd at 0.1 s, or 000000.pcd and missing.pcd both at 0).
  const auto positions = list_scans(folder_of("positions", {"5.pcd", "a.pcd"}).string());
  REQUIRE(positions.size() == 2);
  CHECK(positions[0].time == 0.0);
  CHECK(positions[1].time == Approx(0.1));
  test::write_bytes(dir / "missing.txt", "missing.pcd\n000000.pcd\n000001.pcd 7\n");
  const auto listed = list_scans((dir / "missing.txt").string());
  CHECK(listed[0].time == 0.0);
  CHECK(listed[1].time == Approx(0.1));
  CHECK(listed[2].time == 7.0);
  // What passes: increasing times, a microsecond apart at 1e9 s.
  CHECK(list_scans(refused("fine.txt", "a.pcd 1630577758.000001\nb.pcd 1630577758.000002\n")).size() == 2);
}

TEST_CASE("scans matched to a reference by index keep their own times", "[unit][eval]") {
  Trajectory reference;
  for (int i = 0; i < 3; ++i) reference.push_back({0.1 * i, Eigen::Isometry3d::Identity()});
  const std::vector<ScanEntry> scans = {{"a", 1.0}, {"b", 1.1}, {"c", 1.2}};
  const auto matches = reference_matches(scans, reference);
  REQUIRE(matches.size() == 3);
  for (std::size_t k = 0; k < 3; ++k) CHECK(matches[k] == k);
  CHECK(scans[2].time == 1.2);
  // By time when the counts differ, also without touching the scans.
  const auto by_time = reference_matches({{"a", 0.1}, {"b", 0.5}}, reference);
  CHECK(by_time[0] == 1u);
  CHECK_FALSE(by_time[1].has_value());
}
