/*
 * buggy-program.c - a deliberately buggy program for tests/debug-preload.sh.
 *
 * It knows nothing of libfastmm5: the script runs it unmodified under
 * LD_PRELOAD=libfastmm5.so FASTMM5_DEBUG=1 and checks that debug mode catches its bugs and names
 * the function that allocated the block. Build it with -O0 -g -rdynamic, so that
 * make_customer_record stays a real function, is in the dynamic symbol table, and dladdr() can
 * name it in the allocation stack trace.
 *
 *   buggy-program        allocates a 24-byte record, writes one byte past its end (the classic
 *                        off-by-one terminator), frees it, then prints "done" and exits 0 -
 *                        unless the allocator stops it at the free.
 *   buggy-program leak   allocates the record and never frees it; prints "done", exits 0.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct customer_record {
    char name[16];
    unsigned id;
    unsigned flags;
}; /* 24 bytes */

/* Kept out of line (and exported with -rdynamic) so the allocation trace shows it. */
__attribute__((noinline)) struct customer_record *make_customer_record(const char *name, unsigned id)
{
    struct customer_record *r = malloc(sizeof *r);
    if (r == NULL) {
        perror("malloc");
        exit(2);
    }
    memset(r, 0, sizeof *r);
    strncpy(r->name, name, sizeof r->name - 1);
    r->id = id;
    return r;
}

/* The bug: the record is treated as a NUL-terminated 24-byte string, one byte too long. The
 * index is volatile so the compiler neither warns about nor removes the out-of-bounds store. */
__attribute__((noinline)) static void terminate_record(struct customer_record *r)
{
    volatile size_t end = sizeof *r;
    ((char *)r)[end] = '\0';
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "leak") == 0) {
        struct customer_record *r = make_customer_record("leaky", 7);
        printf("record %u\n", r->id);
        puts("done");
        return 0; /* r is never freed */
    }
    struct customer_record *r = make_customer_record("overrun", 42);
    terminate_record(r);
    free(r);
    puts("done");
    return 0;
}
