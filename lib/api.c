/*
 * api.c - the fastmm_* allocation entry points: argument checks with glibc's semantics, the
 * frameless thread-cache paths of malloc, free and realloc, and the hand-over of everything else
 * to the block dispatch (dispatch.c), debug mode and realloc's policy.
 */
#include "internal.h"

#include <errno.h>
#include <string.h>

/* An aligned block for posix_memalign, memalign and aligned_alloc: a debug block in debug mode. */
void *fm_alloc_aligned(size_t alignment, size_t size)
{
    fm_ensure_init();
    void *g = FM_UNLIKELY(fm_load_relaxed(&fm_guard_mode) != FM_GUARD_OFF) ? fm_guard_aligned(alignment, size) : NULL;
    if (g != NULL)
        return g;
    if (alignment <= FM_MIN_ALIGN)
        return fm_load_relaxed(&fm_debug_on) ? fm_debug_alloc(size, FM_DEBUG_FILL_ALLOCATED)
                                             : fm_track_new(fm_alloc(size), size, false);
    return fm_track_new(fm_alloc_aligned_untracked(alignment, size), size, false);
}

/* ---- public entry points (fastmm5.h section 1); override.c maps the C library names onto these ---- */

/* Everything malloc does beyond its frameless path: the cache under memcheck, debug mode, the
 * arenas. */
static FM_NOINLINE void *malloc_full(size_t size)
{
    fm_free_deferred_now(); /* its block may be what this request is about to take from an arena */
    if (FM_UNLIKELY(fm_load_relaxed(&fm_guard_mode) != FM_GUARD_OFF)) {
        void *g = fm_guard_malloc(size, fm_load_relaxed(&fm_debug_on) ? FM_DEBUG_FILL_ALLOCATED : -1);
        if (g != NULL)
            return g;
    }
    fm_tcache_t *tc = fm_tcache_current;
    if (fm_track_on && FM_TCACHE_USABLE(tc) && !fm_load_relaxed(&fm_debug_on) && !fm_load_relaxed(&fm_erase_allocated)) {
        void *b = fm_cache_take(tc, size, true);
        if (b != NULL)
            return b;
    }
    if (fm_load_relaxed(&fm_debug_on))
        return fm_debug_alloc(size, FM_DEBUG_FILL_ALLOCATED);
    fm_ensure_init();
    void *p = fm_track_new(fm_alloc(size), size, false);
    if (fm_load_relaxed(&fm_erase_allocated) && p != NULL) /* malloc only: not calloc or realloc */
        fm_fill(p, FM_DEBUG_FILL_ALLOCATED, fm_track_usable(p, fm_block_usable(p, fm_block_classify(p))));
    return p;
}

/* The common case in a few instructions: a block from this thread's cache. Nothing here calls a
 * function except in tail position, so the compiler needs no stack frame (a memcheck call
 * inline here costs two saved registers and a frame on every call). */
FM_EXPORT FM_ENTRY_ALIGNED void *fastmm_malloc(size_t size)
{
    void *b = fm_malloc_cached(size);
    if (FM_LIKELY(b != NULL))
        return b;
    return malloc_full(size);
}

static FM_NOINLINE void free_slow(void *p, fm_block_ref_t ref)
{
    int saved = errno; /* free never changes errno (POSIX 2024, glibc) */
    if (ref.kind == FM_BLOCK_INVALID) {
        fm_debug_free_or_report(p, ref); /* a debug block, a freed one, or nothing of ours */
    } else if (fm_flags_get(p) & (FM_FLAG_DEBUG_INFO | FM_FLAG_FREE)) {
        fm_event_invalid_pointer("free", p, fm_flags_get(p) & FM_FLAG_FREE
                                                ? "the block was already freed"
                                                : "it points 64 bytes before a debug block's user data");
    } else {
        size_t usable = fm_block_usable(p, ref);
        if (fm_load_relaxed(&fm_erase_freed)) /* the whole usable area, as FastMM5 does */
            fm_fill(p, 0x80, fm_track_usable(p, usable));
        fm_track_free(p, usable, ref.kind == FM_BLOCK_MEDIUM, false);
        if (ref.kind != FM_BLOCK_MEDIUM || fm_load_relaxed(&fm_erase_freed))
            fm_free_classified(p, ref);
        else
            fm_free_cached(p, ref);
    }
    errno = saved;
}

