/*
 * leaks.c - the leak report: expected-leak registration, loss records and the LEAK SUMMARY.
 *
 * leakscan.c classifies every live block (definitely, indirectly or possibly lost, or still
 * reachable). Here the blocks are grouped into loss records - same kind and same allocation
 * stack for debug blocks, same kind and usable size for the others, which have no stack - while
 * the other threads are still stopped (no block can be freed under the reader), in a private
 * hash table. Then, with the threads running again, the records are sorted by total bytes,
 * symbolized, matched against the suppressions and reported, smallest first as Valgrind does,
 * each as one FASTMM_EVENT_LEAK_DETAIL, then one FASTMM_EVENT_LEAK_SUMMARY.
 *
 * Registered blocks (fastmm_leak_register) are neither reported nor counted as lost; the
 * registry lives in this library's data, which the scan reads as a root, so what they point to
 * is reachable too.
 */
#include "leakscan.h"

#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#define REGISTERED_MAX 4096
#define RECORDS_MAX ((size_t)1 << 16)
#define SLOTS (RECORDS_MAX * 2)
#define TRACE_MAX 64u
#define HEAD_BYTES 32u

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
            registered[registered_count] = NULL; /* the registry is a root: leave no copy behind */
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

/* ---- loss records ---- */

typedef struct record {
    uint64_t key;      /* the allocation stack's id and depth (debug) or the usable size */
    uint8_t kind;      /* FM_SCAN_* */
    bool debug;        /* grouped by stack: a debug block, or a guarded one */
    bool guarded;
    bool suppressed;
    unsigned depth;
    size_t bytes, blocks;
    uintptr_t address;     /* the first block met */
    size_t size;           /* its size */
    uint32_t number;       /* its allocation number (debug) */
    uint32_t trace_id;     /* the allocation stack's id (debug; tracetab.c) */
    uint8_t head[HEAD_BYTES]; /* its first bytes (no stack: something to recognize it by) */
} record_t;

typedef struct totals {
    size_t bytes[5], blocks[5];
    size_t suppressed_bytes, suppressed_blocks, registered_blocks;
} totals_t;

typedef struct grouping {
    record_t *records;
    uint32_t *slots;   /* hash slots: record index + 1, 0 = empty */
    size_t count;
    bool full;         /* more distinct records than RECORDS_MAX: the rest were merged */
    totals_t totals;
    bool all;          /* still-reachable records too */
} grouping_t;

static uint64_t mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15u + (h << 6) + (h >> 2);
    return h * 0xff51afd7ed558ccdu;
}

static record_t *find_record(grouping_t *g, uint64_t key, uint8_t kind, bool debug, bool guarded)
{
    uint64_t h = mix(mix(key, kind), (uint64_t)debug | (uint64_t)guarded << 1);
    for (size_t i = (size_t)h & (SLOTS - 1);; i = (i + 1) & (SLOTS - 1)) {
        uint32_t slot = g->slots[i];
        if (slot == 0) {
            if (g->count == RECORDS_MAX) {
                g->full = true;
                return NULL;
            }
            g->slots[i] = (uint32_t)++g->count;
            record_t *r = &g->records[g->count - 1];
            r->key = key;
            r->kind = kind;
            r->debug = debug;
            r->guarded = guarded;
            return r;
        }
        record_t *r = &g->records[slot - 1];
        if (r->key == key && r->kind == kind && r->debug == debug && r->guarded == guarded)
            return r;
    }
}

