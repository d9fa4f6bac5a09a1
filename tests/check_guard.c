/*
 * check_guard.c - guarded allocations (FASTMM5_GUARD): faults at the bad instruction, the report
 * and its event, the signal the process dies of, and correct programs left unharmed.
 *
 * FASTMM5_GUARD is read at start-up, so every case runs a scenario in a fresh process: the runner
 * forks and executes itself with FASTMM5_GUARD (and FASTMM_TEST_GUARD_SCENARIO, which check_main.c
 * hands to guard_scenario instead of running the suites). The scenario's event handler writes
 * "EVENT <type>" to standard error; the test reads that and the report, and checks how the
 * process ended (the signal, or exit status 0 for a scenario that must survive).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check_suites.h"


/* ---- the scenarios, in the child process ---- */

static void on_event(const fastmm_event_t *event, void *user)
{
    (void)user;
    char line[32];
    int n = snprintf(line, sizeof line, "EVENT %d\n", (int)event->type); /* no allocation */
    ssize_t w = write(2, line, (size_t)n);
    (void)w;
}

static char source[256];

static int scenario_correct(void)
{
    /* aligned blocks, at every alignment up to a page and one beyond it (served unguarded) */
    static const size_t aligns[] = {16, 32, 64, 256, 4096, 8192};
    for (size_t i = 0; i < sizeof aligns / sizeof aligns[0]; i++) {
        void *p = NULL;
        if (posix_memalign(&p, aligns[i], 100) != 0 || ((uintptr_t)p & (aligns[i] - 1)) != 0)
            return 10;
        memset(p, 1, 100);
        free(p);
        char *q = launder_ptr(aligned_alloc(aligns[i], aligns[i] * 2));
        if (q == NULL || ((uintptr_t)q & (aligns[i] - 1)) != 0)
            return 11;
        q[aligns[i] * 2 - 1] = 1;
        free(q);
    }
    /* an alignment asked for is kept whatever the size (C's for the size may be smaller) */
    for (size_t n = 0; n < 40; n++) {
        /* laundered: their alloc_align attribute lets the compiler assume the alignment */
        char *p = launder_ptr(aligned_alloc(16, n)), *q = launder_ptr(memalign(32, n));
        if (p == NULL || q == NULL || ((uintptr_t)p & 15) != 0 || ((uintptr_t)q & 31) != 0)
            return 21;
        free(p);
        free(q);
    }
    /* every malloc'd block is aligned as C requires for its size */
    for (size_t n = 1; n < 100; n++) {
        char *p = malloc(n);
        size_t need = n >= FM_MIN_ALIGN ? FM_MIN_ALIGN : n >= 8 ? 8 : n >= 4 ? 4 : n >= 2 ? 2 : 1;
        if (p == NULL || ((uintptr_t)p & (need - 1)) != 0 || fastmm_usable_size(p) < n)
            return 12;
        memset(p, 0x5a, n);
        free(p);
    }
    errno = 0;
    if (calloc(launder_size(SIZE_MAX / 2), 4) != NULL || errno != ENOMEM)
        return 13;
    errno = 0;
    if (malloc(launder_size(SIZE_MAX / 2)) != NULL || errno != ENOMEM)
        return 14;
    unsigned char *z = calloc(10, 100);
    for (size_t i = 0; z != NULL && i < 1000; i++)
        if (z[i] != 0)
            return 15;
    free(z);
    /* realloc growth and shrink keep the data */
    unsigned char *r = malloc(100);
    for (int i = 0; i < 100; i++)
        r[i] = (unsigned char)i;
    r = realloc(r, 100000);
    for (int i = 0; r != NULL && i < 100; i++)
        if (r[i] != (unsigned char)i)
            return 16;
    r = realloc(r, 50);
    for (int i = 0; r != NULL && i < 50; i++)
        if (r[i] != (unsigned char)i)
            return 17;
    free(r);
    char *r0 = realloc(NULL, 20);
    if (r0 == NULL)
        return 18;
    free(r0);
    /* two malloc(0) differ, and free takes them */
    char *a = malloc(0), *b = malloc(0);
    if (a == NULL || b == NULL || a == b)
        return 19;
    free(a);
    free(b);
    /* many live blocks, then freed: the quarantine evicts the oldest without harm */
    static void *keep[6000];
    for (int i = 0; i < 6000; i++)
        if ((keep[i] = malloc(24)) == NULL)
            return 20;
    for (int i = 0; i < 6000; i++)
        free(keep[i]);
    puts("CORRECT OK");
    return 0;
}

