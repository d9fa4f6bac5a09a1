/*
 * fastmm5.h - the public interface of libfastmm5, FastMM5's memory manager for Linux.
 *
 * Link with `pkg-config --cflags --libs fastmm5`, or run any program on the library with
 * LD_PRELOAD=libfastmm5.so.1: the library also exports the C library's allocation names
 * (malloc, free, ...), so it becomes the process's allocator either way.
 *
 * Sections mirror doc/design.md and doc/api-contract.md. Names in sections 1-5 are a fixed contract.
 */
#ifndef FASTMM5_H
#define FASTMM5_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define FASTMM_API __attribute__((visibility("default")))
#define FASTMM_MALLOC_ATTR __attribute__((malloc, warn_unused_result))
#else
#define FASTMM_API
#define FASTMM_MALLOC_ATTR
#endif

#define FASTMM_VERSION_MAJOR 0
#define FASTMM_VERSION_MINOR 1
#define FASTMM_VERSION_PATCH 0
/* FastMM5 release whose design this library follows (CFastMM_Version). */
#define FASTMM_UPSTREAM_VERSION 507

/* ===================================================================================== */
/* 1. Allocation (fixed). glibc semantics at every edge; see fastmm5(3).                  */
/* ===================================================================================== */

/* Alignment of every block on this target: 16 bytes on 64-bit, 8 on 32-bit. */
#define FASTMM_MIN_ALIGNMENT (2 * sizeof(void *))

FASTMM_API FASTMM_MALLOC_ATTR void *fastmm_malloc(size_t size);
FASTMM_API FASTMM_MALLOC_ATTR void *fastmm_calloc(size_t count, size_t size);
FASTMM_API void *fastmm_realloc(void *p, size_t size);
FASTMM_API void *fastmm_reallocarray(void *p, size_t count, size_t size);
FASTMM_API void fastmm_free(void *p);
FASTMM_API int fastmm_posix_memalign(void **out, size_t alignment, size_t size);
FASTMM_API FASTMM_MALLOC_ATTR void *fastmm_aligned_alloc(size_t alignment, size_t size);
FASTMM_API FASTMM_MALLOC_ATTR void *fastmm_memalign(size_t alignment, size_t size);
/* Usable capacity of a normal block; exactly the requested size of a debug-mode block. */
FASTMM_API size_t fastmm_usable_size(const void *p);

/* ===================================================================================== */
/* 2. Debug mode (fixed).                                                                 */
/* ===================================================================================== */

/* Keep small-block spans whose blocks are all free (freed debug blocks stay inspectable). */
#define FASTMM_DEBUG_NEVER_FREE_SMALL_SPANS 0x1u
/* Do not coalesce a freed medium debug block with free neighbours. */
#define FASTMM_DEBUG_NEVER_MERGE_FREE_MEDIUM_BLOCKS 0x2u
/* Run fastmm_debug_scan() on entry to every allocation call while debug mode is active. */
#define FASTMM_DEBUG_SCAN_EVERY_OPERATION 0x4u

/* A nested counter, like FastMM_EnterDebugMode: debug mode is active while it is above zero.
 * Blocks allocated in debug mode keep their debug treatment after it ends. */
FASTMM_API bool fastmm_debug_enter(void);
FASTMM_API bool fastmm_debug_exit(void);
FASTMM_API bool fastmm_debug_active(void);
FASTMM_API unsigned fastmm_debug_options(void);       /* default: both FastMM5 options */
FASTMM_API void fastmm_debug_set_options(unsigned options);
FASTMM_API unsigned fastmm_debug_stack_depth(void);   /* entries per stored trace, 0..64 (20) */
FASTMM_API void fastmm_debug_set_stack_depth(unsigned depth);
FASTMM_API size_t fastmm_debug_scan(void);            /* checks every debug block; returns how many are corrupt */

/* FastMM5's erase modes, a lightweight subset of debug mode for blocks of any mode: while
 * erase-allocated is active, malloc fills the whole usable area of each new block with 0x90
 * (not calloc, not the grown part of a realloc); while erase-freed is active, free fills the
 * usable area with 0x80 first (debug blocks fill themselves). Nested counters, like debug mode;
 * also FASTMM5_ERASE=allocated|freed|both. */
