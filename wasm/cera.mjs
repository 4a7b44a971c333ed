// cera.mjs — cera in WebAssembly: the JavaScript API (an ES module, for browsers and node >= 18).
//
//   import { Cera } from './cera.mjs';
//   const engine = await Cera.load(bytes, { nCtx: 2048 });   // bytes: a GGUF (Uint8Array / ArrayBuffer)
//   engine.tokenize('Hello');                                // Int32Array of token ids
//   const r = await engine.generate('Once upon a time', { nPredict: 32, temperature: 0,
//                                   onToken: (text, id) => ... });  // r.text, r.tokens, r.timings
//   const a = await engine.chat([{ role: 'user', content: 'Hi' }], { nPredict: 64, onToken });
//   engine.free();
//
// It sits on cera's public C API through wasm/cera_wasm.c (flat functions: numbers and
// pointers). The module (cera-core.mjs + .wasm, built beside this file by scripts/test-wasm.sh)
// is single-threaded; generation yields to the event loop between tokens, so a page stays
// responsive and streams. Errors from C (a corrupt GGUF, a bad template) become CeraError.
// The SIMD128 build is used where the engine validates a SIMD module; otherwise the scalar build
// (cera-core-scalar.*) when it is there, else a CeraError saying SIMD is missing.

export class CeraError extends Error {
  constructor(message) {
    super(message);
    this.name = 'CeraError';
  }
}

// The smallest module using a v128 instruction: (func (result v128) (v128.const i32x4 0 0 0 0)).
const SIMD_PROBE = new Uint8Array([0, 97, 115, 109, 1, 0, 0, 0, 1, 5, 1, 96, 0, 1, 123, 3, 2, 1, 0, 10, 22,
  1, 20, 0, 253, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 11]);

export function hasSimd() {
  try {
    return WebAssembly.validate(SIMD_PROBE);
  } catch {
    return false;
  }
}

const isNode = typeof process === 'object' && process.versions != null && process.versions.node != null;

async function readAsset(name) {
  const url = new URL(name, import.meta.url);
  if (isNode && url.protocol === 'file:') {
    const fs = await import('node:fs/promises');
    return fs.readFile(url);
  }
  const res = await fetch(url);
  if (!res.ok) throw new CeraError(`cannot fetch ${url}: HTTP ${res.status}`);
  return new Uint8Array(await res.arrayBuffer());
}

async function assetExists(name) {
  try {
    const url = new URL(name, import.meta.url);
    if (isNode && url.protocol === 'file:') {
      const fs = await import('node:fs/promises');
      await fs.access(url);
      return true;
    }
    return (await fetch(url, { method: 'HEAD' })).ok;
  } catch {
    return false;
  }
}

let corePromise = null;

// The core module (one per page or process), SIMD or scalar as the engine allows.
async function loadCore(opts = {}) {
  if (corePromise) return corePromise;
  corePromise = (async () => {
    let name = 'cera-core';
    if (opts.forceScalar || !hasSimd()) {
      if (!(await assetExists('cera-core-scalar.wasm'))) {
        throw new CeraError(opts.forceScalar ? 'the scalar build (cera-core-scalar.wasm) is not there'
          : 'this WebAssembly engine has no SIMD128 support, which cera-core.wasm needs ' +
            '(and the scalar build cera-core-scalar.wasm is not there)');
      }
      name = 'cera-core-scalar';
    }
    const [factory, wasmBytes] = await Promise.all([import(`./${name}.mjs`), readAsset(`${name}.wasm`)]);
    let compiled;
    try {
      compiled = await WebAssembly.compile(wasmBytes);
    } catch (e) {
      throw new CeraError(`cannot compile ${name}.wasm: ${e.message}`);
    }
    const handlers = new Map();
    let failed = null;
    const ready = factory.default({
      instantiateWasm(imports, done) {
        WebAssembly.instantiate(compiled, imports).then((inst) => done(inst), (e) => failed(e));
        return {};
      },
      print: (s) => console.log(s),
      printErr: (s) => console.warn(s),
    });
    const mod = await Promise.race([ready, new Promise((_, reject) => {
      failed = (e) => reject(new CeraError(`cannot instantiate ${name}.wasm: ${e.message}`));
    })]);
    mod.ceraOnToken = (handle, token, ptr, len) => {
      const h = handlers.get(handle);
      return h ? (h(token, mod.HEAPU8.slice(ptr, ptr + len)) ? 1 : 0) : 0;
    };
    mod.ceraHandlers = handlers;
    mod.ceraName = name;
    return mod;
  })();
  corePromise.catch(() => { corePromise = null; });
  return corePromise;
}

