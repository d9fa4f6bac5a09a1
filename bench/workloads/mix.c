/*
 * mix THREADS ITERS
 *
 * Random-size mix with a live working set. Each thread owns 8192 slots; every step picks a
 * random slot and frees its block if it holds one, otherwise allocates a block there, so
 * allocations and frees interleave at random and about half the slots stay live (a working set
 * of about 4096 blocks, some 20 MB, per thread). Sizes are skewed small:
 *   60%  8..64    25%  65..512    10%  513..2622    4.5%  2623..65536    0.5%  65537..1 MiB
 * The first 64 bytes (or fewer) of each block are written on allocation and its first byte is
 * checked on free.
 */
#include "common.h"

#define SLOTS 8192

static size_t skewed_size(uint64_t *s)
{
    uint64_t r = xs64(s);
    unsigned pick = (unsigned)(r % 1000);
    uint64_t v = r >> 20;
    if (pick < 600)
        return 8 + v % 57;
    if (pick < 850)
        return 65 + v % 448;
    if (pick < 950)
        return 513 + v % 2110;
    if (pick < 995)
        return 2623 + v % 62914;
    return 65537 + v % 983040;
}

static void *worker(void *arg)
{
    worker_t *w = arg;
    uint64_t seed = 0x243F6A8885A308D3ull ^ ((uint64_t)(w->id + 1) * 0x9E3779B97F4A7C15ull);
    unsigned char **slot = calloc(SLOTS, sizeof *slot);
    if (!slot)
        xmalloc_fail(SLOTS * sizeof *slot);
    uint64_t ops = 0, check = 0;
    worker_start();
    for (uint64_t i = 0; i < w->iters; i++) {
        unsigned s = (unsigned)(xs64(&seed) % SLOTS);
        if (slot[s]) {
            if (slot[s][0] != (unsigned char)s)
                die("block contents changed");
            check += slot[s][1];
            free(slot[s]);
            slot[s] = NULL;
        } else {
            size_t size = skewed_size(&seed);
            unsigned char *p = malloc(size);
            if (__builtin_expect(!p, 0))
                xmalloc_fail(size);
            memset(p, (int)(i & 0xff), size < 64 ? size : 64);
            p[0] = (unsigned char)s;
            slot[s] = p;
        }
        ops++;
    }
    for (unsigned s = 0; s < SLOTS; s++)
        if (slot[s]) {
            free(slot[s]);
            ops++;
        }
    free(slot);
    w->ops = ops;
    w->check = check;
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 3)
        die("usage: mix THREADS ITERS");
    int n = arg_threads(argv[1]);
    uint64_t iters = arg_u64(argv[2], "iterations");
    worker_t w[256];
    memset(w, 0, sizeof w);
    for (int i = 0; i < n; i++)
        w[i].iters = iters;
    uint64_t elapsed = run_workers(n, worker, w);
    uint64_t ops = 0, check = 0;
    for (int i = 0; i < n; i++)
        ops += w[i].ops, check += w[i].check;
    char extra[96];
    snprintf(extra, sizeof extra, "threads=%d check=%" PRIu64, n, check);
    bench_report("mix", elapsed, ops, extra);
    return 0;
}
