/*
 * medium.c - the medium block manager: blocks of 2880 .. 558912 bytes carved from OS spans, kept
 * in 1024 size bins with a two-level bitmap, coalesced with both neighbours on free, and a span
 * given back to the OS when all of it is free (FastMM5's design, doc/fastmm5-facts.md sections 2.4, 2.9, 11.3-4).
 *
 * Small-block spans are medium blocks too (is_small_span in their header).
 *
 * Every manager field and every header inside an arena's spans changes only under that arena's
 * lock, except `pending`, the lock-free stack of frees that found the lock taken.
 * Free blocks are told apart from in-use ones by the span's in-use bitmap, not by their flag
 * word: a block on the pending stack carries FREE already but is not yet free space.
 */
#include "internal.h"

fm_medium_manager_t fm_medium_managers[FM_MEDIUM_ARENAS];
static uint64_t contention;
bool fm_medium_never_merge;

/* ---- the span's in-use bitmap (written under the lock, read by free() without it) ---- */

FM_INLINE size_t unit_of(const fm_medium_span_t *span, const void *p)
{
    return (size_t)((uintptr_t)p - (uintptr_t)span) / 64u;
}

static bool is_used(const fm_medium_span_t *span, const void *p)
{
    return fm_medium_bit_set(span, unit_of(span, p));
}

static void set_used(fm_medium_span_t *span, const void *p, bool used)
{
    size_t u = unit_of(span, p);
    uint64_t *word = &span->in_use_bits[u / 64];
    uint64_t bit = (uint64_t)1 << (u % 64);
    fm_store_relaxed(word, used ? (*word | bit) : (*word & ~bit));
    span->used_blocks += used ? 1u : (uint32_t)-1;
    if (used && span->manager->kept_empty == span)
        span->manager->kept_empty = NULL; /* in use again */
}

static void set_header(fm_medium_span_t *span, void *p, size_t size, uint16_t flags, uint8_t prev_free)
{
    fm_medium_header_t *h = fm_medium_header_of(p);
    h->size64 = (uint16_t)(size / 64u);
    h->span_offset64 = (uint16_t)unit_of(span, p);
    h->prev_free = prev_free;
    fm_store_relaxed(&h->is_small_span, 0);
    fm_flags_set(p, flags);
}

FM_INLINE bool is_sentinel(const void *p) { return fm_medium_header_of(p)->size64 == 0; }

static void mark_frontier(fm_medium_manager_t *m);
static void report_quarantine_and_unlock(fm_medium_manager_t *m);

/* ---- bins ---- */

static void bin_insert(fm_medium_manager_t *m, void *p, size_t size)
{
    unsigned bin = fm_medium_bin_of(size);
    fm_medium_free_links_t *b = p, *head = m->bins[bin];
    b->next = head;
    b->prev = NULL;
    if (head != NULL) {
        head->prev = b;
    } else {
        m->bin_bitmaps[bin / 32] |= 1u << (bin % 32);
        fm_store_relaxed(&m->group_bitmap, m->group_bitmap | 1u << (bin / 32)); /* see may_fit */
    }
    m->bins[bin] = b;
}

static void bin_remove_from(fm_medium_manager_t *m, void *p, unsigned bin)
{
    fm_medium_free_links_t *b = p;
    if (b->prev != NULL)
        b->prev->next = b->next;
    else
        m->bins[bin] = b->next;
    if (b->next != NULL)
        b->next->prev = b->prev;
    if (m->bins[bin] == NULL) {
        m->bin_bitmaps[bin / 32] &= ~(1u << (bin % 32));
        if (m->bin_bitmaps[bin / 32] == 0)
            fm_store_relaxed(&m->group_bitmap, m->group_bitmap & ~(1u << (bin / 32)));
    }
}

static void bin_remove(fm_medium_manager_t *m, void *p, size_t size) { bin_remove_from(m, p, fm_medium_bin_of(size)); }

/* The first bin whose every block is at least `size`: round the size up to a bin boundary. */
static unsigned min_bin_for(size_t size)
{
    if (size <= FM_MEDIUM_MIN_BLOCK)
        return 0;
    unsigned bin = fm_medium_bin_of(size);
    return fm_medium_bin_size(bin) < size ? bin + 1 : bin;
}

/* Smallest non-empty bin >= min_bin ("good fit"), or NULL. */
static void *bin_find(const fm_medium_manager_t *m, unsigned min_bin)
{
    if (min_bin >= FM_MEDIUM_BIN_COUNT)
        return NULL;
    unsigned group = min_bin / 32;
    uint32_t bits = m->bin_bitmaps[group] & (~0u << (min_bin % 32));
    if (bits == 0) {
        uint32_t groups = group + 1 < 32 ? m->group_bitmap & (~0u << (group + 1)) : 0;
        if (groups == 0)
            return NULL;
        group = fm_ctz32(groups);
        bits = m->bin_bitmaps[group];
    }
    return m->bins[group * 32 + fm_ctz32(bits)];
}

/* ---- spans ---- */

static size_t first_block_offset(size_t span_size)
{
    /* header, one bit per 64 bytes, then room for the first block's 8-byte header */
    return fm_align_up(64 + span_size / 512 + FM_MEDIUM_HEADER, 64);
}

static void release_span(fm_medium_manager_t *m, fm_medium_span_t *span)
{
    if (m->kept_empty == span)
        m->kept_empty = NULL;
    if (span->prev != NULL)
        span->prev->next = span->next;
    else
        m->spans = span->next;
    if (span->next != NULL)
        span->next->prev = span->prev;
    if (m->feed_span == span)
        m->feed_span = NULL;
    fm_pagemap_unregister(span, span->span_size);
    fm_os_unmap(span, span->span_size);
}

/* FastMM5's anti-thrash rule: keep one empty span as a free block in the top bin while the
 * feed is nearly used up, so the next large request needs no fresh mapping. */
static bool keep_empty_span(const fm_medium_manager_t *m, const fm_medium_span_t *span)
{
    if (fm_options.strategy == FM_STRATEGY_LOW_MEMORY || span == m->feed_span)
        return false;
    size_t unfed = m->feed_span != NULL ? m->feed_span->span_size - m->feed_offset : 0;
    return unfed < FM_MEDIUM_MAX_BLOCK && m->bins[FM_MEDIUM_BIN_COUNT - 1] == NULL;
}

/* A span with no block in use whose free blocks were not coalesced (debug mode's never-merge
 * option): unbin every block and give the span back. This keeps debug mode's memory bounded. */
