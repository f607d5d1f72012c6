// Browse: the checkpoints under the server's roots (ListCheckpoints), a page
// at a time; clicking one opens its architecture.
import * as api from '../api.js';
import { el, clear, loading, fmtBytes, fmtCount, fmtTime, table } from '../ui.js';

export function key(s) {
  return s.dir || '';
}

const FORMAT = { CHECKPOINT_FORMAT_GGUF: 'gguf', CHECKPOINT_FORMAT_SAFETENSORS: 'safetensors' };

export function mount(host, s, ctx) {
  const controller = new AbortController();
  const input = el('input', { id: 'browse-dir', value: s.dir || '', placeholder: 'every root', spellcheck: 'false' });
  const depth = el('input', { id: 'browse-depth', type: 'number', min: 0, max: 16, value: 4, class: 'narrow' });
  const form = el('form', { class: 'toolbar', onsubmit: (e) => {
    e.preventDefault();
    ctx.navigate({ dir: input.value.trim() || null });
  } },
  el('label', null, 'directory ', input),
  el('label', null, 'depth ', depth),
  el('button', { type: 'submit', class: 'primary' }, 'List'));
  const roots = el('div', { class: 'roots muted' });
  const list = el('div', { class: 'browse-list' }, loading('Listing checkpoints…'));
  const more = el('div', { class: 'more' });
  host.append(el('h1', null, 'Checkpoints'), roots, form, list, more);

  api.call('GetServerInfo', {}, { signal: controller.signal }).then((info) => {
    clear(roots).append('roots: ', ...(info.roots || []).flatMap((r, i) => [
      i ? ', ' : '',
      el('a', { href: '#', class: 'mono', onclick: (e) => {
        e.preventDefault();
        input.value = r;
        ctx.navigate({ dir: r });
      } }, r)]), el('span', { class: 'version' }, ` · tensormorphd ${info.version}`));
  }).catch(() => {});

  const entries = [];
  const columns = [
    { key: 'path', label: 'checkpoint', fmt: (v) => el('span', { class: 'mono' }, v) },
    { key: 'format', label: 'format', value: (r) => FORMAT[r.format] || r.format },
    { key: 'fileCount', label: 'files', num: true },
    { key: 'totalBytes', label: 'size', num: true, fmt: (v) => fmtBytes(v) },
    // A file the listing's header read found broken says so (its reason
    // on hover), not a count or a dash that reads as "too many to count".
    { key: 'storedTensorCount', label: 'stored tensors', num: true,
      value: (r) => (r.broken ? -1 : r.storedTensorCount ?? ''),
      fmt: (v, r) => (r.broken ? el('span', { class: 'broken', title: r.broken }, 'broken')
        : v === '' ? '—' : fmtCount(v)) },
    { key: 'modifiedUnixSeconds', label: 'modified (UTC)', num: true, fmt: (v) => fmtTime(v) },
  ];
  const grid = table(columns, entries, {
    onRow: (r) => ctx.navigate({ checkpoint: r.path, view: 'arch', tensor: null, dir: null, index: null, region: null }),
    rowAttrs: (r) => ({ 'data-checkpoint': r.path }),
  });

  const load = async (token) => {
    if (token) clear(more).append(loading('Listing…'));
    let next = '';
    const request = { directory: s.dir || '', maxDepth: Number(depth.value), pageSize: 200, pageToken: token || '' };
    try {
      await api.stream('ListCheckpoints', request, (e) => {
        if (e.nextPageToken) next = e.nextPageToken;
        if (e.path) entries.push(e);
      }, { signal: controller.signal });
    } catch (e) {
      clear(list);
      clear(more);
      ctx.showError(e);
      return;
    }
    clear(list).append(entries.length ? grid : el('p', { class: 'empty' },
      'No checkpoints here (a checkpoint is a .gguf file or a directory of .safetensors files).'));
    grid.redraw(entries);
    clear(more);
    if (next) more.append(el('button', { onclick: () => load(next) }, 'More…'));
  };
  load('');
  return { destroy: () => controller.abort() };
}
