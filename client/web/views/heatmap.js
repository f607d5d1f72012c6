// Heatmap: a tensor's 2-D view by value, absmax, error in steps, group or
// zeros, with the Scalar Inspector beside it (click a cell; arrow keys move)
// and, after a diff, the tensor's worst elements.
import * as api from '../api.js';
import { el, put, clear, loading, fmtNum, fmtShape } from '../ui.js';
import { createHeatmap, MODES, view2d, serverLimits, zoomRegionAround } from './heatmap_canvas.js';
import { createInspector } from './inspector.js';
import { diffReportFor, tensorReport, lastDiff } from '../store.js';

const lastDiffReference = () => lastDiff.reference;

export function key(s) {
  return [s.checkpoint, s.tensor, s.mode || 'value', s.ref || '', s.leading || ''].join('|');
}

function parseIndex(text) {
  if (text === undefined || text === null || text === '') return null;
  const parts = String(text).split(',').map((x) => Number(x.trim()));
  return parts.every(Number.isInteger) ? parts : null;
}

// A list of the report's worst elements, each opening the inspector, and
// its worst groups, each a link (`link`, ctx.link) to its distribution;
// `onZoom(index)`, when given, backs each row's "zoom" button (the heatmap
// zoomed around the element, its crosshair on it).
export function worstList(report, onPick, link, onZoom) {
  if (!report) return null;
  const rows = (report.worst || []).map((w, i) => el('tr', {
    class: 'clickable', 'data-worst': i, 'data-index': w.index.map(Number).join(','),
    onclick: () => onPick(w.index.map(Number)),
  },
  el('td', { class: 'mono' }, `[${w.index.map(Number).join(', ')}]`,
    onZoom ? el('button', { class: 'small', 'data-zoom': i, title: 'Zoom to element: the heatmap around it, with a crosshair',
      onclick: (e) => {
        e.stopPropagation();
        onZoom(w.index.map(Number));
      } }, 'zoom') : null),
  el('td', { class: 'num mono' }, fmtNum(w.errSteps, 4)),
  el('td', { class: 'num mono' }, fmtNum(w.source)),
  el('td', { class: 'num mono' }, fmtNum(w.decoded))));
  // Each worst group opens its own distribution (its values over its
  // levels, with the source's beside them when a source is set).
  const groups = (report.worstGroups || []).map((g) => el('tr', { 'data-group': String(Number(g.group)) },
    el('td', { class: 'mono' }, link(String(g.group), { view: 'dist', group: String(Number(g.group)), mode: null, index: null })),
    el('td', { class: 'num' }, String(g.count)),
    el('td', { class: 'num mono' }, fmtNum(g.meanErrSteps, 4)), el('td', { class: 'num mono' }, fmtNum(g.maxErrSteps, 4))));
  return el('section', { class: 'worst', 'data-role': 'worst' },
    el('h3', null, `Worst elements (max ${fmtNum(report.maxErrSteps, 4)} steps, SQNR ${fmtNum(report.sqnrDb, 4)} dB)`),
    rows.length ? el('table', { class: 'grid compact' },
      el('thead', null, el('tr', null, el('th', null, 'index'), el('th', { class: 'num' }, 'err steps'),
        el('th', { class: 'num' }, 'source'), el('th', { class: 'num' }, 'decoded'))),
      el('tbody', null, rows)) : el('p', { class: 'muted' }, 'None reported.'),
    groups.length ? el('h3', null, 'Worst groups') : null,
    groups.length ? el('table', { class: 'grid compact' },
      el('thead', null, el('tr', null, el('th', null, 'group'), el('th', { class: 'num' }, 'elements'),
        el('th', { class: 'num' }, 'mean steps'), el('th', { class: 'num' }, 'max steps'))),
      el('tbody', null, groups)) : null);
}

