/*
 * check_usage.c - introspection: fastmm_get_usage, fastmm_os_memory, memory going back.
 *
 * Guards doc/api-contract.md section 5 and doc/fastmm5-facts.md 2.9: allocated_bytes follows the
 * live blocks, overhead is OS memory minus allocated, large blocks are unmapped at once, and
 * after a burst of every category is freed the OS memory held returns close to where it was.
 *
 * Between the measurements these tests use REQUIRE, never a passing ck_assert: Check's mark
 * point allocates, which would blur exact before/after comparisons.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <malloc.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "check_suites.h"
#include "helpers.h"

#define MIB ((size_t)1 << 20)

static size_t absdiff(size_t a, size_t b)
{
    return a > b ? a - b : b - a;
}

/* Guards allocated_bytes: after allocating blocks of N requested bytes it has grown by at least
 * N (and by no absurd amount), and after freeing them it is back where it started. */
START_TEST(test_usage_tracks_allocations)
{
    enum { NS = 1000, NM = 50, NL = 4 };
    static void *blocks[NS + NM + NL];
    size_t requested = 0, usable = 0;
    fastmm_usage_t u0, u1, u2;

    fastmm_process_pending_frees();
    fastmm_get_usage(&u0);
    for (int i = 0; i < NS + NM + NL; i++) {
        size_t n = i < NS ? 100 + (size_t)i : i < NS + NM ? 50000 + (size_t)i : 3 * MIB + (size_t)i;
        blocks[i] = malloc(n);
        REQUIRE(blocks[i] != NULL, "malloc(%zu) failed", n);
        requested += n;
        usable += fastmm_usable_size(blocks[i]);
    }
    fastmm_get_usage(&u1);
    REQUIRE(u1.allocated_bytes >= u0.allocated_bytes + requested,
            "allocated_bytes grew by %zu after allocating %zu bytes", u1.allocated_bytes - u0.allocated_bytes,
            requested);
    REQUIRE(u1.allocated_bytes <= u0.allocated_bytes + 2 * usable + 4 * MIB,
            "allocated_bytes grew by %zu for %zu usable bytes", u1.allocated_bytes - u0.allocated_bytes, usable);
    for (int i = 0; i < NS + NM + NL; i++)
        free(blocks[i]);
    fastmm_process_pending_frees();
    fastmm_get_usage(&u2);
    REQUIRE(absdiff(u2.allocated_bytes, u0.allocated_bytes) <= 64 * 1024,
            "allocated_bytes %zu before, %zu after freeing everything", u0.allocated_bytes, u2.allocated_bytes);
}
END_TEST

/* Guards the usage record's internal consistency: overhead = OS memory - allocated and
 * efficiency = allocated / OS memory, in percent. */
START_TEST(test_usage_consistency)
{
    void *keep[100];
    for (int i = 0; i < 100; i++) {
        keep[i] = malloc((size_t)i * 1000);
        REQUIRE(keep[i] != NULL, "malloc failed");
    }
    fastmm_usage_t u;
    fastmm_get_usage(&u);
    size_t os = fastmm_os_memory();
    REQUIRE(os > 0, "fastmm_os_memory() = 0 with live blocks");
    REQUIRE(u.allocated_bytes > 0, "allocated_bytes = 0 with live blocks");
    REQUIRE(u.allocated_bytes <= os, "allocated %zu > OS memory %zu", u.allocated_bytes, os);
    REQUIRE(absdiff(u.allocated_bytes + u.overhead_bytes, os) <= MIB,
            "allocated %zu + overhead %zu != OS memory %zu", u.allocated_bytes, u.overhead_bytes, os);
    double expect = 100.0 * (double)u.allocated_bytes / (double)(u.allocated_bytes + u.overhead_bytes);
    REQUIRE(u.efficiency_percent >= 0.0 && u.efficiency_percent <= 100.0, "efficiency %f out of range",
            u.efficiency_percent);
    REQUIRE(u.efficiency_percent > expect - 0.5 && u.efficiency_percent < expect + 0.5,
            "efficiency %f, expected %f", u.efficiency_percent, expect);
    for (int i = 0; i < 100; i++)
        free(keep[i]);
}
END_TEST

