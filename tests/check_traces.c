/*
 * check_traces.c - debug mode's stack traces start at the caller's frame.
 *
 * Each kind of trace (allocation by malloc, calloc, realloc and aligned allocation; free; the
 * current call's stack in an error report) is made from a function of this file that is never
 * inlined and calls the allocator other than as a tail call, so its return address lies inside
 * it. The first recorded frame must be that return address: inside the function's first bytes
 * and in this program, not in libfastmm5 (whose frames are skipped, in every executable segment
 * it has) nor anywhere else. (Aligned requests above the minimum alignment give plain blocks,
 * without traces, so the aligned calls here ask for the minimum.)
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <config.h>

#include "check_suites.h"
#include "helpers.h"


/* Longer than any of the callers below compiles to, on every target and optimisation level. */
#define CALLER_MAX_BYTES 512

#define NOINLINE __attribute__((noinline, noclone))

static void *volatile sink;

NOINLINE static void *call_malloc(size_t n)
{
    void *p = malloc(n);
    sink = p; /* the call is not the function's last act: no tail call */
    return p;
}

NOINLINE static void *call_calloc(size_t n)
{
    void *p = calloc(1, n);
    sink = p;
    return p;
}

NOINLINE static void *call_realloc(void *old, size_t n)
{
    void *p = realloc(old, n);
    sink = p;
    return p;
}

/* The minimum alignment (16 on 64-bit, 8 on 32-bit targets): debug mode gives such a request a
 * debug block, as it does any malloc. */
NOINLINE static void *call_aligned(size_t n)
{
    void *p = aligned_alloc(2 * sizeof(void *), n);
    sink = p;
    return p;
}

NOINLINE static void *call_memalign(size_t n)
{
    void *p = NULL;
    if (posix_memalign(&p, sizeof(void *), n) != 0)
        p = NULL;
    sink = p;
    return p;
}

NOINLINE static void call_free(void *p)
{
    free(p);
    sink = NULL;
}

/* A second free of p: the report it raises must show this function's stack first. */
enum { FREE_AGAIN_LINE = __LINE__ + 3 }; /* the line of the free below */
NOINLINE static void call_free_again(void *p)
{
    free(p);
    sink = NULL;
}

/* Whether `address` is a return address inside `fn`: in its first bytes and in the same object. */
static int inside(uintptr_t address, void *fn)
{
    Dl_info a, f;
    if (address <= (uintptr_t)fn || address >= (uintptr_t)fn + CALLER_MAX_BYTES)
        return 0;
    if (dladdr((void *)address, &a) == 0 || dladdr(fn, &f) == 0)
        return 0;
    return a.dli_fbase == f.dli_fbase;
}

/* ---- the traces stored in a debug block, read back with fastmm_walk_blocks ---- */

struct found {
    const void *block;
    int seen;
    uintptr_t allocation_first, free_first;
    unsigned depth;
};

static void find_block(const fastmm_block_info_t *b, void *user)
{
    struct found *f = user;
    if (b->address != f->block || !b->debug)
        return;
    f->seen = 1;
    f->depth = b->stack_depth;
    f->allocation_first = b->allocation_stack != NULL && b->stack_depth > 0 ? b->allocation_stack[0] : 0;
    f->free_first = b->free_stack != NULL && b->stack_depth > 0 ? b->free_stack[0] : 0;
}

static struct found traces_of(const void *p, int freed)
{
    struct found f = {p, 0, 0, 0, 0};
    fastmm_walk_options_t o = FASTMM_WALK_OPTIONS_INIT;
    o.used_only = !freed;
    fastmm_walk_blocks(find_block, &f, &o);
    return f;
}

static uintptr_t *full_out;
static const void *full_block;

static void copy_trace(const fastmm_block_info_t *b, void *user)
{
    (void)user;
    if (b->address == full_block && b->debug && b->allocation_stack != NULL)
        for (unsigned i = 0; i < b->stack_depth && i < 20; i++)
            full_out[i] = b->allocation_stack[i];
}

