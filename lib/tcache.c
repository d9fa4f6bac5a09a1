/*
 * tcache.c - a per-thread cache of free small and medium blocks in front of the arenas.
 *
 * FastMM5 has no thread affinity: every small allocation takes an arena lock (an atomic exchange)
 * and every free takes one too. A per-thread stack of free blocks per size class removes both
 * from the common case; the arenas are then visited in batches (refill half a stack, or flush
 * half a stack), which is where FastMM5's arenas, pending-free lists and span management do
 * their work, unchanged.
 *
 * Medium blocks up to 68416 bytes are cached the same way, one stack per medium bin (a request
 * is rounded to a bin size; it takes a block of its bin, or of a bin at most an eighth above it),
 * within a budget of 256 KiB per thread that doubles up to 1 MiB while it overflows often: a
 * medium allocation and free otherwise pay for the bin search, the split and the merge with
 * the neighbours every time. Over the budget the largest
 * cached blocks go back until half of it is free, so the cache stays filled with the many
 * smaller blocks that meet most requests, and free()'s inline path takes the next frees. Freed
 * debug blocks, small and medium, are cached too (debug.c), keeping their pattern: taking one
 * vets it, as an arena would.
 *
 * Cached blocks stay what FastMM5 calls pending frees: flagged FREE, still counted as in use by
 * their span (a small span's blocks_in_use, a medium span's in-use bit), so a span is never
 * released under a cached block, double frees are still caught by the FREE bit, and walkers and
 * leak checks see them as FastMM5 shows its pending frees. A thread's cache is flushed when the
 * thread exits, by malloc_trim and fastmm_process_pending_frees from that thread, and (its
 * medium part) when a medium request cannot be met.
 */
#include "internal.h"

#include <pthread.h>

/* Per class: hold at most this many bytes (within 4 .. 256 blocks). A stack's fill level is a
 * random walk where frees and allocations of a class come in random order (a server, larson):
 * it reaches an end - an arena visit - about once per (width)^2 operations, so a wider stack
 * saves visits quadratically; 16 KiB costs at most 16 KiB per class in use per thread. The
 * count cap binds only the classes below 64 bytes, where 16 KiB is more blocks than one visit
 * should walk; a program that frees runs of hundreds of one small size (a consumer thread, a
 * batch freed at once) needs the width, since each visit moves only half a stack.
 *
 * A bin starts narrower, at START_BYTES (within 2 .. its widest), and doubles each time it
 * visits the arenas within about 50 microseconds of its previous visit: only a class the
 * thread uses heavily earns the full width. The blocks a stack holds, and those a refill takes
 * (half its width), are memory that the class's spans keep resident for this thread; a thread
 * that touches many classes lightly (an inverse-square size mix, a short-lived thread's few
 * blocks) otherwise holds up to 16 KiB in each of them - most of its footprint - while a class
 * whose visits come more than 50 microseconds apart spends little of its time on them. */
#define BIN_BYTES 16384u
#define START_BYTES 1024u
#define START_MIN 2u
#define BIN_MIN 4u
#define BIN_MAX 256u

#define TC_NONE ((fm_tcache_t *)0)
#define TC_OFF ((fm_tcache_t *)1) /* being created, or the thread is exiting: bypass */

__thread fm_tcache_t *fm_tcache_current __attribute__((tls_model("initial-exec")));
static pthread_key_t exit_key;
static bool key_ready;
uint16_t fm_tcache_limits[FM_SMALL_INDEX_COUNT];
static uint16_t start_limits[FM_SMALL_INDEX_COUNT];

static unsigned blocks_for(unsigned bytes, unsigned c, unsigned least)
{
    unsigned n = bytes / fm_small_class_sizes[c];
    return n < least ? least : n > BIN_MAX ? BIN_MAX : n;
}

void fm_tcache_init(void)
{
    for (unsigned c = 0; c < FM_SMALL_INDEX_COUNT; c++) {
        fm_tcache_limits[c] = (uint16_t)blocks_for(BIN_BYTES, c, BIN_MIN);
        start_limits[c] = (uint16_t)blocks_for(START_BYTES, c, START_MIN);
    }
}

/* The busy rule of both parts of the cache: whether this event (an arena visit, an overflow)
 * comes within about 50 microseconds of the previous one, whose time *last holds; records now. */
