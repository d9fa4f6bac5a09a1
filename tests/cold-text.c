/*
 * cold-text.c - a program that only allocates runs none of the library's seldom-used code.
 *
 * The kernel maps a file's pages up to 64 KiB at a time around a fault (fault-around), but never
 * past the mapping that faulted. So the library is linked with lib/seldom-text.ld (where
 * configure found the linker takes it): the code of debug mode, reports, leaks, walkers, tuning,
 * memcheck tracking and the byte kernels (lib/libfastmm5_seldom.la) and libgcc's unwinder in an
 * executable segment of their own, the second; everything an allocation runs, and the start-up,
 * exit and fork functions of the seldom-used files (FM_EVERY_PROCESS in lib/base.h), in the
 * first. A program without debug mode then never maps the second (52 KiB on x86-64).
 *
 * This program takes execute permission away from that second segment, then allocates,
 * reallocates and frees blocks of every kind in two threads, reads the contention counters and
 * the OS memory figure, trims, forks a child that allocates and exits normally, and exits
 * normally itself: code run there is a SIGSEGV, reported with its offset in the seldom-used
 * mapping (the nearest exported name is printed too; look the offset up with nm -n on the
 * library and the segment's address from readelf -l). The control, in a child: debug mode, whose
 * code lies there, must fault the same way, else the check proves nothing. Start-up code (run at
 * the first allocation, before main) has run by the time the text can be protected: for it, the
 * seldom-used mapping must have no resident page when main starts (/proc/self/smaps).
 * Skips (77) where the library has one executable segment (a linker without the script), on
 * other targets than x86-64 (not checked there yet: hot code calls libgcc helpers, which the
 * script leaves with the hot code, but nobody has run this there natively), where FASTMM5_*
 * variables are set (they may ask for debug mode or reports), and where the control does not
 * fault.
 */
#define _GNU_SOURCE 1
#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fastmm5.h>

extern char **environ;
static uintptr_t seldom_start, seldom_end;
static volatile sig_atomic_t expect_fault; /* set in the control's child */

/* The library's second executable mapping, from /proc/self/maps; false if it has one only.
 * By the file name: distcheck's build directory (libfastmm5-VERSION/...) holds this program. */
static bool find_seldom_text(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    if (f == NULL)
        return false;
    char line[512];
    unsigned found = 0;
    while (found < 2 && fgets(line, sizeof line, f) != NULL) {
        unsigned long lo, hi;
        char perms[8];
        if (strstr(line, "/libfastmm5.so") != NULL && sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) == 3 &&
            perms[2] == 'x') {
            seldom_start = lo;
            seldom_end = hi;
            found++;
        }
    }
    fclose(f);
    return found == 2;
}

/* The resident size of the seldom-used mapping (kB, from /proc/self/smaps), -1 if unknown. A
 * fault anywhere maps pages only inside its own mapping, so anything above 0 here means code of
 * that segment ran (or was read) before main: at start-up, which the fault check below cannot
 * cover. */
static long seldom_text_rss_kb(void)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    if (f == NULL)
        return -1;
    char line[512];
    bool in = false;
    long kb = -1;
    while (fgets(line, sizeof line, f) != NULL) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, ':') != NULL && strstr(line, " kB") == NULL)
            in = lo == seldom_start;
        else if (in && sscanf(line, "Rss: %ld kB", &kb) == 1)
            break;
    }
    fclose(f);
    return kb;
}

static void on_segv(int sig, siginfo_t *info, void *context)
{
    (void)context;
    uintptr_t at = (uintptr_t)info->si_addr;
    char msg[256];
    int n;
    Dl_info d;
    if (at >= seldom_start && at < seldom_end) {
        /* dladdr does not allocate in glibc; the process ends right after anyway */
        const char *near = dladdr((void *)at, &d) && d.dli_sname != NULL ? d.dli_sname : "?";
        n = snprintf(msg, sizeof msg,
                     "cold-text: %sseldom-used code run at offset 0x%lx of its mapping (after %s)\n",
                     expect_fault ? "the control, as expected: " : "FAIL: ", (unsigned long)(at - seldom_start),
                     near);
    } else {
        n = snprintf(msg, sizeof msg, "cold-text: SIGSEGV at %p, outside the protected mapping\n", info->si_addr);
    }
    if (n > 0)
        (void)!write(1, msg, (size_t)n);
    signal(sig, SIG_DFL);
    raise(sig);
}

