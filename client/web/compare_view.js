// A comparison of N quantizations of one source (CompareQuantizations, or
// `tensormorph --json compare`: one {row} per tensor, then one {summary}),
// drawn into a container: the matrix (tensors by quantizations, sortable by a
// click on a header), the size-versus-error chart (bits per weight against
// SQNR, one point per quantization, the frontier of the non-dominated drawn
// as a line, the dominated crossed out) and per-layer error curves (layer
// index against squared error, one line per quantization).
//
// A comparison made with an importance matrix (CompareSummary.weighted)
// also shows the weighted figures beside the unweighted ones: each cell's
// weighted SQNR (or why the matrix did not weigh it), the weighted totals,
// and both charts on the weighted error, since that is the error the
// server's dominance (overall and per layer) was decided on. Without one,
// the drawing is the unweighted one alone.
//
// A comparison made with a budget (CompareSummary.mix) also shows the mix
// the server chose for it, since that is the answer the user asked for:
// its figures (bytes, bits per weight, error, the predicted file size), the
// chosen cell of each tensor shaded in the matrix, and the llama-quantize
// command with its --tensor-type overrides; or, when no mix fits, that the
// budget is unmet and the least budget that would be.
//
// One implementation for two homes: the web inspector's Compare view imports
// it, and `tensormorph compare --html` inlines this file whole into a
// self-contained report. So it imports nothing, fetches nothing and carries
// its own styles; the figures it shows are the JSON's own numbers (the
// report's browser test reads them back from data-* attributes). Inlined in
// a script element, it must never contain that element's end tag (a "<" then
// "/script").

const SVG = 'http://www.w3.org/2000/svg';
const COLOURS = ['#6ea8fe', '#f28e2b', '#59a14f', '#e15759', '#b07aa1', '#edc948', '#76b7b2',
  '#ff9da7', '#9c755f', '#bab0ac'];

const STYLE = `
.cv { font: 13px/1.45 system-ui, 'DejaVu Sans', sans-serif; color: var(--text, #d8dee9); }
.cv h3 { font-size: 12px; font-weight: 600; margin: 18px 0 8px; color: var(--muted, #8a94a6);
  text-transform: uppercase; letter-spacing: .06em; }
.cv table { border-collapse: collapse; font-family: ui-monospace, 'DejaVu Sans Mono', monospace; font-size: 12px; }
.cv th, .cv td { padding: 3px 10px; border-bottom: 1px solid var(--line, #2a3242); text-align: right; white-space: nowrap; }
.cv th:first-child, .cv td:first-child { text-align: left; }
.cv .cv-totals th:nth-child(2), .cv .cv-totals td:nth-child(2) { text-align: left; }
.cv th { color: var(--muted, #8a94a6); font-weight: 600; }
.cv .cv-matrix th[data-sort] { cursor: pointer; user-select: none; }
.cv .cv-matrix th[data-sort]:hover { color: #fff; }
.cv .cv-matrix th.cv-sorted::after { content: ' \\25BE'; }
.cv .cv-matrix th.cv-sorted.cv-up::after { content: ' \\25B4'; }
.cv td.cv-cell { cursor: default; }
.cv td.cv-cell.cv-clickable { cursor: pointer; }
.cv td.cv-cell.cv-clickable:hover { background: var(--bg3, #1d2330); }
.cv td.cv-cell.cv-selected { outline: 2px solid var(--accent, #6ea8fe); outline-offset: -2px; }
.cv .cv-beyond { color: var(--bad, #e15759); }
.cv .cv-dominated-text { color: var(--bad, #e15759); }
.cv .cv-charts { display: flex; flex-wrap: wrap; gap: 24px; }
.cv svg { background: var(--bg2, #161b24); border: 1px solid var(--line, #2a3242); border-radius: 6px; }
.cv svg text { fill: var(--muted, #8a94a6); font-size: 11px; font-family: system-ui, 'DejaVu Sans', sans-serif; }
.cv svg .cv-grid { stroke: var(--line, #2a3242); stroke-width: 1; }
.cv svg .cv-frontier { fill: none; stroke: #d8dee9; stroke-width: 1.5; stroke-dasharray: 5 3; }
.cv .cv-legend { display: flex; flex-wrap: wrap; gap: 12px; margin: 6px 0; font-size: 12px; }
.cv .cv-swatch { display: inline-block; width: 10px; height: 10px; border-radius: 2px; margin-right: 4px; }
.cv .cv-w { color: #8fd19e; margin-left: 6px; }
.cv .cv-w.cv-unweighted { color: var(--muted, #8a94a6); cursor: help; }
.cv .cv-chart-legend { margin: 0 0 6px; font-size: 12px; color: var(--muted, #8a94a6); max-width: 560px; }
.cv .cv-chart-legend b { color: #8fd19e; font-weight: 600; }
.cv td.cv-cell.cv-chosen { background: rgba(240, 192, 96, .16); box-shadow: inset 3px 0 0 #f0c060; }
.cv .cv-chosen-key { display: inline-block; width: 10px; height: 10px; vertical-align: -1px;
  background: rgba(240, 192, 96, .3); box-shadow: inset 3px 0 0 #f0c060; }
.cv .cv-mix-from { margin: 6px 0; font-size: 12px; color: var(--muted, #8a94a6); }
.cv .cv-mix-note { margin: 6px 0; font-size: 12px; color: var(--muted, #8a94a6); max-width: 1100px; }
.cv .cv-mix-unmet { color: var(--bad, #e15759); font-weight: 600; }
.cv pre.cv-command { font: 12px/1.5 ui-monospace, 'DejaVu Sans Mono', monospace; background: var(--bg2, #161b24);
  border: 1px solid var(--line, #2a3242); border-radius: 6px; padding: 8px 12px; margin: 6px 0;
  overflow-x: auto; user-select: all; max-height: 320px; }
`;

