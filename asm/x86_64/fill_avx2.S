/*
 * void fm_fill_avx2(void *p, uint8_t byte, size_t n)    x86_64, AVX2
 *
 * The SSE2 fill (fill_sse2.S) with 32-byte stores, for CPUs that have AVX2 (kernels.c picks it
 * with the AVX2 check). Requires n >= 32 (kernels.c calls it from 128 bytes). Head and tail are
 * single unaligned 32-byte stores at p and ending at p + n; between them aligned stores, 128
 * bytes per iteration, then 32. They overlap the head and tail; nothing outside [p, p + n) is
 * written. vzeroupper before returning.
 */
#include "../asmdefs.h"

ENTRY(fm_fill_avx2)
    vmovd   %esi, %xmm0
    vpbroadcastb %xmm0, %ymm0           /* ymm0 = byte x 32 */
    leaq    -32(%rdi,%rdx), %rcx        /* rcx = p + n - 32: the tail store */
    leaq    -128(%rdi,%rdx), %rdx       /* rdx = p + n - 128: last start of a 128-byte step */
    vmovdqu %ymm0, (%rdi)               /* head */
    leaq    32(%rdi), %rax
    andq    $-32, %rax                  /* first 32-byte boundary after p */
    cmpq    %rdx, %rax
    ja      2f
1:  vmovdqa %ymm0, (%rax)
    vmovdqa %ymm0, 32(%rax)
    vmovdqa %ymm0, 64(%rax)
    vmovdqa %ymm0, 96(%rax)
    subq    $-128, %rax
    cmpq    %rdx, %rax
    jbe     1b
2:  cmpq    %rcx, %rax                  /* aligned 32-byte stores while below the tail */
    jae     3f
    vmovdqa %ymm0, (%rax)
    addq    $32, %rax
    jmp     2b
3:  vmovdqu %ymm0, (%rcx)               /* tail: ends at p + n */
    vzeroupper
    ret
END(fm_fill_avx2)