/* Blocks of 32 bytes: a guarded one (overflow side, normal mode) measures exactly 32, where a
 * plain one has the usable size of its class; in debug mode both measure 32, and a guarded one
 * ends on a page boundary. Counts them, then overruns one: it must fault. */
static int scenario_sampled(void)
{
    enum { N = 20000 };
    static char *blocks[N];
    int guarded = 0, last = -1;
    bool debug = fastmm_debug_active();
    for (int i = 0; i < N; i++) {
        blocks[i] = malloc(32);
        bool g = debug ? ((uintptr_t)blocks[i] + 32) % 4096 == 0 : fastmm_usable_size(blocks[i]) == 32;
        if (g)
            guarded++, last = i;
    }
    printf("GUARDED %d of %d\n", guarded, N);
    fflush(stdout);
    if (last < 0 || guarded > N / 2)
        return 30;
    memcpy(launder_ptr(blocks[last]), source, 64); /* faults: a sampled block is guarded */
    return 31;
}

/* Whether the byte at a can be read, asked of the kernel (write(2) from a no-access page into a
 * pipe fails with EFAULT) rather than by touching it. */
static bool readable(const void *a)
{
    static int fd[2] = {-1, -1};
    char c;
    if (fd[0] < 0 && pipe(fd) != 0)
        return false;
    if (write(fd[1], a, 1) != 1)
        return false;
    return read(fd[0], &c, 1) == 1;
}

/* A guarded block of n bytes (overflow side) ends on a no-access page; a debug block's footer
 * follows it, a plain block's neighbours. */
static bool guarded(const char *p, size_t n)
{
    return (uintptr_t)(p + n) % (uintptr_t)sysconf(_SC_PAGESIZE) == 0 && !readable(p + n);
}

/* Sampled blocks of 5008 bytes (a multiple of 16: they end on the page) take the class of two
 * pages, whose 128 slots are the only ones sampling has: with FASTMM5_GUARD=sample:1 in debug
 * mode (every allocation a chance, about two in three chosen), 2000 live blocks are 128 guarded
 * ones and the rest plain, every one usable. Freed and allocated again, the freed slots serve
 * the samples: 128 again. */
static int scenario_exhausted(void)
{
    enum { N = 2000, SIZE = 5008 };
    static char *blocks[N];
    for (int round = 0; round < 2; round++) {
        int count = 0;
        for (int i = 0; i < N; i++) {
            if ((blocks[i] = malloc(SIZE)) == NULL)
                return 40;
            memset(blocks[i], 1, SIZE);
            count += guarded(blocks[i], SIZE);
        }
        printf("ROUND %d: GUARDED %d of %d\n", round, count, N);
        for (int i = 0; i < N; i++)
            free(blocks[i]);
    }
    return 0;
}

/* sample:1, debug mode: once each of the class's 128 slots has held a freed block, the next
 * sample takes the oldest slot again, at the first block's address; that block freed too, a
 * stale write through the first pointer faults as a use after free of the slot's freed block. */
static int scenario_slot_reused(void)
{
    enum { SIZE = 5008 };
    char *first = NULL, *again = NULL;
    int made = 0;
    for (int i = 0; i < 100000 && made < 128; i++) {
        char *q = malloc(SIZE);
        if (guarded(q, SIZE)) {
            first = first != NULL ? first : q;
            made++;
        }
        free(q);
    }
    for (int i = 0; i < 100000 && again == NULL; i++) {
        char *q = malloc(SIZE);
        if (guarded(q, SIZE))
            again = q;
        else
            free(q);
    }
    if (first == NULL || again != first)
        return 41;
    puts("REUSED");
    free(again);
    ((volatile char *)launder_ptr(first))[0] = 1;
    puts("SURVIVED");
    return 3;
}

