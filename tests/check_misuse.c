/*
 * check_misuse.c - C++'s operator new and delete as libfastmm5 exports them, the misuse they can
 * report, a damaged block header told apart from an invalid pointer, and debug mode's check of
 * every debug block at exit.
 *
 * The operators are called from C under their Itanium ABI names (size_t mangles as m on 64-bit
 * targets, j on 32-bit ones), so the suite needs no C++ compiler and runs on every CI target.
 * Reports are recorded by an event handler under FASTMM_ON_ERROR_CONTINUE, with standard error
 * sent to /dev/null meanwhile; what must happen in a process of its own (an abort, the exit
 * check) runs in a forked child whose standard error goes to a file.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check_suites.h"
#include "helpers.h"

#if SIZE_MAX == UINT_MAX
#define SZ "j"
#else
#define SZ "m"
#endif
#define ALIGN_T "St11align_val_t"
#define NOTHROW_T "RKSt9nothrow_t"

/* The nothrow_t argument is a reference to an empty object: any address does. */
static const char nothrow_tag;
#define NOTHROW ((const void *)&nothrow_tag)

extern void *op_new(size_t) __asm__("_Znw" SZ);
extern void *op_new_array(size_t) __asm__("_Zna" SZ);
extern void *op_new_nothrow(size_t, const void *) __asm__("_Znw" SZ NOTHROW_T);
extern void *op_new_array_nothrow(size_t, const void *) __asm__("_Zna" SZ NOTHROW_T);
extern void *op_new_aligned(size_t, size_t) __asm__("_Znw" SZ ALIGN_T);
extern void *op_new_array_aligned(size_t, size_t) __asm__("_Zna" SZ ALIGN_T);
extern void *op_new_aligned_nothrow(size_t, size_t, const void *) __asm__("_Znw" SZ ALIGN_T NOTHROW_T);
extern void *op_new_array_aligned_nothrow(size_t, size_t, const void *) __asm__("_Zna" SZ ALIGN_T NOTHROW_T);
extern void op_delete(void *) __asm__("_ZdlPv");
extern void op_delete_array(void *) __asm__("_ZdaPv");
extern void op_delete_sized(void *, size_t) __asm__("_ZdlPv" SZ);
extern void op_delete_array_sized(void *, size_t) __asm__("_ZdaPv" SZ);
extern void op_delete_nothrow(void *, const void *) __asm__("_ZdlPv" NOTHROW_T);
extern void op_delete_array_nothrow(void *, const void *) __asm__("_ZdaPv" NOTHROW_T);
extern void op_delete_aligned(void *, size_t) __asm__("_ZdlPv" ALIGN_T);
extern void op_delete_array_aligned(void *, size_t) __asm__("_ZdaPv" ALIGN_T);
extern void op_delete_sized_aligned(void *, size_t, size_t) __asm__("_ZdlPv" SZ ALIGN_T);
extern void op_delete_array_sized_aligned(void *, size_t, size_t) __asm__("_ZdaPv" SZ ALIGN_T);
extern void op_delete_aligned_nothrow(void *, size_t, const void *) __asm__("_ZdlPv" ALIGN_T NOTHROW_T);
extern void op_delete_array_aligned_nothrow(void *, size_t, const void *) __asm__("_ZdaPv" ALIGN_T NOTHROW_T);

/* ------------------------------------------------------------------------------------------ */
/* Event recorder and fixtures                                                                  */
/* ------------------------------------------------------------------------------------------ */

static void record_setup(void)
{
    ev_record();
    fastmm_set_error_action(FASTMM_ON_ERROR_CONTINUE);
    quiet_stderr();
}

static void record_teardown(void)
{
    restore_stderr();
    while (fastmm_debug_exit())
        ;
    fastmm_set_error_action(FASTMM_ON_ERROR_ABORT);
    fastmm_set_event_handler(NULL, NULL);
}

