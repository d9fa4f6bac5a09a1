/*
 * check_leaks.c - the leak check: reachability, as Valgrind's memcheck classifies blocks.
 *
 * Blocks are planted with a known reachability (a pointer kept in a global, another thread's
 * stack, the static TLS of this thread and of another; only an interior pointer kept; none at
 * all; a lost list) and fastmm_leak_check() must report each with its kind, in normal mode
 * (loss records by size: the sizes here are medium bins nothing else in the runner uses) and in
 * debug mode (records by allocation stack: every planted block has a call site of its own).
 *
 * A "lost" pointer is kept XORed with a mask, so that the test can still free the block but the
 * scan does not see it; the stack the planting functions used is overwritten before each check.
 * The event log is pointed at /dev/null: then the still-reachable records are raised too (to the
 * log and the handler, not standard error), which is how their kind is checked.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "check_suites.h"

/* Under Valgrind (make check-valgrind) the scan's reads of every word of the stacks and blocks
 * are uninitialised reads to memcheck, which has its own leak check: the suite is skipped. */
#ifndef RUNNING_ON_VALGRIND
#define RUNNING_ON_VALGRIND 0
#endif

#define MASK ((uintptr_t)0xa5a5a5a5a5a5a5a5u)
#define HIDE(p) ((uintptr_t)(p) ^ MASK)
#define SHOW(h) ((void *)((h) ^ MASK))

#define EVENTS_MAX 4096
struct leak_event {
    fastmm_event_type_t type;
    fastmm_leak_kind_t kind;
    uintptr_t hidden_block; /* HIDE(block): this log must not make the blocks reachable */
    size_t size, blocks;
};
static struct leak_event events[EVENTS_MAX];
static size_t event_count;

static void on_event(const fastmm_event_t *e, void *user)
{
    (void)user;
    if (event_count < EVENTS_MAX)
        events[event_count++] = (struct leak_event){e->type, e->leak_kind, HIDE(e->block), e->size, e->leak_blocks};
}

/* Overwrites the stack below the caller, where the planting functions kept their pointers. */
static __attribute__((noinline)) void clobber_stack(void)
{
    volatile char buf[32768];
    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = 0;
    escape((const void *)buf);
}

static size_t check_now(void)
{
    event_count = 0;
    fastmm_set_event_handler(on_event, NULL);
    fastmm_set_event_log("/dev/null");
    clobber_stack();
    size_t n = fastmm_leak_check();
    fastmm_set_event_log(NULL);
    fastmm_set_event_handler(NULL, NULL);
    return n;
}

/* The one LEAK_DETAIL event whose block is p (its record's first block), or NULL. */
static const struct leak_event *record_of(const void *p)
{
    const struct leak_event *found = NULL;
    for (size_t i = 0; i < event_count; i++)
        if (events[i].type == FASTMM_EVENT_LEAK_DETAIL && events[i].hidden_block == HIDE(p)) {
            ck_assert_msg(found == NULL, "block %p is in two loss records", p);
            found = &events[i];
        }
    return found;
}

static const char *kind_name(fastmm_leak_kind_t k)
{
    static const char *const names[] = {"none", "definitely lost", "indirectly lost", "possibly lost",
                                        "still reachable"};
    return (unsigned)k < 5 ? names[k] : "?";
}

static void expect_kind(const void *p, fastmm_leak_kind_t kind, size_t blocks, const char *what)
{
    const struct leak_event *e = record_of(p);
    ck_assert_msg(e != NULL, "%s (%p): no loss record (expected %s)", what, p, kind_name(kind));
    ck_assert_msg(e->kind == kind, "%s: %s, expected %s", what, kind_name(e->kind), kind_name(kind));
    ck_assert_msg(e->blocks == blocks, "%s: %zu blocks in its record, expected %zu", what, e->blocks, blocks);
}

static size_t summaries(void)
{
    size_t n = 0;
    for (size_t i = 0; i < event_count; i++)
        n += events[i].type == FASTMM_EVENT_LEAK_SUMMARY;
    return n;
}

/* ---- the planted blocks ---- */

enum { S_DEFINITE = 20000, S_LIST = 21000, S_POSSIBLE = 22000, S_GLOBAL = 23000, S_THREAD_STACK = 24000,
       S_MAIN_TLS = 25000, S_THREAD_TLS = 26000, S_REGISTERED = 27000 };

struct node {
    struct node *next;
    char payload[S_LIST - sizeof(struct node *)];
};

static volatile uintptr_t hidden_definite, hidden_list, hidden_possible;
static void *volatile global_keep;
static char *volatile interior_keep; /* points 8 bytes into the "possibly lost" block */
static __thread void *volatile main_tls_keep;

