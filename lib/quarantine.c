/*
 * quarantine.c - the quarantine of freed debug blocks (FASTMM5_QUARANTINE=<bytes>): a freed debug
 * block waits in a FIFO, bounded by its bytes, before its memory goes back to the manager. A
 * stale write then lands in a block that is still freed, where the next fastmm_debug_scan, the
 * check at exit or the check when it leaves the FIFO finds it, not in another live block.
 *
 * Off by default: FastMM5's debug mode reuses the block freed last first (LIFO), so that a write
 * after free is found at the very next allocation of that size, and a quarantine trades that for
 * a window as long as its bytes. The blocks wait still allocated from the manager's view, so the
 * first word of the outer block (the header's reserved1, which a debug block never uses while
 * the manager has not freed it) links the FIFO. debug.c makes the pages inside a large block's
 * user area PROT_NONE while it waits, and checks and releases the blocks that leave.
 */
#include "internal.h"

size_t fm_quarantine_limit;
static fm_lock_t lock;
static void *oldest, *newest;
static size_t held_bytes;

void fm_quarantine_start(size_t bytes)
{
    fm_store_relaxed(&fm_quarantine_limit, bytes);
}

FM_INLINE void **link_of(void *outer) { return (void **)outer; }

bool fm_quarantine_hold(void *outer, size_t bytes)
{
    size_t limit = fm_load_relaxed(&fm_quarantine_limit);
    if (limit == 0 || bytes > limit)
        return false;
    *link_of(outer) = NULL;
    fm_lock_wait(&lock);
    if (newest != NULL)
        *link_of(newest) = outer;
    else
        oldest = outer;
    newest = outer;
    held_bytes += bytes;
    /* the oldest ones beyond the bound, unlinked here, released below without the lock */
    void *out = NULL, *out_tail = NULL;
    while (held_bytes > limit && oldest != NULL) {
        void *b = oldest;
        oldest = *link_of(b);
        if (oldest == NULL)
            newest = NULL;
        held_bytes -= fm_debug_quarantine_bytes(b);
        *link_of(b) = NULL;
        if (out_tail != NULL)
            *link_of(out_tail) = b;
        else
            out = b;
        out_tail = b;
    }
    fm_lock_release(&lock);
    while (out != NULL) {
        void *next = *link_of(out);
        *link_of(out) = NULL;
        fm_debug_quarantine_leave(out);
        out = next;
    }
    return true;
}

size_t fm_quarantine_bytes(void) { return fm_load_relaxed(&held_bytes); }

/* the fork handlers (init.c) run these in every process that forks: FM_EVERY_PROCESS */
FM_EVERY_PROCESS void fm_quarantine_fork_lock(void) { fm_lock_wait(&lock); }
FM_EVERY_PROCESS void fm_quarantine_fork_unlock(void) { fm_lock_release(&lock); }