/* Exactly one event since `before`: this type, about this block, its report containing text. */
static void expect_event(size_t before, fastmm_event_type_t type, const void *block, const char *text,
                         const char *what)
{
    REQUIRE(evn() == before + 1, "%s: %zu events, expected one %s (first report: \"%.300s\")", what,
            evn() - before, event_name(type), ev_first_text());
    REQUIRE(ev_at(before).type == type, "%s: event %s, expected %s: \"%.600s\"", what, event_name(ev_at(before).type),
            event_name(type), ev_first_text());
    REQUIRE(ev_at(before).block == block, "%s: event about %p, expected %p", what, ev_at(before).block, block);
    REQUIRE(before != 0 || strstr(ev_first_text(), text) != NULL, "%s: the report lacks \"%s\": \"%.1500s\"", what, text,
            ev_first_text());
}

static void expect_none(size_t before, const char *what)
{
    REQUIRE(evn() == before, "%s: %zu unexpected event(s), the first %s: \"%.600s\"", what, evn() - before,
            event_name(ev_at(before).type), ev_first_text());
}

static unsigned char *check_new(void *p, size_t size, size_t alignment, const char *what)
{
    REQUIRE(p != NULL, "%s(%zu): NULL", what, size);
    REQUIRE(fastmm_usable_size(p) >= size, "%s(%zu): usable size %zu", what, size, fastmm_usable_size(p));
    REQUIRE(alignment == 0 || ((uintptr_t)p & (alignment - 1)) == 0, "%s(%zu, %zu): %p is misaligned", what, size,
            alignment, p);
    memset(p, 0x5a, size);
    return p;
}

/* ------------------------------------------------------------------------------------------ */
/* 1. The operators, used correctly: no report, in normal and in debug mode                     */
/* ------------------------------------------------------------------------------------------ */

static const size_t sizes[] = {0, 1, 15, 16, 17, 40, 100, 160, 176, 1000, 2622, 2623, 3000, 20000, 65536,
                               300000, 558904, 558905, 1 << 20};
#define N_SIZES (sizeof sizes / sizeof sizes[0])
static const size_t alignments[] = {FM_MIN_ALIGN, 32, 64, 128, 4096, 65536};
#define N_ALIGNMENTS (sizeof alignments / sizeof alignments[0])

/* Guards every operator's contract for sizes from 0 to 1 MiB (small, medium, large) and
 * alignments from the minimum to 64 KiB, in normal mode (_i 0) and debug mode (_i 1): a usable
 * block, aligned as asked, that the matching delete (plain, sized with the size new was given,
 * nothrow, aligned, sized and aligned) frees without any event; two new(0) differ; a sized
 * delete of a block allocated under a coarser minimum alignment (fastmm_alignment_enter(64), so
 * a bigger class served it) is not taken for a wrong size. */
