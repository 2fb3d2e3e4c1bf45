#include <ndtcu/error.hpp>
#include <ndtcu/io.hpp>
#include <ndtcu/scan_sequence.hpp>
#include <ndtcu/text.hpp>

#include "../log.hpp"
#include "../nvtx.hpp"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <filesystem>
#include <fstream>
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

// A stem "digits.digits" (a time in seconds), parsed; nullopt for anything else.
std::optional<double> decimal_seconds(const std::string& stem) {
  const auto dot = stem.find('.');
  if (dot == std::string::npos || dot == 0 || dot + 1 == stem.size()) return std::nullopt;
  if (!all_digits(stem.substr(0, dot)) || !all_digits(stem.substr(dot + 1))) return std::nullopt;
  return std::stod(stem);
}

// The time of the k-th scan from its name (see scan_sequence.hpp).
double time_from_name(const fs::path& path, std::size_t k, double period) {
  const std::string stem = path.stem().string();
  if (auto seconds = decimal_seconds(stem)) return *seconds;
  if (all_digits(stem) && stem.size() <= 15) return static_cast<double>(std::stoll(stem)) * period;
  return static_cast<double>(k) * period;
}

// Names that are all numbers (or decimal seconds) compare by value, so 9.pcd < 10.pcd.
bool name_less(const fs::path& a, const fs::path& b) {
  const std::string sa = a.stem().string(), sb = b.stem().string();
  auto number = [](const std::string& s) -> std::optional<long double> {
    if (all_digits(s) && s.size() <= 18) return static_cast<long double>(std::stoll(s));
    if (auto d = decimal_seconds(s)) return static_cast<long double>(std::stold(s));
    return std::nullopt;
  };
  const auto na = number(sa), nb = number(sb);
  if (na && nb && *na != *nb) return *na < *nb;
  return a.filename().string() < b.filename().string();
}

std::optional<double> parse_number(const std::string& token) {
  try {
    std::size_t used = 0;
    const double v = std::stod(token, &used);
    if (used == token.size() && std::isfinite(v)) return v;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return {};
  const auto e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

}  // namespace

std::vector<ScanEntry> list_scans(const std::string& folder_or_list, double period) {
  if (!(period > 0.0) || !std::isfinite(period)) {
    throw Error("scan period must be positive and finite, got " + ndtcu::number_text(period));
  }
  std::error_code ec;
  const fs::path root(folder_or_list);
  if (!fs::exists(root, ec)) throw IoError(folder_or_list, "no such file or folder");
  std::vector<ScanEntry> scans;
  if (fs::is_directory(root, ec)) {
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(root, ec)) {
      if (is_scan_file(e.path()) && !fs::is_directory(e.path())) files.push_back(e.path());
    }
    if (ec) throw IoError(folder_or_list, "cannot list folder: " + ec.message());
    std::sort(files.begin(), files.end(), name_less);
    for (std::size_t k = 0; k < files.size(); ++k) {
      scans.push_back({files[k].string(), time_from_name(files[k], k, period)});
    }
    if (scans.empty()) throw Error(folder_or_list + ": folder holds no scan file (.pcd, .ply, .bin)");
    return scans;
  }
  std::ifstream in(folder_or_list);
  if (!in) throw IoError(folder_or_list, "cannot open scan list");
  const fs::path base = root.parent_path();
  std::string line;
  int line_no = 0;
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
    const std::size_t k = scans.size();
    scans.push_back({p.string(), time ? *time : time_from_name(p, k, period)});
  }
  if (in.bad()) throw IoError(folder_or_list, "read error");
  if (scans.empty()) throw Error(folder_or_list + ": scan list names no scan");
  return scans;
}

std::vector<std::optional<std::size_t>> match_to_reference(std::vector<ScanEntry>& scans, const Trajectory& reference,
                                                           double max_time_difference) {
  std::vector<std::optional<std::size_t>> match(scans.size());
  if (reference.size() == scans.size()) {
    for (std::size_t k = 0; k < scans.size(); ++k) {
      match[k] = k;
      scans[k].time = reference[k].time;
    }
    return match;
  }
  // Nearest reference time; the reference is in time order, the scans need not be.
  for (std::size_t k = 0; k < scans.size(); ++k) {
    const double t = scans[k].time;
    auto it = std::lower_bound(reference.begin(), reference.end(), t,
                               [](const StampedPose& p, double v) { return p.time < v; });
    std::optional<std::size_t> best;
    double gap = max_time_difference;
    for (auto c : {it, it == reference.begin() ? reference.end() : std::prev(it)}) {
      if (c == reference.end()) continue;
      const double d = std::abs(c->time - t);
      if (d <= gap) {
        gap = d;
        best = static_cast<std::size_t>(c - reference.begin());
      }
    }
    match[k] = best;
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
