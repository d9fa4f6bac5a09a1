/*
 * stacktrace.c - stack traces for debug blocks: captured on x86-64 by lib/unwind.c (unwind
 * rules read from .eh_frame once per address), elsewhere with the unwinder of libgcc
 * (_Unwind_Backtrace, which reads the .eh_frame tables every object has, so it works in code
 * built without frame pointers; linked in statically, see configure.ac), and symbolized with
 * the helper program fastmm5-symbolize where it is built (lib/symbolize.c: names from .symtab,
 * demangled, and file:line), else with dladdr as function+offset (object file).
 *
 * Neither step allocates from this heap in the usual case; a thread that re-enters the allocator
 * while capturing (the unwinder's first use can) gets an empty trace instead of recursing.
 * A program can replace both steps (fastmm_set_stack_trace_hooks).
 */
#define _GNU_SOURCE 1 /* dladdr, dl_iterate_phdr */
#include "internal.h"

#include <dlfcn.h>
#include <link.h>
#include <string.h>
#include <unwind.h>

static uintptr_t own_text_start, own_text_end;
static __thread bool capturing __attribute__((tls_model("initial-exec")));
static fastmm_stack_capture_t capture_hook;
static fastmm_stack_format_t format_hook;

/* Frames inside libfastmm5 are not the caller's business. The library has more than one
 * executable segment (lib/seldom-text.ld puts the seldom-used code in its own), so the range
 * kept is from the start of the first to the end of the last: whatever lies between them
 * belongs to the library too. */
static int find_own_text(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    uintptr_t probe = (uintptr_t)arg, lo = UINTPTR_MAX, hi = 0;
    bool ours = false;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X))
            continue;
        uintptr_t start = info->dlpi_addr + ph->p_vaddr, end = start + ph->p_memsz;
        lo = start < lo ? start : lo;
        hi = end > hi ? end : hi;
        ours |= probe >= start && probe < end;
    }
    if (!ours)
        return 0;
    /* Threads may find it at the same time (capture runs it lazily): the same values, stored
     * atomically, the end last (it says whether the range is known). */
    fm_store_relaxed(&own_text_start, lo);
    fm_store_release(&own_text_end, hi);
    return 1;
}

void fm_stack_init(void) { dl_iterate_phdr(find_own_text, (void *)(uintptr_t)&fm_stack_init); }

#ifndef FM_HAVE_FAST_UNWIND
typedef struct capture_state {
    uintptr_t *out;
    unsigned max, n;
} capture_state_t;

static _Unwind_Reason_Code on_frame(struct _Unwind_Context *ctx, void *arg)
{
    capture_state_t *c = arg;
    uintptr_t ip = (uintptr_t)_Unwind_GetIP(ctx);
    if (ip == 0)
        return _URC_END_OF_STACK;
    if (ip >= fm_load_relaxed(&own_text_start) && ip < fm_load_relaxed(&own_text_end))
        return _URC_NO_REASON;
    c->out[c->n++] = ip;
    return c->n < c->max ? _URC_NO_REASON : _URC_END_OF_STACK;
}
#endif

/* Captures n <= depth frames and returns n; they are at *where: out, or this thread's copy of
 * them in lib/unwind.c (valid until its next capture). *stamp: equal non-zero stamps from one
 * thread name equal traces; 0 names nothing. No zeros are written past the frames. */
unsigned fm_stack_capture_stamped(uintptr_t *out, unsigned depth, uint64_t *stamp, const uintptr_t **where)
{
    unsigned n = 0;
    *stamp = 0;
    *where = out;
    if (depth == 0 || capturing)
        return 0;
    capturing = true;
    if (fm_load_acquire(&own_text_end) == 0)
        fm_stack_init();
    fastmm_stack_capture_t hook = fm_load_acquire(&capture_hook);
    if (hook != NULL) {
        for (unsigned i = 0; i < depth; i++)
            out[i] = 0; /* a hook may leave entries unwritten */
        hook(out, depth);
        n = depth;
    } else {
#ifdef FM_HAVE_FAST_UNWIND
        n = fm_unwind_capture(out, depth, fm_load_relaxed(&own_text_start), fm_load_relaxed(&own_text_end), stamp, where);
#else
        capture_state_t c = {out, depth, 0};
        _Unwind_Backtrace(on_frame, &c);
        n = c.n;
#endif
    }
    capturing = false;
    return n;
}

/* Fills exactly `depth` entries; unused ones are 0 (written after the capture, past the frames
 * it found: the whole array zeroed first was a 160-byte memset per trace). */
