/*
 * kernels.c - portable C versions of the byte kernels and the one place that picks which
 * versions run. The debug mode's fill and freed-block check go through fm_kernels.
 */
#include "internal.h"

#include <string.h>

fm_kernels_t fm_kernels;

static void fill_c(void *p, uint8_t byte, size_t n) { memset(p, byte, n); }

static void copy_c(void *dst, const void *src, size_t n) { memcpy(dst, src, n); }

static uint64_t load64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v); /* unaligned-safe: a user area is only 16-byte aligned */
    return v;
}

/*
 * FastMM5's scalar check: 32 bytes per iteration as four 64-bit compares whose results are
 * AND-combined (no early exit, so the time does not depend on where a difference is), then
 * 8-, 4-, 2- and 1-byte tails.
 */
bool fm_check_fill_c(const void *p, uint8_t byte, size_t n)
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

void fm_kernels_init(bool disable_asm)
{
    (void)disable_asm; /* no assembly kernels are built yet: the C versions always run */
    fm_kernels.fill = fill_c;
    fm_kernels.check_fill = fm_check_fill_c;
    fm_kernels.copy = copy_c;
}
