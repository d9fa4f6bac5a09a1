/*
 * startup.c - the lazy one-time start of the heap: on the first allocation (or the first call
 * that needs the heap), from whichever thread makes it, every layer below is initialized in
 * order, with no call that could allocate before the heap is ready. Then the process hooks
 * (init.c) are told, through the hook table, that the heap is ready.
 */
#include "internal.h"

bool fm_ready;
static fm_lock_t init_lock;

/* The settings options.c parsed that other modules keep, handed to them once, right after the
 * environment is read (and so before the modules they set are initialized). */
static void apply_options(void)
{
    const fm_options_t *o = &fm_options;
    if (o->error_action >= 0)
        fastmm_set_error_action((fastmm_error_action_t)o->error_action);
    if (o->memory_limit_set)
        fm_os_set_limit(o->memory_limit);
    if (o->disable_avx2)
        fm_kernels_avx2_disabled = true;
    if (o->disable_avx512)
        fm_kernels_avx512_disabled = true;
    if (o->stack_depth >= 0)
        fastmm_debug_set_stack_depth((unsigned)o->stack_depth);
    if (o->debug_options_set)
        fastmm_debug_set_options(o->debug_options);
    if (o->log_path != NULL && !fm_event_set_log_path(o->log_path))
        fm_options_warn(fm_option_name(FM_OPT_LOG), o->log_path,
                        "cannot open the file for appending; events go to standard error only");
}

/* The environment may not exist yet at the first allocation (false then); the constructor in
 * init.c calls this again. The options are applied the first time they are read. */
bool fm_read_options(void)
{
    static bool applied;
    if (!fm_options_init())
        return false;
    if (!applied) {
        applied = true;
        apply_options();
    }
    return true;
}

void fm_init_once(void)
{
    fm_lock_wait(&init_lock);
    if (!fm_load_relaxed(&fm_ready)) {
        fm_start_ms = fm_os_coarse_time_ms();
        fm_read_options();
        fm_sizeclass_init();
        fm_small_init();
        fm_kernels_init(fm_options.disable_asm);
        fm_tcache_init();
        fm_track_init(fm_options.valgrind_slack_usable); /* before fm_debug_init: the fast-path flags depend on fm_track_on */
        fm_debug_init();
        fm_store_release(&fm_ready, true);
        fm_tcache_init_key();
    }
    fm_lock_release(&init_lock);
    fm_hooks.heap_ready();
}

/* fm_ensure_init out of line: the hook table's start (hooks.h). */
void fm_start_heap(void) { fm_ensure_init(); }
