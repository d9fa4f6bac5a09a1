/*
 * check_introspection.c - suite "introspection": the block walker, the per-class
 * state, the state log, the JSON dump, the glibc statistics calls, and the tuning API (memory
 * limit, strategy, minimum alignment).
 *
 * Comparisons with fastmm_get_usage are made after fastmm_process_pending_frees(): the walker
 * and the state count blocks waiting in a thread cache as free, the usage summary as used, and
 * the flush empties this thread's cache. Between a flush and a measurement nothing allocates or
 * frees (REQUIRE, not ck_assert, inside those windows).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "check_suites.h"
#include "helpers.h"

#define MIB ((size_t)1 << 20)

/* ---- the test's own blocks, found by address from inside walker callbacks ---- */

#define OWN_MAX 512
typedef struct own {
    void *p;
    size_t size;       /* requested */
    size_t usable;     /* its real usable size (fm_expected_usable: under Memcheck,
                        * malloc_usable_size answers the requested size) */
    fastmm_block_type_t type;
    unsigned seen;
    fastmm_block_info_t info;
} own_t;

static own_t owns[OWN_MAX];
static size_t own_count;

static int own_cmp(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t)((const own_t *)a)->p, y = (uintptr_t)((const own_t *)b)->p;
    return x < y ? -1 : x > y;
}

static own_t *own_find(const void *p)
{
    size_t lo = 0, hi = own_count;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if ((uintptr_t)owns[mid].p < (uintptr_t)p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < own_count && owns[lo].p == p ? &owns[lo] : NULL;
}

static fastmm_block_type_t type_for(size_t n)
{
    return n <= FM_MAX_SMALL_USER ? FASTMM_BLOCK_SMALL : n <= FM_MAX_MEDIUM_USER ? FASTMM_BLOCK_MEDIUM
                                                                                  : FASTMM_BLOCK_LARGE;
}

/* Small, medium and large blocks, `per_kind` of each, sizes varied; sorted by address. */
static void own_alloc(int per_kind)
{
    static const size_t base[3] = {24, 9000, 700000};
    own_count = 0;
    fastmm_process_pending_frees(); /* FastMM5's usable sizes: no bigger cached medium block taken */
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < per_kind && own_count < OWN_MAX; i++) {
            size_t n = base[k] + (size_t)i * (k == 0 ? 40 : k == 1 ? 4100 : 70000);
            if (k == 0 && n > FM_MAX_SMALL_USER)
                n = FM_MAX_SMALL_USER;
            void *p = malloc(n);
            ck_assert_ptr_nonnull(p);
            owns[own_count++] = (own_t){p, n, fm_expected_usable(n), type_for(n), 0, {0}};
        }
    qsort(owns, own_count, sizeof owns[0], own_cmp);
}

static void own_free(void)
{
    for (size_t i = 0; i < own_count; i++)
        free(owns[i].p);
    own_count = 0;
}

/* Walk totals: usable bytes of used blocks (spans excluded), and the own blocks seen. */
typedef struct totals {
    size_t used_bytes, used_blocks, debug_blocks, spans, records;
} totals_t;

static void totals_cb(const fastmm_block_info_t *b, void *user)
{
    totals_t *t = user;
    t->records++;
    if (b->type == FASTMM_BLOCK_SMALL_SPAN || b->type == FASTMM_BLOCK_MEDIUM_SPAN) {
        t->spans++;
        return;
    }
    if (!b->free) {
        t->used_blocks++;
        t->used_bytes += b->usable_size;
        t->debug_blocks += b->debug;
    }
    own_t *o = own_find(b->address);
    if (o != NULL && !b->free) {
        o->seen++;
        o->info = *b;
    }
}

static void free_debug_cb(const fastmm_block_info_t *b, void *user)
{
    *(size_t *)user += b->free && b->debug;
}

/* Freed debug blocks (left by earlier suites when CK_FORK=no) may stay counted in their span, so
 * fastmm_get_usage counts them while the walker and the state do not: the absolute comparisons
 * are only made on a heap without them (always so when Check forks); deltas always. */
static bool heap_is_clean(void)
{
    size_t n = 0;
    fastmm_walk_options_t opt = FASTMM_WALK_OPTIONS_INIT;
    opt.used_only = false;
    fastmm_walk_blocks(free_debug_cb, &n, &opt);
    return n == 0;
}

static bool walk_totals(totals_t *t, const fastmm_walk_options_t *opt)
{
    *t = (totals_t){0};
    for (size_t i = 0; i < own_count; i++)
        owns[i].seen = 0;
    return fastmm_walk_blocks(totals_cb, t, opt);
}

/* Guards: the walker reports every live block of every kind exactly once, with its user pointer,
 * kind and usable size; its total of used bytes equals fastmm_get_usage's allocated bytes, and
 * the change after allocating equals what the test allocated. */
