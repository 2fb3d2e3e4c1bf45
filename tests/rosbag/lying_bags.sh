#!/bin/sh
# Bags whose metadata or chunk headers claim what their bytes do not hold, on the command
# line (bags from tests/rosbag/write_bags.py, patched here):
#   - a rosbag2 metadata.yaml listing its .db3 three times is an error naming the file and
#     the entries (each message was read three times);
#   - a chunk declaring 1 GiB uncompressed (MCAP zstd and lz4, ROS 1 bz2 and lz4), run under
#     a 400 MB limit of virtual memory (tests/cli/memory_limited.sh): an error naming the
#     file, the chunk, and what its data expands to against the 1 GiB it declares (the
#     declared size was allocated before a byte was decompressed).
#   lying_bags.sh NDTCU MEMORY_LIMITED_SH PYTHON BAG_DIR WORK
# Exits 77 (skipped) when the bags were not written (no rosbags venv).
exe=$1 limited=$2 python=$3 bags=$4 work=$5
[ -f "$bags/manifest.json" ] || { echo "no bags in $bags (run scripts/setup.sh)" >&2; exit 77; }
[ -x "$python" ] || { echo "no $python (run scripts/setup.sh)" >&2; exit 77; }
rm -rf "$work" && mkdir -p "$work" || exit 1
fail() { echo "FAILED: $*" >&2; exit 1; }
expect() {  # expect RC REGEX -- ARGS...: exit code and an extended regex over stdout+stderr
  rc=$1 re=$2
  shift 3
  out=$("$limited" 409600 "$exe" "$@" 2>&1)
  got=$?
  [ "$got" = "$rc" ] || fail "ndtcu $*: exit code $got, expected $rc; output:
$out"
  printf '%s\n' "$out" | tr '\n' ' ' | grep -Eq -- "$re" || fail "ndtcu $*: output does not match '$re':
$out"
  echo "ok: ndtcu $*"
}

# The same .db3 three times in relative_file_paths.
cp -r "$bags/sample_sqlite3" "$work/tripled" || exit 1
"$python" - "$work/tripled/metadata.yaml" <<'PY' || fail "cannot edit metadata.yaml"
import re, sys
path = sys.argv[1]
text = open(path).read()
m = re.search(r"relative_file_paths:\n(\s*- .*\n)", text)
assert m, "no relative_file_paths in " + path
open(path, "w").write(text[:m.end(1)] + m.group(1) * 2 + text[m.end(1):])
PY
expect 0 "/points +sensor_msgs/msg/PointCloud2 +10 " -- info "$bags/sample_sqlite3"
expect 1 "^ndtcu: error: [^ ]*tripled/metadata.yaml: relative_file_paths lists the storage file sample_sqlite3\.db3 3 times \(entries 1, 2 and 3\): its messages would be read as many times; list each file once $" -- \
  info "$work/tripled"

# The first chunk of each bag made to declare 1 GiB uncompressed.
"$python" - "$bags" "$work" <<'PY' || fail "cannot patch the bags"
import os, struct, sys
bags, work = sys.argv[1], sys.argv[2]
GIB = 1 << 30

def mcap(src, dst):
    b = bytearray(open(src, "rb").read())
    pos = 8
    while True:
        op, length = b[pos], struct.unpack_from("<Q", b, pos + 1)[0]
        if op == 0x06:  # chunk: start, end, uncompressed_size (u64) ...
            struct.pack_into("<Q", b, pos + 9 + 16, GIB)
            break
        pos += 9 + length
    open(dst, "wb").write(b)

def ros1(src, dst):
    b = bytearray(open(src, "rb").read())
    field = struct.pack("<I", 9) + b"size="  # the chunk record's header field size=<u32>
    at = b.index(field)
    struct.pack_into("<I", b, at + len(field), GIB)
    open(dst, "wb").write(b)

zstd_dir = os.path.join(bags, "sample_mcap_zstd")
mcap(os.path.join(zstd_dir, [f for f in os.listdir(zstd_dir) if f.endswith(".mcap")][0]), os.path.join(work, "zstd.mcap"))
mcap(os.path.join(bags, "sample_mcap_lz4.mcap"), os.path.join(work, "lz4.mcap"))
ros1(os.path.join(bags, "sample_ros1_bz2.bag"), os.path.join(work, "bz2.bag"))
ros1(os.path.join(bags, "sample_ros1_lz4.bag"), os.path.join(work, "lz4.bag"))
PY
for bag in zstd.mcap lz4.mcap bz2.bag lz4.bag; do
  method=${bag%.*}
  expect 1 "^ndtcu: error: [^ ]*/$bag: record [0-9]+ at offset [0-9]+ \(chunk\): chunk 0: $method data: expands to [0-9]+ bytes, the bag declares 1073741824 $" -- \
    info "$work/$bag"
done
