/*
 * void fm_copy_sse2(void *dst, const void *src, size_t n)    x86_64, SSE2
 *
 * memcpy semantics (the ranges must not overlap). Requires n >= 16 (kernels.c calls it from
 * 128 bytes). The last 16 source bytes are loaded first; the body is copied with unaligned
 * loads and stores, 64 bytes per iteration, then 16, and the saved last 16 bytes are stored
 * ending exactly at dst + n. Nothing outside the two ranges is read or written.
 */
#include "../asmdefs.h"

ENTRY(fm_copy_sse2)
    movdqu  -16(%rsi,%rdx), %xmm5       /* the last 16 bytes */
    cmpq    $64, %rdx
    jb      2f
1:  movdqu  (%rsi), %xmm0
    movdqu  16(%rsi), %xmm1
    movdqu  32(%rsi), %xmm2
    movdqu  48(%rsi), %xmm3
    movdqu  %xmm0, (%rdi)
    movdqu  %xmm1, 16(%rdi)
    movdqu  %xmm2, 32(%rdi)
    movdqu  %xmm3, 48(%rdi)
    addq    $64, %rsi
    addq    $64, %rdi
    subq    $64, %rdx
    cmpq    $64, %rdx
    jae     1b
2:  cmpq    $16, %rdx
    jbe     3f
    movdqu  (%rsi), %xmm0
    movdqu  %xmm0, (%rdi)
    addq    $16, %rsi
    addq    $16, %rdi
    subq    $16, %rdx
    jmp     2b
3:  movdqu  %xmm5, -16(%rdi,%rdx)       /* ends at dst + n */
    ret
END(fm_copy_sse2)