START_TEST(test_walk_totals_match_usage)
{
    totals_t t0, t1;
    fastmm_usage_t u0, u1;
    own_count = 0;
    fastmm_process_pending_frees();
    fastmm_get_usage(&u0);
    REQUIRE(walk_totals(&t0, NULL), "walk incomplete with no other thread");
    if (t0.debug_blocks == 0 && heap_is_clean())
        REQUIRE(t0.used_bytes == u0.allocated_bytes, "walker %zu bytes, usage %zu", t0.used_bytes, u0.allocated_bytes);

    own_alloc(8);
    size_t expected = 0;
    for (size_t i = 0; i < own_count; i++)
        expected += owns[i].usable;
    fastmm_process_pending_frees();
    fastmm_get_usage(&u1);
    REQUIRE(walk_totals(&t1, NULL), "walk incomplete");
    REQUIRE(u1.allocated_bytes - u0.allocated_bytes == expected, "usage grew by %zu, allocated %zu",
            u1.allocated_bytes - u0.allocated_bytes, expected);
    REQUIRE(t1.used_bytes - t0.used_bytes == expected, "walker grew by %zu, allocated %zu",
            t1.used_bytes - t0.used_bytes, expected);
    REQUIRE(t1.spans > 0, "no span records");
    for (size_t i = 0; i < own_count; i++) {
        own_t *o = &owns[i];
        ck_assert_uint_eq(o->seen, 1);
        ck_assert_int_eq(o->info.type, o->type);
        ck_assert_uint_eq(o->info.usable_size, o->usable);
        ck_assert(!o->info.debug && !o->info.free);
        ck_assert_uint_ge(o->info.block_size, o->usable);
    }

    /* The type filter: only large blocks. */
    fastmm_walk_options_t opt = FASTMM_WALK_OPTIONS_INIT;
    opt.types = FASTMM_BLOCK_LARGE;
    ck_assert(walk_totals(&t1, &opt));
    for (size_t i = 0; i < own_count; i++)
        ck_assert_uint_eq(owns[i].seen, owns[i].type == FASTMM_BLOCK_LARGE);
    ck_assert_uint_eq(t1.spans, 0);
    own_free();
}
END_TEST

/* Guards: debug blocks are reported at the pointer malloc returned (past the 64-byte debug
 * header) with their requested size, allocation number, group, thread and stack trace, and the
 * allocation-group filter selects exactly them (and no spans). */
START_TEST(test_walk_debug_records)
{
    totals_t t0, t1;
    own_count = 0;
    fastmm_process_pending_frees();
    ck_assert(walk_totals(&t0, NULL));
    ck_assert(fastmm_debug_enter());
    fastmm_debug_set_allocation_group(4242);
    own_alloc(6);
    fastmm_debug_set_allocation_group(0);
    ck_assert(fastmm_debug_exit());
    size_t requested = 0;
    for (size_t i = 0; i < own_count; i++)
        requested += owns[i].size;
    fastmm_process_pending_frees();
    ck_assert(walk_totals(&t1, NULL));
    ck_assert_uint_eq(t1.used_bytes - t0.used_bytes, requested);
    uint32_t tid = (uint32_t)syscall(SYS_gettid);
    for (size_t i = 0; i < own_count; i++) {
        own_t *o = &owns[i];
        ck_assert_uint_eq(o->seen, 1);
        ck_assert(o->info.debug);
        ck_assert_int_eq(o->info.type, o->type);
        ck_assert_uint_eq(o->info.usable_size, o->size);
        ck_assert_uint_eq(o->info.requested_size, o->size);
        ck_assert_uint_eq(o->info.allocation_group, 4242);
        ck_assert_uint_ne(o->info.allocation_number, 0);
        ck_assert_uint_eq(o->info.allocated_by_thread, tid);
        ck_assert_uint_eq(o->info.stack_depth, fastmm_debug_stack_depth());
        ck_assert_ptr_nonnull(o->info.allocation_stack);
        ck_assert_ptr_null(o->info.free_stack);
    }
    fastmm_walk_options_t opt = FASTMM_WALK_OPTIONS_INIT;
    opt.min_group = opt.max_group = 4242;
    ck_assert(walk_totals(&t1, &opt));
    ck_assert_uint_eq(t1.records, own_count);
    ck_assert_uint_eq(t1.spans, 0);
    own_free();
}
END_TEST

/* ---- churn: other threads allocating and freeing while the test walks ---- */

static volatile int churn_stop;
static pthread_t churn_threads[4];
static unsigned churn_running; /* how many of churn_threads run */

static void *churn(void *arg)
{
    uint64_t rng = (uint64_t)(uintptr_t)arg * 7919u + 1;
    void *slots[64] = {0};
    while (!__atomic_load_n(&churn_stop, __ATOMIC_RELAXED)) {
        unsigned i = (unsigned)(xorshift64(&rng) % 64);
        free(slots[i]);
        uint64_t r = xorshift64(&rng);
        size_t n = r % 16 == 0 ? 600000 + r % 300000 : r % 4 == 0 ? 3000 + r % 60000 : 1 + r % 2000;
        slots[i] = malloc(n);
        if (slots[i] != NULL)
            memset(slots[i], 1, n < 64 ? n : 64);
    }
    for (unsigned i = 0; i < 64; i++)
        free(slots[i]);
    return NULL;
}

/* Stops the churn threads. Also the walk case's teardown: a failed check leaves the test at once,
 * and where Check does not fork (CK_FORK=no) threads left running would allocate through every
 * later test of the process. */
