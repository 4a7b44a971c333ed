#!/usr/bin/env bash
# build-deps.sh — builds libcera's three dependencies (PCRE2, utf8proc, cJSON) for WebAssembly
# with emcc, from Debian bookworm's source packages (the versions the native build links, Debian's
# patches applied by dpkg-source). The sources are fetched at build time through a private apt
# configuration (a deb-src line in DIR/apt, the system's apt sources untouched) and never committed.
#   wasm/build-deps.sh DIR   ->  DIR/include, DIR/lib/lib{pcre2-8,utf8proc,cjson}.a
# Skips the work when DIR/lib already holds the three archives. CERA_DEBIAN_MIRROR overrides the
# mirror (by default the one this machine's apt uses).
set -euo pipefail
out=$(realpath -m "${1:?usage: build-deps.sh DIR}")
[ -f "$out/lib/libpcre2-8.a" ] && [ -f "$out/lib/libutf8proc.a" ] && [ -f "$out/lib/libcjson.a" ] && exit 0
for tool in emcc emar apt-get dpkg-source; do
    command -v "$tool" >/dev/null || { echo "build-deps: $tool is missing" >&2; exit 1; }
done
apt="$out/apt"
mkdir -p "$apt/lists/partial" "$apt/src" "$out/include/cjson" "$out/lib" "$out/obj"
# the mirror this machine's apt already uses for Debian's main archive (else deb.debian.org)
mirror=${CERA_DEBIAN_MIRROR:-}
if [ -z "$mirror" ]; then
    mirror=$(cat /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null | sed 's/\[[^]]*\]//' |
             awk '$1 == "URIs:" || $1 == "deb" { print $2 }' | grep -v security | head -1 || true)
fi
mirror=${mirror:-http://deb.debian.org/debian}
echo "deb-src $mirror bookworm main" >"$apt/sources.list"
opts=(-o Dir::Etc::SourceList="$apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
      -o Dir::State::Lists="$apt/lists" -o Debug::NoLocking=1)
apt-get "${opts[@]}" -qq update
(cd "$apt/src" && apt-get "${opts[@]}" -qq source --download-only pcre2 utf8proc cjson 2>&1 | grep -v unsandboxed || true)
for dsc in "$apt"/src/*.dsc; do
    (cd "$apt/src" && dpkg-source --no-check -x "$(basename "$dsc")" >/dev/null)
done
cflags=(-O2 -w)

# PCRE2: the 8-bit library with Unicode, no JIT (wasm cannot generate machine code).
p=$(echo "$apt"/src/pcre2-10.*/)
cp "$p/src/config.h.generic" "$p/src/config.h"
cp "$p/src/pcre2.h.generic" "$p/src/pcre2.h"
cp "$p/src/pcre2_chartables.c.dist" "$p/src/pcre2_chartables.c"
pcre_files=(auto_possess chartables compile config context convert dfa_match error extuni find_bracket
            jit_compile maketables match match_data newline ord2utf pattern_info script_run serialize
            string_utils study substitute substring tables ucd valid_utf xclass)
objs=()
for f in "${pcre_files[@]}"; do
    emcc "${cflags[@]}" -DHAVE_CONFIG_H -DPCRE2_CODE_UNIT_WIDTH=8 -DSUPPORT_UNICODE -DPCRE2_STATIC \
        -I"$p/src" -c "$p/src/pcre2_$f.c" -o "$out/obj/pcre2_$f.o" &
    objs+=("$out/obj/pcre2_$f.o")
    [ $(( ${#objs[@]} % 2 )) -eq 0 ] && wait
done
wait
emar rcs "$out/lib/libpcre2-8.a" "${objs[@]}"
cp "$p/src/pcre2.h" "$out/include/"

u=$(echo "$apt"/src/utf8proc-2.*/)
emcc "${cflags[@]}" -DUTF8PROC_STATIC -c "$u/utf8proc.c" -o "$out/obj/utf8proc.o"
emar rcs "$out/lib/libutf8proc.a" "$out/obj/utf8proc.o"
cp "$u/utf8proc.h" "$out/include/"

c=$(echo "$apt"/src/cjson-1.*/)
emcc "${cflags[@]}" -c "$c/cJSON.c" -o "$out/obj/cJSON.o"
emar rcs "$out/lib/libcjson.a" "$out/obj/cJSON.o"
cp "$c/cJSON.h" "$out/include/cjson/"
echo "build-deps: PCRE2, utf8proc and cJSON built into $out"