static void release_uncoalesced_span(fm_medium_manager_t *m, fm_medium_span_t *span)
{
    for (size_t off = span->first_block; off < span->span_size;) {
        char *p = (char *)span + off;
        size_t size = fm_medium_block_size(p);
        if (size >= FM_MEDIUM_MIN_BLOCK)
            bin_remove(m, p, size);
        off += size;
    }
    release_span(m, span);
}

/* ---- giving back the pages of big free blocks (a decay, as mimalloc and jemalloc purge) ----
 * A free block's pages stay resident: users wrote them, and headers written there over time
 * (splits, small spans carved and given back) touch pages all over a span. A free block of at
 * least PURGE_MIN_BLOCK bytes that stays free for PURGE_DELAY_MS is given back (MADV_DONTNEED,
 * all of it but the pages holding its header, bin links, stamp and boundary tag); one that is
 * reused within the delay keeps its pages, so a program that frees and reallocates big blocks
 * at a high rate pays no page faults for it (giving back every such block at once makes a
 * medium-size sweep 28x slower: every reuse faults its pages in again, ~15 us each). The delay
 * is long enough for an interpreter's next round of work to find the region it freed still
 * resident, short enough that the peak of a program that frees and moves on stays low.
 * Debug blocks are never given back: their freed pattern is checked on reuse.
 * The free block records when it was freed in the word after its bin links (PURGED: given back
 * already); merging makes a new block with a new stamp. At most one pass per delay, started by
 * a free that leaves such a block: its arena under the lock it holds, then every other arena
 * whose lock is free at that moment. malloc_trim gives back the pages inside every free block
 * of 4 pages or more at once. */
#define PURGE_MIN_BLOCK ((size_t)128 << 10)
#define PURGE_DELAY_MS 30u
#define PURGED UINT64_MAX

/* Whether a stamp of the coarse clock is at least min_age old at `now`. A stamp may lie ahead
 * of now: a pass over another arena runs with the time its caller read before taking that
 * arena's lock, and the feed's stamp is the time | 1 (0 meaning none); without the first test
 * the difference would wrap around and read as very old. */
FM_INLINE bool aged(uint64_t now, uint64_t stamp, uint64_t min_age)
{
    return stamp <= now && now - stamp >= min_age;
}

static uint64_t purge_due_ms; /* when the next pass may run */

FM_INLINE uint64_t *free_stamp(void *p) { return (uint64_t *)((char *)p + 16); }

static bool purge_block(void *p, size_t size)
{
    size_t page = fm_os_page_size();
    uintptr_t lo = fm_align_up((uintptr_t)(free_stamp(p) + 1), page);
    uintptr_t hi = fm_align_down((uintptr_t)fm_medium_boundary_tag((char *)p + size), page);
    if (hi > lo)
        fm_os_trim((void *)lo, hi - lo);
    fm_track_internal(free_stamp(p), 8);
    *free_stamp(p) = PURGED;
    return hi > lo;
}

/* Gives back the free blocks of at least min_block bytes freed min_age ms ago or earlier (the
 * stamp is only read where free_locked wrote one: blocks of PURGE_MIN_BLOCK bytes or more). */
static bool purge_pass_locked(fm_medium_manager_t *m, uint64_t now, size_t min_block, uint64_t min_age)
{
    bool any = false;
    /* Not under Valgrind (3.19): a child forked while other threads allocate hung in it
     * (test_fork_while_allocating's children ran into their 20 s alarm in 1 to 3 runs of 3; none
     * with the madvise left out, none natively). Memcheck runs are about correctness, not
     * resident memory. */
    if (fm_track_on)
        return false;
    unsigned first = fm_medium_bin_of(min_block);
    for (unsigned g = first / 32; g < FM_MEDIUM_BIN_GROUPS; g++) {
        uint32_t bits = m->bin_bitmaps[g] & (g == first / 32 ? ~0u << (first % 32) : ~0u);
        for (; bits != 0; bits &= bits - 1) {
            for (fm_medium_free_links_t *b = m->bins[g * 32 + fm_ctz32(bits)]; b != NULL; b = b->next) {
                size_t size = fm_medium_block_size(b);
                if (size < min_block || (fm_flags_get(b) & FM_FLAG_DEBUG_INFO))
                    continue;
                if (size < PURGE_MIN_BLOCK ||
                    (*free_stamp(b) != PURGED && aged(now, *free_stamp(b), min_age)))
                    any |= purge_block(b, size);
            }
        }
    }
    /* the feed's unfed rest, once big blocks freed at its frontier went back to it: all but the
     * page of the span's end sentinel (and of the frontier's header, below lo) */
    fm_medium_span_t *fs = m->feed_span;
    if (fs != NULL && m->feed_receded_ms != 0 && aged(now, m->feed_receded_ms, min_age)) {
        size_t page = fm_os_page_size();
        uintptr_t lo = fm_align_up((uintptr_t)fs + m->feed_offset, page);
        uintptr_t hi = (uintptr_t)fs + fs->span_size - page;
        if (hi > lo) {
            fm_os_trim((void *)lo, hi - lo);
            any = true;
        }
        m->feed_receded_ms = 0;
    }
    return any;
}

/* A block of PURGE_MIN_BLOCK bytes or more was just freed into m at `now`: runs the pass if it
 * is due, over m and over every other arena whose lock is free right now (a try never waits,
 * so there is no lock order to keep). */
static void purge_if_due_locked(fm_medium_manager_t *m, uint64_t now)
{
    if (fm_track_on || now < fm_load_relaxed(&purge_due_ms))
        return; /* under memcheck every pass would do nothing (purge_pass_locked): no try-locks */
    fm_store_relaxed(&purge_due_ms, now + PURGE_DELAY_MS);
    purge_pass_locked(m, now, PURGE_MIN_BLOCK, PURGE_DELAY_MS);
    for (unsigned a = 0; a < FM_MEDIUM_ARENAS; a++) {
        fm_medium_manager_t *other = &fm_medium_managers[a];
        if (other != m && fm_lock_try(&other->lock)) {
            purge_pass_locked(other, now, PURGE_MIN_BLOCK, PURGE_DELAY_MS);
            fm_lock_release(&other->lock);
        }
    }
}

