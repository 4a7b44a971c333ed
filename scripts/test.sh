#!/usr/bin/env bash
# test.sh — configures, builds and runs cera's test suite with CTest.
#   scripts/test.sh              Release build in build/
#   scripts/test.sh --sanitize   ASan + UBSan build in build-asan/, with clang when present
# Both builds treat warnings as errors (-DCERA_WERROR=ON), so the suite is also a check
# that the code is warning-free with gcc (Release) and clang (sanitizers).
# Extra arguments after `--` go to ctest (e.g. -- -R gguf).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=build
cmake_args=(-DCMAKE_BUILD_TYPE=Release -DCERA_WERROR=ON)
if [ "${1:-}" = "--sanitize" ]; then
    shift
    dir=build-asan
    cmake_args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DCERA_SANITIZE=ON -DCERA_WERROR=ON)
    if [ -z "${CC:-}" ] && command -v clang >/dev/null; then export CC=clang; fi
fi
[ "${1:-}" = "--" ] && shift
cmake -S . -B "$dir" "${cmake_args[@]}" >/dev/null
cmake --build "$dir" -j"$(nproc)"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
ctest --test-dir "$dir" --output-on-failure -j"$(nproc)" "$@"
