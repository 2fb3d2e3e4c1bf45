#pragma once
// `ndtcu_bench --batch`: K pose hypotheses of one scan aligned in one Aligner::align_batch
// call, on the CUDA backend (when there is a device) and on the CPU backend with all
// threads, on three real workloads. See BENCHMARK.md, "Batched alignment".
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace ndtcu::bench {

/// The workloads `--batch` knows, in the order they run.
inline const std::vector<std::string> kBatchWorkloads = {"kitti00", "balm", "hdl32"};

/// The K list `--batch` runs when given no list.
inline const std::vector<int> kDefaultBatchSizes = {1, 8, 64, 200, 1024, 4096};

/// What `ndtcu_bench --batch` was asked to do.
struct BatchBenchOptions {
  std::filesystem::path data;                       ///< the real-data folder
  std::vector<int> ks = kDefaultBatchSizes;         ///< hypotheses per batch, one row each
  std::vector<std::string> workloads = kBatchWorkloads;  ///< which of kBatchWorkloads
  int cpu_max_k = 256;         ///< the CPU backend runs only batches of at most this many
  int max_repeats = 7;         ///< timed batches per row at most
  int warmup = 1;              ///< untimed batches per row first
  /// Timed batches per row: as many as fit this budget (estimated from the warm-up), at
  /// least 3 (or max_repeats if smaller) and at most max_repeats.
  double row_budget_ms = 2000.0;
  std::uint64_t seed = 1;      ///< of the random starts
  int fixed_iterations = 30;   ///< iterations of the single alignment run to the cap
  std::string json_path;       ///< write the JSON here ("" with json_stdout: on stdout)
  bool json_stdout = false;    ///< print the JSON on stdout instead of the table
};

/// Runs the batch benchmark and prints its tables (or JSON); returns the exit code.
/// Throws ndtcu::Error for missing data files.
int run_batch_bench(const BatchBenchOptions& options);

/// Parses "1,8,64": positive integers separated by commas; throws ndtcu::Error naming the
/// offending entry otherwise.
std::vector<int> parse_batch_sizes(const std::string& text);

}  // namespace ndtcu::bench
