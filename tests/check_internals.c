/*
 * check_internals.c - white-box tests of internal invariants that two pieces of code must agree
 * on, a Check program of its own (tests/check_internals): like check_kernels it links the
 * convenience library lib/libfastmm5_core.la, whose fm_* names are hidden in libfastmm5.so.
 *
 * The medium bin of a request is computed twice: malloc's inline thread-cache path uses the
 * shift in fm_tcache_medium_bin_for (internal.h), the arenas use fm_medium_round_request and
 * fm_medium_bin_of (sizeclass.c). If they disagreed for some size, a cached block would be
 * handed to a request it is too small for, or never found again. The same holds for the bin of
 * a freed block (free's inline fm_tcache_medium_bin_of against fm_medium_bin_of).
 *
 * The large manager's trim of a reused kept mapping (large.c) is checked here too, through the
 * core's fastmm_malloc/fastmm_free and mincore(): which pages it gives back is not visible
 * through the public API.
 */
#include <config.h>

#include <check.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "internal.h"

/* Guards: for every request the thread cache serves, its bin is the arenas' bin of the rounded
 * request, and every block in that bin has room for the request and its header. */
START_TEST(medium_cache_bin_matches_arena_bin)
{
    ck_assert_uint_lt(fm_tcache_medium_bin_for(FM_TCACHE_MEDIUM_MAX_USER), FM_TCACHE_MEDIUM_BINS);
    for (size_t size = FM_SMALL_MAX_USER + 1; size <= FM_TCACHE_MEDIUM_MAX_USER; size++) {
        unsigned cached = fm_tcache_medium_bin_for(size);
        unsigned arena = fm_medium_bin_of(fm_medium_round_request(size));
        if (cached != arena)
            ck_abort_msg("size %zu: thread cache bin %u, arena bin %u", size, cached, arena);
        if (fm_medium_bin_size(cached) < size + FM_MEDIUM_HEADER)
            ck_abort_msg("size %zu: bin %u holds blocks of %zu bytes", size, cached, fm_medium_bin_size(cached));
    }
    /* the first size past the cache's range is beyond its last bin */
    ck_assert_uint_ge(fm_medium_bin_of(fm_medium_round_request(FM_TCACHE_MEDIUM_MAX_USER + 1)), FM_TCACHE_MEDIUM_BINS);
}
END_TEST

/* Guards: free()'s inline bin of a freed medium block (fm_tcache_medium_bin_of) is the bin the
 * arenas give it, for every block size whose bin the thread cache holds, and the sizes just
 * outside are not in those bins. */
START_TEST(medium_block_bin_inline_matches)
{
    for (size_t block = FM_MEDIUM_MIN_BLOCK; block < FM_TCACHE_MEDIUM_BLOCK_END; block++) {
        unsigned inline_bin = fm_tcache_medium_bin_of(block);
        unsigned arena = fm_medium_bin_of(block);
        if (inline_bin != arena || inline_bin >= FM_TCACHE_MEDIUM_BINS)
            ck_abort_msg("block of %zu bytes: inline bin %u, arena bin %u", block, inline_bin, arena);
    }
    ck_assert_uint_ge(fm_medium_bin_of(FM_TCACHE_MEDIUM_BLOCK_END), FM_TCACHE_MEDIUM_BINS);
    ck_assert_uint_eq(fm_medium_bin_of(FM_MEDIUM_MIN_BLOCK), 0);
}
END_TEST

/* Pages of [p, p + len) resident, counted with mincore. */
static size_t resident_pages(const void *p, size_t len)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = (uintptr_t)p & ~(page - 1), hi = ((uintptr_t)p + len + page - 1) & ~(page - 1);
    size_t n = (hi - lo) / page, count = 0;
    unsigned char *vec = malloc(n);
    ck_assert_ptr_nonnull(vec);
    ck_assert_int_eq(mincore((void *)lo, hi - lo, vec), 0);
    for (size_t i = 0; i < n; i++)
        count += vec[i] & 1u;
    free(vec);
    return count;
}

/* Whether MADV_DONTNEED gives pages back here: qemu-user (the i386 and aarch64 CI legs on a
 * kernel without 32-bit support) may accept it and do nothing. */
static bool dontneed_works(void)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    unsigned char *p = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(p, MAP_FAILED);
    p[0] = 1;
    bool works = madvise(p, page, MADV_DONTNEED) == 0 && resident_pages(p, page) == 0 && p[0] == 0;
    munmap(p, page);
    return works;
}

#define REUSED_BYTES ((size_t)600 << 10) /* the block served from the kept 3 MiB mapping */

/* A 3 MiB block written through and freed (its mapping kept), then a REUSED_BYTES request served
 * from that mapping: returns the new block, *stale set to the part of the mapping from 1 MiB
 * past the new block's end (beyond the trim slack) to the old end. */
static unsigned char *reuse_big_mapping(unsigned char **stale, size_t *stale_len)
{
    const size_t big = (size_t)3 << 20, small = REUSED_BYTES;
    fm_large_release_retained(); /* nothing kept by earlier work may be the better fit */
    unsigned char *p = fastmm_malloc(big);
    ck_assert_ptr_nonnull(p);
    memset(p, 0x5a, big);
    fastmm_free(p);
    unsigned char *q = fastmm_malloc(small);
    ck_assert_ptr_eq(q, p); /* the kept mapping: otherwise the test proves nothing */
    uintptr_t from = ((uintptr_t)q + small + ((size_t)1 << 20) + 0xffff) & ~(uintptr_t)0xffff;
    uintptr_t to = (uintptr_t)(p + big) & ~(uintptr_t)0xffff;
    *stale = (unsigned char *)from;
    *stale_len = to - from;
    return q;
}

/* Guards: in a program whose large blocks one thread makes, a kept mapping reused for a smaller
 * block gives back, when that block is freed, the pages earlier users wrote past its end and
 * the slack; it keeps them while the block lives (a realloc may grow into them), and keeps the
 * block's own pages (the mapping stays for the next user). */
START_TEST(large_reuse_trims_when_one_thread)
{
    if (!dontneed_works()) {
        fprintf(stdout, "large_reuse_trims_when_one_thread: MADV_DONTNEED keeps pages here "
                        "(qemu-user ignores it); skipped\n");
        return;
    }
    unsigned char *stale;
    size_t stale_len;
    unsigned char *q = reuse_big_mapping(&stale, &stale_len);
    memset(q, 1, REUSED_BYTES);
    /* kept until the block is freed: it might grow into them (realloc) */
    ck_assert_uint_eq(resident_pages(stale, stale_len), stale_len / (size_t)sysconf(_SC_PAGESIZE));
    fastmm_free(q);
    ck_assert_uint_eq(resident_pages(stale, stale_len), 0);
    ck_assert_uint_gt(resident_pages(q, REUSED_BYTES), 100); /* the mapping is kept, written pages too */
}
END_TEST

static void *large_from_another_thread(void *arg)
{
    (void)arg;
    void *p = fastmm_malloc((size_t)1 << 20);
    fastmm_free(p);
    return NULL;
}

