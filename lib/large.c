/*
 * large.c - the large block manager: requests above 558904 bytes get their own mapping, rounded
 * to 64 KiB, with the 64-byte header in front of the user pointer (doc/fastmm5-facts.md 2.5, 3.3).
 *
 * The arenas only keep lists of live blocks (for walkers and usage reports); their locks are
 * never waited for by a free, which queues the block on the arena's pending stack instead. Every
 * large allocation and free drains those stacks, as FastMM5 does.
 * Growing uses mremap: in place when the pages after the block are free, otherwise the kernel
 * moves the pages to a new address without copying them.
 *
 * Retained mappings (not in FastMM5, which gives every freed large block back at once): the
 * last few freed mappings, up to 64 and a budget proportional to the heap (retain_budget), are kept, flagged FREE and still in the ownership
 * map, and the next large request that fits takes the smallest one, aligned requests too (the
 * header moves to the mapping's start when it is kept, to before the aligned pointer when it is
 * reused: move_header). Its chunks beyond what a
 * fresh mapping would have are kept as spare (spare_chunks): the usable size stays FastMM5's,
 * and a later realloc grows into them without a system call (and, where an earlier user wrote
 * them, without a page fault: those written spare pages stay while all live blocks' together
 * stay under 32 MiB, else they are given back).
 * A program that allocates and frees large blocks in a loop then pays no mmap, munmap, page
 * faults or TLB shootdowns each time, which is what glibc gets by serving such sizes from its
 * heap once its mmap threshold has risen. malloc_trim, a refused mapping (for a large block or
 * a medium span), a memory limit (none are kept under one), the low-memory strategy (none are
 * kept under it: FastMM5's behaviour) and debug mode (where a freed large block is unmapped so
 * that a use after free faults) give them back.
 * The price of keeping them: every page any user of a kept mapping touched stays resident (a
 * loop over sizes that writes each block's first and last byte ends up with ~2x glibc's peak
 * RSS), so stale pages are trimmed at some frees (below, "stale pages of kept mappings").
 */
#include "internal.h"

#include <errno.h>

fm_large_manager_t fm_large_managers[FM_LARGE_ARENAS];
static uint64_t contention;

static void link_locked(fm_large_manager_t *m, fm_large_header_t *h)
{
    h->manager = m;
    h->prev = NULL;
    h->next = m->first;
    if (m->first != NULL)
        m->first->prev = h;
    m->first = h;
}

static void unlink_locked(fm_large_manager_t *m, fm_large_header_t *h)
{
    if (h->prev != NULL)
        h->prev->next = h->next;
    else
        m->first = h->next;
    if (h->next != NULL)
        h->next->prev = h->prev;
}

static void unmap_block(fm_large_header_t *h)
{
    void *base = h->map_base;
    size_t size = h->map_size;
    fm_pagemap_unregister(base, size);
    fm_os_unmap(base, size);
}

/* ---- retained mappings (see the top of the file) ---- */

static void drop_spare(fm_large_header_t *h, size_t keep);

/* 64 mappings: with 16, a random-size mix with 4 threads (mix-t4: 0.5% of its requests are
 * large, 0.56-1 MiB) found none big enough so often that it made 305 mmap and 257 munmap calls
 * per run (64: 119 and 47). With the sizes kept apart from the headers (no TLB miss per entry
 * searched), the mix runs 1.36x faster at 4 threads and 1.28x at 2, with the same peak RSS: the
 * byte limit is what bounds the memory. */
#define RETAIN_COUNT 64
#define RETAIN_BYTES ((size_t)32 << 20)
#define RETAIN_MAX_BYTES ((size_t)1 << 30)
#define RETAIN_SHARE 3u

static fm_lock_t retain_lock;
static fm_large_header_t *retained[RETAIN_COUNT]; /* oldest first */
static size_t retained_size[RETAIN_COUNT];        /* their map_size: the search reads no header */
static unsigned retained_count; /* written under retain_lock, with relaxed atomic stores: take_retained
                                  * peeks at it without the lock */
static size_t retained_bytes;

