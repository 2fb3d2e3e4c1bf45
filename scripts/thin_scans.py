#!/usr/bin/env python3
"""Makes a sparser sensor out of a scan list: every `--ring-step`-th ring, then every
`--keep-every`-th point of what is left, each scan written as a binary PCD (x y z
intensity) beside a list file of the same times.

A scan's ring is its `ring` field when the PCD has one; otherwise it is derived from the
point's elevation, atan2(z, hypot(x, y)), binned into `--rings` equal bins over
`--elevation` (degrees; a spinning multi-beam sensor's beams are about evenly spaced in
elevation: an Ouster OS0-64's 64 over +-45 deg).

The sparse BALM set of BENCHMARK.md ("BALM, 16 rings / 3"), made from its 1 Hz odd scans:

    scripts/thin_scans.py ../shared/data/balm_os0/odd_scans_1hz.txt /tmp/balm16 \\
        --rings 64 --elevation -45 45 --ring-step 4 --keep-every 3

writes /tmp/balm16/scans/NNN.pcd and /tmp/balm16/scans.txt (`path time` per line), read by
`ndtcu localize --scans /tmp/balm16/scans.txt`. Standard library only; the output depends
on the input and the options alone.
"""
import argparse
import math
import os
import struct
import sys

# PCD TYPE/SIZE pairs this reader unpacks (the scans of the shared data sets are float32).
_FORMATS = {("F", 4): "f", ("F", 8): "d", ("U", 1): "B", ("U", 2): "H", ("U", 4): "I",
            ("I", 1): "b", ("I", 2): "h", ("I", 4): "i"}


def read_pcd(path):
    """The points of a binary PCD as a list of dicts of their fields."""
    with open(path, "rb") as f:
        header = {}
        while True:
            line = f.readline()
            if not line:
                sys.exit(f"{path}: the header ends before DATA")
            words = line.decode("ascii", "replace").split()
            if not words or words[0].startswith("#"):
                continue
            header[words[0].upper()] = words[1:]
            if words[0].upper() == "DATA":
                break
        if header["DATA"][0] != "binary":
            sys.exit(f"{path}: DATA {header['DATA'][0]} is not supported (binary only; "
                     "`ndtcu convert IN OUT --encoding binary` converts it)")
        fields = header["FIELDS"]
        sizes = [int(s) for s in header["SIZE"]]
        types = header["TYPE"]
        counts = [int(c) for c in header.get("COUNT", ["1"] * len(fields))]
        fmt = "<"
        for name, t, s, c in zip(fields, types, sizes, counts):
            if (t, s) not in _FORMATS:
                sys.exit(f"{path}: field {name} has TYPE {t} SIZE {s}, which this script does not read")
            fmt += _FORMATS[(t, s)] * c
        n = int(header["POINTS"][0])
        record = struct.Struct(fmt)
        data = f.read(record.size * n)
        if len(data) < record.size * n:
            sys.exit(f"{path}: {n} points announced, {len(data) // record.size} present")
    names = []
    for name, c in zip(fields, counts):
        names += [name] if c == 1 else [f"{name}{i}" for i in range(c)]
    return [dict(zip(names, v)) for v in record.iter_unpack(data)]


def write_pcd(path, points):
    """x y z intensity as a binary PCD."""
    with open(path, "wb") as f:
        f.write(("# .PCD v0.7 - thinned by scripts/thin_scans.py\nVERSION 0.7\nFIELDS x y z intensity\n"
                 "SIZE 4 4 4 4\nTYPE F F F F\nCOUNT 1 1 1 1\n"
                 f"WIDTH {len(points)}\nHEIGHT 1\nVIEWPOINT 0 0 0 1 0 0 0\nPOINTS {len(points)}\n"
                 "DATA binary\n").encode("ascii"))
        record = struct.Struct("<ffff")
        f.write(b"".join(record.pack(p["x"], p["y"], p["z"], p.get("intensity", 0.0)) for p in points))


def ring_of(p, rings, low, high):
    if "ring" in p:
        return int(p["ring"])
    elevation = math.degrees(math.atan2(p["z"], math.hypot(p["x"], p["y"])))
    # As tests/localization/test_degeneracy.cpp's reduced_scan: `rings` equal bins.
    return min(rings - 1, max(0, math.floor((elevation - low) / ((high - low) / rings))))


def main():
    a = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    a.add_argument("scans", help="list file of `path time` lines (paths relative to the file's folder)")
    a.add_argument("out", help="output folder (scans/ and scans.txt are written in it)")
    a.add_argument("--rings", type=int, default=64, help="the sensor's rings, for rings from elevation (default 64)")
    a.add_argument("--elevation", type=float, nargs=2, default=(-45.0, 45.0), metavar=("LOW", "HIGH"),
                   help="elevation of the lowest and highest ring in degrees (default -45 45)")
    a.add_argument("--ring-step", type=int, default=4, help="keep every this-th ring, from ring 0 (default 4)")
    a.add_argument("--keep-every", type=int, default=3, help="then every this-th point (default 3)")
    o = a.parse_args()
    if o.rings < 2 or o.ring_step < 1 or o.keep_every < 1 or not o.elevation[0] < o.elevation[1]:
        sys.exit("--rings must be >= 2, --ring-step and --keep-every >= 1, and --elevation LOW < HIGH")
    base = os.path.dirname(os.path.abspath(o.scans))
    os.makedirs(os.path.join(o.out, "scans"), exist_ok=True)
    lines = []
    with open(o.scans) as f:
        entries = [line.split() for line in f if line.strip() and not line.startswith("#")]
    for words in entries:
        path = words[0] if os.path.isabs(words[0]) else os.path.join(base, words[0])
        points = read_pcd(path)
        kept = [p for p in points if ring_of(p, o.rings, *o.elevation) % o.ring_step == 0][::o.keep_every]
        name = os.path.join("scans", os.path.basename(path))
        write_pcd(os.path.join(o.out, name), kept)
        lines.append(f"{name} {' '.join(words[1:])}".rstrip())
        print(f"{os.path.basename(path)}: {len(points)} -> {len(kept)} points", file=sys.stderr)
    with open(os.path.join(o.out, "scans.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