function ensureStyle(doc) {
  if (doc.getElementById('cv-style')) return;
  const s = doc.createElement('style');
  s.id = 'cv-style';
  s.textContent = STYLE;
  doc.head.appendChild(s);
}

// protobuf's JSON mapping writes infinite doubles as "Infinity" and int64
// as strings: numbers for arithmetic.
function num(v) {
  if (v === undefined || v === null || v === '') return 0;
  return typeof v === 'number' ? v : Number(v);
}

function fmt(v, digits) {
  if (!Number.isFinite(v)) return v > 0 ? 'inf' : String(v);
  return v.toFixed(digits);
}

function fmtError(v) {
  if (v === 0) return '0';
  return Math.abs(v) >= 0.01 && Math.abs(v) < 1e5 ? v.toPrecision(6) : v.toExponential(4);
}

// The events of a comparison ({row}..., {summary}) as {rows, summary};
// progress events are skipped.
export function parseComparison(events) {
  const rows = [];
  let summary = null;
  for (const e of events) {
    if (e.row) rows.push(e.row);
    else if (e.summary) summary = e.summary;
  }
  return { rows, summary };
}

function el(doc, tag, attrs = {}, text) {
  const e = doc.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

function svgEl(doc, tag, attrs = {}, text) {
  const e = doc.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  if (text !== undefined) e.textContent = text;
  return e;
}

// Round tick values covering [lo, hi], about n of them.
function ticks(lo, hi, n, minStep = 0) {
  if (!(hi > lo)) return [lo];
  const raw = Math.max((hi - lo) / n, minStep);
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= raw);
  const out = [];
  for (let t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) out.push(+t.toPrecision(12));
  return out;
}

// A plot frame: scales from data ranges (padded), the grid and axis labels.
// labels: x, y (axis titles), xTick (a tick's text), yMinStep (the least
// y tick step: 1 on a log scale, so ticks fall on decades).
function frame(doc, svg, box, xr, yr, labels, yFormat = (v) => String(v)) {
  const pad = (r) => {
    const span = r[1] - r[0] || Math.abs(r[0]) || 1;
    return [r[0] - span * 0.08, r[1] + span * 0.08];
  };
  const [x0, x1] = pad(xr);
  const [y0, y1] = pad(yr);
  const sx = (v) => box.left + ((v - x0) / (x1 - x0)) * (box.width - box.left - box.right);
  const sy = (v) => box.height - box.bottom - ((v - y0) / (y1 - y0)) * (box.height - box.top - box.bottom);
  for (const t of ticks(x0, x1, 6)) {
    svg.appendChild(svgEl(doc, 'line', { class: 'cv-grid', x1: sx(t), x2: sx(t), y1: box.top, y2: box.height - box.bottom }));
    svg.appendChild(svgEl(doc, 'text', { x: sx(t), y: box.height - box.bottom + 14, 'text-anchor': 'middle' }, labels.xTick(t)));
  }
  for (const t of ticks(y0, y1, 5, labels.yMinStep || 0)) {
    svg.appendChild(svgEl(doc, 'line', { class: 'cv-grid', x1: box.left, x2: box.width - box.right, y1: sy(t), y2: sy(t) }));
    svg.appendChild(svgEl(doc, 'text', { x: box.left - 6, y: sy(t) + 4, 'text-anchor': 'end' }, yFormat(t)));
  }
  svg.appendChild(svgEl(doc, 'text', { x: (box.left + box.width - box.right) / 2, y: box.height - 6, 'text-anchor': 'middle' }, labels.x));
  svg.appendChild(svgEl(doc, 'text', {
    x: 14, y: (box.top + box.height - box.bottom) / 2, 'text-anchor': 'middle',
    transform: `rotate(-90 14 ${(box.top + box.height - box.bottom) / 2})`,
  }, labels.y));
  return { sx, sy };
}

function nameOf(totals, q, names) {
  return (names && names[q]) || (totals[q] && totals[q].checkpoint) || `[${q}]`;
}

// The last part of a path, for labels where room is short ("a/b/q.gguf"
// labels as "q.gguf"; a directory "hf/gptq/" as "gptq").
function shortName(totals, q, names) {
  const parts = nameOf(totals, q, names).split('/').filter((p) => p);
  return parts.length ? parts[parts.length - 1] : nameOf(totals, q, names);
}

// A tick label: three significant digits, no trailing zeros.
function fmtTickValue(v) {
  return String(+v.toPrecision(3));
}