/* ---- stale pages of kept mappings ----
 * A kept mapping's pages stay resident after each user, so over many reuses a mapping holds the
 * last pages of every size it served (a loop over sizes: 2x glibc's peak RSS). So when a block
 * in a reused mapping is freed, what earlier users may have written more than TRIM_SLACK past
 * its end is given back (MADV_DONTNEED). Not on reuse: a block may grow into its spare chunks
 * with realloc, and there those pages save a page fault each (an array grown 1.5x at a time ran
 * 4x slower with the trim on reuse).
 * That trim at every such free is for a program where one thread makes all the large
 * allocations and frees: then it costs a system call and the page faults of whatever the next
 * user writes there (sweep-large, 1 thread: 1.1x glibc's speed instead of 6x, 1.17x its peak
 * RSS instead of 2.1x; a slack of 512 KiB: 1.5x and 1.4x, 128 KiB: 1.1x and 1.15x). Where
 * several threads make them, each trim also costs a TLB shootdown on the CPUs running the
 * others: trimming at every such free made 2 and 4 threads 0.68x and 0.57x glibc's speed, and
 * deciding per window of a few thousand operations did not help (with 4 threads on 2 CPUs one
 * thread often has the large blocks to itself that long while the others wait for the memory
 * map's lock). Not trimming at all left 2.2x glibc's peak RSS. So with
 * several threads a mapping is trimmed whole (all but the header's page) at the free that ends
 * its FM_LARGE_SHORT_REUSES_PER_TRIM-th (48th) reuse by a smaller block: one shootdown per that
 * many frees, and a mapping holds the pages of at most that many users. 48 with a spare budget
 * of 32 MiB (FM_LARGE_SPARE_BUDGET) is the pair that keeps sweep-large at 2 and 4 threads at
 * glibc's speed and within its peak RSS (harness, 15 pairs: 1.03 / 1.08 and 1.05 / 0.99, speed /
 * RSS x glibc's); a 16 MiB spare budget is passed at about every other reuse at 4 threads (16
 * live blocks with ~1.7 MiB of possibly written spare each), each pass one more shootdown; every
 * 32nd trims more than it saves, every 64th keeps more (doc/experiments.md, "Kept large
 * mappings", has each variant's figures). Whatever releases pages, the
 * next user's first writes fault: in that loop peak RSS and page faults trade against each
 * other, and glibc's trims of its heap top put it at one fault per block.
 * A second thread seen switches to that mode until ONE_THREAD_AGAIN operations in a row came
 * from a single thread. Counted under retain_lock, which each of them takes. */
#define TRIM_SLACK ((size_t)256 << 10)
#define ONE_THREAD_AGAIN 65536u

/* Its address tells threads apart without a system call. */
static __thread char thread_marker __attribute__((tls_model("initial-exec")));
static const void *last_thread;     /* the thread of the last kept-mapping operation */
static unsigned same_thread_ops;    /* operations in a row from last_thread */
static bool several_threads;        /* another thread came since the last long single-thread run */

/* Counts a kept-mapping operation of the calling thread (under retain_lock). */
static void count_thread_locked(void)
{
    const void *me = &thread_marker;
    if (last_thread != me) {
        if (last_thread != NULL)
            fm_store_relaxed(&several_threads, true); /* read by trim_stale without the lock */
        last_thread = me;
        same_thread_ops = 0;
    } else if (several_threads && ++same_thread_ops == ONE_THREAD_AGAIN) {
        fm_store_relaxed(&several_threads, false);
    }
}

/* The kept mapping of a block being freed, `used` bytes of it the block's: the pages earlier
 * users may have written more than TRIM_SLACK past its end go back to the OS if one thread
 * makes the large blocks; with several, all but the header's page every
 * FM_LARGE_SHORT_REUSES_PER_TRIM-th time. (A kept mapping never shrinks: touched <= map_size.) */
static void trim_stale(fm_large_header_t *h, size_t used)
{
    size_t touched = (size_t)h->touched_chunks << 16;
    if (used > touched)
        touched = used;
    if (touched <= used + TRIM_SLACK) {
        /* nothing stale beyond the slack */
    } else if (!fm_load_relaxed(&several_threads)) {
        fm_os_trim((char *)h->map_base + used + TRIM_SLACK, touched - used - TRIM_SLACK);
        touched = used + TRIM_SLACK;
        h->short_reuses = 0;
    } else if (++h->short_reuses >= FM_LARGE_SHORT_REUSES_PER_TRIM) {
        size_t page = fm_os_page_size(); /* the header's page stays */
        fm_os_trim((char *)h->map_base + page, touched - page);
        touched = FM_LARGE_GRANULARITY; /* in chunks: the one holding the header */
        h->short_reuses = 0;
    }
    h->touched_chunks = (uint32_t)(touched >> 16);
}

