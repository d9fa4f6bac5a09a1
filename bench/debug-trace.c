/*
 * debug-trace.c - the cost of debug mode's stack traces: one 4 KiB block allocated and freed in
 * a loop, from the bottom of a call chain of a given depth (each level a function that is never
 * inlined, so every level is a frame the unwinder walks through).
 *
 * Usage: debug-trace DEPTH ITERATIONS; prints "ns_per_pair=N": the loop's time, by the thread's
 * CPU clock when DEBUG_TRACE_CLOCK=cpu (on a shared machine the wall clock also counts the
 * time other processes held the CPU; under Valgrind the thread's CPU time includes
 * Valgrind's own work, which runs on it), else by the monotonic clock. Run it under
 * LD_PRELOAD=libfastmm5.so FASTMM5_DEBUG=1, or under valgrind (bench/debug-trace.sh does both).
 * Built with -DWITH_LIBUNWIND -lunwind, DEBUG_TRACE_CAPTURE=libunwind makes libunwind's
 * unw_backtrace (with its per-thread cache) libfastmm5's capture, through
 * fastmm_set_stack_trace_hooks (looked up at run time, so the program also runs without
 * libfastmm5).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static void *volatile sink;

#ifdef WITH_LIBUNWIND
#define UNW_LOCAL_ONLY
#include <libunwind.h>

static void libunwind_capture(uintptr_t *out, unsigned depth)
{
    int n = unw_backtrace((void **)out, (int)depth);
    for (unsigned i = n > 0 ? (unsigned)n : 0; i < depth; i++)
        out[i] = 0;
}

static void use_libunwind(void)
{
    typedef void (*capture_t)(uintptr_t *, unsigned);
    void (*set_hooks)(capture_t, void *) = (void (*)(capture_t, void *))dlsym(RTLD_DEFAULT, "fastmm_set_stack_trace_hooks");
    if (set_hooks == NULL) {
        fprintf(stderr, "debug-trace: no libfastmm5 to give libunwind's capture to\n");
        exit(2);
    }
    unw_set_caching_policy(unw_local_addr_space, UNW_CACHE_PER_THREAD);
    set_hooks(libunwind_capture, NULL);
}
#endif

static clockid_t loop_clock = CLOCK_MONOTONIC;

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(loop_clock, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

__attribute__((noinline)) static double loop(long iterations)
{
    double start = now_ns();
    for (long i = 0; i < iterations; i++) {
        void *p = malloc(4096);
        sink = p;
        free(p);
    }
    return now_ns() - start;
}

/* depth 1 is loop's caller; the volatile add keeps each level a real frame (no tail call) */
__attribute__((noinline)) static double chain(int depth, long iterations)
{
    static volatile double zero;
    if (depth <= 1)
        return loop(iterations) + zero;
    return chain(depth - 1, iterations) + zero;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: debug-trace DEPTH ITERATIONS\n");
        return 2;
    }
    int depth = atoi(argv[1]);
    long iterations = atol(argv[2]);
    const char *clock_name = getenv("DEBUG_TRACE_CLOCK");
    if (clock_name != NULL && clock_name[0] == 'c')
        loop_clock = CLOCK_THREAD_CPUTIME_ID;
    const char *capture = getenv("DEBUG_TRACE_CAPTURE");
    if (capture != NULL && capture[0] != '\0') {
#ifdef WITH_LIBUNWIND
        use_libunwind();
#else
        fprintf(stderr, "debug-trace: built without libunwind\n");
        return 2;
#endif
    }
    chain(depth, iterations / 10 + 1); /* warm up: caches, unwind rules */
    double ns = chain(depth, iterations);
    printf("ns_per_pair=%.1f\n", ns / (double)iterations);
    return 0;
}