// The error a chart's y axis shows. Unweighted: the totals' SQNR, higher
// is better. Weighted: the weighted error the server's dominance was
// decided on (CompareTotals.weighted_error, or CompareLayer's), lower is
// better, on a log scale when every value is positive (quantizations differ
// by decades). f maps a value to the axis; tick turns an axis value back
// into a label.
function errorAxis(values, weighted, what) {
  if (!weighted) return { f: (v) => v, tick: fmtTickValue, label: 'SQNR dB (higher is better)', minStep: 0 };
  const log = values.every((v) => v > 0);
  return {
    f: log ? Math.log10 : (v) => v, tick: log ? (t) => fmtTickValue(Math.pow(10, t)) : fmtTickValue,
    label: `weighted ${what}${log ? ' (log)' : ''}, lower is better`, minStep: log ? 1 : 0,
  };
}

// The size-versus-error chart: a point per quantization at (total bits per
// weight, total SQNR, or with an imatrix total weighted error); the
// non-dominated joined by the frontier line in order of size, the dominated
// drawn hollow with a cross.
function sizeChart(doc, summary, names, weighted) {
  const totals = summary.totals || [];
  const pts = totals.map((t, q) => ({
    q, bpw: num(t.bitsPerWeight), sqnr: num(t.sqnrDb), sse: num(t.sumSquaredError),
    werr: num(t.weightedError), dominated: (t.dominatedBy || []).length > 0,
  }));
  for (const p of pts) p.y = weighted ? p.werr : p.sqnr;
  const box = { width: 560, height: 340, left: 56, right: 20, top: 16, bottom: 40 };
  const svg = svgEl(doc, 'svg', {
    class: 'cv-chart', width: box.width, height: box.height, viewBox: `0 0 ${box.width} ${box.height}`,
    'data-error': weighted ? 'weighted' : 'sqnr',
  });
  const finite = pts.filter((p) => Number.isFinite(p.y));
  if (!finite.length) return svg;
  const mix = mixPoint(summary, weighted);
  const placed = mix ? finite.concat([mix]) : finite;
  const axis = errorAxis(placed.map((p) => p.y), weighted, 'squared error');
  const ys = placed.map((p) => axis.f(p.y));
  const xr = [Math.min(...placed.map((p) => p.bpw)), Math.max(...placed.map((p) => p.bpw))];
  const { sx, sy } = frame(doc, svg, box, xr, [Math.min(...ys), Math.max(...ys)],
    { x: 'bits per weight', y: axis.label, xTick: (t) => String(t), yMinStep: axis.minStep },
    weighted ? axis.tick : undefined);
  const front = finite.filter((p) => !p.dominated).sort((a, b) => a.bpw - b.bpw);
  svg.appendChild(svgEl(doc, 'polyline', { class: 'cv-frontier', points: front.map((p) => `${sx(p.bpw)},${sy(axis.f(p.y))}`).join(' ') }));
  const used = [];
  for (const p of finite) {
    const colour = COLOURS[p.q % COLOURS.length];
    const g = svgEl(doc, 'g', {
      class: 'cv-point' + (p.dominated ? ' cv-dominated' : ''), 'data-q': p.q, 'data-bpw': p.bpw,
      'data-sqnr': p.sqnr, 'data-sse': p.sse, 'data-dominated': p.dominated,
    });
    if (weighted) g.setAttribute('data-weighted-error', String(p.werr));
    const x = sx(p.bpw);
    const y = sy(axis.f(p.y));
    g.appendChild(svgEl(doc, 'circle', { cx: x, cy: y, r: 6, fill: p.dominated ? 'none' : colour, stroke: colour, 'stroke-width': 2 }));
    if (p.dominated) {
      g.appendChild(svgEl(doc, 'path', { d: `M${x - 5},${y - 5}L${x + 5},${y + 5}M${x - 5},${y + 5}L${x + 5},${y - 5}`, stroke: colour, 'stroke-width': 1.5 }));
    }
    const label = `[${p.q}] ${shortName(summary.totals, p.q, names)}${p.dominated ? ' (dominated)' : ''}`;
    // Right of the point, or left of it in the chart's right half; below
    // when another label already sits there (a close pair of points).
    const right = x > box.width * 0.6;
    let ly = y - 8;
    while (used.some(([ux, uy]) => Math.abs(ux - x) < 120 && Math.abs(uy - ly) < 13)) ly += 14;
    used.push([x, ly]);
    g.appendChild(svgEl(doc, 'text', { x: right ? x - 9 : x + 9, y: ly, 'text-anchor': right ? 'end' : 'start' }, label));
    const figures = `${fmt(p.bpw, 4)} bits per weight, SQNR ${fmt(p.sqnr, 2)} dB, squared error ${fmtError(p.sse)}` +
      (weighted ? `, weighted error ${fmtError(p.werr)}` : '');
    g.appendChild(svgEl(doc, 'title', {}, `${label}: ${figures}`));
    svg.appendChild(g);
  }
  if (mix) drawMixPoint(doc, svg, mix, sx(mix.bpw), sy(axis.f(mix.y)), weighted);
  return svg;
}

