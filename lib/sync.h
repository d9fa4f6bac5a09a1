/*
 * sync.h - the few concurrency primitives the allocator uses, with the memory order in the name.
 *
 * Locks are FastMM5's: a word that is 0 or 1, taken with an exchange and never spun on in the hot
 * paths (a thread that finds an arena locked tries the next arena instead). Pending-free lists are
 * lock-free LIFO stacks linked through the first word of each block.
 */
#ifndef FM_SYNC_H
#define FM_SYNC_H

#include "base.h"
#include "track.h" /* fm_link_set: the link of a freed block, which memcheck sees as closed */
#include <sched.h>

#define fm_load_relaxed(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#define fm_load_acquire(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define fm_store_relaxed(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)
#define fm_store_release(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define fm_add_relaxed(p, v) __atomic_fetch_add((p), (v), __ATOMIC_RELAXED)
#define fm_sub_relaxed(p, v) __atomic_fetch_sub((p), (v), __ATOMIC_RELAXED)
#define fm_cas_acq_rel(p, expected_ptr, desired) \
    __atomic_compare_exchange_n((p), (expected_ptr), (desired), false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)

/*
 * ThreadSanitizer builds only (tests/tsan.sh): the debug scan and the walker read blocks their
 * owners may be rewriting, by design, and keep a verdict only when a sequence check says the
 * block did not change meanwhile (debug.c). Those optimistic reads are hidden from TSan between
 * these two marks. A suppression by function name (tests/tsan.supp) is not enough on its own:
 * TSan matches it against the reader's stack, which it cannot always restore for a thread that
 * read as much as the scanner has (history_size), and then reports the race anyway.
 */
#if defined(__SANITIZE_THREAD__)
/* TSan's runtime defines them: default visibility, whatever header pragma is in force */
FM_EXPORT void AnnotateIgnoreReadsBegin(const char *file, int line);
FM_EXPORT void AnnotateIgnoreReadsEnd(const char *file, int line);
#define fm_tsan_ignore_reads_begin() AnnotateIgnoreReadsBegin(__FILE__, __LINE__)
#define fm_tsan_ignore_reads_end() AnnotateIgnoreReadsEnd(__FILE__, __LINE__)
#else
#define fm_tsan_ignore_reads_begin() ((void)0)
#define fm_tsan_ignore_reads_end() ((void)0)
#endif

typedef int fm_lock_t;

#if defined(__x86_64__) || defined(__i386__)
#define fm_cpu_relax() __builtin_ia32_pause()
#else
#define fm_cpu_relax() ((void)0)
#endif

/* Test before test-and-set: a locked arena costs one plain load, not a bus-locked exchange. */
FM_INLINE bool fm_lock_try(fm_lock_t *l)
{
    return fm_load_relaxed(l) == 0 && __atomic_exchange_n(l, 1, __ATOMIC_ACQUIRE) == 0;
}

FM_INLINE void fm_lock_release(fm_lock_t *l) { fm_store_release(l, 0); }

/* For the cold paths only (mode switches, fork, walkers): spin, then yield the CPU. */
FM_INLINE void fm_lock_wait(fm_lock_t *l)
{
    for (unsigned spins = 0; !fm_lock_try(l); spins++) {
        if (spins > 64)
            sched_yield();
        else
            fm_cpu_relax();
    }
}

/*
 * Pushes a block on a pending-free stack. Refuses (returns false) when the block is already the
 * head: FastMM5's immediate double-free guard, compared before the link is written so that a
 * refused push leaves no self-cycle behind.
 */
FM_INLINE bool fm_pending_push(void **head, void *block)
{
    void *old = fm_load_relaxed(head);
    do {
        if (old == block)
            return false;
        fm_link_set(block, old);
    } while (!__atomic_compare_exchange_n(head, &old, block, true, __ATOMIC_RELEASE, __ATOMIC_RELAXED));
    return true;
}

/* Pushes a chain of blocks, linked from first to last (last's link is rewritten), on a
 * pending-free stack in one step; blocks already flagged FREE (a thread cache's), so no guard. */
FM_INLINE void fm_pending_push_run(void **head, void *first, void *last)
{
    void *old = fm_load_relaxed(head);
    do {
        fm_link_set(last, old);
    } while (!__atomic_compare_exchange_n(head, &old, first, true, __ATOMIC_RELEASE, __ATOMIC_RELAXED));
}

/* Detaches the whole stack; the caller then owns every block on it. */
FM_INLINE void *fm_pending_take(void **head)
{
    if (fm_load_relaxed(head) == NULL)
        return NULL;
    return __atomic_exchange_n(head, NULL, __ATOMIC_ACQUIRE);
}

#endif
