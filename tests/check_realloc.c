/*
 * check_realloc.c - realloc: FastMM5's in-place / move policy and content preservation.
 *
 * Guards doc/fastmm5-facts.md section 3 (exact FastMM5 policy): small blocks shrink in
 * place iff 4*new + 64 >= old and always move to max(2*old + 32, new) to grow; medium blocks
 * ignore shrinks to >= old/2, shrink in place to >= 720, move to a small block below 720; large
 * blocks shrink in place to >= old/2. Plus the glibc edges of doc/api-contract.md section 1.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_suites.h"

/* The small classes of FastMM5 (block sizes incl. the 2-byte header): 51 on 64-bit, 61 on 32-bit
 * (there every multiple of 8 up to 160). */
static size_t small_classes(size_t *out)
{
    size_t n = 0;
    for (size_t c = FM_MIN_ALIGN; c <= 160; c += FM_MIN_ALIGN)
        out[n++] = c;
    for (size_t c = 176; c <= 320; c += 16)
        out[n++] = c;
    for (size_t c = 352; c <= 640; c += 32)
        out[n++] = c;
    for (size_t c = 704; c <= 1344; c += 64)
        out[n++] = c;
    for (size_t c = 1472; c <= 2624; c += 128)
        out[n++] = c;
    return n;
}

/* Guards the class list (51 classes, 16 .. 2624; 32-bit: 61, 8 .. 2624) the policy tests iterate
 * over. */
START_TEST(test_small_class_list)
{
    size_t cls[64];
    size_t n = small_classes(cls);
    ck_assert_uint_eq(n, FM_SMALL_CLASS_COUNT);
    ck_assert_uint_eq(cls[0], FM_MIN_ALIGN);
    ck_assert_uint_eq(cls[n - 1], 2624);
    for (size_t i = 0; i < n; i++)
        ck_assert_uint_eq(fm_small_class(cls[i] - 2), cls[i]);
}
END_TEST

/* Guards the small downsize rule for every class and every new size 1..old: same pointer and
 * unchanged usable size iff 4*new + 64 >= old, otherwise a fresh block of malloc(new)'s class;
 * the first new bytes survive either way. */
START_TEST(test_small_downsize_policy)
{
    size_t cls[64];
    size_t ncls = small_classes(cls);
    int step = test_slow() ? 7 : 1;
    for (size_t c = 0; c < ncls; c++) {
        size_t old = cls[c] - 2;
        for (size_t nw = 1; nw <= old; nw += (size_t)step) {
            void *p = malloc(old);
            REQUIRE(p != NULL, "malloc(%zu) failed", old);
            REQUIRE(fastmm_usable_size(p) == old, "usable(malloc(%zu)) = %zu", old, fastmm_usable_size(p));
            uint32_t seed = (uint32_t)(old * 4096 + nw);
            fill_pattern(p, old, seed);
            void *q = realloc(p, nw);
            REQUIRE(q != NULL, "realloc(%zu -> %zu) failed", old, nw);
            if (4 * nw + 64 >= old) {
                REQUIRE(q == p, "small realloc %zu -> %zu moved (must stay in place)", old, nw);
                REQUIRE(fastmm_usable_size(q) == old, "in-place small shrink %zu -> %zu changed usable to %zu",
                        old, nw, fastmm_usable_size(q));
            } else {
                REQUIRE(q != p, "small realloc %zu -> %zu stayed in place (must move)", old, nw);
                REQUIRE(fastmm_usable_size(q) == fm_expected_usable(nw),
                        "small realloc %zu -> %zu: usable %zu, expected %zu", old, nw, fastmm_usable_size(q),
                        fm_expected_usable(nw));
            }
            size_t bad = check_pattern(q, nw, seed);
            REQUIRE(bad == SIZE_MAX, "small realloc %zu -> %zu lost byte %zu", old, nw, bad);
            free(q);
        }
    }
}
END_TEST

/* Guards the small upsize rule: never in place; the new block has the usable size of
 * malloc(max(2*old + 32, new)), so a block grown by one byte jumps two classes and a block
 * grown past 2622 becomes medium; the old contents survive. */