// The budget's mix on the size chart, at its bits per weight and its
// error (SQNR, or the weighted error it was chosen on): null without one,
// or when no mix fits the budget.
function mixPoint(summary, weighted) {
  const m = summary.mix;
  if (!m || m.budgetUnmet) return null;
  const p = { bpw: num(m.bitsPerWeight), sqnr: num(m.sqnrDb), werr: num(m.weightedError) };
  p.y = weighted ? p.werr : p.sqnr;
  return Number.isFinite(p.y) && Number.isFinite(p.bpw) ? p : null;
}

function drawMixPoint(doc, svg, p, x, y, weighted) {
  const g = svgEl(doc, 'g', { class: 'cv-mix-point', 'data-bpw': p.bpw, 'data-sqnr': p.sqnr });
  if (weighted) g.setAttribute('data-weighted-error', String(p.werr));
  g.appendChild(svgEl(doc, 'path', { d: `M${x},${y - 8}L${x + 8},${y}L${x},${y + 8}L${x - 8},${y}Z`, fill: '#f0c060', stroke: '#0f131a', 'stroke-width': 1 }));
  g.appendChild(svgEl(doc, 'text', { x: x + 11, y: y + 4 }, 'the mix'));
  g.appendChild(svgEl(doc, 'title', {}, `the mix for the budget: ${fmt(p.bpw, 4)} bits per weight, SQNR ${fmt(p.sqnr, 2)} dB` +
    (weighted ? `, weighted error ${fmtError(p.werr)}` : '')));
  svg.appendChild(g);
}

// Per-layer error curves: layer index (the number ending the layer's name)
// against its summed squared error (with an imatrix: its weighted error,
// on which the layer's dominance was decided), one line per quantization,
// on a log scale when every error is positive (quantizations differ by
// decades).
function layerChart(doc, summary, names, weighted) {
  const layers = (summary.layers || []).map((l) => ({
    index: Number((/(\d+)$/.exec(l.layer) || [])[1]), name: l.layer, sse: (l.sumSquaredError || []).map(num),
    werr: (l.weightedError || []).map(num), dominated: new Set((l.dominated || []).map(Number)),
  })).filter((l) => Number.isFinite(l.index)).sort((a, b) => a.index - b.index);
  for (const l of layers) l.y = weighted ? l.werr : l.sse;
  const box = { width: 560, height: 340, left: 64, right: 20, top: 16, bottom: 40 };
  const svg = svgEl(doc, 'svg', {
    class: 'cv-layers', width: box.width, height: box.height, viewBox: `0 0 ${box.width} ${box.height}`,
    'data-error': weighted ? 'weighted' : 'squared',
  });
  if (!layers.length) return svg;
  const all = layers.flatMap((l) => l.y);
  const log = all.every((v) => v > 0);
  const f = log ? Math.log10 : (v) => v;
  const ys = all.map(f);
  const xr = [layers[0].index, layers[layers.length - 1].index];
  const what = (weighted ? 'weighted ' : '') + 'squared error';
  const { sx, sy } = frame(doc, svg, box, xr, [Math.min(...ys), Math.max(...ys)],
    {
      x: 'layer', y: log ? `${what} (log)` : what, xTick: (t) => (Number.isInteger(t) ? String(t) : ''),
      yMinStep: log ? 1 : 0,
    },
    log ? (t) => fmtTickValue(Math.pow(10, t)) : fmtTickValue);
  const nq = (summary.totals || []).length;
  for (let q = 0; q < nq; q++) {
    const colour = COLOURS[q % COLOURS.length];
    const g = svgEl(doc, 'g', { class: 'cv-layer-line', 'data-q': q });
    g.appendChild(svgEl(doc, 'polyline', {
      points: layers.map((l) => `${sx(l.index)},${sy(f(l.y[q]))}`).join(' '), fill: 'none', stroke: colour, 'stroke-width': 2,
    }));
    for (const l of layers) {
      // Hollow where this quantization is dominated within the layer.
      const dominated = l.dominated.has(q);
      const c = svgEl(doc, 'circle', {
        class: 'cv-layer-point', cx: sx(l.index), cy: sy(f(l.y[q])), r: dominated ? 4 : 3,
        fill: dominated ? 'none' : colour, stroke: colour, 'stroke-width': 1.5,
        'data-layer': l.name, 'data-sse': l.sse[q], 'data-dominated': dominated,
      });
      if (weighted) c.setAttribute('data-weighted-error', String(l.werr[q]));
      c.appendChild(svgEl(doc, 'title', {}, `${l.name} [${q}] ${shortName(summary.totals, q, names)}: ${weighted ? 'weighted error ' : ''}${fmtError(l.y[q])}${dominated ? ' (dominated in this layer)' : ''}`));
      g.appendChild(c);
    }
    svg.appendChild(g);
  }
  return svg;
}

function legend(doc, totals, names) {
  const div = el(doc, 'div', { class: 'cv-legend' });
  totals.forEach((t, q) => {
    const item = el(doc, 'span', { class: 'cv-legend-item', 'data-q': q });
    item.appendChild(el(doc, 'span', { class: 'cv-swatch', style: `background:${COLOURS[q % COLOURS.length]}` }));
    item.appendChild(doc.createTextNode(`[${q}] ${shortName(totals, q, names)}`));
    div.appendChild(item);
  });
  return div;
}

