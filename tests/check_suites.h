/*
 * check_suites.h - shared declarations and helpers for the libfastmm5 Check tests.
 *
 * The tests are black-box: they use only <fastmm5.h> and the libc allocation names, which the
 * shared library also exports (the runner links against it, so malloc/free/... are ours too).
 *
 * The expected-size helpers below encode FastMM5's geometry for the target's pointer size
 * (doc/fastmm5-facts.md sections 2.1, 2.2, 2.4, 2.5 and 14); the tests compare the library
 * against them exactly.
 */
#ifndef CHECK_SUITES_H
#define CHECK_SUITES_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <fastmm5.h>

/* Tests that inspect the fill of a block nobody initialised (0x90) tell memcheck they mean it. */
#if defined(__has_include)
#if __has_include(<valgrind/memcheck.h>)
#include <valgrind/memcheck.h>
#define TEST_MAKE_DEFINED(p, n) ((void)VALGRIND_MAKE_MEM_DEFINED((p), (n)))
/* What memcheck holds of memory another thread freed, for tests of the library's racy reads. */
#define TEST_MAKE_NOACCESS(p, n) ((void)VALGRIND_MAKE_MEM_NOACCESS((p), (n)))
#define TEST_MEMCHECK_ERRORS() ((unsigned)VALGRIND_COUNT_ERRORS)
#endif
#endif
#ifndef TEST_MAKE_DEFINED
#define TEST_MAKE_DEFINED(p, n) ((void)(p), (void)(n))
#define TEST_MAKE_NOACCESS(p, n) ((void)(p), (void)(n))
#define TEST_MEMCHECK_ERRORS() 0u
#endif

/* One constructor per module; check_main.c puts them all in one SRunner. */
Suite *suite_alloc(void);
Suite *suite_realloc(void);
Suite *suite_errors(void);
Suite *suite_threads(void);
Suite *suite_usage(void);
Suite *suite_debug(void);
Suite *suite_introspection(void);
Suite *suite_exhaustion(void);
Suite *suite_misuse(void);
Suite *suite_leaks(void);
Suite *suite_traces(void);
Suite *suite_guard(void);

/* Loop counts for the heavy tests: n normally, n / 10 (at least 1) when FASTMM_TEST_SLOW is set
 * (valgrind runs with CK_FORK=no). Defined in check_main.c. */
int test_iters(int n);
/* True when FASTMM_TEST_SLOW is set. */
int test_slow(void);
/* True unless CK_FORK=no: tests that must die (abort) are only registered when Check forks. */
int test_forking(void);

/* Every test case gets this timeout (seconds); CK_TIMEOUT_MULTIPLIER still applies. */
#define TEST_TIMEOUT 120

/* A failure check for hot loops. ck_assert() reports a "mark point" through Check's pipe on every
 * success, which is far too slow (and allocates) inside loops of millions of iterations. */
#define REQUIRE(cond, ...)                  \
    do {                                    \
        if (!(cond))                        \
            ck_abort_msg(__VA_ARGS__);      \
    } while (0)

/* -------------------------------------------------------------------------------------- */
/* Compiler barriers: keep GCC from eliding allocations, dead stores before free, or from   */
/* warning about deliberately bad pointers and sizes.                                       */
/* -------------------------------------------------------------------------------------- */

static inline void *launder_ptr(void *p)
{
    __asm__ volatile("" : "+r"(p));
    return p;
}

/* This thread's last free checked now (api.c's deferred checks), so that its block is in the
 * thread's cache as a free in its own call would leave it: a free that does not wait, free(NULL),
 * checks the waiting block first. */
static inline void settle_frees(void) { free(launder_ptr(NULL)); }

static inline size_t launder_size(size_t n)
{
    __asm__ volatile("" : "+r"(n));
    return n;
}

/* Makes every store to memory before this point observable (no dead-store elimination). */
static inline void escape(const void *p)
{
    __asm__ volatile("" : : "r"(p) : "memory");
}

/* Requests block p again at its whole usable size, so that a test may write every usable byte
 * through the pointer this returns: a write past the requested size is undefined behaviour,
 * which _FORTIFY_SOURCE stops (the compiler knows the request from the allocation function's
 * alloc_size attribute). realloc to the usable size keeps the block where it is and as it is;
 * the test fails otherwise. Stores the usable size in *usable. */
static inline void *claim_usable(void *p, size_t *usable)
{
    size_t u = fastmm_usable_size(p);
    uintptr_t at = (uintptr_t)p; /* compared as a number: p is indeterminate after realloc */
    void *q = realloc(p, u);
    ck_assert_msg((uintptr_t)q == at, "realloc(block, its usable size %zu) moved it", u);
    ck_assert_uint_eq(fastmm_usable_size(q), u);
    *usable = u;
    return q;
}