/* Runs while the world is stopped: reads each block's debug header and first bytes. */
static void group_blocks(fm_scan_t *s, void *arg)
{
    grouping_t *g = arg;
    for (size_t i = 0; i < s->count; i++) {
        uint8_t kind = s->state[i] & FM_SCAN_KIND_MASK;
        const fm_scan_block_t *b = &s->blocks[i];
        void *user = fm_scan_user(b);
        if (kind == FM_SCAN_UNREACHED || kind > FM_SCAN_INDIRECT)
            continue;
        if (registered_count != 0 && is_registered(user)) {
            g->totals.registered_blocks++;
            continue;
        }
        g->totals.bytes[kind] += b->size;
        g->totals.blocks[kind]++;
        if (kind == FM_SCAN_REACHABLE && !g->all && !fm_event_log_enabled())
            continue;
        uint64_t key = b->size;
        unsigned depth = 0;
        uint32_t number = 0, trace_id = 0;
        size_t user_size;
        bool debug = fm_scan_is_debug(b) &&
                     fm_debug_block_info((char *)user - 64, &user_size, &number, &trace_id, NULL, &depth);
        bool guarded = !debug && fm_guard_owns(user) && fm_guard_live_trace(user, &trace_id, &depth);
        debug |= guarded;
        if (debug) {
            /* one id per distinct trace and depth (tracetab.c); blocks whose trace was not
             * stored share the sentinel's record */
            depth = depth < TRACE_MAX ? depth : TRACE_MAX;
            key = (uint64_t)trace_id << 8 | depth;
        }
        record_t *r = find_record(g, key, kind, debug, guarded);
        if (r == NULL)
            continue; /* counted in the totals; past the record limit */
        if (r->blocks++ == 0) {
            r->address = (uintptr_t)user;
            r->size = b->size;
            r->number = number;
            r->trace_id = trace_id;
            r->depth = depth;
            const uint8_t *src = user;
            for (size_t k = 0; k < HEAD_BYTES && k < b->size; k++)
                r->head[k] = src[k];
        }
        r->bytes += b->size;
    }
}

/* Heapsort by total bytes, ascending (Valgrind's order: the largest last, next to the summary). */
static bool record_before(const record_t *a, const record_t *b)
{
    return a->bytes != b->bytes ? a->bytes < b->bytes : a->kind < b->kind;
}

static void swap_records(grouping_t *g, size_t i, size_t j)
{
    record_t t = g->records[i];
    g->records[i] = g->records[j];
    g->records[j] = t;
}

static void sift(grouping_t *g, size_t root, size_t n)
{
    for (;;) {
        size_t child = 2 * root + 1;
        if (child >= n)
            return;
        if (child + 1 < n && record_before(&g->records[child], &g->records[child + 1]))
            child++;
        if (!record_before(&g->records[root], &g->records[child]))
            return;
        swap_records(g, root, child);
        root = child;
    }
}

static void sort_records(grouping_t *g)
{
    for (size_t i = g->count / 2; i-- > 0;)
        sift(g, i, g->count);
    for (size_t end = g->count; end-- > 1;) {
        swap_records(g, 0, end);
        sift(g, 0, end);
    }
}

/* ---- the report ---- */

static const char *const kind_names[] = {"", "still reachable", "possibly lost", "definitely lost", "indirectly lost"};
static const fastmm_leak_kind_t public_kinds[] = {FASTMM_LEAK_NONE, FASTMM_LEAK_STILL_REACHABLE,
                                                  FASTMM_LEAK_POSSIBLY_LOST, FASTMM_LEAK_DEFINITELY_LOST,
                                                  FASTMM_LEAK_INDIRECTLY_LOST};