static bool soon_after(uint32_t *last)
{
    uint32_t now = (uint32_t)fm_os_ticks();
    uint32_t since = now - *last;
    *last = now;
    return since < fm_os_ticks_per_50us;
}

/* Called at each of bin c's arena visits: a visit soon after the previous one doubles the
 * bin's width (up to its class's widest), the room growing with it. */
static void widen_if_busy(fm_tcache_t *tc, fm_tcache_bin_t *bin, unsigned c)
{
    unsigned widest = fm_tcache_limits[c];
    if (!soon_after(&tc->visited[c]) || bin->limit >= widest)
        return;
    unsigned wider = bin->limit * 2u < widest ? bin->limit * 2u : widest;
    bin->room += (int)(wider - bin->limit);
    bin->limit = wider;
}

/* The top of the stack down to `keep` blocks goes back to the arenas, taken as it is linked in
 * the one pass that returns it: the blocks freed last, in the order they were freed, so that
 * neighbours freed together go back together (fm_small_free_chain_n puts back a run of a span's
 * blocks at once). Cutting the older part off instead costs a second walk over the kept blocks
 * for every flush. */
static void flush_bin(fm_tcache_bin_t *bin, unsigned keep)
{
    unsigned count = fm_tcache_bin_count(bin);
    if (count <= keep)
        return;
    bin->head = fm_small_free_chain_n(bin->head, count - keep);
    bin->room = (int)(bin->limit - keep);
}

/* ---- the medium part: one stack per bin, and medium_map's bit per bin that may hold blocks ---- */

FM_INLINE void map_clear(fm_tcache_t *tc, unsigned b)
{
    tc->medium_map[b >> 6] &= ~((uint64_t)1 << (b & 63u));
}

/* Medium blocks go back one by one (fm_medium_free merges each with its free neighbours), those
 * of the largest bins first, until at most `keep` bytes stay cached. The largest go first because
 * a request finds a block only in its own bin or the few above it: for the same bytes, more
 * and smaller blocks meet more requests. */
static void shrink_medium(fm_tcache_t *tc, size_t keep)
{
    for (int w = (int)(FM_TCACHE_MEDIUM_BINS / 64u) - 1; w >= 0 && tc->medium_bytes > keep; w--) {
        uint64_t bits = tc->medium_map[w];
        while (bits != 0 && tc->medium_bytes > keep) {
            unsigned top = 63u - (unsigned)__builtin_clzll(bits);
            void **head = &tc->medium[(unsigned)w * 64u + top];
            void *p = *head;
            if (p == NULL) {
                bits &= ~((uint64_t)1 << top);
                tc->medium_map[w] = bits;
                continue;
            }
            *head = *(void **)p;
            tc->medium_bytes -= fm_medium_block_size(p);
            fm_medium_free(p);
        }
    }
    if (tc->medium_bytes > keep) /* every bin is empty: what is left counts damaged blocks taken out */
        tc->medium_bytes = 0;
}

static void flush_medium(fm_tcache_t *tc)
{
    shrink_medium(tc, 0);
}

static void flush_all(fm_tcache_t *tc)
{
    for (unsigned c = 0; c < FM_SMALL_INDEX_COUNT; c++)
        flush_bin(&tc->bins[c], 0);
    flush_medium(tc);
}

/* ---- the caches themselves: a pool mapped from the OS, outside the heap ----
 * Not heap blocks: a stray free() of a pointer that happens to land on a thread's cache must be
 * refused as foreign, not take the cache apart. Freed caches are reused by later threads; the
 * pool only grows (by 64 KiB, about 20 caches), as far as the most threads alive at once.
 *
 * The caches of the last few exited threads keep their blocks (POOL_KEEP): the next thread
 * starts with them instead of the exiting one flushing every stack to the arenas and the new
 * one refilling each class it uses (on the short-lived threads workload, a refill's walk over
 * span free lists last written on another CPU was the costliest thing the allocator did).
 * Blocks have no owner thread, so any thread may take them over; they stay flagged FREE as in
 * any cache. malloc_trim, fastmm_process_pending_frees, a refused medium request and a memory
 * limit give them back (fm_tcache_release_kept). */
#define POOL_KEEP 4u

static fm_lock_t pool_lock;
static fm_tcache_t *pool_free;   /* given back, linked through pool_link; the kept ones first */
static unsigned pool_kept;       /* how many of them are kept */
static char *pool_next, *pool_end; /* never used yet: the rest of the newest chunk */
static unsigned home_threads[FM_MEDIUM_ARENAS]; /* live caches with each home arena */