/* -------------------------------------------------------------------------------------- */
/* FastMM5 geometry (64-bit, or 32-bit where it differs)                                    */
/* -------------------------------------------------------------------------------------- */

/* 1 on a 64-bit target, 0 on a 32-bit one (i386). The two differ only in the minimum alignment
 * and the small classes below 176 bytes (doc/fastmm5-facts.md 2.2): 64-bit has 16, 32, .. 160 (51 classes),
 * 32-bit every multiple of 8 from 8 to 160 (61 classes). Medium and large are the same. */
#if UINTPTR_MAX > 0xffffffffu
#define FM_TEST_64BIT 1
#else
#define FM_TEST_64BIT 0
#endif

/* glibc's and FastMM5's minimum alignment: 16 on 64-bit, 8 on 32-bit; also the smallest class. */
#define FM_MIN_ALIGN ((size_t)(2 * sizeof(void *)))
_Static_assert(FASTMM_MIN_ALIGNMENT == 2 * sizeof(void *), "fastmm5.h: FASTMM_MIN_ALIGNMENT");
_Static_assert(FM_TEST_64BIT ? sizeof(void *) == 8 : sizeof(void *) == 4, "pointer size");
#define FM_SMALL_CLASS_COUNT (FM_TEST_64BIT ? 51 : 61)
/* malloc(0) and malloc(1) get the smallest class: usable 14 (64-bit), 6 (32-bit). */
#define FM_MIN_USABLE (FM_MIN_ALIGN - 2)

/* Sizes for "more than the address space can hold" that are right for the target. */
#define FM_SIZE_HALF  ((size_t)1 << (4 * sizeof(size_t)))   /* 2^32 / 2^16: its square overflows */
#define FM_SIZE_TOP   (SIZE_MAX / 2 + 1)                     /* 2^63 / 2^31: the top bit alone */

#define FM_MAX_SMALL_USER  ((size_t)2622)     /* CMaximumSmallBlockSize - 2 */
#define FM_MAX_MEDIUM_USER ((size_t)558904)   /* CMaximumMediumBlockSize - 8 */
#define FM_MIN_MEDIUM_USER ((size_t)2872)     /* CMinimumMediumBlockSize - 8 */
#define FM_LARGE_GRAN      ((size_t)65536)    /* CLargeBlockGranularity */

static inline size_t fm_round_up(size_t n, size_t m)
{
    return (n + m - 1) / m * m;
}

/* Smallest small class (block size incl. the 2-byte header) with class - 2 >= n; n <= 2622. */
static inline size_t fm_small_class(size_t n)
{
    size_t need = n + 2;
    if (need <= 160)                  /* 64-bit: 16 .. 160 step 16; 32-bit: 8 .. 160 step 8 */
        return need <= FM_MIN_ALIGN ? FM_MIN_ALIGN : fm_round_up(need, FM_MIN_ALIGN);
    if (need <= 320)
        return fm_round_up(need, 16);                           /* 176 .. 320 step 16 */
    if (need <= 640)
        return 320 + fm_round_up(need - 320, 32);               /* 352 .. 640 step 32 */
    if (need <= 1344)
        return 640 + fm_round_up(need - 640, 64);               /* 704 .. 1344 step 64 */
    return 1344 + fm_round_up(need - 1344, 128);                /* 1472 .. 2624 step 128 */
}

/* Medium block size (a bin size, incl. the 8-byte header) for a user size 2623 .. 558904. */
static inline size_t fm_medium_block(size_t n)
{
    size_t s = n + 8;
    if (s <= 2880)
        return 2880;
    if (s <= 101184)
        return 2880 + fm_round_up(s - 2880, 256);               /* 2880 .. 100928, then 101184 */
    if (s <= 297792)
        return 101184 + fm_round_up(s - 101184, 512);           /* .. 297280, then 297792 */
    return 297792 + fm_round_up(s - 297792, 1024);              /* .. 558912 */
}

/* Usable size the library must report for a fresh malloc(n). */
static inline size_t fm_expected_usable(size_t n)
{
    if (n <= FM_MAX_SMALL_USER)
        return fm_small_class(n) - 2;
    if (n <= FM_MAX_MEDIUM_USER)
        return fm_medium_block(n) - 8;
    return fm_round_up(n + 64, FM_LARGE_GRAN) - 64;
}

/* Usable size after an in-place medium shrink to n (720 <= n < old/2), FastMM5 section 3.2:
 * n is clamped up to 2872, the block is round_up(n + 8, 64). */
static inline size_t fm_medium_shrunk_usable(size_t n)
{
    if (n < FM_MIN_MEDIUM_USER)
        n = FM_MIN_MEDIUM_USER;
    return fm_round_up(n + 8, 64) - 8;
}

