/*
 * bool fm_check_fill_avx2(const void *p, uint8_t byte, size_t n)    x86_64, AVX2
 *
 * The SSE2 freed-block check (check_fill_sse2.S) twice as wide, for CPUs that have AVX2 (chosen
 * at initialization by kernels.c after cpuid and xgetbv): true when all n bytes at p equal
 * byte. Requires n >= 32 (kernels.c calls it from 128 bytes). Reads nothing outside
 * [p, p + n): 128 bytes per iteration, then 32 at a time, then one final 32-byte compare ending
 * exactly at p + n (it may overlap bytes already checked). VEX compares take unaligned memory
 * operands, so there are no separate loads. Results are AND-combined into an accumulator
 * (vpand) and tested once with vpmovmskb at the end: the only branches depend on n, never on
 * the data. vzeroupper before returning, so that SSE code after it pays no transition penalty.
 */
#include "../asmdefs.h"

ENTRY(fm_check_fill_avx2)
    vmovd   %esi, %xmm0
    vpbroadcastb %xmm0, %ymm0           /* ymm0 = byte x 32 */
    vpcmpeqb %ymm1, %ymm1, %ymm1        /* accumulator: all ones */
    cmpq    $128, %rdx
    jb      2f
1:  vpcmpeqb (%rdi), %ymm0, %ymm2
    vpcmpeqb 32(%rdi), %ymm0, %ymm3
    vpcmpeqb 64(%rdi), %ymm0, %ymm4
    vpcmpeqb 96(%rdi), %ymm0, %ymm5
    vpand   %ymm3, %ymm2, %ymm2
    vpand   %ymm5, %ymm4, %ymm4
    vpand   %ymm4, %ymm2, %ymm2
    vpand   %ymm2, %ymm1, %ymm1
    subq    $-128, %rdi
    addq    $-128, %rdx
    cmpq    $128, %rdx
    jae     1b
2:  cmpq    $32, %rdx                   /* 32-byte steps while more than 32 remain */
    jbe     3f
    vpcmpeqb (%rdi), %ymm0, %ymm2
    vpand   %ymm2, %ymm1, %ymm1
    addq    $32, %rdi
    subq    $32, %rdx
    jmp     2b
3:  vpcmpeqb -32(%rdi,%rdx), %ymm0, %ymm2 /* the last 32 bytes: end at p + n */
    vpand   %ymm2, %ymm1, %ymm1
    vpmovmskb %ymm1, %ecx
    vzeroupper
    xorl    %eax, %eax
    cmpl    $-1, %ecx
    sete    %al
    ret
END(fm_check_fill_avx2)
