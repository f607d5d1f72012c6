// What lives in this tab's memory between views: the last diff's reports
// (for the architecture colouring and the worst elements beside a heatmap),
// and the reports of one-tensor diffs asked for by a view.
import * as api from './api.js';

export const lastDiff = {
  checkpoint: '',
  reference: '',
  filter: '',
  reports: new Map(),  // tensor name -> TensorDiffReport
  summary: null,
  running: false,
  // How the diff ended (diff_results.js): '' (none yet), 'running',
  // 'complete', 'partial' (a filter), 'cancelled', 'failed'; never
  // 'complete' unless its summary came and the call succeeded.
  state: '',
  planned: 0,  // tensors the diff set out to compare
  error: null,  // { code, message } of a cancelled or failed diff
  restored: null,  // { ageSeconds } when read back from the server (GetDiffReport)
  events: [],  // tensor events then the summary, as the gateway streams them
};

// Views that show the last diff redraw when it changes (a report restored
// from the server after they mounted). `fn` is called with no argument;
// returns the function that stops it.
const diffListeners = new Set();
export function onDiffChange(fn) {
  diffListeners.add(fn);
  return () => diffListeners.delete(fn);
}
export function diffChanged() {
  for (const fn of diffListeners) fn();
}

export function diffReportFor(checkpoint, tensor) {
  if (lastDiff.checkpoint !== checkpoint) return null;
  return lastDiff.reports.get(tensor) || null;
}

// checkpoint|reference|tensor -> TensorDiffReport of a diff of that tensor
// alone (a fresh tab keeps no diff; the heatmap's error scale needs the
// tensor's bound, the distribution its clipped count). Bounded: the oldest
// goes first.
const single = new Map();
const SINGLE_MAX = 64;

// The report tensorReport would give without asking the server: the tab's
// last diff's, or a one-tensor diff's already kept; else null.
export function knownTensorReport(checkpoint, tensor, ref) {
  const kept = diffReportFor(checkpoint, tensor);
  if (kept && (!ref || ref === lastDiff.reference)) return kept;
  return ref ? single.get([checkpoint, ref, tensor].join('|')) || null : null;
}

// This tensor's diff report: the tab's last diff when it covers the tensor
// (against `ref`, when one is named), else, with `ref`, a diff of this
// tensor alone (kept). Resolves to { report, reference } or null (no source
// known, or the pair not diffable).
export function tensorReport(checkpoint, tensor, ref, signal) {
  const kept = diffReportFor(checkpoint, tensor);
  if (kept && (!ref || ref === lastDiff.reference)) {
    return Promise.resolve({ report: kept, reference: lastDiff.reference });
  }
  if (!ref) return Promise.resolve(null);
  const key = [checkpoint, ref, tensor].join('|');
  if (single.has(key)) return Promise.resolve({ report: single.get(key), reference: ref });
  let report = null;
  // Its worst groups too: the distribution links them.
  const request = { checkpoint, reference: ref, tensors: [tensor], topK: 0, worstGroups: 5 };
  return api.stream('QuantDiff', request, (ev) => {
    if (ev.tensor && ev.tensor.name === tensor) report = ev.tensor;
  }, { signal }).then(() => {
    if (!report) return null;
    single.set(key, report);
    if (single.size > SINGLE_MAX) single.delete(single.keys().next().value);
    return { report, reference: ref };
  });
}
