// libFuzzer target for the PLY parser: any bytes either parse or throw ndtcu::Error.
#include <ndtcu/io.hpp>
#include <ndtcu/log.hpp>

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const bool quiet = (ndtcu::set_log_level(ndtcu::LogLevel::Off), true);  // warnings would flood
  (void)quiet;
  try {
    ndtcu::parse_ply({reinterpret_cast<const char*>(data), size}, "fuzz.ply");
  } catch (const ndtcu::Error&) {
  }
  return 0;
}
