/*
 * delete_check.c - the checks behind C++'s operator delete that fm_delete (api.c) does not settle
 * in its inline path, and the plain-block test for a damaged header.
 *
 * A sized delete passes the size the program allocated; an aligned delete the alignment. Neither
 * is needed to free a block here, but a wrong one is a bug in the program (the wrong object
 * type, a mismatched new[]/delete, an aligned type deleted through a base pointer) that other
 * allocators turn into heap corruption, so it is reported. For a plain block the test is what
 * the block itself tells: the size must fit it and be one that its allocation could have been
 * served for; a debug block records the exact size, family and alignment (debug.c).
 */
#include "internal.h"

#include <errno.h>

/* The small class whose blocks a request of `size` bytes gets by size alone. */
static unsigned natural_class(size_t size)
{
    unsigned c = 0;
    while (c + 1 < FM_SMALL_CLASS_COUNT && (size_t)fm_small_class_sizes[c] - 2u < size)
        c++;
    return c;
}

/* Whether a small block of class `cls` can have been allocated for `size` bytes: its class by
 * size, or the first class above it whose blocks are aligned to some power of two up to 64 (an
 * aligned request, or a minimum alignment entered with fastmm_alignment_enter). */
static bool small_class_fits(unsigned cls, size_t size)
{
    unsigned base = natural_class(size);
    if (cls == base)
        return true;
    for (size_t a = FM_MIN_ALIGN; a <= 64; a *= 2) {
        unsigned c = base;
        while (c + 1 < FM_SMALL_CLASS_COUNT && fm_small_class_sizes[c] % a != 0)
            c++;
        if (c == cls)
            return true;
    }
    return false;
}

static bool size_fits(const void *p, fm_block_ref_t ref, size_t size, size_t alignment)
{
    if (size > fm_block_usable(p, ref))
        return false;
    switch (ref.kind) {
    case FM_BLOCK_SMALL:
        return small_class_fits(((const fm_small_span_t *)ref.owner)->class_index, size);
    case FM_BLOCK_MEDIUM:
        return alignment > 64 || size > FM_SMALL_MAX_USER;
    case FM_BLOCK_LARGE:
        return alignment > 64 || size > FM_MEDIUM_MAX_USER || fm_load_relaxed(&fm_debug_on);
    default:
        return true;
    }
}

static const char *kind_name(fm_block_kind_t kind)
{
    return kind == FM_BLOCK_SMALL ? "small" : kind == FM_BLOCK_MEDIUM ? "medium" : "large";
}

static void report(fastmm_event_type_t type, const char *what, const void *p, fm_block_ref_t ref, size_t size,
                   size_t alignment, unsigned how)
{
    fm_report_t r;
    fm_report_begin(&r);
    fm_report_str(&r, "libfastmm5: ");
    fm_report_str(&r, what);
    fm_report_str(&r, "\nDetected by: operator delete");
    fm_report_str(&r, (how & FM_FAMILY_MASK) == FM_FAMILY_NEW_ARRAY ? "[]" : "");
    fm_report_str(&r, "(void*");
    if (how & FM_DELETE_SIZED) {
        fm_report_str(&r, ", size ");
        fm_report_dec(&r, size);
    }
    if (alignment != 0) {
        fm_report_str(&r, ", alignment ");
        fm_report_dec(&r, alignment);
    }
    fm_report_str(&r, "), thread ");
    fm_report_dec(&r, fm_os_thread_id());
    fm_report_str(&r, "\nBlock: ");
    fm_report_hex(&r, (uintptr_t)p);
    fm_report_str(&r, ", a ");
    fm_report_str(&r, kind_name(ref.kind));
    fm_report_str(&r, " block of ");
    fm_report_dec(&r, fm_block_usable(p, ref));
    fm_report_str(&r, " usable bytes. It is freed all the same.");
    fm_event_raise(type, p, 0, 0, &r);
}

