/*
 * fuzz-heap.c - the fuzz target of libfastmm5 (hostile input).
 *
 * LLVMFuzzerTestOneInput() reads its input as a program over a table of 64 slots and runs it
 * against the fastmm_* entry points (so it exercises libfastmm5 whichever malloc the process has):
 * malloc, calloc, realloc (grow, shrink, to 0, from NULL), reallocarray, memalign /
 * posix_memalign / aligned_alloc with alignments 8 .. 1 MiB, free; sizes for all three block
 * managers, and sizes or alignments that cannot be served. Mixed in are hostile calls: free,
 * realloc, reallocarray and fastmm_usable_size of interior pointers, unaligned, stack, static,
 * code and mmap()ed addresses, blocks freed a moment ago (double free), pointers to blocks freed
 * long ago and wild pointers near the heap's blocks.
 *
 * What it checks, and abort()s on (with a message saying what broke, so the fuzzer records a
 * crash and fuzz-replay a failure):
 *  - every live block holds the pattern it was filled with (slot, generation) over its whole
 *    requested size (blocks above 128 KiB: first and last 64 KiB, 64 bytes of every 64 KiB between),
 *    checked before every realloc and free, after a realloc over the kept prefix, after every
 *    hostile call on the block it points into, and when the input ends;
 *  - fastmm_usable_size(p) >= the requested size (== for debug blocks), alignment, calloc zeroes,
 *    a new malloc block in debug mode or erase-allocated mode holds 0x90;
 *  - a request that cannot be served gives NULL (posix_memalign: its code) with errno ENOMEM, or
 *    EINVAL for a bad alignment (posix_memalign: returned, errno untouched), leaves *out and the block being resized untouched, raises no
 *    event and changes no other block;
 *  - each hostile call raises exactly one event, carrying the pointer, of the type the library
 *    documents for it (the table at hostile()), free keeps errno, realloc returns NULL with
 *    EINVAL, usable_size returns 0; nothing else raises an event; the memory a foreign pointer
 *    points into is not written; in debug mode fastmm_debug_scan() finds nothing afterwards.
 *
 * The error action is "continue" and an event handler records the events while an input runs;
 * at its end every block is freed and the library's modes, handler and action are put back, so
 * that no state but the heap's free memory passes from one input to the next.
 *
 * Input format (operands past the end of the input read as zero):
 *   byte 0       mode: bit 0 start in debug mode; bits 1-2 erase mode (0 and 1 none, 2 erase
 *                freed blocks, 3 erase allocated blocks: OP_MODE switches them too); bit 3 debug
 *                options 0 (spans freed, blocks merged); bits 4 and 5 together: scan on every
 *                debug operation (slow); bits 6-7 stack depth (20, 0, 2, 64)
 *   then ops     one byte, op = byte % 32 through op_table[], then the op's operands (see run_op)
 * tests/fuzz/make-seeds.py writes the seed corpus (tests/fuzz/corpus/) in this format.
 *
 * FUZZ_HEAP_VERBOSE=1 lets the library's reports of the hostile calls through to standard
 * error (they are sent to /dev/null while each call runs otherwise).
 */
#define _GNU_SOURCE 1
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <fastmm5.h>

#if defined(__clang__) && defined(__has_attribute)
#if __has_attribute(no_sanitize)
/* The byte loops carry no information for the fuzzer; without coverage they run at memory speed. */
#define NO_COVERAGE __attribute__((no_sanitize("coverage"), noinline))
#endif
#endif
#ifndef NO_COVERAGE
#define NO_COVERAGE __attribute__((noinline))
#endif

/* Under Memcheck (fuzz-replay run by valgrind), a new block's 0x90 fill counts as uninitialised
 * memory, as malloc's contents do: the check of that fill says it means to read it. */
#if defined(__has_include)
#if __has_include(<valgrind/memcheck.h>)
#include <valgrind/memcheck.h>
#define MAKE_DEFINED(p, n) ((void)VALGRIND_MAKE_MEM_DEFINED((p), (n)))
#endif
#endif
#ifndef MAKE_DEFINED
#define MAKE_DEFINED(p, n) ((void)(p), (void)(n))
#endif

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* FastMM5's 64-bit geometry (README.md): the largest small and medium requests. */
#define SMALL_MAX ((size_t)2622)
#define MEDIUM_MAX ((size_t)558904)
#define SLOTS 64
#define GRAVE 16                    /* recently freed pointers kept for stale-pointer calls */
#define LIVE_BUDGET ((size_t)32 << 20) /* live bytes at most; bigger requests are cut down */
#define DEBUG_LARGE_RING 64         /* freed large debug blocks remembered (the library keeps 32) */
#define ERRNO_MARK 4242

/* ---------------------------------------------------------------------------------------------- */
/* State                                                                                           */
/* ---------------------------------------------------------------------------------------------- */

typedef struct slot {
    unsigned char *p;   /* NULL: empty */
    size_t size;        /* the size last requested */
    size_t filled;      /* [0, filled) holds the pattern: the requested size when it was written
                         * (never more: a write past the request is undefined behaviour) */
    uint64_t key;       /* pattern key, or the 16-bit word of a forged fill */
    bool forged;        /* filled with one repeated 16-bit word (headers forged on purpose) */
    bool debug;         /* a debug block: usable size == requested size */
} slot_t;

static slot_t slots[SLOTS];
static void *graves[GRAVE]; /* pointers freed lately, for the stale-pointer calls */
static unsigned grave_next;
static void *debug_large_ring[DEBUG_LARGE_RING]; /* user pointers of freed large debug blocks */
static unsigned debug_large_next;
static size_t live_bytes;
static uint64_t generation;
static int debug_depth, erase_freed_depth, erase_allocated_depth;
static bool debug_used; /* debug blocks may exist: scan after hostile calls */

/* Events, recorded by the handler (it runs inside the allocator: no allocation, no libc stdio). */
static struct {
    unsigned count;
    fastmm_event_type_t type;
    const void *block;
    char text[1536];
} ev;

/* Totals for the summary at exit. */
static struct {
    unsigned long long inputs, ops, hostile, failed_requests, events;
} totals;

