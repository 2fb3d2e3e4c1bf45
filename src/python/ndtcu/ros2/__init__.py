"""ndtcu in a ROS 2 graph: `ndtcu_scan_matcher`, a node that replaces Autoware's
ndt_scan_matcher (its topics, parameters and diagnostics), and `ndtcu_ros2_play`, which
publishes a bag's scans to it. Both are rclpy (from PyPI: `pip install 'ndtcu[ros2]'`) over
the C++ library; see docs/ros2.md.

    ndtcu_scan_matcher [localize options] --ros-args --params-file ndt_scan_matcher.param.yaml \\
        -p map_path:=map.pcd
    ndtcu_ros2_play BAG [--rate R]

Importing this package does not import rclpy: `environment.prepare()` must run first.
"""
