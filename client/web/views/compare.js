// Compare: quantizations of the checkpoint (taken as their full-precision
// source) side by side. The user picks two or more from the checkpoints
// under the roots; CompareQuantizations streams the rows, then the summary;
// client/web/compare_view.js draws them (the same drawing `tensormorph
// compare --html` inlines). A click on a matrix cell shows that tensor's
// error heatmap for that quantization beside another's (compare_pair.js).
//
// An importance matrix (a path as the server sees it, as `compare --imatrix`
// takes) weighs the comparison: the drawing then adds the weighted figures.
// A budget in bits per weight (as `compare --budget-bpw`) asks for the mix:
// the drawing then shows it, its cells in the matrix and the llama-quantize
// command, or that the budget is unmet.
//
// URL: view=compare&checkpoint=SOURCE&quants=A,B,C[&imatrix=FILE]
// [&budget_bpw=BPW] (a path with a comma in it cannot be chosen here; the
// CLI takes any).
import * as api from '../api.js';
import { el, clear, loading } from '../ui.js';
import { renderComparison } from '../compare_view.js';
import { showPair } from './compare_pair.js';

export function key(s) {
  return `${s.checkpoint}|${s.quants || ''}|${s.imatrix || ''}|${s.budget_bpw || ''}`;
}

function parseQuants(text) {
  return (text || '').split(',').filter(Boolean);
}

// The checkboxes of the checkpoints under the roots, the source left out.
async function fillPicker(picker, source, chosen, signal) {
  const paths = [];
  await api.stream('ListCheckpoints', { pageSize: 500, maxDepth: 4 }, (e) => {
    if (e.path && e.path !== source) paths.push(e.path);
  }, { signal });
  clear(picker);
  if (!paths.length) picker.append(el('p', { class: 'empty' }, 'No other checkpoint under the roots to compare.'));
  for (const p of paths) {
    const box = el('input', { type: 'checkbox', 'data-checkpoint': p, checked: chosen.has(p) });
    box.addEventListener('change', () => (box.checked ? chosen.add(p) : chosen.delete(p)));
    picker.append(el('label', { class: 'compare-choice mono small' }, box, p));
  }
}

// The other quantization a click on column q is shown beside: the one
// chosen in `other` when it is not q, else the first that is not.
function partnerOf(q, n, other) {
  const want = Number(other.value);
  if (Number.isInteger(want) && want !== q && want < n) return want;
  return q === 0 ? 1 : 0;
}

function runComparison(s, ctx, parts, signal) {
  const quants = parseQuants(s.quants);
  const events = [];
  clear(parts.status).append(loading('Comparing…'));
  const request = { source: s.checkpoint, quantizations: quants };
  if (s.imatrix) request.imatrix = s.imatrix;
  // As the URL has it: protobuf's JSON mapping takes a double as a string,
  // and one that is no positive number is the server's to refuse (field
  // budget), as the CLI's --budget-bpw is.
  if (s.budget_bpw) request.budgetBitsPerWeight = s.budget_bpw;
  let pair = null;
  return api.stream('CompareQuantizations', request, (e) => {
    if (e.progress) {
      const p = e.progress;
      clear(parts.status).append(loading(`Comparing: ${api.num(p.tensorsDone)} of ${api.num(p.tensorsTotal)} tensors`));
      return;
    }
    events.push(e);
  }, { signal }).then(() => {
    clear(parts.status).append(`${events.length - 1} tensors compared. Click a cell for its error heatmap beside `,
      parts.other, '.');
    clear(parts.other);
    parts.other.append(el('option', { value: '' }, 'the first other quantization'));
    quants.forEach((q, i) => parts.other.append(el('option', { value: i }, `[${i}] ${q}`)));
    renderComparison(parts.result, events, {
      request,
      onCell: (row, q) => {
        if (pair) pair.destroy();
        pair = showPair(parts.pair, {
          source: s.checkpoint, row, checkpoints: quants, a: q, b: partnerOf(q, quants.length, parts.other),
          showError: ctx.showError,
        });
        parts.pair.scrollIntoView({ block: 'nearest' });
      },
    });
    parts.result.dataset.ready = 'true';
  }).catch((e) => {
    clear(parts.status);
    ctx.showError(e);
  });
}

export function mount(host, s, ctx) {
  const controller = new AbortController();
  const chosen = new Set(parseQuants(s.quants));
  const picker = el('div', { class: 'compare-picker' }, loading('Listing checkpoints…'));
  const imatrix = el('input', {
    type: 'text', id: 'compare-imatrix', class: 'mono', value: s.imatrix || '', size: 36,
    placeholder: 'importance matrix (optional): imatrix.dat', title: 'an imatrix file under the roots: weighs the comparison',
  });
  const budget = el('input', {
    type: 'number', id: 'compare-budget', class: 'mono', value: s.budget_bpw || '', min: '0', step: 'any',
    style: 'width: 7em', placeholder: 'optional', title: 'bits per weight: the mix of least error within them, and its llama-quantize command',
  });
  const form = el('form', { class: 'toolbar compare-form', onsubmit: (e) => {
    e.preventDefault();
    ctx.navigate({
      quants: [...chosen].join(',') || null, imatrix: imatrix.value.trim() || null,
      budget_bpw: budget.value.trim() || null,
    });
  } },
  el('span', { class: 'muted' }, 'Quantizations of this source, two or more:'),
  el('label', { class: 'muted' }, 'weighted by ', imatrix),
  el('label', { class: 'muted' }, 'mix within ', budget, ' bits per weight'),
  el('button', { type: 'submit', class: 'primary', id: 'compare-run' }, 'Compare'));
  const parts = {
    status: el('div', { class: 'compare-status muted' }),
    other: el('select', { id: 'compare-other' }),
    pair: el('div', { class: 'compare-pair' }),
    result: el('div', { class: 'compare-result' }),
  };
  host.append(el('h1', null, 'Compare quantizations of ', el('span', { class: 'mono' }, s.checkpoint)),
    form, picker, parts.status, parts.pair, parts.result);
  fillPicker(picker, s.checkpoint, chosen, controller.signal).catch((e) => {
    clear(picker);
    ctx.showError(e);
  });
  if (chosen.size >= 2) runComparison(s, ctx, parts, controller.signal);
  else if (chosen.size === 1) parts.status.append('Choose one more: a comparison needs two or more.');
  return { destroy: () => controller.abort() };
}
