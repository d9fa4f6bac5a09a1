/*
 * probe
 *
 * Run once under every allocator variant before the measurements, to check the set-up rather
 * than to measure anything. It reports which shared object the process's malloc resolves to
 * (so a preload that the dynamic linker silently ignored is caught), and which optional
 * libfastmm5 introspection functions are exported. fastmm_debug_active() is called when
 * present, so the runner can tell whether FASTMM5_DEBUG=1 actually switched debug mode on.
 */
#include "common.h"

int main(void)
{
    /* A program linked against glibc binds malloc@GLIBC_2.2.5 (on x86-64): the first object in
     * search order with that version or an unversioned malloc. dlsym finds unversioned and
     * default-version definitions (jemalloc, libfastmm5); dlvsym finds a preload that only has
     * the versioned one (glibc's libc_malloc_debug.so). Whichever is not libc wins. */
    Dl_info info;
    const char *from = "unknown";
    void *m = dlsym(RTLD_DEFAULT, "malloc");
    if (m && dladdr(m, &info) && info.dli_fname)
        from = info.dli_fname;
#if defined(__x86_64__)
    void *mv = dlvsym(RTLD_DEFAULT, "malloc", "GLIBC_2.2.5");
    if (mv && mv != m && dladdr(mv, &info) && info.dli_fname && !strstr(info.dli_fname, "/libc.so"))
        from = info.dli_fname;
#endif
    void *p = malloc(100);
    KEEP(p);
    free(p);
    bool (*dbg_active)(void) = (bool (*)(void))dlsym(RTLD_DEFAULT, "fastmm_debug_active");
    printf("BENCH workload=probe elapsed_ns=0 ops=0 malloc_from=%s fastmm_os_memory=%d "
           "fastmm_process_pending_frees=%d fastmm_debug_active=%s\n",
           from, dlsym(RTLD_DEFAULT, "fastmm_os_memory") != NULL,
           dlsym(RTLD_DEFAULT, "fastmm_process_pending_frees") != NULL,
           dbg_active ? (dbg_active() ? "1" : "0") : "absent");
    return 0;
}
