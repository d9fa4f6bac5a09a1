/*
 * debug.c - FastMM5's debug mode: every block allocated while it is active is wrapped in a
 * 64-byte header and a footer, filled with 0x90, and checked when it is freed, reallocated,
 * reused after being freed, and by fastmm_debug_scan (doc/fastmm5-facts.md section 4).
 *
 *   outer block (small/medium/large, flag DEBUG_INFO)
 *   [ debug header, 64 bytes | user data, user_size bytes | footer ]
 *                             ^ the user pointer; its flag word closes the header (0x20 / 0x21)
 *   footer (unaligned): checksum u32, allocation trace id u32, free trace id u32, reserved u32
 *   (a block without traces, stack depth 0, has no ids: checksum and reserved only)
 *
 * FastMM5's footer holds the two traces themselves (2 x depth addresses); here each distinct
 * trace is stored once in lib/tracetab.c and the footer holds its id: 16 bytes at any depth
 * instead of 8 + 320 at the default depth 20. The header's stack_depth is still the block's.
 *
 * On free the user area is filled with 0x80 (the first word pointing to the freed-object trap
 * table), the free trace is recorded and the block goes back to its arena still flagged
 * DEBUG_INFO; whoever reuses it later checks that nothing was written meanwhile.
 */
#include "internal.h"

#include <errno.h>
#include <signal.h>
#include <string.h>

#define HEADER_SIZE FM_DEBUG_HEADER
#define FILL_ALLOCATED 0x90
#define FILL_FREED 0x80
#define FLAGS_IN_USE ((uint16_t)FM_FLAG_DEBUG_BLOCK)
#define FLAGS_FREED ((uint16_t)(FM_FLAG_DEBUG_BLOCK | FM_FLAG_FREE))
#define MARKER_MIN_SIZE (2 * sizeof(void *)) /* FastMM5's CTObjectInstanceSize */
#define MAX_DEPTH 64u
#define SCAN_RETRIES 100

typedef struct debug_header {
    void *reserved1;                    /* the allocator's free-list links live here */
    void *reserved2;
    uint8_t reserved_space[FM_IS64 ? 4 : 20];
    uint32_t header_checksum;
    uint32_t allocation_ms;             /* milliseconds since the library started */
    uint32_t allocation_number;
    size_t user_size;
    uintptr_t previous_first_word;      /* on free: the user area's first word (a C++ vptr) */
    uint32_t allocation_group;
    uint32_t allocated_by_thread;
    uint32_t freed_by_thread;
    uint8_t allocated_by;               /* FM_FAMILY_*, and log2(alignment) + 1 << 2 (operator new) */
    uint8_t stack_depth;
    uint16_t flags;                     /* doubles as the user pointer's flag word */
} debug_header_t;
FM_STATIC_ASSERT(sizeof(debug_header_t) == HEADER_SIZE, "FastMM5's debug header is 64 bytes");
FM_STATIC_ASSERT(offsetof(debug_header_t, header_checksum) == (FM_IS64 ? 20 : 28), "FastMM5 layout");
FM_STATIC_ASSERT(offsetof(debug_header_t, flags) == 62, "the flags must end right before the user data");

static int debug_counter;
static int erase_allocated_counter;
static int erase_freed_counter;
static fm_lock_t mode_lock;
static unsigned debug_options = FASTMM_DEBUG_NEVER_FREE_SMALL_SPANS | FASTMM_DEBUG_NEVER_MERGE_FREE_MEDIUM_BLOCKS;
static uint32_t last_allocation_number;
static uint32_t allocation_group;
static uint32_t break_number;

/* ---- layout helpers ---- */

FM_INLINE debug_header_t *header_of(const void *user) { return (debug_header_t *)((uintptr_t)user - HEADER_SIZE); }
/* checksum, allocation trace id, free trace id, reserved (for the medium boundary tag); a block
 * without traces (depth 0) has no ids */
FM_INLINE size_t footer_size(unsigned depth) { return depth != 0 ? 16u : 8u; }
FM_INLINE size_t overhead(unsigned depth) { return HEADER_SIZE + footer_size(depth); }
FM_INLINE unsigned char *footer_of(const debug_header_t *h) { return (unsigned char *)(h + 1) + h->user_size; }
FM_INLINE uint32_t trace_id(const debug_header_t *h, bool free_trace)
{
    uint32_t id = FM_TRACE_NONE;
    if (h->stack_depth != 0)
        memcpy(&id, footer_of(h) + (free_trace ? 8 : 4), 4);
    return id;
}
FM_INLINE void set_trace_id(const debug_header_t *h, bool free_trace, uint32_t id)
{
    if (h->stack_depth != 0)
        memcpy(footer_of(h) + (free_trace ? 8 : 4), &id, 4);
}
/* The block's traces for the walk and the leak report: the stored frames, or zeros. */
static const uintptr_t no_frames[MAX_DEPTH];
static const uintptr_t *frames_of(const debug_header_t *h, bool free_trace)
{
    const uintptr_t *f = fm_tracetab_frames(trace_id(h, free_trace), h->stack_depth);
    return f != NULL ? f : no_frames;
}
/* frames_of for a snapshot: the ids at the footer of a user size read once. */
static const uintptr_t *frames_at(const debug_header_t *h, size_t user_size, bool free_trace)
{
    uint32_t id = FM_TRACE_NONE;
    if (h->stack_depth != 0)
        memcpy(&id, (const unsigned char *)(h + 1) + user_size + (free_trace ? 8 : 4), 4);
    const uintptr_t *f = fm_tracetab_frames(id, h->stack_depth);
    return f != NULL ? f : no_frames;
}
/* The ids of this thread's last stamped captures (fm_stack_capture_stamped): a loop that
 * allocates from one place gets the same stamp every time, and its id without a look in the
 * trace table. */
#define KNOWN_TRACES 4u
static __thread struct {
    uint64_t stamp[KNOWN_TRACES];
    uint32_t id[KNOWN_TRACES];
    unsigned next;
} known_traces __attribute__((tls_model("initial-exec")));

/* A captured trace's id (no capture at depth 0). */
static uint32_t capture_trace(unsigned depth)
{
    if (depth == 0)
        return FM_TRACE_NONE;
    uintptr_t trace[MAX_DEPTH];
    uint64_t stamp;
    const uintptr_t *where;
    unsigned n = fm_stack_capture_stamped(trace, depth, &stamp, &where);
    if (stamp != 0)
        for (unsigned i = 0; i < KNOWN_TRACES; i++)
            if (known_traces.stamp[i] == stamp)
                return known_traces.id[i];
    fm_stack_settle(trace, depth, n, where);
    uint32_t id = fm_tracetab_intern(trace, depth);
    if (stamp != 0 && id != FM_TRACE_LOST) {
        unsigned k = known_traces.next++ % KNOWN_TRACES;
        known_traces.stamp[k] = 0; /* a signal handler's capture in between finds no half entry */
        __atomic_signal_fence(__ATOMIC_SEQ_CST);
        known_traces.id[k] = id;
        __atomic_signal_fence(__ATOMIC_SEQ_CST);
        known_traces.stamp[k] = stamp;
    }
    return id;
}

/* The checksums are FastMM5's: all ones xor every 32-bit word of the range (the header's fields
 * from allocation_ms on; the footer's two trace ids). */
#define HEADER_SUM_START (offsetof(debug_header_t, header_checksum) + 4)
FM_STATIC_ASSERT(offsetof(debug_header_t, allocation_ms) == HEADER_SUM_START &&
                     offsetof(debug_header_t, allocated_by) == HEADER_SIZE - 4,
                 "the header checksum covers allocation_ms .. flags, without padding");

FM_INLINE uint32_t fold(uint64_t v) { return (uint32_t)v ^ (uint32_t)(v >> 32); }

/*
 * The xor of the 32-bit words from allocation_ms to the flags, taken field by field: the same
 * value as a xor of those bytes as 32-bit words (an 8-byte field is two, folded), but each field is
 * loaded at the size it was stored with. Read as 8-byte words, the fields init_block and the free
 * have just written one by one could not be forwarded from the store buffer, and each load
 * waited for the stores to reach the cache (11% of a 4 KiB debug allocate/free in perf). The
 * loads are volatile only so that the compiler keeps them apart: gcc merged the three small
 * fields into one 32-bit load, which stalled the same way.
 */
