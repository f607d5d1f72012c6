// Small DOM and formatting helpers shared by the views, and the colours:
// the categorical palette of group shading and the viridis ramp of values.
import { virtualRows } from './virtual.js';
import { orderedRows } from './rows.js';

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
// sortValue, lowIsWorse}] (the rows' order: rows.js). Long tables are virtual
// (virtual.js): only the rows in view are in the DOM. A name filter
// (setFilter) keeps the rows whose `filterKey` (default 'name') holds the
// text, case ignored. The wrapper's data-sort-key and data-sort-dir say the
// order shown, data-rows and data-shown how many rows it holds and shows.
export function table(columns, rows, { onRow, sortKey, sortDesc = true, rowAttrs, filterKey = 'name' } = {}) {
  const wrap = el('div', { class: 'table-wrap' });
  const order = orderedRows(columns, { sortKey, sortDesc, filterKey, onReady: () => draw() });
  const drawRow = (i) => {
    const r = order.row(i);
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
      // The same column again turns round; a new one starts with the worst
      // rows first: descending when numeric, ascending where a low number
      // is the worse (SQNR, cosine) and for text.
      if (order.asked() === c.key) order.sortBy(c.key);
      else order.sortBy(c.key, !!c.num && !c.lowIsWorse);
      draw();
    },
  }, c.label));
  const tbody = el('tbody');
  wrap.appendChild(el('table', { class: 'grid' }, el('thead', null, el('tr', null, heads)), tbody));
  const list = virtualRows({
    scroller: wrap, body: tbody, draw: drawRow, id: (i) => order.row(i),
    spacer: () => el('tr', null, el('td', { colspan: columns.length })),
  });
  const draw = () => {
    const { key, desc } = order.sortedBy();
    heads.forEach((h, k) => {
      const on = columns[k].key === key;
      h.classList.toggle('sorted', on);
      h.classList.toggle('desc', on && desc);
      h.classList.toggle('asc', on && !desc);
    });
    wrap.dataset.sortKey = key || '';
    wrap.dataset.sortDir = desc ? 'desc' : 'asc';
    wrap.dataset.shown = String(order.count());
    if (order.sorting()) wrap.dataset.sorting = 'true';
    else delete wrap.dataset.sorting;
    list.setCount(order.count());
  };
  order.take(rows);
  draw();
  wrap.redraw = (newRows) => {
    order.take(newRows);
    draw();
  };
  // Once per animation frame however fast the keys come.
  let filterFrame = 0;
  let filterText = '';
  wrap.setFilter = (text) => {
    filterText = text;
    if (filterFrame) return;
    filterFrame = requestAnimationFrame(() => {
      filterFrame = 0;
      order.setFilter(filterText);
      list.toTop();
      draw();
    });
  };
  // Sorts again (a column's sortValue changed, as the name column's with
  // the order), by column `by` (ascending unless `byDesc`) when given.
  wrap.resort = (by, byDesc = false) => {
    if (by) order.sortBy(by, byDesc);
    else order.resort();
    draw();
  };
  return wrap;
}