START_TEST(test_small_upsize_policy)
{
    size_t cls[64];
    size_t ncls = small_classes(cls);
    for (size_t c = 0; c < ncls; c++) {
        size_t old = cls[c] - 2;
        size_t targets[] = {old + 1, old + 2, old + 17, 2 * old + 32, 2 * old + 33, 2622, 2623, 3000, 9000};
        for (size_t t = 0; t < sizeof targets / sizeof targets[0]; t++) {
            size_t nw = targets[t];
            if (nw <= old)
                continue;
            fastmm_process_pending_frees(); /* the new block FastMM5's size: no bigger cached one */
            void *p = malloc(old);
            ck_assert_ptr_nonnull(p);
            uint32_t seed = (uint32_t)(old * 31 + t);
            fill_pattern(p, old, seed);
            void *q = realloc(p, nw);
            ck_assert_ptr_nonnull(q);
            size_t target = 2 * old + 32 > nw ? 2 * old + 32 : nw;
            ck_assert_msg(q != p, "small block %zu grew in place to %zu", old, nw);
            ck_assert_msg(fastmm_usable_size(q) == fm_expected_usable(target),
                          "small upsize %zu -> %zu: usable %zu, expected %zu (target %zu)", old, nw,
                          fastmm_usable_size(q), fm_expected_usable(target), target);
            size_t bad = check_pattern(q, old, seed);
            ck_assert_msg(bad == SIZE_MAX, "small upsize %zu -> %zu lost byte %zu", old, nw, bad);
            /* The grown block is fully usable. */
            memset((char *)q + old, 0xab, nw - old);
            free(q);
        }
    }
    /* The FastMM5 documented example: 62 -> 63 allocates 156 bytes (the 160 class). */
    void *p = malloc(62);
    void *q = realloc(p, 63);
    ck_assert_ptr_ne(p, q);
    ck_assert_uint_eq(fastmm_usable_size(q), 158);
    free(q);
}
END_TEST

static const size_t medium_olds[] = {2623, 2873, 3000, 5000, 20000, 100921, 300000, 558904};

/* Guards medium downsizes: new >= old/2 is a no-op (same pointer, same usable size); 720 <= new <
 * old/2 shrinks in place to round_up(max(new, 2872) + 8, 64) - 8; new < 720 (and < old/2)
 * moves to a small block of malloc(new)'s class. Contents survive; the shrunk block still
 * works (grow it again, free it) and the freed tail is reusable. */
START_TEST(test_medium_downsize_policy)
{
    for (size_t i = 0; i < sizeof medium_olds / sizeof medium_olds[0]; i++) {
        size_t req = medium_olds[i];
        void *probe = malloc(req);
        size_t u = fastmm_usable_size(probe);
        free(probe);
        ck_assert_uint_eq(u, fm_expected_usable(req));
        size_t half = u / 2;   /* medium usable sizes are even (block multiple of 64, minus 8) */
        size_t news[] = {u, u - 1, u - 64, half + 1, half, half - 1, half / 2, 2873, 2872, 2000, 1000, 721,
                         720, 719, 500, 100, 1};
        for (size_t k = 0; k < sizeof news / sizeof news[0]; k++) {
            size_t nw = news[k];
            if (nw > u || nw == 0)
                continue;
            fastmm_process_pending_frees(); /* a block of FastMM5's size: no bigger cached one */
            void *p = malloc(req);
            ck_assert_ptr_nonnull(p);
            ck_assert_uint_eq(fastmm_usable_size(p), u);
            p = claim_usable(p, &u);
            uint32_t seed = (uint32_t)(req + k * 1000003);
            fill_pattern(p, u, seed);
            void *q = realloc(p, nw);
            ck_assert_msg(q != NULL, "medium realloc %zu -> %zu failed", u, nw);
            if (nw >= half) {
                ck_assert_msg(q == p, "medium realloc %zu -> %zu (>= half) moved", u, nw);
                ck_assert_msg(fastmm_usable_size(q) == u, "medium realloc %zu -> %zu (>= half) changed usable to %zu",
                              u, nw, fastmm_usable_size(q));
            } else if (nw >= 720) {
                ck_assert_msg(q == p, "medium realloc %zu -> %zu (720 <= new < half) moved", u, nw);
                ck_assert_msg(fastmm_usable_size(q) == fm_medium_shrunk_usable(nw),
                              "medium shrink %zu -> %zu: usable %zu, expected %zu", u, nw, fastmm_usable_size(q),
                              fm_medium_shrunk_usable(nw));
            } else {
                ck_assert_msg(q != p, "medium realloc %zu -> %zu (< 720) stayed in place", u, nw);
                ck_assert_msg(fastmm_usable_size(q) == fm_expected_usable(nw),
                              "medium -> small realloc %zu -> %zu: usable %zu, expected %zu", u, nw,
                              fastmm_usable_size(q), fm_expected_usable(nw));
            }
            size_t bad = check_pattern(q, nw, seed);
            ck_assert_msg(bad == SIZE_MAX, "medium realloc %zu -> %zu lost byte %zu", u, nw, bad);
            /* The tail given back must be usable by others without touching q. */
            void *other = malloc(u - nw > 64 ? (u - nw) / 2 : 16);
            ck_assert_ptr_nonnull(other);
            size_t uo;
            other = claim_usable(other, &uo);
            memset(other, 0xcd, uo);
            escape(other);
            ck_assert_uint_eq(check_pattern(q, nw, seed), SIZE_MAX);
            /* And the shrunk block grows again with its contents. */
            void *r = realloc(q, u);
            ck_assert_ptr_nonnull(r);
            ck_assert_uint_eq(check_pattern(r, nw, seed), SIZE_MAX);
            free(other);
            free(r);
        }
    }
}
END_TEST

