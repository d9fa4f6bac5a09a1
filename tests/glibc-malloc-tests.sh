#!/usr/bin/env bash
# tests/glibc-malloc-tests.sh - glibc's own malloc API tests (malloc/tst-*.c of the installed
# glibc's Debian source package) run against libfastmm5 under LD_PRELOAD, in normal mode and in
# debug mode (FASTMM5_DEBUG=1).
#
#   tests/glibc-malloc-tests.sh [BUILD_DIR]     default: the current directory (a configured and
#                                               built libfastmm5: BUILD_DIR/lib/.libs/libfastmm5.so)
#
# 1. Source: `apt-get source --download-only glibc=<libc6's source version>`, unpacked with
#    dpkg-source (Debian's patches applied) into BUILD_DIR/glibc-src/, kept for the next run.
#    Without a deb-src entry it adds one as root (/etc/apt/sources.list.d/fastmm5-deb-src.sources,
#    or fastmm5-deb-src.list for one-line sources.list entries) and runs `apt-get update`.
# 2. Build (BUILD_DIR/glibc-tests/, make -j$JOBS): the part of glibc's support/ library the tests
#    use and every test not excluded, as ordinary programs against the installed glibc;
#    tests/glibc/config-shim.h stands in for a glibc build tree's config.h.
# 3. Run each test with its own timeout (support's TIMEOUT, times TEST_TIMEOUT_FACTOR if set, and 5
#    in debug mode), two
#    at a time (JOBS), in both modes; print a table; tests that fail also run once on glibc's
#    malloc (no LD_PRELOAD), to tell a libfastmm5 failure from a broken test build.
#
# tests/glibc/excluded lists the tests that check glibc's implementation rather than the API,
# each with its reason; every test of glibc's malloc/Makefile is either run or listed there.
#
# Environment: JOBS (parallel builds and runs, default 2); FM_GLIBC_RUN_JOBS (parallel runs
# only, default JOBS); FM_GLIBC_TESTS="tst-a tst-b" runs only
# those; TEST_TIMEOUT_FACTOR multiplies the timeouts (glibc support's TIMEOUTFACTOR), five times
# more in debug mode.
# Exit: 0 all pass, 1 a test failed, 77 the glibc source cannot be had (no apt-get source, not
# root and no deb-src entry, no network), 99 the build failed or something is missing.
#
# Not part of `make check` (it downloads); .ci/run runs it in build-asm/ after make check.
set -uo pipefail

script=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
shim_dir=$(dirname "$script")/glibc

# --- One test run: the script calls itself through xargs (-P$JOBS) ------------------------------
# --run-one WORK LIB TEST MODE: writes WORK/log/TEST.MODE.log and .result (a line PASS,
# UNSUPPORTED or FAIL(...), a line with the seconds it took); MODE normal, debug or glibc (no
# LD_PRELOAD).
if [ "${1:-}" = --run-one ]; then
    work=$2 lib=$3 t=$4 mode=$5
    env=(env -u FASTMM5_DEBUG)
    case $mode in
        normal) env+=("LD_PRELOAD=$lib") ;;
        debug) env+=("LD_PRELOAD=$lib" FASTMM5_DEBUG=1) ;;
        glibc) env+=(-u LD_PRELOAD) ;;
    esac
    # support's own timeout ends a hung test (the longest TIMEOUT of these tests is 100 s);
    # this one is for a hang outside support's child (mallocbug has no support harness).
    factor=${TEST_TIMEOUT_FACTOR:-1}
    [[ $factor =~ ^[1-9][0-9]*$ ]] || factor=1
    # support's timeouts are sized for glibc's malloc; debug mode fills, checks and traces every
    # block and runs several times slower (tst-malloc-too-large: 2 s, debug 8 s of its 20 s).
    [ "$mode" = debug ] && factor=$((factor * 5))
    env+=("TIMEOUTFACTOR=$factor") # support_test_main.c scales TIMEOUT by it
    start=$SECONDS
    (cd "$work/tmp" && timeout -k 10 $((100 * factor + 60)) "${env[@]}" "$work/bin/$t") \
        > "$work/log/$t.$mode.log" 2>&1
    rc=$?
    secs=$((SECONDS - start))
    if [ $rc -eq 0 ]; then
        result=PASS
    elif [ $rc -eq 77 ]; then
        result=UNSUPPORTED
    elif grep -q '^Timed out: killed the child process' "$work/log/$t.$mode.log"; then
        result="FAIL(timeout)"
    elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
        result="FAIL(hang)"
    elif [ $rc -gt 128 ]; then
        result="FAIL(signal $((rc - 128)))"
    else
        result="FAIL(exit $rc)"
    fi
    printf '%s\n%s\n' "$result" "$secs" > "$work/log/$t.$mode.result"
    exit 0
