#!/usr/bin/env python3
"""Writes the fuzzers' seed corpus (tests/fuzz/corpus/{pcd,ply}): small valid files of
every layout the parsers take, and a few broken ones. Run from anywhere:
    python3 tests/fuzz/make_seeds.py
"""
import math
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def write(kind, name, data):
    path = os.path.join(HERE, "corpus", kind, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def lzf_literal(raw):
    """LZF stream made of literal runs only (control byte = run length - 1 < 32)."""
    out = bytearray()
    for i in range(0, len(raw), 32):
        chunk = raw[i:i + 32]
        out.append(len(chunk) - 1)
        out += chunk
    return bytes(out)


def pcd_header(fields, sizes, types, counts, width, height, data, points=None):
    points = width * height if points is None else points
    return (f"# .PCD v0.7\nVERSION 0.7\nFIELDS {' '.join(fields)}\nSIZE {' '.join(map(str, sizes))}\n"
            f"TYPE {' '.join(types)}\nCOUNT {' '.join(map(str, counts))}\nWIDTH {width}\nHEIGHT {height}\n"
            f"VIEWPOINT 0 0 0 1 0 0 0\nPOINTS {points}\nDATA {data}\n").encode()


pts = [(1.0, 2.0, 3.0, 10.0), (4.0, 5.0, 6.0, 20.0), (-1.0, 0.5, 2.0, 30.0), (7.0, 8.0, 9.0, 40.0)]
xyzi = (["x", "y", "z", "intensity"], [4] * 4, ["F"] * 4, [1] * 4)

# ascii x y z intensity (also the CLI tests' sample)
write("pcd", "xyzi_ascii.pcd", pcd_header(*xyzi, 4, 1, "ascii") +
      "".join(f"{x:g} {y:g} {z:g} {i:g}\n" for x, y, z, i in pts).encode())
# binary x y z intensity
write("pcd", "xyzi_binary.pcd", pcd_header(*xyzi, 4, 1, "binary") +
      b"".join(struct.pack("<4f", *p) for p in pts))
# binary_compressed with padding, COUNT > 1, double z and u16 ring, organized 2 x 2
fields = ["normal", "_", "x", "y", "z", "ring"]
sizes, types, counts = [4, 1, 4, 4, 8, 2], ["F", "U", "F", "F", "F", "U"], [3, 2, 1, 1, 1, 1]
cols = [b"".join(struct.pack("<3f", 0, 0, 1) for _ in pts), b"\0\0" * 4,
        b"".join(struct.pack("<f", p[0]) for p in pts), b"".join(struct.pack("<f", p[1]) for p in pts),
        b"".join(struct.pack("<d", p[2]) for p in pts), b"".join(struct.pack("<H", k) for k in range(4))]
raw = b"".join(cols)
packed = lzf_literal(raw)
write("pcd", "organized_compressed.pcd", pcd_header(fields, sizes, types, counts, 2, 2, "binary_compressed") +
      struct.pack("<II", len(packed), len(raw)) + packed)
# organized binary with NaN points and mixed integer types
nan = float("nan")
rows = [(1.5, -2, 3, 7), (nan, nan, nan, 0), (100.25, 4, 5, 255), (math.inf, 0, 0, 1)]
write("pcd", "mixed_types_nan.pcd",
      pcd_header(["x", "y", "z", "intensity"], [8, 2, 4, 1], ["F", "I", "U", "U"], [1] * 4, 2, 2, "binary") +
      b"".join(struct.pack("<dhIB", x, int(y) if not math.isnan(y) else 0, int(z) if not math.isnan(z) else 0, i)
               for x, y, z, i in rows))
# UTM float64 ascii
write("pcd", "utm_ascii.pcd", pcd_header(["x", "y", "z"], [8] * 3, ["F"] * 3, [1] * 3, 2, 1, "ascii") +
      b"680000.125 3900000.5 40.25\n680001.0 3900001.75 41.5\n")
# broken: truncated binary, and a header claiming 10^12 points
write("pcd", "truncated_binary.pcd", pcd_header(*xyzi, 4, 1, "binary") + b"\0" * 20)
write("pcd", "huge_points.pcd", pcd_header(*xyzi, 10**12, 1, "binary") + b"\0" * 32)

ply_head = ("ply\nformat {fmt} 1.0\ncomment seed\nelement face 1\nproperty list uchar int vertex_indices\n"
            "element vertex 3\nproperty {t} x\nproperty {t} y\nproperty {t} z\nproperty uchar intensity\n"
            "end_header\n")
write("ply", "ascii.ply", ply_head.format(fmt="ascii", t="float") + "3 0 1 2\n1 2 3 10\n4 5 6 20\n7 8 9 30\n")
for fmt, end in (("binary_little_endian", "<"), ("binary_big_endian", ">")):
    for t, code in (("float", "f"), ("double", "d")):
        body = struct.pack(end + "B3i", 3, 0, 1, 2)
        body += b"".join(struct.pack(end + "3" + code + "B", x, y, z, int(i)) for x, y, z, i in pts[:3])
        write("ply", f"{fmt}_{t}.ply", ply_head.format(fmt=fmt, t=t).encode() + body)
write("ply", "truncated.ply", ply_head.format(fmt="binary_little_endian", t="float").encode() + b"\x03\0\0")
# an element without properties and a huge count (must not loop over its records)
write("ply", "empty_element.ply", "ply\nformat ascii 1.0\nelement nothing 1000000000000000000\nelement vertex 1\n"
      "property float x\nproperty float y\nproperty float z\nend_header\n1 2 3\n")