static void churn_join(void)
{
    __atomic_store_n(&churn_stop, 1, __ATOMIC_RELAXED);
    for (; churn_running > 0; churn_running--)
        pthread_join(churn_threads[churn_running - 1], NULL);
}

/* Guards: the walker neither deadlocks nor crashes while other threads allocate and free (also
 * while debug mode is on and their blocks get debug headers), always returns, and - when it
 * reports a complete walk - has seen every one of the test's own blocks exactly once with the
 * right kind and size. A zero timeout must return too. */
START_TEST(test_walk_under_churn)
{
    churn_stop = 0;
    for (uintptr_t i = 0; i < sizeof churn_threads / sizeof churn_threads[0]; i++) {
        ck_assert_int_eq(pthread_create(&churn_threads[i], NULL, churn, (void *)(i + 1)), 0);
        churn_running++;
    }
    for (int debug = 0; debug <= 1; debug++) {
        if (debug)
            fastmm_debug_enter();
        own_alloc(10);
        if (debug)
            fastmm_debug_exit();
        int walks = test_iters(30);
        for (int w = 0; w < walks; w++) {
            totals_t t;
            fastmm_walk_options_t opt = FASTMM_WALK_OPTIONS_INIT;
            opt.used_only = (w & 1) != 0;
            opt.lock_timeout_ms = w % 5 == 4 ? 0 : 1000;
            bool complete = walk_totals(&t, &opt);
            if (!complete)
                continue;
            for (size_t i = 0; i < own_count; i++) {
                own_t *o = &owns[i];
                REQUIRE(o->seen == 1, "own block %p seen %u times (debug %d)", o->p, o->seen, debug);
                REQUIRE(o->info.type == o->type, "own block %p type %d", o->p, (int)o->info.type);
                REQUIRE(o->info.debug == (debug != 0), "own block %p debug flag", o->p);
                REQUIRE(o->info.usable_size == (debug ? o->size : o->usable), "own block %p usable %zu", o->p,
                        o->info.usable_size);
            }
        }
        own_free();
    }
    churn_join();
}
END_TEST

/* The size of a debug block's header, before its user pointer (the library's FM_DEBUG_HEADER). */
#define DEBUG_HEADER 64

static void find_debug_cb(const fastmm_block_info_t *b, void *user)
{
    fastmm_block_info_t *want = user;
    if (b->address == want->address && !b->free)
        *want = *b;
}

/* Guards: the walker and fastmm_debug_scan read a debug block's header without the block's
 * owner, who may free it meanwhile; under memcheck the header of a block freed that way is
 * inaccessible, and those snapshots must not count as the program's errors (make
 * check-valgrind fails on any). The header is made inaccessible here as such a free makes it;
 * memcheck's error count must move over neither, the walk still describes the block from the
 * bytes it read, and the scan finds it intact. Without Memcheck, only the last two are checked. */
START_TEST(test_walk_quiet_on_racing_free)
{
    fastmm_debug_enter();
    char *p = malloc(100);
    fastmm_debug_exit();
    ck_assert_ptr_nonnull(p);
    fastmm_block_info_t found = {0};
    found.address = p;
    unsigned errors = TEST_MEMCHECK_ERRORS();
    TEST_MAKE_NOACCESS(p - DEBUG_HEADER, DEBUG_HEADER);
    bool complete = fastmm_walk_blocks(find_debug_cb, &found, NULL);
    unsigned errors_walk = TEST_MEMCHECK_ERRORS();
    size_t corrupt = fastmm_debug_scan();
    TEST_MAKE_DEFINED(p - DEBUG_HEADER, DEBUG_HEADER);
    unsigned errors_scan = TEST_MEMCHECK_ERRORS();
    free(p);
    ck_assert(complete);
    REQUIRE(errors_walk == errors, "memcheck counted %u errors in the walk", errors_walk - errors);
    REQUIRE(errors_scan == errors_walk, "memcheck counted %u errors in the scan", errors_scan - errors_walk);
    ck_assert_uint_eq(corrupt, 0);
    REQUIRE(found.debug && found.usable_size == 100, "the block read as debug %d, size %zu", (int)found.debug,
            found.usable_size);
}
END_TEST

/* ---- state ---- */

static unsigned class_slot(const fastmm_state_t *s, size_t n)
{
    for (unsigned i = 0; i < s->small_class_count; i++)
        if (s->small[i].block_size == fm_small_class(n))
            return i;
    ck_abort_msg("no class of block size %zu", fm_small_class(n));
    return 0;
}

static fastmm_state_t st0, st1; /* ~2 KiB each: kept off the test's stack */

/* Guards: the per-class state counts exactly the blocks the test allocated in the class it
 * allocated them in (and nowhere else), reserves span space for them, and its medium and large
 * totals move by what was allocated; its totals add up to fastmm_get_usage's. */
