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
          "read_point_cloud",
          [](const rosbag::BagReader& b, nb::handle topic_obj, std::size_t index) {
            const std::string topic = name_arg(topic_obj, "topic");
            nb::gil_scoped_release release;
            return b.read_point_cloud(topic, index);
          },
          "topic"_a, "index"_a, "Decodes message `index` (time order) of a PointCloud2 topic into a PointCloud.");
}

}  // namespace ndtcu::python
