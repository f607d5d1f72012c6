// The HTTP/JSON API of tensormorphd (POST /v1/<Method>), with the bearer
// token asked for once per tab on the first 401 and kept in sessionStorage.
//
// Unary calls resolve to the response object (protobuf JSON mapping:
// lowerCamelCase names, int64 as strings, enums by name). Streaming calls
// hand each message to a callback as its NDJSON line arrives, so a diff's
// progress shows live. Failures reject with an ApiError carrying the gRPC
// code name, the machine-readable reason (docs/errors.md) and its metadata,
// the message and the HTTP status. Error bodies are grpc-gateway's:
// {"code": <google.rpc.Code number>, "message", "details": [ErrorInfo]}.

const TOKEN_KEY = 'tensormorph.token';

export class ApiError extends Error {
  constructor(code, message, status, reason = '', metadata = {}) {
    super(message);
    this.code = code;
    this.status = status;
    this.reason = reason || code;
    this.metadata = metadata;
  }
  toString() {
    return `${this.code} [${this.reason}]: ${this.message}`;
  }
}

const CODE_NAMES = ['OK', 'CANCELLED', 'UNKNOWN', 'INVALID_ARGUMENT', 'DEADLINE_EXCEEDED', 'NOT_FOUND',
  'ALREADY_EXISTS', 'PERMISSION_DENIED', 'RESOURCE_EXHAUSTED', 'FAILED_PRECONDITION', 'ABORTED',
  'OUT_OF_RANGE', 'UNIMPLEMENTED', 'INTERNAL', 'UNAVAILABLE', 'DATA_LOSS', 'UNAUTHENTICATED'];
// A google.rpc.Code number's name ("NOT_FOUND" for 5).
export function grpcCodeName(code) {
  if (typeof code === 'string') return code;
  return CODE_NAMES[code] || `CODE_${code}`;
}

const ERROR_INFO = 'type.googleapis.com/google.rpc.ErrorInfo';

// An ApiError from a grpc-gateway error body (a whole response's, or a
// stream's {"error": ...} line).
function errorOfBody(body, status) {
  const info = (Array.isArray(body.details) ? body.details : []).find((d) => d && d['@type'] === ERROR_INFO) || {};
  return new ApiError(grpcCodeName(body.code ?? 2), body.message || '', status, info.reason || '', info.metadata || {});
}

// The token prompt: one at a time, whatever number of calls wait on it.
let pendingPrompt = null;
let tokenPrompter = defaultPrompter;

// `fn(reason)` resolves to the token the user typed, or null when they
// cancelled. The page installs a form; window.prompt is the fallback.
export function setTokenPrompter(fn) {
  tokenPrompter = fn;
}

function defaultPrompter(reason) {
  return Promise.resolve(window.prompt(reason));
}

export function token() {
  return sessionStorage.getItem(TOKEN_KEY) || '';
}

export function forgetToken() {
  sessionStorage.removeItem(TOKEN_KEY);
}

function askToken(rejected) {
  if (!pendingPrompt) {
    const reason = rejected
      ? 'The server refused that token. Enter the bearer token from its --token-file:'
      : 'This server needs a bearer token (its --token-file). Enter it:';
    pendingPrompt = tokenPrompter(reason).then((t) => {
      pendingPrompt = null;
      if (t) sessionStorage.setItem(TOKEN_KEY, t.trim());
      return !!t;
    });
  }
  return pendingPrompt;
}

function headers(extra) {
  const h = Object.assign({}, extra);
  const t = token();
  if (t) h.Authorization = `Bearer ${t}`;
  return h;
}

async function errorFrom(response) {
  let code = `HTTP_${response.status}`;
  let message = response.statusText || 'request failed';
  try {
    const text = await response.text();
    try {
      const body = JSON.parse(text);
      if (body && typeof body === 'object' && 'code' in body) {
        return errorOfBody(body, response.status);
      }
    } catch (_) {
      // Not the gateway's JSON (a proxy's page, say): its text, briefly.
      if (text) message = text.replace(/<[^>]*>/g, ' ').replace(/\s+/g, ' ').trim().slice(0, 300);
    }
  } catch (_) {
    /* no body */
  }
  return new ApiError(code, message, response.status);
}

// fetch with the token, asking for it on a 401 (again if it was rejected)
// and retrying; cancelling the prompt gives the 401's error.
export async function authorizedFetch(url, init = {}) {
  let asked = false;
  for (;;) {
    const hadToken = !!token();
    let response;
    try {
      response = await fetch(url, Object.assign({}, init, { headers: headers(init.headers) }));
    } catch (e) {
      if (e.name === 'AbortError') throw e;
      throw new ApiError('UNAVAILABLE', `cannot reach the server: ${e.message}`, 0);
    }
    if (response.status !== 401) return response;
    const err = await errorFrom(response);
    if (!(await askToken(hadToken || asked))) throw err;
    asked = true;
  }
}

