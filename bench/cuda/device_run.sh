#!/usr/bin/env bash
# bench/cuda/device_run.sh — one device-machine session for the CUDA backend: the GPU
# tests, a compute-sanitizer pass, the matvec micro-benchmark and the llama2-7b-shape
# benchmark in every headline type, all in one call (device time is scarce).
#
# The device machine has no pcre2/utf8proc/cJSON and no ../shared, so the binaries are
# built here (bench/cuda/pack.sh) and travel in .devcarry/ (git-ignored) with those
# libraries and the golden files the tests read (CERA_SHARED_DIR=/tmp/devshared).
#
# usage (on the device, from the repo root): bash bench/cuda/device_run.sh [steps]
#   steps: any of tests sanitize matvec bench big lora kv ncu variants mvsweep mvtests profile mvrows mma parallel sbs ppshort serve disk spec (default: tests
#   sanitize matvec bench lora); big runs cuda_bench on the 70B-class shape (BIG_SHAPES); parallel runs cera bench --parallel on cera synth files (PAR_TYPES, PAR_N); sbs runs cera bench
#   and (with LLAMA_CPP_BIN) llama-bench on the same cera synth files (SBS_MODELS "shape:type ..."); ppshort times short
#   prompts (8-128 tokens) on the tensor cores and through cuBLAS (PP_TYPES); serve runs bench/serve/load.py against cera
#   serve for each --itl-target of SERVE_ITL (disk: the prefix cache's disk tier and n-gram speculation, same file; spec: speculative decoding, stories260K and a 7B F16 target with its Q4_0 copy as the draft) (and llama-server with LLAMA_CPP_BIN) on a llama2-7b SERVE_TYPE file; mma checks and
#   times the tensor-core batched matmul (test_cuda_mma, test_cuda_ops, compute-sanitizer memcheck and racecheck over
#   test_cuda_mma's short cases, cuda_bench --mma); mvrows checks and times the several-row matvec (test_cuda_matvec_rows, the
#   sanitizers on two of its types, the one-row tests and kernels it touches, cuda_bench --matvec-rows); kv compares decode at depth 4096 with the tiled and the decode attention kernels
#   and with each cache type of KV_CACHES (default "bf16 q8_0 q4_0"), for the weight types KV_TYPES (default q4_0); ncu times each kernel of one q4_0 decode token (NCU_RUN: of another
#   command); lora runs cuda_lora_bench for LORA_TYPES (default "q4_0 f16"; LORA_AB="VAR=VALUE ...": each again under each setting);
#   mvsweep runs test_cuda_ops, the matvec micro-benchmark and tg128 under each matvec variant of
#   MV_CONFIGS ("0 1 2 3": CERA_CUDA_MV) and prints a table of them last; mvtests runs
#   the golden and engine tests under the ring variants with few blocks (MV_TEST_CONFIGS, "V:GRID ...":
#   CERA_CUDA_MV_GRID=GRID, 0 = as many as fit) and compute-sanitizer over one of them; BENCH_TYPES overrides the
#   bench's type list (default "q4_0 q8_0 f16 bf16 q4_k_m"); results go to $OUT (or /tmp); CARRY names
#   the packed folder (default .devcarry).
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
C=/tmp/devcarry-unpacked
PACK=${PACK:-$ROOT/${CARRY:-.devcarry}/pack.tar.xz} # (PACK: a pack left on the device by an earlier call)
rm -rf "$C" && mkdir -p "$C"
tar -C "$C" -xJf "$PACK" 2>/dev/null ||
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$PACK" "$C" || exit 1
OUT=${OUT:-/tmp/cuda-out}
mkdir -p "$OUT"
STEPS=${*:-tests sanitize matvec bench lora}
ln -sfn "$C/shared" /tmp/devshared
export CERA_TEST_SYNTH_DIR=$C/shared/synth CERA_TEST_DATA_DIR=$C/shared/data # tests/common/testutil.c
CUBLAS_DIR=$(python3 -c 'import nvidia.cublas, os; print(os.path.dirname(nvidia.cublas.__file__) + "/lib")' 2>/dev/null)
export LD_LIBRARY_PATH=$C/lib:/usr/local/cuda/lib64:${CUBLAS_DIR:-}:${LD_LIBRARY_PATH:-}
# the synth_models fixture's files (tests/model/synth_models.cmake), made here by the packed cera
if [ -x "$C/bin/cera" ]; then
    mkdir -p "$C/shared/synth"
    for t in f32 q8_0 q4_0; do
        CERA_SHARED_DIR=/tmp/devshared "$C/bin/cera" synth test-lfm2moe $t -o "$C/shared/synth/lfm2moe-$t.gguf" \
            --seed 1 -t 1 >/dev/null || echo "cera synth test-lfm2moe $t failed"
    done
