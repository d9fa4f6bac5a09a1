/*
 * check_debug.c - debug mode: fill patterns, corruption and misuse reports, mode switching,
 * stack traces, allocation numbers and groups, leak reports, memory growth.
 *
 * Guards include/fastmm5.h sections 2-4 and doc/fastmm5-facts.md section 4: a block
 * allocated while debug mode is active is a debug block (usable size == requested size, filled
 * with 0x90, 0x80 plus the freed-object marker once freed) and keeps that treatment after debug
 * mode ends; a write past its end, into its header, or into it after it was freed, a double free,
 * a realloc of a freed block and a free of an interior pointer are each reported with their own
 * event; fastmm_debug_scan() finds a modified freed block and reports the modified bytes as
 * "offset(length)" runs; leaks are reported block by block, then summarised.
 *
 * Most tests run under FASTMM_ON_ERROR_CONTINUE with a recording event handler (the reports on
 * standard error go to /dev/null meanwhile); the default abort is tested in forked children.
 * Every corruption a test makes is undone before the test ends (the byte is put back, and a
 * block that was refused is then freed properly), so that the heap is clean again for the next
 * test even under CK_FORK=no. Between a free and the check of what it did the tests use REQUIRE,
 * never a passing ck_assert: Check's mark point allocates, which could reuse the freed block.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check_suites.h"
#include "helpers.h"

#define MIB ((size_t)1 << 20)
#define DEFAULT_OPTIONS (FASTMM_DEBUG_NEVER_FREE_SMALL_SPANS | FASTMM_DEBUG_NEVER_MERGE_FREE_MEDIUM_BLOCKS)
#define ALL_OPTIONS (DEFAULT_OPTIONS | FASTMM_DEBUG_SCAN_EVERY_OPERATION)
#define FILL_ALLOCATED 0x90
#define FILL_FREED 0x80
#define MARKER_MIN_SIZE (2 * sizeof(void *))

/* ------------------------------------------------------------------------------------------ */
/* Expectations on the recorded events (the recorder: helpers.c)                               */
/* ------------------------------------------------------------------------------------------ */

/* Fails unless exactly one event was raised since `before`, of this type, about this block. */
static void expect_event(size_t before, fastmm_event_type_t type, const void *block, const char *what)
{
    size_t n = evn();
    REQUIRE(n == before + 1, "%s: %zu events, expected 1 (%s)", what, n - before, event_name(type));
    REQUIRE(!ev_bad_user(), "%s: the handler got the wrong user pointer", what);
    REQUIRE(ev_at(before).type == type, "%s: event %s, expected %s", what, event_name((int)ev_at(before).type),
            event_name((int)type));
    REQUIRE(ev_at(before).block == block, "%s: event block %p, expected %p", what, ev_at(before).block, block);
}

static void expect_no_event(size_t before, const char *what)
{
    size_t n = evn();
    REQUIRE(n == before, "%s: %zu unexpected event(s), the first %s about %p: \"%.400s\"", what, n - before,
            event_name((int)ev_at(before).type), ev_at(before).block,
            ev_last_text());
}

static const char runs_key[] = "Modified byte offsets (and lengths): ";

/* The modified-runs list of a MODIFIED_AFTER_FREE report, up to the end of its line, equals want. */
static int runs_are(const char *text, const char *want)
{
    const char *s = strstr(text, runs_key);
    if (s == NULL)
        return 0;
    s += sizeof runs_key - 1;
    size_t len = strcspn(s, "\r\n");
    return len == strlen(want) && memcmp(s, want, len) == 0;
}

/* For failure messages: the report's runs line, or the start of the report if it has none. */
static const char *runs_line(const char *text)
{
    const char *s = strstr(text, runs_key);
    return s != NULL ? s : text;
}

/* ------------------------------------------------------------------------------------------ */
/* Fixtures                                                                                     */
/* ------------------------------------------------------------------------------------------ */

/* Recording handler, FASTMM_ON_ERROR_CONTINUE, quiet standard error; debug mode off. */
static void record_setup(void)
{
    ev_record();
    fastmm_set_error_action(FASTMM_ON_ERROR_CONTINUE);
    quiet_stderr();
}

/* Undoes everything a test may have changed (CK_FORK=no runs every test in one process). */
static void record_teardown(void)
{
    restore_stderr();
    while (fastmm_debug_exit())
        ;
    fastmm_debug_set_options(DEFAULT_OPTIONS);
    fastmm_debug_set_stack_depth(20);
    fastmm_debug_set_allocation_group(0);
    fastmm_debug_break_on_allocation(0);
    fastmm_set_stack_trace_hooks(NULL, NULL);
    fastmm_set_error_action(FASTMM_ON_ERROR_ABORT);
    fastmm_set_event_handler(NULL, NULL);
}

/* The same, with debug mode entered once. */
static void debug_setup(void)
{
    record_setup();
    fastmm_debug_enter();
}

static void debug_teardown(void)
{
    record_teardown();
}

/* ------------------------------------------------------------------------------------------ */
/* Helpers                                                                                      */
/* ------------------------------------------------------------------------------------------ */

/* free() through a laundered pointer: the caller may still read the freed block (allowed here:
 * small and medium debug blocks stay mapped) without GCC's use-after-free reasoning. */
static void free_keep(void *p)
{
    free(launder_ptr(p));
}

/* Flips bits of one byte and makes the store stick: GCC treats malloc and free as builtins that
 * read no memory, so without the barrier a write followed by free(p) (or malloc) and then undone
 * would be dropped as dead. Used for every deliberate corruption and its repair. */
static void flip(unsigned char *at, unsigned char bits)
{
    *at ^= bits;
    escape(at);
}

static unsigned char *xmalloc(size_t n)
{
    unsigned char *p = launder_ptr(malloc(launder_size(n)));
    REQUIRE(p != NULL, "malloc(%zu) failed", n);
    return p;
}

/* The freed-object marker: the first word of a freed debug block of 16 bytes. */
static uintptr_t freed_marker(void)
{
    unsigned char *p = xmalloc(MARKER_MIN_SIZE);
    free_keep(p);
    uintptr_t m;
    memcpy(&m, p, sizeof m);
    return m;
}

/* Offset of the first byte of a freed debug block of n bytes that is not the freed image
 * (marker word, then 0x80), or SIZE_MAX. */
static size_t check_freed_image(const unsigned char *p, size_t n, uintptr_t marker)
{
    size_t i = 0;
    if (n >= MARKER_MIN_SIZE) {
        for (; i < sizeof marker; i++)
            if (p[i] != ((const unsigned char *)&marker)[i])
                return i;
    }
    for (; i < n; i++)
        if (p[i] != FILL_FREED)
            return i;
    return SIZE_MAX;
}

static size_t check_fill(const unsigned char *p, size_t n, unsigned char byte)
{
    TEST_MAKE_DEFINED(p, n);
    for (size_t i = 0; i < n; i++)
        if (p[i] != byte)
            return i;
    return SIZE_MAX;
}

/* ------------------------------------------------------------------------------------------ */
/* 1. Fill patterns                                                                             */
/* ------------------------------------------------------------------------------------------ */

/* Guards the fill patterns (doc/fastmm5-facts.md 4.4, 4.5): every user byte of a new debug block of 1 to 1025
 * bytes is 0x90 and its usable size is exactly the request; right after free every byte is 0x80
 * except, from 16 bytes up, the first word, which holds the freed-object marker - one value,
 * the same for every freed block, and neither fill pattern. calloc gives zeros instead of 0x90,
 * and the fill also covers medium and large blocks. No event along the way. */
