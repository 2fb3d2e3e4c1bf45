"""`ndtcu_scan_matcher` (also `python -m ndtcu.ros2.scan_matcher`): the ROS 2 node
`ndt_scan_matcher` that replaces Autoware's, over ndtcu (docs/ros2.md).

    ndtcu_scan_matcher [LOCALIZE OPTIONS] --ros-args --params-file ndt_scan_matcher.param.yaml \\
        -p map_path:=MAP [-p sensor_to_base:='[x, y, z, roll, pitch, yaw]'] [-p base_frame:=base_link]

LOCALIZE OPTIONS are those of `ndtcu localize` that set how frames are localized (--backend,
--voxel, --init, --init-radius, --recovery, ...; not those naming files of scans, poses or
outputs), also given as the string-array parameter `localize_args`. Autoware's parameter
file (the --params-file holding an `ndt` section) is read as `ndtcu localize --config`
reads it, with the same checks. Exit codes: 0 after SIGINT or SIGTERM, 1 an error while
running, 2 a parameter, option or map the node refuses (nothing started), 77 no rclpy.
"""
import signal
import sys

from . import environment

# The node's own parameters besides Autoware's file: where the map is, the frames, and more
# `ndtcu localize` options.
NODE_PARAMETERS = ("map_path", "base_frame", "sensor_frame", "sensor_to_base", "localize_args")
# The executor's longest wait (s) between two looks at the signals.
SPIN_STEP_S = 0.2
# How long (s) a thread holds the GIL while another waits for it.
SWITCH_INTERVAL_S = 0.0002
# Autoware's covariance.output_pose_covariance default: ndt_pose_with_covariance's covariance
# when the alignment made no estimate (covariance_estimation_type 0, or an estimate that failed).
AUTOWARE_OUTPUT_POSE_COVARIANCE = [0.0225, 0.0, 0.0, 0.0, 0.0, 0.0,
                                   0.0, 0.0225, 0.0, 0.0, 0.0, 0.0,
                                   0.0, 0.0, 0.0225, 0.0, 0.0, 0.0,
                                   0.0, 0.0, 0.0, 0.000625, 0.0, 0.0,
                                   0.0, 0.0, 0.0, 0.0, 0.000625, 0.0,
                                   0.0, 0.0, 0.0, 0.0, 0.0, 0.000625]


def params_files(argv):
    """The --params-file arguments of the ROS arguments in `argv` (in order)."""
    files, in_ros, i = [], False, 0
    while i < len(argv):
        a = argv[i]
        if a == "--ros-args":
            in_ros = True
        elif a == "--" and in_ros:
            in_ros = False
        elif in_ros and a == "--params-file" and i + 1 < len(argv):
            files.append(argv[i + 1])
            i += 1
        i += 1
    return files


def autoware_params_file(files):
    """The parameter file among `files` that holds Autoware's ndt_scan_matcher parameters (a
    node's ros__parameters with an `ndt` section), or ''; more than one is an error."""
    import yaml

    found = []
    for path in files:
        try:
            with open(path, "rb") as f:
                doc = yaml.safe_load(f)
        except (OSError, yaml.YAMLError):
            found.append(path)  # the reader names what is wrong with it
            continue
        nodes = doc.values() if isinstance(doc, dict) else []
        if any(isinstance(n, dict) and isinstance(n.get("ros__parameters"), dict) and "ndt" in n["ros__parameters"]
               for n in nodes):
            found.append(path)
    if len(found) > 1:
        raise ValueError("several --params-file hold Autoware's ndt parameters (" + ", ".join(found) +
                         "); the node reads one as `ndtcu localize --config`: give the others without an ndt section")
    return found[0] if found else ""


def parameter(node, name, default):
    if node.has_parameter(name):
        value = node.get_parameter(name).value
        if value is not None:
            return value
    return default


def own_key_warning(warning):
    """Whether the parameter file's warning is about one of the node's own parameters (an
    unknown key to the Autoware reader, a parameter to the node)."""
    return any(f": {key}: unknown key" in warning for key in NODE_PARAMETERS)


def interrupt(signum, frame):
    raise KeyboardInterrupt