/* A live plain medium block of medium span ms that fits this thread's cache: its block size,
 * else 0. */
FM_INLINE size_t cacheable_medium_block(const void *p, const fm_medium_span_t *ms, const fm_tcache_t *tc)
{
    if (!fm_block_medium_live(p, ms))
        return 0;
    size_t block = fm_medium_block_size(p);
    /* over the budget only with other blocks there: an empty cache takes any cacheable block
     * (a 64 KiB malloc/free loop stays on this path; tcache.c flushes the others otherwise) */
    if (!fm_tcache_medium_cacheable(block) ||
        (tc->medium_bytes != 0 && tc->medium_bytes + block > tc->medium_budget) ||
        fm_os_limit() != 0) /* under a memory limit a cached block would pin its span */
        return 0;
    return block;
}

/* Under memcheck the reads around a pointer that may be bad are the allocator's business (as in
 * fm_block_classify): the same tests with error reporting off. */
static FM_NOINLINE void find_cacheable_quietly(const void *p, const fm_medium_span_t *ms, const fm_tcache_t *tc,
                                               fm_small_span_t **small, uint16_t *flags, size_t *medium)
{
    fm_track_quiet(true);
    *small = fm_block_small_live_flags(p, ms, flags);
    *medium = *small == NULL ? cacheable_medium_block(p, ms, tc) : 0;
    fm_track_internal(small, sizeof *small); /* verdicts, however the bytes they read were: defined */
    fm_track_internal(flags, sizeof *flags);
    fm_track_internal(medium, sizeof *medium);
    fm_track_quiet(false);
}

/* fm_block_debug_candidate under memcheck, where the word read may be a user's uninitialised byte. */
static FM_NOINLINE bool looks_like_debug_block_quietly(const void *p)
{
    fm_track_quiet(true);
    bool yes = fm_block_debug_candidate(p);
    fm_track_internal(&yes, sizeof yes); /* a verdict, however the bytes it read were: defined */
    fm_track_quiet(false);
    return yes;
}

static FM_NOINLINE bool free_debug_block(void *p)
{
    int saved = errno; /* free never changes errno */
    bool done = fm_debug_free_block(p);
    errno = saved;
    return done;
}

/* Pushes a freed plain block the exact checks accepted onto this thread's cache: small (s, whose
 * flag word the checks read as `flags`: stored back with FREE, not read again) or medium (block
 * bytes). tracked: tell memcheck first (a constant false in free's frameless path). */
FM_INLINE void cache_put(fm_tcache_t *tc, void *p, const fm_small_span_t *s, unsigned flags, size_t block,
                         bool tracked)
{
    if (s != NULL) {
        if (tracked)
            fm_track_free(p, s->block_size - 2u, false, false);
        fm_flags_set(p, flags | FM_FLAG_FREE);
        fm_tcache_push(tc, s->class_index, p, tracked);
    } else {
        unsigned b = fm_tcache_medium_bin_of(block);
        if (tracked)
            fm_track_free(p, block - FM_MEDIUM_HEADER, true, false);
        fm_flags_set(p, FM_FLAG_MEDIUM | FM_FLAG_FREE);
        fm_tcache_medium_push(tc, b, p, block);
    }
}

/* Everything free does beyond its frameless path: the cache under memcheck (with its reads
 * made quietly), debug blocks, the arenas, and every pointer the exact checks do not accept,
 * which is classified in full (fails closed) and freed or reported out of line. */
static FM_NOINLINE void free_full(void *p)
{
    if (p == NULL) /* common: glibc frees NULL several times in every thread exit */
        return;
    fm_tcache_t *tc = fm_tcache_current;
    /* a thread's first free, before any allocation: it gets its cache now, and the block takes
     * the fast path again (once: the thread has a cache, or TC_OFF, from here on) */
    if (FM_UNLIKELY(tc == NULL) && fm_load_relaxed(&fm_ready) && fm_tcache_start() != NULL) {
        fm_entry_free(p);
        return;
    }
    if (fm_track_on && FM_TCACHE_USABLE(tc) && !fm_load_relaxed(&fm_erase_freed)) {
        uintptr_t entry = fm_pagemap_lookup(p);
        if ((entry & FM_REGION_TYPE_MASK) == FM_REGION_MEDIUM_SPAN) {
            const fm_medium_span_t *ms = (const fm_medium_span_t *)(entry & ~(uintptr_t)FM_REGION_TYPE_MASK);
            fm_small_span_t *s;
            uint16_t flags = 0;
            size_t block;
            find_cacheable_quietly(p, ms, tc, &s, &flags, &block);
            if (s != NULL || block != 0) {
                cache_put(tc, p, s, flags, block, true);
                return;
            }
        }
    }
    if (FM_UNLIKELY(fm_guard_owns(p))) { /* before anything reads around p */
        fm_guard_free(p, "free");
        return;
    }
    if (FM_UNLIKELY(fm_track_on ? looks_like_debug_block_quietly(p) : fm_block_debug_candidate(p)) && free_debug_block(p))
        return;
    free_slow(p, fm_block_classify(p));
}

