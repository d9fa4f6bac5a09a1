/*
 * init.c - the process hooks: the constructor (options that need the environment), the fork
 * handlers, the exit-time work, and the hook table through which the lower layers reach up
 * (hooks.h). The heap itself starts lazily, in startup.c.
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

static bool atfork_registered;

/* What the dynamic loader calls at exit as the library's DT_FINI (configure links with
 * -Wl,-fini=fm_fini where the linker has it): nothing to do, like the default, crti's _fini,
 * which the linker places after all of .text: among the seldom-used code where the linker does
 * not take lib/seldom-text.ld, and calling it would map that code's 64 KiB window at every exit
 * (FM_EVERY_PROCESS: base.h). */
FM_EVERY_PROCESS void fm_fini(void);
void fm_fini(void) {}
/* Where the exit-time reports go. Many programs close standard error before exiting (gnulib's
 * close_stdout does), so with FASTMM5_STATS or FASTMM5_REPORT_LEAKS a private duplicate is kept
 * from start-up. */
static int report_fd = 2;

/* fork(): hold every lock of the library across the fork, so that the child never inherits one
 * held by a thread that does not exist there (it would wait for it forever).
 *
 * Two rules keep the fork itself from waiting forever:
 *
 * - The C library's locks that are held around calls into the allocator come first. stdio is the
 *   one glibc's fork takes itself: a thread in getline() holds its FILE's lock while it calls
 *   realloc, and a thread in fflush(NULL) holds the list of all FILEs while it waits for that
 *   FILE. glibc's fork takes the list lock after the atfork handlers, so a handler that held the
 *   allocator's locks first would wait for the list forever (the fflush waits for the FILE, whose
 *   holder waits in realloc for the handler). The handler takes the list lock itself, before the
 *   allocator's (glibc's own malloc does the same, in fork itself); the lock is recursive, so
 *   fork takes it again, and after the fork the parent handler releases the handler's hold while
 *   the child's stdio starts over with a reset list lock.
 *
 * - A process with one thread takes no lock: no other thread can hold one, and the only holder
 *   can be the code this very thread interrupted to run a signal handler that forks; waiting for
 *   it would never end. Parent and child both return to that code, which finishes its work.
 *
 * The allocator's order follows the nesting in the rest of the library. The modules' own locks
 * come first: they are held while arena locks are taken (the JSON and state writers and the leak
 * check walk the heap), never inside one. The report lock comes last: reports are written while
 * arenas are locked (fastmm_debug_scan). The arenas nest both ways: the heap walkers hold a
 * medium arena while they wait for the small managers of its spans, and allocation holds a small
 * manager while it looks for a medium arena for a new span (it never waits for one: it tries
 * them in turn until one is free). So the medium arenas are taken first (a walker inside one
 * finishes it), then each small manager is given a while; one that stays busy is held by a
 * thread that needs a medium arena held here: let the arenas go so that it can finish, and start
 * again. */
