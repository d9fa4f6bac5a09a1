/*
 * modes.c - the mode flags every layer from the managers up reads (the fast paths test them),
 * and the start time. debug.c writes the flags when a mode changes (apply_options_locked), the
 * start-up (startup.c) the time; they live here, below their readers, so that reading them is
 * never a call up.
 */
#include "internal.h"

bool fm_debug_on;
bool fm_erase_allocated; /* FastMM5's erase modes: a lightweight subset of debug mode (4.10) */
bool fm_erase_freed;
/* The frameless paths of malloc and free run for a thread cache pointer above these: 1 (every
 * usable cache, FM_TCACHE_USABLE) or FM_FAST_PATH_OFF, which no pointer is above - so that one
 * compare tests the cache and the mode. malloc's is off in debug mode, erase-allocated, under
 * memcheck and with every block guarded; free's under erase-freed and memcheck. */
uintptr_t fm_fast_alloc_above = 1;
uintptr_t fm_fast_free_above = 1;
/* The same for free's deferred checks (api.c): 1 while no FM_DEFER_OFF_* reason holds. */
uintptr_t fm_defer_free_above = 1;
/* Set while api.c reports on a block whose checks waited (fm_stack_report_current says so). */
__thread bool fm_checking_deferred __attribute__((tls_model("initial-exec")));
static unsigned defer_off_reasons;
static fm_lock_t defer_lock; /* two mode changes at once must not store their gates out of order */

void fm_defer_free_set_off(unsigned reason, bool off)
{
    fm_lock_wait(&defer_lock);
    defer_off_reasons = off ? defer_off_reasons | reason : defer_off_reasons & ~reason;
    fm_store_release(&fm_defer_free_above, defer_off_reasons != 0 ? FM_FAST_PATH_OFF : 1u);
    fm_lock_release(&defer_lock);
}
unsigned fm_guard_mode; /* FASTMM5_GUARD's mode (guard.h), which guard.c sets */
unsigned fm_stack_depth = 20; /* return addresses per trace (FASTMM5_STACK_DEPTH), which debug.c sets */
uint64_t fm_start_ms;    /* coarse time at start-up: debug blocks' times count from it */
