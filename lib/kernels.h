/*
 * kernels.h - the one dispatch point for the byte kernels (fill, check-fill, check-and-refill). The portable C
 * versions ("C twins") live in kernels.c; the assembly versions (asm/<host>/ *.S files, SSE2) are chosen
 * once, at initialization, by fm_kernels_init().
 */
#ifndef FM_KERNELS_H
#define FM_KERNELS_H

#include "base.h"

typedef struct fm_kernels {
    void (*fill)(void *p, uint8_t byte, size_t n);
    /* Returns true if all n bytes equal `byte`. Must read nothing outside [p, p + n). */
    bool (*check_fill)(const void *p, uint8_t byte, size_t n);
    /* Debug mode's reuse of a freed block: checks that the n bytes at p equal `expect` and
     * overwrites them with `fill`, in one pass where the kernel can. Returns n when all matched
     * (all now hold fill). Otherwise some k < n: [p, p + k) matched and now holds fill,
     * [p + k, p + n) is untouched and holds a byte other than expect. Which k is the kernel's
     * choice (the C twin checks everything first: 0); the verdict (k == n) is the same for all. */
    size_t (*check_refill)(void *p, uint8_t expect, uint8_t fill, size_t n);
} fm_kernels_t;

extern fm_kernels_t fm_kernels;

/* Picks the kernels: the assembly ones where they are built (FASTMM_HAVE_ASM), the CPU has
 * them (i386: cpuid says SSE2) and disable_asm (FASTMM5_DISABLE_ASM=1) is false; else the C
 * twins. May be called again (the tests do); every set computes the same results. */
void fm_kernels_init(bool disable_asm);
/* Which kernels fm_kernels_init() installed, e.g. "SSE2 (x86_64)" or "portable C". */
const char *fm_kernels_name(void);

/* The C twins, always built (the reference the tests compare the assembly kernels against). */
bool fm_check_fill_c(const void *p, uint8_t byte, size_t n);
void fm_fill_c(void *p, uint8_t byte, size_t n);
size_t fm_check_refill_c(void *p, uint8_t expect, uint8_t fill, size_t n);

/* The assembly check and check-and-refill engage from this many bytes, the assembly fills from
 * FM_KERNELS_FILL_MIN_SIZE (below it glibc's memset is faster on the benchmark CPU: kernels.c);
 * below that the C twins run. */
#define FM_KERNELS_ASM_MIN_SIZE 128
#define FM_KERNELS_FILL_MIN_SIZE 1024

/*
 * The SSE2 entries of asm/x86_64/ or asm/i386/ (hidden symbols), built when configure defines
 * FASTMM_HAVE_ASM. They require n >= 16 (fm_kernels calls them from FM_KERNELS_ASM_MIN_SIZE).
 * On i386 they may only be called when fm_kernels_asm_usable() is true (cpuid: SSE2).
 */
bool fm_check_fill_sse2(const void *p, uint8_t byte, size_t n);
void fm_fill_sse2(void *p, uint8_t byte, size_t n);
/* True when the assembly kernels are built in and this CPU can run them. */
bool fm_kernels_asm_usable(void);
/* x86_64 only: the AVX2 freed-block check (asm/x86_64/check_fill_avx2.S, n >= 32), installed
 * instead of the SSE2 one where fm_kernels_avx2_usable() (cpuid AVX2, and xgetbv: the OS saves
 * the 256-bit registers). */
bool fm_check_fill_avx2(const void *p, uint8_t byte, size_t n);
bool fm_kernels_avx2_usable(void);
/* x86_64 only: the fill with 32-byte stores (fill_avx2.S, n >= 32) and the one-pass check and
 * refill (check_refill_sse2.S, n >= 32; check_refill_avx2.S, n >= 64), the AVX2 ones installed
 * with the AVX2 check. i386 runs its SSE2 check, then its SSE2 fill. */
void fm_fill_avx2(void *p, uint8_t byte, size_t n);
size_t fm_check_refill_sse2(void *p, uint8_t expect, uint8_t fill, size_t n);
size_t fm_check_refill_avx2(void *p, uint8_t expect, uint8_t fill, size_t n);
/* FASTMM5_DISABLE_AVX2=1 (read by the options module): keep the SSE2 check on an AVX2 CPU, so
 * that the tests and benchmarks can run either. */
extern bool fm_kernels_avx2_disabled;
/* x86_64 only: the check, the fill and the one-pass check and refill with 64-byte vectors
 * (check_fill_avx512.S, fill_avx512.S, check_refill_avx512.S: n >= 64), installed over the AVX2
 * ones where fm_kernels_avx512_usable() (cpuid AVX512F and AVX512BW, and xgetbv: the OS saves
 * the opmask and ZMM state) and FASTMM5_DISABLE_AVX512=1 (fm_kernels_avx512_disabled) is not
 * set. */
bool fm_check_fill_avx512(const void *p, uint8_t byte, size_t n);
void fm_fill_avx512(void *p, uint8_t byte, size_t n);
size_t fm_check_refill_avx512(void *p, uint8_t expect, uint8_t fill, size_t n);
bool fm_kernels_avx512_usable(void);
extern bool fm_kernels_avx512_disabled;

/* The check and the fill the library calls. Below the sizes where an assembly kernel engages they
 * call the C twins directly, not through fm_kernels: a small block then runs the same
 * instructions in every build and with every kernel set (a SIMD entry on the small path costs
 * 3.6% at 64 B), and only larger blocks pay for the indirect call.
 * fm_fill_c, not memset itself: knowing the size is below 1 KiB, gcc expands an inline memset
 * into `rep stosq`, whose start-up made a 256-byte debug pair 27% slower. */
FM_INLINE bool fm_check_fill(const void *p, uint8_t byte, size_t n)
{
    return n < FM_KERNELS_ASM_MIN_SIZE ? fm_check_fill_c(p, byte, n) : fm_kernels.check_fill(p, byte, n);
}
FM_INLINE void fm_fill(void *p, uint8_t byte, size_t n)
{
    if (n < FM_KERNELS_FILL_MIN_SIZE)
        fm_fill_c(p, byte, n);
    else
        fm_kernels.fill(p, byte, n);
}

#endif
