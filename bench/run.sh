#!/usr/bin/env bash
# bench/run.sh — cera next to llama.cpp on this machine, written into bench/RESULTS.md.
#
# In one run, on the same machine and thread count: builds cera (not llama.cpp: point
# LLAMA_CPP_BIN at a build of it, see bench/README.md), measures the memory read
# bandwidth (bench/membw), makes the models (SmolLM2-135M Q4_1 from models/; a
# random-weight model of a ~1B llama shape from `cera synth` in Q4_0, Q8_0 and F16, and
# Q4_K_M made by llama-quantize from the F16 file, since that is llama.cpp's mix),
# runs `llama-bench -o json` and `cera bench -o json` on each with the same -p/-n/-t/-r,
# and replaces the CPU section of bench/RESULTS.md with the side-by-side table (plus
# machine, date, commits and the exact commands). Raw JSON stays in the work folder.
#
# usage: LLAMA_CPP_BIN=/path/to/llama.cpp/build/bin bench/run.sh [options]
#   -t N         threads for both engines (default: all cores)
#   -r N         repetitions per test (default 2)
#   -p N         prompt length for pp (default 512)
#   -n N         generated tokens for tg (default 128)
#   --p-1b N     prompt length for the ~1B models (default: -p; pp512 on a few cores is slow)
#   --shape S    the ~1B shape for cera synth (default llama-3.2-1b)
#   --types L    comma list among q4_0,q8_0,q4_k_m,f16 (default: all four)
#   --work DIR   models and raw results (default /tmp/cera-bench)
#   --no-smollm  skip SmolLM2
#   --no-write   print the section instead of writing RESULTS.md
#   --no-build   use the cera already built in CERA_BUILD
# Environment: CERA_BUILD (build folder, default build-bench), CMAKE_ARGS (extra
# configure arguments, e.g. -DCERA_NATIVE=ON), CERA_COMMIT (what to report as the
# commit when --no-build uses a cera built from elsewhere).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
THREADS=$(nproc)
REPS=2
P=512
N=128
P1B=
SHAPE=llama-3.2-1b
TYPES=q4_0,q8_0,q4_k_m,f16
WORK=/tmp/cera-bench
SMOLLM=1
WRITE=1
BUILD_CERA=1
ARGS="$*"

die() { echo "bench/run.sh: $*" >&2; exit 1; }
while [ $# -gt 0 ]; do
  case "$1" in
    -t) THREADS=$2; shift 2 ;;
    -r) REPS=$2; shift 2 ;;
    -p) P=$2; shift 2 ;;
    -n) N=$2; shift 2 ;;
    --p-1b) P1B=$2; shift 2 ;;
    --shape) SHAPE=$2; shift 2 ;;
    --types) TYPES=$2; shift 2 ;;
    --work) WORK=$2; shift 2 ;;
    --no-smollm) SMOLLM=0; shift ;;
    --no-write) WRITE=0; shift ;;
    --no-build) BUILD_CERA=0; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
done
P1B=${P1B:-$P}
: "${LLAMA_CPP_BIN:?set LLAMA_CPP_BIN to the folder holding llama-bench and llama-quantize (see bench/README.md)}"
[ -x "$LLAMA_CPP_BIN/llama-bench" ] || die "no llama-bench in $LLAMA_CPP_BIN"
command -v python3 >/dev/null || die "python3 is needed to read the JSON results"
BUILD=${CERA_BUILD:-$ROOT/build-bench}
mkdir -p "$WORK/results"

log() { echo "[bench $(date -u +%H:%M:%S)] $*" >&2; }

# ---- build cera -----------------------------------------------------------------
if [ "$BUILD_CERA" = 1 ]; then
  log "building cera in $BUILD"
  # shellcheck disable=SC2086 # CMAKE_ARGS is a list of arguments
  cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release ${CMAKE_ARGS:-} >/dev/null
  cmake --build "$BUILD" --target cera membw -j "$THREADS" >/dev/null
fi
CERA=$BUILD/tools/cera/cera
if [ ! -x "$CERA" ] || [ ! -x "$BUILD/bench/membw" ]; then die "no cera or membw in $BUILD"; fi
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
START=$(date +%s)

# ---- read bandwidth ---------------------------------------------------------------
log "measuring read bandwidth with $THREADS threads"
MEMBW_JSON=$("$BUILD/bench/membw" -t "$THREADS" -s 1024 -r 10 --json)
MEMBW=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["read_gbps"])' "$MEMBW_JSON")
log "read bandwidth $MEMBW GB/s"

