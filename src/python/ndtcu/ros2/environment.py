"""What rclpy from PyPI's ROS 2 wheels (the `ndtcu[ros2]` extra) needs of its process.

The wheels put their shared libraries in `<prefix>/lib` (the message packages' type
support) and in `site-packages/ros_*.libs` (rcl, rmw, Fast DDS). rclpy's extension and the
RMW layer load them by name (the RMW implementation with dlopen), so they must be on
LD_LIBRARY_PATH when the process starts: the dynamic loader reads it once. The wheels'
own `ros_wheels_bootstrapper.pth` re-executes every interpreter of the environment with
it set; an interpreter that finds rclpy some other way (PYTHONPATH, a `--system-site-
packages` venv, a zipapp) does not run that file. `prepare()` does the same for the
console scripts and the tests, whatever started them, and names the middleware: Fast DDS
(`rmw_fastrtps_cpp`), the one implementation the wheels ship, unless RMW_IMPLEMENTATION
says otherwise.

Fast DDS's default transports lose a best-effort message larger than its shared-memory
segment (512 KB: some 32,000 points of 16 bytes); unless the environment names a Fast DDS
profile or transports of its own, `prepare()` gives the process fastdds_profile.xml (32 MB
segments; the file says more).

Call it before `import rclpy`; it returns only once the environment is right (it may
re-execute the interpreter with the same arguments to get there).
"""
import importlib.util
import os
import sys
from pathlib import Path

# The middleware the wheels ship (ros-rmw-fastrtps-cpp).
DEFAULT_RMW = "rmw_fastrtps_cpp"
# Variables through which a user gives Fast DDS a configuration of their own.
FASTDDS_SETTINGS = ("FASTDDS_DEFAULT_PROFILES_FILE", "FASTRTPS_DEFAULT_PROFILES_FILE", "FASTDDS_BUILTIN_TRANSPORTS",
                    "RMW_FASTRTPS_USE_QOS_FROM_XML")
# Set in the environment of the re-executed interpreter: a second pass that still misses a
# folder stops there instead of executing again.
_REEXEC_GUARD = "_NDTCU_ROS2_ENVIRONMENT"
# The wheels' bootstrapper's own guard: with it set, its .pth leaves the interpreter alone.
_WHEELS_GUARD = "_ROS_WHEELS_BOOTSTRAP_COMPLETE"


def ros_library_dirs():
    """The folders the wheels' libraries lie in (`<prefix>/lib` and every
    `site-packages/ros_*.libs`), found from where rclpy is, without importing it; None
    when rclpy is not installed."""
    try:
        spec = importlib.util.find_spec("rclpy")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    site = Path(list(spec.submodule_search_locations)[0]).resolve().parent
    dirs = [str(p) for p in sorted(site.glob("ros_*.libs")) if p.is_dir()]
    prefix_lib = site.parent.parent  # <prefix>/lib/pythonX.Y/site-packages -> <prefix>/lib
    if prefix_lib.name == "lib" and prefix_lib.is_dir():
        dirs.insert(0, str(prefix_lib))
    return dirs


def prepare():
    """Sets what rclpy needs (see the module's comment); re-executes the interpreter once when
    LD_LIBRARY_PATH lacks the wheels' folders. Returns False when rclpy is not installed
    (nothing is changed then), True when the process is ready for `import rclpy`."""
    dirs = ros_library_dirs()
    if dirs is None:
        return False
    os.environ.setdefault("RMW_IMPLEMENTATION", DEFAULT_RMW)
    if os.environ["RMW_IMPLEMENTATION"] == DEFAULT_RMW and not any(os.environ.get(v) for v in FASTDDS_SETTINGS):
        os.environ["FASTDDS_DEFAULT_PROFILES_FILE"] = str(Path(__file__).resolve().parent / "fastdds_profile.xml")
    current = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if d]
    missing = [d for d in dirs if d not in current]
    if not missing:
        return True
    if os.environ.get(_REEXEC_GUARD):
        raise RuntimeError("ndtcu.ros2: LD_LIBRARY_PATH still lacks " + os.pathsep.join(missing) +
                           " after setting it; start the program with it set")
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(missing + current)
    env[_REEXEC_GUARD] = "1"
    env[_WHEELS_GUARD] = "1"
    argv = list(getattr(sys, "orig_argv", [])) or [sys.executable] + sys.argv
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, argv, env)
    return True  # not reached


def missing_message():
    """What to tell a user whose interpreter has no rclpy."""
    return ("rclpy is not installed for " + sys.executable + ": pip install 'ndtcu[ros2]' (ROS 2 from PyPI: "
            "ros-rclpy and the message packages; see docs/ros2.md)")
