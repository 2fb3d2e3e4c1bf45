#include <ndtcu/error.hpp>
#include <ndtcu/io.hpp>
#include <ndtcu/scan_sequence.hpp>
#include <ndtcu/text.hpp>

#include <fmt/format.h>

#include "../log.hpp"
#include "../nvtx.hpp"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

namespace ndtcu {

namespace fs = std::filesystem;

namespace {

bool is_scan_file(const fs::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  return ext == ".pcd" || ext == ".ply" || ext == ".bin";
}

bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); });
}

// The most a scan's time may be (s): Unix time of the year 2286, beyond any recording and
// well within what a TUM line's six decimals hold apart (a time of 1e300 was accepted and
// written as a number of 301 digits).
constexpr double kMaxScanTime = 1e10;

// How to give times when a name cannot, for the messages below.
constexpr const char* kHowToGiveTimes =
    "give each scan's time in seconds in a scan list, one `path time` a line (--scans LIST)";

// What a file name's stem says about its scan's time.
struct NameTime {
  enum Kind { None, Frame, Stamp } kind = None;
  double value = 0.0;  // the frame number, or the time stamp (s)
};

// A stem of digits, optionally with a decimal point. Without one, a number of at most 9
// digits (zero-padded or not: `000042`) is a frame number; a stamp of 10 digits is
// seconds, 13 milliseconds, 16 microseconds and 19 nanoseconds (`1630577758`,
// `1630577758569`, `1630577758569490`, `1630577758569490123`). With one, the digits before
// the point say the unit the same way (`1630577758.569490` seconds, `1630577758569.49`
// milliseconds), and up to 9 of them are seconds (`12.5`). Any other count of digits is
// ambiguous: an Error naming the file, never frame numbers whose times would be invented
// (a name in milliseconds was read as a frame number and its scan put at n x 0.1 s).
NameTime time_of_name(const fs::path& path) {
  const std::string stem = path.stem().string();
  const auto dot = stem.find('.');
  const bool decimal = dot != std::string::npos;
  const std::string whole = stem.substr(0, dot);
  const std::string fraction = decimal ? stem.substr(dot + 1) : std::string();
  if (!all_digits(whole) || (decimal && !all_digits(fraction))) return {};
  const std::size_t significant = whole.size() - std::min(whole.find_first_not_of('0'), whole.size());
  if (!decimal && significant <= 9) return {NameTime::Frame, significant == 0 ? 0.0 : std::stod(whole)};
  const std::size_t n = whole.size();
  if (decimal && n <= 10) return {NameTime::Stamp, std::stod(stem)};
  int exponent = -1;  // the name's unit as a power of ten of a second
  if (whole[0] != '0') {
    if (n == 10) exponent = 0;
    if (n == 13) exponent = 3;
    if (n == 16) exponent = 6;
    if (n == 19) exponent = 9;
  }
  if (exponent < 0) {
    throw IoError(path.string(), fmt::format("the name is a number of {} digits{}, which is no time stamp ndtcu reads "
                                             "(10 digits are seconds, 13 milliseconds, 16 microseconds, 19 "
                                             "nanoseconds, decimals allowed; up to 9 a frame number); {}",
                                             n, decimal ? " before its point" : "", kHowToGiveTimes));
  }
  // Seconds and the rest apart: a double holds a time of 1e9 s to 0.2 microseconds, but 19
  // digits of nanoseconds as one number would round to 256 ns.
  const std::size_t split = n - static_cast<std::size_t>(exponent);
  const std::string below = whole.substr(split) + fraction;
  return {NameTime::Stamp, std::stod(whole.substr(0, split)) + (below.empty() ? 0.0 : std::stod("0." + below))};
}

