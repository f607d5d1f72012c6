// An interactive heatmap of one tensor's 2-D view (GetHeatmap), drawn on a
// canvas: wheel zoom and drag pan re-request the visible region at screen
// resolution (debounced; stale replies dropped), hover shows the index and
// value, a click picks the cell's first element. Colours: error in steps on
// the fixed scale of scales.js (anchored at the tensor's rounding bound),
// zeros on 0 … 100 %, values and absmax on viridis over the cells drawn
// unless the scale is locked (then zoom and pan keep it).
import * as api from '../api.js';
import { el, clear, fmtNum, exact, viridis, rgbCss, groupColours, PALETTE_RGB, NO_GROUP_RGB, hexRgb } from '../ui.js';
import { errorColour, errorLegend, DEFAULT_BOUND } from '../scales.js';
import { niceTicks, fmtTick } from '../ticks.js';

export const MODES = {
  value: { enum: 'HEATMAP_MODE_MEAN', label: 'value (mean)', needsRef: false },
  absmax: { enum: 'HEATMAP_MODE_ABSMAX', label: 'absmax', needsRef: false },
  error: { enum: 'HEATMAP_MODE_ERROR', label: 'error in steps', needsRef: true },
  group: { enum: 'HEATMAP_MODE_GROUP', label: 'quantization group', needsRef: false },
  zeros: { enum: 'HEATMAP_MODE_ZEROS', label: 'zeros', needsRef: false },
};

// The server's limits on a heatmap (GetServerInfo), asked once per page;
// these are the defaults until it answers, or if it cannot. The heatmap
// view asks as it mounts, beside its GetTensor, so neither waits on the
// other.
let maxSide = 4096;
let maxCells = 2097152;
let limitsAsked = null;
export function serverLimits() {
  if (!limitsAsked) {
    limitsAsked = api.call('GetServerInfo', {}).then((info) => {
      const l = info.limits || {};
      if (Number(l.maxHeatmapSide) > 0) maxSide = Number(l.maxHeatmapSide);
      if (Number(l.maxHeatmapCells) > 0) maxCells = Number(l.maxHeatmapCells);
    }).catch(() => {});
  }
  return limitsAsked;
}
const INDUCED_RGB = hexRgb('#f28e2b');
const PRUNED_RGB = hexRgb('#4e79a7');
const EMPTY_RGB = [24, 28, 36];
const NAN_RGB = hexRgb('#ff00ff');

// The 2-D view of a shape: [rows, cols] and how many leading indices it needs.
export function view2d(shape) {
  const n = shape.length;
  if (n === 0) return null;
  if (n === 1) return { rows: 1, cols: shape[0], lead: 0 };
  return { rows: shape[n - 2], cols: shape[n - 1], lead: n - 2 };
}

export function parseRegion(text, rows, cols) {
  const m = /^(\d+):(\d+),(\d+):(\d+)$/.exec(text || '');
  if (!m) return { r0: 0, r1: rows, c0: 0, c1: cols };
  const r = { r0: +m[1], r1: +m[2], c0: +m[3], c1: +m[4] };
  if (r.r1 > rows || r.c1 > cols || r.r0 >= r.r1 || r.c0 >= r.c1) return { r0: 0, r1: rows, c0: 0, c1: cols };
  return r;
}

// The region text of a zoom around element `index` (coordinates of a
// tensor of `shape`): `span` rows and columns centred on it, inside the
// view. What "Zoom to element" links open, so the crosshair has room.
export function zoomRegionAround(index, shape, span = 48) {
  const v = view2d(shape);
  if (!v || !index || !index.length) return null;
  const n = index.length;
  const r = n >= 2 ? index[n - 2] : 0;
  const c = index[n - 1];
  const around = (x, size) => {
    const w = Math.min(size, span);
    const a = Math.max(0, Math.min(size - w, x - Math.floor(w / 2)));
    return `${a}:${a + w}`;
  };
  return `${around(r, v.rows)},${around(c, v.cols)}`;
}

// Coordinates of flat (row-major) index `flat` in a tensor of `shape`.
export function unflatten(flat, shape) {
  const out = new Array(shape.length).fill(0);
  let rest = flat;
  for (let d = shape.length - 1; d >= 0; --d) {
    out[d] = rest % shape[d];
    rest = Math.floor(rest / shape[d]);
  }
  return out;
}

