#!/usr/bin/env bash
# Installs the Debian packages ndtcu builds and tests with. Idempotent: when everything
# is present it prints nothing and exits 0. Uses sudo when not run as root.
#
#   scripts/setup.sh            build + test dependencies (PCL included, for the baselines)
#   NDTCU_SETUP_NO_PCL=1 ...    skip PCL (the library and CLI never need it)
#
# Then the Python the tests use: a venv made with Debian's /usr/bin/python3 at
# ${XDG_CACHE_HOME:-$HOME/.cache}/ndtcu/venv (NDTCU_VENV overrides it) with, from PyPI
# (Debian packages none of them, or too old a nanobind): rosbags, mcap and numpy for the
# rosbag tests; nanobind and scikit-build-core to build the Python module, pytest to test
# it, evo (an independent ATE) and matplotlib for scripts/localize_bag.py and its test, ray and
# pyyaml for the fleet runner ndtcu-fleet (docs/fleet.md) and its test, and ROS 2's rclpy with
# Fast DDS and the message packages (the `ndtcu[ros2]` extra: ndtcu_scan_matcher, ndtcu_ros2_play
# and their tests; docs/ros2.md).
# tests/CMakeLists.txt looks for it there (NDTCU_ROSBAG_PYTHON) and skips those tests
# without it.
set -euo pipefail

packages=(
  cmake g++ make pkg-config ccache
  libeigen3-dev libspdlog-dev libfmt-dev catch2 libcli11-dev nlohmann-json3-dev liblzf-dev
  libyaml-cpp-dev libnanoflann-dev libboost-dev python3 python3-matplotlib
  libsqlite3-dev libzstd-dev liblz4-dev libbz2-dev python3-venv python3-dev
)
[[ ${NDTCU_SETUP_NO_PCL:-0} == 1 ]] || packages+=(libpcl-dev)

venv=${NDTCU_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/ndtcu/venv}
ros2_pkgs=(ros-rclpy ros-sensor-msgs ros-geometry-msgs ros-nav-msgs ros-std-msgs ros-std-srvs ros-diagnostic-msgs
           ros-visualization-msgs ros-rmw-fastrtps-cpp)
install_venv() {
  local pkgs=(rosbags mcap numpy nanobind scikit-build-core pytest evo matplotlib ray pyyaml "${ros2_pkgs[@]}")
  # One start of the interpreter checks them all; rclpy's extension is not loaded (the ROS
  # wheels' libraries need LD_LIBRARY_PATH, which their bootstrap sets on a later start), only
  # found, with the middleware and each message package the node uses.
  "$venv/bin/python" -c 'import rosbags, mcap, numpy, nanobind, scikit_build_core, pytest, evo, matplotlib, ray, yaml
import importlib.util as u, sys
sys.exit(any(u.find_spec(m) is None for m in ("rclpy", "rmw_fastrtps_cpp", "sensor_msgs", "geometry_msgs",
    "nav_msgs", "std_msgs", "std_srvs", "diagnostic_msgs", "visualization_msgs")))' \
    2>/dev/null && return 0
  echo "setup.sh: installing ${pkgs[*]} into $venv"
  mkdir -p "$(dirname "$venv")"
  [[ -x $venv/bin/python ]] || /usr/bin/python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "${pkgs[@]}"
}

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ $status == "install ok installed" ]] || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  install_venv
  exit 0
fi

if ! command -v apt-get >/dev/null; then
  echo "setup.sh: apt-get not found; install these packages by hand: ${missing[*]}" >&2
  exit 1
fi
sudo=()
if ((EUID != 0)); then
  command -v sudo >/dev/null || { echo "setup.sh: not root and no sudo; install: ${missing[*]}" >&2; exit 1; }
  sudo=(sudo)
fi
echo "setup.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq >/dev/null
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
install_venv
