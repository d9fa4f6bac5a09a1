/*
 * fork-stress.c - fork again and again while other threads allocate, free and reallocate.
 *
 * Three threads churn every kind of block (small, medium and large; malloc, calloc, realloc
 * across the managers, posix_memalign and aligned_alloc) and hand a share of their blocks to
 * each other to free (pending-free lists, frees into another thread's arena) and to the forking
 * side. A fourth thread keeps the library's other locks busy: the debug scan and the heap walk
 * (which hold a medium arena while they wait for a small one), the JSON writer, leak
 * registration, erase-mode and alignment switches. Meanwhile the program forks, round after
 * round, from the main thread or from a thread made for that round; the last quarter of the
 * rounds runs in debug mode (debug blocks everywhere, large ones remembered when freed). Each
 * child checks and frees the blocks it inherited (its parent's and blocks other threads
 * allocated), allocates every kind, calls those same API functions, and then, by the round
 * number modulo 8:
 *   0, 4, 7  leaves with _exit,
 *   1, 5     leaves with exit (the library's exit-time code runs in the child),
 *   2, 6     execs this program (--exec-child), which runs on libfastmm5 again, allocates every
 *            kind, checks that its malloc is libfastmm5's and exits 0,
 *   3        starts a thread that allocates while it forks a grandchild of its own, which does
 *            the same work and then exits (or, every other time, execs).
 * While a child lives the churning threads wait (see child_alive). A last phase forks half as
 * many times again, at least 200, while two threads free large debug blocks (see large_debug_phase).
 * A deadlock anywhere fails the test instead of hanging it: every child and grandchild has an
 * alarm (kept across exec), and the parent has one that every fork re-arms.
 *
 * Rounds: FASTMM_TEST_FORK_ROUNDS (default 100, make check's: a few seconds on a 2-core machine,
 * where a fork of this process costs tens of milliseconds; a tenth with FASTMM_TEST_SLOW=1;
 * make check-long runs 1200). The variable is not named FASTMM5_*: libfastmm5 warns about every
 * FASTMM5_ name it does not know. It prints the forks per second.
 * Exit status: 0 pass, 1 fail (the reason on standard error), 99 could not run.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <malloc.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <fastmm5.h>

#define CHILD_ALARM 20   /* seconds a child (and what it execs) may take */
#define ROUND_ALARM 60   /* seconds the parent may spend on one round */
#define BG_THREADS 3
#define BG_SLOTS 256
#define MAILBOX_CAP 512
#define GIFTS_PER_ROUND 8

/* ---------------------------------------------------------------------------------------- */
/* Helpers                                                                                    */
/* ---------------------------------------------------------------------------------------- */

static uint64_t xorshift(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1DULL;
}

/* Only the first bytes of a block are patterned: every fork copies what the threads dirty. */
#define MARK_BYTES 64

static void mark(void *p, size_t n, uint32_t seed)
{
    unsigned char *b = p;
    size_t k = n < MARK_BYTES ? n : MARK_BYTES;
    for (size_t i = 0; i < k; i++)
        b[i] = (unsigned char)(seed * 131u + i * 7u + (seed >> 8));
}

static bool marked(const void *p, size_t n, uint32_t seed)
{
    const unsigned char *b = p;
    size_t k = n < MARK_BYTES ? n : MARK_BYTES;
    for (size_t i = 0; i < k; i++)
        if (b[i] != (unsigned char)(seed * 131u + i * 7u + (seed >> 8)))
            return false;
    return true;
}

/* The parent's failures from any thread: the first one is kept and reported at the end. */
static atomic_int failures;
static char failure_msg[512];
static pthread_mutex_t failure_lock = PTHREAD_MUTEX_INITIALIZER;