START_TEST(test_state_counts_classes)
{
    static const size_t sizes[] = {10, 100, 333, 1000, 2000, FM_MAX_SMALL_USER};
    enum { N = 100 };
    static void *blocks[N];
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        fastmm_process_pending_frees();
        ck_assert(fastmm_get_state(&st0));
        for (int i = 0; i < N; i++)
            blocks[i] = malloc(sizes[k]);
        fastmm_process_pending_frees();
        REQUIRE(fastmm_get_state(&st1), "state incomplete");
        unsigned c = class_slot(&st1, sizes[k]);
        REQUIRE(st1.small_class_count == st0.small_class_count, "class count changed");
        REQUIRE(st1.small_class_count == FM_SMALL_CLASS_COUNT, "%u small classes, FastMM5 has %d",
                st1.small_class_count, FM_SMALL_CLASS_COUNT);
        for (unsigned i = 0; i < st1.small_class_count; i++) {
            size_t d = st1.small[i].blocks_in_use - st0.small[i].blocks_in_use;
            REQUIRE(d == (i == c ? (size_t)N : 0), "size %zu: class %zu moved by %zd", sizes[k],
                    st1.small[i].block_size, (ssize_t)d);
        }
        REQUIRE(st1.small[c].usable_size == st1.small[c].block_size - 2, "usable size");
        REQUIRE(st1.small[c].reserved_bytes >= st1.small[c].blocks_in_use * st1.small[c].block_size,
                "class %zu reserves %zu for %zu blocks", st1.small[c].block_size, st1.small[c].reserved_bytes,
                st1.small[c].blocks_in_use);
        for (int i = 0; i < N; i++)
            free(blocks[i]);
    }

    fastmm_process_pending_frees();
    fastmm_usage_t u0;
    fastmm_get_usage(&u0);
    ck_assert(fastmm_get_state(&st0));
    size_t sum0 = st0.medium.bytes_in_use + st0.large.bytes_in_use;
    for (unsigned i = 0; i < st0.small_class_count; i++)
        sum0 += st0.small[i].blocks_in_use * st0.small[i].usable_size;
    size_t medium = 0, large = 0;
    for (int i = 0; i < 10; i++) {
        blocks[i] = malloc(5000 + 1000 * (size_t)i);
        medium += fm_expected_usable(5000 + 1000 * (size_t)i);
    }
    for (int i = 10; i < 13; i++) {
        blocks[i] = malloc(MIB);
        large += fm_expected_usable(MIB);
    }
    fastmm_process_pending_frees();
    fastmm_usage_t u;
    fastmm_get_usage(&u);
    ck_assert(fastmm_get_state(&st1));
    ck_assert_uint_eq(st1.medium.blocks_in_use - st0.medium.blocks_in_use, 10);
    ck_assert_uint_eq(st1.medium.bytes_in_use - st0.medium.bytes_in_use, medium);
    ck_assert_uint_eq(st1.large.blocks_in_use - st0.large.blocks_in_use, 3);
    ck_assert_uint_eq(st1.large.bytes_in_use - st0.large.bytes_in_use, large);
    ck_assert_uint_ge(st1.large.reserved_bytes - st0.large.reserved_bytes, 3 * MIB);
    size_t sum = st1.medium.bytes_in_use + st1.large.bytes_in_use;
    for (unsigned i = 0; i < st1.small_class_count; i++)
        sum += st1.small[i].blocks_in_use * st1.small[i].usable_size;
    ck_assert_uint_eq(sum - sum0, u.allocated_bytes - u0.allocated_bytes);
    if (heap_is_clean())
        ck_assert_uint_eq(sum, u.allocated_bytes);
    for (int i = 0; i < 13; i++)
        free(blocks[i]);
}
END_TEST

/* ---- JSON and the state log ---- */

static int have_python3(void)
{
    return system("python3 -c 'import json' >/dev/null 2>&1") == 0;
}

/* Guards: fastmm_write_json writes one valid JSON object (python3's json module parses it) whose
 * numbers are those of fastmm_get_state / fastmm_get_usage / the options taken at the same
 * moment. */
START_TEST(test_json_parses_and_matches)
{
    if (!have_python3()) {
        fprintf(stderr, "introspection: python3 not found; JSON parse check skipped\n");
        return;
    }
    char path[256];
    int fd = make_tmp(path, sizeof path);
    void *keep[20];
    for (int i = 0; i < 20; i++)
        keep[i] = malloc(48);
    fastmm_process_pending_frees();
    fastmm_usage_t u;
    fastmm_get_usage(&u);
    REQUIRE(fastmm_get_state(&st0), "state incomplete");
    fastmm_write_json(fd);
    close(fd);
    size_t small_blocks = 0;
    for (unsigned i = 0; i < st0.small_class_count; i++)
        small_blocks += st0.small[i].blocks_in_use;

    char cmd[640];
    snprintf(cmd, sizeof cmd,
             "python3 -c 'import json,sys; d=json.load(sys.stdin); s=d[\"state\"]; "
             "print(d[\"usage\"][\"allocated_bytes\"], sum(c[\"blocks_in_use\"] for c in s[\"small_classes\"]), "
             "len(s[\"small_classes\"]), s[\"medium\"][\"blocks_in_use\"], s[\"large\"][\"bytes_in_use\"], "
             "d[\"options\"][\"strategy\"], d[\"options\"][\"min_alignment\"], d[\"contention\"][\"small\"] >= 0)' < %s",
             path);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    size_t allocated = 0, smalls = 0, classes = 0, medium = 0, large = 0;
    unsigned alignment = 0;
    char strategy[32] = "", ok[8] = "";
    int got = fscanf(p, "%zu %zu %zu %zu %zu %31s %u %7s", &allocated, &smalls, &classes, &medium, &large, strategy,
                     &alignment, ok);
    int rc = pclose(p);
    unlink(path);
    ck_assert_int_eq(rc, 0);
    ck_assert_int_eq(got, 8);
    ck_assert_uint_eq(allocated, u.allocated_bytes);
    ck_assert_uint_eq(smalls, small_blocks);
    ck_assert_uint_eq(classes, st0.small_class_count);
    ck_assert_uint_eq(medium, st0.medium.blocks_in_use);
    ck_assert_uint_eq(large, st0.large.bytes_in_use);
    ck_assert_str_eq(strategy, fastmm_strategy() == FASTMM_STRATEGY_BALANCED ? "balanced" : strategy);
    ck_assert_uint_eq(alignment, fastmm_alignment());
    ck_assert_str_eq(ok, "True");
    for (int i = 0; i < 20; i++)
        free(keep[i]);
}
END_TEST

