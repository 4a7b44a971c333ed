#!/usr/bin/env bash
# fuzz.sh SECONDS — builds every libFuzzer harness (tests/fuzz/fuzz_*.c) with clang,
# AddressSanitizer and UndefinedBehaviorSanitizer in build-fuzz/, then runs each one
# for SECONDS (default 60) from its seed corpus: tests/fuzz/corpus/<harness>/ plus, for
# fuzz_gguf, the first KiB of every GGUF file in the shared folder (for fuzz_template and
# fuzz_chat, every golden chat template). Exits non-zero
# when a harness finds a crash (the reproducer is left in build-fuzz/fuzz-artifacts/;
# copy it into the harness's corpus folder so the replay test keeps checking it).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
dir=build-fuzz
shared=${CERA_SHARED_DIR:-$(cd .. && pwd)/shared}

CC=clang cmake -S . -B "$dir" -DCERA_FUZZ=ON -DCERA_WERROR=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
harnesses=()
for src in tests/fuzz/fuzz_*.c; do harnesses+=("$(basename "$src" .c)"); done
cmake --build "$dir" --target "${harnesses[@]}" -j"$(nproc)"

mkdir -p "$dir/fuzz-artifacts"
failed=()
for h in "${harnesses[@]}"; do
    corpus="$dir/fuzz-corpus/$h"
    mkdir -p "$corpus"
    if [ -d "tests/fuzz/corpus/$h" ]; then cp -f "tests/fuzz/corpus/$h"/* "$corpus"/ 2>/dev/null || true; fi
    if { [ "$h" = fuzz_template ] || [ "$h" = fuzz_chat ]; } && [ -d "$shared/golden/templates" ]; then
        for d in "$shared"/golden/templates/*/; do cp -f "$d/template.jinja" "$corpus/golden-$(basename "$d")"; done
    fi
    if [ "$h" = fuzz_gguf ] && [ -d "$shared" ]; then
        for f in "$shared"/models/*.gguf "$shared"/golden/*.gguf "$shared"/vocab/*.gguf; do
            [ -f "$f" ] && head -c 1024 "$f" >"$corpus/head-$(basename "$f")"
        done
    fi
    dict=()
    [ -f "tests/fuzz/$h.dict" ] && dict=(-dict="tests/fuzz/$h.dict")
    echo "=== $h: ${secs}s, $(ls "$corpus" | wc -l) seeds"
    if ! "$dir/tests/fuzz/$h" "$corpus" "${dict[@]}" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
        -max_len=65536 -print_final_stats=1 -artifact_prefix="$dir/fuzz-artifacts/$h-" 2>"$dir/fuzz-$h.log"; then
        tail -n 40 "$dir/fuzz-$h.log"
        failed+=("$h")
    else
        grep -E "stat::number_of_executed_units|cov:" "$dir/fuzz-$h.log" | tail -n 2 || true
    fi
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "fuzz.sh: crashes in: ${failed[*]} (reproducers in $dir/fuzz-artifacts/)" >&2
    exit 1
fi
echo "fuzz.sh: no crashes"
