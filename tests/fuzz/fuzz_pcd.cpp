// libFuzzer target for the PCD parser: any bytes either parse or throw ndtcu::Error.
#include <ndtcu/io.hpp>
#include <ndtcu/log.hpp>

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const bool quiet = (ndtcu::set_log_level(ndtcu::LogLevel::Off), true);  // warnings would flood
  (void)quiet;
  try {
    ndtcu::parse_pcd({reinterpret_cast<const char*>(data), size}, "fuzz.pcd");
  } catch (const ndtcu::Error&) {
  }
  return 0;
}
