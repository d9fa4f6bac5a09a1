/*
 * small.c - the small block manager: requests of 0 .. 2622 bytes in FastMM5's 51 size classes
 * (61 on 32-bit), served from spans that are themselves medium blocks (doc/fastmm5-facts.md 2.3, 2.7, 11.1-2).
 *
 * A block comes from, in order: the class's pending-free stack, a partially free span, or the
 * lock-free sequential feed of the newest span (handed out from its top block downwards).
 * Each (arena, class) pair has its own manager and lock; a thread that finds one locked moves on
 * to the next arena, and a free that finds its owner locked is queued, never waited for.
 */
#include "internal.h"

fm_small_manager_t fm_small_managers[FM_SMALL_ARENAS][FM_SMALL_INDEX_COUNT];
static uint64_t contention;
bool fm_small_keep_empty_spans; /* debug option FASTMM_DEBUG_NEVER_FREE_SMALL_SPANS */

#define FEED_OFFSET(v) ((uint32_t)(v))
#define FEED_ABA(v) ((v) >> 32)
#define FEED_PACK(aba, offset) (((uint64_t)(aba) << 32) | (uint32_t)(offset))

/* FastMM5's span sizing (doc/fastmm5-facts.md 2.3): at least 16 blocks; ideally 64, within 19264 .. 101184. */
static void size_spans(fm_small_manager_t *m)
{
    size_t bs = m->block_size;
    size_t target = 64 * bs;
    if (target < FM_SMALL_OPTIMAL_SPAN_LOWER)
        target = FM_SMALL_OPTIMAL_SPAN_LOWER;
    if (target > FM_SMALL_OPTIMAL_SPAN_UPPER)
        target = FM_SMALL_OPTIMAL_SPAN_UPPER;
    size_t span_overhead = fm_small_manager_head(m) - 2;
    m->min_span_size = (uint32_t)fm_medium_round_request(FM_SMALL_MIN_BLOCKS_PER_SPAN * bs + span_overhead);
    m->optimal_span_size = (uint32_t)fm_medium_round_request(target / bs * bs + span_overhead);
}

uintptr_t fm_small_seal_key;

void fm_small_init(void) { fm_small_seal_key = fm_os_random_word() | 1u; }

/* A manager is set up (its class's constants written) when its first span is made, under its
 * lock: a class no thread uses in an arena leaves its manager unwritten, and a .bss page never
 * written costs no memory (4 arenas x 51 managers are 13 KiB). Code that reads these fields
 * without the lock first sees a feed offset or a span that only exist after the set-up. */
static void set_up_locked(fm_small_manager_t *m)
{
    size_t index = (size_t)(m - &fm_small_managers[0][0]);
    unsigned c = (unsigned)(index % FM_SMALL_INDEX_COUNT);
    m->block_size = fm_small_class_sizes[c];
    m->class_index = (uint16_t)c;
    m->arena = (uint32_t)(index / FM_SMALL_INDEX_COUNT);
    m->reciprocal = (uint32_t)((((uint64_t)1 << 32) + m->block_size - 1) / m->block_size);
    size_spans(m);
}

/* The inverse of an odd number modulo 2^32, by Newton's iteration: odd * odd is 1 modulo 8,
 * and each step doubles the bits that are right (3, 6, 12, 24, 48). */
static uint32_t odd_inverse(uint32_t odd)
{
    uint32_t x = odd;
    for (int i = 0; i < 4; i++)
        x *= 2u - odd * x;
    return x;
}

FM_INLINE uint16_t flags_for(const fm_small_span_t *span, const void *p)
{
    return (uint16_t)((((uintptr_t)p - (uintptr_t)span) & ~(uintptr_t)63) >> 3) | FM_FLAG_SMALL;
}

/* ---- partially-free span list ---- */

/* partial_head is also read without the lock (a hint whether locking is worth it): stored
 * atomically. */
static void partial_insert(fm_small_manager_t *m, fm_small_span_t *s)
{
    s->prev_partial = NULL;
    s->next_partial = m->partial_head;
    if (m->partial_head != NULL)
        m->partial_head->prev_partial = s;
    fm_store_relaxed(&m->partial_head, s);
    s->in_partial_list = 1;
}