function cellText(c) {
  if (!c.present) return '-';
  if (c.undecodable) return `${c.scheme} (cannot decode)`;
  return `${c.scheme} ${fmt(num(c.bitsPerWeight), 2)} ${fmt(num(c.sqnrDb), 2)}${num(c.maxExcessSteps) > 0 ? '!' : ''}`;
}

// Whether the importance matrix weighed a cell (protobuf's JSON mapping may
// leave the enum out when it is the default, UNSPECIFIED).
function cellWeighted(c) {
  return c.imatrixUse === 'IMATRIX_USE_WEIGHTED';
}

// With an imatrix, after a decoded cell's figures: "w" and its weighted
// SQNR, or a muted "w -" whose tooltip says why the matrix did not weigh
// it (its weighted figures are 0, no measurement: proto's imatrix_use).
function weightedMark(doc, td, c) {
  if (!c.present || c.undecodable) return;
  if (cellWeighted(c)) {
    td.setAttribute('data-weighted-sqnr', num(c.weightedSqnrDb));
    td.appendChild(el(doc, 'span', { class: 'cv-w', title: 'importance-weighted SQNR dB' }, `w ${fmt(num(c.weightedSqnrDb), 2)}`));
    return;
  }
  const why = `not weighted: ${c.imatrixNote || 'the importance matrix did not weigh it'}`;
  td.setAttribute('data-imatrix-note', why);
  td.appendChild(el(doc, 'span', { class: 'cv-w cv-unweighted', title: why }, 'w -'));
}

// The sort key of a row for column `key`: the name, or a quantization's
// SQNR (absent cells last whichever the direction).
function sortRows(rows, key, up) {
  const order = rows.map((r, i) => i);
  const value = (i) => {
    if (key === 'name') return rows[i].referenceName;
    const c = (rows[i].cells || [])[key];
    return c && c.present && !c.undecodable ? num(c.sqnrDb) : null;
  };
  order.sort((a, b) => {
    const va = value(a);
    const vb = value(b);
    if (va === null || vb === null) return (va === null) - (vb === null) || a - b;
    // Names in code-unit order, as the rows arrive (not the locale's,
    // which puts output_norm before output.weight).
    const d = typeof va === 'string' ? (va < vb ? -1 : va > vb ? 1 : 0) : va - vb;
    return (up ? d : -d) || a - b;
  });
  return order;
}

// chosen: the mix's quantization per tensor name (empty without a mix).
function matrix(doc, rows, totals, names, onCell, weighted, chosen) {
  const table = el(doc, 'table', { class: 'cv-matrix' });
  const head = el(doc, 'tr');
  const nameTh = el(doc, 'th', { 'data-sort': 'name', class: 'cv-sorted cv-up' }, 'tensor');
  head.appendChild(nameTh);
  for (let q = 0; q < totals.length; q++) {
    head.appendChild(el(doc, 'th', { 'data-sort': q, title: `${nameOf(totals, q, names)}: sort by its SQNR` }, `[${q}] ${shortName(totals, q, names)}`));
  }
  table.appendChild(el(doc, 'thead')).appendChild(head);
  const body = table.appendChild(el(doc, 'tbody'));
  const trs = rows.map((r, i) => {
    const tr = el(doc, 'tr', { 'data-tensor': r.referenceName, 'data-row': i });
    tr.appendChild(el(doc, 'td', {}, r.referenceName));
    (r.cells || []).forEach((c, q) => {
      const td = el(doc, 'td', {
        class: 'cv-cell' + (onCell && c.present && !c.undecodable ? ' cv-clickable' : ''), 'data-q': q,
        'data-scheme': c.scheme || '', 'data-bpw': num(c.bitsPerWeight), 'data-sqnr': num(c.sqnrDb),
        'data-present': !!c.present,
      }, cellText(c));
      if (num(c.maxExcessSteps) > 0) td.classList.add('cv-beyond');
      if (weighted) weightedMark(doc, td, c);
      if (chosen.get(r.referenceName) === q) {
        td.classList.add('cv-chosen');
        td.setAttribute('data-chosen', 'true');
        td.title = 'the mix\'s choice for this tensor';
      }
      if (onCell && c.present && !c.undecodable) {
        td.addEventListener('click', () => {
          for (const s of table.querySelectorAll('.cv-selected')) s.classList.remove('cv-selected');
          td.classList.add('cv-selected');
          onCell(r, q, c);
        });
      }
      tr.appendChild(td);
    });
    return tr;
  });
  let sortKey = 'name';
  let up = true;
  const draw = () => {
    for (const i of sortRows(rows, sortKey, up)) body.appendChild(trs[i]);
  };
  head.addEventListener('click', (ev) => {
    const th = ev.target.closest('th[data-sort]');
    if (!th) return;
    const key = th.dataset.sort === 'name' ? 'name' : Number(th.dataset.sort);
    // A first click sorts ascending: by name, or a quantization's worst
    // (lowest SQNR) tensors first; a second click reverses.
    up = key === sortKey ? !up : true;
    sortKey = key;
    for (const h of head.children) h.classList.remove('cv-sorted', 'cv-up');
    th.classList.add('cv-sorted');
    if (up) th.classList.add('cv-up');
    draw();
  });
  draw();
  return table;
}

