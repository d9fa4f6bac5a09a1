/*
 * guard.c - guarded allocations (FASTMM5_GUARD=all|overflow|underflow|sample:N), the model being
 * Electric Fence, DUMA and GWP-ASan: a guarded block gets a slot (guardslot.c) between no-access
 * pages,
 *
 *   | no access | no access ... data pages ........ [block] | no access |   (overflow)
 *   | no access | [block] ........ data pages ... no access | no access |   (underflow)
 *
 * so that the first byte past its end (overflow, the default) or before its start (underflow)
 * is in a PROT_NONE page and an access there faults at the instruction. The block's end lies on
 * the page boundary when its alignment allows; the bytes between it and the page (the slack)
 * are filled and checked at free, and the report says which. malloc(0) returns a pointer to
 * the first no-access byte: every access faults, each call gets its own address.
 *
 * A freed block's pages are replaced by no-access ones and its slot waits in the address
 * quarantine (guardslot.c) before reuse: until then a read or write through a stale pointer
 * faults, and a second free is reported with both traces. The fault handler (guardfault.c) turns
 * a fault in these pages into a report. Traces are kept as trace-table ids (tracetab.c).
 *
 * When no slot can be had (sampling: every slot live; address space, the kernel's limit on
 * mappings, FASTMM5_MEMORY_LIMIT), the allocation is served unguarded: guarding is a diagnosis,
 * never a reason to fail a program.
 */
#include "internal.h"
#include "guardint.h"

#include <errno.h>
#include <string.h>

bool fm_guard_underflow;
static unsigned sample_every;

static size_t page(void) { return fm_os_page_size(); }

/* The alignment C requires of malloc(size): that of any object with a fundamental alignment
 * that fits in size bytes, so at most FM_MIN_ALIGN and no more than the largest power of two
 * not above size. A smaller alignment lets more blocks end exactly on the guard page. */
static size_t natural_alignment(size_t size)
{
    size_t a = FM_MIN_ALIGN;
    while (a > 1 && a > size)
        a >>= 1;
    return a;
}

static void fill_slack(const fm_guard_block_t *g)
{
    memset(g->data, FM_GUARD_SLACK_FILL, (size_t)(g->user - g->data));
    memset(g->user + g->size, FM_GUARD_SLACK_FILL, (size_t)(g->data + g->data_bytes - (g->user + g->size)));
}

static unsigned trace_depth(void)
{
    unsigned depth = fm_load_relaxed(&fm_stack_depth);
    return depth != 0 ? (depth < 64u ? depth : 64u) : FM_STACK_CURRENT_DEPTH;
}

/* A guarded block of size bytes at the alignment, or NULL (the caller falls back). */
static void *place_block(size_t size, size_t alignment, int fill)
{
    size_t pg = page();
    if (alignment > pg)
        return NULL;
    fm_guard_block_t *g = fm_guard_slot_take(size);
    if (g == NULL)
        return NULL;
    size_t data_bytes = fm_align_up(size, pg);
    char *slot = fm_guard_slot_data(g);
    bool underflow = fm_load_relaxed(&fm_guard_underflow);
    char *data = underflow ? slot : slot + g->region->slot_data - data_bytes;
    if (!fm_os_protect(data, data_bytes, true)) {
        fm_guard_slot_release(g);
        return NULL;
    }
    g->underflow = underflow;
    g->data = data;
    g->data_bytes = data_bytes;
    g->size = size;
    g->alignment = alignment;
    g->user = underflow ? data : (char *)((uintptr_t)(data + data_bytes - size) & ~(uintptr_t)(alignment - 1));
    g->allocated_by_thread = fm_os_thread_id();
    g->freed_by_thread = 0;
    g->depth = trace_depth();
    uintptr_t frames[64];
    fm_stack_capture(frames, g->depth);
    g->allocation_trace = fm_tracetab_intern(frames, g->depth);
    g->free_trace = FM_TRACE_NONE;
    fill_slack(g);
    if (fill > 0)
        memset(g->user, fill, size);
    fm_store_release(&g->state, FM_GUARD_LIVE);
    return g->user;
}

/* ---- the choice: every block, or one in N ---- */

/* Sampling is decided where malloc has already left its frameless path (a thread-cache miss),
 * so that the fast path pays nothing. In normal mode a miss that refills a small class stands
 * for the blocks the refill brings (the allocations the cache then serves without asking); any
 * other call here (debug mode sends every allocation here) for one allocation. Each thread
 * counts down from a random number in 1..2N. */
static __thread int64_t countdown __attribute__((tls_model("initial-exec")));
static __thread uint64_t rng __attribute__((tls_model("initial-exec")));

static int64_t next_countdown(void)
{
    if (rng == 0)
        rng = (fm_os_random_word() ^ ((uint64_t)fm_os_thread_id() << 32)) | 1u;
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17; /* xorshift64 */
    return (int64_t)(rng % (2u * (uint64_t)sample_every)) + 1;
}