static void partial_remove(fm_small_manager_t *m, fm_small_span_t *s)
{
    if (s->prev_partial != NULL)
        s->prev_partial->next_partial = s->next_partial;
    else
        fm_store_relaxed(&m->partial_head, s->next_partial);
    if (s->next_partial != NULL)
        s->next_partial->prev_partial = s->prev_partial;
    s->in_partial_list = 0;
}

/* A span's count of blocks in use changes under its manager's lock, but the usage statistics
 * read it without that lock (medium.c, collect_block): atomic accesses, plain moves on x86. */
static uint32_t change_in_use(fm_small_span_t *s, int delta)
{
    uint32_t n = fm_load_relaxed(&s->blocks_in_use) + (uint32_t)delta;
    fm_store_relaxed(&s->blocks_in_use, n);
    return n;
}

/* ---- freeing (manager locked) ---- */

static void release_span_locked(fm_small_manager_t *m, fm_small_span_t *s)
{
    if (s->in_partial_list)
        partial_remove(m, s);
    if (m->feed_span == s) {
        /* fully fed, or its blocks could not all be free; stop anyone reading it */
        fm_store_release(&m->feed, FEED_PACK(FEED_ABA(m->feed) + 1, 0));
        fm_store_release(&m->feed_span, NULL);
    }
    fm_medium_header_t *h = fm_medium_header_of(s);
    fm_track_internal(s, fm_medium_block_size(s) - FM_MEDIUM_HEADER); /* no block's slack is inaccessible now */
    fm_store_relaxed(&s->seal, 0); /* a stale pointer into this memory must not pass for a block */
    fm_store_relaxed(&h->is_small_span, 0);
    fm_flags_set(s, fm_flags_get(s) | FM_FLAG_FREE);
    fm_medium_free(s);
}

/* Puts back a run of k blocks of span s, linked from first to last (last's link is rewritten). */
static void free_run_locked(fm_small_manager_t *m, fm_small_span_t *s, void *first, void *last, uint32_t k)
{
    if (change_in_use(s, -(int)k) == 0 && !fm_load_relaxed(&fm_small_keep_empty_spans)) {
        release_span_locked(m, s);
        return;
    }
    if (s->first_free == NULL)
        s->last_free = last;
    fm_link_set(last, s->first_free);
    s->first_free = first;
    if (!s->in_partial_list)
        partial_insert(m, s);
}

static void free_locked(fm_small_manager_t *m, void *p)
{
    free_run_locked(m, fm_small_span_named(p, fm_flags_get(p)), p, p, 1);
}

/* The blocks that follow `first` on its chain in the same span: a chain cut from a thread
 * cache's stack, or a pending stack, holds blocks freed in the order they were allocated, and
 * those are mostly neighbours (the feed and a span's free list hand a span's blocks out
 * together). A chain holds only blocks, so one that lies inside the span's blocks is one of
 * them: no flag word is read. Returns the run's last block; *k: its length, *s: its span. */
static void *run_of(void *first, uint32_t limit, fm_small_span_t **s, uint32_t *k)
{
    fm_small_span_t *span = fm_small_span_named(first, fm_flags_get(first));
    uintptr_t start = (uintptr_t)span + span->head;
    uintptr_t length = (uintptr_t)span->total_blocks * span->block_size;
    void *last = first;
    uint32_t n = 1;
    for (void *next; n < limit && (next = fm_link_get(last)) != NULL && (uintptr_t)next - start < length; n++)
        last = next;
    *s = span;
    *k = n;
    return last;
}

/* A chain of m's blocks back to their spans, a run of neighbours at a time. */
static void free_chain_locked(fm_small_manager_t *m, void *b)
{
    while (b != NULL) {
        fm_small_span_t *s;
        uint32_t k;
        void *last = run_of(b, UINT32_MAX, &s, &k);
        void *next = fm_link_get(last);
        free_run_locked(m, s, b, last, k);
        b = next;
    }
}

/* ---- allocation ---- */

static void *take_locked(fm_small_manager_t *m)
{
    void *b = fm_pending_take(&m->pending);
    if (b != NULL) {
        free_chain_locked(m, fm_link_get(b)); /* reuse the head, free the rest (FastMM5 11.2) */
    } else {
        fm_small_span_t *s = m->partial_head;
        if (s == NULL)
            return NULL;
        b = s->first_free;
        s->first_free = fm_link_get(b);
        change_in_use(s, 1);
        if (s->first_free == NULL)
            partial_remove(m, s);
    }
    fm_flags_set(b, fm_flags_get(b) & ~FM_FLAG_FREE);
    m->served++;
    return b;
}