#define FIELD(f) (*(const volatile __typeof__(h->f) *)&h->f)
static uint32_t header_checksum(const debug_header_t *h)
{
    uint32_t last; /* allocated_by, stack_depth and flags: one 32-bit word in memory order */
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    last = (uint32_t)FIELD(allocated_by) | (uint32_t)FIELD(stack_depth) << 8 | (uint32_t)FIELD(flags) << 16;
#else
    last = (uint32_t)FIELD(allocated_by) << 24 | (uint32_t)FIELD(stack_depth) << 16 | (uint32_t)FIELD(flags);
#endif
    return 0xffffffffu ^ FIELD(allocation_ms) ^ FIELD(allocation_number) ^ fold(FIELD(user_size)) ^
           fold(FIELD(previous_first_word)) ^ FIELD(allocation_group) ^ FIELD(allocated_by_thread) ^
           FIELD(freed_by_thread) ^ last;
}
#undef FIELD

/* Over the two trace ids. Its first byte
 * in memory is the first one an off-by-one write hits, most often with a string's terminating
 * 0: it is never 0, so that overrun is always caught (any other value, or a 0 there by chance
 * in 1 of 256 blocks, could match the byte it overwrites). */
static uint32_t footer_sum(uint32_t traces_xor)
{
    uint32_t sum = 0xffffffffu ^ traces_xor;
    unsigned char first;
    memcpy(&first, &sum, 1);
    if (first == 0) {
        first = 0x5a;
        memcpy(&sum, &first, 1);
    }
    return sum;
}

/* The xor of both trace ids as they are in the footer. */
static uint32_t footer_traces_xor(const debug_header_t *h) { return trace_id(h, false) ^ trace_id(h, true); }

/* traces_xor: the xor of both trace ids (footer_traces_xor). */
static void set_checksums_of(debug_header_t *h, uint32_t traces_xor)
{
    h->header_checksum = header_checksum(h);
    uint32_t f = footer_sum(traces_xor);
    memcpy(footer_of(h), &f, 4);
}

static void set_checksums(debug_header_t *h) { set_checksums_of(h, footer_traces_xor(h)); }

static bool header_ok(const debug_header_t *h)
{
    return h->header_checksum == header_checksum(h) && h->stack_depth <= MAX_DEPTH &&
           (h->flags == FLAGS_IN_USE || h->flags == FLAGS_FREED);
}

/* traces_xor: footer_traces_xor(h), which the check computes, for a caller that updates it */
static bool footer_ok_xor(const debug_header_t *h, uint32_t *traces_xor)
{
    uint32_t stored;
    memcpy(&stored, footer_of(h), 4);
    *traces_xor = footer_traces_xor(h);
    return stored == footer_sum(*traces_xor);
}

static bool footer_ok(const debug_header_t *h)
{
    uint32_t unused;
    return footer_ok_xor(h, &unused);
}

/* The outer block's flag word (small/medium/large alike: the two bytes before it). */
/* The last step of writing a debug block: a scan that sees DEBUG_INFO (acquire) sees the block
 * as written (fm_debug_scan_block). */
FM_INLINE void set_debug_info(debug_header_t *h)
{
    fm_store_release(fm_flags_of(h), (uint16_t)(fm_flags_get(h) | FM_FLAG_DEBUG_INFO));
}

/* ---- freed-object trap table: a vtable whose every slot reports the call ---- */

static void virtual_call_trap(void *self, unsigned slot);
#define TRAP(n) static uintptr_t trap_##n(void *self) { virtual_call_trap(self, n); return 0; }
#define TRAP8(n) TRAP(n##0) TRAP(n##1) TRAP(n##2) TRAP(n##3) TRAP(n##4) TRAP(n##5) TRAP(n##6) TRAP(n##7)
TRAP8(0) TRAP8(1) TRAP8(2) TRAP8(3) TRAP8(4) TRAP8(5) TRAP8(6) TRAP8(7)
#define T(n) (uintptr_t)trap_##n
#define T8(n) T(n##0), T(n##1), T(n##2), T(n##3), T(n##4), T(n##5), T(n##6), T(n##7)
/* Itanium C++ ABI: the vptr points past offset-to-top and the RTTI pointer. */
static const uintptr_t freed_object_vtable[2 + 64] = {0, 0, T8(0), T8(1), T8(2), T8(3), T8(4), T8(5), T8(6), T8(7)};
#define FREED_MARKER ((uintptr_t)&freed_object_vtable[2])

/* ---- reports ---- */

static const char *event_name(fastmm_event_type_t t)
{
    switch (t) {
    case FASTMM_EVENT_DOUBLE_FREE:
        return "double free: the block was already freed";
    case FASTMM_EVENT_REALLOC_OF_FREED_BLOCK:
        return "realloc of a block that was already freed";
    case FASTMM_EVENT_HEADER_CORRUPTION:
        return "the block's debug header was overwritten (a write before the start of the block, or into a freed block)";
    case FASTMM_EVENT_FOOTER_CORRUPTION:
        return "the block's footer was overwritten (a write past the end of the block)";
    case FASTMM_EVENT_MODIFIED_AFTER_FREE:
        return "the block was modified after it was freed (a write through a dangling pointer)";
    case FASTMM_EVENT_VIRTUAL_CALL_ON_FREED_OBJECT:
        return "a virtual method was called on a freed object";
    case FASTMM_EVENT_MISMATCHED_DEALLOCATION:
        return "the block was released by a function that does not match the one that allocated it";
    case FASTMM_EVENT_SIZED_DELETE_MISMATCH:
        return "a sized operator delete was given a size that is not the block's";
    case FASTMM_EVENT_USE_AFTER_FREE:
        return "a freed block was accessed (a read or write through a dangling pointer)";
    default:
        return "memory error";
    }
}

/* Byte runs that differ from the freed image, as FastMM5's "offset(length)" list. */
static bool waiting_pages(const debug_header_t *h, unsigned char **lo, unsigned char **hi);
static bool large_outer(const void *outer);

static void report_modified_runs(fm_report_t *r, const debug_header_t *h)
{
    const unsigned char *u = (const unsigned char *)(h + 1);
    unsigned runs = 0;
    uintptr_t marker = FREED_MARKER;
    unsigned char *lo, *hi;
    size_t gap = h->user_size, gap_end = h->user_size; /* a large block's pages that may have no access */
    if (large_outer(h) && waiting_pages(h, &lo, &hi))
        gap = (size_t)(lo - u), gap_end = (size_t)(hi - u);
    fm_report_str(r, "\nModified byte offsets (and lengths): ");
    for (size_t i = 0; i < h->user_size && runs < 32;) {
        if (i == gap) {
            i = gap_end;
            continue;
        }
        unsigned char want = (h->user_size >= MARKER_MIN_SIZE && i < sizeof marker)
                                 ? ((const unsigned char *)&marker)[i] : FILL_FREED;
        if (u[i] == want) {
            i++;
            continue;
        }
        size_t start = i;
        while (i < h->user_size && i != gap) {
            unsigned char w = (h->user_size >= MARKER_MIN_SIZE && i < sizeof marker)
                                  ? ((const unsigned char *)&marker)[i] : FILL_FREED;
            if (u[i] == w)
                break;
            i++;
        }
        if (runs++ != 0)
            fm_report_str(r, ", ");
        fm_report_dec(r, start);
        fm_report_str(r, "(");
        fm_report_dec(r, i - start);
        fm_report_str(r, ")");
    }
}