FASTMM_API bool fastmm_erase_allocated_begin(void);
FASTMM_API bool fastmm_erase_allocated_end(void);
FASTMM_API bool fastmm_erase_allocated_active(void);
FASTMM_API bool fastmm_erase_freed_begin(void);
FASTMM_API bool fastmm_erase_freed_end(void);
FASTMM_API bool fastmm_erase_freed_active(void);

/* Allocation groups (FastMM_CurrentAllocationGroup): stored in each new debug block. */
FASTMM_API void fastmm_debug_set_allocation_group(uint32_t group);
FASTMM_API uint32_t fastmm_debug_allocation_group(void);
/* Raise SIGTRAP when the debug allocation with this number is made (0: never). */
FASTMM_API void fastmm_debug_break_on_allocation(uint32_t allocation_number);

/* Replaceable stack-trace capture (fill exactly `depth` entries, 0 for unused ones) and
 * symbolization of one address into `buf` (return the length written, or 0 for the default). */
typedef void (*fastmm_stack_capture_t)(uintptr_t *addresses, unsigned depth);
typedef int (*fastmm_stack_format_t)(uintptr_t address, char *buf, size_t size);
FASTMM_API void fastmm_set_stack_trace_hooks(fastmm_stack_capture_t capture, fastmm_stack_format_t format);

/* ===================================================================================== */
/* 3. Events and errors (fixed).                                                          */
/* ===================================================================================== */

typedef enum fastmm_event_type {
    FASTMM_EVENT_INVALID_POINTER,       /* free/realloc/usable_size of a pointer this heap does not own, or of a free block */
    FASTMM_EVENT_DOUBLE_FREE,
    FASTMM_EVENT_REALLOC_OF_FREED_BLOCK,
    FASTMM_EVENT_HEADER_CORRUPTION,     /* write before the start of a block: a debug header, or a plain block's flag word */
    FASTMM_EVENT_FOOTER_CORRUPTION,     /* write past the end of a debug block */
    FASTMM_EVENT_MODIFIED_AFTER_FREE,
    FASTMM_EVENT_VIRTUAL_CALL_ON_FREED_OBJECT,
    FASTMM_EVENT_LEAK_DETAIL,
    FASTMM_EVENT_LEAK_SUMMARY,
    FASTMM_EVENT_MISMATCHED_DEALLOCATION, /* malloc/new/new[] released by free/delete/delete[] of another
                                           * family (debug blocks), or by an aligned delete whose
                                           * alignment is not the block's */
    FASTMM_EVENT_SIZED_DELETE_MISMATCH,   /* a sized operator delete whose size does not fit the block */
    /* Guarded blocks (FASTMM5_GUARD, fastmm5(7)): an access faulted in a no-access page; reported
     * from the SIGSEGV handler, after which the process dies of the signal whatever the error
     * action. block and size are the guarded block's. */
    FASTMM_EVENT_BUFFER_OVERRUN,          /* past the end of a live guarded block (malloc(0): any access) */
    FASTMM_EVENT_BUFFER_UNDERRUN,         /* before the start of a live guarded block */
    FASTMM_EVENT_USE_AFTER_FREE,          /* into a freed guarded block waiting in the address quarantine */
} fastmm_event_type_t;

/* What the leak check found for the blocks of a loss record (Valgrind memcheck's terms). */
typedef enum fastmm_leak_kind {
    FASTMM_LEAK_NONE,            /* not a loss record (every other event, and LEAK_SUMMARY) */
    FASTMM_LEAK_DEFINITELY_LOST, /* no pointer to the block anywhere */
    FASTMM_LEAK_INDIRECTLY_LOST, /* pointed to only from lost blocks (e.g. the rest of a lost list) */
    FASTMM_LEAK_POSSIBLY_LOST,   /* only pointers into its middle were found */
    FASTMM_LEAK_STILL_REACHABLE, /* a pointer to its start remains (FASTMM5_REPORT_LEAKS=all) */
} fastmm_leak_kind_t;

