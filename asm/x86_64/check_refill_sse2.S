/*
 * size_t fm_check_refill_sse2(void *p, uint8_t expect, uint8_t fill, size_t n)    x86_64, SSE2
 *
 * check_refill_avx2.S with 16-byte registers (its comment has the contract): while the bytes at
 * p equal expect, overwrite them with fill; n when all matched, else the length k of the checked
 * and overwritten prefix ([p + k, p + n) untouched, a mismatch in it). Requires n >= 16;
 * touches nothing outside [p, p + n). 64 bytes per iteration, one branch on the data each; the
 * last 16 bytes are checked first and written last.
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
    leaq    -16(%rdi,%rcx), %r9         /* r9 = p + n - 16: the tail window */
    xorl    %eax, %eax                  /* 0 returned if the tail does not match */
    movdqu  (%r9), %xmm2
    pcmpeqb %xmm0, %xmm2
    pmovmskb %xmm2, %edx
    cmpl    $0xffff, %edx
    jne     9f
    cmpq    $64, %rcx
    jb      2f
1:  movdqu  (%rdi), %xmm2               /* 64 bytes: all four compares must match */
    movdqu  16(%rdi), %xmm3
    movdqu  32(%rdi), %xmm4
    movdqu  48(%rdi), %xmm5
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
    movdqu  %xmm1, (%rdi)
    movdqu  %xmm1, 16(%rdi)
    movdqu  %xmm1, 32(%rdi)
    movdqu  %xmm1, 48(%rdi)
    addq    $64, %rdi
    subq    $64, %rcx
    cmpq    $64, %rcx
    jae     1b
2:  cmpq    $16, %rcx                   /* 16-byte steps while more than 16 remain */
    jbe     3f
    movdqu  (%rdi), %xmm2
    pcmpeqb %xmm0, %xmm2
    pmovmskb %xmm2, %edx
    cmpl    $0xffff, %edx
    jne     8f
    movdqu  %xmm1, (%rdi)
    addq    $16, %rdi
    subq    $16, %rcx
    jmp     2b
3:  movdqu  %xmm1, (%r9)                /* the tail window, checked at the start */
    leaq    16(%r9), %rax
    subq    %r8, %rax                   /* n */
    ret
8:  movq    %rdi, %rax                  /* a mismatch in the step at rdi: k = rdi - p */
    subq    %r8, %rax
9:  ret
END(fm_check_refill_sse2)
