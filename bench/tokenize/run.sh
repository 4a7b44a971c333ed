#!/usr/bin/env bash
# run.sh [BUILD_DIR] — tokenizer throughput of `cera tokenize` against llama.cpp's
# llama-tokenize on a few MB of mixed text (bench/tokenize/make_corpus.py).
#
# For each vocabulary: cera's own encode time (`--count` measures the encode call only)
# and, for both programs, the wall time of tokenizing the corpus with ids printed to
# /dev/null minus the wall time of a one-byte input (model loading), best of 3. The two
# programs' ids are compared; a difference fails the run. llama-tokenize is taken from
# $LLAMA_TOKENIZE, else $LLAMA_CPP_BIN/, else ../ref/llama.cpp/build/bin/ when present (it
# is never built here). CORPUS_MB sets the corpus size, VOCABS the GGUF files.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
cera=$build/tools/cera/cera
shared=${CERA_SHARED_DIR:-$(cd .. && pwd)/shared}
llama=${LLAMA_TOKENIZE:-${LLAMA_CPP_BIN:-$(cd .. && pwd)/ref/llama.cpp/build/bin}/llama-tokenize}
[ -x "$llama" ] || llama=""
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 bench/tokenize/make_corpus.py "$work/corpus.txt" "${CORPUS_MB:-4}" >/dev/null
printf 'a' >"$work/one.txt"
bytes=$(stat -c %s "$work/corpus.txt")

vocabs=(${VOCABS:-$shared/vocab/ggml-vocab-llama-spm.gguf models/SmolLM2-135M-Instruct.Q4_1.gguf
    $shared/vocab/ggml-vocab-deepseek-llm.gguf $shared/vocab/ggml-vocab-bert-bge.gguf})

# best-of-3 wall seconds of a command
wall() {
    local best=""
    for _ in 1 2 3; do
        local t0 t1
        t0=$(date +%s.%N)
        "$@" >/dev/null 2>&1
        t1=$(date +%s.%N)
        best=$(python3 -c "a=$t1-$t0; b='$best'; print(a if b=='' or a<float(b) else b)")
    done
    echo "$best"
}

echo "corpus: $bytes bytes; cera: $cera; llama-tokenize: ${llama:-absent}"
printf '| vocabulary | tokens | cera encode MB/s | cera wall-load MB/s | llama-tokenize wall-load MB/s | speedup | ids equal |\n'
printf '|---|---|---|---|---|---|---|\n'
status=0
for v in "${vocabs[@]}"; do
    [ -f "$v" ] || { echo "skip $v (absent)" >&2; continue; }
    name=$(basename "$v" .gguf)
    enc=$("$cera" tokenize -m "$v" -f "$work/corpus.txt" --count 2>&1 >/dev/null | sed -n 's/.*(\([0-9.]*\) MB\/s).*/\1/p')
    ntok=$("$cera" tokenize -m "$v" -f "$work/corpus.txt" --count 2>/dev/null)
    c_all=$(wall "$cera" tokenize -m "$v" -f "$work/corpus.txt" --ids)
    c_load=$(wall "$cera" tokenize -m "$v" -f "$work/one.txt" --ids)
    c_mbs=$(python3 -c "print(f'{$bytes/max(1e-9,$c_all-$c_load)/1e6:.2f}')")
    l_mbs="-" speed="-" same="-"
    if [ -n "$llama" ]; then
        l_all=$(wall "$llama" -m "$v" -f "$work/corpus.txt" --ids --log-disable --no-escape)
        l_load=$(wall "$llama" -m "$v" -f "$work/one.txt" --ids --log-disable --no-escape)
        l_mbs=$(python3 -c "print(f'{$bytes/max(1e-9,$l_all-$l_load)/1e6:.2f}')")
        speed=$(python3 -c "print(f'{($l_all-$l_load)/max(1e-9,$c_all-$c_load):.1f}x')")
        "$cera" tokenize -m "$v" -f "$work/corpus.txt" --ids | tr -s ' ' '\n' | sed '/^$/d' >"$work/c.ids"
        "$llama" -m "$v" -f "$work/corpus.txt" --ids --log-disable --no-escape | tr -d '[],' | tr -s ' ' '\n' |
            sed '/^$/d' >"$work/l.ids"
        if cmp -s "$work/c.ids" "$work/l.ids"; then same=yes; else same=NO; status=1; fi
    fi
    printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$name" "$ntok" "$enc" "$c_mbs" "$l_mbs" "$speed" "$same"
done
exit $status
