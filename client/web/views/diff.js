// Quantization diff: a quantized checkpoint against its full-precision
// source (QuantDiff, streamed): a live progress bar, per-tensor rows as they
// arrive, sortable; a row opens the tensor's error heatmap beside its worst
// elements. The last diff stays in this tab's memory (store.js) for the
// architecture colouring, and on the server: a reload or a shared link with
// ref= restores it (diff_results.js), marked cancelled or failed if it was.
import * as api from '../api.js';
import { el, clear, fmtNum, fmtCount, fmtBytes, fmtShape, table } from '../ui.js';
import { lastDiff, diffChanged } from '../store.js';
import { diffRequest, endedState, restoreDiff, stateText, downloadButton } from '../diff_results.js';
import { fileRanks, orderKey, orderSelect } from '../order.js';
import { zoomRegionAround } from './heatmap_canvas.js';

export function key(s) {
  return s.checkpoint;
}

// The run outlives the view: navigating away does not stop it.
const listeners = new Set();
let progress = null;
let error = null;
let controller = null;

function emit() {
  for (const fn of listeners) fn();
}

export function runDiff(checkpoint, reference, filter) {
  if (controller) controller.abort();
  controller = new AbortController();
  lastDiff.checkpoint = checkpoint;
  lastDiff.reference = reference;
  lastDiff.filter = filter;
  lastDiff.reports = new Map();
  lastDiff.summary = null;
  lastDiff.running = true;
  lastDiff.state = 'running';
  lastDiff.planned = 0;
  lastDiff.error = null;
  lastDiff.restored = null;
  lastDiff.events = [];
  progress = null;
  error = null;
  emit();
  const request = diffRequest(checkpoint, reference, filter);
  const mine = controller;
  api.stream('QuantDiff', request, (ev) => {
    if (mine !== controller) return;
    if (ev.progress) {
      progress = ev.progress;
      lastDiff.planned = api.num(ev.progress.tensorsTotal);
    } else if (ev.tensor) lastDiff.reports.set(ev.tensor.name, ev.tensor);
    else if (ev.summary) lastDiff.summary = ev.summary;
    if (!ev.progress) lastDiff.events.push(ev);
    emit();
  }, { signal: controller.signal }).catch((e) => {
    if (mine !== controller) return;
    if (e.name !== 'AbortError') error = e;
    else error = { code: 'CANCELLED', message: 'the diff was cancelled' };
  }).finally(() => {
    if (mine !== controller) return;
    lastDiff.running = false;
    lastDiff.state = endedState(error, filter);
    lastDiff.error = error ? { code: error.code, message: error.message } : null;
    // A cancel is the user's own act: the status line says it, no banner.
    if (error && error.code === 'CANCELLED') error = null;
    emit();
    diffChanged();
  });
}