const encoder = new TextEncoder();

// Copies a JS string into the module's heap as NUL-terminated UTF-8; returns [ptr, byteLength].
function cString(mod, text) {
  const bytes = encoder.encode(text);
  const ptr = mod._malloc(bytes.length + 1);
  if (!ptr) throw new CeraError('out of memory');
  mod.HEAPU8.set(bytes, ptr);
  mod.HEAPU8[ptr + bytes.length] = 0;
  return [ptr, bytes.length];
}

const yieldNow = isNode ? () => new Promise((r) => setImmediate(r))
  : (() => {
      const ch = new MessageChannel();
      const queue = [];
      ch.port1.onmessage = () => queue.shift()();
      return () => new Promise((r) => { queue.push(r); ch.port2.postMessage(0); });
    })();

let nextHandle = 1;
const YIELD_MS = 50; // generation's work between two turns of the event loop

export class Engine {
  constructor(mod, ptr, weights) {
    this._m = mod;
    this._e = ptr;
    this._weights = weights; // the GGUF's bytes in the heap: used in place, freed with the engine
    const info = mod._malloc(16);
    const arch = mod.UTF8ToString(mod._cw_engine_info(ptr, info));
    const v = new Int32Array(mod.HEAPU8.buffer, info, 4).slice();
    mod._free(info);
    this.arch = arch;
    this.nVocab = v[0];
    this.nCtx = v[1];
    this.bos = v[2];
    this.eos = v[3];
    this.tier = mod.UTF8ToString(mod._cw_tier());
    this._busy = false;
  }

  _check() {
    if (!this._e) throw new CeraError('the engine was freed');
  }

  _error() {
    return new CeraError(this._m.UTF8ToString(this._m._cw_error()));
  }

  // Token ids of text (Int32Array). addSpecial: BOS/EOS as the model asks (default true);
  // parseSpecial: special-token strings in the text become their tokens (default false).
  tokenize(text, { addSpecial = true, parseSpecial = false } = {}) {
    this._check();
    const m = this._m;
    const [tp, len] = cString(m, text);
    try {
      let cap = len + 8;
      for (;;) {
        const out = m._malloc(4 * cap);
        try {
          const n = m._cw_tokenize(this._e, tp, len, addSpecial ? 1 : 0, parseSpecial ? 1 : 0, out, cap);
          if (n < 0) throw this._error();
          if (n <= cap) return new Int32Array(m.HEAPU8.buffer, out, n).slice();
          cap = n;
        } finally {
          m._free(out);
        }
      }
    } finally {
      m._free(tp);
    }
  }

  // The text of one token (special tokens rendered).
  tokenToPiece(token) {
    this._check();
    const m = this._m;
    const cap = 256;
    const buf = m._malloc(cap);
    try {
      const n = m._cw_token_piece(this._e, token, buf, cap);
      if (n < 0) throw new CeraError(`invalid token ${token}`);
      return new TextDecoder().decode(m.HEAPU8.slice(buf, buf + Math.min(n, cap)));
    } finally {
      m._free(buf);
    }
  }

  // Generates after prompt (a string, tokenized with BOS as the model asks, or token ids).
  // Options: nPredict (default 128; -1 until the context is full), temperature (0.8; 0 greedy),
  // topK (40), topP (0.95), minP (0.05), repeatPenalty (1), seed (0), onToken(text, id) (return
  // false to stop), signal (an AbortSignal). Resolves to { text, tokens, nPrompt, timings:
  // { promptMs, decodeMs, promptTokPerS, decodeTokPerS } }.
  async generate(prompt, opts = {}) {
    const ids = typeof prompt === 'string' ? this.tokenize(prompt) : Int32Array.from(prompt);
    return this._run(ids, opts);
  }

  // A chat turn: messages [{ role, content }] rendered with the model's chat template (the
  // GGUF's tokenizer.chat_template, through cera's template engine), then generate's options.
  // Resolves as generate does; the reply is r.text.
  async chat(messages, opts = {}) {
    this._check();
    const m = this._m;
    const [jp] = cString(m, JSON.stringify(messages.map((x) => ({ role: x.role, content: x.content ?? null }))));
    const np = m._malloc(4);
    let ids;
    try {
      const tp = m._cw_chat_prompt(this._e, jp, np);
      if (!tp) throw this._error();
      const n = new Int32Array(m.HEAPU8.buffer, np, 1)[0];
      ids = new Int32Array(m.HEAPU8.buffer, tp, n).slice();
      m._free(tp);
    } finally {
      m._free(jp);
      m._free(np);
    }
    return this._run(ids, opts);
  }

