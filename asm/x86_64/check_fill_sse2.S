/*
 * bool fm_check_fill_sse2(const void *p, uint8_t byte, size_t n)    x86_64, SSE2
 *
 * True when all n bytes at p equal byte. Requires n >= 16 (kernels.c calls it from 128
 * bytes; below that the scalar C twin fm_check_fill_c runs). Reads nothing outside
 * [p, p + n): unaligned loads (movdqu: a user area is only 16-byte aligned) of 64 bytes per
 * iteration, then 16 at a time, then one final 16-byte load ending exactly at p + n (it may
 * overlap bytes already checked). Each load is compared with pcmpeqb against the broadcast
 * byte and AND-combined (pand) into an accumulator; one pmovmskb at the end. The only
 * branches depend on n, never on the data, so the time does not depend on where (or whether)
 * a byte differs.
 */
#include "../asmdefs.h"

ENTRY(fm_check_fill_sse2)
    movzbl  %sil, %eax
    imull   $0x01010101, %eax, %eax
    movd    %eax, %xmm0
    pshufd  $0, %xmm0, %xmm0            /* xmm0 = byte x 16 */
    pcmpeqb %xmm1, %xmm1                /* accumulator: all ones */
    cmpq    $64, %rdx
    jb      2f
1:  movdqu  (%rdi), %xmm2
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
    pand    %xmm2, %xmm1
    addq    $64, %rdi
    subq    $64, %rdx
    cmpq    $64, %rdx
    jae     1b
2:  cmpq    $16, %rdx                   /* 16-byte steps while more than 16 remain */
    jbe     3f
    movdqu  (%rdi), %xmm2
    pcmpeqb %xmm0, %xmm2
    pand    %xmm2, %xmm1
    addq    $16, %rdi
    subq    $16, %rdx
    jmp     2b
3:  movdqu  -16(%rdi,%rdx), %xmm2       /* the last 16 bytes: ends at p + n */
    pcmpeqb %xmm0, %xmm2
    pand    %xmm2, %xmm1
    pmovmskb %xmm1, %ecx
    xorl    %eax, %eax
    cmpl    $0xffff, %ecx
    sete    %al
    ret
END(fm_check_fill_sse2)