/* Guards medium upsizes: contents survive, the result is big enough; when the block moves
 * (the next block was not free), the new block is malloc(max(old + old/4, new))'s size, FastMM5's
 * for that request with this thread's cache empty (a cached block up to an eighth bigger would
 * serve it otherwise: test_medium_cache_takes_near_bins). */
START_TEST(test_medium_upsize_policy)
{
    for (size_t i = 0; i < sizeof medium_olds / sizeof medium_olds[0]; i++) {
        size_t req = medium_olds[i];
        size_t grow[] = {1, 64, 1000, 5000, 100000, 600000};
        for (size_t k = 0; k < sizeof grow / sizeof grow[0]; k++) {
            fastmm_process_pending_frees(); /* this thread's cache empty */
            /* A neighbour allocated right after makes a move more likely, but not certain. */
            void *p = malloc(req);
            void *neighbour = malloc(req);
            ck_assert_ptr_nonnull(p);
            ck_assert_ptr_nonnull(neighbour);
            size_t u, un;
            p = claim_usable(p, &u);
            neighbour = claim_usable(neighbour, &un);
            size_t nw = u + grow[k];
            uint32_t seed = (uint32_t)(req * 3 + k);
            fill_pattern(p, u, seed);
            fill_pattern(neighbour, un, seed + 1);
            void *q = realloc(p, nw);
            ck_assert_msg(q != NULL, "medium upsize %zu -> %zu failed", u, nw);
            ck_assert_msg(fastmm_usable_size(q) >= nw, "medium upsize %zu -> %zu: usable %zu", u, nw,
                          fastmm_usable_size(q));
            if (q != p) {
                size_t target = u + u / 4 > nw ? u + u / 4 : nw;
                ck_assert_msg(fastmm_usable_size(q) == fm_expected_usable(target),
                              "moved medium upsize %zu -> %zu: usable %zu, expected %zu", u, nw,
                              fastmm_usable_size(q), fm_expected_usable(target));
            }
            ck_assert_uint_eq(check_pattern(q, u, seed), SIZE_MAX);
            memset((char *)q + u, 0xee, nw - u);
            ck_assert_uint_eq(check_pattern(neighbour, un, seed + 1), SIZE_MAX);
            free(neighbour);
            free(q);
        }
    }
    /* In-place growth into a freed neighbour is allowed; whatever happens, contents survive. */
    void *a = malloc(10000), *b = malloc(10000), *c = malloc(10000);
    fill_pattern(a, 10000, 5);
    fill_pattern(c, 10000, 6);
    free(b);
    void *a2 = realloc(a, 15000);
    ck_assert_ptr_nonnull(a2);
    ck_assert_uint_eq(check_pattern(a2, 10000, 5), SIZE_MAX);
    ck_assert_uint_eq(check_pattern(c, 10000, 6), SIZE_MAX);
    free(a2);
    free(c);
}
END_TEST

/* The walker's free medium blocks that start in [lo, hi). */
typedef struct free_in_range {
    uintptr_t lo, hi;
    unsigned count;
} free_in_range_t;

