/*
 * void fm_copy_sse2(void *dst, const void *src, size_t n)    i386 (cdecl), SSE2
 *
 * The i386 twin of asm/x86_64/copy_sse2.S (see there): memcpy semantics, n >= 16, unaligned
 * 64- then 16-byte steps, the last 16 bytes loaded first and stored ending at dst + n.
 */
#include "../asmdefs.h"

ENTRY(fm_copy_sse2)
    movl    4(%esp), %eax               /* dst */
    movl    8(%esp), %ecx               /* src */
    movl    12(%esp), %edx              /* n */
    movdqu  -16(%ecx,%edx), %xmm5       /* the last 16 bytes */
    cmpl    $64, %edx
    jb      2f
1:  movdqu  (%ecx), %xmm0
    movdqu  16(%ecx), %xmm1
    movdqu  32(%ecx), %xmm2
    movdqu  48(%ecx), %xmm3
    movdqu  %xmm0, (%eax)
    movdqu  %xmm1, 16(%eax)
    movdqu  %xmm2, 32(%eax)
    movdqu  %xmm3, 48(%eax)
    addl    $64, %ecx
    addl    $64, %eax
    subl    $64, %edx
    cmpl    $64, %edx
    jae     1b
2:  cmpl    $16, %edx
    jbe     3f
    movdqu  (%ecx), %xmm0
    movdqu  %xmm0, (%eax)
    addl    $16, %ecx
    addl    $16, %eax
    subl    $16, %edx
    jmp     2b
3:  movdqu  %xmm5, -16(%eax,%edx)       /* ends at dst + n */
    ret
END(fm_copy_sse2)
