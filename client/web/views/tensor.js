// Tensor: shape, strides and layout; dtype and encoding; the stored parts
// (files, offsets, bytes: shards and storage); backend compatibility; a
// .npy download.
import * as api from '../api.js';
import { el, clear, loading, fmtBytes, fmtCount, fmtShape } from '../ui.js';

export function key(s) {
  return `${s.checkpoint}|${s.tensor}`;
}

const STATUS = {
  SUPPORT_STATUS_SUPPORTED: ['supported', 'ok'],
  SUPPORT_STATUS_NOT_SUPPORTED: ['not supported', 'bad'],
  SUPPORT_STATUS_NOT_KNOWN: ['not known', 'unknown'],
};

function dl(pairs) {
  return el('dl', { class: 'facts' }, pairs.filter(Boolean).flatMap(([k, v, field]) => [
    el('dt', null, k), el('dd', { 'data-field': field }, v)]));
}

export function mount(host, s, ctx) {
  const controller = new AbortController();
  host.append(loading());
  Promise.all([
    api.call('GetTensor', { checkpoint: s.checkpoint, tensor: s.tensor }, { signal: controller.signal }),
    api.call('GetCheckpoint', { checkpoint: s.checkpoint }, { signal: controller.signal }).catch(() => null),
  ]).then(([{ tensor: t }, ckpt]) => {
    clear(host);
    const e = t.encoding || {};
    const layout = (t.layout || '').replace('LAYOUT_', '').toLowerCase().replace('_', '-');
    const npyUrl = api.getUrl('tensor.npy', { checkpoint: s.checkpoint, tensor: s.tensor });
    const npyRawUrl = api.getUrl('tensor.npy', { checkpoint: s.checkpoint, tensor: s.tensor, raw: 1 });
    const base = s.tensor.replace(/[^A-Za-z0-9._-]/g, '_');
    const downloadLink = (text, url, file, title) => el('a', {
      href: url, class: 'button', download: file, title,
      onclick: (ev) => {
        // Without a token the browser streams the file to disk itself
        // (a multi-GB tensor never sits in the page's memory); a token
        // must go in a header, so then the page fetches it.
        if (!api.token()) return;
        ev.preventDefault();
        api.download(url, file).catch(ctx.showError);
      },
    }, text);

    const geometry = el('section', { class: 'card' }, el('h2', null, 'Shape, strides, layout'), dl([
      ['shape', el('span', { class: 'mono' }, fmtShape(t.shape)), 'shape'],
      ['strides', el('span', { class: 'mono' }, fmtShape(t.strides)), 'strides'],
      ['layout', layout, 'layout'],
      ['elements', fmtCount(t.numElements), 'num_elements'],
      ['stored bytes', `${fmtBytes(t.storedBytes)} (${fmtCount(t.storedBytes)} B)`, 'stored_bytes'],
      ['bits / element', Number(t.numElements) > 0
        ? (Number(t.storedBytes) * 8 / Number(t.numElements)).toFixed(3) : '—', 'bits_per_element'],
    ]));
    const encoding = el('section', { class: 'card' }, el('h2', null, 'dtype and encoding'), dl([
      ['scheme (dtype)', el('b', null, e.scheme), 'scheme'],
      ['convention', e.convention, 'convention'],
      ['quantized', e.quantized ? 'yes' : 'no', 'quantized'],
      ['bits per code', String(e.bits), 'bits'],
      ['granularity', e.granularity, 'granularity'],
      ['symmetric', e.quantized ? (e.symmetric ? 'yes (no zero-point or offset)' : 'no (zero-point or offset)') : '—', 'symmetric'],
      Number(e.groupSize) ? ['group size', fmtCount(e.groupSize), 'group_size'] : null,
      Number(e.blockElems) ? ['block elements', fmtCount(e.blockElems), 'block_elems'] : null,
      (e.blockShape || []).length ? ['block shape', fmtShape(e.blockShape), 'block_shape'] : null,
      e.axis ? ['axis', e.axis, 'axis'] : null,
      ['act-order', e.actOrder ? 'yes (groups via g_idx)' : 'no', 'act_order'],
    ]));
    const parts = el('section', { class: 'card wide' }, el('h2', null, 'Stored parts (shards and storage)'),
      el('table', { class: 'grid' },
        el('thead', null, el('tr', null, ['part', 'dtype', 'shape', 'file', 'offset', 'bytes'].map((h, i) =>
          el('th', { class: i >= 4 ? 'num' : '' }, h)))),
        el('tbody', null, (t.parts || []).map((p) => el('tr', { 'data-part': p.name },
          el('td', { class: 'mono' }, p.name), el('td', null, p.dtype), el('td', { class: 'mono' }, fmtShape(p.shape)),
          el('td', { class: 'mono' }, p.file), el('td', { class: 'num mono' }, fmtCount(p.offset)),
          el('td', { class: 'num' }, fmtBytes(p.sizeBytes)))))));
    const compat = el('section', { class: 'card wide' }, el('h2', null, 'Backend compatibility'),
      (t.compat || []).length
        ? el('table', { class: 'grid' },
          el('thead', null, el('tr', null, ['backend', 'status', 'notes', 'source'].map((h) => el('th', null, h)))),
          el('tbody', null, t.compat.map((c) => {
            const [label, cls] = STATUS[c.status] || [c.status, 'unknown'];
            return el('tr', { 'data-backend': c.backend }, el('td', null, c.backend),
              el('td', null, el('span', { class: `status ${cls}` }, label)),
              el('td', null, c.notes), el('td', { class: 'muted small' }, c.source));
          })))
        : el('p', { class: 'muted' }, e.quantized ? 'No backend table entry for this encoding.'
          : 'Not quantized: every backend reads it.'));
    const files = ckpt ? el('section', { class: 'card' }, el('h2', null, 'Checkpoint'), dl([
      ['format', (ckpt.format || '').replace('CHECKPOINT_FORMAT_', '').toLowerCase(), 'format'],
      ['files', el('span', { class: 'mono' }, (ckpt.files || []).map((f) => `${f.path} (${fmtBytes(f.sizeBytes)})`).join(', ')), 'files'],
      ['tensors', `${fmtCount(ckpt.tensorCount)} logical, ${fmtCount(ckpt.storedTensorCount)} stored`, 'tensor_count'],
      ['conventions', (ckpt.conventions || []).join(', ') || '—', 'conventions'],
      (ckpt.notes || []).length ? ['notes', ckpt.notes.join('; '), 'notes'] : null,
    ])) : null;
    host.append(
      el('div', { class: 'title-row' }, el('h1', { class: 'mono' }, t.name),
        el('div', { class: 'actions' },
          ctx.link('Heatmap', { view: 'heatmap' }, 'button primary'),
          ctx.link('Distribution', { view: 'dist' }, 'button'),
          downloadLink('download .npy', npyUrl, `${base}.npy`, 'float32, dequantized'),
          e.quantized ? downloadLink('raw .npy', npyRawUrl, `${base}.raw.npy`, 'the stored bytes (block types: whole blocks)') : null)),
      el('div', { class: 'cards' }, geometry, encoding, files, parts, compat));
  }).catch((err) => {
    clear(host);
    ctx.showError(err);
  });
  return { destroy: () => controller.abort() };
}
