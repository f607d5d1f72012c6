// A diff's results outlive the tab: the server keeps the last report of each
// diff request (GetDiffReport), so a reload or a shared link with ref= (and
// metric=, filter=) restores the diff table and the tree's colouring without
// running the diff again. How the diff ended travels with it: a cancelled or
// failed run is marked as such everywhere it shows (the diff view's status
// line, the tree's legend), never as done. "Download JSON lines" offers the
// report as the events of the HTTP gateway's QuantDiff stream (each line's
// `result`): one {"tensor": …} line per tensor,
// then {"summary": …} when the diff finished (the tensor lines are those
// `tensormorph --json diff` prints, in the JSON mapping's camelCase).
import * as api from './api.js';
import { el, fmtCount, fmtNum } from './ui.js';
import { lastDiff, diffChanged } from './store.js';

// The request the diff view sends; GetDiffReport finds its report by the same
// fields, so both are made here.
export function diffRequest(checkpoint, reference, filter) {
  return { checkpoint, reference, filter: filter || '', topK: 10, worstGroups: 5 };
}

const STATES = {
  DIFF_REPORT_COMPLETE: 'complete',
  DIFF_REPORT_PARTIAL: 'partial',
  DIFF_REPORT_CANCELLED: 'cancelled',
  DIFF_REPORT_FAILED: 'failed',
};

// The state a run that ended in the tab reached: complete only with its
// summary, partial when a filter limited it.
export function endedState(error, filter) {
  if (error) return error.code === 'CANCELLED' || error.name === 'AbortError' ? 'cancelled' : 'failed';
  if (!lastDiff.summary) return 'failed';
  return filter ? 'partial' : 'complete';
}

// Whether the tab holds the diff of (checkpoint, reference, filter) or is
// running it.
export function holds(checkpoint, reference, filter) {
  return lastDiff.checkpoint === checkpoint && (!reference || lastDiff.reference === reference)
    && (filter === undefined || (lastDiff.filter || '') === (filter || '')) && lastDiff.state !== '';
}

// One restore per (checkpoint, reference, filter) at a time.
let pending = null;

// Asks the server for the kept report of this diff and puts it in lastDiff
// (then the views redraw). Resolves to the state restored, or null when the
// server keeps none (NOT_FOUND: not an error, the page offers to run it);
// other errors reject.
export function restoreDiff(checkpoint, reference, filter, { signal } = {}) {
  if (!checkpoint || !reference) return Promise.resolve(null);
  if (lastDiff.running || holds(checkpoint, reference, filter)) return Promise.resolve(lastDiff.state);
  const key = [checkpoint, reference, filter || ''].join('|');
  if (pending && pending.key === key) return pending.promise;
  const request = { diff: diffRequest(checkpoint, reference, filter) };
  const promise = api.call('GetDiffReport', request, { signal }).then((r) => {
    if (lastDiff.running) return lastDiff.state;  // a run started meanwhile wins
    lastDiff.checkpoint = checkpoint;
    lastDiff.reference = reference;
    lastDiff.filter = filter || '';
    lastDiff.reports = new Map();
    lastDiff.summary = null;
    lastDiff.events = r.events || [];
    for (const ev of lastDiff.events) {
      if (ev.tensor) lastDiff.reports.set(ev.tensor.name, ev.tensor);
      else if (ev.summary) lastDiff.summary = ev.summary;
    }
    lastDiff.state = STATES[r.state] || 'failed';
    lastDiff.planned = api.num(r.tensorsPlanned);
    lastDiff.error = r.code ? { code: api.grpcCodeName(r.code), message: r.message || '' } : null;
    lastDiff.restored = { ageSeconds: api.num(r.ageSeconds) };
    diffChanged();
    return lastDiff.state;
  }, (e) => {
    if (e.code === 'NOT_FOUND') return null;
    throw e;
  }).finally(() => {
    if (pending && pending.promise === promise) pending = null;
  });
  pending = { key, promise };
  return promise;
}

function compared() {
  return `${fmtCount(lastDiff.reports.size)}${lastDiff.planned ? ` of ${fmtCount(lastDiff.planned)}` : ''} tensors`;
}

function age(seconds) {
  if (seconds < 90) return `${fmtNum(seconds, 2)} s`;
  if (seconds < 5400) return `${Math.round(seconds / 60)} min`;
  return `${fmtNum(seconds / 3600, 2)} h`;
}

// The words for how the last diff ended, for a status line: never "done"
// unless it is.
export function stateText() {
  const restored = lastDiff.restored ? ` · restored from the server (kept ${age(lastDiff.restored.ageSeconds)} ago)` : '';
  const why = lastDiff.error ? ` (${lastDiff.error.code}${lastDiff.error.message ? `: ${lastDiff.error.message}` : ''})` : '';
  switch (lastDiff.state) {
    case 'complete': return `done: ${compared()} compared${restored}`;
    case 'partial': return `done, partial: filter '${lastDiff.filter}', ${compared()} compared${restored}`;
    // Before any tensor there are no results to call partial.
    case 'cancelled': return lastDiff.reports.size ? `cancelled after ${compared()}: partial results${why}${restored}` : `cancelled before any tensor${why}`;
    case 'failed': return lastDiff.reports.size ? `failed after ${compared()}: partial results${why}${restored}` : `failed before any tensor${why}`;
    default: return '';
  }
}

// A marked note for views that colour by the diff when its results are not
// the whole checkpoint's (the tree's legend), else null.
export function stateNote() {
  const st = lastDiff.state;
  if (!['cancelled', 'failed', 'partial', 'running'].includes(st)) return null;
  const what = st === 'partial'
    ? `Partial diff (filter '${lastDiff.filter}'): only the matching tensors are coloured.`
    : st === 'running'
      ? `The diff is still running: ${compared()} when this was drawn; uncoloured tensors are not compared yet.`
      : `Partial results: the diff was ${st} after ${compared()}; uncoloured tensors were not compared, and modules are coloured by the compared ones only.`;
  return el('div', { class: `diff-state ${st}`, 'data-field': 'diff-state', 'data-state': st }, what);
}

// The report as JSON lines, one event a line (tensors, then the summary).
export function jsonLines() {
  return lastDiff.events.map((ev) => JSON.stringify(ev)).join('\n') + (lastDiff.events.length ? '\n' : '');
}

export function downloadButton() {
  return el('button', { id: 'diff-download', type: 'button', title: 'the report as JSON lines: one {"tensor": …} line per tensor, then {"summary": …}, as the HTTP API streams them',
    onclick: () => {
      const blob = new Blob([jsonLines()], { type: 'application/x-ndjson' });
      const href = URL.createObjectURL(blob);
      const a = el('a', { href, download: `${lastDiff.checkpoint.replace(/[^\w.-]+/g, '_')}.diff.jsonl` });
      document.body.appendChild(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(href), 10000);
    } }, 'Download JSON lines');
}
