"""Plots the output of `ndtcu localize` (OUT_DIR/frames.csv and summary.json).

    python3 -m ndtcu.plot OUT_DIR

writes
  OUT_DIR/trajectory.png  top view: the estimate over the reference, lost frames marked
  OUT_DIR/frames.png      per frame: position error (with a reference), NVTL with its
                          threshold, and latency (read + filter + align)
Uses matplotlib's Agg backend, so no display is needed. `ndtcu localize` runs it at the end
of a run with a python3 that imports this package and matplotlib (see --no-plot).
"""
import csv
import json
import math
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from .written_whole import written_whole  # noqa: E402


def number(text):
    return float(text) if text not in ("", None) else math.nan


def main(argv=None):
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        sys.exit("usage: python3 -m ndtcu.plot OUT_DIR")
    out = args[0]
    frames_csv = os.path.join(out, "frames.csv")
    try:
        with open(frames_csv, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        sys.exit(f"ndtcu.plot: cannot read {frames_csv}: {e.strerror}")
    summary = {}
    try:
        with open(os.path.join(out, "summary.json")) as f:
            summary = json.load(f)
    except (OSError, ValueError):
        pass  # the plots do not need it; titles just get shorter
    if not rows:
        sys.exit(f"ndtcu.plot: {frames_csv} has no frame")

    col = lambda name: [number(r[name]) for r in rows]
    frame = [int(r["frame"]) for r in rows]
    status = [r["status"] for r in rows]
    x, y = col("x"), col("y")
    ref_x, ref_y = col("ref_x"), col("ref_y")
    pred_x, pred_y = col("pred_x"), col("pred_y")
    error = col("error_m")
    nvtl = col("nvtl")
    latency = col("total_ms")
    have_ref = any(not math.isnan(v) for v in ref_x)

    # Top view.
    fig, ax = plt.subplots(figsize=(7, 7))
    if have_ref:
        ax.plot(ref_x, ref_y, "-", color="0.6", lw=3, label="reference")
    ax.plot(x, y, ".-", color="tab:blue", lw=1, ms=4, label="estimate")
    # A lost frame has no estimate: mark it where the reference (else the prediction) puts it.
    lost = [i for i, s in enumerate(status) if s == "lost"]
    if lost:
        lx = [ref_x[i] if not math.isnan(ref_x[i]) else pred_x[i] for i in lost]
        ly = [ref_y[i] if not math.isnan(ref_y[i]) else pred_y[i] for i in lost]
        ax.plot(lx, ly, "x", color="tab:red", ms=9, mew=2, label=f"lost ({len(lost)})")
    recovered = [i for i, s in enumerate(status) if s == "recovered"]
    if recovered:
        ax.plot([x[i] for i in recovered], [y[i] for i in recovered], "o", mfc="none", color="tab:orange", ms=8,
                label=f"recovered ({len(recovered)})")
    ax.set_aspect("equal", adjustable="datalim")
    ax.set_xlabel("x (m)")
    ax.set_ylabel("y (m)")
    title = "ndtcu localize: top view"
    ate = summary.get("ate")
    success = summary.get("success")
    if success and success.get("rate") is not None:
        title += (f"\n{success['succeeded']} of {success['frames']} frames within "
                  f"{success['within_m'] * 100:.0f} cm (lost ones count as failures)")
    if ate and ate.get("rmse_m") is not None:
        title += (f"\nATE RMSE {ate['rmse_m'] * 100:.2f} cm, max {ate['max_m'] * 100:.2f} cm "
                  f"over {ate.get('pairs', '?')} localized frames")
    elif ate:
        # No localized frame matched a reference pose: there is no error to show.
        title += f"\nATE: {ate.get('reason', 'no pair')}"
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best")
    fig.tight_layout()
    # Written whole (a reader never sees half an image; a link at the name is replaced).
    with written_whole(os.path.join(out, "trajectory.png"), "wb") as f:
        fig.savefig(f, format="png", dpi=120)
    plt.close(fig)

    # Per frame.
    panels = 3 if have_ref else 2
    fig, axes = plt.subplots(panels, 1, figsize=(9, 2.6 * panels), sharex=True)
    k = 0
    if have_ref:
        axes[k].plot(frame, [e * 100 for e in error], ".-", color="tab:blue")
        axes[k].set_ylabel("position error (cm)")
        axes[k].grid(True, alpha=0.3)
        k += 1
    axes[k].plot(frame, nvtl, ".-", color="tab:green", label="NVTL")
    threshold = summary.get("settings", {}).get("nvtl_threshold")
    if threshold is not None:
        axes[k].axhline(threshold, color="tab:red", ls="--", lw=1, label=f"threshold {threshold}")
    for i in lost:
        axes[k].axvline(frame[i], color="tab:red", alpha=0.3)
    axes[k].set_ylabel("NVTL")
    axes[k].legend(loc="best")
    axes[k].grid(True, alpha=0.3)
    k += 1
    axes[k].plot(frame, latency, ".-", color="tab:purple")
    # Recovered frames paid for their searches: marked where their latency is.
    if recovered:
        axes[k].plot([frame[i] for i in recovered], [latency[i] for i in recovered], "o", mfc="none",
                     color="tab:orange", ms=8, label=f"recovered ({len(recovered)})")
        axes[k].legend(loc="best")
    for i in lost:
        axes[k].axvline(frame[i], color="tab:red", alpha=0.3)
    axes[k].set_ylabel("latency (ms)")
    axes[k].set_xlabel("frame")
    axes[k].grid(True, alpha=0.3)
    if "fps" in summary:
        axes[0].set_title(f"{summary.get('aligned', len(rows))} frames, {summary['fps']:.1f} fps "
                          f"({summary.get('backend', '?')}, {summary.get('device', '?')})")
    fig.tight_layout()
    with written_whole(os.path.join(out, "frames.png"), "wb") as f:
        fig.savefig(f, format="png", dpi=120)
    plt.close(fig)
    print(f"ndtcu.plot: wrote {os.path.join(out, 'trajectory.png')} and {os.path.join(out, 'frames.png')}")


if __name__ == "__main__":
    main()
