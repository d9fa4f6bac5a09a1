/*
 * size_t fm_check_refill_avx2(void *p, uint8_t expect, uint8_t fill, size_t n)    x86_64, AVX2
 *
 * The freed-block check and the next allocation's fill in one pass (debug mode reusing a freed
 * block): while the bytes at p equal expect, overwrite them with fill. Returns n when all n
 * bytes matched (all now hold fill). Otherwise returns k < n: [p, p + k) matched and now hold
 * fill, [p + k, p + n) is untouched and holds a byte other than expect (the caller writes expect
 * back over the first k bytes and reports the block as it was). Requires n >= 32 (kernels.c calls
 * it from 128 bytes); touches nothing outside [p, p + n).
 *
 * Unlike the plain check this branches on the data, once per 128 bytes: nothing may be
 * overwritten before it has been checked. The last 32 bytes (ending at p + n) are checked first,
 * before any store can overlap them; they are written last.
 */
#include "../asmdefs.h"

ENTRY(fm_check_refill_avx2)
    vmovd   %esi, %xmm0
    vpbroadcastb %xmm0, %ymm0           /* ymm0 = expect x 32 */
    vmovd   %edx, %xmm1
    vpbroadcastb %xmm1, %ymm1           /* ymm1 = fill x 32 */
    movq    %rdi, %r8                   /* r8 = p */
    leaq    -32(%rdi,%rcx), %r9         /* r9 = p + n - 32: the tail window */
    xorl    %eax, %eax                  /* eax: 0 returned if the tail does not match */
    vpcmpeqb (%r9), %ymm0, %ymm2
    vpmovmskb %ymm2, %edx
    cmpl    $-1, %edx
    jne     9f
    cmpq    $128, %rcx
    jb      2f
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
    vmovdqu %ymm1, (%rdi)
    vmovdqu %ymm1, 32(%rdi)
    vmovdqu %ymm1, 64(%rdi)
    vmovdqu %ymm1, 96(%rdi)
    subq    $-128, %rdi
    addq    $-128, %rcx
    cmpq    $128, %rcx
    jae     1b
2:  cmpq    $32, %rcx                   /* 32-byte steps while more than 32 remain */
    jbe     3f
    vpcmpeqb (%rdi), %ymm0, %ymm2
    vpmovmskb %ymm2, %edx
    cmpl    $-1, %edx
    jne     8f
    vmovdqu %ymm1, (%rdi)
    addq    $32, %rdi
    subq    $32, %rcx
    jmp     2b
3:  vmovdqu %ymm1, (%r9)                /* the tail window, checked at the start */
    leaq    32(%r9), %rax
    subq    %r8, %rax                   /* n */
    vzeroupper
    ret
8:  movq    %rdi, %rax                  /* a mismatch in the step at rdi: k = rdi - p */
    subq    %r8, %rax
9:  vzeroupper
    ret
END(fm_check_refill_avx2)