static bool chosen(size_t size)
{
    if (fm_guard_mode == FM_GUARD_ALL)
        return true;
    unsigned weight = 1;
    fm_tcache_t *tc = fm_tcache_current;
    if (size <= FM_SMALL_MAX_USER && FM_TCACHE_USABLE(tc) && !fm_load_relaxed(&fm_debug_on)) {
        unsigned c = fm_small_class_of(size);
        if (tc->bins[c].head == NULL)
            weight = tc->bins[c].limit / 2u + 1u; /* what the refill takes */
    }
    if (countdown == 0)
        countdown = next_countdown();
    countdown -= weight;
    if (countdown > 0)
        return false;
    countdown = next_countdown();
    return true;
}

void *fm_guard_malloc(size_t size, int fill)
{
    if (!chosen(size))
        return NULL;
    return place_block(size, natural_alignment(size), fill);
}

void *fm_guard_aligned(size_t alignment, size_t size)
{
    if (!chosen(size))
        return NULL;
    size_t natural = natural_alignment(size); /* an alignment asked for is kept, even at 16 for 1 byte */
    return place_block(size, alignment > natural ? alignment : natural, -1);
}

/* ---- free, realloc, usable size ---- */

/* The first byte of [b, e) that is not the fill, or NULL: a word at a time, since the slack
 * before a block that ends on the guard page is most of a page. */
static const char *first_unlike_fill(const char *b, const char *e)
{
    const uint64_t fill = 0x0101010101010101ull * FM_GUARD_SLACK_FILL;
    for (; b < e && ((uintptr_t)b & 7u) != 0; b++)
        if (*b != (char)FM_GUARD_SLACK_FILL)
            return b;
    for (; e - b >= 8; b += 8) {
        uint64_t w;
        memcpy(&w, b, 8);
        if (w != fill)
            break;
    }
    for (; b < e; b++)
        if (*b != (char)FM_GUARD_SLACK_FILL)
            return b;
    return NULL;
}

/* The first slack byte that is not the fill, or NULL. */
static const char *damaged_slack(const fm_guard_block_t *g)
{
    const char *at = first_unlike_fill(g->data, g->user);
    return at != NULL ? at : first_unlike_fill(g->user + g->size, g->data + g->data_bytes);
}

static void report_slack(const fm_guard_block_t *g, const char *at, const char *operation)
{
    bool before = at < g->user;
    fm_report_t r;
    fm_stack_current_t current;
    fm_stack_capture_current(&current);
    fm_report_begin(&r);
    fm_report_str(&r, before ? "libfastmm5: header corruption" : "libfastmm5: footer corruption");
    fm_report_str(&r, " found by ");
    fm_report_str(&r, operation);
    fm_report_str(&r, "(): the guarded block ");
    fm_report_hex(&r, (uintptr_t)g->user);
    fm_report_str(&r, " of ");
    fm_report_dec(&r, g->size);
    fm_report_str(&r, " bytes had its slack bytes (filled, between the block and the guard page: its alignment "
                      "kept it off the page boundary) overwritten, first at ");
    fm_report_hex(&r, (uintptr_t)at);
    fm_report_str(&r, before ? ", " : ", ");
    fm_report_dec(&r, before ? (uint64_t)(g->user - at) : (uint64_t)(at - (g->user + g->size)) + 1);
    fm_report_str(&r, before ? " bytes before its start." : (at == g->user + g->size ? " byte past its end." : " bytes past its end."));
    fm_guard_report_traces(&r, g, false);
    fm_stack_report_current(&r, &current);
    fm_event_raise(before ? FASTMM_EVENT_HEADER_CORRUPTION : FASTMM_EVENT_FOOTER_CORRUPTION, g->user, g->size, 0,
                   &r);
}

/* A pointer in a guarded mapping that is not a live block start: a second free, a realloc of a
 * freed block, or an interior pointer. */
static void report_bad(const fm_guard_block_t *g, const void *p, const char *operation)
{
    bool freed = g != NULL && fm_load_acquire(&g->state) == FM_GUARD_FREED && p == g->user;
    if (!freed) {
        fm_event_invalid_pointer(operation, p, "it points into a guarded block's mapping but not to the start of "
                                               "the block");
        return;
    }
    fm_stack_current_t current;
    fm_stack_capture_current(&current);
    fm_report_t r;
    fm_report_begin(&r);
    bool realloc_of = operation[0] == 'r';
    fm_report_str(&r, realloc_of ? "libfastmm5: realloc() of a freed block: " : "libfastmm5: ");
    if (!realloc_of) {
        fm_report_str(&r, operation);
        fm_report_str(&r, "() of a freed block (double free): ");
    }
    fm_report_str(&r, "the guarded block ");
    fm_report_hex(&r, (uintptr_t)p);
    fm_report_str(&r, " of ");
    fm_report_dec(&r, g->size);
    fm_report_str(&r, " bytes was already freed. The operation was refused.");
    fm_guard_report_traces(&r, g, true);
    fm_stack_report_current(&r, &current);
    fm_event_raise(realloc_of ? FASTMM_EVENT_REALLOC_OF_FREED_BLOCK
                              : operation[0] == 'f' || operation[0] == 'o' ? FASTMM_EVENT_DOUBLE_FREE
                                                                           : FASTMM_EVENT_INVALID_POINTER,
                   p, g->size, 0, &r);
}