// The times of a sequence's scans from their names (`given`: a list's times, where a line
// gives one): a time stamp as it says; frame numbers at number x period when every scan
// without a time has a number for a name, else each such scan at its position x period (a
// list of numbered scans and one named otherwise put that one at its position, on a frame
// number's time: two scans at one time).
std::vector<double> times_from_names(const std::vector<NameTime>& names, const std::vector<std::optional<double>>& given,
                                     double period) {
  bool numbered = true;
  for (std::size_t k = 0; k < names.size(); ++k) numbered &= given[k].has_value() || names[k].kind != NameTime::None;
  std::vector<double> times(names.size());
  for (std::size_t k = 0; k < names.size(); ++k) {
    if (given[k]) times[k] = *given[k];
    else if (names[k].kind == NameTime::Stamp) times[k] = names[k].value;
    else if (names[k].kind == NameTime::Frame && numbered) times[k] = names[k].value * period;
    else times[k] = static_cast<double>(k) * period;
  }
  return times;
}

// Two stems of digits (with an optional decimal point) compared by value, as text: no
// count of digits overflows. nullopt when either is not such a number.
std::optional<bool> number_less(const std::string& a, const std::string& b) {
  const auto split = [](const std::string& s) -> std::optional<std::pair<std::string, std::string>> {
    const auto dot = s.find('.');
    std::string whole = s.substr(0, dot), fraction = dot == std::string::npos ? "" : s.substr(dot + 1);
    if (!all_digits(whole) || (dot != std::string::npos && !all_digits(fraction))) return std::nullopt;
    whole.erase(0, std::min(whole.find_first_not_of('0'), whole.size()));
    while (!fraction.empty() && fraction.back() == '0') fraction.pop_back();
    return std::make_pair(whole, fraction);
  };
  const auto na = split(a), nb = split(b);
  if (!na || !nb || *na == *nb) return std::nullopt;
  if (na->first.size() != nb->first.size()) return na->first.size() < nb->first.size();
  if (na->first != nb->first) return na->first < nb->first;
  return na->second < nb->second;
}

// A folder's file with what its name says of its time.
struct NamedFile {
  fs::path path;
  NameTime time;
};

// Time stamps in names compare by time (1630577758.6695.pcd, seconds, after
// 1630577758569.5.pcd, milliseconds), other numbers by value (9.pcd < 10.pcd), the rest
// by name.
bool name_less(const NamedFile& a, const NamedFile& b) {
  if (a.time.kind == NameTime::Stamp && b.time.kind == NameTime::Stamp && a.time.value != b.time.value) {
    return a.time.value < b.time.value;
  }
  if (const auto less = number_less(a.path.stem().string(), b.path.stem().string())) return *less;
  return a.path.filename().string() < b.path.filename().string();
}

// A number, or nullopt. Not finite (nan, inf, 1e999) is a number here: check_times()
// refuses it naming its line, where taking it for part of the path said "not a scan file".
std::optional<double> parse_number(const std::string& token) {
  if (token.empty()) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(token.c_str(), &end);
  if (end != token.c_str() + token.size()) return std::nullopt;
  return v;
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return {};
  const auto e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

}  // namespace

void check_scan_times(const std::string& source, const std::vector<ScanEntry>& scans,
                      const std::function<std::string(std::size_t)>& where, const std::string& remedy) {
  for (std::size_t k = 0; k < scans.size(); ++k) {
    const double t = scans[k].time;
    if (!std::isfinite(t) || std::abs(t) > kMaxScanTime) {
      throw IoError(source, fmt::format("{}: time {} is not a time stamp in seconds (at most {:g} s, the year 2286 "
                                        "as Unix time: nanoseconds or milliseconds given as seconds?); {}",
                                        where(k), number_text(t), kMaxScanTime, remedy));
    }
    if (k == 0) continue;
    const double before = scans[k - 1].time;
    const bool all_equal = std::all_of(scans.begin(), scans.end(), [&](const ScanEntry& e) { return e.time == t; });
    if (!(t > before) || fmt::format("{:.6f}", t) == fmt::format("{:.6f}", before)) {
      throw IoError(source, fmt::format("{}: time {} does not come after the previous scan's {} ({}){}; scans must be in "
                                        "time order, each at its own time to the microsecond; {}",
                                        where(k), number_text(t), number_text(before), where(k - 1),
                                        all_equal ? " (every scan at that one time)" : "", remedy));
    }
  }
}

