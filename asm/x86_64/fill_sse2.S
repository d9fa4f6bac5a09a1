/*
 * void fm_fill_sse2(void *p, uint8_t byte, size_t n)    x86_64, SSE2
 *
 * Sets n bytes at p to byte. Requires n >= 16 (kernels.c calls it from 128 bytes). Head and
 * tail are single unaligned 16-byte stores (movdqu) at p and ending at p + n, which overlap
 * the aligned stores (movdqa, 64 bytes per iteration, then 16) of the middle; nothing
 * outside [p, p + n) is written.
 */
#include "../asmdefs.h"

ENTRY(fm_fill_sse2)
    movzbl  %sil, %eax
    imull   $0x01010101, %eax, %eax
    movd    %eax, %xmm0
    pshufd  $0, %xmm0, %xmm0            /* xmm0 = byte x 16 */
    leaq    -16(%rdi,%rdx), %rcx        /* rcx = p + n - 16: the tail store */
    leaq    -64(%rdi,%rdx), %rdx        /* rdx = p + n - 64: last start of a 64-byte step */
    movdqu  %xmm0, (%rdi)               /* head */
    leaq    16(%rdi), %rax
    andq    $-16, %rax                  /* first 16-byte boundary after p */
    cmpq    %rdx, %rax
    ja      2f
1:  movdqa  %xmm0, (%rax)
    movdqa  %xmm0, 16(%rax)
    movdqa  %xmm0, 32(%rax)
    movdqa  %xmm0, 48(%rax)
    addq    $64, %rax
    cmpq    %rdx, %rax
    jbe     1b
2:  cmpq    %rcx, %rax                  /* aligned 16-byte stores while below the tail */
    jae     3f
    movdqa  %xmm0, (%rax)
    addq    $16, %rax
    jmp     2b
3:  movdqu  %xmm0, (%rcx)               /* tail: ends at p + n */
    ret
END(fm_fill_sse2)
