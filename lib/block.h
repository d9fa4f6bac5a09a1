/*
 * block.h - the block decoders: the one place that turns a pointer into "which block is this",
 * checking every record it reads before it trusts it (a bad pointer is refused, never followed).
 *
 * A decoder reads only the block geometry (layout.h), the pagemap and the managers' own records
 * (span headers, the medium in-use bitmap, the small span seal, the small manager array's
 * bounds); it calls no function of a manager, so it sits with the geometry in the layer table
 * (tests/layers.sh), below the managers that use it. internal.h includes it once the pagemap
 * and those records are declared.
 *
 * The decoders, from the cheapest:
 *   fm_block_small_live, fm_block_medium_live  free()'s frameless path: a live plain block of a
 *       medium span, or "don't know" (the full decoding then finds the right report)
 *   fm_block_large_live  realloc's in-place path: a live plain large block
 *   fm_block_medium, fm_block_small, fm_block_large  one kind, in any state, for the full decoding
 *   fm_block_small_span  a live small span (damaged.c, which cannot trust the flag word)
 *   fm_block_decode  the full decoding of any pointer: its reference, or why it is none
 *   fm_block_debug_candidate, fm_block_debug  debug blocks (their header precedes the user pointer)
 *   fm_block_small_freed_plain, fm_block_medium_freed_plain  a free block in a thread's cache:
 *       its flag word is intact
 */
#ifndef FM_BLOCK_H
#define FM_BLOCK_H

#include "base.h"
#include "sync.h"
#include "os.h"
#include "layout.h"

/* A decoded block: its kind and the record that owns it. */
typedef enum { FM_BLOCK_INVALID, FM_BLOCK_SMALL, FM_BLOCK_MEDIUM, FM_BLOCK_LARGE } fm_block_kind_t;
typedef struct fm_block_ref {
    fm_block_kind_t kind;
    void *owner; /* small: its fm_small_span_t; large: its header; medium: its span */
    const char *why; /* INVALID: the reason, for the report */
} fm_block_ref_t;

/* A debug block's header (debug.c) is the 64 bytes before its user pointer; its last two bytes
 * are the user pointer's flag word. */
#define FM_DEBUG_HEADER 64u

/* ---- small blocks ---- */

/* The per-process key of the small span seal (small.c sets it at start-up). */
extern uintptr_t fm_small_seal_key;
FM_INLINE uintptr_t fm_small_seal_of(const fm_small_span_t *span) { return (uintptr_t)span ^ fm_small_seal_key; }

/* Whether the feed has handed out block p of span s (else its flag word was never written). */
FM_INLINE bool fm_small_is_fed(const fm_small_span_t *s, const void *p)
{
    return (uintptr_t)p - (uintptr_t)s >= fm_load_relaxed(&s->fed_floor);
}

/* The span a small block's flag word names (its bits 3..15: the block's offset in the span / 64).
 * Unchecked: the decoders below check the span before they read it. */
FM_INLINE fm_small_span_t *fm_small_span_named(const void *p, uint16_t flags)
{
    return (fm_small_span_t *)(((uintptr_t)p & ~(uintptr_t)63) - ((uintptr_t)(flags & FM_SMALL_OFFSET_MASK) << 3));
}

/* ---- medium blocks ---- */

/* Whether the in-use bit of the span's 64-byte unit `unit` is set. Blocks are carved from the
 * bottom up, so while a span is little used its bits lie in the header's page (a 3 MiB span's
 * bitmap is 6 KiB, two pages). */
FM_INLINE bool fm_medium_bit_set(const fm_medium_span_t *span, size_t unit)
{
    return (fm_load_relaxed(&span->in_use_bits[unit / 64]) >> (unit % 64)) & 1u;
}

/* p is an in-use medium block (or small span) of `span` only if its bitmap bit says a block
 * starts there and its header agrees. Inline: free() asks it for every medium block. */
FM_INLINE bool fm_block_medium(const void *p, const fm_medium_span_t *span)
{
    uintptr_t off = (uintptr_t)p - (uintptr_t)span;
    if ((off & 63u) != 0 || off < span->first_block || off >= span->span_size)
        return false;
    size_t unit = off / 64u;
    if (!fm_medium_bit_set(span, unit))
        return false;
    const fm_medium_header_t *h = fm_medium_header_of(p);
    return h->span_offset64 == unit && (h->flags & (FM_FLAG_MEDIUM | FM_FLAG_SMALL)) == FM_FLAG_MEDIUM;
}