const COLUMNS = [
  // On one line, as the scheme: a narrow window broke blk.1.ffn_down.weight
  // over five lines; the table scrolls sideways instead.
  { key: 'name', label: 'tensor', fmt: (v) => el('span', { class: 'mono nowrap' }, v) },
  // On one line: long names ('int8 (LLM.int8, row absmax)') otherwise break
  // into a row four lines tall; the table scrolls sideways as it does.
  { key: 'scheme', label: 'scheme', fmt: (v) => el('span', { class: 'nowrap' }, v) },
  { key: 'maxErrSteps', label: 'max err (steps)', num: true, fmt: (v, r) => stepCell(v, r), title: 'largest |x − x̂| / step; red when some element lies beyond the format\'s rounding bound' },
  { key: 'boundSteps', label: 'bound (steps)', num: true, fmt: (v, r) => el('span', { title: r.boundFamily || '' }, fmtNum(v, 4)), title: 'the most a correct quantizer of this format reaches: 0.5, more where the scale is stored as f16' },
  { key: 'maxExcessSteps', label: 'excess (steps)', num: true, fmt: (v) => el('span', { class: Number(v) > 0 ? 'bad-value' : '' }, fmtNum(v, 4)), title: 'how far beyond its bound the worst element lies; 0 when every element is within' },
  { key: 'p99ErrSteps', label: 'p99 (steps)', num: true, fmt: (v) => fmtNum(v, 4) },
  { key: 'sqnrDb', label: 'SQNR (dB)', num: true, lowIsWorse: true, fmt: (v) => fmtNum(v, 4) },
  { key: 'notNearest', label: 'not nearest', num: true, fmt: (v, r) => r.nearestCodes === false ? el('span', { title: 'this quantizer chooses codes on purpose (error feedback): information' }, `(${fmtCount(v)})`) : fmtCount(v), title: 'inside the range, yet beyond the bound: another level is nearer the source' },
  { key: 'clipped', label: 'clipped', num: true, fmt: (v) => fmtCount(v), title: 'a source value the format could not represent within its group\'s range: further beyond the group\'s first or last level than rounding to it explains (more than half a step plus the stored scale\'s rounding)' },
  { key: 'zeroedGroups', label: 'zeroed groups', num: true, fmt: (v) => fmtCount(v), title: 'groups whose stored scale is 0 while their source is not: left out of the step metrics' },
  { key: 'aboveHalfStep', label: '> ½ step', num: true, fmt: (v) => fmtCount(v) },
  { key: 'inducedZeros', label: 'induced zeros', num: true, fmt: (v) => fmtCount(v) },
  { key: 'sourceZeros', label: 'source zeros', num: true, fmt: (v) => fmtCount(v), title: 'elements whose source value is 0, whatever they decode to (a quantizer with an offset may store them as non-zero); pruned, in the sparsity view, counts those that decode to 0 as well' },
  { key: 'cosine', label: 'cosine', num: true, lowIsWorse: true, fmt: (v) => fmtNum(v, 6) },
];

const TABLE_EVERY_MS = 200;

// Red where the report says an element lies beyond the format's own bound
// (max_excess_steps), not beyond a fixed half step: a correct Q8_0 reaches
// 0.55 steps.
function stepCell(v, r) {
  const x = Number(v);
  return el('span', { class: Number(r && r.maxExcessSteps) > 0 ? 'bad-value' : '' }, fmtNum(x, 4));
}

