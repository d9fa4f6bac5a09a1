/*
 * kernels.c - portable C versions of the byte kernels (the "C twins") and the one place that
 * picks which versions run. The debug mode's fills and freed-block check go through fm_kernels.
 *
 * Selection happens once, in fm_kernels_init() (called by fm_init_once()):
 *   - built with the assembly kernels (configure's host table, --enable-asm; FASTMM_HAVE_ASM),
 *   - on i386 only if cpuid reports SSE2 (this file is compiled without any SIMD flag, so the
 *     check itself runs on any i386 CPU); x86_64 always has SSE2,
 *   - and FASTMM5_DISABLE_ASM=1 not set (fm_options.disable_asm);
 * then fm_kernels points at the *_asm wrappers below, else at the C twins. On x86_64 the
 * freed-block check then uses the AVX2 version where cpuid says AVX2 and xgetbv says the OS saves
 * the 256-bit registers (half the time of the SSE2 one on a 4 KiB block: the check is the most
 * expensive of debug mode's three passes over a block), and so do the fill and the one-pass
 * check-and-refill. Where cpuid also says AVX512F and AVX512BW and XCR0 says the OS saves the
 * opmask and ZMM state, the three AVX-512 kernels replace those (a 4 KiB debug-mode malloc/free
 * pair 10-15% faster: bench/RESULTS.md); FASTMM5_DISABLE_AVX512=1 keeps AVX2. Valgrind's
 * virtual CPU reports no AVX-512, so under memcheck this probe says no and AVX2 runs.
 *
 * The wrappers test n >= FM_KERNELS_ASM_MIN_SIZE (128) and run the scalar code inline below
 * that: the SIMD entry is out of line (an assembly function), so a small block pays one compare
 * and nothing for a path it does not take.
 */
/* Not internal.h: the kernels are the bottom layer and need only config.h and their own header,
 * which also lets the kernel test (tests/check_kernels.c, FM_TEST_KERNELS_ONLY) build this file
 * alone on a target where the rest of the library does not build yet. */
#include <config.h>

#include "kernels.h"

#include <string.h>

#if defined(FASTMM_ASM_I386) || defined(FASTMM_ASM_X86_64)
#include <cpuid.h>
#endif

fm_kernels_t fm_kernels;
bool fm_kernels_avx2_disabled;
bool fm_kernels_avx512_disabled;
static const char *kernels_name = "portable C";

/*
 * Fill: the C twin is memset. glibc's memset is picked by ifunc for the CPU (AVX2/ERMS on
 * current x86_64) and is already what a byte/word loop would become; a hand-written loop would
 * only be slower. The SSE2 fill (asm/) stores 16 bytes per instruction with unaligned head and
 * tail stores.
 */
void fm_fill_c(void *p, uint8_t byte, size_t n) { memset(p, byte, n); }

static inline uint64_t load64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v); /* unaligned-safe: a user area is only 16-byte aligned */
    return v;
}

/*
 * FastMM5's scalar check: 32 bytes per iteration as four 64-bit compares whose results are
 * AND-combined (here: the XOR differences OR-combined, the same thing inverted; no early exit,
 * so the time does not depend on where a difference is), then 8-, 4-, 2- and 1-byte tails.
 * Reads exactly [p, p + n).
 *
 * Vectorization: gcc 12 -O2 (Debian 12, x86_64 and i386) does NOT vectorize this loop (checked
 * with objdump -d: the 32-byte loop is four 64-bit loads, XORs and ORs in general registers,
 * no xmm); the SSE2 kernel is therefore a real difference, not what the compiler does anyway.
 */
static inline __attribute__((always_inline)) bool check_fill_scalar(const void *p, uint8_t byte,
                                                                    size_t n)
{
    const unsigned char *b = p;
    const uint64_t pattern = 0x0101010101010101ull * byte;
    uint64_t diff = 0;
    for (; n >= 32; b += 32, n -= 32)
        diff |= (load64(b) ^ pattern) | (load64(b + 8) ^ pattern) | (load64(b + 16) ^ pattern) |
                (load64(b + 24) ^ pattern);
    for (; n >= 8; b += 8, n -= 8)
        diff |= load64(b) ^ pattern;
    if (n >= 4) {
        uint32_t v;
        memcpy(&v, b, 4);
        diff |= v ^ (uint32_t)pattern;
        b += 4;
        n -= 4;
    }
    if (n >= 2) {
        uint16_t v;
        memcpy(&v, b, 2);
        diff |= v ^ (uint16_t)pattern;
        b += 2;
        n -= 2;
    }
    if (n != 0)
        diff |= (uint8_t)(*b ^ byte);
    return diff == 0;
}