/* The home arena of a thread taking tc (under pool_lock): one with the fewest live threads, so
 * that up to four threads each have their own; among those, tc's own last home, where its kept
 * blocks came from and an exited thread's freed blocks are, so that a program starting one
 * short-lived thread after another keeps reusing the same memory; else the lowest. */
static void home_enter(fm_tcache_t *tc)
{
    unsigned best = tc->home;
    for (unsigned a = 0; a < FM_MEDIUM_ARENAS; a++)
        if (home_threads[a] < home_threads[best])
            best = a;
    tc->home = (uint8_t)best;
    tc->homed = true;
    home_threads[best]++;
}

/* Caches given back first, then the next never-used one of the newest chunk: a chunk's pages
 * are touched (made resident) one cache at a time, not all 16 when it is mapped. */
static fm_tcache_t *pool_take(void)
{
    fm_lock_wait(&pool_lock);
    fm_tcache_t *tc = pool_free;
    if (tc != NULL) {
        pool_free = tc->pool_link;
        if (tc->kept)
            pool_kept--;
    } else {
        if ((size_t)(pool_end - pool_next) < sizeof(fm_tcache_t)) {
            pool_next = fm_os_map_fenced(FM_OS_CHUNK);
            pool_end = pool_next != NULL ? pool_next + FM_OS_CHUNK : NULL;
        }
        if (pool_next != NULL) {
            tc = (fm_tcache_t *)pool_next;
            pool_next += sizeof(fm_tcache_t);
        }
    }
    if (tc != NULL)
        home_enter(tc);
    fm_lock_release(&pool_lock);
    return tc;
}

/* may_keep: tc may go into the pool with its blocks, if fewer than POOL_KEEP are kept; else
 * they go back to the arenas first. */
static void pool_give_back(fm_tcache_t *tc, bool may_keep)
{
    fm_lock_wait(&pool_lock);
    if (tc->homed) {
        home_threads[tc->home]--;
        tc->homed = false;
    }
    tc->kept = may_keep && pool_kept < POOL_KEEP && fm_os_limit() == 0;
    if (!tc->kept) {
        fm_lock_release(&pool_lock);
        flush_all(tc);
        fm_lock_wait(&pool_lock);
        /* behind the kept ones, so that pool_take hands those out first */
        fm_tcache_t **at = &pool_free;
        while (*at != NULL && (*at)->kept)
            at = &(*at)->pool_link;
        tc->pool_link = *at;
        *at = tc;
    } else {
        pool_kept++;
        tc->pool_link = pool_free;
        pool_free = tc;
    }
    fm_lock_release(&pool_lock);
}

/* The blocks of the kept caches back to the arenas. Returns whether there were any. */
bool fm_tcache_release_kept(void)
{
    fm_lock_wait(&pool_lock);
    fm_tcache_t *kept = NULL;
    while (pool_free != NULL && pool_free->kept) {
        fm_tcache_t *tc = pool_free;
        pool_free = tc->pool_link;
        tc->pool_link = kept;
        kept = tc;
    }
    pool_kept = 0;
    fm_lock_release(&pool_lock);
    bool any = kept != NULL;
    while (kept != NULL) {
        fm_tcache_t *next = kept->pool_link;
        pool_give_back(kept, false);
        kept = next;
    }
    return any;
}

/* fork: the child must not inherit the pool lock held by another thread */
void fm_tcache_fork_lock(void) { fm_lock_wait(&pool_lock); }
void fm_tcache_fork_unlock(void) { fm_lock_release(&pool_lock); }

/* fork's child (pool_lock held): only the calling thread lives on, so only its cache counts in
 * the home arenas; the other threads' caches are never given back there. */
void fm_tcache_fork_child(void)
{
    for (unsigned a = 0; a < FM_MEDIUM_ARENAS; a++)
        home_threads[a] = 0;
    fm_tcache_t *tc = fm_tcache_current;
    if (tc != TC_NONE && tc != TC_OFF && tc->homed)
        home_threads[tc->home] = 1;
}

static void at_thread_exit(void *arg)
{
    fm_tcache_t *tc = arg;
    fm_hooks.free_deferred(); /* into the cache, before it goes */
    fm_tcache_current = TC_OFF; /* later frees in this thread go straight to the arenas */
    pool_give_back(tc, true);
}

