/*
 * leakscan.c - which live blocks the program can still reach: the scan behind the leak report.
 *
 * Definitions as Valgrind's memcheck and LeakSanitizer use them. Roots are scanned conservatively,
 * one aligned word at a time: the writable segments of every loaded object (dl_iterate_phdr), the
 * other anonymous writable mappings (as memcheck), the stack of every thread from its stack
 * pointer up, with the registers it saved, and every thread's static TLS and thread descriptor
 * (whose DTV, a heap block, leads to the dynamic TLS blocks).
 * Then the blocks found are scanned in turn. A word equal to a block's user pointer reaches it
 * (still reachable); one that points inside it only makes it "possibly lost". The blocks left
 * are definitely lost, less those that some lost block points to: indirectly lost.
 *
 * The order matters, for deadlocks:
 *  1. everything that takes a C library or loader lock (dl_iterate_phdr, dlsym) runs first;
 *  2. then every arena lock is taken, the way the fork handler takes them, so that no other
 *     thread can be stopped halfway through changing an arena;
 *  3. then the other threads are stopped: each is sent a real-time signal (tgkill) whose handler
 *     publishes its stack pointer and thread pointer and waits on a futex. The registers of the
 *     interrupted code are in the signal frame, on the stack above the handler's frame;
 *  4. the heap is walked with the locks held (FM_WALK_LOCKS_HELD) and the roots are scanned;
 *  5. the threads are released, then the arenas.
 * A thread that does not answer within STOP_TIMEOUT_MS (it blocks the signal) is counted as
 * missed: its stack is read whole as an anonymous mapping (dead frames too) where it is one, not
 * at all where it is the main thread's [stack], and what it holds in registers is not seen. Its
 * signal stays queued, so the handler stays installed until every signal sent has been taken.
 *
 * Nothing here allocates from this heap: the tables are private mappings (16 bytes and one state
 * byte per block, a run record per stretch of ascending blocks; see map_tables), and the
 * mark stack is bounded (STACK_MAX entries): when it fills, marked blocks wait with their
 * SCANNED bit clear and a sweep over the table pushes them again.
 */
#define _GNU_SOURCE 1 /* dl_iterate_phdr, gettid, REG_RSP */
#include "leakscan.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#define STACK_MAX ((size_t)1 << 20)   /* mark stack entries (4 MiB) */
#define MAPS_MAX ((size_t)1 << 16)    /* /proc/self/maps lines kept */
#define ROOTS_MAX ((size_t)1 << 14)   /* writable segments of loaded objects */
#define THREADS_MAX 4096u
#define FIXED_BYTES (MAPS_MAX * sizeof(range_t) + ROOTS_MAX * sizeof(range_t))
#define STOP_TIMEOUT_MS 2000u
/* glibc keeps a thread's descriptor (struct pthread, 2304 bytes on x86-64) at its thread pointer,
 * above its static TLS; the DTV pointer is in it. Scanned up to this many bytes, clipped to the
 * mapping. */
#define TCB_BYTES 2368u
/* The x86-64 ABI's red zone: the interrupted function may keep data this far below its sp. */
#define RED_ZONE 128u

struct fm_scan_run {
    uintptr_t lo, hi;
    size_t first, count;
};

typedef struct range {
    uintptr_t lo, hi;
    bool anonymous_rw; /* /proc/self/maps: a writable private mapping of no file (a root) */
} range_t;

/* ---- private memory ---- */

static void *map_private(size_t size)
{
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static size_t round_page(size_t n) { return (n + 4095u) & ~(size_t)4095u; }

/* ---- /proc/self/maps, read with plain system calls into a private table ---- */

static range_t *maps;      /* readable mappings, ascending */
static size_t maps_count;

static bool parse_hex(const char **s, uintptr_t *out)
{
    uintptr_t v = 0;
    const char *p = *s;
    bool any = false;
    for (;; p++) {
        unsigned d;
        if (*p >= '0' && *p <= '9')
            d = (unsigned)(*p - '0');
        else if (*p >= 'a' && *p <= 'f')
            d = (unsigned)(*p - 'a' + 10);
        else
            break;
        v = v * 16 + d;
        any = true;
    }
    *s = p;
    *out = v;
    return any;
}

/* Skips one field of a maps line and the spaces after it. */
static const char *next_field(const char *p)
{
    while (*p != ' ' && *p != '\0')
        p++;
    while (*p == ' ')
        p++;
    return p;
}

/* One line: "lo-hi rwxp offset dev inode path". Readable mappings only. Anonymous writable ones
 * ([heap] included; not [stack], whose dead part below sp must not count) are roots, as
 * Valgrind's memcheck takes every writable mapping that is not the heap: programs with
 * allocators of their own (gcc's garbage-collected heap) keep malloc'd pointers there. */
static void maps_line(const char *line)
{
    uintptr_t lo, hi;
    const char *p = line;
    if (!parse_hex(&p, &lo) || *p++ != '-' || !parse_hex(&p, &hi) || *p++ != ' ' || *p != 'r')
        return;
    bool rw = p[1] == 'w' && p[3] == 'p';
    p = next_field(next_field(next_field(next_field(p)))); /* perms, offset, dev, inode */
    bool anonymous = *p == '\0' || (p[0] == '[' && p[1] == 'h'); /* no path, or [heap] */
    if (maps_count < MAPS_MAX)
        maps[maps_count++] = (range_t){lo, hi, rw && anonymous};
}

static bool read_maps(void)
{
    maps_count = 0;
    int fd = (int)syscall(SYS_openat, AT_FDCWD, "/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    char buf[4096];
    char line[512];
    size_t len = 0;
    for (;;) {
        long n = syscall(SYS_read, fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        for (long i = 0; i < n; i++) {
            if (buf[i] == '\n') {
                line[len] = '\0';
                maps_line(line);
                len = 0;
            } else if (len + 1 < sizeof line) {
                line[len++] = buf[i];
            }
        }
    }
    syscall(SYS_close, fd);
    return true;
}

/* The readable mapping holding address a, or NULL. */
static const range_t *mapping_of(uintptr_t a)
{
    size_t lo = 0, hi = maps_count;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (maps[mid].hi <= a)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < maps_count && maps[lo].lo <= a ? &maps[lo] : NULL;
}

/* ---- roots in loaded objects, collected before any lock is taken ---- */

static range_t *roots;
static size_t roots_count;

static int collect_segments(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size, (void)arg;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_W) || ph->p_memsz == 0)
            continue;
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
        if (roots_count < ROOTS_MAX)
            roots[roots_count++] = (range_t){lo, lo + ph->p_memsz, false};
    }
    return 0;
}

