/*
 * leaks.c - expected-leak registration and the leak report (FastMM5 sections 1.3 and 4.11).
 *
 * The check walks every live block, skips registered ones, and reports each of the rest: debug
 * blocks with their allocation number and stack trace, other blocks by address and size. Then
 * one summary groups them by usable size, smallest first, FastMM5-style.
 * Blocks are collected under the arena locks and reported after, so that symbolizing (dladdr)
 * never runs while an arena is locked.
 */
#include "internal.h"

#define REGISTERED_MAX 4096
#define COLLECTED_MAX 4096
#define SUMMARY_MAX 1024

static fm_lock_t registry_lock;
static const void *registered[REGISTERED_MAX];
static size_t registered_count;

FM_EXPORT bool fastmm_leak_register(const void *p)
{
    bool ok = false;
    fm_lock_wait(&registry_lock);
    if (registered_count < REGISTERED_MAX) {
        registered[registered_count++] = p;
        ok = true;
    }
    fm_lock_release(&registry_lock);
    return ok;
}

FM_EXPORT bool fastmm_leak_unregister(const void *p)
{
    bool ok = false;
    fm_lock_wait(&registry_lock);
    for (size_t i = 0; i < registered_count && !ok; i++)
        if (registered[i] == p) {
            registered[i] = registered[--registered_count];
            ok = true;
        }
    fm_lock_release(&registry_lock);
    return ok;
}

static bool is_registered(const void *p)
{
    for (size_t i = 0; i < registered_count; i++)
        if (registered[i] == p)
            return true;
    return false;
}

typedef struct leak {
    void *block; /* the user pointer */
    void *outer; /* the underlying block (== block unless a debug block) */
    size_t size; /* requested size for debug blocks, usable size otherwise */
} leak_t;

typedef struct summary_row {
    size_t size;
    size_t count;
} summary_row_t;

static fm_lock_t check_lock;
static leak_t collected[COLLECTED_MAX];
static summary_row_t summary[SUMMARY_MAX];

/* fork: the check holds check_lock, then registry_lock, then arena locks (never the reverse). */
FM_EVERY_PROCESS void fm_leaks_fork_lock(void)
{
    fm_lock_wait(&check_lock);
    fm_lock_wait(&registry_lock);
}

FM_EVERY_PROCESS void fm_leaks_fork_unlock(void)
{
    fm_lock_release(&registry_lock);
    fm_lock_release(&check_lock);
}

typedef struct collection {
    size_t total, kept, rows;
} collection_t;

static void add_to_summary(collection_t *c, size_t size)
{
    size_t i = 0;
    while (i < c->rows && summary[i].size < size)
        i++;
    if (i < c->rows && summary[i].size == size) {
        summary[i].count++;
        return;
    }
    if (c->rows == SUMMARY_MAX)
        return;
    for (size_t j = c->rows; j > i; j--)
        summary[j] = summary[j - 1];
    summary[i] = (summary_row_t){size, 1};
    c->rows++;
}

static void collect(void *outer, size_t usable, void *arg)
{
    collection_t *c = arg;
    void *block = outer;
    size_t size = usable;
    const uintptr_t *trace;
    unsigned depth;
    uint32_t number;
    if (fm_flags_get(outer) & FM_FLAG_DEBUG_INFO) {
        if (!fm_debug_block_info(outer, &size, &number, &trace, &depth))
            return; /* a quarantined or damaged block: already reported as corrupt */
        block = (char *)outer + 64;
    }
    if (is_registered(block))
        return;
    c->total++;
    add_to_summary(c, size);
    if (c->kept < COLLECTED_MAX)
        collected[c->kept++] = (leak_t){block, outer, size};
}

static void report_leak(const leak_t *l)
{
    fm_report_t r;
    fm_report_begin(&r);
    fm_report_str(&r, "libfastmm5: memory leak: a block of ");
    fm_report_dec(&r, l->size);
    fm_report_str(&r, " bytes was never freed");
    if (l->outer != l->block) {
        fm_debug_report_leak_block(&r, l->outer);
        uint32_t number;
        size_t size;
        const uintptr_t *trace;
        unsigned depth;
        fm_debug_block_info(l->outer, &size, &number, &trace, &depth);
        fm_event_raise(FASTMM_EVENT_LEAK_DETAIL, l->block, l->size, number, &r);
    } else {
        fm_report_str(&r, "\nBlock: ");
        fm_report_hex(&r, (uintptr_t)l->block);
        fm_report_str(&r, " (allocated outside debug mode: no stack trace; run with FASTMM5_DEBUG=1 to get one)");
        size_t shown = fm_track_usable(l->block, l->size);
        fm_report_dump(&r, l->block, shown < 64 ? shown : 64);
        fm_event_raise(FASTMM_EVENT_LEAK_DETAIL, l->block, l->size, 0, &r);
    }
}

static void report_summary(const collection_t *c)
{
    fm_report_t r;
    fm_report_begin(&r);
    fm_report_str(&r, "libfastmm5: ");
    fm_report_dec(&r, c->total);
    fm_report_str(&r, " unexpected memory leak");
    fm_report_str(&r, c->total == 1 ? "" : "s");
    fm_report_str(&r, " found. The leaks ordered by size are:");
    for (size_t i = 0; i < c->rows; i++) {
        fm_report_str(&r, "\n  ");
        fm_report_dec(&r, summary[i].size);
        fm_report_str(&r, " bytes: ");
        fm_report_dec(&r, summary[i].count);
        fm_report_str(&r, " x Unknown");
    }
    fm_event_raise(FASTMM_EVENT_LEAK_SUMMARY, NULL, 0, 0, &r);
}

FM_EXPORT size_t fastmm_leak_check(void)
{
    fm_ensure_init();
    fastmm_process_pending_frees();
    fm_lock_wait(&check_lock);
    collection_t c = {0, 0, 0};
    fm_lock_wait(&registry_lock);
    fm_medium_visit_used(collect, &c);
    fm_large_visit_used(collect, &c);
    fm_lock_release(&registry_lock);
    for (size_t i = 0; i < c.kept; i++)
        report_leak(&collected[i]);
    if (c.total != 0)
        report_summary(&c);
    fm_lock_release(&check_lock);
    return c.total;
}

/* glibc frees its own long-lived buffers when asked, as Valgrind asks at exit. */
extern void __libc_freeres(void) __attribute__((weak));

FM_EVERY_PROCESS size_t fm_leak_check_at_exit(void)
{
    if (__libc_freeres != NULL)
        __libc_freeres();
    return fastmm_leak_check();
}
