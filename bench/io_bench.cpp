// Point-cloud loading benchmark: writes a synthetic cloud in each encoding, then times
// read_point_cloud on it (median and min of repeats after one warm-up read).
//   ndtcu_io_bench [--points N] [--repeats R] [--dir DIR] [--encodings binary,...]
#include <ndtcu/io.hpp>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>

int main(int argc, char** argv) {
  std::size_t points = 10'000'000;
  int repeats = 5;
  std::string dir = std::filesystem::temp_directory_path().string();
  std::vector<std::string> encodings{"binary", "binary_compressed", "ascii"};
  CLI::App app{"ndtcu_io_bench: time point-cloud loading"};
  app.add_option("--points", points, "points in the synthetic cloud");
  app.add_option("--repeats", repeats, "timed reads per file")->check(CLI::PositiveNumber);
  app.add_option("--dir", dir, "where the temporary files go");
  app.add_option("--encodings", encodings, "PCD encodings to time")->delimiter(',');
  CLI11_PARSE(app, argc, argv);

  ndtcu::PointCloud cloud;
  cloud.points.resize(points);
  cloud.intensity.resize(points);
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> coord(-100.f, 100.f), inten(0.f, 255.f);
  for (std::size_t i = 0; i < points; ++i) {
    cloud.points[i] = {coord(rng), coord(rng), coord(rng) * 0.1f};
    cloud.intensity[i] = inten(rng);
  }
  std::printf("%-18s %10s %12s %10s %10s %9s\n", "encoding", "points", "file_MB", "median_ms", "min_ms", "Mpts/s");
  for (const auto& enc : encodings) {
    std::string path = dir + "/ndtcu_io_bench_" + enc + ".pcd";
    ndtcu::WriteOptions w;
    w.pcd_encoding = ndtcu::pcd_encoding_from_string(enc);
    ndtcu::write_pcd(path, cloud, w);
    std::vector<double> ms;
    for (int r = 0; r <= repeats; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      ndtcu::PointCloud loaded = ndtcu::read_point_cloud(path);
      auto t1 = std::chrono::steady_clock::now();
      if (loaded.size() != points) {
        std::fprintf(stderr, "%s: read %zu of %zu points\n", path.c_str(), loaded.size(), points);
        return 1;
      }
      if (r > 0) ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
    std::sort(ms.begin(), ms.end());
    double median = ms[ms.size() / 2];
    std::printf("%-18s %10zu %12.1f %10.1f %10.1f %9.1f\n", enc.c_str(), points,
                std::filesystem::file_size(path) / 1e6, median, ms.front(), points / median / 1e3);
    std::filesystem::remove(path);
  }
  return 0;
}