static void count_free_medium(const fastmm_block_info_t *b, void *arg)
{
    free_in_range_t *r = arg;
    uintptr_t at = (uintptr_t)b->address;
    if (b->type == FASTMM_BLOCK_MEDIUM && b->free && at >= r->lo && at < r->hi)
        r->count++;
}

static unsigned free_medium_in(uintptr_t lo, uintptr_t hi)
{
    free_in_range_t r = {lo, hi, 0};
    fastmm_walk_options_t o = FASTMM_WALK_OPTIONS_INIT;
    o.used_only = false;
    fastmm_walk_blocks(count_free_medium, &r, &o);
    return r.count;
}

/* Guards the bottom-up feed of medium spans (medium.c): a block freed at the feed's frontier
 * goes back to the feed (no free block is left there), the next carve starts where it was, and
 * the block carved last grows in place into the feed (again no free block behind it). With the
 * top-down feed the freed block stayed a free block and the growth took part of it. Needs a heap
 * no earlier test touched (each test is a fresh child under Check's fork mode; CK_FORK=no, as
 * under check-valgrind, runs them all in one process) and no debug mode (never-merge: nothing
 * goes back to the feed). */
START_TEST(test_medium_grows_into_feed)
{
    const char *fork_mode = getenv("CK_FORK");
    if (fastmm_debug_active() || (fork_mode != NULL && strcmp(fork_mode, "no") == 0))
        return;
    void *room = malloc(500000);
    ck_assert_ptr_nonnull(room);
    uintptr_t room_at = (uintptr_t)room; /* compared as numbers: the pointer is freed */
    free(room);
    settle_frees();
    REQUIRE(free_medium_in(room_at, room_at + 500000) == 0,
            "the 500000 bytes freed at the frontier stayed a free block instead of going back to the feed");
    char *p = malloc(200000);
    ck_assert_ptr_nonnull(p);
    REQUIRE((uintptr_t)p == room_at, "200000 bytes at %p, not where the 500000 freed at the frontier were (%#lx)",
            (void *)p, (unsigned long)room_at);
    fill_pattern(p, 200000, 11);
    char *q = realloc(p, 300000);
    REQUIRE(q == p, "realloc 200000 -> 300000 of the block carved last moved (%p -> %p)", (void *)p, (void *)q);
    ck_assert_uint_eq(check_pattern(q, 200000, 11), SIZE_MAX);
    memset(q + 200000, 0x3c, 100000);
    REQUIRE(free_medium_in(room_at, room_at + 500000) == 0, "the block grew into a free block, not into the feed");
    uintptr_t q_at = (uintptr_t)q;
    free(q);
    settle_frees();
    char *r = malloc(100000);
    REQUIRE((uintptr_t)r == q_at, "after the frontier block was freed, the next carve is at %p, not %#lx", (void *)r,
            (unsigned long)q_at);
    free(r);
}
END_TEST

/* Guards large downsizes: in place (same pointer) for any new >= old/2, even when new is a
 * medium size; a move (to malloc(new)'s block) below half. */
START_TEST(test_large_downsize_policy)
{
    static const size_t olds[] = {558905, 1 << 20, 4 << 20};
    for (size_t i = 0; i < sizeof olds / sizeof olds[0]; i++) {
        void *probe = malloc(olds[i]);
        size_t u = fastmm_usable_size(probe);
        free(probe);
        ck_assert_uint_eq(u, fm_expected_usable(olds[i]));
        size_t news[] = {u, u - 1, u - 100000, u / 2 + 1, u / 2, u / 2 - 1, u / 3, 2623, 2622, 100};
        for (size_t k = 0; k < sizeof news / sizeof news[0]; k++) {
            size_t nw = news[k];
            void *p = malloc(olds[i]);
            ck_assert_ptr_nonnull(p);
            size_t pu;
            p = claim_usable(p, &pu);
            ck_assert_uint_eq(pu, u);
            uint32_t seed = (uint32_t)(i * 100 + k);
            fill_pattern(p, u, seed);
            void *q = realloc(p, nw);
            ck_assert_ptr_nonnull(q);
            if (nw >= u / 2) {
                ck_assert_msg(q == p, "large realloc %zu -> %zu (>= half) moved", u, nw);
            } else {
                ck_assert_msg(q != p, "large realloc %zu -> %zu (< half) stayed", u, nw);
                ck_assert_msg(fastmm_usable_size(q) == fm_expected_usable(nw),
                              "large realloc %zu -> %zu: usable %zu, expected %zu", u, nw, fastmm_usable_size(q),
                              fm_expected_usable(nw));
            }
            ck_assert_uint_ge(fastmm_usable_size(q), nw);
            ck_assert_uint_eq(check_pattern(q, nw, seed), SIZE_MAX);
            free(q);
        }
    }
}
END_TEST

