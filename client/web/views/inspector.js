// The Scalar Inspector: one element's stored code beside the scale,
// zero-point, offset, group, level and step that turn it into its value
// (InspectScalars); with a source, the source element the diff pairs it with
// (the server's own pairing: a GGUF's Hugging Face tensor, its Q/K rows
// through the RoPE row map), its value, the signed error and the error in
// steps, all from the same reply.
// Every shown number carries a stable data-field and is exact (the
// shortest text that reads back as the same number).
import * as api from '../api.js';
import { el, clear, exact, fmtNum } from '../ui.js';
import { knownTensorReport } from '../store.js';
import { zoomRegionAround } from './heatmap_canvas.js';

function binary(rawBits, bits) {
  let b;
  try {
    b = BigInt(rawBits).toString(2);
  } catch (_) {
    return '?';
  }
  b = b.padStart(bits || 1, '0');
  const out = [];
  for (let i = b.length; i > 0; i -= 4) out.unshift(b.slice(Math.max(0, i - 4), i));
  return out.join(' ');
}

// The formats' own parameters (ScalarInspection.params) by their stored
// names: a reader's label and what the number is, so that a bias, a global
// scale or a stored scale code is not a bare identifier.
const PARAM_LABELS = {
  scale: ['scale', 'real units'],
  bias: ['bias', 'real units: value = scale · code + bias'],
  zero: ['zero', 'code units, as stored'],
  SCB: ['SCB (row absmax)', 'real units: scale = SCB / 127'],
  block_scale: ['block scale', 'the group’s stored scale'],
  global_scale: ['global scale', 'per tensor: scale = block scale × global scale'],
  scale_e4m3: ['scale code (E4M3)', 'the stored byte'],
  scale_e8m0: ['scale code (E8M0)', 'the stored byte: scale = 2^(code − 127)'],
  g_idx: ['g_idx', 'the group this input column reads (act-order)'],
};

function paramField(p) {
  const [label, note] = PARAM_LABELS[p.name] || [p.name.replace(/_/g, ' '), null];
  return field(label, `param_${p.name}`, exact(p.value), { note, title: `stored as ${p.name}` });
}

function field(label, name, value, opts = {}) {
  return el('div', { class: `field${opts.big ? ' big' : ''}`, title: opts.title },
    el('span', { class: 'label' }, label),
    el('span', { class: 'val mono', 'data-field': name }, value),
    opts.note ? el('span', { class: 'note' }, opts.note) : null);
}

