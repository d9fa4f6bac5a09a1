/*
 * growth string|array THREADS ROUNDS [MAX]
 *
 * Realloc-driven growth, ROUNDS times per thread:
 *   string  a string built by appending 1..48-byte pieces, one realloc per append (the naive
 *           strcat-with-realloc pattern), up to 64 KiB, then freed. Exercises small and medium
 *           in-place growth and moves across every block class boundary on the way up.
 *   array   an array of 8-byte elements grown by 1.5x capacity whenever full (the vector
 *           pattern), up to 512 Ki elements (4 MiB), every element written, then freed.
 *           Exercises large-block resizing (mremap or copy).
 * ops counts allocator calls.
 */
#include "common.h"

static int g_array;
static uint64_t g_max = 512u << 10;

static void *worker(void *arg)
{
    worker_t *w = arg;
    uint32_t seed = (uint32_t)(w->id + 1) * 2654435761u;
    uint64_t ops = 0, check = 0;
    worker_start();
    for (uint64_t r = 0; r < w->iters; r++) {
        if (!g_array) {
            char *s = NULL;
            size_t len = 0;
            while (len < 65536) {
                size_t piece = 1 + xs32(&seed) % 48;
                char *t = realloc(s, len + piece + 1);
                if (__builtin_expect(!t, 0))
                    xmalloc_fail(len + piece + 1);
                s = t;
                memset(s + len, 'a' + (int)(piece % 26), piece);
                len += piece;
                s[len] = 0;
                ops++;
            }
            check += (unsigned char)s[len / 2];
            free(s);
            ops++;
        } else {
            size_t cap = 4, n = 0;
            uint64_t *a = malloc(cap * sizeof *a);
            if (!a)
                xmalloc_fail(cap * sizeof *a);
            ops++;
            while (n < g_max) {
                if (n == cap) {
                    cap += cap / 2 + 1;
                    uint64_t *b = realloc(a, cap * sizeof *a);
                    if (__builtin_expect(!b, 0))
                        xmalloc_fail(cap * sizeof *a);
                    a = b;
                    ops++;
                }
                a[n] = n ^ r;
                n++;
            }
            check += a[n / 3];
            free(a);
            ops++;
        }
    }
    w->ops = ops;
    w->check = check;
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 4 && argc != 5)
        die("usage: growth string|array THREADS ROUNDS [MAX]");
    if (strcmp(argv[1], "string") == 0)
        g_array = 0;
    else if (strcmp(argv[1], "array") == 0)
        g_array = 1;
    else
        die("mode must be string or array");
    int n = arg_threads(argv[2]);
    uint64_t rounds = arg_u64(argv[3], "rounds");
    if (argc == 5 && (g_max = arg_u64(argv[4], "maximum")) < 1)
        die("maximum must be at least 1");
    worker_t w[256];
    memset(w, 0, sizeof w);
    for (int i = 0; i < n; i++)
        w[i].iters = rounds;
    uint64_t elapsed = run_workers(n, worker, w);
    uint64_t ops = 0, check = 0;
    for (int i = 0; i < n; i++)
        ops += w[i].ops, check += w[i].check;
    char extra[96];
    snprintf(extra, sizeof extra, "mode=%s threads=%d max=%" PRIu64 " check=%" PRIu64, argv[1], n, g_max, check);
    bench_report("growth", elapsed, ops, extra);
    return 0;
}