function post(method, request, signal, accept) {
  const h = { 'Content-Type': 'application/json' };
  if (accept) h.Accept = accept;
  return authorizedFetch(`v1/${method}`, {
    method: 'POST',
    headers: h,
    body: JSON.stringify(request || {}),
    signal,
  });
}

// A unary RPC.
export async function call(method, request, { signal } = {}) {
  const response = await post(method, request, signal);
  if (!response.ok) throw await errorFrom(response);
  return response.json();
}

const TYPED = { '<f4': Float32Array, '<f8': Float64Array, '<i4': Int32Array };

// GetHeatmap in the gateway's binary form (docs/http.md): the response as
// `call` gives it, except that its per-cell arrays (values, groups, pruned,
// cellElement) are typed arrays viewing the body in place, not JSON numbers
// to parse: a million cells arrive in a few MB, not 26.
export async function heatmap(request, { signal } = {}) {
  const response = await post('GetHeatmap', request, signal, 'application/octet-stream');
  if (!response.ok) throw await errorFrom(response);
  const body = await response.arrayBuffer();
  const bad = (what) => new ApiError('INTERNAL', `the binary heatmap reply ${what}`, response.status);
  if (body.byteLength < 4) throw bad('is too short');
  const n = new DataView(body).getUint32(0, true);
  if (4 + n > body.byteLength) throw bad('is shorter than its JSON');
  const head = JSON.parse(new TextDecoder().decode(new Uint8Array(body, 4, n)));
  const message = head.message;
  const start = 4 + n;
  for (const a of head.arrays) {
    const Typed = TYPED[a.dtype];
    if (!Typed) throw bad(`holds an array of unknown dtype ${a.dtype}`);
    if (start + a.offset + a.count * Typed.BYTES_PER_ELEMENT > body.byteLength) throw bad(`cuts ${a.field} short`);
    message[a.field] = new Typed(body, start + a.offset, a.count);
  }
  return message;
}

const SLICE_MS = 25;

// A macrotask boundary: input, rendering and timers run before what follows.
function yieldToPage() {
  if (globalThis.scheduler && typeof globalThis.scheduler.yield === 'function') return globalThis.scheduler.yield();
  return new Promise((resolve) => setTimeout(resolve, 0));
}

// A server-streaming RPC: `onMessage(message)` per line as it arrives;
// resolves when the stream ends OK, rejects with the stream's error.
export async function stream(method, request, onMessage, { signal } = {}) {
  const response = await post(method, request, signal);
  if (!response.ok) throw await errorFrom(response);
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffered = '';
  const handle = (line) => {
    if (!line.trim()) return;
    let obj;
    try {
      obj = JSON.parse(line);
    } catch (e) {
      throw new ApiError('INTERNAL', `a stream line is not JSON: ${line.slice(0, 200)}`, 200);
    }
    if (obj.error) {
      throw errorOfBody(obj.error, 200);
    }
    if ('result' in obj) onMessage(obj.result);
  };
  // A read may bring thousands of lines (a diff of 10,000 tensors): the
  // lines are cut by index (not by re-slicing the rest after each), and the
  // page gets the main thread back every SLICE_MS, so no task runs long.
  let sliceStart = performance.now();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffered += decoder.decode(value, { stream: true });
    let from = 0;
    let nl;
    while ((nl = buffered.indexOf('\n', from)) >= 0) {
      handle(buffered.slice(from, nl));
      from = nl + 1;
      if (performance.now() - sliceStart > SLICE_MS) {
        await yieldToPage();
        sliceStart = performance.now();
      }
    }
    buffered = buffered.slice(from);
  }
  buffered += decoder.decode();
  handle(buffered);
}

// Every message of a stream, as an array.
export async function collect(method, request, opts) {
  const out = [];
  await stream(method, request, (m) => out.push(m), opts);
  return out;
}

// A GET URL of the gateway (tensor.npy, heatmap.png) with its query.
export function getUrl(path, query) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(query)) {
    if (v !== undefined && v !== null && v !== '') q.set(k, String(v));
  }
  return `v1/${path}?${q.toString()}`;
}

// Downloads a GET URL through fetch (so the token goes along) and saves it.
export async function download(url, filename) {
  const response = await authorizedFetch(url);
  if (!response.ok) throw await errorFrom(response);
  const blob = await response.blob();
  const href = URL.createObjectURL(blob);
  const a = document.createElement('a');
  a.href = href;
  a.download = filename;
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(href), 10000);
}

// Numbers in the JSON mapping: int64 as strings, doubles as numbers or
// "NaN" / "Infinity" / "-Infinity".
export function num(x) {
  if (x === undefined || x === null || x === '') return 0;
  return typeof x === 'number' ? x : Number(x);
}

export function nums(xs) {
  if (ArrayBuffer.isView(xs)) return xs;  // a typed array: numbers already
  return (xs || []).map(num);
}