static __attribute__((noinline)) void plant_definite(void) { hidden_definite = HIDE(malloc(S_DEFINITE)); }

static __attribute__((noinline)) void plant_list(void)
{
    struct node *head = NULL;
    for (int i = 0; i < 3; i++) {
        struct node *n = malloc(sizeof *n);
        n->next = head;
        head = n;
    }
    hidden_list = HIDE(head);
}

static __attribute__((noinline)) void plant_possible(void)
{
    char *p = malloc(S_POSSIBLE);
    hidden_possible = HIDE(p);
    interior_keep = p + 8;
}

static __attribute__((noinline)) void plant_global(void) { global_keep = malloc(S_GLOBAL); }

static __attribute__((noinline)) void plant_main_tls(void) { main_tls_keep = malloc(S_MAIN_TLS); }

/* The other thread: one block on its stack, one in its TLS; it waits until told to end. */
struct holder {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int ready, done;
    uintptr_t hidden_stack, hidden_tls; /* for the test to find and free them */
};
static __thread void *volatile thread_tls_keep;

static void *holder_main(void *arg)
{
    struct holder *h = arg;
    void *volatile on_stack = malloc(S_THREAD_STACK);
    thread_tls_keep = malloc(S_THREAD_TLS);
    pthread_mutex_lock(&h->lock);
    h->hidden_stack = HIDE(on_stack);
    h->hidden_tls = HIDE(thread_tls_keep);
    h->ready = 1;
    pthread_cond_broadcast(&h->cond);
    while (!h->done)
        pthread_cond_wait(&h->cond, &h->lock);
    pthread_mutex_unlock(&h->lock);
    free(on_stack);
    free(thread_tls_keep);
    thread_tls_keep = NULL;
    return NULL;
}

static void plant_all(struct holder *h, pthread_t *t)
{
    plant_definite();
    plant_list();
    plant_possible();
    plant_global();
    plant_main_tls();
    *h = (struct holder){PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0, 0};
    ck_assert_int_eq(pthread_create(t, NULL, holder_main, h), 0);
    pthread_mutex_lock(&h->lock);
    while (!h->ready)
        pthread_cond_wait(&h->cond, &h->lock);
    pthread_mutex_unlock(&h->lock);
}

static void free_all(struct holder *h, pthread_t t)
{
    pthread_mutex_lock(&h->lock);
    h->done = 1;
    pthread_cond_broadcast(&h->cond);
    pthread_mutex_unlock(&h->lock);
    pthread_join(t, NULL);
    free(SHOW(hidden_definite));
    struct node *n = SHOW(hidden_list);
    while (n != NULL) {
        struct node *next = n->next;
        free(n);
        n = next;
    }
    free(SHOW(hidden_possible));
    free(global_keep);
    free(main_tls_keep);
    global_keep = main_tls_keep = NULL;
    interior_keep = NULL;
}

/* Guards the classification: each planted block gets exactly its kind - definitely lost (no
 * pointer), the head of a lost list definitely and its two other nodes indirectly lost, possibly
 * lost (an interior pointer only), still reachable from a global, another thread's stack, this
 * thread's static TLS and another thread's - in both modes; fastmm_leak_check() counts the lost
 * blocks (at least the five planted); one LEAK_SUMMARY. Once all are freed, no record names any. */
static void run_kinds(bool debug)
{
    struct holder h;
    pthread_t t;
    if (debug)
        fastmm_debug_enter();
    plant_all(&h, &t);
    if (debug)
        fastmm_debug_exit();
    size_t lost = check_now();
    struct node *head = SHOW(hidden_list);
    expect_kind(SHOW(hidden_definite), FASTMM_LEAK_DEFINITELY_LOST, 1, "a block nothing points to");
    expect_kind(head, FASTMM_LEAK_DEFINITELY_LOST, 1, "the head of a lost list");
    const struct leak_event *rest = record_of(head->next);
    if (rest == NULL)
        rest = record_of(head->next->next);
    ck_assert_msg(rest != NULL && rest->kind == FASTMM_LEAK_INDIRECTLY_LOST && rest->blocks == 2,
                  "the rest of a lost list: %s in %zu blocks, expected indirectly lost, 2 blocks",
                  rest != NULL ? kind_name(rest->kind) : "no record", rest != NULL ? rest->blocks : 0);
    expect_kind(SHOW(hidden_possible), FASTMM_LEAK_POSSIBLY_LOST, 1, "a block only an interior pointer reaches");
    expect_kind(global_keep, FASTMM_LEAK_STILL_REACHABLE, 1, "a block a global points to");
    expect_kind(SHOW(h.hidden_stack), FASTMM_LEAK_STILL_REACHABLE, 1, "a block on another thread's stack");
    expect_kind(main_tls_keep, FASTMM_LEAK_STILL_REACHABLE, 1, "a block in this thread's TLS");
    expect_kind(SHOW(h.hidden_tls), FASTMM_LEAK_STILL_REACHABLE, 1, "a block in another thread's TLS");
    ck_assert_msg(lost >= 5, "fastmm_leak_check() = %zu, expected the 5 planted lost blocks at least", lost);
    ck_assert_uint_eq(summaries(), 1);

    void *planted[] = {SHOW(hidden_definite), head, head->next, head->next->next, SHOW(hidden_possible),
                       global_keep, main_tls_keep, SHOW(h.hidden_stack), SHOW(h.hidden_tls)};
    free_all(&h, t);
    check_now();
    for (size_t i = 0; i < sizeof planted / sizeof planted[0]; i++)
        ck_assert_msg(record_of(planted[i]) == NULL, "freed block %zu is still in a loss record", i);
}

