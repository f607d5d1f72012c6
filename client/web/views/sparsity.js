// Sparsity: zeros told apart: pruned (the source is 0 too) against induced
// by quantization (the source is not 0, the decoded value is), counted per
// tensor (ComputeStats with the source) and drawn as the zeros heatmap.
import * as api from '../api.js';
import { el, put, clear, loading, fmtNum, fmtCount, fmtShape, table } from '../ui.js';
import { createHeatmap, view2d } from './heatmap_canvas.js';
import { diffReportFor, lastDiff } from '../store.js';
import { fileRanks, orderKey, orderSelect } from '../order.js';

export function key(s) {
  return [s.checkpoint, s.tensor || '', s.ref || ''].join('|');
}

function pct(n, total) {
  return total ? `${fmtNum((100 * n) / total, 3)}%` : '—';
}

function counts(st) {
  const total = api.num(st.count);
  const zeros = api.num(st.zeros);
  const items = [
    ['elements', fmtCount(total), 'count'],
    ['zeros (decoded)', `${fmtCount(zeros)} · ${pct(zeros, total)}`, 'zeros'],
  ];
  if (st.hasReference) {
    items.push(['pruned (source = 0)', `${fmtCount(st.prunedZeros)} · ${pct(api.num(st.prunedZeros), total)}`, 'pruned_zeros'],
      ['induced by quantization', `${fmtCount(st.inducedZeros)} · ${pct(api.num(st.inducedZeros), total)}`, 'induced_zeros']);
  }
  const bar = el('div', { class: 'stack-bar', title: 'pruned | induced | nonzero' });
  if (st.hasReference && total) {
    const p = (100 * api.num(st.prunedZeros)) / total;
    const i = (100 * api.num(st.inducedZeros)) / total;
    bar.append(el('span', { class: 'pruned', style: { width: `${p}%` } }), el('span', { class: 'induced', style: { width: `${i}%` } }));
  }
  return el('div', null, el('dl', { class: 'facts inline' }, items.flatMap(([k, v, f]) => [el('dt', null, k), el('dd', { 'data-field': f }, v)])),
    st.hasReference ? el('div', { class: 'stack-legend' }, bar,
      el('span', { class: 'swatch pruned' }), ' pruned ', el('span', { class: 'swatch induced' }), ' induced') : null);
}

function mountTensor(host, s, ctx, controller) {
  let heat = null;
  put(host, loading('Counting zeros…'));
  const req = { checkpoint: s.checkpoint, tensor: s.tensor, bins: 1 };
  const report = diffReportFor(s.checkpoint, s.tensor);
  if (s.ref) {
    req.reference = s.ref;
    if (report && report.referenceName !== report.name) req.referenceTensor = report.referenceName;
  }
  Promise.all([
    api.call('ComputeStats', req, { signal: controller.signal }),
    api.call('GetTensor', { checkpoint: s.checkpoint, tensor: s.tensor }, { signal: controller.signal }),
  ]).then(([st, { tensor: t }]) => {
    clear(host);
    const shape = api.nums(t.shape);
    put(host, el('div', { class: 'title-row' }, el('h1', { class: 'mono' }, t.name),
      el('div', { class: 'muted' }, `${fmtShape(shape)} · ${t.encoding.scheme}`)),
    s.ref ? null : el('p', { class: 'note-line' }, 'Pick a source checkpoint (top right) to split zeros into pruned and quantization-induced.'),
    counts(st));
    if (view2d(shape)) {
      heat = createHeatmap({
        checkpoint: s.checkpoint, tensor: s.tensor, shape, mode: 'zeros', ref: s.ref || '',
        refTensor: req.referenceTensor || '', leading: new Array(Math.max(0, shape.length - 2)).fill(0),
        onPick: (index) => ctx.navigate({ view: 'heatmap', mode: 'zeros', index: index.join(',') }),
        showError: ctx.showError,
      });
      put(host, el('h2', null, 'Zeros heatmap'), heat.element);
      heat.start();
    }
  }).catch((e) => {
    clear(host);
    ctx.showError(e);
  });
  return () => heat && heat.destroy();
}

