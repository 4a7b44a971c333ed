#!/usr/bin/env bash
# run.sh — prompt and decode tok/s of the WebAssembly build under node (wasm/cera.mjs) against the
# native build, one thread each (the wasm build is single-threaded), on the same prompt and the
# same greedy generation; best of REPS runs each. Needs scripts/test-wasm.sh's build-wasm/lib and
# the native build/.
#   bash bench/wasm/run.sh [MODEL] [N_PREDICT] [REPS]
set -euo pipefail
cd "$(dirname "$0")/../.."
model=${1:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
n=${2:-64}
reps=${3:-3}
prompt=$(cat <<'TXT'
The history of the city begins with a small settlement on the river, where fishermen and traders met to exchange goods. Over the centuries it grew into a market town, then a centre of learning, with a university, libraries and workshops. Today it is known for its bridges, its old quarter and its food. Write a short guide for a visitor who has one day in the city:
TXT
)
echo "native (build/tools/cera/cera run -t 1, best of $reps):"
best_p=0 best_g=0
for _ in $(seq "$reps"); do
    line=$(build/tools/cera/cera run -m "$model" -p "$prompt" -n "$n" --temp 0 --ignore-eos -t 1 2>&1 >/dev/null | tail -1)
    p=$(sed -E 's/.*prompt ([0-9]+) tokens, ([0-9.]+) tok\/s.*/\2/' <<<"$line")
    g=$(sed -E 's/.*generation ([0-9]+) tokens, ([0-9.]+) tok\/s.*/\2/' <<<"$line")
    best_p=$(python3 -c "print(max($best_p, $p))") best_g=$(python3 -c "print(max($best_g, $g))")
    echo "  $line"
done
echo "native best: prompt $best_p tok/s, generation $best_g tok/s"
echo "wasm (node $(node --version), wasm/cera.mjs, best of $reps):"
NODE_PATH=/usr/share/nodejs node --input-type=module - "$model" "$n" "$reps" "$prompt" <<'JS'
import { Cera } from './build-wasm/lib/cera.mjs';
import { readFileSync } from 'node:fs';
const [model, n, reps, prompt] = process.argv.slice(2);
const engine = await Cera.load(readFileSync(model), { nCtx: 1024 });
let bp = 0, bg = 0;
for (let r = 0; r < Number(reps); r++) {
  const out = await engine.generate(prompt, { nPredict: Number(n), temperature: 0 });
  const t = out.timings;
  console.log(`  [${engine.tier}] prompt ${out.nPrompt} tokens, ${t.promptTokPerS.toFixed(2)} tok/s; ` +
    `generation ${out.tokens.length} tokens, ${t.decodeTokPerS.toFixed(2)} tok/s`);
  bp = Math.max(bp, t.promptTokPerS);
  bg = Math.max(bg, t.decodeTokPerS);
}
console.log(`wasm best: prompt ${bp.toFixed(2)} tok/s, generation ${bg.toFixed(2)} tok/s`);
engine.free();
JS