/* The first 20 entries of p's allocation trace. */
static void full_trace_of(const void *p, uintptr_t *out)
{
    full_out = out;
    full_block = p;
    fastmm_walk_blocks(copy_trace, NULL, NULL);
}

static void expect_allocated_by(void *p, void *fn, const char *name)
{
    REQUIRE(p != NULL, "%s returned NULL", name);
    struct found f = traces_of(p, 0);
    REQUIRE(f.seen, "%s: the debug block %p was not found by the walk", name, p);
    REQUIRE(f.depth == 20, "%s: stack depth %u, expected the default 20", name, f.depth);
    Dl_info d;
    int named = dladdr((void *)f.allocation_first, &d);
    REQUIRE(inside(f.allocation_first, fn),
            "%s: the allocation trace starts at %#lx (%s), not in the caller %p",
            name, (unsigned long)f.allocation_first, named && d.dli_fname ? d.dli_fname : "?", fn);
}

static void debug_on(void)
{
    ck_assert(fastmm_debug_enter());
    fastmm_debug_set_stack_depth(20);
}

static void debug_off(void)
{
    while (fastmm_debug_exit())
        ;
    fastmm_set_error_action(FASTMM_ON_ERROR_ABORT);
    fastmm_set_event_handler(NULL, NULL);
}

START_TEST(test_trace_malloc)
{
    void *small = call_malloc(40), *medium = call_malloc(5000), *large = call_malloc(1 << 20);
    expect_allocated_by(small, (void *)call_malloc, "malloc(40)");
    expect_allocated_by(medium, (void *)call_malloc, "malloc(5000)");
    expect_allocated_by(large, (void *)call_malloc, "malloc(1 MiB)");
    free(small);
    free(medium);
    free(large);
}
END_TEST

START_TEST(test_trace_calloc)
{
    void *p = call_calloc(100);
    expect_allocated_by(p, (void *)call_calloc, "calloc");
    free(p);
}
END_TEST

START_TEST(test_trace_aligned)
{
    void *a = call_aligned(300), *m = call_memalign(3000);
    expect_allocated_by(a, (void *)call_aligned, "aligned_alloc");
    expect_allocated_by(m, (void *)call_memalign, "posix_memalign");
    free(a);
    free(m);
}
END_TEST

/* realloc(NULL) allocates; a realloc that moves the block frees the old one from realloc. */
START_TEST(test_trace_realloc)
{
    void *p = call_realloc(NULL, 64);
    expect_allocated_by(p, (void *)call_realloc, "realloc(NULL, 64)");
    void *old = p;
    void *keep = malloc(64); /* so that the old block is not reused at once */
    p = call_realloc(p, 100000);
    REQUIRE(p != NULL && p != old, "realloc(64 -> 100000) did not move the block");
    struct found f = traces_of(old, 1);
    REQUIRE(f.seen, "the block realloc moved away from was not found by the walk");
    REQUIRE(inside(f.free_first, (void *)call_realloc), "the old block's free trace starts at %#lx, not in the caller",
            (unsigned long)f.free_first);
    free(p);
    free(keep);
}
END_TEST

START_TEST(test_trace_free)
{
    void *p = malloc(200);
    void *keep = malloc(200);
    call_free(p);
    struct found f = traces_of(p, 1);
    REQUIRE(f.seen, "the freed debug block %p was not found by the walk", p);
    REQUIRE(inside(f.free_first, (void *)call_free), "the free trace starts at %#lx, not in the caller",
            (unsigned long)f.free_first);
    free(keep);
}
END_TEST

/* A block allocated, and glibc's backtrace() (libgcc's unwinder) taken, in the same function. */
static uintptr_t bt_trace[64];
static int bt_frames;

NOINLINE static void *alloc_and_backtrace(void)
{
    void *p = malloc(24);
    void *bt[64];
    bt_frames = backtrace(bt, 64);
    for (int i = 0; i < bt_frames; i++)
        bt_trace[i] = (uintptr_t)bt[i];
    sink = p;
    return p;
}

