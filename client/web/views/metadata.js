// The checkpoint's metadata panel (GetCheckpoint): format, files, the
// quantization conventions found and how, and the header's key/values (GGUF
// key/values, safetensors __metadata__), long values and arrays folded.
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
    facts, table);
}
