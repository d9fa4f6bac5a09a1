/*
 * bool fm_check_fill_avx512(const void *p, uint8_t byte, size_t n)    x86_64, AVX-512BW
 *
 * The freed-block check with 64-byte vectors: true when all n bytes at p equal byte. Requires
 * n >= 64 (kernels.c calls it from 128 bytes). It reads whole aligned 64-byte lines (a 64-byte
 * load that crosses a line, worse a page, is slow): the first and last lines, which [p, p + n)
 * covers only in part, under a byte mask (k5, k6: masked-out bytes are not read) with a
 * not-equal compare whose mask must come out empty; the whole lines between them 256 bytes per
 * iteration into four accumulating masked equal compares (k1..k4, k{k}: a bit stays set only
 * while every compare in its column matched), then 64 into k1. The only branches depend on n,
 * never on the data. vzeroupper before returning.
 */
#include "../asmdefs.h"

ENTRY(fm_check_fill_avx512)
    vpbroadcastb %esi, %zmm0            /* zmm0 = byte x 64 */
    leaq    (%rdi,%rdx), %rdx           /* rdx = p + n */
    movl    %edi, %ecx
    andl    $63, %ecx
    movq    $-1, %rax
    shlq    %cl, %rax
    kmovq   %rax, %k5                   /* k5: the bytes of the first line from p on */
    movl    %edx, %ecx
    andl    $63, %ecx
    movq    $-1, %rax
    shlq    %cl, %rax
    notq    %rax
    kmovq   %rax, %k6                   /* k6: the last line's bytes below p + n (none: aligned) */
    andq    $-64, %rdx                  /* rdx = the last line: partly in [p, p + n), or p + n */
    andq    $-64, %rdi                  /* rdi = the first line (p + n >= its end: n >= 64) */
    vpcmpneqb (%rdi), %zmm0, %k7{%k5}   /* k7: mismatches in the first and last lines */
    addq    $64, %rdi
    kxnorq  %k1, %k1, %k1               /* the four column accumulators: all ones */
    kxnorq  %k2, %k2, %k2
    kxnorq  %k3, %k3, %k3
    kxnorq  %k4, %k4, %k4
    leaq    -256(%rdx), %rcx            /* rcx = last start of a 256-byte step */
    cmpq    %rcx, %rdi
    ja      2f
1:  vpcmpeqb (%rdi), %zmm0, %k1{%k1}
    vpcmpeqb 64(%rdi), %zmm0, %k2{%k2}
    vpcmpeqb 128(%rdi), %zmm0, %k3{%k3}
    vpcmpeqb 192(%rdi), %zmm0, %k4{%k4}
    addq    $256, %rdi
    cmpq    %rcx, %rdi
    jbe     1b
2:  cmpq    %rdx, %rdi                  /* whole lines below the last one */
    jae     3f
    vpcmpeqb (%rdi), %zmm0, %k1{%k1}
    addq    $64, %rdi
    jmp     2b
3:  kortestq %k6, %k6                   /* p + n aligned: no last line to read */
    jz      4f
    vpcmpneqb (%rdx), %zmm0, %k5{%k6}
    korq    %k5, %k7, %k7
4:  kandq   %k2, %k1, %k1
    kandq   %k4, %k3, %k3
    kandq   %k3, %k1, %k1
    xorl    %eax, %eax
    kortestq %k1, %k1                   /* CF: every whole line matched */
    setc    %al
    kortestq %k7, %k7                   /* ZF: no mismatch in the first and last lines */
    setz    %cl
    andb    %cl, %al
    vzeroupper
    ret
END(fm_check_fill_avx512)
