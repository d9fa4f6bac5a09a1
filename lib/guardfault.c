/*
 * guardfault.c - the SIGSEGV/SIGBUS handler of guarded mode (guard.c): a fault in a guarded
 * block's no-access pages becomes a libfastmm5 report (which block, where the access was relative
 * to it, its allocation and free traces, the faulting stack); then the default action is restored
 * and the faulting instruction runs again, so that the process dies of the original signal, with
 * its usual core dump. Any other fault goes to the handler the program had installed before.
 *
 * It runs in a signal handler: no allocation, only the report writer (write(2), static buffer).
 * The thread that turned guarding on gets an alternate signal stack if it has none; the others
 * run the handler on their own stack (SA_ONSTACK uses theirs where they set one up).
 */
#define _GNU_SOURCE 1
#include "internal.h"
#include "guardint.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <ucontext.h>

#define ALT_STACK_BYTES ((size_t)128 << 10)

static struct sigaction previous_segv, previous_bus;

void fm_guard_report_traces(fm_report_t *r, const fm_guard_block_t *g, bool with_free)
{
    fm_report_str(r, "\nThe block was allocated by thread ");
    fm_report_dec(r, g->allocated_by_thread);
    fm_report_str(r, ", stack trace of the allocation:");
    fm_stack_format_id(r, g->allocation_trace, g->depth);
    if (with_free && fm_load_acquire(&g->state) == FM_GUARD_FREED) {
        fm_report_str(r, "\nThe block was freed by thread ");
        fm_report_dec(r, g->freed_by_thread);
        fm_report_str(r, ", stack trace of the free:");
        fm_stack_format_id(r, g->free_trace, g->depth);
    }
}

/* The faulting instruction's address and whether it wrote (-1: not known on this target). */
static uintptr_t fault_pc(const void *context, int *write)
{
    const ucontext_t *uc = context;
    *write = -1;
#if defined(__x86_64__)
    *write = (uc->uc_mcontext.gregs[REG_ERR] & 2) != 0;
    return (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
#elif defined(__i386__)
    *write = (uc->uc_mcontext.gregs[REG_ERR] & 2) != 0;
    return (uintptr_t)uc->uc_mcontext.gregs[REG_EIP];
#elif defined(__aarch64__)
    return (uintptr_t)uc->uc_mcontext.pc;
#else
    (void)uc;
    return 0;
#endif
}

static void report_fault(const fm_guard_block_t *g, const char *addr, const void *context)
{
    int write;
    fm_stack_current_t fault;
    uintptr_t pc = fault_pc(context, &write);
    unsigned depth = fm_load_relaxed(&fm_stack_depth);
    fault.depth = depth != 0 ? (depth < 63 ? depth + 1 : 64) : FM_STACK_CURRENT_DEPTH + 1;
    fm_stack_capture(fault.trace + 1, fault.depth - 1);
    /* The unwinder goes on through the signal frame: the handler's frames (the library's are
     * left out already) and the kernel's return trampoline come before the faulting one. */
    unsigned from = 0;
    for (unsigned i = 1; i < fault.depth && from == 0; i++)
        if (fault.trace[i] == pc)
            from = i;
    fault.trace[from] = pc;
    for (unsigned i = 0; i < from; i++)
        fault.trace[i] = 0;
    bool freed = fm_load_acquire(&g->state) == FM_GUARD_FREED;
    const char *end = g->user + g->size;
    fastmm_event_type_t type = freed ? FASTMM_EVENT_USE_AFTER_FREE
                               : addr >= end ? FASTMM_EVENT_BUFFER_OVERRUN
                                             : FASTMM_EVENT_BUFFER_UNDERRUN;
    fm_report_t r;
    fm_report_begin(&r);
    fm_report_str(&r, freed ? "libfastmm5: use after free: a "
                            : addr >= end ? "libfastmm5: buffer overrun: a " : "libfastmm5: buffer underrun: a ");
    fm_report_str(&r, write < 0 ? "read or write" : write ? "write" : "read");
    fm_report_str(&r, " at ");
    fm_report_hex(&r, (uintptr_t)addr);
    fm_report_str(&r, " hit a guard page");
    if (freed) {
        fm_report_str(&r, ": offset ");
        fm_report_dec(&r, addr >= g->user ? (uint64_t)(addr - g->user) : 0);
        fm_report_str(&r, addr >= g->user ? (addr < end ? " into the freed block " : " (past the end of) the freed block ")
                                          : " (before the start of) the freed block ");
    } else if (addr >= end) {
        fm_report_str(&r, ", ");
        fm_report_dec(&r, (uint64_t)(addr - end) + 1);
        fm_report_str(&r, addr == end ? " byte past the end of the block " : " bytes past the end of the block ");
    } else {
        fm_report_str(&r, ", ");
        fm_report_dec(&r, (uint64_t)(g->user - addr));
        fm_report_str(&r, g->user - addr == 1 ? " byte before the start of the block " : " bytes before the start of the block ");
    }
    fm_report_hex(&r, (uintptr_t)g->user);
    fm_report_str(&r, " of ");
    fm_report_dec(&r, g->size);
    fm_report_str(&r, " bytes (guarded, ");
    fm_report_str(&r, g->underflow ? "starting at its page" : "ending ");
    if (!g->underflow) {
        size_t slack = (size_t)(g->data + g->data_bytes - end);
        if (slack == 0) {
            fm_report_str(&r, "on the guard page");
        } else {
            fm_report_str(&r, "before ");
            fm_report_dec(&r, slack);
            fm_report_str(&r, " filled slack bytes, checked at free");
        }
    }
    fm_report_str(&r, ").");
    fm_guard_report_traces(&r, g, true);
    fm_report_str(&r, "\nStack trace of the faulting access (thread ");
    fm_report_dec(&r, fm_os_thread_id());
    fm_report_str(&r, "):");
    fm_stack_format(&r, fault.trace, fault.depth);
    fm_report_str(&r, "\nThe process is terminated by the signal.");
    fm_event_raise_fault(type, g->user, g->size, &r);
}

static void restore_default(int sig)
{
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, NULL);
}

