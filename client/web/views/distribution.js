// Distribution over levels: the histogram of a tensor's (or one group's)
// dequantized values with its representable levels drawn on it and the
// values at the groups' end levels marked, beside the level-usage bars.
// Values at an end level are not clipping (a group's own min and max land
// there); clipping needs the source, so the diff's clipped count is shown
// when a diff of this tensor is at hand (this tab's last diff, or one run
// for this tensor alone when the URL names a source: ref=). With a source,
// the source's values binned by the same bins (ComputeStats'
// reference_histogram, paired as the diff pairs) are drawn over the
// histogram as a line, and the diff's worst groups link to their own
// distribution.
import * as api from '../api.js';
import { el, put, clear, loading, fmtNum, fmtCount, fmtShape } from '../ui.js';
import { niceTicks, fmtTick } from '../ticks.js';
import { tensorReport } from '../store.js';

// The one definition (README, diff section), shown as the tooltip.
export const CLIPPED_DEFINITION = 'clipped: a source value the format could not represent within its group\'s range — '
  + 'further beyond the group\'s first or last level than rounding to it explains (more than half a step plus the '
  + 'stored scale\'s rounding). Only a diff against the source can count it.';
const END_LEVEL_DEFINITION = 'values on their group\'s first or last representable level. Not clipping: a group\'s '
  + 'own min and max land there by design; whether a source value lay beyond the level takes a diff.';

export function key(s) {
  return [s.checkpoint, s.tensor, s.group || '', s.ref || ''].join('|');
}

const SVG = 'http://www.w3.org/2000/svg';
function svg(tag, attrs, ...children) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v !== undefined && v !== null) e.setAttribute(k, String(v));
  for (const c of children) if (c) e.appendChild(typeof c === 'string' ? document.createTextNode(c) : c);
  return e;
}

// Count ticks: whole numbers only.
function countTicks(max, n) {
  return niceTicks(0, max, n).ticks.filter(Number.isInteger);
}

export function histogramSvg(st, { width = 760, height = 280, log = false } = {}) {
  const hist = api.nums(st.histogram);
  // The source's values over the same bins (empty without a source).
  const source = api.nums(st.referenceHistogram);
  const lo = api.num(st.histMin);
  const hi = api.num(st.histMax);
  const levels = api.nums(st.levels);
  const pad = { l: 56, r: 16, t: 26, b: 34 };
  const W = width - pad.l - pad.r;
  const H = height - pad.t - pad.b;
  const maxCount = Math.max(1, ...hist, ...source);
  const x = (v) => pad.l + (hi > lo ? ((v - lo) / (hi - lo)) * W : W / 2);
  // Log counts show the tails a narrow peak would flatten.
  const scale = log ? (c) => Math.log10(1 + c) / Math.log10(1 + maxCount) : (c) => c / maxCount;
  const y = (c) => pad.t + H - scale(c) * H;
  const root = svg('svg', { viewBox: `0 0 ${width} ${height}`, class: 'chart', role: 'img', 'data-role': 'histogram' });
  // Axes and ticks.
  const valueTicks = niceTicks(lo, hi, 6);
  for (const t of valueTicks.ticks) {
    root.append(svg('line', { x1: x(t), x2: x(t), y1: pad.t + H, y2: pad.t + H + 4, class: 'tick' }),
      svg('text', { x: x(t), y: pad.t + H + 17, class: 'tick-label value-tick', 'text-anchor': 'middle' }, fmtTick(t, valueTicks.step)));
  }
  const counts = log
    ? [0, 1, 10, 100, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9].filter((c) => c <= maxCount)
    : countTicks(maxCount, 4);
  for (const c of counts) {
    root.append(svg('line', { x1: pad.l, x2: pad.l + W, y1: y(c), y2: y(c), class: 'gridline' }),
      svg('text', { x: pad.l - 6, y: y(c) + 4, class: 'tick-label', 'text-anchor': 'end' }, fmtCount(c)));
  }
  // Bars.
  const bw = W / Math.max(1, hist.length);
  hist.forEach((c, i) => {
    if (!c) return;
    const a = lo + ((hi - lo) * i) / hist.length;
    const b = lo + ((hi - lo) * (i + 1)) / hist.length;
    root.append(svg('rect', { x: pad.l + i * bw, y: y(c), width: Math.max(1, bw - 0.5), height: pad.t + H - y(c), class: 'bar' },
      svg('title', null, `[${fmtNum(a)}, ${fmtNum(b)}): ${fmtCount(c)}`)));
  });
  // The source: a step line over the same bins, so that where the decoded
  // values pile onto a level the source's spread shows beside it.
  if (source.length === hist.length && source.length) {
    let d = '';
    source.forEach((c, i) => {
      const x0 = pad.l + i * bw;
      d += `${i ? 'L' : 'M'}${x0},${y(c)}L${x0 + bw},${y(c)}`;
    });
    root.append(svg('path', { d, class: 'source-line', 'data-role': 'source-histogram' },
      svg('title', null, 'the source values, binned by the same bins')));
  }
  // Levels: where the values can land.
  const shown = levels.filter((l) => l >= lo && l <= hi);
  const thin = shown.length > 120;
  for (const l of shown) {
    root.append(svg('line', { x1: x(l), x2: x(l), y1: pad.t, y2: pad.t + H, class: thin ? 'level thin' : 'level' },
      svg('title', null, `level ${fmtNum(l)}`)));
  }
  // The values at both end levels (not clipping by themselves).
  const atLow = api.num(st.saturatedLow);
  const atHigh = api.num(st.saturatedHigh);
  if (st.hasLevels && (atLow || atHigh)) {
    const total = api.num(st.count) || 1;
    const lx = levels.length ? x(Math.max(lo, levels[0])) : pad.l;
    const hx = levels.length ? x(Math.min(hi, levels[levels.length - 1])) : pad.l + W;
    const mark = (px, n, side) => {
      const g = svg('g', { class: 'end-mark', 'data-field': `at_${side}_level` },
        svg('title', null, END_LEVEL_DEFINITION));
      g.append(svg('line', { x1: px, x2: px, y1: pad.t - 4, y2: pad.t + H, class: 'end-line' }),
        svg('text', { x: side === 'low' ? px + 4 : px - 4, y: pad.t - 8, 'text-anchor': side === 'low' ? 'start' : 'end', class: 'end-label' },
          `${side === 'low' ? '◀ ' : ''}${fmtCount(n)} at the ${side === 'low' ? 'lowest' : 'highest'} level (${fmtNum((100 * n) / total, 3)}%)${side === 'high' ? ' ▶' : ''}`));
      root.append(g);
    };
    if (atLow) mark(lx, atLow, 'low');
    if (atHigh) mark(hx, atHigh, 'high');
  }
  root.append(svg('line', { x1: pad.l, x2: pad.l + W, y1: pad.t + H, y2: pad.t + H, class: 'axis' }));
  return root;
}

