// The inspector's shell: the header (views, the source checkpoint), the
// error banner, the token form, and the router that mounts one view per URL.
import * as api from './api.js';
import * as state from './state.js';
import { el, clear } from './ui.js';
import * as browse from './views/browse.js';
import * as architecture from './views/architecture.js';
import * as tensor from './views/tensor.js';
import * as heatmap from './views/heatmap.js';
import * as distribution from './views/distribution.js';
import * as diff from './views/diff.js';
import * as sparsity from './views/sparsity.js';
import * as compare from './views/compare.js';

const VIEWS = { browse, arch: architecture, tensor, heatmap, dist: distribution, diff, sparsity, compare };

const CHECKPOINT_TABS = [
  ['arch', 'Architecture'],
  ['diff', 'Quantization diff'],
  ['sparsity', 'Sparsity'],
  ['compare', 'Compare quantizations'],
];
const TENSOR_TABS = [
  ['tensor', 'Tensor'],
  ['heatmap', 'Heatmap'],
  ['dist', 'Distribution'],
  ['sparsity', 'Sparsity'],
];

const main = document.getElementById('main');
const banner = document.getElementById('banner');
const nav = document.getElementById('nav');
const crumbs = document.getElementById('crumbs');
const refInput = document.getElementById('ref-input');

// Errors: one visible banner, newest first, until dismissed or the view
// changes.
export function showError(err) {
  if (err && err.name === 'AbortError') return;
  console.error(err);
  const code = err && err.code ? err.code : 'ERROR';
  const reason = err && err.reason ? err.reason : code;
  const message = err && err.message ? err.message : String(err);
  clear(banner).append(
    el('span', { class: 'code', 'data-field': 'error_code' }, code),
    el('span', { class: 'reason', 'data-field': 'error_reason', title: 'the error\'s reason (docs/errors.md)' }, reason),
    el('span', { class: 'message', 'data-field': 'error_message' }, ...suggestions(code, message)),
    el('button', { class: 'dismiss', title: 'Dismiss', onclick: clearError }, '×'));
  banner.hidden = false;
}

// "did you mean 'a', 'b' or 'c'?" after an unknown tensor: each name a link.
function suggestions(code, message) {
  const at = message.indexOf('did you mean');
  const s = state.current();
  if (code !== 'NOT_FOUND' || at < 0 || !s.tensor) return [message];
  const out = [message.slice(0, at)];
  const tail = message.slice(at);
  let last = 0;
  for (const m of tail.matchAll(/'([^']+)'/g)) {
    out.push(tail.slice(last, m.index + 1));
    const a = state.link(m[1], { tensor: m[1] }, 'mono');
    a.addEventListener('click', clearError);
    out.push(a);
    last = m.index + m[0].length - 1;
  }
  out.push(tail.slice(last));
  return out;
}

export function clearError() {
  banner.hidden = true;
  clear(banner);
}

const ctx = { showError, clearError, navigate: state.navigate, href: state.href, link: state.link };

// The token form: a modal asked once per tab (sessionStorage keeps it).
api.setTokenPrompter((reason) => new Promise((resolve) => {
  const dialog = document.getElementById('token-dialog');
  const input = document.getElementById('token-input');
  document.getElementById('token-reason').textContent = reason;
  input.value = '';
  const form = dialog.querySelector('form');
  const done = (value) => {
    form.onsubmit = null;
    document.getElementById('token-cancel').onclick = null;
    dialog.close();
    resolve(value);
  };
  form.onsubmit = (e) => {
    e.preventDefault();
    done(input.value);
  };
  document.getElementById('token-cancel').onclick = () => done(null);
  dialog.oncancel = (e) => {
    e.preventDefault();
    done(null);
  };
  dialog.showModal();
  input.focus();
}));

function renderHeader(s) {
  clear(nav);
  const tab = (view, label, patch) => {
    const a = state.link(label, Object.assign({ view }, patch || {}));
    a.className = 'tab' + (s.view === view ? ' active' : '');
    a.setAttribute('data-view', view);
    return a;
  };
  nav.append(tab('browse', 'Browse', { checkpoint: s.checkpoint, tensor: null, index: null, region: null }));
  if (s.checkpoint) {
    for (const [v, label] of CHECKPOINT_TABS) {
      if ((v === 'sparsity' || v === 'compare') && s.tensor) continue;
      nav.append(tab(v, label, { tensor: v === 'diff' || v === 'arch' ? s.tensor : null, index: null, region: null }));
    }
  }
  if (s.tensor) {
    nav.append(el('span', { class: 'sep' }));
    for (const [v, label] of TENSOR_TABS) nav.append(tab(v, label));
  }
  clear(crumbs);
  if (s.checkpoint) {
    crumbs.append(el('span', { class: 'crumb-label' }, 'checkpoint'),
      state.link(s.checkpoint, { view: 'arch', tensor: null, index: null, region: null, mode: null }, 'crumb'));
    if (s.tensor) {
      crumbs.append(el('span', { class: 'crumb-sep' }, '›'),
        el('span', { class: 'crumb-label' }, 'tensor'),
        state.link(s.tensor, { view: 'tensor', index: null }, 'crumb tensor-name'));
    }
  }
  if (document.activeElement !== refInput) refInput.value = s.ref || '';
  document.title = ['Tensormorph', s.checkpoint, s.tensor].filter(Boolean).join(' · ');
}

refInput.addEventListener('change', () => {
  state.navigate({ ref: refInput.value.trim() || null });
});

// Fills the source picker with the checkpoints under the roots, once.
let refsListed = false;
async function listRefs() {
  if (refsListed) return;
  refsListed = true;
  const list = document.getElementById('ref-list');
  try {
    await api.stream('ListCheckpoints', { pageSize: 200 }, (entry) => {
      if (entry.path) list.append(el('option', { value: entry.path }));
    });
  } catch (_) {
    refsListed = false;  // the browse view shows why
  }
}
refInput.addEventListener('focus', listRefs);

let mounted = null;  // { name, key, view }

// A link's values that break their rules, said once the view is up.
function sayInvalid(bad) {
  if (!bad.length) return;
  showError({
    code: 'INVALID_ARGUMENT',
    reason: 'REQUEST_INVALID',
    message: bad.map((b) => `the link's ${b.key}=${b.value} is not ${b.expected}`).join('; ')
      + ': ignored (edit the address, or pick again on the page)',
  });
}

function route(s) {
  const bad = state.dropInvalid(s);
  if (!s.view) s.view = !s.checkpoint ? 'browse' : !s.tensor ? 'arch' : 'tensor';
  // A view that needs what the link does not name falls back to one that
  // does not.
  if (!s.checkpoint && s.view !== 'browse') s.view = 'browse';
  else if (!s.tensor && ['tensor', 'heatmap', 'dist'].includes(s.view)) s.view = 'arch';
  renderHeader(s);
  const name = VIEWS[s.view] ? s.view : 'browse';
  const module = VIEWS[name];
  const key = `${name}|${module.key ? module.key(s) : ''}`;
  if (mounted && mounted.key === key) {
    // The same view of the same thing: it takes what changed itself.
    if (mounted.view.update) mounted.view.update(s);
    sayInvalid(bad);
    return;
  }
  if (mounted && mounted.view.destroy) mounted.view.destroy();
  clearError();
  clear(main);
  const host = el('section', { class: `view view-${name}`, 'data-view': name });
  main.append(host);
  mounted = { name, key, view: module.mount(host, s, ctx) || {} };
  sayInvalid(bad);
}

state.onChange(route);
route(state.current());
