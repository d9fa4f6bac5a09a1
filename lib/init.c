/*
 * init.c - start-up order, fork handlers and exit-time work.
 *
 * Initialization runs on the first allocation, from whichever thread makes it, with no call that
 * could allocate before the heap is ready. Only then are the fork handlers registered, because
 * pthread_atfork itself may allocate (which is then served normally).
 */
#include "internal.h"

#include <fcntl.h>
#include <pthread.h>

/* pthread_atfork is not in libc.so: glibc's libc_nonshared.a links a small copy of it into the
 * library, which calls glibc's exported __register_atfork with our __dso_handle (so that the
 * handlers go if the library is unloaded). The linker puts that copy at the end of our text,
 * among the seldom-used code (Makefile.am), and calling it there would map that code's 64 KiB
 * window in every process (28 KiB of RSS on x86-64). So where __register_atfork exists it is
 * called as that copy calls it; elsewhere (another libc) pthread_atfork is. */
extern int __register_atfork(void (*prepare)(void), void (*parent)(void), void (*child)(void), void *dso)
    __attribute__((weak));
extern void *__dso_handle;

static fm_lock_t init_lock;
static bool atfork_registered;
/* Here, not in debug.c: this file's variables are written at start-up anyway, and a page of
 * .bss that nothing writes costs no memory (see fm_debug_init). */
uint64_t fm_start_ms;

/* What the dynamic loader calls at exit as the library's DT_FINI (configure links with
 * -Wl,-fini=fm_fini where the linker has it): nothing to do, like the default, crti's _fini,
 * which the linker places after all of .text: among the seldom-used code where the linker does
 * not take lib/seldom-text.ld, and calling it would map that code's 64 KiB window at every exit
 * (FM_EVERY_PROCESS: base.h). */
FM_EVERY_PROCESS void fm_fini(void);
void fm_fini(void) {}
/* Where the exit-time report goes. Many programs close standard error before exiting (gnulib's
 * close_stdout does), so with FASTMM5_STATS a private duplicate is kept from start-up. */
static int report_fd = 2;

/* fork(): hold every lock of the library across the fork, so that the child never inherits one
 * held by a thread that does not exist there (it would wait for it forever).
 *
 * The order follows the nesting in the rest of the library. The modules' own locks come first:
 * they are held while arena locks are taken (the JSON and state writers and the leak check walk
 * the heap), never inside one. The report lock comes last: reports are written while arenas are
 * locked (fastmm_debug_scan). The arenas nest both ways: the heap walkers hold a medium arena
 * while they wait for the small managers of its spans, and allocation holds a small manager
 * while it looks for a medium arena for a new span (it never waits for one: it tries them in
 * turn until one is free). So the medium arenas are taken first (a walker inside one finishes
 * it), then each small manager is given a while; one that stays busy is held by a thread that
 * needs a medium arena held here: let the arenas go so that it can finish, and start again. */
static bool lock_small_managers_or_give_up(void)
{
    fm_small_manager_t *first = &fm_small_managers[0][0];
    const unsigned count = FM_SMALL_ARENAS * FM_SMALL_CLASS_COUNT;
    for (unsigned i = 0; i < count; i++) {
        for (unsigned tries = 0; !fm_lock_try(&first[i].lock); tries++) {
            if (tries == 1000) {
                while (i-- > 0)
                    fm_lock_release(&first[i].lock);
                return false;
            }
            fm_os_yield();
        }
    }
    return true;
}

static void before_fork(void)
{
    fm_unwind_fork_prepare(); /* first: it waits for walks, which take none of the locks below */
    fm_walk_fork_lock();
    fm_leaks_fork_lock();
    fm_debug_fork_lock();
    fm_tuning_fork_lock();
    for (;;) {
        fm_medium_lock_all();
        if (lock_small_managers_or_give_up())
            break;
        fm_medium_unlock_all();
        fm_os_yield();
    }
    fm_large_lock_all();
    fm_tcache_fork_lock();
    fm_event_lock();
}

static void unlock_all(void)
{
    fm_unwind_fork_done();
    fm_event_unlock();
    fm_tcache_fork_unlock();
    fm_large_unlock_all();
    fm_medium_unlock_all();
    fm_small_unlock_all();
    fm_tuning_fork_unlock();
    fm_debug_fork_unlock();
    fm_leaks_fork_unlock();
    fm_walk_fork_unlock();
}

static void after_fork_in_child(void)
{
    fm_os_forget_thread_id();
    unlock_all();
}

static void after_fork(void) { unlock_all(); }

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
    if (!fm_load_acquire(&atfork_registered)) {
        fm_store_release(&atfork_registered, true);
        if (__register_atfork != NULL)
            __register_atfork(before_fork, after_fork, after_fork_in_child, &__dso_handle);
        else
            pthread_atfork(before_fork, after_fork, after_fork_in_child);
    }
}

/* Applies the options that switch modes, once they have been read. */
static void apply_start_options(void)
{
    static bool applied;
    if (applied || !fm_options_init())
        return;
    applied = true;
    fm_kernels_init(fm_options.disable_asm); /* FASTMM5_DISABLE_ASM may only be readable now */
    if (fm_options.debug_at_start)
        fastmm_debug_enter();
    if (fm_options.erase_allocated)
        fastmm_erase_allocated_begin();
    if (fm_options.erase_freed)
        fastmm_erase_freed_begin();
    fm_tuning_start(); /* FASTMM5_MIN_ALIGNMENT */
    if (fm_options.verbose)
        fm_options_describe(2);
}

/* The environment may not have existed at the first allocation: read the options now. */
__attribute__((constructor)) static void at_load(void)
{
    fm_ensure_init();
    apply_start_options();
    if (fm_options.stats_at_exit) {
        int fd = fcntl(2, F_DUPFD_CLOEXEC, 100);
        if (fd >= 0)
            report_fd = fd;
    }
}

__attribute__((destructor)) static void at_exit(void)
{
    if (fm_options.report_leaks) {
        fm_tcache_flush_current();
        fm_leak_check_at_exit();
    }
    if (fm_options.stats_at_exit) {
        fm_tcache_flush_current();
        fastmm_process_pending_frees();
        if (fm_options.stats_json)
            fastmm_write_json(report_fd); /* FASTMM5_STATS=json (walk.c) */
        else
            fastmm_write_usage_report(report_fd);
    }
}
