#!/bin/sh
# abi-symbols.sh - the exported ABI of the built libfastmm5.so is exactly lib/exported-symbols.txt.
#
# Guards against:
#  - a public function that lost its FASTMM_API / FM_EXPORT (hidden by -fvisibility=hidden), or a
#    name added to the code but not to the list, or to the list but not to the code;
#  - an internal fm_* helper, or any data object, leaking out of the .so;
#  - versioned exports: with a named version node malloc becomes malloc@@NODE, and the dynamic
#    linker no longer lets it replace glibc's malloc@GLIBC_2.x under LD_PRELOAD;
#  - malloc, free, calloc, realloc reaching the code through a PLT slot of fastmm_* (a call
#    through the exported name instead of the hidden one).
#
# Exit status: 0 pass, 1 fail, 77 skip (no shared library built), 99 hard error.
set -u

top_builddir=${top_builddir:-.}
top_srcdir=${top_srcdir:-.}
so=$top_builddir/lib/.libs/libfastmm5.so
list=$top_srcdir/lib/exported-symbols.txt
NM=${NM_PROG:-nm}
OBJDUMP=${OBJDUMP_PROG:-objdump}
READELF=${READELF_PROG:-readelf}

for tool in "$NM" "$OBJDUMP" "$READELF"; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "ERROR: $tool not found (install binutils)" >&2
        exit 99
    fi
done
if ! test -f "$list"; then
    echo "ERROR: $list not found" >&2
    exit 99
fi
if ! test -e "$so"; then
    echo "SKIP: $so not built (configured with --disable-shared?)"
    exit 77
fi

tmp=`mktemp -d "${TMPDIR:-/tmp}/fastmm5-abi.XXXXXX"` || exit 99
trap 'rm -rf "$tmp"' EXIT INT TERM

status=0

# 1. Function names (T text, W weak, i indirect) against the list, both sorted the same way.
#    A version suffix is cut here; check 3 is the one that judges it. A listed name followed by
#    32 or 64 is expected only where the library's pointers have that many bits (its ELF class).
case `"$READELF" -h "$so" 2>/dev/null | sed -n 's/^ *Class: *//p'` in
    ELF32) bits=32 ;;
    ELF64) bits=64 ;;
    *) echo "ERROR: cannot read the ELF class of $so" >&2; exit 99 ;;
esac
sed -e 's/#.*//' "$list" | awk -v bits=$bits 'NF == 1 || (NF == 2 && $2 == bits) { print $1 }' |
    LC_ALL=C sort -u > "$tmp/expected"
"$NM" -D --defined-only "$so" > "$tmp/nm" || { echo "ERROR: $NM -D failed on $so" >&2; exit 99; }
awk 'NF >= 3 && $2 ~ /^[TWi]$/ { print $3 }' "$tmp/nm" | sed 's/@.*//' | LC_ALL=C sort -u > "$tmp/actual"
if ! diff -u --label lib/exported-symbols.txt --label "exported by libfastmm5.so" \
        "$tmp/expected" "$tmp/actual" > "$tmp/diff"; then
    echo "FAIL: exported functions of $so differ from lib/exported-symbols.txt"
    echo "      (- listed but not exported, + exported but not listed):"
    cat "$tmp/diff"
    status=1
else
    echo "ok: $(wc -l < "$tmp/actual") exported functions match lib/exported-symbols.txt"
fi

# 2. Nothing else leaves the library: no data objects, no version-node (A) symbols.
awk 'NF >= 3 && $2 !~ /^[TWi]$/ { print }' "$tmp/nm" > "$tmp/other"
if test -s "$tmp/other"; then
    echo "FAIL: $so exports symbols that are not functions:"
    cat "$tmp/other"
    status=1
fi

# 3. Every export is unversioned. nm -D and readelf print a versioned name as name@@NODE;
#    objdump -T prints the node in the column before the name ("Base" or empty when
#    unversioned); and an anonymous version script leaves no version definition section.
if grep '@' "$tmp/nm" > "$tmp/versioned"; then
    echo "FAIL: versioned exports (the version script must be anonymous):"
    cat "$tmp/versioned"
    status=1
fi
"$OBJDUMP" -T "$so" > "$tmp/objdump" || { echo "ERROR: $OBJDUMP -T failed on $so" >&2; exit 99; }
# Defined dynamic symbols: the line has a section that is not *UND*. Without version
# information the field before the name is the size (hex); with it, the version node.
awk '/^[0-9a-f]+ / && $0 !~ /\*UND\*/ && NF >= 5 {
         v = $(NF - 1)
         if ($NF ~ /@/ || (v !~ /^[0-9a-f]+$/ && v != "Base")) print
     }' "$tmp/objdump" > "$tmp/objdump-versioned"
if test -s "$tmp/objdump-versioned"; then
    echo "FAIL: objdump -T shows versioned exports (malloc & co. must be unversioned):"
    cat "$tmp/objdump-versioned"
    status=1
fi
if "$READELF" -S -W "$so" | grep -q '\.gnu\.version_d'; then
    echo "FAIL: $so has a version definition section (.gnu.version_d): the version script names a node"
    status=1
fi

# 4. The malloc family in particular (what LD_PRELOAD depends on) is present.
for name in malloc free calloc realloc posix_memalign aligned_alloc memalign malloc_usable_size _ZdlPv _ZdaPv; do
    if ! grep -qx "$name" "$tmp/actual"; then
        echo "FAIL: $name is not exported by $so"
        status=1
    fi
done

# 5. Inside the library the malloc family binds locally: the libc names and every internal
#    caller reach fastmm_malloc & co. through their hidden names (internal.h, fm_entry_*), not
#    through a PLT slot of the exported name, which is an indirect jump on every call.
"$READELF" -r -W "$so" > "$tmp/relocs" || { echo "ERROR: $READELF -r failed on $so" >&2; exit 99; }
if grep -E 'JUMP_SLO.* fastmm_(malloc|free|calloc|realloc)( |$)' "$tmp/relocs" > "$tmp/plt"; then
    echo "FAIL: $so calls its own entry points through the PLT:"
    cat "$tmp/plt"
    status=1
fi

test $status -eq 0 && echo "PASS: exported ABI of $so is lib/exported-symbols.txt, unversioned"
exit $status
