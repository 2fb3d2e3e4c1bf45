#!/usr/bin/env bash
# The benchmark workloads of BENCHMARK.md, in one run, on a machine with a GPU:
#   scripts/bench_gpu.sh BUILD_DIR DATA_DIR OUT_DIR
# BUILD_DIR is the build folder (ndtcu in BUILD_DIR/apps, ndtcu_bench in BUILD_DIR/bench); with
# RUN set (a device bundle's `run` wrapper) the programs are started as `$RUN NAME ARGS`
# instead, DATA_DIR is the real-data folder, OUT_DIR receives one table per workload (and
# batch.json).
set -euo pipefail
build=${1:?BUILD_DIR}; data=${2:?DATA_DIR}; out=${3:?OUT_DIR}
run=${RUN:-}
mkdir -p "$out"
exe() {  # program name, then its arguments
  if [[ -n $run ]]; then "$run" "$@"; return; fi
  local name=$1; shift
  local dir=apps
  [[ $name == ndtcu ]] || dir=bench
  "$build/$dir/$name" "$@"
}
bench() {  # name, then ndtcu_bench arguments
  local name=$1; shift
  echo "== $name: ndtcu_bench $*"
  exe ndtcu_bench "$@" | tee "$out/$name.txt"
}
bench hdl32 --target "$data/pairs/hdl32/target_251370668.pcd" --source "$data/pairs/hdl32/source_251371071.pcd" \
  --leaf 0.1 --resolution 1.0 --repeats 21
for leaf in 2.0 0.9 0.3; do
  bench "kitti00_0-1_leaf$leaf" --target "$data/kitti00/velodyne/000000.bin" --source "$data/kitti00/velodyne/000001.bin" \
    --target-leaf 0.2 --source-leaf $leaf --resolution 2.0 --step-size 0.5 --epsilon 1e-4 --repeats 21
done
bench balm_scan0 --target "$data/balm_os0/map_even_frames_0-58_voxel0.1.pcd" --source "$data/balm_os0/scans/000.pcd" \
  --target-leaf 0 --source-leaf 0.5 --resolution 2.0 --step-size 0.5 --epsilon 1e-4 \
  --init-from "$data/balm_os0/poses_tum.txt" --init-index 0 --repeats 11
# Batched alignment: K pose hypotheses of one scan per align_batch call (kitti00, balm, hdl32).
bench batch --batch --data "$data" --json "$out/batch.json"
# A simulator map of 10^7 points with scans of 10^4 and 10^5 points (made here, not shipped).
sim=${TMPDIR:-/tmp}/ndtcu_sim_scale
exe ndtcu simulate --scale --frames 2 --out "$sim" --encoding binary > /dev/null
exe ndtcu simulate --scale --frames 2 --scan-points 10000 --out "$sim-10k" --encoding binary > /dev/null
for n in 10k 100k; do
  dir=$sim; [[ $n == 10k ]] && dir=$sim-10k
  bench "sim_1e7_map_scan_$n" --target "$dir/map.pcd" --source "$dir/scans/000001.pcd" --target-leaf 0 --source-leaf 0 \
    --resolution 2.0 --step-size 0.5 --epsilon 1e-4 --init-from "$dir/poses_tum.txt" --init-index 1 \
    --no-pcl --few-cpu-rows --repeats 5
done
