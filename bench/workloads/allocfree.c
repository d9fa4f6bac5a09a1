/*
 * allocfree SIZE OPS [ALIGN]
 *
 * The FastMM5 micro-benchmark: one block of SIZE bytes allocated and freed OPS times in a row
 * on the main thread; with ALIGN, through posix_memalign(ALIGN, SIZE) (page-aligned I/O
 * buffers). In debug mode (the runner sets FASTMM5_DEBUG=1 for the fastmm5-debug variant, or
 * preloads a debugging allocator) every iteration pays for the fill on allocation and the fill
 * check on the next reuse, which is what the FastMM5 fill-pattern kernels speed up.
 */
#include "common.h"

int main(int argc, char **argv)
{
    if (argc != 3 && argc != 4)
        die("usage: allocfree SIZE OPS [ALIGN]");
    size_t size = (size_t)arg_u64(argv[1], "size");
    uint64_t ops = arg_u64(argv[2], "ops");
    size_t align = argc == 4 ? (size_t)arg_u64(argv[3], "alignment") : 0;

    /* One untimed round so lazy initialisation of the allocator is not in the measurement. */
    void *p = alloc_maybe_aligned(size, align);
    if (!p)
        xmalloc_fail(size);
    KEEP(p);
    free(p);

    uint64_t t0 = now_ns();
    for (uint64_t i = 0; i < ops; i++) {
        p = alloc_maybe_aligned(size, align);
        if (__builtin_expect(p == NULL, 0))
            xmalloc_fail(size);
        KEEP(p);
        free(p);
    }
    uint64_t t1 = now_ns();

    char extra[64];
    snprintf(extra, sizeof extra, "size=%zu align=%zu", size, align);
    bench_report("allocfree", t1 - t0, ops, extra);
    return 0;
}