fi
has() { case " $STEPS " in *" $1 "*) return 0 ;; esac; return 1; }
log() { echo "=== $* ($(date -u +%H:%M:%S))"; }

log "device"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader
ldd "$C/bin/test_cuda_ops" | grep -E "not found|cublas|cudart" || true

if has tests; then
    log "test_cuda_ops"
    timeout 120 "$C/bin/test_cuda_ops" 2>&1 | tee "$OUT/test_cuda_ops.log" | tail -25
    log "test_cuda_golden"
    timeout 240 "$C/bin/test_cuda_golden" 2>&1 | tee "$OUT/test_cuda_golden.log" | tail -45
    log "test_cuda_engine"
    timeout 120 "$C/bin/test_cuda_engine" 2>&1 | tee "$OUT/test_cuda_engine.log" | tail -12
    log "test_cuda_lora"
    timeout 200 "$C/bin/test_cuda_lora" 2>&1 | tee "$OUT/test_cuda_lora.log" | tail -20
    log "test_cuda_attention"
    timeout 120 "$C/bin/test_cuda_attention" 2>&1 | tee "$OUT/test_cuda_attention.log" | grep -E "failed" | tail -12
    log "test_cuda_sample"
    timeout 120 "$C/bin/test_cuda_sample" 2>&1 | tee "$OUT/test_cuda_sample.log" | tail -8
    log "test_cuda_batch"
    timeout 200 "$C/bin/test_cuda_batch" 2>&1 | tee "$OUT/test_cuda_batch.log" | tail -15
    if [ -x "$C/bin/test_cuda_lora_moe" ]; then
        log "test_cuda_lora_moe"
        timeout 120 "$C/bin/test_cuda_lora_moe" cuda 2>&1 | tee "$OUT/test_cuda_lora_moe.log" | tail -8
    fi
    for t in test_cuda_mma test_cuda_embed test_cuda_session_state test_cuda_context_shift; do # when packed
        [ -x "$C/bin/$t" ] || continue
        log "$t"
        case $t in test_cuda_mma | test_cuda_embed) a= ;; *) a=cuda ;; esac # the model tests name the backend
        timeout 240 "$C/bin/$t" $a 2>&1 | tee "$OUT/$t.log" | tail -8
    done
fi
if has sanitize; then
    log "compute-sanitizer memcheck"
    CS=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
    timeout 150 "$CS" --tool memcheck --error-exitcode 9 "$C/bin/test_cuda_golden" stories260K.p2 2>&1 |
        tee "$OUT/sanitize.log" | tail -6
    timeout 100 "$CS" --tool memcheck --error-exitcode 9 "$C/bin/test_cuda_golden" synth-qwen3-q8 2>&1 |
        tee -a "$OUT/sanitize.log" | tail -6
    timeout 60 "$CS" --tool racecheck --error-exitcode 9 "$C/bin/test_cuda_golden" synth-llama-q4_0 2>&1 |
        tee -a "$OUT/sanitize.log" | tail -4
    timeout 100 "$CS" --tool memcheck --error-exitcode 9 "$C/bin/test_cuda_golden" lfm2moe/q4_0 2>&1 |
        tee -a "$OUT/sanitize.log" | tail -3
    if [ -x "$C/bin/test_cuda_lora_moe" ]; then
        timeout 150 "$CS" --tool memcheck --error-exitcode 9 "$C/bin/test_cuda_lora_moe" cuda 2>&1 |
            tee -a "$OUT/sanitize.log" | tail -3
    fi
    timeout 150 "$CS" --tool memcheck --error-exitcode 9 "$C/bin/test_cuda_lora" stories 2>&1 |
        tee -a "$OUT/sanitize.log" | tail -3
    timeout 150 "$CS" --tool memcheck --error-exitcode 9 "$C/bin/test_cuda_attention" 2 2>&1 |
        tee -a "$OUT/sanitize.log" | tail -3
    timeout 150 "$CS" --tool racecheck --error-exitcode 9 "$C/bin/test_cuda_attention" 1 2>&1 |
        tee -a "$OUT/sanitize.log" | tail -3
    timeout 150 "$CS" --tool memcheck --error-exitcode 9 "$C/bin/test_cuda_sample" 2>&1 |
        tee -a "$OUT/sanitize.log" | tail -3
