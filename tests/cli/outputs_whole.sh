#!/bin/bash
# Outputs written whole or not at all, with real processes and real signals:
#   - ndtcu localize stopped by SIGINT and by SIGTERM (sent once the run has reached a frame
#     drawn from a seeded generator) exits 130 and 143 and leaves trajectory, frames.csv and
#     a summary ("status": "interrupted") that agree; an earlier run's summary never stays;
#   - killed outright (SIGKILL) mid-run: neither the earlier run's results nor half of the
#     new ones are left, only what a rerun replaces;
#   - a second run into a folder a first run holds fails at once naming the first (pid,
#     command, start), and the first runs on to a complete folder;
#   - links planted at the outputs of localize, convert, map tile and simulate are replaced,
#     their targets outside the folder untouched.
#   outputs_whole.sh NDTCU SAMPLE_DIR WORK
exe=$1 sample=$2 work=$3
# Job control: a background job of a script without it ignores SIGINT (POSIX), and ndtcu
# keeps a signal ignored at its start ignored.
set -m
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
fail() { echo "FAILED: $*" >&2; exit 1; }

# 100 frames of one sample scan at its own pose (3-25 ms each on 2 cores).
frames=100
k=0
while [ $k -lt $frames ]; do
  echo "$sample/scans/000000.pcd $k.0"
  k=$((k + 1))
done >scans.txt
common="--map $sample/map.pcd --scans scans.txt --init-from $sample/poses_tum.txt --threads 2 --backend cpu --no-plot"

# The value of a top-level key of summary.json (written by nlohmann's dump(2): two spaces).
top() { sed -n "s/^  \"$2\": \(.*\)/\1/p" "$1/summary.json" | sed 's/,$//; s/^"//; s/"$//'; }

# Checks that folder $1 agrees with itself and holds status $2; prints its frame count.
consistent() {
  dir=$1
  names=$(cd "$dir" && ls -A | tr '\n' ' ')
  [ "$names" = "frames.csv summary.json trajectory_kitti.txt trajectory_tum.txt " ] ||
    fail "$dir holds '$names'"
  [ "$(top "$dir" status)" = "$2" ] || fail "$dir: status $(top "$dir" status), expected $2"
  n=$(top "$dir" frames)
  rows=$(($(wc -l <"$dir/frames.csv") - 1))
  [ "$rows" = "$n" ] || fail "$dir: frames.csv has $rows rows, summary.json says $n frames"
  last=$(tail -n 1 "$dir/frames.csv" | cut -d, -f1)
  [ "$(top "$dir" last_frame)" = "$last" ] || fail "$dir: last_frame $(top "$dir" last_frame), frames.csv ends at $last"
  [ "$last" = $((n - 1)) ] || fail "$dir: frames.csv's frames are not 0..$((n - 1))"
  localized=$(top "$dir" localized)
  for t in tum kitti; do
    lines=$(wc -l <"$dir/trajectory_$t.txt")
    [ "$lines" = "$localized" ] || fail "$dir: trajectory_$t.txt has $lines poses, summary.json $localized localized"
  done
  # The trajectory's last pose is the last localized row's (every frame here is localized).
  [ "$(tail -n 1 "$dir/trajectory_tum.txt" | cut -d' ' -f1)" = "$(tail -n 1 "$dir/frames.csv" | cut -d, -f2)" ] ||
    fail "$dir: the trajectory's last time is not frames.csv's"
  echo "$n"
}

# Starts a localize run into $1 in the background (stderr to $1.err); sets $pid.
start() {
  rm -f "$1.err"  # an earlier run's progress must not be taken for this one's
  "$exe" localize $common --out "$1" 2>"$1.err" >"$1.out" &
  pid=$!
}

# Waits (at most 30 s) until the file $1 holds a line matching $2.
await() {
  i=0
  until grep -q -- "$2" "$1" 2>/dev/null; do
    i=$((i + 1))
    [ $i -lt 3000 ] || fail "no '$2' in $1 after 30 s"
    sleep 0.01
  done
}

# Stops process $1 (SIGSTOP) and waits until it is stopped (T); fails if it had ended (Z, a
# zombie until waited for), which would make the checks that follow prove nothing.
stop() {
  kill -STOP "$1"
  until state=$(sed 's/^[^)]*) \(.\).*/\1/' "/proc/$1/stat") && [ "$state" = T ]; do
    [ "$state" != Z ] || fail "process $1 had ended before it could be stopped"
    sleep 0.01
  done
}

# Waits for process $1 to end and sets $rc to its exit code. With job control, wait also
# returns 147 for a job that was stopped, until it has run again: waited for again then.
finish() {
  i=0
  while wait "$1"; rc=$?; [ $rc = 147 ]; do
    i=$((i + 1))
    [ $i -lt 3000 ] || fail "process $1 still stopped 30 s after SIGCONT"
    sleep 0.01
  done
}

# The frame a signal follows: the progress line after frame 10, 20 or 30, drawn from a seeded
# linear congruential generator (the same frames every run).
seed=26
draw() {  # sets $at (not run in a subshell: the seed must advance)
  seed=$(((seed * 1103515245 + 12345) % 2147483648))
  at=$((10 * (1 + seed / 65536 % 3)))
}