void fm_delete_slow(void *p, size_t size, size_t alignment, unsigned how)
{
    int saved = errno;
    if (fm_guard_owns(p)) { /* before anything reads around p */
        fm_guard_free(p, "operator delete");
        errno = saved;
        return;
    }
    if (fm_debug_delete_block(p, size, alignment, how)) {
        errno = saved;
        return;
    }
    fm_block_ref_t ref = fm_block_classify(p);
    if (ref.kind != FM_BLOCK_INVALID && !(fm_flags_get(p) & (FM_FLAG_DEBUG_INFO | FM_FLAG_FREE))) {
        if (alignment != 0 && ((uintptr_t)p & (alignment - 1)) != 0)
            report(FASTMM_EVENT_MISMATCHED_DEALLOCATION,
                   "an aligned operator delete was given an alignment the block does not have", p, ref, size,
                   alignment, how);
        else if ((how & FM_DELETE_SIZED) && !size_fits(p, ref, size, alignment))
            report(FASTMM_EVENT_SIZED_DELETE_MISMATCH,
                   "a sized operator delete was given a size that does not fit the block", p, ref, size, alignment,
                   how);
    }
    errno = saved;
    fastmm_free(p);
}

/* ---- a plain block whose flag word was overwritten ---- */

/* The highest in-use bit of the span's bitmap at or below `unit`, or SIZE_MAX. */
static size_t block_at_or_below(const fm_medium_span_t *span, size_t unit)
{
    for (size_t word = unit / 64 + 1; word-- > 0;) {
        uint64_t bits = fm_load_relaxed(&span->in_use_bits[word]);
        if (word == unit / 64 && unit % 64 != 63)
            bits &= ((uint64_t)1 << (unit % 64 + 1)) - 1;
        if (bits != 0)
            return word * 64 + 63 - (size_t)__builtin_clzll(bits);
    }
    return SIZE_MAX;
}

static bool start_damaged(const void *p, size_t *usable, const char **kind)
{
    uintptr_t entry = fm_pagemap_lookup(p);
    if (entry == 0 || ((uintptr_t)p & (FM_MIN_ALIGN - 1)) != 0)
        return false;
    void *owner = (void *)(entry & ~(uintptr_t)FM_REGION_TYPE_MASK);
    if ((entry & FM_REGION_TYPE_MASK) == FM_REGION_LARGE) {
        fm_large_header_t *h = owner;
        if ((const char *)p != (const char *)h + FM_LARGE_HEADER)
            return false;
        *usable = fm_large_usable(h);
        *kind = "large";
        return true;
    }
    const fm_medium_span_t *span = owner;
    uintptr_t off = (uintptr_t)p - (uintptr_t)span;
    if (off < span->first_block || off >= span->span_size)
        return false;
    size_t unit = block_at_or_below(span, off / 64u);
    if (unit == SIZE_MAX || unit * 64u < span->first_block)
        return false;
    const char *block = (const char *)span + unit * 64u;
    const fm_medium_header_t *mh = fm_medium_header_of(block);
    if (block == (const char *)p) {
        /* a medium block starts here, unless it is a small span (no user block) */
        if (mh->is_small_span == 1 && mh->span_offset64 == unit && fm_medium_validate(block, span))
            return false;
        *usable = fm_medium_block_size(p) - FM_MEDIUM_HEADER;
        *kind = "medium";
        return true;
    }
    /* p inside a small span: one of its block starts, handed out by the feed */
    const fm_small_span_t *s = (const fm_small_span_t *)block;
    if (!fm_medium_validate(block, span) || mh->is_small_span != 1 ||
        fm_load_relaxed(&s->seal) != fm_small_seal_of(s) || s->block_size == 0)
        return false;
    uintptr_t in_span = (uintptr_t)p - (uintptr_t)s;
    if (in_span < FM_SMALL_SPAN_HEADER || (in_span - FM_SMALL_SPAN_HEADER) % s->block_size != 0 ||
        (in_span - FM_SMALL_SPAN_HEADER) / s->block_size >= s->total_blocks || !fm_small_is_fed(s, p))
        return false;
    *usable = (size_t)s->block_size - 2u;
    *kind = "small";
    return true;
}

bool fm_block_start_damaged(const void *p, size_t *usable, const char **kind)
{
    fm_track_quiet(true);
    bool yes = start_damaged(p, usable, kind);
    fm_track_quiet(false);
    return yes;
}