fi

build=$(cd "${1:-.}" && pwd) || exit 99
jobs=${JOBS:-2}
run_jobs=${FM_GLIBC_RUN_JOBS:-$jobs}
lib=$build/lib/.libs/libfastmm5.so
if [ ! -f "$lib" ]; then
    echo "ERROR: $lib not found: run it in a built libfastmm5 build directory (make first)" >&2
    exit 99
fi

skip() {
    echo "SKIP: glibc's malloc tests: $*"
    exit 77
}

# --- 1. The glibc source package ---------------------------------------------------------------
# The native libc6 only: with a foreign architecture added (.ci/arch-legs installs libc6:i386)
# dpkg-query would print one value per installed libc6, run together.
native_libc6=libc6:$(dpkg --print-architecture 2>/dev/null)
libc_src=$(dpkg-query -W -f='${source:Package}' "$native_libc6" 2>/dev/null) || libc_src=
version=$(dpkg-query -W -f='${source:Version}' "$native_libc6" 2>/dev/null) || version=
if [ -z "$version" ] || [ -z "$libc_src" ]; then
    skip "libc6 is not a Debian package here (no dpkg-query)"
fi
srcroot=$build/glibc-src
stamp=$srcroot/unpacked # holds the version unpacked

# has_deb_src: some configured APT source has source packages.
has_deb_src() {
    grep -Eqs '^[[:space:]]*deb-src[[:space:]]' /etc/apt/sources.list /etc/apt/sources.list.d/*.list ||
        grep -Eqs '^Types:.*deb-src' /etc/apt/sources.list.d/*.sources
}

# add_deb_src: a deb-src twin of each deb entry, in a file of our own (as root). Called only
# when no entry has deb-src, so every Types: line reads "deb".
add_deb_src() {
    local f out=/etc/apt/sources.list.d/fastmm5-deb-src
    local stanzas lines
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] && [ "$f" != "$out.sources" ] && sed 's/^Types:.*/Types: deb-src/' "$f" && echo
    done > "$out.tmp"
    grep -q '^Types:' "$out.tmp" && mv "$out.tmp" "$out.sources" && stanzas=yes
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -f "$f" ] && [ "$f" != "$out.list" ] && sed -n 's/^[[:space:]]*deb[[:space:]]/deb-src /p' "$f"
    done > "$out.tmp"
    [ -s "$out.tmp" ] && mv "$out.tmp" "$out.list" && lines=yes
    rm -f "$out.tmp"
    [ -n "${stanzas:-}${lines:-}" ]
}

