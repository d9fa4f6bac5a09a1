/*
 * soak.c - libfastmm5's soak test: minutes of multithreaded churn on the library, then proof
 * that the OS memory it held stayed bounded and went back.
 *
 * Linked with lib/libfastmm5.la, so the plain malloc/calloc/realloc/free/posix_memalign/
 * aligned_alloc/memalign calls below are libfastmm5's (checked at start-up).
 *
 * What runs:
 *   - `--threads` worker seats (default 4). Each worker lives for a random number of operations
 *     (64 to 16,384, log-uniform), then exits; the main thread joins it and starts a new one in
 *     its seat, for the whole run. Blocks outlive the thread that allocated them.
 *   - An exchange of SHARED_SLOTS slots, each with its own mutex, shared by every worker, and 64
 *     private slots per worker. An operation picks a slot: an empty one gets a new block
 *     (malloc 65%, calloc 10%, posix_memalign/aligned_alloc/memalign 25% with alignments
 *     16 B..64 KiB); a full one is freed, reallocated (grown or shrunk, sometimes into another
 *     block manager), checked, or swapped with a private slot. So many frees and reallocs happen
 *     on a thread other than the one that allocated the block, often one that has exited.
 *   - Sizes: 80% small (0..2,622 bytes, three quarters of them up to 256), 19% medium
 *     (2,623..558,904, log-uniform), 1% large (558,905 bytes..6 MiB).
 *   - Every block is filled with a pattern: its unique tag (worker serial << 32 | counter) in
 *     the first 8 bytes, a byte derived from the tag everywhere else. The whole block is checked
 *     before every free and realloc, the kept prefix again after a realloc, calloc memory is
 *     checked for zeroes, every pointer for its alignment and malloc_usable_size.
 *   - The live set is capped: the requested bytes of all live blocks stay under `--live-mb`
 *     (default 64 MiB); an allocation or growth that would pass the cap is skipped.
 *   - The main thread samples fastmm_os_memory() and the RSS (/proc/self/statm) once a second,
 *     prints a progress line every `--report-every` seconds and calls malloc_trim(0) every
 *     `--trim-every` seconds while the workers run (trim racing the churn).
 *
 * At the end every worker is stopped and joined, the main thread checks and frees every block
 * left, calls malloc_trim(0), and checks:
 *   1. no content, alignment, usable-size or allocation error;
 *   2. peak OS memory (libfastmm5's own high-water mark, malloc_info's "max", and the samples)
 *      <= the bound: the heap (live cap x 1.5 + 48 MiB) plus libfastmm5's large-block budgets
 *      (a third of the heap, at least 32 MiB, and 32 MiB) in normal mode, three times the heap
 *      + 48 MiB in debug mode (FASTMM5_DEBUG=1), or --max-os-mb; bench/README.md says how they
 *      were measured;
 *   3. OS memory after the trim <= OS memory at the start + 8 MiB, or + twice the live cap in
 *      debug mode with the never-free-small-spans option (the default: kept empty small spans
 *      pin the medium spans they sit in), or --final-tolerance-mb.
 * One summary line, then exit 0 if all hold, 1 if not, 2 on a usage error.
 *
 * Self-tests of the checks (each must make the run fail):
 *   --leak-test  forgets the blocks the workers free instead of freeing them, until the
 *                forgotten bytes reach the peak bound: checks 2 and 3 must trip.
 *   --flip-test  flips one byte of a live block after a quarter of the run: check 1 must trip.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <malloc.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <fastmm5.h>

#define MIB ((size_t)1 << 20)
#define SHARED_SLOTS 2048
#define LOCAL_SLOTS 64
#define SMALL_MAX 2622u
#define MEDIUM_MAX 558904u
#define LARGE_MAX (6 * MIB)
#define MAX_SEATS 64
#define MAX_ERROR_REPORTS 20

/* ---- settings ---- */

static struct {
    double seconds;
    unsigned threads;
    uint64_t seed;
    size_t live_cap;
    double report_every;
    double trim_every;
    size_t max_os;              /* 0: the default bound of the mode */
    size_t final_tolerance;     /* SIZE_MAX: the default of the mode */
    bool leak_test;
    bool flip_test;
} opt = {60.0, 4, 1, 64 * MIB, 1.0, 5.0, 0, SIZE_MAX, false, false};

/* ---- shared state ---- */

struct block {
    unsigned char *p;   /* NULL: empty slot */
    size_t size;        /* requested bytes */
    size_t align;       /* alignment asked for; 0 for malloc/calloc/realloc blocks */
    uint64_t tag;       /* unique per allocation: worker serial << 32 | counter */
    uint64_t owner;     /* serial of the thread that allocated it (0: the main thread) */
};

struct slot {
    pthread_mutex_t lock;
    struct block b;
} __attribute__((aligned(64)));

static struct slot *shared;

