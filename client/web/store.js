// What lives in this tab's memory between views: the last diff's reports
// (for the architecture colouring and the worst elements beside a heatmap).

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