void fm_guard_free(void *p, const char *operation)
{
    fm_guard_block_t *g = fm_guard_block_of(p);
    uint32_t live = FM_GUARD_LIVE;
    if (g == NULL || p != g->user ||
        !__atomic_compare_exchange_n(&g->state, &live, FM_GUARD_FREED, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        report_bad(g, p, operation);
        return;
    }
    const char *damage = damaged_slack(g);
    if (damage != NULL)
        report_slack(g, damage, operation); /* reported; the block is freed all the same */
    g->freed_by_thread = fm_os_thread_id();
    uintptr_t frames[64];
    fm_stack_capture(frames, g->depth);
    g->free_trace = fm_tracetab_intern(frames, g->depth);
    if (g->data_bytes != 0)
        fm_os_discard_no_access(g->data, g->data_bytes);
    fm_guard_slot_quarantine(g);
}

/* the fork handlers (init.c) run these in every process that forks: FM_EVERY_PROCESS */
FM_EVERY_PROCESS void fm_guard_fork_lock(void) { fm_guard_slots_lock(); }
FM_EVERY_PROCESS void fm_guard_fork_unlock(void) { fm_guard_slots_unlock(); }

size_t fm_guard_usable(const void *p)
{
    fm_guard_block_t *g = fm_guard_block_of(p);
    if (g == NULL || p != g->user || fm_load_acquire(&g->state) != FM_GUARD_LIVE) {
        report_bad(g, p, "malloc_usable_size");
        return 0;
    }
    return g->size;
}

/* A new block for realloc: guarded when every block is, else as malloc would make it. */
static void *allocate_again(size_t size)
{
    void *q = fm_guard_mode == FM_GUARD_ALL ? fm_guard_malloc(size, -1) : NULL;
    if (q == NULL)
        q = fm_load_relaxed(&fm_debug_on) ? fm_debug_alloc(size, -1) : fm_track_new(fm_alloc(size), size, false);
    return q;
}

void *fm_guard_realloc(void *p, size_t size)
{
    fm_guard_block_t *g = fm_guard_block_of(p);
    if (g == NULL || p != g->user || fm_load_acquire(&g->state) != FM_GUARD_LIVE) {
        report_bad(g, p, "realloc");
        errno = EINVAL;
        return NULL;
    }
    if (size == 0) { /* glibc: realloc(p, 0) frees p */
        fm_guard_free(p, "realloc");
        return NULL;
    }
    if (size > (size_t)PTRDIFF_MAX) {
        errno = ENOMEM;
        return NULL;
    }
    void *q = allocate_again(size);
    if (q == NULL)
        return NULL;
    memcpy(q, p, size < g->size ? size : g->size);
    fm_guard_free(p, "realloc");
    return q;
}

/* ---- FASTMM5_GUARD ---- */

static bool word_is(const char *s, size_t n, const char *word)
{
    size_t k = 0;
    while (k < n && word[k] == s[k])
        k++;
    return k == n && word[k] == '\0';
}

/* all | overflow | underflow | sample:N, or a comma-separated pair of a side and sample:N. */
static bool parse(const char *v, unsigned *mode, bool *underflow, unsigned *every)
{
    *mode = FM_GUARD_ALL, *underflow = false, *every = 0;
    for (const char *item = v; *item != '\0';) {
        size_t n = 0;
        while (item[n] != '\0' && item[n] != ',')
            n++;
        if (word_is(item, n, "underflow"))
            *underflow = true;
        else if (n > 7 && word_is(item, 7, "sample:")) {
            uint64_t e = 0;
            for (size_t i = 7; i < n; i++) {
                if (item[i] < '0' || item[i] > '9' || e > 100000000u)
                    return false;
                e = e * 10 + (unsigned)(item[i] - '0');
            }
            if (e == 0)
                return false;
            *mode = FM_GUARD_SAMPLE, *every = (unsigned)e;
        } else if (!word_is(item, n, "all") && !word_is(item, n, "overflow"))
            return false;
        item += n + (item[n] == ',');
    }
    return true;
}

void fm_guard_start(const char *spec)
{
    unsigned mode, every;
    bool underflow;
    if (spec == NULL || spec[0] == '\0')
        return;
    if (!parse(spec, &mode, &underflow, &every)) {
        static const char msg[] = "libfastmm5: FASTMM5_GUARD: expected all, overflow, underflow or sample:N "
                                  "(optionally with ,underflow); ignored\n";
        fm_os_write_all(2, msg, sizeof msg - 1);
        return;
    }
    sample_every = every;
    fm_guard_slots_configure(mode == FM_GUARD_SAMPLE);
    fm_store_relaxed(&fm_guard_underflow, underflow);
    fm_guard_install_handler();
    fm_store_release(&fm_guard_mode, mode);
    fm_debug_refresh_fast_paths(); /* every block guarded: malloc leaves its frameless path */
}
