#pragma once
// Test helpers: skipping (exit code 77 when every test that ran was skipped), the
// location of ../shared/data, temporary folders, and ExecutionOptions in one call.
#include <catch2/catch.hpp>

#include <ndtcu/cuda_device.hpp>
#include <ndtcu/execution.hpp>

#include <filesystem>
#include <optional>
#include <string>

namespace ndtcu::test {

/// Records that the running test case is skipped (the caller returns right after).
void mark_skipped(const std::string& reason);

/// The source tree's root (data/sample lies under it). The build's paths are compiled into
/// one file (support/test_paths.cpp) and asked for through these, so that a build of
/// another clone or folder recompiles that file alone: a path in every test file's flags
/// made each of them a compiler-cache miss in every new clone.
std::filesystem::path source_dir();
/// The build tree's scratch folder of the tests.
std::filesystem::path test_tmp_dir();
/// Where the built Python package lies; empty when the Python module is not built.
std::filesystem::path python_dir();

/// The real-data folder: $NDTCU_DATA_DIR, else ../shared/data beside the source tree;
/// nullopt when it does not exist.
std::optional<std::filesystem::path> data_dir();

/// A fresh, empty folder in this process's own folder under the build tree's temporary area
/// (so that processes running the same case at once do not share it), removed at exit when
/// every test passed and kept, its path printed, when one failed.
std::filesystem::path temp_dir(const std::string& name);

/// Whole file as bytes.
std::string read_bytes(const std::filesystem::path& path);

/// Writes bytes to a file (creating parent folders).
void write_bytes(const std::filesystem::path& path, const std::string& bytes);

/// True when NDTCU_TEST_UNDER_SANITIZER is set to 1 (scripts/gpu_sanitize.sh sets it for
/// compute-sanitizer runs). The GPU tests then repeat less (the same code paths, the same
/// checks of bits, fewer rounds: a tool slows a kernel launch a hundredfold), and report
/// device free-memory readings instead of checking them (they include the tool's own
/// device allocations, gigabytes that come and go).
bool under_sanitizer();

/// `normal`, or `sanitized` under a sanitizer (under_sanitizer()).
int repeats(int normal, int sanitized);

/// ExecutionOptions with `threads` worker threads on `backend` (the library's default,
/// Auto, unless given).
inline ExecutionOptions run_with(int threads, Backend backend = Backend::Auto) {
  ExecutionOptions e;
  e.threads = threads;
  e.backend = backend;
  return e;
}

/// ExecutionOptions on the CPU backend with `threads` worker threads.
inline ExecutionOptions on_cpu(int threads = 0) { return run_with(threads, Backend::Cpu); }

/// ExecutionOptions on `backend` (threads: one per hardware thread).
inline ExecutionOptions on(Backend backend) { return run_with(0, backend); }

}  // namespace ndtcu::test

/// Skips the current test case with a reason (counted toward exit code 77).
#define NDTCU_SKIP(reason)                  \
  do {                                      \
    ::ndtcu::test::mark_skipped(reason);    \
    WARN("skipped: " << (reason));          \
    return;                                 \
  } while (0)

/// The real-data folder, or skip the test when it is absent.
#define NDTCU_REQUIRE_DATA_DIR(var)                                                  \
  auto var##_opt = ::ndtcu::test::data_dir();                                        \
  if (!var##_opt) NDTCU_SKIP("real data folder not found (set NDTCU_DATA_DIR)");     \
  const std::filesystem::path var = *var##_opt

/// The real-data folder, or skip the test when it is absent or lacks one of the paths given
/// after `var` (the test's own datasets under it: "balm_os0", "pairs/hdl32"): a partial
/// copy of the data skips the tests it cannot serve instead of failing them.
#define NDTCU_REQUIRE_DATA(var, ...)                                                         \
  NDTCU_REQUIRE_DATA_DIR(var);                                                               \
  for (const char* var##_needed : {__VA_ARGS__}) {                                           \
    if (!std::filesystem::exists(var / var##_needed)) {                                       \
      NDTCU_SKIP("real data: " + (var / var##_needed).string() + " not found");             \
    }                                                                                        \
  }

/// Skips the current test case without a CUDA build or device (the `gpu` tests).
#define NDTCU_REQUIRE_GPU()                                                                 \
  do {                                                                                      \
    if (!::ndtcu::cuda_compiled()) NDTCU_SKIP("built without CUDA");                        \
    if (::ndtcu::cuda_devices().empty()) {                                                  \
      NDTCU_SKIP("no CUDA device: " + ::ndtcu::cuda_unavailable_reason());                 \
    }                                                                                       \
  } while (0)