static void report_block(fm_report_t *r, const debug_header_t *h, bool header_trusted)
{
    const void *user = h + 1;
    fm_report_str(r, "\nBlock: ");
    fm_report_hex(r, (uintptr_t)user);
    if (!header_trusted) {
        fm_report_str(r, " (its header is damaged, so what it records cannot be trusted)");
    } else {
        fm_report_str(r, ", requested size ");
        fm_report_dec(r, h->user_size);
        fm_report_str(r, ", allocation number ");
        fm_report_dec(r, h->allocation_number);
        fm_report_str(r, ", allocation group ");
        fm_report_dec(r, h->allocation_group);
        fm_report_str(r, "\nAllocated by thread ");
        fm_report_dec(r, h->allocated_by_thread);
        fm_report_str(r, " at ");
        fm_report_dec(r, h->allocation_ms);
        fm_report_str(r, " ms after start-up; allocation stack trace:");
        fm_stack_format_id(r, trace_id(h, false), h->stack_depth);
        if (h->flags == FLAGS_FREED) {
            fm_report_str(r, "\nFreed by thread ");
            fm_report_dec(r, h->freed_by_thread);
            fm_report_str(r, "; free stack trace:");
            fm_stack_format_id(r, trace_id(h, true), h->stack_depth);
        }
    }
    size_t dump = header_trusted && h->user_size + 8 < 256 ? h->user_size + 8 : 256;
    fm_report_str(r, "\nCurrent memory dump of ");
    fm_report_dec(r, dump);
    fm_report_str(r, " bytes starting at the user pointer:");
    fm_report_dump(r, user, dump);
}

/* Takes the report lock and writes the first lines every block event shares: the event, the
 * call that found it and that call's stack (captured before the lock is taken). */
static void begin_block_report(fm_report_t *r, fastmm_event_type_t type, const char *operation)
{
    fm_stack_current_t current;
    fm_stack_capture_current(&current);
    fm_report_begin(r);
    fm_report_str(r, "libfastmm5: ");
    fm_report_str(r, event_name(type));
    fm_report_str(r, "\nDetected by: ");
    fm_report_str(r, operation);
    fm_report_str(r, ", thread ");
    fm_report_dec(r, fm_os_thread_id());
    fm_stack_report_current(r, &current);
}

static void raise_block_event(fastmm_event_type_t type, const debug_header_t *h, const char *operation)
{
    bool trusted = type != FASTMM_EVENT_HEADER_CORRUPTION;
    fm_report_t r;
    begin_block_report(&r, type, operation);
    report_block(&r, h, trusted);
    if (type == FASTMM_EVENT_MODIFIED_AFTER_FREE)
        report_modified_runs(&r, h);
    fm_event_raise(type, h + 1, trusted ? h->user_size : 0, trusted ? h->allocation_number : 0, &r);
}

static void virtual_call_trap(void *self, unsigned slot)
{
    uintptr_t trace[MAX_DEPTH];
    fm_stack_capture(trace, MAX_DEPTH);
    fm_report_t r;
    fm_report_begin(&r);
    fm_report_str(&r, "libfastmm5: ");
    fm_report_str(&r, event_name(FASTMM_EVENT_VIRTUAL_CALL_ON_FREED_OBJECT));
    fm_report_str(&r, " (virtual slot ");
    fm_report_dec(&r, slot);
    fm_report_str(&r, ")\nStack trace of the call:");
    fm_stack_format(&r, trace, MAX_DEPTH);
    const debug_header_t *h = header_of(self);
    bool trusted = header_ok(h);
    report_block(&r, h, trusted);
    fm_event_raise(FASTMM_EVENT_VIRTUAL_CALL_ON_FREED_OBJECT, self, trusted ? h->user_size : 0,
                   trusted ? h->allocation_number : 0, &r);
}

/* ---- the checks ---- */

/*
 * Which user bytes of the block this thread is being handed already hold FILL_ALLOCATED: a
 * freed block's pattern is checked on reuse and, in the same pass over it, overwritten with the
 * allocated fill (fm_kernels.check_refill: one pass where a check and then a fill would read the
 * block twice). The arenas vet a reused block on the allocating thread, so a thread-local says
 * it to init_block, which then fills only the rest. fm_debug_alloc clears it before it asks an
 * arena, so what it finds there is about the block it got, or about none.
 */
static __thread struct {
    const void *outer;
    size_t from, to; /* user bytes [from, to) hold FILL_ALLOCATED */
} prefilled __attribute__((tls_model("initial-exec")));

/* ---- the quarantine's no-access pages (quarantine.c) ---- */

/* A large freed debug block waiting in the quarantine has the whole pages of its user area after
 * the marker word made PROT_NONE, and says so in reserved2 (no other use while the manager has not
 * freed the block), for the fault handler. The checks of a freed large block read only the bytes
 * around those pages, whether they are protected yet or not: a freed large debug block is seen
 * only while it waits (otherwise it is unmapped at free), and the scan's optimistic reads may
 * race with the protection. */
#define WAITING_PROTECTED ((void *)(uintptr_t)0x9a4d5e7du)

static bool large_outer(const void *outer)
{
    return (fm_pagemap_lookup(outer) & FM_REGION_TYPE_MASK) == FM_REGION_LARGE;
}

static bool waiting_pages(const debug_header_t *h, unsigned char **lo, unsigned char **hi)
{
    size_t pg = fm_os_page_size();
    unsigned char *u = (unsigned char *)(h + 1);
    *lo = (unsigned char *)fm_align_up((uintptr_t)u + sizeof(uintptr_t), pg);
    *hi = (unsigned char *)((uintptr_t)(u + h->user_size) & ~(uintptr_t)(pg - 1));
    return *lo < *hi;
}

/* The mark first: the fault handler must know the pages the moment they fault. */
static void protect_waiting(debug_header_t *h)
{
    unsigned char *lo, *hi;
    if (!waiting_pages(h, &lo, &hi))
        return;
    fm_store_release(&h->reserved2, WAITING_PROTECTED);
    if (!fm_os_protect(lo, (size_t)(hi - lo), false))
        fm_store_release(&h->reserved2, NULL);
}

static void unprotect_waiting(debug_header_t *h)
{
    unsigned char *lo, *hi;
    if (fm_load_acquire(&h->reserved2) == WAITING_PROTECTED && waiting_pages(h, &lo, &hi))
        fm_os_protect(lo, (size_t)(hi - lo), true);
    fm_store_release(&h->reserved2, NULL);
}

/* A fault at addr in the no-access pages of a large freed debug block waiting in the quarantine
 * (guardfault.c, in the signal handler): reported, true; false if addr is not in such pages. */
bool fm_debug_report_waiting_fault(const void *addr)
{
    uintptr_t entry = fm_pagemap_lookup(addr);
    if ((entry & FM_REGION_TYPE_MASK) != FM_REGION_LARGE)
        return false;
    debug_header_t *h = (debug_header_t *)((char *)(entry & ~(uintptr_t)FM_REGION_TYPE_MASK) + FM_LARGE_HEADER);
    unsigned char *lo, *hi;
    if (fm_load_acquire(&h->reserved2) != WAITING_PROTECTED || !waiting_pages(h, &lo, &hi) || (const unsigned char *)addr < lo ||
        (const unsigned char *)addr >= hi)
        return false;
    fm_report_t r;
    begin_block_report(&r, FASTMM_EVENT_USE_AFTER_FREE, "a fault in a freed block waiting in the quarantine");
    fm_report_str(&r, "\nThe access at ");
    fm_report_hex(&r, (uintptr_t)addr);
    fm_report_str(&r, " is at offset ");
    fm_report_dec(&r, (uint64_t)((const unsigned char *)addr - (const unsigned char *)(h + 1)));
    fm_report_str(&r, " into the freed block; the process is terminated by the signal.");
    report_block(&r, h, true);
    fm_event_raise_fault(FASTMM_EVENT_USE_AFTER_FREE, h + 1, h->user_size, &r);
    return true;
}

/* The fill of a protected waiting block: the bytes before and after its no-access pages. */
static bool waiting_pattern_ok(const debug_header_t *h)
{
    unsigned char *u = (unsigned char *)(h + 1), *lo, *hi;
    uintptr_t first;
    memcpy(&first, u, sizeof first);
    waiting_pages(h, &lo, &hi);
    return first == FREED_MARKER && fm_check_fill(u + sizeof first, FILL_FREED, (size_t)(lo - u) - sizeof first) &&
           fm_check_fill(hi, FILL_FREED, (size_t)(u + h->user_size - hi));
}

