/*
 * usage.c - usage summaries built from a pass over the heap (FastMM5's GetUsageSummary) and the
 * report printed at exit with FASTMM5_STATS=1. Pending frees count as allocated, as in FastMM5.
 */
#include "internal.h"

/* The counters monitoring loops poll (FM_POLLED: with the hot code). */
FM_POLLED FM_EXPORT size_t fastmm_os_memory(void) { return fm_os_mapped_bytes(); }

FM_POLLED FM_EXPORT void fastmm_get_contention(fastmm_contention_t *out)
{
    out->small = fm_small_contention();
    out->medium = fm_medium_contention();
    out->large = fm_large_contention();
}

void fm_usage_collect(fm_usage_detail_t *d)
{
    *d = (fm_usage_detail_t){0};
    fm_medium_collect(d);
    fm_large_collect(d);
}

static size_t allocated_of(const fm_usage_detail_t *d)
{
    return d->small_used_bytes + d->medium_used_bytes + d->large_used_bytes;
}

FM_EXPORT void fastmm_get_usage(fastmm_usage_t *usage)
{
    fm_usage_detail_t d;
    fm_usage_collect(&d);
    size_t os = fm_os_mapped_bytes();
    usage->allocated_bytes = allocated_of(&d);
    usage->overhead_bytes = os > usage->allocated_bytes ? os - usage->allocated_bytes : 0;
    usage->efficiency_percent = os == 0 ? 100.0 : 100.0 * (double)usage->allocated_bytes / (double)os;
}

static void line(fm_report_t *r, const char *label, uint64_t v, const char *unit)
{
    fm_report_str(r, "  ");
    fm_report_str(r, label);
    fm_report_str(r, ": ");
    fm_report_dec(r, v);
    fm_report_str(r, unit);
    fm_report_str(r, "\n");
}

FM_EXPORT void fastmm_write_usage_report(int fd)
{
    fm_usage_detail_t d;
    fm_usage_collect(&d);
    fastmm_contention_t c;
    fastmm_get_contention(&c);
    size_t os = fm_os_mapped_bytes();
    size_t allocated = allocated_of(&d);
    char buf[2048];
    fm_report_t r = {buf, 0, sizeof buf};
    buf[0] = '\0';
    fm_report_str(&r, "libfastmm5 usage report\n");
    uint64_t large_and_medium = 0;
    for (unsigned a = 0; a < FM_MEDIUM_ARENAS; a++)
        large_and_medium += fm_load_relaxed(&fm_medium_managers[a].served);
    for (unsigned a = 0; a < FM_LARGE_ARENAS; a++)
        large_and_medium += fm_load_relaxed(&fm_large_managers[a].served);
    line(&r, "allocations served", fm_small_served() + large_and_medium, "");
    line(&r, "small blocks in use", d.small_used_blocks, "");
    line(&r, "small bytes in use", d.small_used_bytes, " bytes");
    line(&r, "medium blocks in use", d.medium_used_blocks, "");
    line(&r, "medium bytes in use", d.medium_used_bytes, " bytes");
    line(&r, "large blocks in use", d.large_blocks, "");
    line(&r, "large bytes in use", d.large_used_bytes, " bytes");
    line(&r, "allocated", allocated, " bytes");
    line(&r, "OS memory now", os, " bytes");
    line(&r, "OS memory peak", fm_os_peak_mapped_bytes(), " bytes");
    line(&r, "efficiency", os == 0 ? 100 : (uint64_t)(100.0 * (double)allocated / (double)os), " %");
    line(&r, "contention small", c.small, "");
    line(&r, "contention medium", c.medium, "");
    line(&r, "contention large", c.large, "");
    fm_os_write_all(fd, r.buf, r.len);
}