function mountCheckpoint(host, s, ctx, controller) {
  const rows = [];
  let order = s.order === 'file' ? 'file' : 'model';
  let nameKey = orderKey('model');
  const columns = [
    { key: 'name', label: 'tensor', fmt: (v) => el('span', { class: 'mono' }, v), sortValue: (r) => nameKey(r.name) },
    { key: 'scheme', label: 'scheme' },
    { key: 'count', label: 'elements', num: true, fmt: fmtCount },
    { key: 'zeros', label: 'zeros', num: true, fmt: fmtCount },
    { key: 'pruned', label: 'pruned', num: true, fmt: (v) => (v === '' ? '—' : fmtCount(v)) },
    { key: 'induced', label: 'induced', num: true, fmt: (v) => (v === '' ? '—' : fmtCount(v)) },
    { key: 'inducedFraction', label: 'induced %', num: true, fmt: (v) => (v === '' ? '—' : `${fmtNum(100 * v, 3)}%`) },
  ];
  const grid = table(columns, rows, {
    sortKey: 'induced',
    onRow: (r) => ctx.navigate({ tensor: r.name, view: 'sparsity' }),
    rowAttrs: (r) => ({ 'data-name': r.name, title: r.noReference ? `no source: ${r.noReference}` : null }),
  });
  // A change of order lists the rows in it (sorted by name, ascending).
  const setOrder = (o, { initial = false } = {}) => {
    order = o;
    const apply = (ranks) => {
      nameKey = orderKey(order, ranks);
      grid.resort(initial ? null : 'name');
    };
    if (order === 'file') fileRanks(s.checkpoint, controller.signal).then(apply).catch((e) => ctx.showError(e));
    else apply(null);
  };
  const status = el('div', { class: 'muted progress-text', 'data-field': 'sparsity_status' });
  const start = el('button', { id: 'sparsity-run', class: 'primary', onclick: () => countAll() }, s.ref ? 'Count zeros of every tensor' : 'Count zeros of every tensor (no source: decoded zeros only)');
  const rowFilter = el('input', { id: 'sparsity-filter', type: 'search', placeholder: 'filter rows (part of a name)',
    spellcheck: 'false', autocomplete: 'off', 'aria-label': 'filter the rows' });
  rowFilter.addEventListener('input', () => grid.setFilter(rowFilter.value));
  put(host, el('h1', null, 'Sparsity'),
    el('p', { class: 'muted' }, 'Quantization can round small values to exactly zero: that looks like pruning, and is not. With a source, zeros split into pruned (source = 0) and induced (source ≠ 0).'),
    s.ref ? null : el('p', { class: 'note-line' }, 'Pick a source checkpoint (top right) to split zeros into pruned and induced.'),
    el('div', { class: 'toolbar' }, start, rowFilter,
      orderSelect(el, order, (o) => ctx.navigate({ order: o === 'file' ? 'file' : null }, { replace: true }), 'sparsity-order')),
    status, grid);
  if (order === 'file') setOrder(order, { initial: true });

  // From the last diff, when it covered this checkpoint.
  const reportRows = () => {
    const out = [];
    for (const r of lastDiffFor(s.checkpoint)) {
      out.push({ name: r.name, scheme: r.scheme, count: Number(r.count), zeros: Number(r.decodedZeros),
        pruned: Number(r.sourceZeros), induced: Number(r.inducedZeros), inducedFraction: Number(r.inducedZeroFraction) });
    }
    return out;
  };
  const fromDiff = reportRows();
  grid.hidden = true;
  if (fromDiff.length) {
    rows.push(...fromDiff);
    grid.redraw(rows);
    grid.hidden = false;
    status.textContent = 'From the last diff in this tab; count again to use the source above.';
  } else {
    // A small checkpoint is counted at once; a large one waits for the button.
    api.call('GetCheckpoint', { checkpoint: s.checkpoint }, { signal: controller.signal }).then((info) => {
      const n = api.num(info.tensorCount);
      if (n <= 64) countAll();
      else status.textContent = `${fmtCount(n)} tensors: counting reads every one of them (one pass on the server).`;
    }).catch((e) => {
      if (e.name !== 'AbortError') ctx.showError(e);
    });
  }

  // One ComputeSparsity call: a row per tensor as the server finishes it,
  // the table takes what came five times a second (each time in one merge,
  // rows.js), the status line with it.
  let frame = 0;  // the timer of the next redraw
  let last = null;
  const show = () => {
    frame = 0;
    grid.redraw(rows);
    if (last) status.textContent = `${fmtCount(last.tensorsDone)} of ${fmtCount(last.tensorsTotal)}: ${last.name}`;
  };
  async function countAll() {
    start.disabled = true;
    rows.length = 0;
    grid.redraw(rows);
    grid.hidden = false;
    status.dataset.state = 'running';
    const t0 = performance.now();
    try {
      await api.stream('ComputeSparsity', { checkpoint: s.checkpoint, reference: s.ref || '' }, (t) => {
        const count = api.num(t.count);
        rows.push({ name: t.name, scheme: t.scheme, count, zeros: api.num(t.zeros),
          pruned: t.hasReference ? api.num(t.prunedZeros) : '', induced: t.hasReference ? api.num(t.inducedZeros) : '',
          inducedFraction: t.hasReference && count ? api.num(t.inducedZeros) / count : '', noReference: t.noReference || '' });
        last = t;
        if (!frame) frame = setTimeout(show, 200);
      }, { signal: controller.signal });
      clearTimeout(frame);
      show();
      const alone = rows.filter((r) => r.noReference).length;
      status.textContent = `${fmtCount(rows.length)} tensors counted${s.ref ? ` against ${s.ref}` : ''} in ${fmtNum((performance.now() - t0) / 1000, 3)} s`
        + (alone ? ` (${fmtCount(alone)} without a source: decoded zeros only)` : '') + '.';
      status.dataset.state = 'done';
    } catch (e) {
      status.dataset.state = 'failed';
      if (e.name !== 'AbortError') ctx.showError(e);
    } finally {
      start.disabled = false;
    }
  }
  return {
    update(ns) {
      const o = ns.order === 'file' ? 'file' : 'model';
      if (o !== order) setOrder(o);
    },
    destroy() {
      clearTimeout(frame);
    },
  };
}

function lastDiffFor(checkpoint) {
  return lastDiff.checkpoint === checkpoint ? [...lastDiff.reports.values()] : [];
}

export function mount(host, s, ctx) {
  const controller = new AbortController();
  if (!s.tensor) {
    const view = mountCheckpoint(host, s, ctx, controller);
    return {
      update: view.update,
      destroy() {
        controller.abort();
        view.destroy();
      },
    };
  }
  const cleanup = mountTensor(host, s, ctx, controller);
  return {
    destroy() {
      controller.abort();
      cleanup();
    },
  };
}
