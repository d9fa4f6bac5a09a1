/*
 * check_kernels.c - white-box differential tests of the byte kernels (lib/kernels.h), a Check
 * program of its own (tests/check_kernels): it links the convenience library
 * lib/libfastmm5_core.la, whose fm_* names are hidden in libfastmm5.so.
 *
 * Every kernel is compared with its C twin and with a plain byte loop, for every size 0..600
 * and every start offset 0..15 (modulo 16), clean and with each single byte corrupted: the
 * verdicts must be identical. The buffers end in a PROT_NONE page: for each size one placement
 * ends exactly at it (the byte after the range cannot be read), and every placement has the
 * bytes around the range set to a different value, so an over-read that feeds the comparison
 * flips the verdict and an over-write is seen. Fills are compared byte for byte.
 *
 * The kernels under test: fm_kernels as fm_kernels_init(false) installs it (SSE2 where built
 * and usable, else the C twins), the SSE2 entries called directly (n >= 16, all sizes), the AVX2
 * ones where the CPU has them (n >= 32), the AVX-512 ones where the CPU and the OS have
 * AVX512F+AVX512BW (n >= 64; skipped otherwise, which the output says), and the C twins. The
 * AVX-512 kernels split a range at 64-byte lines, so case "line_placements" also puts every
 * size from 64 to 320 at every distance 0..63 from the guard page: every start and end within
 * a line. The one-pass check-and-refill is held
 * to its contract (kernels.h), whose verdict is the byte loop's. FASTMM5_DISABLE_ASM=1 in the environment must make fm_kernels_init() pick the C
 * twins (case "selection"; tests/kernels-disable-asm.sh runs it with and without).
 */
#include <config.h>

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(FM_TEST_KERNELS_ONLY)
/* Built alone with lib/kernels.c and asm/<host>/ (.ci/run's i386 leg, while the rest of the
 * library does not build there): no options module, the environment is read here. */
#include "kernels.h"
#else
#include "internal.h"
#endif

#define MAX_SIZE 600
#define OFFSETS 16

static unsigned char *region; /* RW pages followed by one PROT_NONE page */
static unsigned char *guard;  /* the first PROT_NONE byte */
static size_t region_rw;

static void setup_region(void)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    region_rw = (2 * MAX_SIZE + 64 + page - 1) / page * page;
    region = mmap(NULL, region_rw + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert_msg(region != MAP_FAILED, "mmap failed");
    guard = region + region_rw;
    ck_assert_int_eq(mprotect(guard, page, PROT_NONE), 0);
    fm_kernels_init(false);
}

static void teardown_region(void)
{
    munmap(region, region_rw + (size_t)sysconf(_SC_PAGESIZE));
    fm_kernels_init(false);
}

/* A range of n bytes whose start is offset (mod 16) and whose end is at most 15 bytes before the
 * guard page; exact: end exactly at the guard (the start offset is then what n makes it). */
static unsigned char *place(size_t n, unsigned offset, bool exact)
{
    uintptr_t end = (uintptr_t)guard;
    if (exact)
        return (unsigned char *)(end - n);
    uintptr_t p = end - n;
    p -= (p - offset) & 15;
    return (unsigned char *)p;
}

static bool byte_loop(const unsigned char *p, uint8_t byte, size_t n)
{
    bool ok = true;
    for (size_t i = 0; i < n; i++)
        ok &= p[i] == byte;
    return ok;
}

static bool asm_usable(void)
{
#if defined(FASTMM_HAVE_ASM)
    return fm_kernels_asm_usable();
#else
    return false;
#endif
}