def ignore_signals():
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def main(argv=None):
    argv = list(sys.argv if argv is None else argv)
    if not environment.prepare():
        print("ndtcu_scan_matcher: " + environment.missing_message(), file=sys.stderr)
        return 77
    import numpy as np
    import rclpy
    from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
    from rclpy.signals import SignalHandlerOptions
    from rclpy.utilities import remove_ros_args

    from .. import _ndtcu
    from .node import Limits, ScanMatcherNode

    options = remove_ros_args(argv)[1:]
    if "-h" in options or "--help" in options:
        print(__doc__.strip())
        return 0
    # SIGINT and SIGTERM end the spin as KeyboardInterrupt (not through rclpy's handlers, which
    # shut the context down under the frame being published), then are ignored while the
    # node closes.
    signal.signal(signal.SIGTERM, interrupt)
    rclpy.init(args=argv, signal_handler_options=SignalHandlerOptions.NO)
    node = rclpy.create_node("ndt_scan_matcher", automatically_declare_parameters_from_overrides=True)
    log = node.get_logger()
    matcher = None
    try:
        try:
            config = autoware_params_file(params_files(argv))
            base_frame = str(parameter(node, "base_frame", parameter(node, "frame.base_frame", "base_link")))
            map_frame = str(parameter(node, "frame.map_frame", "map"))
            sensor_to_base = [float(v) for v in parameter(node, "sensor_to_base", [0.0] * 6)]
            if len(sensor_to_base) != 6:
                raise ValueError(f"sensor_to_base: {len(sensor_to_base)} values; give [x, y, z, roll, pitch, yaw] "
                                 "(m, rad): the sensor's pose in " + base_frame)
            extra = [str(a) for a in parameter(node, "localize_args", [])]
            fixed = np.asarray(parameter(node, "covariance.output_pose_covariance", AUTOWARE_OUTPUT_POSE_COVARIANCE),
                               dtype=np.float64)
            if fixed.size != 36:
                raise ValueError(f"covariance.output_pose_covariance: {fixed.size} values; give 36 (6x6, row major)")
            matcher = _ndtcu.ScanMatcher(
                options + extra, config=config, map_path=str(parameter(node, "map_path", "")),
                sensor_to_base=np.asarray(sensor_to_base, dtype=np.float64),
                sensor_frame=str(parameter(node, "sensor_frame", "")), map_frame=map_frame,
                fixed_covariance=fixed.reshape(6, 6))
        except (_ndtcu.Error, ValueError, TypeError) as e:
            log.error(str(e))
            return 2
        for w in matcher.config_warnings:
            if not own_key_warning(w):
                log.warning(w)
        limits = Limits(
            parameter(node, "validation.skipping_publish_num", Limits().skipping_publish_num),
            parameter(node, "validation.critical_upper_bound_exe_time_ms", Limits().critical_exe_time_ms))
        m = matcher.map_info
        log.info(f"map {m['path']}: " + (f"{m['points']} points, {m['voxels']} voxels" if matcher.map_loaded
                                         else "tiles, loaded about the first pose") +
                 f"; backend {matcher.backend}; parameters {matcher.config_path or '(defaults)'}; "
                 f"{base_frame} <- sensor {sensor_to_base}")
        scan_matcher = ScanMatcherNode(node, matcher, map_frame=map_frame, limits=limits)
        # The frames' thread waits for the GIL after each scan's callback (the executor's own
        # Python runs on) and after each frame; Python hands it over after the switch interval
        # (5 ms by default): at SWITCH_INTERVAL_S the wait is a fraction of a millisecond.
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        executor = SingleThreadedExecutor()
        executor.add_node(node)
        try:
            # In steps, so that a signal (handled between them) ends it within SPIN_STEP_S.
            while rclpy.ok():
                executor.spin_once(timeout_sec=SPIN_STEP_S)
        except (KeyboardInterrupt, ExternalShutdownException):
            pass
        finally:
            ignore_signals()
            scan_matcher.stop()
            executor.shutdown(timeout_sec=1.0)
        return 0
    finally:
        ignore_signals()
        node.destroy_node()
        if rclpy.ok():
            rclpy.shutdown()


if __name__ == "__main__":
    sys.exit(main())