// The code of bar i: the histogram is by raw bits; a format that reads its
// codes as two's complement (codesSigned, as the Scalar Inspector shows
// them) is drawn from its most negative code up.
export function codeOrder(st) {
  const size = api.nums(st.codeHistogram).length;
  const half = size / 2;
  return st.codesSigned
    ? Array.from({ length: size }, (_, i) => ({ code: i - half, bits: (i - half + size) % size }))
    : Array.from({ length: size }, (_, i) => ({ code: i, bits: i }));
}

export function codeBarsSvg(st, { width = 360, height = 280 } = {}) {
  const hist = api.nums(st.codeHistogram);
  const order = codeOrder(st);
  const codes = order.map((o) => hist[o.bits]);
  const pad = { l: 48, r: 10, t: 26, b: 34 };
  const W = width - pad.l - pad.r;
  const H = height - pad.t - pad.b;
  const max = Math.max(1, ...codes);
  const root = svg('svg', { viewBox: `0 0 ${width} ${height}`, class: 'chart', role: 'img', 'data-role': 'code-usage',
    'data-signed': st.codesSigned ? 'true' : 'false' });
  const bw = W / Math.max(1, codes.length);
  codes.forEach((c, i) => {
    const h = (c / max) * H;
    root.append(svg('rect', { x: pad.l + i * bw, y: pad.t + H - h, width: Math.max(0.8, bw - (bw > 4 ? 1 : 0)), height: Math.max(c ? 1 : 0, h), class: c ? 'bar code' : 'bar unused',
      'data-code': order[i].code },
    svg('title', null, `code ${order[i].code}: ${fmtCount(c)}`)));
  });
  for (const c of countTicks(max, 4)) {
    const yy = pad.t + H - (c / max) * H;
    root.append(svg('line', { x1: pad.l, x2: pad.l + W, y1: yy, y2: yy, class: 'gridline' }),
      svg('text', { x: pad.l - 6, y: yy + 4, class: 'tick-label', 'text-anchor': 'end' }, fmtCount(c)));
  }
  const n = codes.length;
  const labels = n <= 16 ? codes.map((_, i) => i) : [0, n / 4, n / 2, (3 * n) / 4, n - 1].map(Math.round);
  for (const i of labels) {
    root.append(svg('text', { x: pad.l + (i + 0.5) * bw, y: pad.t + H + 17, class: 'tick-label code-tick', 'text-anchor': 'middle' }, String(order[i].code)));
  }
  root.append(svg('text', { x: pad.l + W / 2, y: pad.t - 10, class: 'tick-label', 'text-anchor': 'middle' },
    st.codesSigned ? 'elements per raw code (signed)' : 'elements per raw code'));
  return root;
}