static int saved_stderr = -1, dev_null = -1;
static bool verbose;
static size_t page_size;
static unsigned char *foreign_map; /* two pages of our own, never the heap's */
static unsigned char static_area[512] __attribute__((aligned(64)));
static const char current_op_none[] = "(none)";
static const char *current_op = current_op_none;

/* ---------------------------------------------------------------------------------------------- */
/* Failure                                                                                         */
/* ---------------------------------------------------------------------------------------------- */

static void loud(void)
{
    if (!verbose && saved_stderr >= 0)
        dup2(saved_stderr, 2);
}

static void quiet(void)
{
    if (!verbose && dev_null >= 0)
        dup2(dev_null, 2);
}

/* Says what broke (and the last event's report), then aborts: the fuzzer records a crash. */
__attribute__((noreturn, format(printf, 1, 2))) static void fail(const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    loud();
    char head[256];
    snprintf(head, sizeof head, "\nfuzz-heap: FAILURE in op %s (input %llu, op %llu, debug depth %d):\n  ",
             current_op, totals.inputs, totals.ops, debug_depth);
    (void)!write(2, head, strlen(head));
    (void)!write(2, msg, strlen(msg));
    if (ev.count != 0) {
        static const char last[] = "\nfuzz-heap: the last event's report:\n";
        (void)!write(2, last, sizeof last - 1);
        (void)!write(2, ev.text, strnlen(ev.text, sizeof ev.text));
    }
    (void)!write(2, "\n", 1);
    abort();
}

static const char *event_name(int t)
{
    static const char *const names[] = {
        "INVALID_POINTER", "DOUBLE_FREE", "REALLOC_OF_FREED_BLOCK", "HEADER_CORRUPTION", "FOOTER_CORRUPTION",
        "MODIFIED_AFTER_FREE", "VIRTUAL_CALL_ON_FREED_OBJECT", "LEAK_DETAIL", "LEAK_SUMMARY",
    };
    return t >= 0 && t < (int)(sizeof names / sizeof names[0]) ? names[t] : "?";
}

static void record_event(const fastmm_event_t *e, void *user)
{
    (void)user;
    ev.count++;
    ev.type = e->type;
    ev.block = e->block;
    size_t i = 0;
    if (e->text != NULL)
        for (; i + 1 < sizeof ev.text && e->text[i] != '\0'; i++)
            ev.text[i] = e->text[i];
    ev.text[i] = '\0';
}

static void expect_no_event(unsigned before, const char *what)
{
    if (ev.count != before)
        fail("%s raised %u event(s), the last %s about %p", what, ev.count - before, event_name((int)ev.type),
             ev.block);
}

/* ---------------------------------------------------------------------------------------------- */
/* Input                                                                                           */
/* ---------------------------------------------------------------------------------------------- */

typedef struct input {
    const uint8_t *d;
    size_t n, i;
} input_t;

static unsigned u8(input_t *in) { return in->i < in->n ? in->d[in->i++] : 0u; }
static unsigned u16(input_t *in) { return u8(in) | u8(in) << 8; }
static uint32_t u32(input_t *in) { return (uint32_t)u16(in) | (uint32_t)u16(in) << 16; }

/* ---------------------------------------------------------------------------------------------- */
/* Patterns: byte i of a block is byte i % 8 of word i / 8, so fills and checks go word by word.   */
/* ---------------------------------------------------------------------------------------------- */

static inline uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static inline uint64_t word_at(const slot_t *s, size_t k)
{
    if (s->forged)
        return (s->key & 0xffffu) * 0x0001000100010001ULL;
    return mix64(s->key + k * 0x9E3779B97F4A7C15ULL);
}

static inline unsigned char byte_at(const slot_t *s, size_t i) { return (unsigned char)(word_at(s, i >> 3) >> (8 * (i & 7))); }

NO_COVERAGE static void fill_range(unsigned char *b, size_t from, size_t to, const slot_t *s)
{
    size_t i = from;
    for (; i < to && (i & 7) != 0; i++)
        b[i] = byte_at(s, i);
    for (; i + 8 <= to; i += 8) {
        uint64_t w = word_at(s, i >> 3);
        memcpy(b + i, &w, 8);
    }
    for (; i < to; i++)
        b[i] = byte_at(s, i);
}

/* The first byte of [from, to) that does not hold the pattern, or SIZE_MAX. */
NO_COVERAGE static size_t check_range(const unsigned char *b, size_t from, size_t to, const slot_t *s)
{
    size_t i = from;
    for (; i < to && (i & 7) != 0; i++)
        if (b[i] != byte_at(s, i))
            return i;
    for (; i + 8 <= to; i += 8) {
        uint64_t w;
        memcpy(&w, b + i, 8);
        if (w != word_at(s, i >> 3))
            break;
    }
    for (; i < to; i++)
        if (b[i] != byte_at(s, i))
            return i;
    return SIZE_MAX;
}

/* The first byte of [0, n) that is not c, or SIZE_MAX. */
NO_COVERAGE static size_t check_bytes(const unsigned char *b, size_t n, unsigned char c)
{
    uint64_t w8 = c * 0x0101010101010101ULL;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, b + i, 8);
        if (w != w8)
            break;
    }
    for (; i < n; i++)
        if (b[i] != c)
            return i;
    return SIZE_MAX;
}

/* Blocks up to 128 KiB hold the pattern in every requested byte. Bigger ones hold it in their first
 * and last 64 KiB and in the first 64 bytes of every 64 KiB in between (a realloc also checks the
 * 64 bytes before the end of what it keeps): writing and reading every byte, and faulting in every
 * page, of hundreds of kilobytes at each operation would leave the fuzzer little time for
 * anything else. */
#define FULL_LIMIT ((size_t)128 << 10)
#define CHUNK ((size_t)65536)
#define SAMPLE ((size_t)64)

/* The next part [*lo, *hi) of [*pos, to) that holds the pattern in a block whose pattern spans
 * [0, extent); false when none is left. */
static bool next_part(size_t extent, size_t to, size_t *pos, size_t *lo, size_t *hi)
{
    while (*pos < to) {
        size_t c = extent <= FULL_LIMIT ? *pos : *pos / CHUNK * CHUNK;
        size_t end = extent <= FULL_LIMIT ? to : c + CHUNK;
        if (extent > FULL_LIMIT && c >= CHUNK && c + 2 * CHUNK <= extent)
            end = c + SAMPLE;
        *lo = c > *pos ? c : *pos;
        *hi = end < to ? end : to;
        *pos = extent <= FULL_LIMIT ? to : c + CHUNK;
        if (*lo < *hi)
            return true;
    }
    return false;
}