/* Whether a freed block still holds its marker word and FILL_FREED. refill (a block about to be
 * reused): from FM_KERNELS_ASM_MIN_SIZE bytes of pattern on, an intact pattern (not the marker
 * word) becomes FILL_ALLOCATED in the same pass and `prefilled` says so; on a mismatch the block
 * is left as it was. Below that size a check, and init_block's one fill, cost less. */
static bool freed_pattern_ok(debug_header_t *h, bool refill)
{
    unsigned char *u = (unsigned char *)(h + 1);
    size_t skip = 0, n = h->user_size;
    unsigned char *lo, *hi; /* a freed large block is checked only while it waits in the quarantine */
    if (FM_UNLIKELY(fm_load_relaxed(&fm_quarantine_limit) != 0) && large_outer(h) && waiting_pages(h, &lo, &hi))
        return waiting_pattern_ok(h);
    if (n >= MARKER_MIN_SIZE) {
        uintptr_t first;
        memcpy(&first, u, sizeof first);
        if (first != FREED_MARKER)
            return false;
        skip = sizeof first;
    }
    if (!refill || n - skip < FM_KERNELS_ASM_MIN_SIZE)
        return fm_check_fill(u + skip, FILL_FREED, n - skip);
    size_t done = fm_kernels.check_refill(u + skip, FILL_FREED, FILL_ALLOCATED, n - skip);
    if (done != n - skip) {
        fm_fill(u + skip, FILL_FREED, done); /* those bytes were checked: FILL_FREED */
        return false;
    }
    prefilled.outer = h;
    prefilled.from = skip;
    prefilled.to = n;
    return true;
}

/* What is wrong with a freed debug block, or -1 if it is intact. refill: it is about to be
 * handed out (freed_pattern_ok). */
static int freed_block_problem(const debug_header_t *h, bool refill)
{
    if (!header_ok(h) || h->flags != FLAGS_FREED)
        return FASTMM_EVENT_HEADER_CORRUPTION;
    if (!footer_ok(h))
        return FASTMM_EVENT_FOOTER_CORRUPTION;
    if (!freed_pattern_ok((debug_header_t *)h, refill))
        return FASTMM_EVENT_MODIFIED_AFTER_FREE;
    return -1;
}

/*
 * Vets a freed debug block an arena is about to hand out again: -1 if intact (its pattern now
 * the allocated fill, see freed_pattern_ok), else the problem. DEBUG_INFO is cleared before
 * the refill rewrites the block, so a concurrent fastmm_debug_scan skips it or retries
 * (fm_debug_scan_block checks the flag word before and after); a damaged block gets the flag back.
 */
static int vet_for_reuse(void *outer)
{
    fm_flags_set(outer, fm_flags_get(outer) & ~FM_FLAG_DEBUG_INFO);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    int problem = freed_block_problem(outer, true);
    if (problem >= 0)
        set_debug_info(outer);
    return problem;
}

/*
 * Called with the outer block of a freed debug block that an arena is about to hand out again
 * (in any mode). True: intact, and its debug flag is cleared. False: reported, and the caller
 * must keep the block out of circulation (quarantine).
 */
bool fm_debug_check_reuse(void *outer)
{
    int problem = vet_for_reuse(outer);
    if (problem >= 0) {
        raise_block_event((fastmm_event_type_t)problem, outer, "reuse of a freed block");
        return false;
    }
    return true;
}

/* The same without reporting, for code that holds an arena lock (medium.c). */
bool fm_debug_freed_block_intact(void *outer) { return vet_for_reuse(outer) < 0; }

/* ---- allocation ---- */

static void apply_options_locked(void)
{
    bool on = debug_counter > 0;
    fm_store_relaxed(&fm_small_keep_empty_spans, on && (debug_options & FASTMM_DEBUG_NEVER_FREE_SMALL_SPANS));
    fm_store_relaxed(&fm_medium_never_merge, on && (debug_options & FASTMM_DEBUG_NEVER_MERGE_FREE_MEDIUM_BLOCKS));
    fm_store_release(&fm_erase_allocated, erase_allocated_counter > 0);
    fm_store_release(&fm_erase_freed, erase_freed_counter > 0);
    fm_store_release(&fm_debug_on, on);
    bool slow_alloc =
        on || erase_allocated_counter > 0 || fm_track_on || fm_load_relaxed(&fm_guard_mode) == FM_GUARD_ALL;
    fm_store_release(&fm_fast_alloc_above, slow_alloc ? FM_FAST_PATH_OFF : 1u);
    bool slow_free = erase_freed_counter > 0 || fm_track_on;
    fm_store_release(&fm_fast_free_above, slow_free ? FM_FAST_PATH_OFF : 1u);
    fm_defer_free_set_off(FM_DEFER_OFF_SLOW_FREE, slow_free);
    if (on) /* for good: debug blocks outlive the mode */
        fm_defer_free_set_off(FM_DEFER_OFF_DEBUG, true);
}

/* Allocation numbers are unique, and consecutive within a thread, but handed to each thread 64
 * at a time: a locked add per allocation (FastMM5's) cost 9% of a 64-byte debug pair, as it
 * waits for the thread's pending stores. A single-threaded program numbers its blocks 1, 2, 3...
 * as FastMM5 does; with threads, numbers follow each thread's order, not the global one. */
static __thread struct { uint32_t next, end; } numbers __attribute__((tls_model("initial-exec")));
static uint32_t next_allocation_number(void)
{
    if (FM_UNLIKELY(numbers.next == numbers.end)) {
        numbers.next = __atomic_fetch_add(&last_allocation_number, 64u, __ATOMIC_RELAXED) + 1u;
        numbers.end = numbers.next + 64u;
    }
    return numbers.next++;
}

static void *init_block(char *outer, size_t size, unsigned depth, int fill)
{
    debug_header_t *h = (debug_header_t *)outer;
    h->user_size = size;
    h->stack_depth = (uint8_t)depth;
    h->previous_first_word = 0;
    h->allocation_group = fm_load_relaxed(&allocation_group);
    h->allocation_number = next_allocation_number();
    h->allocation_ms = (uint32_t)(fm_os_coarse_time_ms() - fm_start_ms);
    h->allocated_by_thread = fm_os_thread_id();
    h->freed_by_thread = 0;
    h->allocated_by = FM_FAMILY_MALLOC;
    h->flags = FLAGS_IN_USE;
    uint32_t id = capture_trace(depth);
    set_trace_id(h, false, id);
    set_trace_id(h, true, FM_TRACE_NONE);
    memset(footer_of(h) + footer_size(depth) - 4, 0, 4);
    set_checksums_of(h, id); /* the free trace's id is 0 */
    if (fill == FILL_ALLOCATED && prefilled.outer == outer && prefilled.from < size) {
        /* the reuse check left [from, to) holding the fill: only the rest is written */
        size_t to = prefilled.to < size ? prefilled.to : size;
        fm_fill(h + 1, (uint8_t)fill, prefilled.from);
        fm_fill((char *)(h + 1) + to, (uint8_t)fill, size - to);
    } else if (fill >= 0) {
        fm_fill(h + 1, (uint8_t)fill, size);
    }
    prefilled.outer = NULL;
    set_debug_info(h);
    if (h->allocation_number == fm_load_relaxed(&break_number) && break_number != 0)
        raise(SIGTRAP);
    return h + 1;
}

/* fill: FILL_ALLOCATED, 0 for calloc, or -1 for no fill (realloc copies over it); alignment: 0,
 * or a power of two from 2 * FM_MIN_ALIGN to FM_DEBUG_MAX_ALIGN (the outer block gets it, and
 * the user pointer HEADER_SIZE bytes in keeps it). */
