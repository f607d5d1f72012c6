// The page's state is its URL: every view is a link that can be shared, and
// back/forward walk it. Keys:
//   checkpoint, tensor, view (browse|arch|tensor|heatmap|dist|diff|sparsity|compare),
//   mode (value|absmax|error|group|zeros), ref (source checkpoint),
//   index (coordinates "3,100"), region ("r0:r1,c0:c1" of the heatmap),
//   leading (indices of the leading dimensions, "0,2"), group (a group id for
//   the distribution), log (1: log counts), dir (browse), metric (architecture colouring),
//   filter (diff glob), order (file: tables and tree as stored; default model order),
//   quants (compare: the quantizations of the checkpoint, comma-separated),
//   imatrix (compare: the importance matrix weighing it),
//   budget_bpw (compare: the bits per weight the mix is chosen within).

const listeners = [];

// What each key takes; a link whose value breaks its rule (index=abc,
// mode=bogus, a coordinate past 2^53) was ignored without a word, or sent
// on to be refused in protobuf's terms: it is dropped and said instead.
const INTS = /^-?\d+(,-?\d+)*$/;
const RULES = {
  view: [/^(browse|arch|tensor|heatmap|dist|diff|sparsity|compare)$/, 'browse, arch, tensor, heatmap, dist, diff, sparsity or compare'],
  mode: [/^(value|mean|absmax|error|group|zeros|sq-error)$/, 'value, absmax, error, group, zeros or sq-error'],
  index: [INTS, 'comma-separated integer coordinates, e.g. 3,17'],
  leading: [INTS, 'comma-separated integer indices, e.g. 0,2'],
  region: [/^\d+:\d+,\d+:\d+$/, 'rows and columns as r0:r1,c0:c1, e.g. 0:64,128:256'],
  group: [/^\d+$/, 'a group id, a whole number from 0'],
  log: [/^[01]$/, '0 or 1'],
};

// The keys of `s` that break their rule, as { key, value, expected },
// removed from `s`.
export function dropInvalid(s) {
  const bad = [];
  for (const [key, [rule, expected]] of Object.entries(RULES)) {
    if (!(key in s)) continue;
    const v = s[key];
    const numbers = rule === INTS || key === 'group' || key === 'region' ? v.split(/[,:]/) : [];
    let ok = rule.test(v) && numbers.every((n) => Number.isSafeInteger(Number(n)));
    if (ok && key === 'region') {
      const [r0, r1, c0, c1] = numbers.map(Number);
      ok = r0 < r1 && c0 < c1;
    }
    if (!ok) {
      bad.push({ key, value: v, expected });
      delete s[key];
    }
  }
  return bad;
}

export function current() {
  const p = new URLSearchParams(window.location.search);
  const s = {};
  for (const [k, v] of p.entries()) s[k] = v;
  if (!s.view) {
    if (!s.checkpoint) s.view = 'browse';
    else if (!s.tensor) s.view = 'arch';
    else s.view = 'tensor';
  }
  return s;
}

function toSearch(s) {
  const p = new URLSearchParams();
  // A fixed key order keeps links stable and readable.
  const order = ['checkpoint', 'tensor', 'view', 'mode', 'ref', 'index', 'region',
    'leading', 'group', 'log', 'dir', 'metric', 'filter', 'order'];
  const keys = order.filter((k) => k in s).concat(Object.keys(s).filter((k) => !order.includes(k)));
  for (const k of keys) {
    const v = s[k];
    if (v !== undefined && v !== null && v !== '') p.set(k, String(v));
  }
  const q = p.toString();
  return q ? `?${q}` : window.location.pathname;
}

export function href(patch, base = current()) {
  const s = Object.assign({}, base);
  for (const [k, v] of Object.entries(patch)) {
    if (v === null || v === undefined || v === '') delete s[k];
    else s[k] = v;
  }
  return toSearch(s);
}

// Changes the URL (a new history entry unless `replace`) and tells the page.
export function navigate(patch, { replace = false } = {}) {
  const url = href(patch);
  if (url === window.location.search || (url === window.location.pathname && !window.location.search)) {
    notify();
    return;
  }
  if (replace) history.replaceState(null, '', url);
  else history.pushState(null, '', url);
  notify();
}

export function onChange(fn) {
  listeners.push(fn);
}

function notify() {
  const s = current();
  for (const fn of listeners) fn(s);
}

window.addEventListener('popstate', notify);

// Links inside the page navigate without reloading.
export function link(text, patch, cls) {
  const a = document.createElement('a');
  a.textContent = text;
  a.href = href(patch);
  if (cls) a.className = cls;
  a.addEventListener('click', (e) => {
    if (e.ctrlKey || e.metaKey || e.shiftKey || e.button !== 0) return;
    e.preventDefault();
    navigate(patch);
  });
  return a;
}