/* glibc's size of the static TLS block, descriptor included (what LeakSanitizer asks too). */
static size_t static_tls_size(void)
{
    static size_t size;
    static bool asked;
    if (!asked) {
        void (*get)(size_t *, size_t *) = (void (*)(size_t *, size_t *))dlsym(RTLD_DEFAULT, "_dl_get_tls_static_info");
        size_t align = 0;
        if (get != NULL)
            get(&size, &align);
        asked = true;
    }
    return size;
}

/* ---- the heap's blocks ---- */

typedef struct counter {
    size_t blocks, runs;
} counter_t;

/* The small span whose blocks the walk is visiting (its record comes first). */
static uintptr_t current_small_span;

/* A small block the feed has claimed but whose flag word is not written yet (a thread stopped
 * between the two: small.c claims feed blocks lock-free) holds whatever the memory held before:
 * a live small block's flag word is its offset in the span and FM_FLAG_SMALL (small.c's
 * flags_for), which a stale word is not. */
static bool small_flags_valid(const fm_walk_record_t *r)
{
    uintptr_t offset = (uintptr_t)r->block - current_small_span;
    uint16_t expected = (uint16_t)(((offset & ~(uintptr_t)63) >> 3) | FM_FLAG_SMALL);
    return (r->flags & ~(FM_FLAG_FREE | FM_FLAG_DEBUG_INFO)) == expected;
}

static bool is_used_block(const fm_walk_record_t *r)
{
    if (r->kind == FM_WALK_SMALL_SPAN)
        current_small_span = (uintptr_t)r->block;
    if (r->kind == FM_WALK_SMALL_BLOCK && !small_flags_valid(r))
        return false;
    return (r->kind == FM_WALK_SMALL_BLOCK || r->kind == FM_WALK_MEDIUM_BLOCK || r->kind == FM_WALK_LARGE_BLOCK) &&
           !r->free && !(r->flags & FM_FLAG_FREE);
}

static void count_visit(const fm_walk_record_t *r, void *arg)
{
    counter_t *c = arg;
    if (r->kind == FM_WALK_MEDIUM_SPAN || r->kind == FM_WALK_LARGE_BLOCK)
        c->runs++;
    if (is_used_block(r))
        c->blocks++;
}

static void fill_visit(const fm_walk_record_t *r, void *arg)
{
    fm_scan_t *s = arg;
    if (r->kind == FM_WALK_MEDIUM_SPAN || r->kind == FM_WALK_LARGE_BLOCK)
        s->run_break = true; /* runs never cross a span, so they never overlap */
    if (!is_used_block(r))
        return;
    uintptr_t start = (uintptr_t)r->block;
    size_t size = r->usable;
    if (r->flags & FM_FLAG_DEBUG_INFO) {
        size_t user_size;
        uint32_t number;
        unsigned depth;
        if (!fm_debug_block_info(r->block, &user_size, &number, NULL, NULL, &depth))
            return; /* freed (quarantined) or damaged: not a live block */
        start += 64u;
        size = user_size;
    }
    size_t i = s->count;
    if (i == s->capacity)
        return; /* cannot happen (the tables are sized for every block); never write past them */
    fm_scan_run_t *run = s->run_count != 0 ? &s->runs[s->run_count - 1] : NULL;
    if (run == NULL || s->run_break || start < run->hi) {
        s->run_break = false;
        run = &s->runs[s->run_count++];
        *run = (fm_scan_run_t){start, start, i, 0};
    }
    s->blocks[i] = (fm_scan_block_t){(r->flags & FM_FLAG_DEBUG_INFO) ? start | FM_SCAN_DEBUG_BIT : start, size};
    s->count++;
    run->count++;
    run->hi = start + (size != 0 ? size : 1);
}

