/*
 * tcache.c - a per-thread cache of free small blocks in front of the small-block arenas.
 *
 * FastMM5 has no thread affinity: every small allocation takes an arena lock (an atomic exchange)
 * and every free takes one too. A per-thread stack of free blocks per size class removes both
 * from the common case; the arenas are then visited in batches (refill half a stack, or flush
 * half a stack), which is where FastMM5's arenas, pending-free lists and span management do
 * their work, unchanged.
 *
 * Cached blocks stay what FastMM5 calls pending frees: flagged FREE, still counted in their
 * span's blocks_in_use, so a span is never released under a cached block, double frees are still
 * caught by the FREE bit, and walkers count them as allocated (as FastMM5 counts pending frees).
 * A thread's cache is flushed when the thread exits, by malloc_trim and by
 * fastmm_process_pending_frees from that thread.
 */
#include "internal.h"

#include <pthread.h>

/* Per class: hold at most this many bytes (within 4 .. 128 blocks). */
#define BIN_BYTES 8192u
#define BIN_MIN 4u
#define BIN_MAX 128u

#define TC_NONE ((fm_tcache_t *)0)
#define TC_OFF ((fm_tcache_t *)1) /* being created, or the thread is exiting: bypass */

__thread fm_tcache_t *fm_tcache_current __attribute__((tls_model("initial-exec")));
static pthread_key_t exit_key;
static bool key_ready;
uint16_t fm_tcache_limits[FM_SMALL_CLASS_COUNT];

void fm_tcache_init(void)
{
    for (unsigned c = 0; c < FM_SMALL_CLASS_COUNT; c++) {
        unsigned n = BIN_BYTES / fm_small_class_sizes[c];
        fm_tcache_limits[c] = (uint16_t)(n < BIN_MIN ? BIN_MIN : n > BIN_MAX ? BIN_MAX : n);
    }
}

static void flush_bin(fm_tcache_bin_t *bin, unsigned keep)
{
    void *chain = NULL;
    while (bin->count > keep) {
        void *b = bin->head;
        bin->head = *(void **)b;
        bin->count--;
        *(void **)b = chain;
        chain = b;
    }
    fm_small_free_chain(chain);
}

static void flush_all(fm_tcache_t *tc)
{
    for (unsigned c = 0; c < FM_SMALL_CLASS_COUNT; c++)
        flush_bin(&tc->bins[c], 0);
}

static void at_thread_exit(void *arg)
{
    fm_tcache_t *tc = arg;
    fm_tcache_current = TC_OFF; /* later frees in this thread go straight to the arenas */
    flush_all(tc);
    fastmm_free(tc);
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
    fm_tcache_t *tc = fm_small_alloc(fm_small_class_of(sizeof(fm_tcache_t)));
    if (tc == NULL)
        return NULL;
    fm_track_internal(tc, sizeof *tc);
    for (unsigned c = 0; c < FM_SMALL_CLASS_COUNT; c++)
        tc->bins[c] = (fm_tcache_bin_t){NULL, 0};
    if (pthread_setspecific(exit_key, tc) != 0) {
        fastmm_free(tc);
        return NULL;
    }
    fm_tcache_current = tc;
    return tc;
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
    if (bin->head == NULL) {
        unsigned got = fm_small_alloc_batch(c, &bin->head, fm_tcache_limits[c] / 2u + 1u);
        if (got == 0)
            return NULL;
        bin->count = got;
    }
    void *b = bin->head;
    bin->head = *(void **)b;
    bin->count--;
    fm_flags_set(b, fm_flags_get(b) & ~FM_FLAG_FREE);
    return b;
}

/* The bin is over its limit: return its older half to the arenas. */
void fm_tcache_overflow(fm_tcache_t *tc, unsigned c)
{
    flush_bin(&tc->bins[c], fm_tcache_limits[c] / 2u);
}

void fm_tcache_flush_current(void)
{
    fm_tcache_t *tc = fm_tcache_current;
    if (tc != TC_NONE && tc != TC_OFF)
        flush_all(tc);
}
