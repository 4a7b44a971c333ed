// test_node.mjs — the WebAssembly build under node, through the JS API (wasm/cera.mjs):
//   - greedy generation from stories260K and SmolLM2-135M gives the native build's token ids
//     (`cera run --temp 0 --ids -t 1`, run here when the native binary exists, else the ids
//     committed in expected.json, which that command made); the scalar build's are the native
//     scalar tier's (CERA_CPU_TIER=scalar: the same C code sums the same way);
//   - a chat turn with SmolLM2 (its GGUF's template, rendered in wasm) gives the tokens of the
//     native `cera template` + `cera run` on the same conversation;
//   - tokenize matches the tokens the generation started from; a corrupt or truncated GGUF is a
//     CeraError with the library's message, and the module still works afterwards.
// usage: node test_node.mjs LIBDIR [NATIVE_CERA]   (LIBDIR: cera.mjs + cera-core.* from the build)
// With CERA_WASM_SCALAR=1 in the environment it tests the scalar build (cera-core-scalar.*, the
// fallback for engines without SIMD) instead: WebAssembly.validate is made to refuse SIMD, as an
// engine without it does, so cera.mjs's own choice is what is tested; and a copy of the build
// without the scalar files must then refuse to load with a CeraError that says SIMD is missing.
// Prints prompt and decode tok/s of each run (bench/RESULTS.md quotes them).
import { execFileSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '../..');
const [libDir, nativeArg] = process.argv.slice(2);
if (!libDir) {
  console.error('usage: node test_node.mjs LIBDIR [NATIVE_CERA]');
  process.exit(2);
}
const forceScalar = process.env.CERA_WASM_SCALAR === '1';
if (forceScalar) {
  const validate = WebAssembly.validate;
  const simdOpcode = (b) => b.some((x, i) => x === 0xfd && i > 8); // v128 instructions: the 0xfd prefix
  WebAssembly.validate = (bytes) => (bytes.length < 64 && simdOpcode(new Uint8Array(bytes)) ? false : validate(bytes));
}
const { Cera, CeraError } = await import(pathToFileURL(path.resolve(libDir, 'cera.mjs')).href);
const native = nativeArg && existsSync(nativeArg) ? nativeArg : null;
const expected = JSON.parse(readFileSync(path.join(here, 'expected.json'), 'utf8'));
const sharedDir = process.env.CERA_SHARED_DIR || path.resolve(root, '../shared');
const loadOpts = (o) => o;

let passed = 0, failed = 0;
function check(cond, what) {
  if (cond) passed++;
  else {
    failed++;
    console.error(`FAIL: ${what}`);
  }
}
const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);
check(Cera.hasSimd() === !forceScalar, `hasSimd() is ${Cera.hasSimd()}`);

