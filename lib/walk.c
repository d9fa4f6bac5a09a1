/*
 * walk.c - the public heap walk (FastMM5's FastMM_WalkBlocks) and what is built on it: the
 * per-size-class state (FastMM_GetMemoryManagerState), the state log (FastMM_LogStateToFile)
 * and the JSON dump written by fastmm_write_json and FASTMM5_STATS=json.
 *
 * Everything runs on medium.c's and large.c's walks (fm_medium_walk, fm_large_walk), which call
 * back with the arena (and small span) locked, giving up on a lock after a deadline. So the
 * callbacks here never allocate: they fill caller or static storage, and the reports are
 * written after the walk. Blocks flagged FREE (free, in a thread cache or on a pending-free
 * list) count as free here, unlike FastMM5, which counts pending frees as used.
 */
#include "internal.h"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#define DEBUG_HEADER 64u

/* ---- the public walker ---- */

static fastmm_block_type_t type_of(fm_walk_kind_t kind)
{
    switch (kind) {
    case FM_WALK_SMALL_BLOCK: return FASTMM_BLOCK_SMALL;
    case FM_WALK_MEDIUM_BLOCK: return FASTMM_BLOCK_MEDIUM;
    case FM_WALK_LARGE_BLOCK: return FASTMM_BLOCK_LARGE;
    case FM_WALK_SMALL_SPAN: return FASTMM_BLOCK_SMALL_SPAN;
    default: return FASTMM_BLOCK_MEDIUM_SPAN;
    }
}

typedef struct walk_ctx {
    fastmm_walk_callback_t callback;
    void *user;
    fastmm_walk_options_t o;
} walk_ctx_t;

static void public_visit(const fm_walk_record_t *r, void *arg)
{
    walk_ctx_t *c = arg;
    fastmm_block_type_t type = type_of(r->kind);
    if (!(c->o.types & (unsigned)type) || (c->o.used_only && r->free))
        return;
    bool span = type == FASTMM_BLOCK_SMALL_SPAN || type == FASTMM_BLOCK_MEDIUM_SPAN;
    fastmm_block_info_t b = {0};
    b.address = r->block;
    b.usable_size = span ? 0 : r->usable;
    b.block_size = r->block_size;
    b.type = type;
    b.free = r->free;
    b.arena = r->arena;
    b.span_unused_bytes = span ? r->unfed_bytes : 0;
    b.small_block_size = r->small_block_size;
    uint32_t group = 0;
    fm_debug_details_t d;
    if (!span && (r->flags & FM_FLAG_DEBUG_INFO) && fm_debug_block_details(r->block, &d)) {
        b.address = (const char *)r->block + DEBUG_HEADER;
        b.usable_size = d.user_size;
        b.debug = true;
        b.allocation_number = d.allocation_number;
        b.allocation_group = group = d.allocation_group;
        b.requested_size = d.user_size;
        b.allocated_by_thread = d.allocated_by_thread;
        b.freed_by_thread = d.freed_by_thread;
        b.allocation_stack = d.allocation_trace;
        b.free_stack = d.free_trace;
        b.stack_depth = d.depth;
    }
    if (span ? c->o.min_group != 0 : (group < c->o.min_group || group > c->o.max_group))
        return;
    c->callback(&b, c->user);
}

static bool walk_all(fm_walk_visit_t visit, void *arg, unsigned timeout_ms)
{
    fm_ensure_init();
    /* FastMM5's order: large arenas, then medium arenas; each part gets the whole timeout. */
    bool large = fm_large_walk(visit, arg, fm_os_time_ms() + timeout_ms);
    bool medium = fm_medium_walk(visit, arg, fm_os_time_ms() + timeout_ms);
    return large && medium;
}

FM_EXPORT bool fastmm_walk_blocks(fastmm_walk_callback_t callback, void *user, const fastmm_walk_options_t *options)
{
    static const fastmm_walk_options_t defaults = FASTMM_WALK_OPTIONS_INIT;
    if (callback == NULL)
        return false;
    walk_ctx_t c = {callback, user, options != NULL ? *options : defaults};
    if (c.o.types == 0)
        c.o.types = FASTMM_BLOCK_ALL_TYPES;
    return walk_all(public_visit, &c, c.o.lock_timeout_ms);
}