/* The allocation trace of p (from alloc_and_backtrace) holds the same callers as backtrace():
 * frame 0 differs (the calls to malloc and to backtrace), the rest must not. */
static void expect_same_as_backtrace(void *p, const char *where)
{
    struct found f = traces_of(p, 0);
    REQUIRE(f.seen, "%s: block not found", where);
    uintptr_t trace[20];
    memset(trace, 0, sizeof trace);
    full_trace_of(p, trace);
    REQUIRE(bt_frames > 1, "%s: backtrace() found %d frames", where, bt_frames);
    REQUIRE(inside(trace[0], (void *)alloc_and_backtrace), "%s: frame 0 at %#lx is not the caller's", where,
            (unsigned long)trace[0]);
    for (int i = 1; i < 20 && i < bt_frames; i++)
        REQUIRE(trace[i] == bt_trace[i], "%s: frame %d is %#lx, backtrace() says %#lx", where, i,
                (unsigned long)trace[i], (unsigned long)bt_trace[i]);
}

NOINLINE static void *chain(int depth)
{
    void *p = depth > 0 ? chain(depth - 1) : alloc_and_backtrace();
    sink = p;
    return p;
}

/* Deeper than the stored depth, through the frames of the test runner, libcheck and libc. */
START_TEST(test_trace_matches_backtrace)
{
    char where[32];
    for (int depth = 0; depth < 40; depth += 7) {
        snprintf(where, sizeof where, "chain(%d)", depth);
        void *p = chain(depth);
        expect_same_as_backtrace(p, where);
        free(p);
    }
}
END_TEST

static void *volatile in_handler;

static void on_signal(int sig)
{
    (void)sig;
    in_handler = alloc_and_backtrace();
}

NOINLINE static void raise_signal(int depth)
{
    if (depth > 0)
        raise_signal(depth - 1);
    else
        raise(SIGUSR1);
    sink = NULL;
}

/* From a signal handler: the walk meets the kernel's signal frame, and goes on past it. */
START_TEST(test_trace_signal_frame)
{
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGUSR1, &sa, &old);
    raise_signal(3);
    sigaction(SIGUSR1, &old, NULL);
    REQUIRE(in_handler != NULL, "the handler did not run");
    REQUIRE(bt_frames > 8, "backtrace() in the handler found only %d frames", bt_frames);
    expect_same_as_backtrace(in_handler, "signal handler");
    free(in_handler);
}
END_TEST

static void *thread_chain(void *arg)
{
    (void)arg;
    void *p = chain(5);
    expect_same_as_backtrace(p, "thread");
    free(p);
    return NULL;
}

/* In another thread (another stack), and in a child of fork. */
START_TEST(test_trace_thread_and_fork)
{
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, thread_chain, NULL), 0);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        void *p = chain(5);
        struct found f = traces_of(p, 0);
        _exit(f.seen && inside(f.allocation_first, (void *)alloc_and_backtrace) ? 0 : 1);
    }
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    REQUIRE(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child of fork got a wrong trace");
}
END_TEST

static char report[32768];

static void record_report(const fastmm_event_t *e, void *user)
{
    (void)user;
    size_t i = 0;
    if (e->text != NULL)
        for (; i + 1 < sizeof report && e->text[i] != '\0'; i++)
            report[i] = e->text[i];
    report[i] = '\0';
}

/* The first address listed under `heading` in the last report, or 0. */
static uintptr_t first_under(const char *heading)
{
    const char *h = strstr(report, heading);
    if (h == NULL)
        return 0;
    const char *line = strstr(h, "\n    0x");
    return line == NULL ? 0 : (uintptr_t)strtoull(line + 5, NULL, 16);
}

