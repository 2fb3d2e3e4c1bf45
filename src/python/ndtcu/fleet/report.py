"""The fleet's report: DIR/fleet.json, DIR/runs.csv (one row per run) and DIR/report.html
(a static page, readable offline: the table and inline SVG plots, nothing fetched). Every
number of a run is read from that run's summary.json, as `ndtcu localize` wrote it."""
import csv
import html
import io
import json
import math
import os
import time

COLUMNS = ("name", "status", "frames", "localized", "degenerate", "lost", "recovered", "skipped",
           "success_frames", "succeeded", "success_rate", "accepted_wrong", "ate_rmse_m", "fps", "device", "time_s",
           "attempts", "reason")


def _summary_numbers(summary):
    success = summary.get("success") or {}
    ate = summary.get("ate") or {}
    return {
        "frames": summary.get("frames"),
        "localized": summary.get("localized"),
        "degenerate": summary.get("degenerate"),
        "lost": summary.get("lost"),
        "recovered": summary.get("recovered"),
        "skipped": summary.get("skipped"),
        "success_frames": success.get("frames"),
        "succeeded": success.get("succeeded"),
        "success_rate": success.get("rate"),
        # Frames accepted as valid more than success.wrong_beyond_m (0.3 m) from the
        # reference: the worst failure, counted apart from the lost ones.
        "accepted_wrong": success.get("accepted_wrong"),
        "ate_rmse_m": ate.get("rmse_m"),
        "fps": summary.get("fps"),
    }


def rows(out, manifest, records):
    """One row per run of the manifest, in its order (runs not reached: 'not run')."""
    result = []
    for run in manifest.runs:
        rec = records.get(run.name, {"status": "not run"})
        row = {"name": run.name, "status": rec["status"], "base": run.base, "params": run.params,
               "attempts": rec.get("attempts", 0), "device": rec.get("device"), "time_s": rec.get("wall_s"),
               "reason": rec.get("reason"), "key": run.key, "folder": None}
        for k in COLUMNS:
            row.setdefault(k, None)
        if rec["status"] in ("done", "present"):
            folder = os.path.join(out, "runs", run.name)
            row["folder"] = os.path.join("runs", run.name)
            with open(os.path.join(folder, "summary.json"), encoding="utf-8") as f:
                row.update(_summary_numbers(json.load(f)))
        result.append(row)
    return result


def _csv_value(v):
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(v)
    return str(v)


def write(out, manifest, records, cluster, started, ended, interrupted, options):
    """Writes fleet.json, runs.csv and report.html into `out`; returns the fleet.json doc."""
    import ndtcu

    table = rows(out, manifest, records)
    counts = {"runs": len(table)}
    for s in ("done", "present", "failed", "not run"):
        counts[s.replace(" ", "_")] = sum(r["status"] == s for r in table)
    counts["accepted_wrong"] = sum(r["accepted_wrong"] or 0 for r in table)
    ran = [r for r in table if r["status"] == "done"]
    frames = sum(r["frames"] or 0 for r in ran)
    wall = ended - started
    doc = {
        "manifest": os.path.abspath(manifest.path),
        "ndtcu": ndtcu.__version__,
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "ended": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ended)),
        "wall_s": wall,
        "interrupted": interrupted,
        "cluster": cluster,
        "options": options,
        "counts": counts,
        # Frames localized by the runs of this fleet (not the ones present before it) per
        # second of the fleet's wall time.
        "frames_per_second": frames / wall if wall > 0 else None,
        "runs": table,
    }
    _write_text(os.path.join(out, "fleet.json"), json.dumps(doc, indent=1) + "\n")
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(COLUMNS)
    for r in table:
        w.writerow([_csv_value(r[c]) for c in COLUMNS])
    _write_text(os.path.join(out, "runs.csv"), buf.getvalue())
    _write_text(os.path.join(out, "report.html"), page(doc))
    return doc