# ---- models -------------------------------------------------------------------------
MODELS=()   # "label|path"
if [ "$SMOLLM" = 1 ]; then
  SMOL=$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf
  if [ -f "$SMOL" ]; then MODELS+=("SmolLM2-135M Q4_1|$SMOL"); else log "skipping SmolLM2: $SMOL missing (scripts/setup.sh fetches it)"; fi
fi
synth() { # synth TYPE -> path (made once; same seed every time)
  local out=$WORK/$SHAPE-$1.gguf
  [ -f "$out" ] || "$CERA" synth "$SHAPE" "$1" -o "$out" --seed 1 -t "$THREADS" >&2
  echo "$out"
}
IFS=, read -r -a TYPE_LIST <<<"$TYPES"
for t in "${TYPE_LIST[@]}"; do
  case "$t" in
    q4_0|q8_0|f16) MODELS+=("$SHAPE ${t^^} (random)|$(synth "$t")") ;;
    q4_k_m)
      out=$WORK/$SHAPE-q4_k_m.gguf
      if [ ! -f "$out" ]; then
        f16=$(synth f16)
        log "llama-quantize $f16 -> Q4_K_M"
        "$LLAMA_CPP_BIN/llama-quantize" "$f16" "$out" Q4_K_M "$THREADS" >"$WORK/results/quantize.log" 2>&1 \
          || die "llama-quantize failed (see $WORK/results/quantize.log)"
      fi
      MODELS+=("$SHAPE Q4_K_M (random, llama-quantize)|$out") ;;
    *) die "unknown type '$t' (q4_0, q8_0, q4_k_m, f16)" ;;
  esac
done

# ---- runs ---------------------------------------------------------------------------
ROWS=$WORK/results/rows.txt
: >"$ROWS"
i=0
for m in "${MODELS[@]}"; do
  label=${m%%|*}
  path=${m#*|}
  p=$P
  case "$label" in SmolLM2*) ;; *) p=$P1B ;; esac
  i=$((i + 1))
  lj=$WORK/results/$i-llama.json
  cj=$WORK/results/$i-cera.json
  log "$label: llama-bench -p $p -n $N -t $THREADS -r $REPS"
  "$LLAMA_CPP_BIN/llama-bench" -m "$path" -p "$p" -n "$N" -t "$THREADS" -r "$REPS" -o json >"$lj" 2>"$lj.log" \
    || { log "llama-bench failed on $label (see $lj.log)"; echo "[]" >"$lj"; }
  log "$label: cera bench -p $p -n $N -t $THREADS -r $REPS"
  "$CERA" bench -m "$path" -p "$p" -n "$N" -t "$THREADS" -r "$REPS" --device cpu -o json >"$cj" 2>"$cj.log" \
    || { log "cera bench failed on $label (see $cj.log)"; echo "[]" >"$cj"; }
  printf '%s\t%s\t%s\t%s\n' "$label" "$path" "$lj" "$cj" >>"$ROWS"
done

# ---- the section ---------------------------------------------------------------------
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
BUSY=
if awk -v a="${LOAD_BEFORE%% *}" -v b="${LOAD_AFTER%% *}" -v n="$(nproc)" 'BEGIN { exit !(a > n || b > n) }'; then
  BUSY="
- **The machine was oversubscribed (load above its $(nproc) cores).** Engines that wait for descheduled
  threads at each barrier lose the most, and the bandwidth figure is depressed too (shares above 100 %):
  compare on an idle machine, or with one thread, before drawing conclusions."
fi
MINUTES=$(( ($(date +%s) - START + 59) / 60 ))
CPU_NAME=$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1)
MEM_GB=$(awk '/MemTotal/ {printf "%.0f", $2 / 1048576}' /proc/meminfo)
if [ -n "${CERA_COMMIT:-}" ]; then
  COMMIT=$CERA_COMMIT # the caller built cera elsewhere (--no-build) and says from what
else
  COMMIT=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
  git -C "$ROOT" diff --quiet HEAD 2>/dev/null || COMMIT="$COMMIT (with uncommitted changes)"
fi
SECTION=$WORK/results/section.md
python3 - "$ROWS" "$MEMBW" >"$SECTION" <<PY
import json, sys
rows, membw = sys.argv[1], float(sys.argv[2])
def load(path):
    try:
        with open(path) as f: return json.load(f)
    except Exception: return []
