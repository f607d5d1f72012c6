// Architecture: the module tree (GetArchitecture) with scheme, parameters and
// bytes per node; a boundary marker wherever the scheme changes from the
// parent's; counts of tensors per scheme; after a diff in this tab, the tree
// coloured by a diff metric. Clicking a tensor opens it.
import * as api from '../api.js';
import { el, clear, loading, fmtBytes, fmtCount, fmtNum, schemeColour } from '../ui.js';
import { lastDiff } from '../store.js';

export function key(s) {
  return s.checkpoint;
}

// Metrics a tree can be coloured by: how a report gives it, how nodes
// aggregate their tensors, and which way is worse.
export const METRICS = {
  max_err_steps: { label: 'max error in steps', short: 'max err (steps)', get: (r) => Number(r.maxErrSteps), agg: 'max', worse: 'high' },
  sqnr_db: { label: 'SQNR (dB)', short: 'SQNR (dB)', get: (r) => Number(r.sqnrDb), agg: 'min', worse: 'low' },
  clipped: { label: 'clipped elements', short: 'clipped', get: (r) => Number(r.clipped), agg: 'sum', worse: 'high' },
  induced_zeros: { label: 'induced zeros', short: 'induced zeros', get: (r) => Number(r.inducedZeros), agg: 'sum', worse: 'high' },
};

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
  let legendEl = null;

  const aggregate = (metric) => {
    // node path -> aggregated value over its tensors with a report
    const values = new Map();
    const m = METRICS[metric];
    if (!m || lastDiff.checkpoint !== s.checkpoint) return values;
    const visit = (node) => {
      let acc = null;
      if (!(node.children || []).length) {
        const r = lastDiff.reports.get(node.path);
        if (r) acc = m.get(r);
      }
      for (const c of node.children || []) {
        const v = visit(c);
        if (v === null || Number.isNaN(v)) continue;
        if (acc === null) acc = v;
        else if (m.agg === 'max') acc = Math.max(acc, v);
        else if (m.agg === 'min') acc = Math.min(acc, v);
        else acc += v;
      }
      if (acc !== null) values.set(node.path, acc);
      return acc;
    };
    visit(root);
    return values;
  };

  const badness = (metric, values) => {
    const m = METRICS[metric];
    const finite = [...values.values()].filter(Number.isFinite);
    const lo = Math.min(...finite);
    const hi = Math.max(...finite);
    return (v) => {
      if (!Number.isFinite(v)) return m.worse === 'low' ? (v > 0 ? 0 : 1) : v > 0 ? 1 : 0;
      if (hi === lo) return m.worse === 'high' ? (hi > 0 ? 1 : 0) : 0;
      return m.worse === 'high' ? (v - lo) / (hi - lo) : (hi - v) / (hi - lo);
    };
  };

  const drawTree = () => {
    const values = aggregate(metricKey);
    const bad = values.size ? badness(metricKey, values) : null;
    const rows = [];
    const visit = (node, depth, parent, previous) => {
      const leaf = !(node.children || []).length;
      // A change from the sibling above: a lighter marker than a change
      // from the parent (node.boundary, the server's overlay).
      const siblingChange = previous && previous.scheme !== node.scheme && !node.boundary;
      const isOpen = expanded.has(node.path);
      const v = values.get(node.path);
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
      el('span', { class: 'num metric', style: bad && v !== undefined ? { background: heat(bad(v)) } : null },
        v === undefined ? '' : fmtNum(v)));
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
        } else {
          if (isOpen) expanded.delete(node.path);
          else expanded.add(node.path);
          drawTree();
        }
      });
      rows.push(row);
      if (!leaf && isOpen) node.children.forEach((c, k) => visit(c, depth + 1, node, node.children[k - 1]));
    };
    // The root's children are the top level (the root is the checkpoint).
    (root.children || []).forEach((c, k) => visit(c, 0, root, root.children[k - 1]));
    const head = el('div', { class: 'tree-row tree-head' },
      el('span', null, 'module / tensor'), el('span', null, 'scheme'), el('span', { class: 'num' }, 'params'),
      el('span', { class: 'num' }, 'bytes'), el('span', { class: 'num' }, 'tensors'),
      el('span', { class: 'num' }, metricKey && values.size ? METRICS[metricKey].short : ''));
    clear(treeEl).append(head, ...rows);
    clear(legendEl);
    if (metricKey && values.size) {
      legendEl.append(el('span', { class: 'muted' }, `coloured by ${METRICS[metricKey].label}: `),
        el('span', { class: 'heat-swatch', style: { background: heat(0) } }), ' best ',
        el('span', { class: 'heat-swatch', style: { background: heat(1) } }), ' worst (modules: ',
        METRICS[metricKey].agg, ' of their tensors)');
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

    const haveDiff = lastDiff.checkpoint === s.checkpoint && lastDiff.reports.size > 0;
    const select = el('select', { id: 'arch-metric', disabled: !haveDiff },
      el('option', { value: '' }, haveDiff ? 'no colouring' : 'run a diff to colour by its metrics'),
      Object.entries(METRICS).map(([k, m]) => el('option', { value: k, selected: k === metricKey }, m.label)));
    select.addEventListener('change', () => ctx.navigate({ metric: select.value || null }, { replace: true }));
    const tools = el('div', { class: 'toolbar' },
      el('label', null, 'colour by ', select),
      el('button', { onclick: () => { walk(root, 0, (n) => expanded.add(n.path)); drawTree(); } }, 'Expand all'),
      el('button', { onclick: () => { expanded.clear(); drawTree(); } }, 'Collapse all'),
      haveDiff ? el('span', { class: 'muted' }, `diff against ${lastDiff.reference}`) : null);
    legendEl = el('div', { class: 'legend' });
    treeEl = el('div', { class: 'tree', role: 'tree' });
    host.append(el('h1', null, 'Architecture'), summary, tools, legendEl, treeEl);
    drawTree();
  };

  let boundaries = 0;
  api.call('GetArchitecture', { checkpoint: s.checkpoint }, { signal: controller.signal }).then((r) => {
    root = r.root;
    boundaries = Number(r.boundaries);
    draw();
  }).catch((e) => {
    clear(host);
    ctx.showError(e);
  });

  return {
    update(ns) {
      s = ns;
      if ((ns.metric || '') !== metricKey) {
        metricKey = ns.metric || '';
        if (root) drawTree();
      }
    },
    destroy: () => controller.abort(),
  };
}

// 0 (fine) .. 1 (worst): a calm blue-grey to a clear red.
function heat(t) {
  t = Math.max(0, Math.min(1, t));
  const a = [46, 64, 83];
  const b = [225, 87, 89];
  const c = a.map((x, i) => Math.round(x + (b[i] - x) * t));
  return `rgb(${c[0]}, ${c[1]}, ${c[2]})`;
}
