/*
 * check_alloc.c - allocation: sizes, size classes, alignment, calloc, aligned allocation.
 *
 * Guards doc/api-contract.md section 1 and the FastMM5 geometry of doc/fastmm5-facts.md 2.1-2.5:
 * every request lands in the size class / medium bin / large granule FastMM5 would pick, the
 * reported usable size is exactly that block's capacity, blocks are aligned and never overlap.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_suites.h"

#define MAX_EVERY 2700   /* sizes 0 .. 2700: every small class and the first medium bins */

struct span {
    uintptr_t lo, hi;
};

static int span_cmp(const void *a, const void *b)
{
    const struct span *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Fails if any two [p, p + usable) ranges of the n live blocks overlap. */
static void assert_disjoint(void **ptrs, size_t n)
{
    struct span *s = malloc(n * sizeof *s);
    ck_assert_ptr_nonnull(s);
    for (size_t i = 0; i < n; i++) {
        s[i].lo = (uintptr_t)ptrs[i];
        s[i].hi = s[i].lo + fastmm_usable_size(ptrs[i]);
    }
    qsort(s, n, sizeof *s, span_cmp);
    for (size_t i = 1; i < n; i++)
        REQUIRE(s[i - 1].hi <= s[i].lo, "blocks overlap: [%#lx, %#lx) and [%#lx, %#lx)",
                (unsigned long)s[i - 1].lo, (unsigned long)s[i - 1].hi, (unsigned long)s[i].lo,
                (unsigned long)s[i].hi);
    free(s);
}

/* Guards the helper itself against the hand-computed table (so a wrong formula cannot make the
 * exact-size tests below pass against a wrong library). The small classes below 176 differ
 * between 64-bit (16-byte steps) and 32-bit (8-byte steps); the rest is the same. */
START_TEST(test_expected_size_table)
{
    static const size_t table[][2] = {
#if FM_TEST_64BIT
        {0, 14},           {1, 14},           {14, 14},          {15, 30},         {100, 110},
        {158, 158},        {159, 174},
#else
        {0, 6},            {1, 6},            {6, 6},            {7, 14},          {14, 14},
        {15, 22},          {100, 102},        {158, 158},        {159, 174},
#endif
        {174, 174},        {175, 190},        {318, 318},
        {319, 350},        {638, 638},        {639, 702},        {1342, 1342},     {1343, 1470},
        {2494, 2494},      {2495, 2622},      {2622, 2622},      {2623, 2872},     {2872, 2872},
        {2873, 3128},      {100920, 100920},  {100921, 101176},  {101176, 101176}, {101177, 101688},
        {297272, 297272},  {297273, 297784},  {297784, 297784},  {297785, 298808}, {558904, 558904},
        {558905, 589760},  {1048576, 1114048}, {10485760, 10551232}, {104857601, 104923072},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        ck_assert_uint_eq(fm_expected_usable(table[i][0]), table[i][1]);
}
END_TEST

/* Guards the small-block classes and the small/medium switch: every size 0..2700 gets a 16-byte
 * (32-bit: 8-byte) aligned block (64-byte aligned once medium) whose usable size is exactly FastMM5's class - 2
 * (or medium bin - 8), reported identically by malloc_usable_size and fastmm_usable_size; all
 * 2701 blocks live at once never overlap and keep their own contents. */
START_TEST(test_every_size_small)
{
    void **p = malloc((MAX_EVERY + 1) * sizeof *p);
    ck_assert_ptr_nonnull(p);
    for (size_t n = 0; n <= MAX_EVERY; n++) {
        p[n] = malloc(n);
        REQUIRE(p[n] != NULL, "malloc(%zu) failed", n);
        REQUIRE(((uintptr_t)p[n] & (FM_MIN_ALIGN - 1)) == 0, "malloc(%zu) = %p not %zu-byte aligned", n, p[n],
                FM_MIN_ALIGN);
        if (n > FM_MAX_SMALL_USER)
            REQUIRE(((uintptr_t)p[n] & 63) == 0, "medium malloc(%zu) = %p not 64-byte aligned", n, p[n]);
        size_t u = fastmm_usable_size(p[n]);
        REQUIRE(u == fm_expected_usable(n), "usable(malloc(%zu)) = %zu, expected %zu", n, u,
                fm_expected_usable(n));
        REQUIRE(malloc_usable_size(p[n]) == u, "malloc_usable_size(malloc(%zu)) = %zu != %zu", n,
                malloc_usable_size(p[n]), u);
        p[n] = claim_usable(p[n], &u);
        fill_pattern(p[n], u, (uint32_t)n);
    }
    for (size_t n = 0; n <= MAX_EVERY; n++) {
        size_t bad = check_pattern(p[n], fm_expected_usable(n), (uint32_t)n);
        REQUIRE(bad == SIZE_MAX, "block of size %zu corrupted at offset %zu", n, bad);
    }
    assert_disjoint(p, MAX_EVERY + 1);
    /* Free odd sizes first, then even ones, so frees hit both full and partial spans. */
    for (size_t n = 1; n <= MAX_EVERY; n += 2)
        free(p[n]);
    for (size_t n = 0; n <= MAX_EVERY; n += 2) {
        size_t bad = check_pattern(p[n], fm_expected_usable(n), (uint32_t)n);
        REQUIRE(bad == SIZE_MAX, "block of size %zu corrupted at %zu after neighbours were freed", n, bad);
        free(p[n]);
    }
    free(p);
}
END_TEST

/* Guards malloc(0): a unique, non-NULL, 16-byte aligned pointer in the 16-byte class (usable 14);
 * 32-bit: 8-byte aligned in the 8-byte class (usable 6). */
START_TEST(test_malloc_zero_unique)
{
    enum { N = 1000 };
    void *p[N];
    for (int i = 0; i < N; i++) {
        p[i] = malloc(0);
        ck_assert_ptr_nonnull(p[i]);
        REQUIRE(((uintptr_t)p[i] & (FM_MIN_ALIGN - 1)) == 0, "malloc(0) misaligned");
        REQUIRE(fastmm_usable_size(p[i]) == FM_MIN_USABLE, "usable(malloc(0)) = %zu", fastmm_usable_size(p[i]));
        size_t u;
        p[i] = claim_usable(p[i], &u);
        memset(p[i], i & 0xff, u);
    }
    void **s = launder_ptr(p);
    assert_disjoint(s, N);
    for (int i = 0; i < N; i++) {
        for (size_t j = 0; j < FM_MIN_USABLE; j++)
            REQUIRE(((uint8_t *)p[i])[j] == (uint8_t)i, "malloc(0) block %d overwritten", i);
        free(p[i]);
    }
    void *z = fastmm_malloc(0);
    ck_assert_ptr_nonnull(z);
    ck_assert_uint_eq(fastmm_usable_size(z), FM_MIN_USABLE);
    fastmm_free(z);
}
END_TEST

/* Guards the medium bin edges (256/512/1024 spacings, 2880 minimum, 558904 maximum) and the
 * medium/large switch: exact usable size, 64-byte alignment and contents kept with all live. */
START_TEST(test_medium_bin_edges)
{
    static const size_t sizes[] = {
        2621, 2622, 2623, 2624, 2700, 2871, 2872, 2873, 2879, 2880, 2881, 3000, 3128, 3129,
        100919, 100920, 100921, 100922, 100923, 100924, 100925, 100926, 100927, 100928, 100929, 100930,
        101175, 101176, 101177, 101178, 101179, 101180, 101688, 101689,
        297271, 297272, 297273, 297279, 297280, 297281, 297783, 297784, 297785, 297792, 298808, 298809,
        400000, 558903, 558904, 558905,
    };
    enum { N = sizeof sizes / sizeof sizes[0] };
    void *p[N];
    for (size_t i = 0; i < N; i++) {
        size_t n = sizes[i];
        p[i] = malloc(n);
        ck_assert_msg(p[i] != NULL, "malloc(%zu) failed", n);
        size_t u = fastmm_usable_size(p[i]);
        ck_assert_msg(u == fm_expected_usable(n), "usable(malloc(%zu)) = %zu, expected %zu", n, u,
                      fm_expected_usable(n));
        ck_assert_uint_eq(malloc_usable_size(p[i]), u);
        if (n > FM_MAX_SMALL_USER)
            ck_assert_msg(((uintptr_t)p[i] & 63) == 0, "malloc(%zu) = %p not 64-byte aligned", n, p[i]);
        else
            ck_assert_msg(((uintptr_t)p[i] & (FM_MIN_ALIGN - 1)) == 0, "malloc(%zu) = %p not %zu-byte aligned", n,
                          p[i], FM_MIN_ALIGN);
        p[i] = claim_usable(p[i], &u);
        fill_pattern(p[i], u, (uint32_t)(i * 7919 + 1));
    }
    assert_disjoint(launder_ptr(p), N);
    for (size_t i = 0; i < N; i++) {
        size_t bad = check_pattern(p[i], fastmm_usable_size(p[i]), (uint32_t)(i * 7919 + 1));
        ck_assert_msg(bad == SIZE_MAX, "malloc(%zu) corrupted at %zu", sizes[i], bad);
    }
    for (size_t i = 0; i < N; i++)
        free(p[i]);
}
END_TEST

/* Guards which cached block a medium malloc takes (tcache.c, FM_TCACHE_MEDIUM_SLACK): with the
 * request's own bin empty and one block cached in a bin above it, malloc(n) takes that block
 * while the block is at most an eighth bigger than n's bin size, and otherwise gets a block of
 * exactly FastMM5's usable size from the arenas, the cached one staying cached. */
START_TEST(test_medium_cache_takes_near_bins)
{
    static const size_t sizes[] = {3000, 9000, 12000, 20000, 50000};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t n = sizes[i];
        size_t bin = fm_expected_usable(n) + 8;
        for (size_t up = 256; up <= n / 8u + 1024u && n + up <= 65536; up += 256) {
            fastmm_process_pending_frees(); /* this thread's cache empty */
            void *bigger = malloc(n + up);
            ck_assert_ptr_nonnull(bigger);
            size_t ub = fastmm_usable_size(bigger);
            ck_assert_uint_gt(ub, fm_expected_usable(n));
            free(launder_ptr(bigger)); /* cached: the bin of n + up */
            settle_frees();
            void *p = malloc(n);
            ck_assert_ptr_nonnull(p);
            size_t u = fastmm_usable_size(p);
            ck_assert_uint_eq(malloc_usable_size(p), u);
            if (ub + 8 - bin <= bin / 8u)
                ck_assert_msg(p == bigger && u == ub,
                              "malloc(%zu) got %p, usable %zu; the cached block %p (usable %zu) is within an eighth", n,
                              p, u, bigger, ub);
            else
                ck_assert_msg(p != bigger && u == fm_expected_usable(n),
                              "malloc(%zu) got %p, usable %zu (expected %zu); the cached block %p is over an eighth", n,
                              p, u, fm_expected_usable(n), bigger);
            free(p);
        }
    }
    /* a block realloc shrank in place to a size between two bins (FastMM5, section 3.2) goes to
     * the arenas, not the cache, which keeps bin sizes only */
    fastmm_process_pending_frees();
    void *big = malloc(20000);
    ck_assert_ptr_nonnull(big);
    void *shrunk = realloc(big, 3200);
    ck_assert_ptr_eq(shrunk, big);
    ck_assert_uint_eq(fastmm_usable_size(shrunk), fm_medium_shrunk_usable(3200));
    ck_assert_uint_ne(fm_medium_shrunk_usable(3200), fm_expected_usable(3000));
    free(shrunk);
    void *p = malloc(3000);
    ck_assert_ptr_nonnull(p);
    ck_assert_msg(fastmm_usable_size(p) == fm_expected_usable(3000),
                  "usable(malloc(3000)) = %zu after free of a block shrunk to usable %zu, expected %zu",
                  fastmm_usable_size(p), fm_medium_shrunk_usable(3200), fm_expected_usable(3000));
    free(p);
    fastmm_process_pending_frees();
}
END_TEST

/* Guards large blocks: (size + 64) rounded up to 64 KiB, usable = that - 64, 64-byte aligned,
 * the whole usable range writable and kept while other large blocks come and go. */
START_TEST(test_large_sizes)
{
    static const size_t sizes[] = {558905, 589760, 589761, 1048576, 10485760, 104857601};
    enum { N = sizeof sizes / sizeof sizes[0] };
    void *p[N];
    for (size_t i = 0; i < N; i++) {
        size_t n = sizes[i];
        p[i] = malloc(n);
        ck_assert_msg(p[i] != NULL, "malloc(%zu) failed", n);
        ck_assert_msg(((uintptr_t)p[i] & 63) == 0, "large malloc(%zu) = %p not 64-byte aligned", n, p[i]);
        size_t u = fastmm_usable_size(p[i]);
        ck_assert_msg(u == fm_expected_usable(n), "usable(malloc(%zu)) = %zu, expected %zu", n, u,
                      fm_expected_usable(n));
        ck_assert_uint_eq(malloc_usable_size(p[i]), u);
        p[i] = claim_usable(p[i], &u);
        fill_pattern(p[i], u, (uint32_t)(1000 + i));
        /* Churn another large block in between. */
        void *q = malloc(2 * 1024 * 1024 + i);
        ck_assert_ptr_nonnull(q);
        memset(q, 0x5a, 2 * 1024 * 1024 + i);
        escape(q);
        free(q);
    }
    assert_disjoint(launder_ptr(p), N);
    for (size_t i = 0; i < N; i++) {
        size_t bad = check_pattern(p[i], fastmm_usable_size(p[i]), (uint32_t)(1000 + i));
        ck_assert_msg(bad == SIZE_MAX, "large block %zu corrupted at %zu", sizes[i], bad);
        free(p[i]);
    }
}
END_TEST

/* Guards calloc: memory is zero even when the block is reused (malloc, fill 0xFF, free, calloc
 * the same size — the freed block is the likely one to come back), for small, medium and large
 * sizes and count/size splits; calloc(0, x) and calloc(x, 0) return unique pointers. */
START_TEST(test_calloc_zeroed)
{
    static const size_t extra[] = {2623, 2872, 2873, 5000, 65536, 100921, 300000, 558904, 558905,
                                   1 << 20, 3 << 20};
    int step = test_slow() ? 13 : 1;
    for (size_t n = 0; n <= MAX_EVERY + sizeof extra / sizeof extra[0]; n += (size_t)step) {
        size_t sz = n <= MAX_EVERY ? n : extra[n - MAX_EVERY - 1];
        void *a = malloc(sz);
        ck_assert_ptr_nonnull(a);
        size_t u;
        a = claim_usable(a, &u);
        memset(a, 0xff, u);
        escape(a);
        free(a);
        /* Alternate the count/size split. */
        uint8_t *c = (n & 1) && sz % 2 == 0 ? calloc(sz / 2, 2) : calloc(1, sz);
        REQUIRE(c != NULL, "calloc of %zu bytes failed", sz);
        REQUIRE(((uintptr_t)c & (FM_MIN_ALIGN - 1)) == 0, "calloc misaligned");
        REQUIRE(fastmm_usable_size(c) >= sz, "calloc usable too small");
        for (size_t i = 0; i < sz; i++)
            REQUIRE(c[i] == 0, "calloc(%zu) byte %zu = %#x, not zero", sz, i, c[i]);
        free(c);
    }
    void *z1 = calloc(0, 16), *z2 = calloc(16, 0), *z3 = calloc(0, 0);
    ck_assert_ptr_nonnull(z1);
    ck_assert_ptr_nonnull(z2);
    ck_assert_ptr_nonnull(z3);
    ck_assert_ptr_ne(z1, z2);
    ck_assert_ptr_ne(z2, z3);
    free(z1);
    free(z2);
    free(z3);
    /* The prefixed entry point too. */
    uint8_t *f = fastmm_calloc(100, 30);
    ck_assert_ptr_nonnull(f);
    for (int i = 0; i < 3000; i++)
        REQUIRE(f[i] == 0, "fastmm_calloc byte %d not zero", i);
    fastmm_free(f);
}
END_TEST

/* Guards calloc's multiplication overflow check: NULL with errno ENOMEM, never a short block. */
START_TEST(test_calloc_overflow)
{
    struct {
        size_t count, size;
    } cases[] = {
        {SIZE_MAX / 2 + 1, 2},
        {FM_SIZE_HALF, FM_SIZE_HALF},   /* 2^32 * 2^32 (32-bit: 2^16 * 2^16) */
        {SIZE_MAX, SIZE_MAX},
        {3, SIZE_MAX / 3 + 1},
        {1, (size_t)PTRDIFF_MAX + 1},
        {(size_t)PTRDIFF_MAX / 2 + 1, 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        errno = 0;
        void *p = calloc(launder_size(cases[i].count), launder_size(cases[i].size));
        ck_assert_msg(p == NULL, "calloc(%zu, %zu) did not fail", cases[i].count, cases[i].size);
        ck_assert_int_eq(errno, ENOMEM);
        errno = 0;
        p = fastmm_calloc(launder_size(cases[i].count), launder_size(cases[i].size));
        ck_assert_ptr_null(p);
        ck_assert_int_eq(errno, ENOMEM);
    }
}
END_TEST

static const size_t aligned_sizes[] = {0, 1, 8, 15, 16, 17, 64, 100, 1000, 2622, 2623, 5000, 65536,
                                       558904, 558905, 1 << 20};
#define N_ALIGNED_SIZES (sizeof aligned_sizes / sizeof aligned_sizes[0])

static void check_aligned_block(void *p, size_t align, size_t n, const char *what)
{
    ck_assert_msg(p != NULL, "%s(align %zu, size %zu) failed", what, align, n);
    ck_assert_msg(((uintptr_t)p & (align - 1)) == 0, "%s(align %zu, size %zu) = %p misaligned", what,
                  align, n, p);
    ck_assert_msg(((uintptr_t)p & (FM_MIN_ALIGN - 1)) == 0, "%s block %p not %zu-byte aligned", what, p,
                  FM_MIN_ALIGN);
    size_t u = fastmm_usable_size(p);
    ck_assert_msg(u >= n, "%s(align %zu, size %zu): usable %zu too small", what, align, n, u);
    ck_assert_uint_eq(malloc_usable_size(p), u);
    p = claim_usable(p, &u);
    fill_pattern(p, u, (uint32_t)(align ^ n));
}

/* Guards posix_memalign / aligned_alloc / memalign (libc and fastmm_ names) for every power of
 * two from 16 (32-bit: 8) to 1 MiB and sizes from 0 up past the large threshold: aligned, usable >= size,
 * fully writable, freeable with free(). Blocks of one alignment stay live together. */
START_TEST(test_aligned_alloc_all)
{
    for (size_t align = FM_MIN_ALIGN; align <= (1u << 20); align <<= 1) {
        void *blocks[N_ALIGNED_SIZES * 4];
        int nb = 0;
        for (size_t i = 0; i < N_ALIGNED_SIZES; i++) {
            size_t n = aligned_sizes[i];
            void *p = (void *)0x1;
            ck_assert_int_eq(posix_memalign(&p, align, n), 0);
            check_aligned_block(p, align, n, "posix_memalign");
            blocks[nb++] = p;
            p = aligned_alloc(align, n);
            check_aligned_block(p, align, n, "aligned_alloc");
            blocks[nb++] = p;
            p = memalign(align, n);
            check_aligned_block(p, align, n, "memalign");
            blocks[nb++] = p;
            /* Prefixed names, alternating between them. */
            if (i % 3 == 0)
                ck_assert_int_eq(fastmm_posix_memalign(&p, align, n), 0);
            else if (i % 3 == 1)
                p = fastmm_aligned_alloc(align, n);
            else
                p = fastmm_memalign(align, n);
            check_aligned_block(p, align, n, "fastmm_*align*");
            blocks[nb++] = p;
        }
        assert_disjoint(blocks, (size_t)nb);
        for (int i = 0; i < nb; i++) {
            size_t bad = check_pattern(blocks[i], fastmm_usable_size(blocks[i]),
                                       (uint32_t)(align ^ aligned_sizes[i / 4]));
            ck_assert_msg(bad == SIZE_MAX, "aligned block (align %zu, size %zu) corrupted at %zu", align,
                          aligned_sizes[i / 4], bad);
            if (i & 1)
                free(blocks[i]);
            else
                fastmm_free(blocks[i]);
        }
    }
}
END_TEST

/* Guards aligned medium requests and this thread's cache (dispatch.c, tcache.c): an aligned block
 * freed into the cache is what the next aligned request of its size and alignment gets back
 * (64: every medium block is 64-aligned; 256 and 4096: the bin's top block if it is aligned),
 * aligned and with the usable size of a fresh one; a cached block that is not aligned is not
 * handed out. Without the cache, each such request took an arena lock and split a bigger block
 * (a loop of aligned_alloc(4096, 4 KiB..28 KiB): 12x slower). */
START_TEST(test_aligned_medium_from_thread_cache)
{
    static const size_t aligns[] = {64, 256, 4096};
    const size_t n = 8000;
    for (size_t i = 0; i < sizeof aligns / sizeof aligns[0]; i++) {
        size_t align = aligns[i];
        unsigned char *p = aligned_alloc(align, n);
        ck_assert_ptr_nonnull(p);
        ck_assert_uint_eq((uintptr_t)p & (align - 1), 0);
        size_t u = fastmm_usable_size(p);
        free(launder_ptr(p));
        settle_frees();
        unsigned char *q = aligned_alloc(align, n);
        ck_assert_msg(q == p, "align %zu: the block freed into this thread's cache (%p) was not reused (got %p)", align,
                      (void *)p, (void *)q);
        ck_assert_uint_eq(fastmm_usable_size(q), u);
        q = claim_usable(q, &u);
        fill_pattern(q, u, (uint32_t)align);
        ck_assert_uint_eq(check_pattern(q, u, (uint32_t)align), SIZE_MAX);
        free(q);
    }
    /* a cached block of the bin that is not 4096-aligned stays cached */
    unsigned char *a = NULL, *keep[64];
    int nk = 0;
    while (nk < 64 && a == NULL) {
        unsigned char *b = malloc(n);
        ck_assert_ptr_nonnull(b);
        if (((uintptr_t)b & 4095u) != 0)
            a = b;
        else
            keep[nk++] = b;
    }
    ck_assert_ptr_nonnull(a);
    free(launder_ptr(a));
    unsigned char *q = aligned_alloc(4096, n);
    ck_assert_ptr_nonnull(q);
    ck_assert_msg(((uintptr_t)q & 4095u) == 0 && q != a, "aligned_alloc(4096) got %p, the cached block %p", (void *)q,
                  (void *)a);
    ck_assert_ptr_eq(malloc(n), a); /* still this thread's cached block */
    free(a);
    free(q);
    for (int i = 0; i < nk; i++)
        free(keep[i]);
}
END_TEST

/* Guards aligned large blocks on kept mappings (lib/large.c): a freed large block's mapping,
 * kept for reuse, serves an aligned request of 128 B to 2 MiB alignment without a new mapping
 * (aligned, usable and writable through), and once that block is freed the mapping serves the
 * size it first had again, whole, from its start. Each aligned request once cost a fresh mapping
 * and its page faults (posix_memalign(4096, 1 MiB) in a loop: 13x glibc's time). */
START_TEST(test_aligned_large_from_kept_mapping)
{
    static const size_t aligns[] = {128, 4096, 65536, (size_t)2 << 20};
    const size_t n = (size_t)1 << 20;
    for (size_t i = 0; i < sizeof aligns / sizeof aligns[0]; i++) {
        size_t align = aligns[i], big = n + 2 * align + ((size_t)1 << 20);
        malloc_trim(0); /* no mapping kept by earlier work may be the better fit */
        unsigned char *p = malloc(big);
        ck_assert_ptr_nonnull(p);
        memset(p, 0x5a, big);
        free(launder_ptr(p));
        size_t os = fastmm_os_memory();
        unsigned char *q = aligned_alloc(align, n);
        ck_assert_ptr_nonnull(q);
        ck_assert_msg(((uintptr_t)q & (align - 1)) == 0, "align %zu: %p", align, (void *)q);
        ck_assert_msg(q > p && q + n <= p + big && fastmm_os_memory() == os,
                      "align %zu: %p (OS memory %zu -> %zu) is not from the kept mapping at %p", align, (void *)q, os,
                      fastmm_os_memory(), (void *)p);
        size_t u = fastmm_usable_size(q);
        ck_assert_uint_ge(u, n);
        ck_assert_msg(q + u <= p + big, "align %zu: usable %zu runs past the mapping", align, u);
        q = claim_usable(q, &u);
        fill_pattern(q, u, (uint32_t)align);
        ck_assert_uint_eq(check_pattern(q, u, (uint32_t)align), SIZE_MAX);
        free(launder_ptr(q));
        unsigned char *r = malloc(big);
        ck_assert_msg(r == p && fastmm_os_memory() == os, "align %zu: the kept mapping at %p did not serve %zu bytes "
                      "again from its start (got %p)", align, (void *)p, big, (void *)r);
        free(r);
    }
}
END_TEST

/* Guards small alignments (1, 2, 4, 8: valid powers of two for aligned_alloc/memalign, 8 for
 * posix_memalign; 32-bit: 4 too) — they must work and still give 16-byte (32-bit: 8-byte) aligned
 * blocks. */
START_TEST(test_aligned_alloc_small_alignments)
{
    for (size_t align = 1; align <= 8; align <<= 1) {
        for (size_t i = 0; i < N_ALIGNED_SIZES; i++) {
            size_t n = aligned_sizes[i];
            void *p = aligned_alloc(align, n);
            check_aligned_block(p, align, n, "aligned_alloc");
            free(p);
            p = memalign(align, n);
            check_aligned_block(p, align, n, "memalign");
            free(p);
        }
    }
    void *p = NULL;
    ck_assert_int_eq(posix_memalign(&p, sizeof(void *), 100), 0);
    check_aligned_block(p, sizeof(void *), 100, "posix_memalign");
    free(p);
}
END_TEST

/* Guards valloc (page-aligned) and pvalloc (page-aligned, size rounded up to whole pages,
 * pvalloc(0) = one page). */
START_TEST(test_valloc_pvalloc)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    static const size_t sizes[] = {0, 1, 100, 2622, 4095, 4096, 4097, 100000, 558905, 1 << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t n = sizes[i];
        void *v = valloc(n);
        ck_assert_msg(v != NULL, "valloc(%zu) failed", n);
        ck_assert_msg(((uintptr_t)v & (page - 1)) == 0, "valloc(%zu) = %p not page aligned", n, v);
        ck_assert_uint_ge(fastmm_usable_size(v), n);
        fill_pattern(v, n, 7);
        void *pv = pvalloc(n);
        size_t want = n == 0 ? page : fm_round_up(n, page);
        ck_assert_msg(pv != NULL, "pvalloc(%zu) failed", n);
        ck_assert_msg(((uintptr_t)pv & (page - 1)) == 0, "pvalloc(%zu) = %p not page aligned", n, pv);
        ck_assert_msg(fastmm_usable_size(pv) >= want, "pvalloc(%zu) usable %zu < %zu", n,
                      fastmm_usable_size(pv), want);
        fill_pattern(pv, want, 8);
        ck_assert_uint_eq(check_pattern(v, n, 7), SIZE_MAX);
        ck_assert_uint_eq(check_pattern(pv, want, 8), SIZE_MAX);
        free(v);
        free(pv);
    }
}
END_TEST

/* Guards malloc_usable_size == fastmm_usable_size for blocks from every entry point, and
 * usable_size(NULL) == 0 for both. */
START_TEST(test_usable_size_agrees)
{
    ck_assert_uint_eq(malloc_usable_size(NULL), 0);
    ck_assert_uint_eq(fastmm_usable_size(NULL), 0);
    static const size_t sizes[] = {0, 5, 333, 2622, 2623, 70000, 558904, 558905, 2 << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t n = sizes[i];
        void *b[5];
        b[0] = malloc(n);
        b[1] = calloc(1, n);
        b[2] = realloc(NULL, n);
        b[3] = fastmm_malloc(n);
        b[4] = memalign(256, n);
        for (int k = 0; k < 5; k++) {
            ck_assert_ptr_nonnull(b[k]);
            ck_assert_uint_eq(malloc_usable_size(b[k]), fastmm_usable_size(b[k]));
            if (k < 4)
                ck_assert_uint_eq(fastmm_usable_size(b[k]), fm_expected_usable(n));
        }
        for (int k = 0; k < 5; k++)
            free(b[k]);
    }
}
END_TEST

/* Guards that the prefixed and libc names are one heap: blocks from one family are freed and
 * reallocated by the other. */
START_TEST(test_prefixed_and_libc_mix)
{
    static const size_t sizes[] = {10, 1000, 2622, 2623, 50000, 558905};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t n = sizes[i];
        char *a = fastmm_malloc(n);
        char *b = malloc(n);
        ck_assert_ptr_nonnull(a);
        ck_assert_ptr_nonnull(b);
        fill_pattern(a, n, 1);
        fill_pattern(b, n, 2);
        a = realloc(a, n * 2);
        b = fastmm_realloc(b, n * 2);
        ck_assert_ptr_nonnull(a);
        ck_assert_ptr_nonnull(b);
        ck_assert_uint_eq(check_pattern(a, n, 1), SIZE_MAX);
        ck_assert_uint_eq(check_pattern(b, n, 2), SIZE_MAX);
        free(a);
        fastmm_free(b);
    }
}
END_TEST