bool fm_check_fill_c(const void *p, uint8_t byte, size_t n) { return check_fill_scalar(p, byte, n); }

/*
 * The C twin of the one-pass check and refill (kernels.h has the contract) checks first and
 * fills after: 0 on a mismatch (nothing written), n when all matched. A fused scalar loop (the
 * 32-byte check step, each step stored over once it matched) was measured slower than this on
 * the benchmark machine at 1 KiB and 64 KiB (memset's stores beat four 64-bit stores per step),
 * so the portable build does not use one; the assembly kernels fuse the two (asm/x86_64/).
 */
size_t fm_check_refill_c(void *p, uint8_t expect, uint8_t fill, size_t n)
{
    if (!check_fill_scalar(p, expect, n))
        return 0;
    memset(p, fill, n);
    return n;
}

#if defined(FASTMM_HAVE_ASM)
/* The installed kernels when the assembly ones run: the SIMD entry from 128 bytes only. */
static bool check_fill_asm(const void *p, uint8_t byte, size_t n)
{
    if (n >= FM_KERNELS_ASM_MIN_SIZE)
        return fm_check_fill_sse2(p, byte, n);
    return check_fill_scalar(p, byte, n);
}

#if defined(FASTMM_ASM_X86_64)
static bool check_fill_asm_avx2(const void *p, uint8_t byte, size_t n)
{
    if (n >= FM_KERNELS_ASM_MIN_SIZE)
        return fm_check_fill_avx2(p, byte, n);
    return check_fill_scalar(p, byte, n);
}
#endif

/* The fills engage later than the check: below 1 KiB glibc's memset (its AVX-512 or AVX2
 * version, by ifunc) beat both on the benchmark machine (128 B: 3.0 TSC cycles against 4.8
 * SSE2 and 5.4 AVX2; 512 B: 5.3 against 9.8 and 7.1), from 1 KiB the AVX2 fill wins (1 KiB:
 * 10.3 against 12.4; 4 KiB: 40 against memset's 74, where it switches to rep stosb). */

static void fill_asm(void *p, uint8_t byte, size_t n)
{
    if (n >= FM_KERNELS_FILL_MIN_SIZE)
        fm_fill_sse2(p, byte, n);
    else
        memset(p, byte, n);
}

#if defined(FASTMM_ASM_X86_64)
static void fill_asm_avx2(void *p, uint8_t byte, size_t n)
{
    if (n >= FM_KERNELS_FILL_MIN_SIZE)
        fm_fill_avx2(p, byte, n);
    else
        memset(p, byte, n);
}

static size_t check_refill_asm(void *p, uint8_t expect, uint8_t fill, size_t n)
{
    if (n >= FM_KERNELS_ASM_MIN_SIZE)
        return fm_check_refill_sse2(p, expect, fill, n);
    return fm_check_refill_c(p, expect, fill, n);
}

static size_t check_refill_asm_avx2(void *p, uint8_t expect, uint8_t fill, size_t n)
{
    if (n >= FM_KERNELS_ASM_MIN_SIZE)
        return fm_check_refill_avx2(p, expect, fill, n);
    return fm_check_refill_c(p, expect, fill, n);
}

static bool check_fill_asm_avx512(const void *p, uint8_t byte, size_t n)
{
    if (n >= FM_KERNELS_ASM_MIN_SIZE)
        return fm_check_fill_avx512(p, byte, n);
    return check_fill_scalar(p, byte, n);
}

static void fill_asm_avx512(void *p, uint8_t byte, size_t n)
{
    if (n >= FM_KERNELS_FILL_MIN_SIZE)
        fm_fill_avx512(p, byte, n);
    else
        memset(p, byte, n);
}