typedef struct fastmm_event {
    fastmm_event_type_t type;
    const void *block;                  /* the user pointer concerned, or NULL; LEAK_DETAIL: one
                                         * block of the loss record */
    size_t size;                        /* its requested size where known; LEAK_DETAIL: the bytes of
                                         * all the record's blocks; LEAK_SUMMARY: the bytes lost */
    uint32_t allocation_number;         /* debug blocks; 0 otherwise */
    const char *text;                   /* the full report, as written to the log */
    fastmm_leak_kind_t leak_kind;       /* LEAK_DETAIL: the kind of the record's blocks */
    size_t leak_blocks;                 /* LEAK_DETAIL: how many blocks the record groups */
} fastmm_event_t;

/* Called after the report is written, before the error action. It runs inside the allocator:
 * it must not allocate, free, or call back into libfastmm5. */
typedef void (*fastmm_event_handler_t)(const fastmm_event_t *event, void *user);
FASTMM_API void fastmm_set_event_handler(fastmm_event_handler_t handler, void *user); /* NULL restores the default */
FASTMM_API bool fastmm_set_event_log(const char *path);                              /* NULL: standard error only */

typedef enum { FASTMM_ON_ERROR_ABORT, FASTMM_ON_ERROR_CONTINUE } fastmm_error_action_t;
FASTMM_API void fastmm_set_error_action(fastmm_error_action_t action);
FASTMM_API fastmm_error_action_t fastmm_error_action(void);

/* ===================================================================================== */
/* 4. Leaks (fixed).                                                                      */
/* ===================================================================================== */

FASTMM_API bool fastmm_leak_register(const void *p);      /* expected leak: not reported */
FASTMM_API bool fastmm_leak_unregister(const void *p);
/* The leak check, as Valgrind's memcheck does it: stops the other threads, scans the roots (the
 * writable data of every loaded object, every thread's stack, registers and TLS) and then the
 * blocks reached, and classifies every live block as definitely, indirectly or possibly lost,
 * or still reachable (fastmm_leak_kind_t). Reports one FASTMM_EVENT_LEAK_DETAIL per loss record
 * (blocks of the same kind and allocation stack in debug mode, of the same kind and size
 * otherwise; the still-reachable ones only with FASTMM5_REPORT_LEAKS=all), smallest first, then a
 * FASTMM_EVENT_LEAK_SUMMARY; nothing when nothing is lost. Registered blocks (and what they reach)
 * and records matching FASTMM5_SUPPRESSIONS are not reported. Returns how many lost blocks were
 * reported. See fastmm5(7), "Leak checking". */
FASTMM_API size_t fastmm_leak_check(void);
/* At exit with FASTMM5_REPORT_LEAKS=1 (or =all: still-reachable records too on standard
 * error); FASTMM5_LEAK_EXIT_CODE=N: exit status N when a block is definitely lost;
 * FASTMM5_SUPPRESSIONS=path: a file of frame patterns ("fun:name*", "obj:libfoo*", or a bare
 * pattern for either) whose loss records are counted as suppressed, not reported. */

/* ===================================================================================== */
/* 5. Introspection (fixed).                                                              */
/* ===================================================================================== */

typedef struct fastmm_usage {
    size_t allocated_bytes;   /* usable bytes of live blocks */
    size_t overhead_bytes;    /* OS memory held minus allocated_bytes */
    double efficiency_percent;
} fastmm_usage_t;
FASTMM_API void fastmm_get_usage(fastmm_usage_t *usage);
FASTMM_API size_t fastmm_os_memory(void);
FASTMM_API bool fastmm_process_pending_frees(void);

/* Thread-contention counters: times every arena for a request was locked and the thread
 * had to yield (FastMM_SmallBlockThreadContentionCount and its two siblings). */
typedef struct fastmm_contention {
    uint64_t small;
    uint64_t medium;
    uint64_t large;
} fastmm_contention_t;
FASTMM_API void fastmm_get_contention(fastmm_contention_t *out);

/* Writes the usage summary (the FASTMM5_STATS=1 report) to a file descriptor. */
FASTMM_API void fastmm_write_usage_report(int fd);

/* ===================================================================================== */
/* 5b. Heap walk, per-class state, state log, JSON (lib/walk.c).                 */
/* ===================================================================================== */