/* ---- free blocks whose header the program overwrote ----
 * A free block's header names its own position, its size and its free state, and the block ends
 * in a boundary tag holding that size. (The next header's prev_free is no such witness: with
 * debug mode's never-merge option, taking a free block clears its own prev_free although the
 * free block below it stays.) A write just before a free block, past the end of the block below
 * it, breaks that agreement. Before a free block is handed out or merged with, it is checked; a
 * damaged one is taken out of its bin, marked in use for good (no neighbour merges with it
 * again) and reported once the lock is dropped. */

static void quarantine_note(fm_medium_manager_t *m, void *p, const char *operation)
{
    if (m->quarantine_count < sizeof m->quarantine / sizeof m->quarantine[0]) {
        m->quarantine_op[m->quarantine_count] = operation;
        m->quarantine[m->quarantine_count++] = p;
    }
}

FM_INLINE bool free_block_sound(const fm_medium_span_t *span, const char *p)
{
    size_t off = (size_t)(p - (const char *)span);
    const fm_medium_header_t *h = fm_medium_header_of(p);
    size_t size = (size_t)h->size64 * 64u;
    if (h->span_offset64 != off / 64u || size == 0 || size > span->span_size - off ||
        (h->flags & (FM_FLAG_MEDIUM | FM_FLAG_SMALL | FM_FLAG_FREE)) != (FM_FLAG_MEDIUM | FM_FLAG_FREE))
        return false;
    return *fm_medium_boundary_tag(p + size) == size;
}

/* The end of the damaged free block at p: the first header above it that names its own position
 * (or ends the span or the feed) and whose boundary tag measures back to p; NULL if none does. */
static char *damaged_block_end(const fm_medium_span_t *span, char *p)
{
    size_t off = (size_t)(p - (const char *)span);
    fm_track_quiet(true); /* the search reads the block's own bytes */
    char *end = NULL;
    for (size_t at = off + 64u; at <= span->span_size && end == NULL; at += 64u) {
        char *q = (char *)span + at;
        const fm_medium_header_t *h = fm_medium_header_of(q);
        if (*fm_medium_boundary_tag(q) == at - off && (h->span_offset64 == at / 64u || h->size64 == 0))
            end = q;
    }
    fm_track_quiet(false);
    return end;
}

/* Unlinks p from whichever bin holds it, without trusting its size. */
static void bin_remove_damaged(fm_medium_manager_t *m, void *p)
{
    fm_medium_free_links_t *b = p;
    for (unsigned bin = 0; bin < FM_MEDIUM_BIN_COUNT; bin++)
        if (m->bins[bin] == b) {
            b->prev = NULL; /* a head's */
            bin_remove_from(m, p, bin);
            return;
        }
    if (b->prev != NULL && b->prev->next == b) { /* inside a list: a head stays */
        b->prev->next = b->next;
        if (b->next != NULL && b->next->prev == b)
            b->next->prev = b->prev;
    }
}

static void quarantine_free_block(fm_medium_manager_t *m, fm_medium_span_t *span, void *p, const char *operation)
{
    char *end = damaged_block_end(span, p);
    if (end == NULL || (size_t)(end - (char *)p) >= FM_MEDIUM_MIN_BLOCK)
        bin_remove_damaged(m, p);
    if (end != NULL)
        fm_medium_header_of(end)->prev_free = 0;
    if (!is_used(span, p))
        set_used(span, p, true);
    quarantine_note(m, p, operation);
}

/* Turns an in-use block into free space: merge with free neighbours, then bin it, or release
 * the span if nothing else is left in it. A freed debug block keeps its DEBUG_INFO flag (its
 * contents are checked when it is reused); with the never-merge option it is not merged
 * backwards, nor forwards into another freed debug block (FastMM5 4.9). */
static void free_locked(fm_medium_manager_t *m, void *p)
{
    fm_medium_span_t *span = fm_medium_span_of(p);
    size_t size = fm_medium_block_size(p);
    uint16_t debug_info = fm_flags_get(p) & FM_FLAG_DEBUG_INFO;
    bool no_merge = fm_load_relaxed(&fm_medium_never_merge);
    set_used(span, p, false);

    char *next = (char *)p + size;
    if (!is_sentinel(next) && !is_used(span, next)) {
        if (!free_block_sound(span, next)) {
            quarantine_free_block(m, span, next, "free");
        } else if (!no_merge || !(fm_flags_get(next) & FM_FLAG_DEBUG_INFO)) {
            size_t next_size = fm_medium_block_size(next);
            if (next_size >= FM_MEDIUM_MIN_BLOCK)
                bin_remove(m, next, next_size);
            size += next_size;
        }
    }
    uint8_t prev_free = fm_medium_header_of(p)->prev_free;
    if (prev_free && !no_merge) {
        size_t prev_size = *fm_medium_boundary_tag(p);
        char *prev = (char *)p - prev_size;
        size_t p_off = (size_t)((char *)p - (char *)span);
        if (prev_size == 0 || prev_size > p_off - span->first_block || prev_size % 64u != 0 ||
            !free_block_sound(span, prev)) {
            /* the tag or the block below is damaged: no merge; the block below is found by
             * its own checks when it is handed out or merged with from below */
            prev_free = 0;
        } else {
            p = prev;
            if (prev_size >= FM_MEDIUM_MIN_BLOCK)
                bin_remove(m, p, prev_size);
            size += prev_size;
            debug_info = fm_flags_get(p) & FM_FLAG_DEBUG_INFO;
            prev_free = 0;
        }
    }
    bool at_frontier = span == m->feed_span && (char *)p + size == (char *)span + m->feed_offset;
    if (at_frontier && !debug_info && !no_merge) {
        /* it borders the feed's frontier: back to the feed (a freed debug block is not: its
         * pattern is checked when it is reused, and the feed hands out without checking) */
        m->feed_offset = (uint32_t)((char *)p - (char *)span);
        mark_frontier(m);
        if (size >= PURGE_MIN_BLOCK) { /* its pages decay like a big free block's */
            uint64_t now = fm_os_coarse_time_ms();
            m->feed_receded_ms = now | 1u;
            purge_if_due_locked(m, now);
        }
        return;
    }
    if (size == span->span_size - span->first_block && !keep_empty_span(m, span)) {
        release_span(m, span);
        return;
    }
    set_header(span, p, size, (uint16_t)(FM_FLAG_MEDIUM | FM_FLAG_FREE | debug_info), prev_free);
    fm_track_internal(p, 16);                  /* bin links */
    fm_track_internal(fm_medium_boundary_tag((char *)p + size), 4);
    *fm_medium_boundary_tag((char *)p + size) = (uint32_t)size;
    fm_medium_header_of((char *)p + size)->prev_free = 1;
    if (size >= FM_MEDIUM_MIN_BLOCK)
        bin_insert(m, p, size);
    if (size >= PURGE_MIN_BLOCK && !debug_info) {
        uint64_t now = fm_os_coarse_time_ms();
        fm_track_internal(free_stamp(p), 8);
        *free_stamp(p) = now;
        purge_if_due_locked(m, now);
    }
    if (span->used_blocks == 0 && span != m->feed_span) {
        /* Keep one such span per arena: a loop that allocates and frees one block would
         * otherwise map and unmap a span every time. A second one goes back to the OS. */
        if (m->kept_empty == NULL)
            m->kept_empty = span;
        else if (m->kept_empty != span)
            release_uncoalesced_span(m, span);
    }
}

