/*
 * internal.h - the one include of every lib/ C file: the layer headers, then every function that
 * crosses files (fm_<module>_*), grouped by the file that defines it. All of it is hidden.
 *
 * The library is compiled with -fvisibility=hidden: only FM_EXPORT names leave the .so.
 *
 * Layers (a layer calls only its own or lower ones):
 *   os, sync, kernels -> pagemap, sizeclass, options, eventlog -> small, medium, large
 *   -> realloc, api, usage -> init, override
 */
#ifndef FM_INTERNAL_H
#define FM_INTERNAL_H

#ifdef HAVE_CONFIG_H
#include <config.h>
#endif

/* The system headers the layer headers use, before every declaration below is made hidden. */
#include <sched.h>
#include <fastmm5.h>

/* Every internal declaration is hidden, as its definition is (-fvisibility=hidden): the compiler
 * then names a variable in the instruction that reads it, instead of loading its address from
 * the GOT first (one instruction less per global read on the malloc and free paths). A system
 * header first included below this line would be hidden too, and fail to link. */
#pragma GCC visibility push(hidden)

#include "base.h"
#include "sync.h"
#include "os.h"
#include "layout.h"
#include "kernels.h"
#include "track.h"
#include "hooks.h"

/* ---- pagemap.c: which OS region owns an address (fails closed) ---- */
#define FM_REGION_MEDIUM_SPAN 1u
#define FM_REGION_LARGE 2u
#define FM_REGION_GUARD 3u /* a region of guarded slots (guard.h) */
#define FM_REGION_TYPE_MASK 63u
bool fm_pagemap_register(const void *base, size_t size, const void *owner, unsigned type);
void fm_pagemap_unregister(const void *base, size_t size);
#if UINTPTR_MAX > 0xffffffffu
#define FM_PAGEMAP_ADDRESS_BITS 48
#else
#define FM_PAGEMAP_ADDRESS_BITS 32
#endif
#define FM_PAGEMAP_LEAF_BITS 16
#define FM_PAGEMAP_TOP_BITS (FM_PAGEMAP_ADDRESS_BITS - FM_OS_CHUNK_SHIFT - FM_PAGEMAP_LEAF_BITS)
extern uintptr_t *fm_pagemap_top[(size_t)1 << FM_PAGEMAP_TOP_BITS];

/* owner | type, or 0. Inline: every free() starts here. */
FM_INLINE uintptr_t fm_pagemap_lookup(const void *p)
{
    size_t chunk = (uintptr_t)p >> FM_OS_CHUNK_SHIFT;
    /* the top index, bounds-checked in one compare (an address past FM_PAGEMAP_ADDRESS_BITS: 0) */
    uint64_t top = (uint64_t)(uintptr_t)p >> (FM_OS_CHUNK_SHIFT + FM_PAGEMAP_LEAF_BITS);
    if (FM_UNLIKELY(top >= ((uint64_t)1 << FM_PAGEMAP_TOP_BITS)))
        return 0;
    uintptr_t *leaf = fm_load_acquire(&fm_pagemap_top[top]);
    return leaf == NULL ? 0 : fm_load_acquire(&leaf[chunk & (((size_t)1 << FM_PAGEMAP_LEAF_BITS) - 1)]);
}

/* ---- sizeclass.c: FastMM5's small classes and medium bins ---- */
extern const uint16_t fm_small_class_sizes[FM_SMALL_INDEX_COUNT];
/* A class's twin of 128-byte spans (layout.h), or the class itself if it is no multiple of 32. */
extern uint8_t fm_small_twin[FM_SMALL_CLASS_COUNT];
/* The class that serves a request aligned to `alignment` for class c, a multiple of it: above
 * 16 bytes its twin, whose blocks are aligned to gcd(size, 64); c itself if c is a twin already. */
FM_INLINE unsigned fm_small_aligned_class(unsigned c, size_t alignment)
{
    return alignment > 16 && c < FM_SMALL_CLASS_COUNT ? fm_small_twin[c] : c;
}
extern uint8_t fm_small_lookup[FM_SMALL_LOOKUP_SIZE];
void fm_sizeclass_init(void);
FM_INLINE unsigned fm_small_class_of(size_t size)
{
    return fm_small_lookup[(size + 1) >> FM_SMALL_GRANULARITY_SHIFT];
}
unsigned fm_medium_bin_of(size_t block_size);     /* bin whose size is <= block_size */
size_t fm_medium_bin_size(unsigned bin);
size_t fm_medium_round_request(size_t user_size); /* block size for a request: next bin size */

/* ---- options.c: run-time settings from FASTMM5_* ---- */
typedef enum { FM_STRATEGY_SPEED, FM_STRATEGY_BALANCED, FM_STRATEGY_LOW_MEMORY } fm_strategy_t;
/* The settings the FASTMM5_* variables give: parsed here, applied by startup.c (fm_read_options)
 * or read where they are used. */
