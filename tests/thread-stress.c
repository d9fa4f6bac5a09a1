/*
 * thread-stress.c - every concurrent path of libfastmm5 at once, for ThreadSanitizer.
 *
 * Built twice: as a normal check program (make check runs it briefly: contents and usable sizes
 * are verified, so it is a correctness test too), and by .ci/run in a build configured with
 * -fsanitize=thread (tests/tsan.sh), where ThreadSanitizer watches the allocator's own memory
 * accesses: arenas, pending-free lists, sequential feeds, thread caches, debug mode switching,
 * the scanner, the walker and the statistics.
 *
 * Under TSan the process's malloc is TSan's (its runtime is loaded first), so this program calls
 * the fastmm_* entry points only; libfastmm5 is instrumented and reached directly. Blocks pass
 * between threads through an exchange of atomic slots, so most frees happen on another thread
 * than the allocation (pending-free lists), and workers are started and stopped all the time
 * (thread caches flushed at exit).
 *
 *   thread-stress [SECONDS]     default 3 (FM_STRESS_SECONDS also sets it)
 *
 * Exit status 0 when every check held; 1 with a message otherwise.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <fastmm5.h>

enum { WORKERS = 4, SLOTS = 256, WORKER_OPS = 4000 };

/* A block in the exchange: its address and what it must contain (size and pattern byte). */
typedef struct slot {
    _Atomic(uintptr_t) block; /* 0: empty; else a pointer to a record */
} slot_t;

typedef struct record {
    size_t size;
    unsigned char pattern;
    unsigned char *data;
} record_t;

static slot_t exchange[SLOTS];
static atomic_int stop;
static atomic_long failures;
static atomic_long operations, cross_thread_frees, threads_started;

static void fail(const char *what, size_t size)
{
    if (atomic_fetch_add(&failures, 1) == 0)
        fprintf(stderr, "thread-stress: %s (size %zu)\n", what, size);
}

static uint64_t next_random(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

/* Mostly small, some medium, a few large: every block manager and its arenas get traffic. */
static size_t random_size(uint64_t *rng)
{
    uint64_t r = next_random(rng);
    switch (r % 16) {
    case 0:
        return 2700 + (r >> 8) % 200000; /* medium */
    case 1:
        return (r >> 8) % 64 == 0 ? 300000 + (r >> 16) % 1500000 : 40 + (r >> 8) % 2600; /* large, rarely */
    default:
        return 1 + (r >> 8) % 600; /* small */
    }
}

static bool check_record(const record_t *r)
{
    if (fastmm_usable_size(r->data) < r->size) {
        fail("usable size below the request", r->size);
        return false;
    }
    if (r->size > 0 && (r->data[0] != r->pattern || r->data[r->size - 1] != r->pattern ||
                        r->data[r->size / 2] != r->pattern)) {
        fail("a block's contents changed", r->size);
        return false;
    }
    return true;
}

/* A new block of a random kind: malloc, calloc, or aligned. */
static record_t *make_record(uint64_t *rng)
{
    record_t *r = fastmm_malloc(sizeof *r);
    if (r == NULL) {
        fail("malloc of a record failed", sizeof *r);
        return NULL;
    }
    r->size = random_size(rng);
    r->pattern = (unsigned char)(1 + next_random(rng) % 250);
    uint64_t kind = next_random(rng) % 8;
    if (kind == 0) {
        r->data = fastmm_calloc(1, r->size);
        if (r->data != NULL && r->size > 0 && (r->data[0] != 0 || r->data[r->size - 1] != 0))
            fail("calloc memory not zeroed", r->size);
    } else if (kind == 1) {
        size_t alignment = (size_t)16 << (next_random(rng) % 13); /* 16 .. 64 KiB */
        r->data = fastmm_aligned_alloc(alignment, r->size);
        if (r->data != NULL && ((uintptr_t)r->data & (alignment - 1)) != 0)
            fail("aligned_alloc returned a misaligned block", alignment);
    } else {
        r->data = fastmm_malloc(r->size);
    }
    if (r->data == NULL) {
        fail("allocation failed", r->size);
        fastmm_free(r);
        return NULL;
    }
    memset(r->data, r->pattern, r->size);
    return r;
}

static void drop_record(record_t *r)
{
    check_record(r);
    fastmm_free(r->data);
    fastmm_free(r);
}

static void resize_record(record_t *r, uint64_t *rng)
{
    size_t n = random_size(rng);
    unsigned char *q = fastmm_realloc(r->data, n);
    if (q == NULL) {
        fail("realloc failed", n);
        return;
    }
    size_t kept = r->size < n ? r->size : n;
    if (kept > 0 && (q[0] != r->pattern || q[kept - 1] != r->pattern))
        fail("realloc lost the contents", n);
    r->data = q;
    r->size = n;
    memset(q, r->pattern, n);
}

/* A worker lives for WORKER_OPS operations, then exits; the main thread starts another. */
static void *worker(void *arg)
{
    uint64_t rng = (uint64_t)(uintptr_t)arg * 0x9E3779B97F4A7C15ULL + 1;
    atomic_fetch_add(&threads_started, 1);
    for (int op = 0; op < WORKER_OPS && !atomic_load_explicit(&stop, memory_order_relaxed); op++) {
        slot_t *s = &exchange[next_random(&rng) % SLOTS];
        uintptr_t mine = (uintptr_t)make_record(&rng);
        if (mine == 0)
            continue;
        /* Swap our new block in; whatever was there (usually another thread's) is ours now. */
        record_t *old = (record_t *)atomic_exchange(&s->block, mine);
        if (old != NULL) {
            if (next_random(&rng) % 4 == 0 && check_record(old)) {
                resize_record(old, &rng);
                uintptr_t expected = 0;
                if (atomic_compare_exchange_strong(&s->block, &expected, (uintptr_t)old))
                    old = NULL;
            }
            if (old != NULL) {
                drop_record(old);
                atomic_fetch_add_explicit(&cross_thread_frees, 1, memory_order_relaxed);
            }
        }
        atomic_fetch_add_explicit(&operations, 1, memory_order_relaxed);
    }
    return NULL;
}

/* Switches debug mode and the erase modes on and off, and scans, while the workers run: blocks
 * cross mode changes in both directions and the scanner reads blocks being rewritten. */
static void *mode_switcher(void *arg)
{
    (void)arg;
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
        fastmm_debug_enter();
        for (int i = 0; i < 3; i++)
            if (fastmm_debug_scan() != 0)
                fail("the scan reported a corrupt block", 0);
        fastmm_erase_freed_begin();
        usleep(2000);
        fastmm_erase_freed_end();
        fastmm_debug_exit();
        usleep(2000);
    }
    return NULL;
}