/* The feed has handed out the blocks from `offset` up. Feeds of one span may finish out of order
 * (two threads, two compare-and-swaps): the floor only ever moves down. Sequenced before the
 * block is returned, so whoever frees it sees the floor at or below it. */
static void lower_fed_floor(fm_small_span_t *s, uint32_t offset)
{
    uint32_t old = fm_load_relaxed(&s->fed_floor);
    while (offset < old && !__atomic_compare_exchange_n(&s->fed_floor, &old, offset, true, __ATOMIC_RELAXED,
                                                        __ATOMIC_RELAXED))
        ;
}

/* Lock-free: claim the next block below the last one fed by moving the offset down. */
static void *feed_try(fm_small_manager_t *m)
{
    uint64_t old = fm_load_acquire(&m->feed);
    uint32_t head = fm_small_manager_head(m);
    for (;;) {
        uint32_t offset = FEED_OFFSET(old);
        if (offset < head)
            return NULL; /* no feed span: m may not even be set up (block_size) */
        if (offset < head + m->block_size)
            return NULL;
        fm_small_span_t *s = fm_load_acquire(&m->feed_span);
        uint32_t next = offset - m->block_size;
        if (fm_cas_acq_rel(&m->feed, &old, FEED_PACK(FEED_ABA(old) + 1, next))) {
            void *b = (char *)s + next;
            lower_fed_floor(s, next);
            fm_flags_set(b, flags_for(s, b));
            return b;
        }
    }
}

static void *new_span_locked(fm_small_manager_t *m)
{
    if (m->block_size == 0)
        set_up_locked(m);
    fm_small_span_t *s = fm_medium_alloc(m->optimal_span_size, true);
    if (s == NULL)
        s = fm_medium_alloc(m->min_span_size, true);
    if (s == NULL)
        return NULL;
    uint32_t head = fm_small_manager_head(m);
    size_t blocks = (fm_medium_block_size(s) - head - FM_MEDIUM_HEADER + 2) / m->block_size;
    s->next_partial = s->prev_partial = NULL;
    s->first_free = NULL;
    s->in_partial_list = 0;
    s->total_blocks = (uint32_t)blocks;
    fm_store_relaxed(&s->blocks_in_use, (uint32_t)blocks); /* unfed blocks count as in use */
    s->odd_shift = (uint8_t)fm_ctz32(m->block_size);
    s->odd_inverse = odd_inverse(m->block_size >> s->odd_shift);
    s->block_size = m->block_size;
    s->class_index = (uint8_t)m->class_index;
    s->head = head;
    fm_store_relaxed(&s->seal, fm_small_seal_of(s));
    /* The blocks below the top one are not touched until the feed hands them out (their pages
     * stay unfaulted): their memory may hold anything, an earlier block's user data too, so
     * free() must never read a flag word there - it checks fed_floor first (fm_small_is_fed). */
    uint32_t top = head + (uint32_t)((blocks - 1) * m->block_size);
    fm_store_relaxed(&s->fed_floor, top);
    void *b = (char *)s + top;
    fm_flags_set(b, flags_for(s, b));
    /* The walker and the statistics find the span as soon as the medium manager has handed it
     * out; they take it for a small span only once it names its manager (fm_medium_alloc
     * cleared the field), so the manager is stored last. */
    fm_store_release(&s->manager, m);
    /* publish: stop the feed, switch the span, restart the feed below the block we keep */
    uint64_t aba = FEED_ABA(m->feed);
    fm_store_release(&m->feed, FEED_PACK(aba + 1, 0));
    fm_store_release(&m->feed_span, s);
    fm_store_release(&m->feed, FEED_PACK(aba + 2, top));
    m->served += blocks; /* every block of a feed span is handed out once (see fm_small_served) */
    return b;
}

static void *alloc_unvetted(unsigned class_index);

void *fm_small_alloc(unsigned class_index)
{
    for (;;) {
        void *b = alloc_unvetted(class_index);
        if (b == NULL || !(fm_flags_get(b) & FM_FLAG_DEBUG_INFO))
            return b;
        fm_flags_set(b, fm_flags_get(b) | FM_FLAG_FREE); /* the check expects the freed state */
        if (fm_hooks.debug_check_reuse(b)) {
            fm_flags_set(b, fm_flags_get(b) & ~FM_FLAG_FREE);
            return b;
        }
    }
}

