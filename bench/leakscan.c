/*
 * leakscan.c - the leak check's cost on a big heap (not part of run.sh; bench/README.md, "The
 * leak-check benchmark").
 *
 *   LD_PRELOAD=lib/.libs/libfastmm5.so bench/out/leakscan [blocks] [size] [lose-every]
 *
 * Allocates `blocks` blocks (default 10,000,000) of `size` bytes (default 100: 1 GB of user
 * data), each holding a pointer to the block before it and small integers after it, keeps them
 * in a table a global points to, forgets every `lose-every`-th pointer (default 0: none) - those
 * blocks are then definitely lost, reachable only from the next block if chained, so the chain
 * skips them - and times fastmm_leak_check() (found with dlsym: the program does not link
 * libfastmm5), which runs the same scan as the exit-time check. Prints one line: blocks, bytes,
 * the check's wall-clock and CPU time in ms, the lost blocks it returned, and the peak RSS.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

static void **volatile table;

static double cpu_ms(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int main(int argc, char **argv)
{
    size_t blocks = argc > 1 ? strtoull(argv[1], NULL, 10) : 10000000;
    size_t size = argc > 2 ? strtoull(argv[2], NULL, 10) : 100;
    size_t lose_every = argc > 3 ? strtoull(argv[3], NULL, 10) : 0;
    size_t (*check)(void) = (size_t (*)(void))dlsym(RTLD_DEFAULT, "fastmm_leak_check");
    if (check == NULL || size < 2 * sizeof(void *)) {
        fprintf(stderr, "leakscan: run it with LD_PRELOAD=libfastmm5.so (and size >= 16)\n");
        return 2;
    }
    table = malloc(blocks * sizeof *table);
    void *previous = NULL;
    for (size_t i = 0; i < blocks; i++) {
        uintptr_t *b = malloc(size);
        if (b == NULL) {
            perror("malloc");
            return 2;
        }
        b[0] = (uintptr_t)previous;
        for (size_t k = 1; k < size / sizeof *b; k++)
            b[k] = i + k;
        bool lose = lose_every != 0 && i % lose_every == lose_every - 1;
        table[i] = lose ? NULL : b;
        if (!lose)
            previous = b;
    }
    double start = now_ms(), start_cpu = cpu_ms();
    size_t lost = check();
    double ms = now_ms() - start, cpu = cpu_ms() - start_cpu;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("blocks %zu size %zu bytes %zu check_ms %.0f check_cpu_ms %.0f lost %zu peak_rss_mb %ld\n", blocks, size,
           blocks * size, ms, cpu, lost, ru.ru_maxrss / 1024);
    return 0;
}