__attribute__((format(printf, 1, 2))) static void fail(const char *fmt, ...)
{
    if (atomic_fetch_add(&failures, 1) != 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&failure_lock);
    vsnprintf(failure_msg, sizeof failure_msg, fmt, ap);
    pthread_mutex_unlock(&failure_lock);
    va_end(ap);
}

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---------------------------------------------------------------------------------------- */
/* What a child, a grandchild and an exec'd program do                                        */
/* ---------------------------------------------------------------------------------------- */

typedef struct block {
    void *p;
    size_t n;
    uint32_t seed;
} block_t;

/* Every kind of request, each block checked, reallocated across the managers and freed.
 * Returns 0, or the step that failed (the exit status). */
static int allocate_every_kind(uint32_t seed)
{
    static const size_t sizes[] = {0, 16, 100, 2622, 2623, 20000, 100000, 558905};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t n = sizes[i];
        unsigned char *p = malloc(n);
        if (p == NULL)
            return 10;
        mark(p, n, seed + (uint32_t)i);
        size_t grown = n + n / 2 + 1;
        unsigned char *q = realloc(p, grown);
        if (q == NULL || !marked(q, n, seed + (uint32_t)i))
            return 11;
        unsigned char *c = calloc(1, n + 5);
        if (c == NULL)
            return 12;
        for (size_t k = 0; k < n + 5 && k < 8192; k++)
            if (c[k] != 0)
                return 13;
        void *a = NULL;
        if (posix_memalign(&a, 256, n + 1) != 0 || ((uintptr_t)a & 255) != 0)
            return 14;
        void *b = aligned_alloc(4096, n + 64);
        if (b == NULL || ((uintptr_t)b & 4095) != 0)
            return 15;
        size_t shrunk = n / 3 + 1 < 4096 ? n / 3 + 1 : 4096; /* a move to a small block: little to copy */
        q = realloc(q, shrunk);
        if (q == NULL || !marked(q, shrunk < n ? shrunk : n, seed + (uint32_t)i))
            return 16;
        free(b);
        free(a);
        free(c);
        free(q);
    }
    return 0;
}

static int check_and_free(block_t *blocks, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        if (!marked(blocks[i].p, blocks[i].n, blocks[i].seed))
            return 20;
        if (fastmm_usable_size(blocks[i].p) < blocks[i].n)
            return 21;
        free(blocks[i].p);
    }
    return 0;
}

/* The program an exec'd child runs: the same allocations, on a fresh libfastmm5. */
static int exec_child_main(void)
{
    /* malloc is libfastmm5's: fastmm_usable_size would report (and abort on) another's block */
    void *p = malloc(100);
    if (p == NULL || fastmm_usable_size(p) < 100 || fastmm_usable_size(p) != malloc_usable_size(p))
        return 30;
    free(p);
    return allocate_every_kind(0xec);
}

static void exec_self(void)
{
    execl("/proc/self/exe", "fork-stress", "--exec-child", (char *)NULL);
    _exit(31); /* exec failed */
}

static void *child_helper_thread(void *arg)
{
    return allocate_every_kind((uint32_t)(uintptr_t)arg) != 0 ? (void *)1 : NULL;
}

/* Forks a grandchild while a thread of the child allocates; returns the child's exit status. */
static int fork_grandchild(uint32_t round)
{
    pthread_t th;
    if (pthread_create(&th, NULL, child_helper_thread, (void *)(uintptr_t)round) != 0)
        return 40;
    pid_t pid = fork();
    if (pid < 0)
        return 41;
    if (pid == 0) {
        alarm(CHILD_ALARM);
        int st = allocate_every_kind(round ^ 0x9c);
        if (st != 0)
            _exit(st);
        if (round % 16 == 11)
            exec_self();
        _exit(0);
    }
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    void *thread_result = NULL;
    pthread_join(th, &thread_result);
    if (thread_result != NULL)
        return 42;
    if (WIFSIGNALED(st))
        return 64 + WTERMSIG(st); /* the grandchild was killed (SIGALRM: it deadlocked) */
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        return 43;
    return 0;
}