/* Whether m may have a free block to take: read without its lock, so only a hint that spares
 * taking the lock of a manager with none. */
static bool may_have_free(const fm_small_manager_t *m)
{
    return fm_load_relaxed(&m->pending) != NULL || fm_load_relaxed(&m->partial_head) != NULL;
}

static void *alloc_unvetted(unsigned class_index)
{
    for (;;) {
        /* Attempt 1: arenas with a free block to reuse, else their feed; no waiting anywhere. */
        for (unsigned a = 0; a < FM_SMALL_ARENAS; a++) {
            fm_small_manager_t *m = &fm_small_managers[a][class_index];
            if (may_have_free(m) && fm_lock_try(&m->lock)) {
                void *b = take_locked(m);
                fm_lock_release(&m->lock);
                if (b != NULL)
                    return b;
            }
            void *b = feed_try(m);
            if (b != NULL)
                return b;
        }
        /* Attempt 2: the first arena we can lock, with a new span if needed. */
        for (unsigned a = 0; a < FM_SMALL_ARENAS; a++) {
            fm_small_manager_t *m = &fm_small_managers[a][class_index];
            if (!fm_lock_try(&m->lock))
                continue;
            void *b = take_locked(m);
            if (b == NULL)
                b = feed_try(m);
            if (b == NULL)
                b = new_span_locked(m);
            fm_lock_release(&m->lock);
            return b; /* NULL only when the OS refused memory */
        }
        fm_add_relaxed(&contention, 1);
        fm_os_yield();
    }
}

/* ---- batches for the thread caches (tcache.c): blocks linked through their first word and
 * left flagged FREE, as the cache keeps them ---- */

/* At least `want` blocks where m has them, at most `most`: the pending stack cut as it is linked,
 * then the partial spans' free lists. A span's whole list is taken without reading its blocks
 * (its length is total_blocks - blocks_in_use, its last block last_free), so the lock is not
 * held across a chain of cache misses in blocks another thread freed last; only the list that
 * would take the batch past `most` is walked, to cut it after `want`. */
static unsigned take_many_locked(fm_small_manager_t *m, void **chain, unsigned want, unsigned most)
{
    unsigned n = 0;
    void *head = fm_pending_take(&m->pending);
    if (head != NULL) {
        void *last = head;
        for (n = 1; n < want && fm_link_get(last) != NULL; n++)
            last = fm_link_get(last);
        void *more = fm_link_get(last);
        fm_link_set(last, NULL);
        free_chain_locked(m, more); /* more than wanted: back to their spans */
    }
    while (n < want && m->partial_head != NULL) {
        fm_small_span_t *s = m->partial_head;
        void *first = s->first_free, *last;
        uint32_t k = s->total_blocks - fm_load_relaxed(&s->blocks_in_use);
        if (n + k <= most) {
            last = s->last_free;
            s->first_free = NULL;
        } else {
            last = first;
            for (k = 1; n + k < want && fm_link_get(last) != NULL; k++)
                last = fm_link_get(last);
            s->first_free = fm_link_get(last);
        }
        change_in_use(s, (int)k);
        if (s->first_free == NULL)
            partial_remove(m, s);
        fm_link_set(last, head);
        head = first;
        n += k;
    }
    m->served += n;
    *chain = head;
    return n;
}

/* Lock-free: claims up to `want` blocks of the feed with one compare-and-swap. */
static unsigned feed_try_many(fm_small_manager_t *m, void **chain, unsigned want)
{
    uint64_t old = fm_load_acquire(&m->feed);
    uint32_t head = fm_small_manager_head(m);
    for (;;) {
        uint32_t offset = FEED_OFFSET(old);
        if (offset < head)
            return 0; /* no feed span: m may not even be set up (block_size) */
        if (offset < head + m->block_size)
            return 0;
        unsigned available = (offset - head) / m->block_size;
        unsigned k = available < want ? available : want;
        fm_small_span_t *s = fm_load_acquire(&m->feed_span);
        uint32_t low = offset - k * m->block_size;
        if (fm_cas_acq_rel(&m->feed, &old, FEED_PACK(FEED_ABA(old) + 1, low))) {
            lower_fed_floor(s, low);
            size_t size = m->block_size;
            char *b = (char *)s + low;
            void *head = *chain;
            for (unsigned i = 0; i < k; i++, b += size) {
                fm_flags_set(b, flags_for(s, b) | FM_FLAG_FREE);
                fm_link_set(b, head);
                head = b;
            }
            *chain = head;
            return k;
        }
    }
}