/* One verdict from every implementation; false (and a message) if they disagree. */
static bool verdicts_agree(const unsigned char *p, uint8_t byte, size_t n, bool *verdict)
{
    bool ref = byte_loop(p, byte, n);
    bool c = fm_check_fill_c(p, byte, n);
    bool k = fm_kernels.check_fill(p, byte, n);
    bool s = ref, v = ref;
#if defined(FASTMM_HAVE_ASM)
    if (n >= 16 && asm_usable())
        s = fm_check_fill_sse2(p, byte, n);
#endif
#if defined(FASTMM_ASM_X86_64)
    if (n >= 32 && fm_kernels_avx2_usable())
        v = fm_check_fill_avx2(p, byte, n);
    bool w = ref;
    if (n >= 64 && fm_kernels_avx512_usable())
        w = fm_check_fill_avx512(p, byte, n);
    if (w != ref)
        return false;
#endif
    *verdict = ref;
    return c == ref && k == ref && s == ref && v == ref;
}

static void check_fill_all(uint8_t byte, bool exact)
{
    static const uint8_t flips[] = {0x01, 0x80, 0xff, 0x7f, 0x10};
    unsigned offsets = exact ? 1 : OFFSETS;
    for (size_t n = 0; n <= MAX_SIZE; n++) {
        for (unsigned o = 0; o < offsets; o++) {
            unsigned char *p = place(n, o, exact);
            memset(region, (uint8_t)~byte, region_rw); /* surroundings differ from the fill */
            memset(p, byte, n);
            bool v;
            if (!verdicts_agree(p, byte, n, &v) || !v)
                ck_abort_msg("clean range: n=%zu offset=%u exact=%d byte=0x%02x: verdicts differ "
                             "or not filled", n, (unsigned)((uintptr_t)p & 15), exact, byte);
            for (size_t i = 0; i < n; i++) {
                p[i] = (uint8_t)(byte ^ flips[i % sizeof flips]);
                if (!verdicts_agree(p, byte, n, &v) || v)
                    ck_abort_msg("corrupt byte %zu: n=%zu offset=%u exact=%d byte=0x%02x: verdicts "
                                 "differ or corruption missed", i, n, (unsigned)((uintptr_t)p & 15),
                                 exact, byte);
                p[i] = byte;
            }
        }
    }
}

START_TEST(check_fill_differential)
{
    check_fill_all(0x80, false); /* FastMM5's freed-block fill */
    check_fill_all(0x80, true);
}
END_TEST

START_TEST(check_fill_other_bytes)
{
    /* 0x00 and 0xff: the sign bit (pmovmskb) and the all-zero pattern; 0x90: the allocated fill */
    check_fill_all(0x00, true);
    check_fill_all(0xff, true);
    check_fill_all(0x90, false);
}
END_TEST

typedef void (*fill_fn)(void *, uint8_t, size_t);

/* Runs fill(p, byte, n) and checks every byte of [lo, guard). */
static void fill_at(fill_fn fill, const char *what, unsigned char *p, size_t n, unsigned char *lo)
{
    memset(lo, 0x5a, (size_t)(guard - lo));
    fill(p, 0x80, n);
    for (unsigned char *q = lo; q < guard; q++) {
        uint8_t want = (q >= p && q < p + n) ? 0x80 : 0x5a;
        if (*q != want)
            ck_abort_msg("%s: n=%zu offset=%u (mod 64) end %td before the guard: byte %td is 0x%02x, "
                         "not 0x%02x", what, n, (unsigned)((uintptr_t)p & 63), guard - (p + n),
                         q - p, *q, want);
    }
}

/* Runs fill on a placed range and checks every byte of the RW region. */
static void one_fill(fill_fn fill, const char *what, size_t n, unsigned o, bool exact)
{
    fill_at(fill, what, place(n, o, exact), n, region);
}

static void fill_each(fill_fn fill, const char *what, size_t min_n)
{
    for (size_t n = min_n; n <= MAX_SIZE; n++) {
        for (unsigned o = 0; o < OFFSETS; o++)
            one_fill(fill, what, n, o, false);
        one_fill(fill, what, n, 0, true);
    }
}