/* pthread_key_create does not allocate; it must exist before any cache does. */
void fm_tcache_init_key(void)
{
    if (pthread_key_create(&exit_key, at_thread_exit) == 0)
        fm_store_release(&key_ready, true);
}

static fm_tcache_t *create(void)
{
    if (!fm_load_acquire(&key_ready))
        return NULL;
    fm_tcache_current = TC_OFF; /* anything allocated meanwhile bypasses the cache */
    fm_tcache_t *tc = pool_take();
    if (tc == NULL) {
        fm_tcache_current = TC_NONE; /* the OS refused memory: a later request tries again */
        return NULL;
    }
    if (!tc->kept) { /* else it comes with an exited thread's blocks, and their widths */
        uint32_t now = (uint32_t)fm_os_ticks();
        uint32_t long_ago = now - fm_os_ticks_per_50us; /* a first visit never widens */
        for (unsigned c = 0; c < FM_SMALL_INDEX_COUNT; c++) {
            tc->bins[c] = (fm_tcache_bin_t){NULL, (int)start_limits[c], start_limits[c]};
            tc->visited[c] = long_ago;
        }
        tc->medium_bytes = 0;
        tc->medium_budget = FM_TCACHE_MEDIUM_BYTES;
        tc->medium_overflowed = long_ago;
        for (unsigned b = 0; b < FM_TCACHE_MEDIUM_BINS; b++)
            tc->medium[b] = NULL;
    }
    tc->kept = false;
    tc->deferred = NULL;
    tc->deferred_span = FM_DEFER_NO_SPAN;
    tc->deferred_word = 0;
    if (pthread_setspecific(exit_key, tc) != 0) {
        pool_give_back(tc, true);
        fm_tcache_current = TC_NONE;
        return NULL;
    }
    fm_home_arena_plus1 = (uint8_t)(tc->home + 1u);
    fm_tcache_current = tc;
    return tc;
}

/* A cache for a thread that has none yet, made on its first free: a thread that only frees
 * blocks other threads allocated (a consumer) otherwise never gets one, and each of its frees
 * takes an arena lock or the pending stack, contending with the producer on every block
 * (mimalloc-bench's xmalloc-test). With a cache its frees go in batches, half a stack at a
 * time, keeping one lock while consecutive blocks share a manager. NULL: no cache to use. */
fm_tcache_t *fm_tcache_start(void)
{
    fm_tcache_t *tc = fm_tcache_current;
    if (tc == TC_NONE)
        tc = create();
    return FM_TCACHE_USABLE(tc) ? tc : NULL;
}

/* Takes a block for class c: from the cache, or else half a bin fetched from the arenas in one
 * visit. Also the path of callers other than malloc's inline fast path (calloc, realloc). */
void *fm_tcache_refill(unsigned c)
{
    fm_tcache_t *tc = fm_tcache_current;
    if (tc == TC_NONE)
        tc = create();
    if (tc == NULL || tc == TC_OFF)
        return fm_small_alloc(c);
    fm_tcache_bin_t *bin = &tc->bins[c];
    for (;;) {
        if (bin->head == NULL) {
            widen_if_busy(tc, bin, c);
            /* half the stack and more where whole span lists come that way, but a quarter of it
             * left as room: a stack refilled to its limit gives half back at the next free */
            unsigned want = bin->limit / 2u + 1u, most = bin->limit - bin->limit / 4u;
            unsigned got = fm_small_alloc_batch(c, &bin->head, want, most > want ? most : want);
            if (got == 0)
                return NULL;
            bin->room = (int)(bin->limit - got);
        }
        void *b = bin->head;
        bin->head = fm_link_get(b);
        bin->room++;
        /* a freed debug block (debug.c caches them) is vetted as the arenas vet one; a damaged
         * one is reported and stays out, in use, as the arenas quarantine it. So does a plain
         * block whose flag word was overwritten while it was free (a write just before it, or
         * past the end of the block below it). */
        unsigned flags = fm_flags_get(b);
        if (FM_UNLIKELY(flags & FM_FLAG_DEBUG_INFO) ? !fm_hooks.debug_check_reuse(b)
                                         : !fm_block_small_freed_plain(flags)) {
            if (!(flags & FM_FLAG_DEBUG_INFO))
                fm_hooks.freed_block_damaged("malloc", b, flags);
            continue;
        }
        fm_flags_set(b, fm_flags_get(b) & ~FM_FLAG_FREE);
        return b;
    }
}

