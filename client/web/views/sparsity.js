// Sparsity: zeros told apart: pruned (the source is 0 too) against induced
// by quantization (the source is not 0, the decoded value is), counted per
// tensor (ComputeStats with the source) and drawn as the zeros heatmap.
import * as api from '../api.js';
import { el, put, clear, loading, fmtNum, fmtCount, fmtShape, table } from '../ui.js';
import { createHeatmap, view2d } from './heatmap_canvas.js';
import { diffReportFor, lastDiff } from '../store.js';

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
  const columns = [
    { key: 'name', label: 'tensor', fmt: (v) => el('span', { class: 'mono' }, v) },
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
    rowAttrs: (r) => ({ 'data-name': r.name }),
  });
  const status = el('div', { class: 'muted progress-text' });
  const start = el('button', { class: 'primary', onclick: () => countAll() }, s.ref ? 'Count zeros of every tensor' : 'Count zeros of every tensor (no source: decoded zeros only)');
  put(host, el('h1', null, 'Sparsity'),
    el('p', { class: 'muted' }, 'Quantization can round small values to exactly zero: that looks like pruning, and is not. With a source, zeros split into pruned (source = 0) and induced (source ≠ 0).'),
    s.ref ? null : el('p', { class: 'note-line' }, 'Pick a source checkpoint (top right) to split zeros into pruned and induced.'),
    el('div', { class: 'toolbar' }, start), status, grid);

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
    api.collect('ListTensors', { checkpoint: s.checkpoint }, { signal: controller.signal }).then((ts) => {
      if (ts.length <= 64) countAll(ts);
      else status.textContent = `${ts.length} tensors: counting reads every one of them.`;
    }).catch((e) => {
      if (e.name !== 'AbortError') ctx.showError(e);
    });
  }

  async function countAll(listed) {
    start.disabled = true;
    rows.length = 0;
    grid.redraw(rows);
    grid.hidden = false;
    try {
      const tensors = Array.isArray(listed) ? listed
        : await api.collect('ListTensors', { checkpoint: s.checkpoint }, { signal: controller.signal });
      let k = 0;
      for (const t of tensors) {
        status.textContent = `${++k} of ${tensors.length}: ${t.name}`;
        const req = { checkpoint: s.checkpoint, tensor: t.name, bins: 1 };
        if (s.ref) req.reference = s.ref;
        let st;
        try {
          st = await api.call('ComputeStats', req, { signal: controller.signal });
        } catch (e) {
          if (e.name === 'AbortError') return;
          if (e.code === 'NOT_FOUND' || e.code === 'FAILED_PRECONDITION' || e.code === 'INVALID_ARGUMENT') {
            // No counterpart in the source: decoded zeros only.
            st = await api.call('ComputeStats', { checkpoint: s.checkpoint, tensor: t.name, bins: 1 }, { signal: controller.signal });
          } else throw e;
        }
        const count = api.num(st.count);
        rows.push({ name: t.name, scheme: t.encoding.scheme, count, zeros: api.num(st.zeros),
          pruned: st.hasReference ? api.num(st.prunedZeros) : '', induced: st.hasReference ? api.num(st.inducedZeros) : '',
          inducedFraction: st.hasReference && count ? api.num(st.inducedZeros) / count : '' });
        grid.redraw(rows);
      }
      status.textContent = `${tensors.length} tensors counted${s.ref ? ` against ${s.ref}` : ''}.`;
    } catch (e) {
      if (e.name !== 'AbortError') ctx.showError(e);
    } finally {
      start.disabled = false;
    }
  }
  return () => {};
}

function lastDiffFor(checkpoint) {
  return lastDiff.checkpoint === checkpoint ? [...lastDiff.reports.values()] : [];
}

export function mount(host, s, ctx) {
  const controller = new AbortController();
  const cleanup = s.tensor ? mountTensor(host, s, ctx, controller) : mountCheckpoint(host, s, ctx, controller);
  return {
    destroy() {
      controller.abort();
      cleanup();
    },
  };
}