START_TEST(fill_differential)
{
    fill_each(fm_kernels.fill, "fm_kernels.fill", 0);
    fill_each(fm_fill_c, "fm_fill_c", 0);
#if defined(FASTMM_HAVE_ASM)
    if (asm_usable())
        fill_each(fm_fill_sse2, "fm_fill_sse2", 16);
#endif
#if defined(FASTMM_ASM_X86_64)
    if (fm_kernels_avx2_usable())
        fill_each(fm_fill_avx2, "fm_fill_avx2", 32);
    if (fm_kernels_avx512_usable())
        fill_each(fm_fill_avx512, "fm_fill_avx512", 64);
#endif
}
END_TEST

/*
 * The one-pass check and refill (kernels.h): on a range of n bytes of `expect` with byte `bad`
 * (or none: bad == n) changed, the verdict (k == n) must be the byte loop's, [p, p + k) must hold
 * fill, [p + k, p + n) must be as it was (the changed byte in it), and the 32 bytes around the
 * range must be untouched.
 */
typedef size_t (*check_refill_fn)(void *, uint8_t, uint8_t, size_t);

static void refill_at(check_refill_fn f, const char *what, unsigned char *p, size_t n, size_t bad)
{
    enum { EXPECT = 0x80, FILL = 0x90, AROUND = 0x7f };
    uintptr_t from = (uintptr_t)p - 32, to = (uintptr_t)p + n + 32;
    unsigned char *lo = from >= (uintptr_t)region ? p - 32 : region;
    unsigned char *hi = to <= (uintptr_t)guard ? p + n + 32 : guard;
    memset(lo, AROUND, (size_t)(hi - lo));
    memset(p, EXPECT, n);
    if (bad < n)
        p[bad] = (uint8_t)(EXPECT ^ (bad % 3 == 0 ? 0x01 : bad % 3 == 1 ? 0x80 : 0xff));
    size_t k = f(p, EXPECT, FILL, n);
    if ((k == n) != (bad >= n) || k > n || (bad < n && bad < k))
        ck_abort_msg("%s: n=%zu offset=%u (mod 64) end %td before the guard, bad=%zu: returned %zu",
                     what, n, (unsigned)((uintptr_t)p & 63), guard - (p + n), bad, k);
    for (unsigned char *q = lo; q < hi; q++) {
        size_t i = (size_t)(q - p);
        uint8_t want = q < p || q >= p + n ? AROUND : i < k ? FILL : i == bad ? p[bad] : EXPECT;
        if (i == bad && q >= p + k && q < p + n)
            continue; /* the changed byte: compared by the verdict */
        if (*q != want)
            ck_abort_msg("%s: n=%zu offset=%u (mod 64) end %td before the guard, bad=%zu k=%zu: byte "
                         "%td is 0x%02x, not 0x%02x", what, n, (unsigned)((uintptr_t)p & 63),
                         guard - (p + n), bad, k, q - p, *q, want);
    }
    if (bad < n && p[bad] == EXPECT)
        ck_abort_msg("%s: n=%zu bad=%zu: the changed byte was overwritten", what, n, bad);
}

static void one_refill(check_refill_fn f, const char *what, size_t n, unsigned o, bool exact, size_t bad)
{
    refill_at(f, what, place(n, o, exact), n, bad);
}

/* Every size, clean at every offset; each byte changed in turn up to 128 bytes, beyond that the
 * first and last 40 and every 17th (at three offsets and ending at the guard page). */
static void refill_each(check_refill_fn f, const char *what, size_t min_n)
{
    static const unsigned offsets[] = {0, 7, 15};
    for (size_t n = min_n; n <= MAX_SIZE; n++) {
        for (unsigned o = 0; o < OFFSETS; o++)
            one_refill(f, what, n, o, false, n);
        one_refill(f, what, n, 0, true, n);
        for (size_t bad = 0; bad < n; bad++) {
            if (n > 128 && bad >= 40 && bad + 40 < n && bad % 17 != 0)
                continue;
            for (unsigned i = 0; i < sizeof offsets / sizeof offsets[0]; i++)
                one_refill(f, what, n, offsets[i], false, bad);
            one_refill(f, what, n, 0, true, bad);
        }
    }
}