std::vector<ScanEntry> list_scans(const std::string& folder_or_list, double period) {
  if (!(period > 0.0) || !std::isfinite(period)) {
    throw Error("scan period must be positive and finite, got " + ndtcu::number_text(period));
  }
  std::error_code ec;
  const fs::path root(folder_or_list);
  if (!fs::exists(root, ec)) throw IoError(folder_or_list, "no such file or folder");
  std::vector<ScanEntry> scans;
  if (fs::is_directory(root, ec)) {
    std::vector<NamedFile> files;
    for (const auto& e : fs::directory_iterator(root, ec)) {
      if (is_scan_file(e.path()) && !fs::is_directory(e.path())) files.push_back({e.path(), time_of_name(e.path())});
    }
    if (ec) throw IoError(folder_or_list, "cannot list folder: " + ec.message());
    std::sort(files.begin(), files.end(), name_less);
    std::vector<NameTime> names;
    for (const NamedFile& f : files) names.push_back(f.time);
    const std::vector<double> times = times_from_names(names, std::vector<std::optional<double>>(files.size()), period);
    for (std::size_t k = 0; k < files.size(); ++k) scans.push_back({files[k].path.string(), times[k]});
    if (scans.empty()) throw Error(folder_or_list + ": folder holds no scan file (.pcd, .ply, .bin)");
    check_scan_times(
        folder_or_list, scans, [&](std::size_t k) { return printable(files[k].path.filename().string()); },
        kHowToGiveTimes);
    return scans;
  }
  std::ifstream in(folder_or_list);
  if (!in) throw IoError(folder_or_list, "cannot open scan list");
  const fs::path base = root.parent_path();
  std::string line;
  int line_no = 0;
  std::vector<int> lines;  // each scan's line, for messages
  std::vector<std::optional<double>> given;
  std::vector<NameTime> names;
  while (std::getline(in, line)) {
    ++line_no;
    if (line_no == 1) line = std::string(without_bom(line));  // a list saved by a text editor
    line = trim(line);
    if (line.empty() || line[0] == '#') continue;
    // "path [time]": the last token is a time only when it is a number and something precedes it.
    std::string path = line;
    std::optional<double> time;
    const auto space = line.find_last_of(" \t");
    if (space != std::string::npos) {
      if (auto t = parse_number(line.substr(space + 1))) {
        time = t;
        path = trim(line.substr(0, space));
      }
    }
    fs::path p(path);
    if (p.is_relative()) p = base / p;
    if (!is_scan_file(p)) {
      throw IoError(folder_or_list, "line " + std::to_string(line_no) + ": '" + path +
                                        "' is not a scan file (.pcd, .ply, .bin)");
    }
    // A name is read only where the line gives no time (an ambiguous one is then an error).
    names.push_back(time ? NameTime{} : time_of_name(p));
    given.push_back(time);
    scans.push_back({p.string(), 0.0});
    lines.push_back(line_no);
  }
  if (in.bad()) throw IoError(folder_or_list, "read error");
  if (scans.empty()) throw Error(folder_or_list + ": scan list names no scan");
  const std::vector<double> times = times_from_names(names, given, period);
  for (std::size_t k = 0; k < scans.size(); ++k) scans[k].time = times[k];
  check_scan_times(
      folder_or_list, scans,
      [&](std::size_t k) {
        return fmt::format("line {} ({})", lines[k], printable(fs::path(scans[k].path).filename().string()));
      },
      kHowToGiveTimes);
  return scans;
}

std::vector<std::optional<std::size_t>> reference_matches(const std::vector<ScanEntry>& scans,
                                                          const Trajectory& reference, double max_time_difference) {
  std::vector<std::optional<std::size_t>> match(scans.size());
  if (reference.size() == scans.size()) {
    for (std::size_t k = 0; k < scans.size(); ++k) match[k] = k;
    return match;
  }
  // Nearest reference time; the reference is in time order, the scans need not be.
  for (std::size_t k = 0; k < scans.size(); ++k) match[k] = nearest_in_time(reference, scans[k].time, max_time_difference);
  return match;
}