typedef struct fm_options {
    fm_strategy_t strategy;
    bool stats_at_exit;
    bool verbose;
    bool disable_asm;
    bool disable_avx2;         /* FASTMM5_DISABLE_AVX2: the SSE2 kernels on an AVX2 processor */
    bool disable_avx512;       /* FASTMM5_DISABLE_AVX512: the AVX2 kernels on an AVX-512 processor */
    bool debug_at_start;
    bool erase_allocated;
    bool erase_freed;
    bool report_leaks;
    bool report_leaks_all;     /* FASTMM5_REPORT_LEAKS=all: still-reachable blocks too */
    int leak_exit_code;        /* FASTMM5_LEAK_EXIT_CODE: exit status on a definite leak (0: unchanged) */
    const char *suppressions;  /* FASTMM5_SUPPRESSIONS: a file of frame patterns (NULL: none) */
    const char *guard;         /* FASTMM5_GUARD (NULL: off), applied by fm_guard_start */
    size_t quarantine;         /* FASTMM5_QUARANTINE: bytes of freed debug blocks held (0: off) */
    bool stats_json;        /* FASTMM5_STATS=json: the exit report is fastmm_write_json (walk.c) */
    unsigned min_alignment; /* FASTMM5_MIN_ALIGNMENT, applied by fm_tuning_start (0: none) */
    int error_action;       /* FASTMM5_ON_ERROR: a fastmm_error_action_t, -1 while unset */
    int stack_depth;        /* FASTMM5_STACK_DEPTH, -1 while unset */
    bool memory_limit_set;  /* FASTMM5_MEMORY_LIMIT, in bytes */
    size_t memory_limit;
    bool debug_options_set; /* FASTMM5_DEBUG_OPTIONS: FASTMM_DEBUG_* bits */
    unsigned debug_options;
    const char *log_path;       /* FASTMM5_LOG (NULL: none) */
    bool valgrind_slack_usable; /* FASTMM5_VALGRIND_SLACK=usable */
} fm_options_t;
extern fm_options_t fm_options;
/* Every FASTMM5_* variable: a row of options.c's table. */
typedef enum {
    FM_OPT_STRATEGY,
    FM_OPT_ON_ERROR,
    FM_OPT_STATS,
    FM_OPT_MEMORY_LIMIT,
    FM_OPT_MIN_ALIGNMENT,
    FM_OPT_VERBOSE,
    FM_OPT_DISABLE_ASM,
    FM_OPT_DISABLE_AVX2,
    FM_OPT_DISABLE_AVX512,
    FM_OPT_DEBUG,
    FM_OPT_REPORT_LEAKS,
    FM_OPT_LEAK_EXIT_CODE,
    FM_OPT_SUPPRESSIONS,
    FM_OPT_STACK_DEPTH,
    FM_OPT_ERASE,
    FM_OPT_DEBUG_OPTIONS,
    FM_OPT_LOG,
    FM_OPT_VALGRIND_SLACK,
    FM_OPT_SYMBOLIZER,
    FM_OPT_GUARD,
    FM_OPT_QUARANTINE,
    FM_OPT_LIB,
    FM_OPT_COUNT
} fm_option_id_t;
bool fm_options_init(void);
/* The variable's value in the environment now (NULL: unset), for those read where they are used. */
const char *fm_option_value(fm_option_id_t id);
const char *fm_option_name(fm_option_id_t id);
/* "libfastmm5: warning: NAME=VALUE: PROBLEM" on standard error (value may be NULL). */
void fm_options_warn(const char *name, const char *value, const char *problem);
size_t fm_options_medium_span_size(void);
/* FASTMM5_VERBOSE's listing: every variable of the table, its value where set, what it does. */
void fm_options_list(int fd);
/* FASTMM5_VERBOSE's line of what is in force (verbose.c). */
void fm_verbose_describe(int fd);

/* ---- report.c: the plain report writer (text into a caller's buffer) ---- */
typedef struct fm_report {
    char *buf;
    size_t len, cap;
} fm_report_t;
void fm_report_str(fm_report_t *r, const char *s);
void fm_report_digits(fm_report_t *r, uint64_t v, unsigned base, unsigned min_digits);
void fm_report_hex(fm_report_t *r, uintptr_t v);
void fm_report_dec(fm_report_t *r, uint64_t v);
void fm_report_dump(fm_report_t *r, const void *p, size_t n);

/* ---- eventlog.c: reports to standard error / the log file / the handler ---- */
/* Writes the report, calls the handler, then aborts unless the action is "continue". */
void fm_event_raise(fastmm_event_type_t type, const void *block, size_t size, uint32_t allocation_number,
                    fm_report_t *r);
/* A leak report: also the kind and block count of its loss record; log_only: not written to
 * standard error (FASTMM5_LOG gets every record, standard error the ones asked for). */
void fm_event_raise_leak(fastmm_event_type_t type, const void *block, size_t size, uint32_t allocation_number,
                         fastmm_leak_kind_t kind, size_t blocks, bool log_only, fm_report_t *r);
/* A fault in a guard page (guardfault.c): written and handed to the handler, never aborts (the
 * caller lets the signal end the process). */
void fm_event_raise_fault(fastmm_event_type_t type, const void *block, size_t size, fm_report_t *r);
bool fm_event_log_enabled(void);
void fm_event_set_leak_fd(int fd);
void fm_event_invalid_pointer(const char *operation, const void *p, const char *why);
/* A plain block's flag word was overwritten: header corruption. live_kind NULL: a freed block
 * about to be reused (it stays out of use); else an operation on a live block of that kind and
 * usable size (refused; the block stays allocated). */
void fm_event_header_damaged(const char *operation, const void *p, unsigned flags, const char *live_kind,
                             size_t usable);
bool fm_event_set_log_path(const char *path);
/* Around the exit check of debug blocks (init.c): while on, events are reported but never abort. */
void fm_event_exit_check(bool on);
void fm_report_begin(fm_report_t *r); /* takes the report lock; fm_event_raise or fm_report_end drops it */
void fm_report_end(fm_report_t *r);
void fm_event_lock(void);
void fm_event_unlock(void);
/* fork (init.c): each module's own locks, taken before the arena locks and released after. */
void fm_walk_fork_lock(void);
void fm_walk_fork_unlock(void);
void fm_leaks_fork_lock(void);
void fm_leaks_fork_unlock(void);
void fm_debug_fork_lock(void);
void fm_debug_fork_unlock(void);
void fm_tuning_fork_lock(void);
void fm_tuning_fork_unlock(void);

