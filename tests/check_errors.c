/*
 * check_errors.c - errno/NULL results and invalid-pointer handling.
 *
 * Guards doc/api-contract.md sections 1 and 3: glibc's error results at every edge (ENOMEM for sizes
 * that overflow or exceed PTRDIFF_MAX, EINVAL for bad alignments, *out untouched, errno kept by
 * free), and that a pointer the heap does not own - or no longer owns - is reported as
 * FASTMM_EVENT_INVALID_POINTER, to the handler and to standard error, then aborts the process by
 * default or is refused (heap left intact) under FASTMM_ON_ERROR_CONTINUE.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check_suites.h"
#include "helpers.h"


/* ------------------------------------------------------------------------------------------ */
/* errno / NULL matrix                                                                          */
/* ------------------------------------------------------------------------------------------ */

static const size_t huge_sizes[] = {
    (size_t)PTRDIFF_MAX + 1, SIZE_MAX, SIZE_MAX - 15, SIZE_MAX - 64, SIZE_MAX - 65535, (size_t)PTRDIFF_MAX,
};
#define N_HUGE (sizeof huge_sizes / sizeof huge_sizes[0])

/* Guards malloc/valloc/pvalloc of sizes that cannot be served (above PTRDIFF_MAX, or so close to
 * SIZE_MAX that adding a header or rounding overflows): NULL and errno ENOMEM, never a block. */
START_TEST(test_huge_malloc_enomem)
{
    for (size_t i = 0; i < N_HUGE; i++) {
        size_t n = launder_size(huge_sizes[i]);
        errno = 0;
        void *p = malloc(n);
        ck_assert_msg(p == NULL && errno == ENOMEM, "malloc(%zu) = %p, errno %d", n, p, errno);
        errno = 0;
        p = fastmm_malloc(n);
        ck_assert_msg(p == NULL && errno == ENOMEM, "fastmm_malloc(%zu) = %p, errno %d", n, p, errno);
        errno = 0;
        p = valloc(n);
        ck_assert_msg(p == NULL && errno == ENOMEM, "valloc(%zu) = %p, errno %d", n, p, errno);
        errno = 0;
        p = pvalloc(n);
        ck_assert_msg(p == NULL && errno == ENOMEM, "pvalloc(%zu) = %p, errno %d", n, p, errno);
        errno = 0;
        p = calloc(1, n);
        ck_assert_msg(p == NULL && errno == ENOMEM, "calloc(1, %zu) = %p, errno %d", n, p, errno);
    }
    /* The heap still works afterwards. */
    void *p = malloc(100);
    ck_assert_ptr_nonnull(p);
    free(p);
}
END_TEST

/* Guards posix_memalign as glibc: EINVAL for an alignment that is not a power of two multiple of
 * sizeof(void *) (errno untouched), ENOMEM for an impossible size or alignment (returned and left
 * in errno, as glibc's tst-malloc-thread-fail expects), and *out untouched either way. */
START_TEST(test_posix_memalign_errors)
{
    static const size_t bad_align[] = {0, 1, 2, 4, 3, 12, 24, 48, 1000, 4097, SIZE_MAX};
    void *const sentinel = (void *)(uintptr_t)0xdeadbeef0;
    for (size_t i = 0; i < sizeof bad_align / sizeof bad_align[0]; i++) {
        if (bad_align[i] == sizeof(void *))
            continue;
        void *out = sentinel;
        errno = EXDEV;
        int rc = posix_memalign(&out, launder_size(bad_align[i]), 64);
        ck_assert_msg(rc == EINVAL, "posix_memalign(align %zu) = %d, expected EINVAL", bad_align[i], rc);
        ck_assert_int_eq(errno, EXDEV);
        ck_assert_ptr_eq(out, sentinel);
        out = sentinel;
        rc = fastmm_posix_memalign(&out, launder_size(bad_align[i]), 64);
        ck_assert_msg(rc == EINVAL, "fastmm_posix_memalign(align %zu) = %d", bad_align[i], rc);
        ck_assert_ptr_eq(out, sentinel);
    }
    for (size_t i = 0; i < N_HUGE; i++) {
        void *out = sentinel;
        errno = 0;
        int rc = posix_memalign(&out, 64, launder_size(huge_sizes[i]));
        ck_assert_msg(rc == ENOMEM, "posix_memalign(64, %zu) = %d, expected ENOMEM", huge_sizes[i], rc);
        ck_assert_msg(errno == ENOMEM, "posix_memalign(64, %zu): errno %d, expected ENOMEM", huge_sizes[i], errno);
        ck_assert_ptr_eq(out, sentinel);
        rc = fastmm_posix_memalign(&out, 1 << 20, launder_size(huge_sizes[i]));
        ck_assert_msg(rc == ENOMEM, "fastmm_posix_memalign(1M, %zu) = %d", huge_sizes[i], rc);
        ck_assert_ptr_eq(out, sentinel);
    }
    /* A valid but unsatisfiable alignment (2^63; 32-bit: 2^31). */
    void *out = sentinel;
    int rc = posix_memalign(&out, launder_size(FM_SIZE_TOP), 16);
    ck_assert_msg(rc == ENOMEM, "posix_memalign(%zu, 16) = %d, expected ENOMEM", FM_SIZE_TOP, rc);
    ck_assert_ptr_eq(out, sentinel);
}
END_TEST

/* Guards aligned_alloc and memalign as glibc 2.36 (where they are one function): an alignment
 * that is not a power of two is rounded up to the next one (the block is aligned to that); only
 * an alignment above SIZE_MAX / 2 + 1 (no power of two) gives EINVAL, and the top power of two
 * (2^63; 32-bit: 2^31) gives ENOMEM, as glibc's tst-malloc-too-large expects. Either call gives
 * NULL with ENOMEM for an impossible size (including size + alignment overflowing). */