/* Guards: fastmm_log_state writes FastMM5's state log - the summary, then the used blocks
 * grouped by size with the largest total first - and counts the test's blocks in their row. */
START_TEST(test_log_state)
{
    enum { N = 37 };
    void *blocks[N];
    for (int i = 0; i < N; i++)
        blocks[i] = malloc(12345);
    size_t usable = fm_expected_usable(12345);
    char path[256];
    int fd = make_tmp(path, sizeof path);
    close(fd);
    ck_assert(fastmm_log_state(path));
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    char line[256];
    bool header = false, summary = false, row = false, sorted = true;
    size_t previous = SIZE_MAX;
    bool in_rows = false;
    while (fgets(line, sizeof line, f) != NULL) {
        header |= strncmp(line, "libfastmm5 state log", 20) == 0;
        summary |= strstr(line, "KiB allocated") != NULL;
        if (strstr(line, "Total bytes") != NULL) {
            in_rows = true;
            continue;
        }
        size_t total, count, size;
        char kind[32];
        if (in_rows && sscanf(line, "%zu %zu %zu %31s", &total, &count, &size, kind) == 4) {
            sorted &= total <= previous;
            previous = total;
            if (size == usable && strcmp(kind, "medium") == 0 && count >= N && total == count * usable)
                row = true;
        }
    }
    fclose(f);
    unlink(path);
    ck_assert(header);
    ck_assert(summary);
    ck_assert_msg(row, "no row for %d medium blocks of %zu bytes", N, usable);
    ck_assert_msg(sorted, "rows not sorted by total bytes");
    ck_assert(!fastmm_log_state("/nonexistent-dir/x.log"));
    for (int i = 0; i < N; i++)
        free(blocks[i]);
}
END_TEST

/* ---- glibc statistics ---- */

/* malloc_stats with standard error sent to a temporary file: returns what it wrote. The thread
 * that calls it has a cancel pending (deferred) when `cancel_pending`: it must finish the report
 * anyway, as glibc's (the call is no cancellation point), and is cancelled at the next one. */
typedef struct stats_capture {
    bool cancel_pending, finished;
} stats_capture_t;

static void *call_malloc_stats(void *arg)
{
    stats_capture_t *c = arg;
    if (c->cancel_pending)
        pthread_cancel(pthread_self());
    malloc_stats();
    c->finished = true;
    pthread_testcancel();
    return NULL;
}

static size_t capture_malloc_stats(bool cancel_pending, char *out, size_t cap, bool *finished)
{
    FILE *tmp = tmpfile();
    ck_assert_ptr_nonnull(tmp);
    fflush(stderr);
    int saved = dup(2);
    ck_assert_int_ge(saved, 0);
    ck_assert_int_eq(dup2(fileno(tmp), 2), 2);
    stats_capture_t c = {cancel_pending, false};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, call_malloc_stats, &c), 0);
    void *ret = NULL;
    ck_assert_int_eq(pthread_join(th, &ret), 0);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    *finished = c.finished;
    rewind(tmp);
    size_t n = fread(out, 1, cap - 1, tmp);
    out[n] = '\0';
    fclose(tmp);
    return n;
}

/* Guards malloc_stats as glibc's: the lines tools parse ("Arena 0:", "system bytes", "in use
 * bytes", "Total (incl. mmap):", "max mmap regions", "max mmap bytes") with this heap's numbers
 * (a live 4 MiB block counts in the totals' in-use bytes and regions), and a thread with a
 * cancel pending finishes the report (glibc's tst-malloc-stats-cancellation). */
START_TEST(test_malloc_stats_as_glibc)
{
    char *big = malloc(4 << 20);
    ck_assert_ptr_nonnull(big);
    memset(big, 1, 4096);
    static char text[4096];
    for (int cancel = 0; cancel < 2; cancel++) {
        bool finished = false;
        capture_malloc_stats(cancel, text, sizeof text, &finished);
        ck_assert_msg(finished, "malloc_stats was a cancellation point (cancel pending: %d)", cancel);
        static const char *const lines[] = {"Arena 0:\n", "system bytes     = ", "in use bytes     = ",
                                            "Total (incl. mmap):\n", "max mmap regions = ", "max mmap bytes   = "};
        for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++)
            ck_assert_msg(strstr(text, lines[i]) != NULL, "malloc_stats lacks \"%s\":\n%s", lines[i], text);
        const char *total = strstr(text, "Total (incl. mmap):\n");
        unsigned system = 0, in_use = 0, regions = 0;
        ck_assert_int_eq(sscanf(total, "Total (incl. mmap):\nsystem bytes     = %u\nin use bytes     = %u\n"
                                       "max mmap regions = %u",
                                &system, &in_use, &regions),
                         3);
        ck_assert_uint_ge(in_use, 4u << 20);
        ck_assert_uint_ge(system, in_use);
        ck_assert_uint_ge(regions, 1);
    }
    free(big);
}
END_TEST