typedef struct fm_usage_detail {
    size_t small_used_blocks, small_used_bytes, small_span_bytes;
    size_t medium_used_blocks, medium_used_bytes, medium_free_bytes, medium_span_bytes;
    size_t large_blocks, large_used_bytes, large_mapped_bytes;
} fm_usage_detail_t;
/* ---- the heap walk (medium.c walks medium spans and the small spans inside them, large.c
 * the large blocks) ---- */
typedef enum fm_walk_kind {
    FM_WALK_SMALL_BLOCK,
    FM_WALK_MEDIUM_BLOCK,
    FM_WALK_LARGE_BLOCK,
    FM_WALK_SMALL_SPAN,  /* a medium block holding small blocks; its blocks follow */
    FM_WALK_MEDIUM_SPAN, /* an OS mapping of medium blocks; its blocks follow */
} fm_walk_kind_t;
typedef struct fm_walk_record {
    void *block;             /* a block's user pointer (the outer block of a debug block); a span's start */
    size_t block_size;       /* bytes it occupies, headers included */
    size_t usable;           /* usable bytes (blocks) */
    uint16_t flags;          /* the flag word */
    fm_walk_kind_t kind;
    unsigned arena;
    bool free;               /* free, queued or cached (flagged FREE), or unbinned free space */
    size_t unfed_bytes;      /* spans: bytes not yet handed out by the sequential feed */
    size_t small_block_size; /* small blocks and small spans: the class size */
} fm_walk_record_t;
typedef void (*fm_walk_visit_t)(const fm_walk_record_t *record, void *arg);
/* False if some arena or span could not be locked before deadline_ms (fm_os_time_ms clock).
 * FM_WALK_LOCKS_HELD as the deadline: the caller already holds every medium arena, small manager
 * and large arena lock (the leak scan, which stops the other threads), so the walk takes none. */
#define FM_WALK_LOCKS_HELD ((uint64_t)0)
bool fm_medium_walk(fm_walk_visit_t visit, void *arg, uint64_t deadline_ms);
bool fm_large_walk(fm_walk_visit_t visit, void *arg, uint64_t deadline_ms);

/* ---- small.c ---- */
extern fm_small_manager_t fm_small_managers[FM_SMALL_ARENAS][FM_SMALL_INDEX_COUNT];
/* Where block 0 of manager m's spans starts, from m's place in the array: no field of m is read,
 * as lock-free readers may not have seen its set-up. */
FM_INLINE uint32_t fm_small_manager_head(const fm_small_manager_t *m)
{
    return fm_small_head_of((unsigned)((size_t)(m - &fm_small_managers[0][0]) % FM_SMALL_INDEX_COUNT));
}
void fm_small_init(void);
void *fm_small_alloc(unsigned class_index);
void fm_small_free(void *p, fm_small_span_t *span);
unsigned fm_small_alloc_batch(unsigned class_index, void **chain, unsigned want, unsigned most);
void *fm_small_free_chain_n(void *chain, size_t n); /* the first n, flagged FREE; returns the rest */
FM_INLINE void fm_small_free_chain(void *chain) { (void)fm_small_free_chain_n(chain, SIZE_MAX); }
FM_INLINE size_t fm_small_usable(const fm_small_span_t *span) { return (size_t)span->block_size - 2u; }
bool fm_small_drain_all(void);
void fm_small_trim(void);
void fm_small_unlock_all(void);
uint64_t fm_small_contention(void);
uint64_t fm_small_served(void);
/* The blocks of span s that m's feed has not handed out yet (counted in blocks_in_use): 0 unless s
 * is m's feed span. Read without m's lock (approximate); inline, as the medium walkers need it
 * for the small spans inside their blocks. */
FM_INLINE uint32_t fm_small_unfed_blocks(const fm_small_manager_t *m, const fm_small_span_t *s)
{
    if (fm_load_relaxed(&m->feed_span) != s)
        return 0;
    uint32_t offset = (uint32_t)fm_load_relaxed(&m->feed); /* the feed's offset half */
    return offset < s->head ? 0 : (offset - s->head) / m->block_size;
}
extern bool fm_small_keep_empty_spans;

/* ---- tcache.c: per-thread cache of free small and medium blocks ---- */
/* Medium bins 0..255 are cached: blocks up to 68416 bytes (requests up to 64 KiB). */
#define FM_TCACHE_MEDIUM_BINS 256u
/* A thread's medium budget starts at FM_TCACHE_MEDIUM_BYTES and doubles, up to
 * FM_TCACHE_MEDIUM_MAX_BYTES, while it overflows within about 50 microseconds of its previous
 * overflow (tcache.c); over it the largest blocks go back */
#define FM_TCACHE_MEDIUM_BYTES ((size_t)256 << 10)
#define FM_TCACHE_MEDIUM_MAX_BYTES ((size_t)1 << 20)
/* A medium request may take a cached block this many bytes bigger than its bin size (tcache.c). */
#define FM_TCACHE_MEDIUM_SLACK(block_size) ((block_size) / 8u)
#define FM_TCACHE_MEDIUM_MAX_USER (FM_MEDIUM_MIN_BLOCK + (FM_TCACHE_MEDIUM_BINS - 1u) * 256u - FM_MEDIUM_HEADER)
/* The bin of fm_medium_round_request(size) for FM_SMALL_MAX_USER < size <= FM_TCACHE_MEDIUM_MAX_USER
 * (medium bins are 256 bytes apart up to 101184): the one whose size is the block's, rounded up. */