/* Cuts an in-use block down to `size`, freeing the tail (which merges with what follows). */
static void split_tail_locked(fm_medium_manager_t *m, void *p, size_t size)
{
    size_t whole = fm_medium_block_size(p);
    if (whole - size < 64)
        return;
    fm_medium_span_t *span = fm_medium_span_of(p);
    fm_medium_header_of(p)->size64 = (uint16_t)(size / 64u);
    char *tail = (char *)p + size;
    fm_track_internal(tail - FM_MEDIUM_HEADER, FM_MEDIUM_HEADER + 16); /* its header and bin links */
    fm_track_internal(fm_medium_boundary_tag((char *)p + whole), 4);   /* and its boundary tag */
    set_header(span, tail, whole - size, FM_FLAG_MEDIUM, 0);
    set_used(span, tail, true);
    free_locked(m, tail);
}

static void drain_pending_locked(fm_medium_manager_t *m)
{
    for (void *b = fm_pending_take(&m->pending); b != NULL;) {
        void *next = *(void **)b;
        free_locked(m, b);
        b = next;
    }
}

/* A freed debug block about to be reused must be intact; a damaged one is kept in use forever
 * (quarantined) and reported once the lock is dropped. */
static bool vet_reuse_locked(fm_medium_manager_t *m, void *p)
{
    if (!(fm_flags_get(p) & FM_FLAG_DEBUG_INFO))
        return true;
    if (fm_hooks.debug_freed_block_intact(p))
        return true; /* its DEBUG_INFO is cleared: the scan leaves it alone */
    quarantine_note(m, p, NULL);
    return false;
}

/* Takes the binned free block p for a request of `size`: p, or NULL when p was a damaged freed
 * debug block (quarantined: it stays in use, never merged or reused). */
static void *take_binned(fm_medium_manager_t *m, void *p, size_t size)
{
    /* the span from the ownership map: the header is not trusted yet */
    fm_medium_span_t *span = (fm_medium_span_t *)(fm_pagemap_lookup(p) & ~(uintptr_t)FM_REGION_TYPE_MASK);
    if (!free_block_sound(span, p)) {
        quarantine_free_block(m, span, p, "malloc");
        return NULL;
    }
    bin_remove(m, p, fm_medium_block_size(p));
    bool intact = vet_reuse_locked(m, p);
    uint16_t debug_info = fm_flags_get(p) & FM_FLAG_DEBUG_INFO;
    set_header(span, p, fm_medium_block_size(p), (uint16_t)(FM_FLAG_MEDIUM | debug_info), 0);
    set_used(span, p, true);
    fm_medium_header_of((char *)p + fm_medium_block_size(p))->prev_free = 0;
    if (!intact)
        return NULL;
    split_tail_locked(m, p, size);
    return p;
}

static void *take_from_bins(fm_medium_manager_t *m, size_t size)
{
    for (;;) {
        void *p = bin_find(m, min_bin_for(size));
        if (p == NULL)
            return NULL;
        if ((p = take_binned(m, p, size)) != NULL)
            return p;
    }
}

/* Reuses the best fitting block of the pending stack and frees the others (FastMM5 1.1). */
static void *take_from_pending(fm_medium_manager_t *m, size_t size)
{
    void *best = NULL;
    for (void *b = fm_pending_take(&m->pending); b != NULL;) {
        void *next = *(void **)b;
        size_t bs = fm_medium_block_size(b);
        if (bs >= size && (best == NULL || bs < fm_medium_block_size(best))) {
            if (best != NULL)
                free_locked(m, best);
            best = b;
        } else {
            free_locked(m, b);
        }
        b = next;
    }
    if (best == NULL)
        return NULL;
    if (!vet_reuse_locked(m, best))
        return NULL; /* quarantined: stays in use */
    fm_medium_header_of(best)->flags = FM_FLAG_MEDIUM;
    split_tail_locked(m, best, size);
    return best;
}

/* The feed's frontier, where the next block will start: a header that reads as the span's end
 * (no block is merged with or grown into it), written under the block just carved. */
static void mark_frontier(fm_medium_manager_t *m)
{
    fm_medium_header_t *h = fm_medium_header_of((char *)m->feed_span + m->feed_offset);
    fm_track_internal(h, sizeof *h); /* may lie in a freed block's user bytes */
    h->size64 = 0;
    h->prev_free = 0;
    h->flags = FM_FLAG_MEDIUM;
}

/* Carves from the bottom up, as glibc's heap grows from its top chunk: the newest block borders
 * the unfed rest, so a block that keeps growing (a string or array grown by realloc) grows in
 * place into it (fm_medium_try_resize_in_place) instead of moving and leaving its old copy
 * behind, and a block freed there goes back to the feed (free_locked). */
static void *take_from_feed(fm_medium_manager_t *m, size_t size)
{
    fm_medium_span_t *span = m->feed_span;
    if (span == NULL || span->span_size - m->feed_offset < size)
        return NULL;
    void *p = (char *)span + m->feed_offset;
    m->feed_offset += (uint32_t)size;
    set_header(span, p, size, FM_FLAG_MEDIUM, 0);
    set_used(span, p, true);
    mark_frontier(m);
    return p;
}

/* The unfed rest of the old feed span becomes an ordinary free block. */
static void retire_feed_locked(fm_medium_manager_t *m)
{
    fm_medium_span_t *span = m->feed_span;
    m->feed_span = NULL;
    m->feed_receded_ms = 0; /* the rest becomes a free block with a stamp of its own */
    if (span == NULL || m->feed_offset == span->span_size)
        return;
    void *p = (char *)span + m->feed_offset;
    set_header(span, p, span->span_size - m->feed_offset, FM_FLAG_MEDIUM, 0);
    set_used(span, p, true);
    free_locked(m, p);
}

