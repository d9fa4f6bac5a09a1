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
bool fm_slow_alloc;      /* debug mode, erase-allocated or memcheck: malloc's frameless path is off */
bool fm_slow_free;       /* erase-freed or memcheck: free's frameless path is off */
unsigned fm_guard_mode; /* FASTMM5_GUARD's mode (guard.h), which guard.c sets */
unsigned fm_stack_depth = 20; /* return addresses per trace (FASTMM5_STACK_DEPTH), which debug.c sets */
uint64_t fm_start_ms;    /* coarse time at start-up: debug blocks' times count from it */