/* A double free's report starts with the stack of the second free, then the block's traces. */
START_TEST(test_trace_current_call)
{
    fastmm_set_event_handler(record_report, NULL);
    fastmm_set_error_action(FASTMM_ON_ERROR_CONTINUE);
    void *p = malloc(200);
    void *keep = malloc(200);
    call_free(p);
    quiet_stderr();
    call_free_again(p);
    restore_stderr();
    REQUIRE(strstr(report, "Stack trace of the call:") != NULL, "no current stack in the report: \"%.1500s\"",
            report);
    REQUIRE(strstr(report, "Stack trace of the call:") < strstr(report, "allocation stack trace"),
            "the current stack does not come first: \"%.1500s\"", report);
    uintptr_t current = first_under("Stack trace of the call:"), freed = first_under("free stack trace:");
    REQUIRE(inside(current, (void *)call_free_again), "the current stack starts at %#lx, not in the caller: \"%.1500s\"",
            (unsigned long)current, report);
    REQUIRE(inside(freed, (void *)call_free), "the free trace starts at %#lx, not in the first free's caller",
            (unsigned long)freed);
    /* and an invalid pointer's report, which is not about a debug block */
    char local[64];
    report[0] = '\0';
    quiet_stderr();
    call_free_again(local + 16);
    restore_stderr();
    REQUIRE(strstr(report, "invalid pointer") != NULL, "no invalid-pointer report: \"%.1500s\"", report);
    current = first_under("Stack trace of the call:");
    REQUIRE(inside(current, (void *)call_free_again),
            "the invalid pointer's current stack starts at %#lx, not in the caller: \"%.1500s\"",
            (unsigned long)current, report);
    free(keep);
}
END_TEST

/* After objects were loaded and unloaded (the capture's rule table is emptied then), in a
 * chain deep enough to pass frames whose rules were kept before. */
START_TEST(test_trace_after_dlclose)
{
    void *p = chain(12);
    expect_same_as_backtrace(p, "before dlopen");
    free(p);
    void *lib = dlopen("libz.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL)
        lib = dlopen("libm.so.6", RTLD_NOW | RTLD_LOCAL);
    REQUIRE(lib != NULL, "no library to dlopen: %s", dlerror());
    dlclose(lib);
    p = chain(12);
    expect_same_as_backtrace(p, "after dlclose");
    free(p);
}
END_TEST

/* Two callers alike enough that the allocation under them runs at the same stack pointer: a
 * capture that repeated an earlier walk (lib/unwind.c replays them) without finding every
 * stack word it read unchanged would give one caller's trace to the other. */
NOINLINE static void *via_first(void)
{
    void *p = chain(2);
    sink = p;
    return p;
}

NOINLINE static void *via_second(void)
{
    void *p = chain(2);
    sink = NULL;
    sink = p;
    return p;
}

START_TEST(test_trace_replayed_walks)
{
    for (int round = 0; round < 4; round++) {
        void *p = via_first();
        expect_same_as_backtrace(p, "via_first");
        free(p);
        p = via_second();
        expect_same_as_backtrace(p, "via_second");
        free(p);
        p = chain(round * 3);
        expect_same_as_backtrace(p, "chain");
        free(p);
    }
}
END_TEST

/* The library's dlclose (lib/dlclose.c) is the one the program calls, and does what the C
 * library's does: the object is unloaded, and later traces are right. */
START_TEST(test_dlclose_passes_through)
{
    Dl_info at;
    void *fn = dlsym(RTLD_DEFAULT, "dlclose");
    REQUIRE(fn != NULL && dladdr(fn, &at) != 0 && at.dli_fname != NULL && strstr(at.dli_fname, "libfastmm5") != NULL,
            "dlclose is not libfastmm5's: %s", fn != NULL && dladdr(fn, &at) && at.dli_fname ? at.dli_fname : "?");
    const char *name = "libz.so.1";
    void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        name = "libm.so.6";
        lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    }
    REQUIRE(lib != NULL, "no library to dlopen: %s", dlerror());
    REQUIRE(dlclose(lib) == 0, "dlclose failed: %s", dlerror());
    if (strcmp(name, "libz.so.1") == 0)
        REQUIRE(dlopen(name, RTLD_NOW | RTLD_NOLOAD) == NULL, "%s is still loaded after dlclose", name);
    void *p = chain(4);
    expect_same_as_backtrace(p, "after dlclose");
    free(p);
}
END_TEST

