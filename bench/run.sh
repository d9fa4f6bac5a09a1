#!/usr/bin/env bash
# bench/run.sh - the libfastmm5 benchmark harness (make bench / make bench-quick call it).
#
#   bench/run.sh [--build DIR]            full mode: 25 pairs after 3 warm-ups; results in bench/RESULTS.md
#   bench/run.sh --quick [--build DIR]    CI mode: seconds; proves the harness works
#   bench/run.sh --compare A.so B.so      two builds of the library (A is the baseline)
#   bench/run.sh --only WORKLOAD[,...]    a subset (names, fnmatch patterns or groups); --list shows them
#   bench/run.sh --help                   every option
#
# The library comes from $FASTMM5_LIB, else --lib, else lib/.libs/libfastmm5.so under the --build
# directory, the source tree or the current directory. The runner is Python 3 (standard library
# only); set PYTHON to choose the interpreter. See bench/README.md for the method.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
py="${PYTHON:-}"
if [ -z "$py" ]; then
    for c in python3 /usr/bin/python3; do
        if command -v "$c" >/dev/null 2>&1; then py="$c"; break; fi
    done
fi
if [ -z "$py" ]; then
    echo "bench/run.sh: python3 is required" >&2
    exit 2
fi
export BENCH_ENTRY="bench/run.sh"
exec "$py" "$here/harness/runner.py" "$@"
