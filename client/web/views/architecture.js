// Architecture: the module tree (GetArchitecture) with scheme, parameters and
// bytes per node; a boundary marker wherever the scheme changes from the
// parent's; counts of tensors per scheme; after a diff in this tab, the tree
// coloured by a diff metric on an absolute scale (scales.js), every tensor
// (leaf) coloured by its own report and a module by its worst tensor; a
// fuzzy tensor search; the checkpoint's metadata. Clicking a tensor opens it.
import * as api from '../api.js';
import { el, clear, loading, fmtBytes, fmtCount, fmtNum, schemeColour, rgbCss } from '../ui.js';
import { lastDiff, onDiffChange } from '../store.js';
import { restoreDiff, stateNote } from '../diff_results.js';
import { errorColour, errorPosition, errorLegend, sqnrBand, bitsLost, gridBits, SQNR_BANDS, shareColour, shareLegend }
  from '../scales.js';
import { fuzzySearch } from '../fuzzy.js';
import { metadataPanel } from './metadata.js';
import { virtualRows } from '../virtual.js';
import { fileRanks, orderSelect } from '../order.js';

export function key(s) {
  return s.checkpoint;
}

// Metrics a tree can be coloured by: the number a report gives, how a
// module's number gathers its tensors' (agg), and the colour of one tensor
// with a severity to pick a module's worst tensor by (higher is worse).
// `bits` is the tensor's grid bits (SQNR only).
export const METRICS = {
  max_err_steps: {
    label: 'max error in steps', short: 'max err (steps)', agg: 'worst',
    get: (r) => Number(r.maxErrSteps),
    colour: (r) => errorColour(...verdictSteps(r)),
    severity: (r) => errorPosition(...verdictSteps(r)),
  },
  sqnr_db: {
    label: 'SQNR (dB)', short: 'SQNR (dB)', agg: 'worst', needsBits: true,
    get: (r) => Number(r.sqnrDb),
    colour: (r, bits) => {
      const band = sqnrBand(r.sqnrDb, bits);
      return band < 0 ? [74, 82, 98] : SQNR_BANDS[band].colour;
    },
    severity: (r, bits) => (bits ? bitsLost(r.sqnrDb, bits) : -Infinity),
  },
  clipped: {
    label: 'clipped elements', short: 'clipped', agg: 'sum',
    get: (r) => Number(r.clipped),
    colour: (r) => shareColour(Number(r.clipped) / Number(r.count)),
    severity: (r) => Number(r.clipped) / Number(r.count),
  },
  induced_zeros: {
    label: 'induced zeros', short: 'induced zeros', agg: 'sum',
    get: (r) => Number(r.inducedZeros),
    colour: (r) => shareColour(Number(r.inducedZeros) / Number(r.count)),
    severity: (r) => Number(r.inducedZeros) / Number(r.count),
  },
};

// The error a tensor is coloured by, with its bound: its max error where
// that is within the bound; beyond it, the bound plus the diff's excess (how
// far beyond what the format allows the worst element lies), so a format
// that clips by design (K-quants' searched scales: max error 4 steps,
// excess 0) reads calm and a broken element reads red.
function verdictSteps(r) {
  const bound = Number(r.boundSteps);
  const max = Number(r.maxErrSteps);
  const excess = Number(r.maxExcessSteps) || 0;
  if (!(bound > 0) || Number.isNaN(max)) return [max, bound];
  return [excess > 0 ? bound + excess : Math.min(max, bound), bound];
}

// Grid bits per tensor (ListTensors' encoding), once per checkpoint.
const bitsByCheckpoint = new Map();
function tensorBits(checkpoint, signal) {
  if (!bitsByCheckpoint.has(checkpoint)) {
    const bits = new Map();
    bitsByCheckpoint.set(checkpoint, api.stream('ListTensors', { checkpoint }, (t) => {
      if (t.name && t.encoding) bits.set(t.name, gridBits(t.encoding.scheme, t.encoding.bits));
    }, { signal }).then(() => bits).catch((e) => {
      bitsByCheckpoint.delete(checkpoint);
      throw e;
    }));
  }
  return bitsByCheckpoint.get(checkpoint);
}