/* Keeps a freed small block (already flagged FREE) on its class's stack. */
bool fm_tcache_small_put(void *p, unsigned c)
{
    fm_tcache_t *tc = fm_tcache_current;
    if (!FM_TCACHE_USABLE(tc))
        return false;
    fm_tcache_push(tc, c, p, fm_track_on);
    return true;
}

/* The bin is over its limit: it widens if it is busy, else its top half goes back to the
 * arenas. */
void fm_tcache_overflow(fm_tcache_bin_t *bin)
{
    fm_tcache_t *tc = fm_tcache_current; /* the bin's owner: only a thread pushes on its stacks */
    if (FM_TCACHE_USABLE(tc) && bin >= tc->bins && bin < tc->bins + FM_SMALL_INDEX_COUNT) {
        widen_if_busy(tc, bin, (unsigned)(bin - tc->bins));
        if (bin->room >= 0)
            return;
    }
    flush_bin(bin, bin->limit / 2u);
}

/* This thread's cache, and the kept ones of exited threads, back to the arenas. */
void fm_tcache_flush_current(void)
{
    fm_tcache_t *tc = fm_tcache_current;
    if (tc != TC_NONE && tc != TC_OFF) {
        fm_hooks.free_deferred();
        flush_all(tc);
    }
    fm_tcache_release_kept();
}

/* The top block of bin b's stack, or NULL when the bin is empty (its bit is cleared then). */
FM_INLINE void *medium_pop(fm_tcache_t *tc, unsigned b)
{
    for (;;) {
        void *p = tc->medium[b];
        if (p == NULL) {
            map_clear(tc, b);
            return NULL;
        }
        tc->medium[b] = *(void **)p;
        /* A plain block whose header (flag word, size) was overwritten while it was free - a
         * write just before it, or past the end of the block below - is reported and stays out;
         * its size no longer counts for the budget (which then flushes a little early). */
        unsigned flags = fm_flags_get(p);
        size_t size = fm_medium_block_size(p);
        if (!(flags & FM_FLAG_DEBUG_INFO) &&
            (!fm_block_medium_freed_plain(flags) || size < FM_MEDIUM_MIN_BLOCK || size > FM_MEDIUM_MAX_BLOCK)) {
            fm_hooks.freed_block_damaged("malloc", p, flags);
            continue;
        }
        tc->medium_bytes -= size;
        fm_flags_set(p, fm_flags_get(p) & ~FM_FLAG_FREE);
        /* a freed debug block (debug.c caches them too) is vetted as the arenas vet one; a
         * damaged one is reported and stays out, in use, as the arenas quarantine it */
        if (!(fm_flags_get(p) & FM_FLAG_DEBUG_INFO) || fm_hooks.debug_check_reuse(p))
            return p;
    }
}

/* Called at each overflow of the medium part: one soon after the previous one doubles the
 * budget (up to FM_TCACHE_MEDIUM_MAX_BYTES). A request finds a block only in its own 256-byte
 * bin or the few above it, so a thread whose medium sizes are spread over many bins (rptest: 8
 * to 16000 bytes) misses a small cache on many requests and pays for the arenas' search, split
 * and merge;
 * a thread that frees medium blocks now and then keeps the narrow budget and its footprint.
 * Debug mode goes back to the narrow budget at its first overflow and stays there: its blocks
 * carry traces and guard bytes, and freed ones held back from the arenas leave gaps that its
 * aligned requests cannot use when the address space runs out. Returns whether the block of
 * block_size bytes now fits. */
static bool widen_medium_if_busy(fm_tcache_t *tc, size_t block_size)
{
    bool soon = soon_after(&tc->medium_overflowed);
    if (fm_load_relaxed(&fm_debug_on)) {
        tc->medium_budget = FM_TCACHE_MEDIUM_BYTES;
        return false;
    }
    if (!soon || tc->medium_budget >= FM_TCACHE_MEDIUM_MAX_BYTES)
        return false;
    tc->medium_budget *= 2u;
    return tc->medium_bytes + block_size <= tc->medium_budget;
}

/* This thread's cache (made now for a thread whose first request is a medium one) if it keeps
 * blocks of block_size (a bin size), else NULL. */
