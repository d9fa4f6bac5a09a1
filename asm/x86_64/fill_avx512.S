/*
 * void fm_fill_avx512(void *p, uint8_t byte, size_t n)    x86_64, AVX-512BW
 *
 * The fill with 64-byte stores, for CPUs with AVX512F and AVX512BW whose OS saves the opmask
 * and ZMM state (kernels.c checks cpuid and xgetbv). Requires n >= 64 (kernels.c calls it from
 * 1 KiB). Every store is to a whole aligned 64-byte line: an unaligned 64-byte store always
 * splits a cache line, and one that crosses a page costs more than the rest of a 4 KiB fill
 * (measured: 105 against 82 TSC cycles). The first and last lines, which [p, p + n) covers
 * only in part, get masked stores (vmovdqu8 under k1, k2) that write only the bytes in
 * [p, p + n); between them whole lines, 256 bytes per iteration, then 64. vzeroupper before
 * returning.
 */
#include "../asmdefs.h"

ENTRY(fm_fill_avx512)
    vpbroadcastb %esi, %zmm0            /* zmm0 = byte x 64 */
    leaq    (%rdi,%rdx), %rdx           /* rdx = p + n */
    movl    %edi, %ecx
    andl    $63, %ecx
    movq    $-1, %rax
    shlq    %cl, %rax
    kmovq   %rax, %k1                   /* k1: the bytes of the first line from p on */
    movl    %edx, %ecx
    andl    $63, %ecx
    movq    $-1, %rax
    shlq    %cl, %rax
    notq    %rax
    kmovq   %rax, %k2                   /* k2: the last line's bytes below p + n (none: aligned) */
    movq    %rdi, %rax
    andq    $-64, %rax                  /* rax = the first line (p + n >= its end: n >= 64) */
    vmovdqu8 %zmm0, (%rax){%k1}
    addq    $64, %rax
    movq    %rdx, %rcx
    andq    $-64, %rcx                  /* rcx = the last line: partly in [p, p + n), or p + n */
    leaq    -256(%rcx), %rdx            /* rdx = last start of a 256-byte step */
    cmpq    %rdx, %rax
    ja      2f
1:  vmovdqa64 %zmm0, (%rax)
    vmovdqa64 %zmm0, 64(%rax)
    vmovdqa64 %zmm0, 128(%rax)
    vmovdqa64 %zmm0, 192(%rax)
    addq    $256, %rax
    cmpq    %rdx, %rax
    jbe     1b
2:  cmpq    %rcx, %rax                  /* whole lines below the last one */
    jae     3f
    vmovdqa64 %zmm0, (%rax)
    addq    $64, %rax
    jmp     2b
3:  kortestq %k2, %k2                  /* p + n aligned: no last line to touch */
    jz      4f
    vmovdqu8 %zmm0, (%rcx){%k2}         /* the last line's bytes below p + n */
4:  vzeroupper
    ret
END(fm_fill_avx512)