/* Guards: once another thread has made large blocks, a reused mapping keeps its pages when the
 * block is freed (a trim then costs TLB shootdowns on the CPUs running the other threads; they
 * go after FM_LARGE_SHORT_REUSES_PER_TRIM such frees, the next test). */
START_TEST(large_reuse_keeps_pages_with_threads)
{
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, large_from_another_thread, NULL), 0);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    unsigned char *stale;
    size_t stale_len;
    unsigned char *q = reuse_big_mapping(&stale, &stale_len);
    fastmm_free(q);
    ck_assert_uint_eq(resident_pages(stale, stale_len), stale_len / (size_t)sysconf(_SC_PAGESIZE));
}
END_TEST

/* Guards: with several threads making large blocks, a kept mapping keeps its pages through
 * FM_LARGE_SHORT_REUSES_PER_TRIM - 1 reuses by smaller blocks and is trimmed whole (all but the
 * header's page) when the last of them is freed: a mapping holds the pages of a bounded number
 * of users, at one TLB shootdown per that many frees. */
START_TEST(large_mapping_trimmed_whole_every_kth_reuse_with_threads)
{
    if (!dontneed_works()) {
        fprintf(stdout, "large_mapping_trimmed_whole_every_kth_reuse_with_threads: MADV_DONTNEED "
                        "keeps pages here (qemu-user ignores it); skipped\n");
        return;
    }
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, large_from_another_thread, NULL), 0);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    unsigned char *stale;
    size_t stale_len;
    unsigned char *q = reuse_big_mapping(&stale, &stale_len);
    for (unsigned i = 1;; i++) {
        memset(q, 1, REUSED_BYTES);
        fastmm_free(q);
        if (i == FM_LARGE_SHORT_REUSES_PER_TRIM)
            break;
        ck_assert_uint_eq(resident_pages(stale, stale_len), stale_len / page);
        unsigned char *again = fastmm_malloc(REUSED_BYTES);
        ck_assert_ptr_eq(again, q); /* the same kept mapping each time */
        q = again;
    }
    ck_assert_uint_eq(resident_pages(stale, stale_len), 0);
    /* the block's own pages went too; only the header's page (and q's first bytes) stays */
    ck_assert_uint_le(resident_pages(q, REUSED_BYTES), 1);
}
END_TEST

/* Guards: a kept mapping reused by a smaller block keeps its whole size even when the pages
 * earlier users wrote beyond the block would take the spare budget (FM_LARGE_SPARE_BUDGET) over:
 * those pages go back instead (cutting the mapping to the block's size would make the kept
 * mappings ever smaller). Within the budget they stay. */
START_TEST(large_spare_over_budget_trimmed_not_cut)
{
    if (!dontneed_works()) {
        fprintf(stdout, "large_spare_over_budget_trimmed_not_cut: MADV_DONTNEED keeps pages here "
                        "(qemu-user ignores it); skipped\n");
        return;
    }
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const size_t first = (size_t)15 << 20, second = (size_t)8 << 20;
    fm_large_release_retained();
    /* 15 MiB blocks written and freed, each mapping reused by a small block: ~14.4 MiB of written
     * spare each, as many as stay within the budget */
    enum { MAX_FILLS = 8 };
    const unsigned fills = (unsigned)(FM_LARGE_SPARE_BUDGET / first);
    ck_assert_uint_le(fills, MAX_FILLS);
    unsigned char *a[MAX_FILLS], *p;
    for (unsigned i = 0; i < fills; i++) {
        p = fastmm_malloc(first);
        ck_assert_ptr_nonnull(p);
        memset(p, 0x5a, first);
        fastmm_free(p);
        a[i] = fastmm_malloc(REUSED_BYTES);
        ck_assert_ptr_eq(a[i], p);
    }
    /* 8 MiB the same way: its ~7.4 MiB of written spare would pass the budget */
    p = fastmm_malloc(second);
    ck_assert_ptr_nonnull(p);
    memset(p, 0x5a, second);
    fastmm_free(p);
    unsigned char *b = fastmm_malloc(REUSED_BYTES);
    ck_assert_ptr_eq(b, p);
    ck_assert_uint_ge(fm_large_header_of(b)->map_size, second); /* not cut */
    /* from 1 MiB into each mapping (past the block and its chunk) to 1 MiB before its end */
    unsigned char *b_spare = (unsigned char *)fm_large_header_of(b)->map_base + ((size_t)1 << 20);
    size_t b_spare_len = second - ((size_t)2 << 20), a_spare_len = first - ((size_t)2 << 20);
    ck_assert_uint_eq(resident_pages(b_spare, b_spare_len), 0);
    for (unsigned i = 0; i < fills; i++) {
        unsigned char *a_spare = (unsigned char *)fm_large_header_of(a[i])->map_base + ((size_t)1 << 20);
        ck_assert_uint_eq(resident_pages(a_spare, a_spare_len), a_spare_len / page);
        fastmm_free(a[i]);
    }
    fastmm_free(b);
}
END_TEST

/* A thread that allocates two big medium blocks and frees the first: it becomes a free block
 * of that thread's home arena (the second keeps it from going back to the feed). */
typedef struct big_block_run {
    size_t size;
    void *block, *after;
    unsigned home;
} big_block_run_t;

static void *free_big_block_in_own_arena(void *arg)
{
    big_block_run_t *r = arg;
    fastmm_free(fastmm_malloc(16)); /* the thread's cache, and its home */
    r->home = fm_home_arena();
    r->block = fastmm_malloc(r->size);
    r->after = fastmm_malloc(r->size);
    if (r->block != NULL)
        fastmm_free(r->block);
    return NULL;
}

/* Guards the medium arenas' attempt 0 (medium.c): a block bigger than the thread caches keep
 * comes from the requesting thread's home arena, carved from its feed, even when another
 * thread's arena holds a free block that fits (taking those moved that arena's lock and bins
 * between CPUs on every such request). Before, the other arena's free block was taken. */
START_TEST(medium_big_request_served_by_home_arena)
{
    const size_t size = 200000; /* over the 64 KiB the thread caches keep */
    fastmm_free(fastmm_malloc(16));
    unsigned home = fm_home_arena();
    void *keep = fastmm_malloc(100000); /* gives the home arena a feed span, and stays in use */
    ck_assert_ptr_nonnull(keep);
    ck_assert_ptr_eq(fm_medium_span_of(keep)->manager, &fm_medium_managers[home]);
    big_block_run_t other = {size, NULL, NULL, 0};
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, free_big_block_in_own_arena, &other), 0);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    ck_assert_ptr_nonnull(other.block);
    ck_assert_ptr_nonnull(other.after);
    if (other.home == home) {
        fprintf(stdout, "medium_big_request_served_by_home_arena: both threads have home arena %u; "
                        "skipped\n", home);
    } else {
        ck_assert_ptr_eq(fm_medium_span_of(other.after)->manager, &fm_medium_managers[other.home]);
        void *q = fastmm_malloc(size);
        ck_assert_ptr_nonnull(q);
        ck_assert_ptr_ne(q, other.block);
        ck_assert_ptr_eq(fm_medium_span_of(q)->manager, &fm_medium_managers[home]);
        fastmm_free(q);
    }
    fastmm_free(other.after);
    fastmm_free(keep);
}
END_TEST

