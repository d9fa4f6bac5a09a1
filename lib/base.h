/*
 * base.h - compiler attributes, bit helpers and target constants shared by every module.
 * Nothing here allocates or depends on another libfastmm5 header.
 */
#ifndef FM_BASE_H
#define FM_BASE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FM_LIKELY(x) __builtin_expect(!!(x), 1)
#define FM_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define FM_NOINLINE __attribute__((noinline))
#define FM_COLD __attribute__((cold, noinline))
#define FM_INLINE static inline __attribute__((always_inline))
/* Code in one of the seldom-used files (lib_libfastmm5_seldom_la_SOURCES in Makefile.am) that
 * every process runs: start-up, exit, fork. lib/seldom-text.ld leaves .text.startup with the hot
 * code, so the seldom-used code's own segment is never mapped in a process that only allocates
 * (a fault in text maps up to 64 KiB around it, within its mapping). */
#define FM_EVERY_PROCESS __attribute__((section(".text.startup")))
/* A function of a seldom-used file that monitoring loops poll (the counters): placed with the hot
 * code the same way, so that polling never maps the seldom-used segment. */
#define FM_POLLED FM_EVERY_PROCESS
#define FM_HIDDEN __attribute__((visibility("hidden")))
#define FM_EXPORT __attribute__((visibility("default")))
#define FM_CACHE_LINE 64
#define FM_CACHE_ALIGNED __attribute__((aligned(FM_CACHE_LINE)))
/* malloc's and free's entry points start a cache line: where their branches fall relative to the
 * lines then does not move with every change elsewhere in the library, and two builds' benchmarks
 * compare their code rather than where the linker put these paths. */
#define FM_ENTRY_ALIGNED __attribute__((aligned(FM_CACHE_LINE)))

/* True on targets with 64-bit pointers; FastMM5's geometry differs between the two. */
#define FM_IS64 (UINTPTR_MAX > 0xffffffffu)

/* glibc's guarantee: two pointers' worth of alignment (16 on 64-bit, 8 on 32-bit). */
#define FM_MIN_ALIGN (2 * sizeof(void *))

FM_INLINE uintptr_t fm_align_up(uintptr_t v, uintptr_t a) { return (v + a - 1) & ~(a - 1); }
FM_INLINE uintptr_t fm_align_down(uintptr_t v, uintptr_t a) { return v & ~(a - 1); }
FM_INLINE bool fm_is_pow2(size_t v) { return v != 0 && (v & (v - 1)) == 0; }
FM_INLINE unsigned fm_ctz32(uint32_t v) { return (unsigned)__builtin_ctz(v); }

#define FM_STATIC_ASSERT(cond, why) _Static_assert(cond, why)

#endif