/* From m, locked: its free blocks, else its feed, else a new span's (0 only when the OS refused
 * memory). */
static unsigned refill_locked(fm_small_manager_t *m, void **chain, unsigned want, unsigned most)
{
    unsigned n = take_many_locked(m, chain, want, most);
    if (n == 0)
        n = feed_try_many(m, chain, want);
    if (n == 0) {
        void *b = new_span_locked(m);
        if (b != NULL) {
            fm_flags_set(b, fm_flags_get(b) | FM_FLAG_FREE);
            n = feed_try_many(m, chain, want - 1) + 1;
            fm_link_set(b, *chain);
            *chain = b;
        }
    }
    return n;
}

/* m's free blocks, if it has some and its lock is free. */
static unsigned take_try(fm_small_manager_t *m, void **chain, unsigned want, unsigned most)
{
    unsigned n = 0;
    if (may_have_free(m) && fm_lock_try(&m->lock)) {
        n = take_many_locked(m, chain, want, most);
        fm_lock_release(&m->lock);
    }
    return n;
}

/* Class class_index's manager in the i-th arena after home (1 <= i < FM_SMALL_ARENAS). */
static fm_small_manager_t *after_home(unsigned home, unsigned i, unsigned class_index)
{
    return &fm_small_managers[(home + i) % FM_SMALL_ARENAS][class_index];
}

/* The blocks are handed out unvetted: the thread cache vets each one as it pops it (a freed
 * debug block's pattern, a plain block's flag word), as it vets the blocks other threads'
 * caches pass it.
 *
 * A thread's refills come from its home arena (fm_home_arena, as the medium arenas' scans do):
 * its free blocks, its feed, then the other arenas' free blocks (memory to reuse), then a new
 * span at home; another arena's feed or span only while another thread holds the home arena's
 * lock, and the other arenas' feeds when the OS refuses the home span.
 * FastMM5's single allocations take another arena's feed before a new span; for the caches
 * that would put two threads' new blocks side by side in one span, and a block's flag word lies
 * in the last bytes of its neighbour, so each free or reuse by one thread would read or write a
 * line the other thread's CPU holds (glibc's bench-malloc-thread, larson). */
unsigned fm_small_alloc_batch(unsigned class_index, void **chain, unsigned want, unsigned most)
{
    *chain = NULL;
    unsigned home = fm_home_arena();
    fm_small_manager_t *own = &fm_small_managers[home][class_index];
    for (;;) {
        unsigned n = take_try(own, chain, want, most);
        if (n == 0)
            n = feed_try_many(own, chain, want);
        for (unsigned i = 1; n == 0 && i < FM_SMALL_ARENAS; i++)
            n = take_try(after_home(home, i, class_index), chain, want, most);
        if (n != 0)
            return n;
        if (fm_lock_try(&own->lock)) {
            n = refill_locked(own, chain, want, most);
            fm_lock_release(&own->lock);
            /* 0: the OS refused a span; the other arenas' feeds, if any, before giving up */
            for (unsigned i = 1; n == 0 && i < FM_SMALL_ARENAS; i++)
                n = feed_try_many(after_home(home, i, class_index), chain, want);
            return n;
        }
        for (unsigned i = 1; i < FM_SMALL_ARENAS; i++) {
            fm_small_manager_t *m = after_home(home, i, class_index);
            if (!fm_lock_try(&m->lock))
                continue;
            n = refill_locked(m, chain, want, most);
            fm_lock_release(&m->lock);
            return n;
        }
        fm_add_relaxed(&contention, 1);
        fm_os_yield();
    }
}

/* Returns the first n blocks of a chain of FREE-flagged blocks to their spans, a run of
 * neighbours at a time (one count update and one splice per run), keeping a lock while
 * consecutive runs share a manager; a run whose manager is busy goes on its pending stack whole,
 * with one compare-and-swap. Returns the rest of the chain: a thread cache's stack is flushed
 * from its top without a pass to cut it first. */