// The totals' columns ([text, tooltip]); with an imatrix the weighted ones
// ("W": importance-weighted, short as the CLI's, since checkpoint paths
// already make the table wide) join them before "dominated by", which is
// then on the weighted error.
function totalsColumns(weighted) {
  const head = ['', 'quantization', 'tensors', 'bytes', 'bits per weight', 'SQNR dB', 'squared error'].map((h) => [h]);
  if (weighted) {
    head.push(['W tensors', 'the tensors the importance matrix weighed'],
      ['W SQNR dB', 'the SQNR of their importance-weighted sums'],
      ['weighted error', 'importance-weighted squared error (unweighted where the matrix does not weigh a tensor)'],
      ['dominated by', 'on the weighted error']);
  } else {
    head.push(['dominated by']);
  }
  return head;
}

function totalsTable(doc, totals, names, weighted) {
  const table = el(doc, 'table', { class: 'cv-totals' });
  const head = el(doc, 'tr');
  for (const [h, why] of totalsColumns(weighted)) head.appendChild(el(doc, 'th', why ? { title: why } : {}, h));
  table.appendChild(el(doc, 'thead')).appendChild(head);
  const body = table.appendChild(el(doc, 'tbody'));
  totals.forEach((t, q) => {
    const by = (t.dominatedBy || []).map((d) => `[${d}]`).join(' ');
    const tr = el(doc, 'tr', { 'data-q': q, 'data-bytes': num(t.bytes), 'data-bpw': num(t.bitsPerWeight), 'data-sqnr': num(t.sqnrDb), 'data-sse': num(t.sumSquaredError) });
    const cells = [`[${q}]`, nameOf(totals, q, names), String(num(t.tensors)), String(num(t.bytes)),
      fmt(num(t.bitsPerWeight), 4), fmt(num(t.sqnrDb), 2), fmtError(num(t.sumSquaredError))];
    if (weighted) {
      tr.setAttribute('data-tensors-weighted', num(t.tensorsWeighted));
      tr.setAttribute('data-weighted-sqnr', num(t.weightedSqnrDb));
      tr.setAttribute('data-weighted-error', num(t.weightedError));
      // With no tensor weighed the weighted SQNR is no measurement.
      cells.push(String(num(t.tensorsWeighted)), num(t.tensorsWeighted) > 0 ? fmt(num(t.weightedSqnrDb), 2) : '-',
        fmtError(num(t.weightedError)));
    }
    cells.push(by || '-');
    for (const v of cells) tr.appendChild(el(doc, 'td', {}, v));
    if (by) tr.lastChild.classList.add('cv-dominated-text');
    body.appendChild(tr);
  });
  return table;
}

// Whether the comparison was made with an importance matrix: the summary
// says so, or (rows alone, no summary yet) a cell carries an imatrix_use.
function isWeighted(rows, summary) {
  if (summary) return !!summary.weighted;
  return rows.some((r) => (r.cells || []).some((c) => c.imatrixUse && c.imatrixUse !== 'IMATRIX_USE_UNSPECIFIED'));
}

// The factor a tensor the imatrix does not weigh counts its squared error
// by (CompareSummary.unweighted_factor), so that the matrix's overall scale
// changes no choice.
function unweightedFactorText(summary) {
  const f = Number(summary.unweightedFactor);
  return Number.isFinite(f) ? f.toPrecision(6) : String(summary.unweightedFactor ?? '?');
}

// What each chart's error is, said in words above the charts: the points
// of a weighted comparison sit at an error other than the totals' SQNR.
function chartLegend(doc, summary) {
  const p = el(doc, 'p', { class: 'cv-chart-legend', 'data-error': 'weighted' });
  p.appendChild(doc.createTextNode('Both charts show the '));
  p.appendChild(el(doc, 'b', {}, 'importance-weighted squared error'));
  p.appendChild(doc.createTextNode(' (summed per quantization, and per layer): the error dominance was decided on.'));
  const n = (summary.unweighted || []).length;
  if (n) p.appendChild(doc.createTextNode(` ${n} tensor${n === 1 ? '' : 's'} the imatrix did not weigh count with their squared error × ${unweightedFactorText(summary)} (the matrix's mean importance).`));
  return p;
}

// A word as a POSIX shell reads it back: single-quoted unless plain (an
// override holds "\" and "$", which the shell would otherwise take).
function shellWord(w) {
  return /^[A-Za-z0-9_.\/=:,+-]+$/.test(w) ? w : `'${w.replace(/'/g, "'\\''")}'`;
}

// The command llama.cpp makes the mix with, as the CLI prints it (the
// base's ftype by llama-quantize's name, or FTYPE when it names none), one
// override a line so that a long list stays readable and copies whole. A
// weighted mix names IMATRIX: its predicted error holds only when llama.cpp
// quantizes with the matrix the comparison weighed by.
function llamaCommand(m, weighted) {
  const lines = ['llama-quantize'];
  if (weighted) lines.push('  --imatrix IMATRIX');
  for (const t of m.tensorTypeOverrides || []) lines.push(`  --tensor-type ${shellWord(t)}`);
  lines.push(`  SOURCE.gguf OUT.gguf ${m.baseFtypeName || 'FTYPE'}`);
  return lines.join(' \\\n');
}