static void *debug_alloc(size_t size, int fill, size_t alignment)
{
    if (debug_options & FASTMM_DEBUG_SCAN_EVERY_OPERATION)
        fastmm_debug_scan();
    unsigned depth = fm_load_relaxed(&fm_stack_depth);
    if (size > (size_t)PTRDIFF_MAX - overhead(depth)) {
        errno = ENOMEM;
        return NULL;
    }
    prefilled.outer = NULL; /* only a block vetted during this allocation counts */
    char *outer = alignment == 0 ? fm_alloc(size + overhead(depth))
                                 : fm_alloc_aligned_untracked(alignment, size + overhead(depth));
    if (outer == NULL)
        return NULL;
    fm_track_internal(outer, size + overhead(depth));
    bool zeroed = fill == 0;
    if (fill == 0 && size + overhead(depth) > FM_MEDIUM_MAX_USER && !fm_large_header_of(outer)->recycled)
        fill = -1; /* a large block in a fresh mapping is already zero (a retained one is not) */
    void *user = init_block(outer, size, depth, fill);
    fm_track_alloc(user, size, size, zeroed);
    return user;
}

void *fm_debug_alloc(size_t size, int fill) { return debug_alloc(size, fill, 0); }

FM_STATIC_ASSERT(HEADER_SIZE % FM_DEBUG_MAX_ALIGN == 0, "the user pointer keeps the outer block's alignment");

void *fm_debug_alloc_aligned(size_t size, size_t alignment)
{
    return debug_alloc(size, FILL_ALLOCATED, alignment > FM_MIN_ALIGN ? alignment : 0);
}

FM_INLINE unsigned alignment_code(size_t alignment)
{
    return alignment == 0 ? 0 : 1u + (unsigned)__builtin_ctzll((unsigned long long)alignment);
}

/* operator new's mark on the block it just allocated (nothing for a plain block). */
void fm_debug_set_family(void *p, unsigned family, size_t alignment)
{
    if (fm_flags_get(p) != FLAGS_IN_USE)
        return;
    debug_header_t *h = header_of(p);
    fm_flags_set(h, fm_flags_get(h) & ~FM_FLAG_DEBUG_INFO); /* a concurrent scan leaves it alone */
    __atomic_thread_fence(__ATOMIC_RELEASE);
    h->allocated_by = (uint8_t)(family | alignment_code(alignment) << 2);
    h->header_checksum = header_checksum(h);
    set_debug_info(h);
}

/* ---- classification of debug user pointers ---- */

/* A live or freed debug block's user pointer: its outer block must be a block of this heap
 * carrying DEBUG_INFO, and the word before it must be a debug flag word. */
bool fm_debug_classify(const void *p, fm_block_ref_t *outer_ref)
{
    fm_track_quiet(true);
    bool found = fm_block_debug(p, outer_ref);
    fm_track_quiet(false);
    return found;
}

/* Whether a pointer that is no live block looks like a freed debug block (for the double-free
 * and realloc-of-freed reports): mapped by this heap, with an intact header flagged freed. */
static bool looks_like_freed_debug_block_quietly(const void *p);

static bool looks_like_freed_debug_block(const void *p)
{
    fm_track_quiet(true);
    bool found = looks_like_freed_debug_block_quietly(p);
    fm_track_quiet(false);
    return found;
}

static bool looks_like_freed_debug_block_quietly(const void *p)
{
    if (((uintptr_t)p & (FM_MIN_ALIGN - 1)) != 0 || fm_pagemap_lookup((const char *)p - HEADER_SIZE) == 0 ||
        fm_pagemap_lookup(p) == 0)
        return false;
    const debug_header_t *h = header_of(p);
    if (h->flags != FLAGS_FREED || !header_ok(h))
        return false;
    /* A freed debug block's outer block reused by a plain allocation keeps the old header in its
     * user bytes: p is then inside that live block (an interior pointer), no freed block. */
    fm_block_ref_t outer = fm_block_decode(h);
    return outer.kind == FM_BLOCK_INVALID || (fm_flags_get(h) & (FM_FLAG_FREE | FM_FLAG_DEBUG_INFO)) != 0;
}

/* ---- freed large debug blocks ----
 * A large block's memory goes back to the OS when it is freed, so a second free finds nothing of
 * it. To still name a double free (and realloc of a freed block) with both stack traces, the
 * last few freed large debug blocks are remembered here. */

#define FREED_LARGE_RING 32

typedef struct freed_large {
    const void *user;
    size_t user_size;
    uint32_t allocation_number, allocated_by_thread, freed_by_thread;
    unsigned depth;
    uint32_t allocation_trace, free_trace; /* ids (tracetab.c) */
} freed_large_t;

static fm_lock_t ring_lock;
static freed_large_t freed_large[FREED_LARGE_RING];
static unsigned ring_next;

/* fork: none of these locks is held while another lock of the library is taken. */
FM_EVERY_PROCESS void fm_debug_fork_lock(void)
{
    fm_lock_wait(&mode_lock);
    fm_lock_wait(&ring_lock);
    fm_tracetab_fork_lock();
}

FM_EVERY_PROCESS void fm_debug_fork_unlock(void)
{
    fm_tracetab_fork_unlock();
    fm_lock_release(&ring_lock);
    fm_lock_release(&mode_lock);
}

static void remember_freed_large(const debug_header_t *h)
{
    fm_lock_wait(&ring_lock);
    freed_large_t *e = &freed_large[ring_next++ % FREED_LARGE_RING];
    e->user = h + 1;
    e->user_size = h->user_size;
    e->allocation_number = h->allocation_number;
    e->allocated_by_thread = h->allocated_by_thread;
    e->freed_by_thread = h->freed_by_thread;
    e->depth = h->stack_depth;
    e->allocation_trace = trace_id(h, false);
    e->free_trace = trace_id(h, true);
    fm_lock_release(&ring_lock);
}

/* Reports p if it is a remembered freed large block; false if it is not one. */
static bool report_freed_large(fastmm_event_type_t type, const void *p, const char *operation)
{
    freed_large_t e;
    bool found = false;
    fm_lock_wait(&ring_lock);
    for (unsigned i = 0; i < FREED_LARGE_RING && !found; i++)
        if (freed_large[i].user == p && p != NULL) {
            e = freed_large[i];
            found = true;
        }
    fm_lock_release(&ring_lock);
    if (!found)
        return false;
    fm_report_t r;
    begin_block_report(&r, type, operation);
    fm_report_str(&r, "\nBlock: ");
    fm_report_hex(&r, (uintptr_t)p);
    fm_report_str(&r, " (a large block: its memory went back to the OS when it was freed), requested size ");
    fm_report_dec(&r, e.user_size);
    fm_report_str(&r, ", allocation number ");
    fm_report_dec(&r, e.allocation_number);
    fm_report_str(&r, "\nAllocated by thread ");
    fm_report_dec(&r, e.allocated_by_thread);
    fm_report_str(&r, "; allocation stack trace:");
    fm_stack_format_id(&r, e.allocation_trace, e.depth);
    fm_report_str(&r, "\nFreed by thread ");
    fm_report_dec(&r, e.freed_by_thread);
    fm_report_str(&r, "; free stack trace:");
    fm_stack_format_id(&r, e.free_trace, e.depth);
    fm_event_raise(type, p, e.user_size, e.allocation_number, &r);
    return true;
}

/* ---- free ---- */

/* traces_xor: the xor of the footer's trace words, as checked (footer_ok_xor). */
static bool verify_live(const debug_header_t *h, const char *operation, uint32_t *traces_xor)
{
    if (!header_ok(h) || h->flags != FLAGS_IN_USE) {
        raise_block_event(FASTMM_EVENT_HEADER_CORRUPTION, h, operation);
        return false;
    }
    if (!footer_ok_xor(h, traces_xor)) {
        raise_block_event(FASTMM_EVENT_FOOTER_CORRUPTION, h, operation);
        return false;
    }
    return true;
}