/* FASTMM5_GUARD=all: a freed block's address comes back only when its slot is the oldest of the
 * class's 4096 quarantined ones. */
static int scenario_slot_return(void)
{
    char *first = malloc(32);
    free(first);
    int back = 0;
    for (int i = 1; i <= 5000 && back == 0; i++) {
        char *q = malloc(32);
        if (q == first)
            back = i;
        free(q);
    }
    printf("BACK AFTER %d\n", back);
    return 0;
}

/* A guarded block whose last pointer is gone is reported by the leak check like any other:
 * definitely lost, in a record of its own whose first block it is, with its allocation stack. */
#define MASK ((uintptr_t)0xa5a5a5a5a5a5a5a5u)
static uintptr_t hidden_lost; /* the block's address ^ MASK: not a pointer to it */
static int lost_records;

static void on_leak(const fastmm_event_t *event, void *user)
{
    (void)user;
    if (event->type != FASTMM_EVENT_LEAK_DETAIL || (uintptr_t)event->block != (hidden_lost ^ MASK))
        return;
    lost_records++;
    char line[96];
    int n = snprintf(line, sizeof line, "LOST kind %d, %zu bytes in %zu block(s)\n", (int)event->leak_kind,
                     event->size, event->leak_blocks); /* no allocation */
    ssize_t w = write(1, line, (size_t)n);
    (void)w;
}

static __attribute__((noinline)) bool plant_lost(void)
{
    char *p = malloc(112);
    memset(p, 7, 112);
    hidden_lost = (uintptr_t)p ^ MASK;
    return guarded(p, 112);
}

/* Overwrites the stack below the caller, where plant_lost kept its pointer. */
static __attribute__((noinline)) void clobber_stack(void)
{
    volatile char buf[32768];
    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = 0;
    escape((const void *)buf);
}

static int scenario_leak(void)
{
    if (!plant_lost())
        return 50; /* not a guarded block */
    clobber_stack();
    fastmm_set_event_handler(on_leak, NULL);
    fastmm_leak_check();
    printf("RECORDS %d (definitely lost is %d)\n", lost_records, (int)FASTMM_LEAK_DEFINITELY_LOST);
    return 0;
}

/* FASTMM5_QUARANTINE=4M, debug mode: a freed block is not handed out again at once, and a
 * stale write into it is found by the scan (or when it leaves the quarantine, or by a fault in
 * a large one), while the new block is untouched. */
static int scenario_quarantine(const char *how)
{
    size_t size = strcmp(how, "large") == 0 ? 1u << 20 : 100;
    char *p = malloc(size);
    free(p);
    char *q = malloc(size);
    if (q == p) {
        puts("REUSED AT ONCE");
        return 4;
    }
    memset(q, 7, size);
    ((volatile char *)launder_ptr(p))[size / 2] = 1; /* a stale write: into the freed block */
    if (strcmp(how, "scan") == 0) {
        fastmm_debug_scan(); /* reports it: MODIFIED_AFTER_FREE, then aborts */
    } else if (strcmp(how, "leave") == 0) {
        for (int i = 0; i < 10000; i++) /* about 10 MB freed: the 4 MiB quarantine lets p go */
            free(malloc(1000));
    }
    puts("SURVIVED");
    return 3;
}

