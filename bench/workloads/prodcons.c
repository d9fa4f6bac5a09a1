/*
 * prodcons THREADS ITERS
 *
 * Producer/consumer: the threads form a ring, and thread i allocates ITERS blocks (16..1024
 * bytes, skewed small), writes them and hands each one to thread i+1 through a bounded
 * single-producer/single-consumer queue; thread i+1 checks and frees it. Every block is thus
 * freed by a thread other than the one that allocated it (remote frees), while each thread is
 * also a producer. With THREADS=1 the ring closes on itself: a same-thread control with the
 * same queueing overhead. A thread whose outgoing queue is full drains its own incoming queue
 * before retrying, so the ring cannot deadlock; idle threads yield (more threads than cores).
 */
#include "common.h"
#include <sched.h>
#include <stdatomic.h>

#define QCAP 1024 /* power of two */

typedef struct queue {
    _Alignas(64) _Atomic uint64_t head; /* next slot to read, written by the consumer */
    _Alignas(64) _Atomic uint64_t tail; /* next slot to write, written by the producer */
    _Alignas(64) unsigned char *item[QCAP];
} queue_t;

static queue_t *g_q; /* g_q[i] carries blocks from thread i to thread i+1 */

static int q_push(queue_t *q, unsigned char *p)
{
    uint64_t t = atomic_load_explicit(&q->tail, memory_order_relaxed);
    if (t - atomic_load_explicit(&q->head, memory_order_acquire) == QCAP)
        return 0;
    q->item[t & (QCAP - 1)] = p;
    atomic_store_explicit(&q->tail, t + 1, memory_order_release);
    return 1;
}

static unsigned char *q_pop(queue_t *q)
{
    uint64_t h = atomic_load_explicit(&q->head, memory_order_relaxed);
    if (h == atomic_load_explicit(&q->tail, memory_order_acquire))
        return NULL;
    unsigned char *p = q->item[h & (QCAP - 1)];
    atomic_store_explicit(&q->head, h + 1, memory_order_release);
    return p;
}

static size_t block_size(uint64_t *s)
{
    uint64_t r = xs64(s);
    return (r & 3) ? 16 + (r >> 8) % 113 : 129 + (r >> 8) % 896;
}

static void *worker(void *arg)
{
    worker_t *w = arg;
    queue_t *out = &g_q[w->id];
    queue_t *in = &g_q[(w->id + w->nthreads - 1) % w->nthreads];
    uint64_t seed = 0x9E3779B97F4A7C15ull * (uint64_t)(w->id + 7);
    uint64_t sent = 0, received = 0, check = 0;
    unsigned char *pending = NULL;
    worker_start();
    while (sent < w->iters || received < w->iters) {
        int progress = 0;
        if (sent < w->iters) {
            if (!pending) {
                size_t size = block_size(&seed);
                pending = malloc(size);
                if (__builtin_expect(!pending, 0))
                    xmalloc_fail(size);
                memset(pending, 0xA5, size < 32 ? size : 32);
                pending[0] = (unsigned char)w->id;
            }
            if (q_push(out, pending)) {
                pending = NULL;
                sent++;
                progress = 1;
            }
        }
        /* Drain a few blocks each turn so both directions keep moving. */
        for (int k = 0; k < 4 && received < w->iters; k++) {
            unsigned char *p = q_pop(in);
            if (!p)
                break;
            if (p[0] != (unsigned char)((w->id + w->nthreads - 1) % w->nthreads) || p[1] != 0xA5)
                die("block contents changed in transit");
            check += p[0];
            free(p);
            received++;
            progress = 1;
        }
        if (!progress)
            sched_yield();
    }
    w->ops = sent + received;
    w->check = check;
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 3)
        die("usage: prodcons THREADS ITERS");
    int n = arg_threads(argv[1]);
    uint64_t iters = arg_u64(argv[2], "iterations");
    if (posix_memalign((void **)&g_q, 64, (size_t)n * sizeof *g_q))
        die("queue allocation failed");
    memset(g_q, 0, (size_t)n * sizeof *g_q);
    worker_t w[256];
    memset(w, 0, sizeof w);
    for (int i = 0; i < n; i++)
        w[i].iters = iters;
    uint64_t elapsed = run_workers(n, worker, w);
    uint64_t ops = 0, check = 0;
    for (int i = 0; i < n; i++)
        ops += w[i].ops, check += w[i].check;
    free(g_q);
    char extra[96];
    snprintf(extra, sizeof extra, "threads=%d check=%" PRIu64, n, check);
    bench_report("prodcons", elapsed, ops, extra);
    return 0;
}
