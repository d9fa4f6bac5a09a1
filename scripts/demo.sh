#!/usr/bin/env bash
# scripts/demo.sh - the README's main command: build libfastmm5 and run real work on it.
#
# On a fresh Debian 12 machine as root it first installs what the build needs. Then it builds
# the library in place (autoreconf, configure, make) and
#   1. runs python3 on a small workload with LD_PRELOAD=lib/.libs/libfastmm5.so and
#      FASTMM5_STATS=1: the usage report at exit shows what libfastmm5 served;
#   2. compiles a tiny C program that frees the address of a stack variable, links it with
#      -lfastmm5 and runs it with FASTMM5_ON_ERROR=continue: the library reports the invalid
#      pointer event and refuses the free, and the program carries on (glibc would abort);
#   3. runs an unmodified buggy program (tests/buggy-program.c) preloaded with FASTMM5_DEBUG=1:
#      debug mode reports its one-byte overrun and its leak with the allocating function's name.
set -euo pipefail

cd "$(dirname "$0")/.."
top=$(pwd)

say() { printf '\n=== %s\n' "$*"; }

# --- Build dependencies (only what is missing) ------------------------------------------------
need=()
command -v gcc >/dev/null 2>&1 || need+=(build-essential)
command -v make >/dev/null 2>&1 || need+=(make)
command -v autoreconf >/dev/null 2>&1 || need+=(autoconf)
command -v automake >/dev/null 2>&1 || need+=(automake)
command -v libtoolize >/dev/null 2>&1 || need+=(libtool)
command -v pkg-config >/dev/null 2>&1 || need+=(pkg-config)
command -v python3 >/dev/null 2>&1 || need+=(python3)
if [ ${#need[@]} -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "missing build dependencies: ${need[*]}; run as root or install them first" >&2
        exit 1
    fi
    say "installing ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update
    apt-get install -y --no-install-recommends "${need[@]}"
fi

# --- Build ------------------------------------------------------------------------------------
say "building libfastmm5"
autoreconf -fi
./configure --quiet
make -j"$(nproc)"

so=$top/lib/.libs/libfastmm5.so

# --- 1. A real program on libfastmm5 ----------------------------------------------------------
say "python3 on libfastmm5: LD_PRELOAD=$so FASTMM5_STATS=1"
LD_PRELOAD=$so FASTMM5_STATS=1 python3 -c '
words = {}
for i in range(300000):
    w = "w%d" % (i * 7919 % 100003)
    words[w] = words.get(w, 0) + 1
top = sorted(words.items(), key=lambda kv: (-kv[1], kv[0]))[:3]
text = " ".join(str(i) for i in range(100000))
print("distinct words:", len(words), "most common:", top, "text length:", len(text))
'

# --- 2. Invalid pointer detection -------------------------------------------------------------
say "freeing a stack address on libfastmm5 with FASTMM5_ON_ERROR=continue"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/bad-free.c" <<'EOF'
#include <stdio.h>
#include <stdlib.h>

int main(void)
{
    int on_the_stack = 42;
    void *p = &on_the_stack;
    printf("free(%p), an address on the stack...\n", p);
    fflush(stdout);
    free(p); /* glibc: "free(): invalid pointer", abort */
    printf("still running: libfastmm5 reported the pointer and refused the free\n");
    return 0;
}
EOF
gcc -O0 -w -fno-builtin -I"$top/include" "$tmp/bad-free.c" -o "$tmp/bad-free" \
    -L"$top/lib/.libs" -lfastmm5 -Wl,-rpath,"$top/lib/.libs"
rc=0
FASTMM5_ON_ERROR=continue FASTMM5_STATS=1 "$tmp/bad-free" || rc=$?
say "bad-free exited with status $rc"
[ "$rc" -eq 0 ] || exit "$rc"

# --- 3. Debug mode on an unmodified program -------------------------------------------------------
# tests/buggy-program.c knows nothing of libfastmm5: it writes one byte past a 24-byte record,
# and in "leak" mode never frees it. Debug mode, switched on from the environment, catches both
# and names the function that allocated the block (-rdynamic lets dladdr name it).
say "debug mode on an unmodified buggy program: FASTMM5_DEBUG=1 FASTMM5_ON_ERROR=continue"
gcc -O0 -g -rdynamic "$top/tests/buggy-program.c" -o "$tmp/buggy-program"
LD_PRELOAD=$so FASTMM5_DEBUG=1 FASTMM5_ON_ERROR=continue "$tmp/buggy-program"
say "the same program leaking its record, with FASTMM5_REPORT_LEAKS=1"
LD_PRELOAD=$so FASTMM5_DEBUG=1 FASTMM5_REPORT_LEAKS=1 "$tmp/buggy-program" leak
say "and 'ls /' under debug mode with leak reporting: a correct program reports nothing"
LD_PRELOAD=$so FASTMM5_DEBUG=1 FASTMM5_REPORT_LEAKS=1 ls / >/dev/null
say "done"
