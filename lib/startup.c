/*
 * startup.c - the lazy one-time start of the heap: on the first allocation (or the first call
 * that needs the heap), from whichever thread makes it, every layer below is initialized in
 * order, with no call that could allocate before the heap is ready. Then the process hooks
 * (init.c) are told, through the hook table, that the heap is ready.
 */
#include "internal.h"

bool fm_ready;
static fm_lock_t init_lock;

void fm_init_once(void)
{
    fm_lock_wait(&init_lock);
    if (!fm_load_relaxed(&fm_ready)) {
        fm_start_ms = fm_os_coarse_time_ms();
        fm_options_init();
        fm_sizeclass_init();
        fm_small_init();
        fm_kernels_init(fm_options.disable_asm);
        fm_tcache_init();
        fm_track_init(); /* before fm_debug_init: the fast-path flags depend on fm_track_on */
        fm_debug_init();
        fm_store_release(&fm_ready, true);
        fm_tcache_init_key();
    }
    fm_lock_release(&init_lock);
    fm_hooks.heap_ready();
}

/* fm_ensure_init out of line: the hook table's start (hooks.h). */
void fm_start_heap(void) { fm_ensure_init(); }
