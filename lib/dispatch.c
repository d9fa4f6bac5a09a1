/*
 * dispatch.c - block dispatch below the entry points: the pointer classification that lets
 * free(), realloc() and usable_size() refuse anything that is not a live block of this heap,
 * allocation and freeing by size and kind across the three managers and the thread cache, and
 * the draining of every manager's pending frees.
 */
#include "internal.h"

#include <errno.h>

/* ---- classification ---- */

/* The decoding is written once here (it is inline): under memcheck its reads around a pointer
 * that may be bad are the allocator's business, so they are made with error reporting off. */
fm_block_ref_t fm_block_classify(const void *p)
{
    fm_track_quiet(true);
    fm_block_ref_t ref = fm_block_decode(p);
    fm_track_quiet(false);
    return ref;
}

size_t fm_block_usable(const void *p, fm_block_ref_t ref)
{
    switch (ref.kind) {
    case FM_BLOCK_SMALL:
        return fm_small_usable(ref.owner);
    case FM_BLOCK_MEDIUM:
        return fm_medium_block_size(p) - FM_MEDIUM_HEADER;
    case FM_BLOCK_LARGE:
        return fm_large_usable(ref.owner);
    default:
        return 0;
    }
}

/* The one transition every free makes: in use -> free, atomically, so that of two frees of the
 * same block exactly one wins and the other is reported. */
bool fm_block_mark_free(void *p)
{
    uint16_t *flags = fm_flags_of(p);
    uint16_t old = fm_load_relaxed(flags);
    do {
        if (old & FM_FLAG_FREE)
            return false;
    } while (!__atomic_compare_exchange_n(flags, &old, (uint16_t)(old | FM_FLAG_FREE), true, __ATOMIC_ACQ_REL,
                                          __ATOMIC_RELAXED));
    return true;
}

/* A live small or medium block freed into this thread's cache (its class's stack, or its medium
 * bin's when that size is cached), else to its arena; a second free is reported. The slow
 * paths' way there: free()'s out-of-line medium case and debug blocks (debug.c). */
void fm_free_cached(void *p, fm_block_ref_t ref)
{
    if (!fm_block_mark_free(p)) {
        fm_hooks.invalid_pointer("free", p, "the block was already freed");
        return;
    }
    if (ref.kind == FM_BLOCK_SMALL) {
        fm_small_span_t *span = ref.owner;
        if (!fm_tcache_small_put(p, span->class_index))
            fm_small_free(p, span);
    } else if (!fm_tcache_medium_put(p, fm_medium_block_size(p))) { /* refuses uncached sizes */
        fm_medium_free(p);
    }
}

void fm_free_classified(void *p, fm_block_ref_t ref)
{
    if (!fm_block_mark_free(p)) {
        fm_hooks.invalid_pointer("free", p, "the block was already freed");
        return;
    }
    switch (ref.kind) {
    case FM_BLOCK_SMALL:
        fm_small_free(p, ref.owner);
        break;
    case FM_BLOCK_MEDIUM:
        fm_medium_free(p);
        break;
    case FM_BLOCK_LARGE:
        fm_large_free(p);
        break;
    default:
        break;
    }
}

/* ---- allocation ---- */

/* A medium block of a bin size: this thread's cache first, then the arenas. */
FM_INLINE void *alloc_medium(size_t block)
{
    void *p = fm_tcache_medium_take(block);
    if (p == NULL)
        p = fm_medium_alloc(block, false);
    if (FM_UNLIKELY(p == NULL) && (fm_tcache_medium_release() | fm_tcache_release_kept()))
        p = fm_medium_alloc(block, false); /* the cached blocks may merge into what it needs */
    return p;
}

/* Small and medium blocks come from this thread's cache first. Debug blocks are freed into it
 * too (debug.c), and its stacks are LIFO, so a freed debug block is the first one reused, as in
 * FastMM5: a write after free is caught at the next allocation of that size. Taking a freed
 * debug block from the cache vets it (tcache.c), as taking one from an arena does. The callers
 * have started the heap (fm_ensure_init), as for every function here. */
void *fm_alloc(size_t size)
{
    void *p;
    if (FM_LIKELY(size <= FM_SMALL_MAX_USER)) {
        p = fm_tcache_refill(fm_small_class_of(size));
    } else if (size <= FM_MEDIUM_MAX_USER) {
        p = alloc_medium(fm_medium_round_request(size));
    } else if (size <= (size_t)PTRDIFF_MAX) {
        p = fm_large_alloc(size, 0);
    } else {
        p = NULL;
    }
    if (FM_UNLIKELY(p == NULL)) {
        fm_os_grant_grace(); /* a refusal under the memory limit reaches the program now */
        errno = ENOMEM;
    }
    return p;
}


/* A twin class's blocks (layout.h) are aligned to gcd(class size, 64), so for alignments up to
 * 64 pick the first class at least as big that is a multiple of the alignment (FastMM5's
 * minimum-alignment rule), and above 16 bytes its twin. fm_small_class_of may give a twin
 * already (a minimum alignment above 16): its sizes are all multiples of 32. */
static void *alloc_small_aligned(size_t size, size_t alignment)
{
    unsigned c = fm_small_class_of(size);
    while (fm_small_class_sizes[c] % alignment != 0)
        c++;
    return fm_small_alloc(fm_small_aligned_class(c, alignment));
}

/* A block of at least `size` bytes aligned to alignment (a power of two above FM_MIN_ALIGN), not
 * yet told to memcheck (debug mode's outer blocks are the library's own). */
void *fm_alloc_aligned_untracked(size_t alignment, size_t size)
{
    void *p = NULL;
    /* size + alignment must stay within PTRDIFF_MAX (glibc); the top-bit alignment alone
     * (2^63, 2^31 on i386) exceeds it and would wrap the subtraction */
    if (alignment > (size_t)PTRDIFF_MAX || size > (size_t)PTRDIFF_MAX - alignment)
        p = NULL;
    else if (alignment <= 64 && size <= FM_SMALL_MAX_USER)
        p = alloc_small_aligned(size, alignment);
    else if (alignment <= 64 && size <= FM_MEDIUM_MAX_USER)
        p = alloc_medium(fm_medium_round_request(size)); /* medium blocks are 64-aligned */
    else if (size <= FM_MEDIUM_MAX_USER && fm_medium_round_request(size) + alignment <= FM_MEDIUM_MAX_BLOCK) {
        size_t block = fm_medium_round_request(size);
        p = fm_tcache_medium_take_aligned(block, alignment);
        if (p == NULL)
            p = fm_medium_alloc_aligned(block, alignment);
    } else
        p = fm_large_alloc(size, alignment);
    if (p == NULL) {
        fm_os_grant_grace();
        errno = ENOMEM;
    }
    return p;
}

/* Upkeep: malloc_trim and the leak check drain the pending frees of every manager. */
FM_EXPORT bool fastmm_process_pending_frees(void)
{
    fm_tcache_flush_current();
    bool small = fm_small_drain_all();
    bool medium = fm_medium_drain_all();
    bool large = fm_large_drain_all();
    fm_large_fit_kept_to_heap();
    return small && medium && large;
}