static void *take_from_new_span(fm_medium_manager_t *m, size_t size)
{
    size_t span_size = fm_options_medium_span_size();
    size_t first = first_block_offset(span_size);
    if (size > span_size - first)
        return NULL;
    fm_medium_span_t *span = fm_os_map(span_size);
    if (span == NULL && fm_large_release_retained())
        span = fm_os_map(span_size); /* the kept large mappings were what stood in the way */
    if (span == NULL)
        return NULL;
    if (!fm_pagemap_register(span, span_size, span, FM_REGION_MEDIUM_SPAN)) {
        fm_os_unmap(span, span_size);
        return NULL;
    }
    retire_feed_locked(m);
    span->manager = m;
    span->span_size = (uint32_t)span_size;
    span->first_block = (uint32_t)first;
    fm_medium_header_t *sentinel = fm_medium_header_of((char *)span + span_size);
    sentinel->size64 = 0; /* never free, never merged past */
    sentinel->flags = FM_FLAG_MEDIUM;
    span->prev = NULL;
    span->next = m->spans;
    if (m->spans != NULL)
        m->spans->prev = span;
    m->spans = span;
    m->feed_span = span;
    m->feed_offset = (uint32_t)first;
    return take_from_feed(m, size);
}

/* ---- allocation: FastMM5's attempts across arenas ---- */

/* Whether the arena may hold a fitting block: a racy peek at its pending stack and bitmaps (a
 * wrong guess only costs a lock). */
static bool may_fit(const fm_medium_manager_t *m, unsigned min_bin)
{
    if (fm_load_relaxed(&m->pending) != NULL)
        return true;
    uint32_t groups = fm_load_relaxed(&m->group_bitmap);
    return min_bin < FM_MEDIUM_BIN_COUNT && (groups >> (min_bin / 32)) != 0;
}

/* Block sizes above what a thread cache keeps (tcache.c): requests over 64 KiB. */
#define BIGGER_THAN_CACHED (FM_TCACHE_MEDIUM_MAX_USER + FM_MEDIUM_HEADER)

/* Returns a locked arena's block, or NULL with *oom set if the OS refused memory. */
static void *alloc_in_locked(fm_medium_manager_t *m, size_t size, bool may_map, bool *oom)
{
    void *p = take_from_pending(m, size);
    if (p == NULL)
        p = take_from_bins(m, size);
    if (p == NULL && may_map) {
        p = take_from_feed(m, size);
        if (p == NULL) {
            p = take_from_new_span(m, size);
            *oom = p == NULL;
        }
    }
    return p;
}

__thread uint8_t fm_home_arena_plus1 __attribute__((tls_model("initial-exec")));

/* This thread's home arena (fm_home_arena, one per live thread cache while there are no more
 * threads than arenas). Its scans start there instead of at arena 0 (FastMM5's order): two
 * threads then do not both try the same arena first and queue on its lock, and a thread tends to
 * reuse the blocks it freed, which went back to its own arena's spans (sweep-medium at 2 threads
 * loses 3x to glibc on arena 0's lock). The home never moves: a home that follows the thread (to
 * where it found room, or to where it last carved new space, which it does whenever its home is
 * locked by another thread taking a block there) soon has two threads sharing one home and
 * waiting on each other's lock (doc/experiments.md, "Medium arenas": `sweep medium 2` bimodal and
 * 4 threads 10% slower that way). */
static unsigned first_arena(void) { return fm_home_arena(); }

static fm_medium_manager_t *alloc_locked(size_t size, void **out)
{
    unsigned min_bin = min_bin_for(size);
    bool oom = false;
    unsigned waits = 0;
    unsigned first = first_arena();
    for (;;) {
        /* Attempt 0 (not in FastMM5): a block bigger than the thread caches keep comes from the
         * home arena's free blocks or its feed before any other arena's free blocks. Taking
         * those (and freeing them back there later) moves the other thread's arena lock, bins
         * and bitmaps between CPUs: without this step, with two threads sweeping medium sizes,
         * 11% of the allocations come from the other's arena, a thread's medium operation costs
         * 1.46x its one-thread time (glibc's 1.14x), and the run 0.89x glibc's speed. */
        if (size > BIGGER_THAN_CACHED) {
            fm_medium_manager_t *m = &fm_medium_managers[first];
            if (fm_lock_try(&m->lock)) {
                if ((*out = alloc_in_locked(m, size, false, &oom)) != NULL ||
                    (*out = take_from_feed(m, size)) != NULL)
                    return m;
                report_quarantine_and_unlock(m);
            }
        }
        /* Attempt 1: an arena that already holds a fitting free block (touches no new memory). */
        bool fit_busy = false;
        for (unsigned i = 0; i < FM_MEDIUM_ARENAS; i++) {
            unsigned a = (first + i) % FM_MEDIUM_ARENAS;
            fm_medium_manager_t *m = &fm_medium_managers[a];
            if (!may_fit(m, min_bin))
                continue;
            if (fm_lock_try(&m->lock)) {
                if ((*out = alloc_in_locked(m, size, false, &oom)) != NULL)
                    return m;
                report_quarantine_and_unlock(m);
            } else {
                fit_busy = true;
            }
        }
        /* A fitting block behind a lock held for a moment is worth a short wait: mapping a new
         * span instead (page faults on every page touched) costs far more, and the span is
         * given back as soon as it empties again (with two threads on a medium size sweep,
         * 375 mappings per run without this wait). */
        if (fit_busy && waits < 16) {
            waits++;
            fm_add_relaxed(&contention, 1);
            fm_os_yield();
            continue;
        }
        /* Attempt 2: any unlocked arena, carving new space if it must. */
        for (unsigned i = 0; i < FM_MEDIUM_ARENAS; i++) {
            unsigned a = (first + i) % FM_MEDIUM_ARENAS;
            fm_medium_manager_t *m = &fm_medium_managers[a];
            if (fm_lock_try(&m->lock)) {
                if ((*out = alloc_in_locked(m, size, true, &oom)) != NULL)
                    return m;
                report_quarantine_and_unlock(m);
                if (oom)
                    return NULL;
            }
        }
        fm_add_relaxed(&contention, 1);
        fm_os_yield();
    }
}

