// check_demo.mjs — the demo page in headless Chromium: serves ROOT over HTTP (a tiny static
// server), opens PAGE?model=MODEL&temp=0&say=TEXT (a greedy answer) through the DevTools protocol
// (over --remote-debugging-pipe: no port, no extra packages), waits until the page says it is
// done (document.body.dataset.state), checks that an answer appeared in the chat log, and writes
// a screenshot to OUT.png.
// usage: node check_demo.mjs CHROMIUM ROOT PAGE MODEL OUT.png [TIMEOUT_S]
//   PAGE and MODEL are paths under ROOT ("/build-wasm/lib/demo/index.html", "/models/x.gguf").
import { spawn } from 'node:child_process';
import { createReadStream, statSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import path from 'node:path';

const [chromium, root, page, model, out, timeoutArg] = process.argv.slice(2);
if (!out) {
  console.error('usage: node check_demo.mjs CHROMIUM ROOT PAGE MODEL OUT.png [TIMEOUT_S]');
  process.exit(2);
}
const rootAbs = path.resolve(root);
const timeoutMs = 1000 * Number(timeoutArg || 120);
const types = { '.html': 'text/html', '.js': 'text/javascript', '.mjs': 'text/javascript',
  '.wasm': 'application/wasm', '.css': 'text/css' };

const server = http.createServer((req, res) => {
  const rel = decodeURIComponent(new URL(req.url, 'http://x').pathname);
  const file = path.join(rootAbs, path.normalize(rel));
  let st = null;
  try {
    st = file.startsWith(rootAbs) ? statSync(file) : null;
  } catch { /* missing */ }
  if (!st || !st.isFile()) {
    res.writeHead(404).end('not found');
    return;
  }
  res.writeHead(200, { 'content-type': types[path.extname(file)] || 'application/octet-stream',
    'content-length': st.size });
  if (req.method === 'HEAD') res.end();
  else createReadStream(file).pipe(res);
});
await new Promise((r) => server.listen(0, '127.0.0.1', r));
const base = `http://127.0.0.1:${server.address().port}`;
const url = `${base}${page}?model=${encodeURIComponent(model)}&temp=0&say=${encodeURIComponent('Hello! Who are you?')}`;

const browser = spawn(chromium, ['--headless', '--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage',
  '--remote-debugging-pipe', '--window-size=1000,800', 'about:blank'], { stdio: ['ignore', 'ignore', 'pipe', 'pipe', 'pipe'] });
let stderr = '';
browser.stderr.on('data', (d) => { stderr += d; });
const toBrowser = browser.stdio[3], fromBrowser = browser.stdio[4];

let nextId = 1, buf = Buffer.alloc(0);
const pending = new Map();
fromBrowser.on('data', (chunk) => {
  buf = Buffer.concat([buf, chunk]);
  let z;
  while ((z = buf.indexOf(0)) >= 0) {
    const msg = JSON.parse(buf.subarray(0, z).toString('utf8'));
    buf = buf.subarray(z + 1);
    if (msg.id && pending.has(msg.id)) {
      const { resolve, reject } = pending.get(msg.id);
      pending.delete(msg.id);
      if (msg.error) reject(new Error(JSON.stringify(msg.error)));
      else resolve(msg.result);
    }
  }
});
function send(method, params = {}, sessionId) {
  const id = nextId++;
  toBrowser.write(JSON.stringify({ id, method, params, ...(sessionId ? { sessionId } : {}) }) + '\0');
  return new Promise((resolve, reject) => pending.set(id, { resolve, reject }));
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

let code = 1;
try {
  const { targetId } = await send('Target.createTarget', { url: 'about:blank' });
  const { sessionId } = await send('Target.attachToTarget', { targetId, flatten: true });
  const evaluate = async (expr) =>
    (await send('Runtime.evaluate', { expression: expr, returnByValue: true }, sessionId)).result.value;
  await send('Page.enable', {}, sessionId);
  await send('Page.navigate', { url }, sessionId);
  const t0 = Date.now();
  let state = '';
  while (Date.now() - t0 < timeoutMs) {
    await sleep(500);
    state = await evaluate('document.body ? document.body.dataset.state || "" : ""');
    if (state === 'done' || state === 'error') break;
  }
  console.log(`demo: at ${await evaluate("location.href")}`);
  const status = await evaluate('document.getElementById("status").textContent');
  const answer = await evaluate('(document.querySelector(".assistant") || {}).textContent || ""');
  const shot = await send('Page.captureScreenshot', { format: 'png' }, sessionId);
  writeFileSync(out, Buffer.from(shot.data, 'base64'));
  console.log(`demo: state ${state} after ${((Date.now() - t0) / 1000).toFixed(1)} s; status: ${status}`);
  console.log(`demo: answer: ${JSON.stringify(answer.slice(0, 200))}`);
  console.log(`demo: screenshot ${path.resolve(out)}`);
  if (state !== 'done') console.error(`FAIL: the page did not finish (state "${state}")`);
  else if (answer.trim().length === 0) console.error('FAIL: no answer in the chat log');
  else code = 0;
} catch (e) {
  console.error(`FAIL: ${e.message}\n${stderr.slice(-2000)}`);
} finally {
  browser.kill();
  server.close();
}
process.exit(code);