/* Frees a debug block whose outer block is `ref`. Corrupt blocks are reported and kept. */
static void free_debug_block(void *p, fm_block_ref_t ref, const char *operation)
{
    debug_header_t *h = header_of(p);
    uint32_t traces_xor;
    if (!verify_live(h, operation, &traces_xor))
        return; /* quarantined: never freed, reused or merged */
    fm_track_free(p, h->user_size, false, true); /* the debug checks read the freed contents */
    /* While the block is rewritten, a concurrent scan sees no DEBUG_INFO and leaves it alone. */
    fm_flags_set(h, fm_flags_get(h) & ~FM_FLAG_DEBUG_INFO);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    h->freed_by_thread = fm_os_thread_id();
    uint32_t id = capture_trace(h->stack_depth);
    /* the checked sum with the free trace's id (0 in a block in use) replaced */
    traces_xor ^= trace_id(h, true) ^ id;
    set_trace_id(h, true, id);
    memcpy(&h->previous_first_word, p, h->user_size >= sizeof(uintptr_t) ? sizeof(uintptr_t) : 0);
    unsigned char *u = p;
    size_t n = h->user_size;
    if (n >= MARKER_MIN_SIZE) {
        uintptr_t marker = FREED_MARKER;
        memcpy(u, &marker, sizeof marker);
        u += sizeof marker;
        n -= sizeof marker;
    }
    fm_fill(u, FILL_FREED, n);
    h->flags = FLAGS_FREED;
    set_checksums_of(h, traces_xor);
    set_debug_info(h);
    if (ref.kind == FM_BLOCK_LARGE)
        remember_freed_large(h);
    if (FM_UNLIKELY(fm_load_relaxed(&fm_quarantine_limit) != 0)) { /* FASTMM5_QUARANTINE */
        if (ref.kind == FM_BLOCK_LARGE)
            protect_waiting(h); /* before another thread can see it there */
        if (fm_quarantine_hold(h, fm_debug_quarantine_bytes(h)))
            return;
        unprotect_waiting(h);
    }
    /* Small debug blocks, and medium ones of the cached sizes, go to this thread's cache, as
     * plain ones do: no arena lock (two locked arena visits would be a quarter of a debug
     * allocate/free pair at 4 KiB, 20% at 64 B). LIFO per class or bin, so the block freed last
     * is still the first one reused and a write after free is caught at the next allocation of
     * that size, as in FastMM5; it keeps DEBUG_INFO and its pattern there, so the scan checks
     * it, and taking it vets it (tcache.c, and malloc's inline path leaves such blocks to it). */
    if (ref.kind == FM_BLOCK_LARGE || fm_load_relaxed(&fm_erase_freed))
        fm_free_classified(h, ref);
    else
        fm_free_cached(h, ref);
}

static void raise_mismatch(const debug_header_t *h, const char *operation, const char *released_by);

size_t fm_debug_quarantine_bytes(const void *outer)
{
    const debug_header_t *h = outer;
    return overhead(h->stack_depth) + h->user_size;
}

/* A block leaving the quarantine: checked as a reuse would check it, then released to the
 * manager as free() releases one; a damaged one is reported and kept out of use. */
void fm_debug_quarantine_leave(void *outer)
{
    debug_header_t *h = outer;
    unprotect_waiting(h);
    int problem = freed_block_problem(h, false);
    if (problem >= 0) {
        raise_block_event((fastmm_event_type_t)problem, h, "the quarantine (a block leaving it)");
        return;
    }
    fm_block_ref_t ref = fm_block_classify(outer);
    if (ref.kind == FM_BLOCK_LARGE || fm_load_relaxed(&fm_erase_freed))
        fm_free_classified(outer, ref);
    else if (ref.kind != FM_BLOCK_INVALID)
        fm_free_cached(outer, ref);
}

/* free() of a debug block's user pointer (freed, or reported as a double free): true. False if
 * p is no debug block; nothing was done then. */
bool fm_debug_free_block(void *p)
{
    fm_block_ref_t outer;
    if (!fm_debug_classify(p, &outer))
        return false;
    if (debug_options & FASTMM_DEBUG_SCAN_EVERY_OPERATION && fm_load_relaxed(&fm_debug_on))
        fastmm_debug_scan();
    debug_header_t *h = header_of(p);
    if (h->flags == FLAGS_FREED && header_ok(h)) {
        raise_block_event(FASTMM_EVENT_DOUBLE_FREE, h, "free");
        return true;
    }
    if (h->flags == FLAGS_IN_USE && header_ok(h) && (h->allocated_by & FM_FAMILY_MASK) != FM_FAMILY_MALLOC)
        raise_mismatch(h, "free", "free()");
    free_debug_block(p, outer, "free");
    return true;
}

/* ---- operator delete (operators.c, through delete_check.c) ---- */

static const char *const allocator_names[] = {"malloc() or a function like it", "operator new", "operator new[]", "?"};
static const char *const releaser_names[] = {"free()", "operator delete", "operator delete[]", "?"};

/* Which allocated it, against which released it (both with their alignment), then the block. */
static void raise_mismatch(const debug_header_t *h, const char *operation, const char *released_by)
{
    fm_report_t r;
    begin_block_report(&r, FASTMM_EVENT_MISMATCHED_DEALLOCATION, operation);
    fm_report_str(&r, "\nAllocated by: ");
    fm_report_str(&r, allocator_names[h->allocated_by & FM_FAMILY_MASK]);
    if (h->allocated_by >> 2 != 0) {
        fm_report_str(&r, " with alignment ");
        fm_report_dec(&r, (uint64_t)1 << ((h->allocated_by >> 2) - 1));
    }
    fm_report_str(&r, "; released by: ");
    fm_report_str(&r, released_by);
    report_block(&r, h, true);
    fm_event_raise(FASTMM_EVENT_MISMATCHED_DEALLOCATION, h + 1, h->user_size, h->allocation_number, &r);
}

/* "operator delete[](void*, std::size_t, std::align_val_t 64)": which delete was called. */
static void delete_signature(char *out, size_t cap, size_t size, size_t alignment, unsigned how)
{
    fm_report_t r = {out, 0, cap};
    fm_report_str(&r, releaser_names[how & FM_FAMILY_MASK]);
    fm_report_str(&r, "(void*");
    if (how & FM_DELETE_SIZED) {
        fm_report_str(&r, ", size ");
        fm_report_dec(&r, size);
    }
    if (alignment != 0) {
        fm_report_str(&r, ", alignment ");
        fm_report_dec(&r, alignment);
    }
    fm_report_str(&r, ")");
}

bool fm_debug_delete_block(void *p, size_t size, size_t alignment, unsigned how)
{
    fm_block_ref_t outer;
    if (!fm_debug_classify(p, &outer))
        return false;
    if (debug_options & FASTMM_DEBUG_SCAN_EVERY_OPERATION && fm_load_relaxed(&fm_debug_on))
        fastmm_debug_scan();
    debug_header_t *h = header_of(p);
    char released_by[96];
    delete_signature(released_by, sizeof released_by, size, alignment, how);
    if (h->flags == FLAGS_FREED && header_ok(h)) {
        raise_block_event(FASTMM_EVENT_DOUBLE_FREE, h, released_by);
        return true;
    }
    if (h->flags == FLAGS_IN_USE && header_ok(h)) {
        if ((h->allocated_by & FM_FAMILY_MASK) != (how & FM_FAMILY_MASK) ||
            h->allocated_by >> 2 != alignment_code(alignment))
            raise_mismatch(h, released_by, released_by);
        else if ((how & FM_DELETE_SIZED) && size != h->user_size)
            raise_block_event(FASTMM_EVENT_SIZED_DELETE_MISMATCH, h, released_by);
    }
    free_debug_block(p, outer, released_by);
    return true;
}

/* A debug block's user pointer whose header flags were overwritten: its outer block, 64 bytes
 * before it, is a block of this heap that says it holds a debug block (DEBUG_INFO); nothing else
 * starts there. Else a plain block's damaged flag word (delete_check.c). */
