// Catch2 main with a skip convention: when no test failed and every test case that ran
// was skipped (no GPU, no data folder), exit 77 so CTest reports the test as skipped.
#define CATCH_CONFIG_RUNNER
#include "test_support.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

namespace ndtcu::test {
namespace {
int g_cases_run = 0;
std::set<std::string> g_skipped;
std::string g_current;

struct CountingListener : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;
  void testCaseStarting(const Catch::TestCaseInfo& info) override {
    ++g_cases_run;
    g_current = info.name;
  }
};
}  // namespace

void mark_skipped(const std::string&) { g_skipped.insert(g_current); }

std::optional<std::filesystem::path> data_dir() {
  std::filesystem::path dir;
  if (const char* env = std::getenv("NDTCU_DATA_DIR"); env && *env) dir = env;
  else dir = source_dir() / ".." / "shared" / "data";
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return std::nullopt;
  return std::filesystem::weakly_canonical(dir);
}

bool under_sanitizer() {
  const char* env = std::getenv("NDTCU_TEST_UNDER_SANITIZER");
  return env && std::string(env) == "1";
}

int repeats(int normal, int sanitized) { return under_sanitizer() ? sanitized : normal; }

namespace {
/// This process's folder under the build tree's temporary area: two processes that run the
/// same test case at once (scripts/gpu_sanitize.sh runs its tools side by side over the
/// same cases) must not write, read and remove each other's files.
const std::filesystem::path& process_temp_root() {
  static const std::filesystem::path root =
      test_tmp_dir() / ("process-" + std::to_string(static_cast<long>(::getpid())));
  return root;
}
}  // namespace

std::filesystem::path temp_dir(const std::string& name) {
  auto dir = process_temp_root() / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

std::string read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_bytes(const std::filesystem::path& path, const std::string& bytes) {
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace ndtcu::test

using NdtcuCountingListener = ndtcu::test::CountingListener;
CATCH_REGISTER_LISTENER(NdtcuCountingListener)

int main(int argc, char** argv) {
  int failed = Catch::Session().run(argc, argv);
  // The temporary folders go when every test passed; after a failure they stay, to be read.
  std::error_code ec;
  const std::filesystem::path& temp = ndtcu::test::process_temp_root();
  if (failed == 0) {
    std::filesystem::remove_all(temp, ec);
  } else if (std::filesystem::exists(temp, ec)) {
    std::fprintf(stderr, "the failed run's temporary files are kept in %s\n", temp.string().c_str());
  }
  if (failed == 0 && ndtcu::test::g_cases_run > 0 &&
      static_cast<int>(ndtcu::test::g_skipped.size()) == ndtcu::test::g_cases_run) {
    return 77;
  }
  return failed;
}