function upperBound(edges, x) {
  // The cell i with edges[i] <= x < edges[i+1].
  let lo = 0;
  let hi = edges.length - 2;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (edges[mid] <= x) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

// opts: checkpoint, tensor, shape, mode, ref, refTensor, leading (array),
// region (string), onRegion(regionText), onPick(index array), selected
// (index array), showError.
export function createHeatmap(opts) {
  const v = view2d(opts.shape);
  const rows = v.rows;
  const cols = v.cols;
  const root = el('div', { class: 'heatmap' });
  const stage = el('div', { class: 'heatmap-stage' });
  const canvas = el('canvas', { class: 'heatmap-canvas', 'data-role': 'heatmap' });
  const overlay = el('canvas', { class: 'heatmap-overlay' });
  const tip = el('div', { class: 'heatmap-tip', hidden: true });
  const status = el('div', { class: 'heatmap-status' });
  const bar = el('div', { class: 'colour-bar' });
  const axis = el('div', { class: 'heatmap-axis muted' });
  stage.append(canvas, overlay, tip, status);
  const foot = el('div', { class: 'heatmap-foot' }, axis);
  root.append(stage, foot, bar);

  let region = parseRegion(opts.region, rows, cols);  // shown, floats while zooming
  let data = null;          // the last reply drawn, with its integer region
  let image = null;         // offscreen copy of the last drawing, for previews
  let seq = 0;
  let timer = null;
  let controller = null;
  let selected = opts.selected || null;
  let hover = null;
  let cssW = 0;
  let cssH = 0;
  let destroyed = false;
  // The error scale's anchor: the tensor's rounding bound from its diff
  // report (null until one is known: DEFAULT_BOUND meanwhile).
  let report = opts.report || null;
  // A locked value/absmax scale: { lo, hi } kept across zoom and pan.
  let locked = null;
  const lockable = opts.mode === 'value' || opts.mode === 'absmax';
  const lockBox = el('input', { type: 'checkbox', 'data-role': 'lock-scale', disabled: !lockable });
  const lockLabel = el('label', { class: 'check lock-scale', title: lockable
    ? 'keep the colour scale while zooming and panning (values beyond it take the end colours)'
    : 'this mode\'s scale is fixed already' }, lockBox, 'lock scale');
  lockBox.addEventListener('change', () => {
    locked = lockBox.checked && data ? { lo: data.lo, hi: data.hi } : null;
    if (locked) {
      data.outside = 0;
      drawBar(data);
    } else if (data) request();
  });
  foot.append(lockLabel);
  const boundOf = () => {
    const b = report ? Number(report.boundSteps) : NaN;
    return Number.isFinite(b) && b > 0 ? b : null;
  };

  // Square elements where the page allows; a tall tensor is squeezed into
  // the window's height less what sits above the canvas and the legend
  // below it (LEGEND_H), so the colour bar shows without scrolling; on a
  // canvas at least 420 wide.
  const LEGEND_H = 150;
  const measure = () => {
    const top = stage.getBoundingClientRect().top + window.scrollY;
    const MAX_H = Math.max(200, Math.floor(window.innerHeight - top - LEGEND_H));
    // Beside the inspector (two columns in .split) the heatmap takes what
    // the inspector's 480 pixels leave; else its container's width.
    const split = root.closest('.split');
    const twoColumns = split && getComputedStyle(split).gridTemplateColumns.trim().split(/\s+/).length > 1;
    const avail = Math.max(200, Math.floor(twoColumns ? split.clientWidth - 496 : (root.parentElement || root).clientWidth || 800));
    const aspect = rows / cols;
    let w = avail;
    let h = Math.round(Math.max(rows === 1 ? 90 : 160, avail * aspect));
    if (h > MAX_H) {
      h = MAX_H;
      w = Math.round(Math.min(avail, Math.max(Math.min(avail, 420), MAX_H / aspect)));
    }
    return [w, h];
  };

  const size = () => {
    [cssW, cssH] = measure();
    const dpr = window.devicePixelRatio || 1;
    for (const c of [canvas, overlay]) {
      c.width = Math.round(cssW * dpr);
      c.height = Math.round(cssH * dpr);
      c.style.width = `${cssW}px`;
      c.style.height = `${cssH}px`;
    }
    stage.style.width = `${cssW}px`;
    stage.style.height = `${cssH}px`;
    root.style.width = `${cssW}px`;
  };

  const intRegion = (r) => {
    const r0 = Math.max(0, Math.floor(r.r0));
    const c0 = Math.max(0, Math.floor(r.c0));
    const r1 = Math.min(rows, Math.max(r0 + 1, Math.ceil(r.r1)));
    const c1 = Math.min(cols, Math.max(c0 + 1, Math.ceil(r.c1)));
    return { r0, r1, c0, c1 };
  };

  const regionText = (r) => (r.r0 === 0 && r.c0 === 0 && r.r1 === rows && r.c1 === cols ? '' : `${r.r0}:${r.r1},${r.c0}:${r.c1}`);

  const cellColours = (d) => {
    const n = d.width * d.height;
    const out = new Uint8ClampedArray(n * 3);
    if (opts.mode === 'group') {
      const colours = groupColours(d.groups, d.width, d.height);
      for (let k = 0; k < n; k++) {
        const p = colours.get(d.groups[k]);
        const c = p < 0 ? NO_GROUP_RGB : PALETTE_RGB[p];
        out[3 * k] = c[0];
        out[3 * k + 1] = c[1];
        out[3 * k + 2] = c[2];
      }
      return out;
    }
    if (opts.mode === 'zeros' && d.pruned.length === n) {
      // Induced (orange) and pruned (blue) fractions over a dark ground.
      for (let k = 0; k < n; k++) {
        const a = Math.max(0, Math.min(1, d.values[k]));
        const b = Math.max(0, Math.min(1, d.pruned[k]));
        for (let ch = 0; ch < 3; ch++) {
          out[3 * k + ch] = Math.min(255, EMPTY_RGB[ch] * (1 - Math.max(a, b)) + INDUCED_RGB[ch] * a + PRUNED_RGB[ch] * b);
        }
      }
      return out;
    }
    if (opts.mode === 'error') {
      // The fixed scale: calm up to the bound, the tail beyond it.
      const b = boundOf() ?? DEFAULT_BOUND;
      for (let k = 0; k < n; k++) {
        const c = errorColour(d.values[k], b);
        out[3 * k] = c[0];
        out[3 * k + 1] = c[1];
        out[3 * k + 2] = c[2];
      }
      return out;
    }
    // Finite values on the ramp from lo (its bottom) to hi (its top), both
    // finite; +inf at the top end, -inf at the bottom end, NaN magenta (the
    // CLI's PNG rule). Halves keep the span finite for doubles near +-max.
    const lo = d.lo;
    const hi = d.hi;
    const half = hi / 2 - lo / 2;
    for (let k = 0; k < n; k++) {
      const x = d.values[k];
      let c;
      if (Number.isNaN(x)) c = NAN_RGB;
      else if (x === Infinity) c = viridis(1);
      else if (x === -Infinity) c = viridis(0);
      else c = viridis(half > 0 ? (x / 2 - lo / 2) / half : x > lo ? 1 : x < lo ? 0 : 0.5);
      out[3 * k] = c[0];
      out[3 * k + 1] = c[1];
      out[3 * k + 2] = c[2];
    }
    return out;
  };

  // Pixels -> element coordinates of the shown region.
  const toElement = (px, py) => ({
    row: region.r0 + (py / cssH) * (region.r1 - region.r0),
    col: region.c0 + (px / cssW) * (region.c1 - region.c0),
  });
  const toPixel = (row, col) => ({
    x: ((col - region.c0) / (region.c1 - region.c0)) * cssW,
    y: ((row - region.r0) / (region.r1 - region.r0)) * cssH,
  });

  const draw = () => {
    const d = data;
    const ctx2 = canvas.getContext('2d');
    const W = canvas.width;
    const H = canvas.height;
    ctx2.setTransform(1, 0, 0, 1, 0, 0);
    if (!d) {
      ctx2.fillStyle = rgbCss(EMPTY_RGB);
      ctx2.fillRect(0, 0, W, H);
      return;
    }
    const img = ctx2.createImageData(W, H);
    const px = img.data;
    const colours = d.colours;
    // Each pixel's element, then its cell.
    const colCell = new Int32Array(W);
    const rowCell = new Int32Array(H);
    for (let x = 0; x < W; x++) {
      const c = region.c0 + ((x + 0.5) / W) * (region.c1 - region.c0);
      colCell[x] = c < d.region.c0 || c >= d.region.c1 ? -1 : upperBound(d.colEdges, c);
    }
    for (let y = 0; y < H; y++) {
      const r = region.r0 + ((y + 0.5) / H) * (region.r1 - region.r0);
      rowCell[y] = r < d.region.r0 || r >= d.region.r1 ? -1 : upperBound(d.rowEdges, r);
    }
    let o = 0;
    for (let y = 0; y < H; y++) {
      const i = rowCell[y];
      for (let x = 0; x < W; x++) {
        const j = colCell[x];
        if (i < 0 || j < 0) {
          px[o] = EMPTY_RGB[0];
          px[o + 1] = EMPTY_RGB[1];
          px[o + 2] = EMPTY_RGB[2];
        } else {
          const k = 3 * (i * d.width + j);
          px[o] = colours[k];
          px[o + 1] = colours[k + 1];
          px[o + 2] = colours[k + 2];
        }
        px[o + 3] = 255;
        o += 4;
      }
    }
    ctx2.putImageData(img, 0, 0);
    image = { canvas: document.createElement('canvas'), region: Object.assign({}, region) };
    image.canvas.width = W;
    image.canvas.height = H;
    image.canvas.getContext('2d').drawImage(canvas, 0, 0);
    drawOverlay();
  };

  // While a zoomed or panned region loads: the last drawing, moved.
  const drawPreview = () => {
    if (!image) return;
    const ctx2 = canvas.getContext('2d');
    const W = canvas.width;
    const H = canvas.height;
    const ir = image.region;
    const sx = ((region.c0 - ir.c0) / (ir.c1 - ir.c0)) * W;
    const sy = ((region.r0 - ir.r0) / (ir.r1 - ir.r0)) * H;
    const sw = ((region.c1 - region.c0) / (ir.c1 - ir.c0)) * W;
    const sh = ((region.r1 - region.r0) / (ir.r1 - ir.r0)) * H;
    ctx2.imageSmoothingEnabled = false;
    ctx2.fillStyle = rgbCss(EMPTY_RGB);
    ctx2.fillRect(0, 0, W, H);
    ctx2.drawImage(image.canvas, sx, sy, sw, sh, 0, 0, W, H);
    drawOverlay();
  };

  const drawOverlay = () => {
    const dpr = window.devicePixelRatio || 1;
    const g = overlay.getContext('2d');
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, cssW, cssH);
    const outline = (r0, r1, c0, c1, colour, width) => {
      const a = toPixel(r0, c0);
      const b = toPixel(r1, c1);
      const w = Math.max(3, b.x - a.x);
      const h = Math.max(3, b.y - a.y);
      g.strokeStyle = colour;
      g.lineWidth = width;
      g.strokeRect(a.x - 0.5, a.y - 0.5, w + 1, h + 1);
    };
    if (hover && data) {
      outline(data.rowEdges[hover.i], data.rowEdges[hover.i + 1], data.colEdges[hover.j], data.colEdges[hover.j + 1], 'rgba(255,255,255,0.7)', 1);
    }
    if (selected) {
      const n = selected.length;
      const r = n >= 2 ? selected[n - 2] : 0;
      const c = selected[n - 1];
      g.save();
      g.shadowColor = 'black';
      g.shadowBlur = 3;
      outline(r, r + 1, c, c + 1, '#ffffff', 2);
      // A crosshair through it, so one element among millions of pixels
      // (or beside the edge when zoomed) is found at a glance.
      const at = toPixel(r + 0.5, c + 0.5);
      g.lineWidth = 1;
      g.setLineDash([5, 4]);
      g.strokeStyle = 'rgba(255,255,255,0.85)';
      g.beginPath();
      g.moveTo(0, at.y);
      g.lineTo(cssW, at.y);
      g.moveTo(at.x, 0);
      g.lineTo(at.x, cssH);
      g.stroke();
      g.restore();
      overlay.dataset.crosshair = `${r},${c}`;
      overlay.dataset.crosshairX = String(Math.round(at.x));
      overlay.dataset.crosshairY = String(Math.round(at.y));
    } else {
      delete overlay.dataset.crosshair;
    }
  };

  const drawBar = (d) => {
    clear(bar);
    if (opts.mode === 'group') {
      const ids = new Set(d.groups);
      bar.append(el('span', { class: 'muted' },
        ids.has(-1) && ids.size === 1
          ? 'No quantization groups: one grey.'
          : `Colour = quantization group (categorical: adjacent groups differ). ${ids.size} group${ids.size === 1 ? '' : 's'} in view.`));
      return;
    }
    if (opts.mode === 'zeros' && d.pruned.length) {
      bar.append(el('span', { class: 'swatch', style: { background: rgbCss(INDUCED_RGB) } }), ' induced zeros (source ≠ 0, decoded 0)  ',
        el('span', { class: 'swatch', style: { background: rgbCss(PRUNED_RGB) } }), ' pruned zeros (source = 0)  ',
        el('span', { class: 'muted' }, '(intensity = fraction of the cell)'));
      return;
    }
    if (opts.mode === 'error') {
      drawErrorBar(d);
      return;
    }
    // Values, absmax, zeros: the ramp with ticks between its end labels.
    const pct = opts.mode === 'zeros';
    const grad = el('div', { class: 'gradient' });
    const stops = [];
    for (let k = 0; k <= 10; k++) stops.push(`${rgbCss(viridis(k / 10))} ${k * 10}%`);
    grad.style.background = `linear-gradient(to right, ${stops.join(', ')})`;
    const span = d.hi - d.lo;
    const { step, ticks } = pct ? niceTicks(0, 100, 4) : niceTicks(d.lo, d.hi, 5);
    const inner = ticks.map((t) => ({ at: pct ? t / 100 : span > 0 ? (t - d.lo) / span : 0.5, label: fmtTick(t, step) + (pct ? '%' : '') }))
      .filter((t) => t.at > 0.14 && t.at < 0.86);
    const labels = el('div', { class: 'gradient-ticks' },
      el('span', { class: 'tick end', 'data-field': 'bar_min', style: { left: '0%' } }, pct ? '0%' : fmtNum(d.lo)),
      inner.map((t) => el('span', { class: 'tick', 'data-tick': t.label, style: { left: `${100 * t.at}%` } }, t.label)),
      el('span', { class: 'tick end', 'data-field': 'bar_max', style: { left: '100%' } }, pct ? '100%' : fmtNum(d.hi)));
    const unit = { value: 'mean of each cell, in the tensor\'s own units (decoded values)',
      absmax: 'largest |value| of each cell, in the tensor\'s own units (decoded values)',
      zeros: 'share of the cell\'s elements that decode to 0 (fixed scale 0 … 100 %)' }[opts.mode];
    const scaleNote = !lockable ? null : locked
      ? el('span', { 'data-field': 'scale_state' }, ` · scale locked at ${fmtNum(d.lo)} … ${fmtNum(d.hi)}${d.outside ? `; ${d.outside} cell${d.outside === 1 ? '' : 's'} beyond it take the end colours` : ''}`)
      : el('span', { 'data-field': 'scale_state' }, ' · scale: the smallest to the largest finite cell drawn (lock it to keep it while zooming)');
    bar.dataset.scale = opts.mode;
    bar.append(el('div', { class: 'gradient-wrap' }, grad, labels), el('div', { class: 'muted small legend-note' }, unit, scaleNote,
      d.nonFinite ? el('span', { class: 'nonfinite', 'data-field': 'non_finite' },
        ` · ${d.nonFinite} cell${d.nonFinite === 1 ? '' : 's'} not finite: +inf at the ramp's top end, −inf at its bottom end, NaN `,
        el('span', { class: 'swatch', style: { background: rgbCss(NAN_RGB) } })) : null));
  };

  // Error in steps: the fixed scale anchored at the tensor's bound, the
  // bound marked, what the diff says of the tensor beside it.
  const drawErrorBar = (d) => {
    const b = boundOf();
    const legend = errorLegend(b ?? DEFAULT_BOUND);
    const grad = el('div', { class: 'gradient', style: { background: legend.gradient } });
    const ticks = el('div', { class: 'gradient-ticks' }, legend.ticks.map((t) => el('span', {
      class: `tick${t.bound ? ' bound' : ''}${t.at === 0 || t.at === 1 ? ' end' : ''}`, style: { left: `${100 * t.at}%` },
      'data-tick': t.label, 'data-field': t.bound ? 'bar_bound' : null,
    }, t.label)));
    const boundMark = el('div', { class: 'bound-tick', style: { left: `${100 * legend.ticks[1].at}%` },
      title: 'the rounding bound: the largest error a correct quantizer of this format reaches' }, 'bound');
    const notes = [];
    if (b === null) {
      notes.push(`bound ${DEFAULT_BOUND} steps assumed (round to nearest, exact scale) until the diff of this tensor gives its own`);
    } else {
      notes.push(`bound ${fmtNum(b, 4)} steps: this tensor's rounding bound (${report.boundFamily || 'from the diff'})`);
      const max = Number(report.maxErrSteps);
      const excess = Number(report.maxExcessSteps);
      if (excess > 0) notes.push(`the diff finds elements ${fmtNum(excess, 4)} steps beyond what the format allows`);
      else if (max > b) notes.push('the diff finds no element beyond what the format allows: cells past the bound are values it clips by design');
      else notes.push('the diff finds every element within the bound');
    }
    bar.dataset.scale = 'error';
    bar.dataset.bound = String(b ?? DEFAULT_BOUND);
    bar.append(el('div', { class: 'gradient-wrap' }, grad, boundMark, ticks),
      el('div', { class: 'muted small legend-note' }, 'largest error in steps of each cell (|x − x̂| / step): fixed scale, ',
        'calm from 0 to the bound, beyond it a log scale from amber to red up to ≥128 steps',
        el('div', { 'data-field': 'bound_note' }, notes.join('; ')),
        d.nonFinite ? el('div', { class: 'nonfinite', 'data-field': 'non_finite' },
          `${d.nonFinite} cell${d.nonFinite === 1 ? '' : 's'} not finite: +inf as the top, NaN `,
          el('span', { class: 'swatch', style: { background: rgbCss(NAN_RGB) } })) : null));
  };

  const request = async () => {
    const my = ++seq;
    await serverLimits();
    if (my !== seq || destroyed) return;
    const r = intRegion(region);
    const w = Math.min(maxSide, r.c1 - r.c0, Math.max(1, cssW));
    let h = Math.min(maxSide, r.r1 - r.r0, Math.max(1, cssH));
    if (w * h > maxCells) h = Math.max(1, Math.floor(maxCells / w));
    if (controller) controller.abort();
    controller = new AbortController();
    status.textContent = 'loading…';
    status.className = 'heatmap-status busy';
    const body = {
      checkpoint: opts.checkpoint,
      tensor: opts.tensor,
      mode: MODES[opts.mode].enum,
      width: w,
      height: h,
      leading: opts.leading || [],
      rowBegin: r.r0,
      rowEnd: r.r1,
      colBegin: r.c0,
      colEnd: r.c1,
    };
    if (opts.ref) body.reference = opts.ref;
    if (opts.ref && opts.refTensor) body.referenceTensor = opts.refTensor;
    const t0 = performance.now();
    api.heatmap(body, { signal: controller.signal }).then((resp) => {
      if (my !== seq || destroyed) return;  // a newer request is on its way
      const d = {
        width: resp.width,
        height: resp.height,
        rowEdges: api.nums(resp.rowEdges),
        colEdges: api.nums(resp.colEdges),
        values: api.nums(resp.values),
        groups: api.nums(resp.groups),
        pruned: api.nums(resp.pruned),
        min: api.num(resp.min),
        max: api.num(resp.max),
        region: r,
      };
      // The colour scale: the finite values' range (what the reply's min
      // and max give), counted here as the cells are, with the non-finite.
      d.lo = Infinity;
      d.hi = -Infinity;
      d.nonFinite = 0;
      for (const x of d.values) {
        if (Number.isFinite(x)) {
          if (x < d.lo) d.lo = x;
          if (x > d.hi) d.hi = x;
        } else d.nonFinite++;
      }
      if (d.lo > d.hi) d.lo = d.hi = 0;
      // Fractions of zeros read on a fixed 0..1 scale (no zeros is dark, not
      // mid-ramp); errors in steps on their own fixed scale; a locked scale
      // keeps its range, counting the cells beyond it.
      if (opts.mode === 'zeros') {
        d.lo = 0;
        d.hi = 1;
      } else if (opts.mode === 'error') {
        d.lo = 0;
      } else if (locked) {
        d.outside = 0;
        for (const x of d.values) if (Number.isFinite(x) && (x < locked.lo || x > locked.hi)) d.outside++;
        d.lo = locked.lo;
        d.hi = locked.hi;
      }
      d.colours = cellColours(d);
      data = d;
      draw();
      drawBar(d);
      const ms = Math.round(performance.now() - t0);
      status.textContent = `${d.height}×${d.width} cells · ${ms} ms`;
      status.className = 'heatmap-status';
      root.dataset.ready = String(my);
      // The first heatmap of the page: tests/bench/page_bench reads this mark.
      if (!performance.getEntriesByName('tm-heatmap-drawn').length) {
        performance.mark('tm-heatmap-drawn');
      }
      // What the reply covers, in elements (tests compare it with the region).
      root.dataset.edges = `${d.rowEdges[0]}:${d.rowEdges[d.height]},${d.colEdges[0]}:${d.colEdges[d.width]}`;
      root.dataset.cells = `${d.height}x${d.width}`;
      axis.textContent = `rows ${r.r0}–${r.r1 - 1} of ${rows} · columns ${r.c0}–${r.c1 - 1} of ${cols}`
        + (regionText(r) ? ' (zoomed: wheel to zoom, drag to pan, double-click to reset)' : ' (wheel to zoom, drag to pan)');
    }).catch((e) => {
      if (e.name === 'AbortError' || my !== seq) return;
      status.textContent = 'failed';
      status.className = 'heatmap-status failed';
      opts.showError(e);
    });
  };

  const schedule = (delay = 140) => {
    clearTimeout(timer);
    timer = setTimeout(() => {
      const r = intRegion(region);
      if (opts.onRegion) opts.onRegion(regionText(r));
      request();
    }, delay);
  };

  const clampRegion = (r) => {
    let h = Math.min(rows, Math.max(Math.min(rows, 1), r.r1 - r.r0));
    let w = Math.min(cols, Math.max(Math.min(cols, 1), r.c1 - r.c0));
    let r0 = Math.max(0, Math.min(rows - h, r.r0));
    let c0 = Math.max(0, Math.min(cols - w, r.c0));
    return { r0, r1: r0 + h, c0, c1: c0 + w };
  };

  const cellAt = (px, py) => {
    if (!data) return null;
    const { row, col } = toElement(px, py);
    const d = data;
    if (row < d.region.r0 || row >= d.region.r1 || col < d.region.c0 || col >= d.region.c1) return null;
    const i = upperBound(d.rowEdges, row);
    const j = upperBound(d.colEdges, col);
    return { i, j };
  };

  const indexOf = (row, col) => {
    const lead = opts.leading || [];
    return opts.shape.length === 1 ? [col] : [...lead, row, col];
  };

  // Interaction. A press that moves at most DRAG_SLOP pixels before its
  // release is a click: it picks a cell and never pans.
  const DRAG_SLOP = 4;
  let drag = null;
  let clicked = null;  // the index the last click picked ("r,c")
  overlay.addEventListener('wheel', (e) => {
    e.preventDefault();
    const rect = overlay.getBoundingClientRect();
    const px = e.clientX - rect.left;
    const py = e.clientY - rect.top;
    const at = toElement(px, py);
    const f = Math.pow(1.0015, e.deltaY);
    const nr = {
      r0: at.row - (at.row - region.r0) * f,
      r1: at.row + (region.r1 - at.row) * f,
      c0: at.col - (at.col - region.c0) * f,
      c1: at.col + (region.c1 - at.col) * f,
    };
    if (rows === 1) {
      nr.r0 = 0;
      nr.r1 = 1;
    }
    region = clampRegion(nr);
    drawPreview();
    schedule();
  }, { passive: false });
  overlay.addEventListener('mousedown', (e) => {
    if (e.button !== 0) return;
    drag = { x: e.clientX, y: e.clientY, region: Object.assign({}, region), moved: false };
  });
  window.addEventListener('mousemove', onMove);
  window.addEventListener('mouseup', onUp);
  function onMove(e) {
    if (drag) {
      const dx = e.clientX - drag.x;
      const dy = e.clientY - drag.y;
      if (Math.hypot(dx, dy) > DRAG_SLOP) drag.moved = true;
      if (drag.moved) {
        const rr = drag.region;
        region = clampRegion({
          r0: rr.r0 - (dy / cssH) * (rr.r1 - rr.r0),
          r1: rr.r1 - (dy / cssH) * (rr.r1 - rr.r0),
          c0: rr.c0 - (dx / cssW) * (rr.c1 - rr.c0),
          c1: rr.c1 - (dx / cssW) * (rr.c1 - rr.c0),
        });
        drawPreview();
        schedule(200);
        tip.hidden = true;
        return;
      }
    }
    if (e.target !== overlay) {
      if (hover) {
        hover = null;
        tip.hidden = true;
        drawOverlay();
      }
      return;
    }
    const rect = overlay.getBoundingClientRect();
    const px = e.clientX - rect.left;
    const py = e.clientY - rect.top;
    const cell = cellAt(px, py);
    hover = cell;
    drawOverlay();
    if (!cell) {
      tip.hidden = true;
      return;
    }
    const d = data;
    const k = cell.i * d.width + cell.j;
    const ra = d.rowEdges[cell.i];
    const rb = d.rowEdges[cell.i + 1] - 1;
    const ca = d.colEdges[cell.j];
    const cb = d.colEdges[cell.j + 1] - 1;
    const lead = (opts.leading || []).length ? `${opts.leading.join(', ')}, ` : '';
    const idx = opts.shape.length === 1
      ? (ca === cb ? `[${ca}]` : `[${ca}–${cb}]`)
      : (ra === rb && ca === cb ? `[${lead}${ra}, ${ca}]` : `[${lead}${ra}${ra === rb ? '' : `–${rb}`}, ${ca}${ca === cb ? '' : `–${cb}`}]`);
    const label = { value: 'mean', absmax: 'absmax', error: 'max err (steps)', group: 'group', zeros: opts.ref ? 'induced zeros' : 'zeros' }[opts.mode];
    const lines = [el('div', { class: 'mono' }, idx), el('div', null, `${label}: `, el('b', { class: 'mono' },
      opts.mode === 'group' ? String(d.values[k]) : (ra === rb && ca === cb ? exact(d.values[k]) : fmtNum(d.values[k]))))];
    if (opts.mode === 'error' && Number.isFinite(d.values[k])) {
      const b = boundOf() ?? DEFAULT_BOUND;
      lines.push(el('div', { class: 'muted' }, `${d.values[k] > b ? 'beyond' : 'within'} the bound (${fmtNum(b, 4)} steps${boundOf() === null ? ', assumed' : ''})`));
    }
    if (opts.mode !== 'group' && d.groups[k] >= 0) lines.push(el('div', { class: 'muted' }, `group ${d.groups[k]} (first element)`));
    if (d.pruned.length) lines.push(el('div', null, `pruned: ${fmtNum(d.pruned[k])}`));
    clear(tip).append(...lines);
    tip.hidden = false;
    const tx = Math.min(px + 14, cssW - 190);
    // Below the pointer, or above it when it would pass the bottom edge.
    const th = tip.offsetHeight;
    const ty = py + 14 + th > cssH ? Math.max(0, py - 10 - th) : py + 14;
    tip.style.left = `${Math.max(0, tx)}px`;
    tip.style.top = `${ty}px`;
  }
  function onUp(e) {
    if (!drag) return;
    const wasDrag = drag.moved;
    drag = null;
    if (wasDrag || e.target !== overlay) return;
    const rect = overlay.getBoundingClientRect();
    const cell = cellAt(e.clientX - rect.left, e.clientY - rect.top);
    if (!cell || !opts.onPick) return;
    // In error and absmax modes the cell's value is one element's: the
    // server finds it (a one-cell heatmap of the cell's region with
    // locate), so the click inspects the cause, not the cell's first
    // element.
    if (opts.mode === 'error' || opts.mode === 'absmax') {
      locateCell(cell);
      return;
    }
    const index = indexOf(data.rowEdges[cell.i], data.colEdges[cell.j]);
    // A click inspects what is under the pointer; the view stays put even
    // when the cell is cut by the edge or its first element is outside.
    clicked = index.join(',');
    opts.onPick(index);
  }
  let locator = null;  // the AbortController of the last click's locate
  function locateCell(cell) {
    const d = data;
    if (locator) locator.abort();
    locator = new AbortController();
    const body = {
      checkpoint: opts.checkpoint,
      tensor: opts.tensor,
      mode: MODES[opts.mode].enum,
      width: 1,
      height: 1,
      leading: opts.leading || [],
      rowBegin: d.rowEdges[cell.i],
      rowEnd: d.rowEdges[cell.i + 1],
      colBegin: d.colEdges[cell.j],
      colEnd: d.colEdges[cell.j + 1],
      locate: true,
    };
    if (opts.ref) body.reference = opts.ref;
    if (opts.ref && opts.refTensor) body.referenceTensor = opts.refTensor;
    overlay.dataset.locating = '1';
    api.call('GetHeatmap', body, { signal: locator.signal }).then((resp) => {
      delete overlay.dataset.locating;
      const flat = api.nums(resp.cellElement)[0];
      if (flat === undefined || destroyed) return;
      const index = unflatten(flat, opts.shape);
      clicked = index.join(',');
      opts.onPick(index);
    }).catch((e) => {
      delete overlay.dataset.locating;
      if (e.name !== 'AbortError') opts.showError(e);
    });
  }
  overlay.addEventListener('dblclick', () => {
    region = { r0: 0, r1: rows, c0: 0, c1: cols };
    drawPreview();
    schedule(0);
  });

  const resize = () => {
    const [w, h] = measure();
    if (Math.abs(w - cssW) < 8 && Math.abs(h - cssH) < 8) return;
    size();
    if (data) draw();
    schedule(200);
  };
  const observer = new ResizeObserver(resize);
  window.addEventListener('resize', resize);

  return {
    element: root,
    start() {
      size();
      draw();
      request();
      observer.observe(root.closest('.split') || root.parentElement || root);
    },
    setSelected(index) {
      selected = index;
      // Bring an element chosen elsewhere (arrow keys, a worst-element row,
      // a link) into view when none of it shows: the shown region's edges
      // are fractional while zoomed, so a partly shown element counts as
      // shown. One picked by a click on the heatmap never moves the view.
      const fromClick = index && index.join(',') === clicked;
      clicked = null;
      if (index && index.length && !fromClick) {
        const n = index.length;
        const r = n >= 2 ? index[n - 2] : 0;
        const c = index[n - 1];
        if (r + 1 <= region.r0 || r >= region.r1 || c + 1 <= region.c0 || c >= region.c1) {
          const h = region.r1 - region.r0;
          const w = region.c1 - region.c0;
          region = clampRegion({ r0: r - h / 2, r1: r + h / 2, c0: c - w / 2, c1: c + w / 2 });
          drawPreview();
          schedule(60);
        }
      }
      drawOverlay();
    },
    // The tensor's diff report arrived: recolour on its bound.
    setReport(r) {
      report = r || null;
      if (data && opts.mode === 'error') {
        data.colours = cellColours(data);
        draw();
        drawBar(data);
      }
    },
    // A region chosen elsewhere (a "Zoom to element" link): shown unless it
    // is the one already shown (the URL echoing this view's own zoom).
    setRegion(text) {
      if ((text || '') === regionText(intRegion(region))) return;
      region = parseRegion(text, rows, cols);
      drawPreview();
      schedule(0);
    },
    resetZoom() {
      region = { r0: 0, r1: rows, c0: 0, c1: cols };
      drawPreview();
      schedule(0);
    },
    destroy() {
      destroyed = true;
      clearTimeout(timer);
      if (controller) controller.abort();
      if (locator) locator.abort();
      observer.disconnect();
      window.removeEventListener('resize', resize);
      window.removeEventListener('mousemove', onMove);
      window.removeEventListener('mouseup', onUp);
    },
  };
}
