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
 * under Valgrind, as Valgrind's own allocator does); a freed small or large block is wholly
 * inaccessible, so a read after free is reported at any offset: the allocator opens the
 * free-list link in its first word only around its own reads and writes of it (fm_link_get,
 * fm_link_set). A freed medium block keeps its bin links and boundary tag (its first 16 and
 * last 4 bytes; a decay stamp after the links in big blocks) defined, which the bins, merging
 * and decay read. Memory the allocator reuses for its own structures is made defined first.
 */
#ifndef FM_TRACK_H
#define FM_TRACK_H

#include "base.h"

extern bool fm_track_on; /* set at start-up: built with Valgrind support and running under it */

/* slack: FASTMM5_VALGRIND_SLACK=usable (blocks are their usable size for memcheck). */
void fm_track_init(bool slack);
void fm_track_alloc_slow(void *p, size_t requested, size_t usable, bool zeroed);
void fm_track_free_slow(void *p, size_t usable, bool medium, bool keep_defined);
void fm_track_resize_slow(void *p, size_t new_requested, size_t usable);
void fm_track_internal_slow(void *p, size_t n);
size_t fm_track_requested_slow(const void *p, size_t usable);
void fm_track_quiet_slow(bool quiet);
void fm_track_fork_lock(void);
void fm_track_fork_unlock(void);
void *fm_track_link_get_slow(void *block);
void fm_track_link_set_slow(void *block, void *next);

/* The free-list link in the first word of a free block: every read and write of it by the
 * allocator goes through these two. Under memcheck a link that is inaccessible (a freed small
 * or large block) is opened for the access and closed again; one that is accessible (a medium
 * or debug block, whose freed contents stay defined, or memory never handed out) is left so. */
FM_INLINE void *fm_link_get(void *block)
{
    if (FM_UNLIKELY(fm_track_on))
        return fm_track_link_get_slow(block);
    return *(void **)block;
}
FM_INLINE void fm_link_set(void *block, void *next)
{
    if (FM_UNLIKELY(fm_track_on))
        fm_track_link_set_slow(block, next);
    else
        *(void **)block = next;
}

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
