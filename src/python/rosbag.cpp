// The Python module: BagReader: point clouds from ROS 1 and ROS 2 bags.
#include "common.hpp"

using namespace nb::literals;

namespace ndtcu::python {

void define_rosbag(nb::module_& m) {
  nb::class_<rosbag::BagReader>(m, "BagReader",
                                "Reads sensor_msgs/PointCloud2 messages from ROS 1 .bag files and ROS 2 bags "
                                "(sqlite3 or mcap) without ROS (ndtcu::rosbag).")
      .def(
          "__init__",
          [](rosbag::BagReader* self, nb::handle path_obj) {
            const std::string path = path_arg(path_obj, "path");
            nb::gil_scoped_release release;
            new (self) rosbag::BagReader(path);
          },
          "path"_a,
          "Opens and indexes the bag (a .bag, .mcap or .db3 file, or a folder with metadata.yaml; str, bytes or "
          "os.PathLike).")
      .def_prop_ro("path", [](const rosbag::BagReader& b) { return path_out(b.info().path); },
                   "the path given, as a str (os.fsdecode's for a name that is not UTF-8)")
      .def_prop_ro("format", [](const rosbag::BagReader& b) { return std::string(rosbag::to_string(b.info().format)); })
      .def_prop_ro(
          "topics",
          [](const rosbag::BagReader& b) {
            nb::list out;
            for (const auto& t : b.info().topics) {
              nb::dict d;
              d["name"] = name_out(t.name);
              d["type"] = name_out(t.type);
              d["encoding"] = name_out(t.encoding);
              d["messages"] = t.messages;
              out.append(d);
            }
            return out;
          },
          "[{'name', 'type', 'encoding', 'messages'}], as `ndtcu --json info` lists them; a name that is not UTF-8 "
          "comes as bytes (give it back as bytes to read the topic)")
      .def(
          "point_cloud_topic",
          [](const rosbag::BagReader& b, nb::handle requested) {
            return name_out(b.point_cloud_topic(name_arg(requested, "requested")).name);
          },
          "requested"_a = "",
          "The PointCloud2 topic to read: `requested` (str, or bytes for a name that is not UTF-8), or the bag's only "
          "one.")
      .def(
          "times",
          [](const rosbag::BagReader& b, nb::handle topic) {
            const auto& msgs = b.messages(name_arg(topic, "topic"));
            Eigen::VectorXd t(static_cast<Eigen::Index>(msgs.size()));
            for (std::size_t i = 0; i < msgs.size(); ++i) t(static_cast<Eigen::Index>(i)) = msgs[i].time();
            return t;
          },
          "topic"_a, "Record times (s) of the topic's messages, in time order (the scan times ndtcu localize uses).")
      .def(
          "record_times_ns",
          [](const rosbag::BagReader& b, nb::handle topic) {
            const auto& msgs = b.messages(name_arg(topic, "topic"));
            std::vector<std::int64_t> t(msgs.size());
            for (std::size_t i = 0; i < msgs.size(); ++i) t[i] = msgs[i].time_ns;
            return t;
          },
          "topic"_a, "Record times (ns) of the topic's messages, in time order.")
      .def(
          "read_raw",
          [](const rosbag::BagReader& b, nb::handle topic_obj, std::size_t index) {
            const std::string topic = name_arg(topic_obj, "topic");
            std::string raw;
            {
              nb::gil_scoped_release release;
              raw = b.read_raw(topic, index);
            }
            return nb::bytes(raw.data(), raw.size());
          },
          "topic"_a, "index"_a,
          "The serialized bytes of message `index` (time order) of a topic, as the bag holds them (CDR with its "
          "4-byte header for a ROS 2 bag, ROS 1 serialization for a .bag): what a ROS 2 publisher sends for a CDR "
          "message (ndtcu_ros2_play publishes them as they are).")
      .def(
          "read_point_cloud2_cdr",
          [](const rosbag::BagReader& b, nb::handle topic_obj, std::size_t index) {
            const std::string topic = name_arg(topic_obj, "topic");
            std::string raw;
            {
              nb::gil_scoped_release release;
              if (b.point_cloud_topic(topic).encoding == "cdr") {
                raw = b.read_raw(topic, index);
              } else {
                rosbag::PointCloud2Info info;
                const PointCloud cloud = b.read_point_cloud(topic, index, ReadOptions{}, &info);
                raw = rosbag::encode_point_cloud2(info.stamp_ns, info.frame_id, cloud);
              }
            }
            return nb::bytes(raw.data(), raw.size());
          },
          "topic"_a, "index"_a,
          "Message `index` of a PointCloud2 topic as a serialized ROS 2 sensor_msgs/msg/PointCloud2 (CDR): a ROS 2 "
          "bag's own bytes; a ROS 1 message decoded and encoded again (its stamp and frame_id, x y z and intensity "
          "as float32, the finite points only).")
      .def(
          "read_odometry",
          [](const rosbag::BagReader& b, nb::handle topic_obj, std::size_t index) {
            const std::string topic = name_arg(topic_obj, "topic");
            rosbag::OdometryMessage o;
            {
              nb::gil_scoped_release release;
              o = b.read_odometry(topic, index);
            }
            nb::dict d;
            d["stamp_ns"] = o.stamp_ns;
            d["frame_id"] = name_out(o.frame_id);
            d["child_frame_id"] = name_out(o.child_frame_id);
            d["pose"] = Eigen::Matrix4d(o.pose);
            d["covariance"] = Eigen::Matrix<double, 6, 6>(o.covariance);
            return d;
          },
          "topic"_a, "index"_a,
          "Message `index` of a nav_msgs/Odometry topic: {'stamp_ns', 'frame_id', 'child_frame_id', 'pose' (4x4), "
          "'covariance' (6x6)}; the twist is not read.")
      .def(
          "read_point_cloud",
          [](const rosbag::BagReader& b, nb::handle topic_obj, std::size_t index) {
            const std::string topic = name_arg(topic_obj, "topic");
            nb::gil_scoped_release release;
            return b.read_point_cloud(topic, index);
          },
          "topic"_a, "index"_a, "Decodes message `index` (time order) of a PointCloud2 topic into a PointCloud.");
}

}  // namespace ndtcu::python