fi
if has kv; then
    log "decode at depth 4096: the tiled kernel (CERA_CUDA_ATT_DEC=0), the decode kernel, the other cache types"
    for t in ${KV_TYPES:-q4_0}; do
        CERA_CUDA_ATT_DEC=0 timeout 100 "$C/bin/cuda_bench" --synth "$t" -p 0 -n 128 -d 4096 -r 2 --bw-gib 2 2>&1 |
            tee -a "$OUT/kv.log" | grep "@"
        timeout 100 "$C/bin/cuda_bench" --synth "$t" -p 0 -n 128 -d 4096 -r 2 --bw-gib 2 2>&1 | tee -a "$OUT/kv.log" |
            grep "tg"
        for c in ${KV_CACHES:-bf16 q8_0 q4_0}; do
            timeout 100 "$C/bin/cuda_bench" --synth "$t" -p 512 -n 128 -d 4096 -r 2 --bw-gib 2 --kv "$c" 2>&1 |
                tee -a "$OUT/kv.log" | grep "|"
        done
    done
fi
if has matvec; then
    log "matvec micro-benchmark"
    timeout 120 "$C/bin/cuda_bench" --matvec 2>&1 | tee "$OUT/matvec.log"
fi
if has bench; then
    log "llama2-7b shape"
    hdr=--md-header
    for t in ${BENCH_TYPES:-q4_0 q8_0 f16 bf16 q4_k_m}; do
        timeout 150 "$C/bin/cuda_bench" --synth "$t" -p 512 -n 128 -d 4096 -r 3 --bw-gib 4 $hdr 2>&1 |
            tee -a "$OUT/bench.log"
        hdr=
    done
fi
if has big; then
    # the larger shapes on the same kernels (BIG_SHAPES "shape:type ...", default the 70B class in
    # Q4_0, about 40 GB), pp512 / tg128 / tg128 at depth BIG_DEPTH
    log "larger shapes"
    for st in ${BIG_SHAPES:-llama-3.1-70b:q4_0}; do
        timeout 300 "$C/bin/cuda_bench" --synth "${st##*:}" --shape "${st%%:*}" -p 512 -n 128 \
            -d "${BIG_DEPTH:-4096}" -r "${BIG_REPS:-2}" --bw-gib 4 --md-header 2>&1 | tee -a "$OUT/big.log"
    done
fi
if has parallel; then
    # N sequences decoding together through the public batch API, as llama-batched-bench
    # -npp 128 -ntg 128 -npl N (../shared/bench/llamacpp-h200.md): a Llama-2-7B-shape file
    # made here by cera synth, with the multi-row decode path and without it
    # (CERA_CUDA_DECODE_ROWS=0: every batch of 2+ tokens through cuBLAS)
    log "batched decode (cera bench --parallel)"
    for t in ${PAR_TYPES:-q4_0 f16}; do
        f=/tmp/llama2-7b-$t.gguf
        [ -s "$f" ] || CERA_SHARED_DIR=/tmp/devshared timeout 300 "$C/bin/cera" synth llama2-7b "$t" -o "$f" 2>&1 | tail -1
        for rows in 1 0; do
            echo "-- $t, decode rows $rows"
            CERA_CUDA_DECODE_ROWS=$rows timeout 300 "$C/bin/cera" bench -m "$f" --device cuda -p 128 -n 128 -r 2 \
                --parallel ${PAR_N:-1,2,4,8,16,32,64} 2>&1 | tee -a "$OUT/parallel.log" | grep "|"
        done
    done