static size_t check_refill_asm_avx512(void *p, uint8_t expect, uint8_t fill, size_t n)
{
    if (n >= FM_KERNELS_ASM_MIN_SIZE)
        return fm_check_refill_avx512(p, expect, fill, n);
    return fm_check_refill_c(p, expect, fill, n);
}
#else
/* i386: no one-pass kernel; the SSE2 check, then the SSE2 fill. */
static size_t check_refill_asm(void *p, uint8_t expect, uint8_t fill, size_t n)
{
    if (!check_fill_asm(p, expect, n))
        return 0;
    fill_asm(p, fill, n);
    return n;
}
#endif
#endif

bool fm_kernels_asm_usable(void)
{
#if defined(FASTMM_ASM_X86_64)
    return true; /* SSE2 is part of x86_64 */
#elif defined(FASTMM_ASM_I386)
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return false;
    return (d & bit_SSE2) != 0;
#else
    return false;
#endif
}

#if defined(FASTMM_ASM_X86_64)
/* Whether cpuid leaf 1 reports every feature of ecx_bits (OSXSAVE among them: xgetbv exists),
 * XCR0 says the OS saves every state of xcr0_bits, and cpuid leaf 7 reports every feature of
 * ebx_bits. */
static bool x86_probe(unsigned ecx_bits, unsigned xcr0_bits, unsigned ebx_bits)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || (c & ecx_bits) != ecx_bits)
        return false;
    unsigned lo, hi;
    __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & xcr0_bits) != xcr0_bits)
        return false;
    return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & ebx_bits) == ebx_bits;
}

/* Asked once per feature set: cpuid traps to the hypervisor on a virtual machine (microseconds
 * each). *known: -1 until asked. */
static bool x86_probed(int *known, unsigned ecx_bits, unsigned xcr0_bits, unsigned ebx_bits)
{
    int k = __atomic_load_n(known, __ATOMIC_RELAXED);
    if (k < 0) {
        k = x86_probe(ecx_bits, xcr0_bits, ebx_bits);
        __atomic_store_n(known, k, __ATOMIC_RELAXED);
    }
    return k != 0;
}
#endif

/* AVX and AVX2, and XCR0 bits 1 and 2: the OS saves the SSE and AVX state. */
bool fm_kernels_avx2_usable(void)
{
#if defined(FASTMM_ASM_X86_64)
    static int known = -1;
    return x86_probed(&known, bit_OSXSAVE | bit_AVX, 0x6u, bit_AVX2);
#else
    return false;
#endif
}

/* AVX512F and AVX512BW (byte compares into mask registers), and XCR0 bits 1, 2, 5, 6 and 7: the
 * OS saves the SSE, AVX, opmask and both halves of the ZMM state. */
bool fm_kernels_avx512_usable(void)
{
#if defined(FASTMM_ASM_X86_64)
    static int known = -1;
    return x86_probed(&known, bit_OSXSAVE, 0xE6u, bit_AVX512F | bit_AVX512BW);
#else
    return false;
#endif
}

void fm_kernels_init(bool disable_asm)
{
    fm_kernels_t k = {fm_fill_c, fm_check_fill_c, fm_check_refill_c};
    const char *name = "portable C";
#if defined(FASTMM_HAVE_ASM)
    if (disable_asm)
        name = "portable C (FASTMM5_DISABLE_ASM)";
    else if (!fm_kernels_asm_usable())
        name = "portable C (no SSE2)";
    else {
        k.fill = fill_asm;
        k.check_fill = check_fill_asm;
        k.check_refill = check_refill_asm;
#if defined(FASTMM_ASM_I386)
        name = "SSE2 (i386, cpuid)";
#else
        name = "SSE2 (x86_64)";
        if (fm_kernels_avx2_usable() && !fm_kernels_avx2_disabled) {
            k.check_fill = check_fill_asm_avx2;
            k.fill = fill_asm_avx2;
            k.check_refill = check_refill_asm_avx2;
            name = "SSE2 (x86_64; AVX2 check and fills)";
            if (fm_kernels_avx512_usable() && !fm_kernels_avx512_disabled) {
                k.check_fill = check_fill_asm_avx512;
                k.fill = fill_asm_avx512;
                k.check_refill = check_refill_asm_avx512;
                name = "SSE2 (x86_64; AVX-512 check and fills)";
            }
        }
#endif
    }
#else
    (void)disable_asm; /* built without assembly kernels (--disable-asm or no asm/ for the host) */
#endif
    fm_kernels = k;
    kernels_name = name;
}

const char *fm_kernels_name(void) { return kernels_name; }