/* Guards that large blocks go back to the OS on free, without waiting for anything. */
START_TEST(test_large_returns_immediately)
{
    fastmm_process_pending_frees();
    size_t os0 = fastmm_os_memory();
    void *p = malloc(64 * MIB);
    REQUIRE(p != NULL, "malloc(64 MiB) failed");
    size_t os1 = fastmm_os_memory();
    REQUIRE(os1 >= os0 + 64 * MIB, "OS memory %zu -> %zu for a 64 MiB block", os0, os1);
    free(p);
    size_t os2 = fastmm_os_memory();
    REQUIRE(os2 <= os0 + MIB, "OS memory %zu before, %zu after freeing a 64 MiB block", os0, os2);
}
END_TEST

struct burst {
    void **p;
    size_t n;
    size_t requested;
};

/* Allocates about 200 MB (divided by ten when slow) in small, medium and large blocks. */
static void burst_alloc(struct burst *b, uint64_t seed)
{
    size_t ns = (size_t)test_iters(40000), nm = (size_t)test_iters(1000), nl = (size_t)test_iters(20);
    b->n = ns + nm + nl;
    b->p = calloc(b->n, sizeof *b->p);
    REQUIRE(b->p != NULL, "calloc of the pointer table failed");
    b->requested = 0;
    uint64_t rng = seed;
    for (size_t i = 0; i < b->n; i++) {
        uint64_t r = xorshift64(&rng);
        size_t sz = i < ns ? (size_t)(r % 2623) : i < ns + nm ? 2623 + (size_t)(r % 200000)
                                                               : 558905 + (size_t)(r % (4 * MIB));
        char *p = malloc(sz);
        REQUIRE(p != NULL, "burst malloc(%zu) failed", sz);
        if (sz > 0) {
            p[0] = 1;
            p[sz - 1] = 2;
        }
        b->p[i] = p;
        b->requested += sz;
    }
}

/* Frees the burst in a random order. */
static void burst_free(struct burst *b, uint64_t seed)
{
    uint64_t rng = seed;
    for (size_t i = b->n - 1; i > 0; i--) {
        size_t j = (size_t)(xorshift64(&rng) % (i + 1));
        void *t = b->p[i];
        b->p[i] = b->p[j];
        b->p[j] = t;
    }
    for (size_t i = 0; i < b->n; i++)
        free(b->p[i]);
    free(b->p);
    b->p = NULL;
}

/* Guards memory going back to the OS: after ~200 MB of mixed small/medium/large blocks are
 * freed (in random order), large blocks are unmapped at once and empty spans go back, so
 * fastmm_os_memory() stays within 64 MiB of its start even before a trim (what FastMM5's design
 * keeps: each size class's partly fed span, which pins its medium span, and one spare medium
 * span per arena); after malloc_trim(0), which retires those too, it is within 8 MiB. A second
 * burst must not ratchet it up either. */
START_TEST(test_memory_goes_back)
{
    const size_t tolerance = 8 * MIB;
    const size_t untrimmed_tolerance = 64 * MIB;
    fastmm_process_pending_frees();
    malloc_trim(0);
    size_t os0 = fastmm_os_memory();
    for (int pass = 0; pass < 2; pass++) {
        struct burst b;
        burst_alloc(&b, 0x5eed + (uint64_t)pass);
        size_t os_mid = fastmm_os_memory();
        REQUIRE(os_mid >= b.requested, "OS memory %zu below the %zu bytes live", os_mid, b.requested);
        burst_free(&b, 0xf4ee + (uint64_t)pass);
        fastmm_process_pending_frees();
        size_t os_untrimmed = fastmm_os_memory();
        REQUIRE(os_untrimmed <= os0 + untrimmed_tolerance, "pass %d: OS memory %zu at start, %zu after freeing (untrimmed)",
                pass, os0, os_untrimmed);
        malloc_trim(0);
        size_t os_end = fastmm_os_memory();
        REQUIRE(os_end <= os0 + tolerance,
                "pass %d: OS memory %zu at start, %zu with %zu bytes live, %zu after freeing them all", pass, os0,
                os_mid, b.requested, os_end);
    }
}
END_TEST

/* Resident pages among the whole pages strictly inside [p, p + size), leaving out the first and
 * last page (a free medium block's header, links and boundary tag live there). */
static size_t resident_inside(const void *p, size_t size)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = ((uintptr_t)p + page) & ~(uintptr_t)(page - 1), hi = ((uintptr_t)p + size - page) & ~(uintptr_t)(page - 1);
    if (hi <= lo)
        return 0;
    unsigned char vec[256];
    size_t n = (hi - lo) / page, resident = 0;
    REQUIRE(n <= sizeof vec, "%zu pages", n);
    REQUIRE(mincore((void *)lo, hi - lo, vec) == 0, "mincore failed");
    for (size_t i = 0; i < n; i++)
        resident += vec[i] & 1;
    return resident;
}