static bool lock_small_managers_or_give_up(void)
{
    fm_small_manager_t *first = &fm_small_managers[0][0];
    const unsigned count = FM_SMALL_ARENAS * FM_SMALL_INDEX_COUNT;
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

/* glibc's: the stdio list lock (recursive), and whether the process has ever had a second
 * thread. Weak: with another C library both are absent, and every fork takes the locks. */
extern void _IO_list_lock(void) __attribute__((weak));
extern void _IO_list_unlock(void) __attribute__((weak));
extern char __libc_single_threaded __attribute__((weak));

/* Whether before_fork took the locks (after_fork* release only what it took). */
static bool fork_holds_locks;

static bool process_has_one_thread(void)
{
    return &__libc_single_threaded != NULL && fm_load_relaxed(&__libc_single_threaded);
}

static void lock_all(void)
{
    fm_unwind_fork_prepare(); /* first: it waits for walks, which take none of the locks below */
    fm_walk_fork_lock();
    fm_leaks_fork_lock();
    fm_debug_fork_lock();
    fm_guard_fork_lock();
    fm_quarantine_fork_lock();
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
    fm_track_fork_lock();
}

static void before_fork(void)
{
    fork_holds_locks = !process_has_one_thread();
    if (!fork_holds_locks)
        return;
    if (_IO_list_lock != NULL)
        _IO_list_lock();
    lock_all();
}

static void unlock_all(void)
{
    fm_track_fork_unlock();
    fm_unwind_fork_done();
    fm_event_unlock();
    fm_tcache_fork_unlock();
    fm_large_unlock_all();
    fm_medium_unlock_all();
    fm_small_unlock_all();
    fm_tuning_fork_unlock();
    fm_quarantine_fork_unlock();
    fm_guard_fork_unlock();
    fm_debug_fork_unlock();
    fm_leaks_fork_unlock();
    fm_walk_fork_unlock();
}

/* The child's stdio list lock needs nothing: glibc's fork resets it in the child. */
static void after_fork_in_child(void)
{
    fm_os_forget_thread_id();
    if (fork_holds_locks) {
        fm_tcache_fork_child();
        unlock_all();
    }
}

static void after_fork(void)
{
    if (!fork_holds_locks)
        return;
    unlock_all();
    if (_IO_list_unlock != NULL)
        _IO_list_unlock();
}

/* The hook table's heap_ready (hooks.h): called by every start-up of the heap (startup.c), it
 * registers the fork handlers the first time. Only then, because pthread_atfork itself may
 * allocate (which is then served normally). */
static void register_fork_handlers(void)
{
    if (!fm_load_acquire(&atfork_registered)) {
        fm_store_release(&atfork_registered, true);
        if (__register_atfork != NULL)
            __register_atfork(before_fork, after_fork, after_fork_in_child, &__dso_handle);
        else
            pthread_atfork(before_fork, after_fork, after_fork_in_child);
    }
}

/* A freed block's damaged header, as the thread caches find it (a freed block: no live kind). */
static void freed_block_damaged(const char *operation, const void *p, unsigned flags)
{
    fm_event_header_damaged(operation, p, flags, NULL, 0);
}

/* What the layers below need from above (hooks.h): a constant, complete before the first
 * allocation. */
const fm_hooks_t fm_hooks = {
    .start = fm_start_heap,
    .heap_ready = register_fork_handlers,
    .debug_check_reuse = fm_debug_check_reuse,
    .debug_freed_block_intact = fm_debug_freed_block_intact,
    .freed_block_damaged = freed_block_damaged,
    .invalid_pointer = fm_event_invalid_pointer,
    .free_deferred = fm_free_deferred_now,
};

/* Applies the options that switch modes, once they have been read. */
static void apply_start_options(void)
{
    static bool applied;
    if (applied || !fm_read_options())
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
    if (fm_options.quarantine != 0) { /* FASTMM5_QUARANTINE */
        fm_guard_install_handler(); /* a fault in a waiting large block's pages is reported */
        fm_quarantine_start(fm_options.quarantine);
    }
    if (fm_options.guard != NULL)
        fm_guard_start(fm_options.guard); /* FASTMM5_GUARD */
    if (fm_options.verbose)
        fm_verbose_describe(2);
}

/* The environment may not have existed at the first allocation: read the options now. */
__attribute__((constructor)) static void at_load(void)
{
    fm_ensure_init();
    apply_start_options();
    if (fm_options.stats_at_exit || fm_options.report_leaks) {
        int fd = fcntl(2, F_DUPFD_CLOEXEC, 100);
        if (fd >= 0)
            report_fd = fd;
        if (fm_options.report_leaks)
            fm_event_set_leak_fd(report_fd);
    }
}

/* The exiting thread's deferred free is checked first (api.c). In a process that made debug
 * blocks, they are checked next (debug.c), and the damage found there is reported before the
 * leaks; like the leak report, it never aborts the process. */
__attribute__((destructor)) static void at_exit(void)
{
    fm_free_deferred_now(); /* the exiting thread's last free: a bad one still aborts the process */
    if (fm_load_relaxed(&fm_debug_used)) {
        fm_event_exit_check(true);
        fm_debug_check_at_exit();
        fm_event_exit_check(false);
    }
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