static atomic_bool stop;
static atomic_size_t live_bytes;        /* requested bytes of every live block */
static atomic_size_t leaked_bytes;      /* --leak-test */
static size_t leak_limit;
static atomic_uint_fast64_t n_ops, n_allocs, n_frees, n_reallocs, n_xfrees, n_xreallocs, n_aligned, n_callocs,
    n_cap_hits, n_small, n_medium, n_large;
static atomic_uint_fast64_t n_errors;
static atomic_uint_fast64_t threads_created;

struct seat {
    pthread_t tid;
    bool running;       /* a thread was started in this seat and not joined yet (main only) */
    bool finished;      /* set by the worker under mgr_lock when it is about to return */
    uint64_t serial;
};
static struct seat seats[MAX_SEATS];
static pthread_mutex_t mgr_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t mgr_cond;
static unsigned finished_count;

/* ---- small helpers ---- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t rnd(uint64_t *s)
{
    /* xorshift64* */
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1Dull;
}

static uint64_t seed_for(uint64_t serial)
{
    uint64_t s = opt.seed * 0x9E3779B97F4A7C15ull + serial * 0xD1B54A32D192ED03ull + 0x5EED;
    return s != 0 ? s : 1;
}

/* A value in [lo, hi], log-uniform: a random power of two in range, then uniform inside it. */
static uint64_t log_uniform(uint64_t *s, uint64_t lo, uint64_t hi)
{
    unsigned blo = 63 - (unsigned)__builtin_clzll(lo), bhi = 63 - (unsigned)__builtin_clzll(hi);
    unsigned b = blo + (unsigned)(rnd(s) % (bhi - blo + 1));
    uint64_t from = (uint64_t)1 << b, to = (from << 1) - 1;
    if (from < lo)
        from = lo;
    if (to > hi)
        to = hi;
    return from + rnd(s) % (to - from + 1);
}

static size_t pick_size(uint64_t *s)
{
    unsigned r = (unsigned)(rnd(s) % 1000);
    if (r < 800)
        return (rnd(s) & 3) != 0 ? (size_t)(rnd(s) % 257) : (size_t)(rnd(s) % (SMALL_MAX + 1));
    if (r < 990)
        return (size_t)log_uniform(s, SMALL_MAX + 1, MEDIUM_MAX);
    return (size_t)(MEDIUM_MAX + 1 + rnd(s) % (LARGE_MAX - MEDIUM_MAX));
}

static void count_class(size_t size)
{
    atomic_fetch_add_explicit(size <= SMALL_MAX ? &n_small : size <= MEDIUM_MAX ? &n_medium : &n_large, 1,
                              memory_order_relaxed);
}

static void report_error(const char *fmt, ...)
{
    uint64_t n = atomic_fetch_add(&n_errors, 1);
    if (n >= MAX_ERROR_REPORTS) {
        if (n == MAX_ERROR_REPORTS)
            fprintf(stderr, "soak: ERROR: more errors, not shown\n");
        return;
    }
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "soak: ERROR: %s\n", buf);
}

static bool reserve(size_t n)
{
    size_t now = atomic_fetch_add(&live_bytes, n) + n;
    if (now > opt.live_cap) {
        atomic_fetch_sub(&live_bytes, n);
        return false;
    }
    return true;
}

static void unreserve(size_t n) { atomic_fetch_sub(&live_bytes, n); }

/* ---- block contents ---- */

static unsigned char pattern_byte(uint64_t tag)
{
    unsigned char b = (unsigned char)((tag * 0x9E3779B97F4A7C15ull) >> 56);
    /* never 0 (calloc, zeroed pages) nor 0x80/0x90 (libfastmm5's free/allocation fills) */
    return b == 0 || b == 0x80 || b == 0x90 ? 0x5a : b;
}

/* The bytes of a block that carry its pattern: all of a block up to DENSE_MAX bytes; of a bigger
 * one, the first SEG bytes of every STRIDE bytes and the last SEG bytes (every page is written
 * and checked, at 1/64 of the cost of the whole block). The next such range from `at` on:
 * [*from, *to), false when there is none below `limit`. */
#define DENSE_MAX ((size_t)64 << 10)
#define STRIDE ((size_t)4096)
#define SEG ((size_t)64)

static bool next_range(size_t size, size_t limit, size_t at, size_t *from, size_t *to)
{
    if (limit > size)
        limit = size;
    if (at >= limit)
        return false;
    if (size <= DENSE_MAX) {
        *from = at;
        *to = limit;
        return true;
    }
    size_t tail = size - SEG;
    size_t f = at % STRIDE < SEG ? at : (at / STRIDE + 1) * STRIDE, t = f / STRIDE * STRIDE + SEG;
    if (f >= tail || t >= tail) { /* the last range runs into the tail: merge them */
        if (f > tail)
            f = at > tail ? at : tail;
        t = size;
    }
    if (f >= limit)
        return false;
    *from = f;
    *to = t < limit ? t : limit;
    return true;
}

static void fill_block(unsigned char *p, size_t size, uint64_t tag)
{
    size_t from, to;
    for (size_t at = 0; next_range(size, size, at, &from, &to); at = to)
        memset(p + from, pattern_byte(tag), to - from);
    if (size >= 8)
        memcpy(p, &tag, 8);
}

