/*
 * installed-link.c - `make installcheck`: a program built against the INSTALLED library with
 * `pkg-config --cflags --libs fastmm5`, as README.md tells users to.
 *
 * Guards: the installed header compiles on its own, fastmm5.pc gives working flags, the
 * installed libfastmm5.so exports the fastmm_* API, and a program linked with -lfastmm5 gets
 * its plain malloc/free from libfastmm5 (fastmm_usable_size of a malloc block agrees with
 * malloc_usable_size; a glibc block would be a foreign pointer to libfastmm5).
 */
#include <fastmm5.h>

#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>

int main(void)
{
    void *p = fastmm_malloc(100);
    void *q = malloc(200);
    int ok = 1;

    if (p == NULL || q == NULL || fastmm_usable_size(p) < 100) {
        fprintf(stderr, "installed-link: fastmm_malloc/malloc failed\n");
        ok = 0;
    } else if (fastmm_usable_size(q) != malloc_usable_size(q)) {
        fprintf(stderr, "installed-link: malloc is not libfastmm5's (usable sizes %zu vs %zu)\n",
                fastmm_usable_size(q), malloc_usable_size(q));
        ok = 0;
    }
    fastmm_free(p);
    free(q);
    return ok ? 0 : 1;
}