def _write_text(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


# --- the page ---------------------------------------------------------------------------

def _fmt(v, digits=3):
    if v is None:
        return "&ndash;"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return html.escape(str(v))


def bar_chart(title, labels, values, unit="", max_value=None, percent=False):
    """A horizontal bar chart as inline SVG (None values drawn as 'n/a')."""
    row_h, left, width = 18, 220, 360
    height = 30 + row_h * len(labels)
    known = [v for v in values if v is not None and math.isfinite(v)]
    top = max_value if max_value is not None else (max(known) if known else 1.0)
    top = top if top > 0 else 1.0
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + width + 90}" height="{height}" '
             f'role="img" aria-label="{html.escape(title)}">',
             f'<text x="4" y="16" font-size="13" font-weight="bold">{html.escape(title)}</text>']
    for i, (label, v) in enumerate(zip(labels, values)):
        y = 26 + i * row_h
        parts.append(f'<text x="{left - 6}" y="{y + 12}" font-size="11" text-anchor="end">'
                     f'{html.escape(label[:34])}</text>')
        if v is None or not math.isfinite(v):
            parts.append(f'<text x="{left + 4}" y="{y + 12}" font-size="11" fill="#999">n/a</text>')
            continue
        w = max(1.0, width * min(v, top) / top)
        parts.append(f'<rect x="{left}" y="{y + 2}" width="{w:.1f}" height="{row_h - 5}" fill="#3b75af"/>')
        text = f"{100 * v:.1f}%" if percent else f"{v:.4g}{unit}"
        parts.append(f'<text x="{left + w + 4:.1f}" y="{y + 12}" font-size="11">{text}</text>')
    parts.append("</svg>")
    return "".join(parts)


def sweep_chart(title, xs_by_series, param):
    """Success rate against a swept parameter (one line per combination of the others)."""
    w, h, left, bottom = 460, 240, 50, 30
    xs = sorted({x for series in xs_by_series.values() for x, _ in series})
    if not xs:
        return ""
    numeric = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in xs)
    if numeric and len(xs) > 1:
        lo, hi = min(xs), max(xs)
        pos = {x: left + (w - left - 20) * (x - lo) / (hi - lo) for x in xs}
    else:
        pos = {x: left + (w - left - 20) * (i + 0.5) / len(xs) for i, x in enumerate(xs)}
    ypos = lambda v: 20 + (h - bottom - 20) * (1 - v)  # noqa: E731
    colours = ["#3b75af", "#ef8636", "#519e3e", "#c53a32", "#8d69b8", "#84584e"]
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w + 200}" height="{h}" role="img" '
             f'aria-label="{html.escape(title)}">',
             f'<text x="4" y="14" font-size="13" font-weight="bold">{html.escape(title)}</text>',
             f'<line x1="{left}" y1="{h - bottom}" x2="{w - 10}" y2="{h - bottom}" stroke="#333"/>',
             f'<line x1="{left}" y1="20" x2="{left}" y2="{h - bottom}" stroke="#333"/>']
    for t in (0.0, 0.5, 1.0):
        parts.append(f'<text x="{left - 4}" y="{ypos(t) + 4:.1f}" font-size="10" text-anchor="end">'
                     f'{int(100 * t)}%</text>')
    for x in xs:
        parts.append(f'<text x="{pos[x]:.1f}" y="{h - bottom + 14}" font-size="10" text-anchor="middle">'
                     f'{html.escape(str(x))}</text>')
    parts.append(f'<text x="{(left + w) / 2:.1f}" y="{h - 2}" font-size="11" text-anchor="middle">'
                 f'{html.escape(param)}</text>')
    for k, (series, points) in enumerate(sorted(xs_by_series.items())):
        c = colours[k % len(colours)]
        pts = sorted((pos[x], ypos(v)) for x, v in points if v is not None)
        if len(pts) > 1:
            parts.append(f'<polyline fill="none" stroke="{c}" stroke-width="1.5" points="'
                         + " ".join(f"{a:.1f},{b:.1f}" for a, b in pts) + '"/>')
        for a, b in pts:
            parts.append(f'<circle cx="{a:.1f}" cy="{b:.1f}" r="3" fill="{c}"/>')
        parts.append(f'<text x="{w + 4}" y="{30 + 14 * k}" font-size="11" fill="{c}">'
                     f'{html.escape(series or "all")}</text>')
    parts.append("</svg>")
    return "".join(parts)