void *fm_small_free_chain_n(void *chain, size_t n)
{
    fm_small_manager_t *held = NULL;
    while (chain != NULL && n != 0) {
        fm_small_span_t *s;
        uint32_t k;
        void *last = run_of(chain, n < UINT32_MAX ? (uint32_t)n : UINT32_MAX, &s, &k);
        void *next = fm_link_get(last);
        n -= k;
        fm_small_manager_t *m = s->manager;
        if (m != held) {
            if (held != NULL) {
                free_chain_locked(held, fm_pending_take(&held->pending));
                fm_lock_release(&held->lock);
            }
            held = fm_lock_try(&m->lock) ? m : NULL;
        }
        if (held != NULL)
            free_run_locked(m, s, chain, last, k);
        else
            fm_pending_push_run(&m->pending, chain, last);
        chain = next;
    }
    if (held != NULL) {
        free_chain_locked(held, fm_pending_take(&held->pending));
        fm_lock_release(&held->lock);
    }
    return chain;
}

void fm_small_free(void *p, fm_small_span_t *span)
{
    fm_small_manager_t *m = span->manager;
    if (fm_lock_try(&m->lock)) {
        free_locked(m, p);
        free_chain_locked(m, fm_pending_take(&m->pending));
        fm_lock_release(&m->lock);
    } else {
        fm_pending_push(&m->pending, p);
    }
}

/* Allocations served so far: blocks taken under the lock plus every fed block. */
uint64_t fm_small_served(void)
{
    uint64_t n = 0;
    for (unsigned a = 0; a < FM_SMALL_ARENAS; a++)
        for (unsigned c = 0; c < FM_SMALL_INDEX_COUNT; c++) {
            fm_small_manager_t *m = &fm_small_managers[a][c];
            uint32_t offset = FEED_OFFSET(fm_load_acquire(&m->feed)); /* a feed: m is set up */
            uint32_t head = fm_small_manager_head(m);
            uint64_t unfed = offset < head ? 0 : (offset - head) / m->block_size;
            n += fm_load_relaxed(&m->served) - unfed;
        }
    return n;
}

bool fm_small_drain_all(void)
{
    bool all = true;
    for (unsigned a = 0; a < FM_SMALL_ARENAS; a++)
        for (unsigned c = 0; c < FM_SMALL_INDEX_COUNT; c++) {
            fm_small_manager_t *m = &fm_small_managers[a][c];
            if (fm_load_relaxed(&m->pending) == NULL)
                continue;
            if (fm_lock_try(&m->lock)) {
                free_chain_locked(m, fm_pending_take(&m->pending));
                fm_lock_release(&m->lock);
            } else {
                all = false;
            }
        }
    return all;
}

void fm_small_unlock_all(void)
{
    for (unsigned a = 0; a < FM_SMALL_ARENAS; a++)
        for (unsigned c = 0; c < FM_SMALL_INDEX_COUNT; c++)
            fm_lock_release(&fm_small_managers[a][c].lock);
}

uint64_t fm_small_contention(void) { return fm_load_relaxed(&contention); }

/* Gives back the unfed part of every feed span, so spans whose handed-out blocks are all free
 * can be released (malloc_trim; FastMM5 keeps feed spans until they are used up). */
void fm_small_trim(void)
{
    for (unsigned a = 0; a < FM_SMALL_ARENAS; a++)
        for (unsigned c = 0; c < FM_SMALL_INDEX_COUNT; c++) {
            fm_small_manager_t *m = &fm_small_managers[a][c];
            if (fm_load_relaxed(&m->feed_span) == NULL)
                continue;
            fm_lock_wait(&m->lock);
            fm_small_span_t *s = m->feed_span;
            uint64_t old = fm_load_acquire(&m->feed);
            while (!fm_cas_acq_rel(&m->feed, &old, FEED_PACK(FEED_ABA(old) + 1, 0)))
                ; /* a racing lock-free feeder may still take a block first */
            uint32_t offset = FEED_OFFSET(old);
            uint32_t head = fm_small_manager_head(m);
            uint32_t unfed = offset < head ? 0 : (offset - head) / m->block_size;
            fm_store_release(&m->feed_span, NULL);
            m->served -= unfed;
            if (s != NULL && unfed != 0) {
                /* the unfed blocks become ordinary free blocks of the span (fed, from now on) */
                lower_fed_floor(s, head);
                for (uint32_t i = 0; i < unfed; i++) {
                    void *b = (char *)s + head + (size_t)i * m->block_size;
                    fm_flags_set(b, flags_for(s, b) | FM_FLAG_FREE);
                    free_locked(m, b);
                }
            }
            free_chain_locked(m, fm_pending_take(&m->pending));
            fm_lock_release(&m->lock);
        }
}