export function createInspector(ctx) {
  const root = el('aside', { class: 'inspector', 'data-role': 'inspector' },
    el('p', { class: 'muted' }, 'Click a cell to inspect its first element. Arrow keys move to the neighbouring element.'));
  let controller = null;
  let seq = 0;

  // opts: checkpoint, tensor, index (array), ref, report (TensorDiffReport or null)
  async function show(o) {
    if (controller) controller.abort();
    controller = new AbortController();
    const my = ++seq;
    const signal = controller.signal;
    root.dataset.state = 'loading';
    root.classList.add('busy');
    let resp;
    // Why the source is not shown (the reference's error), when it is not.
    let refError = null;
    try {
      // A rank-0 tensor's one element has no coordinates: flat index 0.
      const where = o.index.length ? { coords: o.index } : { flatIndices: [0] };
      const req = Object.assign({ checkpoint: o.checkpoint, tensor: o.tensor }, where);
      if (o.ref) {
        try {
          resp = await api.call('InspectScalars', Object.assign({ reference: o.ref }, req), { signal });
        } catch (e) {
          if (e.name === 'AbortError') throw e;
          // The element is still worth showing: without the source, and
          // the reference's status said where the source would be.
          refError = e;
        }
      }
      if (!resp) resp = await api.call('InspectScalars', req, { signal });
    } catch (e) {
      if (my !== seq) return;
      root.classList.remove('busy');
      root.dataset.state = 'error';
      if (e.name !== 'AbortError') ctx.showError(e);
      return;
    }
    if (my !== seq) return;
    const sc = (resp.scalars || [])[0];
    if (!sc) {
      root.classList.remove('busy');
      root.dataset.state = 'error';
      ctx.showError({ code: 'INTERNAL', message: `InspectScalars answered no element for [${o.index.join(', ')}]` });
      return;
    }
    const e = resp.encoding || {};
    const bits = sc.codeBits;
    const value = api.num(sc.value);
    // The float32's own value (the reply's text is its shortest form): the
    // neighbouring levels are exact from it, so a level of 0 reads 0, not
    // 3e-12.
    const exactValue = Math.fround(value);
    const stepBelow = api.num(sc.stepBelow);
    const stepAbove = api.num(sc.stepAbove);
    // On its group's end level there is no level beyond: the step there is
    // the one an error past the range is measured in, not a level to go to.
    const atBottom = exactValue === Math.fround(api.num(sc.rangeMin));
    const atTop = exactValue === Math.fround(api.num(sc.rangeMax));
    const params = (sc.params || []).map(paramField);
    const sourceBox = el('div', { class: 'panel source-panel' });
    clear(root).append(
      el('div', { class: 'inspector-head' },
        el('h2', null, 'Scalar Inspector'),
        el('div', { class: 'mono index' }, el('span', { 'data-field': 'index' }, `[${sc.index.map(Number).join(', ')}]`),
          el('span', { class: 'muted' }, ' flat '), el('span', { 'data-field': 'flat_index' }, String(Number(sc.flatIndex)))),
        el('div', { class: 'muted small' }, `${e.scheme} · ${e.granularity}`,
          sc.index.length ? [' · ', ctx.link('Zoom to element', { checkpoint: o.checkpoint, tensor: o.tensor, view: 'heatmap',
            index: sc.index.map(Number).join(','),
            region: zoomRegionAround(sc.index.map(Number), api.nums(resp.shape)) }, 'zoom-link')] : null)),
      el('div', { class: 'side-by-side' },
        el('div', { class: 'panel stored' },
          el('h3', null, 'stored'),
          field('raw code', 'raw_code', String(sc.rawCode), { big: true }),
          field('binary', 'raw_binary', binary(sc.rawBits, bits), { title: 'the stored bits, most significant first' }),
          field('code bits', 'code_bits', String(bits), { note: sc.codeIsFloat ? 'float bit pattern' : 'integer' }),
          field('block', 'block', String(sc.block)),
          field('sub-block', 'sub_block', String(sc.subBlock)),
          field('group', 'group', String(sc.group), { note: Number(sc.group) < 0 ? 'no groups' : null }),
          params.length ? el('div', { class: 'params' }, el('h4', null, 'format parameters'), params) : null),
        el('div', { class: 'panel decoded' },
          el('h3', null, 'decoded'),
          field('value', 'value', exact(value), { big: true }),
          field('scale', 'scale', exact(sc.scale)),
          field('zero-point', 'zero_point', exact(sc.zeroPoint), { note: 'code units' }),
          field('offset', 'offset', exact(sc.offset), { note: 'real units' }),
          field('level', 'level', exact(sc.level)),
          field('step', 'step', exact(sc.step)),
          field('to level below', 'step_below', exact(stepBelow), {
            note: atBottom ? 'none: the lowest level (a source below is measured in this step)' : `→ ${fmtNum(exactValue - stepBelow)}`,
          }),
          field('to level above', 'step_above', exact(stepAbove), {
            note: atTop ? 'none: the highest level (a source above is measured in this step)' : `→ ${fmtNum(exactValue + stepAbove)}`,
          }),
          field('range', 'range', `[${fmtNum(sc.rangeMin)}, ${fmtNum(sc.rangeMax)}]`),
          field('range min', 'range_min', exact(sc.rangeMin)),
          field('range max', 'range_max', exact(sc.rangeMax)))),
      sourceBox,
      el('p', { class: 'muted small formula' }, 'value = scale · level + offset; level = code − zero-point (affine) or the codebook entry.'));
    root.classList.remove('busy');
    root.dataset.state = 'ready';
    root.dataset.index = sc.index.map(Number).join(',');

    if (!o.ref) {
      sourceBox.append(el('h3', null, 'source'), el('p', { class: 'muted' }, 'Pick a source checkpoint (top right) to see the source value and the error in steps.'));
      return;
    }
    clear(sourceBox).append(el('h3', null, `source · ${o.ref}`));
    const src = sc.source;
    if (!src) {
      const err = refError || { code: 'INTERNAL', message: 'InspectScalars answered no source element' };
      sourceBox.dataset.state = 'error';
      sourceBox.append(el('p', { class: 'muted small', 'data-field': 'source_error', 'data-code': err.code || '' },
        `${err.code || 'error'}: ${err.message}`));
      return;
    }
    sourceBox.dataset.state = 'ready';
    const r = o.report;
    const source = api.num(src.value);
    const srcIndex = (src.index || []).map(Number);
    const mapped = !!resp.referenceRowsMapped;
    // The error in steps as the server measures it (the heatmap's: |error|
    // over the gap on the source's side); the sign says on which side of
    // the source the value fell.
    const diff = api.num(src.error);
    const size = api.num(src.errorSteps);
    const signed = diff < 0 ? -size : size;
    sourceBox.append(
      field('source value', 'source', exact(source), { big: true }),
      field('source element', 'source_index', `${resp.referenceTensor}[${srcIndex.join(', ')}]`, {
        note: mapped ? 'rows mapped as the diff maps them (llama.cpp’s RoPE permutation of Q/K)' : 'the same index',
        title: 'the source element the diff compares this one with',
      }),
      field('value − source', 'abs_error', exact(diff), { note: 'signed error, real units' }));
    sourceBox.append(field('error in steps', 'error_steps', exact(signed), {
      note: verdictText(src, r || knownTensorReport(o.checkpoint, o.tensor, o.ref)),
      title: '(value − source) / the gap between levels on the source’s side',
    }));
  }

  // The server's verdict on the element, the diff's own (SourceScalar):
  // against its group's bound, whatever the page has at hand; the family
  // of the bound from the tensor's report when one is.
  function verdictText(src, report) {
    const family = report && report.boundFamily ? `, ${report.boundFamily}` : '';
    const bound = `its bound (${fmtNum(api.num(src.boundSteps), 4)} steps${family})`;
    const excess = fmtNum(api.num(src.excessSteps), 4);
    switch (src.verdict) {
      case 'ELEMENT_VERDICT_WITHIN': return `within ${bound}`;
      case 'ELEMENT_VERDICT_NOT_NEAREST':
        return `beyond ${bound} by ${excess} steps: another level is nearer`
          + (src.chosenCodes ? ' (this quantizer chooses its codes: information)' : '');
      case 'ELEMENT_VERDICT_CLIPPED': return `on an extreme level: clipped, as far as the format allows (${bound})`;
      case 'ELEMENT_VERDICT_CLIPPED_BEYOND_BOUND': return `on an extreme level: clipped, ${excess} steps beyond ${bound}`;
      case 'ELEMENT_VERDICT_ZEROED_GROUP': return 'its group\'s stored scale is 0: no steps to measure in';
      default: return 'not a number: a NaN on either side';
    }
  }

  return {
    element: root,
    show,
    clear() {
      if (controller) controller.abort();
      seq++;
      clear(root).append(el('p', { class: 'muted' }, 'Click a cell to inspect its first element. Arrow keys move to the neighbouring element.'));
      delete root.dataset.state;
    },
  };
}