/* Every kind of block, the way a program uses them. */
static void *work(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    void *live[64] = {0};
    for (unsigned i = 0; i < 4000; i++) {
        unsigned s = i % 64;
        seed = seed * 1103515245u + 12345u;
        unsigned kind = (seed >> 8) % 3;
        size_t size = kind == 0   ? (seed >> 4) % 2600            /* small */
                      : kind == 1 ? 2700 + (seed >> 4) % 60000    /* medium */
                                  : 600000 + (seed >> 4) % 900000; /* large */
        if (i % 97 == 0)
            size = (size_t)3 << 20;
        free(live[s]);
        live[s] = (i & 3) == 0 ? calloc(1, size) : malloc(size);
        if (live[s] == NULL)
            abort();
        memset(live[s], 1, size < 64 ? size : 64);
        if (i % 5 == 0) {
            void *q = realloc(live[s], size / 2 + 1);
            if (q == NULL)
                abort();
            live[s] = realloc(q, size * 2 + 100);
            if (live[s] == NULL)
                abort();
        }
        if (i % 31 == 0) {
            void *a = NULL;
            if (posix_memalign(&a, 256, 1000) != 0 || malloc_usable_size(a) < 1000)
                abort();
            free(a);
            free(aligned_alloc(4096, 8192));
        }
    }
    for (unsigned s = 0; s < 64; s++)
        free(live[s]);
    return NULL;
}

/* Runs fn in a child; returns its wait status. */
static int in_child(void (*fn)(void))
{
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
        fn();
        exit(0); /* normal exit: atexit handlers, destructors, DT_FINI */
    }
    int status = -1;
    if (child < 0 || waitpid(child, &status, 0) != child)
        return -1;
    return status;
}

static void child_allocates(void) { free(malloc(100)); }

static void child_uses_debug_mode(void)
{
    expect_fault = 1;
    fastmm_debug_enter();
    free(malloc(100));
}

int main(void)
{
    setvbuf(stdout, NULL, _IONBF, 0); /* DT_FINI runs before exit flushes stdio */
#if !defined(__x86_64__)
    printf("cold-text: the text layout is checked on x86-64 only: skipped\n");
    return 77;
#endif
    for (char **e = environ; *e != NULL; e++)
        if (strncmp(*e, "FASTMM5_", 8) == 0) {
            printf("cold-text: %s is set (it may ask for debug mode or reports): skipped\n", *e);
            return 77;
        }
    if (!find_seldom_text()) {
        printf("cold-text: libfastmm5 has one executable mapping (built without lib/seldom-text.ld): "
               "skipped\n");
        return 77;
    }
    long rss = seldom_text_rss_kb();
    if (rss > 0) {
        printf("FAIL: start-up ran seldom-used code: %ld kB of that segment are resident before main\n", rss);
        return 1;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGSEGV, &sa, NULL);
    if (mprotect((void *)seldom_start, seldom_end - seldom_start, PROT_READ) != 0) {
        perror("cold-text: mprotect");
        return 99;
    }

    int status = in_child(child_uses_debug_mode);
    if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGSEGV) {
        printf("cold-text: the control ran debug mode without a fault (status 0x%x): protections not "
               "enforced here (an emulator?), or debug mode's code is not in that mapping: skipped\n", status);
        return 77;
    }
    pthread_t t;
    if (pthread_create(&t, NULL, work, (void *)1) != 0)
        return 99;
    work((void *)2);
    pthread_join(t, NULL);
    fastmm_contention_t c; /* what a monitoring loop (and bench/workloads) reads */
    fastmm_get_contention(&c);
    if (fastmm_os_memory() == 0)
        return 99;
    malloc_trim(0);
    status = in_child(child_allocates);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        printf("cold-text: FAIL: a forked child that allocated and exited ended with status 0x%x\n", status);
        return 1;
    }
    printf("cold-text: %lu KiB of seldom-used code; allocation work, fork and exit ran none of it\n",
           (unsigned long)((seldom_end - seldom_start) >> 10));
    return 0; /* the exit path runs with the text still protected: a fault there fails the test */
}
