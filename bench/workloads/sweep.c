/*
 * sweep small|medium|large|large-aligned THREADS ITERS
 *
 * Size sweep across one of FastMM5's block classes (the boundaries are FastMM5's on 64-bit):
 *   small          1 .. 2622 bytes          ring of 256 live blocks per thread
 *   medium         2623 .. 558904 bytes     ring of 32 live blocks per thread
 *   large          558905 .. 4 MiB          ring of 4 live blocks per thread
 *   large-aligned  the same, page-aligned:  posix_memalign(4096), as for O_DIRECT buffers
 * Each thread walks the range with a fixed stride coprime to its length, so every size (and
 * therefore every size class) is visited; every step frees the oldest block of the ring and
 * allocates the next size in its place, writing its first and last byte. ITERS steps per thread.
 */
#include "common.h"

struct range { const char *name; uint64_t lo, hi; unsigned ring; size_t align; };
static const struct range g_ranges[] = {
    {"small", 1, 2622, 256, 0},
    {"medium", 2623, 558904, 32, 0},
    {"large", 558905, 4u << 20, 4, 0},
    {"large-aligned", 558905, 4u << 20, 4, 4096},
};
static const struct range *g_r;

static void *worker(void *arg)
{
    worker_t *w = arg;
    const uint64_t span = g_r->hi - g_r->lo + 1;
    /* 7919 and 104729 are primes that divide none of the span lengths. */
    const uint64_t stride = g_r->hi < 4096 ? 7919 % span : 104729;
    uint64_t k = (uint64_t)w->id * 977;
    unsigned char *ring[256] = {0};
    uint64_t check = 0;
    unsigned slot = 0;
    worker_start();
    for (uint64_t i = 0; i < w->iters; i++) {
        if (ring[slot]) {
            check += ring[slot][0];
            free(ring[slot]);
        }
        k = (k + stride) % span;
        size_t size = (size_t)(g_r->lo + k);
        unsigned char *p = alloc_maybe_aligned(size, g_r->align);
        if (__builtin_expect(!p, 0))
            xmalloc_fail(size);
        p[0] = (unsigned char)size;
        p[size - 1] = (unsigned char)i;
        ring[slot] = p;
        if (++slot == g_r->ring)
            slot = 0;
    }
    for (unsigned s = 0; s < g_r->ring; s++)
        free(ring[s]);
    w->ops = 2 * w->iters;
    w->check = check;
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 4)
        die("usage: sweep small|medium|large|large-aligned THREADS ITERS");
    for (size_t i = 0; i < sizeof g_ranges / sizeof g_ranges[0]; i++)
        if (strcmp(argv[1], g_ranges[i].name) == 0)
            g_r = &g_ranges[i];
    if (!g_r)
        die("class must be small, medium, large or large-aligned");
    int n = arg_threads(argv[2]);
    uint64_t iters = arg_u64(argv[3], "iterations");

    worker_t w[256];
    memset(w, 0, sizeof w);
    for (int i = 0; i < n; i++)
        w[i].iters = iters;
    uint64_t elapsed = run_workers(n, worker, w);
    uint64_t ops = 0, check = 0;
    for (int i = 0; i < n; i++)
        ops += w[i].ops, check += w[i].check;
    char extra[128];
    snprintf(extra, sizeof extra, "class=%s threads=%d lo=%" PRIu64 " hi=%" PRIu64 " check=%" PRIu64,
             g_r->name, n, g_r->lo, g_r->hi, check);
    bench_report("sweep", elapsed, ops, extra);
    return 0;
}