/* Guards: mallinfo2, mallinfo (int fields, no wrap) and malloc_info's XML report the same
 * numbers as the per-class state and the usage summary; malloc_info refuses options; mallopt
 * accepts every parameter as glibc 2.36 does (1), except M_MXFAST out of its range (0). */
START_TEST(test_glibc_statistics_agree)
{
    void *keep[8];
    for (int i = 0; i < 8; i++)
        keep[i] = malloc(i < 4 ? 200 : i < 7 ? 50000 : 2 * MIB);
    FILE *fp = tmpfile();
    ck_assert_ptr_nonnull(fp);
    fastmm_process_pending_frees();
    fastmm_usage_t u;
    fastmm_get_usage(&u);
    bool complete = fastmm_get_state(&st0);
    size_t os = fastmm_os_memory();
    struct mallinfo2 m2 = mallinfo2();
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    struct mallinfo m1 = mallinfo(); /* deprecated by glibc, still exported for old programs */
#pragma GCC diagnostic pop
    int info_rc = malloc_info(0, fp);
    REQUIRE(complete, "state incomplete");
    ck_assert_int_eq(info_rc, 0);
    bool clean = heap_is_clean();

    size_t small_blocks = 0, small_bytes = 0;
    for (unsigned i = 0; i < st0.small_class_count; i++) {
        small_blocks += st0.small[i].blocks_in_use;
        small_bytes += st0.small[i].blocks_in_use * st0.small[i].usable_size;
    }
    if (clean)
        ck_assert_uint_eq(m2.uordblks, small_bytes + st0.medium.bytes_in_use);
    ck_assert_uint_eq(m2.ordblks, st0.medium.blocks_in_use);
    ck_assert_uint_eq(m2.hblks, st0.large.blocks_in_use);
    ck_assert_uint_eq(m2.hblkhd, st0.large.reserved_bytes);
    ck_assert_uint_eq(m2.uordblks + st0.large.bytes_in_use, u.allocated_bytes);
    size_t small_reserved = 0;
    for (unsigned i = 0; i < st0.small_class_count; i++)
        small_reserved += st0.small[i].reserved_bytes;
    ck_assert_uint_eq(m2.arena, st0.medium.reserved_bytes + small_reserved);
    /* mallinfo: the same numbers while they fit in an int */
    ck_assert_int_eq(m1.uordblks, m2.uordblks > INT_MAX ? INT_MAX : (int)m2.uordblks);
    ck_assert_int_eq(m1.hblkhd, m2.hblkhd > INT_MAX ? INT_MAX : (int)m2.hblkhd);
    ck_assert_int_eq(m1.arena, m2.arena > INT_MAX ? INT_MAX : (int)m2.arena);
    ck_assert_int_eq(m1.hblks, (int)m2.hblks);

    /* malloc_info's XML */
    rewind(fp);
    char line[256];
    size_t n, sz, seen = 0;
    while (fgets(line, sizeof line, fp) != NULL) {
        if (sscanf(line, "<total type=\"small\" count=\"%zu\" size=\"%zu\"/>", &n, &sz) == 2) {
            ck_assert(!clean || n == small_blocks);
            ck_assert(!clean || sz == small_bytes);
            ck_assert_uint_eq(sz + st0.medium.bytes_in_use, m2.uordblks);
            seen++;
        } else if (sscanf(line, "<total type=\"medium\" count=\"%zu\" size=\"%zu\"/>", &n, &sz) == 2) {
            ck_assert_uint_eq(n, st0.medium.blocks_in_use);
            ck_assert_uint_eq(sz, st0.medium.bytes_in_use);
            seen++;
        } else if (sscanf(line, "<total type=\"mmap\" count=\"%zu\" size=\"%zu\"/>", &n, &sz) == 2) {
            ck_assert_uint_eq(n, st0.large.blocks_in_use);
            ck_assert_uint_eq(sz, st0.large.bytes_in_use);
            seen++;
        } else if (sscanf(line, "<system type=\"current\" size=\"%zu\"/>", &sz) == 1) {
            ck_assert_uint_eq(sz, os);
            seen++;
        }
    }
    fclose(fp);
    ck_assert_uint_eq(seen, 4);
    errno = 0;
    ck_assert_int_eq(malloc_info(1, stdout), -1);
    ck_assert_int_eq(errno, EINVAL);
    ck_assert_int_eq(mallopt(M_MXFAST, 64), 1);
    ck_assert_int_eq(mallopt(M_ARENA_MAX, 2), 1);
    ck_assert_int_eq(mallopt(123456, 1), 1); /* glibc 2.36 accepts an unknown parameter */
    ck_assert_int_eq(mallopt(M_MXFAST, -1), 0);
    ck_assert_int_eq(mallopt(M_MXFAST, (int)(80 * sizeof(size_t) / 4) + 1), 0);
    for (int i = 0; i < 8; i++)
        free(keep[i]);
}
END_TEST