static void fill_pattern(unsigned char *b, size_t extent, size_t from, size_t to, const slot_t *s)
{
    size_t pos = from, lo, hi;
    while (next_part(extent, to, &pos, &lo, &hi))
        fill_range(b, lo, hi, s);
}

static size_t check_pattern(const unsigned char *b, size_t extent, size_t from, size_t to, const slot_t *s)
{
    size_t pos = from, lo, hi;
    while (next_part(extent, to, &pos, &lo, &hi)) {
        size_t bad = check_range(b, lo, hi, s);
        if (bad != SIZE_MAX)
            return bad;
    }
    return SIZE_MAX;
}

/* check_bytes over the parts of [0, n) that a pattern of extent n would cover. */
static size_t check_fill(const unsigned char *b, size_t n, unsigned char c)
{
    size_t pos = 0, lo, hi;
    while (next_part(n, n, &pos, &lo, &hi)) {
        size_t bad = check_bytes(b + lo, hi - lo, c);
        if (bad != SIZE_MAX)
            return lo + bad;
    }
    return SIZE_MAX;
}

/* ---------------------------------------------------------------------------------------------- */
/* Slots                                                                                           */
/* ---------------------------------------------------------------------------------------------- */

static void verify_slot(unsigned i, const char *when)
{
    slot_t *s = &slots[i];
    if (s->p == NULL)
        return;
    unsigned before = ev.count;
    size_t u = fastmm_usable_size(s->p);
    expect_no_event(before, "fastmm_usable_size of a live block");
    if (u < s->size)
        fail("%s: slot %u (%p, %zu bytes requested): fastmm_usable_size %zu is smaller", when, i, (void *)s->p,
             s->size, u);
    if (s->debug && u != s->size)
        fail("%s: slot %u is a debug block of %zu bytes: fastmm_usable_size %zu", when, i, s->size, u);
    if (u < s->filled)
        fail("%s: slot %u (%p): fastmm_usable_size shrank from %zu to %zu", when, i, (void *)s->p, s->filled, u);
    size_t bad = check_pattern(s->p, s->filled, 0, s->filled, s);
    if (bad != SIZE_MAX)
        fail("%s: slot %u (%p, %zu bytes requested, %zu usable%s): byte %zu is %#x, expected %#x", when, i,
             (void *)s->p, s->size, s->filled, s->debug ? ", debug" : "", bad, s->p[bad], byte_at(s, bad));
}

static void bury(void *p)
{
    graves[grave_next++ % GRAVE] = p;
}

static bool is_live(const void *q)
{
    for (unsigned i = 0; i < SLOTS; i++)
        if (slots[i].p == q)
            return true;
    return false;
}

static bool in_debug_large_ring(const void *q)
{
    for (unsigned i = 0; i < DEBUG_LARGE_RING; i++)
        if (debug_large_ring[i] == q)
            return true;
    return false;
}

/* Forgets a block that the library has just freed (by free or by a realloc that moved it). */
static void note_freed(slot_t *s)
{
    bury(s->p);
    if (s->debug && s->size > MEDIUM_MAX - 4096) /* possibly a large debug block: a double free names it */
        debug_large_ring[debug_large_next++ % DEBUG_LARGE_RING] = s->p;
}

/* Frees a live slot the legitimate way, after checking it. */
static void release(unsigned i)
{
    slot_t *s = &slots[i];
    if (s->p == NULL)
        return;
    verify_slot(i, "free");
    unsigned before = ev.count;
    errno = ERRNO_MARK;
    fastmm_free(s->p);
    if (errno != ERRNO_MARK)
        fail("fastmm_free of a live %zu-byte block changed errno to %d", s->size, errno);
    expect_no_event(before, "fastmm_free of a live block");
    note_freed(s);
    live_bytes -= s->filled;
    s->p = NULL;
}

/* Takes a new block into slot i: checks it, then fills the size it requested. */
static void adopt(unsigned i, void *p, size_t size, size_t align, bool debug, int expect_fill, const char *what)
{
    slot_t *s = &slots[i];
    if (p == NULL)
        fail("%s(%zu, alignment %zu) returned NULL (errno %d)", what, size, align, errno);
    if (is_live(p))
        fail("%s(%zu) returned %p, which is already live", what, size, p);
    if (align < 16)
        align = 16;
    if (((uintptr_t)p & (align - 1)) != 0)
        fail("%s(%zu, alignment %zu) returned %p, misaligned", what, size, align, p);
    unsigned before = ev.count;
    size_t u = fastmm_usable_size(p);
    expect_no_event(before, "fastmm_usable_size of a new block");
    if (u < size || (debug && u != size))
        fail("%s(%zu): fastmm_usable_size %zu (%s block)", what, size, u, debug ? "debug" : "normal");
    if (expect_fill >= 0) {
        MAKE_DEFINED(p, size);
        size_t bad = check_fill(p, size, (unsigned char)expect_fill);
        if (bad != SIZE_MAX)
            fail("%s(%zu): byte %zu of the new block is %#x, expected %#x", what, size, bad, ((unsigned char *)p)[bad],
                 expect_fill);
    }
    generation++;
    *s = (slot_t){p, size, size, mix64(generation * 0x9E3779B97F4A7C15ULL + i), false, debug};
    fill_pattern(s->p, size, 0, size, s);
    live_bytes += size;
}

/* A size for the op: mostly small, then medium, large and the managers' edges (block sizes of a
 * few hundred kilobytes and more are 6 in 32: their fills cost the most time). */
