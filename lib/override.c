/*
 * override.c - the C library's allocation names, exported unversioned so that linking with
 * -lfastmm5 or LD_PRELOAD makes libfastmm5 the process's allocator. Each is a thin wrapper over
 * a fastmm_* entry point (the hottest through their hidden names, a direct jump); the glibc
 * statistics calls are answered from this heap.
 */
#include "internal.h"

#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

FM_EXPORT void *malloc(size_t size) { return fm_entry_malloc(size); }
FM_EXPORT void free(void *p) { fm_entry_free(p); }
FM_EXPORT void cfree(void *p) { fm_entry_free(p); }
FM_EXPORT void *calloc(size_t count, size_t size) { return fm_entry_calloc(count, size); }
FM_EXPORT void *realloc(void *p, size_t size) { return fm_entry_realloc(p, size); }
FM_EXPORT void *reallocarray(void *p, size_t count, size_t size) { return fastmm_reallocarray(p, count, size); }
FM_EXPORT int posix_memalign(void **out, size_t alignment, size_t size)
{
    return fastmm_posix_memalign(out, alignment, size);
}
FM_EXPORT void *aligned_alloc(size_t alignment, size_t size) { return fastmm_aligned_alloc(alignment, size); }
FM_EXPORT void *memalign(size_t alignment, size_t size) { return fastmm_memalign(alignment, size); }
FM_EXPORT void *valloc(size_t size) { return fastmm_memalign(fm_os_page_size(), size); }
FM_EXPORT void *pvalloc(size_t size)
{
    size_t page = fm_os_page_size();
    if (size > (size_t)PTRDIFF_MAX - page) {
        errno = ENOMEM;
        return NULL;
    }
    return fastmm_memalign(page, size == 0 ? page : fm_align_up(size, page));
}
FM_EXPORT size_t malloc_usable_size(void *p) { return fastmm_usable_size(p); }

/* glibc's internal names, which some programs and libraries call directly. */
FM_EXPORT void *__libc_malloc(size_t size) { return fm_entry_malloc(size); }
FM_EXPORT void __libc_free(void *p) { fm_entry_free(p); }
FM_EXPORT void *__libc_calloc(size_t count, size_t size) { return fm_entry_calloc(count, size); }
FM_EXPORT void *__libc_realloc(void *p, size_t size) { return fm_entry_realloc(p, size); }
FM_EXPORT void *__libc_memalign(size_t alignment, size_t size) { return fastmm_memalign(alignment, size); }
FM_EXPORT void *__libc_valloc(size_t size) { return valloc(size); }
FM_EXPORT void *__libc_pvalloc(size_t size) { return pvalloc(size); }
FM_EXPORT int __posix_memalign(void **out, size_t alignment, size_t size)
{
    return fastmm_posix_memalign(out, alignment, size);
}

/* ---- glibc statistics, answered from this heap ---- */

FM_EXPORT struct mallinfo2 mallinfo2(void)
{
    fm_usage_detail_t d;
    fm_usage_collect(&d);
    struct mallinfo2 mi = {0};
    mi.arena = d.medium_span_bytes;                 /* non-mmapped space: the medium spans */
    mi.ordblks = d.medium_used_blocks;
    mi.hblks = d.large_blocks;                      /* mmapped blocks: the large blocks */
    mi.hblkhd = d.large_mapped_bytes;
    mi.uordblks = d.small_used_bytes + d.medium_used_bytes;
    mi.fordblks = mi.arena > mi.uordblks ? mi.arena - mi.uordblks : 0;
    mi.keepcost = 0;
    return mi;
}

/* The old interface: the same numbers in int fields, saturating at INT_MAX instead of
 * wrapping past 2 GiB as glibc's does. */
static int saturate(size_t v) { return v > (size_t)INT_MAX ? INT_MAX : (int)v; }