/* Guards: malloc_trim gives back the memory a freed burst left held (the feed spans and the
 * empty span FastMM5 keeps per arena): fastmm_os_memory() goes down and it returns 1. */
START_TEST(test_malloc_trim_releases)
{
    enum { N = 64 };
    static void *burst[N];
    for (int i = 0; i < N; i++) {
        burst[i] = malloc(200000);
        ck_assert_ptr_nonnull(burst[i]);
        memset(burst[i], 1, 200000);
    }
    for (int i = 0; i < N; i++)
        free(burst[i]);
    size_t before = fastmm_os_memory();
    int rc = malloc_trim(0);
    size_t after = fastmm_os_memory();
    ck_assert_msg(after < before, "malloc_trim: OS memory %zu -> %zu", before, after);
    ck_assert_int_eq(rc, 1);
}
END_TEST

/* ---- tuning ---- */

/* Guards: a memory limit makes allocations beyond it fail cleanly with NULL and ENOMEM (FastMM5's
 * 32 MiB grace is then added to it once), freeing memory lets allocation succeed again, and a
 * limit of 0 lifts it. */
START_TEST(test_memory_limit)
{
    enum { MAX = 200 };
    static void *blocks[MAX];
    size_t big = 4 * MIB;
    ck_assert_uint_eq(fastmm_memory_limit(), 0);
    size_t limit = fastmm_os_memory() + 16 * MIB;
    fastmm_set_memory_limit(limit);
    ck_assert_uint_eq(fastmm_memory_limit(), limit);
    int n = 0;
    void *p = NULL;
    errno = 0;
    while (n < MAX && (p = malloc(big)) != NULL)
        blocks[n++] = p;
    int saved = errno;
    ck_assert_ptr_null(p);
    ck_assert_int_eq(saved, ENOMEM);
    ck_assert_int_ge(n, 1);
    ck_assert_int_le(n, 4);
    ck_assert_uint_le(fastmm_os_memory(), limit);
    ck_assert_uint_eq(fastmm_memory_limit(), limit + 32 * MIB); /* the grace, once */
    for (int i = 0; i < n; i++)
        free(blocks[i]);
    p = malloc(big);
    ck_assert_ptr_nonnull(p);
    free(p);
    fastmm_set_memory_limit(0);
    ck_assert_uint_eq(fastmm_memory_limit(), 0);
    p = malloc(64 * MIB);
    ck_assert_ptr_nonnull(p);
    free(p);
}
END_TEST

#define SPAN_MAX 256
typedef struct span_list {
    const char *start[SPAN_MAX];
    size_t size[SPAN_MAX];
    size_t count;
} span_list_t;

static void span_cb(const fastmm_block_info_t *b, void *user)
{
    span_list_t *l = user;
    if (l->count < SPAN_MAX) {
        l->start[l->count] = b->address;
        l->size[l->count++] = b->block_size;
    }
}

static void walk_spans(span_list_t *l)
{
    l->count = 0;
    fastmm_walk_options_t opt = FASTMM_WALK_OPTIONS_INIT;
    opt.types = FASTMM_BLOCK_MEDIUM_SPAN;
    ck_assert(fastmm_walk_blocks(span_cb, l, &opt));
    ck_assert_uint_lt(l->count, SPAN_MAX);
}

/* The size of the first medium span made after the call: allocates 400,000-byte blocks until one
 * lands in a span that was not there before (earlier tests in one process, as check-valgrind
 * runs them, may leave free room in old spans, so the number needed is not known), then frees
 * them. 0 if none did within 256 blocks. */
static size_t next_new_span_size(void)
{
    enum { N = 256 };
    static void *blocks[N];
    static span_list_t before, after;
    walk_spans(&before);
    size_t found = 0;
    int n = 0;
    while (n < N && found == 0) {
        void *p = malloc(400000);
        ck_assert_ptr_nonnull(p);
        blocks[n++] = p;
        walk_spans(&after);
        for (size_t s = 0; s < after.count && found == 0; s++) {
            const char *start = after.start[s];
            if ((const char *)p < start || (const char *)p >= start + after.size[s])
                continue;
            int old = 0;
            for (size_t b = 0; b < before.count; b++)
                old |= before.start[b] == start;
            if (!old)
                found = after.size[s];
        }
    }
    for (int i = 0; i < n; i++)
        free(blocks[i]);
    return found;
}

/* Guards: fastmm_set_strategy switches at run time: new medium spans are 1.5 MiB under
 * low-memory and 3 MiB under balanced (seen in the walker's MEDIUM_SPAN records). */
