// libFuzzer target for the MCAP reader and the CDR PointCloud2 and Odometry decoders: any bytes either
// index and decode or throw ndtcu::Error.
#include <ndtcu/log.hpp>
#include <ndtcu/rosbag.hpp>

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const bool quiet = (ndtcu::set_log_level(ndtcu::LogLevel::Off), true);  // warnings would flood
  (void)quiet;
  ndtcu::rosbag::BagReadLimits limits;
  limits.max_chunk_bytes = 1 << 24;  // well within the fuzzer's memory limit
  try {
    const auto reader = ndtcu::rosbag::BagReader::from_memory({reinterpret_cast<const char*>(data), size}, "fuzz.mcap",
                                                             ndtcu::rosbag::BagFormat::Ros2Mcap, limits);
    for (const auto& topic : reader.info().topics) {
      for (std::size_t k = 0; k < topic.messages; ++k) {
        try {
          if (ndtcu::rosbag::is_point_cloud2_type(topic.type)) {
            reader.read_point_cloud(topic.name, k);
          } else if (ndtcu::rosbag::is_odometry_type(topic.type)) {
            reader.read_odometry(topic.name, k);
          } else {
            reader.read_raw(topic.name, k);
          }
        } catch (const ndtcu::Error&) {
        }
      }
    }
  } catch (const ndtcu::Error&) {
  }
  return 0;
}