/* The first offset in [from, to) where p is not byte b, or SIZE_MAX. */
static size_t check_bytes(const unsigned char *p, size_t from, size_t to, unsigned char b)
{
    size_t i = from;
    for (; i < to && ((uintptr_t)(p + i) & 7) != 0; i++)
        if (p[i] != b)
            return i;
    uint64_t w = 0x0101010101010101ull * b;
    for (; i + 8 <= to; i += 8) {
        uint64_t v;
        memcpy(&v, p + i, 8);
        if (v != w)
            break;
    }
    for (; i < to; i++)
        if (p[i] != b)
            return i;
    return SIZE_MAX;
}

/* The first offset below `limit` where p differs from fill_block(p, size, tag), or SIZE_MAX. */
static size_t check_block(const unsigned char *p, size_t size, uint64_t tag, size_t limit)
{
    size_t from, to;
    for (size_t at = 0; next_range(size, limit, at, &from, &to); at = to) {
        if (size >= 8 && from < 8) {
            unsigned char head[8];
            memcpy(head, &tag, 8);
            for (; from < 8 && from < to; from++)
                if (p[from] != head[from])
                    return from;
        }
        size_t bad = check_bytes(p, from, to, pattern_byte(tag));
        if (bad != SIZE_MAX)
            return bad;
    }
    return SIZE_MAX;
}

/* The first byte of a new calloc block, among those fill_block would write, that is not 0. */
static size_t check_zero(const unsigned char *p, size_t size)
{
    size_t from, to;
    for (size_t at = 0; next_range(size, size, at, &from, &to); at = to) {
        size_t bad = check_bytes(p, from, to, 0);
        if (bad != SIZE_MAX)
            return bad;
    }
    return SIZE_MAX;
}

static bool verify(const struct block *b, size_t limit, const char *where, uint64_t me)
{
    size_t bad = check_block(b->p, b->size, b->tag, limit);
    if (bad == SIZE_MAX)
        return true;
    unsigned char expect = b->size >= 8 && bad < 8 ? (unsigned char)(b->tag >> (8 * bad)) : pattern_byte(b->tag);
    report_error("content: %s by thread %" PRIu64 ": block %p size %zu align %zu tag %#" PRIx64
                 " (allocated by thread %" PRIu64 "): byte %zu is %#04x, expected %#04x",
                 where, me, (void *)b->p, b->size, b->align, b->tag, b->owner, bad, b->p[bad], expect);
    return false;
}

/* Alignment and usable size of a block just returned by the allocator. */
static void check_new(const void *p, size_t size, size_t align, const char *what)
{
    size_t a = align > FASTMM_MIN_ALIGNMENT ? align : FASTMM_MIN_ALIGNMENT;
    if (((uintptr_t)p & (a - 1)) != 0)
        report_error("%s(%zu) returned %p, not %zu-byte aligned", what, size, p, a);
    size_t usable = malloc_usable_size((void *)p);
    if (usable < size)
        report_error("%s(%zu) returned %p with malloc_usable_size %zu", what, size, p, usable);
}

/* ---- workers ---- */

struct worker {
    uint64_t serial;
    uint64_t rng;
    uint32_t counter;
    struct block local[LOCAL_SLOTS];
    uint64_t ops, allocs, frees, reallocs, xfrees, xreallocs, aligned, callocs, cap_hits;
};

static void flush_counts(struct worker *w)
{
#define FLUSH(f) do { atomic_fetch_add_explicit(&n_##f, w->f, memory_order_relaxed); w->f = 0; } while (0)
    FLUSH(ops);
    FLUSH(allocs);
    FLUSH(frees);
    FLUSH(reallocs);
    FLUSH(xfrees);
    FLUSH(xreallocs);
    FLUSH(aligned);
    FLUSH(callocs);
    FLUSH(cap_hits);
#undef FLUSH
}

static uint64_t new_tag(struct worker *w) { return w->serial << 32 | ++w->counter; }