/* A new thread's first block of `size` bytes (its cache and its home come with it). */
typedef struct small_block_run {
    size_t size;
    void *block;
    unsigned home;
} small_block_run_t;

static void *small_block_of_new_thread(void *arg)
{
    small_block_run_t *r = arg;
    r->block = fastmm_malloc(r->size);
    r->home = fm_home_arena();
    return NULL;
}

static const fm_small_manager_t *small_manager_of(const void *p)
{
    return fm_small_span_named(p, fm_flags_get(p))->manager;
}

/* Guards the thread caches' refills (small.c, fm_small_alloc_batch): a thread's small blocks
 * come from its home arena, from a new span there, even when another thread's arena has a feed
 * of that class: from the other arena's feed, the two threads' blocks would be neighbours,
 * and each free would read a flag word in a line the other thread writes. */
START_TEST(small_refill_served_by_home_arena)
{
    const size_t size = 360;
    unsigned c = fm_small_class_of(size);
    fastmm_free(fastmm_malloc(16));
    unsigned home = fm_home_arena();
    void *keep = fastmm_malloc(size); /* the home arena's span of the class, with its feed */
    ck_assert_ptr_nonnull(keep);
    ck_assert_ptr_eq(small_manager_of(keep), &fm_small_managers[home][c]);
    small_block_run_t other = {size, NULL, 0};
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, small_block_of_new_thread, &other), 0);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    ck_assert_ptr_nonnull(other.block);
    if (other.home == home)
        fprintf(stdout, "small_refill_served_by_home_arena: both threads have home arena %u; skipped\n", home);
    else
        ck_assert_ptr_eq(small_manager_of(other.block), &fm_small_managers[other.home][c]);
    fastmm_free(other.block);
    fastmm_free(keep);
}
END_TEST

/* Guards: in a heap of over 96 MiB (the kept mappings' budget above its floor), a kept mapping
 * reused by a smaller block keeps its pages when that block is freed, even with one thread: the
 * budget bounds the kept mappings whichever pages they hold, and a trim would make the next
 * bigger user fault them in again. */
START_TEST(large_big_heap_keeps_pages_at_free)
{
    if (!dontneed_works()) {
        fprintf(stdout, "large_big_heap_keeps_pages_at_free: MADV_DONTNEED keeps pages here; skipped\n");
        return;
    }
    enum { LIVE = 4 };
    void *live[LIVE];
    for (int i = 0; i < LIVE; i++) { /* 128 MiB mapped, never touched */
        live[i] = fastmm_malloc((size_t)32 << 20);
        ck_assert_ptr_nonnull(live[i]);
    }
    unsigned char *stale;
    size_t stale_len;
    unsigned char *q = reuse_big_mapping(&stale, &stale_len);
    memset(q, 1, REUSED_BYTES);
    fastmm_free(q);
    ck_assert_uint_eq(resident_pages(stale, stale_len), stale_len / (size_t)sysconf(_SC_PAGESIZE));
    for (int i = 0; i < LIVE; i++)
        fastmm_free(live[i]);
}
END_TEST

static void *free_only(void *arg)
{
    void *p = arg;
    fastmm_free(p);
    fastmm_free(NULL); /* a free that does not wait checks the waiting one (api.c) */
    fm_tcache_t *tc = fm_tcache_current;
    /* the block is this thread's cache's, not sent to the arena */
    bool cached = FM_TCACHE_USABLE(tc) && tc->bins[fm_small_class_of(100)].head == p;
    return cached ? p : NULL;
}

/* Guards free()'s exact position check (fm_small_block_index, block.h): for a span of every
 * class and every twin class (a 32-aligned request of its size), each byte offset from the span
 * header up to the largest medium span counts as a block start exactly when it is one of the
 * span's blocks, offsets inside the header included (they wrap). A wrong inverse, shift or
 * first-block offset accepts an interior pointer or refuses a block. */
START_TEST(small_block_index_exact)
{
    for (unsigned c = 0; c < FM_SMALL_INDEX_COUNT; c++) {
        unsigned size = fm_small_class_sizes[c];
        void *p = c < FM_SMALL_CLASS_COUNT ? fastmm_malloc(size - 2u) : fastmm_aligned_alloc(32, size - 2u);
        ck_assert_ptr_nonnull(p);
        uintptr_t entry = fm_pagemap_lookup(p);
        ck_assert_uint_eq(entry & FM_REGION_TYPE_MASK, FM_REGION_MEDIUM_SPAN);
        const fm_small_span_t *s = fm_block_small_live(p, (const fm_medium_span_t *)(entry - FM_REGION_MEDIUM_SPAN));
        ck_assert_ptr_nonnull(s);
        ck_assert_uint_eq(s->block_size, size);
        ck_assert_uint_eq(s->class_index, c);
        ck_assert_uint_eq(s->head, c < FM_SMALL_CLASS_COUNT ? FM_SMALL_SPAN_HEADER : FM_SMALL_TWIN_HEADER);
        size_t next = s->head, index = 0; /* the next block start and its index */
        for (size_t off = 0; off < FM_MEDIUM_MAX_SPAN; off++) {
            bool start = off == next && index < s->total_blocks;
            if ((fm_small_block_index(s, (const char *)s + off) < s->total_blocks) != start)
                ck_abort_msg("class %u (%u bytes): offset %zu taken for a block start: %d", c, size, off, !start);
            if (off == next)
                next += size, index++;
        }
        fastmm_free(p);
    }
}
END_TEST

/* Guards the layout of the two span kinds (layout.h): a plain block of a class that is a
 * multiple of 64 starts 16 bytes into a cache line, so its flag word shares the line (free reads
 * the one and writes the link into the other); a twin's block, asked for with an alignment of
 * 64, starts on a line. */
START_TEST(small_span_heads)
{
    for (unsigned c = 0; c < FM_SMALL_CLASS_COUNT; c++) {
        unsigned size = fm_small_class_sizes[c];
        if (size % 64u != 0)
            continue;
        void *p = fastmm_malloc(size - 2u);
        void *q = fastmm_aligned_alloc(64, size - 2u);
        ck_assert_ptr_nonnull(p);
        ck_assert_ptr_nonnull(q);
        ck_assert_msg((uintptr_t)p % 64u == 16u, "class %u: a plain block at %p", size, p);
        ck_assert_msg((uintptr_t)q % 64u == 0u, "class %u: a 64-aligned block at %p", size, q);
        ck_assert_uint_eq(fm_block_usable(q, fm_block_classify(q)), size - 2u);
        fastmm_free(p);
        fastmm_free(q);
    }
}
END_TEST

/* Guards: a thread whose first call is free() (a consumer of blocks other threads allocated)
 * gets a thread cache then and there, and the block goes into it; without one, each of its
 * frees took an arena lock or the pending stack. */