static size_t pick_size(input_t *in)
{
    unsigned sel = u8(in) & 31u;
    size_t v = u16(in);
    size_t n;
    if (sel < 12) {
        n = v % 321;                                        /* the busiest classes */
    } else if (sel < 17) {
        n = v % (SMALL_MAX + 1);
    } else if (sel == 17) {
        n = SMALL_MAX - 16 + v % 33;                        /* small / medium edge */
    } else if (sel < 23) {
        n = SMALL_MAX + 1 + v % 20000;
    } else if (sel < 25) {
        n = SMALL_MAX + 1 + (v * 9) % (MEDIUM_MAX - SMALL_MAX);
    } else if (sel == 25) {
        static const size_t edges[] = {720, 2872, 101176, 297784, MEDIUM_MAX};
        n = edges[v % 5] - 32 + (v >> 3) % 65;              /* medium bin groups, in-place limits */
    } else if (sel == 26) {
        n = MEDIUM_MAX - 64 + v % 129;                      /* medium / large edge */
    } else if (sel < 29) {
        n = SMALL_MAX + 1 + v % 100000;
    } else if (sel < 31) {
        n = MEDIUM_MAX + 1 + v * 8;                         /* large, up to 1 MiB */
    } else if ((v & 0x70) == 0) {
        n = ((size_t)1 + v % 4) << 20 | (v & 0xfff);        /* now and then up to 4 MiB */
    } else {
        n = MEDIUM_MAX + 1 + (v & 0xff80);
    }
    if (live_bytes + n > LIVE_BUDGET)
        n %= 4096;
    return n;
}

/* ---------------------------------------------------------------------------------------------- */
/* Hostile calls                                                                                   */
/* ---------------------------------------------------------------------------------------------- */

enum call { CALL_FREE, CALL_REALLOC, CALL_REALLOCARRAY, CALL_USABLE, CALL_COUNT };
static const char *const call_names[] = {"fastmm_free", "fastmm_realloc", "fastmm_reallocarray", "fastmm_usable_size"};

/* What the library documents for each kind of pointer (lib/api.c, lib/debug.c):
 *   KIND_INVALID     not a block start (interior, unaligned, stack, static, code, foreign mmap), or
 *                    a normal block freed a moment ago: INVALID_POINTER from every call (where
 *                    the memory is gone and a large debug block lived there before, the library
 *                    may name that one's double free instead).
 *   KIND_FREED_DEBUG a debug block freed a moment ago: free gives DOUBLE_FREE, realloc
 *                    REALLOC_OF_FREED_BLOCK, usable_size INVALID_POINTER; when its memory has
 *                    gone back to the OS (a small or medium block whose span was released, with
 *                    debug options 0), INVALID_POINTER instead.
 *   KIND_FREED_DEBUG_LARGE  the same for a large debug block: its memory is gone at once, and the
 *                    library remembers the last 32 of them to name the double free.
 *   KIND_STALE       a pointer to memory of the heap that may have been freed, merged, reused by
 *                    other blocks or given back since (stale and wild pointers): INVALID_POINTER,
 *                    or where a freed debug block sits there, DOUBLE_FREE / REALLOC_OF_FREED_BLOCK.
 * Besides: free keeps errno, the reallocs return NULL with errno EINVAL, usable_size returns 0. */
enum kind { KIND_INVALID, KIND_FREED_DEBUG, KIND_FREED_DEBUG_LARGE, KIND_STALE };

static bool mapped(const void *p)
{
    unsigned char v;
    return mincore((void *)((uintptr_t)p & ~(uintptr_t)(page_size - 1)), 1, &v) == 0;
}

static unsigned allowed_events(enum kind kind, enum call call, const void *q)
{
    const unsigned invalid = 1u << FASTMM_EVENT_INVALID_POINTER;
    const unsigned freed = call == CALL_FREE ? 1u << FASTMM_EVENT_DOUBLE_FREE
                         : call == CALL_USABLE ? invalid
                                               : 1u << FASTMM_EVENT_REALLOC_OF_FREED_BLOCK;
    switch (kind) {
    case KIND_INVALID:
        /* A normal large block freed where a large debug block lived: the library's ring of freed
         * large debug blocks names it a double free (of that block). This model's ring counts
         * more blocks than the library's (every debug block that might be large), so it forgets
         * sooner: once the memory is unmapped, the library may still remember. */
        return in_debug_large_ring(q) || !mapped(q) ? invalid | freed : invalid;
    case KIND_FREED_DEBUG:
        if (!mapped((const char *)q - 64) || !mapped(q))
            return invalid | freed;
        return freed;
    case KIND_FREED_DEBUG_LARGE:
        return freed;
    default:
        return invalid | freed;
    }
}

static void hostile(void *q, enum kind kind, enum call call, size_t rsize, const char *what)
{
    unsigned want = allowed_events(kind, call, q);
    unsigned before = ev.count;
    totals.hostile++;
    void *r = NULL;
    size_t u = 0;
    int err;
    quiet();
    switch (call) {
    case CALL_FREE:
        errno = ERRNO_MARK;
        fastmm_free(q);
        break;
    case CALL_REALLOC:
        errno = 0;
        r = fastmm_realloc(q, rsize);
        break;
    case CALL_REALLOCARRAY:
        errno = 0;
        r = fastmm_reallocarray(q, 2, rsize / 2);
        break;
    default:
        u = fastmm_usable_size(q);
        break;
    }
    err = errno;
    loud();
    if (ev.count != before + 1)
        fail("%s(%s %p): %u events, expected exactly one (%s)", call_names[call], what, q, ev.count - before,
             ev.count > before ? event_name((int)ev.type) : "none");
    if (!(want >> ev.type & 1u))
        fail("%s(%s %p): event %s", call_names[call], what, q, event_name((int)ev.type));
    if (ev.block != q)
        fail("%s(%s %p): the event names %p", call_names[call], what, q, ev.block);
    switch (call) {
    case CALL_FREE:
        if (err != ERRNO_MARK)
            fail("fastmm_free(%s %p) changed errno to %d", what, q, err);
        break;
    case CALL_REALLOC:
    case CALL_REALLOCARRAY:
        if (r != NULL)
            fail("%s(%s %p, %zu) returned %p instead of NULL", call_names[call], what, q, rsize, r);
        if (err != EINVAL)
            fail("%s(%s %p, %zu): errno %d, expected EINVAL", call_names[call], what, q, rsize, err);
        break;
    default:
        if (u != 0)
            fail("fastmm_usable_size(%s %p) = %zu, expected 0", what, q, u);
        break;
    }
}

/* 1..3 hostile calls, chosen by the input: read first, whether they run or not, so that the
 * input decodes the same way whatever state the heap is in. */
