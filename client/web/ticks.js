// Axis ticks: steps of 1, 2 or 5 times a power of ten, each tick computed as
// a whole multiple of the step (never by repeated addition, which leaves
// 3.47e-18 where 0 belongs) and printed with the step's digits only.

// About n ticks over [lo, hi]: { step, ticks }.
export function niceTicks(lo, hi, n) {
  lo = Number(lo);
  hi = Number(hi);
  if (!(hi > lo) || !Number.isFinite(hi - lo)) return { step: 0, ticks: Number.isFinite(lo) ? [lo] : [] };
  const raw = (hi - lo) / Math.max(1, n);
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 5, 10].map((m) => m * mag).find((x) => x >= raw * (1 - 1e-9)) || raw;
  const first = Math.ceil(lo / step - 1e-9);
  const last = Math.floor(hi / step + 1e-9);
  const ticks = [];
  // + 0: ceil(-1e-9) is -0, and a -0 tick printed as "-0" on count axes.
  for (let k = first; k <= last; k++) ticks.push(k * step + 0);
  return { step, ticks };
}

// x printed with no more digits than `step` (the gap between neighbouring
// ticks) needs: 0 is "0", 0.30000000000000004 at a step of 0.1 is "0.3";
// magnitudes past 1e6 or under 1e-4 in exponent form with the same digits.
export function fmtTick(x, step) {
  x = Number(x);
  step = Math.abs(Number(step));
  if (!Number.isFinite(x)) return Number.isNaN(x) ? 'NaN' : x > 0 ? '+inf' : '-inf';
  if (!(step > 0) || !Number.isFinite(step)) step = Math.abs(x) || 1;
  // The step's last significant digit: 10^k.
  const k = Math.floor(Math.log10(step) + 1e-9);
  const unit = Math.pow(10, k);
  if (Math.abs(x) < unit / 2) return '0';
  const a = Math.abs(x);
  if (a >= 1e6 || a < 1e-4) {
    const digits = Math.max(0, Math.floor(Math.log10(a) + 1e-9) - k);
    return trimExponent(x.toExponential(Math.min(20, digits)));
  }
  // Trailing zeros say nothing: at a step of 0.05, 0.10 is 0.1.
  const s = x.toFixed(Math.min(20, Math.max(0, -k))).replace(/(\.\d*?)0+$/, '$1').replace(/\.$/, '');
  return s === '-0' ? '0' : s;
}

function trimExponent(s) {
  // "2.50e-5" → "2.5e-5": the step's digits may end in zeros.
  return s.replace(/\.?0+e/, 'e').replace('e+', 'e');
}