bool fm_debug_report_damaged_header(const char *operation, const void *p)
{
    fm_track_quiet(true);
    bool debug_block = false;
    if (((uintptr_t)p & (FM_MIN_ALIGN - 1)) == 0 && fm_pagemap_lookup((const char *)p - HEADER_SIZE) != 0) {
        fm_block_ref_t ref = fm_block_classify((const char *)p - HEADER_SIZE);
        debug_block = ref.kind != FM_BLOCK_INVALID &&
                      (fm_flags_get((const char *)p - HEADER_SIZE) & (FM_FLAG_DEBUG_INFO | FM_FLAG_FREE)) == FM_FLAG_DEBUG_INFO;
    }
    fm_track_quiet(false);
    if (debug_block) {
        raise_block_event(FASTMM_EVENT_HEADER_CORRUPTION, header_of(p), operation);
        return true;
    }
    size_t usable;
    const char *kind;
    if (!fm_block_start_damaged(p, &usable, &kind))
        return false;
    uint16_t flags;
    memcpy(&flags, (const char *)p - 2, sizeof flags);
    fm_event_header_damaged(operation, p, flags, kind, usable);
    return true;
}

/* free() of anything that classified as no plain block: a debug block, or an invalid pointer. */
void fm_debug_free_or_report(void *p, fm_block_ref_t plain_ref)
{
    if (fm_debug_free_block(p))
        return;
    if (debug_options & FASTMM_DEBUG_SCAN_EVERY_OPERATION && fm_load_relaxed(&fm_debug_on))
        fastmm_debug_scan();
    if (looks_like_freed_debug_block(p)) {
        raise_block_event(FASTMM_EVENT_DOUBLE_FREE, header_of(p), "free");
        return;
    }
    if (fm_pagemap_lookup(p) == 0 && report_freed_large(FASTMM_EVENT_DOUBLE_FREE, p, "free"))
        return;
    if (fm_debug_report_damaged_header("free", p))
        return;
    fm_event_invalid_pointer("free", p, plain_ref.why);
}

/* ---- realloc ---- */

static void *realloc_debug_block(void *p, fm_block_ref_t outer, size_t size)
{
    debug_header_t *h = header_of(p);
    uint32_t traces_xor;
    if (!verify_live(h, "realloc", &traces_xor)) {
        errno = EINVAL;
        return NULL;
    }
    size_t capacity = fm_block_usable(h, outer);
    size_t foot = footer_size(h->stack_depth);
    if (capacity - HEADER_SIZE - foot >= size) {
        /* in place: move the footer to the new end (FastMM5 keeps grown bytes unfilled) */
        fm_flags_set(h, fm_flags_get(h) & ~FM_FLAG_DEBUG_INFO);
        __atomic_thread_fence(__ATOMIC_RELEASE);
        unsigned char *new_footer = (unsigned char *)(h + 1) + size;
        fm_track_internal(new_footer, foot); /* may be slack memcheck was told is inaccessible */
        memmove(new_footer, footer_of(h), foot);
        fm_track_resize(p, size, size);
        fm_track_internal(new_footer, foot);
        h->user_size = size;
        h->header_checksum = header_checksum(h);
        set_debug_info(h);
        return p;
    }
    if (size > (size_t)PTRDIFF_MAX - overhead(h->stack_depth)) {
        errno = ENOMEM;
        return NULL;
    }
    char *outer_new = fm_alloc(size + overhead(h->stack_depth));
    if (outer_new == NULL)
        return NULL;
    fm_track_internal(outer_new, size + overhead(h->stack_depth));
    /* the new block keeps the allocation number, trace, thread and time */
    debug_header_t *n = (debug_header_t *)outer_new;
    memcpy((char *)n + offsetof(debug_header_t, header_checksum), (char *)h + offsetof(debug_header_t, header_checksum),
           HEADER_SIZE - offsetof(debug_header_t, header_checksum));
    n->user_size = size;
    fm_track_alloc(n + 1, size, size, false); /* before the copy, so memcheck copies definedness */
    memcpy(n + 1, h + 1, h->user_size < size ? h->user_size : size);
    memcpy(footer_of(n), footer_of(h), foot);
    set_checksums(n);
    fm_flags_set(n, fm_flags_get(n) | FM_FLAG_DEBUG_INFO);
    free_debug_block(p, outer, "realloc");
    return n + 1;
}

/* realloc() of anything that classified as no plain block. */
void *fm_debug_realloc_or_report(void *p, fm_block_ref_t plain_ref, size_t size)
{
    if (debug_options & FASTMM_DEBUG_SCAN_EVERY_OPERATION && fm_load_relaxed(&fm_debug_on))
        fastmm_debug_scan();
    fm_block_ref_t outer;
    if (fm_debug_classify(p, &outer)) {
        debug_header_t *h = header_of(p);
        if (h->flags == FLAGS_FREED && header_ok(h)) {
            raise_block_event(FASTMM_EVENT_REALLOC_OF_FREED_BLOCK, h, "realloc");
            errno = EINVAL;
            return NULL;
        }
        if (size == 0) {
            free_debug_block(p, outer, "realloc");
            return NULL;
        }
        return realloc_debug_block(p, outer, size);
    }
    if (looks_like_freed_debug_block(p))
        raise_block_event(FASTMM_EVENT_REALLOC_OF_FREED_BLOCK, header_of(p), "realloc");
    else if (!(fm_pagemap_lookup(p) == 0 && report_freed_large(FASTMM_EVENT_REALLOC_OF_FREED_BLOCK, p, "realloc")) &&
             !fm_debug_report_damaged_header("realloc", p))
        fm_event_invalid_pointer("realloc", p, plain_ref.why);
    errno = EINVAL;
    return NULL;
}

/* realloc() of a normal block while debug mode is on: it becomes a debug block. */
void *fm_debug_realloc_plain(void *p, fm_block_ref_t ref, size_t size)
{
    void *n = fm_debug_alloc(size, -1);
    if (n == NULL)
        return NULL;
    size_t usable = fm_block_usable(p, ref);
    size_t old = fm_track_usable(p, usable);
    memcpy(n, p, old < size ? old : size);
    fm_track_free(p, usable, ref.kind == FM_BLOCK_MEDIUM, false);
    fm_free_classified(p, ref);
    return n;
}

size_t fm_debug_usable_or_report(const void *p, fm_block_ref_t plain_ref)
{
    fm_block_ref_t outer;
    if (fm_debug_classify(p, &outer) && header_of(p)->flags == FLAGS_IN_USE)
        return header_of(p)->user_size;
    if (!fm_debug_report_damaged_header("malloc_usable_size", p))
        fm_event_invalid_pointer("malloc_usable_size", p, plain_ref.why);
    return 0;
}

/* ---- scan ---- */

/* What the scan's reports say found the damage: the program's call, or the check at exit. */
static const char *scan_operation = "fastmm_debug_scan";

/* Checks one outer block that carries DEBUG_INFO; retried while another thread may be
 * rewriting it (it clears DEBUG_INFO meanwhile). Returns true if it is corrupt (reported).
 *
 * A freed small block can be taken for reuse by another thread between the walk's look at its
 * flags and this check: the thread removes it from its span under the lock, then vets it and
 * rewrites it after the lock is released (small.c, fm_small_alloc). So a freed-block verdict only
 * counts if the block was the same freed block before and after its contents were read: the
 * outer flags and the allocation number (a reuse always takes a new one) are read on both sides
 * of the check, with fences that pair with the writers' (clear DEBUG_INFO, release fence, then
 * rewrite). Otherwise the check is retried and sees whatever the block has become; whether it
 * is checked as a freed or a live block is decided each time by its current FREE flag (every
 * freed block carries it: fm_block_mark_free, and medium.c for binned blocks). */
