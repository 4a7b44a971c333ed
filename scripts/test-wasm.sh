#!/usr/bin/env bash
# test-wasm.sh — builds cera for WebAssembly (Debian's emscripten) and tests it under node and
# in headless Chromium, in build-wasm/:
#   1. PCRE2, utf8proc and cJSON from Debian's source packages (wasm/build-deps.sh);
#   2. the CPU kernel table and its tests (tests/cpu/standalone), run under node: every simd128
#      kernel against the scalar reference on fresh random inputs;
#   3. libcera + the JS API (wasm/), with the simd128 kernels and without (the scalar fallback),
#      and wasm/tests/test_node.mjs on each: stories260K and SmolLM2 greedy tokens (generate and
#      chat) equal to the native build's (build/tools/cera/cera when it is there, else the
#      committed wasm/tests/expected.json), corrupt GGUFs as JS exceptions;
#   4. the demo page (wasm/demo) in headless Chromium, driven by its URL parameters: an answer
#      must appear; the screenshot goes to build-wasm/demo.png.
# Installs emscripten, chromium-headless-shell and dpkg-dev with apt-get when they are missing.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
dir=build-wasm
smol=models/SmolLM2-135M-Instruct.Q4_1.gguf

missing=()
command -v emcc >/dev/null || missing+=(emscripten)
command -v dpkg-source >/dev/null || missing+=(dpkg-dev)
command -v chromium-headless-shell >/dev/null || command -v chromium >/dev/null || missing+=(chromium-headless-shell)
command -v node >/dev/null || missing+=(nodejs)
if [ ${#missing[@]} -gt 0 ]; then
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null || { echo "test-wasm: install ${missing[*]} (as root)" >&2; exit 1; }
        SUDO="sudo"
    fi
    echo "test-wasm: installing ${missing[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
chromium=$(command -v chromium-headless-shell || command -v chromium)
node_major=$(node -p 'process.versions.node.split(".")[0]')
[ "$node_major" -ge 18 ] || { echo "test-wasm: node $node_major is too old (18 or later)" >&2; exit 1; }
[ -s "$smol" ] || { echo "test-wasm: $smol is missing (bash scripts/setup.sh fetches it)" >&2; exit 1; }
# emcc's JS tools find Debian's acorn there even under a node that is not Debian's
export NODE_PATH=/usr/share/nodejs${NODE_PATH:+:$NODE_PATH}
jobs=$(nproc)

echo "== test-wasm: dependencies ($((SECONDS - start)) s)"
bash wasm/build-deps.sh "$dir/deps"

echo "== test-wasm: simd128 kernels against the scalar reference, under node ($((SECONDS - start)) s)"
# node 18+ has fetch, which emscripten 3.1.6's loader then tries on a file path: turn it off
emcmake cmake -S tests/cpu/standalone -B "$dir/kernels" -DCMAKE_BUILD_TYPE=Release \
    "-DCMAKE_CROSSCOMPILING_EMULATOR=$(command -v node);--no-experimental-fetch" >/dev/null
cmake --build "$dir/kernels" -j"$jobs" --target cpu_kernels cpu_act_quant cpu_tier_env >/dev/null
ctest --test-dir "$dir/kernels" --output-on-failure -j"$jobs"

echo "== test-wasm: libcera and the JS API ($((SECONDS - start)) s)"
emcmake cmake -S wasm -B "$dir/lib" -DCMAKE_BUILD_TYPE=Release -DCERA_DEPS_DIR="$PWD/$dir/deps" >/dev/null
cmake --build "$dir/lib" -j"$jobs" >/dev/null

# the scalar build, which cera.mjs falls back to where WebAssembly has no SIMD, beside it
emcmake cmake -S wasm -B "$dir/lib-scalar" -DCMAKE_BUILD_TYPE=Release -DCERA_DEPS_DIR="$PWD/$dir/deps" \
    -DCERA_WASM_SIMD=OFF >/dev/null
cmake --build "$dir/lib-scalar" -j"$jobs" --target cera_wasm >/dev/null
cp "$dir/lib-scalar/cera-core-scalar.mjs" "$dir/lib-scalar/cera-core-scalar.wasm" "$dir/lib/"

echo "== test-wasm: node test ($((SECONDS - start)) s)"
native=build/tools/cera/cera
[ -x "$native" ] || native=""
node wasm/tests/test_node.mjs "$dir/lib" $native
echo "== test-wasm: node test of the scalar fallback ($((SECONDS - start)) s)"
CERA_WASM_SCALAR=1 node wasm/tests/test_node.mjs "$dir/lib" $native

echo "== test-wasm: the demo page in headless Chromium ($((SECONDS - start)) s)"
node wasm/tests/check_demo.mjs "$chromium" . "/$dir/lib/demo/index.html" "/$smol" "$dir/demo.png" 180
echo "test-wasm: passed in $((SECONDS - start)) s; screenshot: $PWD/$dir/demo.png"
