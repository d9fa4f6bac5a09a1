/*
 * operators.c - C++'s replaceable global allocation functions (C++17: operator new and new[],
 * plain, nothrow, aligned and both; operator delete and delete[], plain, sized, nothrow, aligned
 * and their combinations), written in C under their Itanium C++ ABI names so that the library
 * stays a C library: a C++ program linked with -lfastmm5, or run with it preloaded, allocates
 * its objects here, and debug mode learns which family allocated each block.
 *
 * size_t mangles as `m` where it is unsigned long (LP64) and as `j` where it is unsigned int
 * (i386); std::align_val_t (an enum class over size_t) and std::nothrow_t mangle by name.
 * lib/exported-symbols.txt lists both spellings, each tagged with its pointer size.
 *
 * A failed operator new runs the standard's loop: call the new-handler while there is one, then
 * throw std::bad_alloc. Both are libstdc++'s, looked up when first needed with dlsym: a program
 * that calls operator new has the C++ runtime loaded, and a C program never gets here, so
 * libfastmm5 has no dependency on libstdc++. Built with -fexceptions: a new-handler may throw,
 * and the exception must unwind through these frames.
 */
#define _GNU_SOURCE 1 /* RTLD_DEFAULT */
#include "internal.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>

#if !defined(SIZE_MAX) || !defined(UINT_MAX)
#error "SIZE_MAX and UINT_MAX are needed to spell size_t in the mangled names"
#elif SIZE_MAX == UINT_MAX
#define SZ "j"
#else
#define SZ "m"
#endif

typedef void (*new_handler_t)(void);

static void *lookup(const char *name)
{
    return dlsym(RTLD_DEFAULT, name);
}

/* std::get_new_handler() (C++11), or NULL where the C++ runtime is not loaded. */
static new_handler_t current_new_handler(void)
{
    new_handler_t (*get)(void) = (new_handler_t(*)(void))lookup("_ZSt15get_new_handlerv");
    return get != NULL ? get() : NULL;
}

static __attribute__((noreturn)) void throw_bad_alloc(size_t size)
{
    void (*throw_it)(void) = (void (*)(void))lookup("_ZSt17__throw_bad_allocv"); /* std::__throw_bad_alloc() */
    if (throw_it != NULL)
        throw_it();
    fm_report_t r;
    fm_report_begin(&r);
    fm_report_str(&r, "libfastmm5: operator new could not allocate ");
    fm_report_dec(&r, size);
    fm_report_str(&r, " bytes and must throw std::bad_alloc, but the C++ runtime (libstdc++) is not loaded: "
                      "aborting\n");
    fm_os_write_all(2, r.buf, r.len);
    fm_report_end(&r);
    abort();
}

/* In debug mode an aligned new up to FM_DEBUG_MAX_ALIGN gets a debug block too, so that the
 * alignment its delete passes can be checked against the one it recorded. */
static void *allocate(size_t size, size_t alignment)
{
    if (alignment == 0)
        return fm_entry_malloc(size);
    if (FM_UNLIKELY(fm_load_relaxed(&fm_debug_on)) && alignment <= FM_DEBUG_MAX_ALIGN && fm_is_pow2(alignment))
        return fm_debug_alloc_aligned(size, alignment);
    return fastmm_aligned_alloc(alignment, size);
}

/* The standard's loop after a failed allocation: [new.delete.single]. */
static FM_NOINLINE void *retry_new(size_t size, size_t alignment, bool nothrow)
{
    for (;;) {
        new_handler_t handler = current_new_handler();
        if (handler == NULL) {
            if (nothrow)
                return NULL;
            throw_bad_alloc(size);
        }
        handler();
        void *p = allocate(size, alignment);
        if (p != NULL)
            return p;
    }
}

FM_INLINE void *new_block(size_t size, size_t alignment, unsigned family, bool nothrow)
{
    void *p = allocate(size, alignment);
    if (FM_UNLIKELY(p == NULL))
        p = retry_new(size, alignment, nothrow);
    /* fm_debug_used, not fm_debug_on: a block allocated just before another thread leaves
     * debug mode is still a debug block, and must not keep the mark of malloc */
    if (FM_UNLIKELY(fm_load_relaxed(&fm_debug_used)) && p != NULL && !fm_guard_owns(p))
        fm_debug_set_family(p, family, alignment);
    return p;
}

/* Everything operator new does beyond malloc's frameless path (fm_malloc_cached), out of line
 * so that the plain operators need no stack frame when the thread's cache serves them: such a
 * block is plain (that path is off in debug mode), so it has no family to record. */
static FM_NOINLINE void *new_full(size_t size, unsigned family, bool nothrow)
{
    return new_block(size, 0, family, nothrow);
}

FM_INLINE void *new_plain(size_t size, unsigned family, bool nothrow)
{
    void *p = fm_malloc_cached(size);
    if (FM_LIKELY(p != NULL))
        return p;
    return new_full(size, family, nothrow);
}

#define ALIGN_T "St11align_val_t"
#define NOTHROW_T "RKSt9nothrow_t"

FM_EXPORT void *fm_op_new(size_t size) __asm__("_Znw" SZ);
FM_EXPORT void *fm_op_new_array(size_t size) __asm__("_Zna" SZ);
FM_EXPORT void *fm_op_new_nothrow(size_t size, const void *tag) __asm__("_Znw" SZ NOTHROW_T);
FM_EXPORT void *fm_op_new_array_nothrow(size_t size, const void *tag) __asm__("_Zna" SZ NOTHROW_T);
FM_EXPORT void *fm_op_new_aligned(size_t size, size_t alignment) __asm__("_Znw" SZ ALIGN_T);
FM_EXPORT void *fm_op_new_array_aligned(size_t size, size_t alignment) __asm__("_Zna" SZ ALIGN_T);
FM_EXPORT void *fm_op_new_aligned_nothrow(size_t size, size_t alignment, const void *tag)
    __asm__("_Znw" SZ ALIGN_T NOTHROW_T);
