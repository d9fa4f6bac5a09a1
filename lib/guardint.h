/*
 * guardint.h - a guarded block's metadata page, shared by guard.c (allocation, free, the
 * quarantine) and guardfault.c (the fault handler's report).
 */
#ifndef FM_GUARDINT_H
#define FM_GUARDINT_H

#define FM_GUARD_MAX_DEPTH 64u
#define FM_GUARD_SLACK_FILL 0xabu
#define FM_GUARD_LIVE 1u
#define FM_GUARD_FREED 2u

/* At the start of the mapping (its owner in the ownership map), in a page of its own. */
typedef struct fm_guard_block {
    struct fm_guard_block *self; /* itself while mapped: a stale or damaged page says no */
    uint32_t state;              /* FM_GUARD_LIVE -> FM_GUARD_FREED, once (CAS) */
    bool underflow;              /* the block starts at its data pages (else it ends there) */
    size_t map_size;             /* the whole mapping */
    char *data;                  /* the accessible pages while live */
    size_t data_bytes;
    char *user;                  /* the block */
    size_t size;                 /* requested bytes */
    size_t alignment;
    uint32_t allocated_by_thread, freed_by_thread;
    unsigned depth;
    struct fm_guard_block *next; /* the quarantine's FIFO */
    uintptr_t allocation_trace[FM_GUARD_MAX_DEPTH];
    uintptr_t free_trace[FM_GUARD_MAX_DEPTH];
} fm_guard_block_t;

extern bool fm_guard_underflow;
fm_guard_block_t *fm_guard_block_of(const void *p);
/* The block's allocation (and, freed, free) trace with the thread ids. */
void fm_guard_report_traces(fm_report_t *r, const fm_guard_block_t *g, bool with_free);

#endif