/* How many bytes of freed mappings may be kept (under retain_lock): a third of the OS memory
 * the allocator holds besides them, at least RETAIN_BYTES and at most RETAIN_MAX_BYTES. With a
 * fixed 32 MiB, a program whose live large blocks are hundreds of MiB (mimalloc-bench's
 * malloc-large: 20 live blocks of 5-25 MiB, each zeroed by its user) unmaps nearly every freed
 * block and faults every page of the next one in again (6.1 M page faults against glibc's 0.5 M,
 * 2.7x its time); glibc keeps such blocks in its heap. Counted at every free, the budget follows
 * the heap down too: when the program has freed its big blocks, the next free evicts the kept
 * ones down to what the rest allows. */
static size_t retain_budget_locked(void)
{
    size_t mapped = fm_os_mapped_bytes();
    size_t b = (mapped > retained_bytes ? mapped - retained_bytes : 0) / RETAIN_SHARE;
    return b < RETAIN_BYTES ? RETAIN_BYTES : b > RETAIN_MAX_BYTES ? RETAIN_MAX_BYTES : b;
}

/* The oldest kept mappings given back until the rest fit the budget of the heap as it is now
 * (fastmm_process_pending_frees: a program that freed its big blocks without a large free
 * since would otherwise keep a third of its former heap). */
void fm_large_fit_kept_to_heap(void)
{
    if (fm_load_relaxed(&retained_count) == 0)
        return;
    fm_large_header_t *evicted[RETAIN_COUNT];
    unsigned n = 0;
    fm_lock_wait(&retain_lock);
    size_t budget = retain_budget_locked();
    while (retained_count != 0 && retained_bytes > budget) {
        evicted[n++] = retained[0];
        retained_bytes -= retained_size[0];
        fm_store_relaxed(&retained_count, retained_count - 1);
        for (unsigned i = 0; i < retained_count; i++) {
            retained[i] = retained[i + 1];
            retained_size[i] = retained_size[i + 1];
        }
    }
    fm_lock_release(&retain_lock);
    for (unsigned i = 0; i < n; i++)
        unmap_block(evicted[i]);
}

/* A kept mapping has its header at its start; an aligned block's header is just before its
 * aligned user pointer, in the mapping's first chunk. Moves h to `to` in the same mapping and
 * points the ownership map there. The old place's flag word is cleared: a stale pointer to it
 * decodes as no block. */
static fm_large_header_t *move_header(fm_large_header_t *h, void *to)
{
    if ((void *)h == to)
        return h;
    fm_large_header_t *moved = to; /* 64-byte aligned and distinct from h: no overlap */
    fm_track_internal(moved, sizeof *moved); /* under memcheck: a freed user's bytes before */
    *moved = *h;
    /* the mapping is registered, so the map's leaves exist: this cannot fail */
    fm_pagemap_register(moved->map_base, moved->map_size, moved, FM_REGION_LARGE);
    fm_store_relaxed(&h->flags, (uint16_t)0);
    return moved;
}

