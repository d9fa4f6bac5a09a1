/*
 * check_threads.c - concurrency: churn with cross-thread frees, fork, thread turnover.
 *
 * Guards doc/fastmm5-facts.md 2.7-2.8 (arenas shared by all threads, frees to the owning
 * arena from any thread through pending-free lists) and the Linux port's own duties: fork
 * handlers that leave the child a usable heap, and no growth when threads come and go.
 *
 * Worker threads never call ck_assert (Check cannot fail a test from another thread): they
 * record the first failure in `fail_msg` and the main thread asserts after joining.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check_suites.h"
#include "helpers.h"

static atomic_int fail_count;
static char fail_msg[512];
static pthread_mutex_t fail_lock = PTHREAD_MUTEX_INITIALIZER;

static void record_failure(const char *what, size_t size, size_t offset)
{
    if (atomic_fetch_add(&fail_count, 1) == 0) {
        pthread_mutex_lock(&fail_lock);
        snprintf(fail_msg, sizeof fail_msg, "%s (block size %zu, offset %zu)", what, size, offset);
        pthread_mutex_unlock(&fail_lock);
    }
}

static void reset_failures(void)
{
    atomic_store(&fail_count, 0);
    fail_msg[0] = '\0';
}

static void assert_no_failures(void)
{
    int n = atomic_load(&fail_count);
    ck_assert_msg(n == 0, "%d failure(s) in worker threads; first: %s", n, fail_msg);
}

/* Sizes skewed small: ~85% small (half of them tiny), ~14% medium, ~0.5-1% large. */
static size_t random_size(uint64_t *rng, int large_per_mille)
{
    uint64_t r = xorshift64(rng);
    unsigned pick = (unsigned)(r % 1000);
    r >>= 10;
    if (pick < 425)
        return (size_t)(r % 129);
    if (pick < 850)
        return (size_t)(r % 2623);
    if (pick < 1000 - (unsigned)large_per_mille)
        return 2623 + (size_t)(r % 150000);
    return 558905 + (size_t)(r % (2u << 20));
}

/* ------------------------------------------------------------------------------------------ */
/* Churn with cross-thread frees                                                                */
/* ------------------------------------------------------------------------------------------ */

#define CHURN_THREADS 4
#define CHURN_SLOTS 1024
#define MAILBOX_CAP 1024

struct item {
    void *p;
    size_t n;
    uint32_t seed;
};

struct mailbox {
    pthread_mutex_t lock;
    struct item q[MAILBOX_CAP];
    size_t head, count;
};

static struct mailbox mailboxes[CHURN_THREADS];
static pthread_barrier_t churn_barrier;

struct churn_arg {
    int id;
    int ops;
};

static int verify_item(const struct item *it, const char *where)
{
    size_t bad = check_sparse(it->p, it->n, it->n, it->seed);
    if (bad != SIZE_MAX) {
        record_failure(where, it->n, bad);
        return 0;
    }
    if (fastmm_usable_size(it->p) < it->n) {
        record_failure("usable size below the requested size", it->n, 0);
        return 0;
    }
    return 1;
}

static int post(int to, const struct item *it)
{
    struct mailbox *m = &mailboxes[to];
    int ok = 0;
    pthread_mutex_lock(&m->lock);
    if (m->count < MAILBOX_CAP) {
        m->q[(m->head + m->count) % MAILBOX_CAP] = *it;
        m->count++;
        ok = 1;
    }
    pthread_mutex_unlock(&m->lock);
    return ok;
}

/* Verifies and frees everything other threads sent to `id`. */
static void drain(int id)
{
    struct item local[MAILBOX_CAP];
    size_t n = 0;
    struct mailbox *m = &mailboxes[id];
    pthread_mutex_lock(&m->lock);
    while (m->count > 0) {
        local[n++] = m->q[m->head];
        m->head = (m->head + 1) % MAILBOX_CAP;
        m->count--;
    }
    pthread_mutex_unlock(&m->lock);
    for (size_t i = 0; i < n; i++) {
        verify_item(&local[i], "block corrupted while in another thread's mailbox");
        if (i & 1)
            free(local[i].p);
        else
            fastmm_free(local[i].p);
    }
}

