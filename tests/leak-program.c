/*
 * leak-program.c - a program for tests/leak-exit.sh, run unmodified under LD_PRELOAD with
 * FASTMM5_REPORT_LEAKS: the leak check at exit.
 *
 *   leak-program clean     starts and joins two threads, frees everything it allocates.
 *   leak-program threads   loses one 777-byte block (lose_block: no pointer to it remains),
 *                          keeps a 555-byte one in a global, starts four threads that allocate
 *                          and free without end and one blocked in read(), and returns from
 *                          main while they all still run.
 * Both print "done" last. Build with -O0 -g -rdynamic, so that dladdr names lose_block.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void *volatile kept;
static uintptr_t volatile hidden; /* the lost block's address, XORed: no pointer to it */
static int pipe_fds[2];

__attribute__((noinline)) void lose_block(void)
{
    char *p = malloc(777);
    memset(p, 'x', 777);
    hidden = (uintptr_t)p ^ (uintptr_t)0x5a5a5a5a5a5a5a5au;
}

static void *churn(void *arg)
{
    (void)arg;
    for (unsigned i = 0;; i++) {
        void *p[8];
        for (int k = 0; k < 8; k++)
            p[k] = malloc(16 + (i * 13 + (unsigned)k * 100) % 3000);
        for (int k = 0; k < 8; k++)
            free(p[k]);
    }
    return NULL;
}

static void *blocked(void *arg)
{
    (void)arg;
    char c;
    void *mine = malloc(64); /* on this thread's stack while it waits: still reachable */
    if (read(pipe_fds[0], &c, 1) < 0)
        perror("read");
    free(mine);
    return NULL;
}

static void *short_lived(void *arg)
{
    free(malloc(100));
    return arg;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    if (strcmp(mode, "clean") == 0) {
        pthread_t t[2];
        for (int i = 0; i < 2; i++)
            pthread_create(&t[i], NULL, short_lived, NULL);
        for (int i = 0; i < 2; i++)
            pthread_join(t[i], NULL);
        char *s = malloc(1000);
        snprintf(s, 1000, "done");
        puts(s);
        free(s);
        return 0;
    }
    if (strcmp(mode, "threads") == 0) {
        lose_block();
        kept = malloc(555);
        if (pipe(pipe_fds) != 0)
            return 2;
        pthread_t t;
        for (int i = 0; i < 4; i++)
            pthread_create(&t, NULL, churn, NULL);
        pthread_create(&t, NULL, blocked, NULL);
        usleep(20000);
        puts("done");
        return 0;
    }
    fprintf(stderr, "usage: leak-program clean|threads\n");
    return 2;
}