START_TEST(first_free_makes_thread_cache)
{
    void *p = fastmm_malloc(100);
    ck_assert_ptr_nonnull(p);
    pthread_t t;
    void *res;
    ck_assert_int_eq(pthread_create(&t, NULL, free_only, p), 0);
    ck_assert_int_eq(pthread_join(t, &res), 0);
    ck_assert_msg(res == p, "the freeing thread had no cache, or the block did not go into it");
}
END_TEST

/* Guards the thread cache's overflow (tcache.c, flush_bin): a bin over its limit gives back its
 * top half - the blocks freed last, the one just freed among them - and keeps the older half,
 * whose stack is exactly as long as its count says and holds none of the blocks given back.
 * A count off by one, or a cut in the wrong place, leaves a stack of another length or a block
 * both in the cache and in its span. */
START_TEST(tcache_overflow_gives_back_top)
{
    fm_tcache_t *tc = fm_tcache_start();
    ck_assert_ptr_nonnull(tc);
    unsigned c = fm_small_class_of(100);
    fm_tcache_bin_t *bin = &tc->bins[c];
    /* at its widest: a narrower bin that overflows may widen instead of giving blocks back */
    bin->room += (int)(fm_tcache_limits[c] - bin->limit);
    bin->limit = fm_tcache_limits[c];
    unsigned n = 2u * bin->limit + 2u;
    void **blocks = calloc(n, sizeof *blocks);
    ck_assert_ptr_nonnull(blocks);
    for (unsigned i = 0; i < n; i++) {
        blocks[i] = fastmm_malloc(100);
        ck_assert_ptr_nonnull(blocks[i]);
    }
    unsigned i = 0;
    while (fm_tcache_bin_count(bin) != bin->limit) { /* reached within limit + 1 frees, whatever it held */
        ck_assert_uint_lt(i, n - 1u);
        fastmm_free(blocks[i++]);
    }
    void *top[2] = {blocks[i - 1], blocks[i]}; /* the last block pushed, and the one over the limit */
    fastmm_free(blocks[i++]); /* over the limit: half goes back */
    ck_assert_uint_eq(fm_tcache_bin_count(bin), bin->limit / 2u);
    unsigned length = 0;
    for (void *b = bin->head; b != NULL; b = *(void **)b) {
        ck_assert_ptr_ne(b, top[0]);
        ck_assert_ptr_ne(b, top[1]);
        length++;
    }
    ck_assert_uint_eq(length, fm_tcache_bin_count(bin));
    for (; i < n; i++)
        fastmm_free(blocks[i]);
    free(blocks);
}
END_TEST

/* A new thread's first block of 500 bytes: how many blocks its cache took from the arenas. */
static void *first_block_batch(void *arg)
{
    (void)arg;
    unsigned c = fm_small_class_of(500);
    void *p = fastmm_malloc(500);
    fm_tcache_t *tc = fm_tcache_current;
    uintptr_t taken = p != NULL && FM_TCACHE_USABLE(tc) ? fm_tcache_bin_count(&tc->bins[c]) + 1u : 0u;
    fastmm_free(p);
    return (void *)taken;
}

/* Guards the narrow start of a thread cache's bins (tcache.c, START_BYTES): a new thread's first
 * block of a class takes two blocks from the arenas, not half of the class's widest stack (17
 * blocks of 512 bytes). A thread that uses many classes a little (an inverse-square size mix,
 * a short-lived thread) otherwise keeps up to 16 KiB resident in each of them. */
START_TEST(tcache_bins_start_narrow)
{
    fastmm_process_pending_frees(); /* no exited thread's cache, with its widths, to take over */
    pthread_t t;
    void *taken;
    ck_assert_int_eq(pthread_create(&t, NULL, first_block_batch, NULL), 0);
    ck_assert_int_eq(pthread_join(t, &taken), 0);
    ck_assert_msg((uintptr_t)taken != 0, "the thread had no cache");
    ck_assert_msg((uintptr_t)taken <= 2u, "a new thread's first 500-byte block took %u blocks from the arenas",
                  (unsigned)(uintptr_t)taken);
}
END_TEST

/* Guards the home arenas (tcache.c, home_enter): threads alive together each have their own while
 * there are no more than arenas, and a thread started after another one exited takes the exited
 * one's home, where its freed blocks are (mstress's rounds of short-lived threads otherwise
 * spread over every arena: more memory touched, a third more page faults). */

/* barrier: NULL, or one to wait at before exiting (the thread keeps its home until then) */
static void *home_of_new_thread(void *barrier)
{
    fastmm_free(fastmm_malloc(48)); /* the thread's cache, and its home, come with its first allocation */
    unsigned home = fm_home_arena();
    if (barrier != NULL)
        pthread_barrier_wait(barrier);
    return (void *)(uintptr_t)(home + 1u);
}

/* The home of a thread that ran and exited. */
static unsigned home_of_exited_thread(void)
{
    pthread_t t;
    void *home;
    ck_assert_int_eq(pthread_create(&t, NULL, home_of_new_thread, NULL), 0);
    ck_assert_int_eq(pthread_join(t, &home), 0);
    return (unsigned)(uintptr_t)home - 1u;
}

/* The calling thread's home in homes[0], and in the rest those of FM_MEDIUM_ARENAS - 1 new
 * threads alive together with it; false if a thread could not be run. No Check assertion: a
 * fork's child uses it too. */
static bool homes_of_live_threads(unsigned homes[FM_MEDIUM_ARENAS])
{
    pthread_barrier_t met;
    pthread_t t[FM_MEDIUM_ARENAS];
    homes[0] = fm_home_arena();
    if (pthread_barrier_init(&met, NULL, FM_MEDIUM_ARENAS) != 0)
        return false;
    for (unsigned i = 1; i < FM_MEDIUM_ARENAS; i++)
        if (pthread_create(&t[i], NULL, home_of_new_thread, &met) != 0)
            return false;
    pthread_barrier_wait(&met);
    bool joined = true;
    for (unsigned i = 1; i < FM_MEDIUM_ARENAS; i++) {
        void *home = NULL;
        joined = pthread_join(t[i], &home) == 0 && joined;
        homes[i] = (unsigned)(uintptr_t)home - 1u;
    }
    pthread_barrier_destroy(&met);
    return joined;
}

/* Whether two of homes[] are the same one: then homes[*i] and homes[*j], *j < *i. */
static bool homes_shared(const unsigned homes[FM_MEDIUM_ARENAS], unsigned *i, unsigned *j)
{
    for (*i = 1; *i < FM_MEDIUM_ARENAS; ++*i)
        for (*j = 0; *j < *i; ++*j)
            if (homes[*i] == homes[*j])
                return true;
    return false;
}

START_TEST(home_arenas_one_per_live_thread)
{
    fastmm_free(fastmm_malloc(48));
    unsigned homes[FM_MEDIUM_ARENAS], i, j;
    ck_assert_msg(homes_of_live_threads(homes), "could not run %u threads", FM_MEDIUM_ARENAS - 1u);
    ck_assert_msg(!homes_shared(homes, &i, &j), "threads %u and %u, alive together, share home arena %u", j, i,
                  homes[i]);
    unsigned first = home_of_exited_thread();
    ck_assert_uint_ne(first, homes[0]);
    for (unsigned k = 0; k < 3; k++)
        ck_assert_uint_eq(home_of_exited_thread(), first);
}
END_TEST

