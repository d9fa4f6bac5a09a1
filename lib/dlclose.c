/*
 * dlclose.c - dlclose, exported beside the allocation names so that the stack-trace capture
 * hears of every unload the program asks for: lib/unwind.c replays a thread's earlier walks,
 * and asking the dynamic loader at every replay whether an object went away would cost more
 * than the replay itself. The C library's dlclose does the work; this one only tells the
 * capture afterwards. Where the program's dlclose is another one (libfastmm5 loaded after the
 * C library, or another library that exports it too), the capture is not told to trust the
 * notes and asks the loader at every capture.
 */
#define _GNU_SOURCE 1 /* RTLD_NEXT */
#include "internal.h"

#include <dlfcn.h>

typedef int (*dlclose_fn)(void *);
static dlclose_fn next_dlclose;

static int fm_dlclose(void *handle)
{
    dlclose_fn next = fm_load_acquire(&next_dlclose);
    if (next == NULL) {
        next = (dlclose_fn)dlsym(RTLD_NEXT, "dlclose");
        if (next == NULL)
            return -1; /* no C library's dlclose behind this one: dlerror says why */
        fm_store_release(&next_dlclose, next);
    }
    int result = next(handle);
    fm_unwind_note_unload();
    return result;
}

FM_EXPORT int dlclose(void *handle) __attribute__((alias("fm_dlclose")));

/* Whether the program's calls reach fm_dlclose. dlclose is exported and may be interposed, so
 * its address here is read from the global offset table, as the dynamic loader resolved it for
 * the whole process: fm_dlclose's own address only if this definition won. */
__attribute__((constructor)) static void check_dlclose_is_ours(void)
{
    int (*volatile resolved)(void *) = dlclose;
    fm_unwind_trust_unload_notes(resolved == fm_dlclose);
}