FM_INLINE unsigned fm_tcache_medium_bin_for(size_t size)
{
    size_t block = size + FM_MEDIUM_HEADER;
    return block <= FM_MEDIUM_MIN_BLOCK ? 0u : (unsigned)((block - FM_MEDIUM_MIN_BLOCK + 255u) >> 8);
}
/* The bin fm_medium_bin_of(block) gives a medium block of FM_MEDIUM_MIN_BLOCK bytes up to (not
 * including) FM_TCACHE_MEDIUM_BLOCK_END, the sizes whose bins are cached, inline for free()'s
 * path (those bins are the 256-byte ones). */
#define FM_TCACHE_MEDIUM_BLOCK_END (FM_MEDIUM_MIN_BLOCK + FM_TCACHE_MEDIUM_BINS * 256u)
FM_INLINE unsigned fm_tcache_medium_bin_of(size_t block)
{
    return (unsigned)((block - FM_MEDIUM_MIN_BLOCK) >> 8);
}
/* Whether the thread cache keeps a freed medium block of `block` bytes: a bin size below
 * FM_TCACHE_MEDIUM_BLOCK_END. A block between two bin sizes (shrunk or grown in place by realloc)
 * goes to the arenas, whose allocation cuts it to the next request's bin: the cache's stacks
 * hold bin sizes only, so the bin a request takes a block from bounds the block's size
 * (FM_TCACHE_MEDIUM_SLACK). One rotation tests both: the offset's low 8 bits, when set, become
 * its top ones. */
FM_INLINE bool fm_tcache_medium_cacheable(size_t block)
{
    size_t offset = block - FM_MEDIUM_MIN_BLOCK; /* unsigned: below the minimum, huge */
    return ((offset >> 8) | (offset << (sizeof offset * 8u - 8u))) < FM_TCACHE_MEDIUM_BINS;
}
typedef struct fm_tcache_bin {
    void *head; /* blocks linked through their first word, flagged FREE */
    /* how many more blocks the stack takes (limit - its length), counted down so that free()'s
     * push tests it in one subtraction: below 0, the stack is over its limit */
    int room;
    unsigned limit; /* at most fm_tcache_limits[class]: a bin widens as it proves busy */
} fm_tcache_bin_t;
typedef struct fm_tcache {
    /* the block of this thread's last free or delete, its checks still to come (api.c); its
     * ownership-map entry less FM_REGION_MEDIUM_SPAN (FM_DEFER_NO_SPAN: none), plus
     * FM_DEFER_SIZED_DELETE for a sized delete, whose size and family deferred_word holds */
    void *deferred;
    uintptr_t deferred_span;
    uint64_t deferred_word;
    fm_tcache_bin_t bins[FM_SMALL_INDEX_COUNT];
    struct fm_tcache *pool_link;          /* tcache.c's pool of caches of exited threads */
    bool kept;                            /* in the pool with its blocks (tcache.c) */
    bool homed;                           /* a live thread's: counted in its home arena's threads */
    uint8_t home;                         /* the home arena of the thread that has it, or had it */
    uint32_t visited[FM_SMALL_INDEX_COUNT]; /* fm_os_ticks() of each bin's last arena visit */
    size_t medium_bytes;                  /* block bytes held in medium[] */
    size_t medium_budget;                 /* most bytes medium[] holds: widens as it proves busy */
    uint32_t medium_overflowed;           /* fm_os_ticks() of the medium part's last overflow */
    /* a bit per medium bin that may hold blocks: set by every push, cleared by tcache.c when it
     * finds the bin empty (malloc's inline path empties bins without clearing it) */
    uint64_t medium_map[FM_TCACHE_MEDIUM_BINS / 64u];
    void *medium[FM_TCACHE_MEDIUM_BINS];  /* by medium bin of the block size, linked as above */
} fm_tcache_t;
extern __thread fm_tcache_t *fm_tcache_current __attribute__((tls_model("initial-exec")));
extern uint16_t fm_tcache_limits[FM_SMALL_INDEX_COUNT]; /* the widest a bin of the class gets */
void fm_tcache_init(void);
void fm_tcache_init_key(void);
void *fm_tcache_refill(unsigned class_index);
fm_tcache_t *fm_tcache_start(void); /* this thread's cache, made now if it has none; NULL: none */
void fm_tcache_overflow(fm_tcache_bin_t *bin); /* one of this thread's bins */
void fm_tcache_flush_current(void);
void fm_tcache_fork_lock(void);
void fm_tcache_fork_unlock(void);
void fm_tcache_fork_child(void); /* in the child, before the unlock */
void *fm_tcache_medium_take(size_t block_size);       /* NULL: not cached */
void *fm_tcache_medium_take_aligned(size_t block_size, size_t alignment); /* the same, aligned */
bool fm_tcache_medium_put(void *p, size_t block_size); /* p flagged FREE; false: not taken */
bool fm_tcache_small_put(void *p, unsigned class_index); /* p flagged FREE; false: no cache */
bool fm_tcache_medium_release(void);                  /* this thread's medium blocks to the arenas */
bool fm_tcache_release_kept(void);                    /* exited threads' kept blocks to the arenas */
#define FM_TCACHE_USABLE(tc) ((uintptr_t)(tc) > 1u)
/* How many blocks a bin's stack holds. */
FM_INLINE unsigned fm_tcache_bin_count(const fm_tcache_bin_t *bin) { return (unsigned)((int)bin->limit - bin->room); }
/* Pushes a small block (flagged FREE) on its class's stack; over the limit, half goes back.
 * tracked: fm_track_on (a constant false in free's frameless path). */