/* Gives a freed block's mapping back, or keeps it; the oldest kept ones make room. */
static void release(fm_large_header_t *h)
{
    /* its user may have written up to the end of the block, not into the spare chunks */
    size_t used = h->map_size - ((size_t)h->spare_chunks << 16);
    drop_spare(h, 0);
    if (h->map_size > RETAIN_MAX_BYTES / 2 || fm_load_relaxed(&fm_debug_on) || fm_os_limit() != 0 ||
        fm_load_relaxed(&fm_options.strategy) == FM_STRATEGY_LOW_MEMORY || (fm_load_relaxed(&h->flags) & FM_FLAG_DEBUG_INFO)) {
        unmap_block(h);
        return;
    }
    h = move_header(h, h->map_base);
    /* In a heap big enough that the kept mappings' budget is above its floor, they hold a bounded
     * share of it whichever of their pages are resident, and a trim here only makes the next
     * user fault the pages in again (malloc-large: 943 madvise calls for 2000 frees). */
    if (fm_os_mapped_bytes() <= (size_t)RETAIN_SHARE * RETAIN_BYTES)
        trim_stale(h, used);
    fm_store_relaxed(&h->flags, (uint16_t)(FM_FLAG_LARGE | FM_FLAG_FREE));
    fm_large_header_t *evicted[RETAIN_COUNT];
    unsigned n = 0;
    fm_lock_wait(&retain_lock);
    count_thread_locked();
    size_t budget = retain_budget_locked();
    bool keep = h->map_size <= budget / 2;
    size_t adding = keep ? h->map_size : 0;
    while ((keep && retained_count == RETAIN_COUNT) || retained_bytes + adding > budget) {
        evicted[n] = retained[0];
        retained_bytes -= retained_size[0];
        n++;
        fm_store_relaxed(&retained_count, retained_count - 1);
        for (unsigned i = 0; i < retained_count; i++) {
            retained[i] = retained[i + 1];
            retained_size[i] = retained_size[i + 1];
        }
    }
    if (keep) {
        retained[retained_count] = h;
        retained_size[retained_count] = h->map_size;
        fm_store_relaxed(&retained_count, retained_count + 1);
        retained_bytes += h->map_size;
    }
    fm_lock_release(&retain_lock);
    if (!keep)
        unmap_block(h);
    for (unsigned i = 0; i < n; i++)
        unmap_block(evicted[i]);
}

/* Spare chunks of live blocks that may hold stale pages (an earlier user of the mapping wrote
 * there), all together, stay under a budget: the OS memory they hold is bounded (retained +
 * spare <= 64 MiB) however many small requests take big mappings. Spare chunks no user wrote
 * hold no memory and are not counted. The budget, FM_LARGE_SPARE_BUDGET (32 MiB), is in
 * internal.h: the tests fill it. */
static size_t spare_bytes;

