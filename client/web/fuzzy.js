// Fuzzy tensor search: the query's characters in order (a subsequence of the
// name, case ignored), ranked so that what a person abbreviates comes first:
// "b1aq" finds blk.1.attn_q.weight because each letter starts a segment.

const SEPARATORS = '._/-:';
const SEGMENT_START = 8;   // a match right after a separator or at the start
const CONSECUTIVE = 5;     // a match right after the previous match
const GAP = 1;             // per skipped character between two matches (up to MAX_GAP)
const MAX_GAP = 6;

// One alignment of q (lower case) in name from `start`, taking each next
// character at its first occurrence, preferring one that starts a segment
// before the next query character's first occurrence.
function align(q, lower, name, start) {
  const positions = [];
  let score = 0;
  let at = start;
  for (let k = 0; k < q.length; k++) {
    let p = lower.indexOf(q[k], at);
    if (p < 0) return null;
    if (k > 0 && p !== at) {
      // A later occurrence at a segment start, before what the rest needs.
      const limit = k + 1 < q.length ? lower.indexOf(q[k + 1], p + 1) : lower.length;
      for (let r = p; r >= 0 && r < (limit < 0 ? lower.length : limit); r = lower.indexOf(q[k], r + 1)) {
        if (r === 0 || SEPARATORS.includes(name[r - 1])) {
          p = r;
          break;
        }
      }
    }
    if (p === 0 || SEPARATORS.includes(name[p - 1])) score += SEGMENT_START;
    if (k > 0 && p === positions[k - 1] + 1) score += CONSECUTIVE;
    else if (k > 0) score -= GAP * Math.min(MAX_GAP, p - positions[k - 1] - 1);
    positions.push(p);
    at = p + 1;
  }
  return { score, positions };
}

// The best alignment of `query` in `name`, or null when its characters do not
// all occur in order: { score, positions } (higher is better).
export function fuzzyMatch(query, name) {
  const q = query.toLowerCase().replace(/\s+/g, '');
  if (!q) return null;
  const lower = name.toLowerCase();
  let best = null;
  for (let s = lower.indexOf(q[0]); s >= 0; s = lower.indexOf(q[0], s + 1)) {
    const a = align(q, lower, name, s);
    if (!a) break;  // no later start can fit what this one could not
    if (!best || a.score > best.score) best = a;
  }
  if (best) best.score -= 0.05 * name.length;  // shorter names first on a tie
  return best;
}

// The names matching `query`, best first (ties: shorter, then by name), at
// most `limit`: [{ name, score, positions }].
export function fuzzySearch(query, names, limit = 12) {
  const hits = [];
  for (const name of names) {
    const m = fuzzyMatch(query, name);
    if (m) hits.push({ name, score: m.score, positions: m.positions });
  }
  hits.sort((a, b) => b.score - a.score || a.name.length - b.name.length || (a.name < b.name ? -1 : 1));
  return hits.slice(0, limit);
}
