// The two orders of a checkpoint's tensors: model order (the natural layer
// order: names compared with their numbers as numbers, so layers.2 comes
// before layers.10) and file order (as stored: by file, then offset, from
// ListTensors' first stored part).
import * as api from './api.js';

// A key whose plain comparison (<) is model order: every run of digits
// padded to 12 places.
export function modelKey(name) {
  return String(name).replace(/\d+/g, (d) => d.padStart(12, '0'));
}

// checkpoint -> Promise<Map name -> rank in file order>, asked once.
const ranks = new Map();

export function fileRanks(checkpoint, signal) {
  if (!ranks.has(checkpoint)) {
    const rows = [];
    ranks.set(checkpoint, api.stream('ListTensors', { checkpoint }, (t) => {
      const p = (t.parts || [])[0] || {};
      rows.push([p.file || '', Number(p.offset) || 0, t.name]);
    }, { signal }).then(() => {
      rows.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : a[1] - b[1] || (a[2] < b[2] ? -1 : 1)));
      return new Map(rows.map((r, k) => [r[2], k]));
    }).catch((e) => {
      ranks.delete(checkpoint);
      throw e;
    }));
  }
  return ranks.get(checkpoint);
}

// The sort key of a name in `order` ('file' with its ranks, else model):
// a number in file order (names the file lacks last), a string in model order.
export function orderKey(order, fileRank) {
  if (order === 'file' && fileRank) return (name) => (fileRank.has(name) ? fileRank.get(name) : Number.MAX_SAFE_INTEGER);
  return modelKey;
}

// The toggle: a select of the two orders calling onChange('model'|'file').
export function orderSelect(el, order, onChange, id) {
  const select = el('select', { id, 'data-role': 'order', title: 'model order: layers by number; file order: as stored' },
    el('option', { value: 'model', selected: order !== 'file' }, 'model order'),
    el('option', { value: 'file', selected: order === 'file' }, 'file order'));
  select.addEventListener('change', () => onChange(select.value));
  return select;
}
