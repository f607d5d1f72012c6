// The checkpoint's metadata panel (GetCheckpoint): format, files, the
// quantization conventions found and how, the quantization config as the
// server parsed it (defaults applied: what the decoders were told), the
// config files beside the checkpoint (config.json...) flattened to dotted
// keys, and the header's key/values (GGUF key/values, safetensors
// __metadata__); long values and arrays folded.
import { el, fmtBytes, fmtCount } from '../ui.js';

const FORMAT = { CHECKPOINT_FORMAT_GGUF: 'GGUF', CHECKPOINT_FORMAT_SAFETENSORS: 'safetensors' };
// Longer values fold: their first FOLD_AT characters show.
const FOLD_AT = 120;

// "[1, 2, ... (32000 items)]" (the server abbreviates long arrays): its
// count; null for a value shown whole.
function abbreviatedItems(entry) {
  const m = /\.\.\. \((\d+) items\)\]$/.exec(entry.value || '');
  return m && (entry.type || '').startsWith('array') ? Number(m[1]) : null;
}

// Short values inline; long arrays and long values folded to their type and
// length (or their first FOLD_AT characters), the whole on request.
function valueCell(entry) {
  const v = entry.value || '';
  const items = abbreviatedItems(entry);
  if (items === null && v.length <= FOLD_AT) return el('span', { class: 'mono' }, v);
  const head = items !== null ? `${entry.type} · ${fmtCount(items)} items` : `${v.slice(0, FOLD_AT)}…`;
  return el('details', { class: 'folded', 'data-folded': 'true' },
    el('summary', { class: 'mono' }, head),
    el('div', { class: 'mono folded-value' }, v));
}

// A JSON document as [dotted key, type, value] rows: objects walked, arrays
// and scalars leaves (an array as JSON text).
function flatten(value, prefix, out) {
  if (value !== null && typeof value === 'object' && !Array.isArray(value)) {
    const keys = Object.keys(value);
    if (!keys.length && prefix) out.push([prefix, 'object', '{}']);
    for (const k of keys) flatten(value[k], prefix ? `${prefix}.${k}` : k, out);
    return out;
  }
  if (Array.isArray(value)) {
    out.push([prefix, `array · ${value.length} items`, JSON.stringify(value)]);
    return out;
  }
  out.push([prefix, value === null ? 'null' : typeof value, typeof value === 'string' ? value : JSON.stringify(value)]);
  return out;
}

function configFileSection(file) {
  if (file.truncated) {
    return el('p', { class: 'muted', 'data-config-file': file.name },
      `${file.name}: over 256 KiB, not sent (read it on the server).`);
  }
  let doc;
  try { doc = JSON.parse(file.json || 'null'); } catch (e) {
    return el('p', { class: 'muted', 'data-config-file': file.name }, `${file.name}: ${e.message}`);
  }
  // Long values (a vocabulary list, a long module list) fold to their
  // first characters, the whole on request.
  const rows = flatten(doc, '', []).map(([key, type, value]) => el('tr', { 'data-key': key },
    el('td', { class: 'mono key' }, key), el('td', { class: 'muted' }, type),
    el('td', { class: 'value' }, valueCell({ key, type, value }))));
  return el('details', { class: 'config-file', 'data-config-file': file.name },
    el('summary', null, el('span', { class: 'mono' }, file.name), el('span', { class: 'muted' }, ` · ${fmtCount(rows.length)} keys`)),
    el('table', { class: 'grid compact meta-table' },
      el('thead', null, el('tr', null, el('th', null, 'key'), el('th', null, 'type'), el('th', null, 'value'))),
      el('tbody', null, rows)));
}

// The parsed quantization config and the config files; null for GGUF.
function configSection(info) {
  const fields = info.quantConfig || [];
  const files = info.configFiles || [];
  if (!fields.length && !files.length) return null;
  const parsed = fields.length
    ? el('table', { class: 'grid compact meta-table', 'data-role': 'quant-config' },
      el('thead', null, el('tr', null, el('th', null, 'quantization config (as parsed, defaults applied)'), el('th', null, 'value'))),
      el('tbody', null, fields.map((f) => el('tr', { 'data-key': f.key },
        el('td', { class: 'mono key' }, f.key), el('td', { class: 'mono value' }, f.value)))))
    : null;
  return el('div', { class: 'config-section', 'data-role': 'configs' }, parsed, files.map(configFileSection));
}

export function metadataPanel(info) {
  const entries = info.metadata || [];
  const files = info.files || [];
  const conventions = info.conventions || [];
  const several = files.length > 1;
  const facts = el('dl', { class: 'facts' },
    el('dt', null, 'format'), el('dd', { 'data-field': 'format' }, FORMAT[info.format] || info.format || '—'),
    el('dt', null, 'files'), el('dd', { 'data-field': 'files' },
      files.length === 1 ? `${files[0].path} (${fmtBytes(files[0].sizeBytes)})` : `${files.length} files, ${fmtBytes(info.totalBytes)}`),
    el('dt', null, 'conventions'), el('dd', { 'data-field': 'conventions' }, conventions.length ? conventions.join(', ') : 'none (plain dtypes)'),
    (info.notes || []).length ? [el('dt', null, 'notes'), el('dd', { 'data-field': 'notes' }, info.notes.join(' '))] : null,
    (info.absentFiles || []).length ? [el('dt', null, 'absent shards'), el('dd', null, info.absentFiles.join(', '))] : null);
  const rows = entries.map((e) => el('tr', { 'data-key': e.key },
    el('td', { class: 'mono key' }, e.key),
    el('td', { class: 'muted' }, e.type),
    el('td', { class: 'value' }, valueCell(e)),
    several ? el('td', { class: 'muted mono' }, e.file || '') : null));
  const table = entries.length
    ? el('table', { class: 'grid compact meta-table' },
      el('thead', null, el('tr', null, el('th', null, 'key'), el('th', null, 'type'), el('th', null, 'value'),
        several ? el('th', null, 'file') : null)),
      el('tbody', null, rows))
    : el('p', { class: 'muted' }, 'The header holds no key/values.');
  return el('details', { class: 'card meta-panel', 'data-role': 'metadata' },
    el('summary', null, el('b', null, 'Metadata'),
      el('span', { class: 'muted' }, ` · ${FORMAT[info.format] || ''} · ${fmtCount(entries.length)} key${entries.length === 1 ? '' : 's'}`
        + ` · conventions: ${conventions.length ? conventions.join(', ') : 'none'}`)),
    facts, configSection(info), table);
}