export function mount(host, s, ctx) {
  const refInput = el('input', { id: 'diff-ref', value: s.ref || (lastDiff.checkpoint === s.checkpoint ? lastDiff.reference : ''),
    list: 'ref-list', placeholder: 'source checkpoint (full precision)', spellcheck: 'false', class: 'wide-input' });
  const filterInput = el('input', { id: 'diff-filter', value: s.filter || '', placeholder: 'all tensors (glob, e.g. blk.0.*)', spellcheck: 'false' });
  const runButton = el('button', { id: 'diff-run', type: 'submit', class: 'primary' }, 'Run diff');
  const cancelButton = el('button', { id: 'diff-cancel', type: 'button', onclick: () => controller && controller.abort() }, 'Cancel');
  const form = el('form', { class: 'toolbar', onsubmit: (e) => {
    e.preventDefault();
    const ref = refInput.value.trim();
    if (!ref) {
      ctx.showError({ code: 'INVALID_ARGUMENT', message: 'pick a source checkpoint to diff against' });
      return;
    }
    ctx.clearError();
    ctx.navigate({ ref, filter: filterInput.value.trim() || null }, { replace: true });
    runDiff(s.checkpoint, ref, filterInput.value.trim());
  } },
  el('label', null, 'source ', refInput), el('label', null, 'filter ', filterInput), runButton, cancelButton);
  const download = downloadButton();
  form.append(download);
  const bar = el('div', { class: 'progress', 'data-role': 'progress' }, el('div', { class: 'fill' }));
  const progressText = el('div', { class: 'progress-text muted', 'data-field': 'progress' });
  const summaryEl = el('div', { class: 'diff-summary' });
  const rowsEl = el('div', { class: 'diff-rows' });
  const hint = el('p', { class: 'muted small' }, 'Click a row for its error heatmap and worst elements; click a heading to sort.');
  // The name column sorts in the order chosen (model: layers by number;
  // file: as stored), the table's filter keeps names holding the text.
  let order = s.order === 'file' ? 'file' : 'model';
  let nameKey = orderKey('model');
  const columns = COLUMNS.map((c) => (c.key === 'name' ? Object.assign({}, c, { sortValue: (r) => nameKey(r.name) }) : c));
  // A change of order lists the rows in it (sorted by name, ascending).
  const setOrder = (o, { initial = false } = {}) => {
    order = o;
    const apply = (ranks) => {
      nameKey = orderKey(order, ranks);
      if (grid) grid.resort(initial ? null : 'name');
    };
    if (order === 'file') {
      fileRanks(s.checkpoint).then(apply).catch((e) => ctx.showError(e));
    } else apply(null);
  };
  const rowFilter = el('input', { id: 'diff-row-filter', type: 'search', placeholder: 'filter rows (part of a name)',
    spellcheck: 'false', autocomplete: 'off', 'aria-label': 'filter the rows' });
  rowFilter.addEventListener('input', () => grid && grid.setFilter(rowFilter.value));
  const rowTools = el('div', { class: 'toolbar row-tools' }, rowFilter,
    orderSelect(el, order, (o) => ctx.navigate({ order: o === 'file' ? 'file' : null }, { replace: true }), 'diff-order'));
  host.append(el('h1', null, 'Quantization diff'),
    el('p', { class: 'muted' }, `${s.checkpoint} against its full-precision source: error in units of the local quantization step.`),
    form, bar, progressText, summaryEl, hint, rowTools, rowsEl);

  let grid = null;
  let frame = 0;
  let tableDrawn = 0;  // performance.now() of the table's last redraw
  let tableTimer = 0;
  const render = () => {
    frame = 0;
    const mine = lastDiff.checkpoint === s.checkpoint;
    runButton.disabled = mine && lastDiff.running;
    cancelButton.hidden = !(mine && lastDiff.running);
    download.hidden = !(mine && !lastDiff.running && lastDiff.events.length);
    if (!mine) {
      bar.hidden = true;
      return;
    }
    bar.hidden = false;
    const p = progress;
    const done = p ? Number(p.tensorsDone) : 0;
    const total = p ? Number(p.tensorsTotal) : 0;
    const bytesDone = p ? Number(p.bytesDone) : 0;
    const bytesTotal = p ? Number(p.bytesTotal) : 0;
    const frac = lastDiff.summary ? 1 : bytesTotal ? bytesDone / bytesTotal : total ? done / total
      : lastDiff.planned ? lastDiff.reports.size / lastDiff.planned : 0;
    bar.firstChild.style.width = `${(100 * frac).toFixed(1)}%`;
    bar.classList.toggle('running', lastDiff.running);
    // How it ended comes from diff_results.js: never "done" for a run
    // cancelled, failed or limited by a filter.
    const ended = lastDiff.running ? '' : stateText();
    progressText.textContent = p
      ? `${done} of ${total} tensors · ${fmtBytes(bytesDone)} of ${fmtBytes(bytesTotal)} of the source read · ${fmtNum(p.elapsedSeconds, 3)} s${ended ? ` · ${ended}` : ''}`
      : (lastDiff.running ? 'starting…' : ended);
    progressText.dataset.state = lastDiff.state;
    bar.classList.toggle('partial', lastDiff.state === 'cancelled' || lastDiff.state === 'failed');
    if (error && !lastDiff.running) {
      ctx.showError(error);
      error = null;
    }
    clear(summaryEl);
    const sm = lastDiff.summary;
    if (sm) {
      const worst = (sm.worstTensors || [])[0];
      summaryEl.append(el('div', { class: 'summary' },
        el('div', { class: 'stat' }, el('b', null, fmtCount(sm.tensorsCompared)), ' compared'),
        el('div', { class: 'stat' }, 'pairing ', el('b', null, (sm.pairing || '').replace('DIFF_PAIRING_', '').toLowerCase().replace(/_/g, ' ')),
          sm.pairingArchitecture ? ` (${sm.pairingArchitecture})` : ''),
        worst ? el('div', { class: 'stat' }, 'worst ', el('b', { class: 'mono', 'data-field': 'worst_tensor' }, worst)) : null,
        el('div', { class: 'stat' }, el('b', null, fmtBytes(sm.bytesRead)), ` read in ${fmtNum(sm.wallSeconds, 3)} s`)),
      ...[['only in the checkpoint', sm.onlyInCheckpoint], ['only in the source', sm.onlyInReference],
        ['shape mismatches', sm.shapeMismatches], ['skipped (empty)', sm.skippedEmpty]]
        .filter(([, xs]) => xs && xs.length)
        .map(([label, xs]) => el('details', { class: 'muted' }, el('summary', null, `${label}: ${xs.length}`), el('div', { class: 'mono small' }, xs.join(', ')))));
    }
    const rows = [...lastDiff.reports.values()];
    if (!grid) {
      grid = table(columns, rows, {
        sortKey: 'maxErrSteps',
        onRow: (r) => {
          const w = (r.worst || [])[0];
          // Zoomed around its worst element, the crosshair on it.
          const index = w ? w.index.map(Number) : null;
          ctx.navigate({ tensor: r.name, view: 'heatmap', mode: 'error', ref: lastDiff.reference,
            index: index ? index.join(',') : null,
            region: index ? zoomRegionAround(index, (r.shape || []).map(Number)) : null });
        },
        rowAttrs: (r) => ({ 'data-name': r.name, 'data-max-err-steps': String(r.maxErrSteps), class: `clickable${r.flagged ? ' flagged' : ''}` }),
      });
      clear(rowsEl).append(grid);
      if (rowFilter.value) grid.setFilter(rowFilter.value);
    } else if (!lastDiff.running || performance.now() - tableDrawn > TABLE_EVERY_MS) {
      // While rows stream in, the table takes them a few times a second
      // (each time all that came, in one merge); the progress goes on per frame.
      grid.redraw(rows);
      tableDrawn = performance.now();
    } else if (!tableTimer) {
      // The rows that came last, should no more come.
      tableTimer = setTimeout(() => {
        tableTimer = 0;
        schedule();
      }, TABLE_EVERY_MS);
    }
    rowsEl.hidden = rows.length === 0;
    hint.hidden = rows.length === 0;
    rowTools.hidden = rows.length === 0;
  };
  const schedule = () => {
    if (!frame) frame = requestAnimationFrame(render);
  };
  listeners.add(schedule);
  render();
  // A reload or a shared link: the server's kept report of this diff.
  if (s.ref && !lastDiff.running) {
    restoreDiff(s.checkpoint, s.ref, s.filter || '').then(schedule, (e) => ctx.showError(e));
  }
  if (order === 'file') setOrder(order, { initial: true });
  return {
    update(ns) {
      if (ns.ref && document.activeElement !== refInput) refInput.value = ns.ref;
      if (ns.ref && ns.ref !== s.ref && !lastDiff.running) {
        restoreDiff(ns.checkpoint, ns.ref, ns.filter || '').then(schedule, () => {});
      }
      const o = ns.order === 'file' ? 'file' : 'model';
      if (o !== order) setOrder(o);
      s = ns;
    },
    destroy() {
      listeners.delete(schedule);
      if (frame) cancelAnimationFrame(frame);
      clearTimeout(tableTimer);
    },
  };
}
