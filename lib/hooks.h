/*
 * hooks.h - the hook table: the few things a lower layer needs from a higher one.
 *
 * The layers (tests/layers.sh holds the table) call only downward. Where a lower layer must
 * reach up, it calls through this table, which init.c defines, filled in when the library is
 * linked (a constant, so it is complete before the first allocation and nothing can change it).
 * Every hook is on a debug, damage, error, upkeep, thread-exit or start-up path: the normal-mode
 * fast paths never call through it.
 */
#ifndef FASTMM5_HOOKS_H
#define FASTMM5_HOOKS_H

#include <stdbool.h>

typedef struct fm_hooks {
    /* The public functions of debug.c and leaks.c (below start-up) start the heap first:
     * fm_ensure_init (startup.c). */
    void (*start)(void);
    /* Once the heap is ready, the first start-up registers the fork handlers (init.c): they take
     * every module's lock, up to the walkers'. */
    void (*heap_ready)(void);
    /* The managers and the thread cache, about to hand out a freed debug block (its flag word
     * says DEBUG_INFO): debug.c checks it, reports damage and refills it. check_reuse reports a
     * damaged block; freed_block_intact (called under an arena lock) only says whether it is. */
    bool (*debug_check_reuse)(void *outer);
    bool (*debug_freed_block_intact)(void *outer);
    /* The thread cache found a freed plain block whose flag word was overwritten (eventlog.c). */
    void (*freed_block_damaged)(const char *operation, const void *p, unsigned flags);
    /* The block dispatch was asked to free a block twice (eventlog.c). */
    void (*invalid_pointer)(const char *operation, const void *p, const char *why);
    /* The thread cache, about to flush or give back this thread's cache (upkeep, thread exit):
     * the checks of the thread's deferred free (api.c, fm_free_deferred_now) are made first. */
    void (*free_deferred)(void);
} fm_hooks_t;

extern const fm_hooks_t fm_hooks;

#endif