def test_name(o):
    n = "pp%d" % o["n_prompt"] if o["n_prompt"] else "tg%d" % o["n_gen"]
    return n + (" @ d%d" % o["n_depth"] if o.get("n_depth") else "")
print("""<!-- cpu-bench:begin (written by bench/run.sh; edit the script, not this section) -->
## CPU: cera vs llama.cpp

- Machine: ${CPU_NAME:-unknown CPU}, $(nproc) cores, ${MEM_GB} GB RAM, $(uname -sr); measured read bandwidth
  **${MEMBW} GB/s** with $THREADS threads (bench/membw, best of 10 passes over 1 GiB).
- Date: $(date -u '+%Y-%m-%d %H:%M UTC') ($MINUTES min); cera commit $COMMIT; llama.cpp from \`$LLAMA_CPP_BIN\`.
  Load average (1, 5, 15 min) before: $LOAD_BEFORE, after: $LOAD_AFTER (a shared machine makes numbers noisy).
- Command: \`LLAMA_CPP_BIN=$LLAMA_CPP_BIN bench/run.sh $ARGS\`: both engines with \`-t $THREADS -r $REPS -n $N\`,
  \`-p $P\` (SmolLM2) and \`-p $P1B\` ($SHAPE), as \`llama-bench -o json\` and \`cera bench --device cpu -o json\`.
- t/s: mean ± sample standard deviation over the repetitions. GB/s (tg only): weight bytes read per
  generated token (every tensor; one row of an untied token-embedding table) × tokens/s, the same bytes for
  both engines, and in parentheses the share of the measured read bandwidth.$BUSY
""")
print("| model | size | test | llama.cpp t/s | cera t/s | cera / llama.cpp | llama.cpp GB/s | cera GB/s |")
print("|---|---:|---|---:|---:|---:|---:|---:|")
for line in open(rows):
    label, path, lj, cj = line.rstrip("\n").split("\t")
    ll, cc = load(lj), load(cj)
    tests = []
    for o in ll + cc:
        k = (o["n_prompt"], o["n_gen"], o.get("n_depth", 0))
        if k not in tests: tests.append(k)
    size = next((o["model_size"] for o in ll + cc), 0) / 2**30
    bpt = next((o["weight_bytes_per_token"] for o in cc if "weight_bytes_per_token" in o), None)
    for k in tests:
        l = next((o for o in ll if (o["n_prompt"], o["n_gen"], o.get("n_depth", 0)) == k), None)
        c = next((o for o in cc if (o["n_prompt"], o["n_gen"], o.get("n_depth", 0)) == k), None)
        o = l or c
        fmt = lambda x: "%.2f ± %.2f" % (x["avg_ts"], x["stddev_ts"]) if x else "failed"
        ratio = "%.2f×" % (c["avg_ts"] / l["avg_ts"]) if l and c else "–"
        bw = lambda x: "%.1f (%.0f %%)" % (x["avg_ts"] * bpt / 1e9, 100 * x["avg_ts"] * bpt / 1e9 / membw)
        gl = bw(l) if k[1] and bpt and l else "–"
        gc = bw(c) if k[1] and bpt and c else "–"
        print("| %s | %.2f GiB | %s | %s | %s | %s | %s | %s |" % (label, size, test_name(o), fmt(l), fmt(c), ratio, gl, gc))
print()
print("Raw JSON of this run: \`$WORK/results/\`.")
print("<!-- cpu-bench:end -->")
PY

if [ "$WRITE" = 0 ]; then cat "$SECTION"; exit 0; fi
RESULTS=$ROOT/bench/RESULTS.md
if [ ! -f "$RESULTS" ]; then
  printf '# cera benchmark results\n\nEach section is written by its own script or engineer; keep them separate.\n\n' >"$RESULTS"
fi
# Replace the section between its markers (or append it), leaving the others as they are.
python3 - "$RESULTS" "$SECTION" <<'PY'
import re, sys
results, section = sys.argv[1], open(sys.argv[2]).read().rstrip("\n") + "\n"
text = open(results).read()
pat = re.compile(r"<!-- cpu-bench:begin.*?<!-- cpu-bench:end -->\n?", re.S)
text = pat.sub(lambda m: section, text, count=1) if pat.search(text) else text.rstrip("\n") + "\n\n" + section
open(results, "w").write(text)
PY
log "wrote $RESULTS"