typedef struct calls {
    unsigned n;
    enum call call[3];
    size_t rsize[3];
} calls_t;

static calls_t read_calls(input_t *in)
{
    calls_t c;
    unsigned sel = u8(in);
    c.n = 1 + sel % 3;
    for (unsigned k = 0; k < c.n; k++) {
        c.call[k] = (enum call)(((sel >> 2) + k) % CALL_COUNT);
        c.rsize[k] = (size_t)u16(in) << (sel >> 6);
    }
    return c;
}

static void hostile_calls(const calls_t *c, void *q, enum kind kind, const char *what)
{
    for (unsigned k = 0; k < c->n; k++)
        hostile(q, kind, c->call[k], c->rsize[k], what);
}

/* In debug mode, every debug block of the heap (live and freed) must still be intact. */
static void scan_clean(const char *when)
{
    if (!debug_used)
        return;
    unsigned before = ev.count;
    quiet();
    size_t bad = fastmm_debug_scan();
    loud();
    if (bad != 0 || ev.count != before)
        fail("%s: fastmm_debug_scan() = %zu with %u event(s) (the last %s about %p)", when, bad, ev.count - before,
             event_name((int)ev.type), ev.block);
}

/* ---------------------------------------------------------------------------------------------- */
/* Operations                                                                                      */
/* ---------------------------------------------------------------------------------------------- */

enum op {
    OP_MALLOC, OP_CALLOC, OP_REALLOC, OP_REALLOC_ZERO, OP_ALIGNED, OP_REALLOCARRAY, OP_FREE, OP_HUGE, OP_BAD_ALIGN,
    OP_INTERIOR, OP_FOREIGN, OP_DOUBLE_FREE, OP_STALE, OP_WILD, OP_MODE, OP_CHECK, OP_FORGE, OP_NULL, OP_COUNT
};
static const char *const op_names[] = {
    "malloc", "calloc", "realloc", "realloc-to-0", "aligned", "reallocarray", "free", "huge", "bad-alignment",
    "interior", "foreign", "double-free", "stale", "wild", "mode", "check", "forge", "null",
};
/* byte % 32 -> op: the allocation calls weigh most. */
static const uint8_t op_table[32] = {
    OP_MALLOC, OP_MALLOC, OP_MALLOC, OP_MALLOC, OP_CALLOC, OP_CALLOC, OP_REALLOC, OP_REALLOC,
    OP_REALLOC, OP_REALLOC, OP_REALLOC_ZERO, OP_ALIGNED, OP_ALIGNED, OP_ALIGNED, OP_REALLOCARRAY, OP_FREE,
    OP_FREE, OP_FREE, OP_FREE, OP_HUGE, OP_BAD_ALIGN, OP_INTERIOR, OP_INTERIOR, OP_FOREIGN,
    OP_DOUBLE_FREE, OP_DOUBLE_FREE, OP_STALE, OP_WILD, OP_MODE, OP_CHECK, OP_FORGE, OP_NULL,
};

static bool debug_on(void) { return debug_depth > 0; }

/* Resizes slot i (live or empty) to n with realloc or reallocarray(count, n / count). */
static void do_realloc(unsigned i, size_t n, unsigned count, const char *what)
{
    slot_t *s = &slots[i];
    if (s->p == NULL) {
        unsigned before = ev.count;
        void *p = count ? fastmm_reallocarray(NULL, count, n / count) : fastmm_realloc(NULL, n);
        expect_no_event(before, what);
        if (count)
            n = n / count * count;
        adopt(i, p, n, 16, debug_on(), debug_on() ? 0x90 : -1, what);
        if (debug_on())
            debug_used = true;
        return;
    }
    verify_slot(i, what);
    if (live_bytes - s->filled + n > LIVE_BUDGET)
        n %= 4096;
    if (count)
        n = n / count * count;
    if (n == 0)
        n = count ? count : 1; /* realloc(p, 0) is OP_REALLOC_ZERO's */
    bool debug = s->debug || debug_on();
    size_t keep = s->filled < n ? s->filled : n;
    size_t tail = keep > SAMPLE ? keep - SAMPLE : 0;
    fill_range(s->p, tail, keep, s); /* the end of what must be kept holds the pattern too */
    unsigned before = ev.count;
    errno = 0;
    unsigned char *q = count ? fastmm_reallocarray(s->p, count, n / count) : fastmm_realloc(s->p, n);
    expect_no_event(before, what);
    if (q == NULL)
        fail("%s(%p, %zu) of a live %zu-byte block returned NULL (errno %d)", what, (void *)s->p, n, s->size, errno);
    if (q != s->p) {
        if (is_live(q))
            fail("%s returned %p, which is already live", what, (void *)q);
        note_freed(s);
    }
    size_t bad = check_pattern(q, s->filled, 0, keep, s);
    if (bad == SIZE_MAX)
        bad = check_range(q, tail, keep, s);
    if (bad != SIZE_MAX)
        fail("%s(%p -> %p, %zu -> %zu bytes): byte %zu of the kept %zu is %#x, expected %#x", what, (void *)s->p,
             (void *)q, s->size, n, bad, keep, q[bad], byte_at(s, bad));
    if (((uintptr_t)q & 15u) != 0)
        fail("%s returned %p, not 16-byte aligned", what, (void *)q);
    size_t u = fastmm_usable_size(q);
    expect_no_event(before, "fastmm_usable_size after realloc");
    if (u < n || (debug && u != n))
        fail("%s(%zu): fastmm_usable_size %zu (%s block)", what, n, u, debug ? "debug" : "normal");
    live_bytes = live_bytes - s->filled + n;
    s->p = q;
    s->size = n;
    s->filled = n;
    s->debug = debug;
    fill_pattern(q, n, 0, n, s); /* all of it: the parts that hold the pattern depend on the size */
    if (debug)
        debug_used = true;
}

static const size_t huge_sizes[] = {
    SIZE_MAX, SIZE_MAX - 1, SIZE_MAX - 15, SIZE_MAX - 4096, SIZE_MAX - 65536, (size_t)PTRDIFF_MAX + 1,
    (size_t)PTRDIFF_MAX, (size_t)PTRDIFF_MAX - 64, (size_t)PTRDIFF_MAX - 69632, (size_t)1 << 62, (size_t)1 << 56,
};
#define N_HUGE (sizeof huge_sizes / sizeof huge_sizes[0])