FM_INLINE void fm_tcache_push(fm_tcache_t *tc, unsigned c, void *p, bool tracked)
{
    fm_tcache_bin_t *bin = &tc->bins[c];
    if (tracked)
        fm_link_set(p, bin->head);
    else
        *(void **)p = bin->head;
    bin->head = p;
    if (FM_UNLIKELY(--bin->room < 0))
        fm_tcache_overflow(bin);
}

/* Pushes a freed medium block of `block_size` bytes on the stack of its bin b (the caller has
 * checked that the bin is cached and the byte budget has room). */
FM_INLINE void fm_tcache_medium_push(fm_tcache_t *tc, unsigned b, void *p, size_t block_size)
{
    *(void **)p = tc->medium[b];
    tc->medium[b] = p;
    tc->medium_bytes += block_size;
    tc->medium_map[b >> 6] |= (uint64_t)1 << (b & 63u);
}

/* ---- medium.c ---- */
extern fm_medium_manager_t fm_medium_managers[FM_MEDIUM_ARENAS];
/* This thread's home arena, plus one: where its small refills and medium scans start (0: none
 * given yet; the thread id modulo the arena count stands in). tcache.c gives each thread cache a
 * home when a thread takes it. */
extern __thread uint8_t fm_home_arena_plus1 __attribute__((tls_model("initial-exec")));
FM_STATIC_ASSERT(FM_SMALL_ARENAS == FM_MEDIUM_ARENAS, "a home arena is a small and a medium arena");
FM_INLINE unsigned fm_home_arena(void)
{
    unsigned h = fm_home_arena_plus1;
    return h != 0 ? h - 1u : fm_os_thread_id() % FM_MEDIUM_ARENAS;
}
void *fm_medium_alloc(size_t block_size, bool small_span);
void *fm_medium_alloc_aligned(size_t block_size, size_t alignment);
void fm_medium_free(void *p);
bool fm_medium_try_resize_in_place(void *p, size_t min_block, size_t want_block);
void fm_medium_collect(fm_usage_detail_t *d);
void fm_medium_shrink(void *p, size_t new_block_size);
bool fm_medium_drain_all(void);
extern bool fm_medium_never_merge; /* debug option FASTMM_DEBUG_NEVER_MERGE_FREE_MEDIUM_BLOCKS */
/* Calls visit(outer, freed) for every block carrying DEBUG_INFO in medium spans (small blocks
 * included) and, from large.c, large blocks; returns how many visits returned true. */
size_t fm_medium_visit_debug_blocks(bool (*check)(const void *outer));
/* Calls visit(user pointer, usable size) for every in-use block. */
void fm_medium_visit_used(void (*visit)(void *block, size_t usable, void *arg), void *arg);
bool fm_medium_trim(void);
void fm_medium_lock_all(void);
void fm_medium_unlock_all(void);
uint64_t fm_medium_contention(void);

/* ---- large.c ---- */
extern fm_large_manager_t fm_large_managers[FM_LARGE_ARENAS];
void *fm_large_alloc(size_t size, size_t alignment);
void fm_large_free(void *p);
void *fm_large_resize(void *p, size_t new_size); /* in place or by page move; NULL if impossible */
bool fm_large_drain_all(void);
bool fm_large_release_retained(void); /* the kept freed mappings back to the OS */
void fm_large_fit_kept_to_heap(void); /* the oldest kept ones back until the rest fit the budget */
/* With several threads, a kept mapping is trimmed whole at the free that ends this many
 * reuses by smaller blocks; the pages earlier users may have written in the spare chunks of
 * live large blocks stay under this many bytes (large.c; numbers the tests need too) */
#define FM_LARGE_SHORT_REUSES_PER_TRIM 48u
#define FM_LARGE_SPARE_BUDGET ((size_t)32 << 20)
void fm_large_lock_all(void);
void fm_large_unlock_all(void);
uint64_t fm_large_contention(void);
void fm_large_collect(fm_usage_detail_t *d);
size_t fm_large_visit_debug_blocks(bool (*check)(const void *outer));
void fm_large_visit_used(void (*visit)(void *block, size_t usable, void *arg), void *arg);

/* ---- block.h: the block decoders (they read the pagemap and the managers' records above) ---- */
#include "block.h"

/* ---- dispatch.c: classification shared by free, realloc and usable_size; allocation and freeing by kind ---- */
fm_block_ref_t fm_block_classify(const void *p);
size_t fm_block_usable(const void *p, fm_block_ref_t ref);
bool fm_block_mark_free(void *p); /* in use -> free, atomically; false if it was already free */
void *fm_alloc(size_t size);
void *fm_alloc_aligned(size_t alignment, size_t size); /* api.c: a debug block in debug mode */
void *fm_alloc_aligned_untracked(size_t alignment, size_t size); /* alignment > FM_MIN_ALIGN */
void fm_free_classified(void *p, fm_block_ref_t ref);
void fm_free_cached(void *p, fm_block_ref_t ref); /* small or medium */
/* Tells memcheck about a new plain block (track.h); returns it. Inline: malloc's slow path
 * (api.c) makes no call for it in normal mode. */
FM_INLINE void *fm_track_new(void *p, size_t size, bool zeroed)
{
    if (FM_UNLIKELY(fm_track_on) && p != NULL)
        fm_track_alloc(p, size, fm_block_usable(p, fm_block_classify(p)), zeroed);
    return p;
}