static void *churn_thread(void *argp)
{
    struct churn_arg *arg = argp;
    uint64_t rng = 0x9E3779B97F4A7C15ULL * (uint64_t)(arg->id + 1);
    struct item *slots = calloc(CHURN_SLOTS, sizeof *slots);
    if (slots == NULL) {
        record_failure("calloc of the slot table failed", CHURN_SLOTS * sizeof *slots, 0);
        return NULL;
    }
    uint32_t serial = (uint32_t)arg->id << 24;
    for (int op = 0; op < arg->ops; op++) {
        uint64_t r = xorshift64(&rng);
        struct item *it = &slots[r % CHURN_SLOTS];
        unsigned action = (unsigned)((r >> 16) % 16);
        if (it->p != NULL) {
            verify_item(it, "block corrupted while owned by its thread");
            if (action < 3) {
                /* Resize in place or by moving; the prefix must survive. */
                size_t nw = random_size(&rng, 5) + 1; /* realloc(p, 0) would free */
                void *q = realloc(it->p, nw);
                if (q == NULL) {
                    record_failure("realloc failed", nw, 0);
                    free(it->p);
                    it->p = NULL;
                    continue;
                }
                size_t keep = nw < it->n ? nw : it->n;
                size_t bad = check_sparse(q, it->n, keep, it->seed);
                if (bad != SIZE_MAX)
                    record_failure("realloc lost contents", it->n, bad);
                it->p = q;
                it->n = nw;
                it->seed = serial++;
                fill_sparse(q, nw, it->seed);
                continue;
            }
            if (action < 8) {
                int to = (arg->id + 1 + (int)((r >> 24) % (CHURN_THREADS - 1))) % CHURN_THREADS;
                if (!post(to, it))
                    free(it->p);
            } else {
                free(it->p);
            }
            it->p = NULL;
        }
        size_t n = random_size(&rng, 5);
        void *p = (action & 1) ? malloc(n) : calloc(1, n);
        if (p == NULL) {
            record_failure("allocation failed", n, 0);
            continue;
        }
        if (((uintptr_t)p & (FM_MIN_ALIGN - 1)) != 0)
            record_failure("block not aligned to FM_MIN_ALIGN (16; 32-bit: 8)", n, 0);
        it->p = p;
        it->n = n;
        it->seed = serial++;
        fill_sparse(p, n, it->seed);
        if ((op & 63) == 0)
            drain(arg->id);
    }
    /* Nobody posts after everyone has passed the barrier. */
    pthread_barrier_wait(&churn_barrier);
    drain(arg->id);
    for (int i = 0; i < CHURN_SLOTS; i++) {
        if (slots[i].p != NULL) {
            verify_item(&slots[i], "block corrupted at the end");
            free(slots[i].p);
        }
    }
    free(slots);
    return NULL;
}

/* Guards the multi-threaded paths: 4 threads allocate, reallocate and free random sizes (mostly
 * small, some medium, a few large) and hand a third of their blocks to other threads to free
 * (pending-free lists, frees into another thread's arena). Every block's pattern is checked
 * before it is freed or resized, so overlap or corruption under contention shows up. */
