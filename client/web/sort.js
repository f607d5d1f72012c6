// Sorting off the main thread: a long table's sort runs in a Web Worker
// (sort_worker.js), so a click on a heading never blocks the page for the
// sort itself; the page only computes the keys and puts rows in the order
// the worker returns. Where no worker can start, the same sort runs here.

let worker = null;
let broken = false;
let nextId = 1;
const pending = new Map();  // id -> { resolve, keys, desc }

// The order (indices into `keys`) that sorts `keys` (a Float64Array or an
// array of strings), descending with `desc`; equal keys keep index order.
export function sortOrder(keys, desc) {
  const w = sorter();
  if (!w) return Promise.resolve(sortHere(keys, desc));
  const id = nextId++;
  return new Promise((resolve) => {
    pending.set(id, { resolve, keys, desc });
    w.postMessage({ id, keys, desc });
  });
}

function sorter() {
  if (worker || broken) return worker;
  try {
    worker = new Worker(new URL('./sort_worker.js', import.meta.url));
  } catch (_) {
    broken = true;
    return null;
  }
  worker.onmessage = (e) => {
    const p = pending.get(e.data.id);
    if (!p) return;
    pending.delete(e.data.id);
    p.resolve(e.data.order);
  };
  // A worker that fails (a strict CSP, say): every waiting sort runs here.
  worker.onerror = () => {
    broken = true;
    worker = null;
    for (const [id, p] of pending) {
      pending.delete(id);
      p.resolve(sortHere(p.keys, p.desc));
    }
  };
  return worker;
}

function sortHere(keys, desc) {
  const n = keys.length;
  const order = new Uint32Array(n);
  for (let i = 0; i < n; i++) order[i] = i;
  const sign = desc ? -1 : 1;
  const numeric = keys instanceof Float64Array;
  order.sort((a, b) => {
    const x = keys[a];
    const y = keys[b];
    let c;
    if (numeric) {
      c = x - y;
      if (Number.isNaN(c)) c = Number.isNaN(x) ? (Number.isNaN(y) ? 0 : -1) : 1;
    } else c = x < y ? -1 : x > y ? 1 : 0;
    return sign * c || a - b;
  });
  return order;
}