/* With the symbolizer built here (FM_TEST_SYMBOLIZER, set by make check), a report names the
 * static function of this program that made the call (no -rdynamic: only .symtab has it) and
 * the file and line of the call. */
START_TEST(test_trace_file_and_line)
{
#ifdef FASTMM5_HAVE_SYMBOLIZER
    const char *helper = getenv("FM_TEST_SYMBOLIZER");
    if (helper == NULL || access(helper, X_OK) != 0)
        return; /* run outside make check */
    if (RUNNING_ON_VALGRIND)
        return; /* the helper reads this process's mappings: under Valgrind, Valgrind's */
    setenv("FASTMM5_SYMBOLIZER", helper, 1);
    fastmm_set_event_handler(record_report, NULL);
    fastmm_set_error_action(FASTMM_ON_ERROR_CONTINUE);
    void *p = malloc(200);
    void *keep = malloc(200);
    call_free(p);
    quiet_stderr();
    call_free_again(p);
    restore_stderr();
    setenv("FASTMM5_SYMBOLIZER", "none", 1);
    char want[64];
    snprintf(want, sizeof want, "check_traces.c:%d", (int)FREE_AGAIN_LINE);
    const char *current = strstr(report, "Stack trace of the call:");
    REQUIRE(current != NULL, "no current stack in the report: \"%.1500s\"", report);
    const char *first_line = strstr(current, "\n    0x");
    const char *end = first_line != NULL ? strchr(first_line + 1, '\n') : NULL;
    REQUIRE(first_line != NULL && end != NULL, "no frame under the current stack: \"%.1500s\"", report);
    char line[512];
    snprintf(line, sizeof line, "%.*s", (int)(end - first_line - 1), first_line + 1);
    REQUIRE(strstr(line, "call_free_again+0x") != NULL, "the first frame does not name call_free_again: \"%s\"",
            line);
    REQUIRE(strstr(line, want) != NULL, "the first frame does not say %s: \"%s\"", want, line);
    REQUIRE(strstr(report, "call_free+0x") != NULL, "the free trace does not name call_free: \"%.1500s\"", report);
    free(keep);
#endif
}
END_TEST

/* ---- each distinct trace stored once (lib/tracetab.c) ---- */

struct stacks {
    const void *blocks[9];
    const uintptr_t *allocation[9];
};

static void find_stacks(const fastmm_block_info_t *b, void *user)
{
    struct stacks *s = user;
    for (int i = 0; i < 9; i++)
        if (b->address == s->blocks[i] && b->debug)
            s->allocation[i] = b->allocation_stack;
}

/* Blocks allocated from one place share one stored allocation trace (the walk hands out the
 * same frames), a block allocated from elsewhere has its own, and the shared one still reads
 * as the caller's trace. */
START_TEST(test_trace_stored_once)
{
    struct stacks s = {{0}, {0}};
    for (int i = 0; i < 8; i++)
        s.blocks[i] = call_malloc(40 + 500 * (size_t)i); /* small and medium blocks */
    s.blocks[8] = call_calloc(40);
    fastmm_walk_blocks(find_stacks, &s, NULL);
    for (int i = 0; i < 9; i++)
        REQUIRE(s.allocation[i] != NULL, "block %d was not found by the walk", i);
    for (int i = 1; i < 8; i++)
        REQUIRE(s.allocation[i] == s.allocation[0],
                "blocks allocated from one place carry different stored traces (%p, %p)",
                (const void *)s.allocation[0], (const void *)s.allocation[i]);
    REQUIRE(s.allocation[8] != s.allocation[0], "a trace from another caller was stored as the same one");
    REQUIRE(inside(s.allocation[0][0], (void *)call_malloc), "the shared trace does not start in the caller");
    REQUIRE(inside(s.allocation[8][0], (void *)call_calloc), "the calloc trace does not start in the caller");
    for (int i = 0; i < 9; i++)
        free((void *)s.blocks[i]);
}
END_TEST

