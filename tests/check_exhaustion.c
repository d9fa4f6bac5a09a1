/*
 * check_exhaustion.c - running out of memory.
 *
 * Under an address-space limit (setrlimit RLIMIT_AS: the OS refuses mmap/mremap) and under
 * libfastmm5's own limit (fastmm_set_memory_limit, with FastMM5's 32 MiB grace), every kind of
 * request is allocated until it is refused: the refusal must be NULL with errno ENOMEM
 * (posix_memalign: the return value ENOMEM, and errno ENOMEM as glibc's), nothing may crash, no event may
 * be reported (an OS refusal is not a corruption), a failed realloc leaves its block intact, the
 * blocks kept over the exhaustion keep their contents, and once memory is freed every kind of
 * request is served again, and as much of it as the first time (nothing leaked on the failure
 * paths). Also in debug mode, and with three threads running out together.
 *
 * Every case runs in a child process of its own (fork), also when Check does not fork
 * (CK_FORK=no): the limits, debug mode and the exhausted heap stay in that child. The child
 * reports a failure as one line on a pipe and exits 1; the parent asserts on its status. An
 * alarm ends a hung child. The RLIMIT_AS cases are skipped where the limit is not enforced (a
 * child probes it first): under Valgrind, whose own memory would fall under it, and under
 * qemu-user, which ignores it; there, and with FASTMM_TEST_SLOW=1, the headroom is smaller.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check_suites.h"
#include "helpers.h"


#define MIB ((size_t)1 << 20)
#define GRACE (32 * MIB)   /* FastMM5's grace amount, added once when the limit is first hit */
#define CHILD_SECONDS 60   /* a child still running after this is killed by SIGALRM */

enum limit_mode { BY_RLIMIT, BY_FASTMM };
static const char *const mode_names[] = {"RLIMIT_AS", "fastmm_set_memory_limit"};

static bool rlimit_enforced(void);

/* Memory the limit leaves for the test to allocate. What costs is the page faults (tens of
 * microseconds each on some virtual machines); debug blocks also take a stack trace each. */
static size_t headroom(bool debug)
{
    if (test_slow() || !rlimit_enforced())
        return (debug ? 24 : 32) * MIB;
    return (debug ? 48 : 128) * MIB;
}

/* ------------------------------------------------------------------------------------------ */
/* The child process                                                                            */
/* ------------------------------------------------------------------------------------------ */

static int child_fd = -1;          /* the child's end of the report pipe */
static atomic_int events_seen;
static char first_event[200];

/* Runs inside the allocator: no allocation, copies the start of the first report. */
static void on_event(const fastmm_event_t *event, void *user)
{
    (void)user;
    if (atomic_fetch_add(&events_seen, 1) == 0 && event->text != NULL) {
        size_t n = 0;
        while (n < sizeof first_event - 1 && event->text[n] != '\0') {
            first_event[n] = event->text[n] == '\n' ? ' ' : event->text[n];
            n++;
        }
        first_event[n] = '\0';
    }
}

/* Writes the message to the parent and exits 1 (from any thread: the whole child ends). The
 * formats used here make vsnprintf work on the stack only, so it works with no memory left. */
__attribute__((format(printf, 1, 2), noreturn)) static void child_fail(const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (n < 0)
        n = 0;
    if ((size_t)n >= sizeof msg)
        n = (int)sizeof msg - 1;
    if (child_fd >= 0 && write(child_fd, msg, (size_t)n) < 0)
        n = 0;
    _exit(1);
}

#define CHILD_REQUIRE(cond, ...)            \
    do {                                    \
        if (!(cond))                        \
            child_fail(__VA_ARGS__);        \
    } while (0)

static void check_no_events(const char *when)
{
    int n = atomic_load(&events_seen);
    CHILD_REQUIRE(n == 0, "%s: %d event(s) reported; the first: %s", when, n, first_event);
}

/* Grows the stack now: with RLIMIT_AS used up, growing it later would be a SIGSEGV. */
__attribute__((noinline)) static void prefault_stack(void)
{
    volatile char buf[256 * 1024];
    for (size_t i = 0; i < sizeof buf; i += 1024)
        buf[i] = 0;
}

typedef void (*child_body_t)(int arg);

/* Runs body(arg) in a child process and fails the test with the child's message if it does
 * not exit 0 (a failure, a crash, an event, or the alarm). */
static void run_child(const char *what, child_body_t body, int arg)
{
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        close(fds[0]);
        child_fd = fds[1];
        no_core_dump();
        /* Under qemu-user or Valgrind (where the RLIMIT_AS probe fails) every allocation runs
         * many times slower, debug mode's trace capture most: the alarm is only for a hang. */
        alarm(rlimit_enforced() ? CHILD_SECONDS : 5 * CHILD_SECONDS);
        fastmm_set_error_action(FASTMM_ON_ERROR_CONTINUE);
        fastmm_set_event_handler(on_event, NULL);
        body(arg);
        check_no_events("at the end");
#ifdef VALGRIND_CLO_CHANGE
        /* the child's copy of the parent's heap is not this test's business */
        VALGRIND_CLO_CHANGE("--leak-check=no");
#endif
        _exit(0);
    }
    close(fds[1]);
    char msg[600];
    size_t len = 0;
    for (;;) {
        ssize_t n = read(fds[0], msg + len, sizeof msg - 1 - len);
        if (n > 0 && (len += (size_t)n) < sizeof msg - 1)
            continue;
        if (n < 0 && errno == EINTR)
            continue;
        break;
    }
    msg[len] = '\0';
    close(fds[0]);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: the child %s %d: %s", what,
                  WIFSIGNALED(st) ? "was killed by signal" : "exited with status",
                  WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st), len != 0 ? msg : "(no message)");
}

