/*
 * common.h - shared helpers for the libfastmm5 benchmark workloads.
 *
 * Every workload is a plain C program that calls the C library's allocation functions; the
 * allocator under test is chosen by the runner through LD_PRELOAD (or not at all, for glibc).
 * No workload links libfastmm5. Optional introspection goes through dlsym(RTLD_DEFAULT, ...)
 * so the same binary runs under every allocator.
 *
 * Output contract (parsed by bench/harness/runner.py): exactly one line that starts with
 * "BENCH " followed by space-separated key=value fields. elapsed_ns is the internal time of the
 * measured loop only (CLOCK_MONOTONIC), so process start-up and exit are excluded.
 */
#ifndef BENCH_COMMON_H
#define BENCH_COMMON_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Makes the compiler believe p escapes and memory changed, so a malloc/free pair cannot be
 * elided (GCC removes free(malloc(n)) at -O2 otherwise). Emits no instruction. */
#define KEEP(p) __asm__ __volatile__("" : : "r"(p) : "memory")

#define BENCH_UNUSED __attribute__((unused))

static inline uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* xorshift32: the same generator the FastMM5 growth reproduction uses. */
static inline uint32_t xs32(uint32_t *s)
{
    uint32_t x = *s;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    return *s = x;
}

static inline uint64_t xs64(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

static void die(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("workload error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(2);
}

static void *xmalloc_fail(size_t n) __attribute__((noreturn));
static BENCH_UNUSED void *xmalloc_fail(size_t n)
{
    die("allocation of %zu bytes failed", n);
}

/* malloc(size), or posix_memalign(align, size) for a non-zero align; NULL if refused. */
static BENCH_UNUSED void *alloc_maybe_aligned(size_t size, size_t align)
{
    void *p = NULL;
    if (align == 0)
        return malloc(size);
    return posix_memalign(&p, align, size) == 0 ? p : NULL;
}

/* Parses a non-negative integer; accepts k/K, m/M suffixes (x1000, x1000000) for counts. */
static BENCH_UNUSED uint64_t arg_u64(const char *s, const char *what)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s)
        die("bad %s: '%s'", what, s);
    if (*end == 'k' || *end == 'K')
        v *= 1000ull, end++;
    else if (*end == 'm' || *end == 'M')
        v *= 1000000ull, end++;
    if (*end)
        die("bad %s: '%s'", what, s);
    return v;
}

/* Value of a "Key:   N kB" line of /proc/self/status, in KiB; -1 if absent. */
static BENCH_UNUSED long proc_status_kb(const char *key)
{
    char line[256];
    long v = -1;
    size_t klen = strlen(key);
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return -1;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, key, klen) == 0 && line[klen] == ':') {
            v = strtol(line + klen + 1, NULL, 10);
            break;
        }
    }
    fclose(f);
    return v;
}

/* libfastmm5's arena-contention counters (fastmm_get_contention: how often a thread found every
 * arena of a class locked and had to yield), as " contention=N", when the preloaded allocator
 * exports them; "" under any other allocator. Read after the measured loop. */
static BENCH_UNUSED const char *contention_field(char *buf, size_t len)
{
    struct { uint64_t small, medium, large; } c;
    void (*get)(void *) = (void (*)(void *))dlsym(RTLD_DEFAULT, "fastmm_get_contention");
    buf[0] = '\0';
    if (get) {
        get(&c);
        snprintf(buf, len, " contention=%" PRIu64, c.small + c.medium + c.large);
    }
    return buf;
}

/* The one result line. extra may be NULL or "k=v k=v". */
static BENCH_UNUSED void bench_report(const char *workload, uint64_t elapsed_ns, uint64_t ops, const char *extra)
{
    const char *dbg = getenv("FASTMM5_DEBUG");
    char cont[64];
    printf("BENCH workload=%s elapsed_ns=%" PRIu64 " ops=%" PRIu64 " ns_per_op=%.3f debug=%s vmhwm_kb=%ld%s%s%s\n",
           workload, elapsed_ns, ops, ops ? (double)elapsed_ns / (double)ops : 0.0,
           (dbg && *dbg) ? dbg : "0", proc_status_kb("VmHWM"), contention_field(cont, sizeof cont),
           extra ? " " : "", extra ? extra : "");
    fflush(stdout);
}

/* ---- worker threads with a common start line ------------------------------------------------ */

typedef struct worker {
    int id;
    int nthreads;
    uint64_t iters;     /* this thread's share of the work */
    uint64_t ops;       /* allocator calls it made, reported back */
    uint64_t check;     /* a value derived from the data, so no work is dead */
    void *shared;       /* workload-specific */
    pthread_t tid;
} worker_t;

static pthread_barrier_t g_ready, g_start_line;

/* Starts n workers running fn and times them from their common start until the last one is
 * joined. Two barriers: at the first, every worker exists and is waiting; main then reads the
 * clock and only then joins the second, which releases the workers. (Reading the clock after a
 * single barrier is wrong on a busy machine: the workers can run to the end before main is
 * scheduled again.) Workers call worker_start() first. */
static BENCH_UNUSED uint64_t run_workers(int n, void *(*fn)(void *), worker_t *w)
{
    if (pthread_barrier_init(&g_ready, NULL, (unsigned)n + 1) ||
        pthread_barrier_init(&g_start_line, NULL, (unsigned)n + 1))
        die("pthread_barrier_init");
    for (int i = 0; i < n; i++) {
        w[i].id = i;
        w[i].nthreads = n;
        if (pthread_create(&w[i].tid, NULL, fn, &w[i]))
            die("pthread_create");
    }
    pthread_barrier_wait(&g_ready);
    uint64_t t0 = now_ns();
    pthread_barrier_wait(&g_start_line);
    for (int i = 0; i < n; i++)
        pthread_join(w[i].tid, NULL);
    uint64_t t1 = now_ns();
    pthread_barrier_destroy(&g_ready);
    pthread_barrier_destroy(&g_start_line);
    return t1 - t0;
}

static inline void worker_start(void)
{
    pthread_barrier_wait(&g_ready);
    pthread_barrier_wait(&g_start_line);
}

static BENCH_UNUSED int arg_threads(const char *s)
{
    uint64_t t = arg_u64(s, "thread count");
    if (t < 1 || t > 256)
        die("thread count must be 1..256");
    return (int)t;
}

#endif
