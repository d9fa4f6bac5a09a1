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
unsigned fm_guard_mode; /* FASTMM5_GUARD's mode (guard.h), which guard.c sets */
unsigned fm_stack_depth = 20; /* return addresses per trace (FASTMM5_STACK_DEPTH), which debug.c sets */
uint64_t fm_start_ms;    /* coarse time at start-up: debug blocks' times count from it */