FM_EXPORT struct mallinfo mallinfo(void)
{
    struct mallinfo2 m2 = mallinfo2();
    struct mallinfo mi = {0};
    mi.arena = saturate(m2.arena);
    mi.ordblks = saturate(m2.ordblks);
    mi.smblks = saturate(m2.smblks);
    mi.hblks = saturate(m2.hblks);
    mi.hblkhd = saturate(m2.hblkhd);
    mi.usmblks = saturate(m2.usmblks);
    mi.fsmblks = saturate(m2.fsmblks);
    mi.uordblks = saturate(m2.uordblks);
    mi.fordblks = saturate(m2.fordblks);
    mi.keepcost = saturate(m2.keepcost);
    return mi;
}

/* glibc's lines, which tools parse, with this heap's numbers: the medium spans (small spans are
 * carved from them) are the arena, the large blocks the mmapped regions. This allocator keeps no
 * high-water mark of its large blocks, so the two "max mmap" lines give the present ones. glibc
 * makes the call no cancellation point: a pending cancel must not stop it half-written.
 * libfastmm5's own report is FASTMM5_STATS's. */
FM_EXPORT void malloc_stats(void)
{
    fm_usage_detail_t d;
    fm_usage_collect(&d);
    size_t in_use = d.small_used_bytes + d.medium_used_bytes;
    int cancel_state;
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel_state);
    flockfile(stderr);
    fprintf(stderr,
            "Arena 0:\n"
            "system bytes     = %10u\n"
            "in use bytes     = %10u\n"
            "Total (incl. mmap):\n"
            "system bytes     = %10u\n"
            "in use bytes     = %10u\n"
            "max mmap regions = %10u\n"
            "max mmap bytes   = %10lu\n",
            (unsigned)d.medium_span_bytes, (unsigned)in_use, (unsigned)(d.medium_span_bytes + d.large_mapped_bytes),
            (unsigned)(in_use + d.large_used_bytes), (unsigned)d.large_blocks, (unsigned long)d.large_mapped_bytes);
    funlockfile(stderr);
    pthread_setcancelstate(cancel_state, NULL);
}

FM_EXPORT int malloc_info(int options, FILE *fp)
{
    if (options != 0) {
        errno = EINVAL;
        return -1;
    }
    fm_usage_detail_t d;
    fm_usage_collect(&d);
    fprintf(fp,
            "<malloc version=\"1\" allocator=\"libfastmm5\">\n"
            "<heap nr=\"0\">\n"
            "<total type=\"small\" count=\"%zu\" size=\"%zu\"/>\n"
            "<total type=\"medium\" count=\"%zu\" size=\"%zu\"/>\n"
            "<total type=\"mmap\" count=\"%zu\" size=\"%zu\"/>\n"
            "<system type=\"current\" size=\"%zu\"/>\n"
            "<system type=\"max\" size=\"%zu\"/>\n"
            "</heap>\n"
            "</malloc>\n",
            d.small_used_blocks, d.small_used_bytes, d.medium_used_blocks, d.medium_used_bytes, d.large_blocks,
            d.large_used_bytes, fm_os_mapped_bytes(), fm_os_peak_mapped_bytes());
    return 0;
}

/* Spans are released as soon as they empty, except feed spans and the one empty span FastMM5
 * keeps per arena, and a few freed large mappings are kept for reuse (large.c); trimming drains
 * the pending frees and gives those back too, and the pages inside free medium blocks.
 * Returns 1 if memory went back to the OS (unmapped, or pages given back), as glibc does. */
FM_EXPORT int malloc_trim(size_t pad)
{
    (void)pad;
    size_t before = fm_os_mapped_bytes();
    fastmm_process_pending_frees();
    fm_small_trim();
    bool purged = fm_medium_trim(); /* pages inside free blocks given back */
    fm_large_release_retained();
    return purged || fm_os_mapped_bytes() < before;
}

/* No glibc tuning parameter applies to this design. As glibc 2.36 does, every parameter is
 * accepted (1), known or not, except a fastbin limit out of its range (0). */
FM_EXPORT int mallopt(int param, int value)
{
    if (param == M_MXFAST && (value < 0 || (size_t)value > 80 * sizeof(size_t) / 4))
        return 0;
    return 1;
}