/* ---- per-size-class state ---- */

#define STATE_TIMEOUT_MS 1000u

typedef struct state_ctx {
    fastmm_state_t *s;
    size_t medium_span_bytes, small_span_bytes;
    unsigned last_class;
} state_ctx_t;

static unsigned class_index(state_ctx_t *c, size_t block_size)
{
    if (fm_small_class_sizes[c->last_class] == block_size)
        return c->last_class;
    for (unsigned i = 0; i < FM_SMALL_CLASS_COUNT; i++)
        if (fm_small_class_sizes[i] == block_size)
            return c->last_class = i;
    return FM_SMALL_CLASS_COUNT; /* not a class: ignored */
}

static void state_visit(const fm_walk_record_t *r, void *arg)
{
    state_ctx_t *c = arg;
    fastmm_state_t *s = c->s;
    unsigned i;
    switch (r->kind) {
    case FM_WALK_SMALL_SPAN:
        c->small_span_bytes += r->block_size;
        if ((i = class_index(c, r->small_block_size)) < FM_SMALL_CLASS_COUNT)
            s->small[i].reserved_bytes += r->block_size;
        break;
    case FM_WALK_SMALL_BLOCK:
        if (!r->free && (i = class_index(c, r->small_block_size)) < FM_SMALL_CLASS_COUNT)
            s->small[i].blocks_in_use++;
        break;
    case FM_WALK_MEDIUM_SPAN:
        c->medium_span_bytes += r->block_size;
        break;
    case FM_WALK_MEDIUM_BLOCK:
        if (!r->free) {
            s->medium.blocks_in_use++;
            s->medium.bytes_in_use += r->usable;
        }
        break;
    case FM_WALK_LARGE_BLOCK:
        s->large.reserved_bytes += r->block_size;
        if (!r->free) {
            s->large.blocks_in_use++;
            s->large.bytes_in_use += r->usable;
        }
        break;
    }
}

FM_EXPORT bool fastmm_get_state(fastmm_state_t *state)
{
    *state = (fastmm_state_t){0};
    state->small_class_count = FM_SMALL_CLASS_COUNT;
    for (unsigned i = 0; i < FM_SMALL_CLASS_COUNT; i++) {
        state->small[i].block_size = fm_small_class_sizes[i];
        state->small[i].usable_size = (size_t)fm_small_class_sizes[i] - 2u;
    }
    state_ctx_t c = {state, 0, 0, 0};
    state->complete = walk_all(state_visit, &c, STATE_TIMEOUT_MS);
    state->medium.reserved_bytes = c.medium_span_bytes - (c.small_span_bytes < c.medium_span_bytes ? c.small_span_bytes : c.medium_span_bytes);
    return state->complete;
}

/* ---- a small buffered writer (no stdio: nothing here allocates) ---- */

typedef struct out {
    int fd;
    size_t len;
    char buf[4096];
} out_t;

static void out_flush(out_t *o)
{
    fm_os_write_all(o->fd, o->buf, o->len);
    o->len = 0;
}

static void out_mem(out_t *o, const char *s, size_t n)
{
    while (n > 0) {
        if (o->len == sizeof o->buf)
            out_flush(o);
        size_t k = sizeof o->buf - o->len < n ? sizeof o->buf - o->len : n;
        for (size_t i = 0; i < k; i++)
            o->buf[o->len + i] = s[i];
        o->len += k;
        s += k;
        n -= k;
    }
}

static void out_str(out_t *o, const char *s)
{
    size_t n = 0;
    while (s[n] != '\0')
        n++;
    out_mem(o, s, n);
}

static void out_u64(out_t *o, uint64_t v)
{
    char d[24];
    size_t n = sizeof d;
    do
        d[--n] = (char)('0' + v % 10);
    while ((v /= 10) != 0);
    out_mem(o, d + n, sizeof d - n);
}

