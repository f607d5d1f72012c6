// Two error heatmaps of one source tensor side by side, each quantization's
// error against the source (GetHeatmap, HEATMAP_MODE_ERROR: the cell's worst
// error in that format's quantization steps), for the Compare view.
//
// One colour scale for both: scales.js's error-in-steps scale with one bound
// (round-to-nearest's half step), so a colour means the same number of steps
// on the left and on the right, whatever each format's own bound. Both are
// asked on the same grid (width x height over the whole tensor), so cell
// (i, j) covers the same elements in both, and the cursor is linked: moving
// over either draws a crosshair on the same cell of both and prints both
// cells' errors.
import * as api from '../api.js';
import { el, clear, loading } from '../ui.js';
import { errorColour, errorLegend, DEFAULT_BOUND } from '../scales.js';

const SIDE = 256;     // cells per side asked for (fewer when the tensor is smaller)
const SHOWN = 340;    // CSS pixels per side

function legendBar() {
  const { gradient, ticks } = errorLegend(DEFAULT_BOUND);
  const bar = el('div', { class: 'pair-legend-bar', style: { background: gradient } });
  const marks = el('div', { class: 'pair-legend-ticks' });
  for (const t of ticks) {
    marks.append(el('span', { style: { left: `${(100 * t.at).toFixed(2)}%` } }, t.label));
  }
  return el('div', { class: 'pair-legend', 'data-bound': DEFAULT_BOUND },
    el('div', { class: 'muted small' }, `error in steps, one scale for both (calm up to ${DEFAULT_BOUND} step, alarm beyond)`),
    bar, marks);
}

function paint(canvas, d) {
  canvas.width = d.width;
  canvas.height = d.height;
  const g = canvas.getContext('2d');
  const img = g.createImageData(d.width, d.height);
  for (let i = 0; i < d.values.length; i++) {
    const [r, gr, b] = errorColour(d.values[i], DEFAULT_BOUND);
    img.data.set([r, gr, b, 255], i * 4);
  }
  g.putImageData(img, 0, 0);
}

function drawCursor(overlay, d, cell) {
  overlay.width = SHOWN;
  overlay.height = SHOWN;
  const g = overlay.getContext('2d');
  g.clearRect(0, 0, SHOWN, SHOWN);
  if (!cell) {
    delete overlay.dataset.cursor;
    return;
  }
  const [i, j] = cell;
  const cw = SHOWN / d.width;
  const ch = SHOWN / d.height;
  g.strokeStyle = '#ffffff';
  g.lineWidth = 1;
  g.beginPath();
  g.moveTo((j + 0.5) * cw, 0);
  g.lineTo((j + 0.5) * cw, SHOWN);
  g.moveTo(0, (i + 0.5) * ch);
  g.lineTo(SHOWN, (i + 0.5) * ch);
  g.stroke();
  g.strokeRect(j * cw, i * ch, Math.max(cw, 3), Math.max(ch, 3));
  overlay.dataset.cursor = `${i},${j}`;
}

function cellText(d, i, j) {
  const v = d.values[i * d.width + j];
  const rows = `${d.rowEdges[i]}–${d.rowEdges[i + 1] - 1}`;
  const cols = `${d.colEdges[j]}–${d.colEdges[j + 1] - 1}`;
  return `rows ${rows}, cols ${cols}: ${Number.isFinite(v) ? +v.toPrecision(4) : v} steps`;
}

// Shows the pair in `host` (emptied first): quantizations a and b (indexes
// into `checkpoints`) of source tensor `row` (a CompareRow), against
// `source`. Returns {destroy}.
export function showPair(host, { source, row, checkpoints, a, b, showError }) {
  const controller = new AbortController();
  clear(host);
  const panels = [a, b].map((q, side) => {
    const cell = row.cells[q];
    const canvas = el('canvas', { class: 'pair-canvas', 'data-side': side, style: { width: `${SHOWN}px`, height: `${SHOWN}px` } });
    const overlay = el('canvas', { class: 'pair-overlay', 'data-side': side, width: SHOWN, height: SHOWN });
    const readout = el('div', { class: 'pair-readout mono small', 'data-field': `pair_value_${side}` }, '\u00a0');
    const box = el('div', { class: 'pair-box', style: { width: `${SHOWN}px`, height: `${SHOWN}px` } }, canvas, overlay);
    const panel = el('div', { class: 'pair-panel', 'data-q': q },
      el('div', { class: 'pair-title mono small' }, `[${q}] ${checkpoints[q]} · ${cell.scheme} · SQNR ${api.num(cell.sqnrDb).toFixed(2)} dB`),
      box, readout);
    return { q, cell, canvas, overlay, readout, panel, data: null };
  });
  const status = el('div', { class: 'pair-status muted small' }, loading('Asking for both error heatmaps…'));
  host.append(el('h3', null, `Error of ${row.referenceName}: [${a}] and [${b}] against the source`),
    legendBar(), status, el('div', { class: 'pair-panels' }, ...panels.map((p) => p.panel)));

  const cols = Number(row.shape[row.shape.length - 1] || 1);
  const rows = row.shape.length > 1 ? Number(row.count) / cols : 1;
  const ask = (p) => api.heatmap({
    checkpoint: checkpoints[p.q], tensor: p.cell.name, mode: 'HEATMAP_MODE_ERROR',
    width: Math.min(SIDE, cols), height: Math.min(SIDE, rows), reference: source, referenceTensor: row.referenceName,
  }, { signal: controller.signal });

  const move = (e) => {
    const r = e.target.getBoundingClientRect();
    const fx = (e.clientX - r.left) / r.width;
    const fy = (e.clientY - r.top) / r.height;
    for (const p of panels) {
      const d = p.data;
      const i = Math.min(d.height - 1, Math.max(0, Math.floor(fy * d.height)));
      const j = Math.min(d.width - 1, Math.max(0, Math.floor(fx * d.width)));
      drawCursor(p.overlay, d, [i, j]);
      p.readout.textContent = `[${p.q}] ${cellText(d, i, j)}`;
    }
  };
  const leave = () => {
    for (const p of panels) drawCursor(p.overlay, p.data, null);
  };

  Promise.all(panels.map(ask)).then((replies) => {
    replies.forEach((resp, k) => {
      const p = panels[k];
      p.data = { width: resp.width, height: resp.height, values: api.nums(resp.values),
        rowEdges: api.nums(resp.rowEdges), colEdges: api.nums(resp.colEdges) };
      paint(p.canvas, p.data);
      p.canvas.dataset.cells = `${resp.height}x${resp.width}`;
      p.canvas.dataset.rowEdges = p.data.rowEdges.join(',');
      p.canvas.dataset.colEdges = p.data.colEdges.join(',');
      p.overlay.addEventListener('mousemove', move);
      p.overlay.addEventListener('mouseleave', leave);
    });
    clear(status).append(`${replies[0].height} x ${replies[0].width} cells, each its worst element's error`);
    host.dataset.ready = 'true';
  }).catch((e) => {
    clear(status);
    showError(e);
  });
  return { destroy: () => controller.abort() };
}
