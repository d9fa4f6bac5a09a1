/*
 * debuggrowth THREADS ITERS MAXSIZE
 *
 * The FastMM5 debug-mode span growth scenario (issue "medium block spans are never returned to
 * the OS"): THREADS threads, each ITERS times allocating a block of a random size 1..MAXSIZE,
 * filling it and freeing it. Nothing stays allocated, so an allocator whose memory grows here
 * is not returning or reusing what was freed. The report gives the OS memory held afterwards:
 * fastmm_os_memory() when the preloaded allocator exports it (looked up with dlsym, after
 * fastmm_process_pending_frees() if that is exported too), otherwise the resident set size
 * (VmRSS) from /proc/self/status. Both figures are printed when both exist.
 */
#include "common.h"

static uint64_t g_maxsize;

static void *worker(void *arg)
{
    worker_t *w = arg;
    uint32_t seed = (uint32_t)(w->id + 1) * 0x9E3779B9u + 1;
    uint64_t check = 0;
    worker_start();
    for (uint64_t i = 0; i < w->iters; i++) {
        size_t size = (size_t)(xs32(&seed) % (uint32_t)g_maxsize) + 1;
        unsigned char *p = malloc(size);
        if (__builtin_expect(!p, 0))
            xmalloc_fail(size);
        memset(p, (int)(size & 0xff), size);
        check += p[size - 1];
        free(p);
    }
    w->ops = 2 * w->iters;
    w->check = check;
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 4)
        die("usage: debuggrowth THREADS ITERS MAXSIZE");
    int n = arg_threads(argv[1]);
    uint64_t iters = arg_u64(argv[2], "iterations");
    g_maxsize = arg_u64(argv[3], "maximum size");
    if (g_maxsize < 1 || g_maxsize > 0xffffffffu)
        die("maximum size out of range");

    worker_t w[256];
    memset(w, 0, sizeof w);
    for (int i = 0; i < n; i++)
        w[i].iters = iters;
    uint64_t elapsed = run_workers(n, worker, w);
    uint64_t ops = 0, check = 0;
    for (int i = 0; i < n; i++)
        ops += w[i].ops, check += w[i].check;

    bool (*pending)(void) = (bool (*)(void))dlsym(RTLD_DEFAULT, "fastmm_process_pending_frees");
    size_t (*osmem)(void) = (size_t (*)(void))dlsym(RTLD_DEFAULT, "fastmm_os_memory");
    if (pending)
        pending();
    long rss_kb = proc_status_kb("VmRSS");
    char extra[256];
    if (osmem) {
        size_t m = osmem();
        snprintf(extra, sizeof extra,
                 "threads=%d iters=%" PRIu64 " maxsize=%" PRIu64 " os_memory_bytes=%zu os_memory_source=fastmm_os_memory"
                 " vmrss_kb=%ld check=%" PRIu64,
                 n, iters, g_maxsize, m, rss_kb, check);
    } else {
        snprintf(extra, sizeof extra,
                 "threads=%d iters=%" PRIu64 " maxsize=%" PRIu64 " os_memory_bytes=%ld os_memory_source=VmRSS"
                 " vmrss_kb=%ld check=%" PRIu64,
                 n, iters, g_maxsize, rss_kb < 0 ? -1L : rss_kb * 1024L, rss_kb, check);
    }
    bench_report("debuggrowth", elapsed, ops, extra);
    return 0;
}