/* A request that cannot be served: NULL with ENOMEM (posix_memalign: ENOMEM returned and in
 * errno, *out untouched), no event, the block being resized and the heap's totals unchanged. */
static void op_huge(input_t *in)
{
    unsigned sel = u8(in) % 10;
    size_t h = huge_sizes[u8(in) % N_HUGE];
    unsigned i = u8(in) % SLOTS;
    size_t align = (size_t)1 << (3 + u8(in) % 18);
    unsigned k = 2 + u8(in) % 15;
    fastmm_usage_t u0, u1;
    fastmm_get_usage(&u0);
    unsigned before = ev.count;
    void *const sentinel = (void *)(uintptr_t)0x5eed0;
    void *out = sentinel, *r = NULL;
    int rc = -1, want_errno = ENOMEM;
    bool posix = false;
    const char *what = "?";
    errno = 0;
    switch (sel) {
    case 0: what = "fastmm_malloc"; r = fastmm_malloc(h); break;
    case 1: what = "fastmm_calloc(1, n)"; r = fastmm_calloc(1, h); break;
    case 2: what = "fastmm_calloc(n, k)"; r = fastmm_calloc(h, k); break;
    case 3: what = "fastmm_realloc"; r = fastmm_realloc(slots[i].p, h); break;
    case 4: what = "fastmm_reallocarray(p, n, k)"; r = fastmm_reallocarray(slots[i].p, h, k); break;
    case 5: what = "fastmm_memalign"; r = fastmm_memalign(align, h); break;
    case 6: what = "fastmm_posix_memalign"; posix = true; break;
    case 7: what = "fastmm_aligned_alloc"; r = fastmm_aligned_alloc(align, h); break;
    case 8:
        /* alignments no mapping can have: 2^62 and 2^63 (ENOMEM, as glibc's memalign) */
        align = (size_t)1 << (62 + (k & 1));
        h = 64;
        switch (k % 3) {
        case 0:
            what = "fastmm_memalign(2^62 or 2^63)";
            r = fastmm_memalign(align, h);
            break;
        case 1: what = "fastmm_posix_memalign(2^62 or 2^63)"; posix = true; break;
        default: what = "fastmm_aligned_alloc(2^62 or 2^63)"; r = fastmm_aligned_alloc(align, h); break;
        }
        break;
    default: what = "fastmm_realloc(NULL)"; r = fastmm_realloc(NULL, h); break;
    }
    if (posix) {
        errno = ERRNO_MARK;
        rc = fastmm_posix_memalign(&out, align, h);
    }
    int err = errno;
    totals.failed_requests++;
    expect_no_event(before, what);
    if (r != NULL)
        fail("%s(%zu, alignment %zu) returned %p", what, h, align, r);
    if (err != want_errno)
        fail("%s(%zu, alignment %zu): errno %d, expected %d", what, h, align, err, want_errno);
    if (posix && (rc != ENOMEM || out != sentinel))
        fail("%s(%zu, alignment %zu) = %d, *out %p: expected ENOMEM, *out untouched", what, h, align, rc, out);
    verify_slot(i, what);
    fastmm_get_usage(&u1);
    if (u1.allocated_bytes != u0.allocated_bytes)
        fail("%s(%zu) failed but allocated bytes went from %zu to %zu", what, h, u0.allocated_bytes, u1.allocated_bytes);
}

/* Alignments posix_memalign (not a power of two multiple of 8) must refuse with EINVAL, leaving
 * *out and errno alone; aligned_alloc (glibc 2.36: memalign) refuses only an alignment above
 * SIZE_MAX / 2 + 1, with EINVAL, and rounds the others up (op_aligned's territory). */
static void op_bad_align(input_t *in)
{
    static const size_t bad[] = {0, 1, 2, 4, 3, 12, 24, 48, 1000, 4097, 65535, (size_t)1 << 63 | 16, SIZE_MAX};
    size_t a = bad[u8(in) % (sizeof bad / sizeof bad[0])];
    bool posix = u8(in) & 1;
    size_t n = pick_size(in);
    if (!posix && a <= SIZE_MAX / 2 + 1)
        return; /* rounded up to a power of two by aligned_alloc */
    unsigned before = ev.count;
    totals.failed_requests++;
    if (posix) {
        void *const sentinel = (void *)(uintptr_t)0x5eed0;
        void *out = sentinel;
        errno = ERRNO_MARK;
        int rc = fastmm_posix_memalign(&out, a, n);
        if (rc != EINVAL || out != sentinel || errno != ERRNO_MARK)
            fail("fastmm_posix_memalign(alignment %zu, %zu) = %d, *out %p, errno %d: expected EINVAL, untouched", a,
                 n, rc, out, errno);
    } else {
        errno = 0;
        void *r = fastmm_aligned_alloc(a, n);
        if (r != NULL || errno != EINVAL)
            fail("fastmm_aligned_alloc(alignment %zu, %zu) = %p, errno %d: expected NULL, EINVAL", a, n, r, errno);
    }
    expect_no_event(before, "a refused alignment");
}

static void op_aligned(input_t *in, unsigned i)
{
    unsigned sel = u8(in);
    size_t align = (size_t)1 << (3 + (sel >> 2) % 18); /* 8 .. 1 MiB */
    size_t n = pick_size(in);
    release(i);
    unsigned before = ev.count;
    void *p = NULL;
    const char *what;
    switch (sel & 3) {
    case 0:
        what = "fastmm_memalign";
        p = fastmm_memalign(align, n);
        break;
    case 1: {
        what = "fastmm_posix_memalign";
        int rc = fastmm_posix_memalign(&p, align, n);
        if (rc != 0)
            fail("fastmm_posix_memalign(%zu, %zu) = %d", align, n, rc);
        break;
    }
    case 2:
        what = "fastmm_aligned_alloc";
        p = fastmm_aligned_alloc(align, n);
        break;
    default:
        /* glibc's memalign rounds an alignment that is not a power of two up to the next one */
        what = "fastmm_memalign (not a power of two)";
        p = fastmm_memalign(align + 1 + (sel >> 5) % (align - 1), n);
        align <<= 1;
        break;
    }
    expect_no_event(before, what);
    /* Alignments up to 16 are plain requests (debug blocks in debug mode); above, normal blocks. */
    bool debug = debug_on() && align <= 16;
    adopt(i, p, n, align, debug, debug ? 0x90 : -1, what);
    if (debug)
        debug_used = true;
}