void fm_stack_capture(uintptr_t *out, unsigned depth)
{
    uint64_t stamp;
    const uintptr_t *where;
    unsigned n = fm_stack_capture_stamped(out, depth, &stamp, &where);
    fm_stack_settle(out, depth, n, where);
}

/* The n frames of a stamped capture into out[0, n), where they are not already, and zeros in
 * out[n, depth). */
void fm_stack_settle(uintptr_t *out, unsigned depth, unsigned n, const uintptr_t *where)
{
    if (where != out)
        memcpy(out, where, n * sizeof *out);
    if (n < depth)
        memset(out + n, 0, (depth - n) * sizeof *out);
}

/* One line per non-zero address: "    0x401234 main+0x24 (/usr/bin/prog)". */
void fm_stack_format(fm_report_t *r, const uintptr_t *trace, unsigned depth)
{
    fastmm_stack_format_t hook = fm_load_acquire(&format_hook);
    unsigned shown = 0;
    for (unsigned i = 0; i < depth; i++) {
        if (trace[i] == 0)
            continue;
        shown++;
        fm_report_str(r, "\n    ");
        fm_report_hex(r, trace[i]);
        char text[256];
        if (hook != NULL && hook(trace[i], text, sizeof text) > 0) {
            text[sizeof text - 1] = '\0';
            fm_report_str(r, " ");
            fm_report_str(r, text);
            continue;
        }
        Dl_info info;
        /* a return address points after the call: look up the call itself */
        bool known = dladdr((void *)(trace[i] - 1), &info) != 0;
        char name[256], where[256];
        if (fm_symbolize(trace[i], name, sizeof name, where, sizeof where)) {
            if (name[0] != '-' || name[1] != '\0') {
                fm_report_str(r, " ");
                fm_report_str(r, name);
            }
            if (known && info.dli_fname != NULL) {
                fm_report_str(r, " (");
                fm_report_str(r, info.dli_fname);
                fm_report_str(r, ")");
            }
            if (where[0] != '-' || where[1] != '\0') {
                fm_report_str(r, " at ");
                fm_report_str(r, where);
            }
            continue;
        }
        if (!known)
            continue;
        if (info.dli_sname != NULL) {
            fm_report_str(r, " ");
            fm_report_str(r, info.dli_sname);
            fm_report_str(r, "+");
            fm_report_hex(r, trace[i] - (uintptr_t)info.dli_saddr);
        } else if (info.dli_fbase != NULL) {
            fm_report_str(r, " ");
            fm_report_hex(r, trace[i] - (uintptr_t)info.dli_fbase);
        }
        if (info.dli_fname != NULL) {
            fm_report_str(r, " (");
            fm_report_str(r, info.dli_fname);
            fm_report_str(r, ")");
        }
    }
    if (shown == 0)
        fm_report_str(r, "\n    (no stack trace recorded: FASTMM5_STACK_DEPTH=0?)");
}

void fm_stack_format_id(fm_report_t *r, uint32_t id, unsigned depth)
{
    const uintptr_t *frames = fm_tracetab_frames(id, depth);
    if (frames != NULL)
        fm_stack_format(r, frames, depth);
    else if (id == FM_TRACE_LOST)
        fm_report_str(r, "\n    (not stored: the table of distinct stack traces was full)");
    else if (id != FM_TRACE_NONE)
        fm_report_str(r, "\n    (not stored: the block's trace id names no trace)");
    else
        fm_stack_format(r, NULL, 0);
}

/* The stack of the call that detected a problem, for the report about it (FastMM5 and
 * Valgrind show it first). It is captured at report time only, so its depth is the configured
 * one, or the default where stored traces are off. */
void fm_stack_capture_current(fm_stack_current_t *cur)
{
    unsigned depth = fm_load_relaxed(&fm_stack_depth);
    cur->depth = depth != 0 ? depth : FM_STACK_CURRENT_DEPTH;
    fm_stack_capture(cur->trace, cur->depth);
}

void fm_stack_report_current(fm_report_t *r, const fm_stack_current_t *cur)
{
    if (fm_checking_deferred)
        fm_report_str(r, "\nThe bad call was an earlier free or delete of this thread: its checks waited for the "
                         "thread's next one (FASTMM5_ON_ERROR=continue, an event handler or debug mode check each "
                         "call in its own).\nStack trace of the later call that checked it:");
    else
        fm_report_str(r, "\nStack trace of the call:");
    fm_stack_format(r, cur->trace, cur->depth);
}

FM_EXPORT void fastmm_set_stack_trace_hooks(fastmm_stack_capture_t capture, fastmm_stack_format_t format)
{
    fm_store_release(&capture_hook, capture);
    fm_store_release(&format_hook, format);
}