function diffReport(s, signal) {
  return tensorReport(s.checkpoint, s.tensor, s.ref, signal);
}

function fact([k, v, f, t]) {
  return [el('dt', { title: t }, k), el('dd', { 'data-field': f, title: t }, v)];
}

// The clipped count beside "at end level": the diff's, or what it needs.
function showClipped(dd, got, s) {
  clear(dd);
  if (!got) {
    dd.dataset.state = 'none';
    dd.append(el('span', { class: 'muted' }, 'needs a source: run a diff'));
    return;
  }
  const r = got.report;
  dd.dataset.state = 'ready';
  dd.dataset.value = String(api.num(r.clipped));
  dd.append(fmtCount(r.clipped),
    el('span', { class: 'muted small' }, ` of ${fmtCount(r.count)} vs ${got.reference}${s.group !== undefined ? ' (whole tensor)' : ''}`));
}

// The diff's worst groups, each a link to its own distribution.
function showWorstGroups(dd, got, link) {
  clear(dd);
  const groups = got ? got.report.worstGroups || [] : [];
  if (!groups.length) {
    dd.dataset.state = 'none';
    dd.append(el('span', { class: 'muted' }, got ? 'none listed' : 'needs a source: run a diff'));
    return;
  }
  dd.dataset.state = 'ready';
  groups.forEach((g, i) => {
    const a = link(`group ${Number(g.group)}`, { group: String(Number(g.group)) }, 'mono');
    a.dataset.group = String(Number(g.group));
    a.title = `mean ${fmtNum(g.meanErrSteps, 4)} steps, max ${fmtNum(g.maxErrSteps, 4)} steps over ${fmtCount(g.count)} elements`;
    // The mean first: the list is in its order (a max alone read unsorted).
    dd.append(i ? ', ' : '', a, el('span', { class: 'muted small' }, ` (mean ${fmtNum(g.meanErrSteps, 3)}, max ${fmtNum(g.maxErrSteps, 3)})`));
  });
}

// ComputeStats with the source when the URL names one; a source that does
// not pair is said, and the statistics shown without it.
async function stats(s, signal) {
  const req = { checkpoint: s.checkpoint, tensor: s.tensor, bins: 160 };
  if (s.group !== undefined && s.group !== '') req.group = Number(s.group);
  if (s.ref) {
    try {
      return { st: await api.call('ComputeStats', Object.assign({ reference: s.ref }, req), { signal }), refError: null };
    } catch (e) {
      if (e.name === 'AbortError') throw e;
      return { st: await api.call('ComputeStats', req, { signal }), refError: e };
    }
  }
  return { st: await api.call('ComputeStats', req, { signal }), refError: null };
}

