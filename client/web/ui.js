// Small DOM and formatting helpers shared by the views, and the colours:
// the categorical palette of group shading and the viridis ramp of values.
import { virtualRows } from './virtual.js';
import { sortOrder } from './sort.js';

export function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  if (attrs) {
    for (const [k, v] of Object.entries(attrs)) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'class') e.className = v;
      else if (k === 'text') e.textContent = v;
      else if (k.startsWith('on') && typeof v === 'function') e.addEventListener(k.slice(2), v);
      else if (k === 'style' && typeof v === 'object') {
        // Custom properties (--scheme) need setProperty.
        for (const [sk, sv] of Object.entries(v)) {
          if (sk.startsWith('--')) e.style.setProperty(sk, String(sv));
          else e.style[sk] = sv;
        }
      }
      else e.setAttribute(k, v === true ? '' : String(v));
    }
  }
  append(e, children);
  return e;
}

function append(e, children) {
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    if (Array.isArray(c)) append(e, c);
    else e.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

// Appends children to a parent, skipping null/false (native append would
// print "null").
export function put(parent, ...children) {
  append(parent, children);
  return parent;
}

export function clear(e) {
  while (e.firstChild) e.removeChild(e.firstChild);
  return e;
}

export function loading(text = 'Loading…') {
  return el('div', { class: 'loading' }, el('span', { class: 'spinner' }), text);
}

const UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
export function fmtBytes(n) {
  n = Number(n);
  let u = 0;
  while (Math.abs(n) >= 1024 && u < UNITS.length - 1) {
    n /= 1024;
    u++;
  }
  return u === 0 ? `${n} B` : `${n.toFixed(n < 10 ? 2 : 1)} ${UNITS[u]}`;
}

// One formatter for every count: toLocaleString makes one per call, which
// a table of 10,000 rows feels.
const COUNT_FORMAT = new Intl.NumberFormat('en-US', { maximumFractionDigits: 3 });
export function fmtCount(n) {
  return COUNT_FORMAT.format(Number(n));
}

// For people: 5 significant digits; exact values are shown where they matter.
export function fmtNum(x, digits = 5) {
  x = Number(x);
  if (!Number.isFinite(x)) return Number.isNaN(x) ? 'NaN' : x > 0 ? '+inf' : '-inf';
  if (x === 0) return '0';
  const a = Math.abs(x);
  if (a >= 1e6 || a < 1e-4) return x.toExponential(digits - 1);
  return String(Number(x.toPrecision(digits)));
}

// Exact: the shortest text that reads back as the same double.
export function exact(x) {
  x = Number(x);
  if (Number.isNaN(x)) return 'NaN';
  if (x === Infinity) return 'Infinity';
  if (x === -Infinity) return '-Infinity';
  return String(x);
}

export function fmtShape(shape) {
  return `[${(shape || []).map(Number).join(', ')}]`;
}

export function fmtTime(unix) {
  const d = new Date(Number(unix) * 1000);
  return d.toISOString().replace('T', ' ').slice(0, 16);
}

// Tableau 10: the group shading's palette, shared with the CLI's PNG.
export const PALETTE = ['#4e79a7', '#f28e2b', '#e15759', '#76b7b2', '#59a14f',
  '#edc948', '#b07aa1', '#ff9da7', '#9c755f', '#bab0ac'];
export const NO_GROUP = '#808080';

export function hexRgb(h) {
  return [parseInt(h.slice(1, 3), 16), parseInt(h.slice(3, 5), 16), parseInt(h.slice(5, 7), 16)];
}
export const PALETTE_RGB = PALETTE.map(hexRgb);
export const NO_GROUP_RGB = hexRgb(NO_GROUP);

// Colours of a grid of group ids (row-major, `width` across): scanning the
// cells row-major, a group seen for the first time takes the first palette
// index, from (id mod 10) upward and cycling, whose colour its left and
// upper neighbour cells' groups (other groups only) do not already have.
// Id -1 (no groups) is grey. Returns a Map id -> palette index (-1: grey).
export function groupColours(groups, width, height) {
  const assigned = new Map();
  for (let i = 0; i < height; i++) {
    for (let j = 0; j < width; j++) {
      const g = groups[i * width + j];
      if (assigned.has(g)) continue;
      if (g < 0) {
        assigned.set(g, -1);
        continue;
      }
      const taken = new Set();
      if (j > 0) {
        const left = groups[i * width + j - 1];
        if (left !== g) taken.add(assigned.get(left));
      }
      if (i > 0) {
        const up = groups[(i - 1) * width + j];
        if (up !== g) taken.add(assigned.get(up));
      }
      const start = ((g % 10) + 10) % 10;
      let pick = start;
      for (let k = 0; k < 10; k++) {
        const c = (start + k) % 10;
        if (!taken.has(c)) {
          pick = c;
          break;
        }
      }
      assigned.set(g, pick);
    }
  }
  return assigned;
}

// Viridis, sampled at eleven points and interpolated linearly.
const VIRIDIS = ['#440154', '#482475', '#414487', '#355f8d', '#2a788e', '#21918c',
  '#22a884', '#44bf70', '#7ad151', '#bddf26', '#fde725'].map(hexRgb);

// t in [0, 1], clamped (so +-inf are the ends); NaN is magenta.
export function viridis(t) {
  if (Number.isNaN(t)) return [255, 0, 255];
  t = Math.min(1, Math.max(0, t)) * (VIRIDIS.length - 1);
  const i = Math.min(VIRIDIS.length - 2, Math.floor(t));
  const f = t - i;
  const a = VIRIDIS[i];
  const b = VIRIDIS[i + 1];
  return [a[0] + (b[0] - a[0]) * f, a[1] + (b[1] - a[1]) * f, a[2] + (b[2] - a[2]) * f];
}

export function rgbCss(c) {
  return `rgb(${Math.round(c[0])}, ${Math.round(c[1])}, ${Math.round(c[2])})`;
}

// A stable colour per encoding scheme (architecture badges and summary).
const schemeCache = new Map();
export function schemeColour(scheme) {
  if (!schemeCache.has(scheme)) {
    let h = 0;
    for (const ch of scheme) h = (h * 31 + ch.charCodeAt(0)) >>> 0;
    const plain = /^(F32|F16|BF16|F64|I8|U8|I16|I32|I64|BOOL)$/.test(scheme);
    schemeCache.set(scheme, plain ? '#8a94a6' : PALETTE[h % 9]);
  }
  return schemeCache.get(scheme);
}

// A table with sortable headers: columns [{key, label, num, fmt, title,
// sortValue}] (sortValue(row): the key a column sorts by, default its value;
// numbers compare as numbers, NaN lowest, anything else as strings by code
// units; equal keys keep the rows' arrival order). Sort keys are computed
// once per sort; a long table (SORT_IN_WORKER_FROM rows) is sorted in a Web
// Worker (sort.js) while the page stays responsive, showing the old order
// until the new one is ready. Rows that arrive later (redraw with the same
// rows and more) are put in place by binary search, so a stream of rows
// costs a few comparisons each, not a sort. Long tables are virtual
// (virtual.js): only the rows in view are in the DOM. A name filter
// (setFilter) keeps the rows whose `filterKey` (default 'name') holds the
// text, case ignored. The wrapper's data-sort-key and data-sort-dir say
// the order shown.
const SORT_IN_WORKER_FROM = 2000;

export function table(columns, rows, { onRow, sortKey, sortDesc = true, rowAttrs, filterKey = 'name' } = {}) {
  const wrap = el('div', { class: 'table-wrap' });
  let key = sortKey;      // the order asked for
  let desc = sortDesc;
  let shownKey = key;     // the order `sorted` is in
  let shownDesc = desc;
  let filter = '';
  let seen = 0;           // rows taken from `rows`
  let firstSeen = null;   // rows[0] and rows[seen - 1] when taken
  let lastSeen = null;
  let sorted = [];        // [sort key, row, name in lower case], in the table's order
  let shown = sorted;     // the filter's rows of `sorted`
  let sorting = 0;        // the worker sort in flight (its number), 0 = none
  let sorts = 0;
  const sortValue = (row) => {
    const col = columns.find((c) => c.key === key);
    if (!col) return 0;
    const v = col.sortValue ? col.sortValue(row) : col.value ? col.value(row) : row[key];
    return col.num ? Number(v) : (typeof v === 'number' ? v : String(v));
  };
  const compare = (a, b) => {
    const x = a[0];
    const y = b[0];
    let c;
    if (typeof x === 'number' || typeof y === 'number') {
      c = x - y;
      if (Number.isNaN(c)) c = Number.isNaN(x) ? (Number.isNaN(y) ? 0 : -1) : 1;
    } else c = x < y ? -1 : x > y ? 1 : 0;
    return desc ? -c : c;
  };
  const entry = (r) => [key ? sortValue(r) : 0, r, String(r[filterKey]).toLowerCase()];
  const refilter = () => {
    shown = filter ? sorted.filter((e) => e[2].includes(filter)) : sorted;
  };
  // After the equal keys already in place: arrival order among equals.
  const insert = (r) => {
    const e = entry(r);
    let lo = 0;
    let hi = sorted.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (!key || compare(sorted[mid], e) <= 0) lo = mid + 1;
      else hi = mid;
    }
    sorted.splice(lo, 0, e);
  };
  // Rows [from, to) into `sorted`: a few by binary search each, a batch
  // sorted on its own and merged in one pass (equal keys: the rows already
  // there first, so arrival order holds).
  const putInPlace = (from, to) => {
    if (to - from <= 16 || !key) {
      for (let k = from; k < to; k++) insert(rows[k]);
      return;
    }
    const batch = rows.slice(from, to).map(entry).sort(compare);
    const out = new Array(sorted.length + batch.length);
    let i = 0;
    let j = 0;
    let o = 0;
    while (i < sorted.length && j < batch.length) out[o++] = compare(batch[j], sorted[i]) < 0 ? batch[j++] : sorted[i++];
    while (i < sorted.length) out[o++] = sorted[i++];
    while (j < batch.length) out[o++] = batch[j++];
    sorted = out;
  };
  const resort = () => {
    const entries = rows.slice(0, seen).map(entry);
    if (!key || entries.length < SORT_IN_WORKER_FROM) {
      sorting = 0;
      if (key) entries.sort(compare);
      sorted = entries;
      shownKey = key;
      shownDesc = desc;
      refilter();
      return;
    }
    const mine = ++sorts;
    sorting = mine;
    wrap.dataset.sorting = 'true';
    const numeric = entries.every((e) => typeof e[0] === 'number');
    const keys = numeric ? Float64Array.from(entries, (e) => e[0]) : entries.map((e) => String(e[0]));
    const wantKey = key;
    const wantDesc = desc;
    sortOrder(keys, desc).then((order) => {
      if (sorting !== mine) return;  // a newer sort, or the rows replaced
      sorting = 0;
      delete wrap.dataset.sorting;
      const next = new Array(order.length);
      for (let k = 0; k < order.length; k++) next[k] = entries[order[k]];
      sorted = next;
      shownKey = wantKey;
      shownDesc = wantDesc;
      // Rows that came while the worker sorted: a few put in place, many
      // sorted again (in the worker).
      if (seen - entries.length > 64) {
        resort();
        return;
      }
      putInPlace(entries.length, seen);
      refilter();
      draw();
    });
  };
  const drawRow = (i) => {
    const r = shown[i][1];
    const tr = el('tr', Object.assign({ class: onRow ? 'clickable' : '' }, rowAttrs ? rowAttrs(r) : {}),
      columns.map((c) => {
        const v = c.value ? c.value(r) : r[c.key];
        const out = c.fmt ? c.fmt(v, r) : v;
        return el('td', { class: c.num ? 'num' : '' }, out);
      }));
    tr.dataset.row = String(i);
    if (onRow) {
      tr.tabIndex = 0;
      tr.addEventListener('click', () => onRow(r));
      tr.addEventListener('keydown', (e) => {
        if (e.key === 'Enter') onRow(r);
      });
    }
    return tr;
  };
  const heads = columns.map((c) => el('th', {
    class: [c.num ? 'num' : '', c.sortable === false ? '' : 'sortable'].join(' '),
    title: c.title,
    'data-sort': c.key,
    onclick: c.sortable === false ? null : () => {
      if (key === c.key) desc = !desc;
      else {
        key = c.key;
        desc = !!c.num;
      }
      resort();
      draw();
    },
  }, c.label));
  const tbody = el('tbody');
  wrap.appendChild(el('table', { class: 'grid' }, el('thead', null, el('tr', null, heads)), tbody));
  const list = virtualRows({
    scroller: wrap, body: tbody, draw: drawRow, id: (i) => shown[i][1],
    spacer: () => el('tr', null, el('td', { colspan: columns.length })),
  });
  const draw = () => {
    heads.forEach((h, k) => {
      const on = columns[k].key === shownKey;
      h.classList.toggle('sorted', on);
      h.classList.toggle('desc', on && shownDesc);
      h.classList.toggle('asc', on && !shownDesc);
    });
    wrap.dataset.sortKey = shownKey || '';
    wrap.dataset.sortDir = shownDesc ? 'desc' : 'asc';
    wrap.dataset.shown = String(shown.length);
    list.setCount(shown.length);
  };
  // Takes `newRows` (or the same array grown): the rows past those already
  // taken are inserted in place when the first rows are the same; anything
  // else is sorted afresh.
  const take = (newRows) => {
    if (newRows) rows = newRows;
    const grown = rows.length >= seen && (seen === 0 || (rows[0] === firstSeen && rows[seen - 1] === lastSeen));
    if (grown && sorting) {
      seen = rows.length;  // the worker's reply puts these in place
    } else if (!grown || (rows.length - seen > 64 && rows.length - seen > seen)) {
      seen = rows.length;  // replaced, or more new rows than old: one sort
      resort();
    } else {
      putInPlace(seen, rows.length);
      seen = rows.length;
      refilter();
    }
    firstSeen = rows[0] || null;
    lastSeen = seen ? rows[seen - 1] : null;
  };
  take(rows);
  draw();
  wrap.redraw = (newRows) => {
    take(newRows);
    draw();
  };
  // Once per animation frame however fast the keys come.
  let filterFrame = 0;
  wrap.setFilter = (text) => {
    filter = String(text || '').trim().toLowerCase();
    if (filterFrame) return;
    filterFrame = requestAnimationFrame(() => {
      filterFrame = 0;
      refilter();
      list.toTop();
      draw();
    });
  };
  // Sorts again (a column's sortValue changed, as the name column's with
  // the order), by column `by` (ascending unless `byDesc`) when given.
  wrap.resort = (by, byDesc = false) => {
    if (by) {
      key = by;
      desc = byDesc;
    }
    resort();
    draw();
  };
  return wrap;
}