/* Guards large upsizes (in place by mapping more, or a move): contents survive and the block
 * is big enough and writable, over several successive growths. */
START_TEST(test_large_upsize)
{
    size_t n = 600000;
    char *p = malloc(n);
    ck_assert_ptr_nonnull(p);
    fill_pattern(p, n, 99);
    static const size_t steps[] = {600001, 700000, 1 << 20, (1 << 20) + 65536, 5 << 20, 5 << 20 | 1, 20 << 20};
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        char *q = realloc(p, steps[i]);
        ck_assert_msg(q != NULL, "large upsize to %zu failed", steps[i]);
        ck_assert_msg(((uintptr_t)q & 63) == 0, "large block %p not 64-byte aligned", (void *)q);
        ck_assert_uint_ge(fastmm_usable_size(q), steps[i]);
        ck_assert_uint_eq(check_pattern(q, n, 99), SIZE_MAX);
        fill_pattern(q, steps[i], 99);
        n = steps[i];
        p = q;
    }
    free(p);
}
END_TEST

/* Guards content preservation across every category boundary, both directions: every pair
 * (a -> b) of sizes around 720, 2622/2623, 2872/2873, the bin spacings and 558904/558905 keeps
 * min(a, b) bytes. */
START_TEST(test_cross_boundary_content)
{
    static const size_t sizes[] = {1,      14,     15,     100,    719,    720,    721,     1436,
                                   2621,   2622,   2623,   2872,   2873,   5000,   100920,  100921,
                                   297784, 297785, 558904, 558905, 1 << 20, 3 << 20};
    enum { N = sizeof sizes / sizeof sizes[0] };
    for (size_t i = 0; i < N; i++) {
        for (size_t j = 0; j < N; j++) {
            size_t a = sizes[i], b = sizes[j];
            uint32_t seed = (uint32_t)(i * N + j);
            void *p = malloc(a);
            ck_assert_ptr_nonnull(p);
            fill_pattern(p, a, seed);
            void *q = realloc(p, b);
            ck_assert_msg(q != NULL, "realloc %zu -> %zu failed", a, b);
            ck_assert_uint_ge(fastmm_usable_size(q), b);
            size_t keep = a < b ? a : b;
            size_t bad = check_pattern(q, keep, seed);
            ck_assert_msg(bad == SIZE_MAX, "realloc %zu -> %zu lost byte %zu", a, b, bad);
            free(q);
        }
    }
}
END_TEST

/* Guards growth one byte at a time from 1 to 3000 (every small class, the small->medium move,
 * the first medium bins) and back down, checking every byte at every step. */
START_TEST(test_grow_bytewise)
{
    const size_t top = 3000;
    uint8_t *p = malloc(1);
    ck_assert_ptr_nonnull(p);
    uint64_t h = pat_key(42);
    p[0] = pat_byte(h, 0);
    for (size_t n = 2; n <= top; n++) {
        p = realloc(p, n);
        REQUIRE(p != NULL, "realloc to %zu failed", n);
        size_t bad = check_pattern(p, n - 1, 42);
        REQUIRE(bad == SIZE_MAX, "growing to %zu lost byte %zu", n, bad);
        p[n - 1] = pat_byte(h, n - 1);
    }
    for (size_t n = top - 1; n >= 1; n--) {
        p = realloc(p, n);
        REQUIRE(p != NULL, "realloc down to %zu failed", n);
        size_t bad = check_pattern(p, n, 42);
        REQUIRE(bad == SIZE_MAX, "shrinking to %zu lost byte %zu", n, bad);
    }
    free(p);
}
END_TEST

/* Guards growth through the medium range into large (2000 .. 600000 in prime steps, hitting
 * many bins, in-place medium growth and the medium->large move), then shrinking back. */
