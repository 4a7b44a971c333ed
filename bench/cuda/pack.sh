#!/usr/bin/env bash
# bench/cuda/pack.sh — builds the CUDA tests and benchmark here and fills .devcarry/ with
# them, the shared libraries the device machine lacks and the golden files the tests read,
# for bench/cuda/device_run.sh (the `run` tool carries .devcarry). Everything goes into one
# xz-compressed tar, .devcarry/pack.tar.xz (a call carries 64 MiB at most), which device_run.sh
# unpacks on the device.
#   BUILD (default build-cuda-dev) is configured with -DCERA_CUDA=ON and
#   CERA_SHARED_DIR=/tmp/devshared (a link made on both machines). CARRY (default .devcarry)
#   names the folder, so that two engineers can pack different builds. TOOLS (default
#   "cuda_bench cuda_lora_bench cera") names the programs packed besides the tests (fewer keep
#   the pack under the limit). GOLDEN_EXTRA (default none) names more golden cases to carry
#   (e.g. "synth-gemma3-f32": its files synth-gemma3-f32.*). WERROR=ON keeps a build
#   folder configured with -DCERA_WERROR=ON as it is (no rebuild of everything). GOLDEN_LLAMA=0
#   carries only the synth-llama goldens test_cuda_batch and test_cuda_lora read.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
BUILD=${BUILD:-build-cuda-dev}
C=${CARRY:-.devcarry}
EXCL=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$EXCL")"
grep -qx "/$C/" "$EXCL" 2>/dev/null || echo "/$C/" >>"$EXCL"
[ -e /tmp/devshared ] || ln -sfn "$(cd .. && pwd)/shared" /tmp/devshared
cmake -S . -B "$BUILD" -DCERA_CUDA=ON -DCERA_WERROR="${WERROR:-OFF}" -DCERA_SHARED_DIR=/tmp/devshared >/dev/null
TESTS=${TESTS:-"test_cuda_ops test_cuda_golden test_cuda_engine test_cuda_lora test_cuda_attention test_cuda_sample test_cuda_matvec_rows test_cuda_batch test_cuda_lora_moe"}
TOOLS=${TOOLS-"cuda_bench cuda_lora_bench cera"}
cmake --build "$BUILD" --target $TESTS $TOOLS -j"${JOBS:-2}"
FINAL=$C
C=$(mktemp -d /tmp/devpack.XXXXXX)
trap 'rm -rf "$C"' EXIT
mkdir -p "$C/bin" "$C/lib" "$C/shared/models" "$C/shared/golden" "$C/shared/vocab"
for t in $TESTS; do cp "$(find "$BUILD/tests" -type f -name "$t" | head -1)" "$C/bin/"; done # tests/cuda or another
for t in $TOOLS; do cp "$BUILD/$([ "$t" = cera ] && echo tools/cera || echo bench/cuda)/$t" "$C/bin/"; done
strip "$C"/bin/* # symbols are not needed there
for p in $(ldd "$C"/bin/* | awk '/pcre2|utf8proc|cjson|libedit|libbsd|libmd|microhttpd|gnutls|p11-kit|idn2|unistring|tasn1|nettle|hogweed|gmp|ffi/ {print $3}'); do
    cp -L "$p" "$C/lib/"
done
S=../shared
cp $S/models/stories260K.gguf "$C/shared/models/"
cp $S/vocab/ggml-vocab-llama-spm.gguf "$C/shared/vocab/" # cera synth's tokenizer
# the architecture cases travel in Q8_0 only (the F32 ones would pass the 64 MiB limit)
# (GOLDEN_LLAMA=0: of the synth-llama types only those test_cuda_batch and test_cuda_lora read)
LLAMA_SET="$S/golden/synth-llama-*"
[ "${GOLDEN_LLAMA:-1}" = 0 ] && LLAMA_SET="$S/golden/synth-llama-q4_0.* $S/golden/synth-llama-f32.* $S/golden/synth-llama-q4_k_m.*"
for f in $S/golden/stories260K.p* $LLAMA_SET $S/golden/synth-qwen2-q8_0.* $S/golden/synth-qwen3-q8_0.* \
    $S/golden/synth-granite-q8_0.* $S/golden/synth-lfm2-q8_0.* $S/golden/synth-gemma3-q8_0.* \
    $S/golden/synth-phi3-q8_0.*; do
    cp "$f" "$C/shared/golden/"
done
for g in ${GOLDEN_EXTRA:-}; do cp $S/golden/"$g".* "$C/shared/golden/"; done
# the LoRA cases: the adapters (GGUF and PEFT folders) and llama.cpp's outputs with them
cp tests/lora/data/lfm2-lora.gguf tests/lora/data/gemma3-lora.gguf "$C/shared/golden/" # test_cuda_lora's adapters
cp -r $S/golden/lora-* $S/golden/stories260K.lora-* "$C/shared/golden/"
# lfm2moe: the goldens committed under tests/model/data; device_run.sh makes the synth_models
# fixture's files there with the packed cera (CERA_TEST_SYNTH_DIR, CERA_TEST_DATA_DIR)
mkdir -p "$C/shared/data"
cp -r tests/model/data/lfm2moe "$C/shared/data/"
cp tests/model/data/stories260k.shift-* "$C/shared/data/" # test_cuda_context_shift's references
chmod -R u+w "$C/shared"
if [ -d "$FINAL" ]; then chmod -R u+w "$FINAL"; fi
rm -rf "$FINAL" && mkdir -p "$FINAL"
tar -C "$C" -cf - . | xz -T1 --lzma2=preset=6,dict=256MiB >"$FINAL/pack.tar.xz" # a dictionary that spans the binaries: their kernels are the same bytes
du -sh "$FINAL"