/* 1234567 -> "1,234,567", as Valgrind writes byte counts. */
static void report_count(fm_report_t *r, uint64_t v)
{
    char digits[32];
    unsigned n = 0;
    do {
        if (n % 4 == 3)
            digits[n++] = ',';
        digits[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    char out[32];
    for (unsigned i = 0; i < n; i++)
        out[i] = digits[n - 1 - i];
    out[n] = '\0';
    fm_report_str(r, out);
}

/* Bytes in hex, then as text (the copy taken during the scan, not the block itself). */
static void report_bytes(fm_report_t *r, const uint8_t *b, size_t n)
{
    char line[4 * HEAD_BYTES + 4];
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        line[k++] = ' ';
        line[k++] = "0123456789abcdef"[b[i] >> 4];
        line[k++] = "0123456789abcdef"[b[i] & 15];
    }
    line[k++] = ' ';
    line[k++] = ' ';
    for (size_t i = 0; i < n; i++)
        line[k++] = b[i] > 32 && b[i] < 127 ? (char)b[i] : '.';
    line[k] = '\0';
    fm_report_str(r, line);
}

static bool shown_on_stderr(const grouping_t *g, uint8_t kind) { return kind != FM_SCAN_REACHABLE || g->all; }

static void report_record(const grouping_t *g, const record_t *rec, size_t number, size_t of)
{
    fm_report_t r;
    fm_report_begin(&r);
    fm_report_str(&r, "libfastmm5: ");
    report_count(&r, rec->bytes);
    fm_report_str(&r, rec->bytes == 1 ? " byte in " : " bytes in ");
    report_count(&r, rec->blocks);
    fm_report_str(&r, rec->blocks == 1 ? " block is " : " blocks are ");
    fm_report_str(&r, kind_names[rec->kind]);
    fm_report_str(&r, " in loss record ");
    report_count(&r, number);
    fm_report_str(&r, " of ");
    report_count(&r, of);
    if (rec->debug) {
        fm_report_str(&r, "\n  the first, ");
        fm_report_hex(&r, rec->address);
        if (rec->guarded) {
            fm_report_str(&r, ", is a guarded block (FASTMM5_GUARD); allocated at:");
        } else {
            fm_report_str(&r, ", is allocation number ");
            fm_report_dec(&r, rec->number);
            fm_report_str(&r, "; allocated at:");
        }
        fm_stack_format_id(&r, rec->trace_id, rec->depth);
    } else {
        fm_report_str(&r, "\n  blocks of ");
        fm_report_dec(&r, rec->size);
        fm_report_str(&r, " usable bytes allocated outside debug mode (no stack: run with FASTMM5_DEBUG=1 to "
                          "get one); the first at ");
        fm_report_hex(&r, rec->address);
        fm_report_str(&r, " starts with:\n   ");
        report_bytes(&r, rec->head, rec->size < HEAD_BYTES ? rec->size : HEAD_BYTES);
    }
    fm_event_raise_leak(FASTMM_EVENT_LEAK_DETAIL, (const void *)rec->address, rec->bytes, rec->number,
                        public_kinds[rec->kind], rec->blocks, !shown_on_stderr(g, rec->kind), &r);
}

static void summary_line(fm_report_t *r, const char *label, size_t bytes, size_t blocks)
{
    fm_report_str(r, "\n   ");
    fm_report_str(r, label);
    report_count(r, bytes);
    fm_report_str(r, " bytes in ");
    report_count(r, blocks);
    fm_report_str(r, " blocks");
}

static void report_summary(const grouping_t *g, const fm_scan_t *s, bool any_debug, bool any_plain)
{
    const totals_t *t = &g->totals;
    fm_report_t r;
    fm_report_begin(&r);
    fm_report_str(&r, "libfastmm5: LEAK SUMMARY:");
    summary_line(&r, "definitely lost: ", t->bytes[FM_SCAN_DEFINITE], t->blocks[FM_SCAN_DEFINITE]);
    summary_line(&r, "indirectly lost: ", t->bytes[FM_SCAN_INDIRECT], t->blocks[FM_SCAN_INDIRECT]);
    summary_line(&r, "  possibly lost: ", t->bytes[FM_SCAN_POSSIBLE], t->blocks[FM_SCAN_POSSIBLE]);
    summary_line(&r, "still reachable: ", t->bytes[FM_SCAN_REACHABLE], t->blocks[FM_SCAN_REACHABLE]);
    summary_line(&r, "     suppressed: ", t->suppressed_bytes, t->suppressed_blocks);
    if (t->registered_blocks != 0) {
        fm_report_str(&r, "\n   registered as expected leaks: ");
        report_count(&r, t->registered_blocks);
        fm_report_str(&r, " blocks");
    }
    if (!g->all)
        fm_report_str(&r, "\nStill-reachable blocks (a pointer to them remains) are not shown: set "
                          "FASTMM5_REPORT_LEAKS=all to see them.");
    if (any_plain)
        fm_report_str(&r, any_debug ? "\nSome blocks were allocated outside debug mode: for them sizes are usable "
                                      "sizes and there is no allocation stack."
                                    : "\nBlocks are grouped by usable size, with no allocation stack: rerun with "
                                      "FASTMM5_DEBUG=1 for stacks and requested sizes.");
    if (g->full)
        fm_report_str(&r, "\nMore distinct loss records than the report keeps: the rest are in the totals only.");
    if (s->threads_missed != 0) {
        fm_report_str(&r, "\nWarning: ");
        fm_report_dec(&r, s->threads_missed);
        fm_report_str(&r, " thread(s) did not stop for the scan (the signal is blocked?): their registers "
                          "were not seen, so some blocks may be reported lost wrongly.");
    }
    size_t lost = t->bytes[FM_SCAN_DEFINITE] + t->bytes[FM_SCAN_INDIRECT] + t->bytes[FM_SCAN_POSSIBLE];
    fm_event_raise_leak(FASTMM_EVENT_LEAK_SUMMARY, NULL, lost, 0, FASTMM_LEAK_NONE, 0, false, &r);
}

static fm_lock_t check_lock;
static size_t definitely_lost_blocks; /* of the last check: the exit status depends on it */

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

static void *map_private(size_t size)
{
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

#define RECORD_BYTES (RECORDS_MAX * sizeof(record_t))
#define SLOT_BYTES (SLOTS * sizeof(uint32_t))

/* The scan reads this function's frame as the start of this thread's stack: the registers of
 * the program's code are saved in it (__builtin_unwind_init). */
static FM_NOINLINE size_t scan_and_report(void)
{
    __builtin_unwind_init();
    size_t map_size = RECORD_BYTES + SLOT_BYTES;
    char *p = map_private(map_size);
    if (p == NULL)
        return 0;
    grouping_t g = {0};
    g.records = (record_t *)p;
    g.slots = (uint32_t *)(p + RECORD_BYTES);
    g.all = fm_options.report_leaks_all;
    fm_scan_t s;
    fm_lock_wait(&registry_lock);
    bool complete = fm_leak_scan(&s, group_blocks, &g, p, map_size);
    fm_lock_release(&registry_lock);
    fm_leak_scan_release(&s);
    size_t lost_blocks = 0;
    if (complete) {
        sort_records(&g);
        fm_leak_suppressions_load(fm_options.suppressions);
        size_t shown = 0;
        bool any_debug = false, any_plain = false;
        for (size_t i = 0; i < g.count; i++) {
            record_t *rec = &g.records[i];
            const uintptr_t *frames = rec->debug ? fm_tracetab_frames(rec->trace_id, rec->depth) : NULL;
            rec->suppressed = frames != NULL && fm_leak_suppressed(frames, rec->depth);
            if (rec->suppressed) {
                g.totals.bytes[rec->kind] -= rec->bytes;
                g.totals.blocks[rec->kind] -= rec->blocks;
                g.totals.suppressed_bytes += rec->bytes;
                g.totals.suppressed_blocks += rec->blocks;
            } else {
                shown++;
            }
        }
        lost_blocks = g.totals.blocks[FM_SCAN_DEFINITE] + g.totals.blocks[FM_SCAN_INDIRECT] +
                      g.totals.blocks[FM_SCAN_POSSIBLE];
        bool report = lost_blocks != 0 || (g.all && g.totals.blocks[FM_SCAN_REACHABLE] != 0);
        if (report) {
            size_t number = 0;
            for (size_t i = 0; i < g.count; i++)
                if (!g.records[i].suppressed) {
                    any_debug |= g.records[i].debug;
                    any_plain |= !g.records[i].debug;
                    report_record(&g, &g.records[i], ++number, shown);
                }
            report_summary(&g, &s, any_debug, any_plain);
        }
        definitely_lost_blocks = g.totals.blocks[FM_SCAN_DEFINITE];
    } else {
        static const char msg[] = "libfastmm5: the leak check could not run (no /proc/self/maps, or no memory "
                                  "for its tables); no leak report\n";
        fm_os_write_all(2, msg, sizeof msg - 1);
    }
    munmap(p, map_size);
    return lost_blocks;
}

FM_EXPORT size_t fastmm_leak_check(void)
{
    fm_hooks.start();
    fm_tcache_flush_current();
    fastmm_process_pending_frees();
    fm_lock_wait(&check_lock);
    size_t lost = scan_and_report();
    fm_lock_release(&check_lock);
    return lost;
}

/* glibc frees its own long-lived buffers when asked, as Valgrind asks at exit. */
extern void __libc_freeres(void) __attribute__((weak));

FM_EVERY_PROCESS size_t fm_leak_check_at_exit(void)
{
    /* Only while this is the one thread: another may still use what it would free. */
    if (__libc_freeres != NULL && fm_leak_thread_count() == 1)
        __libc_freeres();
    size_t lost = fastmm_leak_check();
    if (fm_options.leak_exit_code != 0 && definitely_lost_blocks != 0) {
        /* The status of exit() cannot be changed once it runs: end here with the one asked for,
         * as LeakSanitizer does. Standard I/O is flushed first (the C library would have). */
        fflush(NULL);
        _exit(fm_options.leak_exit_code);
    }
    return lost;
}
