/*
 * damaged.c - a plain block whose flag word was overwritten: found from its span's own records
 * (the medium in-use bitmap, the small span's geometry and seal, the large header), since the
 * word that would say what the block is cannot be trusted. debug.c reports it as header
 * corruption when free(), realloc() or malloc_usable_size() is given such a block.
 */
#include "internal.h"

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
    if ((entry & FM_REGION_TYPE_MASK) == FM_REGION_GUARD)
        return false; /* guard.c's blocks have no header to damage */
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
        if (fm_block_medium(block, span) && mh->is_small_span == 1)
            return false;
        *usable = fm_medium_block_size(p) - FM_MEDIUM_HEADER;
        *kind = "medium";
        return true;
    }
    /* p inside a small span: one of its block starts, handed out by the feed */
    const fm_small_span_t *s = fm_block_small_span(block, span);
    if (s == NULL)
        return false;
    uintptr_t in_span = (uintptr_t)p - (uintptr_t)s;
    uint32_t head = fm_small_head_of(s->class_index);
    if (in_span < head || (in_span - head) % s->block_size != 0 ||
        (in_span - head) / s->block_size >= s->total_blocks || !fm_small_is_fed(s, p))
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
