// The rows of a long table in the order shown: sorted by a column and
// filtered by name, kept up to date as rows stream in. Sort keys are
// computed once per sort; from SORT_IN_WORKER_FROM rows the sort runs in a
// Web Worker (sort.js) and the old order stays until the new one is ready.
// Rows that arrive later (take() with the same rows and more) are put in
// place: a few by binary search, a batch sorted alone and merged in one
// pass, never a sort of everything per row. Order: numbers as numbers, NaN
// lowest, anything else as strings by code units; equal keys keep the rows'
// arrival order.
import { sortOrder } from './sort.js';

const SORT_IN_WORKER_FROM = 2000;

// `columns` [{key, num, value, sortValue}]: sortValue(row) (else value(row),
// else row[key]) is the key a column sorts by. `onReady()` is called when a
// worker's sort lands (the table redraws then). Returns the rows' state:
// { take(rows), sortBy(key, desc), resort(), setFilter(text),
//   count(), row(i), asked() (the column asked for), sortedBy() ({key,
//   desc} of the order shown), sorting() }.
export function orderedRows(columns, { sortKey, sortDesc = true, filterKey = 'name', onReady } = {}) {
  let rows = [];
  let key = sortKey;      // the order asked for
  let desc = sortDesc;
  let shownKey = key;     // the order `sorted` is in
  let shownDesc = desc;
  let filter = '';
  let seen = 0;           // rows taken from `rows`
  let firstSeen = null;   // rows[0] and rows[seen - 1] when taken
  let lastSeen = null;
  let sorted = [];        // [sort key, row, name in lower case], in order
  let shown = sorted;     // the filter's entries of `sorted`
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
  // Rows [from, to) into `sorted` (equal keys: the rows already there first).
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
    const numeric = entries.every((e) => typeof e[0] === 'number');
    const keys = numeric ? Float64Array.from(entries, (e) => e[0]) : entries.map((e) => String(e[0]));
    const wantKey = key;
    const wantDesc = desc;
    sortOrder(keys, desc).then((order) => {
      if (sorting !== mine) return;  // a newer sort, or the rows replaced
      sorting = 0;
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
      if (onReady) onReady();
    });
  };

  return {
    // Takes `newRows` (or the same array grown): the rows past those
    // already taken are put in place when the first rows are the same;
    // anything else is sorted afresh.
    take(newRows) {
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
    },
    // By column `by` (descending with `byDesc`); the same column again
    // without a direction turns it round.
    sortBy(by, byDesc) {
      if (byDesc === undefined && by === key) desc = !desc;
      else {
        key = by;
        desc = !!byDesc;
      }
      resort();
    },
    resort,
    setFilter(text) {
      filter = String(text || '').trim().toLowerCase();
      refilter();
    },
    count: () => shown.length,
    row: (i) => shown[i][1],
    asked: () => key,
    sortedBy: () => ({ key: shownKey, desc: shownDesc }),
    sorting: () => sorting !== 0,
  };
}
