/*
 * size_t fm_check_refill_avx2(void *p, uint8_t expect, uint8_t fill, size_t n)    x86_64, AVX2
 *
 * The freed-block check and the next allocation's fill in one pass (debug mode reusing a freed
 * block): while the bytes at p equal expect, overwrite them with fill. Returns n when all n
 * bytes matched (all now hold fill). Otherwise returns k < n: [p, p + k) matched and now holds
 * fill, [p + k, p + n) is untouched and holds a byte other than expect (the caller writes expect
 * back over the first k bytes and reports the block as it was). Requires n >= 64 (kernels.c calls
 * it from 128 bytes); touches nothing outside [p, p + n).
 *
 * Unlike the plain check this branches on the data, once per step: nothing may be overwritten
 * before it has been checked. The stores are aligned (a debug user area is 16-byte aligned and
 * the pattern starts after the 8-byte marker word, so unaligned 32-byte stores would split cache
 * lines half the time: 15% slower at 4 KiB): the first and last 32 bytes (the unaligned head and
 * tail windows) are compared first and written once the steps around them are done; between
 * them 32-byte aligned steps, then 128-byte ones, then 32-byte ones. After each step [p, rdi) is
 * written; a mismatch returns rdi - p.
 */
#include "../asmdefs.h"

ENTRY(fm_check_refill_avx2)
    vmovd   %esi, %xmm0
    vpbroadcastb %xmm0, %ymm0           /* ymm0 = expect x 32 */
    vmovd   %edx, %xmm1
    vpbroadcastb %xmm1, %ymm1           /* ymm1 = fill x 32 */
    movq    %rdi, %r8                   /* r8 = p */
    leaq    (%rdi,%rcx), %r10           /* r10 = p + n */
    leaq    -32(%r10), %r9              /* r9 = p + n - 32: the tail window */
    xorl    %eax, %eax                  /* 0 returned while nothing is written */
    vpcmpeqb (%rdi), %ymm0, %ymm2       /* head and tail windows */
    vpcmpeqb (%r9), %ymm0, %ymm3
    vpand   %ymm3, %ymm2, %ymm2
    leaq    32(%rdi), %rdi
    andq    $-32, %rdi                  /* rdi = first 32-byte boundary after p (<= p + 32) */
    vpcmpeqb (%rdi), %ymm0, %ymm3       /* the first aligned step (rdi + 32 <= p + 64 <= p + n) */
    vpand   %ymm3, %ymm2, %ymm2
    vpmovmskb %ymm2, %edx
    cmpl    $-1, %edx
    jne     9f
    vmovdqu %ymm1, (%r8)                /* head window, then the first step: [p, rdi + 32) */
    vmovdqa %ymm1, (%rdi)
    addq    $32, %rdi
    leaq    -128(%r10), %rcx            /* rcx = last start of a 128-byte step */
    cmpq    %rcx, %rdi
    ja      2f
1:  vpcmpeqb (%rdi), %ymm0, %ymm2       /* 128 bytes: all four compares must match */
    vpcmpeqb 32(%rdi), %ymm0, %ymm3
    vpcmpeqb 64(%rdi), %ymm0, %ymm4
    vpcmpeqb 96(%rdi), %ymm0, %ymm5
    vpand   %ymm3, %ymm2, %ymm2
    vpand   %ymm5, %ymm4, %ymm4
    vpand   %ymm4, %ymm2, %ymm2
    vpmovmskb %ymm2, %edx
    cmpl    $-1, %edx
    jne     8f
    vmovdqa %ymm1, (%rdi)
    vmovdqa %ymm1, 32(%rdi)
    vmovdqa %ymm1, 64(%rdi)
    vmovdqa %ymm1, 96(%rdi)
    subq    $-128, %rdi
    cmpq    %rcx, %rdi
    jbe     1b
2:  leaq    -32(%r10), %rcx             /* 32-byte steps while one fits before p + n */
3:  cmpq    %rcx, %rdi
    ja      4f
    vpcmpeqb (%rdi), %ymm0, %ymm2
    vpmovmskb %ymm2, %edx
    cmpl    $-1, %edx
    jne     8f
    vmovdqa %ymm1, (%rdi)
    addq    $32, %rdi
    jmp     3b
4:  vmovdqu %ymm1, (%r9)                /* the tail window, checked at the start */
    movq    %r10, %rax
    subq    %r8, %rax                   /* n */
    vzeroupper
    ret
8:  movq    %rdi, %rax                  /* a mismatch in the step at rdi: k = rdi - p */
    subq    %r8, %rax
9:  vzeroupper
    ret
END(fm_check_refill_avx2)