bool fm_debug_scan_block(const void *outer)
{
    const debug_header_t *h = outer;
    int problem = -1;
    for (int attempt = 0; attempt < SCAN_RETRIES; attempt++) {
        uint16_t flags_before = fm_load_acquire(fm_flags_of(h));
        if (!(flags_before & FM_FLAG_DEBUG_INFO))
            return false;
        /* optimistic reads, validated below (sync.h); memcheck may hold a block freed meanwhile
         * inaccessible, which is no program error */
        fm_track_quiet(true);
        uint32_t number_before = fm_load_relaxed(&h->allocation_number);
        fm_tsan_ignore_reads_begin();
        if ((flags_before & FM_FLAG_FREE) || h->flags == FLAGS_FREED) /* freed, or waiting in the quarantine */
            problem = freed_block_problem(h, false);
        else if (!header_ok(h))
            problem = FASTMM_EVENT_HEADER_CORRUPTION;
        else if (h->flags == FLAGS_IN_USE && !footer_ok(h))
            problem = FASTMM_EVENT_FOOTER_CORRUPTION;
        else
            problem = -1;
        fm_tsan_ignore_reads_end();
        bool unchanged = false;
        if (problem >= 0) {
            __atomic_thread_fence(__ATOMIC_ACQUIRE);
            unchanged = fm_flags_get(h) == flags_before && fm_load_relaxed(&h->allocation_number) == number_before;
        }
        fm_track_quiet(false);
        if (problem < 0)
            return false;
        if (unchanged && problem == FASTMM_EVENT_MODIFIED_AFTER_FREE)
            break; /* nobody rewrites a block while it stays freed: no retry (FastMM5 4.8) */
        fm_os_yield();
    }
    raise_block_event((fastmm_event_type_t)problem, h, scan_operation);
    return true;
}

/* ---- public API (fastmm5.h section 2) ---- */

FM_EVERY_PROCESS void fm_debug_init(void)
{
    /* The fast-path flags also depend on fm_track_on (memcheck: malloc's and free's frameless
     * paths make no memcheck calls), known by now: apply_options_locked is their one writer.
     * Where all of them stay false (no debug mode yet, no memcheck), nothing is written: this
     * file's .bss pages then cost no memory in a program that never uses debug mode. */
    if (fm_load_relaxed(&debug_counter) == 0 && fm_load_relaxed(&erase_allocated_counter) == 0 &&
        fm_load_relaxed(&erase_freed_counter) == 0 && !fm_track_on)
        return;
    fm_lock_wait(&mode_lock);
    apply_options_locked();
    fm_lock_release(&mode_lock);
}

void fm_debug_refresh_fast_paths(void)
{
    fm_lock_wait(&mode_lock);
    apply_options_locked();
    fm_lock_release(&mode_lock);
}

FM_EXPORT bool fastmm_debug_enter(void)
{
    fm_hooks.start();
    fm_lock_wait(&mode_lock);
    debug_counter++;
    fm_store_relaxed(&fm_debug_used, true);
    apply_options_locked();
    fm_lock_release(&mode_lock);
    return true;
}

FM_EXPORT bool fastmm_debug_exit(void)
{
    fm_lock_wait(&mode_lock);
    bool ok = debug_counter > 0;
    if (ok)
        debug_counter--;
    apply_options_locked();
    fm_lock_release(&mode_lock);
    return ok;
}

FM_EXPORT bool fastmm_debug_active(void) { return fm_load_acquire(&fm_debug_on); }
FM_EXPORT unsigned fastmm_debug_options(void) { return fm_load_relaxed(&debug_options); }

FM_EXPORT void fastmm_debug_set_options(unsigned options)
{
    fm_lock_wait(&mode_lock);
    debug_options = options & (FASTMM_DEBUG_NEVER_FREE_SMALL_SPANS | FASTMM_DEBUG_NEVER_MERGE_FREE_MEDIUM_BLOCKS |
                               FASTMM_DEBUG_SCAN_EVERY_OPERATION);
    apply_options_locked();
    fm_lock_release(&mode_lock);
}

FM_EXPORT unsigned fastmm_debug_stack_depth(void) { return fm_load_relaxed(&fm_stack_depth); }
FM_EXPORT void fastmm_debug_set_stack_depth(unsigned depth)
{
    fm_store_relaxed(&fm_stack_depth, depth > MAX_DEPTH ? MAX_DEPTH : depth);
}
FM_EXPORT void fastmm_debug_set_allocation_group(uint32_t group) { fm_store_relaxed(&allocation_group, group); }
FM_EXPORT uint32_t fastmm_debug_allocation_group(void) { return fm_load_relaxed(&allocation_group); }
FM_EXPORT void fastmm_debug_break_on_allocation(uint32_t number) { fm_store_relaxed(&break_number, number); }

/* For leaks.c: what a debug block records. */
bool fm_debug_block_info(const void *outer, size_t *user_size, uint32_t *number, uint32_t *trace_id_out,
                         const uintptr_t **trace, unsigned *depth)
{
    const debug_header_t *h = outer;
    if (!(fm_flags_get(outer) & FM_FLAG_DEBUG_INFO) || !header_ok(h) || h->flags != FLAGS_IN_USE)
        return false;
    *user_size = h->user_size;
    *number = h->allocation_number;
    if (trace_id_out != NULL)
        *trace_id_out = trace_id(h, false);
    if (trace != NULL)
        *trace = frames_of(h, false);
    *depth = h->stack_depth;
    return true;
}

void fm_debug_report_leak_block(fm_report_t *r, const void *outer) { report_block(r, outer, true); }

FM_EXPORT size_t fastmm_debug_scan(void)
{
    fm_hooks.start();
    return fm_medium_visit_debug_blocks(fm_debug_scan_block) + fm_large_visit_debug_blocks(fm_debug_scan_block);
}

/* At exit, in a process that made debug blocks (init.c): every one still held, live or freed,
 * is checked as fastmm_debug_scan checks it, so that an overrun of a block that is never freed,
 * or a write into a freed block that is never reused, is still reported. */
bool fm_debug_used;

size_t fm_debug_check_at_exit(void)
{
    scan_operation = "the check at exit";
    return fastmm_debug_scan();
}

/* ---- for walk.c (appended): everything a debug block records ---- */

/* False unless `outer` carries DEBUG_INFO and an intact header. The traces point into the
 * trace table (or at zeros); free_trace is NULL for a block in use. */
bool fm_debug_block_details(const void *outer, fm_debug_details_t *out)
{
    const debug_header_t *h = outer;
    if (!(fm_flags_get(outer) & FM_FLAG_DEBUG_INFO))
        return false;
    /* A snapshot of a block its owner may rewrite or free meanwhile (sync.h): memcheck may by
     * then hold the freed block inaccessible, which is no program error. */
    fm_tsan_ignore_reads_begin();
    fm_track_quiet(true);
    /* The trace ids lie past the user bytes: read them only through a size the checksum
     * vouched for, read once, or a walk racing the owner would read outside the block. */
    size_t user_size = h->user_size;
    bool ok = header_ok(h) && h->user_size == user_size;
    bool freed = h->flags == FLAGS_FREED;
    out->user_size = user_size;
    out->allocation_number = h->allocation_number;
    out->allocation_group = h->allocation_group;
    out->allocated_by_thread = h->allocated_by_thread;
    out->freed_by_thread = freed ? h->freed_by_thread : 0;
    out->allocation_trace = ok ? frames_at(h, user_size, false) : no_frames;
    out->free_trace = freed ? (ok ? frames_at(h, user_size, true) : no_frames) : NULL;
    out->depth = h->stack_depth;
    out->freed = freed;
    fm_track_quiet(false);
    fm_tsan_ignore_reads_end();
    return ok;
}

/* ---- erase modes (FastMM5's Begin/EndErase*BlockContent): nested counters, changed on every
 * call whatever the result, like the debug-mode counter ---- */

static bool change_counter(int *counter, int delta)
{
    fm_hooks.start();
    fm_lock_wait(&mode_lock);
    bool ok = delta > 0 || *counter > 0;
    if (ok)
        *counter += delta;
    apply_options_locked();
    fm_lock_release(&mode_lock);
    return ok;
}

FM_EXPORT bool fastmm_erase_allocated_begin(void) { return change_counter(&erase_allocated_counter, 1); }
FM_EXPORT bool fastmm_erase_allocated_end(void) { return change_counter(&erase_allocated_counter, -1); }
FM_EXPORT bool fastmm_erase_allocated_active(void) { return fm_load_acquire(&fm_erase_allocated); }
FM_EXPORT bool fastmm_erase_freed_begin(void) { return change_counter(&erase_freed_counter, 1); }
FM_EXPORT bool fastmm_erase_freed_end(void) { return change_counter(&erase_freed_counter, -1); }
FM_EXPORT bool fastmm_erase_freed_active(void) { return fm_load_acquire(&fm_erase_freed); }