/* Right-aligned in `width` columns. */
static void out_u64_w(out_t *o, uint64_t v, unsigned width)
{
    unsigned digits = 1;
    for (uint64_t t = v; t >= 10; t /= 10)
        digits++;
    while (width-- > digits)
        out_mem(o, " ", 1);
    out_u64(o, v);
}

/* A percentage with two decimals, from a ratio num/den (100.00 when den is 0). */
static void out_percent(out_t *o, size_t num, size_t den)
{
    uint64_t hundredths = den == 0 ? 10000 : (uint64_t)((double)num * 10000.0 / (double)den + 0.5);
    out_u64(o, hundredths / 100);
    out_str(o, ".");
    out_mem(o, &"0123456789"[hundredths % 100 / 10], 1);
    out_mem(o, &"0123456789"[hundredths % 10], 1);
}

const char *fm_walk_strategy_name(unsigned strategy)
{
    static const char *const names[] = {"speed", "balanced", "low-memory"};
    return strategy < 3 ? names[strategy] : "unknown";
}

/* ---- JSON ---- */

static void json_key(out_t *o, const char *key, bool *first)
{
    out_str(o, *first ? "\"" : ",\"");
    *first = false;
    out_str(o, key);
    out_str(o, "\":");
}

static void json_u64(out_t *o, const char *key, uint64_t v, bool *first)
{
    json_key(o, key, first);
    out_u64(o, v);
}

static void json_bool(out_t *o, const char *key, bool v, bool *first)
{
    json_key(o, key, first);
    out_str(o, v ? "true" : "false");
}

/* Only fixed, known strings are written (no escaping needed). */
static void json_str(out_t *o, const char *key, const char *v, bool *first)
{
    json_key(o, key, first);
    out_str(o, "\"");
    out_str(o, v);
    out_str(o, "\"");
}

static void json_kind(out_t *o, const char *key, const fastmm_kind_state_t *k, bool *first)
{
    json_key(o, key, first);
    bool f = true;
    out_str(o, "{");
    json_u64(o, "blocks_in_use", k->blocks_in_use, &f);
    json_u64(o, "bytes_in_use", k->bytes_in_use, &f);
    json_u64(o, "reserved_bytes", k->reserved_bytes, &f);
    out_str(o, "}");
}

static fastmm_state_t json_state; /* too big for a thread's stack budget here; guarded below */
static fm_lock_t json_lock;

