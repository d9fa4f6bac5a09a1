/*
 * size_t fm_check_refill_avx512(void *p, uint8_t expect, uint8_t fill, size_t n)
 *                                                                    x86_64, AVX-512BW
 *
 * The one-pass check and refill of check_refill_avx2.S with 64-byte vectors, the same contract:
 * returns n when all n bytes equalled expect and now hold fill; else k < n with [p, p + k)
 * refilled and [p + k, p + n) untouched, holding a byte other than expect. Requires n >= 64
 * (kernels.c calls it from 128 bytes); touches nothing outside [p, p + n).
 *
 * It works on whole aligned 64-byte lines, in order (see fill_avx512.S: a 64-byte access that
 * crosses a line, worse a page, is slow): the first and last lines, which [p, p + n) covers
 * only in part, are compared and stored under a byte mask (k2, k3: masked-out bytes are neither
 * read nor written), with a not-equal compare whose mask must come out empty; the whole lines
 * between them 256 bytes per step, then 64, each step's equal compares chained as masked
 * compares (k1{k1}: a bit stays set only while every compare so far matched) and kortestq
 * setting CF when all 64 bits are. A step is stored only once it matched; a mismatch in the
 * step at rdi returns max(rdi, p) - p.
 */
#include "../asmdefs.h"

ENTRY(fm_check_refill_avx512)
    vpbroadcastb %esi, %zmm0            /* zmm0 = expect x 64 */
    vpbroadcastb %edx, %zmm1            /* zmm1 = fill x 64 */
    movq    %rdi, %r8                   /* r8 = p */
    leaq    (%rdi,%rcx), %r10           /* r10 = p + n */
    movl    %edi, %ecx
    andl    $63, %ecx
    movq    $-1, %rax
    shlq    %cl, %rax
    kmovq   %rax, %k2                   /* k2: the bytes of the first line from p on */
    movl    %r10d, %ecx
    andl    $63, %ecx
    movq    $-1, %rax
    shlq    %cl, %rax
    notq    %rax
    kmovq   %rax, %k3                   /* k3: the last line's bytes below p + n (none: aligned) */
    movq    %r10, %r9
    andq    $-64, %r9                   /* r9 = the last line: partly in [p, p + n), or p + n */
    andq    $-64, %rdi                  /* rdi = the first line (p + n >= its end: n >= 64) */
    xorl    %eax, %eax                  /* 0 returned while nothing is written */
    vpcmpneqb (%rdi), %zmm0, %k1{%k2}
    kortestq %k1, %k1
    jnz     9f
    vmovdqu8 %zmm1, (%rdi){%k2}
    addq    $64, %rdi
    leaq    -256(%r9), %rcx             /* rcx = last start of a 256-byte step */
    cmpq    %rcx, %rdi
    ja      2f
1:  vpcmpeqb (%rdi), %zmm0, %k1         /* 256 bytes: all four compares must match */
    vpcmpeqb 64(%rdi), %zmm0, %k1{%k1}
    vpcmpeqb 128(%rdi), %zmm0, %k1{%k1}
    vpcmpeqb 192(%rdi), %zmm0, %k1{%k1}
    kortestq %k1, %k1
    jnc     8f
    vmovdqa64 %zmm1, (%rdi)
    vmovdqa64 %zmm1, 64(%rdi)
    vmovdqa64 %zmm1, 128(%rdi)
    vmovdqa64 %zmm1, 192(%rdi)
    addq    $256, %rdi
    cmpq    %rcx, %rdi
    jbe     1b
2:  cmpq    %r9, %rdi                   /* whole lines below the last one */
    jae     3f
    vpcmpeqb (%rdi), %zmm0, %k1
    kortestq %k1, %k1
    jnc     8f
    vmovdqa64 %zmm1, (%rdi)
    addq    $64, %rdi
    jmp     2b
3:  kortestq %k3, %k3                   /* p + n aligned: no last line to touch */
    jz      4f
    vpcmpneqb (%r9), %zmm0, %k1{%k3}
    kortestq %k1, %k1
    jnz     8f
    vmovdqu8 %zmm1, (%r9){%k3}
4:  movq    %r10, %rax
    subq    %r8, %rax                   /* n */
    vzeroupper
    ret
8:  movq    %rdi, %rax                  /* a mismatch in the line(s) at rdi (> p): k = rdi - p */
    subq    %r8, %rax
9:  vzeroupper
    ret
END(fm_check_refill_avx512)
