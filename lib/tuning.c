/*
 * tuning.c - the run-time tuning API: FastMM5's optimization strategy, the memory
 * usage limit, and the nested minimum alignment.
 *
 * Strategy: fm_options.strategy is read by medium.c for every new span (fm_options_medium_span_size)
 * and whenever a span empties (keep_empty_span), and by large.c whenever a large block is freed
 * (whether its mapping may be kept), so a switch needs nothing more than the store and, into
 * low-memory, giving back what the other strategies kept.
 *
 * Minimum alignment, as FastMM5 does it (doc/fastmm5-facts.md section 2.10): medium and large blocks are always
 * 64-byte aligned, a small block of a plain class is 16-byte aligned, and one of a twin class
 * (layout.h: its spans carry a 128-byte header) is aligned to the largest power of two dividing
 * its size, so a coarser alignment only changes which class serves a request. The request ->
 * class table (fm_small_lookup, sizeclass.c) is rebuilt under a lock whenever the effective
 * alignment changes, skipping the classes that are not multiples of it and, above 16, taking
 * their twins: the allocation hot path (fm_small_class_of) is untouched. Other threads may read
 * an entry while it is rewritten; either value serves the request (every class chosen holds it).
 */
#include "internal.h"

/* ---- strategy ---- */

FM_EXPORT bool fastmm_set_strategy(fastmm_strategy_t strategy)
{
    if ((unsigned)strategy > (unsigned)FASTMM_STRATEGY_LOW_MEMORY)
        return false;
    fm_ensure_init();
    fm_store_relaxed(&fm_options.strategy, (fm_strategy_t)strategy);
    /* Low memory gives every empty medium span back at once, also the one kept so far, and
     * keeps no freed large mapping (large.c): those kept so far go back too. */
    if (strategy == FASTMM_STRATEGY_LOW_MEMORY) {
        fm_medium_trim();
        fm_large_release_retained();
    }
    return true;
}

FM_EXPORT fastmm_strategy_t fastmm_strategy(void)
{
    return (fastmm_strategy_t)fm_load_relaxed(&fm_options.strategy);
}

/* ---- memory limit (os_linux.c keeps it, with FastMM5's grace amount) ---- */

/* Under a limit, memory kept only for speed (freed large mappings, this thread's cached
 * medium blocks, the blocks kept in exited threads' caches) is given back now and not kept any more (large.c, api.c): it would count
 * against the limit while blocks the program asks for are refused. */
FM_EXPORT void fastmm_set_memory_limit(size_t bytes)
{
    fm_os_set_limit(bytes);
    if (bytes != 0) {
        fm_large_release_retained();
        fm_tcache_medium_release();
        fm_tcache_release_kept();
    }
}
FM_EXPORT size_t fastmm_memory_limit(void) { return fm_os_limit(); }

/* ---- nested minimum alignment ---- */

static fm_lock_t alignment_lock;
static unsigned alignment_counts[4]; /* 8, 16, 32, 64 */
static unsigned current_alignment;   /* 0 until the first enter: the base alignment */

FM_EVERY_PROCESS void fm_tuning_fork_lock(void) { fm_lock_wait(&alignment_lock); }
FM_EVERY_PROCESS void fm_tuning_fork_unlock(void) { fm_lock_release(&alignment_lock); }

static int alignment_slot(unsigned alignment)
{
    switch (alignment) {
    case 8: return 0;
    case 16: return 1;
    case 32: return 2;
    case 64: return 3;
    default: return -1;
    }
}

static unsigned effective_locked(void)
{
    unsigned a = (unsigned)FASTMM_MIN_ALIGNMENT;
    for (int i = 3; i >= 0; i--)
        if (alignment_counts[i] != 0) {
            unsigned want = 8u << i;
            return want > a ? want : a;
        }
    return a;
}

/* fm_sizeclass_init's table, restricted to the classes whose size is a multiple of alignment
 * (the largest class, 2624 = 41 * 64, is one for every alignment). */
static void rebuild_lookup_locked(unsigned alignment)
{
    unsigned cls = 0;
    for (unsigned k = 0; k < FM_SMALL_LOOKUP_SIZE; k++) {
        size_t largest_request = (((size_t)k + 1) << FM_SMALL_GRANULARITY_SHIFT) - 2;
        if (largest_request > FM_SMALL_MAX_USER)
            largest_request = FM_SMALL_MAX_USER;
        while ((size_t)fm_small_class_sizes[cls] - 2 < largest_request || fm_small_class_sizes[cls] % alignment != 0)
            cls++;
        __atomic_store_n(&fm_small_lookup[k], (uint8_t)fm_small_aligned_class(cls, alignment), __ATOMIC_RELAXED);
    }
}

static void apply_locked(void)
{
    unsigned a = effective_locked();
    unsigned before = current_alignment == 0 ? (unsigned)FASTMM_MIN_ALIGNMENT : current_alignment;
    if (a != before)
        rebuild_lookup_locked(a);
    fm_store_relaxed(&current_alignment, a);
}

FM_EXPORT bool fastmm_alignment_enter(unsigned alignment)
{
    int slot = alignment_slot(alignment);
    if (slot < 0)
        return false;
    fm_ensure_init(); /* fm_sizeclass_init must not run after a rebuild */
    fm_lock_wait(&alignment_lock);
    alignment_counts[slot]++;
    apply_locked();
    fm_lock_release(&alignment_lock);
    return true;
}

FM_EXPORT bool fastmm_alignment_exit(unsigned alignment)
{
    int slot = alignment_slot(alignment);
    if (slot < 0)
        return false;
    fm_lock_wait(&alignment_lock);
    bool ok = alignment_counts[slot] > 0;
    if (ok) {
        alignment_counts[slot]--;
        apply_locked();
    }
    fm_lock_release(&alignment_lock);
    return ok;
}

unsigned fm_tuning_min_alignment(void)
{
    unsigned a = fm_load_relaxed(&current_alignment);
    return a == 0 ? (unsigned)FASTMM_MIN_ALIGNMENT : a;
}

FM_EXPORT unsigned fastmm_alignment(void) { return fm_tuning_min_alignment(); }

/* FASTMM5_MIN_ALIGNMENT, once the heap is initialized: called once, by init.c's
 * apply_start_options (no flag of its own here: writing one would make this file's page of .bss
 * cost memory in every process). */
FM_EVERY_PROCESS void fm_tuning_start(void)
{
    if (fm_options.min_alignment != 0)
        fastmm_alignment_enter(fm_options.min_alignment);
}
