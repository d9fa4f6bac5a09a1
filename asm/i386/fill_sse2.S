/*
 * void fm_fill_sse2(void *p, uint8_t byte, size_t n)    i386 (cdecl), SSE2
 *
 * The i386 twin of asm/x86_64/fill_sse2.S (see there): n >= 16; unaligned head and tail
 * stores, aligned movdqa stores in between; nothing outside [p, p + n) is written.
 */
#include "../asmdefs.h"

ENTRY(fm_fill_sse2)
    movzbl  8(%esp), %ecx               /* byte */
    imull   $0x01010101, %ecx, %ecx
    movd    %ecx, %xmm0
    pshufd  $0, %xmm0, %xmm0            /* xmm0 = byte x 16 */
    movl    4(%esp), %eax               /* p */
    movl    12(%esp), %edx              /* n */
    leal    -16(%eax,%edx), %ecx        /* ecx = p + n - 16: the tail store */
    leal    -64(%eax,%edx), %edx        /* edx = p + n - 64: last start of a 64-byte step */
    movdqu  %xmm0, (%eax)               /* head */
    addl    $16, %eax
    andl    $-16, %eax                  /* first 16-byte boundary after p */
    cmpl    %edx, %eax
    ja      2f
1:  movdqa  %xmm0, (%eax)
    movdqa  %xmm0, 16(%eax)
    movdqa  %xmm0, 32(%eax)
    movdqa  %xmm0, 48(%eax)
    addl    $64, %eax
    cmpl    %edx, %eax
    jbe     1b
2:  cmpl    %ecx, %eax
    jae     3f
    movdqa  %xmm0, (%eax)
    addl    $16, %eax
    jmp     2b
3:  movdqu  %xmm0, (%ecx)               /* tail: ends at p + n */
    ret
END(fm_fill_sse2)