START_TEST(test_aligned_alloc_errors)
{
    static const size_t bad_align[] = {3, 12, 24, 48, 1000, 4097, 65535, SIZE_MAX};
    for (size_t i = 0; i < sizeof bad_align / sizeof bad_align[0]; i++) {
        size_t a = launder_size(bad_align[i]);
        if (a > SIZE_MAX / 2 + 1) {
            for (int k = 0; k < 4; k++) {
                errno = 0;
                void *p = k == 0   ? memalign(a, 64)
                          : k == 1 ? fastmm_memalign(a, 64)
                          : k == 2 ? aligned_alloc(a, 64)
                                   : fastmm_aligned_alloc(a, 64);
                ck_assert_msg(p == NULL && errno == EINVAL, "call %d (align %zu, 64) = %p, errno %d", k, a, p, errno);
            }
            continue;
        }
        size_t up = 1;
        while (up < a)
            up <<= 1;
        for (int k = 0; k < 4; k++) {
            void *p = k == 0   ? memalign(a, 64)
                      : k == 1 ? fastmm_memalign(a, 64)
                      : k == 2 ? aligned_alloc(a, 64)
                               : fastmm_aligned_alloc(a, 64);
            ck_assert_msg(p != NULL, "call %d (align %zu, 64) failed", k, a);
            ck_assert_msg(((uintptr_t)p & (up - 1)) == 0, "call %d (align %zu, 64) = %p not aligned to %zu", k, a,
                          p, up);
            ck_assert_uint_ge(fastmm_usable_size(p), 64);
            memset(p, 0x11, 64);
            free(p);
        }
    }
    for (int k = 0; k < 2; k++) {
        errno = 0;
        void *p = k == 0 ? memalign(launder_size(FM_SIZE_TOP), 16) : aligned_alloc(launder_size(FM_SIZE_TOP), 16);
        ck_assert_msg(p == NULL && errno == ENOMEM, "call %d (align %zu, 16) = %p, errno %d", k, FM_SIZE_TOP, p, errno);
    }
    for (size_t i = 0; i < N_HUGE; i++) {
        size_t n = launder_size(huge_sizes[i]);
        static const size_t aligns[] = {16, 4096, 1 << 20};
        for (size_t k = 0; k < 3; k++) {
            errno = 0;
            void *p = aligned_alloc(aligns[k], n);
            ck_assert_msg(p == NULL && errno == ENOMEM, "aligned_alloc(%zu, %zu) = %p, errno %d", aligns[k], n, p,
                          errno);
            errno = 0;
            p = memalign(aligns[k], n);
            ck_assert_msg(p == NULL && errno == ENOMEM, "memalign(%zu, %zu) = %p, errno %d", aligns[k], n, p, errno);
        }
    }
}
END_TEST

/* Guards calloc and reallocarray overflow: NULL with ENOMEM (also covered per module; here as
 * part of the one matrix). */
START_TEST(test_overflow_enomem)
{
    errno = 0;
    ck_assert_ptr_null(calloc(launder_size(SIZE_MAX / 16 + 1), 16));
    ck_assert_int_eq(errno, ENOMEM);
    errno = 0;
    ck_assert_ptr_null(reallocarray(NULL, launder_size(SIZE_MAX / 16 + 1), 16));
    ck_assert_int_eq(errno, ENOMEM);
    errno = 0;
    ck_assert_ptr_null(realloc(NULL, launder_size(SIZE_MAX)));
    ck_assert_int_eq(errno, ENOMEM);
}
END_TEST

/* Guards free(NULL) (no-op, errno kept) and that free of a valid small, medium or large block
 * (a large free unmaps) does not change errno. */