/* The API calls that take the library's own locks (not the arenas'). */
static int use_module_locks(uint32_t round, int devnull)
{
    void *p = malloc(64);
    if (p == NULL || !fastmm_leak_register(p) || !fastmm_leak_unregister(p))
        return 50;
    free(p);
    if (!fastmm_erase_freed_begin() || !fastmm_erase_freed_end())
        return 51;
    if (!fastmm_alignment_enter(32) || !fastmm_alignment_exit(32))
        return 52;
    if (!fastmm_debug_enter() || !fastmm_debug_exit())
        return 53;
    /* the heap walks, one per child in turn (each visits every block the child inherited) */
    fastmm_state_t state;
    switch (round % 3) {
    case 0:
        if (fastmm_debug_scan() != 0)
            return 54;
        break;
    case 1:
        if (devnull >= 0)
            fastmm_write_json(devnull);
        break;
    default:
        fastmm_get_state(&state);
        break;
    }
    return 0;
}

static int devnull_fd = -1;

/* Runs in the child: never returns. */
static void child_main(uint32_t round, block_t *inherited, size_t n_inherited)
{
    signal(SIGALRM, SIG_DFL); /* the parent's handler speaks of the parent */
    alarm(CHILD_ALARM);
    struct rlimit core = {0, 0};
    setrlimit(RLIMIT_CORE, &core);
    int st = check_and_free(inherited, n_inherited);
    if (st == 0)
        st = allocate_every_kind(round);
    if (st == 0)
        st = use_module_locks(round, devnull_fd);
    if (st != 0)
        _exit(st);
    switch (round % 8) {
    case 1:
    case 5:
        exit(0);
    case 2:
    case 6:
        exec_self();
        break;
    case 3:
        _exit(fork_grandchild(round));
    default:
        _exit(0);
    }
    _exit(0);
}

/* ---------------------------------------------------------------------------------------- */
/* The churning threads                                                                       */
/* ---------------------------------------------------------------------------------------- */

typedef struct mailbox {
    pthread_mutex_t lock;
    block_t q[MAILBOX_CAP];
    size_t head, count;
} mailbox_t;

/* mailboxes[0..BG_THREADS-1]: the churning threads'; mailboxes[BG_THREADS]: the forking side's. */
static mailbox_t mailboxes[BG_THREADS + 1];
static atomic_int stop_flag;
/* While a child lives the churning threads wait: the fork has caught them wherever they were,
 * and what they would write meanwhile would only cost copy-on-write faults. Before each fork the
 * forking side waits until every one of them is at work again (progress). */
static atomic_int child_alive;
static atomic_ulong progress[BG_THREADS];
/* Blocks live in static storage: a child has no copy of the other threads' stacks. */
static block_t bg_slots[BG_THREADS][BG_SLOTS];
static atomic_ulong bg_ops;

static bool post(int to, const block_t *b)
{
    mailbox_t *m = &mailboxes[to];
    bool ok = false;
    pthread_mutex_lock(&m->lock);
    if (m->count < MAILBOX_CAP) {
        m->q[(m->head + m->count) % MAILBOX_CAP] = *b;
        m->count++;
        ok = true;
    }
    pthread_mutex_unlock(&m->lock);
    return ok;
}

static size_t take(int from, block_t *out, size_t max)
{
    mailbox_t *m = &mailboxes[from];
    size_t n = 0;
    pthread_mutex_lock(&m->lock);
    while (m->count > 0 && n < max) {
        out[n++] = m->q[m->head];
        m->head = (m->head + 1) % MAILBOX_CAP;
        m->count--;
    }
    pthread_mutex_unlock(&m->lock);
    return n;
}

static size_t random_size(uint64_t *rng)
{
    uint64_t r = xorshift(rng);
    unsigned pick = (unsigned)(r % 1000);
    r >>= 10;
    if (pick < 500)
        return (size_t)(r % 200);
    if (pick < 850)
        return (size_t)(r % 2623);
    if (pick < 990)
        return 2623 + (size_t)(r % 200000);
    return 558905 + (size_t)(r % (1u << 20));
}