static fm_tcache_t *medium_cache_for(size_t block_size)
{
    fm_tcache_t *tc = fm_tcache_start();
    return tc != NULL && block_size < FM_TCACHE_MEDIUM_BLOCK_END ? tc : NULL;
}

/* The lowest bin in b .. last that holds a block (its bit set in medium_map), or last + 1. */
FM_INLINE unsigned next_mapped_bin(const fm_tcache_t *tc, unsigned b, unsigned last)
{
    while (b <= last) {
        uint64_t bits = tc->medium_map[b >> 6] >> (b & 63u);
        if (bits != 0)
            return b + (unsigned)__builtin_ctzll(bits);
        b = (b | 63u) + 1u;
    }
    return b;
}

/* A block for a request rounded to block_size (a bin size): the top of this thread's stack for
 * that bin, else of the nearest bin above it whose blocks are at most FM_TCACHE_MEDIUM_SLACK
 * bigger. Requests of random medium sizes (a server's buffers) rarely meet a block of their own
 * 256-byte bin in a cache of a few dozen blocks, and an arena visit (lock, bin search, split, and
 * the merge when the block comes back) costs several times the cache's path; a block up to an
 * eighth bigger, as a size-class allocator's classes are spaced, meets most of them. Its usable
 * size is then the block's, bigger than FastMM5's for the request. */
void *fm_tcache_medium_take(size_t block_size)
{
    fm_tcache_t *tc = medium_cache_for(block_size);
    if (tc == NULL)
        return NULL;
    unsigned b = fm_tcache_medium_bin_of(block_size);
    unsigned last = fm_tcache_medium_bin_of(block_size + FM_TCACHE_MEDIUM_SLACK(block_size));
    if (last >= FM_TCACHE_MEDIUM_BINS)
        last = FM_TCACHE_MEDIUM_BINS - 1u;
    for (unsigned n = next_mapped_bin(tc, b, last); n <= last; n = next_mapped_bin(tc, n + 1u, last)) {
        void *p = medium_pop(tc, n);
        if (p != NULL)
            return p;
    }
    return NULL;
}

/* The same for a request aligned above 64 bytes: the bin's top block if it starts at the
 * alignment (the stack is LIFO, so a program that frees and allocates aligned blocks of one size
 * gets its block back), else NULL. */
void *fm_tcache_medium_take_aligned(size_t block_size, size_t alignment)
{
    fm_tcache_t *tc = medium_cache_for(block_size);
    if (tc == NULL)
        return NULL;
    unsigned b = fm_tcache_medium_bin_of(block_size);
    void *p = medium_pop(tc, b);
    if (p != NULL && ((uintptr_t)p & (alignment - 1)) != 0) { /* back on top, still free */
        fm_flags_set(p, fm_flags_get(p) | FM_FLAG_FREE);
        fm_tcache_medium_push(tc, b, p, fm_medium_block_size(p));
        p = NULL;
    }
    return p;
}

/* Keeps a freed plain medium block (already flagged FREE) of a cached bin size
 * (fm_tcache_medium_cacheable) for this thread's next request of its bin. Over the byte budget,
 * blocks of the largest bins go back until half of it is free (all of them, for a block bigger
 * than that half): the block just freed and the smaller ones stay, and the next frees take
 * free()'s inline path again. */
bool fm_tcache_medium_put(void *p, size_t block_size)
{
    fm_tcache_t *tc = fm_tcache_current;
    if (!FM_TCACHE_USABLE(tc) || !fm_tcache_medium_cacheable(block_size) || fm_os_limit() != 0)
        return false;
    unsigned b = fm_tcache_medium_bin_of(block_size);
    if (tc->medium_bytes + block_size > tc->medium_budget && !widen_medium_if_busy(tc, block_size)) {
        size_t target = tc->medium_budget / 2u;
        shrink_medium(tc, block_size < target ? target - block_size : 0);
    }
    fm_tcache_medium_push(tc, b, p, block_size);
    return true;
}

/* Before a medium request is refused: the cached blocks may merge into what it needs. */
bool fm_tcache_medium_release(void)
{
    fm_tcache_t *tc = fm_tcache_current;
    if (!FM_TCACHE_USABLE(tc) || tc->medium_bytes == 0)
        return false;
    flush_medium(tc);
    return true;
}