/* Threads interning the same traces at once, while the table grows: every block must read back
 * the trace it was allocated with (each block holds it as its first word), and blocks with the
 * same trace must share one stored copy. */
#define RACE_THREADS 4
#define RACE_BLOCKS 12000
#define RACE_TRACES 9000 /* shared by all threads: several growths of the hash table */
static __thread uintptr_t race_frame;
static void race_capture(uintptr_t *addresses, unsigned depth)
{
    for (unsigned i = 0; i < depth; i++)
        addresses[i] = i == 0 ? race_frame : i == 1 ? ~race_frame : 0;
}

static void *race_thread(void *arg)
{
    uintptr_t **blocks = arg;
    for (unsigned i = 0; i < RACE_BLOCKS; i++) {
        race_frame = 0x7000 + (i * 7919u) % RACE_TRACES;
        blocks[i] = malloc(sizeof(uintptr_t));
        if (blocks[i] != NULL)
            blocks[i][0] = race_frame;
    }
    return NULL;
}

struct race_check {
    unsigned checked, wrong, split;
    const uintptr_t *first[RACE_TRACES];
};

static void race_visit(const fastmm_block_info_t *b, void *user)
{
    struct race_check *c = user;
    if (!b->debug || b->stack_depth != 3 || b->allocation_stack == NULL)
        return;
    uintptr_t want = *(const uintptr_t *)b->address;
    if (want < 0x7000 || want >= 0x7000 + RACE_TRACES)
        return;
    c->checked++;
    if (b->allocation_stack[0] != want || b->allocation_stack[1] != ~want || b->allocation_stack[2] != 0)
        c->wrong++;
    const uintptr_t **first = &c->first[want - 0x7000];
    if (*first == NULL)
        *first = b->allocation_stack;
    else if (*first != b->allocation_stack)
        c->split++;
}

START_TEST(test_trace_table_threads)
{
    fastmm_debug_set_stack_depth(3);
    fastmm_set_stack_trace_hooks(race_capture, NULL);
    static uintptr_t *blocks[RACE_THREADS][RACE_BLOCKS];
    pthread_t t[RACE_THREADS];
    for (int i = 0; i < RACE_THREADS; i++)
        REQUIRE(pthread_create(&t[i], NULL, race_thread, blocks[i]) == 0, "pthread_create failed");
    for (int i = 0; i < RACE_THREADS; i++)
        pthread_join(t[i], NULL);
    fastmm_set_stack_trace_hooks(NULL, NULL);
    static struct race_check c;
    memset(&c, 0, sizeof c);
    fastmm_walk_blocks(race_visit, &c, NULL);
    REQUIRE(c.checked == RACE_THREADS * RACE_BLOCKS, "the walk checked %u blocks of %u", c.checked,
            RACE_THREADS * RACE_BLOCKS);
    REQUIRE(c.wrong == 0, "%u blocks read back another trace than their own", c.wrong);
    REQUIRE(c.split == 0, "%u blocks carry a second stored copy of a trace", c.split);
    for (int i = 0; i < RACE_THREADS; i++)
        for (int j = 0; j < RACE_BLOCKS; j++)
            free(blocks[i][j]);
}
END_TEST

/* A capture hook that records a new trace every time: its one frame counts up. */
static uintptr_t unique_frame = 0x10000;
static void unique_capture(uintptr_t *addresses, unsigned depth)
{
    for (unsigned i = 0; i < depth; i++)
        addresses[i] = i == 0 ? unique_frame++ : 0;
}

static void first_frame(const fastmm_block_info_t *b, void *user)
{
    struct found *f = user;
    if (b->address == f->block && b->debug) {
        f->seen = 1;
        f->allocation_first = b->allocation_stack != NULL ? b->allocation_stack[0] : 1;
    }
}