static FM_NOINLINE void deferred_not_plain(fm_tcache_t *tc, void *p, uintptr_t span, uint64_t word);

/*
 * Live plain small blocks, and plain medium blocks of the cached sizes while this thread's cache
 * has room, go to this thread's cache (still counted as in use by their spans, flagged FREE),
 * so no lock is taken. Like malloc's, this path calls nothing except in tail position and needs
 * no stack frame (a call in the middle, such as a memcheck notification, would make gcc save six
 * registers on every free). Everything else continues in free_full.
 * span: p's ownership-map entry less FM_REGION_MEDIUM_SPAN, whose type bits are 0 only if the
 * entry names a medium span. deferred: p comes from the pending slot, span as deferred_span
 * holds it (a sized delete's mark in its type bits).
 */
FM_INLINE void free_in_span(fm_tcache_t *tc, void *p, uintptr_t span, bool deferred)
{
    if (FM_LIKELY((span & FM_REGION_TYPE_MASK) == 0)) {
        const fm_medium_span_t *ms = (const fm_medium_span_t *)span;
        uint16_t flags;
        fm_small_span_t *s = fm_block_small_live_flags(p, ms, &flags);
        if (FM_LIKELY(s != NULL)) {
            cache_put(tc, p, s, flags, 0, false);
            return;
        }
        size_t block = cacheable_medium_block(p, ms, tc);
        if (block != 0) {
            cache_put(tc, p, NULL, 0, block, false);
            return;
        }
    }
    if (deferred) /* the slot's word is p's wherever p carries the mark: only its delete wrote it */
        deferred_not_plain(tc, p, span, tc->deferred_word);
    else
        free_full(p);
}

static FM_NOINLINE void free_checked(fm_tcache_t *tc, void *p)
{
    if (FM_LIKELY((uintptr_t)tc > fm_load_relaxed(&fm_fast_free_above))) { /* usable; not erase-freed, memcheck */
        free_in_span(tc, p, fm_pagemap_lookup(p) - FM_REGION_MEDIUM_SPAN, false);
        return;
    }
    free_full(p);
}

/*
 * A sized or aligned operator delete's quick check (fm_delete): an aligned delete's pointer has
 * that alignment, and a sized delete's size fits the block and is one its allocation could have
 * been served for: a small block's size must be its class for that size (a bigger class can
 * come from alignment, which delete_check.c works out), a medium one's more than any small
 * block holds. A block that fails is looked at again out of line, which frees or reports it.
 */
FM_INLINE bool delete_fits(const void *p, size_t size, size_t alignment, unsigned how, const fm_small_span_t *s,
                           size_t block)
{
    if (alignment != 0 && ((uintptr_t)p & (alignment - 1)) != 0)
        return false;
    if (!(how & FM_DELETE_SIZED))
        return true;
    if (s != NULL)
        return size <= s->block_size - 2u && (alignment != 0 || fm_small_class_of(size) == s->class_index);
    return size <= block - FM_MEDIUM_HEADER && (alignment != 0 || size > FM_SMALL_MAX_USER);
}

/* Every C++ operator delete's checks (operators.c) once the ownership map was read (span: as in
 * free_in_span): free_in_span's with delete_fits on the way; everything else, debug blocks
 * included (they record which family allocated them), goes to fm_delete_slow. */