/* Allocates a new block into the empty record *b (unless the live cap is reached). */
static void new_block(struct worker *w, struct block *b)
{
    size_t size = pick_size(&w->rng);
    if (!reserve(size)) {
        w->cap_hits++;
        return;
    }
    unsigned kind = (unsigned)(rnd(&w->rng) % 100);
    size_t align = 0;
    unsigned char *p = NULL;
    const char *what;
    bool zeroed = false;
    if (kind < 65) {
        what = "malloc";
        p = malloc(size);
    } else if (kind < 75) {
        what = "calloc";
        zeroed = true;
        if (size % 8 == 0 && size > 0)
            p = calloc(size / 8, 8);
        else
            p = (rnd(&w->rng) & 1) != 0 ? calloc(1, size) : calloc(size, 1);
        w->callocs++;
    } else {
        align = (size_t)16 << (rnd(&w->rng) % 13); /* 16 B .. 64 KiB */
        switch (rnd(&w->rng) % 3) {
        case 0: {
            what = "posix_memalign";
            void *q = NULL;
            int rc = posix_memalign(&q, align, size);
            p = rc == 0 ? q : NULL;
            break;
        }
        case 1:
            what = "aligned_alloc";
            p = aligned_alloc(align, size);
            break;
        default:
            what = "memalign";
            p = memalign(align, size);
            break;
        }
        w->aligned++;
    }
    if (p == NULL) {
        report_error("%s(%zu) (alignment %zu) returned NULL (errno %d) with %zu bytes live", what, size, align, errno,
                     atomic_load(&live_bytes));
        unreserve(size);
        return;
    }
    check_new(p, size, align, what);
    if (zeroed) {
        size_t bad = check_zero(p, size);
        if (bad != SIZE_MAX)
            report_error("calloc(%zu) returned %p with byte %zu = %#04x", size, (void *)p, bad, p[bad]);
    }
    b->p = p;
    b->size = size;
    b->align = align;
    b->tag = new_tag(w);
    b->owner = w->serial;
    fill_block(p, size, b->tag);
    w->allocs++;
    count_class(size);
}

/* Checks and frees the block of *b, leaving the record empty. `w` is NULL for the main thread. */
static void release_block(struct worker *w, struct block *b, const char *where)
{
    uint64_t me = w != NULL ? w->serial : 0;
    verify(b, b->size, where, me);
    bool leak = false;
    if (opt.leak_test && w != NULL) {
        size_t was = atomic_fetch_add(&leaked_bytes, b->size);
        leak = was < leak_limit;
        if (!leak)
            atomic_fetch_sub(&leaked_bytes, b->size);
    }
    if (!leak)
        free(b->p);
    unreserve(b->size);
    if (w != NULL) {
        w->frees++;
        if (b->owner != me)
            w->xfrees++;
    } else {
        atomic_fetch_add(&n_frees, 1);
        if (b->owner != 0)
            atomic_fetch_add(&n_xfrees, 1);
    }
    b->p = NULL;
}

/* Grows or shrinks the block of *b with realloc; the kept prefix must survive. */
static void realloc_block(struct worker *w, struct block *b)
{
    size_t old = b->size, size;
    uint64_t r = rnd(&w->rng) % 100;
    if (r < 10)
        size = pick_size(&w->rng); /* anywhere: often another block manager */
    else if (r < 55)
        size = old + 1 + (size_t)(rnd(&w->rng) % (old + 64));
    else
        size = old > 1 ? 1 + (size_t)(rnd(&w->rng) % old) : 1 + (size_t)(rnd(&w->rng) % 64);
    if (size == 0)
        size = 1; /* realloc(p, 0) frees: not a resize */
    if (size > old && !reserve(size - old)) {
        w->cap_hits++;
        return;
    }
    if (!verify(b, old, "before realloc", w->serial)) {
        /* a damaged block: stop using it; free it as it is (the heap itself may be fine) */
        if (size > old)
            unreserve(size - old);
        free(b->p);
        unreserve(old);
        b->p = NULL;
        return;
    }
    uintptr_t was = (uintptr_t)b->p;
    unsigned char *q = realloc(b->p, size);
    if (q == NULL) {
        report_error("realloc(%p, %zu) of a %zu-byte block returned NULL (errno %d)", (void *)b->p, size, old, errno);
        if (size > old)
            unreserve(size - old);
        return;
    }
    if (size < old)
        unreserve(old - size);
    check_new(q, size, 0, "realloc");
    struct block moved = *b;
    moved.p = q;
    verify(&moved, old < size ? old : size, "after realloc", w->serial);
    w->reallocs++;
    if (b->owner != w->serial)
        w->xreallocs++;
    if ((uintptr_t)q != was) /* moved: now a block of this thread */
        b->owner = w->serial;
    b->p = q;
    b->size = size;
    b->align = 0;
    b->tag = new_tag(w);
    fill_block(q, size, b->tag);
    count_class(size);
}

/* One operation on a record: allocate into an empty one; free, realloc or check a full one. */
static void operate(struct worker *w, struct block *b, struct block *swap_with)
{
    if (b->p == NULL) {
        new_block(w, b);
        return;
    }
    unsigned r = (unsigned)(rnd(&w->rng) % 100);
    if (r < 50)
        release_block(w, b, "free");
    else if (r < 80)
        realloc_block(w, b);
    else if (r < 90 || swap_with == NULL)
        verify(b, b->size, "check", w->serial);
    else {
        struct block t = *swap_with; /* hand the block over to this thread's private slots */
        *swap_with = *b;
        *b = t;
    }
}

