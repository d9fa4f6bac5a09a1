/*
 * kernels.h - the one dispatch point for the byte kernels (fill, check-fill, copy). The portable C
 * versions live in kernels.c; assembly versions (asm/) are chosen at initialization.
 */
#ifndef FM_KERNELS_H
#define FM_KERNELS_H

#include "base.h"

typedef struct fm_kernels {
    void (*fill)(void *p, uint8_t byte, size_t n);
    /* Returns true if all n bytes equal `byte`. Must read nothing outside [p, p + n). */
    bool (*check_fill)(const void *p, uint8_t byte, size_t n);
    void (*copy)(void *dst, const void *src, size_t n);
} fm_kernels_t;

extern fm_kernels_t fm_kernels;
void fm_kernels_init(bool disable_asm);
bool fm_check_fill_c(const void *p, uint8_t byte, size_t n);

#endif