START_TEST(test_grow_steps)
{
    size_t step = test_slow() ? 9973 : 997;
    size_t n = 2000;
    void *p = malloc(n);
    ck_assert_ptr_nonnull(p);
    fill_pattern(p, n, 7);
    while (n < 600000) {
        size_t nw = n + step;
        void *q = realloc(p, nw);
        REQUIRE(q != NULL, "realloc %zu -> %zu failed", n, nw);
        size_t bad = check_pattern(q, n, 7);
        REQUIRE(bad == SIZE_MAX, "growing %zu -> %zu lost byte %zu", n, nw, bad);
        fill_pattern(q, nw, 7);
        p = q;
        n = nw;
    }
    while (n > 2000) {
        size_t nw = n > 2000 + 3 * step ? n - 3 * step : 2000;
        void *q = realloc(p, nw);
        REQUIRE(q != NULL, "realloc %zu -> %zu failed", n, nw);
        size_t bad = check_pattern(q, nw, 7);
        REQUIRE(bad == SIZE_MAX, "shrinking %zu -> %zu lost byte %zu", n, nw, bad);
        p = q;
        n = nw;
    }
    free(p);
}
END_TEST

/* Guards realloc(NULL, n) == malloc(n) (same block size) for each category. */
START_TEST(test_realloc_null)
{
    static const size_t sizes[] = {0, 1, 100, 2622, 2623, 100000, 558904, 558905, 2 << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        void *p = realloc(NULL, sizes[i]);
        ck_assert_ptr_nonnull(p);
        ck_assert_uint_eq(fastmm_usable_size(p), fm_expected_usable(sizes[i]));
        memset(p, 1, sizes[i]);
        free(p);
        p = fastmm_realloc(NULL, sizes[i]);
        ck_assert_ptr_nonnull(p);
        ck_assert_uint_eq(fastmm_usable_size(p), fm_expected_usable(sizes[i]));
        fastmm_free(p);
    }
}
END_TEST

/* Guards realloc(p, 0): frees p (live bytes go back to where they were) and returns NULL. */
START_TEST(test_realloc_zero_frees)
{
    static const size_t sizes[] = {1, 100, 2622, 2623, 100000, 558905, 4 << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        fastmm_process_pending_frees();
        fastmm_usage_t before, during, after;
        fastmm_get_usage(&before);
        void *p = malloc(sizes[i]);
        REQUIRE(p != NULL, "malloc(%zu) failed", sizes[i]);
        fastmm_get_usage(&during);
        REQUIRE(during.allocated_bytes >= before.allocated_bytes + sizes[i],
                "allocated_bytes did not grow for malloc(%zu)", sizes[i]);
        void *q = realloc(p, 0);
        REQUIRE(q == NULL, "realloc(p, 0) returned %p", q);
        fastmm_process_pending_frees();
        fastmm_get_usage(&after);
        /* (REQUIRE, not ck_assert, in this window: a passing ck_assert allocates.) */
        REQUIRE(after.allocated_bytes == before.allocated_bytes,
                "realloc(p[%zu], 0) did not free: allocated %zu before, %zu after", sizes[i],
                before.allocated_bytes, after.allocated_bytes);
        p = fastmm_malloc(sizes[i]);
        ck_assert_ptr_null(fastmm_realloc(p, 0));
    }
}
END_TEST

/* Guards reallocarray: n*m overflow gives NULL/ENOMEM and leaves the block valid; otherwise it
 * behaves as realloc(p, n*m). */