START_TEST(check_refill_differential)
{
    refill_each(fm_kernels.check_refill, "fm_kernels.check_refill", 0);
    refill_each(fm_check_refill_c, "fm_check_refill_c", 0);
#if defined(FASTMM_ASM_X86_64)
    refill_each(fm_check_refill_sse2, "fm_check_refill_sse2", 32);
    if (fm_kernels_avx2_usable())
        refill_each(fm_check_refill_avx2, "fm_check_refill_avx2", 64);
    if (fm_kernels_avx512_usable())
        refill_each(fm_check_refill_avx512, "fm_check_refill_avx512", 64);
#endif
}
END_TEST

/* Positions to corrupt in a range at p: the ends, the bytes either side of each 64-byte line
 * boundary inside it, and every 29th. */
static bool probe_position(const unsigned char *p, size_t n, size_t i)
{
    unsigned line = (unsigned)((uintptr_t)(p + i) & 63);
    return i == 0 || i + 1 == n || line == 0 || line == 63 || i % 29 == 0;
}

/* Every size from 64 to 320 ending 0..63 bytes before the guard page (so starting and ending at
 * every place in a 64-byte line), for every kernel that takes n >= 64: the fills byte for byte
 * over the range and the 64 bytes before it, the check and the check-and-refill clean and with
 * each probe position changed. */
START_TEST(line_placements)
{
    static const uint8_t flips[] = {0x01, 0x80, 0xff};
#if defined(FASTMM_ASM_X86_64)
    if (!fm_kernels_avx512_usable())
        printf("line_placements: AVX-512 kernels skipped "
               "(the CPU or the OS lacks AVX512F+AVX512BW)\n");
#endif
    for (size_t n = 64; n <= 320; n++) {
        for (unsigned gap = 0; gap < 64; gap++) {
            unsigned char *p = guard - gap - n;
            fill_at(fm_kernels.fill, "fm_kernels.fill", p, n, p - 64);
            fill_at(fm_fill_c, "fm_fill_c", p, n, p - 64);
#if defined(FASTMM_ASM_X86_64)
            fill_at(fm_fill_sse2, "fm_fill_sse2", p, n, p - 64);
            if (fm_kernels_avx2_usable())
                fill_at(fm_fill_avx2, "fm_fill_avx2", p, n, p - 64);
            if (fm_kernels_avx512_usable())
                fill_at(fm_fill_avx512, "fm_fill_avx512", p, n, p - 64);
#endif
            memset(p - 64, 0x7f, (size_t)(guard - (p - 64)));
            memset(p, 0x80, n);
            bool v;
            if (!verdicts_agree(p, 0x80, n, &v) || !v)
                ck_abort_msg("clean range: n=%zu gap=%u: verdicts differ or not filled", n, gap);
            for (size_t i = 0; i < n; i++) {
                if (!probe_position(p, n, i))
                    continue;
                p[i] = (uint8_t)(0x80 ^ flips[i % sizeof flips]);
                if (!verdicts_agree(p, 0x80, n, &v) || v)
                    ck_abort_msg("corrupt byte %zu: n=%zu gap=%u: verdicts differ or corruption "
                                 "missed", i, n, gap);
                p[i] = 0x80;
            }
            for (size_t bad = 0; bad <= n; bad++) {
                if (bad < n && !probe_position(p, n, bad))
                    continue;
                refill_at(fm_kernels.check_refill, "fm_kernels.check_refill", p, n, bad);
#if defined(FASTMM_ASM_X86_64)
                refill_at(fm_check_refill_sse2, "fm_check_refill_sse2", p, n, bad);
                if (fm_kernels_avx2_usable())
                    refill_at(fm_check_refill_avx2, "fm_check_refill_avx2", p, n, bad);
                if (fm_kernels_avx512_usable())
                    refill_at(fm_check_refill_avx512, "fm_check_refill_avx512", p, n, bad);
#endif
            }
        }
    }
}
END_TEST