def page(doc):
    table = doc["runs"]
    names = [r["name"] for r in table]
    c = doc["counts"]
    out = ['<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>ndtcu fleet report</title>',
           "<style>body{font-family:sans-serif;margin:1.5em;color:#222}table{border-collapse:collapse;"
           "font-size:12px}th,td{border:1px solid #ccc;padding:3px 6px;text-align:right}"
           "td.l,th.l{text-align:left}tr.failed{background:#fde2e1}tr.notrun{color:#999}"
           ".wrong{color:#b00000}td.wrong{font-weight:bold;background:#fde2e1}"
           "figure{display:inline-block;margin:0 1.5em 1.5em 0;vertical-align:top}</style></head><body>",
           "<h1>ndtcu fleet report</h1>",
           f"<p>Manifest <code>{html.escape(doc['manifest'])}</code>; ndtcu {html.escape(doc['ndtcu'])}; "
           f"{doc['started']} to {doc['ended']} ({doc['wall_s']:.1f} s)"
           f"{' &mdash; <b>interrupted</b>' if doc['interrupted'] else ''}.</p>",
           f"<p>{c['runs']} runs: {c['done']} done, {c['present']} present from an earlier fleet, "
           f"{c['failed']} failed, {c['not_run']} not run. "
           + (f"<b class=\"wrong\">{c['accepted_wrong']} frame(s) accepted as valid but wrong</b> (over "
              f"0.3 m from the reference). " if c["accepted_wrong"] else "")
           + (f"Fleet throughput {doc['frames_per_second']:.1f} frames/s. " if doc["frames_per_second"] else "")
           + (f"Cluster: {doc['cluster'].get('nodes')} node(s), {doc['cluster'].get('cpus'):g} CPUs, "
              f"{doc['cluster'].get('gpus'):g} GPUs." if doc["cluster"] else "") + "</p>"]
    out.append("<h2>Runs</h2><table><tr>")
    heads = [("name", "run"), ("status", "status"), ("frames", "frames"), ("localized", "localized"),
             ("degenerate", "degenerate"), ("lost", "lost"), ("success_rate", "success &le; 10 cm"),
             ("accepted_wrong", "accepted wrong"), ("ate_rmse_m", "ATE RMSE (m)"), ("fps", "fps"), ("device", "device"), ("time_s", "time (s)"),
             ("attempts", "attempts"), ("reason", "reason")]
    out += [f'<th class="{"l" if k in ("name", "status", "device", "reason") else ""}">{t}</th>' for k, t in heads]
    out.append("</tr>")
    for r in table:
        cls = {"failed": "failed", "not run": "notrun"}.get(r["status"], "")
        out.append(f'<tr class="{cls}">')
        for k, _ in heads:
            v = r[k]
            if k == "success_rate" and v is not None:
                text = f"{100 * v:.1f}% ({r['succeeded']}/{r['success_frames']})"
            elif k == "name" and r["folder"]:
                text = f'<a href="{html.escape(r["folder"])}/summary.json">{html.escape(v)}</a>'
            else:
                text = _fmt(v, 4 if k == "ate_rmse_m" else 1 if k in ("fps", "time_s") else 3)
            cell = "l" if k in ("name", "status", "device", "reason") else "wrong" if k == "accepted_wrong" and v else ""
            out.append(f'<td class="{cell}">{text}</td>')
        out.append("</tr>")
    out.append("</table>")
    out.append("<h2>Plots</h2>")
    out.append("<figure>" + bar_chart("Success rate (within 10 cm of the reference)", names,
                                      [r["success_rate"] for r in table], max_value=1.0, percent=True) + "</figure>")
    out.append("<figure>" + bar_chart("ATE RMSE (m)", names, [r["ate_rmse_m"] for r in table], unit=" m")
               + "</figure>")
    # Each sweep: success against each swept parameter, one line per value of the others.
    bases = {}
    for r in table:
        if r["params"]:
            bases.setdefault(r["base"], []).append(r)
    for base, group in bases.items():
        params = list(group[0]["params"])
        for p in params:
            series = {}
            for r in group:
                others = ", ".join(f"{q}={r['params'][q]}" for q in params if q != p)
                series.setdefault(others, []).append((_plain(r["params"][p]), r["success_rate"]))
            out.append("<figure>" + sweep_chart(f"{base}: success against {p}", series, p) + "</figure>")
    out.append("<p>Numbers from each run's <code>runs/NAME/summary.json</code> (as <code>ndtcu localize</code> "
               "writes it); the same table is in <code>runs.csv</code> and <code>fleet.json</code>.</p>")
    out.append("</body></html>\n")
    return "".join(out)


def _plain(v):
    return ",".join(map(str, v)) if isinstance(v, (list, tuple)) else v