if [ ! -f "$stamp" ]; then
    command -v apt-get > /dev/null || skip "no apt-get"
    command -v dpkg-source > /dev/null || skip "no dpkg-source (Debian: apt-get install dpkg-dev)"
    root=no
    [ "$(id -u)" -eq 0 ] && root=yes
    if ! has_deb_src; then
        [ $root = yes ] || skip "no deb-src entry in APT's sources and not root to add one"
        add_deb_src || skip "no deb entry in APT's sources to make a deb-src entry from"
        echo "added a deb-src entry: $(ls /etc/apt/sources.list.d/fastmm5-deb-src.*)"
        apt-get update -qq || skip "apt-get update failed (no network?)"
    fi
    rm -rf "$srcroot"
    mkdir -p "$srcroot/download"
    # apt runs its downloads as the _apt user where it can; as root into a directory _apt
    # cannot write, it would warn and fall back to root.
    [ $root = yes ] && chown _apt "$srcroot/download" 2>/dev/null
    fetch() { (cd "$srcroot/download" && apt-get source -qq --download-only "$@") > "$srcroot/download.log" 2>&1; }
    if ! fetch "$libc_src=$version"; then
        # Sources lists not downloaded yet (a deb-src entry added by hand, apt-get update never
        # run), or the archive has moved on to a newer Debian revision than the one installed:
        # its tests are then the closest there is.
        [ $root = yes ] && apt-get update -qq
        if ! fetch "$libc_src=$version"; then
            echo "warning: $libc_src $version (installed) is not in the archive; taking its newest $libc_src"
            fetch "$libc_src" || {
                cat "$srcroot/download.log"
                skip "apt-get source $libc_src failed (no network?)"
            }
        fi
    fi
    dsc=$(ls "$srcroot"/download/*.dsc) || exit 99
    echo "unpacking $(basename "$dsc") (dpkg-source applies Debian's patches)"
    dpkg-source -x "$dsc" "$srcroot/glibc" > "$srcroot/unpack.log" 2>&1 || {
        cat "$srcroot/unpack.log"
        exit 99
    }
    rm -f "$srcroot"/*.orig.tar.* # dpkg-source's copy next to the tree; download/ has it
    basename "$dsc" .dsc | sed 's/^[^_]*_//' > "$stamp"
fi
src=$srcroot/glibc
echo "glibc source: $src ($libc_src $(cat "$stamp"); installed libc6: $version)"

# --- 2. Build the support library and the tests ------------------------------------------------
# The tests glibc's malloc/Makefile defines (tests, tests-internal, tests-static, test-srcs).
all_tests=$(awk '
    /^(tests|tests-internal|tests-static|test-srcs)[ \t]*(:=|\+=|=)/ { collect = 1; sub(/^[^=]*=/, "") }
    collect {
        line = $0; more = (line ~ /\\[ \t]*$/); gsub(/\\/, " ", line)
        n = split(line, w, /[ \t]+/)
        for (i = 1; i <= n; i++) if (w[i] != "" && w[i] !~ /^\$/) print w[i]
        if (!more) collect = 0
    }' "$src/malloc/Makefile" | sort -u)
[ -n "$all_tests" ] || { echo "ERROR: no tests found in $src/malloc/Makefile" >&2; exit 99; }

# excluded_in TEST MODE: the reason when TEST is excluded in MODE (normal/debug), else nothing.
excluded_in() {
    awk -v t="$1" -v m="$2" '$1 == t && ($2 == "both" || $2 == m) {
        $1 = ""; $2 = ""; sub(/^ +/, ""); print; exit }' "$shim_dir/excluded"
}
for t in $(awk '!/^#/ && NF { print $1 }' "$shim_dir/excluded"); do
    grep -qx -- "$t" <<< "$all_tests" || echo "warning: tests/glibc/excluded names $t, not a test of this glibc"
done

tests=()
for t in $all_tests; do
    [ -n "$(excluded_in "$t" normal)" ] && [ -n "$(excluded_in "$t" debug)" ] && continue
    if [ -n "${FM_GLIBC_TESTS:-}" ] && ! grep -qw -- "$t" <<< "$FM_GLIBC_TESTS"; then
        continue
    fi
    tests+=("$t")
done
[ ${#tests[@]} -gt 0 ] || { echo "ERROR: no test to run (FM_GLIBC_TESTS=${FM_GLIBC_TESTS:-})" >&2; exit 99; }

work=$build/glibc-tests
mkdir -p "$work/include" "$work/obj" "$work/bin" "$work/log" "$work/tmp"
rm -f "$work"/log/*

# The internal headers the tests and support/ include that stand on their own (the rest of
# glibc's include/ wraps the public headers for building libc and must stay out of the path).
case $(gcc -dumpmachine) in
    i?86-*) alignment_h=sysdeps/i386/malloc-alignment.h ;;
    *) alignment_h=sysdeps/generic/malloc-alignment.h ;;
esac
for h in include/libc-diag.h include/array_length.h include/intprops.h \
         sysdeps/generic/malloc-size.h "$alignment_h"; do
    ln -sfn "$src/$h" "$work/include/$(basename "$h")"
done
ln -sfn "$src/support" "$work/include/support"

# The support/ files these tests link (found with ld -Map over all of them).
support_objs="check ignore_stderr oom_error support_paths support_record_failure
    support_shared_allocate support_test_compare_failure support_test_main
    support_test_verify_impl temp_file write_message xasprintf xcalloc xchdir xfopen xfork
    xmalloc xmmap xmunmap xopen xpthread_barrier_destroy xpthread_barrier_init
    xpthread_barrier_wait xpthread_barrierattr_destroy xpthread_barrierattr_init
    xpthread_barrierattr_setpshared xpthread_check_return xpthread_create xpthread_join
    xpthread_kill xsignal xsysconf"

{
    # -w: glibc's own sources, built as glibc builds them (-O2, gnu11); their warnings are not ours.
    echo "CFLAGS = -std=gnu11 -O2 -g -w -D_GNU_SOURCE -include $shim_dir/config-shim.h -I$work/include"
    echo "SRC = $src"
    echo "all: $(for t in "${tests[@]}"; do printf 'bin/%s ' "$t"; done)"
    echo "obj/%.o: \$(SRC)/support/%.c $shim_dir/config-shim.h"
    printf '\t@$(CC) $(CFLAGS) -I$(SRC)/support -c $< -o $@\n'
    # support_paths.c wants the glibc build's paths; only the gdb helper of support_test_main
    # (WAIT_FOR_DEBUGGER) reads one.
    echo "obj/support_paths.o: CFLAGS += -DSRCDIR_PATH='\"\$(SRC)\"' -DOBJDIR_PATH='\"$work\"' \\"
    echo "  -DOBJDIR_ELF_LDSO_PATH='\"/dev/null\"' -DINSTDIR_PATH='\"/usr\"' -DLIBDIR_PATH='\"/usr/lib\"' \\"
    echo "  -DBINDIR_PATH='\"/usr/bin\"' -DSBINDIR_PATH='\"/usr/sbin\"' -DSLIBDIR_PATH='\"/lib\"' \\"
    echo "  -DROOTSBINDIR_PATH='\"/sbin\"' -DCOMPLOCALEDIR_PATH='\"/usr/lib/locale\"'"
    echo "libsupport.a: $(for o in $support_objs; do printf 'obj/%s.o ' "$o"; done)"
    printf '\t@rm -f $@ && ar rcs $@ $^\n'
    # The tests are built with -DTEST_NO_MALLOPT, as glibc's malloc/Makefile does (else
    # support's test driver calls mallopt (M_PERTURB, 42)).
    echo "bin/%: \$(SRC)/malloc/%.c libsupport.a"
    printf '\t@$(CC) $(CFLAGS) -DTEST_NO_MALLOPT $< $(EXTRA_$*) libsupport.a -o $@ -lpthread\n'
    echo "obj/tst-interpose-aux-%.o: \$(SRC)/malloc/tst-interpose-aux-%.c"
    printf '\t@$(CC) $(CFLAGS) -c $< -o $@\n'
    for v in nothread thread; do
        echo "bin/tst-interpose-$v: obj/tst-interpose-aux-$v.o"
        echo "EXTRA_tst-interpose-$v = obj/tst-interpose-aux-$v.o"
    done
} > "$work/Makefile"
echo "building ${#tests[@]} tests and support/ (make -j$jobs in $work)"
if ! make -C "$work" -j"$jobs" --no-print-directory > "$work/build.log" 2>&1; then
    cat "$work/build.log"
    echo "ERROR: building glibc's tests failed (log: $work/build.log)" >&2
    exit 99
fi

# --- 3. Run --------------------------------------------------------------------------------------
echo "running them under LD_PRELOAD=$lib, normal and debug mode ($jobs at a time)"
runs=()
for t in "${tests[@]}"; do
    for mode in normal debug; do
        [ -z "$(excluded_in "$t" "$mode")" ] && runs+=("$t" "$mode")
    done
done
start=$SECONDS
printf '%s %s\n' "${runs[@]}" | xargs -P "$run_jobs" -n 2 bash "$script" --run-one "$work" "$lib"
echo "ran in $((SECONDS - start)) s"

result_of() { # TEST MODE -> result word, or "excluded"
    if [ -n "$(excluded_in "$1" "$2")" ]; then
        echo excluded
    elif [ -f "$work/log/$1.$2.result" ]; then
        sed -n 1p "$work/log/$1.$2.result"
    else
        echo "FAIL(no result)"
    fi
}
secs_of() { [ -f "$work/log/$1.$2.result" ] && sed -n 2p "$work/log/$1.$2.result"; }

failed=()
printf '\n%-32s %-22s %-22s\n' test normal debug
for t in "${tests[@]}"; do
    line=$(printf '%-32s' "$t")
    for mode in normal debug; do
        r=$(result_of "$t" "$mode")
        s=$(secs_of "$t" "$mode")
        line+=$(printf ' %-22s' "$r${s:+ ${s}s}")
        case $r in FAIL*) failed+=("$t.$mode") ;; esac
    done
    echo "$line"
done

n_excluded=$(awk '!/^#/ && $2 == "both" { n++ } END { print n + 0 }' "$shim_dir/excluded")
one_mode=$(awk '!/^#/ && NF && $2 != "both" { printf "%s%s in %s mode", sep, $1, $2; sep = ", " }' "$shim_dir/excluded")
echo "not run (they test glibc's implementation; tests/glibc/excluded): $n_excluded tests${one_mode:+, and $one_mode}"
if [ ${#failed[@]} -eq 0 ]; then
    echo "PASS: all ${#tests[@]} tests"
    exit 0
fi

# A failing test runs once on glibc's own malloc too: a failure there is the test build's.
declare -A glibc_result
for f in "${failed[@]}"; do
    t=${f%.*}
    if [ -z "${glibc_result[$t]:-}" ]; then
        bash "$script" --run-one "$work" "$lib" "$t" glibc
        glibc_result[$t]=$(result_of "$t" glibc)
    fi
done
for f in "${failed[@]}"; do
    t=${f%.*} mode=${f##*.}
    printf '\n----- %s, %s mode: %s (on glibc malloc: %s); last lines of %s\n' "$t" "$mode" \
        "$(result_of "$t" "$mode")" "${glibc_result[$t]}" "$work/log/$t.$mode.log"
    tail -n 15 "$work/log/$t.$mode.log" | cut -c 1-300
done
printf '\nFAILED: %s\n' "${failed[*]}"
exit 1