/* Guards the fork child's reset of the home arenas' thread counts (tcache.c,
 * fm_tcache_fork_child): the parent's other threads do not live on in the child, so the child's
 * new threads must not be spread as if they did (with the parent's counts, the child's first new
 * thread shares the forking thread's home). */
static pthread_barrier_t homed_before_fork, released_after_fork;

static void *homed_across_fork(void *unused)
{
    (void)unused;
    fastmm_free(fastmm_malloc(48));
    pthread_barrier_wait(&homed_before_fork);
    pthread_barrier_wait(&released_after_fork);
    return NULL;
}

START_TEST(home_arenas_counted_afresh_in_fork_child)
{
    fastmm_free(fastmm_malloc(48));
    pthread_t t[FM_MEDIUM_ARENAS];
    ck_assert_int_eq(pthread_barrier_init(&homed_before_fork, NULL, FM_MEDIUM_ARENAS), 0);
    ck_assert_int_eq(pthread_barrier_init(&released_after_fork, NULL, FM_MEDIUM_ARENAS), 0);
    for (unsigned i = 1; i < FM_MEDIUM_ARENAS; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, homed_across_fork, NULL), 0);
    pthread_barrier_wait(&homed_before_fork);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        unsigned homes[FM_MEDIUM_ARENAS], i, j;
        _exit(homes_of_live_threads(homes) && !homes_shared(homes, &i, &j) ? 0 : 1);
    }
    pthread_barrier_wait(&released_after_fork);
    for (unsigned i = 1; i < FM_MEDIUM_ARENAS; i++)
        ck_assert_int_eq(pthread_join(t[i], NULL), 0);
    pthread_barrier_destroy(&homed_before_fork);
    pthread_barrier_destroy(&released_after_fork);
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "new threads alive together in a fork's child share a home arena");
}
END_TEST

/* Sets the busy rule's threshold (tcache.c, soon_after) and returns the one it replaces: at its
 * top every visit or overflow counts as soon after the previous one, at 1 none does, so that a
 * test does not depend on the machine's speed. */
static uint32_t set_busy_threshold(uint32_t ticks)
{
    (void)fm_os_ticks(); /* where the threshold is set at the first reading */
    uint32_t old = fm_os_ticks_per_50us;
    fm_os_ticks_per_50us = ticks;
    return old;
}

/* Guards the widening of a busy bin (tcache.c, widen_if_busy): a class's allocations and frees
 * bring its bin to the class's widest, with the stack as long as its count says. A bin that
 * never widened would visit the arenas every other block for a thread that uses a class
 * heavily. Every visit counts as soon after the previous one here (the threshold at its top),
 * so that the test does not depend on the machine's speed: Valgrind and qemu run far slower
 * than the rule's 50 microseconds assume. */
START_TEST(tcache_busy_bin_widens)
{
    enum { N = 64 };
    void *p[N];
    uint32_t threshold = set_busy_threshold(UINT32_MAX);
    fm_tcache_t *tc = fm_tcache_start();
    ck_assert_ptr_nonnull(tc);
    unsigned c = fm_small_class_of(500);
    fm_tcache_bin_t *bin = &tc->bins[c];
    for (int round = 0; round < 8 && bin->limit < fm_tcache_limits[c]; round++) {
        for (int i = 0; i < N; i++)
            if ((p[i] = fastmm_malloc(500)) == NULL) {
                fm_os_ticks_per_50us = threshold; /* for the tests after this one, CK_FORK=no */
                ck_abort_msg("malloc(500) failed in round %d", round);
            }
        for (int i = 0; i < N; i++)
            fastmm_free(p[i]);
    }
    fm_os_ticks_per_50us = threshold;
    ck_assert_uint_eq(bin->limit, fm_tcache_limits[c]);
    unsigned length = 0;
    for (void *b = bin->head; b != NULL; b = *(void **)b)
        length++;
    ck_assert_uint_eq(length, fm_tcache_bin_count(bin));
    ck_assert_int_ge(bin->room, 0);
}
END_TEST

/* Whether block p is on this thread's cache stack of medium bin b. */
static bool medium_cached(const fm_tcache_t *tc, unsigned b, const void *p)
{
    for (void *q = tc->medium[b]; q != NULL; q = *(void **)q)
        if (q == p)
            return true;
    return false;
}

/* Guards the medium cache's overflow (tcache.c, fm_tcache_medium_put): a free over the byte
 * budget gives back blocks of the largest bins until there is room, and keeps the block just
 * freed and the smaller ones freed before it. Flushing the whole medium part there left the
 * cache empty after every overflow, and most requests of a program asking for many sizes
 * missed it (rptest). */
START_TEST(tcache_medium_overflow_keeps_small_blocks)
{
    fm_tcache_t *tc = fm_tcache_start();
    ck_assert_ptr_nonnull(tc);
    uint32_t threshold = set_busy_threshold(1); /* no overflow soon after another: the budget stays */
    tc->medium_budget = FM_TCACHE_MEDIUM_BYTES;
    size_t small_user = 3000, large_user = 12000;
    size_t small = fm_medium_round_request(small_user), large = fm_medium_round_request(large_user);
    unsigned nlarge = (unsigned)(FM_TCACHE_MEDIUM_BYTES / 4u * 3u / large);
    unsigned nsmall = (unsigned)((FM_TCACHE_MEDIUM_BYTES - nlarge * large) / small) + 1u; /* the last one overflows */
    ck_assert_uint_ge(nlarge, 2);
    void *big[64], *little[64];
    ck_assert_uint_le(nlarge, 64);
    ck_assert_uint_le(nsmall, 64);
    for (unsigned i = 0; i < nlarge; i++)
        ck_assert_ptr_nonnull(big[i] = fastmm_malloc(large_user));
    for (unsigned i = 0; i < nsmall; i++)
        ck_assert_ptr_nonnull(little[i] = fastmm_malloc(small_user));
    fastmm_process_pending_frees(); /* this thread's cache empty */
    ck_assert_uint_eq(tc->medium_bytes, 0);
    for (unsigned i = 0; i < nlarge; i++)
        fastmm_free(big[i]);
    for (unsigned i = 0; i + 1u < nsmall; i++)
        fastmm_free(little[i]);
    fastmm_free(NULL); /* the last one checked too: a free that does not wait checks it (api.c) */
    ck_assert_uint_le(tc->medium_bytes, FM_TCACHE_MEDIUM_BYTES);
    ck_assert_uint_gt(tc->medium_bytes + small, FM_TCACHE_MEDIUM_BYTES); /* the next free overflows */
    fastmm_free(little[nsmall - 1u]);
    fastmm_free(NULL);
    ck_assert_uint_le(tc->medium_bytes, FM_TCACHE_MEDIUM_BYTES);
    unsigned sb = fm_tcache_medium_bin_of(small), lb = fm_tcache_medium_bin_of(large);
    for (unsigned i = 0; i < nsmall; i++)
        ck_assert_msg(medium_cached(tc, sb, little[i]), "small block %u of %u was given back", i, nsmall);
    unsigned kept = 0;
    for (unsigned i = 0; i < nlarge; i++)
        kept += medium_cached(tc, lb, big[i]);
    ck_assert_uint_lt(kept, nlarge); /* room was made with the large ones */
    size_t bytes = 0; /* the count matches the stacks */
    for (unsigned b = 0; b < FM_TCACHE_MEDIUM_BINS; b++)
        for (void *q = tc->medium[b]; q != NULL; q = *(void **)q)
            bytes += fm_medium_block_size(q);
    ck_assert_uint_eq(bytes, tc->medium_bytes);
    fm_os_ticks_per_50us = threshold;
    fastmm_process_pending_frees();
}
END_TEST