for signal in INT TERM; do
  out=stopped_$signal
  # An earlier run's results: they must not survive beside the new frames.
  mkdir -p "$out"
  printf '{\n  "frames": 1181,\n  "status": "complete"\n}\n' >"$out/summary.json"
  echo "an earlier run's plot" >"$out/frames.png"
  draw
  start "$out"
  await "$out.err" "^localize: $at/$frames frames"
  # Stopped (SIGSTOP) while the signal is sent, so that it surely finds frames left: the run
  # prints its progress every 10 frames, so at most 9 more than its last line are done.
  stop $pid
  seen=$(grep '^localize: ' "$out.err" | tail -n 1 | sed 's/^localize: \([0-9]*\)\/.*/\1/')
  [ "$seen" -le $((frames - 20)) ] || fail "the run went on to frame $seen before it could be stopped"
  kill -$signal $pid
  kill -CONT $pid
  finish $pid
  expected=130
  [ $signal = TERM ] && expected=143
  [ $rc = $expected ] || fail "SIG$signal after frame $at: exit code $rc, expected $expected; stderr: $(cat "$out.err")"
  grep -q "ndtcu: SIG$signal received: localize stopped after" "$out.err" || fail "no message for SIG$signal"
  n=$(consistent "$out" interrupted) || exit 1
  [ "$n" -ge "$at" ] && [ "$n" -lt $frames ] || fail "SIG$signal after frame $at: $n frames done"
  grep -q "^    \"signal\": \"SIG$signal\"" "$out/summary.json" || fail "summary.json does not name SIG$signal"
  echo "ok: SIG$signal after frame $at: exit $rc, $n frames, trajectory, frames.csv and summary agree"
done

# Killed outright: the earlier run's summary and rows are gone, and no half-written file
# took their names.
out=stopped_INT
start "$out"
await "$out.err" "^localize: 10/$frames frames"
kill -KILL $pid
wait $pid 2>/dev/null
for f in summary.json frames.csv trajectory_tum.txt trajectory_kitti.txt; do
  [ ! -e "$out/$f" ] || fail "after SIGKILL, $out/$f is there (an earlier run's, or half of this one's)"
done
# A rerun clears the killed run's temporary files and completes.
"$exe" -q localize $common --out "$out" >/dev/null || fail "the rerun after SIGKILL failed"
[ "$(consistent "$out" complete)" = $frames ] || fail "the rerun after SIGKILL did not do $frames frames"
echo "ok: SIGKILL leaves no summary and no frames; the rerun completes"

# Two runs into one folder. The first is stopped (SIGSTOP) once it holds the folder, so the
# second surely meets it; then it goes on.
out=shared
start "$out"
first=$pid
await "$out/.ndtcu.lock" "^pid $first, ndtcu localize, started "
stop $first
if "$exe" localize $common --out "$out" >second.out 2>second.err; then
  kill -CONT $first
  fail "a second run into $out was not refused"
fi
kill -CONT $first
grep -Eq "^ndtcu: error: $out: the output folder is in use by another run \(pid $first, ndtcu localize, started [0-9T:-]+Z; lock file $out/.ndtcu.lock\); wait for it to end or choose another --out$" second.err ||
  fail "the second run's error does not name the first: $(cat second.err)"
finish $first
[ $rc = 0 ] || fail "the first run failed after the second was refused (exit $rc): $(cat "$out.err")"
[ "$(consistent "$out" complete)" = $frames ] || fail "the first run did not complete its $frames frames"
echo "ok: the second run is refused naming the first (pid $first); the first completes"

# Links planted at outputs: replaced, their targets untouched.
mkdir -p outside links/localize links/tiles links/sim
for f in trajectory_tum.txt summary.json map.pcd metadata world.json; do echo "the user's $f" >"outside/$f"; done
ln -s ../../outside/trajectory_tum.txt links/localize/trajectory_tum.txt
ln -s ../../outside/summary.json links/localize/summary.json
ln -s ../outside/map.pcd links/map.pcd
ln -s ../../outside/metadata links/tiles/pointcloud_map_metadata.yaml
ln -s ../../outside/world.json links/sim/world.json
"$exe" -q localize --map "$sample/map.pcd" --scans "$sample/scans" --init-from "$sample/poses_tum.txt" \
  --threads 2 --backend cpu --no-plot --out links/localize >/dev/null || fail "localize into links/localize failed"
"$exe" -q convert "$sample/scans/000000.pcd" links/map.pcd >/dev/null || fail "convert onto a link failed"
"$exe" -q map tile "$sample/scans/000000.pcd" --tile-size 20 --out links/tiles >/dev/null || fail "map tile failed"
"$exe" -q simulate --out links/sim --world-size 60 --frames 2 --columns 90 --map-voxel 1 >/dev/null ||
  fail "simulate failed"
for f in trajectory_tum.txt summary.json map.pcd metadata world.json; do
  [ "$(cat "outside/$f")" = "the user's $f" ] || fail "outside/$f was written through a link"
done
for f in links/localize/trajectory_tum.txt links/localize/summary.json links/map.pcd \
  links/tiles/pointcloud_map_metadata.yaml links/sim/world.json; do
  [ -f "$f" ] && [ ! -L "$f" ] || fail "$f is not a file of its own"
done
# A link at simulate's scans/ folder: refused before any scan, the folder it names untouched.
mkdir -p outside/scans links/sim2 && ln -s ../../outside/scans links/sim2/scans
if "$exe" simulate --out links/sim2 --world-size 60 --frames 2 --columns 90 --map-voxel 1 >/dev/null 2>sim2.err; then
  fail "simulate wrote its scans through a link"
fi
grep -q "^ndtcu: error: links/sim2/scans: is a symbolic link" sim2.err || fail "simulate's error: $(cat sim2.err)"
[ -z "$(ls -A outside/scans)" ] || fail "simulate wrote into outside/scans"
[ "$(consistent links/localize complete)" = 10 ] || fail "links/localize does not hold the 10 sample frames"
echo "ok: links at localize's, convert's, map tile's and simulate's outputs replaced, their targets untouched"
