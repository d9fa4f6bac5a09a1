/*
 * fastmm5.h - the public interface of libfastmm5, FastMM5's memory manager for Linux.
 *
 * Link with `pkg-config --cflags --libs fastmm5`, or run any program on the library with
 * LD_PRELOAD=libfastmm5.so.1: the library also exports the C library's allocation names
 * (malloc, free, ...), so it becomes the process's allocator either way.
 *
 * Sections mirror doc/design.md and design/API.md. Names in sections 1-5 are a fixed contract.
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
    FASTMM_EVENT_HEADER_CORRUPTION,
    FASTMM_EVENT_FOOTER_CORRUPTION,     /* write past the end of a debug block */
    FASTMM_EVENT_MODIFIED_AFTER_FREE,
    FASTMM_EVENT_VIRTUAL_CALL_ON_FREED_OBJECT,
    FASTMM_EVENT_LEAK_DETAIL,
    FASTMM_EVENT_LEAK_SUMMARY,
} fastmm_event_type_t;

typedef struct fastmm_event {
    fastmm_event_type_t type;
    const void *block;                  /* the user pointer concerned, or NULL */
    size_t size;                        /* its requested size where known */
    uint32_t allocation_number;         /* debug blocks; 0 otherwise */
    const char *text;                   /* the full report, as written to the log */
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
/* Reports every live block that is not a registered leak (debug blocks with their allocation
 * trace), then a summary grouped by size; returns how many were reported. */
FASTMM_API size_t fastmm_leak_check(void);

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

#ifdef __cplusplus
}
#endif

#endif /* FASTMM5_H */