const expandedByCheckpoint = new Map();

function walk(node, depth, fn, parent = null) {
  fn(node, depth, parent);
  for (const c of node.children || []) walk(c, depth + 1, fn, node);
}

export function mount(host, s, ctx) {
  const controller = new AbortController();
  host.append(loading('Reading the module tree…'));
  let root = null;
  let metricKey = s.metric || '';
  let expanded = expandedByCheckpoint.get(s.checkpoint);
  let treeEl = null;
  let headEl = null;
  let legendEl = null;
  let list = null;  // the tree's rows (virtual.js)
  let filterText = '';
  let order = s.order === 'file' ? 'file' : 'model';
  let fileRank = null;  // tensor name -> place in the files (file order)
  const fileOrdered = new Map();  // module -> its children in file order
  const ranks = new Map();  // node -> its first tensor's place in the files

  let bits = null;  // tensor name -> grid bits, once asked (SQNR)

  // node path -> { value, colour, title }: a tensor's own report; a module's
  // number gathered (max/min as its worst tensor's, or summed), its colour
  // its worst tensor's, so a module is never redder than its worst tensor.
  const aggregate = (metric) => {
    const values = new Map();
    const m = METRICS[metric];
    if (!m || lastDiff.checkpoint !== s.checkpoint) return values;
    if (m.needsBits && !bits) return values;
    const visit = (node) => {
      let acc = null;  // { value, worst: { severity, report, name } }
      if (!(node.children || []).length) {
        const r = lastDiff.reports.get(node.path);
        if (r) {
          const b = bits ? bits.get(node.path) : null;
          acc = { value: m.get(r), worst: { severity: m.severity(r, b), report: r, bits: b, name: node.path } };
        }
      }
      for (const c of node.children || []) {
        const v = visit(c);
        if (!v) continue;
        if (!acc) {
          acc = { value: v.value, worst: v.worst };
          continue;
        }
        const worse = v.worst.severity > acc.worst.severity;
        if (m.agg === 'sum') acc.value += v.value;
        else if (worse) acc.value = v.value;
        if (worse) acc.worst = v.worst;
      }
      if (acc) values.set(node.path, acc);
      return acc;
    };
    visit(root);
    return values;
  };

  // A node's colour and title, made when its row is first drawn (a tree of
  // 20,000 nodes shows a screenful of them).
  const paint = (path, acc) => {
    if (acc.colour === undefined) {
      const w = acc.worst;
      const c = METRICS[metricKey].colour(w.report, w.bits);
      acc.colour = typeof c === 'string' ? c : rgbCss(c);
      acc.title = w.name === path ? null : `coloured as its worst tensor, ${w.name}`;
    }
    return acc;
  };

  // The rows the tree shows, in order: the open modules' children (every
  // kept node while a filter is typed), each { node, depth, parent, previous }.
  const flatten = () => {
    const out = [];
    const kept = filterText ? keptByFilter() : null;
    const visit = (node, depth, parent, previous) => {
      if (kept && !kept.has(node)) return;
      out.push({ node, depth, parent, previous });
      const leaf = !(node.children || []).length;
      if (leaf || !(kept || expanded.has(node.path))) return;
      let prev = null;
      for (const c of childrenOf(node)) {
        if (kept && !kept.has(c)) continue;
        visit(c, depth + 1, node, prev);
        prev = c;
      }
    };
    let prev = null;
    for (const c of childrenOf(root)) {
      if (kept && !kept.has(c)) continue;
      visit(c, 0, root, prev);
      prev = c;
    }
    return out;
  };

  const lowered = new Map();  // node -> its path in lower case
  const lowerPath = (node) => {
    let p = lowered.get(node);
    if (p === undefined) lowered.set(node, (p = node.path.toLowerCase()));
    return p;
  };

  // The nodes a filter keeps: a node whose path holds the text (case
  // ignored), with everything below it, and the modules above it.
  const keptByFilter = () => {
    const kept = new Set();
    const q = filterText.toLowerCase();
    const visit = (node, inside) => {
      const self = inside || (!!node.path && lowerPath(node).includes(q));
      let any = self;
      for (const c of node.children || []) any = visit(c, self) || any;
      if (any) kept.add(node);
      return any;
    };
    visit(root, false);
    return kept;
  };

  // A module's children in the order chosen: the server's (model order:
  // numbers as numbers) or as stored (file order: by their first tensor's
  // place in the files).
  const childrenOf = (node) => {
    const children = node.children || [];
    if (order !== 'file' || !fileRank || children.length < 2) return children;
    if (!fileOrdered.has(node)) {
      fileOrdered.set(node, children.slice().sort((a, b) => rankOf(a) - rankOf(b)));
    }
    return fileOrdered.get(node);
  };
  const rankOf = (node) => {
    if (!ranks.has(node)) {
      let r = Number.MAX_SAFE_INTEGER;
      if (!(node.children || []).length) r = fileRank.has(node.path) ? fileRank.get(node.path) : r;
      for (const c of node.children || []) r = Math.min(r, rankOf(c));
      ranks.set(node, r);
    }
    return ranks.get(node);
  };

  let values = new Map();
  let valuesFor = '';
  const drawRow = (i) => {
    const { node, depth, parent, previous } = flat[i];
    const leaf = !(node.children || []).length;
    // A change from the sibling above: a lighter marker than a change
    // from the parent (node.boundary, the server's overlay).
    const siblingChange = previous && previous.scheme !== node.scheme && !node.boundary;
    const isOpen = filterText ? true : expanded.has(node.path);
    const v = values.has(node.path) ? paint(node.path, values.get(node.path)) : undefined;
    const boundary = node.boundary && parent;
    const row = el('div', {
      class: `tree-row${leaf ? ' leaf' : ''}${boundary ? ' boundary' : ''}${siblingChange ? ' sibling-boundary' : ''}`,
      'data-path': node.path,
      'data-leaf': leaf ? 'true' : 'false',
      'data-expanded': leaf ? null : String(isOpen),
      style: { '--depth': depth, '--scheme': schemeColour(node.scheme || '') },
      title: boundary ? `quantization boundary: ${parent.scheme} → ${node.scheme}`
        : siblingChange ? `scheme changes from the sibling above: ${previous.scheme} → ${node.scheme}` : null,
    },
    el('span', { class: 'tree-name', style: { paddingLeft: `${depth * 16 + 6}px` } },
      el('span', { class: 'chevron' }, leaf ? '·' : isOpen ? '▾' : '▸'),
      el('span', { class: leaf ? 'name tensor-link' : 'name' }, node.name || '(root)'),
      boundary ? el('span', { class: 'boundary-tag' }, `${parent.scheme} → ${node.scheme}`) : null),
    el('span', { class: 'scheme-badge', 'data-field': 'scheme', title: node.scheme || null,
      style: { '--scheme': schemeColour(node.scheme || '') } }, node.scheme || '—'),
    el('span', { class: 'num' }, fmtCount(node.params)),
    el('span', { class: 'num' }, fmtBytes(node.bytes)),
    el('span', { class: 'num' }, fmtCount(node.tensors)),
    el('span', { class: 'num metric', 'data-field': 'metric', title: v ? v.title : null,
      style: v ? { background: v.colour } : null }, v === undefined ? '' : fmtNum(v.value)));
    row.tabIndex = 0;
    row.addEventListener('keydown', (e) => {
      if (e.key === 'Enter' || e.key === ' ') {
        e.preventDefault();
        row.click();
      }
    });
    row.addEventListener('click', () => {
      if (leaf) {
        ctx.navigate({ tensor: node.path, view: 'tensor', index: null, region: null });
      } else if (!filterText) {
        if (isOpen) expanded.delete(node.path);
        else expanded.add(node.path);
        drawTree();
      }
    });
    return row;
  };

  let flat = [];
  const drawTree = () => {
    if (METRICS[metricKey] && METRICS[metricKey].needsBits && !bits && haveDiff()) {
      tensorBits(s.checkpoint, controller.signal).then((b) => {
        bits = b;
        valuesFor = '';
        drawTree();
      }).catch((e) => {
        if (e.name !== 'AbortError') ctx.showError(e);
      });
    }
    // The colouring walks the whole tree: once per metric and diff.
    const want = `${metricKey}|${lastDiff.checkpoint}|${lastDiff.reports.size}|${lastDiff.reference}|${!!bits}`;
    if (want !== valuesFor) {
      values = aggregate(metricKey);
      valuesFor = want;
    }
    flat = flatten();
    clear(headEl).append(el('span', null, 'module / tensor'), el('span', null, 'scheme'), el('span', { class: 'num' }, 'params'),
      el('span', { class: 'num' }, 'bytes'), el('span', { class: 'num' }, 'tensors'),
      el('span', { class: 'num' }, metricKey && values.size ? METRICS[metricKey].short : ''));
    treeEl.dataset.filter = filterText;
    treeEl.dataset.order = order;
    list.setCount(flat.length);
    drawLegend(values);
  };

  const drawLegend = (values) => {
    clear(legendEl);
    const m = METRICS[metricKey];
    // A cancelled, failed or filtered diff colours only what it compared:
    // said on the legend, and the coloured cells hatched.
    treeEl.classList.toggle('partial-diff', !!(m && values.size && stateNote()));
    if (!m) return;
    if (values.size) {
      const marked = stateNote();
      if (marked) legendEl.append(marked);
    }
    if (!values.size) {
      if (m.needsBits && !bits) legendEl.append(el('span', { class: 'muted' }, 'reading each tensor\'s bit width…'));
      return;
    }
    legendEl.dataset.metric = metricKey;
    const note = (...parts) => el('div', { class: 'muted small legend-note' }, ...parts);
    if (metricKey === 'max_err_steps') {
      const bounds = [...lastDiff.reports.values()].map((r) => Number(r.boundSteps)).filter((b) => b > 0);
      const lo = Math.min(...bounds);
      const hi = Math.max(...bounds);
      legendEl.append(gradientBar(errorLegend(hi)),
        note('max error in steps (|x − x̂| / step), each tensor against its own rounding bound ',
          `(here ${lo === hi ? fmtNum(hi, 4) : `${fmtNum(lo, 4)} … ${fmtNum(hi, 4)}`} steps): calm up to the bound, `,
          'amber to red by how far the worst element lies beyond what the format allows (the diff\'s excess; ',
          'a format that clips by design reads calm while the excess is 0), log scale to ≥128 steps; modules: their worst tensor'));
    } else if (metricKey === 'sqnr_db') {
      legendEl.append(el('div', { class: 'bands' }, SQNR_BANDS.map((band) => el('span', { class: 'band' },
        el('span', { class: 'heat-swatch', style: { background: band.colour } }), ` ${band.label}`))),
      note('SQNR against the ideal of the grid, 6.02·b + 1.76 dB (b: code bits of a uniform grid, significand bits of a ',
        'float format); bits lost = (ideal − SQNR) / 6.02 dB. E.g. 8 bits: ideal 49.9 dB, < 1 bit lost above 43.9 dB, ',
        '> 4 bits lost below 25.8 dB. Modules: their worst tensor.'));
    } else {
      legendEl.append(gradientBar(shareLegend()),
        note(`colour: ${m.label} as a share of the tensor's elements (log scale; none: dark), `,
          'information rather than a verdict (some formats clip by design); number: the count (modules: summed), ',
          'colour of a module: its worst tensor'));
    }
  };

  const draw = () => {
    clear(host);
    const schemes = new Map();  // scheme -> [tensors, params]
    let count = 0;
    walk(root, 0, (n) => {
      count++;
      if ((n.children || []).length) return;
      const e = schemes.get(n.scheme) || [0, 0];
      e[0] += 1;
      e[1] += Number(n.params);
      schemes.set(n.scheme, e);
    });
    if (!expanded) {
      expanded = new Set();
      walk(root, 0, (n, d) => {
        if (count < 400 || d <= 2) expanded.add(n.path);
      });
      expandedByCheckpoint.set(s.checkpoint, expanded);
    }
    const summary = el('div', { class: 'summary' },
      el('div', { class: 'stat' }, el('b', null, fmtCount(root.tensors)), ' tensors'),
      el('div', { class: 'stat' }, el('b', null, fmtCount(root.params)), ' parameters'),
      el('div', { class: 'stat' }, el('b', null, fmtBytes(root.bytes)), ' stored'),
      el('div', { class: 'stat', 'data-field': 'boundaries' }, el('b', null, fmtCount(s.boundaries ?? 0)), ' boundaries'),
      ...[...schemes.entries()].sort((a, b) => b[1][1] - a[1][1]).map(([scheme, [t, p]]) =>
        el('div', { class: 'scheme-count', 'data-scheme': scheme, title: `${fmtCount(p)} parameters` },
          el('span', { class: 'scheme-badge', style: { '--scheme': schemeColour(scheme) } }, scheme),
          ` ${t} tensor${t === 1 ? '' : 's'}`)));
    summary.querySelector('[data-field="boundaries"] b').textContent = fmtCount(boundaries);

    const select = el('select', { id: 'arch-metric', disabled: !haveDiff() },
      el('option', { value: '' }, haveDiff() ? 'no colouring' : 'run a diff to colour by its metrics'),
      Object.entries(METRICS).map(([k, m]) => el('option', { value: k, selected: k === metricKey }, m.label)));
    select.addEventListener('change', () => ctx.navigate({ metric: select.value || null }, { replace: true }));
    const filterInput = el('input', { id: 'arch-filter', type: 'search', placeholder: 'filter the tree (part of a name)',
      spellcheck: 'false', autocomplete: 'off', 'aria-label': 'filter the tree' });
    // Once per animation frame however fast the keys come.
    let filterFrame = 0;
    filterInput.addEventListener('input', () => {
      if (filterFrame) return;
      filterFrame = requestAnimationFrame(() => {
        filterFrame = 0;
        filterText = filterInput.value.trim();
        list.toTop();
        drawTree();
      });
    });
    const orderPick = orderSelect(el, order, (o) => ctx.navigate({ order: o === 'file' ? 'file' : null }, { replace: true }), 'arch-order');
    const tools = el('div', { class: 'toolbar' },
      el('label', null, 'colour by ', select),
      el('button', { id: 'arch-expand', onclick: () => { walk(root, 0, (n) => expanded.add(n.path)); drawTree(); } }, 'Expand all'),
      el('button', { id: 'arch-collapse', onclick: () => { expanded.clear(); drawTree(); } }, 'Collapse all'),
      filterInput, orderPick,
      haveDiff() ? el('span', { class: 'muted', 'data-field': 'diff-source' }, `diff against ${lastDiff.reference}${lastDiff.state && lastDiff.state !== 'complete' ? ` (${lastDiff.state})` : ''}`) : null);
    legendEl = el('div', { class: 'legend' });
    headEl = el('div', { class: 'tree-row tree-head' });
    const treeBody = el('div', { class: 'tree-body' });
    treeEl = el('div', { class: 'tree', role: 'tree' }, headEl, treeBody);
    list = virtualRows({ scroller: treeBody, body: treeBody, draw: drawRow, spacer: () => el('div') });
    host.append(el('h1', null, 'Architecture'), summary, searchBox(), meta, tools, legendEl, treeEl);
    setOrder(order);
  };

  const haveDiff = () => lastDiff.checkpoint === s.checkpoint && lastDiff.reports.size > 0;

  // File order needs every tensor's place in the files (ListTensors, once).
  const setOrder = (o) => {
    order = o;
    if (order === 'file' && !fileRank) {
      fileRanks(s.checkpoint, controller.signal).then((r) => {
        fileRank = r;
        if (order === 'file') drawTree();
      }).catch((e) => {
        if (e.name !== 'AbortError') ctx.showError(e);
      });
    }
    if (root && list) drawTree();
  };

  // The search box: tensors whose names hold the query's letters in order,
  // best first; Enter or a click opens the highlighted one.
  const searchBox = () => {
    const names = [];
    walk(root, 0, (n) => {
      if (!(n.children || []).length && n.path) names.push(n.path);
    });
    const input = el('input', { id: 'arch-search', type: 'search', placeholder: `find a tensor of ${fmtCount(names.length)} (letters in order: b1aq → blk.1.attn_q…)`,
      spellcheck: 'false', autocomplete: 'off', 'aria-label': 'find a tensor' });
    const list = el('ol', { class: 'search-hits', 'data-role': 'search-hits', hidden: true });
    let hits = [];
    let active = 0;
    const open = (name) => ctx.navigate({ tensor: name, view: 'tensor', index: null, region: null });
    const show = () => {
      clear(list);
      list.hidden = !input.value.trim();
      if (list.hidden) return;
      if (!hits.length) {
        list.append(el('li', { class: 'muted' }, 'no tensor holds these letters in this order'));
        return;
      }
      hits.forEach((h, k) => {
        const marked = new Set(h.positions);
        const text = [];
        for (let i = 0; i < h.name.length; i++) text.push(marked.has(i) ? el('b', null, h.name[i]) : h.name[i]);
        list.append(el('li', { class: `search-hit${k === active ? ' active' : ''}`, 'data-path': h.name,
          onmousedown: (e) => {
            e.preventDefault();
            open(h.name);
          } }, el('span', { class: 'mono' }, text)));
      });
    };
    input.addEventListener('input', () => {
      hits = fuzzySearch(input.value, names, 12);
      active = 0;
      show();
    });
    input.addEventListener('keydown', (e) => {
      if (e.key === 'ArrowDown' || e.key === 'ArrowUp') {
        e.preventDefault();
        if (hits.length) active = (active + (e.key === 'ArrowDown' ? 1 : hits.length - 1)) % hits.length;
        show();
      } else if (e.key === 'Enter' && hits[active]) {
        e.preventDefault();
        open(hits[active].name);
      } else if (e.key === 'Escape') {
        input.value = '';
        hits = [];
        show();
      }
    });
    input.addEventListener('blur', () => {
      list.hidden = true;
    });
    input.addEventListener('focus', () => show());
    return el('div', { class: 'search' }, input, list);
  };

  const meta = el('div', { class: 'meta-host' });
  api.call('GetCheckpoint', { checkpoint: s.checkpoint }, { signal: controller.signal }).then((info) => {
    meta.append(metadataPanel(info));
  }).catch(() => {});  // the tree's own call shows why the checkpoint does not open

  let boundaries = 0;
  api.call('GetArchitecture', { checkpoint: s.checkpoint }, { signal: controller.signal }).then((r) => {
    root = r.root;
    boundaries = Number(r.boundaries);
    draw();
  }).catch((e) => {
    clear(host);
    ctx.showError(e);
  });
  // A diff restored from the server (a reload, a link with ref= and
  // metric=) colours the tree as one run in this tab does.
  const stopWatching = onDiffChange(() => {
    if (root) draw();
  });
  if (s.ref) restoreDiff(s.checkpoint, s.ref, s.filter || '', { signal: controller.signal }).catch((e) => {
    if (e.name !== 'AbortError') ctx.showError(e);
  });

  return {
    update(ns) {
      if (ns.ref && ns.ref !== s.ref) restoreDiff(ns.checkpoint, ns.ref, ns.filter || '', { signal: controller.signal }).catch(() => {});
      s = ns;
      if ((ns.metric || '') !== metricKey) {
        metricKey = ns.metric || '';
        if (root && list) drawTree();
      }
      const o = ns.order === 'file' ? 'file' : 'model';
      if (o !== order) setOrder(o);
    },
    destroy: () => {
      stopWatching();
      controller.abort();
    },
  };
}

// A legend's bar: the gradient with its ticks under it.
function gradientBar({ gradient, ticks }) {
  return el('div', { class: 'gradient-wrap' }, el('div', { class: 'gradient', style: { background: gradient } }),
    el('div', { class: 'gradient-ticks' }, ticks.map((t) => el('span', {
      class: `tick${t.bound ? ' bound' : ''}${t.at === 0 || t.at === 1 ? ' end' : ''}`, style: { left: `${100 * t.at}%` },
      'data-tick': t.label }, t.bound ? 'bound' : t.label))));
}
