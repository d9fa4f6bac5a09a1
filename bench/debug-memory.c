/*
 * debug-memory.c - the memory one debug block costs: COUNT blocks of SIZE bytes allocated from
 * one place and kept, then the growth of the process's resident memory (VmRSS: it includes
 * the trace table, which lives in mappings of its own) and of fastmm_os_memory() (the heap's
 * mappings only), each divided by COUNT.
 *
 * Usage: debug-memory SIZE COUNT; prints "rss_per_block=N heap_per_block=N". Run it under
 * LD_PRELOAD=libfastmm5.so with FASTMM5_DEBUG=1 (bench/debug-memory.sh).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long rss_bytes(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    while (f != NULL && fgets(line, sizeof line, f) != NULL)
        if (strncmp(line, "VmRSS:", 6) == 0)
            kib = atol(line + 6);
    if (f != NULL)
        fclose(f);
    return kib * 1024;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: debug-memory SIZE COUNT\n");
        return 2;
    }
    size_t size = (size_t)atol(argv[1]);
    long count = atol(argv[2]);
    size_t (*os_memory)(void) = (size_t(*)(void))dlsym(RTLD_DEFAULT, "fastmm_os_memory");
    void **blocks = malloc((size_t)count * sizeof *blocks);
    if (blocks == NULL || os_memory == NULL) {
        fprintf(stderr, "debug-memory: %s\n", blocks == NULL ? "out of memory" : "no libfastmm5 preloaded");
        return 2;
    }
    free(malloc(size)); /* the first debug block: the trace table and capture set up */
    long rss0 = rss_bytes();
    size_t heap0 = os_memory();
    for (long i = 0; i < count; i++) {
        blocks[i] = malloc(size);
        memset(blocks[i], 1, size);
    }
    long rss1 = rss_bytes();
    size_t heap1 = os_memory();
    printf("rss_per_block=%.0f heap_per_block=%.0f\n", (double)(rss1 - rss0) / (double)count,
           (double)(heap1 - heap0) / (double)count);
    for (long i = 0; i < count; i++)
        free(blocks[i]);
    free(blocks);
    return 0;
}