START_TEST(test_free_keeps_errno)
{
    errno = 4242;
    free(NULL);
    fastmm_free(NULL);
    ck_assert_int_eq(errno, 4242);
    static const size_t sizes[] = {0, 100, 2622, 2623, 100000, 558905, 8 << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        void *p = malloc(sizes[i]);
        void *q = malloc(sizes[i]);
        ck_assert_ptr_nonnull(p);
        ck_assert_ptr_nonnull(q);
        errno = ENOENT;
        free(p);
        ck_assert_msg(errno == ENOENT, "free of a %zu-byte block changed errno to %d", sizes[i], errno);
        errno = EBADF;
        fastmm_free(q);
        ck_assert_msg(errno == EBADF, "fastmm_free of a %zu-byte block changed errno to %d", sizes[i], errno);
    }
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Invalid pointers                                                                             */
/* ------------------------------------------------------------------------------------------ */

static void continue_setup(void)
{
    ev_record();
    fastmm_set_error_action(FASTMM_ON_ERROR_CONTINUE);
    quiet_stderr();
}

static void continue_teardown(void)
{
    restore_stderr();
    fastmm_set_error_action(FASTMM_ON_ERROR_ABORT);
    fastmm_set_event_handler(NULL, NULL);
}

/* The kinds of pointer the heap does not own. */
enum bad_kind {
    BAD_STACK,            /* an address on the stack */
    BAD_STATIC,           /* a static array */
    BAD_SMALL_INTERIOR,   /* p + 16 of a live small block (block zero-filled) */
    BAD_SMALL_FORGED,     /* p + 16 of a live small block filled with 0x0004 words (the bytes before
                             the pointer look like a small in-use header) */
    BAD_MEDIUM_INTERIOR,  /* p + 64 of a live medium block */
    BAD_LARGE_INTERIOR,   /* p + 4096 of a live large block */
    BAD_FREED_SMALL,      /* a small block already freed (a neighbour keeps its span alive) */
    BAD_FREED_MEDIUM,     /* a medium block already freed (a neighbour stays live) */
    BAD_FREED_LARGE,      /* a large block already freed (its mapping retained for reuse) */
    BAD_MMAP_START,       /* the first byte of an mmap()ed region */
    BAD_MMAP_INNER,       /* an address 64 bytes into an mmap()ed region */
    BAD_KIND_COUNT
};

static const char *const bad_names[] = {
    "stack", "static", "small interior", "small interior (forged header)", "medium interior",
    "large interior", "freed small", "freed medium", "freed large", "mmap start", "mmap inner",
};

static char static_area[512] __attribute__((aligned(64)));

struct bad_ptr {
    void *ptr;      /* the pointer to pass */
    void *owner;    /* a live block to check and free afterwards (or NULL) */
    size_t owner_size;
    uint32_t owner_seed;
    int owner_zero; /* owner content is zero (or the forged pattern when 2) rather than a pattern */
    void *map;
    size_t map_len;
};

static void make_bad(enum bad_kind kind, char *stack_area, struct bad_ptr *b)
{
    memset(b, 0, sizeof *b);
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    switch (kind) {
    case BAD_STACK:
        b->ptr = stack_area + 64;
        break;
    case BAD_STATIC:
        b->ptr = static_area + 64;
        break;
    case BAD_SMALL_INTERIOR:
    case BAD_SMALL_FORGED:
        b->owner_size = 64;
        b->owner = malloc(64);
        ck_assert_ptr_nonnull(b->owner);
        if (kind == BAD_SMALL_INTERIOR) {
            memset(b->owner, 0, 64);
            b->owner_zero = 1;
        } else {
            for (int i = 0; i < 32; i++)
                ((uint16_t *)b->owner)[i] = 0x0004;
            b->owner_zero = 2;
        }
        b->ptr = (char *)b->owner + 16;
        break;
    case BAD_MEDIUM_INTERIOR:
        b->owner_size = 10000;
        b->owner = malloc(10000);
        ck_assert_ptr_nonnull(b->owner);
        memset(b->owner, 0, 10000);
        b->owner_zero = 1;
        b->ptr = (char *)b->owner + 64;
        break;
    case BAD_LARGE_INTERIOR:
        b->owner_size = 1 << 20;
        b->owner = malloc(1 << 20);
        ck_assert_ptr_nonnull(b->owner);
        memset(b->owner, 0, 1 << 20);
        b->owner_zero = 1;
        b->ptr = (char *)b->owner + 4096;
        break;
    case BAD_FREED_SMALL:
    case BAD_FREED_MEDIUM:
    case BAD_FREED_LARGE: {
        size_t n = kind == BAD_FREED_SMALL ? 64 : kind == BAD_FREED_MEDIUM ? 10000 : (1 << 20);
        void *victim = malloc(n);
        b->owner_size = n;
        b->owner = malloc(n);
        b->owner_seed = (uint32_t)kind;
        ck_assert_ptr_nonnull(victim);
        ck_assert_ptr_nonnull(b->owner);
        fill_pattern(b->owner, n, b->owner_seed);
        b->ptr = launder_ptr(victim); /* (laundered first: GCC must not see a use after free) */
        free(victim);
        break;
    }
    case BAD_MMAP_START:
    case BAD_MMAP_INNER:
        b->map_len = 2 * page;
        b->map = mmap(NULL, b->map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        ck_assert_ptr_ne(b->map, MAP_FAILED);
        b->ptr = (char *)b->map + (kind == BAD_MMAP_START ? 0 : 64);
        break;
    default:
        ck_abort_msg("unknown kind %d", (int)kind);
    }
    b->ptr = launder_ptr(b->ptr);
}

/* Fails unless exactly `expect` events have been seen and the last one describes `bad`.
 * Uses REQUIRE, not ck_assert: a passing ck_assert allocates (Check's mark point), which could
 * hand a just-freed "bad" block back out between the calls under test. */
static void assert_event(int expect, const void *bad, const char *op, const char *kind)
{
    char hex[32];
    snprintf(hex, sizeof hex, "%lx", (unsigned long)(uintptr_t)bad);
    REQUIRE((int)evn() == expect, "%s(%s %p): %d events, expected %d", op, kind, bad, (int)evn(), expect);
    REQUIRE(!ev_bad_user(), "handler got the wrong user pointer");
    REQUIRE(ev_last().type == FASTMM_EVENT_INVALID_POINTER, "%s(%s): event type %d, expected INVALID_POINTER", op, kind,
            (int)ev_last().type);
    REQUIRE(ev_last().block == bad, "%s(%s): event block %p, expected %p", op, kind, ev_last().block, bad);
    REQUIRE(!ev_last_text_null(), "%s(%s): event text is NULL", op, kind);
    REQUIRE(strcasestr(ev_last_text(), "0x") != NULL && strcasestr(ev_last_text(), hex) != NULL,
            "%s(%s): event text does not show the pointer 0x%s: \"%.300s\"", op, kind, hex, ev_last_text());
}

/* Allocates, fills, checks and frees a spread of sizes: the heap still works. */
static void exercise_heap(void)
{
    enum { N = 300 };
    void *p[N];
    size_t sz[N];
    uint64_t rng = 0x1234567;
    for (int i = 0; i < N; i++) {
        uint64_t r = xorshift64(&rng);
        sz[i] = i % 50 == 0 ? 558905 + r % 100000 : i % 10 == 0 ? 2623 + r % 60000 : r % 2623;
        p[i] = malloc(sz[i]);
        ck_assert_ptr_nonnull(p[i]);
        fill_pattern(p[i], sz[i], (uint32_t)i);
    }
    for (int i = 0; i < N; i++) {
        size_t bad = check_pattern(p[i], sz[i], (uint32_t)i);
        REQUIRE(bad == SIZE_MAX, "heap block %d (%zu bytes) corrupted at %zu", i, sz[i], bad);
        free(p[i]);
    }
}

/* Guards every kind of foreign or stale pointer under FASTMM_ON_ERROR_CONTINUE: free,
 * realloc and usable_size (both names) each raise one INVALID_POINTER event carrying the
 * pointer and a text showing it in hex; free is a no-op, realloc returns NULL with EINVAL,
 * usable_size returns 0; the block the bad pointer points into is left intact and still
 * freeable, and the heap keeps working. */
START_TEST(test_invalid_pointer_continue)
{
    char stack_area[256] __attribute__((aligned(64)));
    memset(stack_area, 0, sizeof stack_area);
    enum bad_kind kind = (enum bad_kind)_i;
    const char *name = bad_names[kind];
    struct bad_ptr b;
    make_bad(kind, stack_area, &b);
    ev_reset();

    free(launder_ptr(b.ptr));
    assert_event(1, b.ptr, "free", name);

    errno = 0;
    void *r = realloc(launder_ptr(b.ptr), 100);
    REQUIRE(r == NULL, "realloc(%s) returned %p", name, r);
    REQUIRE(errno == EINVAL, "realloc(%s): errno %d, expected EINVAL", name, errno);
    assert_event(2, b.ptr, "realloc", name);

    size_t u = fastmm_usable_size(launder_ptr(b.ptr));
    REQUIRE(u == 0, "fastmm_usable_size(%s) = %zu", name, u);
    assert_event(3, b.ptr, "fastmm_usable_size", name);

    u = malloc_usable_size(launder_ptr(b.ptr));
    REQUIRE(u == 0, "malloc_usable_size(%s) = %zu", name, u);
    assert_event(4, b.ptr, "malloc_usable_size", name);

    fastmm_free(launder_ptr(b.ptr));
    assert_event(5, b.ptr, "fastmm_free", name);

    errno = 0;
    r = fastmm_realloc(launder_ptr(b.ptr), 5000);
    REQUIRE(r == NULL, "fastmm_realloc(%s) returned %p", name, r);
    REQUIRE(errno == EINVAL, "fastmm_realloc(%s): errno %d, expected EINVAL", name, errno);
    assert_event(6, b.ptr, "fastmm_realloc", name);

    /* The surrounding / neighbouring block is untouched and still a normal block. */
    if (b.owner != NULL) {
        ck_assert_uint_eq(fastmm_usable_size(b.owner), fm_expected_usable(b.owner_size));
        const uint8_t *o = b.owner;
        if (b.owner_zero == 1) {
            for (size_t i = 0; i < b.owner_size; i++)
                REQUIRE(o[i] == 0, "%s: owner byte %zu changed to %#x", name, i, o[i]);
        } else if (b.owner_zero == 2) {
            for (int i = 0; i < 32; i++)
                REQUIRE(((const uint16_t *)o)[i] == 0x0004, "%s: owner word %d changed", name, i);
        } else {
            ck_assert_uint_eq(check_pattern(o, b.owner_size, b.owner_seed), SIZE_MAX);
        }
        free(b.owner);
    }
    if (b.map != NULL) {
        /* Nothing was written into the foreign mapping. */
        for (size_t i = 0; i < b.map_len; i++)
            REQUIRE(((const uint8_t *)b.map)[i] == 0, "%s: mmap byte %zu changed", name, i);
        munmap(b.map, b.map_len);
    }
    exercise_heap();
    ck_assert_msg((int)evn() == 6, "%s: events raised by the valid calls afterwards (%d)", name, (int)evn());
}
END_TEST

/* Guards the fastmm_error_action getter/setter pair. */
START_TEST(test_error_action_roundtrip)
{
    fastmm_set_error_action(FASTMM_ON_ERROR_CONTINUE);
    ck_assert_int_eq(fastmm_error_action(), FASTMM_ON_ERROR_CONTINUE);
    fastmm_set_error_action(FASTMM_ON_ERROR_ABORT);
    ck_assert_int_eq(fastmm_error_action(), FASTMM_ON_ERROR_ABORT);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Freed blocks the allocator keeps: this thread's medium cache and the retained large mappings  */
/* ------------------------------------------------------------------------------------------ */

static const size_t kept_sizes[] = {4000, 60000, (size_t)1 << 20};
static const char *const kept_names[] = {"medium (thread cache)", "medium, 60000 B (thread cache)",
                                         "large (retained mapping)"};

/* Guards the blocks libfastmm5 keeps after free (a medium block in this thread's cache, a large
 * block's retained mapping): a second free of one is reported as INVALID_POINTER naming it, and
 * it is not kept twice: the next allocation of that size gets it back once, the one after that
 * a different block. */
START_TEST(test_double_free_of_kept_block)
{
    size_t n = kept_sizes[_i];
    const char *name = kept_names[_i];
    malloc_trim(0); /* no mapping retained by earlier tests may be the better fit */
    void *p = malloc(n);
    ck_assert_ptr_nonnull(p);
    free(launder_ptr(p));
    ev_reset();
    free(launder_ptr(p));
    assert_event(1, p, "free", name);
    REQUIRE(strcasestr(ev_last_text(), "already freed") != NULL, "%s: the report does not say already freed: \"%.300s\"",
            name, ev_last_text());
    void *q = malloc(n);
    void *r = malloc(n);
    REQUIRE(q == p, "%s: the freed block %p was not reused (got %p): the test no longer covers a kept block", name, p,
            q);
    REQUIRE(r != q, "%s: a double-freed block was kept twice and handed out twice (%p)", name, r);
    free(q);
    free(r);
    REQUIRE((int)evn() == 1, "%s: %d events after the valid calls", name, (int)evn());
}
END_TEST

/* Guards an aligned large block on a kept mapping, whose header moves to the mapping's start when
 * it is kept and back before the aligned pointer when it is reused: a second free of the freed
 * block, and a free of its stale pointer once the mapping serves an unaligned block from its
 * start, are reported as INVALID_POINTER naming it; the live block stays intact and is kept
 * once. */
START_TEST(test_stale_free_of_kept_aligned_block)
{
    const size_t n = (size_t)1 << 20;
    malloc_trim(0); /* no mapping kept by earlier tests may be the better fit */
    unsigned char *p = aligned_alloc(4096, n);
    ck_assert_ptr_nonnull(p);
    free(launder_ptr(p));
    ev_reset();
    free(launder_ptr(p));
    assert_event(1, p, "free", "large, 4096-aligned (retained mapping)");
    REQUIRE(strcasestr(ev_last_text(), "already freed") != NULL, "the report does not say already freed: \"%.300s\"",
            ev_last_text());
    unsigned char *q = malloc(n); /* the same mapping, its block at the start */
    REQUIRE(q != NULL && q < p && p < q + n, "the kept mapping of %p did not serve malloc (got %p): the test no longer "
            "covers a stale pointer into a reused mapping", (void *)p, (void *)q);
    memset(q, 0x3c, n);
    free(launder_ptr(p));
    assert_event(2, p, "free", "stale 4096-aligned pointer inside a live block");
    for (size_t i = 0; i < n; i++)
        REQUIRE(q[i] == 0x3c, "the live block %p changed at byte %zu", (void *)q, i);
    unsigned char *r = malloc(n);
    REQUIRE(r != q, "a live block's mapping was handed out again (%p)", (void *)r);
    free(q);
    free(r);
    REQUIRE((int)evn() == 2, "%d events after the valid calls", (int)evn());
}
END_TEST

/* Guards free's inline small-block check (block.h, fm_block_small_live_flags), which reads a flag
 * word only where it lies in the pointer's own 64 KiB chunk: a small block that starts a chunk
 * takes the full decoding instead. It is freed there (no event), and a second free of it is
 * still reported as INVALID_POINTER naming it. */
START_TEST(test_chunk_start_small_block)
{
    enum { MAX = 60000 };
    void **blocks = calloc(MAX, sizeof *blocks);
    ck_assert_ptr_nonnull(blocks);
    void *p = NULL;
    int n = 0;
    while (n < MAX && p == NULL) { /* 16-byte blocks: a span across a chunk boundary has one on it */
        blocks[n] = malloc(8);
        ck_assert_ptr_nonnull(blocks[n]);
        if (((uintptr_t)blocks[n] & 0xffffu) == 0)
            p = blocks[n];
        n++;
    }
    REQUIRE(p != NULL, "no 16-byte block of %d started a 64 KiB chunk: the test no longer covers one", n);
    ev_reset();
    free(launder_ptr(p));
    REQUIRE((int)evn() == 0, "free of the chunk-start block %p: %d events", p, (int)evn());
    free(launder_ptr(p));
    assert_event(1, p, "free", "small, at a chunk start");
    REQUIRE(strcasestr(ev_last_text(), "already freed") != NULL, "the report does not say already freed: \"%.300s\"",
            ev_last_text());
    for (int i = 0; i < n; i++)
        if (blocks[i] != p)
            free(blocks[i]);
    free(blocks);
    REQUIRE((int)evn() == 1, "%d events after the valid frees", (int)evn());
}
END_TEST

/* A small block's moves by realloc (grow, and a shrink below a quarter): old size, new size. */
static const size_t moved_sizes[][2] = {{62, 200}, {254, 30}};

/* Guards realloc's move of a small block through this thread's cache (api.c): the new block is
 * the one the cache held for its size, the contents move with it, and the old block is freed
 * into the cache as free() would: freeing it again is reported as INVALID_POINTER ("already
 * freed"), and it is kept once: the next allocation of its size gets it back, the one after
 * that a different block. */
START_TEST(test_double_free_after_cached_move)
{
    size_t from = moved_sizes[_i][0], to = moved_sizes[_i][1];
    size_t request = to <= from ? to : 2 * from + 32 > to ? 2 * from + 32 : to; /* FastMM5's policy (check_realloc) */
    void *cached = malloc(request);
    ck_assert_ptr_nonnull(cached);
    free(launder_ptr(cached)); /* now on top of this thread's cache for the new block's class */
    unsigned char *p = malloc(from);
    ck_assert_ptr_nonnull(p);
    memset(p, 0x5a, from);
    unsigned char *q = realloc(launder_ptr(p), to);
    REQUIRE(q == cached, "realloc %zu -> %zu returned %p, not the cached block %p: the test no longer covers a move "
            "through the cache", from, to, (void *)q, cached);
    for (size_t i = 0; i < (from < to ? from : to); i++)
        REQUIRE(q[i] == 0x5a, "realloc %zu -> %zu lost byte %zu", from, to, i);
    ev_reset();
    free(launder_ptr(p));
    assert_event(1, p, "free", "small, moved by realloc");
    REQUIRE(strcasestr(ev_last_text(), "already freed") != NULL, "the report does not say already freed: \"%.300s\"",
            ev_last_text());
    void *again = malloc(from), *other = malloc(from);
    REQUIRE(again == p, "the block realloc moved from (%p) was not in this thread's cache (got %p)", (void *)p, again);
    REQUIRE(other != again, "a double-freed block was kept twice and handed out twice (%p)", other);
    free(again);
    free(other);
    free(q);
    REQUIRE((int)evn() == 1, "%d events after the valid calls", (int)evn());
}
END_TEST

/* Guards calloc on a retained large mapping: it is zeroed although it is not fresh from mmap. */
START_TEST(test_calloc_zeroes_retained_mapping)
{
    size_t n = (size_t)3 << 19; /* 1.5 MiB */
    malloc_trim(0);
    unsigned char *p = malloc(n);
    ck_assert_ptr_nonnull(p);
    memset(p, 0xab, n);
    escape(p);
    free(launder_ptr(p));
    unsigned char *q = calloc(1, n - 4096);
    ck_assert_ptr_eq(q, p); /* the retained mapping: otherwise the test proves nothing */
    for (size_t i = 0; i < n - 4096; i++)
        REQUIRE(q[i] == 0, "calloc on a retained mapping: byte %zu is %#x", i, q[i]);
    free(q);
    ck_assert_int_eq((int)evn(), 0);
}
END_TEST

/* Guards that normal mode does not hand out a freed block whose header was overwritten while it
 * was free (a write just before it, as from an overrun of the block below): the next malloc of
 * its size reports HEADER_CORRUPTION naming the block, gives another block, and keeps the
 * damaged one out of use. A small block (40 B) gets 0x4141 in its flag word; a medium one gets
 * the word 1 before it, as glibc's tst-malloc-backtrace writes: 4 KiB, which waits in the thread
 * cache, and 100000 bytes, above what the caches keep, which waits in its arena's bins between
 * two blocks in use. Not under Valgrind, where the write itself is the error memcheck reports. */
static const size_t damaged_sizes[] = {40, 4096, 100000};

typedef struct damaged_seen {
    const void *block;
    size_t block_size;
    bool free;
    unsigned visits;
} damaged_seen_t;

static void find_damaged_cb(const fastmm_block_info_t *b, void *user)
{
    damaged_seen_t *seen = user;
    if (b->address != seen->block)
        return;
    seen->visits++;
    seen->block_size = b->block_size;
    seen->free = b->free;
}

/* Walks every block, free ones too: `block` must be visited once, in use. Returns its size. */
static size_t walk_expect_used(const void *block)
{
    damaged_seen_t seen = {block, 0, true, 0};
    fastmm_walk_options_t all = FASTMM_WALK_OPTIONS_INIT;
    all.used_only = false;
    ck_assert(fastmm_walk_blocks(find_damaged_cb, &seen, &all));
    ck_assert_msg(seen.visits == 1, "block %p visited %u times by the walk", block, seen.visits);
    ck_assert_msg(!seen.free, "block %p walked as free", block);
    return seen.block_size;
}

START_TEST(test_damaged_freed_block_not_reused)
{
    if (RUNNING_ON_VALGRIND)
        return;
    size_t n = damaged_sizes[_i];
    void *keep = malloc(n);
    void *p = malloc(n);
    void *above = malloc(n); /* so that p does not go back to its span's feed */
    ck_assert_ptr_nonnull(keep);
    ck_assert_ptr_nonnull(p);
    ck_assert_ptr_nonnull(above);
    free(p);
    if (n <= 64)
        *(volatile uint16_t *)(launder_size((uintptr_t)p) - 2) = 0x4141;
    else
        *(volatile size_t *)(launder_size((uintptr_t)p) - sizeof(size_t)) = 1;
    void *q = malloc(n);
    ck_assert_ptr_nonnull(q);
    ck_assert_ptr_ne(q, p);
    ck_assert_int_eq((int)evn(), 1);
    ck_assert_int_eq(ev_last().type, FASTMM_EVENT_HEADER_CORRUPTION);
    ck_assert_ptr_eq(ev_last().block, p);
    ck_assert_msg(strstr(ev_last_text(), "header corruption found by malloc()") != NULL, "report: %s", ev_last_text());
    ck_assert_msg(strstr(ev_last_text(), "has a damaged header") != NULL, "report: %s", ev_last_text());
    if (n <= 64)
        ck_assert_msg(strstr(ev_last_text(), "0x4141") != NULL, "report: %s", ev_last_text());
    for (int i = 0; i < 64; i++) {
        void *r = malloc(n);
        ck_assert_ptr_ne(r, p);
        free(r);
    }
    ck_assert_int_eq((int)evn(), 1);
    /* the heap walk and the usage figures step over the damaged header: the block is one used
     * block of its true size, and the walk goes on to the blocks after it */
    ck_assert_uint_ge(walk_expect_used(p), n);
    walk_expect_used(q);
    fastmm_usage_t usage;
    fastmm_get_usage(&usage);
    ck_assert_uint_ge(usage.allocated_bytes, 2 * n);
    free(q);
    free(keep);
    free(above);
    ck_assert_int_eq((int)evn(), 1);
}
END_TEST

/* Guards that a free block whose header was overwritten is not merged with either: the free of
 * the block below it (_i 0) or the growth in place of that block (_i 1) reports HEADER_CORRUPTION
 * naming it, as free() or realloc(), and the heap goes on with the damaged block kept in use. */
START_TEST(test_damaged_free_neighbour_not_merged)
{
    if (RUNNING_ON_VALGRIND)
        return;
    const size_t n = launder_size(100000);
    void *below = malloc(n), *p = malloc(n), *above = malloc(n);
    ck_assert_ptr_nonnull(below);
    ck_assert_ptr_nonnull(p);
    ck_assert_ptr_nonnull(above);
    bool neighbours = (char *)p == (char *)below + fastmm_usable_size(below) + 8;
    if (!neighbours && !test_forking()) { /* a heap other tests used: blocks go where space is */
        fprintf(stderr, "test_damaged_free_neighbour_not_merged: blocks not adjacent, skipped\n");
        free(below), free(p), free(above);
        return;
    }
    ck_assert_msg(neighbours, "a fresh process's blocks %p and %p are not neighbours", below, p);
    free(p);
    *(volatile size_t *)((uintptr_t)p - sizeof(size_t)) = 1;
    const char *operation = _i == 0 ? "header corruption found by free()" : "header corruption found by realloc()";
    if (_i == 0) {
        free(below);
    } else {
        void *grown = realloc(below, n + n / 2);
        ck_assert_ptr_nonnull(grown);
        ck_assert_ptr_ne(grown, below); /* moved: it could not grow into p */
        below = grown;
    }
    ck_assert_int_eq((int)evn(), 1);
    ck_assert_int_eq(ev_last().type, FASTMM_EVENT_HEADER_CORRUPTION);
    ck_assert_ptr_eq(ev_last().block, p);
    ck_assert_msg(strstr(ev_last_text(), operation) != NULL, "report: %s", ev_last_text());
    ck_assert_uint_ge(walk_expect_used(p), n);
    for (int i = 0; i < 64; i++) {
        void *r = malloc(n);
        ck_assert_ptr_ne(r, p);
        free(r);
    }
    if (_i == 1)
        free(below);
    free(above);
    ck_assert_int_eq((int)evn(), 1);
}
END_TEST

/* Guards that a block the feed of a fresh small span has not handed out yet is never taken for
 * a live block, whatever its memory holds. The span's blocks are not written until the feed
 * reaches them (so their pages stay unfaulted); a medium block is filled with flag words that
 * would be valid small in-use words if a span started at its address, freed, and the next small
 * span of the largest class is carved from it: free() of its lowest (unfed) block must be an
 * INVALID_POINTER, and the span must keep working. Skipped (with a message) when the allocator
 * places the span elsewhere. */
START_TEST(test_unfed_block_refused)
{
    const size_t span_block = 101184 - 8; /* FastMM5's optimal span for the 2624-byte class */
    unsigned char *m = malloc(span_block);
    ck_assert_ptr_nonnull(m);
    for (size_t q = 16; q < span_block; q += 16) {
        uint16_t forged = (uint16_t)((((q & ~(size_t)63)) >> 3) | 0x0004); /* SMALL, in use */
        memcpy(m + q - 2, &forged, 2);
    }
    escape(m);
    free(launder_ptr(m));
    void *top = malloc(2600);
    ck_assert_ptr_nonnull(top);
    if ((unsigned char *)top < m || (unsigned char *)top >= m + span_block) {
        fprintf(stdout, "test_unfed_block_refused: the new span is not at the freed block; skipped\n");
        free(top);
        return;
    }
    void *unfed = launder_ptr(m + 64); /* block 0: the feed starts at the top */
    ev_reset();
    free(unfed);
    assert_event(1, unfed, "free", "unfed small block");
    void *more[8];
    for (int i = 0; i < 8; i++) {
        more[i] = malloc(2600);
        ck_assert_ptr_nonnull(more[i]);
        memset(more[i], i, 2600);
    }
    for (int i = 0; i < 8; i++)
        free(more[i]);
    free(top);
    REQUIRE((int)evn() == 1, "%d events after the valid calls", (int)evn());
}
END_TEST

/* Guards the retention limits: malloc_trim gives retained mappings back to the OS, and in debug
 * mode a freed large block is not retained at all (its pages are unmapped, so that a use after
 * free faults), nor under the low-memory strategy (switching to it releases the kept ones). */
START_TEST(test_retained_mappings_released)
{
    size_t n = (size_t)4 << 20;
    void *p = malloc(n);
    ck_assert_ptr_nonnull(p);
    free(launder_ptr(p));
    size_t before = fastmm_os_memory();
    ck_assert_int_eq(malloc_trim(0), 1);
    size_t after = fastmm_os_memory();
    ck_assert_msg(after + n <= before, "malloc_trim kept the retained mapping: OS memory %zu -> %zu", before, after);

    fastmm_debug_enter();
    p = malloc(n);
    ck_assert_ptr_nonnull(p);
    before = fastmm_os_memory();
    free(launder_ptr(p));
    after = fastmm_os_memory();
    fastmm_debug_exit();
    ck_assert_msg(after + n <= before, "a large block freed in debug mode stayed mapped: OS memory %zu -> %zu",
                  before, after);

    /* the low-memory strategy keeps none, and switching to it gives back those kept so far */
    p = malloc(n);
    ck_assert_ptr_nonnull(p);
    free(launder_ptr(p));
    before = fastmm_os_memory();
    ck_assert(fastmm_set_strategy(FASTMM_STRATEGY_LOW_MEMORY));
    after = fastmm_os_memory();
    ck_assert_msg(after + n <= before, "switching to low-memory kept the retained mapping: OS memory %zu -> %zu",
                  before, after);
    p = malloc(n);
    ck_assert_ptr_nonnull(p);
    before = fastmm_os_memory();
    free(launder_ptr(p));
    after = fastmm_os_memory();
    ck_assert(fastmm_set_strategy(FASTMM_STRATEGY_BALANCED));
    ck_assert_msg(after + n <= before, "a large block freed under low-memory stayed mapped: OS memory %zu -> %zu",
                  before, after);
    ck_assert_int_eq((int)evn(), 0);
}
END_TEST

/* Guards fastmm_set_event_handler(NULL, ...): the default handler comes back (ours is no longer
 * called) and the report still goes to standard error. */
START_TEST(test_handler_null_restores_default)
{
    char path[256];
    int fd = make_tmp(path, sizeof path);
    restore_stderr();          /* undo the fixture's /dev/null, then point stderr at the file */
    redirect_stderr(fd);
    fastmm_set_event_handler(NULL, NULL);
    void *bad = launder_ptr(static_area + 128);
    free(launder_ptr(bad));
    restore_stderr();
    ck_assert_int_eq((int)evn(), 0);
    char text[8192];
    slurp(fd, text, sizeof text);
    close(fd);
    unlink(path);
    ck_assert_msg(strcasestr(text, "invalid pointer") != NULL,
                  "standard error does not report an invalid pointer: \"%.300s\"", text);
}
END_TEST

/* Guards fastmm_set_event_log: the report is written to the named file (and the handler still
 * runs); NULL goes back to standard error only. */
START_TEST(test_event_log_file)
{
    char path[256];
    int fd = make_tmp(path, sizeof path);
    ck_assert(fastmm_set_event_log(path));
    void *bad = launder_ptr(static_area + 192);
    free(launder_ptr(bad));
    ck_assert_int_eq((int)evn(), 1);
    fastmm_set_event_log(NULL);
    char text[8192], hex[32];
    snprintf(hex, sizeof hex, "%lx", (unsigned long)(uintptr_t)bad);
    slurp(fd, text, sizeof text);
    close(fd);
    unlink(path);
    ck_assert_msg(strcasestr(text, "invalid pointer") != NULL, "log file lacks the report: \"%.300s\"", text);
    ck_assert_msg(strcasestr(text, hex) != NULL, "log file does not show the pointer %s", hex);
}
END_TEST

/* Guards the default action (Check's fork mode only): each kind of invalid pointer passed to
 * free, under FASTMM_ON_ERROR_ABORT, ends the process with SIGABRT. */
START_TEST(test_invalid_pointer_aborts)
{
    char stack_area[256] __attribute__((aligned(64)));
    memset(stack_area, 0, sizeof stack_area);
    no_core_dump();
    struct bad_ptr b;
    make_bad((enum bad_kind)_i, stack_area, &b);
    ck_assert_int_eq(fastmm_error_action(), FASTMM_ON_ERROR_ABORT);
    quiet_stderr();
    free(b.ptr);
    restore_stderr();
    ck_abort_msg("free(%s pointer) returned under FASTMM_ON_ERROR_ABORT", bad_names[_i]);
}
END_TEST

/* Guards the default action and where its report goes: a child process that frees a stack
 * address dies of SIGABRT and its standard error names an invalid pointer and the address.
 * Forks by itself, so it also runs under CK_FORK=no. */
START_TEST(test_abort_reports_to_stderr)
{
    char stack_area[256] __attribute__((aligned(64)));
    memset(stack_area, 0, sizeof stack_area);
    char path[256];
    int fd = make_tmp(path, sizeof path);
    void *bad = launder_ptr(stack_area + 64);
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        no_core_dump();
        alarm(30);
        dup2(fd, 2);
        fastmm_set_error_action(FASTMM_ON_ERROR_ABORT);
        free(bad);
        _exit(0);
    }
    char text[8192], hex[32];
    int st = wait_child_stderr(pid, fd, path, text, sizeof text);
    snprintf(hex, sizeof hex, "%lx", (unsigned long)(uintptr_t)bad);
    ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, "child status %#x: expected death by SIGABRT", st);
    ck_assert_msg(strcasestr(text, "invalid pointer") != NULL,
                  "standard error does not mention an invalid pointer: \"%.300s\"", text);
    ck_assert_msg(strcasestr(text, hex) != NULL, "standard error does not show the address %s", hex);
}
END_TEST

/* ---- deferred checks (api.c): a free's block waits for the thread's next free ---- */

/* Whether the walk sees `block` once, and free. */
static bool walked_free(const void *block)
{
    damaged_seen_t seen = {block, 0, false, 0};
    fastmm_walk_options_t all = FASTMM_WALK_OPTIONS_INIT;
    all.used_only = false;
    ck_assert(fastmm_walk_blocks(find_damaged_cb, &seen, &all));
    ck_assert_msg(seen.visits == 1, "block %p visited %u times by the walk", block, seen.visits);
    return seen.free;
}

/* Guards free's deferred checks in the default mode (abort, no event handler): the freed block
 * waits in this thread's pending slot, so the next allocation of its size does not get it back;
 * the thread's next free checks it and puts it on top of the cache, where the allocation after
 * that finds it. With FASTMM_ON_ERROR_CONTINUE a free is checked in its own call, and the block
 * comes straight back. */
START_TEST(test_deferred_free_waits_one_call)
{
    ck_assert_int_eq(fastmm_error_action(), FASTMM_ON_ERROR_ABORT);
    /* blocks of the size in the cache, so that no allocation below refills it (a refill checks
     * the waiting block first), whatever the runner left there */
    void *warm[8];
    for (int i = 0; i < 8; i++)
        warm[i] = malloc(48);
    for (int i = 0; i < 8; i++)
        free(warm[i]);
    fastmm_process_pending_frees(); /* an empty slot */
    void *a = malloc(48), *b = malloc(48), *other = malloc(200);
    ck_assert(a != NULL && b != NULL && other != NULL);
    uintptr_t a_at = (uintptr_t)launder_ptr(a), b_at = (uintptr_t)launder_ptr(b); /* numbers: freed below */
    free(launder_ptr(a));
    void *c = malloc(48);
    REQUIRE((uintptr_t)launder_ptr(c) != a_at, "the block %#lx came back before the thread's next free: its checks "
            "did not wait", (unsigned long)a_at);
    free(launder_ptr(other));
    void *d = malloc(48);
    REQUIRE((uintptr_t)launder_ptr(d) == a_at, "the block %#lx checked by the next free is not on top of the cache "
            "(got %p)", (unsigned long)a_at, d);

    fastmm_set_error_action(FASTMM_ON_ERROR_CONTINUE);
    free(launder_ptr(b));
    void *e = malloc(48);
    fastmm_set_error_action(FASTMM_ON_ERROR_ABORT);
    REQUIRE((uintptr_t)launder_ptr(e) == b_at, "under FASTMM_ON_ERROR_CONTINUE the freed block %#lx did not come "
            "straight back (got %p)", (unsigned long)b_at, e);
    free(c);
    free(d);
    free(e);
}
END_TEST

/* Guards the upkeep and thread-exit paths of the deferred checks: fastmm_process_pending_frees
 * checks this thread's waiting block, and a thread's exit checks the block of its last free. */
static void *free_once(void *p)
{
    free(p);
    return NULL;
}

START_TEST(test_deferred_free_flushed)
{
    void *a = malloc(40), *b = malloc(40);
    ck_assert(a != NULL && b != NULL);
    free(launder_ptr(a));
    fastmm_process_pending_frees();
    ck_assert_msg(walked_free(a), "fastmm_process_pending_frees left the waiting block %p unchecked", a);

    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, free_once, launder_ptr(b)), 0);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    ck_assert_msg(walked_free(b), "the exited thread's last freed block %p was never checked", b);
}
END_TEST