/* Frees `n` medium blocks of `user` bytes each from an empty cache whose budget is `budget`,
 * every overflow counting as soon after the previous one when `busy`, else none. */
static void free_medium_blocks_overflowing(fm_tcache_t *tc, unsigned n, size_t user, size_t budget, bool busy)
{
    void *p[128];
    ck_assert_uint_le(n, 128);
    for (unsigned i = 0; i < n; i++)
        ck_assert_ptr_nonnull(p[i] = fastmm_malloc(user));
    fastmm_process_pending_frees(); /* this thread's cache empty */
    ck_assert_uint_eq(tc->medium_bytes, 0);
    tc->medium_budget = budget;
    uint32_t threshold = set_busy_threshold(busy ? UINT32_MAX : 1u);
    for (unsigned i = 0; i < n; i++)
        fastmm_free(p[i]);
    fm_os_ticks_per_50us = threshold;
}

/* Guards the widening of a busy medium budget (tcache.c, widen_medium_if_busy): overflows soon
 * after one another double it up to FM_TCACHE_MEDIUM_MAX_BYTES, and the cache then keeps more
 * than the start budget; overflows far apart leave it where it started, and debug mode takes a
 * wide one back to the start. A budget that never widened has a thread whose sizes spread over
 * many bins miss the cache on most requests; a wide one in debug mode left a forked child under
 * RLIMIT_AS a fifth fewer aligned debug blocks the second time (check_exhaustion). */
START_TEST(tcache_busy_medium_budget_widens)
{
    fm_tcache_t *tc = fm_tcache_start();
    ck_assert_ptr_nonnull(tc);
    size_t user = 12000, block = fm_medium_round_request(user);
    unsigned n = (unsigned)(FM_TCACHE_MEDIUM_MAX_BYTES / block) + 8u; /* past the widest budget */
    free_medium_blocks_overflowing(tc, n, user, FM_TCACHE_MEDIUM_BYTES, true);
    ck_assert_uint_eq(tc->medium_budget, FM_TCACHE_MEDIUM_MAX_BYTES);
    ck_assert_uint_gt(tc->medium_bytes, FM_TCACHE_MEDIUM_BYTES);
    ck_assert_uint_le(tc->medium_bytes, FM_TCACHE_MEDIUM_MAX_BYTES);
    free_medium_blocks_overflowing(tc, n, user, FM_TCACHE_MEDIUM_BYTES, false);
    ck_assert_uint_eq(tc->medium_budget, FM_TCACHE_MEDIUM_BYTES);
    ck_assert_uint_le(tc->medium_bytes, FM_TCACHE_MEDIUM_BYTES);
    fastmm_debug_enter();
    free_medium_blocks_overflowing(tc, n, user, FM_TCACHE_MEDIUM_MAX_BYTES / 2u, true);
    size_t budget = tc->medium_budget, bytes = tc->medium_bytes;
    fastmm_process_pending_frees();
    fastmm_debug_exit();
    ck_assert_uint_eq(budget, FM_TCACHE_MEDIUM_BYTES);
    ck_assert_uint_le(bytes, FM_TCACHE_MEDIUM_BYTES);
    fastmm_process_pending_frees();
}
END_TEST

#define RUN_CLASS_REQUEST 1000
static fm_small_span_t *span_of(void *p) { return fm_small_span_named(p, fm_flags_get(p)); }

/* A block a batch handed out, made live as the cache's pop leaves it. */
static void as_popped(void *p) { fm_flags_set(p, fm_flags_get(p) & ~FM_FLAG_FREE); }

/* One live block of class c from a batch of one: from the arena the tests' later batches read. */
static void *arena_block(unsigned c)
{
    void *p;
    ck_assert_uint_eq(fm_small_alloc_batch(c, &p, 1, 1), 1);
    as_popped(p);
    return p;
}

/* Small blocks of one class straight from the arenas (no thread cache), sorted by span: at
 * least `want` of them share the first block's span, and `others` holds up to `want` blocks of
 * another span of the class (the next one made, when the first fills up). */
static unsigned run_blocks(unsigned c, void **same, unsigned want, void **others, unsigned *n_others)
{
    unsigned n = 0, o = 0;
    fm_small_span_t *first = NULL;
    while (n < want || (others != NULL && o < want)) {
        void *p = arena_block(c);
        if (first == NULL)
            first = span_of(p);
        if (span_of(p) == first && n < want)
            same[n++] = p;
        else if (others != NULL && span_of(p) != first && o < want)
            others[o++] = p;
        /* else: an extra block of the first span, left allocated (keeps the span alive) */
    }
    if (n_others != NULL)
        *n_others = o;
    return n;
}

/* Links blocks[0..n) into a chain in that order, each flagged FREE as a thread cache holds it. */
static void *chain_of(void **blocks, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        ck_assert(fm_block_mark_free(blocks[i]));
        fm_link_set(blocks[i], i + 1 < n ? blocks[i + 1] : NULL);
    }
    return blocks[0];
}

/* Blocks b[0..n] of one span of class c from the arenas, then b[0..n) given back as one chain
 * (b[n] stays allocated: the span stays). Returns the span; *in_use: its count before. */
static fm_small_span_t *span_with_run_freed(unsigned c, void **b, unsigned n, uint32_t *in_use)
{
    run_blocks(c, b, n + 1, NULL, NULL);
    fm_small_span_t *s = span_of(b[0]);
    *in_use = s->blocks_in_use;
    fm_small_free_chain(chain_of(b, n));
    return s;
}

/* Guards the flush of a run of neighbours (small.c, fm_small_free_chain): a chain of one span's
 * blocks is spliced onto the span's free list whole, in its own order, on top of the list, with
 * the span's count lowered by the run's length; a refill then cuts them off that list in the
 * same order. A run counted as one block would leave the span's count too high (never
 * released), a bad splice would lose blocks, and block by block the list came out reversed (the
 * last block of the chain on top). */