/* Block types, also used as bits of fastmm_walk_options_t.types (FastMM5's
 * TFastMM_WalkAllocatedBlocksBlockType). The spans are records of their own: a MEDIUM_SPAN is an
 * OS mapping that holds medium blocks (its blocks follow its record), a SMALL_SPAN is a medium
 * block that holds the small blocks of one class (its blocks follow its record). */
typedef enum fastmm_block_type {
    FASTMM_BLOCK_SMALL = 0x01,
    FASTMM_BLOCK_MEDIUM = 0x02,
    FASTMM_BLOCK_LARGE = 0x04,
    FASTMM_BLOCK_SMALL_SPAN = 0x08,
    FASTMM_BLOCK_MEDIUM_SPAN = 0x10,
} fastmm_block_type_t;
#define FASTMM_BLOCK_ALL_TYPES 0x1fu

/* One record per block (FastMM5's TFastMM_WalkAllocatedBlocks_BlockInfo). */
typedef struct fastmm_block_info {
    const void *address;        /* the user pointer; for a debug block the pointer past its 64-byte
                                 * debug header (what malloc returned); a span's start */
    size_t usable_size;         /* usable bytes; a debug block: its requested size */
    size_t block_size;          /* bytes the block occupies, headers included (a debug block: the
                                 * underlying block); a span: its size */
    fastmm_block_type_t type;
    bool free;                  /* free; also a block waiting in a thread cache or a pending-free
                                 * list (FastMM5 counts pending frees as used, libfastmm5 counts
                                 * cached and pending blocks as free) */
    bool debug;                 /* allocated in debug mode: the fields below are filled in */
    unsigned arena;
    size_t span_unused_bytes;   /* spans: bytes not yet handed out by the sequential feed */
    size_t small_block_size;    /* small blocks and small spans: the class's block size */
    /* Debug blocks only (0 / NULL otherwise): */
    uint32_t allocation_number;
    uint32_t allocation_group;  /* non-debug blocks are group 0 */
    size_t requested_size;
    uint32_t allocated_by_thread;  /* Linux thread id (gettid) */
    uint32_t freed_by_thread;      /* free debug blocks */
    const uintptr_t *allocation_stack; /* stack_depth return addresses (0 for unused entries) */
    const uintptr_t *free_stack;       /* free debug blocks; NULL otherwise */
    unsigned stack_depth;
} fastmm_block_info_t;

/* Called once per block that passes the filters. It runs while the block's arena is locked:
 * it must not allocate, free, or call back into libfastmm5 (copy what it needs). */
typedef void (*fastmm_walk_callback_t)(const fastmm_block_info_t *block, void *user);

typedef struct fastmm_walk_options {
    unsigned types;             /* FASTMM_BLOCK_* bits; 0 means all types */
    bool used_only;             /* skip free blocks (FastMM5's default: true) */
    uint32_t min_group;         /* allocation-group range; non-debug blocks are group 0, and */
    uint32_t max_group;         /* span records are only reported while min_group is 0 */
    unsigned lock_timeout_ms;   /* how long to wait for each busy arena or span (1000) */
} fastmm_walk_options_t;
/* The defaults (options == NULL): every type, used blocks only, every group, 1 second. */
#define FASTMM_WALK_OPTIONS_INIT {0u, true, 0u, UINT32_MAX, 1000u}

/* Calls back for every block of the heap: large blocks first, then each medium span followed by
 * its blocks (small spans followed by their small blocks). Safe while other threads allocate
 * and free (they wait for the arena being walked). Returns false if some arena or span could
 * not be locked within the timeout and was skipped (a small span whose lock timed out is
 * reported as a plain medium block). */
FASTMM_API bool fastmm_walk_blocks(fastmm_walk_callback_t callback, void *user, const fastmm_walk_options_t *options);

/* Per-size-class state (FastMM5's TFastMM_MemoryManagerState). Blocks in thread caches and
 * pending-free lists count as not in use here (FastMM5 counts pending frees as used). */
