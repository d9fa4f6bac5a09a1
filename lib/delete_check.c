/*
 * delete_check.c - the checks behind C++'s operator delete that fm_delete (api.c) does not settle
 * in its inline path.
 *
 * A sized delete passes the size the program allocated; an aligned delete the alignment. Neither
 * is needed to free a block here, but a wrong one is a bug in the program (the wrong object
 * type, a mismatched new[]/delete, an aligned type deleted through a base pointer) that other
 * allocators turn into heap corruption, so it is reported. For a plain block the test is what
 * the block itself tells: the size must fit it and be one that its allocation could have been
 * served for; a debug block records the exact size, family and alignment (debug.c).
 */
#include "internal.h"

#include <errno.h>

/* The small class whose blocks a request of `size` bytes gets by size alone. */
static unsigned natural_class(size_t size)
{
    unsigned c = 0;
    while (c + 1 < FM_SMALL_CLASS_COUNT && (size_t)fm_small_class_sizes[c] - 2u < size)
        c++;
    return c;
}

/* Whether a small block of class `cls` can have been allocated for `size` bytes: its class by
 * size, or the first class above it whose blocks are aligned to some power of two up to 64 (an
 * aligned request, or a minimum alignment entered with fastmm_alignment_enter), or the twin of
 * either. */
static bool small_class_fits(unsigned cls, size_t size)
{
    if (cls >= FM_SMALL_CLASS_COUNT) /* a twin (layout.h): judged as the class of its size */
        cls = natural_class((size_t)fm_small_class_sizes[cls] - 2u);
    unsigned base = natural_class(size);
    if (cls == base)
        return true;
    for (size_t a = FM_MIN_ALIGN; a <= 64; a *= 2) {
        unsigned c = base;
        while (c + 1 < FM_SMALL_CLASS_COUNT && fm_small_class_sizes[c] % a != 0)
            c++;
        if (c == cls)
            return true;
    }
    return false;
}

static bool size_fits(const void *p, fm_block_ref_t ref, size_t size, size_t alignment)
{
    if (size > fm_block_usable(p, ref))
        return false;
    switch (ref.kind) {
    case FM_BLOCK_SMALL:
        return small_class_fits(((const fm_small_span_t *)ref.owner)->class_index, size);
    case FM_BLOCK_MEDIUM:
        return alignment > 64 || size > FM_SMALL_MAX_USER;
    case FM_BLOCK_LARGE:
        return alignment > 64 || size > FM_MEDIUM_MAX_USER || fm_load_relaxed(&fm_debug_on);
    default:
        return true;
    }
}

static const char *kind_name(fm_block_kind_t kind)
{
    return kind == FM_BLOCK_SMALL ? "small" : kind == FM_BLOCK_MEDIUM ? "medium" : "large";
}

static void report(fastmm_event_type_t type, const char *what, const void *p, fm_block_ref_t ref, size_t size,
                   size_t alignment, unsigned how)
{
    fm_report_t r;
    fm_report_begin(&r);
    fm_report_str(&r, "libfastmm5: ");
    fm_report_str(&r, what);
    fm_report_str(&r, "\nDetected by: operator delete");
    fm_report_str(&r, (how & FM_FAMILY_MASK) == FM_FAMILY_NEW_ARRAY ? "[]" : "");
    fm_report_str(&r, "(void*");
    if (how & FM_DELETE_SIZED) {
        fm_report_str(&r, ", size ");
        fm_report_dec(&r, size);
    }
    if (alignment != 0) {
        fm_report_str(&r, ", alignment ");
        fm_report_dec(&r, alignment);
    }
    fm_report_str(&r, "), thread ");
    fm_report_dec(&r, fm_os_thread_id());
    fm_report_str(&r, "\nBlock: ");
    fm_report_hex(&r, (uintptr_t)p);
    fm_report_str(&r, ", a ");
    fm_report_str(&r, kind_name(ref.kind));
    fm_report_str(&r, " block of ");
    fm_report_dec(&r, fm_block_usable(p, ref));
    fm_report_str(&r, " usable bytes. It is freed all the same.");
    fm_event_raise(type, p, 0, 0, &r);
}

void fm_delete_slow(void *p, size_t size, size_t alignment, unsigned how)
{
    int saved = errno;
    if (fm_guard_owns(p)) { /* before anything reads around p */
        fm_guard_free(p, "operator delete");
        errno = saved;
        return;
    }
    if (fm_debug_delete_block(p, size, alignment, how)) {
        errno = saved;
        return;
    }
    fm_block_ref_t ref = fm_block_classify(p);
    if (ref.kind != FM_BLOCK_INVALID && !(fm_flags_get(p) & (FM_FLAG_DEBUG_INFO | FM_FLAG_FREE))) {
        if (alignment != 0 && ((uintptr_t)p & (alignment - 1)) != 0)
            report(FASTMM_EVENT_MISMATCHED_DEALLOCATION,
                   "an aligned operator delete was given an alignment the block does not have", p, ref, size,
                   alignment, how);
        else if ((how & FM_DELETE_SIZED) && !size_fits(p, ref, size, alignment))
            report(FASTMM_EVENT_SIZED_DELETE_MISMATCH,
                   "a sized operator delete was given a size that does not fit the block", p, ref, size, alignment,
                   how);
    }
    errno = saved;
    fm_free_at_once(p);
}