static void *new_block(uint64_t *rng, size_t n)
{
    switch (xorshift(rng) % 8) {
    case 0:
        return calloc(1, n);
    case 1: {
        void *p = NULL;
        return posix_memalign(&p, 64, n) == 0 ? p : NULL;
    }
    case 2:
        return aligned_alloc(4096, n);
    default:
        return malloc(n);
    }
}

static void *background_churn(void *arg)
{
    int id = (int)(uintptr_t)arg;
    uint64_t rng = 0x9E3779B97F4A7C15ULL * (uint64_t)(id + 1);
    block_t *slots = bg_slots[id];
    uint32_t serial = (uint32_t)id << 28;
    block_t incoming[64];
    unsigned long ops = 0;
    while (!atomic_load_explicit(&stop_flag, memory_order_relaxed)) {
        if (atomic_load_explicit(&child_alive, memory_order_relaxed)) {
            usleep(100);
            continue;
        }
        atomic_fetch_add_explicit(&progress[id], 1, memory_order_relaxed);
        uint64_t r = xorshift(&rng);
        block_t *b = &slots[r % BG_SLOTS];
        unsigned action = (unsigned)((r >> 16) % 16);
        if (b->p != NULL) {
            if (!marked(b->p, b->n, b->seed))
                fail("thread %d: block of %zu bytes corrupted", id, b->n);
            if (action < 3) {
                size_t n = random_size(&rng) + 1;
                void *q = realloc(b->p, n);
                if (q == NULL) {
                    fail("thread %d: realloc(%zu -> %zu) failed", id, b->n, n);
                    continue;
                }
                if (!marked(q, n < b->n ? n : b->n, b->seed))
                    fail("thread %d: realloc(%zu -> %zu) lost the contents", id, b->n, n);
                b->p = q;
                b->n = n;
                b->seed = serial++;
                mark(q, n, b->seed);
                continue;
            }
            /* hand a block to another thread (its free goes across arenas) or to the forks */
            bool given = false;
            if (action < 6)
                given = post((id + 1 + (int)((r >> 24) % (BG_THREADS - 1))) % BG_THREADS, b);
            else if (action == 6)
                given = post(BG_THREADS, b);
            if (!given)
                free(b->p);
            b->p = NULL;
        }
        size_t n = random_size(&rng);
        void *p = new_block(&rng, n);
        if (p == NULL) {
            fail("thread %d: allocation of %zu bytes failed", id, n);
            continue;
        }
        b->p = p;
        b->n = n;
        b->seed = serial++;
        mark(p, n, b->seed);
        if ((++ops & 31) == 0) {
            size_t got;
            while ((got = take(id, incoming, 64)) != 0)
                for (size_t i = 0; i < got; i++) {
                    if (!marked(incoming[i].p, incoming[i].n, incoming[i].seed))
                        fail("thread %d: block from another thread corrupted", id);
                    free(incoming[i].p);
                }
            atomic_fetch_add_explicit(&bg_ops, 32, memory_order_relaxed);
        }
    }
    return NULL;
}

/* Every 2 ms or so: a heap walk in turn and the module locks. */
static atomic_ulong scans;

static void count_block(const fastmm_block_info_t *b, void *user)
{
    (void)b;
    (*(size_t *)user)++;
}