FM_INLINE void delete_in_span(fm_tcache_t *tc, void *p, uintptr_t span, size_t size, size_t alignment,
                              unsigned how)
{
    if (FM_LIKELY((span & FM_REGION_TYPE_MASK) == 0)) {
        const fm_medium_span_t *ms = (const fm_medium_span_t *)span;
        uint16_t flags;
        fm_small_span_t *s = fm_block_small_live_flags(p, ms, &flags);
        if (FM_LIKELY(s != NULL)) {
            if (FM_LIKELY(delete_fits(p, size, alignment, how, s, 0))) {
                cache_put(tc, p, s, flags, 0, false);
                return;
            }
        } else {
            size_t block = cacheable_medium_block(p, ms, tc);
            if (block != 0 && delete_fits(p, size, alignment, how, NULL, block)) {
                cache_put(tc, p, NULL, 0, block, false);
                return;
            }
        }
    }
    if (p != NULL)
        fm_delete_slow(p, size, alignment, how);
}

static FM_NOINLINE void delete_checked(fm_tcache_t *tc, void *p, size_t size, size_t alignment, unsigned how)
{
    if (FM_LIKELY((uintptr_t)tc > fm_load_relaxed(&fm_fast_free_above))) { /* as in free_checked */
        delete_in_span(tc, p, fm_pagemap_lookup(p) - FM_REGION_MEDIUM_SPAN, size, alignment, how);
        return;
    }
    if (p != NULL)
        fm_delete_slow(p, size, alignment, how);
}

/* ---- deferred checks ----
 * A program often frees a block it has not touched for a while, whose line has left the cache;
 * free's checks start by reading the block's flag word, and everything after waits on that miss.
 * So free() and the C++ deletes without an alignment leave their block in this thread's
 * cache's pending slot, ask for its line, and check the block the previous call left there,
 * whose line has come in meanwhile. A block is then reused, and a bad free reported, one call
 * later: at the thread's next free or delete, its next allocation that misses the cache or move
 * by realloc (the block may be the room they need), or when upkeep (fastmm_process_pending_frees,
 * malloc_trim) or its exit flushes the cache; a report still names the block, and the program
 * still aborts. Only a pointer into a medium span waits (one the ownership map does not know is
 * reported at once), and none while a program refuses bad calls one by one or watches events,
 * nor under debug mode, erase-freed or memcheck (fm_defer_free_above: FM_DEFER_OFF_*). */

/* The block that waited in the pending slot, with its deferred_span and deferred_word, when it
 * is not a plain block free's checks take into the cache: a sized delete's, or anything else. */
static FM_NOINLINE void deferred_not_plain(fm_tcache_t *tc, void *p, uintptr_t span, uint64_t word)
{
    fm_checking_deferred = true; /* a report says the call it shows is a later one */
    if ((span & FM_REGION_TYPE_MASK) == FM_DEFER_SIZED_DELETE)
        delete_in_span(tc, p, span - FM_DEFER_SIZED_DELETE, (size_t)(word & (((uint64_t)1 << FM_DEFER_HOW_SHIFT) - 1u)),
                       0, (unsigned)(word >> FM_DEFER_HOW_SHIFT));
    else
        free_full(p);
    fm_checking_deferred = false;
}

/* The same checks with the slot's word given (a sized delete has written its own over it). */
static FM_NOINLINE void check_deferred_word(fm_tcache_t *tc, void *q, uintptr_t q_span, uint64_t q_word)
{
    if ((q_span & FM_REGION_TYPE_MASK) == 0)
        free_in_span(tc, q, q_span, true);
    else
        deferred_not_plain(tc, q, q_span, q_word);
}

/* The deferred free or delete of this thread's cache tc, if it has one, checked now. */
static void check_deferred(fm_tcache_t *tc)
{
    if (!FM_TCACHE_USABLE(tc) || tc->deferred == NULL)
        return;
    void *q = tc->deferred;
    uintptr_t span = tc->deferred_span;
    tc->deferred = NULL;
    tc->deferred_span = FM_DEFER_NO_SPAN;
    check_deferred_word(tc, q, span, tc->deferred_word);
}

void fm_free_deferred_now(void) { check_deferred(fm_tcache_current); }

/* A free that does not wait: the deferred one first, so that blocks are checked in order. */
static FM_NOINLINE void free_now(fm_tcache_t *tc, void *p)
{
    check_deferred(tc);
    free_checked(tc, p);
}

void fm_free_at_once(void *p) { free_now(fm_tcache_current, p); }

