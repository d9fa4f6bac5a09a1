/*
 * size_t fm_check_refill_sse2(void *p, uint8_t expect, uint8_t fill, size_t n)    x86_64, SSE2
 *
 * check_refill_avx2.S with 16-byte registers (its comment has the contract and the shape):
 * while the bytes at p equal expect, overwrite them with fill; n when all matched, else the
 * length k of the checked and overwritten prefix ([p + k, p + n) untouched, a mismatch in it).
 * Requires n >= 32; touches nothing outside [p, p + n). The first and last 16 bytes are compared
 * first; aligned stores between them, a 16-byte step, 64-byte steps, then 16-byte ones.
 */
#include "../asmdefs.h"

ENTRY(fm_check_refill_sse2)
    movzbl  %sil, %eax
    imull   $0x01010101, %eax, %eax
    movd    %eax, %xmm0
    pshufd  $0, %xmm0, %xmm0            /* xmm0 = expect x 16 */
    movzbl  %dl, %eax
    imull   $0x01010101, %eax, %eax
    movd    %eax, %xmm1
    pshufd  $0, %xmm1, %xmm1            /* xmm1 = fill x 16 */
    movq    %rdi, %r8                   /* r8 = p */
    leaq    (%rdi,%rcx), %r10           /* r10 = p + n */
    leaq    -16(%r10), %r9              /* r9 = p + n - 16: the tail window */
    xorl    %eax, %eax                  /* 0 returned while nothing is written */
    movdqu  (%rdi), %xmm2               /* head and tail windows */
    movdqu  (%r9), %xmm3
    pcmpeqb %xmm0, %xmm2
    pcmpeqb %xmm0, %xmm3
    pand    %xmm3, %xmm2
    leaq    16(%rdi), %rdi
    andq    $-16, %rdi                  /* rdi = first 16-byte boundary after p (<= p + 16) */
    movdqa  (%rdi), %xmm3               /* the first aligned step (rdi + 16 <= p + 32 <= p + n) */
    pcmpeqb %xmm0, %xmm3
    pand    %xmm3, %xmm2
    pmovmskb %xmm2, %edx
    cmpl    $0xffff, %edx
    jne     9f
    movdqu  %xmm1, (%r8)                /* head window, then the first step: [p, rdi + 16) */
    movdqa  %xmm1, (%rdi)
    addq    $16, %rdi
    leaq    -64(%r10), %rcx             /* rcx = last start of a 64-byte step */
    cmpq    %rcx, %rdi
    ja      2f
1:  movdqa  (%rdi), %xmm2               /* 64 bytes: all four compares must match */
    movdqa  16(%rdi), %xmm3
    movdqa  32(%rdi), %xmm4
    movdqa  48(%rdi), %xmm5
    pcmpeqb %xmm0, %xmm2
    pcmpeqb %xmm0, %xmm3
    pcmpeqb %xmm0, %xmm4
    pcmpeqb %xmm0, %xmm5
    pand    %xmm3, %xmm2
    pand    %xmm5, %xmm4
    pand    %xmm4, %xmm2
    pmovmskb %xmm2, %edx
    cmpl    $0xffff, %edx
    jne     8f
    movdqa  %xmm1, (%rdi)
    movdqa  %xmm1, 16(%rdi)
    movdqa  %xmm1, 32(%rdi)
    movdqa  %xmm1, 48(%rdi)
    addq    $64, %rdi
    cmpq    %rcx, %rdi
    jbe     1b
2:  leaq    -16(%r10), %rcx             /* 16-byte steps while one fits before p + n */
3:  cmpq    %rcx, %rdi
    ja      4f
    movdqa  (%rdi), %xmm2
    pcmpeqb %xmm0, %xmm2
    pmovmskb %xmm2, %edx
    cmpl    $0xffff, %edx
    jne     8f
    movdqa  %xmm1, (%rdi)
    addq    $16, %rdi
    jmp     3b
4:  movdqu  %xmm1, (%r9)                /* the tail window, checked at the start */
    movq    %r10, %rax
    subq    %r8, %rax                   /* n */
    ret
8:  movq    %rdi, %rax                  /* a mismatch in the step at rdi: k = rdi - p */
    subq    %r8, %rax
9:  ret
END(fm_check_refill_sse2)