static void *background_scanner(void *arg)
{
    (void)arg;
    while (!atomic_load_explicit(&stop_flag, memory_order_relaxed)) {
        if (atomic_load_explicit(&child_alive, memory_order_relaxed)) {
            usleep(200);
            continue;
        }
        /* one heap walk per turn: each visits every block */
        unsigned long turn = atomic_load_explicit(&scans, memory_order_relaxed);
        size_t corrupt = 0, blocks = 0;
        fastmm_state_t state;
        switch (turn % 4) {
        case 0:
            corrupt = fastmm_debug_scan();
            break;
        case 1:
            fastmm_walk_blocks(count_block, &blocks, NULL);
            break;
        case 2:
            fastmm_get_state(&state);
            break;
        default:
            if (devnull_fd >= 0)
                fastmm_write_json(devnull_fd);
            break;
        }
        if (corrupt != 0)
            fail("the debug scan found %zu corrupt blocks", corrupt);
        void *p = malloc(32);
        if (p != NULL) {
            fastmm_leak_register(p);
            fastmm_leak_unregister(p);
            free(p);
        }
        /* switched straight back: only their locks matter here (erasing costs page faults) */
        fastmm_erase_freed_begin();
        fastmm_erase_freed_end();
        fastmm_alignment_enter(64);
        fastmm_alignment_exit(64);
        atomic_fetch_add_explicit(&scans, 1, memory_order_relaxed);
        usleep(2000);
    }
    return NULL;
}

/* ---------------------------------------------------------------------------------------- */
/* The rounds                                                                                 */
/* ---------------------------------------------------------------------------------------- */

static atomic_uint current_round;
static unsigned long forks_done, grandchildren, execs;

static void on_round_alarm(int sig)
{
    (void)sig;
    char msg[128];
    int n = snprintf(msg, sizeof msg, "fork-stress: FAIL: round %u took over %d s: deadlock in the parent\n",
                     atomic_load(&current_round), ROUND_ALARM);
    if (n > 0 && write(2, msg, (size_t)n) < 0)
        n = 0;
    _exit(1);
}

/* One fork: inherited blocks made by the forking thread and gifts from the churning threads. */
static void *do_round(void *arg)
{
    uint32_t round = (uint32_t)(uintptr_t)arg;
    static const size_t own_sizes[] = {40, 1000, 20000, 300000, 700000};
    block_t inherited[sizeof own_sizes / sizeof own_sizes[0] + GIFTS_PER_ROUND + 1];
    size_t n = 0;
    for (size_t i = 0; i < sizeof own_sizes / sizeof own_sizes[0]; i++) {
        void *p = malloc(own_sizes[i]);
        if (p == NULL) {
            fail("round %u: malloc(%zu) failed before the fork", round, own_sizes[i]);
            return NULL;
        }
        inherited[n] = (block_t){p, own_sizes[i], round * 16 + (uint32_t)i};
        mark(p, own_sizes[i], inherited[n].seed);
        n++;
    }
    void *aligned = NULL;
    if (posix_memalign(&aligned, 1 << 16, 5000) != 0) {
        fail("round %u: posix_memalign failed before the fork", round);
        return NULL;
    }
    inherited[n] = (block_t){aligned, 5000, round * 16 + 9};
    mark(aligned, 5000, inherited[n].seed);
    n++;
    n += take(BG_THREADS, inherited + n, GIFTS_PER_ROUND);
    for (size_t i = 0; i < n; i++)
        if (!marked(inherited[i].p, inherited[i].n, inherited[i].seed))
            fail("round %u: a block to be inherited was corrupted before the fork", round);

    /* the churning threads are at work again (up to 5 ms for each to do 4 operations) */
    unsigned long seen[BG_THREADS];
    for (int i = 0; i < BG_THREADS; i++)
        seen[i] = atomic_load(&progress[i]);
    for (int waited = 0, all = 0; !all && waited < 50; waited++) {
        all = 1;
        for (int i = 0; i < BG_THREADS; i++)
            all &= atomic_load(&progress[i]) - seen[i] >= 4;
        if (!all)
            usleep(100);
    }

    pid_t pid = fork();
    if (pid < 0) {
        fail("round %u: fork failed (errno %d)", round, errno);
    } else if (pid == 0) {
        child_main(round, inherited, n);
    } else {
        atomic_store(&child_alive, 1);
        int st = 0;
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
            ;
        atomic_store(&child_alive, 0);
        static const char *const endings[8] = {"_exit", "exit", "exec", "grandchild", "_exit", "exit", "exec", "_exit"};
        if (WIFSIGNALED(st))
            fail("round %u (%s child): the child was killed by signal %d%s", round, endings[round % 8], WTERMSIG(st),
                 WTERMSIG(st) == SIGALRM ? " (its alarm: it deadlocked)" : "");
        else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            fail("round %u (%s child): the child exited with status %d%s", round, endings[round % 8], WEXITSTATUS(st),
                 WEXITSTATUS(st) == 64 + SIGALRM ? " (the grandchild deadlocked)" : "");
    }
    /* the parent's copies are freed here, by this thread, while the threads churn on */
    for (size_t i = 0; i < n; i++)
        free(inherited[i].p);
    return NULL;
}