START_TEST(test_leak_kinds_normal) { run_kinds(false); }
END_TEST

START_TEST(test_leak_kinds_debug) { run_kinds(true); }
END_TEST

/* Guards the expected-leak registry: a registered lost block is not reported, nor is what it
 * points to (the registry is a root); unregistered, the block is definitely lost and its child
 * indirectly lost. */
static volatile uintptr_t hidden_registered, hidden_child;

static __attribute__((noinline)) void plant_registered(void)
{
    void **p = malloc(S_REGISTERED);
    p[0] = malloc(S_REGISTERED + 256);
    hidden_registered = HIDE(p);
    hidden_child = HIDE(p[0]);
    ck_assert(fastmm_leak_register(p));
}

START_TEST(test_leak_registry)
{
    plant_registered();
    check_now();
    ck_assert_msg(record_of(SHOW(hidden_registered)) == NULL, "a registered block was reported");
    const struct leak_event *child = record_of(SHOW(hidden_child));
    ck_assert_msg(child == NULL || child->kind == FASTMM_LEAK_STILL_REACHABLE,
                  "a block a registered one points to was reported lost");
    ck_assert(fastmm_leak_unregister(SHOW(hidden_registered)));
    check_now();
    expect_kind(SHOW(hidden_registered), FASTMM_LEAK_DEFINITELY_LOST, 1, "the unregistered block");
    expect_kind(SHOW(hidden_child), FASTMM_LEAK_INDIRECTLY_LOST, 1, "its child");
    free(SHOW(hidden_child));
    free(SHOW(hidden_registered));
}
END_TEST

/* Guards the report of a program that frees what it allocates: its blocks appear in no loss
 * record, even with threads that allocate and free while the check runs. */
static volatile int churn_stop;

static void *churn(void *arg)
{
    (void)arg;
    while (!__atomic_load_n(&churn_stop, __ATOMIC_RELAXED)) {
        void *p[16];
        for (int i = 0; i < 16; i++)
            p[i] = malloc((size_t)(i + 1) * 40);
        for (int i = 0; i < 16; i++)
            free(p[i]);
    }
    return NULL;
}

START_TEST(test_leak_check_while_threads_run)
{
    pthread_t t[3];
    churn_stop = 0;
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, churn, NULL), 0);
    plant_definite();
    for (int round = 0; round < 5; round++) {
        check_now();
        expect_kind(SHOW(hidden_definite), FASTMM_LEAK_DEFINITELY_LOST, 1, "a lost block, threads running");
    }
    __atomic_store_n(&churn_stop, 1, __ATOMIC_RELAXED);
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], NULL);
    void *p = SHOW(hidden_definite);
    free(p);
    check_now();
    ck_assert_msg(record_of(p) == NULL, "a freed block is still reported");
}
END_TEST

/* Guards the stop signal's handler against the signals a scan leaves pending: a thread that
 * blocks the signal through one check (counted missed) and takes it during the next has that
 * check's signal still queued when the check ends. The handler must stay installed until that
 * signal is taken (the default action of a real-time signal ends the process), then the
 * program's own disposition comes back. */
static int blocker_phase; /* 1: blocking; 2: first check over; 3: counted, second check starts; 4: done */

/* The signals queued for this user (the first number of SigQ in /proc/self/status). Read with
 * no allocation: the check holds the heap's locks while it waits for the threads. */