int guard_scenario(const char *name);
int guard_scenario(const char *name)
{
    fastmm_set_event_handler(on_event, NULL);
    setvbuf(stdout, NULL, _IONBF, 0);
    char *p = malloc(64);
    escape(p);
    if (strcmp(name, "overflow-1") == 0)
        memcpy(launder_ptr(p + 1), source, 64);
    else if (strcmp(name, "overflow-32") == 0)
        memcpy(launder_ptr(p + 32), source, 64);
    else if (strcmp(name, "underflow") == 0)
        memcpy(launder_ptr(p - 1), source, 8);
    else if (strcmp(name, "write-after-free") == 0) {
        free(p);
        ((volatile char *)launder_ptr(p))[0] = 1;
    } else if (strcmp(name, "read-after-free") == 0) {
        free(p);
        printf("%d\n", ((volatile char *)launder_ptr(p))[10]);
    } else if (strcmp(name, "malloc0") == 0) {
        char *z = malloc(0);
        printf("%d\n", ((volatile char *)launder_ptr(z))[0]);
    } else if (strcmp(name, "slack") == 0) {
        char *s = malloc(13); /* 8-aligned: 3 slack bytes before the guard page */
        ((volatile char *)launder_ptr(s))[13] = 1;
        free(s);
    } else if (strcmp(name, "double-free") == 0) {
        free(p);
        free(launder_ptr(p));
    } else if (strcmp(name, "correct") == 0) {
        return scenario_correct();
    } else if (strcmp(name, "sampled") == 0) {
        return scenario_sampled();
    } else if (strcmp(name, "leak") == 0) {
        return scenario_leak();
    } else if (strcmp(name, "exhausted") == 0) {
        return scenario_exhausted();
    } else if (strcmp(name, "slot-reused") == 0) {
        return scenario_slot_reused();
    } else if (strcmp(name, "slot-return") == 0) {
        return scenario_slot_return();
    } else if (strncmp(name, "quarantine-", 11) == 0) {
        return scenario_quarantine(name + 11);
    } else {
        return 2;
    }
    puts("SURVIVED");
    return 3;
}

/* ---- the tests, in the runner ---- */

typedef struct outcome {
    int status;
    char text[65536];
} outcome_t;
static outcome_t out;

static const char *quarantine; /* FASTMM5_QUARANTINE for the next run (NULL: unset) */

/* guard NULL: FASTMM5_GUARD unset */
static void run(const char *guard, bool debug, const char *scenario)
{
    int pipefd[2];
    ck_assert_int_eq(pipe(pipefd), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        dup2(pipefd[1], 1);
        dup2(pipefd[1], 2);
        close(pipefd[0]);
        if (guard != NULL)
            setenv("FASTMM5_GUARD", guard, 1);
        else
            unsetenv("FASTMM5_GUARD");
        if (quarantine != NULL)
            setenv("FASTMM5_QUARANTINE", quarantine, 1);
        else
            unsetenv("FASTMM5_QUARANTINE");
        setenv("FASTMM_TEST_GUARD_SCENARIO", scenario, 1);
        if (debug)
            setenv("FASTMM5_DEBUG", "1", 1);
        else
            unsetenv("FASTMM5_DEBUG");
        unsetenv("FASTMM5_ON_ERROR");
        signal(SIGSEGV, SIG_DFL);
        execl("/proc/self/exe", "check_fastmm5", (char *)NULL);
        _exit(127);
    }
    close(pipefd[1]);
    size_t len = 0;
    ssize_t n;
    while ((n = read(pipefd[0], out.text + len, sizeof out.text - 1 - len)) > 0)
        len += (size_t)n;
    out.text[len] = '\0';
    close(pipefd[0]);
    ck_assert_int_eq(waitpid(pid, &out.status, 0), pid);
}

static void expect_signal(int sig, int event, const char *phrase)
{
    char want[32];
    snprintf(want, sizeof want, "EVENT %d\n", event);
    ck_assert_msg(WIFSIGNALED(out.status) && WTERMSIG(out.status) == sig, "expected death by signal %d, status %#x:\n%s",
                  sig, out.status, out.text);
    ck_assert_msg(strstr(out.text, want) != NULL, "expected %s in:\n%s", want, out.text);
    ck_assert_msg(strstr(out.text, phrase) != NULL, "expected \"%s\" in:\n%s", phrase, out.text);
    ck_assert_msg(strstr(out.text, "SURVIVED") == NULL, "%s", out.text);
}

START_TEST(overflow_by_1_faults)
{
    run("all", false, "overflow-1");
    expect_signal(SIGSEGV, FASTMM_EVENT_BUFFER_OVERRUN, "1 byte past the end of the block");
    ck_assert_msg(strstr(out.text, "ending on the guard page") && strstr(out.text, "Stack trace of the faulting access"), "%s",
                  out.text);
}
END_TEST

