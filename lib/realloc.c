/*
 * realloc.c - FastMM5's resize policy across the three block kinds (doc/fastmm5-facts.md section 3).
 *
 *   small   shrink in place while 4*new + 64 >= old; grow by moving to max(2*old + 32, new)
 *   medium  grow into a free neighbour, else move, to max(old + old/4, new); shrink only below
 *           half: in place down to 720 bytes, below that move to a small block
 *   large   grow (mremap, in place or page move) to max(old + old/4, new); shrink in place down
 *           to half, below that move
 *
 * The over-allocation on growth is what makes repeated appends cheap. A failed resize leaves
 * the old block untouched and returns NULL with errno ENOMEM.
 */
#include "internal.h"

#include <errno.h>
#include <string.h>

/* request: the size asked of the allocator (inflated on growth); size: what the caller asked. */
static void *move_block(void *p, fm_block_ref_t ref, size_t request, size_t copy, size_t size)
{
    fm_free_deferred_now(); /* a block that waits for its checks may be the room this move needs */
    void *q = fm_track_new(fm_alloc(request), size, false);
    if (q == NULL)
        return NULL;
    size_t old_usable = fm_block_usable(p, ref);
    size_t known = fm_track_usable(p, old_usable); /* under Valgrind: only the requested bytes */
    memcpy(q, p, copy < known ? copy : known);
    if (ref.kind == FM_BLOCK_LARGE) {
        fm_track_free(p, old_usable, false, false);
        fm_free_classified(p, ref);
    } else {
        fm_free_at_once(p); /* into this thread's cache when it takes it, as a free() would */
    }
    return q;
}

static void *in_place(void *p, fm_block_ref_t ref, size_t size)
{
    fm_track_resize(p, size, fm_block_usable(p, ref));
    return p;
}

static void *resize_small(void *p, fm_block_ref_t ref, size_t size)
{
    size_t old = fm_block_usable(p, ref);
    if (fm_small_resize_stays(old, size))
        return in_place(p, ref, size);
    return move_block(p, ref, fm_small_move_request(old, size), size < old ? size : old, size);
}

static void *resize_medium(void *p, fm_block_ref_t ref, size_t size)
{
    size_t old = fm_block_usable(p, ref);
    if (size > old) {
        size_t target = old + old / 4 > size ? old + old / 4 : size;
        if (size <= FM_MEDIUM_MAX_USER) {
            size_t want = target <= FM_MEDIUM_MAX_USER ? fm_align_up(target + FM_MEDIUM_HEADER, 64)
                                                       : fm_align_up(size + FM_MEDIUM_HEADER, 64);
            if (fm_medium_try_resize_in_place(p, fm_align_up(size + FM_MEDIUM_HEADER, 64), want))
                return in_place(p, ref, size);
        }
        return move_block(p, ref, target, old, size);
    }
    if (fm_resize_stays_within_half(old, size))
        return in_place(p, ref, size);
    if (size >= FM_MEDIUM_INPLACE_DOWNSIZE_LIMIT) {
        size_t keep = size < FM_MEDIUM_MIN_BLOCK - FM_MEDIUM_HEADER ? FM_MEDIUM_MIN_BLOCK - FM_MEDIUM_HEADER : size;
        size_t block = fm_align_up(keep + FM_MEDIUM_HEADER, 64);
        /* memcheck first, with the final size: afterwards the tail's header is allocator data */
        fm_track_resize(p, size, block - FM_MEDIUM_HEADER);
        fm_medium_shrink(p, block);
        return p;
    }
    return move_block(p, ref, size, size, size);
}

static void *resize_large(void *p, fm_block_ref_t ref, size_t size)
{
    size_t old = fm_block_usable(p, ref);
    fm_large_header_t *h = ref.owner;
    if (size > old) {
        size_t target = old + old / 4 > size ? old + old / 4 : size;
        if (fm_track_on) /* memcheck cannot follow mremap's page moves of a tracked block: copy */
            return move_block(p, ref, target, old, size);
        void *q = fm_large_resize(p, target);
        if (q == NULL && target != size)
            q = fm_large_resize(p, size); /* the 25% extra is a wish, not a need */
        if (q == NULL) {
            fm_os_grant_grace();
            errno = ENOMEM;
            return NULL;
        }
        fm_large_header_of(q)->user_size = size;
        return q;
    }
    if (fm_resize_stays_within_half(old, size)) {
        h->user_size = size;
        return in_place(p, ref, size);
    }
    return move_block(p, ref, size, size, size);
}

void *fm_realloc(void *p, size_t size)
{
    if (p == NULL && FM_UNLIKELY(fm_load_relaxed(&fm_guard_mode) != FM_GUARD_OFF))
        return fm_entry_malloc(size); /* guarding chooses */
    if (p == NULL) {
        fm_ensure_init();
        return fm_load_relaxed(&fm_debug_on) ? fm_debug_alloc(size, FM_DEBUG_FILL_ALLOCATED)
                                             : fm_track_new(fm_alloc(size), size, false);
    }
    return fm_realloc_classified(p, fm_block_classify(p), size);
}

/* Everything but realloc(NULL, n), for a pointer already classified (fastmm_realloc's inline
 * small-block check classifies it first and falls through to here). */
void *fm_realloc_classified(void *p, fm_block_ref_t ref, size_t size)
{
    if (ref.kind == FM_BLOCK_INVALID) /* a guarded block, a debug block, or reported */
        return fm_guard_owns(p) ? fm_guard_realloc(p, size) : fm_debug_realloc_or_report(p, ref, size);
    uint16_t flags = fm_flags_get(p);
    if (flags & (FM_FLAG_FREE | FM_FLAG_DEBUG_INFO)) {
        fm_event_invalid_pointer("realloc", p, flags & FM_FLAG_FREE ? "the block was already freed"
                                                                    : "it points 64 bytes before a debug block's user data");
        errno = EINVAL;
        return NULL;
    }
    if (size == 0) {
        /* glibc: realloc(p, 0) frees p and returns NULL */
        fm_track_free(p, fm_block_usable(p, ref), ref.kind == FM_BLOCK_MEDIUM, false);
        fm_free_classified(p, ref);
        return NULL;
    }
    if (size > (size_t)PTRDIFF_MAX) {
        errno = ENOMEM;
        return NULL;
    }
    if (fm_load_relaxed(&fm_debug_on))
        return fm_debug_realloc_plain(p, ref, size);
    switch (ref.kind) {
    case FM_BLOCK_SMALL:
        return resize_small(p, ref, size);
    case FM_BLOCK_MEDIUM:
        return resize_medium(p, ref, size);
    default:
        return resize_large(p, ref, size);
    }
}
