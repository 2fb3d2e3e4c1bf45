// The build's paths (tests/CMakeLists.txt defines them for this file alone; see
// test_support.hpp).
#include "test_support.hpp"

namespace ndtcu::test {

std::filesystem::path source_dir() { return NDTCU_SOURCE_DIR; }
std::filesystem::path test_tmp_dir() { return NDTCU_TEST_TMP_DIR; }
std::filesystem::path python_dir() {
#ifdef NDTCU_PYTHON_DIR
  return NDTCU_PYTHON_DIR;
#else
  return {};
#endif
}

}  // namespace ndtcu::test