FM_EXPORT void *fm_op_new_array_aligned_nothrow(size_t size, size_t alignment, const void *tag)
    __asm__("_Zna" SZ ALIGN_T NOTHROW_T);

void *fm_op_new(size_t size) { return new_plain(size, FM_FAMILY_NEW, false); }
void *fm_op_new_array(size_t size) { return new_plain(size, FM_FAMILY_NEW_ARRAY, false); }
void *fm_op_new_nothrow(size_t size, const void *tag)
{
    (void)tag;
    return new_plain(size, FM_FAMILY_NEW, true);
}
void *fm_op_new_array_nothrow(size_t size, const void *tag)
{
    (void)tag;
    return new_plain(size, FM_FAMILY_NEW_ARRAY, true);
}
void *fm_op_new_aligned(size_t size, size_t alignment) { return new_block(size, alignment, FM_FAMILY_NEW, false); }
void *fm_op_new_array_aligned(size_t size, size_t alignment)
{
    return new_block(size, alignment, FM_FAMILY_NEW_ARRAY, false);
}
void *fm_op_new_aligned_nothrow(size_t size, size_t alignment, const void *tag)
{
    (void)tag;
    return new_block(size, alignment, FM_FAMILY_NEW, true);
}
void *fm_op_new_array_aligned_nothrow(size_t size, size_t alignment, const void *tag)
{
    (void)tag;
    return new_block(size, alignment, FM_FAMILY_NEW_ARRAY, true);
}

/* Every operator delete: fm_delete and its forms for each family (api.c) free as free() does,
 * after checking a sized delete's size and an aligned delete's alignment against the block (and,
 * for a debug block, the family that allocated it). */
FM_EXPORT void fm_op_delete(void *p) __asm__("_ZdlPv");
FM_EXPORT void fm_op_delete_array(void *p) __asm__("_ZdaPv");
FM_EXPORT void fm_op_delete_sized(void *p, size_t size) __asm__("_ZdlPv" SZ);
FM_EXPORT void fm_op_delete_array_sized(void *p, size_t size) __asm__("_ZdaPv" SZ);
FM_EXPORT void fm_op_delete_nothrow(void *p, const void *tag) __asm__("_ZdlPv" NOTHROW_T);
FM_EXPORT void fm_op_delete_array_nothrow(void *p, const void *tag) __asm__("_ZdaPv" NOTHROW_T);
FM_EXPORT void fm_op_delete_aligned(void *p, size_t alignment) __asm__("_ZdlPv" ALIGN_T);
FM_EXPORT void fm_op_delete_array_aligned(void *p, size_t alignment) __asm__("_ZdaPv" ALIGN_T);
FM_EXPORT void fm_op_delete_sized_aligned(void *p, size_t size, size_t alignment) __asm__("_ZdlPv" SZ ALIGN_T);
FM_EXPORT void fm_op_delete_array_sized_aligned(void *p, size_t size, size_t alignment)
    __asm__("_ZdaPv" SZ ALIGN_T);
FM_EXPORT void fm_op_delete_aligned_nothrow(void *p, size_t alignment, const void *tag)
    __asm__("_ZdlPv" ALIGN_T NOTHROW_T);
FM_EXPORT void fm_op_delete_array_aligned_nothrow(void *p, size_t alignment, const void *tag)
    __asm__("_ZdaPv" ALIGN_T NOTHROW_T);

void fm_op_delete(void *p) { fm_delete_new(p); }
void fm_op_delete_array(void *p) { fm_delete_new_array(p); }
void fm_op_delete_sized(void *p, size_t size) { fm_delete_new_sized(p, size); }
void fm_op_delete_array_sized(void *p, size_t size)
{
    fm_delete_new_array_sized(p, size);
}
void fm_op_delete_nothrow(void *p, const void *tag)
{
    (void)tag;
    fm_delete_new(p);
}
void fm_op_delete_array_nothrow(void *p, const void *tag)
{
    (void)tag;
    fm_delete_new_array(p);
}
void fm_op_delete_aligned(void *p, size_t alignment) { fm_delete(p, 0, alignment, FM_FAMILY_NEW); }
void fm_op_delete_array_aligned(void *p, size_t alignment) { fm_delete(p, 0, alignment, FM_FAMILY_NEW_ARRAY); }
void fm_op_delete_sized_aligned(void *p, size_t size, size_t alignment)
{
    fm_delete(p, size, alignment, FM_FAMILY_NEW | FM_DELETE_SIZED);
}
void fm_op_delete_array_sized_aligned(void *p, size_t size, size_t alignment)
{
    fm_delete(p, size, alignment, FM_FAMILY_NEW_ARRAY | FM_DELETE_SIZED);
}
void fm_op_delete_aligned_nothrow(void *p, size_t alignment, const void *tag)
{
    (void)tag;
    fm_delete(p, 0, alignment, FM_FAMILY_NEW);
}
void fm_op_delete_array_aligned_nothrow(void *p, size_t alignment, const void *tag)
{
    (void)tag;
    fm_delete(p, 0, alignment, FM_FAMILY_NEW_ARRAY);
}
