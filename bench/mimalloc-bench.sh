#!/bin/sh
# bench/mimalloc-bench.sh MB_CHECKOUT [mbench.py options] - mimalloc-bench's self-contained
# programs (its bench/ directory) built with its flags and run against glibc as alternating
# fresh-process pairs with libfastmm5 and the peers. The checkout stays outside this tree.
# Options: --lib SO (default: lib/.libs/libfastmm5.so under the build or source tree), --pairs N,
# --rows larson,xmalloc-test,..., --peers fastmm5,jemalloc,tcmalloc,mimalloc, --threads 1,2,4,
# --extra NAME=SO, --out DIR. Prints a Markdown table; the raw samples go to OUT/mbench.json.
set -e
here=$(cd "$(dirname "$0")" && pwd)
[ $# -ge 1 ] || { sed -n 2,7p "$0"; exit 2; }
mb=$1; shift
[ -d "$mb/bench/larson" ] || { echo "$mb: not a mimalloc-bench checkout" >&2; exit 2; }
lib=${FASTMM5_LIB:-}
for c in "$PWD/lib/.libs/libfastmm5.so" "$here/../lib/.libs/libfastmm5.so"; do
    [ -n "$lib" ] || [ ! -f "$c" ] || lib=$c
done
exec python3 "$here/harness/mbench.py" --mb "$mb" --lib "${lib:-lib/.libs/libfastmm5.so}" "$@"