std::vector<std::optional<std::size_t>> match_to_reference(std::vector<ScanEntry>& scans, const Trajectory& reference,
                                                           double max_time_difference) {
  auto match = reference_matches(scans, reference, max_time_difference);
  if (reference.size() == scans.size()) {
    for (std::size_t k = 0; k < scans.size(); ++k) scans[k].time = reference[k].time;
  }
  return match;
}

struct ScanPrefetcher::Impl {
  std::vector<ScanEntry> scans;
  Reader reader;
  Preprocess preprocess;
  std::size_t capacity;
  std::mutex mutex;
  std::condition_variable work_ready;  // readers wait for room in the window
  std::condition_variable item_ready;  // the consumer waits for its next scan
  std::map<std::size_t, PreparedScan> done;
  std::size_t next_to_read = 0;
  std::size_t consumed = 0;
  bool stop = false;
  std::vector<std::thread> readers;

  PreparedScan prepare(std::size_t k) const {
    NDTCU_NVTX_RANGE("read_scan");
    PreparedScan p;
    p.index = k;
    p.entry = scans[k];
    try {
      auto t0 = std::chrono::steady_clock::now();
      ReadOptions o;
      o.read_intensity = false;  // NDT uses geometry only
      PointCloud raw = reader ? reader(k, p.entry) : read_point_cloud(p.entry.path, o);
      auto t1 = std::chrono::steady_clock::now();
      p.read_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
      p.points_read = raw.size();
      p.cloud = preprocess ? preprocess(raw) : std::move(raw);
      p.preprocess_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t1).count();
    } catch (const std::exception& e) {
      p.cloud = PointCloud{};
      p.error = e.what();
    }
    return p;
  }

  void reader_loop() {
    for (;;) {
      std::size_t k;
      {
        std::unique_lock<std::mutex> lock(mutex);
        // Bounded window: never more than `capacity` scans ahead of the consumer.
        work_ready.wait(lock, [&] { return stop || (next_to_read < scans.size() && next_to_read < consumed + capacity); });
        if (stop) return;
        k = next_to_read++;
      }
      PreparedScan p = prepare(k);
      {
        std::lock_guard<std::mutex> lock(mutex);
        done.emplace(k, std::move(p));
      }
      item_ready.notify_all();
    }
  }
};

ScanPrefetcher::ScanPrefetcher(std::vector<ScanEntry> scans, Preprocess preprocess, int threads, std::size_t capacity)
    : ScanPrefetcher(std::move(scans), Reader{}, std::move(preprocess), threads, capacity) {}

ScanPrefetcher::ScanPrefetcher(std::vector<ScanEntry> scans, Reader reader, Preprocess preprocess, int threads,
                               std::size_t capacity) {
  if (threads < 1) throw Error("scan prefetcher: reader threads must be at least 1, got " + std::to_string(threads));
  if (capacity < 1) throw Error("scan prefetcher: queue capacity must be at least 1");
  impl_ = std::make_unique<Impl>();
  impl_->scans = std::move(scans);
  impl_->reader = std::move(reader);
  impl_->preprocess = std::move(preprocess);
  impl_->capacity = capacity;
  const std::size_t n = std::min<std::size_t>(static_cast<std::size_t>(threads), std::max<std::size_t>(impl_->scans.size(), 1));
  for (std::size_t i = 0; i < n; ++i) impl_->readers.emplace_back([this] { impl_->reader_loop(); });
}

ScanPrefetcher::~ScanPrefetcher() {
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->stop = true;
  }
  impl_->work_ready.notify_all();
  for (auto& t : impl_->readers) t.join();
}

std::size_t ScanPrefetcher::size() const noexcept { return impl_->scans.size(); }

std::optional<PreparedScan> ScanPrefetcher::next() {
  Impl& m = *impl_;
  std::unique_lock<std::mutex> lock(m.mutex);
  if (m.consumed >= m.scans.size()) return std::nullopt;
  m.item_ready.wait(lock, [&] { return m.done.count(m.consumed) > 0; });
  auto node = m.done.extract(m.consumed);
  ++m.consumed;
  lock.unlock();
  m.work_ready.notify_all();
  return std::move(node.mapped());
}

}  // namespace ndtcu