START_TEST(test_operators_used_correctly)
{
    if (_i == 1)
        fastmm_debug_enter();
    size_t before = evn();
    for (size_t k = 0; k < N_SIZES; k++) {
        size_t n = sizes[k];
        op_delete(check_new(op_new(n), n, FM_MIN_ALIGN, "new"));
        op_delete_array(check_new(op_new_array(n), n, FM_MIN_ALIGN, "new[]"));
        op_delete_sized(check_new(op_new(n), n, 0, "new"), n);
        op_delete_array_sized(check_new(op_new_array(n), n, 0, "new[]"), n);
        op_delete_nothrow(check_new(op_new_nothrow(n, NOTHROW), n, 0, "new nothrow"), NOTHROW);
        op_delete_array_nothrow(check_new(op_new_array_nothrow(n, NOTHROW), n, 0, "new[] nothrow"), NOTHROW);
        for (size_t a = 0; a < N_ALIGNMENTS; a++) {
            size_t al = alignments[a];
            op_delete_aligned(check_new(op_new_aligned(n, al), n, al, "aligned new"), al);
            op_delete_array_aligned(check_new(op_new_array_aligned(n, al), n, al, "aligned new[]"), al);
            op_delete_sized_aligned(check_new(op_new_aligned(n, al), n, al, "aligned new"), n, al);
            op_delete_array_sized_aligned(check_new(op_new_array_aligned(n, al), n, al, "aligned new[]"), n, al);
            op_delete_aligned_nothrow(check_new(op_new_aligned_nothrow(n, al, NOTHROW), n, al, "aligned new nothrow"),
                                      al, NOTHROW);
            op_delete_array_aligned_nothrow(
                check_new(op_new_array_aligned_nothrow(n, al, NOTHROW), n, al, "aligned new[] nothrow"), al, NOTHROW);
        }
        expect_none(before, "matching new and delete");
    }
    void *a = op_new(0), *b = op_new(0);
    REQUIRE(a != NULL && b != NULL && a != b, "new(0) twice: %p and %p", a, b);
    op_delete_sized(a, 0);
    op_delete_sized(b, 0);
    void *kept[8];
    ck_assert(fastmm_alignment_enter(64));
    for (int i = 0; i < 8; i++)
        kept[i] = check_new(op_new((size_t)(i + 1) * 10), (size_t)(i + 1) * 10, 0, "new under alignment 64");
    ck_assert(fastmm_alignment_exit(64));
    for (int i = 0; i < 8; i++)
        op_delete_sized(kept[i], (size_t)(i + 1) * 10);
    expect_none(before, "sized delete after the minimum alignment changed");
    op_delete(NULL);
    op_delete_sized(NULL, 8);
    op_delete_array_aligned(NULL, 64);
    expect_none(before, "delete of NULL");
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* 2. Failure: NULL from nothrow, the new-handler loop, bad_alloc                               */
/* ------------------------------------------------------------------------------------------ */

/* above PTRDIFF_MAX: refused without asking the OS (a 32-bit process might get 2 GiB) */
#define TOO_BIG (SIZE_MAX - 4096)

static int handler_calls;
static void lift_limit(void)
{
    handler_calls++;
    fastmm_set_memory_limit(0);
}

typedef void (*new_handler_t)(void);

/* Guards the failure rules of [new.delete.single]: nothrow new (plain and aligned, scalar and
 * array) returns NULL for a request nothing can satisfy, with no new-handler installed; and, with
 * libstdc++ loaded (dlopen'd here, as a C++ program has it), a new-handler is called until it
 * makes the allocation possible: a 64 MiB new under a 16 MiB memory limit succeeds after one
 * call of a handler that lifts the limit, for new and nothrow new alike (the limit's one-time
 * grace of 32 MiB still leaves it short). */
START_TEST(test_new_failure)
{
    REQUIRE(op_new_nothrow(TOO_BIG, NOTHROW) == NULL, "nothrow new of %zu bytes did not fail", TOO_BIG);
    REQUIRE(op_new_array_nothrow(TOO_BIG, NOTHROW) == NULL, "nothrow new[] did not fail");
    REQUIRE(op_new_aligned_nothrow(TOO_BIG, 64, NOTHROW) == NULL, "aligned nothrow new did not fail");
    REQUIRE(op_new_array_aligned_nothrow(TOO_BIG, 4096, NOTHROW) == NULL, "aligned nothrow new[] did not fail");
    void *cxx = dlopen("libstdc++.so.6", RTLD_NOW | RTLD_GLOBAL);
    if (cxx == NULL) {
        fprintf(stdout, "note: libstdc++.so.6 cannot be loaded here: the new-handler loop is not tested\n");
        return;
    }
    new_handler_t (*set_handler)(new_handler_t) = (new_handler_t(*)(new_handler_t))dlsym(cxx, "_ZSt15set_new_handlerPFvvE");
    ck_assert_ptr_nonnull(set_handler);
    set_handler(lift_limit);
    size_t big = (size_t)64 << 20;
    for (int nothrow = 0; nothrow < 2; nothrow++) {
        handler_calls = 0;
        fastmm_set_memory_limit(fastmm_os_memory() + ((size_t)16 << 20));
        void *p = nothrow ? op_new_nothrow(big, NOTHROW) : op_new(big);
        fastmm_set_memory_limit(0);
        REQUIRE(p != NULL && handler_calls == 1, "%s of 64 MiB under a 16 MiB limit: %p after %d handler calls",
                nothrow ? "nothrow new" : "new", p, handler_calls);
        op_delete_sized(p, big);
    }
    set_handler(NULL);
}
END_TEST

/* Guards what a failed throwing new does in a process without the C++ runtime (this C program,
 * unless something loaded libstdc++): there is no std::bad_alloc to throw, so it aborts with a
 * report that says so. Where libstdc++ is loaded, the uncaught std::bad_alloc aborts the child
 * too (std::terminate). */
START_TEST(test_new_failure_aborts)
{
    char path[256];
    int fd = make_tmp(path, sizeof path);
    bool runtime = dlsym(RTLD_DEFAULT, "_ZSt17__throw_bad_allocv") != NULL;
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        no_core_dump();
        dup2(fd, 2);
        void *p = op_new(launder_size(TOO_BIG));
        escape(p);
        _exit(0);
    }
    char text[4096];
    int st = wait_child_stderr(pid, fd, path, text, sizeof text);
    ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, "failed new: child status %#x, expected SIGABRT", st);
    if (!runtime)
        ck_assert_msg(strstr(text, "must throw std::bad_alloc, but the C++ runtime (libstdc++) is not loaded") != NULL,
                      "failed new without libstdc++: \"%.600s\"", text);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* 3. Mismatched deallocation                                                                   */