export function mount(host, s, ctx) {
  const controller = new AbortController();
  const mode = MODES[s.mode] ? s.mode : 'value';
  let heat = null;
  let shape = null;
  let current = s;
  const inspector = createInspector(ctx);

  put(host, loading());
  const modeSelect = el('div', { class: 'segmented', role: 'tablist' },
    Object.entries(MODES).map(([k, m]) => {
      const disabled = m.needsRef && !s.ref;
      return el('button', {
        class: k === mode ? 'active' : '', 'data-mode': k, disabled,
        title: disabled ? 'needs a source checkpoint (top right)' : m.label,
        onclick: () => ctx.navigate({ mode: k === 'value' ? null : k }),
      }, m.label);
    }));

  const pick = (index) => ctx.navigate({ index: index.join(',') });

  serverLimits();
  api.call('GetTensor', { checkpoint: s.checkpoint, tensor: s.tensor }, { signal: controller.signal }).then(({ tensor: t }) => {
    clear(host);
    shape = api.nums(t.shape);
    const v = view2d(shape);
    const report = diffReportFor(s.checkpoint, s.tensor);
    const title = el('div', { class: 'title-row' },
      el('h1', { class: 'mono' }, t.name),
      el('div', { class: 'muted' }, `${fmtShape(shape)} · ${t.encoding.scheme} · ${t.encoding.granularity}`));
    if (!v) {
      put(host, title, el('p', { class: 'muted' }, 'A rank-0 tensor has no heatmap; its one element:'), inspector.element);
      inspector.show({ checkpoint: s.checkpoint, tensor: s.tensor, index: [], ref: s.ref, report });
      return;
    }
    if (shape.some((d) => d === 0)) {
      put(host, title, el('div', { class: 'placeholder' }, `An empty tensor (a zero dimension in ${fmtShape(shape)}): nothing to draw.`));
      return;
    }
    // One index per leading dimension: a link's leading= may be another
    // tensor's, and the server refuses indices a tensor has no dimension for.
    const asked = parseIndex(s.leading) || [];
    const leading = Array.from({ length: v.lead }, (_, i) => asked[i] ?? 0);
    const leadInputs = leading.map((x, i) => el('input', {
      type: 'number', class: 'narrow', min: 0, max: shape[i] - 1, value: x, 'data-leading': i,
      onchange: (e) => {
        const next = leading.slice();
        next[i] = Math.max(0, Math.min(shape[i] - 1, Number(e.target.value) || 0));
        ctx.navigate({ leading: next.join(','), index: null, region: null });
      },
    }));
    // The PNG of what is shown: the mode and, when zoomed, the region.
    const pngUrl = () => {
      const m = /^(\d+:\d+),(\d+:\d+)$/.exec(current.region || '');
      return api.getUrl('heatmap.png', {
        checkpoint: s.checkpoint, tensor: s.tensor, mode, ref: MODES[mode].needsRef || mode === 'zeros' ? s.ref : '',
        rows: m ? m[1] : '', cols: m ? m[2] : '', leading: v.lead ? leading.join(',') : '',
      });
    };
    const toolbar = el('div', { class: 'toolbar' }, modeSelect,
      leadInputs.length ? el('label', null, 'leading ', leadInputs) : null,
      el('button', { onclick: () => heat && heat.resetZoom(), title: 'or double-click the heatmap' }, 'Reset zoom'),
      el('a', { class: 'button', href: pngUrl(), download: `${s.tensor}.${mode}.png`, title: 'the picture as the CLI draws it (heatmap.png)', onclick: (e) => {
        e.currentTarget.href = pngUrl();
        if (!api.token()) return;
        e.preventDefault();
        api.download(pngUrl(), `${s.tensor}.${mode}.png`).catch(ctx.showError);
      } }, 'PNG'));
    const notes = [];
    if (mode === 'error' && !s.ref) notes.push('Error in steps needs a source checkpoint (top right).');
    if (mode === 'zeros' && !s.ref) notes.push('With a source, zeros split into pruned and quantization-induced.');
    if (mode === 'group' && !t.encoding.quantized) notes.push('Not quantized: no groups.');
    const left = el('div', { class: 'heatmap-col' });
    const right = el('div', { class: 'side-col' }, inspector.element);
    put(host, title, toolbar, notes.length ? el('p', { class: 'note-line' }, notes.join(' ')) : null,
      el('div', { class: 'split' }, left, right));
    if (report) {
      right.append(worstList(report, pick, ctx.link, (index) => ctx.navigate({
        index: index.join(','), region: zoomRegionAround(index, shape) })));
    }
    const needsRef = MODES[mode].needsRef && !s.ref;
    if (needsRef) {
      left.append(el('div', { class: 'placeholder' }, 'Pick a source checkpoint to see the error in steps.'));
    } else {
      heat = createHeatmap({
        checkpoint: s.checkpoint,
        tensor: s.tensor,
        shape,
        mode,
        ref: MODES[mode].needsRef || mode === 'zeros' ? s.ref : '',
        refTensor: report && report.referenceName !== report.name ? report.referenceName : '',
        leading,
        region: s.region,
        selected: parseIndex(s.index),
        onRegion: (text) => ctx.navigate({ region: text || null }, { replace: true }),
        onPick: pick,
        showError: ctx.showError,
        report: mode === 'error' && report && (!s.ref || s.ref === lastDiffReference()) ? report : null,
      });
      left.append(heat.element);
      heat.start();
      // The error scale's bound: this tensor's own, from a diff of it alone
      // when the tab's last diff does not cover it against this source.
      if (mode === 'error' && s.ref) {
        tensorReport(s.checkpoint, s.tensor, s.ref, controller.signal).then((got) => {
          if (got && heat) heat.setReport(got.report);
        }).catch((e) => {
          if (e.name !== 'AbortError') ctx.showError(e);
        });
      }
    }
    showIndex(s);
  }).catch((e) => {
    clear(host);
    ctx.showError(e);
  });

  function showIndex(ns) {
    const index = parseIndex(ns.index);
    if (heat) heat.setSelected(index);
    if (index && shape) {
      inspector.show({ checkpoint: ns.checkpoint, tensor: ns.tensor, index, ref: ns.ref,
        report: diffReportFor(ns.checkpoint, ns.tensor) });
    } else {
      inspector.clear();
    }
  }

  // Arrow keys: the neighbouring element (left/right along the last
  // dimension, up/down along the one before).
  const onKey = (e) => {
    if (!shape || !shape.length) return;
    if (['INPUT', 'SELECT', 'TEXTAREA'].includes(document.activeElement.tagName)) return;
    const moves = { ArrowLeft: [0, -1], ArrowRight: [0, 1], ArrowUp: [-1, 0], ArrowDown: [1, 0] };
    const m = moves[e.key];
    if (!m) return;
    const n = shape.length;
    let index = parseIndex(current.index);
    if (!index) index = n === 1 ? [0] : [...(parseIndex(current.leading) || new Array(n - 2).fill(0)), 0, 0];
    else {
      index = index.slice();
      if (n >= 2) index[n - 2] = Math.max(0, Math.min(shape[n - 2] - 1, index[n - 2] + m[0]));
      index[n - 1] = Math.max(0, Math.min(shape[n - 1] - 1, index[n - 1] + m[1]));
    }
    e.preventDefault();
    ctx.navigate({ index: index.join(',') }, { replace: true });
  };
  window.addEventListener('keydown', onKey);

  return {
    update(ns) {
      const old = current;
      current = ns;
      if (heat && (ns.region || '') !== (old.region || '')) heat.setRegion(ns.region);
      if ((ns.index || '') !== (old.index || '')) showIndex(ns);
    },
    destroy() {
      controller.abort();
      window.removeEventListener('keydown', onKey);
      if (heat) heat.destroy();
    },
  };
}
