/*
 * track.h - tells Valgrind's memcheck where libfastmm5's blocks begin and end, so that memcheck,
 * running our allocator (valgrind --soname-synonyms=somalloc=nouserintercepts), reports a
 * program's invalid accesses, reads after free, uninitialised reads and leaks against our blocks.
 *
 * All of it compiles to nothing without --enable-valgrind, and costs one predictable branch on
 * a global flag when built in but not running under Valgrind. No #ifdef appears in allocator code:
 * it calls these functions and fm_track_on.
 *
 * What memcheck sees: a block is [p, p + requested size); its slack up to the usable size is
 * inaccessible (so a one-byte overrun is reported, and usable_size() answers the requested size
 * under Valgrind, as Valgrind's own allocator does); a freed block is inaccessible except its
 * first 16 bytes and, for medium blocks, the 4-byte boundary tag at its end, which the allocator
 * itself uses. Memory the allocator reuses for its own structures is made defined first.
 */
#ifndef FM_TRACK_H
#define FM_TRACK_H

#include "base.h"

extern bool fm_track_on; /* set at start-up: built with Valgrind support and running under it */

void fm_track_init(void);
void fm_track_alloc_slow(void *p, size_t requested, size_t usable, bool zeroed);
void fm_track_free_slow(void *p, size_t usable, bool medium, bool keep_defined);
void fm_track_resize_slow(void *p, size_t new_requested, size_t usable);
void fm_track_internal_slow(void *p, size_t n);
size_t fm_track_requested_slow(const void *p, size_t usable);
void fm_track_quiet_slow(bool quiet);
void fm_track_fork_lock(void);
void fm_track_fork_unlock(void);

/* Around the allocator's reads of memory next to a pointer it was given, to find out whether it
 * is a block at all: for a bad pointer those bytes can be another block's inaccessible slack,
 * and reading them there is the allocator's business, not a program error. */
FM_INLINE void fm_track_quiet(bool quiet)
{
    if (FM_UNLIKELY(fm_track_on))
        fm_track_quiet_slow(quiet);
}

FM_INLINE void fm_track_alloc(void *p, size_t requested, size_t usable, bool zeroed)
{
    if (FM_UNLIKELY(fm_track_on) && p != NULL)
        fm_track_alloc_slow(p, requested, usable, zeroed);
}
/* Before the allocator writes its links into the block. keep_defined: debug blocks, whose
 * freed contents the debug checks read. */
FM_INLINE void fm_track_free(void *p, size_t usable, bool medium, bool keep_defined)
{
    if (FM_UNLIKELY(fm_track_on))
        fm_track_free_slow(p, usable, medium, keep_defined);
}
FM_INLINE void fm_track_resize(void *p, size_t new_requested, size_t usable)
{
    if (FM_UNLIKELY(fm_track_on))
        fm_track_resize_slow(p, new_requested, usable);
}
/* Bytes the allocator is about to use for its own structures (headers, spans). */
FM_INLINE void fm_track_internal(void *p, size_t n)
{
    if (FM_UNLIKELY(fm_track_on))
        fm_track_internal_slow(p, n);
}
/* usable_size() under Valgrind: the requested size. */
FM_INLINE size_t fm_track_usable(const void *p, size_t usable)
{
    return FM_UNLIKELY(fm_track_on) ? fm_track_requested_slow(p, usable) : usable;
}

#endif
