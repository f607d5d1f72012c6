// The sorting worker (sort.js): sorts row indices by their keys off the
// page's main thread. Message in: { id, keys (Float64Array of numbers or an
// array of strings), desc }; out: { id, order (Uint32Array, transferred) }.
// Numbers compare as numbers with NaN lowest, strings by code units; equal
// keys keep their indices' order (arrival order), also descending.
self.onmessage = (e) => {
  const { id, keys, desc } = e.data;
  const n = keys.length;
  const order = new Uint32Array(n);
  for (let i = 0; i < n; i++) order[i] = i;
  const numeric = keys instanceof Float64Array;
  const sign = desc ? -1 : 1;
  const cmp = numeric
    ? (a, b) => {
      const x = keys[a];
      const y = keys[b];
      let c = x - y;
      if (Number.isNaN(c)) c = Number.isNaN(x) ? (Number.isNaN(y) ? 0 : -1) : 1;
      return sign * c || a - b;
    }
    : (a, b) => {
      const x = keys[a];
      const y = keys[b];
      return sign * (x < y ? -1 : x > y ? 1 : 0) || a - b;
    };
  order.sort(cmp);
  self.postMessage({ id, order }, [order.buffer]);
};