/* Whether p is a live plain medium block of medium span ms (the bounds first: only then may
 * its header be read). */
FM_INLINE bool fm_block_medium_live(const void *p, const fm_medium_span_t *ms)
{
    return fm_block_medium(p, ms) && fm_flags_get(p) == FM_FLAG_MEDIUM &&
           !fm_load_relaxed(&fm_medium_header_of(p)->is_small_span);
}

/* ---- small blocks, decoded ---- */

/* The index of the block at p in small span s if p is exactly the start of one of its blocks,
 * else a number >= s->total_blocks. One multiply and a rotation: with block_size = odd << k,
 * x -> rotate_right(x * odd_inverse, k) is a bijection of 32-bit numbers that maps q * block_size
 * to q for every block index q (q * block_size < 2^32, so x * odd_inverse = q << k exactly); so
 * no other offset maps below total_blocks. p must lie less than 4 GiB above s (inside s's medium
 * span), so that the offset's low 32 bits are all of it; offsets below the first block wrap to
 * numbers no block has. */
FM_INLINE uint32_t fm_small_block_index(const fm_small_span_t *s, const void *p)
{
    uint32_t offset = (uint32_t)((uintptr_t)p - (uintptr_t)s) - s->head;
    uint32_t x = offset * s->odd_inverse;
    unsigned k = s->odd_shift;
    return x >> k | x << (-k & 31u);
}
FM_STATIC_ASSERT(FM_MEDIUM_MAX_SPAN < ((uint64_t)1 << 32), "a small block's offset in its span fits 32 bits");

/*
 * A live plain small block of medium span ms, in a few loads: its flag word says small, in use,
 * not debug; the span header it names lies inside ms and carries the seal (its address xor the
 * process's random key, cleared when the span is released); and the pointer sits exactly on a
 * block of that span that the feed has handed out (the flag word of a block below fed_floor was
 * never written: it is whatever the memory held). A pointer that fails any test is not refused
 * here: it takes the full decoding (fm_block_decode), which finds the right report. Returns the
 * span, or NULL, and in *flags the block's flag word as read (free() stores it back with FREE).
 *
 * The bounds are the mapping's, not ms's first block: a medium span is one readable mapping of
 * whole chunks (os.h) and the pagemap names ms for p's chunk, so p - 2 can be read when it lies
 * in that chunk (a block that starts a chunk, at most one in 64 KiB, takes the full decoding),
 * and so can a span header at or above ms. The seal, not the bounds, tells a span from other
 * bytes: a header named inside ms's own header or bitmap holds it no more than a medium block's
 * user data, which the bounds never kept out. So this path reads nothing of ms, and p's offset
 * in its span is one step: p mod 64 or'ed with the flag word's multiple of 64.
 */
FM_INLINE fm_small_span_t *fm_block_small_live_flags(const void *p, const fm_medium_span_t *ms, uint16_t *flags_out)
{
    if (((uintptr_t)p & (FM_OS_CHUNK - 2u)) == 0) /* p - 2 in the chunk below, maybe not ms's */
        return NULL;
    uint16_t flags = fm_flags_get(p);
    if (((flags ^ FM_FLAG_SMALL) & (FM_FLAG_SMALL | FM_FLAG_FREE | FM_FLAG_DEBUG_INFO)) != 0) /* SMALL alone */
        return NULL;
    /* fm_small_span_named's span, by p's offset in it (under FM_MEDIUM_MAX_SPAN: s <= p in ms) */
    uintptr_t offset = ((uintptr_t)p & 63u) | ((uintptr_t)(flags & FM_SMALL_OFFSET_MASK) << 3);
    fm_small_span_t *s = (fm_small_span_t *)((uintptr_t)p - offset);
    if ((uintptr_t)s < (uintptr_t)ms || (fm_load_relaxed(&s->seal) ^ fm_small_seal_key) != (uintptr_t)s)
        return NULL;
    if (fm_small_block_index(s, p) >= s->total_blocks ||
        (uint32_t)offset < fm_load_relaxed(&s->fed_floor)) /* fm_small_is_fed */
        return NULL;
    *flags_out = flags;
    return s;
}