fi
if has sbs; then
    # cera next to llama.cpp on the same cera synth files (SBS_MODELS: "shape:type ..."), as
    # llama-bench -ngl 99 -fa 1 -p 512 -n 128 -r 3; LLAMA_CPP_BIN: a llama.cpp CUDA build's bin
    # folder on the device (none here builds it: bench/README.md), else cera alone
    log "side by side (cera bench vs llama-bench)"
    for mt in ${SBS_MODELS:-gemma-3-1b:q4_0}; do
        shape=${mt%%:*} t=${mt##*:} f=/tmp/$shape-$t.gguf
        [ -s "$f" ] || CERA_SHARED_DIR=/tmp/devshared timeout 300 "$C/bin/cera" synth "$shape" "$t" -o "$f" 2>&1 | tail -1
        echo "-- $shape $t: cera"
        timeout 300 "$C/bin/cera" bench -m "$f" --device cuda -p 512 -n 128 -r 3 2>&1 | tee -a "$OUT/sbs.log" | grep "|"
        if [ -n "${LLAMA_CPP_BIN:-}" ]; then
            echo "-- $shape $t: llama.cpp"
            LD_LIBRARY_PATH=$LLAMA_CPP_BIN:$LD_LIBRARY_PATH timeout 300 "$LLAMA_CPP_BIN/llama-bench" -m "$f" -ngl 99 \
                -fa 1 -p 512 -n 128 -r 3 2>&1 | tee -a "$OUT/sbs.log" | grep "|"
        fi
    done
fi
if has lora; then
    log "LoRA adapters: rank 16 on all 7 projections (cuda_lora_bench)"
    for t in ${LORA_TYPES:-q4_0 f16}; do
        timeout 200 "$C/bin/cuda_lora_bench" --synth "$t" -r 16 -p 512 -n 128 -b 32 -s 32 --reps 3 2>&1 |
            tee -a "$OUT/lora.log"
        for m in ${LORA_AB:-}; do # the same under another setting (A/B runs)
            echo "-- $m"
            env "$m" timeout 200 "$C/bin/cuda_lora_bench" --synth "$t" -r 16 -p 512 -n 128 -b 32 -s 32 --reps 3 \
                2>&1 | tee -a "$OUT/lora.log"
        done
    done
fi
if has variants; then
    log "matvec variants (CERA_CUDA_MV=0/1)"
    for v in 0 1; do
        echo "-- variant $v"
        CERA_CUDA_MV=$v timeout 60 "$C/bin/cuda_bench" --matvec --bw-gib 1 2>&1 | grep -E "q4_0|q8_0|f16"
        for t in q4_0 q8_0 f16; do
            CERA_CUDA_MV=$v timeout 60 "$C/bin/cuda_bench" --synth $t -p 512 -n 128 -d 4096 -r 2 --bw-gib 1 2>&1 |
                grep tg128
        done
    done
    timeout 60 "$C/bin/cuda_bench" --synth q4_0 -p 512 -n 128 -d 0 -r 2 --bw-gib 1 --no-pdl 2>&1 | grep tg128
fi
if has mvsweep; then
    log "matvec variants (CERA_CUDA_MV)"
    : >"$OUT/mvsweep.txt"
    for cfg in ${MV_CONFIGS:-0 1 2 3}; do
        export CERA_CUDA_MV=$cfg
        ops=$(timeout 60 "$C/bin/test_cuda_ops" 2>&1 | tee "$OUT/ops-$cfg.log" | tail -1)
        echo "-- $cfg test_cuda_ops: $ops" | tee -a "$OUT/mvsweep.txt"
        timeout 60 "$C/bin/cuda_bench" --matvec --bw-gib 1 --mv-types "${MV_TYPES:-q4_0,q8_0,f16,bf16,q4_k,q6_k}" 2>&1 |
            grep -E "^matvec|^bandwidth" | sed "s/^/$cfg /" | tee -a "$OUT/mvsweep.txt"
        for t in ${TG_TYPES:-q4_0 q8_0 f16 bf16}; do
            timeout 60 "$C/bin/cuda_bench" --synth "$t" -p 0 -n 128 -d 0 -r 2 --bw-gib 1 2>&1 | grep tg128 |
                sed "s/^/$cfg /" | tee -a "$OUT/mvsweep.txt"
        done
    done
    unset CERA_CUDA_MV
    log "matvec variants: summary"
    grep -E "test_cuda_ops|^[0-9]+ matvec|tg128" "$OUT/mvsweep.txt"
fi
if has mvtests; then
    log "golden and engine tests under the ring variants (CERA_CUDA_MV:CERA_CUDA_MV_GRID)"
    for cfg in ${MV_TEST_CONFIGS:-2:0 2:3 3:0 3:5}; do
        v=${cfg%%:*} g=${cfg##*:}
        gold=$(CERA_CUDA_MV=$v CERA_CUDA_MV_GRID=$g timeout 60 "$C/bin/test_cuda_golden" 2>&1 |
            tee "$OUT/golden-$v-$g.log" | tail -1)
        eng=$(CERA_CUDA_MV=$v CERA_CUDA_MV_GRID=$g timeout 60 "$C/bin/test_cuda_engine" 2>&1 |
            tee "$OUT/engine-$v-$g.log" | tail -1)
        echo "-- $cfg test_cuda_golden: $gold; test_cuda_engine: $eng"
    done
    CS=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
    for v in 2 3; do
        CERA_CUDA_MV=$v CERA_CUDA_MV_GRID=3 timeout 60 "$CS" --tool memcheck --error-exitcode 9 \
            "$C/bin/test_cuda_golden" synth-llama-q4_0 2>&1 | tee -a "$OUT/mvsanitize.log" | tail -2
        CERA_CUDA_MV=$v CERA_CUDA_MV_GRID=3 timeout 60 "$CS" --tool racecheck --error-exitcode 9 \
            "$C/bin/test_cuda_golden" synth-llama-f16 2>&1 | tee -a "$OUT/mvsanitize.log" | tail -2
    done
fi
if has profile; then
    log "prefill phases (CERA_CUDA_PROFILE)"
    for t in q4_0 f16; do
        CERA_CUDA_PROFILE=1 timeout 60 "$C/bin/cuda_bench" --synth $t -p 512 -n 16 -d 0 -r 1 --bw-gib 1 2>&1 |
            grep -E "prefill 512|pp512" | tail -2
    done
    timeout 60 "$C/bin/cuda_bench" --synth q4_0 -p 512 -n 128 -d 0 -r 2 --bw-gib 1 --no-pdl 2>&1 | grep tg128
fi
if has ncu; then
    log "decode kernels of one token (Nsight Compute, each kernel alone, q4_0, depth ~30)"
    NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
    # warm-up 8 tokens + 16: skip into the middle and profile one token's launches
    # NCU_RUN: another program and its arguments instead (NCU_SKIP, NCU_COUNT: the launches)
    # NCU_FILTER: only the kernels whose names match this regex; NCU_FULL=1: keep template arguments
    # shellcheck disable=SC2086
    timeout 200 "$NCU" --clock-control none --graph-profiling node --launch-skip "${NCU_SKIP:-3500}" \
        --launch-count "${NCU_COUNT:-260}" ${NCU_FILTER:+--kernel-name "regex:$NCU_FILTER"} \
        --metrics gpu__time_duration.sum --csv \
        ${NCU_RUN:-"$C/bin/cuda_bench" --synth q4_0 -p 0 -n 16 -d 0 -r 1 --bw-gib 1} >"$OUT/ncu.csv" 2>/dev/null
    python3 - "$OUT/ncu.csv" <<'PY'
import csv, sys, collections, re, os
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
hdr = rows[0]; ki = hdr.index("Kernel Name"); vi = hdr.index("Metric Value"); ui = hdr.index("Metric Unit")
t = collections.defaultdict(float); n = collections.Counter()
for r in rows[1:]:
    v = float(r[vi].replace(",", "")) * {"ns": 1e-3, "nsecond": 1e-3, "ms": 1e3, "msecond": 1e3}.get(r[ui], 1.0)
    k = re.sub(r"\(.*", "", r[ki]) if os.environ.get("NCU_FULL") else re.sub(r"[<(].*", "", r[ki])
    t[k] += v; n[k] += 1
tot = sum(t.values())
for k in sorted(t, key=lambda k: -t[k]):
    print(f"{k:40s} {n[k]:4d} launches {t[k]:8.1f} us  {t[k]/n[k]:6.2f} us each  {100*t[k]/tot:5.1f} %")
print(f"sum {tot:.1f} us over {sum(n.values())} launches")
PY
fi
if has mvrows; then
    log "several-row matvec: test_cuda_matvec_rows"
    timeout 150 "$C/bin/test_cuda_matvec_rows" 2>&1 | tee "$OUT/test_cuda_matvec_rows.log" | tail -25
    log "one-row paths it touches: test_cuda_ops, the synth-llama goldens"
    timeout 60 "$C/bin/test_cuda_ops" 2>&1 | tee "$OUT/test_cuda_ops.log" | tail -3
    timeout 120 "$C/bin/test_cuda_golden" synth-llama 2>&1 | tee "$OUT/test_cuda_golden.log" | tail -3
    CS=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
    log "compute-sanitizer: memcheck (q4_0: ring kernel, q6_k: register kernel), racecheck (f16)"
    for t in q4_0 q6_k; do
        timeout 60 "$CS" --tool memcheck --error-exitcode 9 "$C/bin/test_cuda_matvec_rows" $t 2>&1 |
            tee -a "$OUT/mvrows-sanitize.log" | tail -2
    done
    # one block: the tiles of a launch stream through it, reusing its result buffers
    CERA_CUDA_MV_GRID=1 timeout 60 "$CS" --tool racecheck --error-exitcode 9 "$C/bin/test_cuda_matvec_rows" f16 2>&1 |
        tee -a "$OUT/mvrows-sanitize.log" | tail -2
    log "matvec micro-benchmark: one row, then several"
    timeout 60 "$C/bin/cuda_bench" --matvec --bw-gib 2 --mv-types q4_0,q8_0,f16,bf16,q4_k,q6_k 2>&1 | tee "$OUT/matvec.log"
    timeout 150 "$C/bin/cuda_bench" --matvec-rows --bw-gib 2 2>&1 | tee "$OUT/matvec-rows.log"
    for t in ${TG_TYPES:-q4_0 f16}; do
        timeout 60 "$C/bin/cuda_bench" --synth "$t" -p 0 -n 128 -d 0 -r 2 --bw-gib 1 2>&1 | grep tg128 | tee -a "$OUT/tg.log"
    done
fi
if has ppshort; then
    # short prompt chunks (a question after a cached system prompt, a chunk beside decode rows):
    # the tensor-core matmul against every weight dequantized for cuBLAS (--gemm)
    log "short prefill: cu_mma_q8 vs cuBLAS (PP_TYPES)"
    for t in ${PP_TYPES:-q4_0 q8_0}; do
        for p in 8 16 32 64 128; do
            for g in "" --gemm; do
                timeout 60 "$C/bin/cuda_bench" --synth "$t" -p $p -n 8 -d 0 -r 5 --bw-gib 1 $g 2>&1 |
                    tee -a "$OUT/ppshort.log" | grep "pp$p"
            done
        done
    done
fi
if has disk; then
    # the disk tier of cera serve's prefix cache (bench/serve/disk_ttft.py) on a llama2-7b-shape cera synth
    # file (SERVE_TYPE, default q4_0): a cold prompt against a new process loading it from --cache-dir;
    # then cera run with and without n-gram speculation on it (the same text? the speed)
    t=${SERVE_TYPE:-q4_0} f=/tmp/l7-${SERVE_TYPE:-q4_0}.gguf
    [ -s "$f" ] || CERA_SHARED_DIR=/tmp/devshared timeout 300 "$C/bin/cera" synth llama2-7b "$t" -o "$f" 2>&1 | tail -1
    log "disk tier: cold prefill against a disk hit"
    for x in "" "--cache-any"; do
        timeout 400 python3 "$ROOT/bench/serve/disk_ttft.py" "$C/bin/cera" "$f" --tokens 500,1500 --repeat 2 \
            --threads 8 --text "$ROOT/README.md" --extra="--device cuda -c 4096 $x" 2>&1 | tee -a "$OUT/disk.log"
    done
    log "speculative decoding (n-gram) on the GPU"
    for fl in "" "--spec-type ngram-simple --spec-ngram-simple-size-n 4"; do
        "$C/bin/cera" run -m "$f" --device cuda -f "$ROOT/README.md" -c 16384 -n 256 --temp 0 $fl >"$OUT/spec.txt" \
            2>"$OUT/spec.err"
        echo "[$fl] $(grep -o 'generation.*tok/s' "$OUT/spec.err") $(grep -o 'speculative.*' "$OUT/spec.err")" \
            "$(md5sum <"$OUT/spec.txt" | cut -c1-8)" | tee -a "$OUT/disk.log"
    done
fi
if has spec; then
    # speculative decoding on the GPU: stories260K (a real model, small enough to carry) with n-gram
    # lookup (none, ngram-auto, ngram-simple 4) on a story prompt, and a llama2-7b-shape cera synth
    # F16 file (SPEC_TARGET) drafted for by its Q4_0 copy (SPEC_DRAFT: the same random weights,
    # quantized) with -md; each text's md5 with and without speculation
    log "speculative decoding on the GPU"
    sm=$C/shared/models/stories260K.gguf
    for fl in "--spec-type none" "" "--spec-type ngram-simple --spec-ngram-simple-size-n 4"; do
        "$C/bin/cera" run -m "$sm" --device cuda -p "Once upon a time" -n 400 --temp 0 --ignore-eos $fl \
            >"$OUT/spec.txt" 2>"$OUT/spec.err"
        echo "stories260K [$fl] $(grep -o 'generation.*tok/s' "$OUT/spec.err") $(grep -o 'speculative.*' "$OUT/spec.err")" \
            "$(md5sum <"$OUT/spec.txt" | cut -c1-8)" | tee -a "$OUT/spec.log"
    done
    # real models brought to the device (SPEC_MODELS, GGUF paths there): the code-editing and the
    # free-text prompt of bench/spec, with each kind of n-gram lookup
    for m in ${SPEC_MODELS:-}; do
        for pr in code free; do
            if [ $pr = code ]; then P=(-f "$ROOT/bench/spec/code.txt"); else P=(-p "The history of the city of Lyon begins"); fi
            for fl in "--spec-type none" "" "--spec-type ngram-simple --draft-max 48" "--spec-type ngram-simple --spec-ngram-simple-size-n 4 --draft-max 6"; do
                "$C/bin/cera" run -m "$m" --device cuda "${P[@]}" -n 200 --temp 0 --ignore-eos $fl >"$OUT/spec.txt" 2>"$OUT/spec.err"
                echo "$(basename "$m") $pr [$fl] $(grep -o 'generation.*tok/s' "$OUT/spec.err") $(grep -o 'speculative.*' "$OUT/spec.err")" \
                    "$(md5sum <"$OUT/spec.txt" | cut -c1-8)" | tee -a "$OUT/spec.log"
            done
        done
    done
    tt=${SPEC_TARGET:-f16} dt=${SPEC_DRAFT:-q4_0}
    [ "${SPEC_L7:-1}" = 1 ] || tt= dt=
    for x in $tt $dt; do
        [ -s /tmp/l7-$x.gguf ] || CERA_SHARED_DIR=/tmp/devshared timeout 300 "$C/bin/cera" synth llama2-7b $x -o /tmp/l7-$x.gguf 2>&1 | tail -1
    done
    [ -n "$tt" ] && for fl in "--spec-type none" "" "--spec-type none -md /tmp/l7-$dt.gguf" "-md /tmp/l7-$dt.gguf --draft-max 4"; do
        timeout 200 "$C/bin/cera" run -m /tmp/l7-$tt.gguf --device cuda -f "$ROOT/README.md" -c 16384 -n 128 --temp 0 \
            --ignore-eos $fl >"$OUT/spec.txt" 2>"$OUT/spec.err"
        echo "l7-$tt [$fl] $(grep -o 'generation.*tok/s' "$OUT/spec.err") $(grep -o 'speculative.*' "$OUT/spec.err")" \
            "$(md5sum <"$OUT/spec.txt" | cut -c1-8)" | tee -a "$OUT/spec.log"
    done
fi
if has serve; then
    # cera serve on a llama2-7b-shape cera synth file (SERVE_TYPE, default q4_0) and the load
    # generator (bench/serve/load.py) on the device's CPU: for each of SERVE_ITL (ms; 0: no
    # target) the ShareGPT-like levels SERVE_STREAMS and the shared-prefix test; with
    # LLAMA_CPP_BIN (a llama.cpp CUDA build's bin folder on the device) llama-server after it
    t=${SERVE_TYPE:-q4_0} f=/tmp/l7-${SERVE_TYPE:-q4_0}.gguf
    [ -s "$f" ] || CERA_SHARED_DIR=/tmp/devshared timeout 300 "$C/bin/cera" synth llama2-7b "$t" -o "$f" 2>&1 | tail -1
    wait_up() { # port: until /health answers (at most 120 s)
        for _ in $(seq 240); do
            python3 -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:$1/health', timeout=1)" \
                2>/dev/null && return 0
            sleep 0.5
        done
        return 1
    }
    load() { # url
        timeout 400 python3 "$ROOT/bench/serve/load.py" "$1" "l7-$t" --streams "${SERVE_STREAMS:-1,8,32,64}" \
            --requests-per-stream 2 --max-tokens 128 --shared-prefix 1000 2>&1 | tee -a "$OUT/serve.log"
    }
    for itl in ${SERVE_ITL:-0}; do
        log "cera serve --itl-target $itl"
        "$C/bin/cera" serve -m "$f" --device cuda --parallel 64 -c 4096 --kv-size 32G --port 8090 \
            --itl-target "$itl" --verbose >"$OUT/cera-serve-$itl.log" 2>&1 &
        pid=$!
        wait_up 8090 && load http://127.0.0.1:8090 || tail -5 "$OUT/cera-serve-$itl.log"
        kill $pid
        wait $pid 2>/dev/null
    done
    if [ -n "${LLAMA_CPP_BIN:-}" ]; then
        log "llama-server"
        LD_LIBRARY_PATH=$LLAMA_CPP_BIN:$LD_LIBRARY_PATH "$LLAMA_CPP_BIN/llama-server" -m "$f" -ngl 99 -fa on -np 64 \
            -c 65536 -kvu --cont-batching --port 8091 >"$OUT/llama-server.log" 2>&1 &
        pid=$!
        wait_up 8091 && load http://127.0.0.1:8091 || tail -5 "$OUT/llama-server.log"
        kill $pid
        wait $pid 2>/dev/null
    fi
fi
log "done"
if has mma; then
    log "tensor-core batched matmul: test_cuda_mma"
    timeout 240 "$C/bin/test_cuda_mma" 2>&1 | tee "$OUT/test_cuda_mma.log" | tail -50
    log "test_cuda_ops"
    timeout 90 "$C/bin/test_cuda_ops" 2>&1 | tee "$OUT/test_cuda_ops.log" | tail -3
    CS=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
    log "compute-sanitizer memcheck, racecheck: test_cuda_mma short"
    timeout 90 "$CS" --tool memcheck --error-exitcode 9 "$C/bin/test_cuda_mma" short 2>&1 |
        tee "$OUT/mma-sanitize.log" | tail -2
    timeout 90 "$CS" --tool racecheck --error-exitcode 9 "$C/bin/test_cuda_mma" short 2>&1 |
        tee -a "$OUT/mma-sanitize.log" | tail -2
    log "cuda_bench --mma"
    timeout 200 "$C/bin/cuda_bench" --mma --bw-gib 2 2>&1 | tee "$OUT/mma-bench.log"
fi
