// What lives in this tab's memory between views: the last diff's reports
// (for the architecture colouring and the worst elements beside a heatmap),
// and the reports of one-tensor diffs asked for by a view.
import * as api from './api.js';

export const lastDiff = {
  checkpoint: '',
  reference: '',
  reports: new Map(),  // tensor name -> TensorDiffReport
  summary: null,
  running: false,
};

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