/* ---- modes.c: the mode flags (written by debug.c) and the start time ---- */
extern bool fm_debug_on;
extern bool fm_erase_allocated, fm_erase_freed;
extern uintptr_t fm_fast_alloc_above, fm_fast_free_above, fm_defer_free_above; /* 1, or FM_FAST_PATH_OFF (modes.c) */
#define FM_FAST_PATH_OFF UINTPTR_MAX
/* Why free's checks may not wait for the thread's next free (api.c's deferred checks); each
 * switches fm_defer_free_above off while it holds (modes.c):
 * SLOW_FREE - free's frameless path is off (erase-freed, memcheck);
 * DEBUG - debug mode has been on: debug blocks may exist, whose free records where it was made;
 * CONTINUE - FASTMM5_ON_ERROR=continue: a bad free is refused, with its event, in its own call;
 * HANDLER - an event handler is set: it sees each event in the call that caused it. */
#define FM_DEFER_OFF_SLOW_FREE 1u
#define FM_DEFER_OFF_DEBUG 2u
#define FM_DEFER_OFF_CONTINUE 4u
#define FM_DEFER_OFF_HANDLER 8u
void fm_defer_free_set_off(unsigned reason, bool off);
extern __thread bool fm_checking_deferred __attribute__((tls_model("initial-exec")));
extern uint64_t fm_start_ms; /* coarse time at start-up; debug blocks' times count from it */
extern unsigned fm_stack_depth; /* return addresses per debug-mode trace (FASTMM5_STACK_DEPTH) */

/* ---- the thread cache's take, inline in malloc's (api.c) and operator new's (operators.c) paths ---- */

/* A free block of the class (small) or bin (medium up to 64 KiB) from this thread's cache, or
 * NULL. tracked: tell memcheck (fm_track_on; a constant false in the frameless paths). */
FM_INLINE void *fm_cache_take(fm_tcache_t *tc, size_t size, bool tracked)
{
    if (FM_LIKELY(size <= FM_SMALL_MAX_USER)) {
        unsigned c = fm_small_class_of(size);
        fm_tcache_bin_t *bin = &tc->bins[c];
        void *b = bin->head;
        /* Only a plain freed small block's low flag bits read SMALL | FREE: a freed debug block
         * (DEBUG_INFO) is vetted first, and a damaged flag word reported, by fm_tcache_refill.
         * The same one compare as testing DEBUG_INFO alone. */
        unsigned flags;
        if (FM_LIKELY(b != NULL) && FM_LIKELY(fm_block_small_freed_plain(flags = fm_flags_get(b)))) {
            bin->head = tracked ? fm_link_get(b) : *(void **)b;
            bin->room++;
            fm_flags_set(b, flags & ~FM_FLAG_FREE);
            if (tracked)
                fm_track_alloc(b, size, fm_small_class_sizes[c] - 2u, false);
            return b;
        }
    } else if (size <= FM_TCACHE_MEDIUM_MAX_USER) {
        void **head = &tc->medium[fm_tcache_medium_bin_for(size)];
        void *b = *head;
        /* a freed debug block (DEBUG_INFO) is vetted first: fm_tcache_medium_take */
        if (b != NULL && FM_LIKELY(fm_block_medium_freed_plain(fm_flags_get(b)))) {
            size_t block = fm_medium_block_size(b);
            *head = *(void **)b;
            tc->medium_bytes -= block;
            fm_flags_set(b, FM_FLAG_MEDIUM);
            if (tracked)
                fm_track_alloc(b, size, block - FM_MEDIUM_HEADER, false);
            return b;
        }
    }
    return NULL;
}

/* malloc's and operator new's frameless path: a block from this thread's cache while none of
 * debug mode, erase-allocated and memcheck is on (fm_fast_alloc_above), else NULL. It calls
 * nothing, so its callers need no stack frame when it succeeds. */
FM_INLINE void *fm_malloc_cached(size_t size)
{
    fm_tcache_t *tc = fm_tcache_current;
    if (FM_LIKELY((uintptr_t)tc > fm_load_relaxed(&fm_fast_alloc_above)))
        return fm_cache_take(tc, size, false);
    return NULL;
}

/* ---- startup.c: the lazy one-time start of the heap ---- */
extern bool fm_ready;
void fm_init_once(void);
bool fm_read_options(void); /* reads FASTMM5_* (false before the environment exists), applies once */
void fm_start_heap(void); /* fm_ensure_init out of line, for the hook table */
/* Starts the heap unless it is ready: every entry point that needs the heap, from start-up's
 * layer up (below it, through fm_hooks.start). */
FM_INLINE void fm_ensure_init(void)
{
    if (FM_UNLIKELY(!fm_load_acquire(&fm_ready)))
        fm_init_once();
}

/* Which family of functions allocated a block, and how it is released: malloc & co. / free,
 * operator new / delete, operator new[] / delete[] (operators.c). FM_DELETE_SIZED: a sized
 * delete, whose size argument is checked against the block. */
#define FM_FAMILY_MALLOC 0u
#define FM_FAMILY_NEW 1u
#define FM_FAMILY_NEW_ARRAY 2u
#define FM_FAMILY_MASK 3u
#define FM_DELETE_SIZED 4u
/* A thread cache's deferred_word: a delete's size, and its family and FM_DELETE_SIZED above it. */
#define FM_DEFER_HOW_SHIFT 56u
/* deferred_span with no block waiting: not a medium span's entry (its type bits are not 0). */
#define FM_DEFER_NO_SPAN ((uintptr_t)1)
/* Added to deferred_span for a sized delete: type bits that an ownership-map entry less
 * FM_REGION_MEDIUM_SPAN never has (63, 0, 1 or 2). */
