#!/usr/bin/env bash
# check_install.sh BUILD_DIR USE_API.C MODEL — installs the build into a scratch prefix and
# checks what a user of the library gets: the header, both libraries, the CLI, a pkg-config
# file that works from wherever the prefix is, and exactly the public API exported.
set -euo pipefail
build=$1 src=$2 model=$3
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
fail=0 pass=0
check() { if eval "$2"; then pass=$((pass + 1)); else echo "FAILED: $1"; fail=$((fail + 1)); fi; }
libdir=$(dirname "$(find "$prefix" -name cera.pc | head -1)")/..
check "header installed" "[ -f '$prefix/include/cera.h' ]"
check "static library installed" "[ -f '$libdir/libcera.a' ]"
check "shared library installed" "[ -e '$libdir/libcera.so' ]"
check "CLI installed" "[ -x '$prefix/bin/cera' ]"
check "CLI runs" "'$prefix/bin/cera' --version | grep -q '^cera '"
export PKG_CONFIG_PATH=$libdir/pkgconfig
check "pkg-config finds cera" "pkg-config --exists cera"
cc=${CC:-cc}
check "builds against the shared library" \
    "$cc '$src' -o '$prefix/use_shared' \$(pkg-config --cflags --libs cera) -Wl,-rpath,'$libdir'"
check "shared program runs" "'$prefix/use_shared' '$model' | grep -q 'vocab 512 arch llama'"
check "builds against the static library" \
    "$cc '$src' -o '$prefix/use_static' \$(pkg-config --cflags cera) '$libdir/libcera.a' \$(pkg-config --libs --static cera | sed 's/-lcera\\b//')"
check "static program runs" "'$prefix/use_static' '$model' | grep -q 'vocab 512 arch llama'"
# The exported functions are exactly the ones cera.h marks CERA_API.
api=$(grep -ozE 'CERA_API[^;]*;' "$prefix/include/cera.h" | tr '\0' '\n' | grep -oE '\bcera_[a-z0-9_]+\(' |
      tr -d '(' | sort -u)
exported=$(nm -D --defined-only "$libdir/libcera.so" | awk '$2 == "T" {print $3}' | sort -u)
check "exports exactly the CERA_API functions" "[ -n \"\$api\" ] && [ \"\$api\" = \"\$exported\" ]"
[ "$api" = "$exported" ] || diff <(echo "$api") <(echo "$exported") || true
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
