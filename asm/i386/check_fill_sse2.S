/*
 * bool fm_check_fill_sse2(const void *p, uint8_t byte, size_t n)    i386 (cdecl), SSE2
 *
 * The i386 twin of asm/x86_64/check_fill_sse2.S (see there): n >= 16, 64 bytes per iteration
 * with movdqu + pcmpeqb + pand into an accumulator, 16-byte steps, one final load ending at
 * p + n, one pmovmskb; no data-dependent branch and no read outside [p, p + n). kernels.c only
 * installs it after a cpuid check for SSE2.
 */
#include "../asmdefs.h"

ENTRY(fm_check_fill_sse2)
    movl    4(%esp), %eax               /* p */
    movzbl  8(%esp), %ecx               /* byte */
    movl    12(%esp), %edx              /* n */
    imull   $0x01010101, %ecx, %ecx
    movd    %ecx, %xmm0
    pshufd  $0, %xmm0, %xmm0            /* xmm0 = byte x 16 */
    pcmpeqb %xmm1, %xmm1                /* accumulator: all ones */
    cmpl    $64, %edx
    jb      2f
1:  movdqu  (%eax), %xmm2
    movdqu  16(%eax), %xmm3
    movdqu  32(%eax), %xmm4
    movdqu  48(%eax), %xmm5
    pcmpeqb %xmm0, %xmm2
    pcmpeqb %xmm0, %xmm3
    pcmpeqb %xmm0, %xmm4
    pcmpeqb %xmm0, %xmm5
    pand    %xmm3, %xmm2
    pand    %xmm5, %xmm4
    pand    %xmm4, %xmm2
    pand    %xmm2, %xmm1
    addl    $64, %eax
    subl    $64, %edx
    cmpl    $64, %edx
    jae     1b
2:  cmpl    $16, %edx
    jbe     3f
    movdqu  (%eax), %xmm2
    pcmpeqb %xmm0, %xmm2
    pand    %xmm2, %xmm1
    addl    $16, %eax
    subl    $16, %edx
    jmp     2b
3:  movdqu  -16(%eax,%edx), %xmm2       /* the last 16 bytes: ends at p + n */
    pcmpeqb %xmm0, %xmm2
    pand    %xmm2, %xmm1
    pmovmskb %xmm1, %ecx
    xorl    %eax, %eax
    cmpl    $0xffff, %ecx
    sete    %al
    ret
END(fm_check_fill_sse2)