static void *worker_main(void *arg)
{
    struct seat *seat = arg;
    struct worker w;
    memset(&w, 0, sizeof w);
    w.serial = seat->serial;
    w.rng = seed_for(w.serial);
    uint64_t lifetime = log_uniform(&w.rng, 64, 16384);

    for (uint64_t i = 0; i < lifetime && !atomic_load_explicit(&stop, memory_order_relaxed); i++) {
        uint64_t r = rnd(&w.rng);
        if (r % 100 < 40) {
            operate(&w, &w.local[(r >> 8) % LOCAL_SLOTS], NULL);
        } else {
            struct slot *s = &shared[(r >> 8) % SHARED_SLOTS];
            pthread_mutex_lock(&s->lock);
            operate(&w, &s->b, &w.local[(r >> 24) % LOCAL_SLOTS]);
            pthread_mutex_unlock(&s->lock);
        }
        if ((++w.ops & 255) == 0)
            flush_counts(&w);
    }

    /* Leaving: half of the private blocks go to the exchange (to be freed by other threads after
     * this one is gone), the rest are freed here. */
    for (unsigned i = 0; i < LOCAL_SLOTS; i++) {
        struct block *b = &w.local[i];
        if (b->p == NULL)
            continue;
        if ((rnd(&w.rng) & 1) != 0) {
            struct slot *s = &shared[rnd(&w.rng) % SHARED_SLOTS];
            pthread_mutex_lock(&s->lock);
            if (s->b.p == NULL) {
                s->b = *b;
                b->p = NULL;
            }
            pthread_mutex_unlock(&s->lock);
        }
        if (b->p != NULL)
            release_block(&w, b, "free at thread exit");
    }
    flush_counts(&w);

    pthread_mutex_lock(&mgr_lock);
    seat->finished = true;
    finished_count++;
    pthread_cond_signal(&mgr_cond);
    pthread_mutex_unlock(&mgr_lock);
    return NULL;
}

static uint64_t next_serial = 1;

static bool start_worker(struct seat *seat)
{
    seat->serial = next_serial++;
    seat->finished = false;
    int rc = pthread_create(&seat->tid, NULL, worker_main, seat);
    if (rc != 0) {
        fprintf(stderr, "soak: pthread_create: %s (retrying)\n", strerror(rc));
        return false;
    }
    seat->running = true;
    atomic_fetch_add(&threads_created, 1);
    return true;
}

/* Joins every worker that has finished and, unless stopping, starts a new one in its seat. */
static void turn_over(bool restart)
{
    bool done[MAX_SEATS];
    pthread_mutex_lock(&mgr_lock);
    for (unsigned i = 0; i < opt.threads; i++) {
        done[i] = seats[i].running && seats[i].finished;
        if (done[i])
            finished_count--;
    }
    pthread_mutex_unlock(&mgr_lock);
    for (unsigned i = 0; i < opt.threads; i++) {
        if (done[i]) {
            pthread_join(seats[i].tid, NULL);
            seats[i].running = false;
        }
        if (restart && !seats[i].running)
            start_worker(&seats[i]);
    }
}

/* ---- memory figures ---- */

static size_t rss_bytes(void)
{
    char buf[128];
    int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    unsigned long size, resident;
    if (sscanf(buf, "%lu %lu", &size, &resident) != 2)
        return 0;
    return (size_t)resident * (size_t)sysconf(_SC_PAGESIZE);
}

/* libfastmm5's own high-water mark of OS memory (malloc_info's <system type="max">), 0 if unknown. */
static size_t library_peak(void)
{
    static char buf[4096];
    memset(buf, 0, sizeof buf);
    FILE *f = fmemopen(buf, sizeof buf - 1, "w");
    if (f == NULL)
        return 0;
    int rc = malloc_info(0, f);
    fclose(f);
    const char *k = strstr(buf, "<system type=\"max\" size=\"");
    if (rc != 0 || k == NULL)
        return 0;
    return (size_t)strtoull(k + strlen("<system type=\"max\" size=\""), NULL, 10);
}

static double mib(size_t n) { return (double)n / (double)MIB; }

/* ---- the run ---- */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: soak [options]\n"
            "  -s, --seconds S            run time (default 60)\n"
            "  -t, --threads N            worker threads alive at a time, 1..%d (default 4)\n"
            "      --seed N               random seed (default 1)\n"
            "      --live-mb M            cap on the requested bytes of live blocks (default 64)\n"
            "      --report-every S       seconds between progress lines (default 1; 0: none)\n"
            "      --trim-every S         malloc_trim(0) while the workers run, every S seconds (default 5; 0: never)\n"
            "      --max-os-mb M          peak OS memory bound (default: H = live x 1.5 + 48, plus H / 3 (at\n"
            "                             least 32) + 32; debug mode: 3 x (H + 48))\n"
            "      --final-tolerance-mb M OS memory after the final trim may exceed the start by M (default 8;\n"
            "                             debug mode keeping empty small spans: twice the live cap)\n"
            "      --leak-test            self-test: forget freed blocks up to the bound (the memory checks must fail)\n"
            "      --flip-test            self-test: flip one byte of a live block (the content check must fail)\n"
            "Exit status: 0 every check held, 1 a check failed, 2 usage error.\n",
            MAX_SEATS);
}