#define FM_DEFER_SIZED_DELETE ((uintptr_t)32)
/* api.c: second names of the hottest public entry points, bound inside the library: the libc
 * names (override.c) and operator new call these, where a call through the exported fastmm_*
 * name goes through the PLT (an indirect jump on every malloc and free). */
FM_HIDDEN FASTMM_MALLOC_ATTR void *fm_entry_malloc(size_t size);
FM_HIDDEN void fm_entry_free(void *p);
FM_HIDDEN FASTMM_MALLOC_ATTR void *fm_entry_calloc(size_t count, size_t size);
FM_HIDDEN void *fm_entry_realloc(void *p, size_t size);
/* api.c: the checks of this thread's deferred free or delete (its thread cache's pending block),
 * made now: thread exit and upkeep call it through fm_hooks.free_deferred */
void fm_free_deferred_now(void);
/* api.c: free() with its checks made in this call (the deferred one's first): for a block the
 * caller has just read (realloc's move) or checked (delete_check.c), nothing to wait for. */
void fm_free_at_once(void *p);
/* api.c: every operator delete (alignment 0: not an aligned delete), and the same with the
 * arguments that are constants for the operators without an alignment folded in: unsized and
 * sized, of each family */
void fm_delete(void *p, size_t size, size_t alignment, unsigned how);
void fm_delete_new(void *p);
void fm_delete_new_array(void *p);
void fm_delete_new_sized(void *p, size_t size);
void fm_delete_new_array_sized(void *p, size_t size);
/* delete_check.c: what fm_delete does not settle inline - debug blocks, and blocks whose size
 * or alignment did not pass the quick check: checked in full, reported, and freed */
void fm_delete_slow(void *p, size_t size, size_t alignment, unsigned how);

/* ---- stacktrace.c ---- */
void fm_stack_init(void);
void fm_stack_capture(uintptr_t *out, unsigned depth);
unsigned fm_stack_capture_stamped(uintptr_t *out, unsigned depth, uint64_t *stamp, const uintptr_t **where);
void fm_stack_settle(uintptr_t *out, unsigned depth, unsigned n, const uintptr_t *where);
void fm_stack_format(fm_report_t *r, const uintptr_t *trace, unsigned depth);
/* The current call's stack, captured before a report's lock is taken, printed inside it. */
#define FM_STACK_CURRENT_DEPTH 20u
typedef struct fm_stack_current {
    uintptr_t trace[64];
    unsigned depth;
} fm_stack_current_t;
void fm_stack_capture_current(fm_stack_current_t *cur);
/* A stored trace by its id (tracetab.c), or what stands in its place: no trace, or not stored. */
void fm_stack_format_id(fm_report_t *r, uint32_t id, unsigned depth);

/* ---- tracetab.c: the debug blocks' traces, each distinct one stored once ---- */
#define FM_TRACE_NONE 0u           /* nothing captured (depth 0, or an empty capture) */
#define FM_TRACE_LOST 0xffffffffu  /* captured, but the table was full */
uint32_t fm_tracetab_intern(const uintptr_t *frames, unsigned depth);
/* The `depth` frames of a stored trace (valid for the life of the process); NULL for NONE,
 * LOST, or anything that names no entry of that depth (a damaged footer). */
const uintptr_t *fm_tracetab_frames(uint32_t id, unsigned depth);
void fm_tracetab_fork_lock(void);
void fm_tracetab_fork_unlock(void);

/* ---- symbolize.c ---- */
/* The function (NAME+0xOFFSET) and FILE:LINE of a return address, "-" where unknown; false if
 * no symbolizer answered (none built, none installed, or it failed). */
bool fm_symbolize(uintptr_t address, char *name, size_t name_cap, char *where, size_t where_cap);

/* ---- unwind.c (x86-64) ---- */
void fm_unwind_fork_prepare(void); /* no walk inside the dynamic loader across a fork */
void fm_unwind_fork_done(void);
void fm_unwind_note_unload(void); /* an object was unloaded (lib/dlclose.c) */
/* Whether every unload the program asks for reaches fm_unwind_note_unload. */
void fm_unwind_trust_unload_notes(bool trust);
#if defined(__x86_64__) && defined(__linux__)
#define FM_HAVE_FAST_UNWIND 1
/* *stamp: names the frames returned (equal stamps, equal frames; per thread), 0 if unnamed;
 * *where: out, or this thread's copy of them (valid until its next capture) */
unsigned fm_unwind_capture(uintptr_t *out, unsigned max, uintptr_t own_lo, uintptr_t own_hi, uint64_t *stamp,
                           const uintptr_t **where);
#endif
void fm_stack_report_current(fm_report_t *r, const fm_stack_current_t *cur);

/* ---- debug.c: FastMM5's debug mode ---- */
#define FM_DEBUG_FILL_ALLOCATED 0x90
void fm_debug_refresh_fast_paths(void); /* after a mode outside debug.c changed (FASTMM5_GUARD) */
void fm_debug_init(void);
void *fm_debug_alloc(size_t size, int fill); /* fill: 0x90, 0 (calloc) or -1 (none) */
/* Debug blocks for operator new: aligned (a power of two up to FM_DEBUG_MAX_ALIGN, which the
 * user pointer 64 bytes into the outer block keeps), and marked with their family. */
#define FM_DEBUG_MAX_ALIGN 64u
void *fm_debug_alloc_aligned(size_t size, size_t alignment);
void fm_debug_set_family(void *p, unsigned family, size_t alignment);
/* operator delete of a debug block: family, size and alignment checked and reported, then freed
 * as free() frees it. False: p is no debug block (nothing done). */