/* A live guarded block (guardslot.c): a plain block in a run of its own. */
static void count_guarded(const void *user, size_t size, void *arg)
{
    (void)user, (void)size;
    counter_t *c = arg;
    c->runs++;
    c->blocks++;
}

static void fill_guarded(const void *user, size_t size, void *arg)
{
    fm_scan_t *s = arg;
    if (s->count == s->capacity)
        return;
    uintptr_t start = (uintptr_t)user;
    fm_scan_run_t *run = &s->runs[s->run_count++];
    *run = (fm_scan_run_t){start, start + (size != 0 ? size : 1), s->count, 1};
    s->blocks[s->count++] = (fm_scan_block_t){start, size};
    s->run_break = true;
}

/* Heapsort of the runs by address: no allocation, no recursion. */
static void sift_down(fm_scan_run_t *a, size_t root, size_t n)
{
    for (;;) {
        size_t child = 2 * root + 1;
        if (child >= n)
            return;
        if (child + 1 < n && a[child + 1].lo > a[child].lo)
            child++;
        if (a[root].lo >= a[child].lo)
            return;
        fm_scan_run_t t = a[root];
        a[root] = a[child];
        a[child] = t;
        root = child;
    }
}

static void sort_runs(fm_scan_run_t *a, size_t n)
{
    for (size_t i = n / 2; i-- > 0;)
        sift_down(a, i, n);
    for (size_t end = n; end-- > 1;) {
        fm_scan_run_t t = a[0];
        a[0] = a[end];
        a[end] = t;
        sift_down(a, 0, end);
    }
}

FM_INLINE uintptr_t block_start(const fm_scan_t *s, size_t i) { return s->blocks[i].start & ~FM_SCAN_DEBUG_BIT; }

/* The block that address w points into: its index, and whether w is its start. Within a run
 * the blocks are nearly evenly spaced (a small span's blocks are all one size), so the search
 * starts where interpolation puts w and gallops from there: a few probes, where a binary search
 * of a span's tens of thousands of blocks costs fifteen cache misses. */
static bool lookup(const fm_scan_t *s, size_t *last_run, uintptr_t w, size_t *index, bool *at_start)
{
    const fm_scan_run_t *run = &s->runs[*last_run]; /* pointers come in clusters: try the last run first */
    if (w < run->lo || w >= run->hi) {
        size_t lo = 0, hi = s->run_count;
        while (hi - lo > 1) {
            size_t mid = (lo + hi) / 2;
            if (s->runs[mid].lo <= w)
                lo = mid;
            else
                hi = mid;
        }
        run = &s->runs[lo];
        if (w < run->lo || w >= run->hi)
            return false;
        *last_run = lo;
    }
    size_t first = run->first, end = run->first + run->count;
    size_t g = first + (size_t)((double)(w - run->lo) / (double)(run->hi - run->lo) * (double)run->count);
    if (g >= end)
        g = end - 1;
    size_t a, b; /* the answer is in [a, b): the last block starting at or below w */
    if (block_start(s, g) <= w) {
        size_t step = 1;
        a = g;
        while (a + step < end && block_start(s, a + step) <= w) {
            a += step;
            step *= 2;
        }
        b = a + step < end ? a + step : end;
    } else {
        size_t step = 1;
        b = g; /* block g starts above w */
        while (b - first > step && block_start(s, b - step) > w) {
            b -= step;
            step *= 2;
        }
        a = b - first > step ? b - step : first;
    }
    while (b - a > 1) {
        size_t mid = (a + b) / 2;
        if (block_start(s, mid) <= w)
            a = mid;
        else
            b = mid;
    }
    uintptr_t start = block_start(s, a);
    size_t size = s->blocks[a].size;
    if (w < start || w >= start + (size != 0 ? size : 1))
        return false;
    *index = a;
    *at_start = w == start;
    return true;
}

/* ---- marking ---- */

typedef struct marker {
    fm_scan_t *s;
    uintptr_t lo, hi; /* the heap's extent: words outside it are no pointers */
    size_t leader;    /* the clique phase: the definitely lost block being followed */
    size_t last_run;  /* the run the last pointer fell in */
    bool clique;
} marker_t;

static void push(fm_scan_t *s, size_t i)
{
    if (s->stack_len < s->stack_cap)
        s->stack[s->stack_len++] = (uint32_t)i;
    else
        s->overflow = true; /* marked, SCANNED clear: the sweep finds it */
}

static void mark_word(marker_t *m, uintptr_t w)
{
    size_t i;
    bool at_start;
    if (w - m->lo >= m->hi - m->lo || !lookup(m->s, &m->last_run, w, &i, &at_start))
        return;
    uint8_t *st = &m->s->state[i];
    uint8_t kind = *st & FM_SCAN_KIND_MASK;
    if (!m->clique) {
        if (kind == FM_SCAN_UNREACHED) {
            *st = at_start ? FM_SCAN_REACHABLE : FM_SCAN_POSSIBLE;
            push(m->s, i);
        } else if (kind == FM_SCAN_POSSIBLE && at_start) {
            *st = (uint8_t)((*st & FM_SCAN_SCANNED) | FM_SCAN_REACHABLE); /* contents: scanned or queued */
        }
    } else if (kind == FM_SCAN_UNREACHED) {
        *st = FM_SCAN_INDIRECT;
        push(m->s, i);
    } else if (kind == FM_SCAN_DEFINITE && i != m->leader) {
        *st = (uint8_t)(FM_SCAN_INDIRECT | FM_SCAN_SCANNED); /* an earlier leader, already followed */
    }
}