static bool parse_num(const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno != 0 || end == s || *end != '\0' || !(v >= lo && v <= hi))
        return false;
    *out = v;
    return true;
}

static void parse_args(int argc, char **argv)
{
    enum { O_SEED = 256, O_LIVE, O_REPORT, O_TRIM, O_MAXOS, O_FINAL, O_LEAK, O_FLIP };
    static const struct option longopts[] = {
        {"seconds", required_argument, NULL, 's'},   {"threads", required_argument, NULL, 't'},
        {"seed", required_argument, NULL, O_SEED},   {"live-mb", required_argument, NULL, O_LIVE},
        {"report-every", required_argument, NULL, O_REPORT},
        {"trim-every", required_argument, NULL, O_TRIM},
        {"max-os-mb", required_argument, NULL, O_MAXOS},
        {"final-tolerance-mb", required_argument, NULL, O_FINAL},
        {"leak-test", no_argument, NULL, O_LEAK},    {"flip-test", no_argument, NULL, O_FLIP},
        {"help", no_argument, NULL, 'h'},            {NULL, 0, NULL, 0},
    };
    int c;
    double v;
    while ((c = getopt_long(argc, argv, "s:t:h", longopts, NULL)) != -1) {
        bool ok = true;
        switch (c) {
        case 's': ok = parse_num(optarg, 0.1, 1e7, &opt.seconds); break;
        case 't': ok = parse_num(optarg, 1, MAX_SEATS, &v) && v == (unsigned)v; opt.threads = (unsigned)v; break;
        case O_SEED: ok = parse_num(optarg, 0, 1e18, &v) && v == (double)(uint64_t)v; opt.seed = (uint64_t)v; break;
        case O_LIVE: ok = parse_num(optarg, 1, 65536, &v); opt.live_cap = (size_t)(v * (double)MIB); break;
        case O_REPORT: ok = parse_num(optarg, 0, 1e7, &opt.report_every); break;
        case O_TRIM: ok = parse_num(optarg, 0, 1e7, &opt.trim_every); break;
        case O_MAXOS: ok = parse_num(optarg, 1, 1 << 20, &v); opt.max_os = (size_t)(v * (double)MIB); break;
        case O_FINAL: ok = parse_num(optarg, 0, 1 << 20, &v); opt.final_tolerance = (size_t)(v * (double)MIB); break;
        case O_LEAK: opt.leak_test = true; break;
        case O_FLIP: opt.flip_test = true; break;
        case 'h': usage(stdout); exit(0);
        default: usage(stderr); exit(2);
        }
        if (!ok) {
            const char *name = "?";
            for (const struct option *o = longopts; o->name != NULL; o++)
                if (o->val == c)
                    name = o->name;
            fprintf(stderr, "soak: bad value for --%s: %s\n", name, optarg);
            exit(2);
        }
    }
    if (optind != argc) {
        usage(stderr);
        exit(2);
    }
}

/* --flip-test: flips one byte (past the tag) of some live block in the exchange. */
static bool flip_one_byte(uint64_t *rng)
{
    for (int tries = 0; tries < 100000; tries++) {
        struct slot *s = &shared[rnd(rng) % SHARED_SLOTS];
        pthread_mutex_lock(&s->lock);
        bool done = s->b.p != NULL && s->b.size >= 16 && s->b.size <= DENSE_MAX; /* every byte checked */
        if (done) {
            size_t at = 8 + (size_t)(rnd(rng) % (s->b.size - 8));
            s->b.p[at] ^= 0x01;
            printf("soak: flip-test: flipped byte %zu of block %p (size %zu, tag %#" PRIx64 ")\n", at,
                   (void *)s->b.p, s->b.size, s->b.tag);
        }
        pthread_mutex_unlock(&s->lock);
        if (done)
            return true;
    }
    return false;
}

