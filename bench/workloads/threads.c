/*
 * threads THREADS TOTAL
 *
 * Many short-lived threads: TOTAL threads are created in waves of THREADS running at once.
 * Each one allocates 256 blocks (16..4096 bytes, with 64 live at a time), frees them, and
 * exits leaving one last block behind, which the main thread frees after the join (a free of
 * a block whose thread is gone). The time covers thread creation and exit, so it includes the
 * allocator's per-thread set-up and tear-down.
 */
#include "common.h"

typedef struct job {
    unsigned seed;
    unsigned char *leftover;
    uint64_t check;
} job_t;

static void *short_lived(void *arg)
{
    job_t *j = arg;
    uint32_t seed = j->seed * 2654435761u + 1;
    unsigned char *live[64] = {0};
    uint64_t check = 0;
    for (unsigned i = 0; i < 256; i++) {
        unsigned s = i & 63;
        if (live[s]) {
            check += live[s][0];
            free(live[s]);
        }
        size_t size = 16 + xs32(&seed) % 4081;
        live[s] = malloc(size);
        if (!live[s])
            xmalloc_fail(size);
        live[s][0] = (unsigned char)i;
        live[s][size - 1] = 1;
    }
    for (unsigned s = 1; s < 64; s++)
        free(live[s]);
    j->leftover = live[0];
    j->check = check;
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 3)
        die("usage: threads THREADS TOTAL");
    int n = arg_threads(argv[1]);
    uint64_t total = arg_u64(argv[2], "total thread count");
    pthread_t tid[256];
    job_t job[256];
    uint64_t done = 0, check = 0;

    uint64_t t0 = now_ns();
    while (done < total) {
        int wave = (total - done) < (uint64_t)n ? (int)(total - done) : n;
        for (int i = 0; i < wave; i++) {
            job[i].seed = (unsigned)(done + (uint64_t)i);
            if (pthread_create(&tid[i], NULL, short_lived, &job[i]))
                die("pthread_create");
        }
        for (int i = 0; i < wave; i++) {
            pthread_join(tid[i], NULL);
            check += job[i].check + job[i].leftover[0];
            free(job[i].leftover);
        }
        done += (uint64_t)wave;
    }
    uint64_t t1 = now_ns();
    char extra[96];
    snprintf(extra, sizeof extra, "threads=%d total_threads=%" PRIu64 " check=%" PRIu64, n, total, check);
    bench_report("threads", t1 - t0, total * 512, extra); /* 256 mallocs + 256 frees each */
    return 0;
}