FM_EXPORT void fastmm_write_json(int fd)
{
    fm_ensure_init();
    fm_lock_wait(&json_lock);
    fastmm_usage_t u;
    fastmm_get_usage(&u);
    fastmm_contention_t ct;
    fastmm_get_contention(&ct);
    fastmm_state_t *s = &json_state;
    fastmm_get_state(s);
    size_t os = fm_os_mapped_bytes();

    out_t o;
    o.fd = fd;
    o.len = 0;
    bool f = true;
    out_str(&o, "{");
    json_str(&o, "library", "libfastmm5", &f);
    json_key(&o, "version", &f);
    out_str(&o, "\"");
    out_u64(&o, FASTMM_VERSION_MAJOR);
    out_str(&o, ".");
    out_u64(&o, FASTMM_VERSION_MINOR);
    out_str(&o, ".");
    out_u64(&o, FASTMM_VERSION_PATCH);
    out_str(&o, "\"");
    json_u64(&o, "upstream_version", FASTMM_UPSTREAM_VERSION, &f);
    json_u64(&o, "pid", (uint64_t)getpid(), &f);

    json_key(&o, "usage", &f);
    bool g = true;
    out_str(&o, "{");
    json_u64(&o, "allocated_bytes", u.allocated_bytes, &g);
    json_u64(&o, "overhead_bytes", u.overhead_bytes, &g);
    json_key(&o, "efficiency_percent", &g);
    out_percent(&o, u.allocated_bytes, os);
    json_u64(&o, "os_memory_bytes", os, &g);
    json_u64(&o, "os_memory_peak_bytes", fm_os_peak_mapped_bytes(), &g);
    out_str(&o, "}");

    json_key(&o, "state", &f);
    g = true;
    out_str(&o, "{");
    json_bool(&o, "complete", s->complete, &g);
    json_key(&o, "small_classes", &g);
    out_str(&o, "[");
    for (unsigned i = 0; i < s->small_class_count; i++) {
        bool h = true;
        out_str(&o, i == 0 ? "{" : ",{");
        json_u64(&o, "block_size", s->small[i].block_size, &h);
        json_u64(&o, "usable_size", s->small[i].usable_size, &h);
        json_u64(&o, "blocks_in_use", s->small[i].blocks_in_use, &h);
        json_u64(&o, "reserved_bytes", s->small[i].reserved_bytes, &h);
        out_str(&o, "}");
    }
    out_str(&o, "]");
    json_kind(&o, "medium", &s->medium, &g);
    json_kind(&o, "large", &s->large, &g);
    out_str(&o, "}");

    json_key(&o, "contention", &f);
    g = true;
    out_str(&o, "{");
    json_u64(&o, "small", ct.small, &g);
    json_u64(&o, "medium", ct.medium, &g);
    json_u64(&o, "large", ct.large, &g);
    out_str(&o, "}");

    json_key(&o, "options", &f);
    g = true;
    out_str(&o, "{");
    json_str(&o, "strategy", fm_walk_strategy_name((unsigned)fastmm_strategy()), &g);
    json_u64(&o, "medium_span_bytes", fm_options_medium_span_size(), &g);
    json_u64(&o, "memory_limit_bytes", fastmm_memory_limit(), &g);
    json_u64(&o, "min_alignment", fastmm_alignment(), &g);
    json_bool(&o, "debug_mode", fastmm_debug_active(), &g);
    json_u64(&o, "debug_options", fastmm_debug_options(), &g);
    json_u64(&o, "stack_depth", fastmm_debug_stack_depth(), &g);
    json_str(&o, "on_error", fastmm_error_action() == FASTMM_ON_ERROR_CONTINUE ? "continue" : "abort", &g);
    json_str(&o, "kernels", fm_kernels_name(), &g);
    json_bool(&o, "report_leaks", fm_options.report_leaks, &g);
    json_str(&o, "stats", fm_options.stats_json ? "json" : fm_options.stats_at_exit ? "text" : "off", &g);
    out_str(&o, "}");
    out_str(&o, "}\n");
    out_flush(&o);
    fm_lock_release(&json_lock);
}

/* ---- the state log (FastMM_LogStateToFile) ---- */

/* Used blocks grouped by (kind, usable size); a debug block by its requested size. */
#define LOG_ROWS 8192u /* a power of two: open addressing */

typedef struct log_row {
    size_t size;   /* 0: empty slot */
    size_t count;
    size_t total;
    uint8_t type;  /* fastmm_block_type_t */
    bool debug;
} log_row_t;

static fm_lock_t log_lock;
static log_row_t log_rows[LOG_ROWS];
static size_t log_overflow_count, log_overflow_total;

/* fork: both are held while the heap is walked (arena locks inside), never inside another. */
FM_EVERY_PROCESS void fm_walk_fork_lock(void)
{
    fm_lock_wait(&json_lock);
    fm_lock_wait(&log_lock);
}

FM_EVERY_PROCESS void fm_walk_fork_unlock(void)
{
    fm_lock_release(&log_lock);
    fm_lock_release(&json_lock);
}

static void log_visit(const fastmm_block_info_t *b, void *user)
{
    (void)user;
    size_t size = b->usable_size + 1; /* +1: a zero-sized debug block must not look empty */
    size_t h = (size * 0x9E3779B97F4A7C15ull + (size_t)b->type * 31u + b->debug) & (LOG_ROWS - 1);
    for (unsigned probe = 0; probe < LOG_ROWS / 4; probe++, h = (h + 1) & (LOG_ROWS - 1)) {
        log_row_t *r = &log_rows[h];
        if (r->size == 0) {
            *r = (log_row_t){size, 0, 0, (uint8_t)b->type, b->debug};
        } else if (r->size != size || r->type != (uint8_t)b->type || r->debug != b->debug) {
            continue;
        }
        r->count++;
        r->total += b->usable_size;
        return;
    }
    log_overflow_count++;
    log_overflow_total += b->usable_size;
}