static void mark_range(marker_t *m, uintptr_t lo, uintptr_t hi)
{
    lo = (lo + sizeof(uintptr_t) - 1) & ~(uintptr_t)(sizeof(uintptr_t) - 1);
    for (uintptr_t a = lo; a + sizeof(uintptr_t) <= hi; a += sizeof(uintptr_t))
        mark_word(m, *(const uintptr_t *)a);
}

/* A root range, only where it is mapped readable. */
static void mark_root(marker_t *m, uintptr_t lo, uintptr_t hi)
{
    while (lo < hi) {
        const range_t *r = mapping_of(lo);
        if (r == NULL) {
            /* not mapped here: go on at the next mapping above lo */
            size_t a = 0, b = maps_count;
            while (a < b) {
                size_t mid = (a + b) / 2;
                if (maps[mid].lo <= lo)
                    a = mid + 1;
                else
                    b = mid;
            }
            if (a == maps_count || maps[a].lo >= hi)
                return;
            lo = maps[a].lo;
            continue;
        }
        uintptr_t end = r->hi < hi ? r->hi : hi;
        mark_range(m, lo, end);
        lo = end;
    }
}

static void drain(marker_t *m)
{
    fm_scan_t *s = m->s;
    for (;;) {
        while (s->stack_len > 0) {
            size_t i = s->stack[--s->stack_len];
            if (s->state[i] & FM_SCAN_SCANNED)
                continue;
            s->state[i] |= FM_SCAN_SCANNED;
            uintptr_t start = s->blocks[i].start & ~FM_SCAN_DEBUG_BIT;
            mark_range(m, start, start + s->blocks[i].size);
        }
        if (!s->overflow)
            return;
        s->overflow = false; /* the sweep: marked blocks whose contents wait */
        for (size_t i = 0; i < s->count; i++) {
            uint8_t st = s->state[i];
            uint8_t kind = st & FM_SCAN_KIND_MASK;
            bool waiting = !(st & FM_SCAN_SCANNED) &&
                           (m->clique ? kind == FM_SCAN_INDIRECT || i == m->leader
                                      : kind == FM_SCAN_REACHABLE || kind == FM_SCAN_POSSIBLE);
            if (waiting)
                push(s, i);
        }
    }
}

/* The definitely lost blocks, each followed to the lost blocks it reaches (indirectly lost). */
static void classify_lost(marker_t *m)
{
    fm_scan_t *s = m->s;
    m->clique = true;
    for (size_t i = 0; i < s->count; i++) {
        if ((s->state[i] & FM_SCAN_KIND_MASK) != FM_SCAN_UNREACHED)
            continue;
        s->state[i] = FM_SCAN_DEFINITE;
        m->leader = i;
        push(s, i);
        drain(m);
    }
}

/* ---- stopping the other threads ---- */

enum { SLOT_EMPTY, SLOT_SENT, SLOT_CLAIMED, SLOT_STOPPED, SLOT_RESUMED, SLOT_GONE };

/* A slot's state word holds the scan's generation above its kind: a handler can claim only the
 * slot the scan it stops for filled in, even when its signal was sent by an earlier scan (one that
 * counted the thread missed) or the slot has since been given to another thread. */
#define SLOT_KIND_BITS 3
#define SLOT_KIND_MASK ((1u << SLOT_KIND_BITS) - 1)

typedef struct slot {
    int tid;
    unsigned state;
    uintptr_t sp;  /* the handler's frame: the signal frame with the saved registers is above it */
    uintptr_t isp; /* the interrupted stack pointer (differs when on an alternate signal stack) */
    uintptr_t tp;  /* the thread pointer: static TLS below it, the descriptor above */
} slot_t;

static slot_t slots[THREADS_MAX];
static unsigned slot_count;
static int stopping;         /* a scan wants the threads stopped */
static unsigned resume_word; /* bumped to release them: the generation, kept to a slot word's bits */
/* Stop signals sent and handlers entered for them: while they differ a signal is pending, or lost
 * with its thread, and the handler stays installed, for a pending signal's default action is to
 * end the process. */
static unsigned signals_sent, signals_taken;
static struct sigaction previous_action;
static bool handler_installed;

static unsigned slot_word(unsigned generation, unsigned kind)
{
    return generation << SLOT_KIND_BITS | kind;
}

static unsigned slot_kind(const slot_t *slot)
{
    return __atomic_load_n(&slot->state, __ATOMIC_SEQ_CST) & SLOT_KIND_MASK;
}

static long futex(unsigned *word, int op, unsigned value)
{
    return syscall(SYS_futex, word, op, value, NULL, NULL, 0);
}