// What the budget was asked as: the request's bits per weight when the
// caller passes the request (the server applies them as budgetBytes).
function budgetText(m, request) {
  const bytes = `${num(m.budgetBytes)} bytes`;
  const bpw = request && request.budgetBitsPerWeight;
  return bpw !== undefined && bpw !== null ? `${num(bpw)} bits per weight (${bytes} as applied)` : bytes;
}

// The mix's figures, one row: what the knapsack predicts for it.
function mixFigures(doc, m, weighted) {
  const table = el(doc, 'table', { class: 'cv-mix-figures' });
  const heads = ['bytes', 'bits per weight', 'SQNR dB', 'squared error'];
  if (weighted) heads.push('weighted error');
  heads.push('predicted file size');
  const head = el(doc, 'tr');
  for (const h of heads) head.appendChild(el(doc, 'th', {}, h));
  table.appendChild(el(doc, 'thead')).appendChild(head);
  const tr = el(doc, 'tr', {
    'data-bytes': num(m.bytes), 'data-bpw': num(m.bitsPerWeight), 'data-sqnr': num(m.sqnrDb),
    'data-sse': num(m.sumSquaredError), 'data-file-size': num(m.predictedFileSize),
  });
  const cells = [String(num(m.bytes)), fmt(num(m.bitsPerWeight), 4), fmt(num(m.sqnrDb), 2), fmtError(num(m.sumSquaredError))];
  if (weighted) {
    tr.setAttribute('data-weighted-error', num(m.weightedError));
    cells.push(fmtError(num(m.weightedError)));
  }
  // 0 when not every quantization is a GGUF: no file to predict.
  cells.push(num(m.predictedFileSize) > 0 ? `${num(m.predictedFileSize)} bytes` : '-');
  for (const v of cells) tr.appendChild(el(doc, 'td', {}, v));
  table.appendChild(el(doc, 'tbody')).appendChild(tr);
  return table;
}

// How many of the mix's tensors each quantization gives.
function mixSources(doc, m, totals, names) {
  const counts = totals.map(() => 0);
  for (const c of m.choices || []) counts[num(c.quantization)] = (counts[num(c.quantization)] || 0) + 1;
  const p = el(doc, 'p', { class: 'cv-mix-from' });
  p.appendChild(el(doc, 'span', { class: 'cv-chosen-key' }));
  p.appendChild(doc.createTextNode(` ${(m.choices || []).length} tensors, shaded in the matrix below: ` +
    counts.map((n, q) => `${n} from [${q}] ${shortName(totals, q, names)}`).join(', ')));
  return p;
}

// The llama-quantize command (copyable: a click selects it whole) and what
// its figures hold on, or why there is none.
function mixCommand(doc, sec, m, totals, names, weighted) {
  if (!(m.tensorTypeOverrides || []).length) {
    sec.appendChild(el(doc, 'p', { class: 'cv-mix-note' },
      'No llama-quantize command: its --tensor-type overrides are made only when every quantization is a GGUF.'));
    return;
  }
  sec.appendChild(el(doc, 'h3', {}, 'llama.cpp makes it with'));
  sec.appendChild(el(doc, 'pre', { class: 'cv-command', title: 'a click selects the whole command' }, llamaCommand(m, weighted)));
  const base = `[${num(m.base)}] ${nameOf(totals, num(m.base), names)}`;
  let note = m.baseFtypeName
    ? `The overrides are relative to the base ${base}: its ftype, ${m.baseFtypeName}. `
    : `The base ${base} names no ftype llama-quantize takes (general.file_type ${num(m.baseFtype) < 0 ? 'absent' : num(m.baseFtype)}): put for FTYPE the one it was made with. `;
  if (weighted) note += 'IMATRIX: the importance matrix this comparison was weighed by. ';
  note += `SOURCE.gguf: the full-precision GGUF. Predicted file size ${num(m.predictedFileSize)} bytes`;
  const left = (m.leftOut || []).length;
  note += left ? `, if llama.cpp keeps the base's type for the ${left} tensors left out of the mix.` : '.';
  sec.appendChild(el(doc, 'p', { class: 'cv-mix-note' }, note));
}