FM_INLINE fm_small_span_t *fm_block_small_live(const void *p, const fm_medium_span_t *ms)
{
    uint16_t flags;
    return fm_block_small_live_flags(p, ms, &flags);
}

/* A small block of medium span ms in any state (free, debug), found without trusting the span
 * its flag word names: that span must be an in-use small span of ms (bitmap and header), its
 * manager one of the small managers, and p a block start the feed has handed out. Returns the
 * span, or NULL. */
FM_INLINE fm_small_span_t *fm_block_small(const void *p, const fm_medium_span_t *ms)
{
    uintptr_t off_in_medium = (uintptr_t)p - (uintptr_t)ms;
    if (off_in_medium < ms->first_block + FM_SMALL_TWIN_HEADER || ((uintptr_t)p & (FM_MIN_ALIGN - 1)) != 0)
        return NULL;
    uint16_t flags = fm_flags_get(p);
    if ((flags & FM_FLAG_SMALL) == 0)
        return NULL;
    fm_small_span_t *s = fm_small_span_named(p, flags);
    if ((uintptr_t)s >= (uintptr_t)p || !fm_block_medium(s, ms) || !fm_load_relaxed(&fm_medium_header_of(s)->is_small_span))
        return NULL;
    const fm_small_manager_t *m = s->manager;
    uintptr_t first = (uintptr_t)&fm_small_managers[0][0];
    if ((uintptr_t)m < first || (uintptr_t)m >= first + sizeof fm_small_managers ||
        ((uintptr_t)m - first) % sizeof(fm_small_manager_t) != 0)
        return NULL;
    uint32_t head = fm_small_head_of(m->class_index);
    if ((uintptr_t)p - (uintptr_t)s < head)
        return NULL;
    uint64_t offset = (uintptr_t)p - (uintptr_t)s - head;
    uint64_t index = (offset * m->reciprocal) >> 32;
    if (index * m->block_size != offset || index >= s->total_blocks || !fm_small_is_fed(s, p))
        return NULL;
    return s;
}

/* The medium block at `block` of span ms as a live small span (in use, flagged a small span,
 * sealed, with a class), found from the medium records alone: for a pointer whose own flag word
 * cannot be trusted. Returns the span, or NULL. */
FM_INLINE const fm_small_span_t *fm_block_small_span(const void *block, const fm_medium_span_t *ms)
{
    const fm_small_span_t *s = (const fm_small_span_t *)block;
    if (!fm_block_medium(block, ms) || fm_medium_header_of(block)->is_small_span != 1 ||
        fm_load_relaxed(&s->seal) != fm_small_seal_of(s) || s->block_size == 0)
        return NULL;
    return s;
}

/* ---- large blocks ---- */

FM_INLINE bool fm_block_large(const void *p, const fm_large_header_t *h)
{
    return (const char *)p == (const char *)h + FM_LARGE_HEADER && (h->flags & FM_FLAG_LARGE) != 0;
}

/* A live plain large block with header h (the pagemap's owner of p's chunk). */
FM_INLINE bool fm_block_large_live(const void *p, const fm_large_header_t *h)
{
    return (const char *)p == (const char *)h + FM_LARGE_HEADER && fm_flags_get(p) == FM_FLAG_LARGE;
}

/* ---- any block ---- */

/* The full decoding: p's reference if it is the user pointer of a small, medium or large block
 * of this heap in any state (the caller tests FREE and DEBUG_INFO), else FM_BLOCK_INVALID and
 * why. Fails closed: nothing is read before the pagemap and the span bounds say it is ours. */