static bool row_before(const log_row_t *a, const log_row_t *b)
{
    if (a->total != b->total)
        return a->total > b->total;
    return a->size < b->size;
}

static const char *type_name(unsigned type)
{
    switch (type) {
    case FASTMM_BLOCK_SMALL: return "small";
    case FASTMM_BLOCK_MEDIUM: return "medium";
    case FASTMM_BLOCK_LARGE: return "large";
    default: return "other";
    }
}

FM_EXPORT bool fastmm_log_state(const char *path)
{
    if (path == NULL)
        return false;
    fm_ensure_init();
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return false;
    fastmm_usage_t u;
    fastmm_get_usage(&u);
    fastmm_contention_t ct;
    fastmm_get_contention(&ct);

    fm_lock_wait(&log_lock);
    for (size_t i = 0; i < LOG_ROWS; i++)
        log_rows[i].size = 0;
    log_overflow_count = log_overflow_total = 0;
    fastmm_walk_options_t wo = FASTMM_WALK_OPTIONS_INIT;
    wo.types = FASTMM_BLOCK_SMALL | FASTMM_BLOCK_MEDIUM | FASTMM_BLOCK_LARGE;
    bool complete = fastmm_walk_blocks(log_visit, NULL, &wo);
    size_t rows = 0;
    for (size_t i = 0; i < LOG_ROWS; i++)
        if (log_rows[i].size != 0)
            log_rows[rows++] = log_rows[i];
    /* Shell sort: by total bytes, descending, then by size. */
    for (size_t gap = rows / 2; gap > 0; gap /= 2)
        for (size_t i = gap; i < rows; i++) {
            log_row_t t = log_rows[i];
            size_t j = i;
            for (; j >= gap && row_before(&t, &log_rows[j - gap]); j -= gap)
                log_rows[j] = log_rows[j - gap];
            log_rows[j] = t;
        }

    out_t *o = &(out_t){.fd = fd, .len = 0};
    char when[64] = "";
    time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm) != NULL)
        strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &tm);
    size_t os = fm_os_mapped_bytes();
    out_str(o, "libfastmm5 state log, ");
    out_str(o, when);
    out_str(o, ", process ");
    out_u64(o, (uint64_t)getpid());
    out_str(o, "\n\n");
    out_u64(o, u.allocated_bytes >> 10);
    out_str(o, " KiB allocated\n");
    out_u64(o, u.overhead_bytes >> 10);
    out_str(o, " KiB overhead\n");
    out_percent(o, u.allocated_bytes, os);
    out_str(o, "% efficiency\n");
    out_u64(o, os >> 10);
    out_str(o, " KiB of OS memory (peak ");
    out_u64(o, fm_os_peak_mapped_bytes() >> 10);
    out_str(o, " KiB)\nthread contention: small ");
    out_u64(o, ct.small);
    out_str(o, ", medium ");
    out_u64(o, ct.medium);
    out_str(o, ", large ");
    out_u64(o, ct.large);
    out_str(o, "\nstrategy ");
    out_str(o, fm_walk_strategy_name((unsigned)fastmm_strategy()));
    out_str(o, "\n");
    if (!complete)
        out_str(o, "(some arenas were busy past the lock timeout and are not counted below)\n");
    out_str(o, "\nUsed blocks grouped by size, largest total first:\n");
    out_str(o, "     Total bytes        Count   Size (usable)  Kind\n");
    for (size_t i = 0; i < rows; i++) {
        const log_row_t *r = &log_rows[i];
        out_u64_w(o, r->total, 16);
        out_u64_w(o, r->count, 13);
        out_u64_w(o, r->size - 1, 16);
        out_str(o, "  ");
        out_str(o, type_name(r->type));
        out_str(o, r->debug ? " (debug, requested size)\n" : "\n");
    }
    if (log_overflow_count != 0) {
        out_u64_w(o, log_overflow_total, 16);
        out_u64_w(o, log_overflow_count, 13);
        out_str(o, "                  (other sizes: too many to list)\n");
    }
    fm_lock_release(&log_lock);
    out_flush(o);
    return close(fd) == 0;
}