bool fm_debug_delete_block(void *p, size_t size, size_t alignment, unsigned how);
/* free(), realloc() or malloc_usable_size() of p, which is no block: if p is where a block
 * starts whose header was overwritten (a debug header, or a plain block's flag word), that is
 * reported as HEADER_CORRUPTION (the block is left alone) and true returned. */
bool fm_debug_report_damaged_header(const char *operation, const void *p);
/* damaged.c: the plain-block half of that (a block starts at p, its flag word is garbage) */
bool fm_block_start_damaged(const void *p, size_t *usable, const char **kind);
bool fm_debug_classify(const void *p, fm_block_ref_t *outer_ref);
void fm_debug_free_or_report(void *p, fm_block_ref_t plain_ref);
bool fm_debug_free_block(void *p); /* false: p is no debug block (nothing done) */
void *fm_debug_realloc_or_report(void *p, fm_block_ref_t plain_ref, size_t size);
void *fm_debug_realloc_plain(void *p, fm_block_ref_t ref, size_t size);
size_t fm_debug_usable_or_report(const void *p, fm_block_ref_t plain_ref);
/* A freed debug block about to be handed out again: checked, and (intact) refilled with 0x90 and
 * its DEBUG_INFO flag cleared. check_reuse reports a damaged one; freed_block_intact (under an
 * arena lock) only says so. */
bool fm_debug_check_reuse(void *outer);
bool fm_debug_freed_block_intact(void *outer);
bool fm_debug_scan_block(const void *outer);
/* Set once debug mode is first entered: the process has debug blocks, which the exit check
 * (init.c) scans with fm_debug_check_at_exit, under fm_event_exit_check. */
extern bool fm_debug_used;
size_t fm_debug_check_at_exit(void);
/* trace_id: the allocation trace's id in tracetab.c (equal ids, equal traces); trace: its frames
 * (looked up: pass NULL where they are not needed); either may be NULL */
bool fm_debug_block_info(const void *outer, size_t *user_size, uint32_t *number, uint32_t *trace_id,
                         const uintptr_t **trace, unsigned *depth);
void fm_debug_report_leak_block(fm_report_t *r, const void *outer);
typedef struct fm_debug_details {
    size_t user_size;
    uint32_t allocation_number, allocation_group, allocated_by_thread, freed_by_thread;
    const uintptr_t *allocation_trace, *free_trace; /* free_trace: NULL unless freed */
    unsigned depth;
    bool freed;
} fm_debug_details_t;
bool fm_debug_block_details(const void *outer, fm_debug_details_t *out);

/* ---- quarantine.c: freed debug blocks wait in a FIFO bounded by bytes (FASTMM5_QUARANTINE) ---- */
extern size_t fm_quarantine_limit; /* 0: off */
void fm_quarantine_start(size_t bytes);
/* Takes a freed debug block's outer block (true), releasing the oldest beyond the bound through
 * fm_debug_quarantine_leave; false: off, or the block is bigger than the bound. */
bool fm_quarantine_hold(void *outer, size_t bytes);
size_t fm_quarantine_bytes(void);
void fm_quarantine_fork_lock(void);
void fm_quarantine_fork_unlock(void);
/* debug.c: the bytes a held block counts for, and its way out (checked, then released or kept) */
size_t fm_debug_quarantine_bytes(const void *outer);
bool fm_debug_report_waiting_fault(const void *addr);
void fm_debug_quarantine_leave(void *outer);

/* ---- leaks.c ---- */
size_t fm_leak_check_at_exit(void);
/* ---- leaksupp.c: FASTMM5_SUPPRESSIONS ---- */
void fm_leak_suppressions_load(const char *path); /* reads the file (no allocation); NULL: none */
bool fm_leak_suppressed(const uintptr_t *trace, unsigned depth); /* some frame matches a pattern */

/* ---- realloc.c ---- */
void *fm_realloc(void *p, size_t size);
FM_NOINLINE void *fm_realloc_classified(void *p, fm_block_ref_t ref, size_t size);
/* FastMM5's small-block resize policy (realloc.c, and realloc's inline path in api.c): a block of
 * `old` usable bytes asked for `size` stays in place while 0 < size <= old and 4 * size + 64 >=
 * old; else it moves to a block for fm_small_move_request bytes: size when shrinking,
 * max(2 * old + 32, size) when growing, so that repeated appends move rarely. */
FM_INLINE bool fm_small_resize_stays(size_t old, size_t size)
{
    return size - 1 < old && size * 4 + 64u >= old;
}
FM_INLINE size_t fm_small_move_request(size_t old, size_t size)
{
    return size <= old || 2 * old + 32u <= size ? size : 2 * old + 32u;
}
/* Its rule for medium and large blocks (realloc.c, api.c): a block of `old` usable bytes stays in
 * place for a size from half of that up to all of it. */
FM_INLINE bool fm_resize_stays_within_half(size_t old, size_t size)
{
    return size <= old && size >= old / 2;
}

/* ---- usage.c ---- */
void fm_usage_collect(fm_usage_detail_t *d);

/* ---- walk.c: the public heap walk and what is built on it (state, state log, JSON) ---- */
const char *fm_walk_strategy_name(unsigned strategy);

/* ---- tuning.c: strategy, memory limit, nested minimum alignment ---- */
/* The minimum alignment in force (16 on 64-bit unless a coarser one was entered). tuning.c
 * applies it by rebuilding fm_small_lookup, so that fm_small_class_of honours it. */
unsigned fm_tuning_min_alignment(void);
void fm_tuning_start(void); /* from init.c once the options are read: FASTMM5_MIN_ALIGNMENT */

#include "guard.h"

#pragma GCC visibility pop

#endif