/* The program's own handler for a fault that is not ours; with none, the default action. */
static void chain(int sig, siginfo_t *si, void *context)
{
    const struct sigaction *prev = sig == SIGSEGV ? &previous_segv : &previous_bus;
    if ((prev->sa_flags & SA_SIGINFO) && prev->sa_sigaction != NULL) {
        prev->sa_sigaction(sig, si, context);
        return;
    }
    if (!(prev->sa_flags & SA_SIGINFO) && prev->sa_handler != SIG_DFL && prev->sa_handler != SIG_IGN) {
        prev->sa_handler(sig);
        return;
    }
    restore_default(sig); /* the instruction faults again, now fatally */
}

static void on_fault(int sig, siginfo_t *si, void *context)
{
    int saved = errno;
    const char *addr = si->si_addr;
    const fm_guard_block_t *g = si->si_code > 0 ? fm_guard_block_of(addr) : NULL;
    bool accessible = g != NULL && fm_load_acquire(&g->state) == FM_GUARD_LIVE && addr >= g->data &&
                      addr < g->data + g->data_bytes;
    if (g == NULL && si->si_code > 0 && fm_debug_report_waiting_fault(addr)) {
        restore_default(sig); /* FASTMM5_QUARANTINE's no-access pages (debug.c) */
    } else if (g == NULL || accessible) {
        chain(sig, si, context);
    } else {
        report_fault(g, addr, context);
        restore_default(sig);
    }
    errno = saved;
}

void fm_guard_install_handler(void)
{
    static bool installed; /* once: guarding and the quarantine both ask (init.c, one thread) */
    if (installed)
        return;
    installed = true;
    stack_t current;
    if (sigaltstack(NULL, &current) == 0 && (current.ss_flags & SS_DISABLE)) {
        void *alt = fm_os_map(ALT_STACK_BYTES);
        if (alt != NULL) {
            stack_t ss = {.ss_sp = alt, .ss_size = ALT_STACK_BYTES, .ss_flags = 0};
            if (sigaltstack(&ss, NULL) != 0)
                fm_os_unmap(alt, ALT_STACK_BYTES);
        }
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &previous_segv);
    sigaction(SIGBUS, &sa, &previous_bus);
}