static long queued_signals(void)
{
    char buf[4096];
    int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = 0;
    const char *line = strstr(buf, "\nSigQ:");
    return line == NULL ? -1 : strtol(line + 6, NULL, 10);
}

static bool blocker_saw_second_signal;

static void wait_for_phase(int phase)
{
    while (__atomic_load_n(&blocker_phase, __ATOMIC_SEQ_CST) < phase)
        usleep(1000);
}

static void *blocker(void *arg)
{
    (void)arg;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGRTMAX - 2);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    __atomic_store_n(&blocker_phase, 1, __ATOMIC_SEQ_CST);
    wait_for_phase(2);
    /* the first check's signal is queued; the second check's arrives while it waits for us */
    long before = queued_signals();
    __atomic_store_n(&blocker_phase, 3, __ATOMIC_SEQ_CST);
    for (int ms = 0; ms < 5000 && !blocker_saw_second_signal; ms++) {
        blocker_saw_second_signal = before >= 0 && queued_signals() > before;
        if (!blocker_saw_second_signal)
            usleep(1000);
    }
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);
    wait_for_phase(4);
    return NULL;
}

/* How many threads /proc/self/task lists: under qemu-user its own threads too, which never take
 * a signal, so that every check counts one missed and the handler stays. */
static int tasks_listed(void)
{
    DIR *d = opendir("/proc/self/task");
    int n = 0;
    for (struct dirent *e; d != NULL && (e = readdir(d)) != NULL;)
        n += e->d_name[0] != '.';
    if (d != NULL)
        closedir(d);
    return n;
}

START_TEST(test_leak_check_signal_left_pending)
{
    struct sigaction before, after;
    ck_assert_int_eq(sigaction(SIGRTMAX - 2, NULL, &before), 0);
    ck_assert_msg(before.sa_handler == SIG_DFL, "the stop signal has a handler before any check");
    if (tasks_listed() != 1) {
        fprintf(stderr, "check_leaks: /proc/self/task lists threads this process did not start (qemu-user's); "
                        "skipped\n");
        return;
    }
    pthread_t t;
    blocker_phase = 0;
    ck_assert_int_eq(pthread_create(&t, NULL, blocker, NULL), 0);
    wait_for_phase(1);
    plant_definite();
    check_now(); /* the blocker does not stop: its signal stays queued */
    __atomic_store_n(&blocker_phase, 2, __ATOMIC_SEQ_CST);
    wait_for_phase(3);
    check_now(); /* the blocker takes the first signal and stops; the second one waits */
    expect_kind(SHOW(hidden_definite), FASTMM_LEAK_DEFINITELY_LOST, 1, "a lost block, the blocker stopped");
    __atomic_store_n(&blocker_phase, 4, __ATOMIC_SEQ_CST);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    if (!blocker_saw_second_signal)
        fprintf(stderr, "check_leaks: SigQ did not count the second check's signal here; "
                        "the blocker took both signals after that check\n");
    check_now(); /* every signal sent is taken now: the handler goes */
    ck_assert_int_eq(sigaction(SIGRTMAX - 2, NULL, &after), 0);
    ck_assert_msg(after.sa_handler == SIG_DFL, "the stop signal's handler outlived the checks");
    free(SHOW(hidden_definite));
}
END_TEST

Suite *suite_leaks(void)
{
    Suite *s = suite_create("leaks");
    /* Nor in one process with the other tests (CK_FORK=no): the planted blocks reuse addresses
     * of blocks that earlier tests had, and the memory those tests leave behind still holds such
     * words, so the expected kinds hold only in a process of the test's own. */
    if (RUNNING_ON_VALGRIND || !test_forking())
        return s;
    TCase *tc = tcase_create("reachability");
    tcase_set_timeout(tc, TEST_TIMEOUT);
    tcase_add_test(tc, test_leak_kinds_normal);
    tcase_add_test(tc, test_leak_kinds_debug);
    tcase_add_test(tc, test_leak_registry);
    suite_add_tcase(s, tc);
    tc = tcase_create("reachability_threads");
    tcase_set_timeout(tc, TEST_TIMEOUT);
#if CHECK_MAJOR_VERSION > 0 || CHECK_MINOR_VERSION >= 11
    /* CK_EXCLUDE_TAGS=scan-with-threads leaves it out: qemu-i386 7.2 corrupts the heap of threads
     * that take signals while they allocate, glibc's as well (.ci/arch-legs). */
    tcase_set_tags(tc, "scan-with-threads");
#endif
    tcase_add_test(tc, test_leak_check_while_threads_run);
    tcase_add_test(tc, test_leak_check_signal_left_pending);
    suite_add_tcase(s, tc);
    return s;
}