START_TEST(test_churn_cross_thread)
{
    reset_failures();
    fastmm_contention_t before, after;
    fastmm_get_contention(&before);
    for (int i = 0; i < CHURN_THREADS; i++) {
        pthread_mutex_init(&mailboxes[i].lock, NULL);
        mailboxes[i].head = mailboxes[i].count = 0;
    }
    pthread_barrier_init(&churn_barrier, NULL, CHURN_THREADS);
    pthread_t th[CHURN_THREADS];
    struct churn_arg args[CHURN_THREADS];
    for (int i = 0; i < CHURN_THREADS; i++) {
        args[i].id = i;
        args[i].ops = test_iters(100000);
        ck_assert_int_eq(pthread_create(&th[i], NULL, churn_thread, &args[i]), 0);
    }
    for (int i = 0; i < CHURN_THREADS; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&churn_barrier);
    for (int i = 0; i < CHURN_THREADS; i++)
        pthread_mutex_destroy(&mailboxes[i].lock);
    assert_no_failures();
    (void)fastmm_process_pending_frees();
    /* Contention counters only ever grow. */
    fastmm_get_contention(&after);
    ck_assert_uint_ge(after.small, before.small);
    ck_assert_uint_ge(after.medium, before.medium);
    ck_assert_uint_ge(after.large, before.large);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* fork while other threads allocate                                                            */
/* ------------------------------------------------------------------------------------------ */

static atomic_int stop_flag;

/* The background threads of the fork test: all three categories, so that every kind of lock
 * can be held at the moment of a fork, but only the first 1 KiB of a block is written, to keep
 * the copy-on-write faults after each fork cheap. */
/* The churning threads keep their blocks in static storage, not on their stacks: a fork child
 * has no copy of the other threads' stacks, and memcheck (which knows libfastmm5's blocks)
 * would call the blocks those stacks referenced definitely lost at the child's exit. */
static void *background_live[8][64];

static void *background_churn(void *argp)
{
    uint64_t rng = (uint64_t)(uintptr_t)argp * 0x2545F4914F6CDD1DULL + 1;
    void **live = background_live[(uintptr_t)argp % 8];
    memset(live, 0, sizeof background_live[0]);
    size_t touched[64] = {0};
    while (!atomic_load_explicit(&stop_flag, memory_order_relaxed)) {
        uint64_t r = xorshift64(&rng);
        int k = (int)(r % 64);
        if (live[k] != NULL) {
            size_t bad = check_pattern(live[k], touched[k], (uint32_t)(uintptr_t)live[k]);
            if (bad != SIZE_MAX)
                record_failure("background block corrupted", touched[k], bad);
            free(live[k]);
        }
        size_t n = random_size(&rng, 5);
        live[k] = malloc(n);
        if (live[k] == NULL) {
            record_failure("background malloc failed", n, 0);
            continue;
        }
        touched[k] = n < 1024 ? n : 1024;
        fill_pattern(live[k], touched[k], (uint32_t)(uintptr_t)live[k]);
    }
    for (int k = 0; k < 64; k++)
        free(live[k]);
    return NULL;
}

/* What the child does: every category of allocation, realloc across categories, calloc, and
 * freeing blocks the parent allocated before the fork. Only the first 8 KiB of each block is
 * written and checked: page faults are what a child pays most for. Returns the exit status:
 * 0 when all went well. */
static int child_work(void **inherited, size_t n_inherited)
{
    static const size_t sizes[] = {0, 16, 100, 2622, 2623, 10000, 100000, 558905};
    for (size_t i = 0; i < n_inherited; i++) {
        if (check_pattern(inherited[i], 64, (uint32_t)i) != SIZE_MAX)
            return 2;
        free(inherited[i]);
    }
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t touch = sizes[i] < 8192 ? sizes[i] : 8192;
        void *p = malloc(sizes[i]);
        if (p == NULL)
            return 3;
        fill_pattern(p, touch, (uint32_t)i);
        void *q = realloc(p, sizes[i] + sizes[i] / 2 + 1);
        if (q == NULL || check_pattern(q, touch, (uint32_t)i) != SIZE_MAX)
            return 4;
        uint8_t *c = calloc(1, sizes[i] + 5);
        if (c == NULL)
            return 5;
        for (size_t k = 0; k < touch; k++)
            if (c[k] != 0)
                return 6;
        free(c);
        free(q);
    }
    return 0;
}

/* Guards fork safety: the parent forks ~200 times while three threads allocate and free all
 * categories; each child (only the forking thread survives) must be able to allocate, realloc,
 * calloc and free — including blocks inherited from the parent — without deadlocking on a lock
 * another thread held at the fork, and exit 0. The parent's threads keep working afterwards. */
START_TEST(test_fork_while_allocating)
{
    enum { BG = 3, INHERITED = 32 };
    reset_failures();
    atomic_store(&stop_flag, 0);
    pthread_t th[BG];
    for (int i = 0; i < BG; i++)
        ck_assert_int_eq(pthread_create(&th[i], NULL, background_churn, (void *)(uintptr_t)(i + 1)), 0);
    int rounds = test_iters(200);
    int bad_status = 0, bad_round = -1;
    for (int round = 0; round < rounds && bad_status == 0; round++) {
        void *inherited[INHERITED];
        for (int i = 0; i < INHERITED; i++) {
            inherited[i] = malloc(64 + (size_t)i * 97);
            if (inherited[i] == NULL) {
                bad_status = -1;
                break;
            }
            fill_pattern(inherited[i], 64, (uint32_t)i);
        }
        if (bad_status != 0)
            break;
        pid_t pid = fork();
        if (pid < 0) {
            bad_status = -2;
            break;
        }
        if (pid == 0) {
            no_core_dump();
            /* A deadlocked child dies of SIGALRM instead of hanging the test. Not through the
             * handler inherited from Check: in CK_FORK=no mode (check-valgrind) that handler
             * kills its process group with SIGKILL, which here is the parent, make and CI.
             * The child's work takes well under a second, also under Memcheck; the alarm is
             * long so that only a deadlock reaches it on a loaded machine. */
            signal(SIGALRM, SIG_DFL);
            alarm(120);
            int status = child_work(inherited, INHERITED);
#ifdef VALGRIND_CLO_CHANGE
            /* A block another thread had just allocated when fork() ran is referenced by nothing
             * in the child: a genuine leak there, and not what this test is about. */
            VALGRIND_CLO_CHANGE("--leak-check=no");
#endif
            _exit(status);
        }
        int st = 0;
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
            ;
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            bad_status = st == 0 ? -3 : st;
            bad_round = round;
        }
        for (int i = 0; i < INHERITED; i++)
            free(inherited[i]);
    }
    atomic_store(&stop_flag, 1);
    for (int i = 0; i < BG; i++)
        pthread_join(th[i], NULL);
    ck_assert_msg(bad_status == 0,
                  "fork round %d: child status %#x (exited %d, code %d; signalled %d, signal %d)", bad_round,
                  bad_status, WIFEXITED(bad_status), WEXITSTATUS(bad_status), WIFSIGNALED(bad_status),
                  WTERMSIG(bad_status));
    assert_no_failures();
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Thread turnover                                                                              */
/* ------------------------------------------------------------------------------------------ */