static FM_COLD void report_quarantined_and_unlock(fm_medium_manager_t *m)
{
    void *found[sizeof m->quarantine / sizeof m->quarantine[0]];
    const char *found_by[sizeof m->quarantine / sizeof m->quarantine[0]];
    unsigned n = m->quarantine_count;
    for (unsigned i = 0; i < n; i++) {
        found[i] = m->quarantine[i];
        found_by[i] = m->quarantine_op[i];
    }
    m->quarantine_count = 0;
    fm_lock_release(&m->lock);
    for (unsigned i = 0; i < n; i++) {
        if (found_by[i] != NULL)
            fm_hooks.freed_block_damaged(found_by[i], found[i], fm_flags_get(found[i]));
        else
            fm_hooks.debug_check_reuse(found[i]); /* reports it; the block stays in use, flagged */
    }
}

static void report_quarantine_and_unlock(fm_medium_manager_t *m)
{
    if (FM_LIKELY(m->quarantine_count == 0))
        fm_lock_release(&m->lock);
    else
        report_quarantined_and_unlock(m);
}

void *fm_medium_alloc(size_t block_size, bool small_span)
{
    void *p;
    fm_medium_manager_t *m = alloc_locked(block_size, &p);
    if (m == NULL)
        return NULL;
    if (small_span) {
        /* Memcheck first: the memory may be a freed user block it keeps inaccessible. */
        fm_track_internal(p, block_size - FM_MEDIUM_HEADER); /* the allocator's own from now on */
        fm_store_relaxed(&((fm_small_span_t *)p)->manager, NULL); /* set last by small.c */
    }
    fm_store_relaxed(&fm_medium_header_of(p)->is_small_span, small_span);
    m->served++;
    report_quarantine_and_unlock(m);
    return p;
}

/* A binned free block of min_bin or above that starts at `alignment`: the first of the first 16
 * blocks of the non-empty bins from min_bin up (a bounded look, smallest bins first; the bins are
 * found through the bitmaps, as purge_pass_locked finds them). */
static void *find_aligned(const fm_medium_manager_t *m, unsigned min_bin, size_t alignment)
{
    unsigned looked = 0;
    for (unsigned g = min_bin / 32; g < FM_MEDIUM_BIN_GROUPS; g++) {
        uint32_t bits = m->bin_bitmaps[g] & (g == min_bin / 32 ? ~0u << (min_bin % 32) : ~0u);
        for (; bits != 0; bits &= bits - 1)
            for (fm_medium_free_links_t *b = m->bins[g * 32 + fm_ctz32(bits)]; b != NULL; b = b->next) {
                if (((uintptr_t)b & (alignment - 1)) == 0)
                    return b;
                if (++looked == 16)
                    return NULL;
            }
    }
    return NULL;
}

/* Alignments above 64: a free block that already starts at the alignment, if the bins offer one
 * near the top of their lists (a block an aligned allocation freed does: without this look, the
 * memory of freed aligned blocks only served requests alignment - 64 bytes smaller); else take a
 * block with room to spare, then free the part before the aligned address and the part after
 * the requested size. */
void *fm_medium_alloc_aligned(size_t block_size, size_t alignment)
{
    unsigned min_bin = min_bin_for(block_size), first = first_arena();
    for (unsigned i = 0; i < FM_MEDIUM_ARENAS; i++) {
        fm_medium_manager_t *m = &fm_medium_managers[(first + i) % FM_MEDIUM_ARENAS];
        if (!may_fit(m, min_bin) || !fm_lock_try(&m->lock))
            continue;
        void *q = find_aligned(m, min_bin, alignment);
        if (q != NULL && (q = take_binned(m, q, block_size)) != NULL) {
            fm_store_relaxed(&fm_medium_header_of(q)->is_small_span, 0);
            m->served++;
            report_quarantine_and_unlock(m);
            return q;
        }
        report_quarantine_and_unlock(m);
    }
    void *p;
    fm_medium_manager_t *m = alloc_locked(block_size + alignment - 64, &p);
    if (m == NULL)
        return NULL;
    char *q = (char *)fm_align_up((uintptr_t)p, alignment);
    if (q != (char *)p) {
        fm_medium_span_t *span = fm_medium_span_of(p);
        size_t whole = fm_medium_block_size(p);
        size_t front = (size_t)(q - (char *)p);
        fm_track_internal(q - FM_MEDIUM_HEADER, FM_MEDIUM_HEADER);
        fm_track_internal(fm_medium_boundary_tag((char *)p + front), 4); /* the front part's boundary tag */
        set_header(span, q, whole - front, FM_FLAG_MEDIUM, 0);
        set_used(span, q, true);
        fm_medium_header_of(p)->size64 = (uint16_t)(front / 64u);
        free_locked(m, p);
    }
    split_tail_locked(m, q, block_size);
    fm_store_relaxed(&fm_medium_header_of(q)->is_small_span, 0);
    m->served++;
    report_quarantine_and_unlock(m);
    return q;
}

/* ---- free, validation, resizing ---- */

void fm_medium_free(void *p)
{
    fm_medium_manager_t *m = fm_medium_span_of(p)->manager;
    if (fm_lock_try(&m->lock)) {
        free_locked(m, p);
        drain_pending_locked(m);
        report_quarantine_and_unlock(m);
    } else {
        fm_pending_push(&m->pending, p); /* FastMM5: a free never waits */
    }
}

/* Grows p into the free block after it (FastMM5 3.2), or into the feed when p is the block
 * carved last: to want_block bytes if there is room, else to whatever fits if that is at least
 * min_block. False if that is not possible right now. */
bool fm_medium_try_resize_in_place(void *p, size_t min_block, size_t want_block)
{
    fm_medium_manager_t *m = fm_medium_span_of(p)->manager;
    if (!fm_lock_try(&m->lock))
        return false; /* never wait: a move is always possible */
    fm_medium_span_t *span = fm_medium_span_of(p);
    size_t size = fm_medium_block_size(p);
    char *next = (char *)p + size;
    bool ok = false;
    if (span == m->feed_span && next == (char *)span + m->feed_offset) {
        size_t room = size + (span->span_size - m->feed_offset);
        size_t grown = want_block < room ? want_block : room;
        if (grown >= min_block && grown > size) {
            fm_medium_header_of(p)->size64 = (uint16_t)(grown / 64u);
            m->feed_offset += (uint32_t)(grown - size);
            mark_frontier(m);
            ok = true;
        }
    } else if (!is_sentinel(next) && !is_used(span, next)) {
        size_t next_size = fm_medium_block_size(next);
        if (!free_block_sound(span, next)) {
            quarantine_free_block(m, span, next, "realloc");
        } else if (size + next_size >= min_block) {
            if (next_size >= FM_MEDIUM_MIN_BLOCK)
                bin_remove(m, next, next_size);
            fm_medium_header_of(p)->size64 = (uint16_t)((size + next_size) / 64u);
            fm_medium_header_of(next + next_size)->prev_free = 0;
            split_tail_locked(m, p, want_block < size + next_size ? want_block : size + next_size);
            ok = true;
        }
    }
    report_quarantine_and_unlock(m);
    return ok;
}