START_TEST(overflow_by_32_faults)
{
    run("overflow", true, "overflow-32");
    expect_signal(SIGSEGV, FASTMM_EVENT_BUFFER_OVERRUN, "past the end of the block");
    ck_assert_msg(strstr(out.text, "stack trace of the allocation"), "%s", out.text);
}
END_TEST

START_TEST(underflow_faults)
{
    run("underflow", false, "underflow");
    expect_signal(SIGSEGV, FASTMM_EVENT_BUFFER_UNDERRUN, "1 byte before the start of the block");
}
END_TEST

START_TEST(write_after_free_faults)
{
    run("all", true, "write-after-free");
    expect_signal(SIGSEGV, FASTMM_EVENT_USE_AFTER_FREE, "a write at");
    ck_assert_msg(strstr(out.text, "offset 0 into the freed block") && strstr(out.text, "stack trace of the free"),
                  "%s", out.text);
}
END_TEST

START_TEST(read_after_free_faults)
{
    run("all", false, "read-after-free");
    expect_signal(SIGSEGV, FASTMM_EVENT_USE_AFTER_FREE, "offset 10 into the freed block");
    ck_assert_msg(strstr(out.text, "a read at") != NULL || strstr(out.text, "a read or write at") != NULL, "%s",
                  out.text);
}
END_TEST

START_TEST(malloc0_byte0_faults)
{
    run("all", false, "malloc0");
    expect_signal(SIGSEGV, FASTMM_EVENT_BUFFER_OVERRUN, "of 0 bytes");
}
END_TEST

START_TEST(slack_checked_at_free)
{
    run("all", false, "slack");
    expect_signal(SIGABRT, FASTMM_EVENT_FOOTER_CORRUPTION, "1 byte past its end");
}
END_TEST

START_TEST(double_free_reported)
{
    run("all", false, "double-free");
    expect_signal(SIGABRT, FASTMM_EVENT_DOUBLE_FREE, "double free");
}
END_TEST

static void expect_correct(void)
{
    ck_assert_msg(WIFEXITED(out.status) && WEXITSTATUS(out.status) == 0 && strstr(out.text, "CORRECT OK"),
                  "status %#x:\n%s", out.status, out.text);
    ck_assert_msg(strstr(out.text, "EVENT") == NULL, "%s", out.text);
}

/* A scenario that must survive, print `text` and raise no event. */
static void expect_correct_with(const char *text)
{
    ck_assert_msg(WIFEXITED(out.status) && WEXITSTATUS(out.status) == 0 && strstr(out.text, text), "status %#x:\n%s",
                  out.status, out.text);
    ck_assert_msg(strstr(out.text, "EVENT") == NULL, "%s", out.text);
}

START_TEST(correct_programs_unharmed)
{
    run("all", false, "correct");
    expect_correct();
    run("all", true, "correct");
    expect_correct();
    run("underflow", true, "correct");
    expect_correct();
    run("sample:3", false, "correct");
    expect_correct();
}
END_TEST

START_TEST(sampled_blocks_guarded)
{
    run("sample:100", _i == 1, "sampled");
    expect_signal(SIGSEGV, FASTMM_EVENT_BUFFER_OVERRUN, "past the end of the block");
    ck_assert_msg(strstr(out.text, "GUARDED ") != NULL, "%s", out.text);
}
END_TEST

START_TEST(exhausted_slots_fall_back)
{
    run("sample:1", true, "exhausted");
    expect_correct_with("ROUND 0: GUARDED 128 of 2000\nROUND 1: GUARDED 128 of 2000\n");
}
END_TEST

START_TEST(reused_slot_stale_pointer_faults)
{
    run("sample:1", true, "slot-reused");
    expect_signal(SIGSEGV, FASTMM_EVENT_USE_AFTER_FREE, "offset 0 into the freed block");
    ck_assert_msg(strstr(out.text, "REUSED\n") != NULL && strstr(out.text, "stack trace of the free"), "%s", out.text);
}
END_TEST

