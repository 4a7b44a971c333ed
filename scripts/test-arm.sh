#!/usr/bin/env bash
# test-arm.sh — cross-builds the CPU kernel table and its tests for aarch64 (Debian's
# gcc-aarch64-linux-gnu) and runs them under qemu-aarch64 -cpu max, so the NEON, dotprod
# and i8mm tiers are checked against the scalar reference without ARM hardware.
# Builds only tests/cpu/standalone (core + tensor + kernels), in build-arm/.
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in aarch64-linux-gnu-gcc qemu-aarch64; do
    command -v "$tool" >/dev/null || { echo "test-arm: $tool is missing (bash scripts/setup.sh installs it)" >&2; exit 1; }
done
dir=build-arm
cmake -S tests/cpu/standalone -B "$dir" -DCMAKE_TOOLCHAIN_FILE="$PWD/cmake/aarch64-linux-gnu.cmake" \
    -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$dir" -j"$(nproc)"
ctest --test-dir "$dir" --output-on-failure -j"$(nproc)"