START_TEST(small_chain_run_spliced_whole)
{
    enum { RUN = 4 };
    unsigned c = fm_small_class_of(RUN_CLASS_REQUEST);
    void *b[RUN + 1];
    uint32_t in_use;
    fm_small_span_t *s = span_with_run_freed(c, b, RUN, &in_use);
    ck_assert_uint_eq(s->blocks_in_use, in_use - RUN);
    void *p = s->first_free; /* the run on top of the span's free list, in its order */
    for (unsigned i = 0; i < RUN; i++, p = fm_link_get(p))
        ck_assert_ptr_eq(p, b[i]);
    void *got;
    ck_assert_uint_eq(fm_small_alloc_batch(c, &got, RUN, RUN), RUN);
    for (unsigned i = 0; i < RUN; i++, got = fm_link_get(got))
        ck_assert_ptr_eq(got, b[i]);
    ck_assert_uint_eq(s->blocks_in_use, in_use);
    for (unsigned i = 0; i <= RUN; i++) {
        as_popped(b[i]);
        fastmm_free(b[i]);
    }
}
END_TEST

/* Guards the refill's whole-list take (small.c, take_many_locked): a span's free list that fits
 * under the batch's `most` is taken whole, found by the span's count and last_free without a walk
 * - every block, in the list's order, the span's count up by the list's length, the span off
 * the partial list; a longer list is cut after `want`, its rest (and last_free) staying with the
 * span. A wrong length would leave blocks_in_use off (a span never released, or released under
 * live blocks); a stale last_free would link the batch to blocks it does not hold. */
START_TEST(small_batch_takes_whole_lists)
{
    enum { N = 6 };
    unsigned c = fm_small_class_of(RUN_CLASS_REQUEST);
    void *b[N + 1];
    uint32_t in_use;
    fm_small_span_t *s = span_with_run_freed(c, b, N, &in_use);
    ck_assert_uint_eq(s->total_blocks - s->blocks_in_use, N); /* the list holds these N only */
    ck_assert_ptr_eq(s->last_free, b[N - 1]);
    void *got;
    ck_assert_uint_eq(fm_small_alloc_batch(c, &got, 2, N), N);
    for (unsigned i = 0; i < N; i++, got = fm_link_get(got))
        ck_assert_ptr_eq(got, b[i]);
    ck_assert_ptr_null(got);
    ck_assert_ptr_null(s->first_free);
    ck_assert(!s->in_partial_list);
    ck_assert_uint_eq(s->blocks_in_use, in_use);

    for (unsigned i = 0; i < N; i++)
        as_popped(b[i]);
    fm_small_free_chain(chain_of(b, N));
    ck_assert_ptr_eq(s->last_free, b[N - 1]);
    ck_assert_uint_eq(fm_small_alloc_batch(c, &got, 2, N - 1), 2);
    ck_assert_ptr_eq(got, b[0]);
    ck_assert_ptr_eq(fm_link_get(got), b[1]);
    ck_assert_ptr_null(fm_link_get(b[1]));
    ck_assert_ptr_eq(s->first_free, b[2]);
    ck_assert_ptr_eq(s->last_free, b[N - 1]);
    ck_assert(s->in_partial_list);
    ck_assert_uint_eq(s->blocks_in_use, in_use - (N - 2));
    for (unsigned i = 0; i < 2; i++) {
        as_popped(b[i]);
        fastmm_free(b[i]);
    }
    fastmm_free(b[N]);
}
END_TEST

/* Guards: a run whose manager is busy goes on the pending stack whole, in its order, with one
 * compare-and-swap (one block at a time, each waited its turn and the stack came out reversed),
 * and the next drain returns it to its span. */
START_TEST(small_chain_run_pending_whole)
{
    unsigned c = fm_small_class_of(RUN_CLASS_REQUEST);
    void *b[4];
    run_blocks(c, b, 4, NULL, NULL);
    fm_small_span_t *s = span_of(b[0]);
    fm_small_manager_t *m = s->manager;
    uint32_t in_use = s->blocks_in_use;
    void *before = m->pending;
    ck_assert(fm_lock_try(&m->lock));
    fm_small_free_chain(chain_of(b, 3));
    ck_assert_ptr_eq(m->pending, b[0]);
    ck_assert_ptr_eq(fm_link_get(b[0]), b[1]);
    ck_assert_ptr_eq(fm_link_get(b[1]), b[2]);
    ck_assert_ptr_eq(fm_link_get(b[2]), before);
    ck_assert_uint_eq(s->blocks_in_use, in_use);
    fm_lock_release(&m->lock);
    ck_assert(fm_small_drain_all());
    ck_assert_ptr_null(m->pending);
    ck_assert_uint_eq(s->blocks_in_use, in_use - 3);
    fastmm_free(b[3]);
}
END_TEST

/* Guards the run's bounds (small.c, run_of): a chain that alternates between the blocks of two
 * spans of one class returns each block to its own span - the counts of both move by their own
 * blocks, and each span's free list holds only its own. */
START_TEST(small_chain_runs_split_by_span)
{
    unsigned c = fm_small_class_of(RUN_CLASS_REQUEST);
    void *a[3], *o[3], *mixed[6];
    unsigned n_o;
    run_blocks(c, a, 3, o, &n_o);
    ck_assert_uint_eq(n_o, 3);
    fm_small_span_t *sa = span_of(a[0]), *so = span_of(o[0]);
    ck_assert_ptr_ne(sa, so);
    for (unsigned i = 0; i < 3; i++) {
        mixed[2 * i] = a[i];
        mixed[2 * i + 1] = o[i];
    }
    /* run_blocks left a block of sa allocated (the one whose span changed); one more of so */
    for (void *extra = NULL; extra == NULL || span_of(extra) != so;)
        extra = arena_block(c);
    uint32_t in_a = sa->blocks_in_use, in_o = so->blocks_in_use;
    fm_small_free_chain(chain_of(mixed, 6));
    ck_assert_uint_eq(sa->blocks_in_use, in_a - 3);
    ck_assert_uint_eq(so->blocks_in_use, in_o - 3);
    unsigned seen_a = 0, seen_o = 0;
    for (void *p = sa->first_free; p != NULL; p = fm_link_get(p)) {
        ck_assert_ptr_eq(span_of(p), sa);
        seen_a += p == a[0] || p == a[1] || p == a[2];
    }
    for (void *p = so->first_free; p != NULL; p = fm_link_get(p)) {
        ck_assert_ptr_eq(span_of(p), so);
        seen_o += p == o[0] || p == o[1] || p == o[2];
    }
    ck_assert_uint_eq(seen_a, 3);
    ck_assert_uint_eq(seen_o, 3);
}
END_TEST

/* Guards the kept mappings' budget (large.c): with hundreds of MiB of live large blocks, a freed
 * 24 MiB block's mapping is kept for the next request (a fixed 32 MiB budget, 16 MiB a mapping,
 * unmapped it, and its next user faulted every page in again). */
START_TEST(large_retain_budget_scales_with_heap)
{
    enum { LIVE = 12 };
    void *live[LIVE];
    fm_large_release_retained();
    for (int i = 0; i < LIVE; i++) { /* 384 MiB mapped, never touched: no memory used */
        live[i] = fastmm_malloc((size_t)32 << 20);
        ck_assert_ptr_nonnull(live[i]);
    }
    void *p = fastmm_malloc((size_t)24 << 20);
    ck_assert_ptr_nonnull(p);
    size_t before = fm_os_mapped_bytes();
    fastmm_free(p);
    ck_assert_uint_ge(fm_os_mapped_bytes(), before); /* kept, not unmapped */
    void *q = fastmm_malloc((size_t)20 << 20);
    ck_assert_ptr_eq(q, p);
    fastmm_free(q);
    for (int i = 0; i < LIVE; i++)
        fastmm_free(live[i]);
    fm_large_release_retained();
}
END_TEST

