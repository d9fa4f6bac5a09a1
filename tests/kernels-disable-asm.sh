#!/bin/sh
# kernels-disable-asm.sh - FASTMM5_DISABLE_ASM=1 forces the portable C kernels at run time
# (and FASTMM5_DISABLE_AVX2=1 the SSE2 freed-block check on an AVX2 CPU, FASTMM5_DISABLE_AVX512=1
# the AVX2 kernels on an AVX-512 one).
#
#  1. tests/check_kernels, case "selection", with FASTMM5_DISABLE_ASM unset, =0 and =1: the
#     options module reads the variable and fm_kernels_init() installs SSE2 (asm build on a
#     CPU with SSE2) or the C twins accordingly; the case asserts which.
#  2. The preloaded library says which kernels it runs (FASTMM5_VERBOSE=1 prints
#     "kernels: <name>"): "SSE2 ..." on an asm build, "portable C (FASTMM5_DISABLE_ASM)" with
#     the variable set. Skipped when the library cannot be preloaded into /bin/true (cross builds
#     run under qemu-user; FM_TEST_WRAPPER=qemu-aarch64 runs check_kernels under it).
# Exit: 0 pass, 77 skip (no check_kernels: Check missing), anything else fail.
set -u
b=${top_builddir:-.}
fail=0

prog=$b/tests/check_kernels
if [ ! -x "$prog" ]; then
    echo "SKIP: $prog not built (Check not found by configure)"
    exit 77
fi
for v in unset 0 1; do
    if [ "$v" = unset ]; then
        out=$(env -u FASTMM5_DISABLE_ASM CK_RUN_CASE=selection ${FM_TEST_WRAPPER:-} "$prog" 2>&1)
    else
        out=$(FASTMM5_DISABLE_ASM=$v CK_RUN_CASE=selection ${FM_TEST_WRAPPER:-} "$prog" 2>&1)
    fi
    rc=$?
    printf '%s\n' "FASTMM5_DISABLE_ASM=$v: exit $rc" "$out"
    [ "$rc" -eq 0 ] || fail=1
done

so=$b/lib/.libs/libfastmm5.so
asm=no
grep -q '^#define FASTMM_HAVE_ASM 1' "$b/config.h" 2>/dev/null && asm=yes
if [ -f "$so" ] && LD_PRELOAD=$so /bin/true 2>/dev/null &&
   LD_PRELOAD=$so FASTMM5_VERBOSE=1 /bin/true 2>&1 | grep -q 'kernels: '; then
    on=$(env -u FASTMM5_DISABLE_ASM LD_PRELOAD=$so FASTMM5_VERBOSE=1 /bin/true 2>&1 | grep -o 'kernels: [^,]*')
    off=$(LD_PRELOAD=$so FASTMM5_VERBOSE=1 FASTMM5_DISABLE_ASM=1 /bin/true 2>&1 | grep -o 'kernels: [^,]*')
    echo "preload, default:               $on"
    echo "preload, FASTMM5_DISABLE_ASM=1: $off"
    case $off in
        "kernels: portable C"*) ;;
        *) echo "FAIL: FASTMM5_DISABLE_ASM=1 did not select the C kernels"; fail=1 ;;
    esac
    if [ "$asm" = yes ]; then
        case $on in
            "kernels: SSE2"*) ;;
            *) echo "FAIL: an asm build runs '$on', not SSE2"; fail=1 ;;
        esac
        # x86_64 with AVX2 (the CPU and the OS): the AVX2 freed-block check, unless
        # FASTMM5_DISABLE_AVX2=1 keeps the SSE2 one.
        noavx=$(LD_PRELOAD=$so FASTMM5_VERBOSE=1 FASTMM5_DISABLE_AVX2=1 /bin/true 2>&1 | grep -o 'kernels: [^,]*')
        echo "preload, FASTMM5_DISABLE_AVX2=1: $noavx"
        case $noavx in
            *AVX2* | *AVX-512*) echo "FAIL: FASTMM5_DISABLE_AVX2=1 still runs the AVX2 check"; fail=1 ;;
        esac
        # with AVX-512 (AVX512F and AVX512BW) as well: the AVX-512 kernels, unless
        # FASTMM5_DISABLE_AVX512=1 keeps the AVX2 ones.
        no512=$(LD_PRELOAD=$so FASTMM5_VERBOSE=1 FASTMM5_DISABLE_AVX512=1 /bin/true 2>&1 | grep -o 'kernels: [^,]*')
        echo "preload, FASTMM5_DISABLE_AVX512=1: $no512"
        case $no512 in
            *AVX-512*) echo "FAIL: FASTMM5_DISABLE_AVX512=1 still runs the AVX-512 kernels"; fail=1 ;;
        esac
        if grep -q '^#define FASTMM_ASM_X86_64 1' "$b/config.h" && grep -qw avx2 /proc/cpuinfo 2>/dev/null; then
            if grep -qw avx512f /proc/cpuinfo && grep -qw avx512bw /proc/cpuinfo; then
                case $on in
                    *AVX-512*) ;;
                    *) echo "FAIL: this CPU has AVX-512 but the library runs '$on'"; fail=1 ;;
                esac
                case $no512 in
                    *AVX2*) ;;
                    *) echo "FAIL: FASTMM5_DISABLE_AVX512=1 runs '$no512', not AVX2"; fail=1 ;;
                esac
            else
                echo "AVX-512 checks skipped: the CPU lacks AVX512F or AVX512BW"
                case $on in
                    *AVX2*) ;;
                    *) echo "FAIL: this CPU has AVX2 but the library runs '$on'"; fail=1 ;;
                esac
            fi
        fi
    fi
else
    echo "preload part skipped (cannot preload $so into /bin/true, or no FASTMM5_VERBOSE line)"
fi
exit $fail