static uintptr_t interrupted_sp(void *context)
{
    const ucontext_t *uc = context;
#if defined(__x86_64__)
    return (uintptr_t)uc->uc_mcontext.gregs[REG_RSP];
#elif defined(__i386__)
    return (uintptr_t)uc->uc_mcontext.gregs[REG_ESP];
#elif defined(__aarch64__)
    return (uintptr_t)uc->uc_mcontext.sp;
#else
    (void)uc;
    return 0;
#endif
}

static int stop_signal(void) { return SIGRTMAX - 2; }

static void stop_handler(int sig, siginfo_t *info, void *context)
{
    int saved_errno = errno;
    bool ours = info != NULL && info->si_code == SI_TKILL && info->si_pid == getpid();
    if (!ours) {
        struct sigaction *p = &previous_action;
        if ((p->sa_flags & SA_SIGINFO) && p->sa_sigaction != NULL)
            p->sa_sigaction(sig, info, context);
        else if (!(p->sa_flags & SA_SIGINFO) && p->sa_handler != SIG_DFL && p->sa_handler != SIG_IGN)
            p->sa_handler(sig);
        errno = saved_errno;
        return;
    }
    __atomic_add_fetch(&signals_taken, 1, __ATOMIC_SEQ_CST);
    if (!__atomic_load_n(&stopping, __ATOMIC_SEQ_CST)) {
        errno = saved_errno; /* a late signal of a scan that is over */
        return;
    }
    int tid = (int)syscall(SYS_gettid);
    unsigned n = __atomic_load_n(&slot_count, __ATOMIC_ACQUIRE);
    for (unsigned i = 0; i < n; i++) {
        slot_t *slot = &slots[i];
        /* the word before the tid: the scanner writes the tid first, so a word of this scan
         * comes with this scan's tid, and a slot handed on after the tid test fails the CAS */
        unsigned word = __atomic_load_n(&slot->state, __ATOMIC_SEQ_CST);
        if (__atomic_load_n(&slot->tid, __ATOMIC_SEQ_CST) != tid)
            continue;
        if ((word & SLOT_KIND_MASK) != SLOT_SENT)
            break; /* stopped already by another signal */
        unsigned generation = word >> SLOT_KIND_BITS;
        if (!__atomic_compare_exchange_n(&slot->state, &word, slot_word(generation, SLOT_CLAIMED), false,
                                         __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
            break;
        volatile uintptr_t here = 0;
        slot->sp = (uintptr_t)&here;
        slot->isp = interrupted_sp(context);
        slot->tp = (uintptr_t)pthread_self();
        /* compare-and-swaps, not stores: a handler held up past its scan's end must not write
         * over the word of a later scan's thread */
        word = slot_word(generation, SLOT_CLAIMED);
        if (!__atomic_compare_exchange_n(&slot->state, &word, slot_word(generation, SLOT_STOPPED), false,
                                         __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
            break;
        while (__atomic_load_n(&resume_word, __ATOMIC_SEQ_CST) == generation)
            futex(&resume_word, FUTEX_WAIT_PRIVATE, generation);
        word = slot_word(generation, SLOT_STOPPED);
        __atomic_compare_exchange_n(&slot->state, &word, slot_word(generation, SLOT_RESUMED), false,
                                    __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
        break;
    }
    errno = saved_errno;
}

static bool install_handler(void)
{
    if (handler_installed)
        return true;
    struct sigaction sa;
    for (size_t i = 0; i < sizeof sa; i++)
        ((char *)&sa)[i] = 0;
    sa.sa_sigaction = stop_handler;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigfillset(&sa.sa_mask);
    if (sigaction(stop_signal(), &sa, &previous_action) != 0)
        return false;
    handler_installed = true;
    return true;
}

/* Sends the signal to every thread of /proc/self/task not yet asked; returns how many were new. */
static unsigned ask_new_threads(int self)
{
    int fd = (int)syscall(SYS_openat, AT_FDCWD, "/proc/self/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    unsigned added = 0;
    char buf[4096] __attribute__((aligned(8)));
    int pid = getpid();
    for (;;) {
        long n = syscall(SYS_getdents64, fd, buf, sizeof buf);
        if (n <= 0)
            break;
        for (long off = 0; off < n;) {
            struct {
                uint64_t ino;
                int64_t off;
                unsigned short reclen;
                unsigned char type;
                char name[];
            } *d = (void *)(buf + off);
            off += d->reclen;
            int tid = 0;
            const char *c = d->name;
            if (*c < '0' || *c > '9')
                continue;
            while (*c >= '0' && *c <= '9')
                tid = tid * 10 + (*c++ - '0');
            bool known = tid == self;
            for (unsigned i = 0; i < slot_count && !known; i++)
                known = slots[i].tid == tid;
            if (known || slot_count == THREADS_MAX)
                continue;
            slot_t *s = &slots[slot_count];
            unsigned generation = __atomic_load_n(&resume_word, __ATOMIC_SEQ_CST);
            __atomic_store_n(&s->state, slot_word(generation, SLOT_EMPTY), __ATOMIC_SEQ_CST);
            __atomic_store_n(&s->tid, tid, __ATOMIC_SEQ_CST);
            s->sp = s->isp = s->tp = 0;
            __atomic_store_n(&s->state, slot_word(generation, SLOT_SENT), __ATOMIC_SEQ_CST);
            __atomic_store_n(&slot_count, slot_count + 1, __ATOMIC_RELEASE);
            __atomic_add_fetch(&signals_sent, 1, __ATOMIC_SEQ_CST);
            if (syscall(SYS_tgkill, pid, tid, stop_signal()) != 0) {
                __atomic_sub_fetch(&signals_sent, 1, __ATOMIC_SEQ_CST);
                __atomic_store_n(&s->state, slot_word(generation, SLOT_GONE), __ATOMIC_SEQ_CST);
            }
            added++;
        }
    }
    syscall(SYS_close, fd);
    return added;
}

static void stop_threads(fm_scan_t *s)
{
    slot_count = 0;
    if (!install_handler())
        return;
    __atomic_store_n(&stopping, 1, __ATOMIC_SEQ_CST);
    int self = (int)syscall(SYS_gettid);
    uint64_t deadline = fm_os_time_ms() + STOP_TIMEOUT_MS;
    /* A stopped thread starts no thread: once all asked have stopped, a last listing is complete. */
    while (ask_new_threads(self) != 0) {
        for (unsigned i = 0; i < slot_count; i++)
            while (slot_kind(&slots[i]) <= SLOT_CLAIMED && fm_os_time_ms() < deadline)
                fm_os_yield();
    }
    for (unsigned i = 0; i < slot_count; i++) {
        unsigned kind = slot_kind(&slots[i]);
        s->threads_stopped += kind == SLOT_STOPPED;
        s->threads_missed += kind == SLOT_SENT || kind == SLOT_CLAIMED;
    }
}

static void resume_threads(void)
{
    __atomic_store_n(&stopping, 0, __ATOMIC_SEQ_CST);
    unsigned next = (__atomic_load_n(&resume_word, __ATOMIC_SEQ_CST) + 1) & (UINT_MAX >> SLOT_KIND_BITS);
    __atomic_store_n(&resume_word, next, __ATOMIC_SEQ_CST);
    futex(&resume_word, FUTEX_WAKE_PRIVATE, 0x7fffffff);
    for (unsigned i = 0; i < slot_count; i++)
        while (slot_kind(&slots[i]) == SLOT_STOPPED)
            fm_os_yield();
    if (handler_installed && __atomic_load_n(&signals_taken, __ATOMIC_SEQ_CST) ==
                                 __atomic_load_n(&signals_sent, __ATOMIC_SEQ_CST)) {
        sigaction(stop_signal(), &previous_action, NULL);
        handler_installed = false;
    }
}

/* ---- the arena locks (the fork handler's order: medium, then small managers, then large) ---- */

static bool lock_small_managers_or_give_up(void)
{
    fm_small_manager_t *first = &fm_small_managers[0][0];
    const unsigned count = FM_SMALL_ARENAS * FM_SMALL_INDEX_COUNT;
    for (unsigned i = 0; i < count; i++) {
        for (unsigned tries = 0; !fm_lock_try(&first[i].lock); tries++) {
            if (tries == 1000) {
                while (i-- > 0)
                    fm_lock_release(&first[i].lock);
                return false;
            }
            fm_os_yield();
        }
    }
    return true;
}

static void lock_heap(void)
{
    for (;;) {
        fm_medium_lock_all();
        if (lock_small_managers_or_give_up())
            break;
        fm_medium_unlock_all();
        fm_os_yield();
    }
    fm_large_lock_all();
    fm_guard_slots_lock();
}

static void unlock_heap(void)
{
    fm_guard_slots_unlock();
    fm_large_unlock_all();
    fm_small_unlock_all();
    fm_medium_unlock_all();
}

/* ---- the scan ---- */

/* glibc keeps the thread's DTV pointer in its descriptor's header (the word after the TCB
 * self-pointer where TLS lies below the thread pointer, the first word where it lies above),
 * pointing one entry past the start of the DTV, a heap block: an interior pointer by design, so
 * it reaches the DTV as a start pointer would (else every thread's DTV is "possibly lost"). */
#if defined(__x86_64__) || defined(__i386__)
#define DTV_WORD 1u
#else
#define DTV_WORD 0u
#endif

static void mark_dtv(marker_t *m, uintptr_t tp, const range_t *tls)
{
    uintptr_t at = tp + DTV_WORD * sizeof(uintptr_t);
    size_t i;
    bool at_start;
    if (at + sizeof(uintptr_t) > tls->hi)
        return;
    uintptr_t w = *(const uintptr_t *)at;
    if (w - m->lo >= m->hi - m->lo || !lookup(m->s, &m->last_run, w, &i, &at_start))
        return;
    mark_word(m, m->s->blocks[i].start & ~FM_SCAN_DEBUG_BIT);
}

/* A thread's stack from sp up, and its static TLS and descriptor around tp. */
static void mark_thread(marker_t *m, uintptr_t sp, uintptr_t isp, uintptr_t tp, size_t tls_size)
{
    const range_t *tls = tp != 0 ? mapping_of(tp) : NULL;
    uintptr_t stops[2] = {sp, isp > RED_ZONE ? isp - RED_ZONE : 0};
    for (unsigned k = 0; k < 2; k++) {
        const range_t *r = stops[k] != 0 ? mapping_of(stops[k]) : NULL;
        if (r == NULL || (k == 1 && mapping_of(sp) == r))
            continue;
        uintptr_t top = r->hi;
        if (r == tls && tp > stops[k] && tp + TCB_BYTES < top)
            top = tp + TCB_BYTES; /* glibc: the descriptor ends the thread's stack mapping */
        mark_range(m, stops[k], top);
    }
    if (tls != NULL) {
        uintptr_t lo = tp - tls_size > tls->lo && tp - tls_size < tp ? tp - tls_size : tls->lo;
        uintptr_t hi = tp + TCB_BYTES < tls->hi ? tp + TCB_BYTES : tls->hi;
        mark_dtv(m, tp, tls);
        mark_range(m, lo, hi);
    }
}

/* Whether the mapping r is some thread's stack (scanned from its sp up, never whole). */
static bool is_stack(const range_t *r, uintptr_t self_sp)
{
    if (self_sp >= r->lo && self_sp < r->hi)
        return true;
    for (unsigned i = 0; i < slot_count; i++) {
        uintptr_t sp = slots[i].sp, isp = slots[i].isp;
        if (slot_kind(&slots[i]) == SLOT_STOPPED &&
            ((sp >= r->lo && sp < r->hi) || (isp >= r->lo && isp < r->hi)))
            return true;
    }
    return false;
}

#define BIG_MAPPING ((uintptr_t)64 << 20)
#define PAGE 4096u

/* [lo, hi), less the resident-page check: a big mapping (a reservation of gigabytes, say) is read
 * only where mincore says its pages are in memory; an anonymous page never written reads as
 * zeros, and holds no pointer (a page swapped out is skipped too). */
static void mark_resident(marker_t *m, uintptr_t lo, uintptr_t hi)
{
    if (hi - lo <= BIG_MAPPING) {
        mark_range(m, lo, hi);
        return;
    }
    unsigned char vec[1024];
    for (uintptr_t at = lo; at < hi;) {
        size_t pages = (hi - at) / PAGE < sizeof vec ? (hi - at) / PAGE : sizeof vec;
        if (pages == 0 || mincore((void *)at, pages * PAGE, vec) != 0) {
            mark_range(m, at, at + (pages != 0 ? pages : 1) * PAGE < hi ? at + (pages != 0 ? pages : 1) * PAGE : hi);
        } else {
            for (size_t k = 0; k < pages; k++)
                if (vec[k] & 1)
                    mark_range(m, at + k * PAGE, at + (k + 1) * PAGE);
        }
        at += (pages != 0 ? pages : 1) * PAGE;
    }
}

/* [lo, hi) less the skipped ranges (at most a few). */
static void mark_outside(marker_t *m, uintptr_t lo, uintptr_t hi, const range_t *skip, size_t skip_count)
{
    for (size_t k = 0; k < skip_count; k++)
        if (lo < skip[k].hi && hi > skip[k].lo) {
            if (lo < skip[k].lo)
                mark_outside(m, lo, skip[k].lo, skip + k + 1, skip_count - k - 1);
            if (skip[k].hi < hi)
                mark_outside(m, skip[k].hi, hi, skip + k + 1, skip_count - k - 1);
            return;
        }
    mark_resident(m, lo, hi);
}

/* Whether the chunk at `at` holds blocks the walk visits (regions of guarded slots too: their
 * live blocks are scanned when reached, the slot table holds no pointer into the heap). */
static bool heap_chunk(uintptr_t at)
{
    return fm_pagemap_lookup((const void *)at) != 0;
}

/* The anonymous writable mappings, less the heap's own regions (their blocks are scanned only
 * when reached; the heap maps whole chunks, which the ownership map knows), the stacks and the
 * scan's own tables. */
static void mark_anonymous(marker_t *m, uintptr_t self_sp, const range_t *skip, size_t skip_count)
{
    for (size_t i = 0; i < maps_count; i++) {
        const range_t *r = &maps[i];
        if (!r->anonymous_rw || is_stack(r, self_sp))
            continue;
        for (uintptr_t at = r->lo; at < r->hi;) {
            uintptr_t end = at;
            bool heap = heap_chunk(at);
            do /* the chunks of the same kind from here */
                end = (end | (FM_OS_CHUNK - 1)) + 1;
            while (end < r->hi && heap_chunk(end) == heap);
            end = end < r->hi ? end : r->hi;
            if (!heap)
                mark_outside(m, at, end, skip, skip_count);
            at = end;
        }
    }
}

/* This thread's stack is scanned from fm_leak_scan's frame up, not from the current sp: the
 * frames below it are the scan's own, whose slots hold the pointers the walk has just visited. */
static void mark_roots(marker_t *m, uintptr_t self_sp, size_t tls_size, const range_t *skip, size_t skip_count)
{
    for (size_t i = 0; i < roots_count; i++)
        mark_root(m, roots[i].lo, roots[i].hi);
    mark_anonymous(m, self_sp, skip, skip_count);
    mark_thread(m, self_sp, 0, (uintptr_t)pthread_self(), tls_size);
    for (unsigned i = 0; i < slot_count; i++)
        if (slot_kind(&slots[i]) == SLOT_STOPPED)
            mark_thread(m, slots[i].sp, slots[i].isp, slots[i].tp, tls_size);
    drain(m);
}

/* The tables. On 64-bit they are sized from the memory the heap maps (a block takes 16 bytes at
 * least): address space is plentiful, and only the pages written cost memory, so one walk of the
 * heap is enough. On 32-bit a first walk counts the blocks (the heap is locked: it holds). */
static bool map_tables(fm_scan_t *s, const counter_t *c)
{
    size_t blocks = c->blocks + 1, runs = c->runs + c->blocks + 1;
    s->capacity = blocks;
    s->stack_cap = blocks < STACK_MAX ? blocks : STACK_MAX;
    size_t block_bytes = round_page(blocks * sizeof(fm_scan_block_t));
    size_t run_bytes = round_page(runs * sizeof(fm_scan_run_t));
    size_t stack_bytes = round_page(s->stack_cap * sizeof(uint32_t));
    size_t state_bytes = round_page(blocks);
    s->mapping_size = block_bytes + run_bytes + stack_bytes + state_bytes;
    char *p = map_private(s->mapping_size);
    if (p == NULL)
        return false;
    s->mapping = p;
    s->blocks = (fm_scan_block_t *)p;
    s->runs = (fm_scan_run_t *)(p + block_bytes);
    s->stack = (uint32_t *)(p + block_bytes + run_bytes);
    s->state = (uint8_t *)(p + block_bytes + run_bytes + stack_bytes);
    return true;
}

bool fm_leak_scan(fm_scan_t *s, void (*classified)(fm_scan_t *s, void *arg), void *arg, const void *private_area,
                  size_t private_size)
{
    /* the caller's frame and up: it has saved its callers' registers (__builtin_unwind_init) */
    uintptr_t self_sp = (uintptr_t)__builtin_frame_address(0);
    *s = (fm_scan_t){0};
    /* 1. what takes the loader's locks, and the fixed tables, first */
    static void *fixed;
    if (fixed == NULL)
        fixed = map_private(FIXED_BYTES);
    if (fixed == NULL)
        return false;
    maps = fixed;
    roots = (range_t *)fixed + MAPS_MAX;
    roots_count = 0;
    dl_iterate_phdr(collect_segments, NULL);
    size_t tls_size = static_tls_size();
    /* 2., 3. */
    lock_heap();
    stop_threads(s);
    /* 4. */
    counter_t c = {0, 0};
    if (FM_IS64) {
        c.blocks = fm_os_mapped_bytes() / 16u;
    } else {
        fm_medium_walk(count_visit, &c, FM_WALK_LOCKS_HELD);
        fm_large_walk(count_visit, &c, FM_WALK_LOCKS_HELD);
        fm_guard_walk_live(count_guarded, &c);
    }
    if (read_maps() && map_tables(s, &c)) {
        fm_medium_walk(fill_visit, s, FM_WALK_LOCKS_HELD);
        fm_large_walk(fill_visit, s, FM_WALK_LOCKS_HELD);
        fm_guard_walk_live(fill_guarded, s);
        sort_runs(s->runs, s->run_count);
        marker_t m = {s, 0, 0, 0, 0, false};
        if (s->run_count != 0) {
            m.lo = s->runs[0].lo;
            for (size_t i = 0; i < s->run_count; i++)
                m.hi = s->runs[i].hi > m.hi ? s->runs[i].hi : m.hi;
        }
        range_t skip[3] = {{(uintptr_t)s->mapping, (uintptr_t)s->mapping + s->mapping_size, false},
                           {(uintptr_t)fixed, (uintptr_t)fixed + FIXED_BYTES, false},
                           {(uintptr_t)private_area, (uintptr_t)private_area + private_size, false}};
        mark_roots(&m, self_sp, tls_size, skip, 3);
        classify_lost(&m);
        s->complete = true;
        classified(s, arg);
    }
    /* 5. */
    resume_threads();
    unlock_heap();
    return s->complete;
}

void fm_leak_scan_release(fm_scan_t *s)
{
    if (s->mapping != NULL)
        munmap(s->mapping, s->mapping_size);
    s->mapping = NULL;
}

unsigned fm_leak_thread_count(void)
{
    int fd = (int)syscall(SYS_openat, AT_FDCWD, "/proc/self/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    unsigned count = 0;
    char buf[4096] __attribute__((aligned(8)));
    long n;
    while ((n = syscall(SYS_getdents64, fd, buf, sizeof buf)) > 0)
        for (long off = 0; off < n;) {
            unsigned short reclen = *(unsigned short *)(buf + off + 16);
            count += buf[off + 19] >= '0' && buf[off + 19] <= '9';
            off += reclen;
        }
    syscall(SYS_close, fd);
    return count;
}