Suite *suite_alloc(void)
{
    Suite *s = suite_create("alloc");

    TCase *tc = tcase_create("sizes");
    tcase_set_timeout(tc, TEST_TIMEOUT);
    tcase_add_test(tc, test_expected_size_table);
    tcase_add_test(tc, test_every_size_small);
    tcase_add_test(tc, test_malloc_zero_unique);
    tcase_add_test(tc, test_medium_bin_edges);
    tcase_add_test(tc, test_medium_cache_takes_near_bins);
    tcase_add_test(tc, test_large_sizes);
    tcase_add_test(tc, test_usable_size_agrees);
    tcase_add_test(tc, test_prefixed_and_libc_mix);
    suite_add_tcase(s, tc);

    tc = tcase_create("calloc");
    tcase_set_timeout(tc, TEST_TIMEOUT);
    tcase_add_test(tc, test_calloc_zeroed);
    tcase_add_test(tc, test_calloc_overflow);
    suite_add_tcase(s, tc);

    tc = tcase_create("aligned");
    tcase_set_timeout(tc, TEST_TIMEOUT);
    tcase_add_test(tc, test_aligned_alloc_all);
    tcase_add_test(tc, test_aligned_alloc_small_alignments);
    tcase_add_test(tc, test_aligned_large_from_kept_mapping);
    tcase_add_test(tc, test_aligned_medium_from_thread_cache);
    tcase_add_test(tc, test_valloc_pvalloc);
    suite_add_tcase(s, tc);

    return s;
}