START_TEST(test_strategy_switch)
{
    ck_assert_int_eq(fastmm_strategy(), FASTMM_STRATEGY_BALANCED);
    ck_assert(!fastmm_set_strategy((fastmm_strategy_t)7));
    ck_assert(fastmm_set_strategy(FASTMM_STRATEGY_LOW_MEMORY));
    ck_assert_int_eq(fastmm_strategy(), FASTMM_STRATEGY_LOW_MEMORY);
    ck_assert_uint_eq(next_new_span_size(), 3 * MIB / 2);
    ck_assert(fastmm_set_strategy(FASTMM_STRATEGY_BALANCED));
    ck_assert_int_eq(fastmm_strategy(), FASTMM_STRATEGY_BALANCED);
    ck_assert_uint_eq(next_new_span_size(), 3 * MIB);
}
END_TEST

/* Guards: nested minimum alignment - the coarsest alignment entered applies to every new block
 * (small ones move to classes that are multiples of it), exits unwind it, and bad values or an
 * exit without its enter are refused. */
START_TEST(test_min_alignment)
{
    ck_assert_uint_eq(fastmm_alignment(), FASTMM_MIN_ALIGNMENT);
    ck_assert(!fastmm_alignment_enter(7));
    ck_assert(!fastmm_alignment_exit(32));
    ck_assert(fastmm_alignment_enter(64));
    ck_assert(fastmm_alignment_enter(32));
    ck_assert_uint_eq(fastmm_alignment(), 64);
    static void *blocks[300];
    for (int i = 0; i < 300; i++) {
        blocks[i] = malloc((size_t)i * 9 + 1);
        REQUIRE(((uintptr_t)blocks[i] & 63) == 0, "malloc(%d) = %p under 64-byte alignment", i * 9 + 1, blocks[i]);
    }
    for (int i = 0; i < 300; i++)
        free(blocks[i]);
    ck_assert(fastmm_alignment_exit(64));
    ck_assert_uint_eq(fastmm_alignment(), 32);
    for (int i = 0; i < 300; i++) {
        blocks[i] = malloc((size_t)i * 9 + 1);
        REQUIRE(((uintptr_t)blocks[i] & 31) == 0, "malloc(%d) = %p under 32-byte alignment", i * 9 + 1, blocks[i]);
    }
    for (int i = 0; i < 300; i++)
        free(blocks[i]);
    ck_assert(fastmm_alignment_exit(32));
    ck_assert_uint_eq(fastmm_alignment(), FASTMM_MIN_ALIGNMENT);
    /* 16 bytes: the minimum on 64-bit; on 32-bit the 8-byte-step classes it is not a divisor of
     * are skipped (malloc(1) takes the 16-byte class, usable 14). */
    ck_assert(fastmm_alignment_enter(16));
    ck_assert_uint_eq(fastmm_alignment(), 16);
    for (int i = 0; i < 300; i++) {
        blocks[i] = malloc((size_t)i * 9 + 1);
        REQUIRE(((uintptr_t)blocks[i] & 15) == 0, "malloc(%d) = %p under 16-byte alignment", i * 9 + 1, blocks[i]);
    }
    REQUIRE(fastmm_usable_size(blocks[0]) == 14, "malloc(1) under 16-byte alignment: usable %zu",
            fastmm_usable_size(blocks[0]));
    for (int i = 0; i < 300; i++)
        free(blocks[i]);
    ck_assert(fastmm_alignment_exit(16));
    ck_assert_uint_eq(fastmm_alignment(), FASTMM_MIN_ALIGNMENT);
    own_count = 1; /* back to the smallest class (16, 32-bit: 8): the walker shows its block size */
    owns[0] = (own_t){malloc(1), 1, FM_MIN_USABLE, FASTMM_BLOCK_SMALL, 0, {0}};
    totals_t t;
    ck_assert(walk_totals(&t, NULL));
    ck_assert_uint_eq(owns[0].seen, 1);
    ck_assert_uint_eq(owns[0].info.block_size, FM_MIN_ALIGN);
    ck_assert_uint_eq(owns[0].info.usable_size, FM_MIN_USABLE);
    own_free();
}
END_TEST

Suite *suite_introspection(void)
{
    Suite *s = suite_create("introspection");
    TCase *tc = tcase_create("walk");
    tcase_set_timeout(tc, TEST_TIMEOUT);
    tcase_add_checked_fixture(tc, NULL, churn_join);
    tcase_add_test(tc, test_walk_totals_match_usage);
    tcase_add_test(tc, test_walk_debug_records);
    tcase_add_test(tc, test_walk_under_churn);
    tcase_add_test(tc, test_walk_quiet_on_racing_free);
    suite_add_tcase(s, tc);
    tc = tcase_create("reports");
    tcase_set_timeout(tc, TEST_TIMEOUT);
    tcase_add_test(tc, test_state_counts_classes);
    tcase_add_test(tc, test_json_parses_and_matches);
    tcase_add_test(tc, test_log_state);
    tcase_add_test(tc, test_glibc_statistics_agree);
    tcase_add_test(tc, test_malloc_stats_as_glibc);
    tcase_add_test(tc, test_malloc_trim_releases);
    suite_add_tcase(s, tc);
    tc = tcase_create("tuning");
    tcase_set_timeout(tc, TEST_TIMEOUT);
    tcase_add_test(tc, test_memory_limit);
    tcase_add_test(tc, test_strategy_switch);
    tcase_add_test(tc, test_min_alignment);
    suite_add_tcase(s, tc);
    return s;
}