static FM_NOINLINE void delete_now(fm_tcache_t *tc, void *p, size_t size, size_t alignment, unsigned how)
{
    check_deferred(tc);
    delete_checked(tc, p, size, alignment, how);
}

/* p, in the medium span `span` (as deferred_span holds it), takes the pending slot from the
 * block q there, whose span it returns in *q_span; p's flag word's line, which its checks will
 * read and write, is asked for now. */
FM_INLINE void take_slot(fm_tcache_t *tc, void *p, uintptr_t span, uintptr_t *q_span)
{
    *q_span = tc->deferred_span;
    tc->deferred = p;
    tc->deferred_span = span;
    __builtin_prefetch((const char *)p - 2, 1);
}

/* free() by a thread whose cache defers (tc above fm_defer_free_above): p takes the pending
 * slot and the block that was there is checked; a block given twice in a row is not deferred
 * the second time: both frees are checked at once, and the second reported. Calls only in tail
 * position: no stack frame. */
FM_INLINE void free_deferring(fm_tcache_t *tc, void *p)
{
    uintptr_t span = fm_pagemap_lookup(p) - FM_REGION_MEDIUM_SPAN;
    void *q = tc->deferred;
    if (FM_LIKELY((span & FM_REGION_TYPE_MASK) == 0) && FM_LIKELY(q != p)) {
        uintptr_t q_span;
        take_slot(tc, p, span, &q_span);
        free_in_span(tc, q, q_span, true);
        return;
    }
    free_now(tc, p);
}

FM_EXPORT FM_ENTRY_ALIGNED void fastmm_free(void *p)
{
    fm_tcache_t *tc = fm_tcache_current;
    if (FM_LIKELY((uintptr_t)tc > fm_load_relaxed(&fm_defer_free_above))) {
        free_deferring(tc, p);
        return;
    }
    free_now(tc, p);
}

/* The same for an unsized delete, which has read the cache and the test already: one copy for
 * all of them, entered with a jump, and aligned as free's entry is (base.h). */
static FM_NOINLINE FM_ENTRY_ALIGNED void delete_deferring(fm_tcache_t *tc, void *p) { free_deferring(tc, p); }

/* Every operator delete without an alignment, deferred as free() is: an unsized one of a plain
 * block is a free (delete_check.c; only debug blocks, never deferred, keep their family), a
 * sized one waits with its size and family in the slot's word and FM_DEFER_SIZED_DELETE in the
 * type bits of its span. */
FM_INLINE void delete_block(void *p, size_t size, unsigned how)
{
    fm_tcache_t *tc = fm_tcache_current;
    if (FM_LIKELY((uintptr_t)tc > fm_load_relaxed(&fm_defer_free_above))) {
        if (!(how & FM_DELETE_SIZED)) {
            delete_deferring(tc, p);
            return;
        }
        uintptr_t span = fm_pagemap_lookup(p) - FM_REGION_MEDIUM_SPAN;
        void *q = tc->deferred;
        if (FM_LIKELY((span & FM_REGION_TYPE_MASK) == 0) && FM_LIKELY(q != p) &&
            FM_LIKELY(((uint64_t)size >> FM_DEFER_HOW_SHIFT) == 0)) {
            uintptr_t q_span;
            uint64_t q_word = tc->deferred_word;
            take_slot(tc, p, span + FM_DEFER_SIZED_DELETE, &q_span);
            tc->deferred_word = (uint64_t)size | (uint64_t)how << FM_DEFER_HOW_SHIFT;
            check_deferred_word(tc, q, q_span, q_word);
            return;
        }
    }
    delete_now(tc, p, size, 0, how);
}

void fm_delete(void *p, size_t size, size_t alignment, unsigned how)
{
    if (alignment == 0)
        delete_block(p, size, how);
    else
        delete_now(fm_tcache_current, p, size, alignment, how);
}

/* The operators without an alignment (the common ones), each with its constants: delete_fits'
 * tests of them fold away, and an unsized delete keeps to free's registers (with the family
 * an argument, gcc saves one on every call). */
void fm_delete_new(void *p) { delete_block(p, 0, FM_FAMILY_NEW); }
void fm_delete_new_array(void *p) { delete_block(p, 0, FM_FAMILY_NEW_ARRAY); }
void fm_delete_new_sized(void *p, size_t size) { delete_block(p, size, FM_FAMILY_NEW | FM_DELETE_SIZED); }
void fm_delete_new_array_sized(void *p, size_t size) { delete_block(p, size, FM_FAMILY_NEW_ARRAY | FM_DELETE_SIZED); }