void fm_medium_shrink(void *p, size_t new_block_size)
{
    fm_medium_manager_t *m = fm_medium_span_of(p)->manager;
    fm_lock_wait(&m->lock);
    split_tail_locked(m, p, new_block_size);
    drain_pending_locked(m);
    report_quarantine_and_unlock(m);
}

/* Retires each feed span, releases every span that is entirely free, including the one
 * FastMM5's rule keeps for reuse, and gives back the pages inside free blocks of 4 pages or more
 * (malloc_trim). Returns whether any pages were given back that way. */
bool fm_medium_trim(void)
{
    bool purged = false;
    for (unsigned a = 0; a < FM_MEDIUM_ARENAS; a++) {
        fm_medium_manager_t *m = &fm_medium_managers[a];
        fm_lock_wait(&m->lock);
        drain_pending_locked(m);
        retire_feed_locked(m);
        if (m->kept_empty != NULL)
            release_uncoalesced_span(m, m->kept_empty);
        fm_medium_span_t *span = m->spans;
        while (span != NULL) {
            fm_medium_span_t *next = span->next;
            char *first = (char *)span + span->first_block;
            if (!is_used(span, first) && fm_medium_block_size(first) == span->span_size - span->first_block) {
                bin_remove(m, first, fm_medium_block_size(first));
                release_span(m, span);
            }
            span = next;
        }
        /* and the pages inside the free blocks, as glibc's malloc_trim does */
        purged |= purge_pass_locked(m, fm_os_coarse_time_ms(), 4 * fm_os_page_size(), 0);
        fm_lock_release(&m->lock);
    }
    return purged;
}

bool fm_medium_drain_all(void)
{
    bool all = true;
    for (unsigned a = 0; a < FM_MEDIUM_ARENAS; a++) {
        fm_medium_manager_t *m = &fm_medium_managers[a];
        if (fm_load_relaxed(&m->pending) == NULL)
            continue;
        if (fm_lock_try(&m->lock)) {
            drain_pending_locked(m);
            fm_lock_release(&m->lock);
        } else {
            all = false;
        }
    }
    return all;
}

void fm_medium_lock_all(void)
{
    for (unsigned a = 0; a < FM_MEDIUM_ARENAS; a++)
        fm_lock_wait(&fm_medium_managers[a].lock);
}

void fm_medium_unlock_all(void)
{
    for (unsigned a = 0; a < FM_MEDIUM_ARENAS; a++)
        fm_lock_release(&fm_medium_managers[a].lock);
}

uint64_t fm_medium_contention(void) { return fm_load_relaxed(&contention); }

/* The manager of the small span at p, or NULL when p is no small span: not yet (small.c stores
 * the manager last when it sets a new span up) or no longer (a released span). Read without
 * the small manager's lock. */
static fm_small_manager_t *small_span_manager(const void *p)
{
    if (!fm_load_relaxed(&fm_medium_header_of(p)->is_small_span))
        return NULL;
    return fm_load_acquire(&((const fm_small_span_t *)p)->manager);
}

/* ---- stepping from block to block, for the walks below ----
 * A block whose header the program overwrote is reported when the allocator meets it and then
 * stays in use for good (tcache.c, debug.c, quarantine_free_block above); its size field is whatever was written there. So a
 * walk trusts a header only if it names its own position and its size ends inside the walked
 * range; past one that does not, the next block is the next 64-byte unit whose header does and
 * which is either marked in use or ends in a matching boundary tag (a free block). */
static bool header_sound(const fm_medium_span_t *span, size_t off, size_t end)
{
    const fm_medium_header_t *h = fm_medium_header_of((const char *)span + off);
    return h->span_offset64 == off / 64u && h->size64 != 0 && off + (size_t)h->size64 * 64u <= end;
}

static bool block_found_at(const fm_medium_span_t *span, size_t off, size_t end)
{
    if (!header_sound(span, off, end))
        return false;
    const char *p = (const char *)span + off;
    return is_used(span, p) || *fm_medium_boundary_tag(p + fm_medium_block_size(p)) == fm_medium_block_size(p);
}

/* The bytes from the block at `off` to the next block; *damaged when its header is not sound. */
static size_t block_extent(const fm_medium_span_t *span, size_t off, size_t end, bool *damaged)
{
    *damaged = !header_sound(span, off, end);
    if (!*damaged)
        return fm_medium_block_size((const char *)span + off);
    size_t next = off + 64u;
    while (next < end && !block_found_at(span, next, end))
        next += 64u;
    return next - off;
}

/* ---- statistics: one pass over every span, each arena locked in turn ---- */

static void collect_block(fm_usage_detail_t *d, const fm_medium_span_t *span, const char *p, size_t size,
                          bool damaged)
{
    if (!is_used(span, p)) {
        d->medium_free_bytes += size;
        return;
    }
    const fm_small_manager_t *sm = damaged ? NULL : small_span_manager(p);
    if (sm == NULL) {
        d->medium_used_blocks++;
        d->medium_used_bytes += size - FM_MEDIUM_HEADER;
        return;
    }
    /* a small span: the small manager's counters are read without its lock (approximate) */
    const fm_small_span_t *s = (const fm_small_span_t *)p;
    size_t used = fm_load_relaxed(&s->blocks_in_use) - fm_small_unfed_blocks(sm, s);
    d->small_used_blocks += used;
    d->small_used_bytes += used * ((size_t)sm->block_size - 2u);
    d->small_span_bytes += size;
}

void fm_medium_collect(fm_usage_detail_t *d)
{
    for (unsigned a = 0; a < FM_MEDIUM_ARENAS; a++) {
        fm_medium_manager_t *m = &fm_medium_managers[a];
        fm_lock_wait(&m->lock);
        for (const fm_medium_span_t *span = m->spans; span != NULL; span = span->next) {
            d->medium_span_bytes += span->span_size;
            size_t end = span == m->feed_span ? m->feed_offset : span->span_size;
            d->medium_free_bytes += span->span_size - end; /* not yet carved */
            for (size_t off = span->first_block; off < end;) {
                bool damaged;
                size_t size = block_extent(span, off, end, &damaged);
                collect_block(d, span, (const char *)span + off, size, damaged);
                off += size;
            }
        }
        fm_lock_release(&m->lock);
    }
}

