/*
 * os.h - the operating-system contract. Everything the allocator needs from the kernel goes
 * through these calls, none of which allocates: os_linux.c is the one implementation.
 */
#ifndef FM_OS_H
#define FM_OS_H

#include "base.h"

/*
 * Every region the allocator maps is aligned to and a multiple of FM_OS_CHUNK, so that one
 * entry of the ownership map (pagemap.c) never has to describe two regions.
 */
#define FM_OS_CHUNK_SHIFT 16
#define FM_OS_CHUNK ((size_t)1 << FM_OS_CHUNK_SHIFT)

void *fm_os_map(size_t size);                     /* chunk-aligned, zeroed; NULL on failure */
void fm_os_unmap(void *p, size_t size);
/* The allocator's own tables (the ownership map, thread caches, size records): page-aligned,
 * zeroed, between two no-access pages. A program that runs off the end of a block next to them,
 * or maps over the pages around a block (glibc's tst-free-errno does), hits a fence, not them. */
void *fm_os_map_fenced(size_t size);
void fm_os_unmap_fenced(void *p, size_t size);
bool fm_os_grow_in_place(void *p, size_t old_size, size_t new_size);
/* Page moves (mremap): reserve a chunk-aligned target, then move onto it, or drop it. */
void *fm_os_move_target(size_t old_size, size_t new_size);
void fm_os_drop_move_target(void *target, size_t old_size, size_t new_size);
bool fm_os_move_onto(void *p, size_t old_size, size_t new_size, void *target);
void fm_os_trim(void *p, size_t size);            /* drop the pages' contents (MADV_DONTNEED) */
/* Page-aligned: read-write, or no access (guard.c); false when the kernel refuses (mappings). */
bool fm_os_protect(void *p, size_t size, bool accessible);
/* Page-aligned: the pages replaced by fresh no-access ones, their contents dropped (guard.c). */
void fm_os_discard_no_access(void *p, size_t size);
size_t fm_os_page_size(void);
size_t fm_os_mapped_bytes(void);                  /* what fastmm_os_memory() reports */
size_t fm_os_peak_mapped_bytes(void);
/* 0 = unlimited. Over the limit a mapping fails; the first such refusal earns a 32 MiB grace
 * amount, granted by fm_os_grant_grace() where the allocator returns NULL to the program. */
void fm_os_set_limit(size_t limit);
void fm_os_grant_grace(void);
/* Inline: the medium free path asks it every time (a cached block would pin its span). */
extern size_t fm_os_usage_limit;
FM_INLINE size_t fm_os_limit(void) { return __atomic_load_n(&fm_os_usage_limit, __ATOMIC_RELAXED); }

void fm_os_write_all(int fd, const char *buf, size_t len);
int fm_os_open_append(const char *path);
void fm_os_close(int fd);
uint32_t fm_os_thread_id(void);
void fm_os_forget_thread_id(void);
uint64_t fm_os_time_ms(void);
uint64_t fm_os_coarse_time_ms(void);            /* cheaper, within a scheduler tick */
/* A fast, monotonic-enough tick count for rough rate estimates (the thread caches' widths): the
 * CPU's time-stamp counter where it has one, else nanoseconds. fm_os_ticks_per_50us: about
 * 50 microseconds' worth. */
uint64_t fm_os_ticks(void);
extern uint32_t fm_os_ticks_per_50us;
void fm_os_yield(void);
const char *fm_os_getenv(const char *name);     /* no allocation; NULL in set-uid programs */
uintptr_t fm_os_random_word(void);              /* unpredictable per process, no system call */

#endif