static void op_interior(input_t *in, unsigned i)
{
    slot_t *s = &slots[i];
    unsigned sel = u8(in);
    calls_t calls = read_calls(in);
    if (s->p == NULL)
        return;
    /* Offsets inside the block: a debug block ends with a footer of 8 bytes at least. */
    size_t bound = s->debug ? s->size + 8 : s->filled;
    static const size_t offsets[] = {1, 8, 16, 2, 32, 48, 64, 4096, 15, 65536};
    size_t off = offsets[sel % 10];
    if (sel >= 240 && bound > 16)
        off = (bound / 2) & ~(size_t)15;
    else if (sel >= 224)
        off = bound - 1;
    if (off == 0 || off >= bound)
        off = 1;
    hostile_calls(&calls, s->p + off, KIND_INVALID, "interior");
    verify_slot(i, "after an interior pointer");
    scan_clean("after an interior pointer");
}

static void op_foreign(input_t *in)
{
    unsigned char stack_area[256] __attribute__((aligned(64)));
    memset(stack_area, 0x6b, sizeof stack_area);
    unsigned sel = u8(in) % 8;
    calls_t calls = read_calls(in);
    void *q;
    const char *what;
    switch (sel) {
    case 0: q = stack_area + 64; what = "stack"; break;
    case 1: q = static_area + 64; what = "static"; break;
    case 2: q = static_area + 1; what = "unaligned static"; break;
    case 3: q = foreign_map; what = "mmap start"; break;
    case 4: q = foreign_map + 64; what = "mmap inner"; break;
    case 5: q = foreign_map + 2 * page_size - 16; what = "mmap end"; break;
    case 6: q = (void *)(uintptr_t)&op_foreign; what = "code"; break;
    default: q = (void *)(uintptr_t)0x1000; what = "low address"; break;
    }
    hostile_calls(&calls, q, KIND_INVALID, what);
    if (check_bytes(stack_area, sizeof stack_area, 0x6b) != SIZE_MAX)
        fail("a call with a stack pointer wrote into the stack area");
    if (check_bytes(static_area, sizeof static_area, 0x5a) != SIZE_MAX)
        fail("a call with a static pointer wrote into the static area");
    if (check_bytes(foreign_map, 2 * page_size, 0xa5) != SIZE_MAX)
        fail("a call with an mmap pointer wrote into the mapping");
    scan_clean("after a foreign pointer");
}

/* Frees slot i, then hands the same pointer back at once. */
static void op_double_free(input_t *in, unsigned i)
{
    slot_t *s = &slots[i];
    calls_t calls = read_calls(in);
    if (s->p == NULL)
        return;
    void *q = s->p;
    bool debug = s->debug;
    size_t size = s->size;
    release(i);
    enum kind kind = !debug ? KIND_INVALID : size > MEDIUM_MAX ? KIND_FREED_DEBUG_LARGE : KIND_FREED_DEBUG;
    hostile_calls(&calls, q, kind, debug ? "freed debug block" : "freed block");
    scan_clean("after a double free");
}

static void op_stale(input_t *in)
{
    unsigned k = u8(in);
    unsigned off_sel = u8(in) % 8;
    calls_t calls = read_calls(in);
    unsigned char *p = graves[k % GRAVE];
    if (p == NULL)
        return;
    static const int offsets[] = {0, 0, 0, 0, 1, 16, 64, -64};
    unsigned char *q = p + offsets[off_sel];
    if (is_live(q))
        return; /* reissued: a legitimate block again */
    hostile_calls(&calls, q, KIND_STALE, "stale");
    scan_clean("after a stale pointer");
}

static void op_wild(input_t *in, unsigned i)
{
    int32_t off = (int32_t)u32(in);
    unsigned sel = u8(in);
    calls_t calls = read_calls(in);
    unsigned char *base = slots[i].p != NULL ? slots[i].p : (unsigned char *)graves[i % GRAVE];
    if (base == NULL)
        return;
    uintptr_t q = (uintptr_t)base + (uintptr_t)(intptr_t)(off >> (sel % 20));
    if (sel & 0x80)
        q &= ~(uintptr_t)15;
    if (q == 0 || is_live((void *)q))
        return;
    hostile_calls(&calls, (void *)q, KIND_STALE, "wild");
    scan_clean("after a wild pointer");
}

static void op_mode(input_t *in)
{
    switch (u8(in) % 4) {
    case 0:
    case 1:
        if (debug_depth > 0 && fastmm_debug_exit())
            debug_depth--;
        else if (fastmm_debug_enter())
            debug_depth++;
        break;
    case 2:
        if (erase_freed_depth > 0 && fastmm_erase_freed_end())
            erase_freed_depth--;
        else if (fastmm_erase_freed_begin())
            erase_freed_depth++;
        break;
    default:
        if (erase_allocated_depth > 0 && fastmm_erase_allocated_end())
            erase_allocated_depth--;
        else if (fastmm_erase_allocated_begin())
            erase_allocated_depth++;
        break;
    }
}

static void op_null(input_t *in, unsigned i)
{
    unsigned before = ev.count;
    switch (u8(in) % 3) {
    case 0:
        errno = ERRNO_MARK;
        fastmm_free(NULL);
        if (errno != ERRNO_MARK)
            fail("fastmm_free(NULL) changed errno to %d", errno);
        break;
    case 1:
        if (fastmm_usable_size(NULL) != 0)
            fail("fastmm_usable_size(NULL) != 0");
        break;
    default:
        release(i);
        do_realloc(i, pick_size(in), 0, "fastmm_realloc(NULL, n)");
        return;
    }
    expect_no_event(before, "a call with NULL");
}

