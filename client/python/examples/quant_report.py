#!/usr/bin/env python3
"""quant_report.py: one self-contained HTML page on a quantized checkpoint.

    quant_report.py QUANT SOURCE -o report.html [--server HOST:PORT] [--worst N]

Compares QUANT with its full-precision SOURCE (QuantDiff) and writes a page
with no external resources: per-layer SQNR and max-error-in-steps charts
(inline SVG), the worst tensors' error heatmaps (GetHeatmap in error mode,
as inline PNG data URIs) and their level usage (ComputeStats' code
histograms, inline SVG). Without --server it starts a private tensormorphd
(tm.local()) for local files. The charts are drawn by hand so the example
needs only the client's own dependencies.
"""

from __future__ import annotations

import argparse
import base64
import html
import math
import struct
import sys
import zlib
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np

import tensormorph as tm


def esc(s: Any) -> str:
    return html.escape(str(s), quote=True)


def png_data_uri(rgb: np.ndarray) -> str:
    """An RGB uint8 image (h, w, 3) as a PNG data URI (zlib + struct)."""
    h, w, _ = rgb.shape
    rows = b"".join(b"\x00" + rgb[y].tobytes() for y in range(h))  # filter 0 per row

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data +
                struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))

    png = (b"\x89PNG\r\n\x1a\n" +
           chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
           chunk(b"IDAT", zlib.compress(rows, 9)) + chunk(b"IEND", b""))
    return "data:image/png;base64," + base64.b64encode(png).decode()


def colour_ramp(cells: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Finite cells on a dark-blue to yellow ramp between lo and hi; +inf the
    top end, -inf the bottom, NaN magenta (as GetHeatmap's contract says)."""
    span = hi - lo if hi > lo else 1.0
    t = np.clip((np.nan_to_num(cells, nan=0.0, posinf=hi, neginf=lo) - lo) / span, 0, 1)
    low = np.array([20, 30, 90], dtype=np.float64)
    high = np.array([250, 230, 40], dtype=np.float64)
    rgb = (low + (high - low) * t[..., None]).astype(np.uint8)
    rgb[np.isnan(cells)] = (255, 0, 255)
    return rgb


def bar_chart(title: str, labels: Sequence[str], values: Sequence[float], unit: str,
              cap_label: str = "") -> str:
    """A horizontal bar chart as inline SVG; infinite values are drawn full
    length and labelled `cap_label`."""
    finite = [v for v in values if math.isfinite(v)]
    top = max(finite) if finite else 1.0
    top = top if top > 0 else 1.0
    row, left, width = 16, 300, 360
    height = row * len(labels) + 30
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + width + 90}" '
             f'height="{height}" role="img" aria-label="{esc(title)}">',
             f'<text x="0" y="14" font-size="13" font-weight="bold">{esc(title)} ({esc(unit)})</text>']
    for i, (name, v) in enumerate(zip(labels, values)):
        y = 24 + i * row
        frac = 1.0 if not math.isfinite(v) else max(v, 0) / top
        text = cap_label if not math.isfinite(v) else f"{v:.3g}"
        parts.append(f'<text x="{left - 6}" y="{y + 11}" font-size="11" '
                     f'text-anchor="end">{esc(name)}</text>')
        parts.append(f'<rect x="{left}" y="{y + 2}" width="{frac * width:.1f}" height="{row - 4}" '
                     f'fill="{"#999" if not math.isfinite(v) else "#3b6fb6"}"/>')
        parts.append(f'<text x="{left + frac * width + 4:.1f}" y="{y + 11}" '
                     f'font-size="10">{esc(text)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def level_chart(title: str, hist: np.ndarray, code_bits: int) -> str:
    """Elements per code as vertical bars (inline SVG), log-scaled."""
    n = len(hist)
    width, height = 512, 120
    bw = width / max(n, 1)
    top = math.log1p(float(hist.max())) if n and hist.max() > 0 else 1.0
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width + 10}" height="{height + 34}" '
             f'role="img" aria-label="{esc(title)}">',
             f'<text x="0" y="12" font-size="12">{esc(title)}</text>']
    for i, c in enumerate(hist):
        h = height * math.log1p(float(c)) / top
        parts.append(f'<rect x="{i * bw:.2f}" y="{18 + height - h:.2f}" width="{max(bw, 0.5):.2f}" '
                     f'height="{h:.2f}" fill="{"#c0392b" if c == 0 else "#2e8b57"}"/>')
    parts.append(f'<text x="0" y="{height + 32}" font-size="10">codes 0 .. {2 ** code_bits - 1} '
                 f'(log scale; {int((hist > 0).sum())} of {n} used)</text></svg>')
    return "".join(parts)


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
           "img{image-rendering:pixelated;border:1px solid #888}</style></head><body>",
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
               "tensors (dark: 0, yellow: the tensor's largest; magenta: NaN).</p>")
    by_name = {r["name"]: r for r in reports}
    for name in worst:
        ref = by_name[name]["reference_name"] or ""
        h = c.heatmap(quant, name, mode="error", reference=source, reference_tensor=ref,
                      width=128, height=128)
        cells = h["cells"]
        img = png_data_uri(colour_ramp(cells, float(h["min"]), float(h["max"])))
        scale = max(1, 256 // max(cells.shape))
        out.append(f"<h3>{esc(name)}</h3><p>{h['rows']}×{h['cols']} in {h['height']}×{h['width']} "
                   f"cells, max {h['max']:.3f} steps</p><img alt='{esc(name)} error heatmap' "
                   f"width='{cells.shape[1] * scale}' height='{cells.shape[0] * scale}' "
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


def main(argv: Sequence[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("quant", help="the quantized checkpoint")
    ap.add_argument("source", help="its full-precision source")
    ap.add_argument("-o", "--output", required=True, help="the HTML page to write")
    ap.add_argument("--server", help="a tensormorphd HOST:PORT (default: a private one)")
    ap.add_argument("--token", help="bearer token for a server started with --token-file")
    ap.add_argument("--worst", type=int, default=3, help="worst tensors to draw (default 3)")
    args = ap.parse_args(argv)
    c = tm.connect(args.server, token=args.token) if args.server else tm.local()
    try:
        page = build_page(c, args.quant, args.source, args.worst)
    except tm.Error as e:
        print(f"quant_report: {e.code}: {e.message}", file=sys.stderr)
        return 2
    finally:
        c.close()
    with open(args.output, "w", encoding="utf-8") as f:
        f.write(page)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
