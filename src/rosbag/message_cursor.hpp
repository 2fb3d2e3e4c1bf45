#pragma once
// Reading one serialized ROS message, as ROS 2 writes it (CDR: a 4-byte encapsulation
// header, then each primitive aligned to its size from the end of that header, strings with
// their NUL) or ROS 1 (little endian, packed, strings without NUL). Shared by the message
// decoders (point_cloud2.cpp, odometry.cpp).
#include "io/bytes.hpp"

#include <ndtcu/error.hpp>
#include <ndtcu/rosbag.hpp>

#include <cstdint>
#include <string>
#include <string_view>

namespace ndtcu::rosbag::detail {

/// The encoding of `topic`'s messages ("cdr" or "ros1"); throws IoError naming `bag`
/// otherwise.
inline MessageEncoding topic_encoding(const TopicInfo& topic, const std::string& bag) {
  if (topic.encoding == "cdr") return MessageEncoding::Cdr;
  if (topic.encoding == "ros1") return MessageEncoding::Ros1;
  throw IoError(bag, "topic " + topic.name + ": message encoding '" + topic.encoding + "' is not read (cdr, ros1)");
}

/// Where a message's fields start and how they are laid out.
struct MessageStart {
  std::size_t base = 0;         ///< offset of the first field (CDR: after the encapsulation)
  bool cdr = false;             ///< CDR alignment and NUL-terminated strings (ROS 2)
  bool big_endian_cdr = false;  ///< big-endian CDR: every primitive is byte-swapped
};

/// Checks a CDR message's encapsulation header (plain CDR, either byte order); throws
/// IoError naming `context` otherwise. ROS 1 messages start at 0.
inline MessageStart message_start(std::string_view bytes, MessageEncoding encoding, const std::string& context) {
  MessageStart s;
  if (encoding != MessageEncoding::Cdr) return s;
  if (bytes.size() < 4) {
    throw IoError(context, "CDR message of " + std::to_string(bytes.size()) +
                               " bytes, shorter than its 4-byte encapsulation header");
  }
  const auto kind = static_cast<std::uint8_t>(bytes[1]);
  if (bytes[0] != 0 || kind > 1) {
    static const char* digits = "0123456789abcdef";
    std::string id = "0x";
    for (int i = 0; i < 2; ++i) {
      const auto b = static_cast<std::uint8_t>(bytes[i]);
      id += digits[b >> 4];
      id += digits[b & 15];
    }
    throw IoError(context, "CDR encapsulation " + id + " is not plain CDR (0x0000 big endian, 0x0001 little endian)");
  }
  s.cdr = true;
  s.big_endian_cdr = kind == 0;  // this reader runs on little-endian hosts (x86-64, aarch64)
  s.base = 4;
  return s;
}

/// A reader of one serialized message: bounds-checked, CDR alignment and byte order; a
/// failure throws IoError naming `context` and the field.
class MessageCursor {
 public:
  /// `type` names the message in errors ("PointCloud2 message truncated in ...").
  MessageCursor(std::string_view bytes, const MessageStart& start, const char* type, const std::string& context)
      : bytes_(bytes), base_(start.base), pos_(start.base), swap_(start.big_endian_cdr), align_(start.cdr),
        type_(type), context_(context) {}

  template <typename T>
  T get(const char* field) {
    align(sizeof(T));
    need(sizeof(T), field);
    T v = ndtcu::detail::load_raw<T>(bytes_.data() + pos_, swap_);
    pos_ += sizeof(T);
    return v;
  }
  std::string_view bytes(std::uint64_t n, const char* field) {
    need(n, field);
    std::string_view v = bytes_.substr(pos_, static_cast<std::size_t>(n));
    pos_ += static_cast<std::size_t>(n);
    return v;
  }
  std::string string(const char* field) {
    const auto n = get<std::uint32_t>(field);
    std::string_view s = bytes(n, field);
    // CDR counts the terminating NUL; ROS 1 does not write one.
    if (align_) {
      if (s.empty() || s.back() != '\0') fail(std::string(field) + ": CDR string without its terminating NUL");
      s.remove_suffix(1);
    }
    return std::string(s);
  }
  /// std_msgs/Header (ROS 1: seq, stamp as two u32; ROS 2: stamp as i32 sec and u32
  /// nanosec), its frame id into `frame_id`; returns the stamp in nanoseconds.
  std::int64_t header(std::string& frame_id) {
    if (!align_) get<std::uint32_t>("header.seq");
    const std::int64_t sec = align_ ? get<std::int32_t>("header.stamp.sec") : get<std::uint32_t>("header.stamp.sec");
    const std::uint32_t nsec = get<std::uint32_t>("header.stamp.nanosec");
    frame_id = string("header.frame_id");
    return sec * 1000000000 + nsec;
  }
  std::size_t remaining() const { return bytes_.size() - pos_; }
  [[noreturn]] void fail(const std::string& why) const { throw IoError(context_, why); }

 private:
  void align(std::size_t n) {
    if (!align_) return;
    const std::size_t rel = pos_ - base_;
    const std::size_t pad = (n - rel % n) % n;
    need(pad, "alignment padding");
    pos_ += pad;
  }
  void need(std::uint64_t n, const char* field) const {
    if (n > remaining()) {
      fail(std::string(type_) + " message truncated in " + field + ": needs " + std::to_string(n) + " bytes, " +
           std::to_string(remaining()) + " remain of " + std::to_string(bytes_.size()));
    }
  }

  std::string_view bytes_;
  std::size_t base_;
  std::size_t pos_;
  bool swap_;
  bool align_;
  const char* type_;
  const std::string& context_;
};

}  // namespace ndtcu::rosbag::detail