/* The bad calls whose report a deferred check makes (test_deferred_misuse_aborts). */
static const char *const deferred_misuse[] = {"second free, reported at the next free",
                                              "second free, reported by upkeep",
                                              "realloc of the block waiting to be checked",
                                              "interior pointer, reported at the next free",
                                              "second free, reported at exit"};

/* Guards the default action on a bad free whose check waits: the report names the block and the
 * process dies of SIGABRT, at the thread's next free, upkeep or exit at the latest (the marker
 * written after the bad call comes first); a realloc of the block still waiting is checked at
 * once and reported as one of a freed block. */
START_TEST(test_deferred_misuse_aborts)
{
    char path[256];
    int fd = make_tmp(path, sizeof path);
    unsigned char *p = malloc(64), *q = malloc(64);
    ck_assert(p != NULL && q != NULL);
    void *bad = _i == 3 ? (void *)(p + 16) : (void *)p; /* the others free p twice */
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        no_core_dump();
        alarm(30);
        dup2(fd, 2);
        fastmm_set_error_action(FASTMM_ON_ERROR_ABORT);
        fastmm_set_event_handler(NULL, NULL);
        if (_i == 2 || _i == 3) { /* the bad call while p waits, or with nothing of p's freed */
            free(launder_ptr(q));
            if (_i == 2) {
                free(launder_ptr(p));
                void *r = realloc(launder_ptr(p), 40); /* in place, were the block live */
                escape(r);
                _exit(0);
            }
        } else {
            free(launder_ptr(p));
            free(launder_ptr(q)); /* p checked: freed */
        }
        free(launder_ptr(bad));
        static const char marker[] = "-- after the bad call --\n";
        if (write(2, marker, sizeof marker - 1) < 0)
            _exit(3);
        if (_i == 1)
            fastmm_process_pending_frees();
        else if (_i == 4)
            exit(0);
        else
            free(malloc(200));
        _exit(0);
    }
    char text[8192], hex[32];
    int st = wait_child_stderr(pid, fd, path, text, sizeof text);
    snprintf(hex, sizeof hex, "%lx", (unsigned long)(uintptr_t)bad);
    free(p);
    free(q);
    ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, "%s: child status %#x, expected death by SIGABRT",
                  deferred_misuse[_i], st);
    ck_assert_msg(strcasestr(text, hex) != NULL, "%s: the report does not show the address %s: \"%.300s\"",
                  deferred_misuse[_i], hex, text);
    const char *what = _i == 3 ? "invalid pointer" : "already freed";
    ck_assert_msg(strcasestr(text, what) != NULL, "%s: the report does not say %s: \"%.300s\"", deferred_misuse[_i],
                  what, text);
    if (_i == 2)
        ck_assert_msg(strstr(text, "realloc") != NULL, "%s: the report does not name realloc: \"%.300s\"",
                      deferred_misuse[_i], text);
    else {
        ck_assert_msg(strstr(text, "-- after the bad call --") != NULL &&
                          strstr(text, "-- after the bad call --") < strcasestr(text, what),
                      "%s: the report came before the bad call returned: its check did not wait: \"%.300s\"",
                      deferred_misuse[_i], text);
        ck_assert_msg(strstr(text, "its checks waited") != NULL,
                      "%s: the report does not say that the stack shown is a later call's: \"%.600s\"",
                      deferred_misuse[_i], text);
    }
}
END_TEST