// The mix for the request's budget (CompareSummary.mix): its figures, where
// its tensors come from and the command that makes it; or, the budget below
// the smallest mix (the CLI's exit 3), that plainly, with the least budget.
function mixSection(doc, root, summary, options, weighted) {
  const m = summary.mix;
  const totals = summary.totals || [];
  const sec = root.appendChild(el(doc, 'section', {
    class: 'cv-mix', 'data-budget-bytes': num(m.budgetBytes), 'data-unmet': !!m.budgetUnmet,
  }));
  const least = weighted ? ', least weighted error' : ', least squared error';
  sec.appendChild(el(doc, 'h3', {}, `Mix for the budget: ${budgetText(m, options.request)}${m.budgetUnmet ? '' : least}` +
    (m.budgetUnmet ? '' : ' (the diamond on the size chart)')));
  if (m.budgetUnmet) {
    sec.appendChild(el(doc, 'p', {
      class: 'cv-mix-unmet', 'data-least-bytes': num(m.leastBytes), 'data-least-bpw': num(m.leastBitsPerWeight),
    }, `Budget unmet: no mix is made. The budget of ${num(m.budgetBytes)} bytes is below the smallest mix, ` +
      `${num(m.leastBytes)} bytes (${fmt(num(m.leastBitsPerWeight), 4)} bits per weight: every shared tensor ` +
      'from its smallest quantization). The totals, charts and matrix stand.'));
    return;
  }
  sec.appendChild(mixFigures(doc, m, weighted));
  sec.appendChild(mixSources(doc, m, totals, options.names));
  if ((m.leftOut || []).length) {
    sec.appendChild(el(doc, 'p', { class: 'cv-mix-note cv-mix-left-out' },
      `Left out of the mix (no choice made; its errors leave them out): ${m.leftOut.join(', ')}`));
  }
  mixCommand(doc, sec, m, totals, options.names, weighted);
}

// The totals, what they leave out, and the two charts.
function summarySection(doc, root, rows, summary, options, weighted) {
  const totals = summary.totals || [];
  root.appendChild(el(doc, 'h3', {}, 'Totals over the tensors every quantization holds' +
    (weighted ? ' (W: importance-weighted; dominance on the weighted error)' : '')));
  root.appendChild(totalsTable(doc, totals, options.names, weighted));
  // Left out of the totals, by why: a quantization lacks the tensor, or
  // holds it in a type that cannot be decoded (summary.undecodable).
  const lacking = rows.filter((r) => (r.cells || []).some((c) => !c.present))
    .map((r) => r.referenceName);
  if (lacking.length) {
    root.appendChild(el(doc, 'p', { class: 'cv-not-shared' }, `Not held by every quantization (left out of the totals): ${lacking.join(', ')}`));
  }
  if ((summary.undecodable || []).length) {
    root.appendChild(el(doc, 'p', { class: 'cv-not-shared' }, `Cannot be decoded (left out of the totals): ${summary.undecodable.join(', ')}`));
  }
  if (weighted && (summary.unweighted || []).length) {
    root.appendChild(el(doc, 'p', { class: 'cv-unweighted-list' },
      `Not weighted by the imatrix (their squared error × ${unweightedFactorText(summary)}, the matrix's mean importance, counts in the weighted totals): ${summary.unweighted.join(', ')}`));
  }
  if (summary.mix) mixSection(doc, root, summary, options, weighted);
  const charts = root.appendChild(el(doc, 'div', { class: 'cv-charts' }));
  const size = charts.appendChild(el(doc, 'div'));
  size.appendChild(el(doc, 'h3', {}, `Size against ${weighted ? 'weighted ' : ''}error (the dashed line: the frontier)`));
  if (weighted) size.appendChild(chartLegend(doc, summary));
  size.appendChild(sizeChart(doc, summary, options.names, weighted));
  const layer = charts.appendChild(el(doc, 'div'));
  layer.appendChild(el(doc, 'h3', {}, `${weighted ? 'Weighted error' : 'Error'} per layer (hollow: dominated in that layer)`));
  layer.appendChild(layerChart(doc, summary, options.names, weighted));
  layer.appendChild(legend(doc, totals, options.names));
}

// Draws the comparison `events` into `container` (emptied first).
// options: names (a label per quantization; default the summary's
// checkpoint names), onCell(row, q, cell) (makes present cells clickable),
// request (the CompareQuantizationsRequest, as JSON: the mix's heading then
// says the budget as asked). Returns {rows, summary, weighted}.
export function renderComparison(container, events, options = {}) {
  const doc = container.ownerDocument;
  ensureStyle(doc);
  const { rows, summary } = parseComparison(events);
  const totals = (summary && summary.totals) || [];
  const weighted = isWeighted(rows, summary);
  container.textContent = '';
  const root = container.appendChild(el(doc, 'div', { class: 'cv', 'data-weighted': weighted }));
  if (summary) summarySection(doc, root, rows, summary, options, weighted);
  const mix = summary && summary.mix && !summary.mix.budgetUnmet ? summary.mix : null;
  const chosen = new Map(((mix && mix.choices) || []).map((c) => [c.referenceName, num(c.quantization)]));
  const mark = (weighted ? '; w: importance-weighted SQNR dB (w -: not weighted, hover for why)' : '') +
    (mix ? '; shaded: the mix\'s choice' : '');
  root.appendChild(el(doc, 'h3', {}, `Per tensor: type, bits per weight, SQNR dB (! beyond the format's bound)${mark}; click a header to sort`));
  const nq = totals.length || Math.max(0, ...rows.map((r) => (r.cells || []).length));
  const cols = totals.length ? totals : Array.from({ length: nq }, () => ({}));
  root.appendChild(matrix(doc, rows, cols, options.names, options.onCell, weighted, chosen));
  return { rows, summary, weighted };
}
