/*
 * os_linux.c - the OS contract of os.h on Linux: mmap/mremap/munmap, raw write(2), gettid,
 * CLOCK_MONOTONIC and an environment lookup that never allocates.
 */
#define _GNU_SOURCE 1 /* mremap */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* The grace amount FastMM5 adds once when the usage limit is first hit (shutdown needs memory). */
#define FM_LIMIT_GRACE ((size_t)32 << 20)

static size_t mapped_bytes;
static size_t peak_mapped_bytes;
size_t fm_os_usage_limit; /* os.h: fm_os_limit() reads it inline */
static bool limit_grace_used;
static bool limit_grace_pending;

static bool account_map(size_t size)
{
    size_t now = fm_add_relaxed(&mapped_bytes, size) + size;
    size_t limit = fm_load_relaxed(&fm_os_usage_limit);
    if (limit != 0 && now > limit) {
        /* The grace is granted once this refusal has reached the program (fm_os_grant_grace),
         * not here: a retry within the same call (the minimum small span after the optimal one,
         * the exact size after realloc's 25% wish, a page move after growth in place) must not
         * live on it, or the program never sees the limit (FastMM5 maps once per request). */
        if (!fm_load_relaxed(&limit_grace_used))
            fm_store_relaxed(&limit_grace_pending, true);
        fm_sub_relaxed(&mapped_bytes, size);
        return false;
    }
    size_t peak = fm_load_relaxed(&peak_mapped_bytes);
    while (now > peak && !__atomic_compare_exchange_n(&peak_mapped_bytes, &peak, now, true,
                                                      __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
    return true;
}

static void *raw_map(void *hint, size_t size)
{
    void *p = mmap(hint, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

/* Maps `size` bytes at a chunk boundary. mmap only promises page alignment, so when the kernel's
 * choice is off, map a chunk more and cut both ends. */
static void *map_aligned(size_t size)
{
    char *p = raw_map(NULL, size);
    if (p == NULL || ((uintptr_t)p & (FM_OS_CHUNK - 1)) == 0)
        return p;
    munmap(p, size);
    p = raw_map(NULL, size + FM_OS_CHUNK);
    if (p == NULL)
        return NULL;
    char *aligned = (char *)fm_align_up((uintptr_t)p, FM_OS_CHUNK);
    if (aligned != p)
        munmap(p, (size_t)(aligned - p));
    size_t tail = (size_t)((p + size + FM_OS_CHUNK) - (aligned + size));
    if (tail != 0)
        munmap(aligned + size, tail);
    return aligned;
}

void *fm_os_map(size_t size)
{
    if (!account_map(size)) {
        errno = ENOMEM;
        return NULL;
    }
    void *p = map_aligned(size);
    if (p == NULL) {
        fm_sub_relaxed(&mapped_bytes, size);
        errno = ENOMEM;
    }
    return p;
}

void fm_os_unmap(void *p, size_t size)
{
    munmap(p, size);
    fm_sub_relaxed(&mapped_bytes, size);
}

/* The fences are mapped no-access first and the middle opened, so that there is never a moment
 * when a fence page is writable. Only the middle is accounted: the fences never take memory. */
void *fm_os_map_fenced(size_t size)
{
    if (!account_map(size)) {
        errno = ENOMEM;
        return NULL;
    }
    size_t page = fm_os_page_size();
    char *p = mmap(NULL, size + 2 * page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p != MAP_FAILED && mprotect(p + page, size, PROT_READ | PROT_WRITE) == 0)
        return p + page;
    if (p != MAP_FAILED)
        munmap(p, size + 2 * page);
    fm_sub_relaxed(&mapped_bytes, size);
    errno = ENOMEM;
    return NULL;
}

void fm_os_unmap_fenced(void *p, size_t size)
{
    size_t page = fm_os_page_size();
    munmap((char *)p - page, size + 2 * page);
    fm_sub_relaxed(&mapped_bytes, size);
}

bool fm_os_grow_in_place(void *p, size_t old_size, size_t new_size)
{
    if (!account_map(new_size - old_size))
        return false;
    /* Without MREMAP_MAYMOVE the kernel grows the mapping only if the pages after it are free. */
    if (mremap(p, old_size, new_size, 0) == MAP_FAILED) {
        fm_sub_relaxed(&mapped_bytes, new_size - old_size);
        return false;
    }
    return true;
}

/* A chunk-aligned mapping of new_size bytes for fm_os_move_onto, accounted as the growth only
 * (the old pages travel). Reserved first, so that the caller can describe it (pagemap) before
 * anything moves. */
void *fm_os_move_target(size_t old_size, size_t new_size)
{
    if (new_size > old_size && !account_map(new_size - old_size)) {
        errno = ENOMEM;
        return NULL;
    }
    void *target = map_aligned(new_size);
    if (target == NULL) {
        if (new_size > old_size)
            fm_sub_relaxed(&mapped_bytes, new_size - old_size);
        errno = ENOMEM;
    }
    return target;
}

/* A target that was not used goes back. */
void fm_os_drop_move_target(void *target, size_t old_size, size_t new_size)
{
    munmap(target, new_size);
    if (new_size > old_size)
        fm_sub_relaxed(&mapped_bytes, new_size - old_size);
}

/* Moves the pages of [p, p + old_size) onto target: the kernel moves the page tables, the
 * contents travel without a copy. False: nothing moved (the caller drops the target). */
bool fm_os_move_onto(void *p, size_t old_size, size_t new_size, void *target)
{
    if (mremap(p, old_size, new_size, MREMAP_MAYMOVE | MREMAP_FIXED, target) == MAP_FAILED)
        return false;
    if (new_size < old_size)
        fm_sub_relaxed(&mapped_bytes, old_size - new_size);
    return true;
}

void fm_os_trim(void *p, size_t size) { madvise(p, size, MADV_DONTNEED); }

bool fm_os_protect(void *p, size_t size, bool accessible)
{
    return size == 0 || mprotect(p, size, accessible ? PROT_READ | PROT_WRITE : PROT_NONE) == 0;
}

/* One system call where madvise and mprotect take two. Should the kernel refuse (its limit on
 * mappings), the two do the same. */
void fm_os_discard_no_access(void *p, size_t size)
{
    if (mmap(p, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0) == MAP_FAILED) {
        madvise(p, size, MADV_DONTNEED);
        mprotect(p, size, PROT_NONE);
    }
}

/* Threads may ask first at the same time (the guarded paths do): the same value, stored
 * atomically. */
size_t fm_os_page_size(void)
{
    static size_t page;
    size_t p = fm_load_relaxed(&page);
    if (p == 0) {
        size_t v = (size_t)getauxval(AT_PAGESZ);
        p = v ? v : 4096;
        fm_store_relaxed(&page, p);
    }
    return p;
}

size_t fm_os_mapped_bytes(void) { return fm_load_relaxed(&mapped_bytes); }
size_t fm_os_peak_mapped_bytes(void) { return fm_load_relaxed(&peak_mapped_bytes); }
void fm_os_set_limit(size_t limit)
{
    fm_store_relaxed(&limit_grace_pending, false);
    fm_store_relaxed(&limit_grace_used, false);
    fm_store_relaxed(&fm_os_usage_limit, limit);
}

void fm_os_grant_grace(void)
{
    if (!fm_load_relaxed(&limit_grace_pending) || !__atomic_exchange_n(&limit_grace_pending, false, __ATOMIC_RELAXED))
        return;
    bool used = false;
    if (__atomic_compare_exchange_n(&limit_grace_used, &used, true, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        fm_add_relaxed(&fm_os_usage_limit, FM_LIMIT_GRACE);
}

void fm_os_write_all(int fd, const char *buf, size_t len)
{
    int saved = errno;
    while (len > 0) {
        ssize_t n = write(fd, buf, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        buf += n;
        len -= (size_t)n;
    }
    errno = saved;
}

int fm_os_open_append(const char *path)
{
    int saved = errno;
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    errno = saved;
    return fd;
}

void fm_os_close(int fd)
{
    int saved = errno;
    close(fd);
    errno = saved;
}

/* gettid is a real system call (several microseconds on some virtual machines) and debug mode
 * asks for it on every allocation and free: ask once per thread. fork's child gets a new id
 * (init.c calls fm_os_forget_thread_id in the child). */
static __thread uint32_t cached_tid __attribute__((tls_model("initial-exec")));

uint32_t fm_os_thread_id(void)
{
    if (FM_UNLIKELY(cached_tid == 0))
        cached_tid = (uint32_t)syscall(SYS_gettid);
    return cached_tid;
}

void fm_os_forget_thread_id(void) { cached_tid = 0; }

/* The kernel's tick-granular clock (a few ms), read without the TSC: a tenth of the cost of
 * CLOCK_MONOTONIC on virtual machines with kvm-clock (3.5 against 36 ns), and debug mode stamps
 * every allocation. */
uint64_t fm_os_coarse_time_ms(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC_COARSE, &ts) != 0)
        return fm_os_time_ms();
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

uint64_t fm_os_time_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* The time-stamp counter costs a few nanoseconds and no system call (CLOCK_MONOTONIC costs many
 * times as much on virtual machines). Its rate is not known without calibrating it; the callers
 * only need an order of magnitude, and current x86-64 counters run at 1 to 4 GHz: 2^17 ticks
 * is 30 to 130 microseconds, and about 50 at the common 2.5 GHz. On 64-bit Arm the generic
 * timer says its frequency. */
#if defined(__x86_64__) || defined(__i386__)
uint32_t fm_os_ticks_per_50us = (uint32_t)1 << 17;
uint64_t fm_os_ticks(void) { return __builtin_ia32_rdtsc(); }
#elif defined(__aarch64__)
uint32_t fm_os_ticks_per_50us;
uint64_t fm_os_ticks(void)
{
    uint64_t t;
    __asm__ volatile("mrs %0, cntvct_el0" : "=r"(t));
    if (FM_UNLIKELY(fm_os_ticks_per_50us == 0)) {
        uint64_t hz;
        __asm__ volatile("mrs %0, cntfrq_el0" : "=r"(hz));
        fm_os_ticks_per_50us = hz >= 20000u ? (uint32_t)(hz / 20000u) : 1u;
    }
    return t;
}
#else
uint32_t fm_os_ticks_per_50us = 50000u;
uint64_t fm_os_ticks(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
#endif

void fm_os_yield(void) { sched_yield(); }

/* The kernel's 16 random bytes for this process (AT_RANDOM), mixed with the time in case they
 * are missing: a key, not cryptography. */
uintptr_t fm_os_random_word(void)
{
    uint64_t v = 0;
    const unsigned char *r = (const unsigned char *)getauxval(AT_RANDOM);
    if (r != NULL)
        for (int i = 8; i < 16; i++) /* bytes 0..7 already key glibc's stack protector */
            v = v << 8 | r[i];
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    v ^= (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ull;
    return (uintptr_t)(v ^ v >> 32);
}

const char *fm_os_getenv(const char *name)
{
    /* Options are ignored in set-uid and set-gid programs, as glibc ignores MALLOC_* there. */
    if (getauxval(AT_SECURE))
        return NULL;
    size_t n = 0;
    while (name[n] != '\0')
        n++;
    for (char **e = environ; e != NULL && *e != NULL; e++) {
        const char *s = *e;
        size_t i = 0;
        while (i < n && s[i] == name[i])
            i++;
        if (i == n && s[n] == '=')
            return s + n + 1;
    }
    return NULL;
}