/* ------------------------------------------------------------------------------------------ */

enum mismatch {
    MM_NEW_ARRAY_DELETE,     /* new[] / delete */
    MM_NEW_DELETE_ARRAY,     /* new / delete[] */
    MM_NEW_FREE,             /* new / free */
    MM_MALLOC_DELETE,        /* malloc / delete */
    MM_ALIGNED_WRONG_ALIGN,  /* new(align 64) / delete(align 32) */
    MM_ALIGNED_UNALIGNED,    /* new(align 64) / delete without alignment */
    MM_SIZED_BIGGER,         /* new(n) / delete(p, n + 1) */
    MM_SIZED_SMALLER,        /* new(n) / delete(p, n - 1) */
    MM_COUNT
};
static const char *const mm_names[] = {"new[] / delete", "new / delete[]", "new / free", "malloc / delete",
                                       "aligned new 64 / delete 32", "aligned new 64 / plain delete",
                                       "sized delete, size + 1", "sized delete, size - 1"};
static const char *const mm_text[] = {
    "Allocated by: operator new[]; released by: operator delete(void*)",
    "Allocated by: operator new; released by: operator delete[](void*)",
    "Allocated by: operator new; released by: free()",
    "Allocated by: malloc() or a function like it; released by: operator delete(void*)",
    "Allocated by: operator new with alignment 64; released by: operator delete(void*, alignment 32)",
    "Allocated by: operator new with alignment 64; released by: operator delete(void*)",
    "a sized operator delete was given a size that is not the block's",
    "a sized operator delete was given a size that is not the block's",
};
static const size_t mm_sizes[] = {40, 20000, 1 << 20};
#define N_MM_SIZES 3

/* Guards debug mode's record of the family that allocated each block (malloc, new, new[]) and
 * of operator new's alignment: for a small, a medium and a large debug block each mismatch is
 * one event of its type (MISMATCHED_DEALLOCATION, or SIZED_DELETE_MISMATCH for a sized delete of
 * another size) about the block, whose report names both sides; the block is freed all the same
 * (a second, correct release is then a double free). */
START_TEST(test_debug_mismatch)
{
    enum mismatch kind = (enum mismatch)(_i / N_MM_SIZES);
    size_t n = mm_sizes[_i % N_MM_SIZES];
    fastmm_debug_enter();
    void *p;
    switch (kind) {
    case MM_NEW_ARRAY_DELETE:
        p = op_new_array(n);
        break;
    case MM_MALLOC_DELETE:
        p = malloc(launder_size(n));
        break;
    case MM_ALIGNED_WRONG_ALIGN:
    case MM_ALIGNED_UNALIGNED:
        p = op_new_aligned(n, 64);
        break;
    default:
        p = op_new(n);
        break;
    }
    REQUIRE(fastmm_usable_size(p) == n, "%s: a %zu-byte debug block has usable size %zu", mm_names[kind], n,
            fastmm_usable_size(p));
    size_t before = evn();
    fastmm_event_type_t want = FASTMM_EVENT_MISMATCHED_DEALLOCATION;
    switch (kind) {
    case MM_NEW_ARRAY_DELETE:
    case MM_MALLOC_DELETE:
    case MM_ALIGNED_UNALIGNED:
        op_delete(p);
        break;
    case MM_NEW_DELETE_ARRAY:
        op_delete_array(p);
        break;
    case MM_NEW_FREE:
        free(launder_ptr(p));
        break;
    case MM_ALIGNED_WRONG_ALIGN:
        op_delete_aligned(p, 32);
        break;
    case MM_SIZED_BIGGER:
        op_delete_sized(p, n + 1);
        want = FASTMM_EVENT_SIZED_DELETE_MISMATCH;
        break;
    case MM_SIZED_SMALLER:
        op_delete_sized(p, n - 1);
        want = FASTMM_EVENT_SIZED_DELETE_MISMATCH;
        break;
    default:
        ck_abort();
    }
    expect_event(before, want, p, mm_text[kind], mm_names[kind]);
    free(launder_ptr(p));
    REQUIRE(evn() == before + 2 && ev_at(before + 1).type == FASTMM_EVENT_DOUBLE_FREE,
            "%s: the block was not freed (a second release: %zu events, the last %s)", mm_names[kind],
            evn() - before, event_name(ev_at(evn() - 1).type));
}
END_TEST