function nativeIds(model, args) {
  // the scalar build against the native scalar tier (the same C code: the same sums)
  const env = forceScalar ? { ...process.env, CERA_CPU_TIER: 'scalar' } : process.env;
  const out = execFileSync(native, ['run', '-m', model, ...args, '--temp', '0', '--ids', '-t', '1'],
    { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'], env });
  return out.trim().split(/\s+/).filter(Boolean).map(Number);
}

const cases = [
  { name: 'stories260K', file: path.join(sharedDir, 'models/stories260K.gguf'), prompt: 'Once upon a time', n: 32 },
  { name: 'SmolLM2-135M', file: path.join(root, 'models/SmolLM2-135M-Instruct.Q4_1.gguf'),
    prompt: 'The capital of France is', n: 32, chat: 'Hello! Who are you?' },
];

for (const c of cases) {
  if (!existsSync(c.file)) {
    // as the native suite: stories260K lives in the shared folder beside the clone
    if (c.name === 'stories260K') {
      console.log(`SKIP ${c.name}: ${c.file} is missing`);
      continue;
    }
    check(false, `${c.file} is missing (scripts/setup.sh fetches it)`);
    continue;
  }
  const bytes = readFileSync(c.file);
  const t0 = performance.now();
  const engine = await Cera.load(bytes, loadOpts({ nCtx: 512 }));
  check(engine.tier === (forceScalar ? 'scalar' : 'simd128'), `${c.name}: kernels ${engine.tier}`);
  const loadMs = performance.now() - t0;
  const want = native ? nativeIds(c.file, ['-p', c.prompt, '-n', String(c.n)])
    : expected[c.name][forceScalar ? 'ids_scalar' : 'ids'];
  const streamed = [];
  const r = await engine.generate(c.prompt, { nPredict: c.n, temperature: 0, onToken: (t, id) => streamed.push(id) });
  check(same(r.tokens, want), `${c.name}: wasm greedy ids ${r.tokens.join(' ')} != native ${want.join(' ')}`);
  check(same(streamed.filter((x) => x >= 0), r.tokens), `${c.name}: onToken saw every token once, in order`);
  check(r.nPrompt === engine.tokenize(c.prompt).length, `${c.name}: the prompt is tokenize()'s tokens`);
  console.log(`${c.name} [${engine.tier}, ${native ? 'native ids from ' + native : 'expected.json'}]: ` +
    `${r.tokens.length} tokens ${same(r.tokens, want) ? 'equal' : 'DIFFER'}; load ${loadMs.toFixed(0)} ms, ` +
    `prompt ${r.nPrompt} tok ${r.timings.promptTokPerS.toFixed(1)} tok/s, ` +
    `decode ${r.timings.decodeTokPerS.toFixed(1)} tok/s; text: ${JSON.stringify(r.text.slice(0, 80))}`);
  if (c.chat) {
    const msgs = [{ role: 'user', content: c.chat }];
    let wantChat = expected[c.name][forceScalar ? 'chat_ids_scalar' : 'chat_ids'];
    if (native) {
      const dir = mkdtempSync(path.join(tmpdir(), 'cera-wasm-'));
      writeFileSync(path.join(dir, 'case.json'), JSON.stringify({ messages: msgs, add_generation_prompt: true }));
      const rendered = execFileSync(native, ['template', '-m', c.file, '--case', path.join(dir, 'case.json')],
        { encoding: 'utf8' });
      writeFileSync(path.join(dir, 'prompt.txt'), rendered + '\n'); // -f drops one final newline
      wantChat = nativeIds(c.file, ['-f', path.join(dir, 'prompt.txt'), '--no-escape', '-n', '24']);
    }
    const a = await engine.chat(msgs, { nPredict: 24, temperature: 0 });
    check(same(a.tokens, wantChat), `${c.name}: chat ids ${a.tokens.join(' ')} != native ${wantChat.join(' ')}`);
    console.log(`${c.name} chat: ${a.tokens.length} tokens ${same(a.tokens, wantChat) ? 'equal' : 'DIFFER'}; ` +
      `reply: ${JSON.stringify(a.text.slice(0, 80))}`);
  }
  engine.free();
}

// Corrupt input: clear exceptions, and the module keeps working.
async function rejects(bytes, what, needle) {
  try {
    const e = await Cera.load(bytes, loadOpts({}));
    e.free();
    check(false, `${what}: loaded`);
  } catch (e) {
    check(e instanceof CeraError && e.message.includes(needle), `${what}: ${e.name}: ${e.message}`);
    console.log(`${what}: ${e.name}: ${e.message}`);
  }
}
const smol = readFileSync(cases[1].file);
await rejects(smol.subarray(0, 4096), 'a truncated GGUF', '<memory>');
await rejects(new Uint8Array(1 << 16).fill(0x5a), 'bytes that are not a GGUF', '<memory>');
const bad = Uint8Array.from(smol.subarray(0, 1 << 20));
bad.fill(0xff, 8, 16); // the tensor count
await rejects(bad, 'a GGUF with a corrupt tensor count', '<memory>');
await rejects(new Uint8Array(0), 'no bytes', 'no bytes');
const again = await Cera.load(smol, loadOpts({ nCtx: 256 }));
check(again.tokenize('Hello').length > 0, 'the module works after the errors');
again.free();

if (forceScalar) {
  // no SIMD and no scalar build: a clear error, not a failed instantiation
  const dir = mkdtempSync(path.join(tmpdir(), 'cera-wasm-nosimd-'));
  for (const f of ['cera.mjs', 'cera-core.mjs', 'cera-core.wasm']) copyFileSync(path.join(libDir, f), path.join(dir, f));
  const other = await import(pathToFileURL(path.join(dir, 'cera.mjs')).href);
  try {
    (await other.Cera.load(smol)).free();
    check(false, 'loaded without SIMD and without the scalar build');
  } catch (e) {
    check(e instanceof other.CeraError && /SIMD128/.test(e.message), `without SIMD and scalar build: ${e.message}`);
    console.log(`without SIMD and without the scalar build: ${e.name}: ${e.message}`);
  }
}

console.log(`${passed} passed, ${failed} failed`);
process.exit(failed || !passed ? 1 : 0);