START_TEST(freed_slot_waits_in_quarantine)
{
    run("all", false, "slot-return");
    expect_correct_with("BACK AFTER 4096\n");
}
END_TEST

START_TEST(lost_guarded_block_reported)
{
    char lost[64], records[64];
    run("all", false, "leak");
    snprintf(lost, sizeof lost, "LOST kind %d, 112 bytes in 1 block(s)\n", (int)FASTMM_LEAK_DEFINITELY_LOST);
    snprintf(records, sizeof records, "RECORDS 1 (definitely lost is %d)\n", (int)FASTMM_LEAK_DEFINITELY_LOST);
    ck_assert_msg(WIFEXITED(out.status) && WEXITSTATUS(out.status) == 0 && strstr(out.text, lost) &&
                      strstr(out.text, records),
                  "status %#x:\n%s", out.status, out.text);
    ck_assert_msg(strstr(out.text, "112 bytes in 1 block is definitely lost") != NULL &&
                      strstr(out.text, "is a guarded block (FASTMM5_GUARD); allocated at:") != NULL,
                  "%s", out.text);
}
END_TEST

START_TEST(quarantine_keeps_freed_blocks)
{
    quarantine = "4M";
    run(NULL, true, "quarantine-scan");
    expect_signal(SIGABRT, FASTMM_EVENT_MODIFIED_AFTER_FREE, "fastmm_debug_scan");
    run(NULL, true, "quarantine-leave");
    expect_signal(SIGABRT, FASTMM_EVENT_MODIFIED_AFTER_FREE, "the quarantine");
    run(NULL, true, "quarantine-large"); /* its pages have no access: a fault, reported */
    expect_signal(SIGSEGV, FASTMM_EVENT_USE_AFTER_FREE, "waiting in the quarantine");
    ck_assert_msg(strstr(out.text, "offset 524288 into the freed block") != NULL, "%s", out.text);
    quarantine = NULL;
    run(NULL, true, "quarantine-scan"); /* the control: FastMM5's LIFO reuse */
    ck_assert_msg(WIFEXITED(out.status) && WEXITSTATUS(out.status) == 4, "status %#x:\n%s", out.status, out.text);
}
END_TEST

Suite *suite_guard(void)
{
    Suite *s = suite_create("guard");
    TCase *tc = tcase_create("faults");
    tcase_set_timeout(tc, TEST_TIMEOUT);
    /* The scenarios run in a fresh process of the runner (fork and exec): under Valgrind
     * (check-valgrind, CK_FORK=no) that process would run outside memcheck, and memcheck reports
     * the guard pages' deliberate faults itself; the suite is left empty there. */
#if CHECK_MAJOR_VERSION > 0 || CHECK_MINOR_VERSION >= 11
    /* CK_EXCLUDE_TAGS=exec-self leaves it out: under qemu-user without binfmt_misc the kernel
     * cannot start the runner again (exit 127; .ci/arch-legs). */
    tcase_set_tags(tc, "exec-self");
#endif
    if (!RUNNING_ON_VALGRIND && test_forking()) {
        tcase_add_test(tc, overflow_by_1_faults);
        tcase_add_test(tc, overflow_by_32_faults);
        tcase_add_test(tc, underflow_faults);
        tcase_add_test(tc, write_after_free_faults);
        tcase_add_test(tc, read_after_free_faults);
        tcase_add_test(tc, malloc0_byte0_faults);
        tcase_add_test(tc, slack_checked_at_free);
        tcase_add_test(tc, double_free_reported);
        tcase_add_test(tc, correct_programs_unharmed);
        tcase_add_loop_test(tc, sampled_blocks_guarded, 0, 2);
        tcase_add_test(tc, exhausted_slots_fall_back);
        tcase_add_test(tc, reused_slot_stale_pointer_faults);
        tcase_add_test(tc, freed_slot_waits_in_quarantine);
        tcase_add_test(tc, lost_guarded_block_reported);
        tcase_add_test(tc, quarantine_keeps_freed_blocks);
    }
    suite_add_tcase(s, tc);
    return s;
}