#define ROUND_THREADS 4
#define ROUND_HANDOFF 8

struct round_arg {
    uint64_t seed;
    int ops;
    void *handoff[ROUND_HANDOFF];   /* blocks this thread leaves for the main thread to free */
    size_t handoff_n[ROUND_HANDOFF];
};

static void *round_thread(void *argp)
{
    struct round_arg *a = argp;
    enum { LIVE = 64 };
    void *live[LIVE] = {0};
    size_t n[LIVE] = {0};
    uint64_t rng = a->seed;
    for (int op = 0; op < a->ops; op++) {
        uint64_t r = xorshift64(&rng);
        int k = (int)(r % LIVE);
        if (live[k] != NULL) {
            size_t bad = check_sparse(live[k], n[k], n[k], (uint32_t)k);
            if (bad != SIZE_MAX)
                record_failure("block corrupted in a short-lived thread", n[k], bad);
            free(live[k]);
        }
        n[k] = random_size(&rng, 3);
        live[k] = malloc(n[k]);
        if (live[k] == NULL) {
            record_failure("malloc failed in a short-lived thread", n[k], 0);
            continue;
        }
        fill_sparse(live[k], n[k], (uint32_t)k);
    }
    /* Hand some blocks to the main thread (freed after this thread is gone), free the rest. */
    int h = 0;
    for (int k = 0; k < LIVE; k++) {
        if (live[k] == NULL)
            continue;
        if (h < ROUND_HANDOFF && check_sparse(live[k], n[k], n[k], (uint32_t)k) == SIZE_MAX) {
            fill_pattern(live[k], n[k] < 64 ? n[k] : 64, 0xfeed);
            a->handoff[h] = live[k];
            a->handoff_n[h] = n[k] < 64 ? n[k] : 64;
            h++;
        } else {
            free(live[k]);
        }
    }
    return NULL;
}

static void run_round(int round, int ops)
{
    pthread_t th[ROUND_THREADS];
    struct round_arg args[ROUND_THREADS];
    memset(args, 0, sizeof args);
    for (int i = 0; i < ROUND_THREADS; i++) {
        args[i].seed = (uint64_t)round * 7919 + (uint64_t)i * 104729 + 1;
        args[i].ops = ops;
        if (pthread_create(&th[i], NULL, round_thread, &args[i]) != 0)
            record_failure("pthread_create failed", 0, (size_t)round);
    }
    for (int i = 0; i < ROUND_THREADS; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < ROUND_THREADS; i++) {
        for (int k = 0; k < ROUND_HANDOFF; k++) {
            if (args[i].handoff[k] == NULL)
                continue;
            if (check_pattern(args[i].handoff[k], args[i].handoff_n[k], 0xfeed) != SIZE_MAX)
                record_failure("block of an exited thread corrupted", args[i].handoff_n[k], 0);
            free(args[i].handoff[k]);
        }
    }
}

/* Guards thread turnover: 200 rounds of 4 threads that allocate and free then exit (leaving a
 * few blocks for the main thread to free). Per-thread state must be released or reused, so OS
 * memory after the rounds stays within 16 MiB of what it was after a 20-round warm-up. */
