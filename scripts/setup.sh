#!/usr/bin/env bash
# Installs the Debian packages ndtcu builds and tests with. Idempotent: when everything
# is present it prints nothing and exits 0. Uses sudo when not run as root.
#
#   scripts/setup.sh            build + test dependencies (PCL included, for the baselines)
#   NDTCU_SETUP_NO_PCL=1 ...    skip PCL (the library and CLI never need it)
set -euo pipefail

packages=(
  cmake g++ make pkg-config
  libeigen3-dev libspdlog-dev libfmt-dev catch2 libcli11-dev nlohmann-json3-dev liblzf-dev
  libyaml-cpp-dev libnanoflann-dev libboost-dev python3 python3-matplotlib
)
[[ ${NDTCU_SETUP_NO_PCL:-0} == 1 ]] || packages+=(libpcl-dev)

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ $status == "install ok installed" ]] || missing+=("$p")
done
((${#missing[@]} == 0)) && exit 0

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