Suite *suite_errors(void)
{
    Suite *s = suite_create("errors");

    TCase *tc = tcase_create("errno");
    tcase_set_timeout(tc, TEST_TIMEOUT);
    tcase_add_test(tc, test_huge_malloc_enomem);
    tcase_add_test(tc, test_posix_memalign_errors);
    tcase_add_test(tc, test_aligned_alloc_errors);
    tcase_add_test(tc, test_overflow_enomem);
    tcase_add_test(tc, test_free_keeps_errno);
    suite_add_tcase(s, tc);

    tc = tcase_create("invalid_continue");
    tcase_set_timeout(tc, TEST_TIMEOUT);
    tcase_add_checked_fixture(tc, continue_setup, continue_teardown);
    tcase_add_loop_test(tc, test_invalid_pointer_continue, 0, BAD_KIND_COUNT);
    tcase_add_loop_test(tc, test_double_free_of_kept_block, 0, (int)(sizeof kept_sizes / sizeof kept_sizes[0]));
    tcase_add_test(tc, test_stale_free_of_kept_aligned_block);
    tcase_add_test(tc, test_chunk_start_small_block);
    tcase_add_loop_test(tc, test_double_free_after_cached_move, 0, (int)(sizeof moved_sizes / sizeof moved_sizes[0]));
    tcase_add_test(tc, test_calloc_zeroes_retained_mapping);
    tcase_add_test(tc, test_retained_mappings_released);
    tcase_add_test(tc, test_unfed_block_refused);
    tcase_add_loop_test(tc, test_damaged_freed_block_not_reused, 0, (int)(sizeof damaged_sizes / sizeof damaged_sizes[0]));
    tcase_add_loop_test(tc, test_damaged_free_neighbour_not_merged, 0, 2);
    tcase_add_test(tc, test_handler_null_restores_default);
    tcase_add_test(tc, test_event_log_file);
    suite_add_tcase(s, tc);

    /* Frees wait for their checks only in a process where debug mode has never been on, and
     * without memcheck: a test of its own under Check's fork mode (CK_FORK=no, as under
     * check-valgrind, runs every test in one process). */
    if (test_forking()) {
        tc = tcase_create("deferred");
        tcase_set_timeout(tc, TEST_TIMEOUT);
        tcase_add_test(tc, test_deferred_free_waits_one_call);
        tcase_add_test(tc, test_deferred_free_flushed);
        tcase_add_loop_test(tc, test_deferred_misuse_aborts, 0,
                            (int)(sizeof deferred_misuse / sizeof deferred_misuse[0]));
        suite_add_tcase(s, tc);
    }

    tc = tcase_create("invalid_abort");
    tcase_set_timeout(tc, TEST_TIMEOUT);
    tcase_add_test(tc, test_error_action_roundtrip);
    tcase_add_test(tc, test_abort_reports_to_stderr);
    /* A test that ends in SIGABRT would take the whole runner down without fork mode. */
    if (test_forking())
        tcase_add_loop_test_raise_signal(tc, test_invalid_pointer_aborts, SIGABRT, 0, BAD_KIND_COUNT);
    suite_add_tcase(s, tc);

    return s;
}