static void run_op(input_t *in)
{
    enum op op = (enum op)op_table[u8(in) % 32];
    unsigned i = u8(in) % SLOTS;
    current_op = op_names[op];
    totals.ops++;
    unsigned before = ev.count;
    switch (op) {
    case OP_MALLOC: {
        size_t n = pick_size(in);
        release(i);
        void *p = fastmm_malloc(n);
        expect_no_event(before, "fastmm_malloc");
        bool fill = debug_on() || erase_allocated_depth > 0;
        adopt(i, p, n, 16, debug_on(), fill ? 0x90 : -1, "fastmm_malloc");
        debug_used |= debug_on();
        break;
    }
    case OP_CALLOC: {
        size_t n = pick_size(in);
        size_t count = 1 + u8(in) % 16;
        release(i);
        void *p = fastmm_calloc(count, n / count);
        expect_no_event(before, "fastmm_calloc");
        adopt(i, p, n / count * count, 16, debug_on(), 0, "fastmm_calloc");
        debug_used |= debug_on();
        break;
    }
    case OP_REALLOC:
        do_realloc(i, pick_size(in), 0, "fastmm_realloc");
        break;
    case OP_REALLOCARRAY:
        do_realloc(i, pick_size(in), 1 + u8(in) % 8, "fastmm_reallocarray");
        break;
    case OP_REALLOC_ZERO:
        if (slots[i].p != NULL) {
            slot_t *s = &slots[i];
            verify_slot(i, "realloc to 0");
            void *r = fastmm_realloc(s->p, 0);
            expect_no_event(before, "fastmm_realloc(p, 0)");
            if (r != NULL)
                fail("fastmm_realloc(p, 0) returned %p, expected NULL (the block freed)", r);
            note_freed(s);
            live_bytes -= s->filled;
            s->p = NULL;
        }
        break;
    case OP_ALIGNED:
        op_aligned(in, i);
        break;
    case OP_FREE:
        release(i);
        break;
    case OP_HUGE:
        op_huge(in);
        break;
    case OP_BAD_ALIGN:
        op_bad_align(in);
        break;
    case OP_INTERIOR:
        op_interior(in, i);
        break;
    case OP_FOREIGN:
        op_foreign(in);
        break;
    case OP_DOUBLE_FREE:
        op_double_free(in, i);
        break;
    case OP_STALE:
        op_stale(in);
        break;
    case OP_WILD:
        op_wild(in, i);
        break;
    case OP_MODE:
        op_mode(in);
        break;
    case OP_CHECK:
        verify_slot(i, "check");
        scan_clean("check");
        break;
    case OP_FORGE: {
        unsigned word = u16(in);
        if (slots[i].p != NULL) {
            slot_t *s = &slots[i];
            verify_slot(i, "forge");
            s->forged = true;
            s->key = word;
            fill_pattern(s->p, s->filled, 0, s->filled, s);
        }
        break;
    }
    default:
        op_null(in, i);
        break;
    }
}

/* ---------------------------------------------------------------------------------------------- */
/* Entry points                                                                                    */
/* ---------------------------------------------------------------------------------------------- */

static void print_totals(void)
{
    char line[256];
    snprintf(line, sizeof line,
             "fuzz-heap: %llu inputs, %llu operations (%llu hostile calls, %llu refused requests), %llu events\n",
             totals.inputs, totals.ops, totals.hostile, totals.failed_requests, totals.events);
    loud();
    (void)!write(2, line, strlen(line));
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    if (saved_stderr >= 0)
        return 0;
    const char *v = getenv("FUZZ_HEAP_VERBOSE");
    verbose = v != NULL && *v != '\0' && *v != '0';
    saved_stderr = fcntl(2, F_DUPFD_CLOEXEC, 10);
    dev_null = open("/dev/null", O_WRONLY | O_CLOEXEC);
    page_size = (size_t)sysconf(_SC_PAGESIZE);
    foreign_map = mmap(NULL, 2 * page_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (foreign_map == MAP_FAILED) {
        perror("fuzz-heap: mmap");
        abort();
    }
    memset(foreign_map, 0xa5, 2 * page_size);
    memset(static_area, 0x5a, sizeof static_area);
    atexit(print_totals);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    LLVMFuzzerInitialize(NULL, NULL);
    input_t in = {data, size, 0};
    totals.inputs++;

    /* Modes for this input; what was in force is put back at the end. */
    unsigned mode = u8(&in);
    fastmm_error_action_t old_action = fastmm_error_action();
    unsigned old_options = fastmm_debug_options();
    unsigned old_depth = fastmm_debug_stack_depth();
    static const unsigned depths[] = {20, 0, 2, 64};
    memset(&ev, 0, sizeof ev);
    fastmm_set_event_handler(record_event, NULL);
    fastmm_set_error_action(FASTMM_ON_ERROR_CONTINUE);
    fastmm_debug_set_stack_depth(depths[mode >> 6]);
    unsigned options = mode & 8 ? 0 : old_options;
    if ((mode & 0x30) == 0x30)
        options |= FASTMM_DEBUG_SCAN_EVERY_OPERATION;
    fastmm_debug_set_options(options);
    debug_depth = erase_freed_depth = erase_allocated_depth = 0;
    debug_used = false;
    if ((mode & 1) && fastmm_debug_enter())
        debug_depth++;
    if ((mode & 6) == 4 && fastmm_erase_freed_begin())
        erase_freed_depth++;
    if ((mode & 6) == 6 && fastmm_erase_allocated_begin())
        erase_allocated_depth++;

    while (in.i < in.n)
        run_op(&in);

    current_op = "end of input";
    for (unsigned i = 0; i < SLOTS; i++)
        release(i);
    scan_clean("after every block was freed");
    while (debug_depth > 0 && fastmm_debug_exit())
        debug_depth--;
    while (erase_freed_depth > 0 && fastmm_erase_freed_end())
        erase_freed_depth--;
    while (erase_allocated_depth > 0 && fastmm_erase_allocated_end())
        erase_allocated_depth--;
    if (debug_depth != 0 || erase_freed_depth != 0 || erase_allocated_depth != 0)
        fail("a mode counter would not go back to zero");
    if (live_bytes != 0)
        fail("%zu live bytes counted after every block was freed", live_bytes);
    fastmm_debug_set_options(old_options);
    fastmm_debug_set_stack_depth(old_depth);
    fastmm_set_error_action(old_action);
    fastmm_set_event_handler(NULL, NULL);
    totals.events += ev.count;
    memset(graves, 0, sizeof graves);
    grave_next = 0;
    current_op = current_op_none;
    return 0;
}
