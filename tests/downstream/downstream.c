/*
 * downstream.c - a program of a downstream project, linked with the installed libfastmm5 through
 * `pkg-config --cflags --libs fastmm5`. It proves that libfastmm5, not the C library, serves both
 * its fastmm_* calls and its plain malloc/free, and exits 0 only then:
 *
 *  1. dladdr(): the `malloc` and `free` the program calls are defined in libfastmm5.so.N;
 *  2. fastmm_usable_size() accepts a block from plain malloc() (libfastmm5 checks ownership
 *     fail-closed: a foreign pointer would be reported as an invalid pointer and abort) and
 *     gives a FastMM5 size-class capacity: malloc(100) is in the 112-byte class (110 usable
 *     bytes on 64-bit targets, after the 2-byte block header), where glibc would give 104;
 *     malloc_usable_size() agrees;
 *  3. fastmm_get_usage(): allocated_bytes grows by the usable size of a 1 MiB malloc() block and
 *     falls back when it is freed; fastmm_os_memory() grows too.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fastmm5.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

static void check(int ok, const char *what)
{
    printf("%s: %s\n", ok ? "ok" : "NOT OK", what);
    if (!ok)
        failures++;
}

/* The shared object that defines the function at this address. */
static const char *object_of(void *address)
{
    Dl_info info;
    if (dladdr(address, &info) == 0 || info.dli_fname == NULL)
        return "(unknown)";
    return info.dli_fname;
}

int main(void)
{
    /* Through pointers the compiler cannot see through, so the calls are not folded away. */
    void *(*volatile plain_malloc)(size_t) = malloc;
    void (*volatile plain_free)(void *) = free;

    printf("libfastmm5 %d.%d.%d (FastMM5 %d design)\n", FASTMM_VERSION_MAJOR, FASTMM_VERSION_MINOR,
           FASTMM_VERSION_PATCH, FASTMM_UPSTREAM_VERSION);

    /* 1. where malloc and free come from */
    const char *malloc_object = object_of((void *)plain_malloc);
    const char *free_object = object_of((void *)plain_free);
    printf("malloc is defined in %s\nfree is defined in %s\n", malloc_object, free_object);
    check(strstr(malloc_object, "libfastmm5.so") != NULL, "malloc comes from libfastmm5");
    check(strstr(free_object, "libfastmm5.so") != NULL, "free comes from libfastmm5");

    /* 2. a plain malloc block is a libfastmm5 block of a FastMM5 size class */
    char *p = plain_malloc(100);
    check(p != NULL, "malloc(100)");
    memset(p, 'x', 100);
    size_t usable = fastmm_usable_size(p);
    printf("malloc(100): fastmm_usable_size %zu, malloc_usable_size %zu\n", usable, malloc_usable_size(p));
    check(usable == malloc_usable_size(p), "fastmm_usable_size(malloc block) == malloc_usable_size");
    if (sizeof(void *) == 8)
        check(usable == 110, "malloc(100) is in FastMM5's 112-byte class (110 usable bytes)");
    else
        check(usable >= 100 && (usable + 2) % 8 == 0, "malloc(100) is in a FastMM5 size class");
    check(((uintptr_t)p % FASTMM_MIN_ALIGNMENT) == 0, "aligned to FASTMM_MIN_ALIGNMENT");

    char *q = fastmm_malloc(100);
    check(q != NULL && fastmm_usable_size(q) == usable, "fastmm_malloc(100) is in the same class");
    plain_free(q); /* fastmm_malloc and free are one allocator */
    plain_free(p);

    /* 3. the usage counters see a plain malloc of 1 MiB (a large block: no thread cache) */
    fastmm_usage_t before, during, after;
    size_t os_before = fastmm_os_memory();
    fastmm_get_usage(&before);
    char *big = plain_malloc((size_t)1 << 20);
    check(big != NULL, "malloc(1 MiB)");
    memset(big, 1, (size_t)1 << 20);
    size_t big_usable = fastmm_usable_size(big);
    fastmm_get_usage(&during);
    size_t os_during = fastmm_os_memory();
    plain_free(big);
    fastmm_get_usage(&after);
    printf("allocated bytes: %zu before, %zu with the 1 MiB block (usable %zu), %zu after free\n",
           before.allocated_bytes, during.allocated_bytes, big_usable, after.allocated_bytes);
    printf("OS memory: %zu before, %zu with the block\n", os_before, os_during);
    check(during.allocated_bytes - before.allocated_bytes == big_usable,
          "fastmm_get_usage counts the malloc'd block");
    check(after.allocated_bytes == before.allocated_bytes, "and stops counting it after free");
    check(os_during >= os_before + ((size_t)1 << 20), "fastmm_os_memory grew by at least 1 MiB");

    if (failures != 0) {
        printf("FAILED: %d check(s): allocations are not served by libfastmm5\n", failures);
        return 1;
    }
    printf("PASSED: this program's allocations are served by libfastmm5\n");
    return 0;
}