/* Guards the decay of big free medium blocks (medium.c): a free block of 128 KiB or more that
 * stays free for 30 ms has its pages given back at the next free that leaves such a block in
 * its arena, and the blocks around it keep their contents; one freed just now keeps its pages
 * (a program reusing it soon pays no page faults). malloc_trim gives the pages back at once.
 * Fails if the pass never runs, gives back too early, or touches a neighbour. */
/* Whether MADV_DONTNEED takes pages away here (qemu-user, which runs the i386 and aarch64 legs
 * of CI, has long ignored it). */
static bool dontneed_works(void)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    char *p = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return false;
    p[0] = 1;
    unsigned char vec[1] = {0};
    bool works = madvise(p, page, MADV_DONTNEED) == 0 && mincore(p, page, vec) == 0 && !(vec[0] & 1);
    munmap(p, page);
    return works;
}

START_TEST(test_big_free_medium_pages_decay)
{
    /* Debug blocks keep their pattern and are never given back, and a block merged with a freed
     * debug block that earlier tests left beside it counts as one: so only in a process of its
     * own (CK_FORK=no, as under check-valgrind, runs every test in one process). */
    const char *fork_mode = getenv("CK_FORK");
    if (fastmm_debug_active() || (fork_mode != NULL && strcmp(fork_mode, "no") == 0) || !dontneed_works())
        return;
    enum { N = 6 };
    const size_t big = 300u << 10, sep = 8u << 10;
    char *blocks[N], *seps[N];
    for (int i = 0; i < N; i++) {
        blocks[i] = malloc(big);
        seps[i] = malloc(sep); /* in use between them: the freed blocks stay separate */
        REQUIRE(blocks[i] != NULL && seps[i] != NULL, "allocation failed");
        memset(blocks[i], 0x5a, big);
        memset(seps[i], 0xa5, sep);
    }
    char *trigger = malloc(big);
    REQUIRE(trigger != NULL, "allocation failed");
    memset(trigger, 1, big);
    for (int i = 0; i < N; i++)
        free(blocks[i]);
    settle_frees(); /* the last one too, 60 ms before the trigger */
    struct timespec pause = {0, 60 * 1000 * 1000};
    nanosleep(&pause, NULL);
    free(trigger); /* leaves a big free block: the due pass gives back the ones 60 ms old */
    settle_frees();
    size_t resident = 0;
    for (int i = 0; i < N; i++)
        resident += resident_inside(blocks[i], big);
    size_t trigger_resident = resident_inside(trigger, big);
    for (int i = 0; i < N; i++)
        for (size_t k = 0; k < sep; k++)
            REQUIRE((unsigned char)seps[i][k] == 0xa5, "separator %d byte %zu changed", i, k);
    REQUIRE(resident == 0, "%zu pages still resident inside the freed blocks", resident);
    REQUIRE(trigger_resident > 0, "the block freed just now was given back at once");
    REQUIRE(malloc_trim(0) == 1, "malloc_trim gave nothing back");
    REQUIRE(resident_inside(trigger, big) == 0, "malloc_trim left the pages of a free block");
    for (int i = 0; i < N; i++)
        free(seps[i]);
}
END_TEST

/* Guards fastmm_write_usage_report: it writes a non-empty report to the descriptor. */
START_TEST(test_usage_report_writes)
{
    char path[256];
    int fd = make_tmp(path, sizeof path);
    void *p = malloc(1000);
    fastmm_write_usage_report(fd);
    free(p);
    struct stat st;
    ck_assert_int_eq(fstat(fd, &st), 0);
    close(fd);
    unlink(path);
    ck_assert_msg(st.st_size > 0, "fastmm_write_usage_report wrote nothing");
}
END_TEST

Suite *suite_usage(void)
{
    Suite *s = suite_create("usage");

    TCase *tc = tcase_create("usage");
    tcase_set_timeout(tc, TEST_TIMEOUT);
    tcase_add_test(tc, test_usage_tracks_allocations);
    tcase_add_test(tc, test_usage_consistency);
    tcase_add_test(tc, test_large_returns_immediately);
    tcase_add_test(tc, test_memory_goes_back);
    tcase_add_test(tc, test_usage_report_writes);
    tcase_add_test(tc, test_big_free_medium_pages_decay);
    suite_add_tcase(s, tc);

    return s;
}
