/*
 * guardint.h - guarded blocks' slots and metadata, shared by guard.c (allocation, free, the
 * reports), guardslot.c (the regions of slots and the address quarantine) and guardfault.c (the
 * fault handler's report).
 *
 * A region is one chunk-aligned mapping, FM_REGION_GUARD in the ownership map with the region
 * as the owner:
 *
 *   | header + table | no access | slot 0 data | no access | no access | slot 1 data | ...
 *
 * Each slot is a leading no-access page, its data pages and a trailing no-access page, so that
 * every address of a slot names one block: a fault just past a block's end or just before its
 * start lies in that block's own guard page. A block opens only the data pages it needs (at the
 * slot's end in overflow mode, at its start in underflow mode); the others stay no-access. The
 * table holds one entry per slot: the block's metadata, its traces as trace-table ids.
 */
#ifndef FM_GUARDINT_H
#define FM_GUARDINT_H

#define FM_GUARD_SLACK_FILL 0xabu
#define FM_GUARD_UNUSED 0u /* never handed out */
#define FM_GUARD_LIVE 1u
#define FM_GUARD_FREED 2u
#define FM_GUARD_SETUP 3u  /* taken, being filled in: the handler and free treat it as unknown */

struct fm_guard_region;

typedef struct fm_guard_block {
    uint32_t state;              /* LIVE -> FREED once (CAS); SETUP while taken */
    bool underflow;              /* the block starts at its data pages (else it ends there) */
    unsigned depth;              /* of both traces */
    char *data;                  /* the accessible pages while live */
    size_t data_bytes;
    char *user;                  /* the block */
    size_t size;                 /* requested bytes */
    size_t alignment;
    uint32_t allocated_by_thread, freed_by_thread;
    uint32_t allocation_trace, free_trace; /* trace-table ids */
    struct fm_guard_region *region;
    struct fm_guard_block *next; /* the address quarantine's FIFO */
} fm_guard_block_t;

typedef struct fm_guard_region {
    struct fm_guard_region *self; /* itself while mapped: a stale owner says no */
    int cls;                      /* slot class, or FM_GUARD_ONE_OFF */
    uint32_t slots, used;         /* used: slots handed out at least once (in order) */
    size_t map_size;
    char *first_slot;             /* slot i: first_slot + i * stride */
    size_t stride;                /* page + slot_data + page */
    size_t slot_data;
    struct fm_guard_region *prev, *next; /* guardslot.c's list of regions, under its lock */
    fm_guard_block_t block[];
} fm_guard_region_t;

#define FM_GUARD_ONE_OFF (-1)

extern bool fm_guard_underflow;
fm_guard_block_t *fm_guard_block_of(const void *p);
/* The block's allocation (and, freed, free) trace with the thread ids. */
void fm_guard_report_traces(fm_report_t *r, const fm_guard_block_t *g, bool with_free);

/* ---- guardslot.c ---- */
/* A slot's data pages: the first byte and the size of the area a block may open. */
FM_INLINE char *fm_guard_slot_data(const fm_guard_block_t *g)
{
    const fm_guard_region_t *r = g->region;
    return r->first_slot + (size_t)(g - r->block) * r->stride + fm_os_page_size();
}
/* Limits: sample mode (bounded slots, no new regions) or every block; set before use. */
void fm_guard_slots_configure(bool sampled);
/* A slot for a block of `size` bytes, its entry in state SETUP; NULL when there is none (no
 * class that large while sampling, every slot busy or quarantined, no mapping). */
fm_guard_block_t *fm_guard_slot_take(size_t size);
/* A slot that was taken but could not be set up (the pages refused): back to the quarantine. */
void fm_guard_slot_release(fm_guard_block_t *g);
/* A freed block (state FREED, its pages no-access): into the address quarantine. */
void fm_guard_slot_quarantine(fm_guard_block_t *g);

#endif