/* Guards the normal-mode check of a sized or aligned delete, which only the block itself informs:
 * a size bigger than the block holds (small, medium and large), a size a smaller class would have
 * served (8 for a 40-byte new; 100 for a medium block), and an alignment the pointer lacks are
 * each one event of its type about the block, saying which delete was called; the block is
 * freed all the same. */
START_TEST(test_normal_sized_delete)
{
    struct { size_t alloc, passed, alignment; fastmm_event_type_t type; const char *text; } cases[] = {
        {40, 100, 0, FASTMM_EVENT_SIZED_DELETE_MISMATCH, "operator delete(void*, size 100)"},
        {40, 8, 0, FASTMM_EVENT_SIZED_DELETE_MISMATCH, "operator delete(void*, size 8)"},
        {3000, 100, 0, FASTMM_EVENT_SIZED_DELETE_MISMATCH, "operator delete(void*, size 100)"},
        {20000, 30000, 0, FASTMM_EVENT_SIZED_DELETE_MISMATCH, "operator delete(void*, size 30000)"},
        {1 << 20, 4 << 20, 0, FASTMM_EVENT_SIZED_DELETE_MISMATCH, "operator delete(void*, size 4194304)"},
        {1 << 20, 1000, 0, FASTMM_EVENT_SIZED_DELETE_MISMATCH, "operator delete(void*, size 1000)"},
        {100, 0, 1 << 20, FASTMM_EVENT_MISMATCHED_DEALLOCATION, "operator delete(void*, alignment 1048576)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        void *p = op_new(cases[i].alloc), *aligned_by_chance = NULL;
        if (cases[i].alignment != 0 && ((uintptr_t)p & (cases[i].alignment - 1)) == 0) {
            aligned_by_chance = p; /* kept until the next one, which cannot sit at the same address */
            p = op_new(cases[i].alloc);
        }
        ev_reset(); /* the first event's report text is kept */
        if (cases[i].alignment != 0)
            op_delete_aligned(p, cases[i].alignment);
        else
            op_delete_sized(p, cases[i].passed);
        expect_event(0, cases[i].type, p, cases[i].text, "normal-mode delete");
        REQUIRE(strstr(ev_first_text(), "It is freed all the same.") != NULL, "report: \"%.600s\"", ev_first_text());
        void *q = malloc(launder_size(8)); /* the heap still works */
        free(q);
        REQUIRE(evn() == 1, "case %zu: %zu events", i, evn());
        op_delete(aligned_by_chance);
    }
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* 4. A damaged header is not an invalid pointer                                                 */
/* ------------------------------------------------------------------------------------------ */

static const size_t header_sizes[] = {24, 100, 20000, 1 << 20};
#define N_HEADER_SIZES 4

/* Guards the report of a write just before a block (a one-byte underflow, p[-1], or for medium
 * and large blocks a damaged flag byte, p[-2]) followed by a valid free, realloc and
 * malloc_usable_size: HEADER_CORRUPTION about the block, never INVALID_POINTER ("an interior
 * pointer, or a block already freed" sends the user looking for the wrong bug), in normal mode
 * (_i < 4: the block's flag word) and debug mode (the debug header); the block stays allocated
 * and, once the byte is put back, frees without a report. */
START_TEST(test_damaged_header)
{
    bool debug = _i >= N_HEADER_SIZES;
    size_t n = header_sizes[_i % N_HEADER_SIZES];
    if (debug)
        fastmm_debug_enter();
    unsigned char *p = launder_ptr(malloc(launder_size(n)));
    ck_assert_ptr_nonnull(p);
    memset(p, 7, n);
    /* a small block's flag word has its span offset in the high byte; a medium or large one's
     * high byte is 0 there, and only the low byte says what the block is */
    unsigned char *at = !debug && n > 2622 ? p - 2 : p - 1;
    const char *text = debug ? "the block's debug header was overwritten"
                             : "the block's header was overwritten (a write before the start of the block)";
    *at ^= 0x5c;
    escape(at);
    for (int op = 0; op < 3; op++) {
        size_t before = evn();
        if (op == 0) {
            free(launder_ptr(p));
        } else if (op == 1) {
            void *q = realloc(launder_ptr(p), n * 2);
            REQUIRE(q == NULL, "realloc of a block with a damaged header returned %p", q);
        } else {
            REQUIRE(fastmm_usable_size(p) == 0, "usable size of a block with a damaged header: %zu",
                    fastmm_usable_size(p));
        }
        if (op == 0)
            expect_event(before, FASTMM_EVENT_HEADER_CORRUPTION, p, text, "free after an underflow");
        else
            REQUIRE(evn() == before + 1 && ev_at(before).type == FASTMM_EVENT_HEADER_CORRUPTION &&
                        ev_at(before).block == p,
                    "%s after an underflow: %zu events, the first %s", op == 1 ? "realloc" : "usable size",
                    evn() - before, event_name(ev_at(before).type));
    }
    *at ^= 0x5c;
    escape(at);
    size_t before = evn();
    REQUIRE(p[0] == 7 && p[n - 1] == 7, "the refused block changed");
    free(launder_ptr(p));
    expect_none(before, "free of the repaired block");
}
END_TEST

/* The interior pointer next to it stays an invalid pointer: p + 16 of a small block (where no
 * block starts), p + 64 of a medium one. */
START_TEST(test_interior_still_invalid)
{
    for (int k = 0; k < 2; k++) {
        size_t n = k == 0 ? 100 : 20000, off = k == 0 ? 16 : 64;
        unsigned char *p = launder_ptr(malloc(launder_size(n)));
        size_t before = evn();
        free(launder_ptr(p + off));
        REQUIRE(evn() == before + 1 && ev_at(before).type == FASTMM_EVENT_INVALID_POINTER,
                "free(p + %zu) of a %zu-byte block: %zu events, the first %s", off, n, evn() - before,
                event_name(ev_at(before).type));
        free(p);
    }
}
END_TEST

/* The old debug header inside a block first used by debug mode and then by a plain allocation
 * does not turn the interior pointer where the debug block's user pointer was into a freed debug
 * block: free() of it is an invalid pointer, not a double free. The debug block's size is found
 * so that the plain block takes over its outer block. */
START_TEST(test_interior_over_old_debug_header)
{
    const size_t n = 20000;
    unsigned char *p = NULL, *q = NULL;
    for (size_t dn = n - 256; dn <= n && (p == NULL || p + 64 != q); dn += 8) {
        if (p != NULL)
            free(p);
        fastmm_debug_enter();
        q = launder_ptr(malloc(launder_size(dn)));
        free(q);
        fastmm_debug_exit();
        p = launder_ptr(malloc(launder_size(n)));
    }
    if (p + 64 != q && !test_forking()) { /* a heap other tests used: a cached block may come first */
        fprintf(stderr, "test_interior_over_old_debug_header: no outer block taken over, skipped\n");
        free(p);
        return;
    }
    REQUIRE(p + 64 == q, "no debug block size gave its outer block to malloc(%zu): %p, %p", n, (void *)p, (void *)q);
    size_t before = evn();
    free(launder_ptr(p + 64));
    REQUIRE(evn() == before + 1 && ev_at(before).type == FASTMM_EVENT_INVALID_POINTER,
            "free(p + 64) over an old debug header: %zu events, the first %s", evn() - before,
            event_name(ev_at(before).type));
    free(p);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* 5. The check at exit                                                                         */
/* ------------------------------------------------------------------------------------------ */

static size_t count(const char *text, const char *what)
{
    size_t c = 0;
    for (const char *s = text; (s = strstr(s, what)) != NULL; s += strlen(what))
        c++;
    return c;
}

/* Guards debug mode's check of every debug block at exit: a child in debug mode overruns a live
 * 40-byte block by one byte and a live 100-byte one by 32 (memcpy), writes into a freed 64-byte
 * block and a freed 20000-byte one, frees none of them again and exits normally: standard error
 * shows two footer reports and two modified-after-free reports, each "Detected by: the check at
 * exit" and naming its block; the report never aborts, so the child exits 0 after printing
 * "done" (the default action, abort, is in force). _i 1: the same child without the damage
 * reports nothing at exit. */
START_TEST(test_check_at_exit)
{
    char path[256];
    int fd = make_tmp(path, sizeof path);
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        dup2(fd, 2);
        fastmm_set_event_handler(NULL, NULL);
        fastmm_set_error_action(FASTMM_ON_ERROR_ABORT);
        fastmm_debug_enter();
        unsigned char *a = launder_ptr(malloc(40)), *b = launder_ptr(malloc(100));
        unsigned char *c = launder_ptr(malloc(64)), *d = launder_ptr(malloc(20000));
        unsigned char src[64];
        memset(src, 'A', sizeof src);
        free(c);
        free(d);
        if (_i == 0) {
            memcpy(a, src, launder_size(41));
            memcpy(b + launder_size(100), src, 32);
            c[10] = 1;
            d[5000] = 2;
            escape(c);
            escape(d);
        }
        dprintf(2, "blocks %p %p %p %p\ndone\n", (void *)a, (void *)b, (void *)c, (void *)d);
        exit(0);
    }
    static char text[65536];
    int st = wait_child_stderr(pid, fd, path, text, sizeof text);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %#x: \"%.2000s\"", st, text);
    ck_assert_msg(strstr(text, "done") != NULL, "the child did not finish: \"%.2000s\"", text);
    size_t found = count(text, "Detected by: the check at exit");
    if (_i == 1) {
        ck_assert_msg(found == 0 && strstr(text, "libfastmm5:") == NULL, "an intact heap was reported: \"%.2000s\"",
                      text);
        return;
    }
    ck_assert_msg(found == 4, "%zu reports from the check at exit, expected 4: \"%.3000s\"", found, text);
    ck_assert_msg(count(text, "the block's footer was overwritten (a write past the end of the block)") == 2 &&
                      count(text, "the block was modified after it was freed") == 2,
                  "wrong report types: \"%.3000s\"", text);
    void *blocks[4];
    ck_assert_int_eq(sscanf(strstr(text, "blocks "), "blocks %p %p %p %p", &blocks[0], &blocks[1], &blocks[2],
                            &blocks[3]), 4);
    for (int i = 0; i < 4; i++) {
        char hex[64];
        snprintf(hex, sizeof hex, "Block: %p,", blocks[i]);
        ck_assert_msg(strstr(text, hex) != NULL, "no report names block %d (%s): \"%.3000s\"", i, hex, text);
    }
}
END_TEST

Suite *suite_misuse(void)
{
    Suite *s = suite_create("misuse");
    TCase *tc = tcase_create("operators");
    tcase_set_timeout(tc, TEST_TIMEOUT);
    tcase_add_checked_fixture(tc, record_setup, record_teardown);
    tcase_add_loop_test(tc, test_operators_used_correctly, 0, 2);
    tcase_add_test(tc, test_new_failure);
    tcase_add_loop_test(tc, test_debug_mismatch, 0, MM_COUNT * N_MM_SIZES);
    tcase_add_test(tc, test_normal_sized_delete);
    suite_add_tcase(s, tc);

    tc = tcase_create("header");
    tcase_set_timeout(tc, TEST_TIMEOUT);
    tcase_add_checked_fixture(tc, record_setup, record_teardown);
    tcase_add_loop_test(tc, test_damaged_header, 0, 2 * N_HEADER_SIZES);
    tcase_add_test(tc, test_interior_still_invalid);
    tcase_add_test(tc, test_interior_over_old_debug_header);
    suite_add_tcase(s, tc);

    tc = tcase_create("processes");
    tcase_set_timeout(tc, TEST_TIMEOUT);
    tcase_add_test(tc, test_new_failure_aborts);
    tcase_add_loop_test(tc, test_check_at_exit, 0, 2);
    suite_add_tcase(s, tc);
    return s;
}