#define FASTMM_MAX_SMALL_CLASSES 64
typedef struct fastmm_small_class_state {
    size_t block_size;          /* the class's block size, its 2-byte header included */
    size_t usable_size;         /* block_size - 2 */
    size_t blocks_in_use;
    size_t reserved_bytes;      /* sum of the sizes of this class's spans */
} fastmm_small_class_state_t;
typedef struct fastmm_kind_state {
    size_t blocks_in_use;
    size_t bytes_in_use;        /* usable bytes */
    size_t reserved_bytes;      /* medium: medium spans minus the small spans in them; large: mapped */
} fastmm_kind_state_t;
typedef struct fastmm_state {
    unsigned small_class_count; /* 51 on 64-bit, 61 on 32-bit; sorted by block size */
    fastmm_small_class_state_t small[FASTMM_MAX_SMALL_CLASSES];
    fastmm_kind_state_t medium;
    fastmm_kind_state_t large;
    bool complete;              /* false if some arena was skipped on the lock timeout */
} fastmm_state_t;
/* Fills *state from one walk of the heap; returns state->complete. */
FASTMM_API bool fastmm_get_state(fastmm_state_t *state);

/* FastMM5's LogStateToFile: truncates `path` and writes the usage summary, then the used blocks
 * grouped by block kind and usable size, sorted by total bytes (descending). False if the file
 * cannot be written. */
FASTMM_API bool fastmm_log_state(const char *path);

/* Writes one JSON object on one line to a file descriptor; FASTMM5_STATS=json writes it at
 * exit (tools/fastmm5-stats prints it as a table). Members: library, version, upstream_version,
 * pid; usage {allocated_bytes, overhead_bytes, efficiency_percent, os_memory_bytes,
 * os_memory_peak_bytes}; state {complete, small_classes [{block_size, usable_size,
 * blocks_in_use, reserved_bytes}...], medium and large {blocks_in_use, bytes_in_use,
 * reserved_bytes}} (fastmm_get_state); contention {small, medium, large}; options {strategy,
 * medium_span_bytes, memory_limit_bytes, min_alignment, debug_mode, debug_options, stack_depth,
 * on_error, kernels, report_leaks, stats}. Members may be added, never removed. */
FASTMM_API void fastmm_write_json(int fd);

/* ===================================================================================== */
/* 6. Tuning (lib/tuning.c). Each is also settable through FASTMM5_* variables.   */
/* ===================================================================================== */

/* FastMM5's optimization strategy: medium spans of 4 MiB (speed), 3 MiB (balanced, default) or
 * 1.5 MiB (low memory, which also gives every empty medium span back to the OS at once, and every
 * freed large block's mapping, where the others keep a few for reuse). A switch applies to the
 * spans created after it. FASTMM5_STRATEGY=speed|balanced|low-memory. */
typedef enum fastmm_strategy {
    FASTMM_STRATEGY_SPEED,
    FASTMM_STRATEGY_BALANCED,
    FASTMM_STRATEGY_LOW_MEMORY,
} fastmm_strategy_t;
FASTMM_API bool fastmm_set_strategy(fastmm_strategy_t strategy); /* false for an unknown value */
FASTMM_API fastmm_strategy_t fastmm_strategy(void);

/* Memory usage limit on the OS memory the heap holds (fastmm_os_memory), 0 = unlimited (the
 * default). The first time it is hit FastMM5's grace amount (32 MiB) is added to it once, so
 * that the program can still shut down; fastmm_memory_limit() then reports the raised value.
 * Allocations beyond it fail with NULL and errno ENOMEM. Setting a limit re-arms the grace.
 * FASTMM5_MEMORY_LIMIT=<bytes>[K|M|G]. */
FASTMM_API void fastmm_set_memory_limit(size_t bytes);
FASTMM_API size_t fastmm_memory_limit(void);

/* Nested minimum alignment (FastMM5's EnterMinimumAddressAlignment): while any request for an
 * alignment is active, every new block is aligned to the coarsest one requested. 8, 16, 32 or
 * 64; medium and large blocks are always 64-byte aligned, so only the small classes used
 * change. enter/exit return false for another value (or an exit without its enter).
 * FASTMM5_MIN_ALIGNMENT=8|16|32|64 enters one level at start-up. */
FASTMM_API bool fastmm_alignment_enter(unsigned alignment);
FASTMM_API bool fastmm_alignment_exit(unsigned alignment);
FASTMM_API unsigned fastmm_alignment(void); /* the alignment in force (FASTMM_MIN_ALIGNMENT at least) */

#ifdef __cplusplus
}
#endif

#endif /* FASTMM5_H */
