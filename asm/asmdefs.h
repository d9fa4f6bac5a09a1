/*
 * asmdefs.h - the one macro header of the assembly kernels (asm/<host>/ *.S files), included as
 * "../asmdefs.h". Preprocessed by the C compiler (.S), so __x86_64__, __i386__ and __CET__
 * come from the same flags as the C code (CC="gcc -m32", CFLAGS="-fcf-protection", ...).
 *
 *   ENTRY(name) ... END(name)   a function: global but .hidden (never exported from the .so:
 *                               tests/abi-symbols.sh checks the export list), typed
 *                               @function, 16-byte aligned, starting with endbr64/endbr32
 *                               when compiling for CET (-fcf-protection sets __CET__).
 *   every .S file includes this header, which puts in it the .note.GNU-stack section (the
 *   object does not need an executable stack; without it ld would make the whole stack
 *   executable) and, under CET, the .note.gnu.property saying the code is IBT/SHSTK-ready
 *   (otherwise the linker drops the CET marking of libfastmm5.so as a whole).
 *
 * Calling conventions: x86_64 System V (arguments in rdi, rsi, rdx; rax, rcx, rdx, rsi, rdi,
 * r8-r11 and xmm0-xmm15 are scratch); i386 cdecl (arguments at 4(%esp), 8(%esp), 12(%esp);
 * eax, ecx, edx and the xmm registers are scratch). A bool is returned in al/eax, zero-extended.
 */
#ifndef FM_ASMDEFS_H
#define FM_ASMDEFS_H

#if defined(__CET__) && (__CET__ & 1)
#  if defined(__x86_64__)
#    define FM_ENDBR endbr64
#  else
#    define FM_ENDBR endbr32
#  endif
#else
#  define FM_ENDBR
#endif

#define ENTRY(name)                 \
    .text;                          \
    .globl name;                    \
    .hidden name;                   \
    .type name, @function;          \
    .p2align 4;                     \
name:                               \
    .cfi_startproc;                 \
    FM_ENDBR

#define END(name)                   \
    .cfi_endproc;                   \
    .size name, . - name

/* Non-executable stack, in every object that includes this header. */
    .section .note.GNU-stack, "", @progbits

#if defined(__CET__)
/* NT_GNU_PROPERTY_TYPE_0 / GNU_PROPERTY_X86_FEATURE_1_AND = __CET__ (1 IBT, 2 SHSTK). */
#  if defined(__x86_64__)
#    define FM_NOTE_ALIGN 3
#  else
#    define FM_NOTE_ALIGN 2
#  endif
    .pushsection .note.gnu.property, "a"
    .p2align FM_NOTE_ALIGN
    .long 4                 /* name size ("GNU\0") */
    .long 4f - 1f           /* descriptor size */
    .long 5                 /* NT_GNU_PROPERTY_TYPE_0 */
    .asciz "GNU"
1:  .long 0xc0000002        /* GNU_PROPERTY_X86_FEATURE_1_AND */
    .long 3f - 2f
2:  .long __CET__
3:  .p2align FM_NOTE_ALIGN
4:  .popsection
#endif

#endif