static void count_block(const fastmm_block_info_t *b, void *user)
{
    (void)b;
    ++*(size_t *)user;
}

/* Reads every statistic the library offers, over and over (each takes its own locks). */
static void *observer(void *arg)
{
    (void)arg;
    for (unsigned round = 0; !atomic_load_explicit(&stop, memory_order_relaxed); round++) {
        fastmm_usage_t u;
        fastmm_get_usage(&u);
        fastmm_state_t st;
        fastmm_get_state(&st);
        fastmm_contention_t c;
        fastmm_get_contention(&c);
        (void)fastmm_os_memory();
        size_t n = 0;
        fastmm_walk_options_t options = FASTMM_WALK_OPTIONS_INIT;
        options.used_only = (round & 1) == 0; /* free blocks too, every other time */
        options.lock_timeout_ms = 50;
        fastmm_walk_blocks(count_block, &n, &options);
        fastmm_process_pending_frees();
        usleep(1000);
    }
    return NULL;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    const char *env = getenv("FM_STRESS_SECONDS");
    double seconds = argc > 1 ? atof(argv[1]) : env != NULL ? atof(env) : 3.0;
    pthread_t helpers[2], workers[WORKERS];
    pthread_create(&helpers[0], NULL, mode_switcher, NULL);
    pthread_create(&helpers[1], NULL, observer, NULL);
    uintptr_t seed = 1;
    for (int i = 0; i < WORKERS; i++)
        pthread_create(&workers[i], NULL, worker, (void *)seed++);
    double end = now() + seconds;
    /* Turnover: join the workers in turn and start a fresh one in each place. */
    for (int i = 0; now() < end; i = (i + 1) % WORKERS) {
        pthread_join(workers[i], NULL);
        pthread_create(&workers[i], NULL, worker, (void *)seed++);
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < WORKERS; i++)
        pthread_join(workers[i], NULL);
    pthread_join(helpers[0], NULL);
    pthread_join(helpers[1], NULL);
    for (int i = 0; i < SLOTS; i++) {
        record_t *r = (record_t *)atomic_exchange(&exchange[i].block, 0);
        if (r != NULL)
            drop_record(r);
    }
    if (fastmm_debug_scan() != 0)
        fail("the final scan reported a corrupt block", 0);
    printf("thread-stress: %.1f s, %ld operations, %ld cross-thread frees, %ld threads, %ld failures\n", seconds,
           atomic_load(&operations), atomic_load(&cross_thread_frees), atomic_load(&threads_started),
           atomic_load(&failures));
    return atomic_load(&failures) == 0 ? 0 : 1;
}