/* ---- the heap walk: every span and block, each arena locked in turn (a small span's manager
 * while its blocks are read), with a time limit per lock so that a walk never deadlocks
 * against a busy arena; what it could not lock it reports as skipped. ---- */

static bool lock_before(fm_lock_t *l, uint64_t deadline_ms)
{
    if (deadline_ms == FM_WALK_LOCKS_HELD)
        return true;
    while (!fm_lock_try(l)) {
        if (fm_os_time_ms() >= deadline_ms)
            return false;
        fm_os_yield();
    }
    return true;
}

static void unlock_after(fm_lock_t *l, uint64_t deadline_ms)
{
    if (deadline_ms != FM_WALK_LOCKS_HELD)
        fm_lock_release(l);
}

/* Whether small block b's flag word is one the allocator wrote: small, and naming b's own span.
 * A block whose flag word the program overwrote stays in use for good once found (tcache.c,
 * debug.c), so the walk reports it as a plain small block in use. */
static bool small_flags_sound(const fm_small_span_t *s, const char *b)
{
    uint16_t flags = fm_flags_get(b);
    return (flags & FM_FLAG_SMALL) != 0 && fm_small_span_named(b, flags) == s;
}

static bool walk_small_span(fm_small_span_t *s, fm_small_manager_t *sm, fm_walk_record_t *span_rec,
                            fm_walk_visit_t visit, void *arg, uint64_t deadline_ms)
{
    if (!lock_before(&sm->lock, deadline_ms)) {
        span_rec->kind = FM_WALK_MEDIUM_BLOCK; /* FastMM5: reported as a plain medium block */
        visit(span_rec, arg);
        return false;
    }
    if (small_span_manager(s) != sm) { /* released meanwhile: its memory waits for this arena */
        unlock_after(&sm->lock, deadline_ms);
        span_rec->kind = FM_WALK_MEDIUM_BLOCK;
        visit(span_rec, arg);
        return true;
    }
    uint32_t unfed = fm_small_unfed_blocks(sm, s);
    span_rec->small_block_size = sm->block_size;
    span_rec->unfed_bytes = (size_t)unfed * sm->block_size;
    visit(span_rec, arg);
    for (uint32_t i = unfed; i < s->total_blocks; i++) {
        char *b = (char *)s + fm_small_head_of(sm->class_index) + (size_t)i * sm->block_size;
        uint16_t flags = small_flags_sound(s, b) ? fm_flags_get(b) : (uint16_t)FM_FLAG_SMALL;
        fm_walk_record_t r = {b, sm->block_size, (size_t)sm->block_size - 2u, flags, FM_WALK_SMALL_BLOCK,
                              sm->arena, (flags & FM_FLAG_FREE) != 0, 0, sm->block_size};
        visit(&r, arg);
    }
    unlock_after(&sm->lock, deadline_ms);
    return true;
}

bool fm_medium_walk(fm_walk_visit_t visit, void *arg, uint64_t deadline_ms)
{
    bool complete = true;
    for (unsigned a = 0; a < FM_MEDIUM_ARENAS; a++) {
        fm_medium_manager_t *m = &fm_medium_managers[a];
        if (!lock_before(&m->lock, deadline_ms)) {
            complete = false;
            continue;
        }
        for (fm_medium_span_t *span = m->spans; span != NULL; span = span->next) {
            size_t end = span == m->feed_span ? m->feed_offset : span->span_size;
            fm_walk_record_t sr = {span, span->span_size, 0, 0, FM_WALK_MEDIUM_SPAN, a, false,
                                   span->span_size - end, 0};
            visit(&sr, arg);
            for (size_t off = span->first_block; off < end;) {
                char *p = (char *)span + off;
                bool damaged;
                size_t size = block_extent(span, off, end, &damaged);
                bool used = is_used(span, p);
                /* a damaged block's flag word is not read: it is a plain block in use */
                uint16_t flags = damaged ? (uint16_t)FM_FLAG_MEDIUM : fm_flags_get(p);
                fm_walk_record_t r = {p, size, size - FM_MEDIUM_HEADER, used ? flags : (uint16_t)(flags | FM_FLAG_FREE),
                                      FM_WALK_MEDIUM_BLOCK, a, !used || (flags & FM_FLAG_FREE), 0, 0};
                fm_small_manager_t *sm = used && !damaged ? small_span_manager(p) : NULL;
                if (sm != NULL) {
                    r.kind = FM_WALK_SMALL_SPAN;
                    complete &= walk_small_span((fm_small_span_t *)p, sm, &r, visit, arg, deadline_ms);
                } else {
                    visit(&r, arg);
                }
                off += size;
            }
        }
        unlock_after(&m->lock, deadline_ms);
    }
    return complete;
}

typedef struct debug_visit {
    bool (*check)(const void *outer);
    size_t corrupt;
} debug_visit_t;

static void visit_debug(const fm_walk_record_t *r, void *arg)
{
    debug_visit_t *v = arg;
    if ((r->kind == FM_WALK_SMALL_BLOCK || r->kind == FM_WALK_MEDIUM_BLOCK) && (r->flags & FM_FLAG_DEBUG_INFO))
        v->corrupt += v->check(r->block);
}

size_t fm_medium_visit_debug_blocks(bool (*check)(const void *outer))
{
    debug_visit_t v = {check, 0};
    fm_medium_walk(visit_debug, &v, UINT64_MAX);
    return v.corrupt;
}

typedef struct used_visit {
    void (*visit)(void *block, size_t usable, void *arg);
    void *arg;
} used_visit_t;

static void visit_used(const fm_walk_record_t *r, void *arg)
{
    used_visit_t *v = arg;
    if ((r->kind == FM_WALK_SMALL_BLOCK || r->kind == FM_WALK_MEDIUM_BLOCK) && !(r->flags & FM_FLAG_FREE) && !r->free)
        v->visit(r->block, r->usable, v->arg);
}

void fm_medium_visit_used(void (*visit)(void *block, size_t usable, void *arg), void *arg)
{
    used_visit_t v = {visit, arg};
    fm_medium_walk(visit_used, &v, UINT64_MAX);
}