FM_EXPORT void *fastmm_calloc(size_t count, size_t size)
{
    size_t total;
    if (__builtin_mul_overflow(count, size, &total)) {
        errno = ENOMEM;
        return NULL;
    }
    void *g = FM_UNLIKELY(fm_load_relaxed(&fm_guard_mode) != FM_GUARD_OFF) ? fm_guard_malloc(total, -1) : NULL;
    if (g != NULL)
        return g; /* a fresh mapping: zero */
    if (fm_load_relaxed(&fm_debug_on))
        return fm_debug_alloc(total, 0);
    fm_ensure_init();
    void *p = fm_alloc(total);
    /* a large block in a fresh mapping is already zero; a retained one (large.c) is not */
    bool fresh = p != NULL && total > FM_MEDIUM_MAX_USER && !fm_large_header_of(p)->recycled;
    p = fm_track_new(p, total, fresh);
    if (p != NULL && !fresh)
        memset(p, 0, total);
    return p;
}

/*
 * realloc's inline paths, after free()'s exact inline checks: a live plain small block whose new
 * size keeps it in place under FastMM5's policy (fm_small_resize_stays) comes straight back,
 * and one that moves takes its new block from this thread's cache and goes into the cache
 * itself, as malloc and free would take and put them; a live plain medium or large block
 * resized in place (down to half its size, or up to what it holds) comes straight back. The
 * rest (a move the cache cannot serve, growth of medium and large blocks, debug mode and the
 * modes that turn the caches' paths off, memcheck, bad pointers, size 0) continues out of line,
 * with the classification already done where the inline check made it.
 */
/* realloc's continuations, out of line so that each is a tail call with its arguments in
 * registers (a fm_block_ref_t is passed in memory): fastmm_realloc then needs no stack frame. */
static FM_NOINLINE void *realloc_medium(void *p, fm_medium_span_t *ms, size_t size)
{
    return fm_realloc_classified(p, (fm_block_ref_t){FM_BLOCK_MEDIUM, ms, NULL}, size);
}

static FM_NOINLINE void *realloc_full(void *p, size_t size)
{
    return fm_realloc_classified(p, fm_block_classify(p), size);
}

/* A live plain small block that realloc's inline check found, and did not leave in place. If it
 * moves, both blocks go through this thread's cache as malloc and free take and put them (the
 * new block from it, the old one into it), where the cache has a block and its paths are on (not
 * in debug mode, the erase modes or under memcheck); everything else through realloc.c.
 * flags: the old block's flag word as the check read it. */
static FM_NOINLINE void *realloc_small(void *p, fm_small_span_t *s, unsigned flags, size_t size)
{
    fm_tcache_t *tc = fm_tcache_current;
    size_t old = fm_small_usable(s);
    if (size != 0 && !fm_small_resize_stays(old, size) && (uintptr_t)tc > fm_load_relaxed(&fm_fast_alloc_above) &&
        (uintptr_t)tc > fm_load_relaxed(&fm_fast_free_above)) {
        void *q = fm_cache_take(tc, fm_small_move_request(old, size), false);
        if (q != NULL) {
            memcpy(q, p, size < old ? size : old);
            cache_put(tc, p, s, flags, 0, false);
            return q;
        }
    }
    return fm_realloc_classified(p, (fm_block_ref_t){FM_BLOCK_SMALL, s, NULL}, size);
}

/* realloc of the block this thread's last free left waiting (deferred checks): that free is
 * checked first, so that the realloc is reported as one of a freed block. */
static FM_NOINLINE void *realloc_deferred(void *p, size_t size)
{
    fm_free_deferred_now();
    return fm_entry_realloc(p, size);
}