static bool charge_spare(size_t bytes)
{
    size_t now = fm_load_relaxed(&spare_bytes);
    do {
        if (now + bytes > FM_LARGE_SPARE_BUDGET)
            return false;
    } while (!__atomic_compare_exchange_n(&spare_bytes, &now, now + bytes, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    return true;
}

/* The block keeps `keep` bytes of spare chunks (fewer: a resize grew into them; 0: it is freed
 * or moved); the charged part beyond that leaves the budget. */
static void drop_spare(fm_large_header_t *h, size_t keep)
{
    size_t charged = (size_t)h->charged_chunks << 16;
    if (charged > keep) {
        __atomic_fetch_sub(&spare_bytes, charged - keep, __ATOMIC_RELAXED);
        h->charged_chunks = (uint16_t)(keep >> 16);
    }
    h->spare_chunks = (uint32_t)(keep >> 16);
}

/* Where the header of a block aligned to `alignment` (0: unaligned) goes in a mapping at base:
 * 64 bytes before the first aligned address at least 64 bytes in. Mappings start at a chunk
 * boundary, so this is `alignment` - 64 bytes in for alignments up to a chunk. */
static size_t header_offset(uintptr_t base, size_t alignment)
{
    size_t lead = alignment > FM_LARGE_HEADER ? fm_align_up(base + FM_LARGE_HEADER, alignment) - base : FM_LARGE_HEADER;
    return lead - FM_LARGE_HEADER;
}

/* The smallest kept mapping that holds a block of `size` bytes aligned to `alignment`, taken out
 * with its header in place; NULL if none. What earlier users wrote before an aligned block's
 * header (less than its alignment) stays resident while the block lives. */
static fm_large_header_t *take_retained(size_t size, size_t alignment)
{
    if (fm_load_relaxed(&retained_count) == 0)
        return NULL;
    size_t bytes = FM_LARGE_HEADER + (size != 0 ? size : 1);
    fm_lock_wait(&retain_lock);
    count_thread_locked();
    unsigned best = RETAIN_COUNT;
    for (unsigned i = 0; i < retained_count; i++) {
        /* a kept mapping's header is at its start: retained[i] is its base */
        size_t need = fm_align_up(header_offset((uintptr_t)retained[i], alignment) + bytes, FM_LARGE_GRANULARITY);
        if (retained_size[i] >= need && (best == RETAIN_COUNT || retained_size[i] < retained_size[best]))
            best = i;
    }
    fm_large_header_t *h = NULL;
    if (best != RETAIN_COUNT) {
        h = retained[best];
        retained_bytes -= retained_size[best];
        fm_store_relaxed(&retained_count, retained_count - 1);
        for (unsigned i = best; i < retained_count; i++) {
            retained[i] = retained[i + 1];
            retained_size[i] = retained_size[i + 1];
        }
    }
    fm_lock_release(&retain_lock);
    if (h == NULL)
        return NULL;
    size_t offset = header_offset((uintptr_t)h->map_base, alignment);
    h = move_header(h, (char *)h->map_base + offset);
    /* what a fresh mapping for the block is once its unused chunks are given back */
    size_t map_size = fm_align_up(offset + bytes, FM_LARGE_GRANULARITY);
    /* Beyond the block: spare chunks. Where earlier users wrote them, they count in the budget;
     * over it, those pages go back now and the mapping stays whole (cutting it to the block's
     * size would make the kept mappings ever smaller: sweep-large at 2 threads then makes
     * 130-230 fresh mappings per run instead of 50-80, each page of them a fault). */
    h->spare_chunks = (uint32_t)((h->map_size - map_size) >> 16);
    h->charged_chunks = 0;
    size_t touched = (size_t)h->touched_chunks << 16;
    if (touched > map_size) {
        size_t stale = touched - map_size;
        if (charge_spare(stale)) {
            h->charged_chunks = (uint16_t)(stale >> 16);
        } else {
            fm_os_trim((char *)h->map_base + map_size, stale);
            h->touched_chunks = (uint32_t)(map_size >> 16);
        }
    }
    return h;
}

/* Gives every kept mapping back (malloc_trim, a refused mapping). Returns whether there were any. */
bool fm_large_release_retained(void)
{
    fm_large_header_t *all[RETAIN_COUNT];
    fm_lock_wait(&retain_lock);
    unsigned n = retained_count;
    for (unsigned i = 0; i < n; i++)
        all[i] = retained[i];
    fm_store_relaxed(&retained_count, 0u);
    retained_bytes = 0;
    fm_lock_release(&retain_lock);
    for (unsigned i = 0; i < n; i++)
        unmap_block(all[i]);
    return n != 0;
}

/* Takes an arena lock, trying each in turn and yielding when all are busy. */
static fm_large_manager_t *lock_any(void)
{
    for (;;) {
        for (unsigned a = 0; a < FM_LARGE_ARENAS; a++)
            if (fm_lock_try(&fm_large_managers[a].lock))
                return &fm_large_managers[a];
        fm_add_relaxed(&contention, 1);
        fm_os_yield();
    }
}

static void drain_locked(fm_large_manager_t *m, fm_large_header_t **to_release)
{
    for (void *b = fm_pending_take(&m->pending); b != NULL;) {
        void *next = fm_link_get(b);
        fm_large_header_t *h = fm_large_header_of(b);
        unlink_locked(m, h);
        h->next = *to_release; /* unmapped after the lock is dropped */
        *to_release = h;
        b = next;
    }
}

static void release_list(fm_large_header_t *h)
{
    while (h != NULL) {
        fm_large_header_t *next = h->next;
        release(h);
        h = next;
    }
}

bool fm_large_drain_all(void)
{
    bool all = true;
    for (unsigned a = 0; a < FM_LARGE_ARENAS; a++) {
        fm_large_manager_t *m = &fm_large_managers[a];
        if (fm_load_relaxed(&m->pending) == NULL)
            continue;
        fm_large_header_t *done = NULL;
        if (fm_lock_try(&m->lock)) {
            drain_locked(m, &done);
            fm_lock_release(&m->lock);
            release_list(done);
        } else {
            all = false;
        }
    }
    return all;
}

/* Maps a block with its user pointer aligned to `alignment` (64 is free: the header is 64 bytes
 * at a chunk boundary), from a kept mapping if one fits; larger alignments map extra room and
 * give back the unused chunks. */
static fm_large_header_t *map_block(size_t size, size_t alignment)
{
    size_t extra = alignment > FM_LARGE_HEADER ? alignment : 0;
    if (size > (size_t)PTRDIFF_MAX - FM_LARGE_HEADER - extra - FM_LARGE_GRANULARITY)
        return NULL;
    fm_large_header_t *h = take_retained(size, alignment);
    if (h != NULL) {
        h->user_size = size;
        h->recycled = 1;
        fm_store_relaxed(&h->flags, (uint16_t)FM_FLAG_LARGE);
        return h;
    }
    size_t map_size = fm_align_up(size + FM_LARGE_HEADER + extra, FM_LARGE_GRANULARITY);
    char *base = fm_os_map(map_size);
    if (base == NULL && fm_large_release_retained())
        base = fm_os_map(map_size);
    if (base == NULL)
        return NULL;
    char *user = base + header_offset((uintptr_t)base, alignment) + FM_LARGE_HEADER;
    char *front = (char *)fm_align_down((uintptr_t)user - FM_LARGE_HEADER, FM_OS_CHUNK);
    /* the chunk holding the user pointer must stay mapped even for a zero-byte request */
    char *end = (char *)fm_align_up((uintptr_t)user + (size != 0 ? size : 1), FM_OS_CHUNK);
    if (front > base)
        fm_os_unmap(base, (size_t)(front - base));
    if (end < base + map_size)
        fm_os_unmap(end, (size_t)(base + map_size - end));
    h = fm_large_header_of(user);
    h->map_base = front;
    h->map_size = (size_t)(end - front);
    h->user_size = size;
    h->spare_chunks = 0;
    h->charged_chunks = 0;
    h->touched_chunks = 0;
    h->short_reuses = 0;
    h->recycled = 0;
    h->flags = FM_FLAG_LARGE;
    if (!fm_pagemap_register(front, h->map_size, h, FM_REGION_LARGE)) {
        fm_os_unmap(front, h->map_size);
        return NULL;
    }
    return h;
}

void *fm_large_alloc(size_t size, size_t alignment)
{
    fm_large_drain_all();
    fm_large_header_t *h = map_block(size, alignment);
    if (h == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    fm_large_manager_t *m = lock_any();
    link_locked(m, h);
    m->served++;
    fm_lock_release(&m->lock);
    return (char *)h + FM_LARGE_HEADER;
}

void fm_large_free(void *p)
{
    fm_large_header_t *h = fm_large_header_of(p);
    fm_large_manager_t *m = h->manager;
    if (!fm_lock_try(&m->lock)) {
        fm_pending_push(&m->pending, p);
        return;
    }
    unlink_locked(m, h);
    fm_lock_release(&m->lock);
    release(h);
    fm_large_drain_all();
}

/* Resizes the mapping under p to hold new_size user bytes: in place if the kernel can extend it,
 * else by moving the pages. Returns the (possibly new) user pointer, or NULL leaving p intact. */
void *fm_large_resize(void *p, size_t new_size)
{
    fm_large_header_t *h = fm_large_header_of(p);
    char *base = h->map_base;
    size_t lead = (size_t)((char *)p - base);
    if (new_size > (size_t)PTRDIFF_MAX - lead - FM_LARGE_GRANULARITY)
        return NULL;
    size_t old_map = h->map_size;
    size_t new_map = fm_align_up(lead + new_size, FM_LARGE_GRANULARITY);
    if (new_map <= old_map) {
        size_t nominal = old_map - ((size_t)h->spare_chunks << 16);
        if (new_map > nominal) /* grows into the spare chunks */
            drop_spare(h, old_map - new_map);
        h->user_size = new_size;
        return p;
    }
    if (fm_os_grow_in_place(base, old_map, new_map)) {
        if (fm_pagemap_register(base + old_map, new_map - old_map, h, FM_REGION_LARGE)) {
            drop_spare(h, 0);
            h->map_size = new_map;
            h->user_size = new_size;
            return p;
        }
        fm_os_unmap(base + old_map, new_map - old_map);
    }
    /* Move: onto a target reserved and described in the ownership map first, so that a failure
     * at any step leaves the block where it was, mapped and registered (nothing is lost). */
    char *target = fm_os_move_target(old_map, new_map);
    if (target == NULL)
        return NULL;
    fm_large_header_t *moved_h = (fm_large_header_t *)(target + lead - FM_LARGE_HEADER);
    if (!fm_pagemap_register(target, new_map, moved_h, FM_REGION_LARGE)) {
        fm_os_drop_move_target(target, old_map, new_map);
        return NULL;
    }
    /* The block leaves its arena list and the map while its address changes. */
    fm_large_manager_t *m = h->manager;
    fm_lock_wait(&m->lock);
    unlink_locked(m, h);
    fm_lock_release(&m->lock);
    fm_pagemap_unregister(base, old_map);
    if (fm_os_move_onto(base, old_map, new_map, target)) {
        h = moved_h;
        drop_spare(h, 0); /* the new mapping is exactly the block */
        h->map_base = target;
        h->map_size = new_map;
        h->user_size = new_size;
    } else {
        fm_pagemap_unregister(target, new_map);
        fm_os_drop_move_target(target, old_map, new_map);
        /* its leaves exist (it was registered a moment ago): this cannot fail */
        fm_pagemap_register(base, old_map, h, FM_REGION_LARGE);
    }
    m = lock_any();
    link_locked(m, h);
    fm_lock_release(&m->lock);
    return h == moved_h ? (char *)h + FM_LARGE_HEADER : NULL;
}

void fm_large_lock_all(void)
{
    for (unsigned a = 0; a < FM_LARGE_ARENAS; a++)
        fm_lock_wait(&fm_large_managers[a].lock);
    fm_lock_wait(&retain_lock);
}

void fm_large_unlock_all(void)
{
    fm_lock_release(&retain_lock);
    for (unsigned a = 0; a < FM_LARGE_ARENAS; a++)
        fm_lock_release(&fm_large_managers[a].lock);
}

uint64_t fm_large_contention(void) { return fm_load_relaxed(&contention); }

void fm_large_collect(fm_usage_detail_t *d)
{
    for (unsigned a = 0; a < FM_LARGE_ARENAS; a++) {
        fm_large_manager_t *m = &fm_large_managers[a];
        fm_lock_wait(&m->lock);
        for (const fm_large_header_t *h = m->first; h != NULL; h = h->next) {
            d->large_blocks++;
            d->large_used_bytes += fm_large_usable(h);
            d->large_mapped_bytes += h->map_size;
        }
        fm_lock_release(&m->lock);
    }
}

size_t fm_large_visit_debug_blocks(bool (*check)(const void *outer))
{
    size_t corrupt = 0;
    for (unsigned a = 0; a < FM_LARGE_ARENAS; a++) {
        fm_large_manager_t *m = &fm_large_managers[a];
        fm_lock_wait(&m->lock);
        for (fm_large_header_t *h = m->first; h != NULL; h = h->next)
            if (fm_load_relaxed(&h->flags) & FM_FLAG_DEBUG_INFO)
                corrupt += check((char *)h + FM_LARGE_HEADER);
        fm_lock_release(&m->lock);
    }
    return corrupt;
}

void fm_large_visit_used(void (*visit)(void *block, size_t usable, void *arg), void *arg)
{
    for (unsigned a = 0; a < FM_LARGE_ARENAS; a++) {
        fm_large_manager_t *m = &fm_large_managers[a];
        fm_lock_wait(&m->lock);
        for (fm_large_header_t *h = m->first; h != NULL; h = h->next)
            if (!(fm_load_relaxed(&h->flags) & FM_FLAG_FREE))
                visit((char *)h + FM_LARGE_HEADER, fm_large_usable(h), arg);
        fm_lock_release(&m->lock);
    }
}

bool fm_large_walk(fm_walk_visit_t visit, void *arg, uint64_t deadline_ms)
{
    bool complete = true;
    for (unsigned a = 0; a < FM_LARGE_ARENAS; a++) {
        fm_large_manager_t *m = &fm_large_managers[a];
        bool held = deadline_ms == FM_WALK_LOCKS_HELD, locked = held;
        while (!locked && !(locked = fm_lock_try(&m->lock)) && fm_os_time_ms() < deadline_ms)
            fm_os_yield();
        if (!locked) {
            complete = false;
            continue;
        }
        for (fm_large_header_t *h = m->first; h != NULL; h = h->next) {
            uint16_t flags = fm_load_relaxed(&h->flags);
            fm_walk_record_t r = {(char *)h + FM_LARGE_HEADER, h->map_size, fm_large_usable(h), flags,
                                  FM_WALK_LARGE_BLOCK, a, (flags & FM_FLAG_FREE) != 0, 0, 0};
            visit(&r, arg);
        }
        if (!held)
            fm_lock_release(&m->lock);
    }
    return complete;
}