/* Which kernels run: with asm built and usable, SSE2 unless disabled; FASTMM5_DISABLE_ASM=1 in
 * the environment, read by the options module, picks the C twins. */
START_TEST(selection)
{
    fm_kernels_init(true);
    ck_assert_msg(strncmp(fm_kernels_name(), "portable C", 10) == 0, "%s", fm_kernels_name());
    ck_assert(fm_kernels.check_fill == fm_check_fill_c);
    ck_assert(fm_kernels.fill == fm_fill_c);
    ck_assert(fm_kernels.check_refill == fm_check_refill_c);

    fm_kernels_init(false);
    if (asm_usable()) {
        ck_assert_msg(strncmp(fm_kernels_name(), "SSE2", 4) == 0, "%s", fm_kernels_name());
        ck_assert(fm_kernels.check_fill != fm_check_fill_c);
#if defined(FASTMM_ASM_X86_64)
        /* the AVX2 kernels exactly where the CPU and the OS can run them, the AVX-512 ones
         * where they can run both, unless fm_kernels_avx512_disabled (FASTMM5_DISABLE_AVX512) */
        const char *name = fm_kernels_name();
        bool avx512 = fm_kernels_avx2_usable() && fm_kernels_avx512_usable();
        ck_assert_msg((strstr(name, "AVX2") != NULL || strstr(name, "AVX-512") != NULL) ==
                          fm_kernels_avx2_usable(), "%s", name);
        ck_assert_msg((strstr(name, "AVX-512") != NULL) == avx512, "%s", name);
        if (avx512) {
            fm_kernels_avx512_disabled = true;
            fm_kernels_init(false);
            ck_assert_msg(strstr(fm_kernels_name(), "AVX2") != NULL, "%s", fm_kernels_name());
            fm_kernels_avx512_disabled = false;
            fm_kernels_init(false);
        } else {
            printf("selection: AVX-512 kernels not chosen "
                   "(the CPU or the OS lacks AVX512F+AVX512BW)\n");
        }
#endif
    } else {
        ck_assert_msg(strncmp(fm_kernels_name(), "portable C", 10) == 0, "%s", fm_kernels_name());
        ck_assert(fm_kernels.check_fill == fm_check_fill_c);
    }

    /* What the library does at start-up, with this process's environment. */
    const char *env = getenv("FASTMM5_DISABLE_ASM");
    bool disabled = env != NULL && strcmp(env, "1") == 0;
#if defined(FM_TEST_KERNELS_ONLY)
    fm_kernels_init(disabled);
#else
    ck_assert(fm_options_init());
    fm_kernels_init(fm_options.disable_asm);
    ck_assert_int_eq(fm_options.disable_asm, disabled);
#endif
    if (disabled || !asm_usable())
        ck_assert_msg(strncmp(fm_kernels_name(), "portable C", 10) == 0, "%s", fm_kernels_name());
    else
        ck_assert_msg(strncmp(fm_kernels_name(), "SSE2", 4) == 0, "%s", fm_kernels_name());
    printf("kernels: %s (FASTMM5_DISABLE_ASM=%s)\n", fm_kernels_name(), env ? env : "unset");
}
END_TEST

Suite *suite_kernels(void)
{
    Suite *s = suite_create("kernels");
    TCase *tc = tcase_create("differential");
    tcase_add_checked_fixture(tc, setup_region, teardown_region);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, check_fill_differential);
    tcase_add_test(tc, check_fill_other_bytes);
    tcase_add_test(tc, fill_differential);
    tcase_add_test(tc, check_refill_differential);
    tcase_add_test(tc, line_placements);
    suite_add_tcase(s, tc);
    tc = tcase_create("selection");
    tcase_add_test(tc, selection);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(suite_kernels());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