FM_EXPORT void *fastmm_realloc(void *p, size_t size)
{
    if (FM_UNLIKELY(p == NULL))
        return fm_realloc(NULL, size);
    fm_tcache_t *tc = fm_tcache_current;
    if (FM_UNLIKELY(FM_TCACHE_USABLE(tc) && tc->deferred == p))
        return realloc_deferred(p, size);
    uintptr_t entry = fm_pagemap_lookup(p);
    if (FM_LIKELY((entry & FM_REGION_TYPE_MASK) == FM_REGION_MEDIUM_SPAN && !fm_track_on)) {
        fm_medium_span_t *ms = (fm_medium_span_t *)(entry & ~(uintptr_t)FM_REGION_TYPE_MASK);
        uint16_t flags;
        fm_small_span_t *s = fm_block_small_live_flags(p, ms, &flags);
        if (FM_LIKELY(s != NULL)) {
            if (fm_small_resize_stays(fm_small_usable(s), size) && !fm_load_relaxed(&fm_debug_on))
                return p;
            return realloc_small(p, s, flags, size);
        }
        /* The same for a live plain medium block that stays in place (realloc.c: down to half
         * its size): a string grown by small appends through the medium range (growth-string)
         * spent 30% of its time classifying the block again and measuring it. */
        if (fm_block_medium_live(p, ms)) {
            size_t old = fm_medium_block_size(p) - FM_MEDIUM_HEADER;
            if (fm_resize_stays_within_half(old, size) && !fm_load_relaxed(&fm_debug_on))
                return p;
            return realloc_medium(p, ms, size);
        }
    } else if ((entry & FM_REGION_TYPE_MASK) == FM_REGION_LARGE && !fm_track_on) {
        fm_large_header_t *h = (fm_large_header_t *)(entry & ~(uintptr_t)FM_REGION_TYPE_MASK);
        if (fm_block_large_live(p, h) && !fm_load_relaxed(&fm_debug_on)) {
            size_t old = fm_large_usable(h);
            if (fm_resize_stays_within_half(old, size)) { /* realloc.c's resize_large in place */
                h->user_size = size;
                return p;
            }
        }
    }
    return realloc_full(p, size);
}

FASTMM_MALLOC_ATTR void *fm_entry_malloc(size_t size) __attribute__((alias("fastmm_malloc")));
void fm_entry_free(void *p) __attribute__((alias("fastmm_free")));
FASTMM_MALLOC_ATTR void *fm_entry_calloc(size_t count, size_t size) __attribute__((alias("fastmm_calloc")));
void *fm_entry_realloc(void *p, size_t size) __attribute__((alias("fastmm_realloc")));

FM_EXPORT void *fastmm_reallocarray(void *p, size_t count, size_t size)
{
    size_t total;
    if (__builtin_mul_overflow(count, size, &total)) {
        errno = ENOMEM;
        return NULL;
    }
    return fm_realloc(p, total);
}

/* glibc: EINVAL (errno untouched) for an alignment that is not a power of two multiple of a
 * pointer; ENOMEM both returned and left in errno when there is no memory. */
FM_EXPORT int fastmm_posix_memalign(void **out, size_t alignment, size_t size)
{
    if (!fm_is_pow2(alignment) || alignment % sizeof(void *) != 0)
        return EINVAL;
    void *p = fm_alloc_aligned(alignment, size);
    if (p == NULL) {
        errno = ENOMEM;
        return ENOMEM;
    }
    *out = p;
    return 0;
}

/* glibc (2.36): an alignment that is not a power of two is rounded up to the next one, and only
 * an alignment above SIZE_MAX / 2 + 1, which no power of two reaches, is EINVAL; a power of two
 * that no block can have (2^63) is ENOMEM. aligned_alloc is the same function there. */
FM_EXPORT void *fastmm_memalign(size_t alignment, size_t size)
{
    if (alignment > SIZE_MAX / 2 + 1) {
        errno = EINVAL;
        return NULL;
    }
    size_t a = 1;
    while (a < alignment)
        a <<= 1;
    return fm_alloc_aligned(a, size);
}

FM_EXPORT void *fastmm_aligned_alloc(size_t alignment, size_t size) { return fastmm_memalign(alignment, size); }

FM_EXPORT size_t fastmm_usable_size(const void *p)
{
    if (p == NULL)
        return 0;
    fm_block_ref_t ref = fm_block_classify(p);
    if (ref.kind == FM_BLOCK_INVALID)
        return fm_guard_owns(p) ? fm_guard_usable(p) : fm_debug_usable_or_report(p, ref);
    if (fm_flags_get(p) & (FM_FLAG_FREE | FM_FLAG_DEBUG_INFO)) {
        fm_event_invalid_pointer("malloc_usable_size", p, "the block was already freed");
        return 0;
    }
    return fm_track_usable(p, fm_block_usable(p, ref));
}