/* The mapping of /proc/self/maps that holds address a: its bounds and permissions ("rw-p"). */
static bool mapping_of(uintptr_t a, uintptr_t *start, uintptr_t *end, char perms[5])
{
    FILE *f = fopen("/proc/self/maps", "r");
    ck_assert_ptr_nonnull(f);
    char line[512];
    bool found = false;
    while (!found && fgets(line, sizeof line, f) != NULL) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx %4s", &lo, &hi, perms) == 3 && a >= lo && a < hi)
            *start = lo, *end = hi, found = true;
    }
    fclose(f);
    return found;
}

/* The permissions of the mapping that holds address a, or "unmapped". */
static const char *perms_at(uintptr_t a, char perms[5])
{
    uintptr_t start, end;
    return mapping_of(a, &start, &end, perms) ? perms : "unmapped";
}

/* The writable mapping at exactly [p, p + size), or the one holding p when size is 0, has a
 * no-access page on either side. */
static void assert_fenced(const char *what, const void *p, size_t size)
{
    uintptr_t start, end;
    char perms[5];
    ck_assert_msg(mapping_of((uintptr_t)p, &start, &end, perms), "%s %p: not mapped", what, p);
    ck_assert_msg(perms[0] == 'r' && perms[1] == 'w', "%s %p: %s", what, p, perms);
    if (size != 0)
        ck_assert_msg(start == (uintptr_t)p && end == (uintptr_t)p + size,
                      "%s %p: mapping %#lx-%#lx, not exactly its %zu bytes", what, p, (unsigned long)start,
                      (unsigned long)end, size);
    const char *below = perms_at(start - 1, perms);
    ck_assert_msg(strcmp(below, "---p") == 0, "%s %p: the page before it is %s", what, p, below);
    const char *above = perms_at(end, perms);
    ck_assert_msg(strcmp(above, "---p") == 0, "%s %p: the page after it is %s", what, p, above);
}

/* Whether /proc/self/maps shows both no-access pages around a writable one (qemu-user, which
 * runs the i386 and aarch64 legs of CI, leaves the lower one out of its listing). */
static bool maps_shows_fences(void)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    char *p = mmap(NULL, 3 * page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    ck_assert_ptr_ne(p, MAP_FAILED);
    ck_assert_int_eq(mprotect(p + page, page, PROT_READ | PROT_WRITE), 0);
    char perms[5];
    bool shown = strcmp(perms_at((uintptr_t)p, perms), "---p") == 0 &&
                 strcmp(perms_at((uintptr_t)p + 2 * page, perms), "---p") == 0;
    munmap(p, 3 * page);
    return shown;
}

/* Guards the fences around the allocator's own tables (os.h, fm_os_map_fenced): each leaf of
 * the ownership map, and the chunk of thread caches, lies between no-access pages. Without them
 * a leaf is often mapped right below a large block, and a program that maps over the page before
 * its block (glibc's tst-free-errno) or runs off its end zeroes the entries that say which
 * memory is the heap's: its next free is refused as "not inside any memory of this heap". */
START_TEST(allocator_tables_fenced)
{
    void *big = fastmm_malloc((size_t)16 << 20);
    void *small = fastmm_malloc(100);
    ck_assert_ptr_nonnull(big);
    ck_assert_ptr_nonnull(small);
    fastmm_free(small); /* the first free makes this thread's cache */
    if (!maps_shows_fences()) {
        printf("allocator_tables_fenced: skipped, /proc/self/maps here does not list no-access pages\n");
        fastmm_free(big);
        return;
    }
    unsigned leaves = 0;
    for (size_t t = 0; t < ((size_t)1 << FM_PAGEMAP_TOP_BITS); t++) {
        const uintptr_t *leaf = fm_load_acquire(&fm_pagemap_top[t]);
        if (leaf != NULL) {
            assert_fenced("pagemap leaf", leaf, ((size_t)1 << FM_PAGEMAP_LEAF_BITS) * sizeof *leaf);
            leaves++;
        }
    }
    ck_assert_uint_ge(leaves, 1);
    fm_tcache_t *tc = fm_tcache_current;
    ck_assert_msg(FM_TCACHE_USABLE(tc), "no thread cache after a free");
    assert_fenced("thread cache chunk", tc, 0);
    fastmm_free(big);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("internals");
    TCase *tc = tcase_create("sizes");
    tcase_add_test(tc, medium_cache_bin_matches_arena_bin);
    tcase_add_test(tc, medium_block_bin_inline_matches);
    tcase_add_test(tc, medium_big_request_served_by_home_arena);
    tcase_add_test(tc, small_refill_served_by_home_arena);
    tcase_add_test(tc, first_free_makes_thread_cache);
    tcase_add_test(tc, tcache_overflow_gives_back_top);
    tcase_add_test(tc, tcache_medium_overflow_keeps_small_blocks);
    tcase_add_test(tc, tcache_bins_start_narrow);
    tcase_add_test(tc, tcache_busy_bin_widens);
    tcase_add_test(tc, tcache_busy_medium_budget_widens);
    tcase_add_test(tc, small_block_index_exact);
    tcase_add_test(tc, small_span_heads);
    tcase_add_test(tc, home_arenas_one_per_live_thread);
    tcase_add_test(tc, allocator_tables_fenced);
    suite_add_tcase(s, tc);
    tc = tcase_create("home_fork");
#if CHECK_MAJOR_VERSION > 0 || CHECK_MINOR_VERSION >= 11
    /* CK_EXCLUDE_TAGS=fork-with-threads leaves it out: under qemu-user, fork() with other
     * threads alive may hang in the emulator (.ci/arch-legs). */
    tcase_set_tags(tc, "fork-with-threads");
#endif
    tcase_add_test(tc, home_arenas_counted_afresh_in_fork_child);
    suite_add_tcase(s, tc);
    tc = tcase_create("small_runs");
    tcase_add_test(tc, small_chain_run_spliced_whole);
    tcase_add_test(tc, small_batch_takes_whole_lists);
    tcase_add_test(tc, small_chain_run_pending_whole);
    tcase_add_test(tc, small_chain_runs_split_by_span);
    suite_add_tcase(s, tc);
    tc = tcase_create("large_trim");
    /* this order: without fork mode the second one's thread would stop the first one's trims */
    tcase_add_test(tc, large_reuse_trims_when_one_thread);
    tcase_add_test(tc, large_reuse_keeps_pages_with_threads);
    tcase_add_test(tc, large_mapping_trimmed_whole_every_kth_reuse_with_threads);
    tcase_add_test(tc, large_spare_over_budget_trimmed_not_cut);
    tcase_add_test(tc, large_retain_budget_scales_with_heap);
    tcase_add_test(tc, large_big_heap_keeps_pages_at_free);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