START_TEST(test_thread_rounds)
{
    reset_failures();
    int rounds = test_iters(200);
    int warm = rounds / 10 > 0 ? rounds / 10 : 1;
    int ops = test_iters(1000);
    for (int r = 0; r < warm; r++)
        run_round(r, ops);
    fastmm_process_pending_frees();
    size_t os_warm = fastmm_os_memory();
    size_t os_peak = os_warm;
    for (int r = warm; r < rounds; r++) {
        run_round(r, ops);
        if (r % 20 == 0) {
            fastmm_process_pending_frees();
            size_t now = fastmm_os_memory();
            if (now > os_peak)
                os_peak = now;
        }
    }
    fastmm_process_pending_frees();
    size_t os_end = fastmm_os_memory();
    assert_no_failures();
    ck_assert_msg(os_end <= os_warm + (16u << 20),
                  "OS memory grew with thread turnover: %zu after warm-up, %zu after %d rounds (peak %zu)", os_warm,
                  os_end, rounds, os_peak);
}
END_TEST

/* An exited thread's cache keeps its blocks for the next thread (tcache.c, POOL_KEEP): they
 * count as allocated (as FastMM5 counts pending frees), the next thread's mallocs of that size
 * get them back in stack order (the last freed first; through the arenas they come back in the
 * order they were freed), and fastmm_process_pending_frees gives them back to the arenas.
 * 150-byte blocks: a class the C library's own per-thread allocations do not use, whose bins
 * start wide enough (6 blocks) to keep all three without widening. */
#define KEPT_SIZE 150
static void *kept_blocks[3];
static void *alloc_free_then_exit(void *arg)
{
    (void)arg;
    for (int i = 0; i < 3; i++)
        kept_blocks[i] = malloc(KEPT_SIZE);
    for (int i = 0; i < 3; i++)
        free(kept_blocks[i]);
    return NULL;
}

static void *take_over_then_exit(void *arg)
{
    void **got = arg;
    for (int i = 0; i < 3; i++)
        got[i] = malloc(KEPT_SIZE);
    for (int i = 0; i < 3; i++)
        free(got[i]);
    return NULL;
}

START_TEST(test_exited_thread_cache_kept)
{
    pthread_t th;
    void *got[3] = {NULL, NULL, NULL};
    fastmm_usage_t before, kept, again, released;
    fastmm_process_pending_frees();
    fastmm_get_usage(&before);
    ck_assert_int_eq(pthread_create(&th, NULL, alloc_free_then_exit, NULL), 0);
    ck_assert_int_eq(pthread_join(th, NULL), 0);
    fastmm_get_usage(&kept);
    ck_assert_msg(kept.allocated_bytes >= before.allocated_bytes + 3 * KEPT_SIZE,
                  "the exited thread's cached blocks were not kept: allocated %zu before, %zu after", before.allocated_bytes,
                  kept.allocated_bytes);
    ck_assert_int_eq(pthread_create(&th, NULL, take_over_then_exit, got), 0);
    ck_assert_int_eq(pthread_join(th, NULL), 0);
    ck_assert_msg(got[0] == kept_blocks[2] && got[1] == kept_blocks[1] && got[2] == kept_blocks[0],
                  "the next thread did not take over the kept stack: freed %p %p %p, got %p %p %p", kept_blocks[0],
                  kept_blocks[1], kept_blocks[2], got[0], got[1], got[2]);
    fastmm_get_usage(&again);
    fastmm_process_pending_frees();
    fastmm_get_usage(&released);
    ck_assert_msg(released.allocated_bytes + 3 * KEPT_SIZE <= again.allocated_bytes,
                  "kept blocks not given back by fastmm_process_pending_frees: allocated %zu with them, %zu after",
                  again.allocated_bytes, released.allocated_bytes);
}
END_TEST

Suite *suite_threads(void)
{
    Suite *s = suite_create("threads");

    TCase *tc = tcase_create("churn");
    tcase_set_timeout(tc, TEST_TIMEOUT);
    tcase_add_test(tc, test_churn_cross_thread);
    suite_add_tcase(s, tc);

    tc = tcase_create("fork");
    tcase_set_timeout(tc, TEST_TIMEOUT);
#if CHECK_MAJOR_VERSION > 0 || CHECK_MINOR_VERSION >= 11
    /* CK_EXCLUDE_TAGS=fork-with-threads leaves it out: under qemu-user, fork() while other
     * threads run hangs in the emulator (.ci/arch-legs). */
    tcase_set_tags(tc, "fork-with-threads");
#endif
    tcase_add_test(tc, test_fork_while_allocating);
    suite_add_tcase(s, tc);

    tc = tcase_create("turnover");
    tcase_set_timeout(tc, TEST_TIMEOUT);
    tcase_add_test(tc, test_thread_rounds);
    tcase_add_test(tc, test_exited_thread_cache_kept);
    suite_add_tcase(s, tc);

    return s;
}