/* -------------------------------------------------------------------------------------- */
/* Byte patterns                                                                            */
/* -------------------------------------------------------------------------------------- */

/* Patterns are built from 64-bit words (byte i is byte i % 8 of word i / 8, little-endian) so
 * filling and checking run at memory speed; every word differs from its neighbours and between
 * seeds, so a block written over by another shows up wherever the two overlap. */
static inline uint64_t pat_key(uint32_t seed)
{
    uint64_t z = (uint64_t)seed + 0x9E3779B97F4A7C15ULL;   /* splitmix64 */
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static inline uint64_t pat_word(uint64_t key, size_t k)
{
    uint64_t w = (key ^ (uint64_t)k) * 0x9E3779B97F4A7C15ULL;
    return w ^ (w >> 29);
}

/* Byte i of the pattern for key = pat_key(seed). */
static inline uint8_t pat_byte(uint64_t key, size_t i)
{
    return (uint8_t)(pat_word(key, i >> 3) >> (8 * (i & 7)));
}

static inline void fill_pattern(void *p, size_t n, uint32_t seed)
{
    uint8_t *b = (uint8_t *)p;
    uint64_t key = pat_key(seed);
    size_t words = n / 8;
    for (size_t k = 0; k < words; k++) {
        uint64_t w = pat_word(key, k);
        memcpy(b + 8 * k, &w, 8);
    }
    for (size_t i = words * 8; i < n; i++)
        b[i] = pat_byte(key, i);
}

/* Offset of the first byte in [0, n) that does not hold the pattern, or SIZE_MAX. */
static inline size_t check_pattern(const void *p, size_t n, uint32_t seed)
{
    const uint8_t *b = (const uint8_t *)p;
    uint64_t key = pat_key(seed);
    size_t words = n / 8;
    for (size_t k = 0; k < words; k++) {
        uint64_t w;
        memcpy(&w, b + 8 * k, 8);
        if (w != pat_word(key, k)) {
            for (size_t i = 8 * k;; i++)
                if (b[i] != pat_byte(key, i))
                    return i;
        }
    }
    for (size_t i = words * 8; i < n; i++)
        if (b[i] != pat_byte(key, i))
            return i;
    return SIZE_MAX;
}

/* Sparse patterns for the thread tests: blocks up to 16 KiB are filled completely; bigger ones
 * get their first 4 KiB, one byte per stride and their last byte. The stride is 256 up to
 * 64 KiB, one page for the rest of the medium range, and 64 KiB for large blocks: those are
 * fresh mappings, and a page fault is what a large block costs most (tens of microseconds on
 * some virtual machines). */
static inline size_t sparse_stride(size_t n)
{
    return n <= 65536 ? 256 : n <= FM_MAX_MEDIUM_USER ? 4096 : 65536;
}

static inline void fill_sparse(void *p, size_t n, uint32_t seed)
{
    uint8_t *b = (uint8_t *)p;
    uint64_t key = pat_key(seed);
    if (n <= 16384) {
        fill_pattern(p, n, seed);
        return;
    }
    size_t stride = sparse_stride(n);
    fill_pattern(p, 4096, seed);
    for (size_t i = 4096; i < n; i += stride)
        b[i] = pat_byte(key, i);
    b[n - 1] = pat_byte(key, n - 1);
}

/* Checks the sparse pattern of a block originally filled with n bytes, within its first
 * limit bytes (limit < n after a shrinking realloc). Returns the bad offset or SIZE_MAX. */
static inline size_t check_sparse(const void *p, size_t n, size_t limit, uint32_t seed)
{
    const uint8_t *b = (const uint8_t *)p;
    uint64_t key = pat_key(seed);
    if (limit > n)
        limit = n;
    if (n <= 16384)
        return check_pattern(p, limit, seed);
    size_t stride = sparse_stride(n);
    size_t bad = check_pattern(p, limit < 4096 ? limit : 4096, seed);
    if (bad != SIZE_MAX)
        return bad;
    for (size_t i = 4096; i < limit; i += stride)
        if (b[i] != pat_byte(key, i))
            return i;
    if (n - 1 < limit && b[n - 1] != pat_byte(key, n - 1))
        return n - 1;
    return SIZE_MAX;
}

/* xorshift64* for the random tests (deterministic per seed). */
static inline uint64_t xorshift64(uint64_t *state)
{
    uint64_t x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return x * 0x2545F4914F6CDD1DULL;
}

/* RUNNING_ON_VALGRIND: the suites that behave differently under Memcheck ask it. */
#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#endif
#endif
#ifndef RUNNING_ON_VALGRIND
#define RUNNING_ON_VALGRIND 0
#endif

#endif /* CHECK_SUITES_H */