/* What is wrong in the child, as its exit status (0: nothing). */
static int table_full_child(void)
{
    fastmm_debug_set_stack_depth(1);
    fastmm_set_stack_trace_hooks(unique_capture, NULL);
    void *early = malloc(40); /* its trace is stored while there is room */
    uintptr_t early_frame = unique_frame - 1;
    for (long i = 0; i < 1200000; i++) /* 2.4 million distinct traces: more than the table holds */
        free(malloc(40));
    void *late = malloc(40);
    struct found e = {early, 0, 0, 0, 0}, l = {late, 0, 0, 0, 0};
    fastmm_walk_blocks(first_frame, &e, NULL);
    fastmm_walk_blocks(first_frame, &l, NULL);
    if (!e.seen || e.allocation_first != early_frame)
        return 1; /* a stored trace was lost when the table filled up */
    if (!l.seen || l.allocation_first != 0)
        return 2; /* a trace past the limit did not read as none */
    fastmm_set_event_handler(record_report, NULL);
    fastmm_set_error_action(FASTMM_ON_ERROR_CONTINUE);
    int null = open("/dev/null", O_WRONLY);
    dup2(null, 2);
    free(late);
    free(late);
    if (strstr(report, "double free") == NULL)
        return 3;
    if (strstr(report, "(not stored: the table of distinct stack traces was full)") == NULL)
        return 4; /* the report does not say why the traces are missing */
    free(early);
    return 0;
}

/* The table is bounded: once full, a new trace is not stored and the block's report says so,
 * while every trace stored before stays readable. In a child: the full table stays behind. */
START_TEST(test_trace_table_full)
{
    if (RUNNING_ON_VALGRIND)
        return; /* millions of allocations */
    pid_t pid = fork();
    REQUIRE(pid >= 0, "fork failed");
    if (pid == 0)
        _exit(table_full_child());
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid, "waitpid failed");
    REQUIRE(WIFEXITED(status), "the child died (status %#x)", status);
    static const char *const why[] = {"", "a stored trace was lost when the table filled up",
                                      "a block allocated past the limit reads as having a trace",
                                      "the double free was not reported",
                                      "the report does not say the trace was not stored"};
    int code = WEXITSTATUS(status);
    REQUIRE(code == 0, "table full: %s (exit %d)", code < 5 ? why[code] : "?", code);
}
END_TEST

Suite *suite_traces(void)
{
    Suite *s = suite_create("traces");
    TCase *tc = tcase_create("first frame");
    tcase_add_checked_fixture(tc, debug_on, debug_off);
    tcase_set_timeout(tc, TEST_TIMEOUT);
    tcase_add_test(tc, test_trace_malloc);
    tcase_add_test(tc, test_trace_calloc);
    tcase_add_test(tc, test_trace_aligned);
    tcase_add_test(tc, test_trace_realloc);
    tcase_add_test(tc, test_trace_free);
    tcase_add_test(tc, test_trace_current_call);
    tcase_add_test(tc, test_trace_matches_backtrace);
    tcase_add_test(tc, test_trace_signal_frame);
    tcase_add_test(tc, test_trace_thread_and_fork);
    tcase_add_test(tc, test_trace_after_dlclose);
    tcase_add_test(tc, test_trace_replayed_walks);
    tcase_add_test(tc, test_dlclose_passes_through);
    tcase_add_test(tc, test_trace_file_and_line);
    suite_add_tcase(s, tc);
    tc = tcase_create("stored once");
    tcase_add_checked_fixture(tc, debug_on, debug_off);
    tcase_set_timeout(tc, TEST_TIMEOUT);
    tcase_add_test(tc, test_trace_stored_once);
    tcase_add_test(tc, test_trace_table_full);
    tcase_add_test(tc, test_trace_table_threads);
    suite_add_tcase(s, tc);
    return s;
}
