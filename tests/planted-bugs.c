/*
 * planted-bugs.c - one deliberate memory error per mode, for tests/valgrind-planted.sh: memcheck,
 * running libfastmm5 as the allocator, must report each of them against libfastmm5's blocks.
 *
 *   clean           no error at all (the control)
 *   invalid-write   writes one byte past a 10-byte block (into its slack)
 *   read-after-free reads a freed 100-byte block
 *   read-link-after-free  reads bytes 0 and 8 of a freed 40-byte block, where the allocator
 *                   keeps its free-list link (two errors)
 *   uninitialised   branches on a byte malloc never initialised
 *   leak            loses the only pointer to a 300-byte block
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static volatile char sink;

__attribute__((noinline)) static char *get(size_t n) { return malloc(n); }

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "clean";
    char *p = get(10);
    memset(p, 'a', 10);
    if (strcmp(mode, "invalid-write") == 0)
        p[10] = 'X';
    free(p);

    char *q = get(100);
    memset(q, 'b', 100);
    free(q);
    if (strcmp(mode, "read-after-free") == 0)
        sink = q[50];

    char *k = get(40);
    memset(k, 'k', 40);
    free(k);
    if (strcmp(mode, "read-link-after-free") == 0) {
        sink = k[0];
        sink = k[8];
    }

    char *u = get(64);
    if (strcmp(mode, "uninitialised") == 0 && u[7] == 'z')
        puts("unlikely");
    free(u);

    char *l = get(300);
    memset(l, 'c', 300);
    if (strcmp(mode, "leak") != 0)
        free(l);
    l = NULL;

    /* ordinary work in every mode: realloc growth across classes, calloc, aligned blocks */
    char *s = NULL;
    for (size_t n = 1; n < 5000; n += 37) {
        s = realloc(s, n);
        s[n - 1] = 'd';
    }
    free(s);
    int *z = calloc(1000, sizeof *z);
    long sum = 0;
    for (int i = 0; i < 1000; i++)
        sum += z[i];
    free(z);
    void *a = NULL;
    if (posix_memalign(&a, 256, 1000) == 0) {
        memset(a, 1, 1000);
        free(a);
    }
    char *big = malloc(2 << 20);
    memset(big, 2, 2 << 20);
    big = realloc(big, 4 << 20);
    free(big);
    printf("%s done %ld\n", mode, sum);
    return 0;
}
