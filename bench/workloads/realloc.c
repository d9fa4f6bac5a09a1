/*
 * realloc MODE A B ITERS
 *
 * Resize workloads after the FastMM5 small in-place ReallocMem benchmark and its controls.
 *   alt    p = malloc(A) once; then ITERS times: p = realloc(p, B); p = realloc(p, A).
 *          With A=64, B=63 both calls stay in place in every allocator that rounds sizes up
 *          (the in-place small resize); with medium or large sizes it exercises resizing of
 *          those block classes.
 *   fresh  ITERS times: p = malloc(A); p = realloc(p, B); free(p).
 *          A < B beyond the block's capacity forces a moving upsize; B much smaller than A is a
 *          moving downsize in FastMM5 (its policy moves a block shrunk below half).
 * ops counts realloc calls (alt: 2 per iteration, fresh: 1). moved counts calls that returned
 * a different address, so the report shows which path each allocator took.
 */
#include "common.h"

int main(int argc, char **argv)
{
    if (argc != 5)
        die("usage: realloc alt|fresh A B ITERS");
    int alt;
    if (strcmp(argv[1], "alt") == 0)
        alt = 1;
    else if (strcmp(argv[1], "fresh") == 0)
        alt = 0;
    else
        die("mode must be alt or fresh");
    size_t a = (size_t)arg_u64(argv[2], "size A");
    size_t b = (size_t)arg_u64(argv[3], "size B");
    uint64_t iters = arg_u64(argv[4], "iterations");
    uint64_t moved = 0, ops;
    unsigned char *p, *q;

    /* Untimed warm-up of both sizes. */
    p = malloc(a);
    if (!p)
        xmalloc_fail(a);
    p[0] = 1;
    q = realloc(p, b);
    if (!q)
        xmalloc_fail(b);
    free(q);

    uint64_t t0 = now_ns();
    if (alt) {
        p = malloc(a);
        if (!p)
            xmalloc_fail(a);
        p[0] = 0x5a;
        for (uint64_t i = 0; i < iters; i++) {
            q = realloc(p, b);
            if (__builtin_expect(!q, 0))
                xmalloc_fail(b);
            moved += q != p;
            KEEP(q);
            p = realloc(q, a);
            if (__builtin_expect(!p, 0))
                xmalloc_fail(a);
            moved += q != p;
            KEEP(p);
        }
        if (p[0] != 0x5a)
            die("realloc lost the block's contents");
        free(p);
        ops = 2 * iters;
    } else {
        for (uint64_t i = 0; i < iters; i++) {
            p = malloc(a);
            if (__builtin_expect(!p, 0))
                xmalloc_fail(a);
            p[0] = (unsigned char)i;
            q = realloc(p, b);
            if (__builtin_expect(!q, 0))
                xmalloc_fail(b);
            moved += q != p;
            if (q[0] != (unsigned char)i)
                die("realloc lost the block's contents");
            free(q);
        }
        ops = iters;
    }
    uint64_t t1 = now_ns();

    char extra[128];
    snprintf(extra, sizeof extra, "mode=%s a=%zu b=%zu moved=%" PRIu64, argv[1], a, b, moved);
    bench_report("realloc", t1 - t0, ops, extra);
    return 0;
}