  async _run(ids, opts) {
    this._check();
    if (this._busy) throw new CeraError('the engine is already generating');
    const m = this._m;
    const o = { nPredict: 128, temperature: 0.8, topK: 40, topP: 0.95, minP: 0.05, repeatPenalty: 1, seed: 0,
      ...opts };
    if (ids.length === 0) throw new CeraError('empty prompt');
    this._busy = true;
    const s = m._cw_session_new(this._e, o.temperature, o.topK, o.topP, o.minP, o.repeatPenalty, o.seed >>> 0);
    if (!s) {
      this._busy = false;
      throw this._error();
    }
    const decoder = new TextDecoder('utf-8');
    const tokens = [];
    let text = '';
    let stop = false;
    const handle = nextHandle++;
    m.ceraHandlers.set(handle, (token, bytes) => {
      const piece = decoder.decode(bytes, { stream: true });
      text += piece;
      if (token >= 0) tokens.push(token);
      if (o.onToken && o.onToken(piece, token) === false) stop = true;
      return !stop;
    });
    const pp = m._malloc(4 * ids.length);
    new Int32Array(m.HEAPU8.buffer, pp, ids.length).set(ids);
    const t0 = performance.now();
    let t1 = t0;
    try {
      // a few tokens per call, about YIELD_MS of work (cera_generate continues after the pending
      // token, so the calls give the tokens of one long call), and the event loop runs between
      // calls: a page repaints the streamed text, and a caller can stop
      let first = true, chunk = 1;
      while (!stop && (o.nPredict < 0 || tokens.length < o.nPredict)) {
        const want = o.nPredict < 0 ? chunk : Math.min(chunk, o.nPredict - tokens.length);
        const tc = performance.now();
        const n = m._cw_generate(s, first ? pp : 0, first ? ids.length : 0, want, handle);
        const now = performance.now();
        if (first) t1 = now;
        else chunk = Math.max(1, Math.min(64, Math.floor(YIELD_MS / Math.max(0.01, (now - tc) / Math.max(1, n)))));
        first = false;
        if (n < 0) throw this._error();
        if (n < want) break; // an end of generation (or the callback's stop)
        if (o.signal && o.signal.aborted) break;
        await yieldNow();
      }
    } finally {
      m._free(pp);
      m.ceraHandlers.delete(handle);
      m._cw_session_free(s);
      this._busy = false;
    }
    text += decoder.decode();
    const t2 = performance.now();
    const promptMs = t1 - t0, decodeMs = t2 - t1;
    return {
      text, tokens, nPrompt: ids.length,
      timings: { promptMs, decodeMs, promptTokPerS: ids.length / (promptMs / 1000),
        decodeTokPerS: tokens.length > 1 ? (tokens.length - 1) / (decodeMs / 1000) : 0 },
    };
  }

  // Frees the engine and the model's bytes in the heap.
  free() {
    if (!this._e) return;
    this._m._cw_engine_close(this._e);
    this._m._free(this._weights);
    this._e = 0;
  }
}

export const Cera = {
  // A GGUF from bytes (Uint8Array, ArrayBuffer or a node Buffer). Options: nCtx (0: the model's,
  // at most 4096), forceScalar (use the scalar build). The bytes are copied once into the
  // module's memory, which grows to hold them (up to 2 GiB).
  async load(bytes, opts = {}) {
    const mod = await loadCore(opts);
    const u8 = bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes);
    if (u8.length === 0) throw new CeraError('load: no bytes');
    const ptr = mod._malloc(u8.length);
    if (!ptr) throw new CeraError(`load: cannot allocate ${u8.length} bytes in the WebAssembly memory`);
    mod.HEAPU8.set(u8, ptr);
    const e = mod._cw_engine_open(ptr, u8.length, opts.nCtx ?? 0);
    if (!e) {
      const msg = mod.UTF8ToString(mod._cw_error());
      mod._free(ptr);
      throw new CeraError(msg);
    }
    return new Engine(mod, e, ptr);
  },
  hasSimd,
};

export default Cera;