int main(int argc, char **argv)
{
    parse_args(argc, argv);
    setvbuf(stdout, NULL, _IOLBF, 0);

    /* The bounds (bench/README.md, "The soak test", says how they were measured). */
    bool debug = fastmm_debug_active();
    bool keeps_small_spans = debug && (fastmm_debug_options() & FASTMM_DEBUG_NEVER_FREE_SMALL_SPANS) != 0;
    /* The heap: the live blocks with their slack (1.5 x the cap + 48 MiB). Beside it, in normal
     * mode, libfastmm5's two large-block budgets (lib/large.c): the freed mappings it keeps for
     * reuse, a third of the rest of its OS memory and at least 32 MiB, and the spare chunks a
     * reused one may carry, 32 MiB. Debug mode keeps no freed mapping; its bound is three times
     * the heap's with 48 MiB for the spares. */
    size_t heap = opt.live_cap * 3 / 2 + 48 * MIB;
    size_t kept = heap / 3 > 32 * MIB ? heap / 3 : 32 * MIB;
    size_t normal_bound = heap + kept + 32 * MIB;
    size_t bound = opt.max_os != 0 ? opt.max_os : debug ? 3 * (heap + 48 * MIB) : normal_bound;
    size_t tolerance = opt.final_tolerance != SIZE_MAX ? opt.final_tolerance
                       : keeps_small_spans             ? 2 * opt.live_cap
                                                       : 8 * MIB;
    leak_limit = bound;
    printf("soak: %.0f s, %u worker threads, seed %" PRIu64 ", live cap %.0f MiB, %s mode, peak bound %.1f MiB, "
           "final tolerance %.1f MiB%s%s\n",
           opt.seconds, opt.threads, opt.seed, mib(opt.live_cap), debug ? "debug" : "normal", mib(bound),
           mib(tolerance), opt.leak_test ? ", LEAK TEST" : "", opt.flip_test ? ", FLIP TEST" : "");

    /* The calls above and below must reach libfastmm5: an 8 MiB block must show in its figures. */
    size_t os_before = fastmm_os_memory();
    void *probe = malloc(8 * MIB);
    size_t os_with = fastmm_os_memory();
    if (probe == NULL || os_with < os_before + 8 * MIB || malloc_usable_size(probe) != fastmm_usable_size(probe)) {
        fprintf(stderr, "soak: malloc is not libfastmm5's (OS memory %zu -> %zu for an 8 MiB block)\n", os_before,
                os_with);
        return 1;
    }
    free(probe);

    shared = calloc(SHARED_SLOTS, sizeof *shared);
    if (shared == NULL) {
        fprintf(stderr, "soak: out of memory\n");
        return 1;
    }
    for (unsigned i = 0; i < SHARED_SLOTS; i++)
        pthread_mutex_init(&shared[i].lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&mgr_cond, &ca);
    pthread_condattr_destroy(&ca);

    malloc_trim(0);
    size_t os_start = fastmm_os_memory(), rss_start = rss_bytes();
    size_t os_peak_sampled = os_start, rss_peak = rss_start;
    size_t runaway = 2 * bound + 64 * MIB; /* stop early rather than take the machine's memory */
    bool ran_away = false, flipped = false;
    uint64_t flip_rng = seed_for(UINT64_MAX);

    double t0 = now_s(), end = t0 + opt.seconds;
    double next_sample = t0 + 1.0, next_report = t0 + opt.report_every, next_trim = t0 + opt.trim_every;
    uint64_t ops_at_report = 0;
    double t_at_report = t0;
    for (unsigned i = 0; i < opt.threads; i++)
        start_worker(&seats[i]);

    for (;;) {
        double wake = next_sample < end ? next_sample : end;
        pthread_mutex_lock(&mgr_lock);
        while (finished_count == 0 && now_s() < wake) {
            double w = wake;
            struct timespec ts = {(time_t)w, (long)((w - (double)(time_t)w) * 1e9)};
            pthread_cond_timedwait(&mgr_cond, &mgr_lock, &ts);
        }
        pthread_mutex_unlock(&mgr_lock);
        double t = now_s();
        turn_over(t < end);
        if (t < next_sample && t < end)
            continue;

        /* a sample */
        size_t os = fastmm_os_memory(), rss = rss_bytes();
        if (os > os_peak_sampled)
            os_peak_sampled = os;
        if (rss > rss_peak)
            rss_peak = rss;
        next_sample += 1.0;
        if (next_sample <= t)
            next_sample = t + 1.0;
        if (os > runaway) {
            fprintf(stderr, "soak: OS memory %.1f MiB is past twice the bound: stopping early\n", mib(os));
            ran_away = true;
        }
        if (opt.flip_test && !flipped && t >= t0 + opt.seconds / 4)
            flipped = flip_one_byte(&flip_rng);
        if (opt.trim_every > 0 && t >= next_trim) {
            malloc_trim(0);
            next_trim = t + opt.trim_every;
        }
        if (opt.report_every > 0 && (t >= next_report || t >= end || ran_away)) {
            uint64_t ops = atomic_load(&n_ops);
            printf("soak: t=%6.1fs ops=%" PRIu64 " (%.0f/s) threads=%" PRIu64 " live=%.1f MiB os=%.1f MiB rss=%.1f MiB "
                   "xfrees=%" PRIu64 " errors=%" PRIu64 "\n",
                   t - t0, ops, (double)(ops - ops_at_report) / (t - t_at_report), atomic_load(&threads_created),
                   mib(atomic_load(&live_bytes)), mib(os), mib(rss), atomic_load(&n_xfrees), atomic_load(&n_errors));
            ops_at_report = ops;
            t_at_report = t;
            next_report += opt.report_every;
            if (next_report <= t)
                next_report = t + opt.report_every;
        }
        if (t >= end || ran_away)
            break;
    }

    /* Stop, join, free what is left (from the main thread: every such free is cross-thread). */
    atomic_store(&stop, true);
    for (;;) {
        bool any = false;
        turn_over(false);
        for (unsigned i = 0; i < opt.threads; i++)
            any |= seats[i].running;
        if (!any)
            break;
        pthread_mutex_lock(&mgr_lock);
        while (finished_count == 0) {
            double w = now_s() + 0.1;
            struct timespec ts = {(time_t)w, (long)((w - (double)(time_t)w) * 1e9)};
            pthread_cond_timedwait(&mgr_cond, &mgr_lock, &ts);
        }
        pthread_mutex_unlock(&mgr_lock);
    }
    double duration = now_s() - t0;
    size_t os_before_final_free = fastmm_os_memory();
    if (os_before_final_free > os_peak_sampled)
        os_peak_sampled = os_before_final_free;
    for (unsigned i = 0; i < SHARED_SLOTS; i++)
        if (shared[i].b.p != NULL)
            release_block(NULL, &shared[i].b, "final free");
    if (atomic_load(&live_bytes) != 0)
        report_error("%zu live bytes left in the count after every block was freed", atomic_load(&live_bytes));
    malloc_trim(0);
    size_t os_final = fastmm_os_memory(), rss_final = rss_bytes();
    size_t lib_peak = library_peak();
    size_t os_peak = lib_peak > os_peak_sampled ? lib_peak : os_peak_sampled;

    /* What the heap still holds after the trim, by kind (the walker's per-class state). */
    static fastmm_state_t st;
    fastmm_get_state(&st);
    size_t small_reserved = 0, small_used = 0;
    for (unsigned i = 0; i < st.small_class_count; i++) {
        small_reserved += st.small[i].reserved_bytes;
        small_used += st.small[i].blocks_in_use;
    }

    uint64_t errors = atomic_load(&n_errors);
    bool ok_content = errors == 0;
    bool ok_peak = os_peak <= bound && !ran_away;
    bool ok_final = os_final <= os_start + tolerance;
    bool pass = ok_content && ok_peak && ok_final;

    printf("soak: allocations %" PRIu64 " (calloc %" PRIu64 ", aligned %" PRIu64 "), reallocs %" PRIu64
           " (%" PRIu64 " cross-thread), frees %" PRIu64 " (%" PRIu64 " cross-thread), live-cap refusals %" PRIu64
           "; new blocks by manager (allocations and reallocs): small %" PRIu64 ", medium %" PRIu64 ", large %" PRIu64
           "\n",
           atomic_load(&n_allocs), atomic_load(&n_callocs), atomic_load(&n_aligned), atomic_load(&n_reallocs),
           atomic_load(&n_xreallocs), atomic_load(&n_frees), atomic_load(&n_xfrees), atomic_load(&n_cap_hits),
           atomic_load(&n_small), atomic_load(&n_medium), atomic_load(&n_large));
    if (opt.leak_test)
        printf("soak: leak-test: %.1f MiB of blocks forgotten\n", mib(atomic_load(&leaked_bytes)));
    printf("soak: OS memory start %.1f MiB, peak %.1f MiB (library %.1f, sampled %.1f; bound %.1f), before final "
           "free %.1f, final %.1f MiB (limit %.1f); RSS start %.1f, peak %.1f, final %.1f MiB\n",
           mib(os_start), mib(os_peak), mib(lib_peak), mib(os_peak_sampled), mib(bound), mib(os_before_final_free),
           mib(os_final), mib(os_start + tolerance), mib(rss_start), mib(rss_peak), mib(rss_final));
    printf("soak: held after the trim: small spans %.1f MiB (%zu blocks in use), medium %.1f MiB (%zu blocks), "
           "large %.1f MiB (%zu blocks)\n",
           mib(small_reserved), small_used, mib(st.medium.reserved_bytes), st.medium.blocks_in_use,
           mib(st.large.reserved_bytes), st.large.blocks_in_use);
    if (!ok_content)
        printf("soak: FAIL: %" PRIu64 " content/allocation error(s) (first ones on standard error)\n", errors);
    if (!ok_peak)
        printf("soak: FAIL: peak OS memory %.1f MiB above the bound %.1f MiB%s\n", mib(os_peak), mib(bound),
               ran_away ? " (stopped early)" : "");
    if (!ok_final)
        printf("soak: FAIL: OS memory %.1f MiB after the run, start %.1f MiB + tolerance %.1f MiB\n", mib(os_final),
               mib(os_start), mib(tolerance));
    printf("soak: %s ops=%" PRIu64 " threads=%" PRIu64 " cross-thread-frees=%" PRIu64 " duration=%.1fs "
           "peak-os=%.1fMiB final-os=%.1fMiB start-os=%.1fMiB peak-rss=%.1fMiB final-rss=%.1fMiB errors=%" PRIu64 "\n",
           pass ? "PASS" : "FAIL", atomic_load(&n_ops), atomic_load(&threads_created), atomic_load(&n_xfrees), duration,
           mib(os_peak), mib(os_final), mib(os_start), mib(rss_peak), mib(rss_final), errors);

    for (unsigned i = 0; i < SHARED_SLOTS; i++)
        pthread_mutex_destroy(&shared[i].lock);
    free(shared);
    return pass ? 0 : 1;
}
