#!/usr/bin/env python3
"""quant_report.py: one self-contained HTML page on a quantized checkpoint.

    quant_report.py QUANT SOURCE -o report.html [--server HOST:PORT] [--worst N]

Compares QUANT with its full-precision SOURCE (QuantDiff) and writes a page
with no external resources: per-layer SQNR and max-error-in-steps charts,
the worst tensors' error heatmaps (GetHeatmap in error mode, as inline PNG
data URIs) and their level usage (ComputeStats' code histograms). Without
--server it starts a private tensormorphd (tm.local()) for local files.
Everything is drawn with matplotlib (Debian's python3-matplotlib) on the
Agg backend: the charts inlined as SVG, the heatmaps as PNG data URIs, so
the page loads nothing from elsewhere.
"""

from __future__ import annotations

import argparse
import base64
import html
import io
import math
import os
import re
import sys
import tempfile
from typing import Any, Dict, List, Sequence

import matplotlib

matplotlib.use("Agg")  # no display: render straight to SVG
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import tensormorph as tm  # noqa: E402

plt.rcParams["svg.fonttype"] = "none"  # text as <text>, no embedded glyph paths


def esc(s: Any) -> str:
    return html.escape(str(s), quote=True)


def heatmap_png(title: str, cells: np.ndarray, lo: float, hi: float) -> str:
    """Heatmap cells (matplotlib imshow, Agg) as a PNG data URI with a colour
    bar in steps. Finite cells run dark blue to yellow between lo and hi;
    +inf is the top end, -inf the bottom and NaN magenta, as GetHeatmap's
    contract says."""
    cmap = matplotlib.colormaps["viridis"].copy()
    cmap.set_bad("magenta")
    top = hi if hi > lo else lo + 1.0
    shown = np.where(np.isnan(cells), np.nan, np.clip(cells, lo, top))  # clip maps ±inf to the ends
    fig, ax = plt.subplots(figsize=(4.6, 3.8))
    im = ax.imshow(np.ma.masked_invalid(shown), cmap=cmap, vmin=lo, vmax=top,
                   interpolation="nearest", aspect="auto")
    fig.colorbar(im, ax=ax, label="max error (steps)")
    ax.set_title(title, fontsize=8, loc="left")
    ax.set_xlabel("column cell", fontsize=8)
    ax.set_ylabel("row cell", fontsize=8)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def svg_of(fig: Any) -> str:
    """A matplotlib figure as inline SVG: text stays text (searchable, and
    the page names every tensor), without the XML prolog and metadata that
    only a standalone file needs."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    plt.close(fig)
    svg = buf.getvalue()
    svg = svg[svg.index("<svg"):]
    return re.sub(r"<metadata>.*?</metadata>", "", svg, flags=re.S)


def bar_chart(title: str, labels: Sequence[str], values: Sequence[float], unit: str,
              cap_label: str = "") -> str:
    """A horizontal bar chart (matplotlib, inline SVG); infinite values are
    drawn full length in grey and labelled `cap_label`."""
    finite = [v for v in values if math.isfinite(v)]
    top = max(finite) if finite else 1.0
    top = top if top > 0 else 1.0
    shown = [top if not math.isfinite(v) else max(v, 0.0) for v in values]
    fig, ax = plt.subplots(figsize=(8.5, 0.8 + 0.22 * max(len(labels), 1)))
    y = np.arange(len(labels))
    ax.barh(y, shown, height=0.7,
            color=["#999999" if not math.isfinite(v) else "#3b6fb6" for v in values])
    for yi, (v, w) in enumerate(zip(values, shown)):
        ax.text(w, yi, " " + (cap_label if not math.isfinite(v) else f"{v:.3g}"),
                va="center", fontsize=7)
    ax.set_yticks(y, labels, fontsize=7)
    ax.invert_yaxis()  # first tensor at the top, as in the table
    ax.set_xlim(0, top * 1.15)
    ax.set_xlabel(unit)
    ax.set_title(title, fontsize=10, loc="left")
    ax.grid(axis="x", alpha=0.3)
    return svg_of(fig)


def level_chart(title: str, hist: np.ndarray, code_bits: int) -> str:
    """Elements per code as vertical bars (matplotlib, inline SVG), log-scaled;
    unused codes are marked red along the axis."""
    n = len(hist)
    fig, ax = plt.subplots(figsize=(8.5, 2.2))
    codes = np.arange(n)
    used = hist > 0
    ax.bar(codes[used], hist[used], width=1.0, color="#2e8b57")
    if (~used).any():
        ax.plot(codes[~used], np.full(int((~used).sum()), 0.7), "|", color="#c0392b",
                markersize=6, label="never used")
        ax.legend(fontsize=7, loc="upper right")
    ax.set_yscale("log")
    ax.set_ylim(0.5, max(float(hist.max()) if n else 1.0, 1.0) * 2)
    ax.set_xlim(-0.5, n - 0.5)
    ax.set_xlabel(f"code 0 .. {2 ** code_bits - 1} ({int(used.sum())} of {n} used)", fontsize=8)
    ax.set_ylabel("elements", fontsize=8)
    ax.set_title(title, fontsize=9, loc="left")
    return svg_of(fig)


def build_page(c: tm.Client, quant: str, source: str, worst_n: int) -> str:
    reports: List[Dict[str, Any]] = []
    summary: Dict[str, Any] = {}
    for ev in c.diff(quant, source):
        if ev["event"] == "tensor":
            reports.append(ev)
        else:
            summary = ev
    reports.sort(key=lambda r: r["name"])
    names = [r["name"] for r in reports]
    out = [f"<!DOCTYPE html><html><head><meta charset='utf-8'>"
           f"<title>Quantization report: {esc(quant)}</title>"
           "<style>body{font-family:sans-serif;margin:20px}table{border-collapse:collapse}"
           "td,th{border:1px solid #ccc;padding:2px 6px;font-size:12px}"
           "img{border:1px solid #888}</style></head><body>",
           f"<h1>Quantization report</h1><p>{esc(quant)} against {esc(source)}: "
           f"{summary.get('tensors_compared', 0)} tensors compared, pairing "
           f"{esc(summary.get('pairing', ''))}.</p>"]
    out.append("<h2>Per-layer SQNR</h2>")
    out.append(bar_chart("SQNR per tensor", names, [r["sqnr_db"] for r in reports], "dB",
                         cap_label="∞ (exact)"))
    out.append("<h2>Max error in steps</h2>")
    out.append(bar_chart("Max error in quantization steps", names,
                         [r["max_err_steps"] for r in reports], "steps", cap_label="∞"))
    out.append("<table><tr><th>tensor</th><th>scheme</th><th>SQNR dB</th>"
               "<th>max err steps</th><th>p99 steps</th><th>clipped</th></tr>")
    for r in reports:
        out.append(f"<tr><td>{esc(r['name'])}</td><td>{esc(r['scheme'])}</td>"
                   f"<td>{r['sqnr_db']:.2f}</td><td>{r['max_err_steps']:.3f}</td>"
                   f"<td>{r['p99_err_steps']:.3f}</td><td>{r['clipped']}</td></tr>")
    out.append("</table>")

    worst = list(summary.get("worst_tensors", []))[:worst_n]
    out.append("<h2>Error heatmaps</h2><p>Max error in steps per cell of the worst "
               "tensors (dark: the tensor's smallest, yellow: its largest; magenta: NaN).</p>")
    by_name = {r["name"]: r for r in reports}
    for name in worst:
        ref = by_name[name]["reference_name"] or ""
        h = c.heatmap(quant, name, mode="error", reference=source, reference_tensor=ref,
                      width=128, height=128)
        cells = h["cells"]
        img = heatmap_png(name, cells, float(h["min"]), float(h["max"]))
        out.append(f"<h3>{esc(name)}</h3><p>{h['rows']}×{h['cols']} in {h['height']}×{h['width']} "
                   f"cells, max {h['max']:.3f} steps</p><img alt='{esc(name)} error heatmap' "
                   f"src='{img}'>")

    out.append("<h2>Level usage</h2><p>Elements per stored code of the worst tensors: "
               "red codes are never used.</p>")
    for name in worst:
        s = c.stats(quant, name)
        if not s["has_levels"]:
            out.append(f"<p>{esc(name)}: no code levels (not quantized to 8 bits or fewer)</p>")
            continue
        out.append(level_chart(f"{name}: {s['levels_used']} levels used, "
                               f"{s['saturated_low']} at the lowest and {s['saturated_high']} "
                               f"at the highest", s["code_histogram"], s["code_bits"]))
    out.append("</body></html>")
    return "\n".join(out)


def write_atomically(path: str, text: str) -> None:
    """Writes `text` beside `path`, then renames it into place: an interrupted
    run leaves the previous page whole, never half a page under its name."""
    fd, tmp = tempfile.mkstemp(prefix=".quant_report.", suffix=".tmp",
                               dir=os.path.dirname(os.path.abspath(path)))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def main(argv: Sequence[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("quant", help="the quantized checkpoint")
    ap.add_argument("source", help="its full-precision source")
    ap.add_argument("-o", "--output", required=True, help="the HTML page to write")
    ap.add_argument("--server", help="a tensormorphd HOST:PORT (default: a private one)")
    ap.add_argument("--token", help="bearer token for a server started with --token-file")
    ap.add_argument("--worst", type=int, default=3, help="worst tensors to draw (default 3)")
    args = ap.parse_args(argv)
    if not args.server:
        # Local files: the page must never land on (or inside) an input.
        out = os.path.realpath(args.output)
        for given in (args.quant, args.source):
            inp = os.path.realpath(given)
            if out == inp or out.startswith(inp.rstrip("/") + "/"):
                print(f"quant_report: -o {args.output} is the input {given}; "
                      "name another file", file=sys.stderr)
                return 1
    c = tm.connect(args.server, token=args.token) if args.server else tm.local()
    try:
        page = build_page(c, args.quant, args.source, args.worst)
    except tm.Error as e:
        print(f"quant_report: {e.code}: {e.message}", file=sys.stderr)
        return 2
    finally:
        c.close()
    write_atomically(args.output, page)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