START_TEST(test_fill_patterns)
{
    uintptr_t marker = freed_marker();
    REQUIRE(marker != 0 && marker != (uintptr_t)0x8080808080808080ULL && marker != (uintptr_t)0x9090909090909090ULL,
            "freed-object marker %#lx is not a distinct value", (unsigned long)marker);
    REQUIRE(freed_marker() == marker, "two freed 16-byte blocks have different markers");
    for (size_t n = 1; n <= 1025; n++) {
        unsigned char *p = xmalloc(n);
        REQUIRE(((uintptr_t)p & (FASTMM_MIN_ALIGNMENT - 1)) == 0, "debug block %p of %zu bytes misaligned", p, n);
        size_t u = fastmm_usable_size(p);
        REQUIRE(u == n, "fastmm_usable_size of a %zu-byte debug block = %zu", n, u);
        size_t bad = check_fill(p, n, FILL_ALLOCATED);
        REQUIRE(bad == SIZE_MAX, "%zu-byte debug block: byte %zu is %#x, expected 0x90", n, bad, bad == SIZE_MAX ? 0 : p[bad]);
        free_keep(p);
        bad = check_freed_image(p, n, marker);
        REQUIRE(bad == SIZE_MAX, "freed %zu-byte debug block: byte %zu is %#x, expected the %s", n, bad,
                bad == SIZE_MAX ? 0 : p[bad], n >= MARKER_MIN_SIZE && bad < 8 ? "marker" : "0x80 fill");
    }
    for (size_t n = 1; n <= 1025; n += 7) {
        unsigned char *p = launder_ptr(calloc(1, launder_size(n)));
        REQUIRE(p != NULL, "calloc(1, %zu) failed", n);
        REQUIRE(fastmm_usable_size(p) == n, "fastmm_usable_size of a %zu-byte debug calloc block", n);
        size_t bad = check_fill(p, n, 0);
        REQUIRE(bad == SIZE_MAX, "%zu-byte debug calloc block: byte %zu is %#x, expected 0", n, bad, bad == SIZE_MAX ? 0 : p[bad]);
        free_keep(p);
        bad = check_freed_image(p, n, marker);
        REQUIRE(bad == SIZE_MAX, "freed %zu-byte debug calloc block: byte %zu wrong", n, bad);
    }
    static const size_t big[] = {2622, 2623, 3000, 20000, 100000, 558904, 600000, 2 * MIB + 3};
    for (size_t i = 0; i < sizeof big / sizeof big[0]; i++) {
        size_t n = big[i];
        unsigned char *p = xmalloc(n);
        REQUIRE(fastmm_usable_size(p) == n, "fastmm_usable_size of a %zu-byte debug block = %zu", n,
                fastmm_usable_size(p));
        size_t bad = check_fill(p, n, FILL_ALLOCATED);
        REQUIRE(bad == SIZE_MAX, "%zu-byte debug block: byte %zu is not 0x90", n, bad);
        if (n <= FM_MAX_MEDIUM_USER / 2) {
            /* still mapped after free: the freed image can be read */
            free_keep(p);
            bad = check_freed_image(p, n, marker);
            REQUIRE(bad == SIZE_MAX, "freed %zu-byte debug block: byte %zu wrong", n, bad);
        } else {
            free(p);
        }
        p = launder_ptr(calloc(n, 1));
        REQUIRE(p != NULL && fastmm_usable_size(p) == n, "calloc(%zu, 1) in debug mode", n);
        bad = check_fill(p, n, 0);
        REQUIRE(bad == SIZE_MAX, "%zu-byte debug calloc block: byte %zu is not 0", n, bad);
        free(p);
    }
    expect_no_event(0, "fill patterns");
    ck_assert_uint_eq(fastmm_debug_scan(), 0);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* 2. Writes after free: every byte position                                                    */
/* ------------------------------------------------------------------------------------------ */

/* 1..65 (around the marker word and the 4/2/1-byte tails), 257, then twelve medium sizes of
 * 64*m + r + t with r in {0, 16, 32, 48} (each three times) and tails t in {0, 1, 2, 3, 7, 15}
 * (each twice), so every chunk/word/tail path of the freed-pattern check sees a modified byte. */
static const size_t medium_waf_sizes[] = {
    3008 + 0 + 0,  3072 + 16 + 1, 3136 + 32 + 2,  3200 + 48 + 3,  3264 + 0 + 7,  3328 + 16 + 15,
    3392 + 32 + 0, 3456 + 48 + 7, 3520 + 0 + 15,  3584 + 16 + 2,  3648 + 32 + 3, 3712 + 48 + 1,
};
#define N_SMALL_WAF 66 /* 1..65, then 257 */
#define N_WAF (N_SMALL_WAF + (int)(sizeof medium_waf_sizes / sizeof medium_waf_sizes[0]))

static size_t waf_size(int i)
{
    if (i < 65)
        return (size_t)i + 1;
    if (i == 65)
        return 257;
    return medium_waf_sizes[i - N_SMALL_WAF];
}

/* Blocks the allocator refused to reuse (kept out of circulation for good): a pointer to each
 * is kept, so that Memcheck (check-valgrind) sees them as reachable, not lost. */
static void *quarantined[1536];
static size_t n_quarantined;

/* Modifies byte k of the freed block p (n bytes), runs the scan, requires exactly one report
 * naming p with the run "k(1)", and puts the byte back. */
static void scan_detects_byte(unsigned char *p, size_t n, size_t k)
{
    char want[48];
    flip(p + k, 0x5a);
    size_t before = evn();
    size_t r = fastmm_debug_scan();
    flip(p + k, 0x5a);
    snprintf(want, sizeof want, "%zu(1)", k);
    REQUIRE(r == 1, "freed %zu-byte block, byte %zu modified: fastmm_debug_scan() = %zu, expected 1", n, k, r);
    expect_event(before, FASTMM_EVENT_MODIFIED_AFTER_FREE, p, "scan after a write after free");
    REQUIRE(ev_at(before).size == n, "freed %zu-byte block: event size %zu", n, ev_at(before).size);
    REQUIRE(ev_at(before).number != 0, "freed %zu-byte block: event allocation number 0", n);
    REQUIRE(runs_are(ev_last_text(), want), "freed %zu-byte block, byte %zu modified: the report does not list \"%s\": \"%.300s\"",
            n, k, want, runs_line(ev_last_text()));
}

/* Guards the freed-pattern check at every byte position (doc/fastmm5-facts.md 4.5, 4.8: a write
 * at offset 0 is reported as offset 0): for freed debug blocks of 1..65, 257 and twelve medium
 * sizes, a one-byte write at each offset in turn is found by fastmm_debug_scan(), which returns 1 and reports
 * MODIFIED_AFTER_FREE for that block with exactly "offset(1)"; an untouched freed block never
 * reports. Two separate runs in one medium block are listed as "a(3), b(1)". The next
 * allocation of the same size reuses the freed block (LIFO) and checks it first: a modified byte
 * is reported by that malloc, which hands out another block instead. */
START_TEST(test_write_after_free_every_byte)
{
    size_t n = waf_size(_i);
    uintptr_t marker = freed_marker();
    unsigned char *p = xmalloc(n);
    free_keep(p);
    REQUIRE(check_freed_image(p, n, marker) == SIZE_MAX, "freed %zu-byte block: wrong image", n);
    size_t r = fastmm_debug_scan();
    REQUIRE(r == 0, "an untouched freed %zu-byte block: fastmm_debug_scan() = %zu", n, r);
    expect_no_event(0, "scan of an untouched freed block");

    /* Every position; under FASTMM_TEST_SLOW (valgrind), medium blocks get their first and last
     * 192 bytes (the marker word and the chunk/word/tail boundaries) and every 61st in between. */
    size_t step = test_slow() && n > 2 * 192 ? 61 : 1;
    for (size_t k = 0; k < n; k += (k < 192 || k + 192 >= n) ? 1 : step)
        scan_detects_byte(p, n, k);
    r = fastmm_debug_scan();
    REQUIRE(r == 0, "freed %zu-byte block with every byte restored: fastmm_debug_scan() = %zu", n, r);

    if (n >= 64) {
        /* two runs: 3 bytes at 10, 1 byte at n - 5 */
        char want[64];
        flip(p + 10, 1);
        flip(p + 11, 2);
        flip(p + 12, 4);
        flip(p + n - 5, 8);
        size_t before = evn();
        r = fastmm_debug_scan();
        flip(p + 10, 1);
        flip(p + 11, 2);
        flip(p + 12, 4);
        flip(p + n - 5, 8);
        snprintf(want, sizeof want, "10(3), %zu(1)", n - 5);
        REQUIRE(r == 1, "two modified runs: fastmm_debug_scan() = %zu", r);
        expect_event(before, FASTMM_EVENT_MODIFIED_AFTER_FREE, p, "scan, two modified runs");
        REQUIRE(runs_are(ev_last_text(), want), "%zu-byte block: the report does not list \"%s\": \"%.300s\"", n, want,
                runs_line(ev_last_text()));
    }

    {
        /* Reuse: the next malloc of this size takes the freed block back first (small blocks from
         * their span's free list, medium ones from this thread's cache, LIFO either way); from
         * 128 bytes on, the reuse check is the one-pass check-and-refill, so a modified block
         * must also come out of it as it was (the report lists exactly the modified byte). */
        size_t before = evn();
        unsigned char *q = xmalloc(n);
        expect_no_event(before, "reuse of an intact freed block");
        REQUIRE(q == p, "malloc(%zu) after a free did not reuse the freed small block (%p, freed %p)", n, q, p);
        free_keep(q);
        unsigned char *cur = q;
        size_t pos[5] = {0, n - 1, n / 2, 7, 8};
        for (int j = 0; j < 5; j++) {
            size_t k = pos[j];
            if (k >= n)
                continue;
            char want[48];
            snprintf(want, sizeof want, "%zu(1)", k);
            flip(cur + k, 0xa5);
            before = evn();
            q = xmalloc(n);
            flip(cur + k, 0xa5); /* the refused block is kept out of circulation; make it clean again */
            expect_event(before, FASTMM_EVENT_MODIFIED_AFTER_FREE, cur, "malloc reusing a modified freed block");
            REQUIRE(q != cur, "malloc(%zu) handed out the modified freed block %p", n, cur);
            if (n_quarantined < sizeof quarantined / sizeof quarantined[0])
                quarantined[n_quarantined++] = cur;
            REQUIRE(runs_are(ev_last_text(), want), "reuse of a %zu-byte block modified at %zu: no \"%s\" in \"%.300s\"", n, k,
                    want, runs_line(ev_last_text()));
            REQUIRE(fastmm_usable_size(q) == n, "the replacement block is not a %zu-byte debug block", n);
            free_keep(q);
            cur = q;
        }
        r = fastmm_debug_scan();
        REQUIRE(r == 0, "after the reuse checks: fastmm_debug_scan() = %zu", r);
    }
}
END_TEST

/* The commonest overrun, a string terminator one byte past the end, is caught in every block:
 * the footer's first byte is never 0 (debug.c, footer_checksum). The footer checksum covers the
 * stack traces; a capture hook that records a different first address for each of 256 blocks
 * makes that byte take every value, so a checksum that could start with 0 misses one of them. */
static uintptr_t trace_word;
static void counting_capture(uintptr_t *addresses, unsigned depth)
{
    for (unsigned i = 0; i < depth; i++)
        addresses[i] = i == 0 ? trace_word : 0;
}

START_TEST(test_zero_overrun_always_caught)
{
    fastmm_debug_set_stack_depth(4);
    fastmm_set_stack_trace_hooks(counting_capture, NULL);
    for (unsigned i = 0; i < 256; i++) {
        size_t n = 24 + i % 40;
        trace_word = (uintptr_t)0x12345600u + i;
        unsigned char *p = xmalloc(n);
        size_t before = evn();
        unsigned char footer = p[n];
        p[n] = 0;
        escape(p + n);
        free_keep(p);
        REQUIRE(evn() == before + 1 && ev_at(before).type == FASTMM_EVENT_FOOTER_CORRUPTION,
                "a 0 written past a %zu-byte block (trace word %#lx) was not reported as a footer corruption", n,
                (unsigned long)trace_word);
        /* repaired, the refused block frees normally (a corrupt one left behind would be reported
         * by every later scan of this process: check-valgrind runs all tests in one) */
        p[n] = footer;
        escape(p + n);
        free_keep(p);
        REQUIRE(evn() == before + 1, "freeing the repaired %zu-byte block raised an event", n);
    }
}
END_TEST

/* A freed small or medium debug block waits in this thread's cache (like a plain one): when
 * debug mode has been left, the next normal malloc of its size takes it from there (malloc's
 * inline path for both), and must check it first as an arena would. A write after free is
 * reported (MODIFIED_AFTER_FREE, the modified byte), the block is kept out, and malloc hands
 * out another, plain block; an intact one is handed out as a plain block (free() then takes it
 * without complaint). */
static const size_t cached_debug_sizes[] = {5000, 200}; /* a medium and a small outer block */
START_TEST(test_cached_debug_block_vetted_in_normal_mode)
{
    const size_t n = cached_debug_sizes[_i];
    /* a normal request of the debug block's outer size uses the same cache bin */
    const size_t outer = n + 64 + 16; /* header; footer: checksum, two trace ids, reserved */
    const size_t at = n / 2;
    char want[48];
    unsigned char *p = xmalloc(n);
    free_keep(p);
    flip(p + at, 0x5a);
    snprintf(want, sizeof want, "%zu(1)", at);
    fastmm_debug_exit();
    size_t before = evn();
    unsigned char *q = launder_ptr(malloc(outer));
    flip(p + at, 0x5a);
    fastmm_debug_enter();
    REQUIRE(q != NULL && q != p && q + 64 != p, "normal malloc(%zu) handed out the modified freed debug block", outer);
    expect_event(before, FASTMM_EVENT_MODIFIED_AFTER_FREE, p, "normal malloc reusing a modified freed debug block");
    REQUIRE(runs_are(ev_last_text(), want), "no \"%s\" in \"%.300s\"", want, runs_line(ev_last_text()));
    if (n_quarantined < sizeof quarantined / sizeof quarantined[0])
        quarantined[n_quarantined++] = p;
    fastmm_debug_exit();
    free(q);

    /* intact: reused as a plain block */
    fastmm_debug_enter();
    p = xmalloc(n);
    free_keep(p);
    fastmm_debug_exit();
    before = evn();
    q = launder_ptr(malloc(outer));
    REQUIRE(q != NULL && q + 64 == p, "normal malloc(%zu) did not reuse the freed debug block's memory", outer);
    REQUIRE(fastmm_usable_size(q) >= outer, "usable size of the reused block");
    memset(q, 0x11, outer);
    free(q);
    fastmm_debug_enter();
    expect_no_event(before, "reuse of an intact cached debug block in normal mode");
    ck_assert_uint_eq(fastmm_debug_scan(), 0);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* 3. Corruption and misuse, small / medium / large                                             */
/* ------------------------------------------------------------------------------------------ */

enum misuse {
    MISUSE_OVERRUN,        /* p[size] written */
    MISUSE_HEADER,         /* p[-30] written (a checksummed header field) */
    MISUSE_DOUBLE_FREE,
    MISUSE_REALLOC_FREED,
    MISUSE_INTERIOR,       /* free(p + 16) */
    MISUSE_COUNT
};
static const char *const misuse_names[] = {"one-byte overrun", "header write", "double free",
                                           "realloc of a freed block", "free of an interior pointer"};
static const size_t misuse_sizes[] = {40, 20000, MIB};
#define N_MISUSE_SIZES 3

/* Guards the five misuse reports (doc/fastmm5-facts.md 4.6) for a small (40 B), a medium (20000 B) and a large
 * (1 MiB) debug block under FASTMM_ON_ERROR_CONTINUE:
 *   overrun p[size]   -> fastmm_debug_scan() finds the live block (returns 1, FOOTER_CORRUPTION),
 *                        then free raises FOOTER_CORRUPTION (block p, size, allocation number
 *                        != 0, text with "Allocated by thread"); the block is refused, not freed:
 *                        its contents stay, and once the byte is restored a second free succeeds
 *                        silently (it would be a double free had the first one freed it);
 *   header write      -> the same with HEADER_CORRUPTION (block p);
 *   double free       -> DOUBLE_FREE (block p), and the block is not handed out twice;
 *   realloc of freed  -> REALLOC_OF_FREED_BLOCK (block p), NULL;
 *   free(p + 16)      -> INVALID_POINTER (block p + 16); p itself stays live and freeable.
 * Afterwards the scan finds nothing. */
START_TEST(test_misuse_reports)
{
    enum misuse kind = (enum misuse)(_i / N_MISUSE_SIZES);
    size_t n = misuse_sizes[_i % N_MISUSE_SIZES];
    const char *name = misuse_names[kind];
    unsigned char *p = xmalloc(n);
    REQUIRE(fastmm_usable_size(p) == n, "%zu-byte debug block: usable size %zu", n, fastmm_usable_size(p));
    fill_pattern(p, n, 77);
    size_t before = evn(), r;
    ev_watch(p);

    switch (kind) {
    case MISUSE_OVERRUN:
    case MISUSE_HEADER: {
        unsigned char *at = kind == MISUSE_OVERRUN ? p + n : p - 30;
        fastmm_event_type_t want =
            kind == MISUSE_OVERRUN ? FASTMM_EVENT_FOOTER_CORRUPTION : FASTMM_EVENT_HEADER_CORRUPTION;
        flip(at, 0xff);
        size_t found = fastmm_debug_scan();
        size_t after_scan = evn();
        free_keep(p);
        flip(at, 0xff);
        /* the scan finds the live block's damage too */
        REQUIRE(found == 1 && after_scan == before + 1, "%s of a live %zu-byte block: fastmm_debug_scan() = %zu, %zu events",
                name, n, found, after_scan - before);
        REQUIRE(ev_at(before).type == want && ev_at(before).block == p, "%s, scan: event %s about %p, expected %s about %p",
                name, event_name((int)ev_at(before).type), ev_at(before).block, event_name((int)want), p);
        expect_event(after_scan, want, p, name);
        if (kind == MISUSE_OVERRUN) {
            before = after_scan;
            REQUIRE(ev_at(before).size == n, "%s of %zu bytes: event size %zu", name, n, ev_at(before).size);
            REQUIRE(ev_at(before).number != 0, "%s of %zu bytes: allocation number 0", name, n);
            REQUIRE(strstr(ev_watch_text(), "Allocated by thread") != NULL,
                    "%s of %zu bytes: the report lacks the allocating thread: \"%.1500s\"", name, n, ev_watch_text());
        }
        size_t bad = check_pattern(p, n, 77);
        REQUIRE(bad == SIZE_MAX, "%s of %zu bytes: the refused block changed at byte %zu", name, n, bad);
        REQUIRE(fastmm_usable_size(p) == n, "%s of %zu bytes: the refused block is no longer live", name, n);
        before = evn();
        free(p);
        expect_no_event(before, "free of the repaired block");
        break;
    }
    case MISUSE_DOUBLE_FREE:
        free_keep(p);
        expect_no_event(before, "first free");
        free_keep(p);
        expect_event(before, FASTMM_EVENT_DOUBLE_FREE, p, name);
        if (n <= FM_MAX_MEDIUM_USER) {
            unsigned char *a = xmalloc(n), *b = xmalloc(n);
            REQUIRE(a != b, "after a double free of a %zu-byte block, malloc returned %p twice", n, a);
            free(a);
            free(b);
        }
        break;
    case MISUSE_REALLOC_FREED: {
        free_keep(p);
        expect_no_event(before, "free");
        void *q = realloc(launder_ptr(p), n + 100);
        REQUIRE(q == NULL, "realloc of a freed %zu-byte block returned %p", n, q);
        expect_event(before, FASTMM_EVENT_REALLOC_OF_FREED_BLOCK, p, name);
        break;
    }
    case MISUSE_INTERIOR: {
        free_keep(p + 16);
        expect_event(before, FASTMM_EVENT_INVALID_POINTER, p + 16, name);
        void *q = realloc(launder_ptr(p + 16), 64);
        REQUIRE(q == NULL, "realloc(p + 16) of a %zu-byte debug block returned %p", n, q);
        expect_event(before + 1, FASTMM_EVENT_INVALID_POINTER, p + 16, "realloc of an interior pointer");
        size_t bad = check_pattern(p, n, 77);
        REQUIRE(bad == SIZE_MAX, "%s: the block changed at byte %zu", name, bad);
        REQUIRE(fastmm_usable_size(p) == n, "%s: the block is no longer a live %zu-byte debug block", name, n);
        before = evn();
        free(p);
        expect_no_event(before, "free of the block itself");
        break;
    }
    default:
        ck_abort_msg("unknown misuse %d", (int)kind);
    }
    before = evn();
    r = fastmm_debug_scan();
    REQUIRE(r == 0, "%s (%zu bytes): fastmm_debug_scan() = %zu afterwards", name, n, r);
    expect_no_event(before, "scan afterwards");
}
END_TEST

/* Guards the default error action for debug-block reports (Check fork mode not needed: forks
 * by itself): a child doing each misuse (and a scan that finds a write after free) under
 * FASTMM_ON_ERROR_ABORT dies of SIGABRT, and its standard error shows the block's address. */
enum abort_kind { ABORT_OVERRUN, ABORT_HEADER, ABORT_DOUBLE_FREE, ABORT_REALLOC_FREED, ABORT_INTERIOR, ABORT_SCAN,
                  ABORT_KIND_COUNT };
static const char *const abort_names[] = {"overrun", "header write", "double free", "realloc of freed",
                                          "interior free", "write after free (scan)"};

START_TEST(test_misuse_aborts)
{
    char path[256];
    int fd = make_tmp(path, sizeof path);
    fastmm_debug_enter();
    unsigned char *p = xmalloc(40);
    fastmm_debug_exit();
    unsigned char *shown = _i == ABORT_INTERIOR ? p + 16 : p;
    fflush(NULL);
    pid_t pid = fork();
    REQUIRE(pid >= 0, "fork failed");
    if (pid == 0) {
        no_core_dump();
        alarm(30);
        dup2(fd, 2);
        fastmm_set_event_handler(NULL, NULL);
        fastmm_set_error_action(FASTMM_ON_ERROR_ABORT);
        switch (_i) {
        case ABORT_OVERRUN:
            flip(p + 40, 0xff);
            free(p);
            break;
        case ABORT_HEADER:
            flip(p - 30, 0xff);
            free(p);
            break;
        case ABORT_DOUBLE_FREE:
            free_keep(p);
            free_keep(p);
            break;
        case ABORT_REALLOC_FREED:
            free_keep(p);
            escape(realloc(launder_ptr(p), 100));
            break;
        case ABORT_INTERIOR:
            free_keep(p + 16);
            break;
        case ABORT_SCAN:
            free_keep(p);
            flip(p + 20, 0xff);
            fastmm_debug_scan();
            break;
        }
        _exit(0);
    }
    char text[32768], hex[32];
    int st = wait_child_stderr(pid, fd, path, text, sizeof text);
    snprintf(hex, sizeof hex, "%lx", (unsigned long)(uintptr_t)shown);
    free(p);
    ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, "%s: child status %#x, expected death by SIGABRT",
                  abort_names[_i], st);
    ck_assert_msg(strcasestr(text, hex) != NULL, "%s: standard error does not show the block %s: \"%.600s\"",
                  abort_names[_i], hex, text);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Options, stack depth, groups, allocation numbers, hooks                                      */
/* ------------------------------------------------------------------------------------------ */

/* Guards fastmm_debug_options/set_options: the default is both FastMM5 options (doc/fastmm5-facts.md 4.9), and
 * every combination of the three flags reads back as set. */
START_TEST(test_options_roundtrip)
{
    ck_assert_uint_eq(fastmm_debug_options(), DEFAULT_OPTIONS);
    for (unsigned o = 0; o <= ALL_OPTIONS; o++) {
        fastmm_debug_set_options(o);
        ck_assert_uint_eq(fastmm_debug_options(), o);
    }
    fastmm_debug_set_options(DEFAULT_OPTIONS);
    ck_assert_uint_eq(fastmm_debug_options(), DEFAULT_OPTIONS);
}
END_TEST

/* Guards FASTMM_DEBUG_SCAN_EVERY_OPERATION: with it, a write into a freed debug block is
 * reported (by the scan) on entry to the next malloc, calloc, free, and realloc - moving and in
 * place - while debug mode is active; without it, those calls do not notice it. The victim is a
 * small block of another size class than every block the calls touch, so no reuse check can be
 * what finds it. (The victim is repaired before anything is asserted.) */
enum { OP_MALLOC, OP_CALLOC, OP_FREE, OP_REALLOC_MOVE, OP_REALLOC_IN_PLACE, OP_COUNT };
static const char *const op_names[] = {"malloc", "calloc", "free", "moving realloc", "in-place realloc"};

START_TEST(test_scan_every_operation)
{
    unsigned char *victim = xmalloc(40);
    unsigned char *live = xmalloc(100);
    free_keep(victim);
    flip(victim + 20, 0x11);
    size_t before = evn();
    void *q = launder_ptr(malloc(64));
    free(live);
    q = launder_ptr(realloc(q, 128));
    free(q);
    size_t quiet_events = evn() - before;

    fastmm_debug_set_options(DEFAULT_OPTIONS | FASTMM_DEBUG_SCAN_EVERY_OPERATION);
    unsigned options = fastmm_debug_options();
    size_t first[OP_COUNT], count[OP_COUNT];
    ev_watch(victim);
    first[OP_MALLOC] = evn();
    q = launder_ptr(malloc(64));
    count[OP_MALLOC] = evn() - first[OP_MALLOC];
    first[OP_CALLOC] = evn();
    void *c = launder_ptr(calloc(8, 8));
    count[OP_CALLOC] = evn() - first[OP_CALLOC];
    first[OP_FREE] = evn();
    free(c);
    count[OP_FREE] = evn() - first[OP_FREE];
    first[OP_REALLOC_MOVE] = evn();
    void *q1 = launder_ptr(realloc(q, 4000));
    count[OP_REALLOC_MOVE] = evn() - first[OP_REALLOC_MOVE];
    first[OP_REALLOC_IN_PLACE] = evn();
    void *q2 = q1 == NULL ? NULL : launder_ptr(realloc(launder_ptr(q1), 3900));
    count[OP_REALLOC_IN_PLACE] = evn() - first[OP_REALLOC_IN_PLACE];
    flip(victim + 20, 0x11);
    fastmm_debug_set_options(DEFAULT_OPTIONS);
    before = evn();
    free(q2);
    size_t repaired_events = evn() - before;

    REQUIRE(quiet_events == 0, "without SCAN_EVERY_OPERATION: %zu events", quiet_events);
    REQUIRE(options == (DEFAULT_OPTIONS | FASTMM_DEBUG_SCAN_EVERY_OPERATION), "options read back as %#x", options);
    REQUIRE(q1 != NULL && q2 == q1, "realloc 64 -> 4000 -> 3900: %p, then %p (expected in place)", q1, q2);
    for (int op = 0; op < OP_COUNT; op++) {
        REQUIRE(count[op] == 1, "%s with SCAN_EVERY_OPERATION: %zu events, expected 1 (MODIFIED_AFTER_FREE)",
                op_names[op], count[op]);
        REQUIRE(ev_at(first[op]).type == FASTMM_EVENT_MODIFIED_AFTER_FREE && ev_at(first[op]).block == victim,
                "%s with SCAN_EVERY_OPERATION: event %s about %p, expected MODIFIED_AFTER_FREE about %p", op_names[op],
                event_name((int)ev_at(first[op]).type), ev_at(first[op]).block, victim);
    }
    REQUIRE(runs_are(ev_watch_text(), "20(1)"), "the scan's report: no \"20(1)\" in \"%.300s\"", runs_line(ev_watch_text()));
    REQUIRE(repaired_events == 0, "free after the repair: %zu events", repaired_events);
    ck_assert_uint_eq(fastmm_debug_scan(), 0);
}
END_TEST

/* Guards the stack depth setting: 20 by default, 0..64 kept, anything above clamped to 64; and
 * that the depth is per block - blocks allocated at depths 0, 1, 20 and 64 (so with footers of
 * different sizes) all get exact usable sizes, overrun and write-after-free detection, and can
 * be freed after the depth changed. */
START_TEST(test_stack_depth)
{
    ck_assert_uint_eq(fastmm_debug_stack_depth(), 20);
    static const unsigned in[] = {0, 1, 20, 63, 64, 65, 1000, UINT_MAX};
    for (size_t i = 0; i < sizeof in / sizeof in[0]; i++) {
        fastmm_debug_set_stack_depth(in[i]);
        ck_assert_uint_eq(fastmm_debug_stack_depth(), in[i] > 64 ? 64 : in[i]);
    }
    static const unsigned depths[] = {0, 1, 20, 64};
    static const size_t sizes[] = {1, 40, 1000, 5000, 700000};
    unsigned char *blocks[4][5];
    for (int d = 0; d < 4; d++) {
        fastmm_debug_set_stack_depth(depths[d]);
        for (int s = 0; s < 5; s++) {
            blocks[d][s] = xmalloc(sizes[s]);
            fill_pattern(blocks[d][s], sizes[s], (uint32_t)(d * 5 + s));
        }
    }
    fastmm_debug_set_stack_depth(7); /* a different depth while they are freed */
    for (int d = 0; d < 4; d++) {
        for (int s = 0; s < 5; s++) {
            unsigned char *p = blocks[d][s];
            size_t n = sizes[s];
            REQUIRE(fastmm_usable_size(p) == n, "depth %u, %zu bytes: usable size %zu", depths[d], n,
                    fastmm_usable_size(p));
            REQUIRE(check_pattern(p, n, (uint32_t)(d * 5 + s)) == SIZE_MAX, "depth %u, %zu bytes: data changed",
                    depths[d], n);
            size_t before = evn();
            flip(p + n, 0x40);
            free_keep(p);
            flip(p + n, 0x40);
            expect_event(before, FASTMM_EVENT_FOOTER_CORRUPTION, p, "overrun");
            before = evn();
            free_keep(p);
            expect_no_event(before, "free of the repaired block");
            if (n <= FM_MAX_MEDIUM_USER) {
                scan_detects_byte(p, n, n - 1);
                scan_detects_byte(p, n, 0);
            }
        }
    }
    ck_assert_uint_eq(fastmm_debug_scan(), 0);
}
END_TEST

/* Recorded by the test hooks below (they run inside the allocator: no allocation, no stdio). */
static unsigned hook_last_depth;
static int hook_calls;

static void test_capture(uintptr_t *addresses, unsigned depth)
{
    hook_calls++;
    hook_last_depth = depth;
    for (unsigned i = 0; i < depth; i++)
        addresses[i] = i < 3 ? (uintptr_t)0xF00D0000u + i : 0;
}

static int test_format(uintptr_t address, char *buf, size_t size)
{
    static const char prefix[] = "fmtest-frame-";
    static const char hexd[] = "0123456789abcdef";
    char tmp[64];
    size_t n = 0;
    for (size_t i = 0; prefix[i] != '\0'; i++)
        tmp[n++] = prefix[i];
    char digits[20];
    int nd = 0;
    do {
        digits[nd++] = hexd[address & 15];
        address >>= 4;
    } while (address != 0);
    while (nd > 0)
        tmp[n++] = digits[--nd];
    if (n + 1 > size)
        return 0;
    memcpy(buf, tmp, n);
    buf[n] = '\0';
    return (int)n;
}

/* Guards fastmm_set_stack_trace_hooks: the capture hook fills each new debug block's trace
 * (called with the current depth), the format hook renders each non-zero entry in the reports
 * (here: the allocation trace of a footer-corruption report); NULL, NULL restores the built-in
 * capture, whose report then carries the allocating thread and at least one hex address. */
START_TEST(test_stack_trace_hooks)
{
    hook_calls = 0;
    fastmm_debug_set_stack_depth(12);
    fastmm_set_stack_trace_hooks(test_capture, test_format);
    unsigned char *p = xmalloc(40);
    REQUIRE(hook_calls >= 1 && hook_last_depth == 12, "capture hook: %d calls, last depth %u (expected 12)",
            hook_calls, hook_last_depth);
    size_t before = evn();
    ev_watch(p);
    flip(p + 40, 1);
    free_keep(p);
    flip(p + 40, 1);
    expect_event(before, FASTMM_EVENT_FOOTER_CORRUPTION, p, "overrun with hooks");
    REQUIRE(strstr(ev_watch_text(), "fmtest-frame-f00d0000") && strstr(ev_watch_text(), "fmtest-frame-f00d0002"),
            "the report does not use the hooks' trace: \"%.1500s\"", ev_watch_text());
    REQUIRE(strstr(ev_watch_text(), "fmtest-frame-f00d0003") == NULL, "a zero trace entry was formatted");
    free(p);

    fastmm_set_stack_trace_hooks(NULL, NULL);
    hook_calls = 0;
    fastmm_debug_set_stack_depth(20);
    p = xmalloc(40);
    REQUIRE(hook_calls == 0, "capture hook still called after fastmm_set_stack_trace_hooks(NULL, NULL)");
    before = evn();
    ev_watch(p);
    flip(p + 40, 1);
    free_keep(p);
    flip(p + 40, 1);
    expect_event(before, FASTMM_EVENT_FOOTER_CORRUPTION, p, "overrun with the default hooks");
    REQUIRE(strstr(ev_watch_text(), "fmtest-frame") == NULL, "the old format hook is still used");
    REQUIRE(strstr(ev_watch_text(), "Allocated by thread") != NULL, "no allocating thread: \"%.1500s\"", ev_watch_text());
    const char *trace = strstr(ev_watch_text(), "stack trace");
    REQUIRE(trace != NULL && strstr(trace, "\n    0x") != NULL, "no allocation stack trace lines: \"%.1500s\"",
            ev_watch_text());
    free(p);
}
END_TEST

/* Guards allocation groups: the setter/getter pair, and that a block records the group current
 * at its allocation (its report shows it, not the group current when it is reported). */
START_TEST(test_allocation_group)
{
    ck_assert_uint_eq(fastmm_debug_allocation_group(), 0);
    fastmm_debug_set_allocation_group(424242);
    ck_assert_uint_eq(fastmm_debug_allocation_group(), 424242);
    unsigned char *p = xmalloc(40);
    fastmm_debug_set_allocation_group(7);
    size_t before = evn();
    ev_watch(p);
    flip(p + 40, 1);
    free_keep(p);
    flip(p + 40, 1);
    expect_event(before, FASTMM_EVENT_FOOTER_CORRUPTION, p, "overrun");
    REQUIRE(strcasestr(ev_watch_text(), "group") != NULL && strstr(ev_watch_text(), "424242") != NULL,
            "the report does not show allocation group 424242: \"%.1500s\"", ev_watch_text());
    free(p);
    fastmm_debug_set_allocation_group(0);
    ck_assert_uint_eq(fastmm_debug_allocation_group(), 0);
}
END_TEST

/* Allocation number of a live debug block, read by the heap walk (0 if not found). */
struct number_search {
    const void *block;
    uint32_t number;
};

static void find_number(const fastmm_block_info_t *b, void *arg)
{
    struct number_search *s = arg;
    if (b->debug && b->address == s->block)
        s->number = b->allocation_number;
}

static uint32_t allocation_number_of(const void *p)
{
    struct number_search s = {p, 0};
    fastmm_walk_options_t o = FASTMM_WALK_OPTIONS_INIT;
    o.used_only = true;
    fastmm_walk_blocks(find_number, &s, &o);
    return s.number;
}

static volatile sig_atomic_t trap_count;
static volatile sig_atomic_t trap_index;
static volatile sig_atomic_t current_index;

static void on_sigtrap(int sig)
{
    (void)sig;
    trap_count++;
    trap_index = current_index;
}

/* Guards allocation numbers and fastmm_debug_break_on_allocation: debug allocations are numbered
 * one by one; with a break number set, SIGTRAP is raised exactly once, during the allocation
 * that gets that number (observed with a handler); 0 means never. */
START_TEST(test_break_on_allocation)
{
    unsigned char *first = xmalloc(24);
    uint32_t n0 = allocation_number_of(first);
    REQUIRE(n0 != 0, "no allocation number for a live debug block");
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigtrap;
    sigemptyset(&sa.sa_mask);
    REQUIRE(sigaction(SIGTRAP, &sa, &old) == 0, "sigaction failed"); /* (a passing ck_assert allocates) */
    trap_count = 0;
    trap_index = -1;
    fastmm_debug_break_on_allocation(n0 + 4);
    unsigned char *q[8];
    for (int i = 0; i < 8; i++) {
        current_index = i;
        q[i] = xmalloc(24 + (size_t)i * 1000);
    }
    fastmm_debug_break_on_allocation(0);
    void *later[8];
    for (int i = 0; i < 8; i++) {
        current_index = 100 + i;
        later[i] = launder_ptr(malloc(10 + (size_t)i)); /* 0: no later number traps either */
    }
    sigaction(SIGTRAP, &old, NULL);
    uint32_t nums[8];
    for (int i = 0; i < 8; i++)
        nums[i] = allocation_number_of(q[i]);
    for (int i = 0; i < 8; i++)
        REQUIRE(nums[i] == n0 + 1 + (uint32_t)i, "block %d got allocation number %u, expected %u (sequential)", i,
                nums[i], n0 + 1 + (uint32_t)i);
    REQUIRE(trap_count == 1, "SIGTRAP raised %d times, expected once", (int)trap_count);
    REQUIRE(trap_index == 3, "SIGTRAP raised during allocation %d, expected 3 (number %u)", (int)trap_index, n0 + 4);
    for (int i = 0; i < 8; i++) {
        free(q[i]);
        free(later[i]);
    }
    free(first);
}
END_TEST

/* Guards the break's default outcome: a child whose next debug allocation carries the break
 * number, with no SIGTRAP handler, is killed by SIGTRAP. */
START_TEST(test_break_on_allocation_kills)
{
    unsigned char *first = xmalloc(24);
    uint32_t n0 = allocation_number_of(first);
    REQUIRE(n0 != 0, "no allocation number for a live debug block");
    fflush(NULL);
    pid_t pid = fork();
    REQUIRE(pid >= 0, "fork failed"); /* (a passing ck_assert would allocate the break number) */
    if (pid == 0) {
        no_core_dump();
        alarm(30);
        signal(SIGTRAP, SIG_DFL);
        fastmm_debug_break_on_allocation(n0 + 1);
        escape(malloc(32));
        _exit(0);
    }
    int st = 0;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    free(first);
    ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGTRAP, "child status %#x: expected death by SIGTRAP", st);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* 4. Mode switching and threads                                                                */
/* ------------------------------------------------------------------------------------------ */

/* Guards that debug blocks keep their debug treatment outside debug mode and normal blocks keep
 * theirs inside it (doc/fastmm5-facts.md 4.1, 4.6): a debug block reallocated in normal mode (small -> medium
 * -> large -> small) stays a debug block (usable size == request, contents kept), an overrun of a
 * debug block is still reported after debug mode ended, freeing it in normal mode leaves the
 * freed image, a double free of it is reported; a normal block reallocated in debug mode
 * becomes a debug block with its contents, also where normal mode would resize it in place; a
 * normal block freed in debug mode is freed silently; blocks allocated after the mode ends are
 * normal again. */
START_TEST(test_blocks_cross_mode_changes)
{
    uintptr_t marker;
    ck_assert(!fastmm_debug_active());
    unsigned char *n1 = xmalloc(100), *n2 = xmalloc(3000), *r1 = xmalloc(100), *r2 = xmalloc(MIB);
    fill_pattern(n1, 100, 1);
    fill_pattern(n2, 3000, 2);
    fill_pattern(r1, 100, 6);
    fill_pattern(r2, MIB, 7);
    REQUIRE(fastmm_usable_size(n1) == fm_expected_usable(100), "normal block usable %zu", fastmm_usable_size(n1));

    ck_assert(fastmm_debug_enter());
    ck_assert(fastmm_debug_active());
    marker = freed_marker();
    unsigned char *d1 = xmalloc(100), *d2 = xmalloc(5000), *d3 = xmalloc(40);
    fill_pattern(d1, 100, 3);
    fill_pattern(d2, 5000, 4);
    fill_pattern(d3, 40, 5);
    size_t before = evn();
    n1 = launder_ptr(realloc(n1, 300)); /* normal -> debug */
    REQUIRE(n1 != NULL && fastmm_usable_size(n1) == 300, "normal block reallocated in debug mode: usable %zu",
            n1 ? fastmm_usable_size(n1) : 0);
    REQUIRE(check_pattern(n1, 100, 1) == SIZE_MAX, "normal -> debug realloc lost the contents");
    free(n2); /* a normal block freed in debug mode */
    /* normal blocks resized where normal mode keeps them in place (a small one by a little, a
     * large one to more than half): debug blocks of exactly the new size, contents kept */
    r1 = launder_ptr(realloc(r1, 90));
    r2 = launder_ptr(realloc(r2, 700000));
    REQUIRE(r1 != NULL && fastmm_usable_size(r1) == 90, "normal 100-byte block resized to 90 in debug mode: usable %zu",
            r1 ? fastmm_usable_size(r1) : 0);
    REQUIRE(r2 != NULL && fastmm_usable_size(r2) == 700000,
            "normal 1 MiB block resized to 700000 in debug mode: usable %zu", r2 ? fastmm_usable_size(r2) : 0);
    REQUIRE(check_pattern(r1, 90, 6) == SIZE_MAX && check_pattern(r2, 700000, 7) == SIZE_MAX,
            "normal -> debug in-place resizes lost the contents");
    free(r1);
    free(r2);
    expect_no_event(before, "normal blocks handled in debug mode");
    ck_assert(fastmm_debug_exit());
    ck_assert(!fastmm_debug_active());

    /* back in normal mode: the debug blocks are still debug blocks */
    before = evn();
    static const size_t steps[] = {2000, 4000, 70000, 700000, 3 * MIB, 50000, 60};
    size_t have = 100;
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        size_t n = steps[i];
        d1 = launder_ptr(realloc(d1, n));
        REQUIRE(d1 != NULL, "realloc of a debug block to %zu in normal mode failed", n);
        REQUIRE(fastmm_usable_size(d1) == n, "debug block reallocated to %zu in normal mode: usable size %zu", n,
                fastmm_usable_size(d1));
        size_t keep = have < n ? have : n;
        REQUIRE(check_pattern(d1, keep, 3) == SIZE_MAX, "realloc to %zu lost the contents", n);
        if (n > have)
            fill_pattern(d1, n, 3);
        have = n;
    }
    /* its footer moved with it */
    flip(d1 + 60, 0x33);
    free_keep(d1);
    flip(d1 + 60, 0x33);
    expect_event(before, FASTMM_EVENT_FOOTER_CORRUPTION, d1, "overrun of a reallocated debug block in normal mode");
    before = evn();
    free(d1);
    flip(d3 + 40, 0x01);
    free_keep(d3);
    flip(d3 + 40, 0x01);
    expect_event(before, FASTMM_EVENT_FOOTER_CORRUPTION, d3, "overrun of a debug block in normal mode");
    before = evn();
    free(d3);
    free_keep(d2);
    expect_no_event(before, "frees of debug blocks in normal mode");
    REQUIRE(check_freed_image(d2, 5000, marker) == SIZE_MAX, "a debug block freed in normal mode lacks the freed image");
    free_keep(d2);
    expect_event(before, FASTMM_EVENT_DOUBLE_FREE, d2, "double free of a debug block in normal mode");
    before = evn();
    void *n3 = xmalloc(100);
    REQUIRE(fastmm_usable_size(n3) == fm_expected_usable(100), "after debug mode ended malloc(100) is not normal");
    n1 = launder_ptr(realloc(n1, 200)); /* debug block: shrink in place */
    REQUIRE(n1 != NULL && fastmm_usable_size(n1) == 200, "debug block shrunk in normal mode: usable %zu",
            n1 ? fastmm_usable_size(n1) : 0);
    REQUIRE(check_pattern(n1, 100, 1) == SIZE_MAX, "shrink lost the contents");
    free(n1);
    free(n3);
    expect_no_event(before, "normal mode afterwards");
    ck_assert_uint_eq(fastmm_debug_scan(), 0);
}
END_TEST

#define NEST_THREADS 4
#define MAILBOX 64
static _Atomic(unsigned char *) mailbox[MAILBOX];
static atomic_int thread_failures;
static char thread_fail_msg[256];

static void thread_fail(const char *msg, size_t a, size_t b)
{
    if (atomic_fetch_add(&thread_failures, 1) == 0)
        snprintf(thread_fail_msg, sizeof thread_fail_msg, "%s (%zu, %zu)", msg, a, b);
}

/* A block that records its own requested size in its first 8 bytes and its low byte in its
 * last byte (sizes >= 16). */
static void check_and_free_tagged(unsigned char *q)
{
    size_t n;
    memcpy(&n, q, sizeof n);
    size_t u = fastmm_usable_size(q);
    if (u != n)
        thread_fail("a debug block's usable size is not its request", u, n);
    if (q[n - 1] != (unsigned char)n)
        thread_fail("a debug block's last byte changed", n, q[n - 1]);
    free(q);
}

static void *nest_thread(void *arg)
{
    uint64_t rng = (uint64_t)(uintptr_t)arg * 0x9E3779B97F4A7C15ULL + 1;
    int iters = test_iters(1000);
    for (int i = 0; i < iters; i++) {
        uint64_t r = xorshift64(&rng);
        size_t n = 16 + r % (r & 0x100 ? 6000 : 300);
        if (!fastmm_debug_enter())
            thread_fail("fastmm_debug_enter failed", (size_t)i, 0);
        if (!fastmm_debug_active())
            thread_fail("debug mode inactive inside enter/exit", (size_t)i, 0);
        unsigned char *p = malloc(n);
        if (!fastmm_debug_exit())
            thread_fail("fastmm_debug_exit failed inside a balanced pair", (size_t)i, 0);
        if (p == NULL) {
            thread_fail("malloc failed", n, 0);
            continue;
        }
        TEST_MAKE_DEFINED(p, n);
        if (p[n - 1] != FILL_ALLOCATED || p[0] != FILL_ALLOCATED)
            thread_fail("a block allocated in debug mode is not filled with 0x90", n, p[0]);
        memcpy(p, &n, sizeof n);
        p[n - 1] = (unsigned char)n;
        unsigned char *q = atomic_exchange(&mailbox[(r >> 20) % MAILBOX], p);
        if (q != NULL)
            check_and_free_tagged(q); /* most likely another thread's block */
    }
    return NULL;
}

/* Guards the nested mode counter under threads (doc/fastmm5-facts.md 4.1): four threads each do
 * enter / malloc / exit 1000 times while handing their blocks to each other to free; every
 * block allocated between a thread's enter and exit is a debug block (0x90 fill, usable size ==
 * request) whatever the other threads do, and at the end the counter is back at zero: debug
 * mode is inactive and one more exit reports that nothing was left to exit. No event. */
START_TEST(test_nesting_under_threads)
{
    ck_assert(!fastmm_debug_active());
    atomic_store(&thread_failures, 0);
    for (int i = 0; i < MAILBOX; i++)
        atomic_store(&mailbox[i], NULL);
    pthread_t th[NEST_THREADS];
    for (int i = 0; i < NEST_THREADS; i++)
        ck_assert_int_eq(pthread_create(&th[i], NULL, nest_thread, (void *)(uintptr_t)(i + 1)), 0);
    for (int i = 0; i < NEST_THREADS; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < MAILBOX; i++) {
        unsigned char *q = atomic_exchange(&mailbox[i], NULL);
        if (q != NULL)
            check_and_free_tagged(q);
    }
    ck_assert_msg(atomic_load(&thread_failures) == 0, "%d failures, the first: %s", atomic_load(&thread_failures),
                  thread_fail_msg);
    ck_assert_msg(!fastmm_debug_active(), "debug mode still active after balanced enter/exit pairs");
    ck_assert_msg(!fastmm_debug_exit(), "fastmm_debug_exit succeeded with the counter at zero");
    ck_assert(!fastmm_debug_active());
    ck_assert(fastmm_debug_enter() && fastmm_debug_enter());
    ck_assert(fastmm_debug_exit() && fastmm_debug_active());
    ck_assert(fastmm_debug_exit() && !fastmm_debug_active());
    ck_assert_uint_eq(evn(), 0);
    ck_assert_uint_eq(fastmm_debug_scan(), 0);
}
END_TEST

#define CHURN_THREADS 3
static atomic_int churn_stop;
static atomic_int churn_started;
static atomic_long churn_progress[CHURN_THREADS]; /* operations (ping-pong rounds) done */

static void *churn_thread(void *arg)
{
    int me = (int)(uintptr_t)arg;
    uint64_t rng = (uint64_t)(me + 1) * 0x2545F4914F6CDD1DULL + 7;
    enum { SLOTS = 32 };
    unsigned char *slot[SLOTS] = {0};
    size_t len[SLOTS] = {0};
    long ops = 0;
    atomic_fetch_add(&churn_started, 1);
    while (!atomic_load_explicit(&churn_stop, memory_order_relaxed)) {
        uint64_t r = xorshift64(&rng);
        unsigned s = (unsigned)(r % SLOTS);
        size_t n = 1 + (r >> 8) % ((r >> 40) % 8 == 0 ? 70000 : 600);
        if (slot[s] == NULL) {
            slot[s] = malloc(n);
            len[s] = n;
            if (slot[s] == NULL)
                thread_fail("malloc failed", n, 0);
            else
                memset(slot[s], (int)s, n);
        } else if ((r >> 32) % 3 == 0) {
            unsigned char *q = realloc(slot[s], n);
            if (q == NULL) {
                thread_fail("realloc failed", n, 0);
            } else {
                size_t keep = len[s] < n ? len[s] : n;
                if (q[keep - 1] != (unsigned char)s || q[0] != (unsigned char)s)
                    thread_fail("realloc lost the contents", len[s], n);
                memset(q, (int)s, n);
                slot[s] = q;
                len[s] = n;
            }
        } else {
            if (fastmm_usable_size(slot[s]) != len[s])
                thread_fail("a debug block's usable size is not its request", len[s], 0);
            free(slot[s]);
            slot[s] = NULL;
        }
        atomic_store_explicit(&churn_progress[me], ++ops, memory_order_relaxed);
    }
    for (int s = 0; s < SLOTS; s++)
        free(slot[s]);
    return NULL;
}

/* In-place reallocs only: a few debug blocks shrink by a few bytes and grow back, over and over
 * (a debug block shrinks in place, and grows in place back up to its original size), so their
 * footer and header are rewritten all the time. */
static void *pingpong_thread(void *arg)
{
    int me = (int)(uintptr_t)arg;
    static const size_t sizes[] = {24, 100, 700, 2000, 5000, 20000, 60000, 150000};
    enum { N = sizeof sizes / sizeof sizes[0] };
    unsigned char *b[N];
    for (int i = 0; i < N; i++) {
        b[i] = malloc(sizes[i]);
        if (b[i] == NULL) {
            thread_fail("malloc failed", sizes[i], 0);
            return NULL;
        }
        memset(b[i], 0x42, sizes[i]);
    }
    long rounds = 0;
    atomic_fetch_add(&churn_started, 1);
    while (!atomic_load_explicit(&churn_stop, memory_order_relaxed)) {
        for (int i = 0; i < N; i++) {
            size_t n = sizes[i] - 1 - (size_t)(rounds % 7);
            unsigned char *q = realloc(launder_ptr(b[i]), n);
            if (q != b[i])
                thread_fail("a debug block's shrinking realloc moved it", sizes[i], n);
            if (q != NULL)
                b[i] = q;
            q = realloc(launder_ptr(b[i]), sizes[i]);
            if (q != b[i])
                thread_fail("a debug block's realloc back to its original size moved it", sizes[i], n);
            if (q != NULL)
                b[i] = q;
        }
        atomic_store_explicit(&churn_progress[me], ++rounds, memory_order_relaxed);
    }
    for (int i = 0; i < N; i++) {
        if (b[i][0] != 0x42 || b[i][sizes[i] - 8] != 0x42)
            thread_fail("in-place reallocs changed a debug block's contents", sizes[i], 0);
        free(b[i]);
    }
    return NULL;
}

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Guards the scan against concurrent allocation, free and in-place or moving realloc in other
 * threads (doc/fastmm5-facts.md 4.8: blocks being rewritten are skipped while their DEBUG_INFO flag is clear,
 * or retried): fastmm_debug_scan(), called over and over while two threads churn debug blocks and
 * a third keeps reallocating a few in place, never reports anything. The scanning starts once
 * all three run and goes on for 2 s (0.5 s under FASTMM_TEST_SLOW), and at least until each has
 * done 20000 operations (ping-pong rounds: 20000 x 16 in-place reallocs) and 500 scans were
 * made, but no longer than 20 s. (A race shows up only now and then: the time spent is what
 * makes a missing guard likely to be caught.) */
START_TEST(test_scan_while_churning)
{
    atomic_store(&thread_failures, 0);
    atomic_store(&churn_stop, 0);
    atomic_store(&churn_started, 0);
    for (int i = 0; i < CHURN_THREADS; i++)
        atomic_store(&churn_progress[i], 0);
    pthread_t th[CHURN_THREADS];
    for (int i = 0; i < CHURN_THREADS; i++)
        ck_assert_int_eq(pthread_create(&th[i], NULL, i == 0 ? pingpong_thread : churn_thread, (void *)(uintptr_t)i),
                         0);
    while (atomic_load(&churn_started) < CHURN_THREADS)
        sched_yield();
    long target = test_iters(20000), min_scans = test_iters(500);
    double start = now_seconds();
    double min_end = start + (test_slow() ? 0.5 : 2.0), deadline = start + 20.0;
    size_t bad = 0;
    long scans = 0;
    for (;;) {
        bad += fastmm_debug_scan();
        scans++;
        /* the deadline after every scan: one slow scan (Valgrind, a large heap) must not
         * stretch the test by the scans between checks */
        double now = now_seconds();
        if (now > deadline)
            break;
        if (scans < min_scans || now < min_end)
            continue;
        long least = LONG_MAX;
        for (int i = 0; i < CHURN_THREADS; i++) {
            long p = atomic_load_explicit(&churn_progress[i], memory_order_relaxed);
            if (p < least)
                least = p;
        }
        if (least >= target)
            break;
    }
    atomic_store(&churn_stop, 1);
    for (int i = 0; i < CHURN_THREADS; i++)
        pthread_join(th[i], NULL);
    ck_assert_msg(bad == 0, "concurrent scans reported %zu corrupt blocks: \"%.1500s\"", bad, ev_last_text());
    ck_assert_msg(evn() == 0, "%zu events during the churn, the last: \"%.1500s\"", evn(), ev_last_text());
    ck_assert_msg(atomic_load(&thread_failures) == 0, "%d failures, the first: %s", atomic_load(&thread_failures),
                  thread_fail_msg);
    ck_assert_uint_eq(fastmm_debug_scan(), 0);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Memory growth                                                                                */
/* ------------------------------------------------------------------------------------------ */

#define MEM_THREADS 8

static void *mem_thread(void *arg)
{
    uint64_t rng = (uint64_t)(uintptr_t)arg * 0x9E3779B97F4A7C15ULL + 3;
    int iters = test_iters(10000);
    for (int i = 0; i < iters; i++) {
        size_t n = 1 + xorshift64(&rng) % 70000;
        unsigned char *p = launder_ptr(malloc(n));
        if (p == NULL) {
            thread_fail("malloc failed", n, 0);
            continue;
        }
        memset(p, i, n);
        escape(p);
        free(p);
    }
    return NULL;
}

/* One scenario run: 8 threads of malloc(1..70000) + fill + free, each thread exiting. Returns
 * the OS memory held afterwards (pending frees processed, heap trimmed); *peak gets the most
 * seen by the main thread, which samples fastmm_os_memory() while the threads run. */
static atomic_int mem_running;

static void *mem_thread_counted(void *arg)
{
    mem_thread(arg);
    atomic_fetch_sub(&mem_running, 1);
    return NULL;
}

static size_t mem_run(int debug, unsigned options, int round, size_t *peak)
{
    fastmm_debug_set_options(options);
    if (debug)
        fastmm_debug_enter();
    pthread_t th[MEM_THREADS];
    int started = 0;
    atomic_store(&mem_running, MEM_THREADS);
    for (int i = 0; i < MEM_THREADS; i++) {
        if (pthread_create(&th[i], NULL, mem_thread_counted, (void *)(uintptr_t)(round * 100 + i + 1)) != 0) {
            thread_fail("pthread_create failed", (size_t)i, 0);
            atomic_fetch_sub(&mem_running, 1);
            continue;
        }
        started++;
    }
    size_t top = 0;
    while (atomic_load(&mem_running) > 0) {
        size_t now = fastmm_os_memory();
        if (now > top)
            top = now;
        usleep(200);
    }
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    size_t now = fastmm_os_memory();
    *peak = now > top ? now : top;
    if (debug)
        fastmm_debug_exit();
    fastmm_process_pending_frees();
    malloc_trim(0);
    return fastmm_os_memory();
}

/* Guards bounded memory in debug mode (doc/fastmm5-facts.md 4.9: in FastMM5, 8 threads x 30k
 * random allocations of up to 70000 bytes grow to 1.12 GB): the same churn (8 threads x 10000) in debug
 * mode, under each of the four combinations of the two FastMM5 options, holds at most 4x the OS
 * memory of the normal-mode run, both at its peak (sampled while the threads run, and when they
 * have exited) and after the run (pending frees processed, heap trimmed); baselines below 16 MiB
 * count as 16 MiB. */
START_TEST(test_memory_bounded)
{
    atomic_store(&thread_failures, 0);
    size_t normal_peak;
    size_t normal = mem_run(0, DEFAULT_OPTIONS, 0, &normal_peak);
    size_t base = normal > 16 * MIB ? normal : 16 * MIB;
    size_t base_peak = normal_peak > 16 * MIB ? normal_peak : 16 * MIB;
    static const unsigned combos[] = {0, FASTMM_DEBUG_NEVER_FREE_SMALL_SPANS, FASTMM_DEBUG_NEVER_MERGE_FREE_MEDIUM_BLOCKS,
                                      DEFAULT_OPTIONS};
    size_t got[4], peak[4];
    for (int c = 0; c < 4; c++)
        got[c] = mem_run(1, combos[c], c + 1, &peak[c]);
    fastmm_debug_set_options(DEFAULT_OPTIONS);
    ck_assert_msg(atomic_load(&thread_failures) == 0, "%s", thread_fail_msg);
    for (int c = 0; c < 4; c++) {
        ck_assert_msg(peak[c] <= 4 * base_peak,
                      "debug mode with options %#x peaked at %zu MiB during the churn; normal mode %zu MiB (limit %zu MiB)",
                      combos[c], peak[c] / MIB, normal_peak / MIB, 4 * base_peak / MIB);
        ck_assert_msg(got[c] <= 4 * base,
                      "debug mode with options %#x holds %zu MiB after the churn; normal mode %zu MiB (limit %zu MiB)",
                      combos[c], got[c] / MIB, normal / MIB, 4 * base / MIB);
    }
    ck_assert_uint_eq(evn(), 0);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */


/* Guards FastMM5's erase modes (doc/fastmm5-facts.md 4.10): erase-allocated fills the whole usable area of a
 * new malloc block with 0x90 but leaves calloc zeroed; erase-freed fills a freed block's usable
 * area with 0x80 (read back here from a still-mapped small block: its first word holds the
 * free-list link, so the check starts at 16); both are nested counters that report their state,
 * and an unbalanced end is refused. Outside the modes nothing is filled. */
START_TEST(test_erase_modes)
{
    ck_assert(!fastmm_erase_allocated_active());
    ck_assert(fastmm_erase_allocated_begin());
    ck_assert(fastmm_erase_allocated_begin());
    ck_assert(fastmm_erase_allocated_active());
    for (size_t n = 1; n <= 5000; n += 333) {
        unsigned char *p = malloc(n);
        size_t u = fastmm_usable_size(p);
        TEST_MAKE_DEFINED(p, u);
        for (size_t i = 0; i < u; i++)
            REQUIRE(p[i] == 0x90, "erase-allocated: byte %zu of a %zu-byte block is %#x", i, n, p[i]);
        unsigned char *c = calloc(1, n);
        for (size_t i = 0; i < n; i++)
            REQUIRE(c[i] == 0, "erase-allocated must not touch calloc: byte %zu is %#x", i, c[i]);
        free(c);
        free(p);
    }
    ck_assert(fastmm_erase_allocated_end());
    ck_assert(fastmm_erase_allocated_end());
    ck_assert(!fastmm_erase_allocated_active());
    ck_assert(!fastmm_erase_allocated_end()); /* unbalanced */

    ck_assert(fastmm_erase_freed_begin());
    ck_assert(fastmm_erase_freed_active());
    unsigned char *keep = malloc(200); /* a neighbour, so the span stays mapped */
    unsigned char *q = malloc(200);
    size_t u;
    q = claim_usable(q, &u);
    memset(q, 0x11, u);
    free(q);
    TEST_MAKE_DEFINED(q, u);
    for (size_t i = 16; i < u; i++)
        REQUIRE(q[i] == 0x80, "erase-freed: byte %zu of a freed block is %#x", i, q[i]);
    /* a small block realloc moves (grown past its class): the old one is erased as free() would */
    unsigned char *m = malloc(40);
    m = claim_usable(m, &u);
    memset(m, 0x33, u);
    unsigned char *grown = realloc(m, 1000);
    REQUIRE(grown != NULL && grown != m, "realloc 40 -> 1000 did not move (%p -> %p)", (void *)m, (void *)grown);
    TEST_MAKE_DEFINED(m, u);
    for (size_t i = 16; i < u; i++)
        REQUIRE(m[i] == 0x80, "erase-freed: byte %zu of a block realloc moved from is %#x", i, m[i]);
    free(grown);
    ck_assert(fastmm_erase_freed_end());
    ck_assert(!fastmm_erase_freed_active());
    unsigned char *r = malloc(200);
    r = claim_usable(r, &u);
    memset(r, 0x22, u);
    free(r);
    free(keep);
}
END_TEST

Suite *suite_debug(void)
{
    Suite *s = suite_create("debug");

    TCase *tc = tcase_create("patterns");
    tcase_set_timeout(tc, TEST_TIMEOUT);
    tcase_add_checked_fixture(tc, debug_setup, debug_teardown);
    tcase_add_test(tc, test_fill_patterns);
    tcase_add_loop_test(tc, test_write_after_free_every_byte, 0, N_WAF);
    tcase_add_loop_test(tc, test_cached_debug_block_vetted_in_normal_mode, 0, 2);
    tcase_add_test(tc, test_zero_overrun_always_caught);
    suite_add_tcase(s, tc);

    tc = tcase_create("misuse");
    tcase_set_timeout(tc, TEST_TIMEOUT);
    tcase_add_checked_fixture(tc, debug_setup, debug_teardown);
    tcase_add_loop_test(tc, test_misuse_reports, 0, MISUSE_COUNT * N_MISUSE_SIZES);
    tcase_add_test(tc, test_scan_every_operation);
    tcase_add_test(tc, test_stack_depth);
    tcase_add_test(tc, test_stack_trace_hooks);
    tcase_add_test(tc, test_allocation_group);
    tcase_add_test(tc, test_break_on_allocation);
    tcase_add_test(tc, test_break_on_allocation_kills);
    tcase_add_test(tc, test_scan_while_churning);
    suite_add_tcase(s, tc);

    tc = tcase_create("abort");
    tcase_set_timeout(tc, TEST_TIMEOUT);
    tcase_add_checked_fixture(tc, record_setup, record_teardown);
    tcase_add_loop_test(tc, test_misuse_aborts, 0, ABORT_KIND_COUNT);
    suite_add_tcase(s, tc);

    tc = tcase_create("modes");
    tcase_set_timeout(tc, TEST_TIMEOUT);
    tcase_add_checked_fixture(tc, record_setup, record_teardown);
    tcase_add_test(tc, test_options_roundtrip);
    tcase_add_test(tc, test_blocks_cross_mode_changes);
    tcase_add_test(tc, test_nesting_under_threads);
    tcase_add_test(tc, test_memory_bounded);
    tcase_add_test(tc, test_erase_modes);
    suite_add_tcase(s, tc);

    return s;
}