/* The process's address space in bytes (VmSize, what RLIMIT_AS limits), read without stdio. */
static size_t vm_bytes(void)
{
    char buf[128];
    int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    CHILD_REQUIRE(fd >= 0, "cannot open /proc/self/statm");
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    CHILD_REQUIRE(n > 0, "cannot read /proc/self/statm");
    size_t pages = 0;
    for (ssize_t i = 0; i < n && buf[i] >= '0' && buf[i] <= '9'; i++)
        pages = pages * 10 + (size_t)(buf[i] - '0');
    return pages * (size_t)sysconf(_SC_PAGESIZE);
}

/* Whether the kernel enforces RLIMIT_AS here: a child sets it 64 MiB above its address space
 * and must be refused a 256 MiB PROT_NONE mapping. Valgrind and qemu-user do not pass the limit
 * on (it would hit their own memory). Asked once, in the parent, before the cases fork. */
static bool rlimit_enforced(void)
{
    static int known = -1;
    if (known >= 0)
        return known;
    known = 0;
    if (RUNNING_ON_VALGRIND)
        return false;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        struct rlimit rl;
        if (getrlimit(RLIMIT_AS, &rl) != 0)
            _exit(2);
        rl.rlim_cur = vm_bytes() + 64 * MIB;
        if (setrlimit(RLIMIT_AS, &rl) != 0)
            _exit(3);
        void *p = mmap(NULL, 256 * MIB, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        _exit(p == MAP_FAILED && errno == ENOMEM ? 0 : 1);
    }
    int st = 0;
    while (pid > 0 && waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    known = pid > 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0;
    if (!known)
        fprintf(stderr, "exhaustion: RLIMIT_AS is not enforced here (an emulator?): its cases are skipped\n");
    return known;
}

/* Puts the limit in force: `head` bytes more than now. Returns the limit in its own terms
 * (address space, or fastmm_os_memory()). */
static size_t set_limit(int mode, size_t head)
{
    if (mode == BY_RLIMIT) {
        prefault_stack();
        struct rlimit rl;
        CHILD_REQUIRE(getrlimit(RLIMIT_AS, &rl) == 0, "getrlimit failed");
        size_t limit = vm_bytes() + head;
        rl.rlim_cur = limit; /* the hard limit stays: lift_limit restores it */
        CHILD_REQUIRE(setrlimit(RLIMIT_AS, &rl) == 0, "setrlimit(RLIMIT_AS, %zu) failed (errno %d)", limit, errno);
        return limit;
    }
    size_t limit = fastmm_os_memory() + head;
    fastmm_set_memory_limit(limit);
    CHILD_REQUIRE(fastmm_memory_limit() == limit, "fastmm_memory_limit() %zu, set %zu", fastmm_memory_limit(), limit);
    return limit;
}

static void lift_limit(int mode)
{
    if (mode == BY_RLIMIT) {
        struct rlimit rl;
        CHILD_REQUIRE(getrlimit(RLIMIT_AS, &rl) == 0, "getrlimit failed");
        rl.rlim_cur = rl.rlim_max;
        CHILD_REQUIRE(setrlimit(RLIMIT_AS, &rl) == 0, "lifting RLIMIT_AS failed");
    } else {
        fastmm_set_memory_limit(0);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Blocks, chained through themselves (no table to size or allocate)                           */
/* ------------------------------------------------------------------------------------------ */

/* The first 32 bytes of every block the tests keep; a pattern fills the rest. */
typedef struct node {
    struct node *next;
    size_t size;    /* requested bytes */
    uint32_t seed;
    int kind;
} node_t;
#define NODE_BYTES 32

typedef struct list {
    node_t *head;
    size_t count;
    size_t bytes;       /* requested bytes of all blocks */
    uint32_t next_seed;
} list_t;

enum kind {
    K_SMALL,        /* malloc(100) */
    K_MEDIUM,       /* malloc(20000) */
    K_LARGE,        /* malloc(4 MiB) */
    K_CALLOC,       /* calloc(1, n), n cycling through small, medium and large sizes */
    K_ALIGN_SMALL,  /* memalign(64, 200): a small class that is a multiple of 64 */
    K_ALIGN_MEDIUM, /* aligned_alloc(4096, 3000): the medium manager's aligned path */
    K_ALIGN_LARGE,  /* posix_memalign(1 MiB, 100000): a large mapping trimmed to the alignment */
    K_ALLOCATING,   /* the kinds above allocate blocks of their own; the ones below are cases */
    K_REALLOC = K_ALLOCATING,
    K_HUGE,
    K_COUNT
};

static const char *const kind_names[K_COUNT] = {
    "malloc(100)", "malloc(20000)", "malloc(4 MiB)", "calloc", "memalign(64, 200)", "aligned_alloc(4096, 3000)",
    "posix_memalign(1 MiB, 100000)", "realloc", "huge requests",
};

static const size_t calloc_sizes[] = {100, 3000, 20000, 600000};

/* The blocks of an exhaustion are patterned in full up to 4 KiB; bigger ones in their first
 * 256 and last 64 bytes and one byte every 64 KiB: enough to see a block that overlaps another,
 * without a page fault for every page. */
#define MARK_STRIDE 65536

static void mark(void *p, size_t n, uint32_t seed)
{
    if (n <= 4096) {
        fill_pattern(p, n, seed);
        return;
    }
    uint8_t *b = p;
    uint64_t key = pat_key(seed);
    fill_pattern(p, 256, seed);
    for (size_t i = MARK_STRIDE; i < n; i += MARK_STRIDE)
        b[i] = pat_byte(key, i);
    for (size_t i = n - 64; i < n; i++)
        b[i] = pat_byte(key, i);
}

/* The offset of the first byte mark() set that differs, or SIZE_MAX. */
static size_t check_mark(const void *p, size_t n, uint32_t seed)
{
    if (n <= 4096)
        return check_pattern(p, n, seed);
    const uint8_t *b = p;
    uint64_t key = pat_key(seed);
    size_t bad = check_pattern(p, 256, seed);
    if (bad != SIZE_MAX)
        return bad;
    for (size_t i = MARK_STRIDE; i < n; i += MARK_STRIDE)
        if (b[i] != pat_byte(key, i))
            return i;
    for (size_t i = n - 64; i < n; i++)
        if (b[i] != pat_byte(key, i))
            return i;
    return SIZE_MAX;
}

static void adopt(list_t *l, void *p, size_t size, int kind)
{
    node_t *nd = p;
    nd->next = l->head;
    nd->size = size;
    nd->seed = l->next_seed++;
    nd->kind = kind;
    mark((char *)p + NODE_BYTES, size - NODE_BYTES, nd->seed);
    l->head = nd;
    l->count++;
    l->bytes += size;
}

static void verify_node(const node_t *nd, const char *when)
{
    size_t bad = check_mark((const char *)nd + NODE_BYTES, nd->size - NODE_BYTES, nd->seed);
    CHILD_REQUIRE(bad == SIZE_MAX, "%s: block %p of %zu bytes (%s) damaged at offset %zu", when, (const void *)nd,
                  nd->size, kind_names[nd->kind], bad + NODE_BYTES);
    size_t usable = fastmm_usable_size(nd);
    CHILD_REQUIRE(usable >= nd->size, "%s: block %p of %zu bytes (%s) has a usable size of %zu", when,
                  (const void *)nd, nd->size, kind_names[nd->kind], usable);
}

static void free_list(list_t *l, const char *when)
{
    for (node_t *nd = l->head; nd != NULL;) {
        node_t *next = nd->next;
        verify_node(nd, when);
        free(nd);
        nd = next;
    }
    l->head = NULL;
    l->count = l->bytes = 0;
}

/* Moves up to `max` blocks, spread over the list, from `from` to `to`. */
static void keep_some(list_t *from, list_t *to, size_t max)
{
    size_t stride = from->count / max + 1;
    node_t **link = &from->head;
    for (size_t i = 0; *link != NULL; i++) {
        node_t *nd = *link;
        if (i % stride == stride / 2) {
            *link = nd->next;
            from->count--;
            from->bytes -= nd->size;
            nd->next = to->head;
            to->head = nd;
            to->count++;
            to->bytes += nd->size;
        } else {
            link = &nd->next;
        }
    }
}

/* One request of an allocating kind. NULL when it was refused, after checking that it was
 * refused the way glibc refuses. A block must have the kind's alignment; calloc's is zero. */
static void *try_alloc(int kind, size_t i, size_t *size_out)
{
    void *p = NULL;
    size_t n = 0, align = FASTMM_MIN_ALIGNMENT;
    errno = 0;
    switch (kind) {
    case K_SMALL:
        p = malloc(n = 100);
        break;
    case K_MEDIUM:
        p = malloc(n = 20000);
        break;
    case K_LARGE:
        p = malloc(n = 4 * MIB);
        break;
    case K_CALLOC:
        n = calloc_sizes[i % (sizeof calloc_sizes / sizeof calloc_sizes[0])];
        p = calloc(1, n);
        break;
    case K_ALIGN_SMALL:
        p = memalign(align = 64, n = 200);
        break;
    case K_ALIGN_MEDIUM:
        p = aligned_alloc(align = 4096, n = 3000);
        break;
    case K_ALIGN_LARGE: {
        errno = EXDEV; /* posix_memalign's ENOMEM is also left in errno, as glibc's */
        int rc = posix_memalign(&p, align = MIB, n = 100000);
        if (rc != 0) {
            CHILD_REQUIRE(rc == ENOMEM, "posix_memalign refused with %d, not ENOMEM", rc);
            CHILD_REQUIRE(errno == ENOMEM, "posix_memalign left errno %d, not ENOMEM", errno);
            CHILD_REQUIRE(p == NULL, "posix_memalign failed but wrote %p", p);
            return NULL;
        }
        CHILD_REQUIRE(p != NULL, "posix_memalign returned 0 and NULL");
        break;
    }
    default:
        child_fail("try_alloc: kind %d", kind);
    }
    if (p == NULL) {
        CHILD_REQUIRE(errno == ENOMEM, "%s refused with errno %d, not ENOMEM", kind_names[kind], errno);
        return NULL;
    }
    CHILD_REQUIRE(((uintptr_t)p & (align - 1)) == 0, "%s returned %p, not %zu-byte aligned", kind_names[kind], p, align);
    if (kind == K_CALLOC) {
        const unsigned char *b = p;
        size_t step = n <= 20000 ? 1 : MARK_STRIDE / 4;
        for (size_t k = 0; k < n; k += step)
            CHILD_REQUIRE(b[k] == 0, "calloc(1, %zu): byte %zu is %#x", n, k, b[k]);
        CHILD_REQUIRE(b[n - 1] == 0, "calloc(1, %zu): the last byte is %#x", n, b[n - 1]);
    }
    *size_out = n;
    return p;
}

/* Set by exhaust(): the index of the refused request (calloc's size depends on it). */
static size_t refused_index;

/* Allocates blocks of `kind` onto l until one is refused; returns how many were served. */
static size_t exhaust(int kind, list_t *l, size_t head)
{
    size_t cap = 2 * head + GRACE + 64 * MIB, start = l->bytes; /* far more than the limit allows */
    for (size_t i = 0;; i++) {
        CHILD_REQUIRE(l->bytes - start <= cap, "%s: %zu blocks, %zu bytes, and not one refused: the limit is not in force",
                      kind_names[kind], i, l->bytes - start);
        size_t size;
        void *p = try_alloc(kind, i, &size);
        if (p == NULL) {
            refused_index = i;
            return i;
        }
        adopt(l, p, size, kind);
    }
}

/* Four blocks of every allocating kind at once, filled, checked and freed, and a realloc that
 * walks one block through the three managers. Each request must be served; with `strict`
 * false only `must` must be (the others may still be refused, the proper way). */
static void all_kinds_work(const char *when, int must, bool strict)
{
    list_t l = {NULL, 0, 0, 0x51000000u};
    for (int k = 0; k < K_ALLOCATING; k++)
        for (size_t rep = 0; rep < 4; rep++) {
            size_t size;
            void *p = try_alloc(k, rep, &size);
            CHILD_REQUIRE(p != NULL || (!strict && k != must), "%s: %s was refused", when, kind_names[k]);
            if (p != NULL)
                adopt(&l, p, size, k);
        }
    free_list(&l, when);
    if (!strict)
        return;
    static const size_t steps[] = {16, 3000, 100000, 2 * MIB, 3000, 100};
    unsigned char *p = NULL;
    size_t have = 0;
    for (size_t s = 0; s < sizeof steps / sizeof steps[0]; s++) {
        unsigned char *q = realloc(p, steps[s]);
        CHILD_REQUIRE(q != NULL, "%s: realloc to %zu bytes was refused", when, steps[s]);
        size_t keep = have < steps[s] ? have : steps[s];
        size_t bad = check_pattern(q, keep, 0x5eed);
        CHILD_REQUIRE(bad == SIZE_MAX, "%s: realloc %zu -> %zu lost byte %zu", when, have, steps[s], bad);
        fill_pattern(q, steps[s], 0x5eed);
        p = q;
        have = steps[s];
    }
    free(p);
}

/* ------------------------------------------------------------------------------------------ */
/* The cases                                                                                    */
/* ------------------------------------------------------------------------------------------ */

#define CASE_ARG(kind, mode, debug) ((kind) | (mode) << 8 | (debug) << 16)
#define CASE_KIND(arg) ((arg) & 0xff)
#define CASE_MODE(arg) (((arg) >> 8) & 0xff)
#define CASE_DEBUG(arg) (((arg) >> 16) & 0xff)

/* Debug mode's default options keep every small span (FASTMM_DEBUG_NEVER_FREE_SMALL_SPANS):
 * memory that small debug blocks once used stays with the small blocks, so after an exhaustion
 * by small blocks only small requests are served again. */
static bool pins_small_spans(int kind, bool debug)
{
    return debug && (fastmm_debug_options() & FASTMM_DEBUG_NEVER_FREE_SMALL_SPANS) &&
           (kind == K_SMALL || kind == K_CALLOC || kind == K_ALIGN_SMALL);
}

/* How many blocks the second exhaustion must reach, from the first count: three quarters,
 * except for aligned_alloc(4096, 3000) in debug mode, three fifths: debug mode's default
 * never-merge option keeps a freed block apart from a free one before it, so an aligned block
 * taken from the freed memory leaves fragments that later ones cannot use (66-74% measured under
 * RLIMIT_AS with medium spans carved bottom up, depending on where the first round's blocks
 * fell; 108% when they were carved top down). A leak on the failure path would take far more
 * than that. */
static size_t second_share_bound(size_t first, int kind, bool debug)
{
    return debug && kind == K_ALIGN_MEDIUM ? first * 3 / 5 : first * 3 / 4;
}

/* The part of the headroom a kind must get before its first refusal is 1/this. Debug blocks
 * carry a header and two stack traces; aligned_alloc(4096, 3000) carves 7 KiB per block and
 * frees the 4 KiB around it in pieces that requests like it cannot use (42% measured);
 * posix_memalign(1 MiB, 100000) maps 192 KiB, the 64-byte header taking a 64 KiB chunk of its own
 * in front of the aligned pointer (50% measured). */
static size_t min_share(int kind, bool debug)
{
    return debug ? 8 : kind == K_ALIGN_MEDIUM || kind == K_ALIGN_LARGE ? 3 : 2;
}

/* One allocating kind: exhaust (in FastMM5's terms: hit the limit, use the grace, be refused
 * again), keep a few blocks, free the rest, see every kind served, exhaust again as far as the
 * first time, free, and check the kept blocks. */
static void exhaust_case(int arg)
{
    int kind = CASE_KIND(arg), mode = CASE_MODE(arg);
    bool debug = CASE_DEBUG(arg) != 0;
    char when[160];
    snprintf(when, sizeof when, "%s%s under %s", kind_names[kind], debug ? " in debug mode" : "", mode_names[mode]);
    if (debug)
        fastmm_debug_enter();
    size_t head = headroom(debug);
    size_t os_start = fastmm_os_memory();
    size_t limit = set_limit(mode, head);
    list_t blocks = {NULL, 0, 0, 0x10000000u}, kept = {NULL, 0, 0, 0};

    size_t first = exhaust(kind, &blocks, head);
    size_t first_bytes = blocks.bytes;
    check_no_events(when);
    CHILD_REQUIRE(blocks.bytes >= head / min_share(kind, debug),
                  "%s: refused after %zu blocks, %zu bytes, of a %zu-byte headroom", when, first, blocks.bytes, head);
    size_t graced = 0;
    if (mode == BY_FASTMM) {
        CHILD_REQUIRE(fastmm_os_memory() <= limit, "%s: OS memory %zu over the limit %zu", when, fastmm_os_memory(), limit);
        CHILD_REQUIRE(fastmm_memory_limit() == limit + GRACE, "%s: limit %zu after the first refusal, expected %zu",
                      when, fastmm_memory_limit(), limit + GRACE);
        graced = exhaust(kind, &blocks, head);
        CHILD_REQUIRE(graced >= 1, "%s: nothing served from the grace amount", when);
        CHILD_REQUIRE(fastmm_os_memory() <= limit + GRACE, "%s: OS memory %zu over the limit plus grace %zu", when,
                      fastmm_os_memory(), limit + GRACE);
        CHILD_REQUIRE(fastmm_memory_limit() == limit + GRACE, "%s: the grace was given twice (limit %zu)", when,
                      fastmm_memory_limit());
    }
    size_t size;
    CHILD_REQUIRE(try_alloc(kind, refused_index, &size) == NULL, "%s: refused, then served with nothing freed", when);
    check_no_events(when);

    keep_some(&blocks, &kept, 4);
    free_list(&blocks, "freeing after the exhaustion");
    check_no_events(when);
    all_kinds_work("after the exhaustion was freed", kind, !pins_small_spans(kind, debug));

    /* As much again (less the kept blocks): a failure path that leaked memory would show here. */
    size_t again = exhaust(kind, &blocks, head);
    CHILD_REQUIRE(again + kept.count >= second_share_bound(first + graced, kind, debug),
                  "%s: %zu blocks the first time (%zu more from the grace), %zu the second (%zu kept)", when, first, graced,
                  again, kept.count);
    free_list(&blocks, "freeing after the second exhaustion");
    free_list(&kept, "the blocks kept over both exhaustions");
    check_no_events(when);

    lift_limit(mode);
    all_kinds_work("with the limit lifted", kind, !pins_small_spans(kind, debug));
    if (debug) {
        size_t corrupt = fastmm_debug_scan();
        CHILD_REQUIRE(corrupt == 0, "%s: the debug scan found %zu corrupt blocks", when, corrupt);
        fastmm_debug_exit();
    } else {
        malloc_trim(0);
        size_t end = fastmm_os_memory();
        CHILD_REQUIRE(end <= os_start + 16 * MIB, "%s: OS memory %zu at the start, %zu after everything was freed", when,
                      os_start, end);
    }
    fprintf(stderr, "exhaustion: %s: %zu served (%zu bytes) before the first refusal", when, first, first_bytes);
    if (mode == BY_FASTMM)
        fprintf(stderr, ", %zu more from the grace", graced);
    fprintf(stderr, "; %zu the second time\n", again);
}

/* A block that a realloc may move or refuse: its contents are checked whichever happens. */
typedef struct resizable {
    unsigned char *p;
    size_t n;
    uint32_t seed;
} resizable_t;

static void resizable_new(resizable_t *r, size_t n, uint32_t seed)
{
    r->p = malloc(n);
    CHILD_REQUIRE(r->p != NULL, "malloc(%zu) refused before the exhaustion", n);
    r->n = n;
    r->seed = seed;
    fill_sparse(r->p, n, seed);
}

/* realloc(r, n): if served, the contents moved with it; if refused, NULL and ENOMEM and the old
 * block intact and still usable. Returns whether it was served. */
static bool resize(resizable_t *r, size_t n, const char *when)
{
    errno = 0;
    unsigned char *q = realloc(r->p, n);
    size_t keep = n < r->n ? n : r->n;
    if (q == NULL) {
        CHILD_REQUIRE(errno == ENOMEM, "%s: realloc(%zu -> %zu) refused with errno %d", when, r->n, n, errno);
        size_t bad = check_sparse(r->p, r->n, r->n, r->seed);
        CHILD_REQUIRE(bad == SIZE_MAX, "%s: a refused realloc(%zu -> %zu) damaged the block at offset %zu", when, r->n,
                      n, bad);
        CHILD_REQUIRE(fastmm_usable_size(r->p) >= r->n, "%s: after a refused realloc(%zu -> %zu) the usable size is %zu",
                      when, r->n, n, fastmm_usable_size(r->p));
        return false;
    }
    size_t bad = check_sparse(q, r->n, keep, r->seed);
    CHILD_REQUIRE(bad == SIZE_MAX, "%s: realloc(%zu -> %zu) lost byte %zu", when, r->n, n, bad);
    r->p = q;
    r->n = n;
    r->seed += 0x100;
    fill_sparse(q, n, r->seed);
    return true;
}

/* realloc: one block grown by half again and again until refused (it must stay intact and
 * valid), then blocks of each manager resized while nothing is left: each resize is served or
 * refused cleanly, those that need new memory must be refused, and after the pressure is freed
 * they are all served. */
static void realloc_case(int arg)
{
    int mode = CASE_MODE(arg);
    bool debug = CASE_DEBUG(arg) != 0;
    char when[160];
    snprintf(when, sizeof when, "realloc%s under %s", debug ? " in debug mode" : "", mode_names[mode]);
    if (debug)
        fastmm_debug_enter();
    size_t head = headroom(debug);
    resizable_t s, m, l;
    resizable_new(&s, 100, 1);
    resizable_new(&m, 20000, 2);
    resizable_new(&l, 4 * MIB, 3);
    size_t limit = set_limit(mode, head);

    resizable_t g = {NULL, 0, 7};
    size_t steps = 0;
    for (size_t n = 16; resize(&g, n, when); n += n / 2 + 16)
        CHILD_REQUIRE(++steps < 200, "%s: grown to %zu bytes and never refused", when, g.n);
    CHILD_REQUIRE(g.n >= head / 4, "%s: growth refused already at %zu bytes", when, g.n);
    if (mode == BY_FASTMM) {
        /* the first refusal comes at the limit; the grace is for what follows it */
        CHILD_REQUIRE(fastmm_os_memory() <= limit, "%s: growth refused only at %zu bytes, with OS memory %zu over the limit %zu",
                      when, g.n, fastmm_os_memory(), limit);
        CHILD_REQUIRE(fastmm_memory_limit() == limit + GRACE, "%s: limit %zu after the first refusal, expected %zu", when,
                      fastmm_memory_limit(), limit + GRACE);
    }
    size_t grown = g.n;
    CHILD_REQUIRE(resize(&g, 100, when), "%s: shrinking the block a refused realloc left behind was refused", when);
    free(g.p);
    check_no_events(when);

    /* Use everything up: medium blocks, then small ones (under fastmm's limit, also the grace). */
    list_t pressure = {NULL, 0, 0, 0x20000000u};
    exhaust(K_MEDIUM, &pressure, head);
    if (mode == BY_FASTMM)
        exhaust(K_MEDIUM, &pressure, head);
    exhaust(K_SMALL, &pressure, head);
    /* Sizes that need new memory are well above what is left (under a medium span, 3 MiB). */
    size_t big_l = head / 4 + 4 * MIB;
    const struct {
        char which;
        size_t n;
        bool must_refuse;
    } tries[] = {
        {'s', 50, false},      {'s', 2000, false},  {'s', 20000, false},   {'s', 4 * MIB, true},
        {'m', 40000, false},   {'m', 300000, false}, {'m', 8 * MIB, true},  {'m', 1000, false},
        {'l', 5 * MIB, false}, {'l', big_l, true},   {'l', 1 * MIB, false}, {'l', big_l, true},
    };
    unsigned served = 0;
    for (int round = 0; round < 2; round++) {
        for (size_t t = 0; t < sizeof tries / sizeof tries[0]; t++) {
            resizable_t *r = tries[t].which == 's' ? &s : tries[t].which == 'm' ? &m : &l;
            bool ok = resize(r, tries[t].n, when);
            CHILD_REQUIRE(round == 1 || !ok || !tries[t].must_refuse, "%s: realloc to %zu served with nothing left", when,
                          tries[t].n);
            CHILD_REQUIRE(round == 0 || ok, "%s: realloc to %zu refused after the pressure was freed", when, tries[t].n);
            served += ok;
        }
        if (round == 0) {
            free_list(&pressure, "freeing the pressure");
            /* A new limit (under fastmm's, the grace is spent) with room for the three blocks at
             * their biggest and one move. */
            lift_limit(mode);
            set_limit(mode, 4 * MIB + 8 * MIB + 2 * big_l + 8 * MIB);
        }
        check_no_events(when);
    }
    free(s.p);
    free(m.p);
    free(l.p);
    if (debug) {
        size_t corrupt = fastmm_debug_scan();
        CHILD_REQUIRE(corrupt == 0, "%s: the debug scan found %zu corrupt blocks", when, corrupt);
        fastmm_debug_exit();
    }
    lift_limit(mode);
    fprintf(stderr, "exhaustion: %s: growth refused above %zu bytes (%zu steps); %u of %zu resizes served\n", when, grown,
            steps, served, 2 * sizeof tries / sizeof tries[0]);
}

/* Requests that can never fit, each refused with NULL/ENOMEM; then every kind still works. */
static void huge_case(int arg)
{
    int mode = CASE_MODE(arg);
    bool debug = CASE_DEBUG(arg) != 0;
    char when[160];
    snprintf(when, sizeof when, "huge requests%s under %s", debug ? " in debug mode" : "", mode_names[mode]);
    if (debug)
        fastmm_debug_enter();
    size_t head = headroom(debug);
    resizable_t s, m, l;
    resizable_new(&s, 100, 1);
    resizable_new(&m, 20000, 2);
    resizable_new(&l, 4 * MIB, 3);
    set_limit(mode, head);
    size_t big = launder_size(2 * head + 64 * MIB); /* more than the headroom and the grace */
    size_t absurd = launder_size((size_t)PTRDIFF_MAX - 4096);
    size_t beyond = launder_size((size_t)PTRDIFF_MAX + 1);

    /* Each call on its own, so that errno is its own. */
#define REFUSED(call)                                                                               \
    do {                                                                                            \
        errno = 0;                                                                                  \
        void *r_ = (call);                                                                          \
        CHILD_REQUIRE(r_ == NULL && errno == ENOMEM, "%s: %s gave %p, errno %d", when, #call, r_, errno); \
    } while (0)
    REFUSED(malloc(big));
    REFUSED(malloc(absurd));
    REFUSED(malloc(beyond));
    REFUSED(malloc(launder_size(SIZE_MAX)));
    REFUSED(calloc(1, big));
    REFUSED(calloc(big / 16, 16));
    REFUSED(calloc(absurd / 8, 8));
    REFUSED(calloc(launder_size(SIZE_MAX / 2), 4)); /* overflows */
    REFUSED(memalign(64, big));
    REFUSED(aligned_alloc(launder_size((size_t)1 << 30), 1));
    REFUSED(aligned_alloc(launder_size((size_t)1 << (sizeof(size_t) * 8 - 2)), 64)); /* 2^62 (2^30) */
    REFUSED(valloc(big));
    REFUSED(pvalloc(big));
    for (int i = 0; i < 3; i++) {
        resizable_t *r = i == 0 ? &s : i == 1 ? &m : &l;
        CHILD_REQUIRE(!resize(r, big, when), "%s: realloc(%zu -> %zu) served", when, r->n, big);
        CHILD_REQUIRE(!resize(r, absurd, when), "%s: realloc(%zu -> PTRDIFF_MAX - 4096) served", when, r->n);
        errno = 0;
        void *q = reallocarray(r->p, big / 8, 8);
        CHILD_REQUIRE(q == NULL && errno == ENOMEM, "%s: reallocarray(%zu -> %zu) gave %p, errno %d", when, r->n, big, q,
                      errno);
    }
    void *p = NULL;
    errno = EXDEV;
    int rc = posix_memalign(&p, 4096, big);
    CHILD_REQUIRE(rc == ENOMEM && p == NULL && errno == ENOMEM, "%s: posix_memalign(4096, big) gave %d, %p, errno %d", when,
                  rc, p, errno);
    rc = posix_memalign(&p, launder_size((size_t)1 << 30), 4096);
    CHILD_REQUIRE(rc == ENOMEM && p == NULL, "%s: posix_memalign(1 GiB, 4096) gave %d, %p", when, rc, p);
    check_no_events(when);
    all_kinds_work("after the huge requests", K_SMALL, true);
    for (int i = 0; i < 3; i++) {
        resizable_t *r = i == 0 ? &s : i == 1 ? &m : &l;
        CHILD_REQUIRE(resize(r, r->n * 2, when), "%s: realloc(%zu -> %zu) refused after the huge requests", when, r->n,
                      r->n * 2);
        free(r->p);
    }
    if (debug) {
        size_t corrupt = fastmm_debug_scan();
        CHILD_REQUIRE(corrupt == 0, "%s: the debug scan found %zu corrupt blocks", when, corrupt);
        fastmm_debug_exit();
    }
    lift_limit(mode);
}

static void kind_case(int arg)
{
    switch (CASE_KIND(arg)) {
    case K_REALLOC:
        realloc_case(arg);
        break;
    case K_HUGE:
        huge_case(arg);
        break;
    default:
        exhaust_case(arg);
        break;
    }
}

static void run_kind(int kind, int mode, bool debug)
{
    if (!rlimit_enforced() && mode == BY_RLIMIT)
        return;
    char what[160];
    snprintf(what, sizeof what, "%s%s under %s", kind_names[kind], debug ? " in debug mode" : "", mode_names[mode]);
    run_child(what, kind_case, CASE_ARG(kind, mode, debug ? 1 : 0));
}

/* Guards the OS refusal paths of every manager (mmap and mremap failing under RLIMIT_AS): NULL
 * and ENOMEM, no crash, no event, intact blocks, and full recovery (loop over the kinds). */
START_TEST(test_rlimit)
{
    run_kind(_i, BY_RLIMIT, false);
}
END_TEST

/* Guards fastmm_set_memory_limit for every kind (not only large blocks): refusal at the limit,
 * the grace once, the limit respected, recovery. */
START_TEST(test_fastmm_limit)
{
    run_kind(_i, BY_FASTMM, false);
}
END_TEST

/* Guards the same in debug mode (debug blocks, the freed-block checks, the scan): loop index
 * 0..K_COUNT-1 under RLIMIT_AS, then under fastmm's limit. */
START_TEST(test_debug)
{
    run_kind(_i % K_COUNT, _i / K_COUNT == 0 ? BY_RLIMIT : BY_FASTMM, true);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Threads running out together                                                                 */
/* ------------------------------------------------------------------------------------------ */

#define EX_THREADS 3

typedef struct ex_thread {
    int id;
    size_t head;
    list_t blocks;
    size_t served[3];
    size_t held; /* bytes held when refused everything, kept before the threads free */
} ex_thread_t;

static ex_thread_t ex_threads[EX_THREADS];
static pthread_barrier_t ex_barrier;
static pthread_mutex_t ex_one_at_a_time = PTHREAD_MUTEX_INITIALIZER;

/* Between the phases every thread and the main thread meet at the barrier. */
static void *ex_worker(void *argp)
{
    ex_thread_t *t = argp;
    static const int kinds[3] = {K_LARGE, K_MEDIUM, K_SMALL};
    pthread_barrier_wait(&ex_barrier); /* the limit is in force */
    bool refused[3] = {false, false, false};
    for (size_t i = 0; !(refused[0] && refused[1] && refused[2]); i++) {
        int k = (int)(i % 3);
        if (refused[k])
            continue;
        size_t size;
        void *p = try_alloc(kinds[k], i, &size);
        if (p == NULL) {
            refused[k] = true;
            continue;
        }
        adopt(&t->blocks, p, size, kinds[k]);
        t->served[k]++;
        CHILD_REQUIRE(t->blocks.bytes <= 2 * t->head + GRACE + 64 * MIB, "thread %d: never refused", t->id);
    }
    /* for the main thread: after the barrier the threads free each other's lists at once */
    t->held = t->blocks.bytes;
    pthread_barrier_wait(&ex_barrier); /* everyone has been refused everything */
    /* free the next thread's blocks: frees into arenas other threads used, pending-free lists */
    free_list(&ex_threads[(t->id + 1) % EX_THREADS].blocks, "a thread freeing another's blocks");
    pthread_barrier_wait(&ex_barrier); /* everything is free */
    /* One thread at a time: under a headroom of 32 MiB (qemu, Valgrind) three threads each
     * holding a set of every kind at once could exhaust it again, which is not the question. */
    pthread_mutex_lock(&ex_one_at_a_time);
    all_kinds_work("a thread after every thread freed", K_SMALL, true);
    pthread_mutex_unlock(&ex_one_at_a_time);
    for (int k = 0; k < 3; k++)
        for (int rep = 0; rep < 4; rep++) {
            size_t size;
            void *p = try_alloc(kinds[k], (size_t)rep, &size);
            CHILD_REQUIRE(p != NULL, "thread %d: %s refused after every thread freed", t->id, kind_names[kinds[k]]);
            adopt(&t->blocks, p, size, kinds[k]);
        }
    free_list(&t->blocks, "a thread's blocks after the recovery");
    return NULL;
}

static void threads_case(int arg)
{
    int mode = CASE_MODE(arg);
    size_t head = headroom(false);
    CHILD_REQUIRE(pthread_barrier_init(&ex_barrier, NULL, EX_THREADS + 1) == 0, "pthread_barrier_init failed");
    pthread_t th[EX_THREADS];
    for (int i = 0; i < EX_THREADS; i++) {
        ex_threads[i] = (ex_thread_t){i, head, {NULL, 0, 0, (uint32_t)(i + 1) << 24}, {0, 0, 0}, 0};
        CHILD_REQUIRE(pthread_create(&th[i], NULL, ex_worker, &ex_threads[i]) == 0, "pthread_create failed");
    }
    size_t limit = set_limit(mode, head); /* after the threads' stacks exist */
    pthread_barrier_wait(&ex_barrier);
    pthread_barrier_wait(&ex_barrier);
    check_no_events("threads running out");
    size_t total = 0;
    for (int i = 0; i < EX_THREADS; i++)
        total += ex_threads[i].held; /* blocks.bytes: the threads are freeing them already */
    CHILD_REQUIRE(total >= head / 2, "threads: refused after %zu bytes of a %zu-byte headroom", total, head);
    if (mode == BY_FASTMM)
        CHILD_REQUIRE(fastmm_os_memory() <= limit + GRACE, "threads: OS memory %zu over the limit plus grace %zu",
                      fastmm_os_memory(), limit + GRACE);
    fprintf(stderr, "exhaustion: %d threads under %s: served", EX_THREADS, mode_names[mode]);
    for (int i = 0; i < EX_THREADS; i++)
        fprintf(stderr, " [%zu large, %zu medium, %zu small]", ex_threads[i].served[0], ex_threads[i].served[1],
                ex_threads[i].served[2]);
    fprintf(stderr, " (%zu bytes)\n", total);
    pthread_barrier_wait(&ex_barrier);
    for (int i = 0; i < EX_THREADS; i++)
        CHILD_REQUIRE(pthread_join(th[i], NULL) == 0, "pthread_join failed");
    pthread_barrier_destroy(&ex_barrier);
    check_no_events("threads recovering");
    all_kinds_work("the main thread after the threads", K_SMALL, true);
    lift_limit(mode);
}

/* Guards concurrent exhaustion: three threads allocating large, medium and small blocks until
 * each kind is refused, then freeing each other's blocks, then all served again. */
START_TEST(test_threads)
{
    if (!rlimit_enforced() && _i == BY_RLIMIT)
        return;
    char what[96];
    snprintf(what, sizeof what, "%d threads under %s", EX_THREADS, mode_names[_i]);
    run_child(what, threads_case, CASE_ARG(0, _i, 0));
}
END_TEST

Suite *suite_exhaustion(void)
{
    Suite *s = suite_create("exhaustion");

    TCase *tc = tcase_create("rlimit");
    tcase_set_timeout(tc, TEST_TIMEOUT);
    tcase_add_loop_test(tc, test_rlimit, 0, K_COUNT);
    suite_add_tcase(s, tc);

    tc = tcase_create("limit");
    tcase_set_timeout(tc, TEST_TIMEOUT);
    tcase_add_loop_test(tc, test_fastmm_limit, 0, K_COUNT);
    suite_add_tcase(s, tc);

    tc = tcase_create("debug");
    tcase_set_timeout(tc, TEST_TIMEOUT);
    tcase_add_loop_test(tc, test_debug, 0, 2 * K_COUNT);
    suite_add_tcase(s, tc);

    tc = tcase_create("threads");
    tcase_set_timeout(tc, TEST_TIMEOUT);
    tcase_add_loop_test(tc, test_threads, BY_RLIMIT, BY_FASTMM + 1);
    suite_add_tcase(s, tc);

    return s;
}
