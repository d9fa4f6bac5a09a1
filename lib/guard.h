/*
 * guard.h - guarded allocations (FASTMM5_GUARD, guard.c): blocks in mappings of their own, against
 * a PROT_NONE page, so that an overrun, an underrun or a use after free faults at the instruction.
 *
 * A region of guarded slots is registered in the ownership map as FM_REGION_GUARD, with the
 * region as the owner; the entry points send such pointers here before they read anything
 * around them (the two bytes before a guarded block may lie in a no-access page).
 */
#ifndef FM_GUARD_H
#define FM_GUARD_H

/* What FASTMM5_GUARD asked for: 0 (off), guard every block, or sample. */
#define FM_GUARD_OFF 0u
#define FM_GUARD_ALL 1u
#define FM_GUARD_SAMPLE 2u
extern unsigned fm_guard_mode;

/* Whether p lies in a guarded block's mapping (live, or freed and waiting in the quarantine). */
FM_INLINE bool fm_guard_owns(const void *p)
{
    return (fm_pagemap_lookup(p) & FM_REGION_TYPE_MASK) == FM_REGION_GUARD;
}

/* FASTMM5_GUARD's value (NULL: unset): parsed, and the fault handler installed when guarding. */
void fm_guard_start(const char *spec);
/* The fault handler (guardfault.c): for guarding, and for FASTMM5_QUARANTINE's no-access pages. */
void fm_guard_install_handler(void);
/* The live guarded blocks (guardslot.c), for the leak scan, which holds fm_guard_slots_lock. */
void fm_guard_walk_live(void (*visit)(const void *user, size_t size, void *arg), void *arg);
/* Whether user is a live guarded block's start; if so its allocation trace's id and depth. */
bool fm_guard_live_trace(const void *user, uint32_t *trace_id, unsigned *depth);
/* The slots' lock: held across fork (guard.c) and across the leak scan (leakscan.c). */
void fm_guard_slots_lock(void);
void fm_guard_slots_unlock(void);
/* fork (init.c): the quarantine's lock, held across it. */
void fm_guard_fork_lock(void);
void fm_guard_fork_unlock(void);
/* A guarded block for an allocation that guarding chose (every one, or the sampled one), else
 * NULL: the caller allocates as usual. fill: 0x90 (debug mode's malloc), 0 (calloc) or -1. */
void *fm_guard_malloc(size_t size, int fill);
void *fm_guard_aligned(size_t alignment, size_t size);
/* p is in a guarded block's mapping (fm_guard_owns): freed, resized or measured, or reported. */
void fm_guard_free(void *p, const char *operation);
void *fm_guard_realloc(void *p, size_t size);
size_t fm_guard_usable(const void *p);

#endif
