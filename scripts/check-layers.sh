#!/usr/bin/env bash
# check-layers.sh — fails when a file under src/ includes a header of a higher layer.
#
# Layers, lowest first (a folder may include its own headers, those of its peers on the
# same layer and of any lower layer, never a higher one):
#   0 core
#   1 tensor gguf            (tensor types and the file format know each other)
#   2 tokenizer model sample kv template chat
#   3 lora                   (adapters are validated against the model)
#   4 backend                (the contract in backend/backend.h; cpu/ and cuda/ never include each other)
#   5 engine                 (engine, sessions, batch, generate: the public API)
# tools/ and tests/ sit above everything. A folder missing from the table is an error, so a
# new concern gets its layer when it is added.
set -euo pipefail
cd "$(dirname "$0")/.."
declare -A rank=([core]=0 [tensor]=1 [gguf]=1 [tokenizer]=2 [model]=2 [sample]=2 [kv]=2 [template]=2 [chat]=2
                 [grammar]=2 [lora]=3 [backend]=4 [engine]=5)
bad=0
while IFS= read -r file; do
    dir=${file#src/}
    top=${dir%%/*}
    if [ -z "${rank[$top]+x}" ]; then
        echo "check-layers: src/$top/ has no layer in scripts/check-layers.sh" >&2
        bad=1
        continue
    fi
    sub=$(echo "$dir" | cut -d/ -f2)
    while IFS= read -r inc; do
        itop=${inc%%/*}
        [ -z "${rank[$itop]+x}" ] && continue # a system or public header
        if [ "${rank[$itop]}" -gt "${rank[$top]}" ]; then
            echo "check-layers: $file includes \"$inc\": $itop/ is above $top/" >&2
            bad=1
        fi
        if [ "$top" = backend ] && [ "$itop" = backend ]; then
            isub=$(echo "$inc" | cut -d/ -f2)
            if { [ "$sub" = cpu ] && [ "$isub" = cuda ]; } || { [ "$sub" = cuda ] && [ "$isub" = cpu ]; }; then
                echo "check-layers: $file includes \"$inc\": the CPU and CUDA backends are separate" >&2
                bad=1
            fi
        fi
    done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$file")
done < <(find src -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) | sort)
[ "$bad" -eq 0 ] && echo "check-layers: every include goes down or sideways"
exit "$bad"