/* The last phase: debug mode remembers each freed large block (for double-free reports) under
 * a lock of its own. Two threads free large debug blocks back to back while the main thread
 * forks and each child frees one: a thread holding that lock when its write to the record
 * faults (copy-on-write after the previous fork) is still holding it when the next fork copies
 * the heap. */
static atomic_int large_stop;

static void *large_debug_churn(void *arg)
{
    (void)arg;
    while (!atomic_load_explicit(&large_stop, memory_order_relaxed))
        free(malloc(600000));
    return NULL;
}

static void large_debug_phase(long forks)
{
    unsigned depth = fastmm_debug_stack_depth();
    fastmm_debug_set_stack_depth(0);
    fastmm_debug_enter();
    atomic_store(&large_stop, 0);
    pthread_t th[2];
    int started = 0;
    for (; started < 2; started++)
        if (pthread_create(&th[started], NULL, large_debug_churn, NULL) != 0) {
            fail("large debug phase: pthread_create failed");
            break;
        }
    for (long r = 0; r < forks && atomic_load(&failures) == 0; r++) {
        alarm(ROUND_ALARM);
        pid_t pid = fork();
        if (pid < 0) {
            fail("large debug phase: fork failed (errno %d)", errno);
            break;
        }
        if (pid == 0) {
            signal(SIGALRM, SIG_DFL);
            alarm(CHILD_ALARM);
            free(malloc(600000));
            _exit(0);
        }
        int st = 0;
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
            ;
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            fail("large debug phase, fork %ld: the child %s %d%s", r, WIFSIGNALED(st) ? "was killed by signal" : "exited with",
                 WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st),
                 WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM ? " (its alarm: it deadlocked)" : "");
        forks_done++;
    }
    atomic_store(&large_stop, 1);
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    fastmm_debug_exit();
    fastmm_debug_set_stack_depth(depth);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--exec-child") == 0)
        return exec_child_main();
    if (argc > 1) {
        fprintf(stderr, "usage: fork-stress [--exec-child]\n");
        return 99;
    }
    long rounds = 100;
    const char *env = getenv("FASTMM_TEST_FORK_ROUNDS");
    if (env != NULL && *env != '\0') {
        char *end;
        rounds = strtol(env, &end, 10);
        if (*end != '\0' || rounds < 1) {
            fprintf(stderr, "fork-stress: FASTMM_TEST_FORK_ROUNDS=%s: expected a positive number\n", env);
            return 99;
        }
    } else if (getenv("FASTMM_TEST_SLOW") != NULL && *getenv("FASTMM_TEST_SLOW") != '\0') {
        rounds /= 10;
    }

    signal(SIGALRM, on_round_alarm);
    devnull_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
    for (int i = 0; i <= BG_THREADS; i++)
        pthread_mutex_init(&mailboxes[i].lock, NULL);
    pthread_t th[BG_THREADS + 1];
    for (int i = 0; i <= BG_THREADS; i++)
        if (pthread_create(&th[i], NULL, i < BG_THREADS ? background_churn : background_scanner,
                           (void *)(uintptr_t)i) != 0) {
            fprintf(stderr, "fork-stress: pthread_create failed\n");
            return 99;
        }
    long debug_from = rounds - rounds / 4;
    bool debug = false;
    double debug_start = 0;
    double start = now_seconds();
    fflush(NULL);
    for (long r = 0; r < rounds && atomic_load(&failures) == 0; r++) {
        uint32_t round = (uint32_t)r;
        atomic_store(&current_round, round);
        alarm(ROUND_ALARM);
        if (r == debug_from && r > 0) {
            debug_start = now_seconds();
            fastmm_debug_set_stack_depth(4); /* traces cost; 4 frames still exercise the unwinder */
            debug = fastmm_debug_enter();
        }
        if (round % 3 == 1) {
            /* from a thread other than main, made for this round */
            pthread_t forker;
            if (pthread_create(&forker, NULL, do_round, (void *)(uintptr_t)round) != 0) {
                fail("round %u: pthread_create failed", round);
                break;
            }
            pthread_join(forker, NULL);
        } else {
            do_round((void *)(uintptr_t)round);
        }
        forks_done++;
        if (round % 8 == 3)
            grandchildren++;
        if (round % 8 == 2 || round % 8 == 6 || round % 16 == 11)
            execs++;
    }
    double end = now_seconds();
    atomic_store(&stop_flag, 1);
    for (int i = 0; i <= BG_THREADS; i++)
        pthread_join(th[i], NULL);
    if (debug)
        fastmm_debug_exit();
    unsigned long main_forks = forks_done;
    /* About 1% of them catch that lock held: at least 200 (87% of runs), even in a short run. */
    long large_forks = rounds / 2 > 200 ? rounds / 2 : 200;
    double large_start = now_seconds();
    if (atomic_load(&failures) == 0)
        large_debug_phase(large_forks);
    double large_time = now_seconds() - large_start, elapsed = now_seconds() - start;
    alarm(0);
    /* what is still in the mailboxes and slots goes back too */
    block_t rest[64];
    for (int i = 0; i <= BG_THREADS; i++) {
        size_t got;
        while ((got = take(i, rest, 64)) != 0)
            for (size_t k = 0; k < got; k++)
                free(rest[k].p);
    }
    for (int i = 0; i < BG_THREADS; i++)
        for (int k = 0; k < BG_SLOTS; k++)
            free(bg_slots[i][k].p);

    unsigned long total = forks_done + grandchildren;
    struct rusage self, children;
    getrusage(RUSAGE_SELF, &self);
    getrusage(RUSAGE_CHILDREN, &children);
    printf("fork-stress: %lu rounds with 3 threads churning and 1 walking (the last %ld in debug mode, %.1f s), then "
           "%lu forks with large debug blocks freed (%.1f s): %lu forks (%lu of them grandchildren), %lu execs, in "
           "%.1f s: %.0f forks/s; %lu background operations, %lu walks; CPU %.1f s here, %.1f s in children\n",
           main_forks, rounds - debug_from, debug ? end - debug_start : 0.0, forks_done - main_forks, large_time, total,
           grandchildren, execs, elapsed, elapsed > 0 ? (double)total / elapsed : 0.0, atomic_load(&bg_ops),
           atomic_load(&scans),
           (double)(self.ru_utime.tv_sec + self.ru_stime.tv_sec) + (self.ru_utime.tv_usec + self.ru_stime.tv_usec) / 1e6,
           (double)(children.ru_utime.tv_sec + children.ru_stime.tv_sec) +
               (children.ru_utime.tv_usec + children.ru_stime.tv_usec) / 1e6);
    if (atomic_load(&failures) != 0) {
        fprintf(stderr, "fork-stress: FAIL: %d failure(s); the first: %s\n", atomic_load(&failures), failure_msg);
        return 1;
    }
    return 0;
}
