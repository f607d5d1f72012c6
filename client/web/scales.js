// Absolute colour scales: what a colour means does not depend on what else
// is on screen, so a healthy tensor looks healthy alone, beside a broken one,
// and at every zoom. Three scales, each with the numbers its legend prints:
//  - error in steps: anchored at the format's rounding bound (the diff's
//    bound_steps). 0 … bound is calm (slate to green, linear); beyond the
//    bound a log tail from amber to dark red up to ERROR_TOP steps. Every calm
//    colour has less red than green, every tail colour at least 40 more (the
//    browser test's rule for "alarm").
//  - SQNR: fixed bands of bits lost against the ideal of the bit width,
//    (6.02·b + 1.76 dB − SQNR) / 6.02.
//  - counts (clipped, induced zeros): the share of the tensor's elements on a
//    log scale, viridis: information, not a verdict (formats that clip by
//    design clip in a correct file), so no alarm colours.
import { viridis, hexRgb, rgbCss } from './ui.js';
import { fmtTick } from './ticks.js';

// --- Error in steps ---

// Where the bound sits on the bar (the calm part's share of its width) and
// the tail's top: a code off by 128 levels and more is as red as it gets.
export const BOUND_AT = 0.4;
export const ERROR_TOP = 128;
// Round-to-nearest with an exact scale: the bound when the diff gives none.
export const DEFAULT_BOUND = 0.5;

const CALM = ['#1b2a3a', '#23545e', '#3b7f6a', '#5a9e5c'].map(hexRgb);
const TAIL = ['#f0b43c', '#e8743b', '#d62f2f', '#8e0c1f'].map(hexRgb);
const NAN_RGB = [255, 0, 255];

function ramp(stops, t) {
  t = Math.min(1, Math.max(0, t)) * (stops.length - 1);
  const i = Math.min(stops.length - 2, Math.floor(t));
  const f = t - i;
  const a = stops[i];
  const b = stops[i + 1];
  return [a[0] + (b[0] - a[0]) * f, a[1] + (b[1] - a[1]) * f, a[2] + (b[2] - a[2]) * f];
}

function usableBound(bound) {
  const b = Number(bound);
  return Number.isFinite(b) && b > 0 && b < ERROR_TOP ? b : DEFAULT_BOUND;
}

// The position of an error (in steps) on the bar, 0 … 1: linear up to the
// bound (at BOUND_AT), log beyond it. NaN stays NaN; +inf is the top.
export function errorPosition(steps, bound) {
  const b = usableBound(bound);
  const e = Number(steps);
  if (Number.isNaN(e)) return NaN;
  if (e <= b) return BOUND_AT * Math.max(0, e) / b;
  if (e === Infinity) return 1;
  return Math.min(1, BOUND_AT + (1 - BOUND_AT) * Math.log(e / b) / Math.log(ERROR_TOP / b));
}

// The colour of a position: the calm ramp up to and at the bound, the tail
// strictly beyond it.
function errorColourAt(p, beyond) {
  if (Number.isNaN(p)) return NAN_RGB;
  if (!beyond) return ramp(CALM, p / BOUND_AT);
  return ramp(TAIL, (p - BOUND_AT) / (1 - BOUND_AT));
}

export function errorColour(steps, bound) {
  const b = usableBound(bound);
  return errorColourAt(errorPosition(steps, b), Number(steps) > b);
}

// The legend's gradient (CSS) and ticks [{at: 0…1, label, bound}].
export function errorLegend(bound) {
  const b = usableBound(bound);
  const stops = [];
  for (let k = 0; k <= 8; k++) stops.push(`${rgbCss(ramp(CALM, k / 8))} ${(BOUND_AT * 100 * k / 8).toFixed(2)}%`);
  for (let k = 0; k <= 12; k++) {
    const p = BOUND_AT + ((1 - BOUND_AT) * k) / 12;
    stops.push(`${rgbCss(ramp(TAIL, k / 12))} ${(100 * p).toFixed(2)}%`);
  }
  const ticks = [{ at: 0, label: '0' }, { at: BOUND_AT, label: fmtTick(b, b / 1000), bound: true }];
  for (const t of [1, 2, 4, 10, 30, 100]) {
    const at = errorPosition(t, b);
    // Ticks too close to the bound's label or the top's would overlap them.
    if (t > b * 1.6 && at < 0.93) ticks.push({ at, label: String(t) });
  }
  ticks.push({ at: 1, label: `≥${ERROR_TOP}` });
  return { gradient: `linear-gradient(to right, ${stops.join(', ')})`, ticks };
}

// --- SQNR ---

// Bits of precision a format's grid has: its code bits for uniform grids;
// for float formats the significand's bits (implicit one included), whose
// relative spacing plays the part of a uniform grid's step.
// The element format first: "nvfp4 (fp4 e2m1, fp8 scales / global)" is FP4.
const FLOAT_SIGNIFICAND = [
  [/^F64$/, 53], [/^F32$/, 24], [/^BF16$/, 8], [/^F16$/, 11],
  [/E2M1|FP4/i, 2], [/E5M2/i, 3], [/E4M3|FP8/i, 4],
];

export function gridBits(scheme, codeBits) {
  for (const [re, bits] of FLOAT_SIGNIFICAND) if (re.test(scheme || '')) return bits;
  const b = Number(codeBits);
  return Number.isFinite(b) && b > 0 ? b : null;
}

export function idealSqnr(bits) {
  return 6.02 * bits + 1.76;
}

// Bands of bits lost (ideal − SQNR, over 6.02 dB per bit): upper edges.
export const SQNR_BANDS = [
  { upTo: 1, label: '< 1 bit lost', colour: '#3f8f5a' },
  { upTo: 2, label: '1–2 bits lost', colour: '#2f6f7e' },
  { upTo: 4, label: '2–4 bits lost', colour: '#d08a2c' },
  { upTo: Infinity, label: '> 4 bits lost', colour: '#c8323a' },
];

// The band of an SQNR (dB) for a grid of `bits`: an index into SQNR_BANDS,
// or -1 when it cannot be told (no bits known, or NaN).
export function sqnrBand(db, bits) {
  const x = Number(db);
  if (Number.isNaN(x) || !bits) return -1;
  if (x === Infinity) return 0;
  const lost = (idealSqnr(bits) - x) / 6.02;
  return SQNR_BANDS.findIndex((band) => lost < band.upTo);
}

export function bitsLost(db, bits) {
  return bits ? (idealSqnr(bits) - Number(db)) / 6.02 : NaN;
}

// --- Shares of elements (clipped, induced zeros) ---

export const SHARE_DECADES = [-6, -1];  // 0.0001 % … 10 %
const NONE_RGB = hexRgb('#1b2a3a');

export function shareColour(fraction) {
  const f = Number(fraction);
  if (Number.isNaN(f)) return NAN_RGB;
  if (f <= 0) return NONE_RGB;
  const [lo, hi] = SHARE_DECADES;
  return viridis((Math.log10(f) - lo) / (hi - lo));
}

export function shareLegend() {
  const [lo, hi] = SHARE_DECADES;
  const stops = [];
  for (let k = 0; k <= 10; k++) stops.push(`${rgbCss(viridis(k / 10))} ${k * 10}%`);
  const ticks = [];
  for (let d = lo; d <= hi; d++) ticks.push({ at: (d - lo) / (hi - lo), label: `${fmtTick(100 * 10 ** d, 100 * 10 ** d)}%` });
  return { gradient: `linear-gradient(to right, ${stops.join(', ')})`, ticks };
}

export { rgbCss };
