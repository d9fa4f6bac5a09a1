/*
 * leakscan.h - the reachability scan (leakscan.c) that the leak report (leaks.c) is built on.
 *
 * A scan stops the other threads, lists every live block of the heap and marks which of them the
 * program can still reach, as Valgrind's memcheck defines it. Its tables live in private mappings
 * (never in this heap) until fm_leak_scan_release.
 */
#ifndef FM_LEAKSCAN_H
#define FM_LEAKSCAN_H

#include "internal.h"

/* What the scan found for a block (its state byte, less FM_SCAN_SCANNED). */
enum {
    FM_SCAN_UNREACHED = 0,
    FM_SCAN_REACHABLE = 1, /* a pointer to its start: still reachable */
    FM_SCAN_POSSIBLE = 2,  /* only pointers into its middle: possibly lost */
    FM_SCAN_DEFINITE = 3,  /* no pointer at all: definitely lost */
    FM_SCAN_INDIRECT = 4,  /* pointed to only from lost blocks: indirectly lost */
    FM_SCAN_KIND_MASK = 0x7f,
    FM_SCAN_SCANNED = 0x80, /* its contents have been scanned */
};

typedef struct fm_scan_block {
    uintptr_t start; /* the user pointer, with FM_SCAN_DEBUG_BIT set for a debug block */
    size_t size;     /* the user's bytes: the requested size (debug), else the usable size */
} fm_scan_block_t;
#define FM_SCAN_DEBUG_BIT ((uintptr_t)1)
FM_INLINE void *fm_scan_user(const fm_scan_block_t *b) { return (void *)(b->start & ~FM_SCAN_DEBUG_BIT); }
FM_INLINE bool fm_scan_is_debug(const fm_scan_block_t *b) { return (b->start & FM_SCAN_DEBUG_BIT) != 0; }

typedef struct fm_scan_run fm_scan_run_t;

typedef struct fm_scan {
    fm_scan_block_t *blocks; /* every live block, ascending within each run */
    uint8_t *state;          /* one byte per block */
    size_t count, capacity;
    fm_scan_run_t *runs; /* stretches of ascending blocks, sorted by address */
    size_t run_count;
    uint32_t *stack; /* the mark stack (indexes into blocks) */
    size_t stack_cap, stack_len;
    bool overflow;  /* the mark stack was full: some marked blocks wait for a sweep */
    bool run_break; /* the walk entered a new span: the next block starts a run */
    void *mapping;
    size_t mapping_size;
    unsigned threads_stopped, threads_missed; /* missed: did not answer; their stacks are not scanned */
    bool complete; /* false: the tables could not be mapped; nothing was classified */
} fm_scan_t;

/* Runs the scan; the caller holds no arena lock, and has called __builtin_unwind_init (its
 * frame, where that saves the registers, is where this thread's stack is scanned from). */
/* private_area: the caller's own private mapping, which is not a root.
 * classified(s, arg) runs once every block is classified, while the other threads are still
 * stopped and the arenas locked: it may read the blocks (none can be freed meanwhile), must not
 * allocate, lock or symbolize. */
bool fm_leak_scan(fm_scan_t *s, void (*classified)(fm_scan_t *s, void *arg), void *arg, const void *private_area,
                  size_t private_size); /* the caller's own mapping: no root */
void fm_leak_scan_release(fm_scan_t *s);
/* How many threads the process has now (from /proc/self/task; 0 if unknown). */
unsigned fm_leak_thread_count(void);

#endif