FM_INLINE fm_block_ref_t fm_block_decode(const void *p)
{
    fm_block_ref_t ref = {FM_BLOCK_INVALID, NULL, NULL};
    uintptr_t entry = fm_pagemap_lookup(p);
    if (entry == 0) {
        ref.why = "it is not inside any memory of this heap (a stack or static address, or another "
                      "allocator's block)";
        return ref;
    }
    void *owner = (void *)(entry & ~(uintptr_t)FM_REGION_TYPE_MASK);
    ref.why = "it points into this heap but not to the start of a live block (an interior pointer, "
                  "or a block already freed)";
    if ((entry & FM_REGION_TYPE_MASK) == FM_REGION_GUARD)
        return ref; /* guard.c's: the entry points send these there first, nothing around p is read */
    if ((entry & FM_REGION_TYPE_MASK) == FM_REGION_LARGE) {
        if (fm_block_large(p, owner))
            ref.kind = FM_BLOCK_LARGE, ref.owner = owner;
        return ref;
    }
    fm_medium_span_t *span = owner;
    if ((uintptr_t)p - (uintptr_t)span < span->first_block)
        return ref; /* no block starts there (and p - 2 might not be mapped) */
    /* For a small block the bits above SMALL are its span offset, so test SMALL first. */
    fm_small_span_t *small;
    if (fm_flags_get(p) & FM_FLAG_SMALL) {
        if ((small = fm_block_small(p, span)) != NULL)
            ref.kind = FM_BLOCK_SMALL, ref.owner = small;
    } else if (((uintptr_t)p & 63u) == 0 && fm_block_medium(p, span) && !fm_load_relaxed(&fm_medium_header_of(p)->is_small_span)) {
        ref.kind = FM_BLOCK_MEDIUM, ref.owner = span;
    }
    return ref;
}

/* ---- debug blocks ---- */

/* Whether p's flag word, if p is inside this heap far enough for it to be read, is a debug
 * block's own (DEBUG_BLOCK, maybe FREE, nothing else): then debug.c decodes it first (one full
 * decoding saved). The exact value matters: a plain small block's flag word carries its span
 * offset in the same bits, and sending one to debug.c would make it read the word before the
 * would-be debug header, which is inside the neighbouring block, perhaps another thread's (a
 * harmless but real data race; ThreadSanitizer saw it in tests/tsan.sh). */
FM_INLINE bool fm_block_debug_candidate(const void *p)
{
    uintptr_t entry = fm_pagemap_lookup(p);
    const char *owner = (const char *)(entry & ~(uintptr_t)FM_REGION_TYPE_MASK);
    size_t floor = (entry & FM_REGION_TYPE_MASK) == FM_REGION_MEDIUM_SPAN
                       ? ((const fm_medium_span_t *)owner)->first_block + 64u
                       : FM_LARGE_HEADER + 64u;
    return entry != 0 && (entry & FM_REGION_TYPE_MASK) != FM_REGION_GUARD && (uintptr_t)p >= (uintptr_t)owner + floor &&
           (fm_flags_get(p) & ~FM_FLAG_FREE) == FM_FLAG_DEBUG_BLOCK;
}

/* p as the user pointer of a debug block, live or freed: its outer block (the header's) decodes
 * as a plain block flagged DEBUG_INFO, and the header's flag word is a debug block's own. Then
 * *outer_ref is the outer block's reference. The header's checksum is debug.c's to check. */
FM_INLINE bool fm_block_debug(const void *p, fm_block_ref_t *outer_ref)
{
    if (((uintptr_t)p & (FM_MIN_ALIGN - 1)) != 0)
        return false;
    const char *outer = (const char *)p - FM_DEBUG_HEADER;
    fm_block_ref_t ref = fm_block_decode(outer);
    if (ref.kind == FM_BLOCK_INVALID || !(fm_flags_get(outer) & FM_FLAG_DEBUG_INFO))
        return false;
    uint16_t f = fm_flags_get(p);
    if (f != FM_FLAG_DEBUG_BLOCK && f != (FM_FLAG_DEBUG_BLOCK | FM_FLAG_FREE))
        return false;
    *outer_ref = ref;
    return true;
}

/* ---- cached free blocks ---- */

/* Whether a freed small block's flag word is intact and plain: only then do its low bits read
 * SMALL | FREE (a freed debug block has DEBUG_INFO and is vetted by debug.c instead). */
FM_INLINE bool fm_block_small_freed_plain(unsigned flags)
{
    return (flags & FM_SMALL_STATE_MASK) == FM_SMALL_FREE_STATE;
}

/* The same for a freed medium block: its flag word is exactly MEDIUM | FREE. */
FM_INLINE bool fm_block_medium_freed_plain(unsigned flags) { return flags == (FM_FLAG_MEDIUM | FM_FLAG_FREE); }

#endif