export function mount(host, s, ctx) {
  const controller = new AbortController();
  put(host, loading('Computing statistics…'));
  stats(s, controller.signal).then(({ st, refError }) => {
    clear(host);
    const e = st.encoding || {};
    const groups = api.num(st.groups);
    const groupInput = el('input', { id: 'dist-group', type: 'number', min: 0, max: s.group !== undefined ? null : Math.max(0, groups - 1), class: 'narrow',
      value: s.group ?? '', placeholder: 'all' });
    const form = el('form', { class: 'toolbar', onsubmit: (ev) => {
      ev.preventDefault();
      ctx.navigate({ group: groupInput.value === '' ? null : groupInput.value });
    } },
    // With one group asked for, `groups` counts that one: no range to show.
    groups > 0 ? el('label', null, s.group !== undefined ? 'group ' : `group (0 … ${Math.max(0, groups - 1)}) `, groupInput) : null,
    groups > 0 ? el('button', { type: 'submit' }, 'Show') : null,
    s.group !== undefined ? el('button', { type: 'button', onclick: () => ctx.navigate({ group: null }) }, 'All elements') : null,
    el('span', { class: 'muted' }, groups > 1 && s.group === undefined ? `${fmtCount(groups)} groups; ${fmtCount(st.groupsSaturated)} with a value at an end level` : ''));
    const count = api.num(st.count);
    const facts = [
      ['elements', fmtCount(count), 'count'], ['min', fmtNum(st.min), 'min'], ['max', fmtNum(st.max), 'max'],
      ['mean', fmtNum(st.mean), 'mean'], ['std', fmtNum(st.std), 'std'], ['absmax', fmtNum(st.absmax), 'absmax'],
      ['NaN / Inf', `${fmtCount(st.nanCount)} / ${fmtCount(st.infCount)}`, 'nan_inf'],
      ['zeros', `${fmtCount(st.zeros)} (${fmtNum(100 * api.num(st.sparsity), 3)}%)`, 'zeros'],
    ];
    // "at end level" and "clipped" side by side, level usage after them.
    const after = [];
    if (st.hasLevels) {
      const low = api.num(st.saturatedLow);
      const high = api.num(st.saturatedHigh);
      facts.push(['at end level', `${fmtCount(low + high)} (${fmtCount(low)} lowest, ${fmtCount(high)} highest)`, 'at_end_level',
        END_LEVEL_DEFINITION]);
      after.push(['levels used', `${fmtCount(st.levelsUsed)} of ${fmtCount(2 ** st.codeBits)} codes`, 'levels_used']);
    }
    // Clipping takes the source: the diff's count, once it is known.
    const clipped = e.quantized ? el('dd', { 'data-field': 'clipped', 'data-state': 'loading', title: CLIPPED_DEFINITION }, '…') : null;
    const worstGroups = e.quantized && groups > 0
      ? el('dd', { 'data-field': 'worst_groups', 'data-state': 'loading', title: 'the diff\'s worst groups by mean error in steps: each opens its distribution' }, '…')
      : null;
    if (clipped) {
      diffReport(s, controller.signal).then((got) => {
        showClipped(clipped, got, s);
        if (worstGroups) showWorstGroups(worstGroups, got, ctx.link);
      }).catch((err) => {
        if (err.name === 'AbortError') return;
        clipped.dataset.state = 'error';
        clear(clipped).append(el('span', { class: 'muted' }, `no diff: ${err.code || 'error'}: ${err.message}`));
        if (worstGroups) {
          worstGroups.dataset.state = 'error';
          clear(worstGroups).append(el('span', { class: 'muted' }, 'no diff'));
        }
      });
    }
    const hasSource = api.nums(st.referenceHistogram).length > 0;
    const levels = api.nums(st.levels);
    const histogram = el('div', { class: 'histogram-host' }, histogramSvg(st, { log: s.log === '1' }));
    const logBox = el('input', { type: 'checkbox', id: 'dist-log', checked: s.log === '1' });
    logBox.addEventListener('change', () => {
      clear(histogram).append(histogramSvg(st, { log: logBox.checked }));
      ctx.navigate({ log: logBox.checked ? '1' : null }, { replace: true });
    });
    form.append(el('label', { class: 'check' }, logBox, 'log counts'));
    put(host, 
      el('div', { class: 'title-row' }, el('h1', { class: 'mono' }, st.tensor),
        el('div', { class: 'muted' }, `${fmtShape(st.shape)} · ${e.scheme} · ${e.granularity}${s.group !== undefined ? ` · group ${s.group}` : ''}`)),
      form,
      el('dl', { class: 'facts inline' }, facts.flatMap(fact),
        clipped ? [el('dt', { title: CLIPPED_DEFINITION }, 'clipped'), clipped] : [], after.flatMap(fact),
        worstGroups ? [el('dt', null, 'worst groups'), worstGroups] : []),
      refError ? el('p', { class: 'muted small', 'data-field': 'source_error', 'data-code': refError.code || '' },
        `No source histogram: ${refError.code || 'error'}: ${refError.message}`) : null,
      el('div', { class: 'charts' },
        el('figure', { class: 'card' }, histogram,
          el('figcaption', null, levels.length
            ? `Values over [${fmtNum(st.histMin)}, ${fmtNum(st.histMax)}] in ${api.nums(st.histogram).length} bins; lines: the ${levels.length} representable levels; markers: the values at the end levels (not clipping by themselves: a source tells).`
            : (e.quantized ? 'The levels differ between groups: pick one group to see its levels.' : 'Not quantized: no levels.'),
          hasSource ? el('span', { class: 'source-key' }, ` Bars: the decoded values; red line: the source ${s.ref} over the same bins (its values beyond the range in the end bins).`) : null)),
        st.hasLevels ? el('figure', { class: 'card' }, codeBarsSvg(st),
          el('figcaption', null, `Level usage: ${fmtCount(st.levelsUsed)} of ${fmtCount(2 ** st.codeBits)} codes occur${st.codesSigned ? ' (signed codes, as the Scalar Inspector shows them)' : ''}.`)) : null));
  }).catch((err) => {
    clear(host);
    ctx.showError(err);
  });
  return { destroy: () => controller.abort() };
}
