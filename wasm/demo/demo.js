// demo.js — the demo page's logic: load a GGUF (a picked file, or ?model=URL), keep the
// conversation, and stream each reply into the log through engine.chat's onToken (sampling at
// temperature 0.7, or ?temp=T; 0 is greedy).
// document.body.dataset.state says where it is: loading, ready, generating, done, error.
import { Cera } from '../cera.mjs';

const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);
const temperature = params.has('temp') ? Number(params.get('temp')) : 0.7;
const messages = [];
let engine = null;

function setState(state, text) {
  document.body.dataset.state = state;
  if (text !== undefined) $('status').textContent = text;
}

function fail(e) {
  $('status').innerHTML = '';
  const span = document.createElement('span');
  span.className = 'error';
  span.textContent = `Error: ${e.message || e}`;
  $('status').appendChild(span);
  setState('error');
}

async function load(bytes, name) {
  setState('loading', `Loading ${name} (${(bytes.byteLength / 1e6).toFixed(1)} MB)...`);
  if (engine) engine.free();
  engine = null;
  messages.length = 0;
  $('log').textContent = '';
  engine = await Cera.load(bytes, { nCtx: 2048 });
  $('say').disabled = $('send').disabled = false;
  setState('ready', `${name}: ${engine.arch}, ${engine.nVocab} tokens, context ${engine.nCtx}, kernels ${engine.tier}`);
}

async function send(text) {
  if (!engine || !text.trim()) return;
  messages.push({ role: 'user', content: text });
  const u = document.createElement('div');
  u.className = 'user';
  u.textContent = text;
  const a = document.createElement('div');
  a.className = 'assistant';
  $('log').append(u, a);
  $('say').value = '';
  $('say').disabled = $('send').disabled = true;
  setState('generating', 'Generating...');
  const r = await engine.chat(messages, {
    nPredict: 256, temperature, topK: 40, topP: 0.95, seed: 42,
    onToken: (piece) => { a.textContent += piece; },
  });
  a.textContent = r.text;
  messages.push({ role: 'assistant', content: r.text });
  $('say').disabled = $('send').disabled = false;
  setState('done', `${r.tokens.length} tokens; prompt ${r.timings.promptTokPerS.toFixed(1)} tok/s, ` +
    `generation ${r.timings.decodeTokPerS.toFixed(1)} tok/s (${engine.tier})`);
}

$('file').addEventListener('change', async (ev) => {
  const f = ev.target.files[0];
  if (!f) return;
  try {
    await load(new Uint8Array(await f.arrayBuffer()), f.name);
  } catch (e) {
    fail(e);
  }
});

$('form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  send($('say').value).catch(fail);
});

// ?model=URL&say=TEXT[&temp=T]: load from a URL and send one message (the headless check).
if (params.get('model')) {
  (async () => {
    const url = params.get('model');
    setState('loading', `Fetching ${url}...`);
    const res = await fetch(url);
    if (!res.ok) throw new Error(`cannot fetch ${url}: HTTP ${res.status}`);
    await load(new Uint8Array(await res.arrayBuffer()), url.split('/').pop());
    if (params.get('say')) await send(params.get('say'));
  })().catch(fail);
} else {
  setState('idle');
}