START_TEST(test_reallocarray)
{
    int *a = reallocarray(NULL, 100, sizeof(int));
    ck_assert_ptr_nonnull(a);
    ck_assert_uint_ge(fastmm_usable_size(a), 100 * sizeof(int));
    for (int i = 0; i < 100; i++)
        a[i] = i;
    a = reallocarray(a, 1000, sizeof(int));
    ck_assert_ptr_nonnull(a);
    for (int i = 0; i < 100; i++)
        ck_assert_int_eq(a[i], i);
    struct {
        size_t n, m;
    } bad[] = {{SIZE_MAX / 2 + 1, 2}, {FM_SIZE_HALF, FM_SIZE_HALF}, {SIZE_MAX, SIZE_MAX},
               {(size_t)PTRDIFF_MAX / 4 + 1, 4}};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        errno = 0;
        void *r = reallocarray(a, launder_size(bad[k].n), launder_size(bad[k].m));
        ck_assert_msg(r == NULL, "reallocarray(%zu, %zu) did not fail", bad[k].n, bad[k].m);
        ck_assert_int_eq(errno, ENOMEM);
        errno = 0;
        r = fastmm_reallocarray(a, launder_size(bad[k].n), launder_size(bad[k].m));
        ck_assert_ptr_null(r);
        ck_assert_int_eq(errno, ENOMEM);
        errno = 0;
        r = reallocarray(NULL, launder_size(bad[k].n), launder_size(bad[k].m));
        ck_assert_ptr_null(r);
        ck_assert_int_eq(errno, ENOMEM);
    }
    for (int i = 0; i < 100; i++)
        ck_assert_int_eq(a[i], i);
    a = fastmm_reallocarray(a, 10, sizeof(int));
    ck_assert_ptr_nonnull(a);
    for (int i = 0; i < 10; i++)
        ck_assert_int_eq(a[i], i);
    free(a);
}
END_TEST

/* Guards a failing (huge) realloc of each category: NULL, errno ENOMEM, and the old block still
 * valid with its contents and size (then freed normally). */
START_TEST(test_realloc_huge_keeps_old)
{
    static const size_t sizes[] = {10, 2622, 2623, 300000, 558905, 3 << 20};
    static const size_t huge[] = {SIZE_MAX, SIZE_MAX - 4095, (size_t)PTRDIFF_MAX + 1, (size_t)PTRDIFF_MAX};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        void *p = malloc(sizes[i]);
        ck_assert_ptr_nonnull(p);
        size_t u;
        p = claim_usable(p, &u);
        fill_pattern(p, u, (uint32_t)i);
        for (size_t k = 0; k < sizeof huge / sizeof huge[0]; k++) {
            errno = 0;
            void *q = realloc(p, launder_size(huge[k]));
            ck_assert_msg(q == NULL, "realloc(%zu-byte block, %zu) did not fail", sizes[i], huge[k]);
            ck_assert_int_eq(errno, ENOMEM);
            errno = 0;
            q = fastmm_realloc(p, launder_size(huge[k]));
            ck_assert_ptr_null(q);
            ck_assert_int_eq(errno, ENOMEM);
            ck_assert_uint_eq(fastmm_usable_size(p), u);
            ck_assert_uint_eq(check_pattern(p, u, (uint32_t)i), SIZE_MAX);
        }
        size_t nw = sizes[i] + 1000, keep = u < nw ? u : nw;
        void *r = realloc(p, nw);
        ck_assert_ptr_nonnull(r);
        ck_assert_uint_eq(check_pattern(r, keep, (uint32_t)i), SIZE_MAX);
        free(r);
    }
}
END_TEST

Suite *suite_realloc(void)
{
    Suite *s = suite_create("realloc");

    TCase *tc = tcase_create("policy");
    tcase_set_timeout(tc, TEST_TIMEOUT);
    tcase_add_test(tc, test_small_class_list);
    tcase_add_test(tc, test_small_downsize_policy);
    tcase_add_test(tc, test_small_upsize_policy);
    tcase_add_test(tc, test_medium_downsize_policy);
    tcase_add_test(tc, test_medium_upsize_policy);
    tcase_add_test(tc, test_large_downsize_policy);
    tcase_add_test(tc, test_large_upsize);
    tcase_add_test(tc, test_medium_grows_into_feed);
    suite_add_tcase(s, tc);

    tc = tcase_create("content");
    tcase_set_timeout(tc, TEST_TIMEOUT);
    tcase_add_test(tc, test_cross_boundary_content);
    tcase_add_test(tc, test_grow_bytewise);
    tcase_add_test(tc, test_grow_steps);
    suite_add_tcase(s, tc);

    tc = tcase_create("edges");
    tcase_set_timeout(tc, TEST_TIMEOUT);
    tcase_add_test(tc, test_realloc_null);
    tcase_add_test(tc, test_realloc_zero_frees);
    tcase_add_test(tc, test_reallocarray);
    tcase_add_test(tc, test_realloc_huge_keeps_old);
    suite_add_tcase(s, tc);

    return s;
}
